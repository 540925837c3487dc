//! The hold loop: open a lease, acquire, run the child while the claim is
//! ours, stop it the moment that can no longer be guaranteed, release, on
//! every path — the same for every engine behind [`crate::backend`].

mod supervise;

use std::cell::Cell;
use std::convert::Infallible;
use std::ffi::OsString;
use std::future::Future;
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use crate::backend::{
    self, Acquisition, Claim, Engine, Lease, Lost, Opening, Renewal, Target, Wait,
};
use crate::child::{self, Child, ChildExit};
use crate::cli::{ContainmentMode, Leftovers};
use crate::config::HoldConfig;
use crate::error::Failure;
use crate::exit::Exit;
use crate::lease::{fmt_duration, Countdown, Renew};
use crate::logging::EVENT;
use crate::notify::{self, Notifier, Ready};
use crate::signals::{Signal, Signals};

use self::supervise::{Ending, StopPolicy};

/// How long cleanup may take before we leave the rest to the engine (a
/// lease's TTL releases whatever we could not).
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(5);

/// The same after the lease ran out because the engine did not answer:
/// the lease is as good as gone, and an engine that is frozen would only
/// delay our exit by the whole [`CLEANUP_TIMEOUT`] after the child was
/// stopped. One quick attempt, for an engine that has just come back.
const CLEANUP_AFTER_SILENCE: Duration = Duration::from_millis(500);

/// How lockrun runs as a service: the notify protocol and `--min-hold`.
pub struct Service {
    notify: Option<(Notifier, Ready)>,
    min_hold: Option<Duration>,
}

/// How much more start-up time a standby asks for at a time, and how often.
const EXTEND_START_BY: Duration = Duration::from_secs(30);
const EXTEND_START_EVERY: Duration = Duration::from_secs(10);

impl Service {
    /// Checks `--notify` against the environment before anything is written.
    pub fn new(args: &crate::cli::ServiceArgs) -> Result<Service, Failure> {
        let notify = match args.notify {
            Some(ready) => Notifier::from_env(|name| std::env::var_os(name), std::process::id())
                .map_err(Failure::Config)?
                .map(|notifier| (notifier, ready)),
            None => None,
        };
        Ok(Service {
            notify,
            min_hold: args.min_hold,
        })
    }

    fn notifier(&self) -> Option<&Notifier> {
        self.notify.as_ref().map(|(notifier, _)| notifier)
    }

    fn status(&self, status: &str) {
        if let Some(notifier) = self.notifier() {
            notifier.status(status);
        }
    }

    /// Asks for more start-up time while a `--notify=held` standby waits;
    /// never returns.
    async fn extend_start(&self, ready_sent: &Cell<bool>) -> Infallible {
        let Some((notifier, Ready::Held)) = &self.notify else {
            // Nothing to extend: no timer wakes us for nothing.
            return std::future::pending().await;
        };
        loop {
            if !ready_sent.get() {
                notifier.extend_start(EXTEND_START_BY);
            }
            tokio::time::sleep(EXTEND_START_EVERY).await;
        }
    }
}

fn now_utc() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

enum Round {
    Done(Exit),
    /// We held the lock and lost it.
    Lost,
    /// The lease went away while we waited: wait again with a new one.
    Retry,
}

/// A lease's renewals, for the countdown.
struct Renewing<'a, L>(&'a L);

impl<L: Lease> Renew for Renewing<'_, L> {
    async fn renew(&self, timeout: Duration) -> Renewal {
        self.0.renew(timeout).await
    }
}

/// Keeps the lease while the countdown allows; never returns for an engine
/// whose lease cannot run out.
async fn keep<L: Lease>(countdown: &mut Option<Countdown>, lease: &L) -> Lost {
    match countdown {
        Some(countdown) => countdown.keep(&Renewing(lease)).await,
        None => std::future::pending().await,
    }
}

/// The signal `release` sends a holder on engines without a server; until
/// we hold, nobody can name us, so it is only listened to while holding.
fn release_requests() -> Result<tokio::signal::unix::Signal, Failure> {
    signal(SignalKind::from_raw(backend::release_signal()))
        .map_err(|e| Failure::Internal(format!("cannot handle signals ({e})")))
}

/// Holds `target` and runs the child, round after round while campaigning.
/// `forked` is the first round's guard, if [`fork_guard`] made one.
pub async fn run<E: Engine>(
    engine: &E,
    target: &Target,
    config: &HoldConfig,
    service: &Service,
    campaign: bool,
    mut forked: Option<child::Forked>,
) -> Result<Exit, Failure> {
    let mut signals =
        Signals::new().map_err(|e| Failure::Internal(format!("cannot handle signals ({e})")))?;
    let mut released = release_requests()?;
    let patience = config.deadline();
    let ready_sent = Cell::new(false);
    let waiting = format!("waiting for `{}`", target.name());
    match &service.notify {
        Some((notifier, Ready::Start)) => {
            notifier.ready(&waiting);
            ready_sent.set(true);
        }
        Some((notifier, Ready::Held)) => notifier.status(&waiting),
        None => {}
    }
    let first_contact = Cell::new(true);
    let exit = loop {
        let round = round(
            engine,
            target,
            config,
            service,
            &ready_sent,
            patience,
            campaign,
            &mut signals,
            &mut released,
            &mut forked,
            &first_contact,
        );
        let round = tokio::select! {
            round = round => round?,
            never = service.extend_start(&ready_sent) => match never {},
        };
        match round {
            Round::Done(exit) => break exit,
            Round::Lost if campaign => {
                tracing::info!(target: EVENT, lock = target.name(), "campaigning again");
                service.status(&format!("lost `{}`; campaigning again", target.name()));
            }
            Round::Lost => break Exit::Lost,
            Round::Retry => {}
        }
    };
    if let Some(notifier) = service.notifier() {
        notifier.stopping(&match exit {
            Exit::Interrupted(signal) => format!("stopped by {signal}"),
            Exit::Lost => format!("lost `{}`", target.name()),
            _ => "done".to_string(),
        });
    }
    Ok(exit)
}

/// The status of a run whose child has exited. A child that ended of the
/// signal we forwarded (or says so with 128+N, as a shell wrapping it does)
/// was stopped on request: lockrun ends by that signal too, so that systemd
/// sees the clean stop it asked for. Anything else is the child's own status.
fn child_ended(exit: ChildExit, forwarded: Option<Signal>) -> Exit {
    match forwarded {
        Some(signal) if i32::from(exit.code()) == 128 + signal.number() => {
            Exit::Interrupted(signal)
        }
        _ => Exit::Child(exit.code()),
    }
}

/// Forks the first round's guard, parked, before the runtime starts (see
/// [`child::Forked`]); `lends` as the engine's [`Engine::CLAIM_LENDS_FD`].
/// `None` when that cannot be done: the round then starts its guard itself.
pub fn fork_guard(config: &HoldConfig, service: &Service, lends: bool) -> Option<child::Forked> {
    let forked = child_command(config, service, lends)
        .and_then(|command| Child::fork_parked(&command).map_err(spawn_failure));
    match forked {
        Ok(forked) => forked,
        Err(failure) => {
            tracing::debug!("{failure}; the guard starts later");
            None
        }
    }
}

/// Spawns the guard, parked; `lends` as [`fork_guard`]'s.
fn prepare_child(
    config: &HoldConfig,
    service: &Service,
    lends: bool,
) -> Result<child::Prepared, Failure> {
    Child::prepare(&child_command(config, service, lends)?).map_err(spawn_failure)
}

fn spawn_failure(e: std::io::Error) -> Failure {
    Failure::Internal(format!(
        "cannot start the child ({})",
        crate::config::io_reason(&e)
    ))
}

/// What the guard is to run, and whether it will be lent the claim's
/// descriptor to keep.
fn child_command(
    config: &HoldConfig,
    service: &Service,
    lends: bool,
) -> Result<child::Command, Failure> {
    let guard_exe = child::guard_exe()
        .map_err(|e| Failure::Internal(format!("cannot find lockrun's own executable ({e})")))?;
    Ok(child::Command {
        argv: config.child.argv.clone(),
        shell: config.child.shell,
        env: Vec::new(),
        env_remove: match service.notify {
            Some(_) => notify::VARIABLES.iter().map(OsString::from).collect(),
            None => Vec::new(),
        },
        guard_exe,
        lends,
        leftovers: match config.child.leftovers {
            Leftovers::Wait => child::Leftovers::Wait,
            Leftovers::Kill => child::Leftovers::Kill {
                signal: config.child.kill_signal,
                grace: config.child.kill_timeout,
            },
        },
        containment: match config.child.containment {
            ContainmentMode::Auto => child::Containment::detect(),
            ContainmentMode::Subreaper => {
                child::Containment::Subreaper("--containment subreaper".into())
            }
        },
    })
}

/// Releases the claim, if any, and closes the lease, within
/// [`CLEANUP_TIMEOUT`]: failures are reported, not fatal, since the lease's
/// expiry ends whatever we could not.
async fn cleanup<E: Engine>(target: &Target, claim: Option<E::Claim>, lease: E::Lease) {
    cleanup_within::<E>(target, claim, lease, CLEANUP_TIMEOUT).await
}

async fn cleanup_within<E: Engine>(
    target: &Target,
    claim: Option<E::Claim>,
    lease: E::Lease,
    within: Duration,
) {
    let work = async {
        match claim {
            Some(claim) => {
                if let Err(e) = E::release_and_close(claim, lease).await {
                    tracing::warn!("could not release `{}`: {e}", target.name());
                }
            }
            None => lease.close().await,
        }
    };
    if tokio::time::timeout(within, work).await.is_err() {
        tracing::warn!(
            "cleanup did not finish within {}; the engine will expire what is left",
            fmt_duration(within)
        );
    }
}

#[allow(clippy::too_many_arguments)]
async fn round<E: Engine>(
    engine: &E,
    target: &Target,
    config: &HoldConfig,
    service: &Service,
    ready_sent: &Cell<bool>,
    patience: Wait,
    campaign: bool,
    signals: &mut Signals,
    released: &mut tokio::signal::unix::Signal,
    forked: &mut Option<child::Forked>,
    first_contact: &Cell<bool>,
) -> Result<Round, Failure> {
    let report = |status: &str| service.status(status);
    // A service (`--notify`) with no deadline retries an engine that is
    // down at start as a campaigner does: at boot a Type=notify unit often
    // starts before the agent it talks to, and failing there would leave it
    // failed. With --timeout or --no-wait the user asked for an answer by
    // then, and gets the one-off run's.
    let opening = Opening {
        wait: patience,
        daemon: campaign || (service.notify.is_some() && matches!(patience, Wait::Forever)),
        first: first_contact.replace(false),
        report: &report,
    };
    let lease = tokio::select! {
        lease = engine.open_lease(opening) => lease.map_err(Into::into)?,
        signal = signals.recv() => return Ok(Round::Done(Exit::Interrupted(signal))),
    };
    // The guard starts now, parked, so that its start-up overlaps the wait
    // instead of delaying COMMAND once the lock is ours (a claim that lives
    // in a descriptor is lent to it with the go). It runs nothing until
    // `start`; every path below that does not start it drops it, which ends
    // it.
    let parked = match forked.take() {
        Some(forked) => forked.adopt().map_err(spawn_failure),
        None => prepare_child(config, service, E::CLAIM_LENDS_FD),
    };
    let prepared = match parked {
        Ok(prepared) => prepared,
        Err(failure) => {
            cleanup::<E>(target, None, lease).await;
            return Err(failure);
        }
    };
    let watchdog = || notify::watchdog_loop(service.notifier());
    let mut countdown = config
        .budget
        .map(|budget| Countdown::new(budget, lease.confirmed_at()));
    let started = Instant::now();

    enum Waited<C, Err> {
        Acquired(Result<Acquisition<C>, Err>),
        Signal(Signal),
        Lost(Lost),
    }
    let acquisition = with_deadline(
        patience,
        engine.acquire(&lease, target, &config.value, patience),
    );
    let waited = tokio::select! {
        signal = signals.recv() => Waited::Signal(signal),
        lost = keep(&mut countdown, &lease) => Waited::Lost(lost),
        acquired = acquisition => Waited::Acquired(acquired),
        never = watchdog() => match never {},
    };
    // `Err` carries how the round ends when the lock is not ours.
    let outcome = match waited {
        Waited::Acquired(Ok(Acquisition::Held(claim))) => Ok(claim),
        Waited::Acquired(Ok(Acquisition::Busy { holder })) => {
            tracing::info!(
                lock = target.name(),
                holder = holder.as_deref().unwrap_or("-"),
                "not acquired"
            );
            Err(Ok(Round::Done(Exit::NotAcquired(
                config.conflict_exit_code,
            ))))
        }
        Waited::Acquired(Err(e)) => Err(Err(e.into())),
        Waited::Signal(signal) => {
            tracing::info!("{signal} while waiting for the lock; giving up");
            Err(Ok(Round::Done(Exit::Interrupted(signal))))
        }
        Waited::Lost(why) => {
            // Our lease may be gone while we waited; start over with a new one.
            tracing::warn!(target: EVENT, "lease lost while waiting: {why}");
            Err(Ok(Round::Retry))
        }
    };
    let mut claim = match outcome {
        Ok(claim) => claim,
        Err(round) => {
            // COMMAND does not run this round: the parked guard goes first.
            drop(prepared);
            cleanup::<E>(target, None, lease).await;
            return round;
        }
    };
    let acquired_at = Instant::now();
    tracing::info!(
        target: EVENT,
        lock = target.name(),
        holder = claim.describe(),
        lock_index = claim.fence(),
        waited_ms = started.elapsed().as_millis() as u64,
        "acquired"
    );
    let leading = match target {
        Target::Lock { key } => format!("leading `{key}` since {}", now_utc()),
        Target::Slot { prefix, limit } => {
            format!(
                "holding a slot of `{prefix}` (limit {limit}) since {}",
                now_utc()
            )
        }
    };
    match service.notifier() {
        Some(notifier) if !ready_sent.get() => {
            notifier.ready(&leading);
            ready_sent.set(true);
        }
        Some(notifier) => notifier.status(&leading),
        None => {}
    }

    let pgid = prepared.pid();
    let started_child = match claim.take_hold_fd() {
        Some(hold) => prepared.start_lending(claim.env(), hold),
        None => prepared.start(claim.env()),
    }
    .map(|child| (child, pgid))
    .map_err(spawn_failure);
    let (mut child, pgid) = match started_child {
        Ok(started) => started,
        Err(failure) => {
            cleanup::<E>(target, Some(claim), lease).await;
            return Err(failure);
        }
    };
    if let Err(e) = claim.record_child(pgid).await {
        tracing::warn!("could not record the child's group beside the lock: {e}");
    }
    let policy = StopPolicy {
        signal: config.child.kill_signal,
        grace: config.child.kill_timeout,
        loss_grace: config.loss_grace(),
    };
    if let (Some(countdown), Some(deadlines)) = (
        countdown.as_mut(),
        child.deadlines(policy.signal, policy.grace),
    ) {
        countdown.hand_to_guard(deadlines);
    }
    let ending = {
        let lost = async {
            tokio::select! {
                lost = keep(&mut countdown, &lease) => lost,
                lost = claim.watch() => lost,
                _ = released.recv() => Lost::Released("an operator released the lock (`lockrun release`)".into()),
                never = watchdog() => match never {},
            }
        };
        supervise::supervise(&mut child, signals, lost, policy).await
    };
    // A lockrun that could not run past its deadline (stopped, starved,
    // suspended) may find the child already ended by the guard: the lock
    // was lost, whoever stopped the child.
    let ending = match ending {
        Ending::Exited { exit, .. } if countdown.as_ref().is_some_and(Countdown::ran_out) => {
            let why = countdown
                .as_ref()
                .map(Countdown::ran_out_reason)
                .expect("checked above");
            Ending::Lost(why, exit)
        }
        ending => ending,
    };
    if let (Ending::Exited { .. }, Some(min_hold)) = (&ending, service.min_hold) {
        // The child is done, but the lock stays ours until `--min-hold` from
        // acquisition, so later contenders of the same period find it held.
        // Nothing runs meanwhile, so a loss costs nothing; a signal ends it.
        let until = acquired_at + min_hold;
        if Instant::now() < until {
            tracing::info!(
                lock = target.name(),
                until_ms = (until - Instant::now()).as_millis() as u64,
                "child exited; keeping the lock for --min-hold"
            );
            service.status(&format!("keeping `{}` for --min-hold", target.name()));
            tokio::select! {
                _ = tokio::time::sleep_until(until) => {}
                lost = keep(&mut countdown, &lease) => tracing::info!("lost during --min-hold: {lost}"),
                lost = claim.watch() => tracing::info!("lost during --min-hold: {lost}"),
                _ = released.recv() => tracing::info!("released by an operator during --min-hold"),
                signal = signals.recv() => tracing::info!("{signal} during --min-hold; releasing"),
                never = watchdog() => match never {},
            }
        }
    }
    let held_for = acquired_at.elapsed();
    let within = match &ending {
        Ending::Lost(Lost::LeaseRanOut { .. }, _) => CLEANUP_AFTER_SILENCE,
        _ => CLEANUP_TIMEOUT,
    };
    cleanup_within::<E>(target, Some(claim), lease, within).await;
    match ending {
        Ending::Exited { exit, forwarded } => {
            tracing::info!(
                target: EVENT,
                lock = target.name(),
                status = exit.code(),
                "child exited; released"
            );
            Ok(Round::Done(child_ended(exit, forwarded)))
        }
        Ending::Lost(why, exit) => {
            let message = format!(
                "lost `{}` after {}: {why}; the child was stopped (status {})",
                target.name(),
                fmt_duration(held_for),
                exit.code()
            );
            if campaign {
                tracing::warn!(target: EVENT, "{message}");
            } else {
                tracing::error!(target: EVENT, "{message}");
            }
            Ok(Round::Lost)
        }
    }
}

/// `--timeout` bounds the whole acquisition, whatever it is doing.
async fn with_deadline<C, Err>(
    patience: Wait,
    acquisition: impl Future<Output = Result<Acquisition<C>, Err>>,
) -> Result<Acquisition<C>, Err> {
    match patience.deadline() {
        Some(at) => match tokio::time::timeout_at(at, acquisition).await {
            Ok(result) => result,
            Err(_) => Ok(Acquisition::Busy { holder: None }),
        },
        None => acquisition.await,
    }
}
