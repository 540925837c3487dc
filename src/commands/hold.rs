//! The life of one `elect` or `semaphore` run: session, lease, acquisition,
//! the child under supervision, and cleanup on every path.

use std::ffi::OsString;
use std::time::Duration;

use tokio::time::Instant;

use crate::child::{self, Child};
use crate::config::HoldConfig;
use crate::consul::{Client, ConsulError, SessionId};
use crate::error::Failure;
use crate::exit::Exit;
use crate::lease::{fmt_duration, Lease, Lost, Renew, Renewal};
use crate::lock::{self, leader, semaphore, Acquired, Held, Patience};
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
    campaign: bool,
) -> Result<Exit, Failure> {
    let mut signals =
        Signals::new().map_err(|e| Failure::Internal(format!("cannot handle signals ({e})")))?;
    let patience = crate::config::deadline(config.patience);
    loop {
        match round(client, target, config, patience, campaign, &mut signals).await? {
            Round::Done(exit) => return Ok(exit),
            Round::Lost if campaign => {
                tracing::info!(lock = target.name(), "campaigning again");
            }
            Round::Lost => return Ok(Exit::Lost),
            Round::Retry => {}
        }
    }
}

fn interrupted(signal: Signal) -> Exit {
    Exit::Interrupted(128u8.saturating_add(signal.number() as u8))
}

/// Creates the session, retrying transient failures within the patience
/// the user gave (for ever in campaign mode: a daemon outlives an agent
/// restart), so that a blip costs time, not the run.
async fn create_session(
    client: &Client,
    config: &HoldConfig,
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
            signal = signals.recv() => return Ok(Err(interrupted(signal))),
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
                tokio::select! {
                    retried = retry.pause("creating a session", e) => retried?,
                    signal = signals.recv() => return Ok(Err(interrupted(signal))),
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
    patience: Patience,
    campaign: bool,
    signals: &mut Signals,
) -> Result<Round, Failure> {
    let (session, created_at) =
        match create_session(client, config, patience, campaign, signals).await? {
            Ok(created) => created,
            Err(exit) => return Ok(Round::Done(exit)),
        };
    tracing::info!(lock = target.name(), session = %session, "session created");
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
                guard_exe,
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
            Err(Ok(Round::Done(interrupted(signal))))
        }
        Waited::Lost(why) => {
            // Our session may be gone while we waited; start over with a new one.
            tracing::warn!("session lost while waiting: {why}");
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
        lock = target.name(),
        session = %session,
        lock_index = held.lock_index,
        waited_ms = started.elapsed().as_millis() as u64,
        "acquired"
    );

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
    };
    let ending = {
        let lost = async {
            tokio::select! {
                lost = lease.keep(&renewer) => lost,
                lost = holding.watch(client) => lost,
            }
        };
        supervisor::supervise(&mut child, signals, lost, policy).await
    };
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
        Ending::Exited(exit) => {
            tracing::info!(
                lock = target.name(),
                status = exit.code(),
                "child exited; released"
            );
            Ok(Round::Done(Exit::Child(exit.code())))
        }
        Ending::Lost(why, exit) => {
            let message = format!(
                "lost `{}` after {}: {why}; the child was stopped (status {})",
                target.name(),
                fmt_duration(held_for),
                exit.code()
            );
            if campaign {
                tracing::warn!("{message}");
            } else {
                tracing::error!("{message}");
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
