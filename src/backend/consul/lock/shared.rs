//! Shared (reader) locks, `lockrun elect -s KEY`: Consul has no shared mode
//! of its own, so this is lockrun's layout (docs/consul.md, "Shared
//! locks"), built from the same parts as a lock and a semaphore:
//!
//! - `KEY` is the writer's lock, as `lockrun elect KEY` always held it.
//! - `KEY/.lock` is the readers' record while any reader holds:
//!   `{"Readers":{"<session>":true,...}}` with [`SHARED_FLAG`], held by no
//!   session and only ever changed with check-and-set. It sits where
//!   `consul lock KEY` keeps its lock, so that `consul lock KEY` refuses to
//!   run while readers hold ("Existing key does not match lock use"), and a
//!   reader refuses to run while `consul lock KEY` holds.
//! - `KEY/.lock/<session>` is each reader's entry, held by its session
//!   (with its `--value`): Consul releases it when the session ends, and
//!   arms the session's lock-delay on it.
//!
//! A reader takes the lock with one transaction: `KEY` checked free and
//! taken and deleted again (so a dead writer's lock-delay holds the reader
//! off, as it holds off a writer), the record rewritten with itself added,
//! and its entry taken. A writer takes `KEY` with one transaction that also
//! deletes the record as it read it, empty of live readers, after taking
//! and deleting each dead reader's entry (so a dead reader's lock-delay
//! holds the writer off). Each side's transaction thus writes what the
//! other's checks: of a reader and a writer racing, one is refused.
//!
//! Readers never prune the record: only a writer does, through the
//! lock-delay of each entry it removes. A reader leaves by deleting its
//! entry and taking itself out of the record (the last one deletes it).
//!
//! Writer preference: a reader does not try while a lockrun writer waits in
//! `KEY`'s queue ([`queue`](super::queue)); a writer that finds readers
//! holding queues there first.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::backend::consul::blocking::QueryIndex;
use crate::backend::consul::kv::Read;
use crate::backend::consul::txn::{Refusal, Txn, TxnOp};
use crate::backend::consul::{Client, ConsulError, KvPair, Op, SessionId};
use crate::backend::{Lost, Wait};

use super::{queue, AcquireError, Acquired, DelayBackoff, Held, Waiter, LOCK_FLAG};

/// The flags of the readers' record and entries ("lockrdrs"): neither the
/// Go API's lock nor its semaphore value, so that `consul lock KEY` and
/// `consul lock -n N KEY` refuse the record instead of taking it over.
pub const SHARED_FLAG: u64 = 0x6c6f_636b_7264_7273;

/// The value of `KEY/.lock` while a lockrun writer holds it (with its
/// session and the Go API's `LockFlagValue`, as `consul lock KEY` would):
/// `consul lock KEY` waits on it, and readers and other writers know it
/// for the writer of `KEY` rather than `consul lock`. Nothing is decided
/// by the value alone: the lock is the key's session.
pub const WRITER_VALUE: &[u8] = br#"{"Writer":true}"#;

/// Whether `pair` (as read at `KEY/.lock`) is held by a lockrun writer of
/// `KEY`.
pub fn held_by_writer(pair: &KvPair) -> bool {
    pair.flags == LOCK_FLAG && pair.holder().is_some() && pair.value_bytes() == WRITER_VALUE
}

/// How many dead readers a writer's transaction removes at most; Consul
/// takes 64 operations in one transaction, and each costs two.
const PRUNE_BATCH: usize = 24;

/// The readers' record.
pub fn record_key(key: &str) -> String {
    format!("{key}/.lock")
}

/// A reader's entry.
pub fn reader_key(key: &str, session: &str) -> String {
    format!("{key}/.lock/{session}")
}

/// What one listing of `KEY/.lock` shows (as a string prefix, it also shows
/// lockrun's queue `KEY/.lockrun-queue/`).
#[derive(Debug)]
pub struct Look {
    pub record_key: String,
    pub dot: Dot,
    /// Entries of readers that hold: held by their session.
    pub readers: Vec<KvPair>,
    /// Entries of the record's readers that no session holds any more.
    pub dead: Vec<String>,
    /// The record's readers, the dead ones included.
    pub members: BTreeSet<String>,
    /// A lockrun writer waits in `KEY`'s queue.
    pub writer_waits: bool,
    /// The listing's index, to block on.
    pub index: u64,
}

/// What `KEY/.lock` is.
#[derive(Debug)]
pub enum Dot {
    Absent,
    /// The readers' record, at this ModifyIndex.
    Readers(u64),
    /// A leader lock no session holds (`consul lock KEY` that ended
    /// without deleting it), at this ModifyIndex.
    FreeLock(u64),
    /// `consul lock KEY` holds it: the refusal.
    ConsulLock(String),
    /// A lockrun writer of `KEY` holds it (with `KEY`), held by this
    /// session: readers and other writers wait for it to go.
    Writer(String),
    /// Anything else (a semaphore's record, data): the refusal.
    Foreign(String),
}

/// Decodes the record's readers.
pub fn decode(bytes: &[u8]) -> Result<BTreeSet<String>, String> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    match value.get("Readers") {
        None | Some(Value::Null) => Ok(BTreeSet::new()),
        Some(Value::Object(map)) => Ok(map.keys().cloned().collect()),
        Some(_) => Err("`Readers` is not an object".into()),
    }
}

pub fn encode(readers: &BTreeSet<String>) -> Vec<u8> {
    let map: serde_json::Map<String, Value> = readers
        .iter()
        .map(|id| (id.clone(), Value::Bool(true)))
        .collect();
    serde_json::to_vec(&serde_json::json!({ "Readers": map })).expect("a JSON value serialises")
}

impl Look {
    pub fn of(key: &str, pairs: &[KvPair], index: u64) -> Look {
        let record_key = record_key(key);
        let under = format!("{record_key}/");
        let queue = queue::of_key(key);
        let mut members = BTreeSet::new();
        let dot = match pairs.iter().find(|p| p.key == record_key) {
            None => Dot::Absent,
            Some(p) if p.flags == SHARED_FLAG => match decode(p.value_bytes()) {
                Ok(readers) => {
                    members = readers;
                    Dot::Readers(p.modify_index)
                }
                Err(e) => Dot::Foreign(format!(
                    "`{record_key}` is not a readers' record ({e}); delete it if no reader of `{key}` runs"
                )),
            },
            Some(p) if held_by_writer(p) => Dot::Writer(p.holder().unwrap_or_default().to_string()),
            Some(p) if p.flags == LOCK_FLAG => match super::leader::consul_lock_holder(key, Some(p)) {
                Some(why) => Dot::ConsulLock(why),
                None => Dot::FreeLock(p.modify_index),
            },
            Some(p) if p.flags == super::SEMAPHORE_FLAG => Dot::Foreign(format!(
                "`{record_key}` is the record of semaphore `{key}` (`consul lock -n`, `lockrun semaphore`), which readers of `{key}` would not exclude; use another KEY"
            )),
            Some(p) => Dot::Foreign(format!(
                "`{record_key}` holds data that is not a lock (flags {}); lockrun will not take it over: choose another KEY, or delete it if it is stale",
                p.flags
            )),
        };
        let readers: Vec<KvPair> = pairs
            .iter()
            .filter(|p| p.key.starts_with(&under) && p.holder().is_some())
            .cloned()
            .collect();
        let dead = members
            .iter()
            .filter(|m| !readers.iter().any(|r| r.holder() == Some(m.as_str())))
            .map(|m| reader_key(key, m))
            .collect();
        let writer_waits = pairs
            .iter()
            .any(|p| p.key.starts_with(&queue) && p.holder().is_some());
        Look {
            record_key,
            dot,
            readers,
            dead,
            members,
            writer_waits,
            index,
        }
    }

    /// The readers as a waiter names them: their values, or sessions.
    pub fn who(&self) -> String {
        let names: Vec<String> = self
            .readers
            .iter()
            .map(|p| match p.value.as_deref() {
                Some(v) if !v.is_empty() => String::from_utf8_lossy(v).into_owned(),
                _ => format!("session {}", p.holder().unwrap_or_default()),
            })
            .collect();
        format!("readers {}", names.join(", "))
    }

    /// The sessions a reader writes back, with `me` added or taken out:
    /// every member, dead or alive, and every live entry.
    fn members_with(&self, me: &str, add: bool) -> BTreeSet<String> {
        let mut members = self.members.clone();
        members.extend(
            self.readers
                .iter()
                .filter_map(|p| p.holder().map(str::to_string)),
        );
        if add {
            members.insert(me.to_string());
        } else {
            members.remove(me);
        }
        members
    }
}

/// Reads `KEY/.lock` and everything under it, with `read`.
pub async fn look(client: &Client, key: &str, read: Read) -> Result<Look, ConsulError> {
    let (pairs, index) = client.kv_list(&record_key(key), read).await?;
    Ok(Look::of(key, &pairs, index))
}

/// Blocks until the listing of `KEY/.lock` moves past `index`, within
/// `patience`; false when patience ran out first.
pub async fn changed(
    client: &Client,
    key: &str,
    index: u64,
    patience: Wait,
) -> Result<bool, ConsulError> {
    let Some(wait) = super::next_wait(patience) else {
        return Ok(false);
    };
    let read = Read {
        index: QueryIndex::NONE.after(index),
        wait: Some(wait),
        consistent: false,
        whole: false,
        empty_is_enough: false,
    };
    client.kv_list(&record_key(key), read).await?;
    Ok(true)
}

/// What a writer's transaction adds, from `look` (which showed no live
/// reader): each dead reader's entry taken and deleted, so that its
/// lock-delay refuses the transaction while it runs, and `KEY/.lock` taken
/// with the writer's session and `consul lock`'s flags, from what was read
/// (absent, the readers' record with no live reader, or a `consul lock`
/// key nobody holds, through its lock-delay), so that a `consul lock KEY`
/// that comes while the writer holds waits on it. A semaphore's record
/// there is left alone. `None` when there are more dead readers than one
/// transaction takes: [`prune`] first. The flag says whether `KEY/.lock`
/// is taken.
pub fn writer_ops<'a>(look: &'a Look, session: &'a SessionId) -> Option<(Vec<TxnOp<'a>>, bool)> {
    if look.dead.len() > PRUNE_BATCH {
        return None;
    }
    let mut ops = Vec::new();
    for entry in &look.dead {
        ops.push(TxnOp::Lock {
            key: entry,
            value: b"",
            flags: SHARED_FLAG,
            session,
        });
        ops.push(TxnOp::Delete { key: entry });
    }
    // Unchanged since read (absent: still absent), so that a reader or a
    // `consul lock` that came meanwhile refuses the transaction.
    let index = match look.dot {
        Dot::Absent => Some(0),
        Dot::Readers(index) | Dot::FreeLock(index) => Some(index),
        // Something the writer's older rules already judged (a semaphore's
        // record beside a lock) or refused.
        Dot::ConsulLock(_) | Dot::Foreign(_) | Dot::Writer(_) => None,
    };
    let Some(index) = index else {
        return Some((ops, false));
    };
    ops.push(TxnOp::Cas {
        key: &look.record_key,
        value: WRITER_VALUE,
        flags: LOCK_FLAG,
        index,
    });
    ops.push(TxnOp::Lock {
        key: &look.record_key,
        value: WRITER_VALUE,
        flags: LOCK_FLAG,
        session,
    });
    Some((ops, true))
}

/// Removes a batch of dead readers from the record (through their
/// lock-delay, as [`writer_ops`] does), for a writer that found more than
/// one transaction takes. The refusals, if any, for the caller to judge.
pub async fn prune(
    client: &Client,
    look: &Look,
    session: &SessionId,
) -> Result<Vec<Refusal>, ConsulError> {
    let Dot::Readers(index) = look.dot else {
        return Ok(Vec::new());
    };
    let batch = &look.dead[..PRUNE_BATCH.min(look.dead.len())];
    let mut left = look.members.clone();
    let mut ops = Vec::new();
    for entry in batch {
        ops.push(TxnOp::Lock {
            key: entry,
            value: b"",
            flags: SHARED_FLAG,
            session,
        });
        ops.push(TxnOp::Delete { key: entry });
        if let Some((_, id)) = entry.rsplit_once('/') {
            left.remove(id);
        }
    }
    let encoded = encode(&left);
    ops.push(TxnOp::Cas {
        key: &look.record_key,
        value: &encoded,
        flags: SHARED_FLAG,
        index,
    });
    Ok(match client.txn(&ops).await? {
        Txn::Applied(_) => Vec::new(),
        Txn::Refused(refusals) => refusals,
    })
}

/// Takes `key` shared, waiting per `patience`: while a writer holds `KEY`
/// (blocking on it), or a lockrun writer waits in its queue (blocking on
/// the listing). A `consul lock KEY` holder, or a `KEY/.lock` that is no
/// readers' record, is refused.
pub async fn acquire(
    client: &Client,
    key: &str,
    session: &SessionId,
    value: &[u8],
    patience: Wait,
) -> Result<Acquired<Holding>, AcquireError> {
    let entry = reader_key(key, session.as_str());
    let what = format!("waiting for `{key}` shared");
    let mut waiter = Waiter::acquiring(patience);
    let mut delay = DelayBackoff::new();
    let mut holder: Option<String> = None;
    loop {
        let Some(read) = waiter.next_read().await else {
            return Ok(Acquired::No { holder });
        };
        let result = client.kv_get(key, read).await;
        let Some(writer) = waiter.answer(&what, result).await? else {
            continue;
        };
        if let Some(pair) = &writer {
            super::leader::check_flags(key, pair)?;
            if let Some(h) = pair.holder() {
                let who = match pair.value.as_deref() {
                    Some(v) if !v.is_empty() => String::from_utf8_lossy(v).into_owned(),
                    _ => format!("session {h}"),
                };
                if holder.as_deref() != Some(who.as_str()) {
                    tracing::info!(target: crate::logging::EVENT, lock = key, holder = %who, "waiting: held by a writer");
                }
                holder = Some(who);
                waiter.block();
                continue;
            }
        }
        let key_index = writer.as_ref().map_or(0, |p| p.modify_index);
        let look = match look(client, key, Read::now()).await {
            Ok(look) => look,
            Err(e) => {
                waiter.retry(&what, e).await?;
                continue;
            }
        };
        match &look.dot {
            Dot::ConsulLock(why) | Dot::Foreign(why) => {
                return Err(AcquireError::Conflict(why.clone()))
            }
            Dot::Absent | Dot::Readers(_) | Dot::FreeLock(_) | Dot::Writer(_) => {}
        }
        if look.writer_waits || matches!(look.dot, Dot::Writer(_)) {
            // A writer took `KEY` since we read it free (its `KEY/.lock`
            // with it), or waits for it: either way, until it is gone.
            let who = match &look.dot {
                Dot::Writer(session) => format!("a writer (session {session})"),
                _ => "a writer waiting".to_string(),
            };
            if holder.as_deref() != Some(who.as_str()) {
                tracing::info!(target: crate::logging::EVENT, lock = key, holder = %who, "waiting: a writer holds or waits, readers queue behind it");
            }
            holder = Some(who);
            match changed(client, key, look.index, patience).await {
                Ok(true) => {}
                Ok(false) => return Ok(Acquired::No { holder }),
                Err(e) => waiter.retry(&what, e).await?,
            }
            waiter.read_now();
            continue;
        }
        let members = encode(&look.members_with(session.as_str(), true));
        let mut ops = vec![
            // `KEY` free and unchanged since read, not in a lock-delay (the
            // lock), and left as a clean release leaves it (deleted).
            TxnOp::Cas {
                key,
                value: b"",
                flags: LOCK_FLAG,
                index: key_index,
            },
            TxnOp::Lock {
                key,
                value: b"",
                flags: LOCK_FLAG,
                session,
            },
            TxnOp::Delete { key },
        ];
        let record_index = match look.dot {
            Dot::Readers(index) => index,
            // A free `consul lock KEY` key: taken (through its lock-delay)
            // and deleted before the record takes its place.
            Dot::FreeLock(_) => {
                ops.push(TxnOp::Lock {
                    key: &look.record_key,
                    value: b"",
                    flags: LOCK_FLAG,
                    session,
                });
                ops.push(TxnOp::Delete {
                    key: &look.record_key,
                });
                0
            }
            _ => 0,
        };
        if let Dot::FreeLock(index) = look.dot {
            // Unchanged since read, before it is taken.
            ops.insert(
                3,
                TxnOp::Cas {
                    key: &look.record_key,
                    value: b"",
                    flags: LOCK_FLAG,
                    index,
                },
            );
        }
        ops.push(TxnOp::Cas {
            key: &look.record_key,
            value: &members,
            flags: SHARED_FLAG,
            index: record_index,
        });
        ops.push(TxnOp::Lock {
            key: &entry,
            value,
            flags: SHARED_FLAG,
            session,
        });
        let refusals = match client.txn(&ops).await {
            Ok(Txn::Applied(pairs)) => {
                // One Raft index for the whole transaction: the record's
                // new ModifyIndex, which grows with every admission and
                // every writer's.
                let number = pairs
                    .iter()
                    .find(|p| p.key == entry)
                    .map_or(0, |p| p.modify_index);
                return Ok(Acquired::Yes(Holding {
                    held: Held {
                        key: key.to_string(),
                        session: session.clone(),
                        lock_index: number,
                    },
                    entry,
                    index: QueryIndex::NONE.after(number),
                }));
            }
            Ok(Txn::Refused(refusals)) => refusals,
            Err(e) => {
                waiter.retry(&what, e).await?;
                continue;
            }
        };
        if let Some(error) = refusals.iter().find_map(|r| r.error(&entry)) {
            waiter.retry(&what, error).await?;
            continue;
        }
        if refusals.iter().any(Refusal::is_lock_delay) {
            if matches!(patience, Wait::Once) {
                return Ok(Acquired::No { holder });
            }
            tracing::debug!(key, "shared lock refused by a lock-delay");
            delay.wait().await;
        } else if let Some(r) = refusals.iter().find(|r| !r.is_stale() && !r.is_held()) {
            return Err(AcquireError::Consul(ConsulError::Rejected {
                op: Op::KvWrite(key.to_string()),
                status: 409,
                body: r.what.clone(),
            }));
        }
        // A writer or another reader came first: read again.
        waiter.read_now();
    }
}

/// A shared lock we hold: our entry.
#[derive(Debug)]
pub struct Holding {
    pub held: Held,
    entry: String,
    index: QueryIndex,
}

impl Holding {
    /// Watches our entry until it is no longer ours: deleted, released
    /// (by `lockrun release`, or by Consul when the session ended).
    pub async fn watch(&mut self, client: &Client) -> Lost {
        let entry = self.entry.clone();
        let mut waiter = Waiter::watching(self.index);
        loop {
            let read = waiter.next_read().await.expect("a watch waits for ever");
            let result = client.kv_get(&entry, read).await;
            let pair = match waiter.answer(&format!("watching `{entry}`"), result).await {
                Ok(Some(pair)) => pair,
                Ok(None) => continue,
                Err(e) => return Lost::Watch(format!("cannot watch the lock any more: {e}")),
            };
            self.index = waiter.index();
            match pair.as_ref().and_then(KvPair::holder) {
                Some(h) if h == self.held.session.as_str() => {}
                Some(h) => return Lost::Watch(format!("our reader's entry `{entry}` is now held by session {h}")),
                None if pair.is_none() => {
                    return Lost::Watch(format!("our reader's entry `{entry}` was deleted"))
                }
                None => return super::leader::released(client, &self.held.session).await,
            }
        }
    }
}

/// Leaves: our entry deleted and ourselves taken out of the record (the
/// record deleted when nobody else is in it), in one transaction, so that a
/// waiting writer wakes once. Idempotent, so safe after a cancelled
/// acquisition; if the record keeps changing, the entry alone goes, and the
/// next writer prunes us.
pub async fn release(client: &Client, key: &str, session: &SessionId) -> Result<(), ConsulError> {
    let entry = reader_key(key, session.as_str());
    for _ in 0..5 {
        let look = look(client, key, Read::now()).await?;
        let Dot::Readers(index) = look.dot else {
            break;
        };
        if !look.members.contains(session.as_str()) {
            break;
        }
        let left = look.members_with(session.as_str(), false);
        let encoded = encode(&left);
        let record = if left.is_empty() {
            TxnOp::DeleteCas {
                key: &look.record_key,
                index,
            }
        } else {
            TxnOp::Cas {
                key: &look.record_key,
                value: &encoded,
                flags: SHARED_FLAG,
                index,
            }
        };
        let ops = [TxnOp::Delete { key: &entry }, record];
        match client.txn(&ops).await? {
            Txn::Applied(_) => return Ok(()),
            Txn::Refused(refusals) if refusals.iter().all(Refusal::is_stale) => continue,
            Txn::Refused(refusals) => {
                tracing::debug!(key, "could not leave the readers' record: {}", refusals[0].what);
                break;
            }
        }
    }
    client.kv_delete(&entry, None).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_round_trips() {
        let readers: BTreeSet<String> = ["a".to_string(), "b".to_string()].into_iter().collect();
        assert_eq!(encode(&readers), br#"{"Readers":{"a":true,"b":true}}"#.to_vec());
        assert_eq!(decode(&encode(&readers)).unwrap(), readers);
        assert!(decode(br#"{"Readers":null}"#).unwrap().is_empty());
        assert!(decode(br#"{"Readers":7}"#).is_err());
        assert!(decode(b"nope").is_err());
    }
}
