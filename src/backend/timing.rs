//! The timing promise between an engine and the hold loop: what a backend's
//! hold rules work out from the flags ([`Budget`]: when the command must be
//! stopped after the last confirmed renewal, and what that leaves a rival),
//! and what a lease reports back ([`Renewal`], [`Lost`]). The hold loop's
//! own clock on the lease is `crate::lease`; nothing here keeps time.

use std::fmt;
use std::time::Duration;

use tracing::{debug, warn};

use crate::clock::{self, Ppm};
use crate::duration::{flag_duration, fmt_duration, round_ms};

/// The outcome of one renewal attempt.
#[derive(Debug)]
pub enum Renewal {
    /// Confirmed; the backend may report a longer TTL it now applies.
    Confirmed { ttl: Option<Duration> },
    /// The backend says the lease is gone (Consul: renew answered 404;
    /// etcd: lease not found).
    Gone(String),
    /// No verdict: try again while the lease lasts.
    Failed(String),
}

/// The longest a single renewal may take, however far the deadline is.
const RENEW_TIMEOUT_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// The shortest deadline of one renewal: a loaded engine on a loaded host
/// answers well within it.
const ATTEMPT_TIMEOUT_MIN: std::time::Duration = std::time::Duration::from_millis(750);

/// Why the lock is no longer ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lost {
    /// No renewal was confirmed in time; we stop before a rival could lead.
    LeaseRanOut {
        unconfirmed_for: Duration,
        last_error: String,
    },
    /// The backend declared the session gone.
    SessionGone(String),
    /// The watch saw the lock change hands, vanish or drop us.
    Watch(String),
    /// Someone released the key while our session lives (an operator's
    /// `lockrun release`): no lock-delay was armed, so a rival may already
    /// hold it, and the child keeps its full grace period as documented.
    Released(String),
    /// The kernel slows this host's clock so far that no stop window keeps
    /// the promise under `--clock-rate-error`: we still hold the lock, but
    /// can no longer tell when a rival could, so the child is stopped.
    ClockSlewed(String),
}

impl Lost {
    /// Whether Consul reported the lock gone, so that only the lock-delay
    /// armed by the invalidation keeps a rival out.
    pub fn is_verdict(&self) -> bool {
        matches!(self, Lost::SessionGone(_) | Lost::Watch(_))
    }
}

impl fmt::Display for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lost::LeaseRanOut {
                unconfirmed_for,
                last_error,
            } => write!(
                f,
                "no renewal confirmed for {} (last error: {last_error})",
                humantime::format_duration(round_ms(*unconfirmed_for))
            ),
            Lost::SessionGone(why) => write!(f, "the session is gone ({why})"),
            Lost::Watch(why) | Lost::Released(why) | Lost::ClockSlewed(why) => f.write_str(why),
        }
    }
}

/// The arithmetic of the safety promise for one set of options.
///
/// Every moment here counts from the send time of the last confirmed
/// renewal, but on two clocks: when we SIGKILL the child
/// ([`Budget::killed_by`]) on ours, when a rival may acquire
/// ([`Budget::rival_after`]) on the engine's. If our clock runs slower than
/// the engine's by the fraction `e`, our `killed_by` lasts
/// `killed_by / (1 - e)` of the engine's time, so the promise needs
///
/// ```text
/// killed_by <= rival_after * (1 - e)
/// ```
///
/// `e` is `--clock-rate-error`, by default two hosts slewing opposite ways
/// at chrony's maximum (2 x 83,333 ppm): the margin is `rival_after * e`,
/// plus a hundredth of `rival_after` for our timers firing late on a loaded
/// host and the kill's delivery. With etcd's `--ttl 15s` that is
/// 2.5 s + 150 ms; with Consul's lock defaults (30 s) 5 s + 300 ms. The
/// stop window is what is left once the grace period and the margin are
/// taken from `rival_after` (never longer than the TTL), and it must hold
/// a renewal and its retries ([`Budget::check`]). What the kernel does to
/// our own clock is checked against half the bound, this host's share
/// ([`Budget::for_clock`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub ttl: Duration,
    /// How long the engine keeps rivals out once it has ended our lease
    /// (Consul's lock-delay; zero on etcd and PostgreSQL, and for a Consul
    /// semaphore slot, which no lock-delay protects).
    pub rival_delay: Duration,
    pub kill_timeout: Duration,
    /// Whether the engine may end the lease at any moment, not only a TTL
    /// after the last renewal (a Consul session bound to health checks):
    /// then only `rival_delay` keeps a rival out.
    pub ends_early: bool,
    /// The combined clock-rate error between this host and the engine we
    /// allow for (`--clock-rate-error`).
    pub rate_error: Ppm,
}

/// The shortest stop window we accept with health checks: one renewal and
/// a retry must fit in it on a loaded host.
const MIN_CHECKED_WINDOW: Duration = Duration::from_secs(1);

/// The part of `rival_after` kept for timers that fire late on a loaded
/// host and for SIGKILL's delivery, on top of the clock-rate margin.
const SCHEDULING_DIVISOR: u32 = 100;

/// `d * ppm / 1e6`, in whole nanoseconds.
fn scale(d: Duration, ppm: Ppm) -> Duration {
    Duration::from_nanos((d.as_nanos() * u128::from(ppm.0) / 1_000_000) as u64)
}

impl Budget {
    /// What we keep between SIGKILL and the earliest moment a rival could
    /// lead: the clock-rate margin and the scheduling allowance (see
    /// [`Budget`]).
    pub fn margin(&self) -> Duration {
        self.rate_margin() + self.scheduling()
    }

    /// `rival_after * e`: what a clock of ours slower by the bound loses
    /// over the whole interval.
    pub fn rate_margin(&self) -> Duration {
        scale(self.rival_after(), self.rate_error)
    }

    /// The allowance for late timers and the kill's delivery.
    pub fn scheduling(&self) -> Duration {
        self.rival_after() / SCHEDULING_DIVISOR
    }

    /// The earliest moment, after the send time of the last confirmed
    /// renewal, a rival could hold the lock. Without checks Consul waits at
    /// least the TTL before invalidating, then the lock-delay runs; a check
    /// can turn critical right after our renewal, leaving only the delay.
    pub fn rival_after(&self) -> Duration {
        if self.ends_early {
            self.rival_delay
        } else {
            self.ttl + self.rival_delay
        }
    }

    /// How long after a confirmed renewal was *sent* we must start stopping
    /// the child: when the lease runs out, or earlier if the grace period
    /// would otherwise reach past the earliest moment a rival could lead.
    pub fn stop_after(&self) -> Duration {
        let need = self.kill_timeout + self.margin();
        self.ttl.min(self.rival_after().saturating_sub(need))
    }

    /// Renew often enough that a failed attempt can be retried before the
    /// lease runs out: twice per stop window.
    pub fn renew_every(&self) -> Duration {
        self.stop_after() / 2
    }

    /// How long one renewal may take: a quarter of the stop window, at
    /// least [`ATTEMPT_TIMEOUT_MIN`]. A member or agent that hangs (stopped,
    /// partitioned, a stalled disk) accepts the connection and never
    /// answers; waiting for it as long as the lease lasts left no time to
    /// try another (a stopped etcd member cost the lock while two healthy
    /// ones were there). Now it costs one such wait, and the retries, on
    /// the next endpoint or agent, still fit several times in the window.
    pub fn attempt_timeout(&self) -> Duration {
        (self.stop_after() / 4)
            .max(ATTEMPT_TIMEOUT_MIN)
            .min(RENEW_TIMEOUT_MAX)
    }

    /// The last moment, after the send time of the last confirmed renewal,
    /// the command can still run: the kill signal at [`Budget::stop_after`],
    /// SIGKILL a `--kill-timeout` later.
    pub fn killed_by(&self) -> Duration {
        self.stop_after() + self.kill_timeout
    }

    /// The room between SIGKILL and the earliest moment a rival can hold
    /// the lock (zero when none is left).
    pub fn slack(&self) -> Duration {
        self.rival_after().saturating_sub(self.killed_by())
    }

    /// The combined clock-rate error the slack tolerates, as a fraction: our
    /// clock may run this much slower than the engine's (our `killed_by`
    /// then lasts `killed_by / (1 - e)` of the engine's time) before SIGKILL
    /// lands after a rival could acquire, the scheduling allowance kept.
    /// At least the bound; more when the TTL, not the margin, ends the
    /// stop window (Consul's lock-delay).
    pub fn tolerated_rate_error(&self) -> f64 {
        let rival = self.rival_after().as_secs_f64();
        if rival == 0.0 {
            return 0.0;
        }
        self.slack().saturating_sub(self.scheduling()).as_secs_f64() / rival
    }

    /// The shortest stop window these settings accept. Without checks, two
    /// thirds of the TTL: renewals every third of it, as etcd's own client
    /// sends its keep-alives, and a third left for retries.
    fn min_window(&self) -> Duration {
        if self.ends_early {
            (self.rival_delay / 2).max(MIN_CHECKED_WINDOW)
        } else {
            self.ttl * 2 / 3
        }
    }

    /// The longest kill timeout these settings allow, rounded down to a
    /// tenth of a second so that it reads (and pastes) cleanly. `None` when
    /// not even SIGKILL at once would fit.
    pub fn max_kill_timeout(&self) -> Option<Duration> {
        let room = self
            .rival_after()
            .checked_sub(self.margin() + self.min_window())?;
        Some(Duration::from_millis(room.as_millis() as u64 / 100 * 100))
    }

    /// The largest `--clock-rate-error` that leaves a stop window with this
    /// kill timeout (or, when none does, with SIGKILL at once), rounded
    /// down to a tenth of a percent. `None` when not even a perfect clock
    /// would.
    pub fn max_rate_error(&self) -> Option<Ppm> {
        let rival = self.rival_after().as_secs_f64();
        if rival == 0.0 {
            return None;
        }
        let with = |kill: Duration| {
            let room = self.rival_after().checked_sub(kill + self.min_window())?;
            let fraction = room.as_secs_f64() / rival - 1.0 / f64::from(SCHEDULING_DIVISOR);
            (fraction >= 0.0).then_some(fraction)
        };
        let fraction = with(self.kill_timeout).or_else(|| with(Duration::ZERO))?;
        Some(Ppm((fraction * 1e6) as u32 / 1_000 * 1_000))
    }

    /// The grace period when Consul reports the lock lost (the session
    /// invalidated or destroyed, the key taken or deleted): the session's
    /// lock-delay, counted on the engine's clock from a moment already
    /// past, is all that keeps a rival out, so SIGKILL must land within it
    /// on ours, margin kept; with none it lands at once.
    pub fn loss_grace(&self) -> Duration {
        let margin =
            scale(self.rival_delay, self.rate_error) + self.rival_delay / SCHEDULING_DIVISOR;
        self.kill_timeout
            .min(self.rival_delay.saturating_sub(margin))
    }

    /// Refuses settings whose stop window is too short to renew even once
    /// with a retry: the child would be stopped on every hiccup, or could
    /// outlive the moment a rival may take over.
    pub fn check(&self) -> Result<(), String> {
        if self.stop_after() >= self.min_window() {
            return Ok(());
        }
        let why = if self.ends_early {
            "a health check can end the session right after a renewal, leaving only the lock-delay to kill the child"
        } else {
            "a rival could take the lock before the child is killed"
        };
        if let Some(max) = self.max_kill_timeout() {
            return Err(format!(
                "--kill-timeout {} is too long for --ttl {} and --lock-delay {}: {why}; use --kill-timeout {} or less, or a longer --lock-delay",
                flag_duration(self.kill_timeout),
                flag_duration(self.ttl),
                flag_duration(self.rival_delay),
                flag_duration(max),
            ));
        }
        if self.ends_early {
            if let Some(min) = self.min_checked_lock_delay() {
                return Err(format!(
                    "--lock-delay {} is too short for --ttl {} with health checks: {why}; use --lock-delay {} or more, or --no-checks",
                    flag_duration(self.rival_delay),
                    flag_duration(self.ttl),
                    flag_duration(min),
                ));
            }
        }
        // Not even SIGKILL at once fits: the clock-rate margin takes the room.
        let settings = if self.rival_delay.is_zero() {
            format!("--ttl {}", flag_duration(self.ttl))
        } else {
            format!(
                "--ttl {} and --lock-delay {}",
                flag_duration(self.ttl),
                flag_duration(self.rival_delay)
            )
        };
        Err(match self.max_rate_error() {
            Some(max) => format!(
                "--clock-rate-error {} leaves no time to run the command with {settings}: the margin for clocks that far apart takes the whole lease; use --clock-rate-error {:.1}% or less",
                self.rate_error.percent(),
                max.fraction() * 100.0,
            ),
            None => format!(
                "{settings} leave no time to run the command: {why}; use a longer --ttl"
            ),
        })
    }

    /// The shortest lock-delay that leaves room for SIGKILL at once with
    /// health checks, in whole seconds: the margin is a fraction `f` of the
    /// lock-delay, so `rival_delay * (1 - f)` must reach the window, which is
    /// half the lock-delay and at least [`MIN_CHECKED_WINDOW`]. `None` when
    /// the margin takes half or more, whatever the lock-delay.
    fn min_checked_lock_delay(&self) -> Option<Duration> {
        let f = self.rate_error.fraction() + 1.0 / f64::from(SCHEDULING_DIVISOR);
        if f >= 0.5 {
            return None;
        }
        let need = MIN_CHECKED_WINDOW.as_secs_f64() / (1.0 - f);
        Some(Duration::from_secs(need.ceil() as u64))
    }

    /// These settings on a host whose kernel slows our clock by `slowing`.
    /// This host's share of the bound is half of it (the engine's host may
    /// run fast by the other half); beyond that the margin grows by the
    /// excess, which shortens the stop window. Any window keeps the
    /// promise; we accept one down to half of what [`Budget::check`] asks
    /// at start (renewals then come twice as often), since stopping the
    /// command costs more than a few more renewals. `None` below that.
    pub fn for_clock(&self, slowing: Ppm) -> Option<Budget> {
        let share = self.rate_error.0 / 2;
        if slowing.0 <= share {
            return Some(*self);
        }
        let widened = Budget {
            rate_error: Ppm(slowing.0.saturating_add(self.rate_error.0 - share)),
            ..*self
        };
        let window = widened.stop_after();
        (!window.is_zero() && window >= widened.min_window() / 2).then_some(widened)
    }
}

/// Checks these settings against how this host's clock is steered now,
/// before anything is written: the budget to run with (widened if the
/// kernel slows our clock beyond this host's share of the bound), or why
/// none keeps the promise. Logs the clock's state once, at `-v`.
pub fn fit_this_host(budget: Budget) -> Result<Budget, String> {
    let Some(state) = clock::state() else {
        debug!("this host's clock state cannot be read (adjtimex); assuming it within --clock-rate-error");
        return Ok(budget);
    };
    tracing::info!(
        "this host's clock: {}; --clock-rate-error {} allows this host {} ppm",
        state.describe(),
        budget.rate_error,
        budget.rate_error.0 / 2
    );
    match budget.for_clock(state.slowing()) {
        Some(fitted) => {
            if fitted != budget {
                warn!(
                    "this host's clock is slowed by {} ppm, beyond its share of --clock-rate-error {}: the child is stopped {} after a renewal instead of {}",
                    state.slowing().0,
                    budget.rate_error,
                    fmt_duration(fitted.stop_after()),
                    fmt_duration(budget.stop_after())
                );
            }
            Ok(fitted)
        }
        None => Err(slewed(&state, budget)),
    }
}

/// Why a clock slowed this far ends the run.
pub(crate) fn slewed(state: &clock::ClockState, budget: Budget) -> String {
    format!(
        "this host's clock is slowed by {} ppm ({}), beyond what --clock-rate-error {} leaves room for with --ttl {} and --kill-timeout {}; wait for NTP to finish slewing, or allow more with a longer --ttl and a larger --clock-rate-error",
        state.slowing().0,
        state.describe(),
        budget.rate_error.flag(),
        flag_duration(budget.ttl),
        flag_duration(budget.kill_timeout)
    )
}

#[cfg(test)]
mod explain_tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    fn nanos(n: u64) -> Duration {
        Duration::from_nanos(n)
    }

    #[test]
    fn etcd_five_seconds_covers_the_default_bound() {
        // The issue's run: etcd, --ttl 5s, a SIGTERM-proof child. The margin
        // is 5 s x 166,666 ppm (833.33 ms) + 50 ms for scheduling.
        let b = Budget {
            ttl: secs(5.0),
            rival_delay: Duration::ZERO,
            kill_timeout: ms(700),
            ends_early: false,
            rate_error: Ppm::DEFAULT,
        };
        assert_eq!(b.margin(), nanos(883_330_000));
        assert_eq!(b.stop_after(), nanos(3_416_670_000));
        assert_eq!(b.killed_by(), nanos(4_116_670_000));
        assert_eq!(b.slack(), nanos(883_330_000));
        assert!((b.tolerated_rate_error() - 0.166_666).abs() < 1e-9);
        // SIGKILL lands before the rival even on a clock slower by the bound.
        assert!(b.killed_by().as_secs_f64() <= 5.0 * (1.0 - Ppm::DEFAULT.fraction()));
    }

    #[test]
    fn consul_defaults_leave_the_lock_delay_as_slack() {
        let b = Budget {
            ttl: secs(15.0),
            rival_delay: secs(15.0),
            kill_timeout: secs(5.0),
            ends_early: false,
            rate_error: Ppm::DEFAULT,
        };
        assert_eq!(b.rival_after(), secs(30.0));
        assert_eq!(b.killed_by(), secs(20.0));
        assert_eq!(b.slack(), secs(10.0));
        assert!((b.tolerated_rate_error() - 9.7 / 30.0).abs() < 1e-9);
    }

    #[test]
    fn no_slack_tolerates_nothing() {
        let b = Budget {
            ttl: secs(10.0),
            rival_delay: Duration::ZERO,
            kill_timeout: secs(20.0),
            ends_early: false,
            rate_error: Ppm::DEFAULT,
        };
        assert_eq!(b.slack(), Duration::ZERO);
        assert_eq!(b.tolerated_rate_error(), 0.0);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A budget of whole seconds with the default bound and no checks.
    pub(crate) fn budget(ttl: u64, rival_delay: u64, kill: u64) -> Budget {
        Budget {
            ttl: Duration::from_secs(ttl),
            rival_delay: Duration::from_secs(rival_delay),
            kill_timeout: Duration::from_secs(kill),
            ends_early: false,
            rate_error: Ppm::DEFAULT,
        }
    }

    fn at(b: Budget, ppm: u32) -> Budget {
        Budget {
            rate_error: Ppm(ppm),
            ..b
        }
    }

    fn checked(ttl: u64, rival_delay: u64, kill: u64) -> Budget {
        // The default bound, as every run gets it.
        Budget {
            ends_early: true,
            ..budget(ttl, rival_delay, kill)
        }
    }

    #[test]
    fn defaults_stop_when_the_lease_runs_out() {
        let b = budget(15, 15, 5);
        assert_eq!(b.stop_after(), Duration::from_secs(15));
        assert_eq!(b.renew_every(), Duration::from_millis(7500));
        assert!(b.check().is_ok());
    }

    #[test]
    fn a_long_grace_period_moves_the_stop_earlier() {
        let b = budget(20, 0, 2);
        // 2 s grace + 3.33 s for the clocks + 200 ms for scheduling must
        // fit before the lease runs out.
        assert_eq!(b.margin(), Duration::from_nanos(3_533_320_000));
        assert_eq!(b.stop_after(), Duration::from_nanos(14_466_680_000));
        assert!(b.check().is_ok());
    }

    #[test]
    fn a_larger_bound_narrows_the_window() {
        let b = budget(15, 0, 1);
        let perfect = at(b, 0);
        // Only the scheduling allowance: 15 s - 1 s - 150 ms.
        assert_eq!(perfect.stop_after(), Duration::from_millis(13_850));
        // 16.7 %: 2.5 s more.
        assert_eq!(b.stop_after(), Duration::from_nanos(11_350_010_000));
        assert!(at(b, 250_000).stop_after() < b.stop_after());
    }

    const SETTINGS: [(u64, u64, u64); 9] = [
        (15, 15, 5),
        (10, 0, 1),
        (15, 5, 7),
        (60, 60, 60),
        (10, 1, 2),
        (10, 10, 2),
        (15, 15, 6),
        (30, 20, 3),
        (10, 3, 0),
    ];

    #[test]
    fn the_child_is_killed_before_a_rival_could_lead() {
        for b in SETTINGS.map(|(t, d, k)| budget(t, d, k)) {
            if b.check().is_err() {
                continue;
            }
            let sigkill_at = b.stop_after() + b.kill_timeout;
            let rival_at = b.ttl + b.rival_delay;
            assert!(sigkill_at + b.margin() <= rival_at, "{b:?}");
            // On a clock slower by the bound, SIGKILL still comes first.
            let slowed = sigkill_at.as_secs_f64() / (1.0 - b.rate_error.fraction());
            assert!(slowed <= rival_at.as_secs_f64(), "{b:?}");
        }
    }

    #[test]
    fn with_checks_the_child_is_killed_within_the_lock_delay() {
        let mut accepted = 0;
        for b in SETTINGS.map(|(t, d, k)| checked(t, d, k)) {
            if b.check().is_err() {
                continue;
            }
            accepted += 1;
            // A check may fail the instant after the renewal was processed.
            let sigkill_at = b.stop_after() + b.kill_timeout;
            assert!(sigkill_at + b.margin() <= b.rival_delay, "{b:?}");
            assert!(b.renew_every() >= Duration::from_millis(500), "{b:?}");
        }
        assert!(accepted >= 3, "too few settings accepted with checks");
    }

    #[test]
    fn defaults_with_checks_shrink_the_grace_to_fit_the_lock_delay() {
        let b = checked(15, 15, 5);
        // 15 s delay - 2.65 s margin - 7.5 s window leaves 4.85 s of grace.
        assert!(b.check().is_err());
        assert_eq!(b.max_kill_timeout(), Some(Duration::from_millis(4800)));
        let b = Budget {
            kill_timeout: Duration::from_millis(4800),
            ..b
        };
        assert_eq!(b.stop_after(), Duration::from_nanos(7_550_010_000));
        assert!(b.check().is_ok());
    }

    #[test]
    fn the_suggested_kill_timeout_is_accepted_and_a_tenth_more_is_not() {
        for (t, d, k) in SETTINGS {
            for b in [budget(t, d, k), checked(t, d, k)] {
                let Some(max) = b.max_kill_timeout() else {
                    continue;
                };
                let at = Budget {
                    kill_timeout: max,
                    ..b
                };
                assert!(at.check().is_ok(), "{at:?}");
                let over = Budget {
                    kill_timeout: max + Duration::from_millis(200),
                    ..b
                };
                assert!(over.check().is_err(), "{over:?}");
            }
        }
    }

    #[test]
    fn settings_that_cannot_keep_the_promise_are_refused() {
        let err = budget(15, 0, 10).check().unwrap_err();
        assert!(err.contains("--kill-timeout 10s is too long"), "{err}");
        // 15 s - 10 s window - 2.65 s margin, rounded down to pasteable form.
        assert!(err.contains("use --kill-timeout 2300ms or less"), "{err}");
    }

    #[test]
    fn a_bound_that_leaves_no_window_names_one_that_does() {
        let b = at(budget(5, 0, 0), 400_000);
        let err = b.check().unwrap_err();
        assert!(
            err.contains(
                "--clock-rate-error 40.0% leaves no time to run the command with --ttl 5s"
            ),
            "{err}"
        );
        // 5 s - 3.33 s window is 33.3 %, less 1 % for scheduling.
        assert!(
            err.contains("use --clock-rate-error 32.3% or less"),
            "{err}"
        );
        assert!(at(b, 323_000).check().is_ok());
        // With a grace period typed, the suggestion keeps it.
        let b = Budget {
            kill_timeout: Duration::from_millis(700),
            ..b
        };
        let max = b.max_rate_error().unwrap();
        assert_eq!(max, Ppm(183_000));
        assert!(at(b, max.0).check().is_ok());
        assert!(at(b, max.0 + 2_000).check().is_err());
    }

    #[test]
    fn a_clock_slowed_within_this_hosts_share_changes_nothing() {
        let b = Budget {
            kill_timeout: Duration::from_millis(2300),
            ..budget(15, 0, 0)
        };
        assert!(b.check().is_ok());
        assert_eq!(b.for_clock(Ppm(0)), Some(b));
        assert_eq!(b.for_clock(Ppm(83_333)), Some(b));
    }

    #[test]
    fn a_clock_slowed_beyond_its_share_narrows_the_window_or_ends_it() {
        let b = Budget {
            kill_timeout: Duration::from_millis(2300),
            ..budget(15, 0, 0)
        };
        // Slowed by 10 %: the margin covers 10 % here and the engine's
        // half of the bound, 8.3 %, there.
        let wide = b.for_clock(Ppm(100_000)).expect("a window is left");
        assert_eq!(wide.rate_error, Ppm(183_333));
        assert!(wide.stop_after() < b.stop_after());
        let killed = wide.killed_by().as_secs_f64();
        assert!(killed / (1.0 - 0.183_333) <= 15.0);
        // Slowed by half: nothing is left.
        assert_eq!(b.for_clock(Ppm(500_000)), None);
    }

    #[test]
    fn checks_with_too_short_a_lock_delay_ask_for_a_longer_one() {
        let err = checked(15, 1, 0).check().unwrap_err();
        assert!(err.contains("--lock-delay 1s is too short"), "{err}");
        // 1 s window / (1 - 17.7 % margin) = 1.21 s, in whole seconds.
        assert!(err.contains("use --lock-delay 2s or more"), "{err}");
        assert!(checked(15, 2, 0).check().is_ok());
    }

    #[test]
    fn a_reported_loss_gets_only_what_the_lock_delay_leaves() {
        assert_eq!(budget(15, 15, 5).loss_grace(), Duration::from_secs(5));
        // 2 s - 333 ms for the clocks - 20 ms for scheduling.
        assert_eq!(
            budget(10, 2, 5).loss_grace(),
            Duration::from_nanos(1_646_668_000)
        );
        // A semaphore slot: no lock-delay, SIGKILL at once.
        assert_eq!(budget(10, 0, 2).loss_grace(), Duration::ZERO);
    }
}
