//! The leader lock: one key, held with `?acquire=` by one session at a time,
//! flagged with the Go API's `LockFlagValue` so `consul lock` recognises it.

use crate::backend::consul::blocking::QueryIndex;
use crate::backend::consul::kv::Read;
use crate::backend::consul::txn::{Refusal, Txn, TxnOp};
use crate::backend::consul::{Client, ConsulError, KvPair, Op, SessionId};
use crate::backend::Lost;
use tokio::time::Instant;

use super::queue::{self, Turn};
use super::shared;
use super::{AcquireError, Acquired, DelayBackoff, Held, Waiter, LOCK_FLAG};
use crate::backend::priority::{Priority, Verdict};
use crate::backend::Wait;

/// A lock we hold, with what the watch and the release need to know.
#[derive(Debug)]
pub struct Holding {
    pub held: Held,
    /// The key's ModifyIndex as last seen while it was ours.
    pub modify_index: u64,
    /// Whether our session holds `KEY/.lock` too (see [`shared::writer_ops`]),
    /// as far as we know: the release deletes it with `KEY`.
    pub dot: bool,
    index: QueryIndex,
}

pub(super) fn check_flags(key: &str, pair: &KvPair) -> Result<(), AcquireError> {
    if pair.flags == LOCK_FLAG {
        return Ok(());
    }
    if pair.flags == super::SEMAPHORE_FLAG {
        // `consul lock -n` and `lockrun semaphore` write PREFIX/.lock (the
        // record, with the limit) and PREFIX/<session>.
        let prefix = key.rsplit_once('/').map_or(key, |(prefix, _)| prefix);
        let limit = pair
            .value
            .as_deref()
            .and_then(|v| super::semaphore::Record::decode(v).ok())
            .filter(|_| key.ends_with("/.lock"))
            .map_or("N".to_string(), |r| r.limit.to_string());
        return Err(AcquireError::Usage(format!(
            "`{key}` is an entry of semaphore `{prefix}` (as `lockrun semaphore` and `consul lock -n` write them), not a leader lock; use `lockrun semaphore --limit {limit} {prefix}`, or another KEY for a leader lock (delete it if no semaphore uses it any more)"
        )));
    }
    Err(AcquireError::Conflict(format!(
        "key `{key}` holds data that is not a lock (flags {}); lockrun will not take it over: choose another key, or delete it if it is stale",
        pair.flags
    )))
}

/// Why `lockrun elect KEY` must not run while `consul lock KEY` holds: its
/// key is `KEY/.lock`, held by a session, which `KEY` does not exclude.
/// `None` when `pair`, as read at `KEY/.lock`, is no such holder (absent,
/// free, or a semaphore's record, whose holders are its entries).
pub fn consul_lock_holder(key: &str, pair: Option<&KvPair>) -> Option<String> {
    let pair = pair?;
    let session = pair.holder()?;
    // A lockrun writer's, held with `KEY`: waited for, not refused.
    let writer = shared::held_by_writer(pair);
    (pair.flags != super::SEMAPHORE_FLAG && !writer).then(|| {
        format!(
            "`{dot}` is held by session {session}: that is `consul lock {key}`'s key, which `{key}` does not exclude; to exclude `consul lock {key}` use the key `{dot}` (`lockrun elect {dot}`)",
            dot = pair.key
        )
    })
}

/// Takes the lock on `key`, waiting per `patience` with blocking reads while
/// someone else holds it. The caller bounds the whole call by `--timeout`
/// and, when it is cancelled, must assume the lock might be held.
///
/// The lock is written with one transaction, a check-and-set on the entry
/// as last seen (so a key that became foreign data meanwhile is never taken
/// over) and the `lock` itself: its answer carries the fencing number, and
/// a refusal says whether a holder or a lock-delay stood in the way. While
/// it is held, lockrun waiters queue (see [`queue`]) so that a release
/// wakes one of them, not all; the holder's release hands the lock to the
/// head of the queue ([`release`]), whose blocking read of `KEY` then finds
/// it holding, with nothing more to write. A `consul lock KEY` holding
/// `KEY/.lock` is refused, found in the first look before any write.
pub async fn acquire(
    client: &Client,
    key: &str,
    session: &SessionId,
    value: &[u8],
    patience: Wait,
    rank: Priority,
) -> Result<Acquired<Holding>, AcquireError> {
    let mut waiter = Waiter::acquiring(patience);
    let mut delay = DelayBackoff::new();
    let mut holder = None;
    // The ModifyIndex of the free entry we are about to lock (0: absent).
    // We start by assuming the key is absent, as a clean release leaves it:
    // if it is not, the check-and-set refuses and we read it.
    let mut free_at = Some(0);
    let mut line = queue::Line::new(queue::of_key(key), patience).ranked(rank);
    let mut deferral = rank.deferral();
    // The listing index at which we last found another writer's
    // `KEY/.lock` (see below).
    let mut writer_dot: Option<u64> = None;
    loop {
        if let Some(index) = free_at.take() {
            let what = format!("acquiring `{key}`");
            // Readers of `KEY` (`elect -s`): none may hold, and the
            // transaction checks that none came meanwhile (see [`shared`]).
            let look = match shared::look(client, key, Read::now()).await {
                Ok(look) => look,
                Err(e) => {
                    waiter.retry(&what, e).await?;
                    free_at = Some(index);
                    continue;
                }
            };
            if let shared::Dot::ConsulLock(why) = &look.dot {
                return Err(AcquireError::Conflict(why.clone()));
            }
            if let shared::Dot::Writer(other) = &look.dot {
                // Another writer's: taken with `KEY` since we read it free
                // (read `KEY` again, and wait on it as ever), or still held
                // after it lost `KEY` (stopping its command: seen a second
                // time with `KEY` free, we wait until it lets go).
                if writer_dot.replace(look.index).is_some() {
                    holder = Some(format!("session {other}"));
                    if matches!(patience, Wait::Once) {
                        return Ok(Acquired::No { holder });
                    }
                    match shared::changed(client, key, look.index, patience).await {
                        Ok(true) => {}
                        Ok(false) => return Ok(Acquired::No { holder }),
                        Err(e) => waiter.retry(&what, e).await?,
                    }
                    free_at = Some(index);
                    continue;
                }
                waiter.read_now();
                continue;
            }
            writer_dot = None;
            if !look.readers.is_empty() {
                let who = look.who();
                if holder.as_deref() != Some(who.as_str()) {
                    tracing::info!(target: crate::logging::EVENT, lock = key, holder = %who, "waiting: held by readers");
                }
                holder = Some(who);
                if matches!(patience, Wait::Once) {
                    return Ok(Acquired::No { holder });
                }
                // Queued, so that readers that come now wait behind us.
                line.join(
                    client,
                    session,
                    value,
                    &mut waiter,
                    &format!("queueing for `{key}`"),
                )
                .await?;
                match shared::changed(client, key, look.index, patience).await {
                    Ok(true) => {}
                    Ok(false) => return Ok(Acquired::No { holder }),
                    Err(e) => waiter.retry(&what, e).await?,
                }
                free_at = Some(index);
                continue;
            }
            let Some((readers_ops, dot)) = shared::writer_ops(&look, session) else {
                let refusals = match shared::prune(client, &look, session).await {
                    Ok(refusals) => refusals,
                    Err(e) => {
                        waiter.retry(&what, e).await?;
                        Vec::new()
                    }
                };
                if let Some(error) = refusals.iter().find_map(|r| r.error(key)) {
                    waiter.retry(&what, error).await?;
                } else if refusals.iter().any(Refusal::is_lock_delay) {
                    if matches!(patience, Wait::Once) {
                        return Ok(Acquired::No { holder });
                    }
                    delay.wait().await;
                }
                free_at = Some(index);
                continue;
            };
            let mut ops = vec![
                TxnOp::Cas {
                    key,
                    value,
                    flags: LOCK_FLAG,
                    index,
                },
                TxnOp::Lock {
                    key,
                    value,
                    flags: LOCK_FLAG,
                    session,
                },
            ];
            ops.extend(readers_ops);
            ops.extend(line.leaving());
            let refusals = match client.txn(&ops).await {
                Ok(Txn::Applied(pairs)) => {
                    let pair = &pairs[1];
                    let index = QueryIndex::NONE.after(pair.modify_index);
                    return Ok(Acquired::Yes(holding(key, session, pair, index, dot)));
                }
                Ok(Txn::Refused(refusals)) => refusals,
                Err(e) => {
                    waiter.retry(&what, e).await?;
                    continue;
                }
            };
            if let Some(error) = refusals.iter().find_map(|r| r.error(key)) {
                waiter.retry(&what, error).await?;
                continue;
            }
            if refusals.iter().any(Refusal::is_lock_delay) {
                if matches!(patience, Wait::Once) {
                    return Ok(Acquired::No { holder: None });
                }
                tracing::debug!(key, "lock refused by a lock-delay");
                delay.wait().await;
                // Nothing else may have changed: try again straight away;
                // the check-and-set catches it if something did.
                free_at = Some(index);
                continue;
            }
            if let Some(r) = refusals.iter().find(|r| !r.is_stale() && !r.is_held()) {
                return Err(AcquireError::Consul(ConsulError::Rejected {
                    op: Op::KvWrite(key.to_string()),
                    status: 409,
                    body: r.what.clone(),
                }));
            }
            // The entry changed since we looked (a rival took it, or it
            // exists at all): read it.
            waiter.read_now();
        }
        if !line.head {
            match line.wait(client, patience, &mut waiter).await? {
                Turn::Head => {
                    line.ready(client, session).await;
                    waiter.read_now();
                }
                Turn::Stuck => {
                    // Fine while the lock is held; if it is free, nobody
                    // ahead took it in all that time: they are stuck, and
                    // we try.
                    match client.kv_get(key, Read::now()).await {
                        Ok((Some(pair), _)) if pair.holder() == Some(session.as_str()) => {
                            let index = QueryIndex::NONE.after(pair.modify_index);
                            return Ok(Acquired::Yes(holding(key, session, &pair, index, true)));
                        }
                        Ok((None, _)) => free_at = Some(0),
                        Ok((Some(pair), _)) if pair.holder().is_none() => {
                            check_flags(key, &pair)?;
                            free_at = Some(pair.modify_index);
                        }
                        Ok(_) => {}
                        Err(e) => waiter.retry(&format!("waiting for `{key}`"), e).await?,
                    }
                    // A stuck head of a higher priority has the free lock
                    // for --priority-grace, counted from our first look
                    // that saw it free.
                    if let Some(level) = line.higher_ahead() {
                        match deferral.decide(Instant::now(), [level], free_at.is_some()) {
                            Verdict::Go => {}
                            Verdict::Defer { .. } => free_at = None,
                        }
                    }
                    if free_at.is_some() {
                        line.head = true;
                    }
                    continue;
                }
                Turn::Over => return Ok(Acquired::No { holder }),
            }
        }
        let Some(read) = waiter.next_read().await else {
            return Ok(Acquired::No { holder });
        };
        // The head of a ranked queue reads the lock with its queue: a
        // higher waiter that comes sends it back behind.
        let result = if line.reads_with_queue() {
            match client.kv_list(key, read).await {
                // Not once the lock is ours: handed to us as we read.
                Ok((pairs, _))
                    if !pairs
                        .iter()
                        .any(|p| p.key == key && p.holder() == Some(session.as_str()))
                        && line.outranked(&pairs) =>
                {
                    continue
                }
                Ok((pairs, index)) => Ok((pairs.into_iter().find(|p| p.key == key), index)),
                Err(e) => Err(e),
            }
        } else {
            client.kv_get(key, read).await
        };
        let Some(pair) = waiter
            .answer(&format!("waiting for `{key}`"), result)
            .await?
        else {
            continue;
        };
        let Some(pair) = pair else {
            free_at = Some(0);
            continue;
        };
        check_flags(key, &pair)?;
        match pair.holder() {
            Some(h) if h == session.as_str() => {
                // Handed to us by the holder's release, which deleted our
                // queue entry in the same transaction (or ours since a
                // transaction of our own whose answer we lost, which did
                // too): nothing to write. With `KEY/.lock`, as either
                // writes it when it can (the release checks).
                tracing::debug!(key, "handed the lock");
                return Ok(Acquired::Yes(holding(key, session, &pair, waiter.index(), true)));
            }
            Some(h) => {
                // Operators know holders by their value (a host name,
                // `db-2:5432`); `consul lock` stores none.
                let who = match pair.value.as_deref() {
                    Some(v) if !v.is_empty() => String::from_utf8_lossy(v).into_owned(),
                    _ => format!("session {h}"),
                };
                if holder.as_deref() != Some(who.as_str()) {
                    tracing::info!(
                        target: crate::logging::EVENT,
                        lock = key,
                        holder = %who,
                        "waiting: held by another"
                    );
                }
                holder = Some(who);
                waiter.block();
                line.join(
                    client,
                    session,
                    value,
                    &mut waiter,
                    &format!("queueing for `{key}`"),
                )
                .await?;
            }
            None => free_at = Some(pair.modify_index),
        }
    }
}

fn holding(key: &str, session: &SessionId, pair: &KvPair, index: QueryIndex, dot: bool) -> Holding {
    Holding {
        held: Held {
            key: key.to_string(),
            session: session.clone(),
            // The ModifyIndex, not the LockIndex: the LockIndex restarts at 1
            // whenever the key is deleted (every clean release deletes it),
            // while a Raft index only grows. The previous holder's every
            // write precedes the release that let our acquire through.
            lock_index: pair.modify_index,
        },
        modify_index: pair.modify_index,
        dot,
        index,
    }
}

impl Holding {
    /// Watches the key until it is no longer ours. Transient errors are
    /// retried for as long as it takes: the lease, not this watch, decides
    /// when silence means loss.
    pub async fn watch(&mut self, client: &Client) -> Lost {
        let key = self.held.key.clone();
        let mut waiter = Waiter::watching(self.index);
        loop {
            let read = waiter.next_read().await.expect("a watch waits for ever");
            let result = client.kv_get(&key, read).await;
            let pair = match waiter.answer(&format!("watching `{key}`"), result).await {
                Ok(Some(pair)) => pair,
                Ok(None) => continue,
                Err(e) => return Lost::Watch(format!("cannot watch the lock any more: {e}")),
            };
            self.index = waiter.index();
            match pair {
                None => return Lost::Watch(format!("the lock key `{key}` was deleted")),
                Some(pair) => match pair.holder() {
                    Some(h) if h == self.held.session.as_str() => {
                        self.modify_index = pair.modify_index;
                    }
                    Some(h) => {
                        return Lost::Watch(format!("the lock is now held by session {h}"));
                    }
                    None => return released(client, &self.held.session).await,
                },
            }
        }
    }
}

/// The key was released, not by us. If our session lives, someone released
/// it by hand (no lock-delay is armed then); if not, Consul invalidated it,
/// and the lock-delay is running from a moment already past.
pub(super) async fn released(client: &Client, session: &SessionId) -> Lost {
    // The lock-delay may be running already: we ask briefly (well within
    // the budget's margin) and treat no answer as the session gone.
    let asked = tokio::time::timeout(
        std::time::Duration::from_millis(500),
        client.session_info(session.as_str()),
    )
    .await;
    match asked {
        Ok(Ok(Some(_))) => Lost::Released("the lock was released by someone else".into()),
        Ok(Ok(None)) => Lost::Watch("the lock was released: the session is gone".into()),
        Ok(Err(e)) => Lost::Watch(format!(
            "the lock was released, and the session cannot be read ({e})"
        )),
        Err(_) => {
            Lost::Watch("the lock was released, and the session could not be read in time".into())
        }
    }
}

/// Gives the lock up, and our place in the queue if we were still waiting.
/// A lock we held goes to the head of lockrun's queue when there is one
/// (`hand_over`). Otherwise, with the ModifyIndex we last saw, the key is deleted with check-and-set,
/// as `consul lock` leaves it, and with it our `KEY/.lock` (`dot`: checked
/// ours and deleted), in one transaction (one write, one wake-up for
/// waiters); if either changed since, we only release the key, which never
/// clobbers a lock that changed hands, and delete `KEY/.lock` only while
/// our session holds it. Idempotent: safe after a cancelled acquire.
pub async fn release(
    client: &Client,
    key: &str,
    session: &SessionId,
    value: &[u8],
    modify_index: Option<u64>,
    dot: bool,
) -> Result<(), ConsulError> {
    let record = shared::record_key(key);
    if modify_index.is_some() {
        match hand_over(client, key, session, dot).await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => tracing::debug!(key, "could not hand the lock over: {e}"),
        }
    }
    match modify_index {
        Some(index) if dot => {
            let ops = [
                TxnOp::DeleteCas { key, index },
                TxnOp::CheckSession {
                    key: &record,
                    session: session.as_str(),
                },
                TxnOp::Delete { key: &record },
            ];
            if let Txn::Applied(_) = client.txn(&ops).await? {
                return Ok(());
            }
        }
        Some(index) => {
            if client.kv_delete(key, Some(index)).await? {
                return Ok(());
            }
        }
        // We may have been waiting: an acquisition leaves the queue as it
        // takes the lock, and only then.
        None => queue::leave(client, &queue::of_key(key), session).await?,
    }
    client
        .kv_release(key, session.as_str(), value, LOCK_FLAG)
        .await?;
    let ops = [
        TxnOp::CheckSession {
            key: &record,
            session: session.as_str(),
        },
        TxnOp::Delete { key: &record },
    ];
    // Refused when it is not ours: nothing to do.
    client.txn(&ops).await?;
    Ok(())
}

/// Hands the lock we hold to the head of lockrun's queue (ranked as the
/// waiters rank themselves: [`queue::head`]), when its entry says it waits
/// on the key ([`queue::Line::ready`]), in one transaction: `KEY`
/// (and `KEY/.lock`, `dot`) unlocked by our session and locked with the
/// head's, with the head's `--value`, its queue entry checked still held by
/// its session and deleted. The head, blocking on `KEY`, wakes to find it
/// holds the lock, and writes nothing; the waiter behind it wakes as the
/// entry goes, and blocks on `KEY` in turn. Consul refuses the transaction
/// if the head's session is gone, or the head left the queue, or the lock
/// is not ours: then false, and the caller releases as without a queue.
///
/// A head that was killed while it waited on the key is handed a lock
/// nobody runs, until its session lapses (2×TTL after its last renewal, at most) and
/// its lock-delay passes: the waiter behind it takes it then.
async fn hand_over(
    client: &Client,
    key: &str,
    session: &SessionId,
    dot: bool,
) -> Result<bool, ConsulError> {
    // An empty queue, or one the token may not read, is no hand-off: the
    // release then goes as without a queue, one round trip sooner.
    let read = Read {
        empty_is_enough: true,
        ..Read::now()
    };
    let (pairs, _) = client.kv_list(&queue::of_key(key), read).await?;
    // Only a head that said it waits on the key: one that stopped or died
    // before it became the head, or an older lockrun's, is left to the
    // waiters behind it (see [`queue`]).
    let Some(head) = queue::head(&pairs, session).filter(|h| queue::is_ready(h)) else {
        return Ok(false);
    };
    let next = SessionId::new(head.holder().unwrap_or_default());
    let value = queue::value_of(head).unwrap_or_default();
    let record = shared::record_key(key);
    let mut ops = vec![
        TxnOp::Unlock {
            key,
            value: b"",
            flags: LOCK_FLAG,
            session,
        },
        TxnOp::Lock {
            key,
            value: value.as_bytes(),
            flags: LOCK_FLAG,
            session: &next,
        },
    ];
    if dot {
        ops.push(TxnOp::Unlock {
            key: &record,
            value: shared::WRITER_VALUE,
            flags: LOCK_FLAG,
            session,
        });
        ops.push(TxnOp::Lock {
            key: &record,
            value: shared::WRITER_VALUE,
            flags: LOCK_FLAG,
            session: &next,
        });
    }
    ops.push(TxnOp::CheckSession {
        key: &head.key,
        session: next.as_str(),
    });
    ops.push(TxnOp::Delete { key: &head.key });
    match client.txn(&ops).await? {
        Txn::Applied(_) => {
            tracing::debug!(key, to = %next, "handed the lock over");
            Ok(true)
        }
        Txn::Refused(refusals) => {
            tracing::debug!(key, to = %next, "could not hand the lock over: {}", refusals[0].what);
            Ok(false)
        }
    }
}
