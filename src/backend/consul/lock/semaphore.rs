//! The semaphore: N slots under a prefix, in the format of Consul's Go API
//! `Semaphore` (and so of `consul lock -n N`). Each contender holds its own
//! entry `PREFIX/<session>`; the slots are the `Holders` of the coordination
//! record `PREFIX/.lock`, which is only ever changed with check-and-set.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::backend::consul::blocking::QueryIndex;
use crate::backend::consul::kv::Read;
use crate::backend::consul::txn::{Txn, TxnOp};
use crate::backend::consul::{Client, ConsulError, KvPair, SessionId};
use crate::backend::Lost;

use super::queue::{self, Turn};
use super::{AcquireError, Acquired, Held, Waiter, SEMAPHORE_FLAG};
use crate::backend::Wait;

/// The coordination record's key under a prefix.
pub fn record_key(prefix: &str) -> String {
    format!("{prefix}/.lock")
}

pub fn contender_key(prefix: &str, session: &SessionId) -> String {
    format!("{prefix}/{session}")
}

/// `{"Limit":N,"Holders":{...}}`, read in the Go map form or the tutorial's
/// list form, written in the map form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub limit: u64,
    pub holders: BTreeSet<String>,
}

impl Record {
    pub fn decode(bytes: &[u8]) -> Result<Record, String> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        let limit = value
            .get("Limit")
            .and_then(Value::as_u64)
            .ok_or("no numeric `Limit`")?;
        let holders = match value.get("Holders") {
            None | Some(Value::Null) => BTreeSet::new(),
            Some(Value::Object(map)) => map
                .iter()
                .filter(|(_, held)| held.as_bool().unwrap_or(true))
                .map(|(id, _)| id.clone())
                .collect(),
            Some(Value::Array(list)) => list
                .iter()
                .map(|id| {
                    id.as_str()
                        .map(str::to_string)
                        .ok_or("a holder that is not a string")
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err("`Holders` is neither an object nor a list".into()),
        };
        Ok(Record { limit, holders })
    }

    pub fn encode(&self) -> Vec<u8> {
        let holders: serde_json::Map<String, Value> = self
            .holders
            .iter()
            .map(|id| (id.clone(), Value::Bool(true)))
            .collect();
        serde_json::to_vec(&serde_json::json!({ "Limit": self.limit, "Holders": holders }))
            .expect("a JSON value serialises")
    }
}

/// The prefix as read in one listing.
#[derive(Debug)]
pub struct View {
    /// The record and its ModifyIndex (0 when absent, for `cas=0`).
    pub record: Option<(Record, u64)>,
    /// Sessions that hold any entry under the prefix: the live contenders.
    pub live: BTreeSet<String>,
    /// Contender entries: key → holding session, if any.
    pub contenders: Vec<KvPair>,
}

impl View {
    pub fn read(prefix: &str, pairs: Vec<KvPair>) -> Result<View, String> {
        let record_key = record_key(prefix);
        let mut record = None;
        let mut live = BTreeSet::new();
        let mut contenders = Vec::new();
        for pair in pairs {
            if let Some(h) = pair.holder() {
                live.insert(h.to_string());
            }
            if pair.key == record_key {
                if pair.flags != SEMAPHORE_FLAG {
                    let what = if pair.flags == super::LOCK_FLAG {
                        "a leader lock (`consul lock` without -n, or `lockrun elect`)".to_string()
                    } else if pair.flags == super::shared::SHARED_FLAG {
                        format!("the readers' record of lock `{prefix}` (`lockrun elect -s {prefix}`), while readers hold")
                    } else {
                        format!("not a semaphore record (flags {})", pair.flags)
                    };
                    return Err(format!("`{record_key}` is {what}; use another prefix"));
                }
                let decoded = Record::decode(pair.value_bytes()).map_err(|e| {
                    format!("`{record_key}` is not a semaphore record ({e}); use another prefix, or delete it if it is stale")
                })?;
                record = Some((decoded, pair.modify_index));
            } else if pair.key.starts_with(&format!("{prefix}/")) {
                contenders.push(pair);
            }
        }
        Ok(View {
            record,
            live,
            contenders,
        })
    }

    /// Holders whose contender entry still has a live session.
    pub fn live_holders(&self) -> BTreeSet<String> {
        match &self.record {
            Some((record, _)) => record
                .holders
                .iter()
                .filter(|h| self.live.contains(*h))
                .cloned()
                .collect(),
            None => BTreeSet::new(),
        }
    }
}

/// A usage error when the semaphore's record key holds a leader lock
/// (`consul lock PREFIX` without -n writes `PREFIX/.lock` so): the user
/// named a lock, not a semaphore.
fn a_lock_already(prefix: &str, pairs: &[KvPair]) -> Option<AcquireError> {
    let record_key = record_key(prefix);
    let lock = pairs
        .iter()
        .find(|p| p.key == record_key && p.flags == super::LOCK_FLAG)?;
    if super::shared::held_by_writer(lock) {
        return Some(AcquireError::Usage(format!(
            "`{record_key}` is held by `lockrun elect {prefix}` while it runs (so that `consul lock {prefix}` waits for it), not a semaphore's record: `{prefix}` is a leader lock; use another PREFIX for the semaphore"
        )));
    }
    Some(AcquireError::Usage(format!(
        "`{record_key}` is a leader lock (`consul lock {prefix}` without -n, or `lockrun elect {record_key}`), not a semaphore's record; use `lockrun elect {record_key}`, or another PREFIX for the semaphore"
    )))
}

fn limit_conflict(prefix: &str, stored: u64, ours: u64) -> AcquireError {
    AcquireError::Conflict(format!(
        "semaphore limit conflict on `{prefix}`: the stored limit is {stored}, this run asked for --limit {ours}; use --limit {stored}, or change it once no holder remains"
    ))
}

pub async fn list(
    client: &Client,
    prefix: &str,
    read: Read,
) -> Result<(Vec<KvPair>, u64), ConsulError> {
    client.kv_list(&format!("{prefix}/"), read).await
}

/// Joins the semaphore and waits for a slot per `patience`. Leaves the
/// contender entry behind on every outcome: the caller's cleanup removes it.
///
/// Joining takes the contender entry and, when a slot is free, adds us to
/// the record in the same transaction: the answer carries the record's new
/// ModifyIndex, the raft index of our own admission, which is our fencing
/// number (a read-back could see a later admission's instead).
pub async fn acquire(
    client: &Client,
    prefix: &str,
    session: &SessionId,
    value: &[u8],
    limit: u64,
    patience: Wait,
) -> Result<Acquired<Holding>, AcquireError> {
    let contender = contender_key(prefix, session);
    let record_key = record_key(prefix);
    let mut waiter = Waiter::acquiring(patience);
    let mut announced = false;
    // As for a leader key (see [`queue`]): lockrun's waiters queue, and
    // only the head watches the slots; the others block on the entry ahead.
    let mut line = queue::Line::new(queue::of_prefix(prefix), patience);
    // One look at the slots out of turn, after the queue ahead sat still.
    let mut peek = false;
    let what = format!("waiting for a slot of `{prefix}`");
    loop {
        if !line.head && !peek {
            match line.wait(client, patience, &mut waiter).await? {
                Turn::Head => {}
                Turn::Stuck => peek = true,
                Turn::Over => return Ok(Acquired::No { holder: None }),
            }
            waiter.read_now();
        }
        let Some(read) = waiter.next_read().await else {
            return Ok(Acquired::No { holder: None });
        };
        let result = list(client, prefix, read).await;
        let Some(pairs) = waiter.answer(&what, result).await? else {
            continue;
        };
        if let Some(e) = a_lock_already(prefix, &pairs) {
            return Err(e);
        }
        let view = View::read(prefix, pairs).map_err(AcquireError::Conflict)?;
        let (mut record, cas) = match &view.record {
            Some((record, modify)) => {
                if record.limit != limit {
                    return Err(limit_conflict(prefix, record.limit, limit));
                }
                (record.clone(), *modify)
            }
            None => (
                Record {
                    limit,
                    holders: BTreeSet::new(),
                },
                0,
            ),
        };
        record.holders = view.live_holders();
        let admitted = record.holders.contains(session.as_str());
        if !admitted && record.holders.len() as u64 >= limit {
            if !announced {
                tracing::info!(target: crate::logging::EVENT, lock = prefix, limit, "waiting: all slots are taken");
                announced = true;
            }
            // We join only with a slot in hand: a contender entry written
            // to wait would cost a write and a read per waiter, and Go's
            // Semaphore counts only the holders.
            waiter.block();
            peek = false;
            line.join(
                client,
                session,
                value,
                &mut waiter,
                &format!("queueing for `{prefix}`"),
            )
            .await?;
            continue;
        }
        peek = false;
        // Already admitted (an answer we lost): the record is written again
        // all the same, so that our number is an index of our own.
        record.holders.insert(session.to_string());
        let encoded = record.encode();
        let mut ops = vec![
            TxnOp::Lock {
                key: &contender,
                value,
                flags: SEMAPHORE_FLAG,
                session,
            },
            TxnOp::Cas {
                key: &record_key,
                value: &encoded,
                flags: SEMAPHORE_FLAG,
                index: cas,
            },
        ];
        ops.extend(line.leaving());
        let refusals = match client.txn(&ops).await {
            Ok(Txn::Applied(pairs)) => {
                let number = pairs[1].modify_index;
                return Ok(Acquired::Yes(Holding::new(
                    prefix,
                    session,
                    number,
                    QueryIndex::NONE.after(number),
                )));
            }
            Ok(Txn::Refused(refusals)) => refusals,
            Err(e) => {
                waiter.retry(&what, e).await?;
                continue;
            }
        };
        if let Some(error) = refusals.iter().find_map(|r| r.error(&contender)) {
            waiter.retry(&what, error).await?;
            continue;
        }
        if let Some(r) = refusals.iter().find(|r| !r.is_stale()) {
            return Err(AcquireError::Conflict(format!(
                "could not take the contender entry `{contender}` ({})",
                r.what
            )));
        }
        // Lost a race for the record: read it again at once.
        waiter.read_now();
    }
}

/// A slot we hold.
#[derive(Debug)]
pub struct Holding {
    pub held: Held,
    prefix: String,
    index: QueryIndex,
}

impl Holding {
    fn new(prefix: &str, session: &SessionId, record_index: u64, index: QueryIndex) -> Holding {
        Holding {
            held: Held {
                key: prefix.to_string(),
                session: session.clone(),
                lock_index: record_index,
            },
            prefix: prefix.to_string(),
            index,
        }
    }

    /// Watches the prefix until our slot is gone: our session dropped from
    /// `Holders`, the record deleted, or our contender entry lost.
    pub async fn watch(&mut self, client: &Client) -> Lost {
        let me = self.held.session.to_string();
        let contender = contender_key(&self.prefix, &self.held.session);
        let mut waiter = Waiter::watching(self.index);
        loop {
            let read = waiter.next_read().await.expect("a watch waits for ever");
            let result = list(client, &self.prefix, read).await;
            let what = format!("watching `{}`", self.prefix);
            let pairs = match waiter.answer(&what, result).await {
                Ok(Some(pairs)) => pairs,
                Ok(None) => continue,
                Err(e) => return Lost::Watch(format!("cannot watch the semaphore any more: {e}")),
            };
            self.index = waiter.index();
            let view = match View::read(&self.prefix, pairs) {
                Ok(view) => view,
                Err(e) => return Lost::Watch(e),
            };
            let mine = view.contenders.iter().find(|p| p.key == contender);
            if mine.and_then(KvPair::holder) != Some(me.as_str()) {
                return Lost::Watch(format!("our contender entry `{contender}` was removed"));
            }
            match &view.record {
                None => return Lost::Watch(format!("`{}` was deleted", record_key(&self.prefix))),
                Some((record, _)) if !record.holders.contains(&me) => {
                    // Our entry is still held by our live session, so this
                    // was a hand edit (`lockrun release`), not a verdict.
                    return Lost::Released(
                        "our slot was taken away (removed from the holders)".into(),
                    );
                }
                Some(_) => {}
            }
        }
    }
}

/// Gives our slot up by deleting our contender entry (and our queue entry,
/// if we were still waiting): one write, so waiters wake once. They prune a
/// holder whose entry is gone, as Go's Semaphore does, so we need not edit
/// the record too. Then, if no contender is left,
/// we delete the record, as `consul lock -n` does, so a later run may choose
/// another limit; of two holders leaving together, whichever looks last
/// sees the other's entry gone. Idempotent, so it is safe after an
/// acquisition that was cancelled half way.
pub async fn release(
    client: &Client,
    prefix: &str,
    session: &SessionId,
) -> Result<(), ConsulError> {
    // With our queue entry, in case we were still waiting: one write.
    let contender = contender_key(prefix, session);
    let entry = queue::entry_key(&queue::of_prefix(prefix), session);
    let ops = [
        TxnOp::Delete { key: &contender },
        TxnOp::Delete { key: &entry },
    ];
    match client.txn(&ops).await {
        Ok(Txn::Applied(_)) => {}
        // A token that may not touch the queue never entered it.
        Ok(Txn::Refused(_)) | Err(ConsulError::Forbidden { .. }) => {
            client.kv_delete(&contender, None).await?;
        }
        Err(e) => return Err(e),
    }
    let (pairs, _) = list(client, prefix, Read::now()).await?;
    if let Ok(View {
        record: Some((_, modify)),
        contenders,
        ..
    }) = View::read(prefix, pairs)
    {
        if !contenders.iter().any(|p| p.holder().is_some()) {
            // With cas: a newcomer that joined meanwhile keeps the record.
            client.kv_delete(&record_key(prefix), Some(modify)).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_go_map_form_and_the_tutorial_list_form() {
        let map = Record::decode(br#"{"Limit":2,"Holders":{"a":true,"b":true}}"#).unwrap();
        let list = Record::decode(br#"{"Limit":2,"Holders":["a","b"]}"#).unwrap();
        assert_eq!(map, list);
        assert_eq!(map.limit, 2);
        let empty = Record::decode(br#"{"Limit":3,"Holders":null}"#).unwrap();
        assert!(empty.holders.is_empty());
    }

    #[test]
    fn writes_the_go_map_form() {
        let record = Record {
            limit: 3,
            holders: ["x".to_string()].into_iter().collect(),
        };
        assert_eq!(
            record.encode(),
            br#"{"Holders":{"x":true},"Limit":3}"#.to_vec()
        );
    }

    #[test]
    fn undecodable_records_are_refused() {
        assert!(Record::decode(b"nope").is_err());
        assert!(Record::decode(br#"{"Holders":{}}"#).is_err());
        assert!(Record::decode(br#"{"Limit":1,"Holders":7}"#).is_err());
    }
}
