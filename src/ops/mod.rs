//! What operators wire around a holder: a status endpoint (`/status`,
//! `/leader`, `/metrics`), hooks on acquire, loss and release, and
//! `lockrun status` for COMMAND to ask how much of the lock is left.
//!
//! The hold loop only publishes here ([`Beacon`]): it never waits for a
//! client, a request or the server. `/leader` is worked out on each request
//! from the deadline that stops COMMAND (the countdown's), not from a flag
//! the hold loop flips, so that it turns 503 on time even when the loop
//! itself is late.

pub mod catalog;
pub mod hooks;
pub mod server;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use clap::Args;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::backend::Lost;
use crate::duration::parse_duration;
use crate::error::Failure;
use crate::signals::Signal;

/// The variable that tells COMMAND (and hooks) where the status endpoint is.
pub const STATUS_VARIABLE: &str = "LOCKRUN_STATUS";

/// How long a hook may run by default.
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// Operating a holder: the status endpoint and hooks.
#[derive(Debug, Args, Default)]
#[command(next_help_heading = "Operations")]
pub struct OpsArgs {
    /// Serve /status, /leader and /metrics on ADDR while lockrun runs.
    ///
    /// GET /status (JSON), /leader (200 while held with at least the
    /// safety margin left, else 503) and /metrics (Prometheus), on HOST:PORT, or a unix socket path (containing `/`).
    /// COMMAND finds it in LOCKRUN_STATUS, for `lockrun status`.
    #[arg(long, value_name = "ADDR")]
    pub status_addr: Option<String>,
    /// Run CMD with `sh -c` once the lock is held, before COMMAND.
    ///
    /// If it fails or times out, lockrun releases the lock and exits 125 without
    /// running COMMAND.
    #[arg(long, value_name = "CMD")]
    pub on_acquire: Option<String>,
    /// Run CMD with `sh -c` after COMMAND was stopped on a loss.
    ///
    /// It runs once what was left is released, and never delays the stop.
    #[arg(long, value_name = "CMD")]
    pub on_loss: Option<String>,
    /// Run CMD with `sh -c` after COMMAND exited and the lock was released.
    #[arg(long, value_name = "CMD")]
    pub on_release: Option<String>,
    /// Run CMD with `sh -c` when the lease goes into jeopardy (see
    /// --warn-before).
    #[arg(
        long,
        hide_short_help = true,
        value_name = "CMD",
        requires = "warn_before"
    )]
    pub on_jeopardy: Option<String>,
    /// Warn the job when the lease has gone unconfirmed until DURATION
    /// before COMMAND's stop would begin.
    ///
    /// The job is then in jeopardy: --warn-signal goes to its whole tree,
    /// --on-jeopardy runs, and /status says so with the time left; a
    /// confirmed renewal ends it (--warn-clear-signal). The stop at the
    /// deadline is never delayed. It must be shorter than the stop window
    /// less one renewal period, or every gap between renewals would warn.
    #[arg(long, hide_short_help = true, value_parser = parse_duration, value_name = "DURATION")]
    pub warn_before: Option<Duration>,
    /// Signal to COMMAND's tree when the lease goes into jeopardy [default:
    /// none].
    #[arg(long, hide_short_help = true, value_name = "SIGNAL", value_parser = crate::signals::SignalParser, requires = "warn_before")]
    pub warn_signal: Option<Signal>,
    /// Signal to COMMAND's tree when a renewal ends the jeopardy [default:
    /// none].
    #[arg(long, hide_short_help = true, value_name = "SIGNAL", value_parser = crate::signals::SignalParser, requires = "warn_before")]
    pub warn_clear_signal: Option<Signal>,
    /// How long a hook may run before its whole process group is killed.
    #[arg(long, hide_short_help = true, value_parser = parse_duration, value_name = "DURATION", default_value = "30s")]
    pub hook_timeout: Duration,
    #[command(flatten)]
    pub catalog: catalog::CatalogArgs,
}

/// What a run publishes and serves, checked before anything is written.
#[derive(Debug)]
pub struct Ops {
    pub beacon: Beacon,
    /// `--warn-before` and its signals.
    pub warning: Option<Warning>,
    listener: Mutex<Option<server::Bound>>,
    endpoint: Option<String>,
    pub hooks: hooks::Hooks,
    /// `--register-service`.
    pub catalog: Option<catalog::Catalog>,
}

impl Ops {
    /// Checks the flags and binds the status address, so that a bad or
    /// busy one is refused before any session or lease exists.
    pub fn prepare(
        args: &OpsArgs,
        backend: &'static str,
        key: &str,
        env: &dyn crate::backend::Env,
    ) -> Result<Ops, Failure> {
        // Before the address is bound: a refused flag holds nothing.
        let catalog = catalog::Catalog::prepare(&args.catalog, env)?;
        let bound = match &args.status_addr {
            Some(addr) => Some(server::Bound::bind(addr).map_err(Failure::Usage)?),
            None => None,
        };
        let endpoint = bound.as_ref().map(server::Bound::endpoint);
        if let Some(endpoint) = &endpoint {
            tracing::info!("serving /status, /leader and /metrics on {endpoint}");
        }
        let hooks = hooks::Hooks::new(args)?;
        let warning = Warning::from_args(args)?;
        Ok(Ops {
            beacon: Beacon::new(backend, key),
            warning,
            listener: Mutex::new(bound),
            endpoint,
            hooks,
            catalog,
        })
    }

    /// Ops that serve and run nothing (tests of the hold loop).
    pub fn none() -> Ops {
        Ops {
            beacon: Beacon::new("test", "test"),
            warning: None,
            listener: Mutex::new(None),
            endpoint: None,
            hooks: hooks::Hooks::default(),
            catalog: None,
        }
    }

    /// Whether `/leader` is served: it turns 503 the moment COMMAND
    /// exits, before the lock is released, so the release must wait for us
    /// to learn of the exit.
    pub fn serves_leader(&self) -> bool {
        self.endpoint.is_some()
    }

    /// Whether the holder is in a service catalog (`--register-service`):
    /// it is taken out before the lock is released, so the release, too,
    /// must wait for us to learn of COMMAND's end.
    pub fn registers_service(&self) -> bool {
        self.catalog.is_some()
    }

    /// Starts serving, on its own task, until the returned handle is
    /// dropped (or the runtime ends).
    pub fn serve(&self) -> Option<server::Serving> {
        let bound = self.listener.lock().ok()?.take()?;
        Some(server::Serving::start(bound, self.beacon.clone()))
    }

    /// What COMMAND and hooks are told about the endpoint.
    pub fn env(&self) -> Vec<(OsString, OsString)> {
        self.endpoint
            .iter()
            .map(|e| (OsString::from(STATUS_VARIABLE), OsString::from(e)))
            .collect()
    }
}

/// `--warn-before`: when the job is told that its lease is in jeopardy.
#[derive(Debug, Clone, Copy)]
pub struct Warning {
    pub before: Duration,
    pub signal: Option<Signal>,
    pub clear: Option<Signal>,
}

impl Warning {
    /// `--warn-before` and its signals, if given.
    pub fn from_args(args: &OpsArgs) -> Result<Option<Warning>, Failure> {
        match args.warn_before {
            Some(before) if before.is_zero() => Err(Failure::Usage(
                "--warn-before 0 would warn as the stop begins; give how long before it, e.g. 2s"
                    .into(),
            )),
            Some(before) => Ok(Some(Warning {
                before,
                signal: args.warn_signal,
                clear: args.warn_clear_signal,
            })),
            None => Ok(None),
        }
    }

    /// Refuses a warning the hold's budget cannot give: none on an engine
    /// whose claim cannot run out, and none so early that the ordinary
    /// wait for the next renewal would reach it.
    pub fn check(&self, budget: Option<&crate::backend::timing::Budget>) -> Result<(), Failure> {
        let Some(budget) = budget else {
            return Err(Failure::Usage(
                "--warn-before: this backend's lock has no lease to run out, so there is nothing to warn of; leave it out".into(),
            ));
        };
        let room = budget.stop_after().saturating_sub(budget.renew_every());
        if self.before >= room {
            return Err(Failure::Usage(format!(
                "--warn-before {} would warn between ordinary renewals: the stop comes {} after the last confirmed renewal and renewals are {} apart; give less than {}, or a longer --ttl",
                crate::duration::fmt_duration(self.before),
                crate::duration::fmt_duration(budget.stop_after()),
                crate::duration::fmt_duration(budget.renew_every()),
                crate::duration::fmt_duration(room)
            )));
        }
        Ok(())
    }
}

/// Where a holder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phase {
    #[default]
    Waiting,
    Held,
    Stopping,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Waiting => "waiting",
            Phase::Held => "held",
            Phase::Stopping => "stopping",
        }
    }
}

/// The moment COMMAND's stop begins, on both clocks the countdown reads,
/// and the margin `/leader` keeps before it.
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    pub at: Instant,
    pub at_boot: Duration,
    pub margin: Duration,
}

impl Deadline {
    /// What is left before the stop begins, on the clock that has less.
    pub fn left(&self) -> Duration {
        let mono = self.at.saturating_duration_since(Instant::now());
        let boot = self.at_boot.saturating_sub(crate::clock::boottime());
        mono.min(boot)
    }
}

/// Upper bounds of the renewal latency histogram, in seconds.
pub const RENEWAL_BUCKETS: [f64; 9] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// Everything the endpoint shows.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub phase: Phase,
    pub since: Option<SystemTime>,
    pub fence: Option<u64>,
    pub holder: Option<String>,
    pub value: Option<String>,
    /// `None` on an engine whose lease cannot run out (local), and once the
    /// lease is closed.
    pub deadline: Option<Deadline>,
    pub acquisitions: u64,
    pub losses: BTreeMap<&'static str, u64>,
    /// Times the job was stopped at its `--max-time`.
    pub time_ups: u64,
    /// Whether the lease has gone unconfirmed past `--warn-before`.
    pub jeopardy: bool,
    pub renewals: u64,
    pub renewal_failures: u64,
    pub renewal_buckets: [u64; RENEWAL_BUCKETS.len()],
    pub renewal_seconds: f64,
    pub wait_started: Option<Instant>,
    pub last_wait: Option<Duration>,
}

impl Snapshot {
    /// Whether a load balancer should send traffic here: held, with at
    /// least the safety margin left before COMMAND's stop begins.
    pub fn leading(&self) -> bool {
        if self.phase != Phase::Held {
            return false;
        }
        match self.deadline {
            Some(deadline) => deadline.left() > deadline.margin,
            None => true,
        }
    }

    /// How long the current wait has lasted, or the last one did.
    pub fn wait(&self) -> Option<Duration> {
        match self.wait_started {
            Some(started) => Some(started.elapsed()),
            None => self.last_wait,
        }
    }
}

/// The hold loop's side of the endpoint: it sends, nobody it waits for
/// receives.
#[derive(Debug, Clone)]
pub struct Beacon {
    pub backend: &'static str,
    pub key: Arc<str>,
    state: Arc<watch::Sender<Snapshot>>,
}

impl Beacon {
    pub fn new(backend: &'static str, key: &str) -> Beacon {
        Beacon {
            backend,
            key: key.into(),
            state: Arc::new(watch::Sender::new(Snapshot::default())),
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        self.state.borrow().clone()
    }

    fn update(&self, change: impl FnOnce(&mut Snapshot)) {
        self.state.send_modify(change);
    }

    pub fn waiting(&self) {
        self.update(|s| {
            s.phase = Phase::Waiting;
            s.since = Some(SystemTime::now());
            s.fence = None;
            s.holder = None;
            s.wait_started = Some(Instant::now());
        });
    }

    /// The lock is ours and COMMAND starts.
    pub fn held(&self, fence: u64, holder: String, value: &str) {
        self.update(|s| {
            s.phase = Phase::Held;
            s.since = Some(SystemTime::now());
            s.fence = Some(fence);
            s.holder = Some(holder);
            s.value = Some(value.to_string());
            s.acquisitions += 1;
            s.last_wait = s.wait_started.take().map(|w| w.elapsed());
        });
    }

    /// The wait ended without the lock.
    pub fn gave_up(&self) {
        self.update(|s| s.last_wait = s.wait_started.take().map(|w| w.elapsed()));
    }

    /// COMMAND is being stopped (or has exited) and the lock let go.
    pub fn stopping(&self) {
        self.update(|s| {
            if s.phase != Phase::Stopping {
                s.phase = Phase::Stopping;
                s.since = Some(SystemTime::now());
            }
        });
    }

    pub fn lost(&self, why: &Lost) {
        let reason = match why {
            Lost::LeaseRanOut { .. } => "lease_ran_out",
            Lost::SessionGone(_) => "session_gone",
            Lost::Watch(_) => "taken_or_deleted",
            Lost::Released(_) => "released",
            Lost::ClockSlewed(_) => "clock_slewed",
        };
        self.update(|s| {
            *s.losses.entry(reason).or_default() += 1;
            s.phase = Phase::Stopping;
            s.since = Some(SystemTime::now());
        });
    }

    /// The lease went into jeopardy (`--warn-before`), or a renewal ended it.
    pub fn jeopardy(&self, on: bool) {
        self.update(|s| s.jeopardy = on);
    }

    /// Changes of what is published, for the hold loop's own watchers.
    pub fn subscribe(&self) -> watch::Receiver<Snapshot> {
        self.state.subscribe()
    }

    /// The job ran its `--max-time` and is being stopped.
    pub fn time_up(&self) {
        self.update(|s| {
            s.time_ups += 1;
            s.phase = Phase::Stopping;
            s.since = Some(SystemTime::now());
        });
    }

    /// The countdown's deadline moved (a renewal, the clock's state).
    pub fn deadline(&self, deadline: Option<Deadline>) {
        self.update(|s| s.deadline = deadline);
    }

    pub fn renewed(&self, took: Duration, deadline: Deadline) {
        self.update(|s| {
            s.renewals += 1;
            let secs = took.as_secs_f64();
            s.renewal_seconds += secs;
            for (bound, count) in RENEWAL_BUCKETS.iter().zip(s.renewal_buckets.iter_mut()) {
                if secs <= *bound {
                    *count += 1;
                }
            }
            s.deadline = Some(deadline);
        });
    }

    pub fn renewal_failed(&self) {
        self.update(|s| s.renewal_failures += 1);
    }
}

/// `lockrun status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The endpoint to ask: HOST:PORT or a unix socket path; by default
    /// LOCKRUN_STATUS, which lockrun sets in COMMAND's environment.
    #[arg(long, value_name = "ADDR")]
    pub status_addr: Option<String>,
    /// Exit 0 only with at least DURATION left before COMMAND would be
    /// stopped, on top of the safety margin.
    #[arg(long = "for", value_parser = parse_duration, value_name = "DURATION")]
    pub for_: Option<Duration>,
}

/// `lockrun check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The sequencer: LOCKRUN_SEQUENCER, as lockrun gave it to COMMAND.
    #[arg(value_name = "SEQUENCER")]
    pub sequencer: String,
}

/// `lockrun put --sequencer`.
#[derive(Debug, Args)]
pub struct PutArgs {
    /// The sequencer of the holder the write is fenced by: LOCKRUN_SEQUENCER.
    #[arg(long, value_name = "SEQUENCER")]
    pub sequencer: String,
    /// The key to write.
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The value to write.
    #[arg(value_name = "VALUE")]
    pub value: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_with(left: Duration, margin: Duration) -> Snapshot {
        Snapshot {
            phase: Phase::Held,
            deadline: Some(Deadline {
                at: Instant::now() + left,
                at_boot: crate::clock::boottime() + left,
                margin,
            }),
            ..Snapshot::default()
        }
    }

    #[test]
    fn leading_needs_the_margin_left_before_the_stop() {
        let margin = Duration::from_millis(500);
        assert!(held_with(Duration::from_secs(5), margin).leading());
        assert!(!held_with(Duration::from_millis(400), margin).leading());
        assert!(!held_with(Duration::ZERO, margin).leading());
        let stopping = Snapshot {
            phase: Phase::Stopping,
            ..held_with(Duration::from_secs(5), margin)
        };
        assert!(!stopping.leading());
        // No lease (local): held is leading.
        let local = Snapshot {
            phase: Phase::Held,
            ..Snapshot::default()
        };
        assert!(local.leading());
        assert!(!Snapshot::default().leading());
    }

    #[test]
    fn metrics_count_renewals_and_losses() {
        let beacon = Beacon::new("etcd", "a\"b");
        beacon.waiting();
        beacon.held(7, "key `x`".into(), "v");
        let deadline = Deadline {
            at: Instant::now() + Duration::from_secs(3),
            at_boot: crate::clock::boottime() + Duration::from_secs(3),
            margin: Duration::from_millis(500),
        };
        beacon.renewed(Duration::from_millis(20), deadline);
        beacon.renewal_failed();
        beacon.lost(&Lost::SessionGone("gone".into()));
        let text = server::metrics(&beacon, &beacon.snapshot());
        for line in [
            "lockrun_info{key=\"a\\\"b\",backend=\"etcd\"} 1",
            "lockrun_held 0",
            "lockrun_acquisitions_total 1",
            "lockrun_losses_total{reason=\"session_gone\"} 1",
            "lockrun_renewals_total 1",
            "lockrun_renewal_failures_total 1",
            "lockrun_renewal_duration_seconds_bucket{le=\"0.01\"} 0",
            "lockrun_renewal_duration_seconds_bucket{le=\"0.025\"} 1",
            "lockrun_renewal_duration_seconds_count 1",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
        }
    }
}
