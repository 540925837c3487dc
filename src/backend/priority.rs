//! Preferred standbys (`elect --priority N`, issue #44): the one decision
//! every backend that shows its waiters shares. A backend publishes each
//! waiter's priority where rivals can read it, tells [`Deferral::decide`]
//! which priorities it sees waiting and whether the lock is free, and only
//! enters the engine's own wait once the verdict is [`Verdict::Go`]. Only
//! waiting changes: acquiring and everything after it are the same for
//! every priority, so a wrong guess costs a wake-up or an order, never
//! safety.
//!
//! A waiter defers while a live waiter of a higher priority is seen. So
//! that a stuck one (stopped, or cut off before it could take the lock)
//! cannot keep a free lock from everyone, the deferral ends once the lock
//! has been seen free for [`Priority::grace`] with the higher waiter still
//! not in it. Equal priorities do not defer to each other: they wait as
//! they did without priorities.

use std::time::Duration;

use tokio::time::Instant;

/// The highest `--priority`.
pub const MAX: u32 = 1000;

/// A `--replace` run's level, above every `--priority`: its record, put
/// before it asks the holder to let go, sends lockrun's writers queued
/// earlier out of the engine's wait, so that the replacer takes the lock
/// first. Records of every backend accept it.
pub const REPLACE: u32 = MAX + 1;

/// `--priority-grace`'s default.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(3);

/// A waiter's priority and how long it defers to a free lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    /// Higher wins; 0 for a waiter that gave none (and for every peer
    /// tool's waiter).
    pub level: u32,
    /// How long a lock seen free is left to a higher waiter that does not
    /// take it.
    pub grace: Duration,
    /// Whether `--priority` or `--priority-grace` was given, so that a
    /// backend that cannot honour them refuses them.
    pub asked: bool,
}

impl Priority {
    /// A waiter that gave no priority.
    pub const NONE: Priority = Priority {
        level: 0,
        grace: DEFAULT_GRACE,
        asked: false,
    };

    pub fn deferral(self) -> Deferral {
        Deferral {
            mine: self.level,
            grace: self.grace,
            free_since: None,
        }
    }
}

/// What a waiter does now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Wait for the lock as the engine does.
    Go,
    /// Stay out of the engine's wait: until the waiters change, or, when
    /// `until` is set, until then (the lock is free and the grace runs).
    Defer { until: Option<Instant> },
}

/// One waiter's deferral, across the looks it takes.
#[derive(Debug, Clone)]
pub struct Deferral {
    mine: u32,
    grace: Duration,
    /// When the lock was first seen free while a higher waiter waited.
    free_since: Option<Instant>,
}

impl Deferral {
    /// The verdict, given the priorities of the other live waiters seen now
    /// and whether the lock is free.
    pub fn decide(
        &mut self,
        now: Instant,
        others: impl IntoIterator<Item = u32>,
        lock_free: bool,
    ) -> Verdict {
        let higher = others.into_iter().any(|level| level > self.mine);
        if !higher || !lock_free {
            self.free_since = None;
            return if higher {
                Verdict::Defer { until: None }
            } else {
                Verdict::Go
            };
        }
        let until = *self.free_since.get_or_insert(now) + self.grace;
        if now >= until {
            Verdict::Go
        } else {
            Verdict::Defer { until: Some(until) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deferral(level: u32) -> Deferral {
        Priority {
            level,
            grace: Duration::from_secs(2),
            asked: true,
        }
        .deferral()
    }

    #[test]
    fn defers_only_to_a_higher_waiter() {
        let now = Instant::now();
        let mut d = deferral(2);
        assert_eq!(d.decide(now, [], false), Verdict::Go);
        assert_eq!(d.decide(now, [1, 2], false), Verdict::Go);
        assert_eq!(d.decide(now, [1, 3], false), Verdict::Defer { until: None });
    }

    #[test]
    fn a_free_lock_is_left_to_a_higher_waiter_for_the_grace_only() {
        let now = Instant::now();
        let mut d = deferral(1);
        let until = now + Duration::from_secs(2);
        assert_eq!(
            d.decide(now, [3], true),
            Verdict::Defer { until: Some(until) }
        );
        // Still free later: the grace counts from the first look.
        let later = now + Duration::from_secs(1);
        assert_eq!(
            d.decide(later, [3], true),
            Verdict::Defer { until: Some(until) }
        );
        assert_eq!(d.decide(until, [3], true), Verdict::Go);
        // Taken meanwhile: the grace starts again at the next free look.
        assert_eq!(d.decide(until, [3], false), Verdict::Defer { until: None });
        let again = until + Duration::from_secs(5);
        assert_eq!(
            d.decide(again, [3], true),
            Verdict::Defer {
                until: Some(again + Duration::from_secs(2))
            }
        );
    }
}
