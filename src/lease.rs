//! The local lease: lockrun's own clock on how long it may still assume it
//! holds the lock, whatever the network does.
//!
//! Consul never invalidates a session earlier than its TTL after the last
//! renewal it processed, and no rival can acquire before that invalidation
//! plus the lock-delay. A renewal is processed after we send it, so
//! `send time of the last confirmed renewal + TTL + lock-delay` is the
//! earliest moment a rival could hold the lock. The child must be dead
//! (SIGKILL delivered) before then, grace period included; [`Budget`] works
//! out when we must start stopping it, and refuses settings that leave no
//! room. Nothing here knows about Consul's wire format: a backend supplies
//! renewals through [`Renew`].

use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, warn};

use crate::backend::timing::{slewed, Budget, Lost, Renewal};
use crate::child::GuardDeadlines;
use crate::clock::{self, BootTimer};
use crate::duration::fmt_duration;

/// The shortest pause between two renewals after a failure. Retries come
/// several times before the deadline, at a quarter of what is left, but an
/// engine that refuses at once would otherwise be asked hundreds of times a
/// second in the lease's last moments.
const RETRY_GAP_MIN: std::time::Duration = std::time::Duration::from_millis(50);

/// A lease a backend can renew (a Consul session, an etcd lease).
pub trait Renew {
    /// One attempt, which must give up after `timeout`.
    fn renew(&self, timeout: Duration) -> impl std::future::Future<Output = Renewal>;
}

/// A held lease. `confirmed` is the send time of the last renewal the
/// backend confirmed (or of the session's creation), on both clocks: tokio's
/// (CLOCK_MONOTONIC, which its timers and paused tests use) and
/// CLOCK_BOOTTIME, which keeps counting while the host is suspended, as the
/// servers do. The deadline is whichever comes first: BOOTTIME's, after a
/// suspend.
#[derive(Debug)]
pub struct Countdown {
    /// The settings as configured; `budget` is them on this host's clock
    /// as last read (see [`Budget::for_clock`]).
    base: Budget,
    budget: Budget,
    confirmed: Instant,
    confirmed_boot: std::time::Duration,
    guard: Option<GuardDeadlines>,
    /// Reads how the kernel steers our clock ([`clock::state`]; a test's
    /// own clock in unit tests, which must not touch the host's).
    read_clock: fn() -> Option<clock::ClockState>,
    /// Where the deadline and renewals are published (`--status-addr`).
    beacon: Option<crate::ops::Beacon>,
}

impl Countdown {
    pub fn new(budget: Budget, created_at: Instant) -> Countdown {
        let boot = clock::boottime().saturating_sub(created_at.elapsed());
        Countdown::with_boottime(budget, created_at, boot)
    }

    /// A lease confirmed at `created_at`, which is `created_boot` on
    /// CLOCK_BOOTTIME.
    pub fn with_boottime(budget: Budget, created_at: Instant, created_boot: Duration) -> Countdown {
        Countdown {
            base: budget,
            budget,
            confirmed: created_at,
            confirmed_boot: created_boot,
            guard: None,
            read_clock: clock::state,
            beacon: None,
        }
    }

    /// Publishes the deadline, and each renewal, to `beacon`.
    pub fn observed_by(mut self, beacon: crate::ops::Beacon) -> Countdown {
        beacon.deadline(Some(self.deadline()));
        self.beacon = Some(beacon);
        self
    }

    /// The moment COMMAND's stop begins, and the safety margin the status
    /// endpoint keeps before it.
    pub fn deadline(&self) -> crate::ops::Deadline {
        crate::ops::Deadline {
            at: self.stop_at(),
            at_boot: self.stop_at_boot(),
            margin: self.budget.margin(),
        }
    }

    /// When the child must start being stopped unless a renewal is confirmed.
    pub fn stop_at(&self) -> Instant {
        self.confirmed + self.budget.stop_after()
    }

    /// [`Countdown::stop_at`] on CLOCK_BOOTTIME (time since boot).
    pub fn stop_at_boot(&self) -> Duration {
        self.confirmed_boot + self.budget.stop_after()
    }

    /// Whether the stop deadline has passed, on either clock: lockrun may
    /// have been stopped, starved or suspended past it.
    pub fn ran_out(&self) -> bool {
        Instant::now() >= self.stop_at() || clock::boottime() >= self.stop_at_boot()
    }

    /// How lockrun ended up past its deadline without `keep` saying so:
    /// what [`Countdown::keep`] would have returned.
    pub fn ran_out_reason(&self) -> Lost {
        Lost::LeaseRanOut {
            unconfirmed_for: self.unconfirmed_for(),
            last_error: "lockrun did not run until after the deadline".into(),
        }
    }

    fn unconfirmed_for(&self) -> Duration {
        clock::boottime().saturating_sub(self.confirmed_boot)
    }

    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// Follows how the kernel steers our clock: the stop window narrows
    /// while it slows our clock beyond this host's share of the bound, and
    /// comes back when it stops; when no window is left, the lock is as
    /// good as lost. A clock we cannot read keeps the budget we have.
    fn follow_clock(&mut self) -> Result<(), Lost> {
        let Some(state) = (self.read_clock)() else {
            return Ok(());
        };
        match self.base.for_clock(state.slowing()) {
            Some(fitted) if fitted == self.budget => Ok(()),
            Some(fitted) => {
                if fitted == self.base {
                    tracing::info!(
                        "this host's clock is back within its share of --clock-rate-error ({}); the stop window is {} again",
                        state.describe(),
                        fmt_duration(fitted.stop_after())
                    );
                } else {
                    warn!(
                        "this host's clock is slowed by {} ppm ({}), beyond its share of --clock-rate-error {}: the child is stopped {} after a renewal instead of {}",
                        state.slowing().0,
                        state.describe(),
                        self.base.rate_error,
                        fmt_duration(fitted.stop_after()),
                        fmt_duration(self.base.stop_after())
                    );
                }
                self.budget = fitted;
                if let Some(beacon) = &self.beacon {
                    beacon.deadline(Some(self.deadline()));
                }
                let stop_at_boot = self.stop_at_boot();
                if let Some(guard) = &mut self.guard {
                    guard.extend(stop_at_boot);
                }
                Ok(())
            }
            None => Err(Lost::ClockSlewed(slewed(&state, self.base))),
        }
    }

    /// Hands every later deadline to the guard too (SPEC §8), starting with
    /// the current one, so that the child is stopped on time even if lockrun
    /// cannot run.
    pub fn hand_to_guard(&mut self, mut guard: GuardDeadlines) {
        guard.extend(self.stop_at_boot());
        self.guard = Some(guard);
    }

    /// Keeps the lease alive until it is lost, which is the only way this
    /// returns. Cancel-safe: dropping it mid-renewal loses nothing but that
    /// attempt.
    pub async fn keep<R: Renew>(&mut self, backend: &R) -> Lost {
        let mut last_error = String::from("no renewal was due yet");
        // Failures since the last confirmed renewal: the first is a
        // warning, the rest detail (the loss, if it comes, says the last).
        let mut failures = 0u32;
        let mut backoff = Duration::from_millis(100);
        let mut next = self.confirmed + self.budget.renew_every();
        // Without the BOOTTIME timer (no descriptor to spare) a suspend is
        // noticed only when the monotonic deadline passes.
        let boot_timer = BootTimer::on_runtime().ok();
        if let Err(lost) = self.follow_clock() {
            return lost;
        }
        loop {
            if clock::boottime() >= self.stop_at_boot() {
                return Lost::LeaseRanOut {
                    unconfirmed_for: self.unconfirmed_for(),
                    last_error,
                };
            }
            let suspended = async {
                match &boot_timer {
                    Some(timer) => BootTimer::sleep_until(timer, self.stop_at_boot()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tokio::time::sleep_until(self.stop_at()) => {
                    return Lost::LeaseRanOut {
                        unconfirmed_for: self.confirmed.elapsed(),
                        last_error,
                    };
                }
                _ = suspended => continue,
                _ = tokio::time::sleep_until(next) => {}
            }
            let sent = Instant::now();
            let sent_boot = clock::boottime();
            let timeout = self
                .budget
                .attempt_timeout()
                .min(self.stop_at().saturating_duration_since(sent))
                .max(Duration::from_millis(50));
            let suspended = async {
                match &boot_timer {
                    Some(timer) => BootTimer::sleep_until(timer, self.stop_at_boot()).await,
                    None => std::future::pending().await,
                }
            };
            let outcome = tokio::select! {
                outcome = backend.renew(timeout) => outcome,
                // The deadline came (on either clock) with this renewal
                // still unanswered: that silence is the last error.
                _ = tokio::time::sleep_until(self.stop_at()) => {
                    last_error = format!("no answer for {}", fmt_duration(sent.elapsed()));
                    continue;
                }
                _ = suspended => {
                    last_error = format!("no answer for {}", fmt_duration(sent.elapsed()));
                    continue;
                }
            };
            match outcome {
                Renewal::Confirmed { ttl } => {
                    if let Some(ttl) = ttl.filter(|t| *t > self.budget.ttl) {
                        // Consul asks busy clusters' clients to renew less
                        // often, and etcd may grant more than we asked;
                        // the server's own timer then runs from the longer TTL.
                        debug!("the engine raised the lease TTL to {}", fmt_duration(ttl));
                        self.budget.ttl = ttl;
                        self.base.ttl = ttl;
                    }
                    self.confirmed = sent;
                    self.confirmed_boot = sent_boot;
                    // A cheap system call: the window may narrow before
                    // the guard hears of the new deadline.
                    if let Err(lost) = self.follow_clock() {
                        return lost;
                    }
                    let stop_at_boot = self.stop_at_boot();
                    if let Some(guard) = &mut self.guard {
                        guard.extend(stop_at_boot);
                    }
                    if let Some(beacon) = &self.beacon {
                        beacon.renewed(sent.elapsed(), self.deadline());
                    }
                    backoff = Duration::from_millis(100);
                    failures = 0;
                    next = sent + self.budget.renew_every();
                    debug!(
                        "lease renewed; stop deadline in {}",
                        fmt_duration(self.stop_at().saturating_duration_since(Instant::now()))
                    );
                }
                Renewal::Gone(why) => return Lost::SessionGone(why),
                Renewal::Failed(why) => {
                    if let Some(beacon) = &self.beacon {
                        beacon.renewal_failed();
                    }
                    let left = self.stop_at().saturating_duration_since(Instant::now());
                    failures += 1;
                    if failures == 1 {
                        warn!(
                            "renewal failed ({why}); retrying, {} left before the child is stopped",
                            fmt_duration(left)
                        );
                    } else {
                        debug!(
                            "renewal failed again ({why}), {failures} in a row; {} left",
                            fmt_duration(left)
                        );
                    }
                    last_error = why;
                    // Retry soon, and several times before the deadline.
                    next = Instant::now() + backoff.min(left / 4).max(RETRY_GAP_MIN);
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::timing::tests::budget;
    use crate::clock::Ppm;
    use std::cell::RefCell;
    use std::collections::VecDeque;

    struct Script(RefCell<VecDeque<Renewal>>);

    impl Renew for Script {
        async fn renew(&self, _timeout: Duration) -> Renewal {
            let next = self.0.borrow_mut().pop_front();
            match next {
                Some(r) => r,
                // Out of script: hang like a partitioned network.
                None => std::future::pending().await,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_within_the_lease_are_survived() {
        let script = Script(RefCell::new(VecDeque::from([
            Renewal::Failed("500 No cluster leader".into()),
            Renewal::Failed("connection reset".into()),
            Renewal::Confirmed { ttl: None },
            Renewal::Gone("404".into()),
        ])));
        let mut lease = Countdown::new(budget(15, 15, 5), Instant::now());
        let lost = lease.keep(&script).await;
        assert_eq!(lost, Lost::SessionGone("404".into()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_partition_ends_the_lease_at_the_stop_deadline() {
        let script = Script(RefCell::new(VecDeque::new()));
        let start = Instant::now();
        let mut lease = Countdown::new(budget(15, 15, 5), start);
        let lost = lease.keep(&script).await;
        assert!(matches!(lost, Lost::LeaseRanOut { .. }));
        assert_eq!(start.elapsed(), Duration::from_secs(15));
    }

    /// An engine that refuses every renewal at once is asked a few times
    /// before the deadline, never in a burst as the lease runs out.
    #[tokio::test(start_paused = true)]
    async fn a_refusing_engine_is_retried_without_a_storm() {
        struct Refusing(RefCell<Vec<Instant>>);
        impl Renew for Refusing {
            async fn renew(&self, _timeout: Duration) -> Renewal {
                self.0.borrow_mut().push(Instant::now());
                Renewal::Failed("connection refused".into())
            }
        }
        let engine = Refusing(RefCell::new(Vec::new()));
        let start = Instant::now();
        let mut lease = Countdown::new(budget(15, 15, 5), start);
        let lost = lease.keep(&engine).await;
        assert!(matches!(lost, Lost::LeaseRanOut { .. }), "{lost:?}");
        let asked = engine.0.into_inner();
        let gaps: Vec<Duration> = asked.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|g| *g >= RETRY_GAP_MIN), "{gaps:?}");
        assert!(asked.len() >= 5 && asked.len() <= 25, "{gaps:?}");
    }

    /// A resume from suspend: CLOCK_MONOTONIC says the renewal was just
    /// confirmed, CLOCK_BOOTTIME (like the servers) says an hour ago, or at
    /// boot on a host up for less than an hour (a fresh CI runner): either
    /// is far past the 15 s stop window of any host that got to run tests.
    #[tokio::test(start_paused = true)]
    async fn a_deadline_passed_in_suspend_ends_the_lease_at_once() {
        let script = Script(RefCell::new(VecDeque::new()));
        let start = Instant::now();
        let ago = clock::boottime().min(Duration::from_secs(3600));
        let confirmed = clock::boottime() - ago;
        let mut lease = Countdown::with_boottime(budget(15, 15, 5), start, confirmed);
        assert!(lease.ran_out());
        let lost = lease.keep(&script).await;
        match lost {
            Lost::LeaseRanOut {
                unconfirmed_for, ..
            } => assert!(unconfirmed_for >= ago),
            other => panic!("{other:?}"),
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    /// A suspend while `keep` waits: only the BOOTTIME timer can wake it
    /// in time, the monotonic deadline being 15 s away.
    #[tokio::test]
    async fn the_boottime_deadline_wakes_a_waiting_lease() {
        let script = Script(RefCell::new(VecDeque::new()));
        let b = budget(15, 15, 5);
        // Saturating: a host up for less than the stop window has its
        // deadline a little later, still well inside the bound below.
        let boot = (clock::boottime() + Duration::from_millis(300)).saturating_sub(b.stop_after());
        let start = Instant::now();
        let mut lease = Countdown::with_boottime(b, start, boot);
        assert!(!lease.ran_out());
        let lost = lease.keep(&script).await;
        assert!(matches!(lost, Lost::LeaseRanOut { .. }), "{lost:?}");
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(250), "{waited:?}");
        assert!(waited < Duration::from_secs(7), "{waited:?}");
        assert!(lease.ran_out());
    }

    fn slowed_by(ppm: f64) -> Option<clock::ClockState> {
        Some(clock::ClockState {
            freq_ppm: 0.0,
            tick_ppm: -ppm,
            pll_ppm: 0.0,
            adjtime_ppm: 0.0,
            unsync: false,
            freq_hold: false,
        })
    }

    fn etcd_default() -> Budget {
        Budget {
            kill_timeout: Duration::from_millis(2300),
            ..budget(15, 0, 0)
        }
    }

    /// A kernel slowing our clock by 10 %, beyond this host's 8.3 % share:
    /// the window narrows from 10.05 s to 9.8 s, and the lease ends there.
    #[tokio::test(start_paused = true)]
    async fn a_clock_slowed_beyond_its_share_narrows_the_window_at_once() {
        let script = Script(RefCell::new(VecDeque::new()));
        let start = Instant::now();
        let mut lease = Countdown::new(etcd_default(), start);
        lease.read_clock = || slowed_by(100_000.0);
        let lost = lease.keep(&script).await;
        assert!(matches!(lost, Lost::LeaseRanOut { .. }), "{lost:?}");
        assert_eq!(lease.budget().rate_error, Ppm(183_333));
        // tokio's timers tick in whole milliseconds.
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_nanos(9_800_005_000) && waited <= Duration::from_millis(9_801),
            "{waited:?}"
        );
    }

    /// Back within the share at a renewal: the configured window again.
    #[tokio::test(start_paused = true)]
    async fn a_clock_back_within_its_share_gets_the_window_back() {
        let script = Script(RefCell::new(VecDeque::from([Renewal::Confirmed {
            ttl: None,
        }])));
        let start = Instant::now();
        let mut lease = Countdown::new(etcd_default(), start);
        lease.read_clock = || slowed_by(100_000.0);
        assert!(lease.follow_clock().is_ok());
        assert_eq!(lease.budget().rate_error, Ppm(183_333));
        lease.read_clock = || slowed_by(0.0);
        let lost = lease.keep(&script).await;
        assert!(matches!(lost, Lost::LeaseRanOut { .. }), "{lost:?}");
        assert_eq!(lease.budget(), etcd_default());
    }

    /// Slowed by half: no window is left, and the lease is given up at
    /// once, as a loss of its own kind.
    #[tokio::test(start_paused = true)]
    async fn a_clock_slowed_past_any_window_ends_the_hold() {
        let script = Script(RefCell::new(VecDeque::new()));
        let start = Instant::now();
        let mut lease = Countdown::new(etcd_default(), start);
        lease.read_clock = || slowed_by(500_000.0);
        match lease.keep(&script).await {
            Lost::ClockSlewed(why) => {
                assert!(why.contains("slowed by 500000 ppm"), "{why}");
                assert!(why.contains("--clock-rate-error 166666ppm"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
