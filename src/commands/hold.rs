//! The life of one `elect` or `semaphore` run: session, lease, acquisition,
//! the child under supervision, and cleanup on every path.

use std::cell::Cell;
use std::convert::Infallible;
use std::ffi::OsString;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::consul::lock::{self, leader, semaphore, Acquired, Held, Patience};
use crate::backend::consul::{Client, ConsulError, SessionId};
use crate::child::{self, Child, ChildExit};
use crate::config::HoldConfig;
use crate::error::Failure;
use crate::exit::Exit;
use crate::lease::{fmt_duration, Lease, Lost, Renew, Renewal};
use crate::logging::EVENT;
use crate::notify::{self, Notifier, Ready};
use crate::signals::{Signal, Signals};
use crate::supervisor::{self, Ending, StopPolicy};

/// How long cleanup may take before we leave the rest to Consul (the
/// session's TTL releases whatever we could not).
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    Leader { key: &'a str },
    Semaphore { prefix: &'a str, limit: u64 },
}

impl Target<'_> {
    fn name(&self) -> &str {
        match self {
            Target::Leader { key } => key,
            Target::Semaphore { prefix, .. } => prefix,
        }
    }
}

enum Holding {
    Leader(leader::Holding),
    Semaphore(semaphore::Holding),
}

impl Holding {
    fn held(&self) -> &Held {
        match self {
            Holding::Leader(h) => &h.held,
            Holding::Semaphore(h) => &h.held,
        }
    }

    async fn watch(&mut self, client: &Client) -> Lost {
        match self {
            Holding::Leader(h) => h.watch(client).await,
            Holding::Semaphore(h) => h.watch(client).await,
        }
    }

    fn modify_index(&self) -> Option<u64> {
        match self {
            Holding::Leader(h) => Some(h.modify_index),
            Holding::Semaphore(_) => None,
        }
    }
}

/// Renews a Consul session for the lease.
struct SessionRenewer<'a> {
    client: &'a Client,
    id: &'a SessionId,
}

impl Renew for SessionRenewer<'_> {
    async fn renew(&self, timeout: Duration) -> Renewal {
        match self.client.session_renew(self.id, timeout).await {
            Ok(ttl) => Renewal::Confirmed { ttl },
            Err(ConsulError::NotFound { .. }) => {
                Renewal::Gone(format!("Consul no longer knows session {}", self.id))
            }
            Err(e) => Renewal::Failed(e.to_string()),
        }
    }
}

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
    /// The session went away while we waited: wait again with a new one.
    Retry,
}

pub async fn run(
    client: &Client,
    target: Target<'_>,
    config: &HoldConfig,
    service: &Service,
    campaign: bool,
) -> Result<Exit, Failure> {
    let mut signals =
        Signals::new().map_err(|e| Failure::Internal(format!("cannot handle signals ({e})")))?;
    let patience = crate::config::deadline(config.patience);
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
    let exit = loop {
        let round = round(
            client,
            target,
            config,
            service,
            &ready_sent,
            patience,
            campaign,
            &mut signals,
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

/// Creates the session, retrying transient failures within the patience
/// the user gave (for ever in campaign mode: a daemon outlives an agent
/// restart), so that a blip costs time, not the run.
async fn create_session(
    client: &Client,
    config: &HoldConfig,
    service: &Service,
    patience: Patience,
    campaign: bool,
    signals: &mut Signals,
) -> Result<Result<(SessionId, Instant), Exit>, Failure> {
    let mut retry = lock::Retry::new(if campaign {
        Patience::Forever
    } else {
        patience
    });
    let mut first = true;
    loop {
        let sent = Instant::now();
        let created = tokio::select! {
            created = client.session_create(&config.session) => created,
            signal = signals.recv() => return Ok(Err(Exit::Interrupted(signal))),
        };
        match created {
            Ok(id) => return Ok(Ok((id, sent))),
            // No agent, or TLS refused, at the first contact is a wrong
            // address or certificate far more often than a blip: a one-off
            // run says so at once.
            Err(e @ (ConsulError::Unreachable { .. } | ConsulError::Tls { .. }))
                if first && !campaign =>
            {
                return Err(e.into())
            }
            Err(e) => {
                first = false;
                if e.is_transient() {
                    service.status(&format!("engine unreachable, retrying: {e}"));
                }
                tokio::select! {
                    retried = retry.pause("creating a session", e) => retried?,
                    signal = signals.recv() => return Ok(Err(Exit::Interrupted(signal))),
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn round(
    client: &Client,
    target: Target<'_>,
    config: &HoldConfig,
    service: &Service,
    ready_sent: &Cell<bool>,
    patience: Patience,
    campaign: bool,
    signals: &mut Signals,
) -> Result<Round, Failure> {
    let (session, created_at) =
        match create_session(client, config, service, patience, campaign, signals).await? {
            Ok(created) => created,
            Err(exit) => return Ok(Round::Done(exit)),
        };
    tracing::info!(lock = target.name(), session = %session, "session created");
    // The budget holds only for the session we asked for: read it back
    // before anything depends on it.
    let verified = match client.session_info(session.as_str()).await {
        Ok(Some(info)) => info.verify(&config.session).map_err(Failure::Config),
        Ok(None) => {
            tracing::warn!("session {session} vanished at once; creating another");
            return Ok(Round::Retry);
        }
        Err(e) if campaign && e.is_transient() => {
            // A daemon outlives an agent restart: start the round over.
            tracing::warn!("cannot read session {session} back: {e}; retrying");
            cleanup(client, target, &session, None, &config.value).await;
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                signal = signals.recv() => return Ok(Round::Done(Exit::Interrupted(signal))),
            }
            return Ok(Round::Retry);
        }
        Err(e) => Err(e.into()),
    };
    if let Err(failure) = verified {
        cleanup(client, target, &session, None, &config.value).await;
        return Err(failure);
    }
    // The guard starts now, parked, so that its start-up overlaps the wait
    // instead of delaying COMMAND once the lock is ours. It runs nothing
    // until `start`; every path below that does not start it drops it, which
    // ends it.
    let prepared = child::guard_exe()
        .map_err(|e| Failure::Internal(format!("cannot find lockrun's own executable ({e})")))
        .and_then(|guard_exe| {
            let command = child::Command {
                argv: config.child.argv.clone(),
                shell: config.child.shell,
                env: Vec::new(),
                env_remove: match service.notify {
                    Some(_) => notify::VARIABLES.iter().map(OsString::from).collect(),
                    None => Vec::new(),
                },
                guard_exe,
                hold_fd: None,
            };
            Child::prepare(&command).map_err(|e| {
                Failure::Internal(format!(
                    "cannot start the child ({})",
                    crate::config::io_reason(&e)
                ))
            })
        });
    let prepared = match prepared {
        Ok(prepared) => prepared,
        Err(failure) => {
            cleanup(client, target, &session, None, &config.value).await;
            return Err(failure);
        }
    };
    let renewer = SessionRenewer {
        client,
        id: &session,
    };
    let watchdog = || notify::watchdog_loop(service.notifier());
    let mut lease = Lease::new(config.budget, created_at);
    let started = Instant::now();

    enum Waited {
        Acquired(Result<Acquired<Holding>, lock::AcquireError>),
        Signal(Signal),
        Lost(Lost),
    }
    let acquisition = acquire(client, target, &session, &config.value, patience);
    let waited = tokio::select! {
        signal = signals.recv() => Waited::Signal(signal),
        lost = lease.keep(&renewer) => Waited::Lost(lost),
        acquired = with_deadline(patience, acquisition) => Waited::Acquired(acquired),
        never = watchdog() => match never {},
    };
    // `Err` carries how the round ends when the lock is not ours.
    let outcome = match waited {
        Waited::Acquired(Ok(Acquired::Yes(holding))) => Ok(holding),
        Waited::Acquired(Ok(Acquired::No { holder })) => {
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
            // Our session may be gone while we waited; start over with a new one.
            tracing::warn!(target: EVENT, "session lost while waiting: {why}");
            Err(Ok(Round::Retry))
        }
    };
    let mut holding = match outcome {
        Ok(holding) => holding,
        Err(round) => {
            // COMMAND does not run this round: the parked guard goes first.
            drop(prepared);
            cleanup(client, target, &session, None, &config.value).await;
            return round;
        }
    };
    let held = holding.held().clone();
    let acquired_at = Instant::now();
    tracing::info!(
        target: EVENT,
        lock = target.name(),
        session = %session,
        lock_index = held.lock_index,
        waited_ms = started.elapsed().as_millis() as u64,
        "acquired"
    );
    let leading = match target {
        Target::Leader { key } => format!("leading `{key}` since {}", now_utc()),
        Target::Semaphore { prefix, limit } => {
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

    let mut child = match prepared.start(child_env(&held)) {
        Ok(child) => child,
        Err(e) => {
            cleanup(
                client,
                target,
                &session,
                holding.modify_index(),
                &config.value,
            )
            .await;
            return Err(Failure::Internal(format!(
                "cannot start the child ({})",
                crate::config::io_reason(&e)
            )));
        }
    };
    let policy = StopPolicy {
        signal: config.child.kill_signal,
        grace: config.child.kill_timeout,
        loss_grace: config.budget.loss_grace(),
    };
    if let Some(deadlines) = child.deadlines(policy.signal, policy.grace) {
        lease.hand_to_guard(deadlines);
    }
    let ending = {
        let lost = async {
            tokio::select! {
                lost = lease.keep(&renewer) => lost,
                lost = holding.watch(client) => lost,
                never = watchdog() => match never {},
            }
        };
        supervisor::supervise(&mut child, signals, lost, policy).await
    };
    // A lockrun that could not run past its deadline (stopped, starved,
    // suspended) may find the child already ended by the guard: the lock
    // was lost, whoever stopped the child.
    let ending = match ending {
        Ending::Exited { exit, .. } if lease.ran_out() => {
            Ending::Lost(lease.ran_out_reason(), exit)
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
                lost = lease.keep(&renewer) => tracing::info!("lost during --min-hold: {lost}"),
                lost = holding.watch(client) => tracing::info!("lost during --min-hold: {lost}"),
                signal = signals.recv() => tracing::info!("{signal} during --min-hold; releasing"),
                never = watchdog() => match never {},
            }
        }
    }
    let held_for = acquired_at.elapsed();
    cleanup(
        client,
        target,
        &session,
        holding.modify_index(),
        &config.value,
    )
    .await;
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

async fn acquire(
    client: &Client,
    target: Target<'_>,
    session: &SessionId,
    value: &[u8],
    patience: Patience,
) -> Result<Acquired<Holding>, lock::AcquireError> {
    Ok(match target {
        Target::Leader { key } => {
            match leader::acquire(client, key, session, value, patience).await? {
                Acquired::Yes(h) => Acquired::Yes(Holding::Leader(h)),
                Acquired::No { holder } => Acquired::No { holder },
            }
        }
        Target::Semaphore { prefix, limit } => {
            match semaphore::acquire(client, prefix, session, value, limit, patience).await? {
                Acquired::Yes(h) => Acquired::Yes(Holding::Semaphore(h)),
                Acquired::No { holder } => Acquired::No { holder },
            }
        }
    })
}

/// `--timeout` bounds the whole acquisition, whatever it is doing.
async fn with_deadline<T>(
    patience: Patience,
    acquisition: impl std::future::Future<Output = Result<Acquired<T>, lock::AcquireError>>,
) -> Result<Acquired<T>, lock::AcquireError> {
    match patience.deadline() {
        Some(at) => match tokio::time::timeout_at(at, acquisition).await {
            Ok(result) => result,
            Err(_) => Ok(Acquired::No { holder: None }),
        },
        None => acquisition.await,
    }
}

/// Releases what we may hold and destroys the session, on every path. An
/// acquisition that was cancelled may have gone through, so we always
/// release; both calls are idempotent. Failures are reported, not fatal:
/// the session's TTL ends whatever we could not.
async fn cleanup(
    client: &Client,
    target: Target<'_>,
    session: &SessionId,
    modify_index: Option<u64>,
    value: &[u8],
) {
    let work = async {
        let released = match target {
            Target::Leader { key } => {
                leader::release(client, key, session, value, modify_index).await
            }
            Target::Semaphore { prefix, .. } => semaphore::release(client, prefix, session).await,
        };
        if let Err(e) = released {
            tracing::warn!("could not release `{}`: {e}", target.name());
        }
        if let Err(e) = client.session_destroy(session).await {
            tracing::warn!("could not destroy session {session}: {e}");
        }
    };
    if tokio::time::timeout(CLEANUP_TIMEOUT, work).await.is_err() {
        tracing::warn!(
            "cleanup did not finish within {}; Consul will expire session {session}",
            fmt_duration(CLEANUP_TIMEOUT)
        );
    }
}

fn child_env(held: &Held) -> Vec<(OsString, OsString)> {
    vec![
        ("LOCKRUN_KEY".into(), held.key.clone().into()),
        ("LOCKRUN_SESSION".into(), held.session.to_string().into()),
        (
            "LOCKRUN_LOCK_INDEX".into(),
            held.lock_index.to_string().into(),
        ),
        ("CONSUL_LOCK_HELD".into(), "true".into()),
    ]
}
