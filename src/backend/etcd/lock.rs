//! The lock and semaphore algorithms on etcd's keys.
//!
//! A lock is etcd's concurrency mutex (`client/v3/concurrency/mutex.go`),
//! so `etcdctl lock KEY` and `etcdctl elect KEY` exclude us and we them:
//! each contender puts a key under `KEY/` with its lease, the lowest
//! CreateRevision under `KEY/` holds, and each waiter watches only its
//! nearest predecessor until it is deleted. etcd's mutex puts
//! `KEY/<lease id in hex>`; our writer puts `KEY/write/<lease id in hex>`,
//! where the reader of etcd's reader-writer recipe looks for writers, and
//! waits as the mutex does, for every older key under `KEY/` whatever its
//! name (as the mutex waits for ours).
//!
//! A semaphore with N slots ranks the contenders under `PREFIX/` the same
//! way, and the first N hold. Each contender's value is a small JSON
//! document with the `--value` and the limit, so a contender with another
//! limit is noticed and named.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::Instant;

use super::client::{Client, Kv, Range};
use super::error::EtcdError;

/// How long cleanup calls (delete, revoke) may take.
pub const CLEANUP_TIMEOUT: Duration = Duration::from_secs(5);

/// Our contender key, as the transaction that put it found things.
#[derive(Debug, Clone)]
pub struct Entered {
    pub key: Vec<u8>,
    pub create_revision: i64,
    /// The oldest contender at that moment (maybe us).
    pub first: Option<Kv>,
    /// The revision the transaction ran at: our key existed then.
    pub revision: i64,
    /// When the transaction put our key: the two contenders created
    /// nearest before it, newest first, as of `revision` (the first look of
    /// [`wait_predecessors`], read in the same transaction).
    pub predecessors: Option<Vec<Kv>>,
}

/// The contender key of `lease` under `prefix` (which ends with `/`):
/// lowercase hex, not padded, as etcd's `fmt.Sprintf("%s%x", pfx, lease)`.
pub fn contender_key(prefix: &[u8], lease: i64) -> Vec<u8> {
    let mut key = prefix.to_vec();
    key.extend_from_slice(format!("{lease:x}").as_bytes());
    key
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn shown(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

/// Puts our contender key `key` (under `prefix`) with the lease unless it
/// exists, in one transaction that also reads the oldest contender under
/// `prefix` (etcd's `Mutex.tryAcquire`): `If CreateRevision(me)==0 Then
/// Put(me), Get(first), Get(nearest) Else Get(me), Get(first)`. `nearest`
/// is the first look of a wait ([`wait_predecessors`]): the three newest
/// keys under `prefix`, our new key and the two created before it, so a
/// waiter goes from this transaction straight to its watch, as
/// `etcdctl lock` goes from its transaction to a read and then its watch.
pub async fn enter(
    client: &Client,
    prefix: &[u8],
    key: Vec<u8>,
    lease: i64,
    value: &[u8],
) -> Result<Entered, EtcdError> {
    let first =
        json!({ "request_range": Range::prefix(prefix).first_created().limited(1).to_json() });
    let nearest =
        json!({ "request_range": Range::prefix(prefix).newest_first().limited(3).to_json() });
    let answer = client
        .txn(
            vec![json!({
                "key": b64(&key),
                "target": "CREATE",
                "result": "EQUAL",
                "create_revision": "0",
            })],
            vec![
                json!({ "request_put": {
                    "key": b64(&key),
                    "value": b64(value),
                    "lease": lease.to_string(),
                }}),
                first.clone(),
                nearest,
            ],
            vec![
                json!({ "request_range": Range::key(&key).to_json() }),
                first,
            ],
            &format!("entering `{}`", shown(&key)),
        )
        .await?;
    let (create_revision, first, predecessors) = if answer.succeeded {
        let [first, nearest] = answer.ranges.as_slice() else {
            return Err(ranges_asked(&key, 2, answer.ranges.len()));
        };
        // Our key is the one this transaction created: every other key was
        // there before it.
        let older = nearest
            .kvs
            .iter()
            .filter(|kv| kv.key != key && kv.create_revision < answer.revision)
            .take(2)
            .cloned()
            .collect();
        (answer.revision, first.kvs.first().cloned(), Some(older))
    } else {
        let [mine, first] = answer.ranges.as_slice() else {
            return Err(ranges_asked(&key, 2, answer.ranges.len()));
        };
        match mine.kvs.first() {
            Some(kv) => (kv.create_revision, first.kvs.first().cloned(), None),
            None => return Err(EtcdError::KeyGone { key: shown(&key) }),
        }
    };
    Ok(Entered {
        key,
        create_revision,
        first,
        revision: answer.revision,
        predecessors,
    })
}

fn ranges_asked(key: &[u8], asked: usize, got: usize) -> EtcdError {
    EtcdError::Decode {
        what: format!("entering `{}`", shown(key)),
        cause: format!("{got} range answers where {asked} were asked"),
    }
}

/// Deletes our contender key: we stop waiting and hold nothing.
pub async fn leave(client: &Client, key: &[u8]) -> Result<(), EtcdError> {
    client.delete(key, CLEANUP_TIMEOUT).await.map(drop)
}

/// Waits until no key under `prefix` was created before our key `me`
/// (etcd's `waitDeletes`): watches the nearest older one until it is
/// deleted, then looks again. Each look also confirms that `me` still exists,
/// as etcd's mutex does once it stops waiting (we may have waited past our
/// lease), in the same read-only transaction. When the nearest older key is
/// the only one, its deletion is the end of the wait with no look after it
/// (see `wait_last_predecessor`): a handover costs no round trip after
/// the wake-up. Returns the revision at which we were first. Transient
/// failures are retried: the lease, renewed by the caller meanwhile,
/// decides how long we may wait.
pub async fn wait_predecessors(
    client: &Client,
    prefix: &[u8],
    me: &Entered,
) -> Result<i64, EtcdError> {
    let mut pause = Pause::default();
    // The two nearest older keys: whether the nearest is the last.
    let nearest = Range {
        max_create_revision: me.create_revision - 1,
        ..Range::prefix(prefix)
    }
    .newest_first()
    .limited(2);
    let look = [
        json!({ "request_range": nearest.to_json() }),
        json!({ "request_range": Range::key(&me.key).to_json() }),
    ];
    let what = format!("waiting for `{}`", shown(prefix));
    // The first look came with our entry, when it put our key.
    let mut entered = me.predecessors.clone().map(|kvs| (kvs, me.revision));
    loop {
        let (predecessors, revision) = match entered.take() {
            Some(seen) => seen,
            None => {
                let answer = match client
                    .txn(Vec::new(), look.to_vec(), Vec::new(), &what)
                    .await
                {
                    Ok(answer) => answer,
                    Err(e) if e.is_transient() => {
                        pause.after(&e).await;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let [predecessors, mine] = answer.ranges.as_slice() else {
                    return Err(EtcdError::Decode {
                        what,
                        cause: format!(
                            "{} range answers where 2 were asked",
                            answer.ranges.len()
                        ),
                    });
                };
                if mine.kvs.is_empty() {
                    return Err(EtcdError::KeyGone {
                        key: shown(&me.key),
                    });
                }
                (predecessors.kvs.clone(), answer.revision)
            }
        };
        let Some(predecessor) = predecessors.first() else {
            return Ok(revision);
        };
        let waited = if predecessors.len() == 1 {
            wait_last_predecessor(client, &predecessor.key, &me.key, revision).await
        } else {
            wait_deleted(client, &predecessor.key, revision)
                .await
                .map(|()| None)
        };
        match waited {
            Ok(Some(revision)) => return Ok(revision),
            Ok(None) => pause = Pause::default(),
            Err(e) if e.is_transient() => pause.after(&e).await,
            Err(e) => return Err(e),
        }
    }
}

/// Waits for the deletion of `predecessor`, the one key older than ours
/// (`me`) at `revision`, where `me` existed: `Some` of the deletion's
/// revision, at which we are first, or `None` when the watch cannot tell
/// (compaction) and the caller looks again.
///
/// No key created after `revision` can be older than ours (create
/// revisions only grow), so once `predecessor` is deleted nobody older is
/// left. That `me` still existed then we learn from the same watch: it
/// covers both keys (and the keys between them in key order, whose
/// deletions we skip), and reports every deletion in it in revision order,
/// so a deletion of `me` at or before the predecessor's would come first or
/// in the same message. We are first as of the deletion's own revision,
/// which is what a read after the wake-up would confirm one round trip
/// later; a deletion of `me` after it is a lost lock, as after that read.
async fn wait_last_predecessor(
    client: &Client,
    predecessor: &[u8],
    me: &[u8],
    revision: i64,
) -> Result<Option<i64>, EtcdError> {
    let (low, high) = if predecessor < me {
        (predecessor, me)
    } else {
        (me, predecessor)
    };
    let mut end = high.to_vec();
    end.push(0);
    let mut watch = client.watch(low, Some(&end), revision + 1, true).await?;
    loop {
        let batch = watch.next().await?;
        if batch.canceled {
            return Ok(None);
        }
        let deleted = |key: &[u8]| {
            batch
                .events
                .iter()
                .find(|e| e.deleted && e.kv.key == key)
                .map(|e| e.kv.mod_revision)
        };
        if deleted(me).is_some() {
            return Err(EtcdError::KeyGone { key: shown(me) });
        }
        match deleted(predecessor) {
            Some(at) if at > revision => return Ok(Some(at)),
            // A deletion without its revision: we look instead.
            Some(_) => return Ok(None),
            None => {}
        }
    }
}

/// Returns once `key` is deleted after `revision`, or once the watch can no
/// longer tell (compaction): the caller looks again either way.
async fn wait_deleted(client: &Client, key: &[u8], revision: i64) -> Result<(), EtcdError> {
    let mut watch = client.watch(key, None, revision + 1, true).await?;
    loop {
        let batch = watch.next().await?;
        if batch.canceled || batch.events.iter().any(|e| e.deleted) {
            return Ok(());
        }
    }
}

/// Backoff between attempts after transient failures while waiting.
#[derive(Debug, Default)]
pub struct Pause {
    next: Duration,
}

impl Pause {
    pub async fn after(&mut self, e: &EtcdError) {
        self.next = (self.next * 2).clamp(Duration::from_millis(100), Duration::from_secs(2));
        tracing::debug!("{e}; trying again in {:?}", self.next);
        tokio::time::sleep(self.next).await;
    }
}

/// Whether `kv` is an entry of the lock whose prefix is `prefix`: the key
/// is `prefix`, `prefix` and `read/` (our readers, the recipe's layout) or
/// `prefix` and `write/` (our writers), then a lease id in hex, with that
/// lease attached.
pub fn is_entry(prefix: &[u8], kv: &Kv) -> bool {
    kv.lease != 0
        && [
            contender_key(prefix, kv.lease),
            contender_key(&readers_of(prefix), kv.lease),
            contender_key(&writers_of(prefix), kv.lease),
        ]
        .contains(&kv.key)
}

/// A usage error when the oldest contender a lock's queue showed us (see
/// [`enter`]) is a semaphore's (its value names a limit): KEY is that
/// semaphore's prefix, and waiting behind its holders as behind a lock's
/// would look like a busy lock for as long as any slot is held.
pub fn a_semaphore_already(name: &str, me: &Entered) -> Option<EtcdError> {
    let first = me.first.as_ref().filter(|kv| kv.key != me.key)?;
    let (_, limit) = parse_slot_value(&first.value)?;
    Some(EtcdError::Usage(format!(
        "`{name}` is a semaphore's prefix (`{}` is one of its contenders); use `lockrun semaphore --limit {limit} {name}`, or another KEY for a leader lock",
        first.key_str()
    )))
}

/// Where a lockrun holder keeps its facts (fence, host, pid, the child's
/// group), beside its contender key, whose value stays the `--value` alone
/// for `etcdctl elect -l`: `\0lockrun/holder/<lease id in hex>`, attached
/// to the holder's lease. It cannot be a contender of any lock: a lock's
/// contenders are `NAME/...`, and no lock name starts with a NUL (lockrun
/// refuses control characters in a key, and no command line can hold one,
/// so neither can `etcdctl lock`'s). For the same reason no `lockrun put`
/// can write it.
pub fn facts_key(lease: i64) -> Vec<u8> {
    format!("\0lockrun/holder/{lease:x}").into_bytes()
}

/// The mark that `name` is a lock or semaphore: `\0lockrun/lock/<name>`,
/// with no lease, written with a holder's facts ([`record`]) and kept, so
/// that `put --sequencer` knows the prefix `name/` for a lock's own
/// records while nobody holds it (a leaseless key there would keep every
/// later contender waiting for ever). Like [`facts_key`], under no lock's
/// prefix and out of `put`'s reach.
pub fn lock_mark(name: &str) -> Vec<u8> {
    format!("\0lockrun/lock/{name}").into_bytes()
}

/// Where `--replace` leaves its note for the holder whose contender key is
/// `holder` ([`crate::backend::ReplaceNote`]): `\0lockrun/replaced/<key>`,
/// with no lease, out of every lock's prefix and of `put`'s reach, as
/// [`facts_key`] is.
pub fn note_key(holder: &str) -> Vec<u8> {
    format!("\0lockrun/replaced/{holder}").into_bytes()
}

/// Writes `note` for the holder whose contender key is `holder`, only
/// while that key still exists and no note is there (another replacer's,
/// whose removal must not read as ours): whether it was written.
pub async fn leave_note(
    client: &Client,
    holder: &str,
    note: &crate::backend::ReplaceNote,
) -> Result<bool, EtcdError> {
    let answer = client
        .txn(
            vec![
                json!({
                    "key": b64(holder.as_bytes()),
                    "target": "CREATE",
                    "result": "GREATER",
                    "create_revision": "0",
                }),
                json!({
                    "key": b64(&note_key(holder)),
                    "target": "CREATE",
                    "result": "EQUAL",
                    "create_revision": "0",
                }),
            ],
            vec![json!({ "request_put": {
                "key": b64(&note_key(holder)),
                "value": b64(&note.encode()),
            }})],
            vec![],
            &format!("leaving --replace's note for `{holder}`"),
        )
        .await?;
    Ok(answer.succeeded)
}

/// A holder's facts, as [`facts_key`] keeps them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Facts {
    /// The contender key these facts are about, and its CreateRevision:
    /// facts left by an earlier round on the same lease never describe a
    /// later one.
    pub key: String,
    pub create_revision: i64,
    /// The holder's `LOCKRUN_LOCK_INDEX`.
    pub fence: u64,
    pub host: String,
    pub pid: u32,
    pub child_pgid: Option<u32>,
}

impl Facts {
    /// Whether these facts describe the holder whose key is `kv`.
    pub fn describe(&self, kv: &Kv) -> bool {
        self.key.as_bytes() == kv.key.as_slice() && self.create_revision == kv.create_revision
    }
}

/// Writes `facts` with `lease`, and the mark that `name` is a lock
/// ([`lock_mark`]), only while our contender key is still the one created
/// at `facts.create_revision`: a holder that has lost its key leaves no
/// facts.
pub async fn record(
    client: &Client,
    name: &str,
    lease: i64,
    facts: &Facts,
) -> Result<(), EtcdError> {
    let body = serde_json::to_vec(facts).expect("facts serialize");
    client
        .txn(
            vec![json!({
                "key": b64(facts.key.as_bytes()),
                "target": "CREATE",
                "result": "EQUAL",
                "create_revision": facts.create_revision.to_string(),
            })],
            vec![
                json!({ "request_put": {
                    "key": b64(&facts_key(lease)),
                    "value": b64(&body),
                    "lease": lease.to_string(),
                }}),
                json!({ "request_put": { "key": b64(&lock_mark(name)), "value": "" }}),
            ],
            vec![],
            &format!("recording the holder's facts beside `{}`", facts.key),
        )
        .await
        .map(drop)
}

/// The facts of the holder whose key is `kv`, when a lockrun wrote them
/// for that very key; `None` for `etcdctl`, or before they are written.
pub async fn facts_of(client: &Client, kv: &Kv) -> Result<Option<Facts>, EtcdError> {
    if kv.lease == 0 {
        return Ok(None);
    }
    let answer = client.range(&Range::key(&facts_key(kv.lease))).await?;
    Ok(answer
        .kvs
        .first()
        .filter(|stored| stored.lease == kv.lease)
        .and_then(|stored| serde_json::from_slice::<Facts>(&stored.value).ok())
        .filter(|facts| facts.describe(kv)))
}

/// What a semaphore contender stores.
pub fn slot_value(value: &str, limit: u32) -> Vec<u8> {
    json!({ "value": value, "limit": limit })
        .to_string()
        .into_bytes()
}

/// A contender's value and limit, when it is lockrun's.
pub fn parse_slot_value(raw: &[u8]) -> Option<(String, u32)> {
    let v: Value = serde_json::from_slice(raw).ok()?;
    let value = v.get("value")?.as_str()?.to_owned();
    let limit = u32::try_from(v.get("limit")?.as_u64()?).ok()?;
    Some((value, limit))
}

/// The semaphore's contenders, oldest first, each checked to agree on
/// `limit`.
pub async fn contenders(
    client: &Client,
    name: &str,
    prefix: &[u8],
    limit: u32,
) -> Result<(Vec<Kv>, i64), EtcdError> {
    let answer = client.range(&Range::prefix(prefix).first_created()).await?;
    for kv in &answer.kvs {
        match parse_slot_value(&kv.value) {
            Some((_, theirs)) if theirs == limit => {}
            Some((_, theirs)) => {
                return Err(EtcdError::LimitMismatch {
                    prefix: name.to_owned(),
                    ours: limit,
                    theirs,
                    key: kv.key_str(),
                })
            }
            None if is_entry(prefix, kv) => {
                return Err(EtcdError::Usage(format!(
                    "`{name}` is a leader lock (`{}` is a contender's entry, as `lockrun elect` and `etcdctl lock` write them), not a semaphore's prefix; use `lockrun elect {name}`, or another PREFIX for the semaphore",
                    kv.key_str()
                )))
            }
            None => {
                return Err(EtcdError::Foreign {
                    prefix: name.to_owned(),
                    key: kv.key_str(),
                })
            }
        }
    }
    Ok((answer.kvs, answer.revision))
}

/// How a semaphore wait ended.
pub enum SlotWait {
    /// We rank among the first `limit`: our rank.
    Held { rank: u32, revision: i64 },
    /// Every slot is taken (only without waiting); the oldest holder's
    /// value.
    Busy(Option<String>),
}

/// Waits until fewer than `limit` contenders under `prefix` are older than
/// our key. No single key would do to watch: holders leave in any order,
/// so a waiter watching one of them would miss the others' releases. We
/// watch the prefix for deletions instead and count down the older keys
/// ourselves, so a release sends a fresh read only from the waiter it lets
/// in; the rest merely tick their count.
pub async fn wait_slot(
    client: &Client,
    name: &str,
    prefix: &[u8],
    me: &Entered,
    limit: u32,
    once: bool,
) -> Result<SlotWait, EtcdError> {
    let mut pause = Pause::default();
    loop {
        let (kvs, revision) = match contenders(client, name, prefix, limit).await {
            Ok(found) => found,
            Err(e) if e.is_transient() && !once => {
                pause.after(&e).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        if !kvs.iter().any(|kv| kv.key == me.key) {
            return Err(EtcdError::KeyGone {
                key: shown(&me.key),
            });
        }
        let mut older: HashSet<Vec<u8>> = kvs
            .iter()
            .filter(|kv| kv.create_revision < me.create_revision)
            .map(|kv| kv.key.clone())
            .collect();
        if older.len() < limit as usize {
            let rank = u32::try_from(older.len()).expect("fewer than limit");
            return Ok(SlotWait::Held { rank, revision });
        }
        if once {
            let holder = kvs
                .first()
                .and_then(|kv| parse_slot_value(&kv.value))
                .map(|(v, _)| v);
            return Ok(SlotWait::Busy(holder));
        }
        let end = super::client::prefix_end(prefix);
        let counted = async {
            let mut watch = client.watch(prefix, Some(&end), revision + 1, true).await?;
            loop {
                let batch = watch.next().await?;
                if batch.canceled {
                    return Ok(());
                }
                for event in batch.events.iter().filter(|e| e.deleted) {
                    if event.kv.key == me.key {
                        return Err(EtcdError::KeyGone {
                            key: shown(&me.key),
                        });
                    }
                    older.remove(&event.kv.key);
                }
                if older.len() < limit as usize {
                    return Ok(());
                }
            }
        };
        match counted.await {
            Ok(()) => pause = Pause::default(),
            Err(e) if e.is_transient() => pause.after(&e).await,
            Err(e) => return Err(e),
        }
    }
}

/// Waits out a deadline: `None` once it passes.
pub async fn until<T>(
    deadline: Option<Instant>,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    match deadline {
        Some(at) => tokio::time::timeout_at(at, work).await.ok(),
        None => Some(work.await),
    }
}

/// Where a lock's readers put their keys, in etcd's reader-writer recipe
/// (`client/v3/experimental/recipes/rwmutex.go`): `KEY/read/` under the
/// lock's `prefix` (`KEY/`). A recipe writer's are under `KEY/write/`.
pub fn readers_of(prefix: &[u8]) -> Vec<u8> {
    let mut readers = prefix.to_vec();
    readers.extend_from_slice(b"read/");
    readers
}

/// Where our writers put their keys: `KEY/write/` under the lock's
/// `prefix`, where the recipe's reader looks for writers (it waits only
/// for keys under `KEY/write`, so it would not see etcd's mutex entries,
/// `KEY/<lease>`). Every writer, ours, the recipe's and etcd's mutex,
/// waits for every older key under `KEY/`, so they exclude each other
/// whatever their names.
pub fn writers_of(prefix: &[u8]) -> Vec<u8> {
    let mut writers = prefix.to_vec();
    writers.extend_from_slice(b"write/");
    writers
}

/// Whether `key`, under the lock's `prefix`, is a reader's.
pub fn is_reader(prefix: &[u8], key: &[u8]) -> bool {
    key.starts_with(&readers_of(prefix))
}

/// Waits until no key under the lock's `prefix` but a reader's was created
/// before ours (`me`, a reader): the recipe's reader waits only for
/// `KEY/write` keys (ours and the recipe's writers), and we wait as well
/// for the entries of etcd's mutex (`etcdctl lock`, and lockrun before its
/// writers moved to `KEY/write/`), which are writers too. Each look
/// confirms that `me` still exists, in the same read-only transaction, and
/// waits for the deletion of the newest such key. Returns the revision at
/// which none was left, or `None` when `once` and one is there.
pub async fn wait_writers(
    client: &Client,
    prefix: &[u8],
    me: &Entered,
    once: bool,
) -> Result<Option<i64>, EtcdError> {
    let readers = readers_of(prefix);
    let older = |key: Vec<u8>, end: Vec<u8>| {
        let range = Range {
            key,
            range_end: Some(end),
            max_create_revision: me.create_revision - 1,
            ..Range::default()
        }
        .newest_first()
        .limited(1);
        json!({ "request_range": range.to_json() })
    };
    let look = [
        older(prefix.to_vec(), readers.clone()),
        older(super::client::prefix_end(&readers), super::client::prefix_end(prefix)),
        json!({ "request_range": Range::key(&me.key).to_json() }),
    ];
    let what = format!("waiting for the writers of `{}`", shown(prefix));
    let mut pause = Pause::default();
    loop {
        let answer = match client
            .txn(Vec::new(), look.to_vec(), Vec::new(), &what)
            .await
        {
            Ok(answer) => answer,
            Err(e) if e.is_transient() => {
                pause.after(&e).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let [low, high, mine] = answer.ranges.as_slice() else {
            return Err(EtcdError::Decode {
                what,
                cause: format!("{} range answers where 3 were asked", answer.ranges.len()),
            });
        };
        if mine.kvs.is_empty() {
            return Err(EtcdError::KeyGone {
                key: shown(&me.key),
            });
        }
        let newest = low
            .kvs
            .iter()
            .chain(high.kvs.iter())
            .max_by_key(|kv| kv.create_revision);
        let Some(writer) = newest else {
            return Ok(Some(answer.revision));
        };
        if once {
            return Ok(None);
        }
        match wait_deleted(client, &writer.key, answer.revision).await {
            Ok(()) => pause = Pause::default(),
            Err(e) if e.is_transient() => pause.after(&e).await,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contender_keys_are_etcds_unpadded_lowercase_hex() {
        assert_eq!(
            contender_key(b"jobs/", 0x694d_7a1b_2c3d),
            b"jobs/694d7a1b2c3d"
        );
        assert_eq!(contender_key(b"a/", 10), b"a/a");
    }

    #[test]
    fn entries_are_the_mutexs_our_readers_and_our_writers() {
        let kv = |key: &[u8], lease: i64| Kv {
            key: key.to_vec(),
            value: Vec::new(),
            create_revision: 1,
            mod_revision: 1,
            lease,
        };
        assert!(is_entry(b"jobs/", &kv(b"jobs/a", 10)));
        assert!(is_entry(b"jobs/", &kv(b"jobs/read/a", 10)));
        assert!(is_entry(b"jobs/", &kv(b"jobs/write/a", 10)));
        assert!(!is_entry(b"jobs/", &kv(b"jobs/write/a", 0)));
        assert!(!is_entry(b"jobs/", &kv(b"jobs/write/b", 10)));
        assert!(!is_entry(b"jobs/", &kv(b"jobs/other/a", 10)));
    }

    #[test]
    fn prefix_ends_as_etcds_get_prefix_range_end() {
        use super::super::client::prefix_end;
        assert_eq!(prefix_end(b"a/"), b"a0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff\xff"), b"\0");
    }

    #[test]
    fn slot_values_round_trip_and_reject_others() {
        let stored = slot_value("web-1 \"quoted\"", 3);
        assert_eq!(
            parse_slot_value(&stored),
            Some(("web-1 \"quoted\"".to_owned(), 3))
        );
        assert_eq!(parse_slot_value(b""), None);
        assert_eq!(parse_slot_value(b"{\"value\":\"x\"}"), None);
    }
}
