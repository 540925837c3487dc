//! The leader lock: one key, held with `?acquire=` by one session at a time,
//! flagged with the Go API's `LockFlagValue` so `consul lock` recognises it.

use crate::consul::blocking::{QueryIndex, RateLimit};
use crate::consul::kv::Read;
use crate::consul::{Client, ConsulError, KvPair, SessionId};
use crate::lease::Lost;

use super::{
    transient_pause, AcquireError, Acquired, DelayBackoff, Held, Patience, LOCK_FLAG, WATCH_WAIT,
};

/// A lock we hold, with what the watch and the release need to know.
#[derive(Debug)]
pub struct Holding {
    pub held: Held,
    /// The key's ModifyIndex as last seen while it was ours.
    pub modify_index: u64,
    index: QueryIndex,
}

fn check_flags(key: &str, pair: &KvPair) -> Result<(), AcquireError> {
    if pair.flags == LOCK_FLAG {
        return Ok(());
    }
    let what = if pair.flags == super::SEMAPHORE_FLAG {
        "a semaphore entry".to_string()
    } else {
        format!("data that is not a lock (flags {})", pair.flags)
    };
    Err(AcquireError::Conflict(format!(
        "key `{key}` holds {what}; lockrun will not take it over: choose another key, or delete it if it is stale"
    )))
}

/// Takes the lock on `key`, waiting per `patience` with blocking reads while
/// someone else holds it. The caller bounds the whole call by `--timeout`
/// and, when it is cancelled, must assume the lock might be held.
pub async fn acquire(
    client: &Client,
    key: &str,
    session: &SessionId,
    value: &[u8],
    patience: Patience,
) -> Result<Acquired<Holding>, AcquireError> {
    let mut index = QueryIndex::NONE;
    let mut block = false;
    let mut delay = DelayBackoff::new();
    let mut errors = 0;
    let mut limit = RateLimit::new(5, 20);
    let mut holder = None;
    loop {
        let read = if block {
            match patience.next_wait() {
                Some(wait) => Read::blocking(index, wait),
                None => return Ok(Acquired::No { holder }),
            }
        } else {
            Read::now()
        };
        limit.acquire().await;
        let (pair, returned) = match client.kv_get(key, read).await {
            Ok(answer) => answer,
            Err(e) if e.is_transient() && !matches!(patience, Patience::Once) => {
                tracing::warn!("waiting for `{key}`: {e}; retrying");
                transient_pause(&mut errors).await;
                block = false;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        errors = 0;
        index = index.after(returned);
        if let Some(pair) = &pair {
            check_flags(key, pair)?;
            match pair.holder() {
                Some(h) if h == session.as_str() => {
                    return Ok(Acquired::Yes(holding(key, session, pair, index)));
                }
                Some(h) => {
                    if holder.as_deref() != Some(h) {
                        tracing::info!(
                            key,
                            holder = h,
                            "waiting: the lock is held by another session"
                        );
                    }
                    holder = Some(h.to_string());
                    block = true;
                    continue;
                }
                None => {}
            }
        }
        if client.kv_acquire(key, session, value, LOCK_FLAG).await? {
            // Read it back: the child is told the LockIndex, and the watch
            // and release need the ModifyIndex.
            let (pair, returned) = client.kv_get(key, Read::consistent()).await?;
            index = QueryIndex::NONE.after(returned);
            match pair {
                Some(pair) if pair.holder() == Some(session.as_str()) => {
                    return Ok(Acquired::Yes(holding(key, session, &pair, index)));
                }
                _ => {
                    // Lost between our write and our read (an operator's
                    // release, say): start over.
                    block = false;
                    continue;
                }
            }
        }
        // Refused: someone else got there first, or a lock-delay is running.
        // Only a fresh read tells which.
        let (pair, returned) = client.kv_get(key, Read::now()).await?;
        index = QueryIndex::NONE.after(returned);
        match pair.as_ref().and_then(KvPair::holder) {
            Some(h) => {
                if matches!(patience, Patience::Once) {
                    return Ok(Acquired::No {
                        holder: Some(h.to_string()),
                    });
                }
                holder = Some(h.to_string());
                block = true;
            }
            None => {
                if matches!(patience, Patience::Once) {
                    return Ok(Acquired::No { holder: None });
                }
                tracing::debug!(
                    key,
                    "acquire refused with no holder: a lock-delay is running"
                );
                delay.wait().await;
                block = false;
            }
        }
    }
}

fn holding(key: &str, session: &SessionId, pair: &KvPair, index: QueryIndex) -> Holding {
    Holding {
        held: Held {
            key: key.to_string(),
            session: session.clone(),
            lock_index: pair.lock_index,
        },
        modify_index: pair.modify_index,
        index,
    }
}

impl Holding {
    /// Watches the key until it is no longer ours. Transient errors are
    /// retried for as long as it takes: the lease, not this watch, decides
    /// when silence means loss.
    pub async fn watch(&mut self, client: &Client) -> Lost {
        let key = self.held.key.clone();
        let mut errors = 0;
        let mut limit = RateLimit::new(5, 20);
        loop {
            limit.acquire().await;
            let read = Read {
                index: self.index,
                wait: Some(WATCH_WAIT),
                consistent: true,
            };
            let (pair, returned) = match client.kv_get(&key, read).await {
                Ok(answer) => answer,
                Err(e) if e.is_transient() => {
                    tracing::warn!("watching `{key}`: {e}; retrying");
                    transient_pause(&mut errors).await;
                    self.index = QueryIndex::NONE;
                    continue;
                }
                Err(e) => return Lost::Watch(format!("cannot watch the lock any more: {e}")),
            };
            errors = 0;
            self.index = self.index.after(returned);
            match pair {
                None => return Lost::Watch(format!("the lock key `{key}` was deleted")),
                Some(pair) => match pair.holder() {
                    Some(h) if h == self.held.session.as_str() => {
                        self.modify_index = pair.modify_index;
                    }
                    Some(h) => {
                        return Lost::Watch(format!("the lock is now held by session {h}"));
                    }
                    None => return Lost::Watch("the lock was released by someone else".into()),
                },
            }
        }
    }
}

/// Gives the lock up. With the ModifyIndex we last saw, the key is deleted
/// with check-and-set, as `consul lock` leaves it (one write, one wake-up for
/// waiters); if it changed since, we only release it, which never clobbers a
/// lock that changed hands. Idempotent: safe after a cancelled acquire.
pub async fn release(
    client: &Client,
    key: &str,
    session: &SessionId,
    value: &[u8],
    modify_index: Option<u64>,
) -> Result<(), ConsulError> {
    if let Some(index) = modify_index {
        if client.kv_delete(key, Some(index)).await? {
            return Ok(());
        }
    }
    client
        .kv_release(key, session.as_str(), value, LOCK_FLAG)
        .await?;
    Ok(())
}
