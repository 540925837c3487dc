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

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, warn};

use crate::child::GuardDeadlines;
use crate::clock::{self, BootTimer};

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
            Lost::Watch(why) | Lost::Released(why) => f.write_str(why),
        }
    }
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

/// The arithmetic of the safety promise for one set of options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub ttl: Duration,
    /// The lock-delay that keeps rivals out after an invalidation (zero for
    /// a semaphore slot, which no lock-delay protects).
    pub lock_delay: Duration,
    pub kill_timeout: Duration,
    /// Whether the session is bound to health checks, which Consul may find
    /// critical at any moment, not only a TTL after the last renewal.
    pub checks: bool,
}

/// The shortest stop window we accept with health checks: one renewal and
/// a retry must fit in it on a loaded host.
const MIN_CHECKED_WINDOW: Duration = Duration::from_secs(1);

impl Budget {
    /// Slack we keep for timer latency, scheduling on a loaded host and the
    /// two clocks running at slightly different rates.
    pub fn margin(&self) -> Duration {
        self.ttl / 10
    }

    /// The earliest moment, after the send time of the last confirmed
    /// renewal, a rival could hold the lock. Without checks Consul waits at
    /// least the TTL before invalidating, then the lock-delay runs; a check
    /// can turn critical right after our renewal, leaving only the delay.
    pub fn rival_after(&self) -> Duration {
        if self.checks {
            self.lock_delay
        } else {
            self.ttl + self.lock_delay
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
    /// lease runs out: twice per stop window (TTL/2 with the defaults).
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
    /// lands after a rival could acquire.
    pub fn tolerated_rate_error(&self) -> f64 {
        let rival = self.rival_after().as_secs_f64();
        if rival == 0.0 {
            return 0.0;
        }
        self.slack().as_secs_f64() / rival
    }

    /// The shortest stop window these settings accept.
    fn min_window(&self) -> Duration {
        if self.checks {
            (self.lock_delay / 2).max(MIN_CHECKED_WINDOW)
        } else {
            self.ttl * 3 / 4
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

    /// The grace period when Consul reports the lock lost (the session
    /// invalidated or destroyed, the key taken or deleted): the session's
    /// lock-delay, counted from a moment already past, is all that keeps a
    /// rival out, so SIGKILL must land within it; with none it lands at once.
    pub fn loss_grace(&self) -> Duration {
        self.kill_timeout
            .min(self.lock_delay.saturating_sub(self.margin()))
    }

    /// Refuses settings whose stop window is too short to renew even once
    /// with a retry: the child would be stopped on every hiccup, or could
    /// outlive the moment a rival may take over.
    pub fn check(&self) -> Result<(), String> {
        if self.stop_after() < self.min_window() {
            let why = if self.checks {
                "a health check can end the session right after a renewal, leaving only the lock-delay to kill the child"
            } else {
                "a rival could take the lock before the child is killed"
            };
            return Err(match self.max_kill_timeout() {
                Some(max) => format!(
                    "--kill-timeout {} is too long for --ttl {} and --lock-delay {}: {why}; use --kill-timeout {} or less, or a longer --lock-delay",
                    flag_duration(self.kill_timeout),
                    flag_duration(self.ttl),
                    flag_duration(self.lock_delay),
                    flag_duration(max),
                ),
                None => format!(
                    "--lock-delay {} is too short for --ttl {} with health checks: {why}; use --lock-delay {} or more, or --no-checks",
                    flag_duration(self.lock_delay),
                    flag_duration(self.ttl),
                    flag_duration(self.min_checked_lock_delay()),
                ),
            });
        }
        Ok(())
    }

    /// The shortest lock-delay that leaves room for SIGKILL at once with
    /// health checks, in whole seconds.
    fn min_checked_lock_delay(&self) -> Duration {
        let m = self.margin();
        let need = (m * 2).max(m + MIN_CHECKED_WINDOW);
        Duration::from_secs(need.as_secs() + u64::from(need.subsec_nanos() > 0))
    }
}

/// A duration as the user would type it after a flag: one word that
/// `--kill-timeout` and friends accept (`2500ms`, never `2s 500ms`).
pub fn flag_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

pub fn fmt_duration(d: Duration) -> String {
    if d.is_zero() {
        "0s".to_string()
    } else {
        humantime::format_duration(round_ms(d)).to_string()
    }
}

/// A held lease. `confirmed` is the send time of the last renewal the
/// backend confirmed (or of the session's creation), on both clocks: tokio's
/// (CLOCK_MONOTONIC, which its timers and paused tests use) and
/// CLOCK_BOOTTIME, which keeps counting while the host is suspended, as the
/// servers do. The deadline is whichever comes first: BOOTTIME's, after a
/// suspend.
#[derive(Debug)]
pub struct Countdown {
    budget: Budget,
    confirmed: Instant,
    confirmed_boot: std::time::Duration,
    guard: Option<GuardDeadlines>,
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
            budget,
            confirmed: created_at,
            confirmed_boot: created_boot,
            guard: None,
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
                    }
                    self.confirmed = sent;
                    self.confirmed_boot = sent_boot;
                    let stop_at_boot = self.stop_at_boot();
                    if let Some(guard) = &mut self.guard {
                        guard.extend(stop_at_boot);
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
mod explain_tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn etcd_five_seconds_tolerates_a_tenth() {
        // The run: etcd, --ttl 5s, a SIGTERM-proof child. The kill
        // timeout shrinks to what the TTL leaves; the margin is TTL/10.
        let b = Budget {
            ttl: secs(5.0),
            lock_delay: Duration::ZERO,
            kill_timeout: secs(0.7),
            checks: false,
        };
        assert_eq!(b.stop_after(), secs(3.8));
        assert_eq!(b.killed_by(), secs(4.5));
        assert_eq!(b.slack(), secs(0.5));
        assert!((b.tolerated_rate_error() - 0.1).abs() < 1e-9);
    }

    #[test]
    fn consul_defaults_leave_the_lock_delay_as_slack() {
        let b = Budget {
            ttl: secs(15.0),
            lock_delay: secs(15.0),
            kill_timeout: secs(5.0),
            checks: false,
        };
        assert_eq!(b.rival_after(), secs(30.0));
        assert_eq!(b.killed_by(), secs(20.0));
        assert_eq!(b.slack(), secs(10.0));
        assert!((b.tolerated_rate_error() - 1.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn no_slack_tolerates_nothing() {
        let b = Budget {
            ttl: secs(10.0),
            lock_delay: Duration::ZERO,
            kill_timeout: secs(20.0),
            checks: false,
        };
        assert_eq!(b.slack(), Duration::ZERO);
        assert_eq!(b.tolerated_rate_error(), 0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::VecDeque;

    fn budget(ttl: u64, lock_delay: u64, kill: u64) -> Budget {
        Budget {
            ttl: Duration::from_secs(ttl),
            lock_delay: Duration::from_secs(lock_delay),
            kill_timeout: Duration::from_secs(kill),
            checks: false,
        }
    }

    fn checked(ttl: u64, lock_delay: u64, kill: u64) -> Budget {
        Budget {
            checks: true,
            ..budget(ttl, lock_delay, kill)
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
        // 2 s grace + 2 s margin must fit before the lease runs out.
        assert_eq!(b.stop_after(), Duration::from_secs(16));
        assert!(b.check().is_ok());
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
            let rival_at = b.ttl + b.lock_delay;
            assert!(sigkill_at + b.margin() <= rival_at, "{b:?}");
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
            assert!(sigkill_at + b.margin() <= b.lock_delay, "{b:?}");
            assert!(b.renew_every() >= Duration::from_millis(500), "{b:?}");
        }
        assert!(accepted >= 3, "too few settings accepted with checks");
    }

    #[test]
    fn defaults_with_checks_renew_within_the_lock_delay() {
        let b = checked(15, 15, 5);
        // 15 s delay - 5 s grace - 1.5 s margin.
        assert_eq!(b.stop_after(), Duration::from_millis(8500));
        assert_eq!(b.renew_every(), Duration::from_millis(4250));
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
        // 0 s delay + 3.75 s - 1.5 s margin, rounded down to pasteable form.
        assert!(err.contains("use --kill-timeout 2200ms or less"), "{err}");
    }

    #[test]
    fn checks_with_too_short_a_lock_delay_ask_for_a_longer_one() {
        let err = checked(15, 2, 0).check().unwrap_err();
        assert!(err.contains("--lock-delay 2s is too short"), "{err}");
        assert!(err.contains("use --lock-delay 3s or more"), "{err}");
        assert!(checked(15, 3, 0).check().is_ok());
    }

    #[test]
    fn a_reported_loss_gets_only_what_the_lock_delay_leaves() {
        assert_eq!(budget(15, 15, 5).loss_grace(), Duration::from_secs(5));
        assert_eq!(budget(10, 2, 5).loss_grace(), Duration::from_secs(1));
        // A semaphore slot: no lock-delay, SIGKILL at once.
        assert_eq!(budget(10, 0, 2).loss_grace(), Duration::ZERO);
    }

    #[test]
    fn flag_durations_are_one_word() {
        assert_eq!(flag_duration(Duration::from_millis(16500)), "16500ms");
        assert_eq!(flag_duration(Duration::from_secs(16)), "16s");
        assert_eq!(flag_duration(Duration::ZERO), "0s");
    }

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
}
