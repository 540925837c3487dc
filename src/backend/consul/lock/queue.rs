//! A fair queue among lockrun's waiters for one leader key or semaphore
//! prefix, so a release wakes one waiter instead of all of them (as etcd's
//! mutex does it). Each waiter holds an entry `KEY/.lockrun-queue/<session>`
//! (`PREFIX.lockrun-queue/<session>` for a semaphore) with its session;
//! entries are ordered by CreateIndex, and a waiter blocks
//! on the entry just ahead of its own, or on the lock itself once none is
//! ahead. The lock key (or the semaphore's record) alone decides who holds
//! the lock: the queue only decides who tries, so a wrong guess costs a
//! wake-up, never safety.
//!
//! A waiter ahead that stops, dies or loses touch keeps its entry until its
//! session lapses (up to twice the TTL), and the lapse wakes the one behind
//! at no cost. Until then, were it the head, a free lock would wait for it,
//! and only the waiter just behind the head can tell: it looks at the lock
//! every [`STUCK_CHECK`]. The others block on the entry ahead for a whole
//! [`WATCH_WAIT`](super::WATCH_WAIT) and then list the queue again, to learn
//! whether the one ahead has become the head meanwhile. So an idle waiter
//! reads twice a minute (the blocking read, then the listing), where
//! `consul lock`'s waiters read every 15 s. It renews its session as a
//! holder does, as often as `consul lock` does by default: that session is
//! the one that will hold the lock, and the first stop window after
//! acquiring counts from its last renewal while waiting (see
//! [`Budget`](crate::backend::timing::Budget)). A free lock waits for a stuck head at most
//! [`STUCK_CHECK`] once the waiter behind knows it is the head, which it
//! learns within a [`WATCH_WAIT`](super::WATCH_WAIT) and Consul's jitter of
//! a sixteenth: at most 64 s in all.
//!
//! Waiters for a leader lock rank by `elect --priority` (see
//! [`crate::backend::priority`]): an entry's value is `{"priority",
//! "value"}` (an older lockrun's empty entry, or one that does not decode,
//! counts as 0), and the queue is ordered by priority first, then by
//! CreateIndex, so a lower waiter stays behind every live higher entry,
//! never waiting on the lock itself while one is there. The head of a ranked queue blocks on
//! `KEY` read recursively (the lock and its queue in one blocking read, no
//! polling), so that a higher waiter that comes later sends it back
//! behind. A head
//! of a higher priority that sits still is trusted for `--priority-grace`
//! instead of [`STUCK_CHECK`], and a free lock is left to it only for that
//! long ([`crate::backend::priority::Deferral`]).
//!
//! A lockrun holder of a leader key hands it to the head of this queue as it
//! lets go ([`leader::release`](super::leader::release)), if the head said
//! in its entry that it waits on the key ([`Line::ready`]): the head's
//! blocking read of the key finds it holding. A head that died after it
//! said so is handed the lock all the same, and keeps it until its session
//! lapses and its lock-delay passes; the waiter behind it, which wakes as
//! the head's entry goes with the hand-off, then takes it.
//!
//! `--replace` puts an entry of its own at
//! [`REPLACE`](crate::backend::priority::REPLACE), above every waiter's
//! ([`GoAhead`]), that never says it is ready: while it is the head the
//! holder's release hands the lock to nobody and frees it, the replacer's
//! own waiter (which does not count that entry) takes it, and every other
//! waiter defers to it as to any higher head.
//!
//! `consul lock` ignores the queue and competes as before; a token that may
//! not write the queue's keys turns the queue off and waiters wait as they
//! did without.

use std::time::Duration;

use crate::backend::consul::blocking::QueryIndex;
use crate::backend::consul::kv::Read;
use crate::backend::consul::txn::{Txn, TxnOp};
use crate::backend::consul::{Client, ConsulError, KvPair, SessionId};

use super::Waiter;
use crate::backend::priority::Priority;
use crate::backend::Wait;

/// How long the waiter just behind the head trusts the head's unchanged
/// entry before it checks whether the lock is free with nobody taking it.
pub const STUCK_CHECK: Duration = Duration::from_secs(10);

/// The queue of a leader key: under the key, where a blocking read of the
/// key alone does not see it.
pub fn of_key(key: &str) -> String {
    format!("{key}/.lockrun-queue/")
}

/// The queue of a semaphore: beside the prefix, not under it, so that
/// queueing does not wake the waiter that watches the slots (every entry
/// under the prefix moves the listing's index). A token confined to
/// `PREFIX/` cannot write it, and then its waiters do without a queue.
pub fn of_prefix(prefix: &str) -> String {
    format!("{prefix}.lockrun-queue/")
}

pub fn entry_key(queue: &str, session: &SessionId) -> String {
    format!("{queue}{session}")
}

/// One acquisition's standing in a queue: the same for a leader key and a
/// semaphore.
#[derive(Debug)]
pub struct Line {
    prefix: String,
    /// Our entry, once we queued; `None` before, or when the queue cannot
    /// be used.
    pub place: Option<Place>,
    /// Whether joining is settled: we queued, or the queue cannot be used,
    /// or we try only once and never wait.
    joined: bool,
    /// Nobody is ahead of us: we wait on the lock itself.
    pub head: bool,
    /// The entry we block on, as last seen, kept across a look at the lock
    /// so that an unchanged queue is not listed again.
    ahead: Option<Ahead>,
    /// Our rank, for a leader lock's queue; `None` for a semaphore's, whose
    /// entries carry none.
    rank: Option<Priority>,
    /// Our entry's value as written (a leader lock's queue), and whether it
    /// says yet that we wait on the lock itself ([`Line::ready`]).
    entry: Option<serde_json::Value>,
    ready: bool,
}

/// An entry's priority: 0 for one that carries none.
pub fn level_of(pair: &KvPair) -> u32 {
    decoded(pair)["priority"]
        .as_u64()
        .and_then(|l| u32::try_from(l).ok())
        .unwrap_or(0)
}

/// Whether an entry says its waiter waits on the lock itself (see
/// [`Line::ready`]).
pub fn is_ready(pair: &KvPair) -> bool {
    decoded(pair)["ready"].as_bool() == Some(true)
}

/// An entry's `--value`, when it carries one.
pub fn value_of(pair: &KvPair) -> Option<String> {
    decoded(pair)["value"].as_str().map(str::to_owned)
}

fn decoded(pair: &KvPair) -> serde_json::Value {
    pair.value
        .as_deref()
        .and_then(|v| serde_json::from_slice(v).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// Whether an entry is `--replace`'s place ahead of the waiters
/// ([`GoAhead::put`]) put by this process: our own waiter queues as if it
/// were not there, every other waiter defers to it.
fn put_by_us(pair: &KvPair) -> bool {
    let by = &decoded(pair)["replacing"];
    by["pid"].as_u64() == Some(u64::from(std::process::id()))
        && by["host"].as_str() == Some(crate::host::hostname().as_str())
}

/// `--replace`'s place ahead of lockrun's waiters for a leader key: an
/// entry in its queue at [`crate::backend::priority::REPLACE`] that says
/// who put it (host and pid), never `ready`, so that the holder's release
/// hands the lock to nobody while it is the head and simply frees it;
/// every waiter but the replacer's own (see `put_by_us`) stays behind it.
/// It rides on a session of its own (the job's TTL, no checks, deleting
/// what it holds), renewed while it lives: a replacer that dies leaves it
/// to go with that session's lapse.
pub struct GoAhead {
    client: Client,
    session: SessionId,
    entry: String,
    renew: tokio::task::JoinHandle<()>,
}

impl GoAhead {
    pub async fn put(
        client: &Client,
        key: &str,
        ttl: Duration,
        value: &str,
    ) -> Result<GoAhead, ConsulError> {
        let (host, pid) = (crate::host::hostname(), std::process::id());
        let spec = crate::backend::consul::session::SessionSpec {
            name: crate::backend::consul::inspect::session_name(
                &host,
                pid,
                "--replace ahead of the waiters of",
                key,
            ),
            ttl,
            lock_delay: Duration::ZERO,
            behavior: crate::backend::consul::session::Behavior::Delete,
            node_checks: Vec::new(),
            service_checks: Vec::new(),
        };
        let session = client.session_create(&spec).await?;
        let doc = serde_json::json!({
            "priority": crate::backend::priority::REPLACE,
            "value": value,
            "replacing": { "host": host, "pid": pid },
        })
        .to_string();
        let entry = entry_key(&of_key(key), &session);
        let ops = [TxnOp::Lock {
            key: &entry,
            value: doc.as_bytes(),
            flags: 0,
            session: &session,
        }];
        let put = match client.txn(&ops).await {
            Ok(Txn::Applied(_)) => Ok(()),
            Ok(Txn::Refused(refusals)) => Err(refusals
                .iter()
                .find_map(|r| r.error(&entry))
                .unwrap_or_else(|| ConsulError::Rejected {
                    op: crate::backend::consul::Op::KvWrite(entry.clone()),
                    status: 409,
                    body: refusals[0].what.clone(),
                })),
            Err(e) => Err(e),
        };
        if let Err(e) = put {
            let _ = client.session_destroy(&session).await;
            return Err(e);
        }
        let (renewer, id) = (client.clone(), session.clone());
        let every = ttl / 2;
        let renew = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                // A renewal missed is tried again at the next: the entry
                // only orders the waiters, it guards nothing.
                let _ = renewer.session_renew(&id, every).await;
            }
        });
        Ok(GoAhead {
            client: client.clone(),
            session,
            entry,
            renew,
        })
    }
}

impl crate::backend::GoneAhead for GoAhead {
    fn remove(self: Box<Self>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        self.renew.abort();
        let (client, session, entry) = (self.client.clone(), self.session.clone(), self.entry.clone());
        Box::pin(async move {
            // The entry first, so that it is gone whatever the session's
            // behaviour; then the session.
            let deleted = client.kv_delete(&entry, None).await;
            let destroyed = client.session_destroy(&session).await;
            if let Err(e) = deleted.and(destroyed) {
                tracing::warn!("could not withdraw --replace's place ahead of the waiters ({e}); it goes with its session's lapse");
            }
        })
    }
}

impl Drop for GoAhead {
    fn drop(&mut self) {
        self.renew.abort();
    }
}

/// The queue's order: higher priority first, then first come.
fn order(pair: &KvPair) -> (std::cmp::Reverse<u32>, u64, &str) {
    (
        std::cmp::Reverse(level_of(pair)),
        pair.create_index,
        &pair.key,
    )
}

/// The head of a leader lock's queue, as its waiters rank themselves
/// (`order`): the first live entry that is not `ours`.
pub fn head<'a>(pairs: &'a [KvPair], ours: &SessionId) -> Option<&'a KvPair> {
    pairs
        .iter()
        .filter(|p| p.holder().is_some_and(|h| h != ours.as_str()))
        .min_by(|a, b| order(a).cmp(&order(b)))
}

/// The live entry just ahead of ours.
#[derive(Debug)]
struct Ahead {
    entry: KvPair,
    /// Its priority.
    level: u32,
    /// Whether it was the head when we listed the queue. It stays the
    /// head until it leaves: a newcomer queues behind us.
    head: bool,
}

impl Line {
    pub fn new(prefix: String, patience: Wait) -> Line {
        Line {
            prefix,
            place: None,
            joined: matches!(patience, Wait::Once),
            head: true,
            ahead: None,
            rank: None,
            entry: None,
            ready: false,
        }
    }

    /// The queue of a leader lock, whose waiters rank by `rank`.
    pub fn ranked(mut self, rank: Priority) -> Line {
        self.rank = Some(rank);
        self
    }

    /// Our priority, ranked or not.
    pub fn level(&self) -> u32 {
        self.rank.map_or(0, |r| r.level)
    }

    /// The priority of the entry we last blocked on, when it outranks us.
    pub fn higher_ahead(&self) -> Option<u32> {
        self.ahead
            .as_ref()
            .map(|a| a.level)
            .filter(|l| *l > self.level())
    }

    /// Takes our place at the end of the queue, the first time we have to
    /// wait. A failure is retried after the next read.
    pub async fn join(
        &mut self,
        client: &Client,
        session: &SessionId,
        value: &[u8],
        waiter: &mut Waiter,
        what: &str,
    ) -> Result<(), ConsulError> {
        if self.joined {
            return Ok(());
        }
        self.entry = self.rank.map(|r| {
            serde_json::json!({ "priority": r.level, "value": String::from_utf8_lossy(value) })
        });
        let value = self.entry.as_ref().map(serde_json::Value::to_string);
        match enter(client, &self.prefix, session, value.as_deref().unwrap_or("")).await {
            Ok(entered) => {
                self.joined = true;
                self.head = entered.is_none();
                self.place = entered;
                Ok(())
            }
            Err(e) => waiter.retry(what, e).await,
        }
    }

    /// Says in our entry (`"ready": true`, written with our session) that
    /// we, the head of a leader lock's queue, wait on the lock itself, so
    /// that the holder's release may hand it to us
    /// ([`leader::release`](super::leader::release)): a head that never
    /// said so (an entry that stopped before it became the head, an older
    /// lockrun's) is left to take a free lock itself, as it would without
    /// the hand-off, and the waiters behind it check on it. Once, best
    /// effort: a failure only costs the hand-off.
    pub async fn ready(&mut self, client: &Client, session: &SessionId) {
        let (Some(place), Some(entry), false) = (&self.place, &mut self.entry, self.ready) else {
            return;
        };
        self.ready = true;
        entry["ready"] = serde_json::Value::Bool(true);
        let value = entry.to_string();
        let ops = [TxnOp::Lock {
            key: &place.key,
            value: value.as_bytes(),
            flags: 0,
            session,
        }];
        match client.txn(&ops).await {
            Ok(Txn::Applied(_)) => {}
            Ok(Txn::Refused(refusals)) => {
                tracing::debug!(entry = place.key, "cannot say we wait on the lock: {}", refusals[0].what)
            }
            Err(e) => tracing::debug!(entry = place.key, "cannot say we wait on the lock: {e}"),
        }
    }

    /// Waits while others are ahead of us ([`wait_turn`]); once none is,
    /// we are the head.
    pub async fn wait(
        &mut self,
        client: &Client,
        patience: Wait,
        waiter: &mut Waiter,
    ) -> Result<Turn, ConsulError> {
        let Some(ours) = &self.place else {
            self.head = true;
            return Ok(Turn::Head);
        };
        let trust = match self.rank {
            Some(rank) => rank.grace.min(STUCK_CHECK),
            None => STUCK_CHECK,
        };
        let level = self.level();
        let turn = wait_turn(
            client,
            &self.prefix,
            ours,
            &mut self.ahead,
            (level, trust),
            patience,
            waiter,
        )
        .await?;
        if matches!(turn, Turn::Head) {
            self.head = true;
        }
        Ok(turn)
    }

    /// Whether the head reads the lock with its queue (a recursive read of
    /// `KEY`, see [`Line::outranked`]) rather than the key alone: in a
    /// ranked queue we are in, below `--replace`'s level (a waiter at
    /// `--priority` 1000 too, so that a replacer's entry sends it back).
    pub fn reads_with_queue(&self) -> bool {
        self.place.is_some()
            && self
                .rank
                .is_some_and(|r| r.level < crate::backend::priority::REPLACE)
    }

    /// Given the head's read of `KEY` with its queue: whether a live entry
    /// of a higher priority than ours came, and if so puts us back behind
    /// it (the next [`Line::wait`] lists the queue).
    pub fn outranked(&mut self, pairs: &[KvPair]) -> bool {
        let level = self.level();
        let higher = pairs.iter().any(|p| {
            p.key.starts_with(&self.prefix) && p.holder().is_some() && level_of(p) > level
        });
        if higher {
            self.head = false;
            self.ahead = None;
        }
        higher
    }

    /// Leaving the queue, for the transaction that takes the lock: in the
    /// same write, our successor wakes as the lock changes hands, not a
    /// round trip later.
    pub fn leaving(&self) -> Option<TxnOp<'_>> {
        self.place.as_ref().map(|p| TxnOp::Delete { key: &p.key })
    }

    /// Leaves the queue, if we were in it (see [`leave`]).
    pub async fn leave(&self, client: &Client, session: &SessionId) -> Result<(), ConsulError> {
        match self.place {
            Some(_) => leave(client, &self.prefix, session).await,
            None => Ok(()),
        }
    }
}

/// Our entry in the queue.
#[derive(Debug, Clone)]
pub struct Place {
    pub key: String,
    pub create_index: u64,
}

/// Takes our place at the end of the queue. `None` when the queue cannot be
/// used (the token may not write it, or the entry is not ours to take).
async fn enter(
    client: &Client,
    queue: &str,
    session: &SessionId,
    value: &str,
) -> Result<Option<Place>, ConsulError> {
    let entry = entry_key(queue, session);
    let ops = [TxnOp::Lock {
        key: &entry,
        value: value.as_bytes(),
        flags: 0,
        session,
    }];
    match client.txn(&ops).await {
        Ok(Txn::Applied(pairs)) => Ok(Some(Place {
            key: entry,
            create_index: pairs[0].create_index,
        })),
        Ok(Txn::Refused(refusals)) => match refusals.iter().find_map(|r| r.error(&entry)) {
            Some(ConsulError::Forbidden { .. }) | None => {
                tracing::debug!(queue, "no queue: {}", refusals[0].what);
                Ok(None)
            }
            Some(error) => Err(error),
        },
        Err(ConsulError::Forbidden { .. }) => {
            tracing::debug!(queue, "no queue: the token may not write `{entry}`");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The live entry just ahead of `place`, if any. Entries whose session is
/// gone are removed on the way (with check-and-set, so only as seen).
/// The queue is ordered by [`order`]; our own entry is found by its key.
async fn ahead(client: &Client, queue: &str, place: &Place) -> Result<Option<Ahead>, ConsulError> {
    let (pairs, _) = client.kv_list(queue, Read::now()).await?;
    let ours = pairs.iter().find(|p| p.key == place.key).map_or(
        (std::cmp::Reverse(0), place.create_index, place.key.clone()),
        |p| {
            let (l, c, k) = order(p);
            (l, c, k.to_owned())
        },
    );
    let mut best: Option<KvPair> = None;
    let mut before = 0;
    for pair in pairs {
        if put_by_us(&pair) {
            continue;
        }
        if pair.holder().is_none() {
            // Best effort: whoever sees it next tries again.
            let _ = client.kv_delete(&pair.key, Some(pair.modify_index)).await;
            continue;
        }
        if order(&pair) >= (ours.0, ours.1, ours.2.as_str()) {
            continue;
        }
        before += 1;
        if best.as_ref().is_none_or(|b| order(b) < order(&pair)) {
            best = Some(pair);
        }
    }
    let ahead = best.map(|entry| Ahead {
        level: level_of(&entry),
        entry,
        head: before == 1,
    });
    Ok(ahead)
}

/// Blocks until the entry ahead changes, or `wait` passes. True when it
/// changed (or went away).
async fn changed(client: &Client, entry: &KvPair, wait: Duration) -> Result<bool, ConsulError> {
    let read = Read {
        index: QueryIndex::NONE.after(entry.modify_index),
        wait: Some(wait),
        consistent: false,
        whole: false,
        empty_is_enough: false,
    };
    let (now, _) = client.kv_get(&entry.key, read).await?;
    Ok(now.is_none_or(|p| p.modify_index != entry.modify_index || p.holder().is_none()))
}

/// How a wait in the queue ended.
pub enum Turn {
    /// Nobody is ahead any more: wait on the lock itself.
    Head,
    /// The head, just ahead of us, sat still for [`STUCK_CHECK`]: the
    /// caller looks whether the lock is free with nobody taking it.
    Stuck,
    /// Patience ran out.
    Over,
}

/// Waits while other lockrun waiters are ahead of us, each time blocking on
/// the entry just ahead of ours only: for [`STUCK_CHECK`] behind the head,
/// for a [`WATCH_WAIT`](super::WATCH_WAIT) further back. `known` is that
/// entry as we last saw it, if it has not changed since. `rank` is our
/// priority and how long a
/// higher head is trusted to sit still.
async fn wait_turn(
    client: &Client,
    queue: &str,
    ours: &Place,
    known: &mut Option<Ahead>,
    rank: (u32, Duration),
    patience: Wait,
    waiter: &mut Waiter,
) -> Result<Turn, ConsulError> {
    let what = format!("waiting in the queue `{queue}`");
    // An entry that sat still through a whole wait while we did not know
    // it was the head: if the listing says it is, we look at the lock at
    // once rather than after another wait.
    let mut sat_still: Option<(String, u64)> = None;
    loop {
        let ahead = match known.take() {
            Some(ahead) => ahead,
            None => match ahead(client, queue, ours).await {
                Ok(Some(ahead)) => ahead,
                Ok(None) => return Ok(Turn::Head),
                Err(e) => {
                    waiter.retry(&what, e).await?;
                    continue;
                }
            },
        };
        let still = sat_still.take().is_some_and(|(key, index)| {
            ahead.entry.key == key && ahead.entry.modify_index == index
        });
        if still && ahead.head {
            *known = Some(ahead);
            return Ok(Turn::Stuck);
        }
        let Some(wait) = super::next_wait(patience) else {
            return Ok(Turn::Over);
        };
        let look = if ahead.head && ahead.level > rank.0 {
            rank.1
        } else if ahead.head {
            STUCK_CHECK
        } else {
            super::WATCH_WAIT
        };
        match changed(client, &ahead.entry, wait.min(look)).await {
            Ok(true) => {}
            Ok(false) if wait < look => *known = Some(ahead),
            Ok(false) if ahead.head => {
                *known = Some(ahead);
                return Ok(Turn::Stuck);
            }
            Ok(false) => sat_still = Some((ahead.entry.key, ahead.entry.modify_index)),
            Err(e) => waiter.retry(&what, e).await?,
        }
    }
}

/// Leaves the queue. Idempotent; a token that may not touch the queue never
/// entered it, so a denial is no failure.
pub async fn leave(client: &Client, queue: &str, session: &SessionId) -> Result<(), ConsulError> {
    match client.kv_delete(&entry_key(queue, session), None).await {
        Ok(_) | Err(ConsulError::Forbidden { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}
