//! The hold loop: open a lease, acquire, run the child while the claim is
//! ours, stop it the moment that can no longer be guaranteed, release, on
//! every path — the same for every engine behind [`crate::backend`].
//!
//! Read it top down: [`run`] builds the real signal sources and guards;
//! `Run::rounds` plays one `Round` after another (a lease lost while
//! waiting, or a campaigner's loss, starts a new one); `Round::play` reads
//! as the phases in order (`open_lease`, `wait`, `start`, `run`,
//! `min_hold`, `clean_up`) and says in one place what each early end lets
//! go of; `supervise` stops the child when the lock is lost. The guard and
//! the child stand behind the traits in `launch`, so that `tests` can play
//! rounds against an in-memory engine on paused time.

mod launch;
mod supervise;
#[cfg(test)]
mod tests;

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
use crate::child::{self, Child, ChildExit, Verdict};
use crate::child::{ContainmentMode, LeftoversMode};
use crate::config::HoldConfig;
use crate::duration::fmt_duration;
use crate::error::Failure;
use crate::exit::Exit;
use crate::lease::{Countdown, Renew};
use crate::logging::EVENT;
use crate::notify::{self, Notifier, Ready};
use crate::ops::hooks::Event;
use crate::sequencer::{self, Sequencer};
use crate::signals::{Signal, Signals};

use self::launch::{Launch, Parked, Supervised};
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
    /// The status endpoint and hooks.
    ops: crate::ops::Ops,
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
            ops: crate::ops::Ops::none(),
        })
    }

    /// Adds the status endpoint and hooks (`--status-addr`, `--on-*`).
    pub fn with_ops(self, ops: crate::ops::Ops) -> Service {
        Service { ops, ..self }
    }

    /// Checks that the agent of `--register-service` answers, before any
    /// lock is sought: one that is down at start is a setup error.
    pub async fn reach(&self) -> Result<(), Failure> {
        match &self.ops.catalog {
            Some(catalog) => catalog.reach().await,
            None => Ok(()),
        }
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

/// How a round ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Done(Exit),
    /// We held the lock and lost it.
    Lost,
    /// We held the lock and `--replace` took it over: a campaigner ends
    /// too, or it would take the lock back from its replacer.
    Replaced,
    /// We held the lock and stopped the job at its `--max-time`.
    TimeUp,
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
    forked: Option<child::Forked>,
) -> Result<Exit, Failure> {
    // Before any guard starts: one killed alone leaves its tree to us.
    child::adopt_orphans();
    let signals =
        Signals::new().map_err(|e| Failure::Internal(format!("cannot handle signals ({e})")))?;
    let released = release_requests()?;
    // Served while this run lasts; the hold loop only publishes to it.
    let _serving = service.ops.serve();
    let guards = Guards {
        config,
        service,
        lends: E::CLAIM_LENDS_FD,
        forked,
    };
    Run {
        engine,
        target,
        config,
        service,
        campaign,
        signals,
        released,
        guards,
    }
    .rounds()
    .await
}

/// What a run lends each of its rounds: the engine, the settings, and
/// where signals and guards come from.
struct Run<'r, E: Engine, G: Launch> {
    engine: &'r E,
    target: &'r Target,
    config: &'r HoldConfig,
    service: &'r Service,
    campaign: bool,
    signals: Signals,
    released: tokio::signal::unix::Signal,
    guards: G,
}

impl<E: Engine, G: Launch> Run<'_, E, G> {
    /// Plays rounds until one ends the run: the child's status, a signal,
    /// a loss (a campaigner campaigns again), or a failure. A lease lost
    /// while waiting starts the next round with a new one.
    async fn rounds(mut self) -> Result<Exit, Failure> {
        let (target, service) = (self.target, self.service);
        let patience = self.config.deadline();
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
            let round = Round {
                engine: self.engine,
                target,
                config: self.config,
                service,
                campaign: self.campaign,
                patience,
                ready_sent: &ready_sent,
                first_contact: &first_contact,
                signals: &mut self.signals,
                released: &mut self.released,
                guards: &mut self.guards,
            };
            let outcome = tokio::select! {
                outcome = round.play() => outcome?,
                never = service.extend_start(&ready_sent) => match never {},
            };
            match outcome {
                Outcome::Done(exit) => break exit,
                Outcome::Lost if self.campaign => {
                    tracing::info!(target: EVENT, lock = target.name(), "campaigning again");
                    service.status(&format!("lost `{}`; campaigning again", target.name()));
                }
                Outcome::Lost => break Exit::Lost,
                Outcome::Replaced => break Exit::Lost,
                Outcome::TimeUp if self.campaign => {
                    tracing::info!(target: EVENT, lock = target.name(), "campaigning again");
                    service.status(&format!(
                        "stopped the job at --max-time; campaigning again for `{}`",
                        target.name()
                    ));
                }
                Outcome::TimeUp => break Exit::TimeUp,
                Outcome::Retry => {}
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
    child::adopt_orphans();
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

/// The real guards: the first round's, forked before the runtime started,
/// then one per round.
struct Guards<'a> {
    config: &'a HoldConfig,
    service: &'a Service,
    /// As the engine's [`Engine::CLAIM_LENDS_FD`].
    lends: bool,
    forked: Option<child::Forked>,
}

impl Launch for Guards<'_> {
    type Parked = child::Prepared;
    type Child = Child;

    fn park(&mut self) -> Result<child::Prepared, Failure> {
        match self.forked.take() {
            Some(forked) => forked.adopt().map_err(spawn_failure),
            None => prepare_child(self.config, self.service, self.lends),
        }
    }
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
        env: service.ops.env(),
        env_remove: match service.notify {
            Some(_) => notify::VARIABLES.iter().map(OsString::from).collect(),
            None => Vec::new(),
        },
        guard_exe,
        lends,
        leftovers: match config.child.leftovers {
            LeftoversMode::Wait => child::Leftovers::Wait,
            LeftoversMode::Kill => child::Leftovers::Kill {
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

/// One round: a lease opened, the lock waited for, the child run while the
/// lock is ours, everything let go. Each phase is one method; a phase that
/// ends the round early returns how ([`Step::Over`]), and [`Round::play`]
/// cleans up after it.
struct Round<'r, E: Engine, G: Launch> {
    engine: &'r E,
    target: &'r Target,
    config: &'r HoldConfig,
    service: &'r Service,
    campaign: bool,
    patience: Wait,
    ready_sent: &'r Cell<bool>,
    first_contact: &'r Cell<bool>,
    signals: &'r mut Signals,
    released: &'r mut tokio::signal::unix::Signal,
    guards: &'r mut G,
}

/// What a phase hands the next, or how the round ends without it.
enum Step<T> {
    Next(T),
    Over(Outcome),
}

impl<E: Engine, G: Launch> Round<'_, E, G> {
    async fn play(mut self) -> Result<Outcome, Failure> {
        let lease = match self.open_lease().await? {
            Step::Next(lease) => lease,
            Step::Over(outcome) => return Ok(outcome),
        };
        // The guard starts now, parked, so that its start-up overlaps the
        // wait instead of delaying COMMAND once the lock is ours (a claim
        // that lives in a descriptor is lent to it with the go). It runs
        // nothing until `start`; every path below that does not start it
        // drops it, which ends it.
        let mut parked = match self.guards.park() {
            Ok(parked) => parked,
            Err(failure) => {
                cleanup::<E>(self.target, None, lease).await;
                return Err(failure);
            }
        };
        let beacon = &self.service.ops.beacon;
        beacon.waiting();
        let mut countdown = self
            .config
            .budget
            .map(|budget| Countdown::new(budget, lease.confirmed_at()).observed_by(beacon.clone()));
        let (claim, started) = match self.wait(&lease, &mut countdown, &mut parked).await {
            Ok(Step::Next(claim)) => claim,
            Ok(Step::Over(outcome)) => {
                beacon.gave_up();
                self.abandon(parked, lease).await;
                beacon.deadline(None);
                return Ok(outcome);
            }
            Err(failure) => {
                beacon.gave_up();
                self.abandon(parked, lease).await;
                beacon.deadline(None);
                return Err(failure);
            }
        };
        let mut held = Held {
            claim,
            lease,
            countdown,
            acquired_at: Instant::now(),
        };
        // What COMMAND is told; hooks keep it for after the claim is gone.
        let mut claim_env = held.claim.env();
        // A sequencer names the one holder of a lock; a reader is one of
        // many, and nothing a writer fences with tells readers apart.
        if let Target::Lock { key, shared: false } = self.target {
            let seq = Sequencer {
                backend: beacon.backend.to_string(),
                key: key.clone(),
                fence: held.claim.fence(),
                holder: held.claim.holder_id(),
            };
            claim_env.push((sequencer::VARIABLE.into(), seq.encode().into()));
        }
        let mut hook_env = claim_env.clone();
        hook_env.extend(self.service.ops.env());
        // A guard started on the grant had no --on-acquire to wait for.
        let acquired = match started {
            true => Ok(Step::Next(())),
            false => self.on_acquire(&mut held, &hook_env).await,
        };
        match acquired {
            Ok(Step::Next(())) => {}
            Ok(Step::Over(outcome)) => {
                drop(parked);
                cleanup::<E>(self.target, Some(held.claim), held.lease).await;
                beacon.deadline(None);
                return Ok(outcome);
            }
            Err(failure) => {
                drop(parked);
                cleanup::<E>(self.target, Some(held.claim), held.lease).await;
                beacon.deadline(None);
                return Err(failure);
            }
        }
        beacon.held(
            held.claim.fence(),
            held.claim.describe(),
            &self.config.value,
        );
        self.announce();
        let pgid_of = parked.pid();
        let started = match started {
            true => parked
                .into_started(true)
                .map_err(spawn_failure)
                .map(|child| (child, true)),
            false => self.start(parked, &mut held, claim_env),
        };
        let started = match started {
            Ok((child, offered)) => Ok(self.started(child, pgid_of, &mut held, offered).await),
            Err(failure) => Err(failure),
        };
        let mut child = match started {
            Ok(child) => child,
            Err(failure) => {
                cleanup::<E>(self.target, Some(held.claim), held.lease).await;
                return Err(failure);
            }
        };
        let ending = self.run(&mut child, &mut held, &hook_env).await;
        if let Ending::Exited { forwarded, .. } = ending {
            beacon.stopping();
            // A stop we passed on to the child is a stop of the whole run:
            // the child may have ended of it, or just before it, and either
            // way the signal was spent on it, so the hold would wait for
            // another one (Ctrl-C at the moment the child ended hung here).
            if !forwarded.is_some_and(supervise::is_shutdown) {
                self.min_hold(&mut held).await;
            }
        }
        let held_for = held.acquired_at.elapsed();
        self.clean_up(held, &ending).await;
        beacon.deadline(None);
        // After the stop and the release, so that no hook delays either.
        let hooks = &self.service.ops.hooks;
        let containment = self.config.child.containment;
        match ending {
            Ending::Lost(..) => hooks.run_logged(Event::Loss, &hook_env, containment).await,
            Ending::Exited { .. } | Ending::TimeUp(_) => {
                hooks
                    .run_logged(Event::Release, &hook_env, containment)
                    .await
            }
        }
        Ok(self.ended(ending, held_for))
    }

    /// Runs `--on-acquire` before COMMAND, keeping the lease meanwhile:
    /// a loss or a signal cuts it short (all it started is killed, and gone
    /// before the lock is given up), and its failure gives the lock up.
    async fn on_acquire(
        &mut self,
        held: &mut Held<E::Claim, E::Lease>,
        env: &[(OsString, OsString)],
    ) -> Result<Step<()>, Failure> {
        let hooks = &self.service.ops.hooks;
        let target = self.target.name();
        let started = hooks.start(Event::Acquire, env, self.config.child.containment);
        let mut hook = match started {
            Ok(Some(hook)) => hook,
            Ok(None) => return Ok(Step::Next(())),
            Err(why) => {
                return Err(Failure::Internal(format!(
                    "{why}; released `{target}` without running COMMAND"
                )))
            }
        };
        let Held {
            claim,
            lease,
            countdown,
            ..
        } = held;
        let step = tokio::select! {
            done = hook.finish() => return match done {
                Ok(()) => Ok(Step::Next(())),
                Err(why) => Err(Failure::Internal(format!(
                    "{why}; released `{target}` without running COMMAND"
                ))),
            },
            lost = keep(countdown, lease) => {
                tracing::warn!(target: EVENT, "lost `{target}` while --on-acquire ran: {lost}");
                Step::Over(Outcome::Lost)
            }
            lost = claim.watch() => {
                tracing::warn!(target: EVENT, "lost `{target}` while --on-acquire ran: {lost}");
                Step::Over(Outcome::Lost)
            }
            signal = self.signals.recv() => {
                tracing::info!("{signal} while --on-acquire ran; giving up");
                Step::Over(Outcome::Done(Exit::Interrupted(signal)))
            }
            never = notify::watchdog_loop(self.service.notifier()) => match never {},
        };
        hook.stop().await;
        Ok(step)
    }

    /// Opens the lease the claim will be tied to; a signal meanwhile ends
    /// the run with nothing to clean up.
    async fn open_lease(&mut self) -> Result<Step<E::Lease>, Failure> {
        let service = self.service;
        let report = |status: &str| service.status(status);
        // A service (`--notify`) with no deadline retries an engine that is
        // down at start as a campaigner does: at boot a Type=notify unit
        // often starts before the agent it talks to, and failing there would
        // leave it failed. With --timeout or --no-wait the user asked for an
        // answer by then, and gets the one-off run's.
        let opening = Opening {
            wait: self.patience,
            daemon: self.campaign
                || (service.notify.is_some() && matches!(self.patience, Wait::Forever)),
            first: self.first_contact.replace(false),
            report: &report,
        };
        tokio::select! {
            lease = self.engine.open_lease(opening) => Ok(Step::Next(lease.map_err(Into::into)?)),
            signal = self.signals.recv() => Ok(Step::Over(Outcome::Done(Exit::Interrupted(signal)))),
        }
    }

    /// Waits for the lock while keeping the lease: the claim, or how the
    /// round ends without it (busy, a signal, the lease lost meanwhile).
    async fn wait(
        &mut self,
        lease: &E::Lease,
        countdown: &mut Option<Countdown>,
        parked: &mut G::Parked,
    ) -> Result<Step<(E::Claim, bool)>, Failure> {
        let started = Instant::now();
        // Where nothing must happen in lockrun between the grant and
        // COMMAND's start, the engine may let the parked guard wait for
        // the lock and start COMMAND itself the moment it is granted
        // (`Engine::acquire_in_guard`): not with --on-acquire, which runs
        // first, nor where the guard must not let go of the lock itself
        // (see `start`), nor for a service manager told we hold first.
        let ops = &self.service.ops;
        let in_guard = E::CLAIM_LENDS_FD
            && self.service.min_hold.is_none()
            && !ops.serves_leader()
            && !ops.registers_service()
            && !ops.hooks.has(Event::Acquire)
            && self.service.notify.is_none();
        let mut arm = launch::Arm {
            parked,
            sequencer: match self.target {
                Target::Lock { key, shared: false } => {
                    Some((ops.beacon.backend.to_string(), key.clone()))
                }
                _ => None,
            },
            verdict: true,
            armed: false,
        };
        let (engine, target, value, patience) =
            (self.engine, self.target, &self.config.value, self.patience);
        let acquisition = async {
            match in_guard {
                // The engine bounds its own wait by --timeout: a guard's
                // grant at the deadline is still taken, not abandoned
                // with the child started.
                true => {
                    engine
                        .acquire_in_guard(lease, target, value, patience, &mut arm)
                        .await
                }
                false => with_deadline(patience, engine.acquire(lease, target, value, patience))
                    .await
                    .map(|acquired| (acquired, false)),
            }
        };
        let waited = tokio::select! {
            signal = self.signals.recv() => Waited::Signal(signal),
            lost = keep(countdown, lease) => Waited::Lost(lost),
            acquired = acquisition => Waited::Acquired(acquired),
            never = notify::watchdog_loop(self.service.notifier()) => match never {},
        };
        let target = self.target.name();
        Ok(match waited {
            // A grant read after the lease ran out (lockrun stopped or
            // starved while the engine granted it; a PostgreSQL waiter
            // queued in the server, stopped past its TTL, finds the answer
            // waiting): the engine may have ended the session since, and
            // another may hold. Nothing runs on it; a new round starts.
            Waited::Acquired(Ok((Acquisition::Held(claim), false)))
                if countdown.as_ref().is_some_and(Countdown::ran_out) =>
            {
                tracing::warn!(
                    target: EVENT,
                    lock = target,
                    "granted after the lease ran out while waiting; starting over"
                );
                drop(claim);
                Step::Over(Outcome::Retry)
            }
            Waited::Acquired(Ok((Acquisition::Held(claim), in_guard))) => {
                tracing::info!(
                    target: EVENT,
                    lock = target,
                    holder = claim.describe(),
                    lock_index = claim.fence(),
                    waited_ms = started.elapsed().as_millis() as u64,
                    "acquired"
                );
                Step::Next((claim, in_guard))
            }
            Waited::Acquired(Ok((Acquisition::Busy { holder }, _))) => {
                tracing::info!(
                    lock = target,
                    holder = holder.as_deref().unwrap_or("-"),
                    "not acquired"
                );
                crate::logging::note(&match holder.as_deref() {
                    Some(holder) => format!("`{target}` is held by {holder}; not acquired"),
                    None => format!("`{target}` is held; not acquired"),
                });
                Step::Over(Outcome::Done(Exit::NotAcquired(
                    self.config.conflict_exit_code,
                )))
            }
            Waited::Acquired(Err(e)) => return Err(e.into()),
            Waited::Signal(signal) => {
                tracing::info!("{signal} while waiting for the lock; giving up");
                Step::Over(Outcome::Done(Exit::Interrupted(signal)))
            }
            Waited::Lost(Lost::ClockSlewed(why)) => {
                // Nothing runs yet, and nothing can run under a clock slowed
                // this far: a new lease would meet the same clock.
                return Err(Failure::Config(why));
            }
            Waited::Lost(why) => {
                // Our lease may be gone while we waited; start over with a
                // new one.
                tracing::warn!(target: EVENT, "lease lost while waiting: {why}");
                Step::Over(Outcome::Retry)
            }
        })
    }

    /// Ends a round in which COMMAND does not run: the parked guard goes
    /// first, then the lease.
    async fn abandon(&self, parked: G::Parked, lease: E::Lease) {
        drop(parked);
        cleanup::<E>(self.target, None, lease).await;
    }

    /// Tells the service manager we hold the lock.
    fn announce(&self) {
        let leading = match self.target {
            Target::Lock { key, shared: false } => format!("leading `{key}` since {}", now_utc()),
            Target::Lock { key, shared: true } => {
                format!("holding `{key}` shared since {}", now_utc())
            }
            Target::Slot { prefix, limit } => {
                format!(
                    "holding a slot of `{prefix}` (limit {limit}) since {}",
                    now_utc()
                )
            }
        };
        match self.service.notifier() {
            Some(notifier) if !self.ready_sent.get() => {
                notifier.ready(&leading);
                self.ready_sent.set(true);
            }
            Some(notifier) => notifier.status(&leading),
            None => {}
        }
    }

    /// Gives the parked guard the go: the child, and whether its guard
    /// was promised a verdict on the lock (see [`Round::started`]).
    fn start(
        &self,
        parked: G::Parked,
        held: &mut Held<E::Claim, E::Lease>,
        env: Vec<(OsString, OsString)>,
    ) -> Result<(G::Child, bool), Failure> {
        let hold = held.claim.take_hold_fd();
        // A guard that keeps the claim's descriptor may let go of the lock
        // itself once the tree is gone, which takes its exit and our
        // wake-up off a handover's path; only where we would release right
        // after the child's end anyway, which every ending does (a loss, a
        // signal, an operator's release; hooks run after the release) but
        // `--min-hold`'s, which keeps the lock after the child, and only
        // where nobody is told we hold it until we learn of the end
        // (`/leader`, a service in the catalog). Such a guard is promised a
        // verdict, and always gets one below.
        let ops = &self.service.ops;
        let offer = hold.is_some()
            && self.service.min_hold.is_none()
            && !ops.serves_leader()
            && !ops.registers_service();
        let mut child = parked.start(env, hold, offer).map_err(spawn_failure)?;
        // At once, with nothing awaited since the go: the guard must not
        // run COMMAND a moment without the lease's deadline.
        if let Some(countdown) = held.countdown.as_ref() {
            let policy = self.stop_policy();
            child.first_deadline(countdown.stop_at_boot(), policy.signal, policy.grace);
        }
        Ok((child, offer))
    }

    /// Records the started child's group beside the lock, tells its guard
    /// whether it may let go of the lock (promised that with `offer`), and
    /// hands it the deadline by which it must have stopped COMMAND.
    async fn started(
        &self,
        mut child: G::Child,
        pgid: u32,
        held: &mut Held<E::Claim, E::Lease>,
        offer: bool,
    ) -> G::Child {
        if let Err(e) = held.claim.record_child(pgid).await {
            tracing::warn!("could not record the child's group beside the lock: {e}");
        }
        // After the child's group is recorded: once the guard may let go,
        // we write nothing beside the lock.
        let mut told = false;
        if offer {
            held.claim.hand_over(|swap| {
                told = child.hand_over(Verdict::LetGo { swap });
                told
            });
        }
        if !told {
            child.hand_over(Verdict::Keep);
        }
        let policy = self.stop_policy();
        if let (Some(countdown), Some(deadlines)) = (
            held.countdown.as_mut(),
            child.deadlines(policy.signal, policy.grace),
        ) {
            countdown.hand_to_guard(deadlines);
        }
        child
    }

    fn stop_policy(&self) -> StopPolicy {
        StopPolicy {
            signal: self.config.child.kill_signal,
            grace: self.config.child.kill_timeout,
            loss_grace: self.config.loss_grace(),
        }
    }

    /// Runs the child until it exits or the lock is lost (the lease runs
    /// out, the engine's watch says so, an operator releases it).
    async fn run(
        &mut self,
        child: &mut G::Child,
        held: &mut Held<E::Claim, E::Lease>,
        hook_env: &[(OsString, OsString)],
    ) -> Ending {
        let policy = self.stop_policy();
        let notifier = self.service.notifier();
        let released = &mut *self.released;
        let Held {
            claim,
            lease,
            countdown,
            ..
        } = held;
        let beacon = &self.service.ops.beacon;
        let (warn, mut warnings) = tokio::sync::mpsc::unbounded_channel();
        let containment = self.config.child.containment;
        // An --on-jeopardy hook still running when the hold ends is stopped
        // before the lock is given up, as every hook is.
        let jeopardy_hook = tokio::sync::Mutex::new(None);
        let jeopardy = Jeopardy {
            ops: &self.service.ops,
            hook_env,
            containment,
            warn,
            hook: &jeopardy_hook,
        };
        // `--register-service`: registered now that COMMAND runs, taken out
        // the moment its stop begins (or once it has exited), and in any
        // case before the lock is given up.
        let catalog = self.service.ops.catalog.as_ref();
        let budget = self.config.budget.as_ref();
        let listed = async {
            match catalog {
                Some(catalog) => catalog.keep(beacon, budget).await,
                None => std::future::pending().await,
            }
        };
        let withdraw = tokio::sync::Notify::new();
        let asked = claim.asked();
        let lost = async {
            let lost = tokio::select! {
                never = listed => match never {},
                never = jeopardy.watch() => match never {},
                lost = keep(countdown, lease) => lost,
                lost = claim.watch() => lost,
                _ = released.recv() => Lost::Released("an operator released the lock (`lockrun release`)".into()),
                note = asked_for(asked) => Lost::Released(note.taken_over()),
                never = notify::watchdog_loop(notifier) => match never {},
            };
            // Before the stop begins: `/leader` says so first.
            beacon.lost(&lost);
            withdraw.notify_one();
            lost
        };
        let time_up = async {
            time_up(self.config.child.max_time).await;
            // Before the stop begins: `/leader` and /metrics say so first.
            beacon.time_up();
            withdraw.notify_one();
        };
        let ending = {
            let supervised =
                supervise::supervise(child, self.signals, lost, time_up, &mut warnings, policy);
            tokio::pin!(supervised);
            match catalog {
                None => supervised.await,
                Some(catalog) => {
                    // A loss or --max-time takes the service out while the stop
                    // runs; any other end, once COMMAND has exited.
                    let (ending, withdrawn) = tokio::select! {
                        biased;
                        ending = &mut supervised => (ending, false),
                        () = withdraw.notified() => {
                            (tokio::join!(&mut supervised, catalog.withdraw()).0, true)
                        }
                    };
                    if !withdrawn {
                        catalog.withdraw().await;
                    }
                    ending
                }
            }
        };
        if let Some(mut hook) = jeopardy_hook.lock().await.take() {
            hook.stop().await;
        }
        beacon.jeopardy(false);
        // A lockrun that could not run past its deadline (stopped, starved,
        // suspended) may find the child already ended by the guard: the lock
        // was lost, whoever stopped the child.
        let ending = match ending {
            Ending::Exited { exit, .. }
                if held.countdown.as_ref().is_some_and(Countdown::ran_out) =>
            {
                let why = held
                    .countdown
                    .as_ref()
                    .map(Countdown::ran_out_reason)
                    .expect("checked above");
                Ending::Lost(why, exit)
            }
            ending => ending,
        };
        replaced_by(&held.claim, ending).await
    }

    /// The child is done, but the lock stays ours until `--min-hold` from
    /// acquisition, so later contenders of the same period find it held.
    /// Nothing runs meanwhile, so a loss costs nothing; a signal ends it.
    async fn min_hold(&mut self, held: &mut Held<E::Claim, E::Lease>) {
        let Some(min_hold) = self.service.min_hold else {
            return;
        };
        let until = held.acquired_at + min_hold;
        if Instant::now() >= until {
            return;
        }
        let target = self.target.name();
        tracing::info!(
            lock = target,
            until_ms = (until - Instant::now()).as_millis() as u64,
            "child exited; keeping the lock for --min-hold"
        );
        self.service
            .status(&format!("keeping `{target}` for --min-hold"));
        let Held {
            claim,
            lease,
            countdown,
            ..
        } = held;
        tokio::select! {
            _ = tokio::time::sleep_until(until) => {}
            lost = keep(countdown, lease) => tracing::info!("lost during --min-hold: {lost}"),
            lost = claim.watch() => tracing::info!("lost during --min-hold: {lost}"),
            _ = self.released.recv() => tracing::info!("released by an operator during --min-hold"),
            signal = self.signals.recv() => tracing::info!("{signal} during --min-hold; releasing"),
            never = notify::watchdog_loop(self.service.notifier()) => match never {},
        }
    }

    /// Releases the claim and closes the lease; quickly after a lease that
    /// ran out for want of answers, since the engine is then as good as
    /// gone. Signals wait until it is done: the child is gone already, and
    /// what we release now is what a waiter needs.
    async fn clean_up(&self, held: Held<E::Claim, E::Lease>, ending: &Ending) {
        let within = match ending {
            Ending::Lost(Lost::LeaseRanOut { .. }, _) => CLEANUP_AFTER_SILENCE,
            _ => CLEANUP_TIMEOUT,
        };
        cleanup_within::<E>(self.target, Some(held.claim), held.lease, within).await;
    }

    /// How the round ended, logged.
    fn ended(&self, ending: Ending, held_for: Duration) -> Outcome {
        let target = self.target.name();
        match ending {
            Ending::Exited { exit, forwarded } => {
                tracing::info!(
                    target: EVENT,
                    lock = target,
                    status = exit.code(),
                    "child exited; released"
                );
                Outcome::Done(child_ended(exit, forwarded))
            }
            Ending::Lost(why, exit) => {
                let message = format!(
                    "lost `{target}` after {}: {why}; the child was stopped (status {})",
                    fmt_duration(held_for),
                    exit.code()
                );
                let replaced = matches!(&why, Lost::Released(text) if text.starts_with(crate::backend::TAKEN_OVER));
                if self.campaign && !replaced {
                    tracing::warn!(target: EVENT, "{message}");
                } else {
                    tracing::error!(target: EVENT, "{message}");
                }
                if replaced {
                    if self.campaign {
                        tracing::info!(target: EVENT, lock = target, "replaced: not campaigning again");
                    }
                    Outcome::Replaced
                } else {
                    Outcome::Lost
                }
            }
            Ending::TimeUp(exit) => {
                tracing::warn!(
                    target: EVENT,
                    lock = target,
                    "the job ran --max-time {} and was stopped (status {}); released `{target}`",
                    self.config
                        .child
                        .max_time
                        .map(fmt_duration)
                        .unwrap_or_default(),
                    exit.code()
                );
                Outcome::TimeUp
            }
        }
    }
}

/// Resolves with the note once `--replace` has left one for this claim
/// ([`crate::backend::Claim::asked`]): the holder then stops its command
/// as on a release, and lets the lock go only once the tree is gone.
/// Never, where the engine keeps no note.
async fn asked_for(asked: Option<crate::backend::Asked>) -> crate::backend::ReplaceNote {
    match asked {
        Some(asked) => asked.await,
        None => std::future::pending().await,
    }
}

/// How long a holder that lost its lock to someone's release reads the
/// note `--replace` may have left it, once its command has stopped.
const NOTE_READ: Duration = Duration::from_secs(2);

/// A loss to someone's release, told as `--replace`'s when the replacer
/// left this claim a note ([`crate::backend::ReplaceNote`]): read only
/// once the command is stopped, so the read never delays the stop, and
/// within [`NOTE_READ`].
async fn replaced_by<C: Claim>(claim: &C, ending: Ending) -> Ending {
    let Ending::Lost(why @ (Lost::Released(_) | Lost::Watch(_) | Lost::SessionGone(_)), exit) =
        ending
    else {
        return ending;
    };
    match tokio::time::timeout(NOTE_READ, claim.replaced_by()).await {
        Ok(Some(note)) => Ending::Lost(Lost::Released(note.taken_over()), exit),
        _ => Ending::Lost(why, exit),
    }
}

/// `--warn-before`: watches the deadline the countdown publishes, and
/// when the lease has gone unconfirmed until `before` ahead of it, puts the
/// job in jeopardy (the `--warn-signal` to `warn`, which the supervisor
/// passes on, `--on-jeopardy`, the beacon); a renewal that moves the
/// deadline out again ends it (`--warn-clear-signal`). It never returns,
/// and only ever waits: the stop is the countdown's alone.
struct Jeopardy<'a> {
    ops: &'a crate::ops::Ops,
    hook_env: &'a [(OsString, OsString)],
    containment: ContainmentMode,
    warn: tokio::sync::mpsc::UnboundedSender<Signal>,
    /// The `--on-jeopardy` hook while it runs.
    hook: &'a tokio::sync::Mutex<Option<crate::ops::hooks::Running>>,
}

impl Jeopardy<'_> {
    async fn watch(&self) -> Infallible {
        let (ops, warn) = (self.ops, &self.warn);
        let Some(warning) = ops.warning else {
            return std::future::pending().await;
        };
        let mut published = ops.beacon.subscribe();
        let mut in_jeopardy = false;
        loop {
            let deadline = published.borrow_and_update().deadline;
            if let Some(deadline) = deadline {
                let left = deadline.left();
                if in_jeopardy && left > warning.before {
                    in_jeopardy = false;
                    ops.beacon.jeopardy(false);
                    tracing::info!(
                        target: EVENT,
                        "a renewal was confirmed: out of jeopardy, {} left",
                        fmt_duration(left)
                    );
                    if let Some(signal) = warning.clear {
                        let _ = warn.send(signal);
                    }
                } else if !in_jeopardy {
                    let warn_in = left.saturating_sub(warning.before);
                    tokio::select! {
                        () = tokio::time::sleep(warn_in) => {}
                        changed = published.changed() => {
                            if changed.is_err() {
                                return std::future::pending().await;
                            }
                            continue;
                        }
                    }
                    in_jeopardy = true;
                    ops.beacon.jeopardy(true);
                    tracing::warn!(
                        target: EVENT,
                        "the lease is in jeopardy: unconfirmed, {} left before COMMAND is stopped",
                        fmt_duration(deadline.left())
                    );
                    if let Some(signal) = warning.signal {
                        let _ = warn.send(signal);
                    }
                    self.run_hook().await;
                    continue;
                }
            }
            if published.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Runs `--on-jeopardy` to its end or `--hook-timeout`, kept where
    /// [`Round::run`] stops it if the hold ends first.
    async fn run_hook(&self) {
        use crate::ops::hooks::Event;
        let mut slot = self.hook.lock().await;
        match self
            .ops
            .hooks
            .start(Event::Jeopardy, self.hook_env, self.containment)
        {
            Ok(Some(hook)) => *slot = Some(hook),
            Ok(None) => return,
            Err(why) => {
                tracing::warn!(hook = Event::Jeopardy.name(), "{why}");
                return;
            }
        }
        if let Some(hook) = slot.as_mut() {
            match hook.finish().await {
                Ok(()) => tracing::info!(hook = Event::Jeopardy.name(), "--on-jeopardy finished"),
                Err(why) => tracing::warn!(hook = Event::Jeopardy.name(), "{why}"),
            }
        }
        *slot = None;
    }
}

/// Ready once the job has run `max_time` from now, on the boot-time
/// clock, so that a suspend counts; never without a `--max-time`.
async fn time_up(max_time: Option<Duration>) {
    let Some(max_time) = max_time else {
        return std::future::pending().await;
    };
    let at = crate::clock::boottime() + max_time;
    let boot = async {
        match crate::clock::BootTimer::on_runtime() {
            Ok(timer) => crate::clock::BootTimer::sleep_until(&timer, at).await,
            // Without the timer, the monotonic clock below: only a suspend
            // goes uncounted.
            Err(_) => std::future::pending().await,
        }
    };
    // The monotonic clock never runs ahead of the boot-time one; it is what
    // paused time in tests moves.
    tokio::select! {
        () = boot => {}
        () = tokio::time::sleep(max_time) => {}
    }
}

/// What the wait for the lock ended with.
enum Waited<C, Err> {
    /// With whether the guard started the child on the grant.
    Acquired(Result<(Acquisition<C>, bool), Err>),
    Signal(Signal),
    Lost(Lost),
}

/// A claim and what keeps it: the lease, its countdown, and when it
/// became ours.
struct Held<C, L> {
    claim: C,
    lease: L,
    countdown: Option<Countdown>,
    acquired_at: Instant,
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
