//! Consul behind the seam: a session is the [`Lease`], the Go API's lock
//! and semaphore algorithms ([`lock`](super::lock)) acquire, and a held key
//! or slot is the [`Claim`].

use std::cell::{Cell, RefCell};
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::time::Duration;

use tokio::time::Instant;

use super::kv::Read;
use super::lock::{leader, semaphore, shared, AcquireError, Acquired, Held, Retry};
use super::{Client, ConsulError, SessionId, SessionSpec};
use crate::backend::{
    Acquisition, Claim, Engine, EngineError, Lease, Lost, Opening, Renewal, ReplaceNote, Target,
    Wait,
};

/// Consul as lockrun's engine: a client and the session every run asks for.
#[derive(Debug, Clone)]
pub struct Consul {
    client: Client,
    session: SessionSpec,
    /// How its writers rank among the waiters (`elect --priority`).
    rank: crate::backend::priority::Priority,
}

impl Consul {
    pub fn new(client: Client, session: SessionSpec) -> Consul {
        Consul {
            client,
            session,
            rank: crate::backend::priority::Priority::NONE,
        }
    }

    /// The same engine, waiting for a leader lock with `rank`.
    pub fn ranked(self, rank: crate::backend::priority::Priority) -> Consul {
        Consul { rank, ..self }
    }
}

impl EngineError for AcquireError {
    fn is_transient(&self) -> bool {
        match self {
            AcquireError::Consul(e) => e.is_transient(),
            AcquireError::Conflict(_) | AcquireError::Session(_) | AcquireError::Usage(_) => false,
        }
    }
}

/// A session we created, and what its cleanup must release.
#[derive(Debug)]
pub struct ConsulSession {
    client: Client,
    id: SessionId,
    created_at: Instant,
    /// What an acquisition was started on and may have taken even if it was
    /// cancelled: released before the session is destroyed, so that a
    /// cancelled acquisition arms no lock-delay.
    tried: RefCell<Option<Tried>>,
}

#[derive(Debug)]
struct Tried {
    target: Target,
    value: Vec<u8>,
    released: Rc<Cell<bool>>,
}

impl ConsulSession {
    pub fn id(&self) -> &SessionId {
        &self.id
    }
}

impl Lease for ConsulSession {
    fn confirmed_at(&self) -> Instant {
        self.created_at
    }

    async fn renew(&self, timeout: Duration) -> Renewal {
        match self.client.session_renew(&self.id, timeout).await {
            Ok(ttl) => Renewal::Confirmed { ttl },
            Err(ConsulError::NotFound { .. }) => {
                Renewal::Gone(format!("Consul no longer knows session {}", self.id))
            }
            Err(e) => Renewal::Failed(e.to_string()),
        }
    }

    async fn close(self) {
        let tried = self.tried.borrow_mut().take();
        if let Some(tried) = tried {
            if !tried.released.get() {
                release(&self.client, &tried.target, &self.id, &tried.value, None, false).await;
            }
        }
        if let Err(e) = self.client.session_destroy(&self.id).await {
            tracing::warn!("could not destroy session {}: {e}", self.id);
        }
    }
}

async fn release(
    client: &Client,
    target: &Target,
    session: &SessionId,
    value: &[u8],
    modify_index: Option<u64>,
    dot: bool,
) -> bool {
    let released = match target {
        Target::Lock { key, shared: true } => shared::release(client, key, session).await,
        Target::Lock { key, .. } => {
            leader::release(client, key, session, value, modify_index, dot).await
        }
        Target::Slot { prefix, .. } => semaphore::release(client, prefix, session).await,
    };
    match released {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!("could not release `{}`: {e}", target.name());
            false
        }
    }
}

impl Engine for Consul {
    type Lease = ConsulSession;
    type Claim = ConsulClaim;
    type Error = AcquireError;

    /// Creates the session, retrying transient failures within the
    /// patience (for ever for a daemon: it outlives an agent restart), then
    /// reads it back: the budget holds only for the session we asked for.
    async fn open_lease(&self, opening: Opening<'_>) -> Result<ConsulSession, AcquireError> {
        let mut retry = Retry::new(if opening.daemon {
            Wait::Forever
        } else {
            opening.wait
        });
        let mut first = opening.first;
        loop {
            let sent = Instant::now();
            let id = match self.client.session_create(&self.session).await {
                Ok(id) => id,
                // At the first contact a one-off run says at once what
                // is wrong, unless Consul itself says it will pass.
                Err(e) if first && !opening.daemon && !e.may_pass_soon() => return Err(e.into()),
                Err(e) => {
                    first = false;
                    if e.is_transient() {
                        (opening.report)(&format!("engine unreachable, retrying: {e}"));
                    }
                    retry.pause("creating a session", e).await?;
                    continue;
                }
            };
            tracing::info!(session = %id, "session created");
            let session = ConsulSession {
                client: self.client.clone(),
                id,
                created_at: sent,
                tried: RefCell::new(None),
            };
            match self.client.session_info(session.id.as_str()).await {
                Ok(Some(info)) => match info.verify(&self.session) {
                    Ok(()) => return Ok(session),
                    Err(why) => {
                        session.close().await;
                        return Err(AcquireError::Session(why));
                    }
                },
                Ok(None) => {
                    tracing::warn!("session {} vanished at once; creating another", session.id);
                }
                // Consul answered the creation, so this is no first contact:
                // trouble now (an election's 500, say) is waited out within
                // the patience, as any later failure is.
                Err(e) if e.is_transient() => {
                    tracing::warn!("cannot read session {} back: {e}; retrying", session.id);
                    session.close().await;
                    first = false;
                    retry.pause("reading the session back", e).await?;
                }
                Err(e) => {
                    session.close().await;
                    return Err(e.into());
                }
            }
        }
    }

    async fn acquire(
        &self,
        lease: &ConsulSession,
        target: &Target,
        value: &str,
        wait: Wait,
    ) -> Result<Acquisition<ConsulClaim>, AcquireError> {
        let released = Rc::new(Cell::new(false));
        let value = value.as_bytes();
        lease.tried.replace(Some(Tried {
            target: target.clone(),
            value: value.to_vec(),
            released: Rc::clone(&released),
        }));
        let patience = wait;
        let acquired = match target {
            Target::Lock { key, shared: true } => {
                match shared::acquire(&self.client, key, &lease.id, value, patience).await? {
                    Acquired::Yes(h) => Acquired::Yes(Kind::Reader(h)),
                    Acquired::No { holder } => Acquired::No { holder },
                }
            }
            Target::Lock { key, .. } => {
                match leader::acquire(&self.client, key, &lease.id, value, patience, self.rank).await? {
                    Acquired::Yes(h) => Acquired::Yes(Kind::Lock(h)),
                    Acquired::No { holder } => Acquired::No { holder },
                }
            }
            Target::Slot { prefix, limit } => {
                let limit = u64::from(*limit);
                match semaphore::acquire(&self.client, prefix, &lease.id, value, limit, patience)
                    .await?
                {
                    Acquired::Yes(h) => Acquired::Yes(Kind::Slot(h)),
                    Acquired::No { holder } => Acquired::No { holder },
                }
            }
        };
        Ok(match acquired {
            Acquired::Yes(kind) => Acquisition::Held(ConsulClaim {
                client: self.client.clone(),
                target: target.clone(),
                value: value.to_vec(),
                kind,
                released,
            }),
            Acquired::No { holder } => Acquisition::Busy { holder },
        })
    }
}

#[derive(Debug)]
enum Kind {
    Lock(leader::Holding),
    Reader(shared::Holding),
    Slot(semaphore::Holding),
}

/// How long one blocking read of a holder's note waits: a minute, as
/// lockrun's head waiter reads the key, within Consul's ten-minute cap.
const ASK_WAIT: Duration = Duration::from_secs(60);

/// A key or slot our session holds.
#[derive(Debug)]
pub struct ConsulClaim {
    client: Client,
    target: Target,
    value: Vec<u8>,
    kind: Kind,
    /// Shared with the session, so that its close need not release again.
    released: Rc<Cell<bool>>,
}

impl ConsulClaim {
    fn held(&self) -> &Held {
        match &self.kind {
            Kind::Lock(h) => &h.held,
            Kind::Reader(h) => &h.held,
            Kind::Slot(h) => &h.held,
        }
    }
}

impl Claim for ConsulClaim {
    type Error = AcquireError;

    fn fence(&self) -> u64 {
        self.held().lock_index
    }

    fn env(&self) -> Vec<(OsString, OsString)> {
        let held = self.held();
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

    /// Our session: the key's `Session` while it is ours.
    fn holder_id(&self) -> Option<String> {
        Some(self.held().session.to_string())
    }

    async fn replaced_by(&self) -> Option<ReplaceNote> {
        let session = self.held().session.to_string();
        let key = super::inspect::note_key(self.target.name(), &session);
        let (pair, _) = self.client.kv_get(&key, Read::now()).await.ok()?;
        let note = ReplaceNote::decode_for(pair?.value_bytes(), &session)?;
        // Our tree is gone: a replacer on another host waits for this.
        let _ = self.client.kv_delete(&key, None).await;
        Some(note)
    }

    /// A blocking read on the note's key, as `consul lock` waits on its
    /// key: one request a minute while nobody asks. On the watch's
    /// connections (see [`Client::for_watch`]): on the shared pool it took
    /// the one connection the release would have found warm, and the
    /// release connected anew at the handover (`strace`).
    fn asked(&self) -> Option<crate::backend::Asked> {
        let session = self.held().session.to_string();
        let key = super::inspect::note_key(self.target.name(), &session);
        let client = self.client.for_watch();
        Some(Box::pin(async move {
            let mut index = super::blocking::QueryIndex::NONE;
            loop {
                let read = Read {
                    index,
                    wait: (index != super::blocking::QueryIndex::NONE).then_some(ASK_WAIT),
                    ..Read::now()
                };
                match client.kv_get(&key, read).await {
                    Ok((pair, returned)) => {
                        if let Some(note) = pair
                            .and_then(|p| ReplaceNote::decode_for(p.value_bytes(), &session))
                        {
                            return note;
                        }
                        index = index.after(returned);
                    }
                    Err(_) => tokio::time::sleep(crate::backend::ASK_POLL).await,
                }
            }
        }))
    }

    fn take_hold_fd(&mut self) -> Option<OwnedFd> {
        None
    }

    async fn record_child(&mut self, _pgid: u32) -> Result<(), AcquireError> {
        Ok(())
    }

    fn describe(&self) -> String {
        format!("session {}", self.held().session)
    }

    async fn watch(&mut self) -> Lost {
        let client = self.client.for_watch();
        match &mut self.kind {
            Kind::Lock(h) => h.watch(&client).await,
            Kind::Reader(h) => h.watch(&client).await,
            Kind::Slot(h) => h.watch(&client).await,
        }
    }

    /// Releases the key (deleting it with check-and-set when it is still as
    /// we last saw it, as `consul lock` leaves it) or our slot.
    async fn release(self) -> Result<(), AcquireError> {
        let (modify_index, dot) = match &self.kind {
            Kind::Lock(h) => (Some(h.modify_index), h.dot),
            Kind::Reader(_) | Kind::Slot(_) => (None, false),
        };
        let session = self.held().session.clone();
        let done = release(
            &self.client,
            &self.target,
            &session,
            &self.value,
            modify_index,
            dot,
        )
        .await;
        self.released.set(done);
        Ok(())
    }
}
