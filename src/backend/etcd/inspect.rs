//! What `leader`, `list`, `release`, `put` and `--replace` read and write
//! on etcd (`Inspect`).

use std::time::Duration;

use tokio::time::Instant;

use super::client::{self, Range, Watch};
use super::lock::{self, CLEANUP_TIMEOUT};
use super::{check_key, waiters, Etcd, EtcdError};

use crate::backend::{Changes, Holder, Inspect, Released, ReplaceNote, Target, Which};

impl Inspect for Etcd {
    type Error = EtcdError;
    type Changes = EtcdChanges;

    /// A writer's record at `--replace`'s level, as one that waits keeps
    /// ([`waiters`]), with a lease of its own.
    async fn go_ahead(&self, target: &Target, value: &str) -> Result<Option<crate::backend::Ahead>, EtcdError> {
        let Target::Lock { key, shared: false } = target else {
            return Ok(None);
        };
        let ahead = waiters::Ahead::put(&self.client, key, self.ttl, value).await?;
        Ok(Some(Box::new(ahead)))
    }

    /// A semaphore's contenders store lockrun's slot document (with the
    /// limit); anything else under KEY is a mutex.
    async fn target_of(&self, key: &str) -> Result<Target, EtcdError> {
        let lock = Target::Lock {
            key: key.to_string(),
            shared: false,
        };
        let prefix = Self::prefix(&lock)?;
        let answer = self
            .client
            .range(&Range::prefix(&prefix).first_created().limited(1))
            .await?;
        Ok(
            match answer
                .kvs
                .first()
                .and_then(|kv| lock::parse_slot_value(&kv.value))
            {
                Some((_, limit)) => Target::Slot {
                    prefix: key.to_string(),
                    limit,
                },
                // Readers hold it while the oldest key is a reader's.
                None => Target::Lock {
                    key: key.to_string(),
                    shared: answer
                        .kvs
                        .first()
                        .is_some_and(|kv| lock::is_reader(&prefix, &kv.key)),
                },
            },
        )
    }

    /// etcd's release asks nobody: it revokes the holder's lease, which
    /// deletes its entry at once (see [`Inspect::force_release`]).
    fn asked_line(&self, target: &Target, holder: &Holder) -> String {
        let what = match holder.slot {
            Some(slot) => format!("slot {slot} of `{}`", target.name()),
            None => format!("`{}`", target.name()),
        };
        let entry = holder.entry.as_deref().unwrap_or_default();
        let mut line = format!("revoked the lease holding {what} (entry `{entry}`");
        if let Some(value) = holder.value.as_deref().filter(|v| !v.is_empty()) {
            line.push_str(&format!(", value {value}"));
        }
        line.push_str(
            "): the entry went with it, a rival may take its place now, and a lockrun holder kills its command",
        );
        line
    }

    /// Every contender entry at or under `prefix` (`NAME/<lease id in
    /// hex>` with that lease, `etcdctl lock`'s, and lockrun's
    /// `NAME/read/<lease>` and `NAME/write/<lease>`) names NAME; lockrun's
    /// own records (under a NUL byte) are not keys.
    async fn names_under(&self, prefix: &str) -> Result<Vec<String>, EtcdError> {
        let range = if prefix.is_empty() {
            // Every key from the first after our NUL-led records on.
            Range {
                key: vec![1],
                range_end: Some(vec![0]),
                ..Range::default()
            }
        } else {
            Range::prefix(prefix.as_bytes())
        };
        let answer = self.client.range(&range).await?;
        Ok(answer
            .kvs
            .iter()
            .filter(|kv| kv.lease != 0)
            .filter_map(|kv| {
                let key = std::str::from_utf8(&kv.key).ok()?;
                let (name, id) = key.rsplit_once('/')?;
                // A reader's or writer's entry names the lock above its
                // `read/` or `write/`.
                let name = ["/read", "/write"]
                    .iter()
                    .find_map(|side| name.strip_suffix(side))
                    .unwrap_or(name);
                (id == format!("{:x}", kv.lease) && check_key(name).is_ok())
                    .then(|| name.to_owned())
            })
            .collect())
    }

    /// lockrun's writers waiting for a lock, from their records (see
    /// [`waiters`]); `etcdctl lock`'s keep none and are not shown.
    async fn waiters(&self, target: &Target) -> Result<Option<Vec<crate::backend::Waiter>>, EtcdError> {
        let Target::Lock { key, .. } = target else {
            return Ok(None);
        };
        Ok(Some(
            waiters::waiting(&self.client, key)
                .await?
                .into_iter()
                .map(|s| crate::backend::Waiter {
                    priority: s.level,
                    value: s.value,
                    pid: None,
                })
                .collect(),
        ))
    }

    async fn holders(&self, target: &Target) -> Result<Vec<Holder>, EtcdError> {
        let (holders, _) = self.holders_at(target).await?;
        Ok(holders.into_iter().map(|(h, _)| h).collect())
    }

    async fn changes(&self, target: &Target) -> Result<EtcdChanges, EtcdError> {
        Self::prefix(target)?;
        Ok(EtcdChanges {
            engine: self.clone(),
            target: target.clone(),
            last: None,
            seen: 0,
            watch: None,
        })
    }

    fn asks_by_note(&self) -> bool {
        true
    }

    async fn leave_note(
        &self,
        _target: &Target,
        holder: &Holder,
        note: &ReplaceNote,
    ) -> Result<bool, EtcdError> {
        match &holder.holder_id {
            Some(key) => lock::leave_note(&self.client, key, note).await,
            None => Ok(false),
        }
    }

    async fn clear_note(&self, _target: &Target, holder: &Holder) {
        if let Some(key) = &holder.holder_id {
            if let Err(e) = self.client.delete(&lock::note_key(key), CLEANUP_TIMEOUT).await {
                tracing::warn!("could not remove --replace's note for `{key}`: {e}");
            }
        }
    }

    /// The TTL the holder's lease was granted: its lockrun stops its
    /// command within it of its last keepalive, which came before the
    /// revoke.
    async fn lapse_bound(&self, holder: &Holder) -> Result<Option<Duration>, EtcdError> {
        let Some(lease) = holder
            .entry
            .as_deref()
            .and_then(|e| e.rsplit_once('/'))
            .and_then(|(_, id)| i64::from_str_radix(id, 16).ok())
        else {
            return Ok(None);
        };
        self.client.granted_ttl(lease).await
    }

    async fn note_taken(&self, _target: &Target, holder: &Holder, until: Instant) -> bool {
        let Some(key) = &holder.holder_id else {
            tokio::time::sleep_until(until).await;
            return false;
        };
        let note = lock::note_key(key);
        let taken = async {
            let answer = self.client.range(&Range::key(&note)).await?;
            if answer.kvs.is_empty() {
                return Ok::<bool, EtcdError>(true);
            }
            let mut watch = self
                .client
                .watch(&note, None, answer.revision + 1, true)
                .await?;
            loop {
                let batch = watch.next().await?;
                if !batch.events.is_empty() {
                    return Ok(true);
                }
                if batch.canceled {
                    return Ok(false);
                }
            }
        };
        match tokio::time::timeout_at(until, taken).await {
            Ok(Ok(true)) => true,
            _ => {
                tokio::time::sleep_until(until).await;
                false
            }
        }
    }

    /// Revokes the chosen holders' leases, which deletes their keys: a
    /// lockrun holder sees its key go and stops its child at once. Only a
    /// contender's entry (`KEY/<lease id>`, `KEY/read/<lease id>` or
    /// `KEY/write/<lease id>`, with that lease) is touched: the
    /// oldest key under `KEY/` may be a nested lock's, whose lease is not
    /// ours to revoke, or plain data, not ours to delete.
    async fn force_release(
        &self,
        target: &Target,
        which: &Which,
    ) -> Result<Released<EtcdError>, EtcdError> {
        let prefix = Self::prefix(target)?;
        let (holders, _) = self.holders_at(target).await?;
        let mut chosen = Vec::new();
        for (holder, kv) in holders {
            if !which.picks(&holder) {
                continue;
            }
            if !lock::is_entry(&prefix, &kv) {
                return Err(EtcdError::NotAContender {
                    key: target.name().to_owned(),
                    entry: kv.key_str(),
                });
            }
            chosen.push((holder, kv));
        }
        let mut asked = Vec::new();
        for (holder, kv) in chosen {
            let done = self.client.revoke(kv.lease, CLEANUP_TIMEOUT).await;
            match done {
                Ok(()) => asked.push(holder),
                // Gone already: it let go by itself meanwhile.
                Err(e) if e.is_verdict() => {}
                Err(e) => return Err(e),
            }
        }
        // Every entry was checked before the first revoke: etcd refuses all
        // or none.
        Ok(Released {
            asked,
            refused: Vec::new(),
            nothing: None,
        })
    }
}

/// The holders of a target each time they change, from a watch on its
/// prefix.
#[derive(Debug)]
pub struct EtcdChanges {
    engine: Etcd,
    target: Target,
    last: Option<Vec<Holder>>,
    seen: i64,
    watch: Option<Watch>,
}

/// What tells one list of holders from another: their entries and values.
/// A holder's facts (fence, host, pid) come a round trip after it does
/// ([`EtcdClaim::record_child`]), and are no change of holders: a watch
/// that rereads for another key's event must not print the same holder
/// again for them.
fn identity(holders: &[Holder]) -> Vec<(Option<String>, Option<String>)> {
    holders
        .iter()
        .map(|h| (h.entry.clone(), h.value.clone()))
        .collect()
}

impl EtcdChanges {
    async fn read(&mut self) -> Result<Vec<Holder>, EtcdError> {
        let (holders, revision) = self.engine.holders_at(&self.target).await?;
        self.seen = revision;
        let holders: Vec<Holder> = holders.into_iter().map(|(h, _)| h).collect();
        self.last = Some(holders.clone());
        Ok(holders)
    }
}

impl Changes for EtcdChanges {
    type Error = EtcdError;

    async fn next(&mut self) -> Result<Vec<Holder>, EtcdError> {
        if self.last.is_none() {
            return self.read().await;
        }
        loop {
            if self.watch.is_none() {
                let prefix = Etcd::prefix(&self.target)?;
                let end = client::prefix_end(&prefix);
                let watch = self
                    .engine
                    .client
                    .watch(&prefix, Some(&end), self.seen + 1, false)
                    .await?;
                self.watch = Some(watch);
            }
            let batch = self.watch.as_mut().expect("opened above").next().await;
            match batch {
                Ok(batch) if batch.canceled => self.watch = None,
                Ok(_) => {}
                // A watch that broke is reopened from what we saw.
                Err(EtcdError::Broken { .. }) => self.watch = None,
                Err(e) => return Err(e),
            }
            let before = self.last.as_deref().map(identity);
            let now = self.read().await?;
            if before != Some(identity(&now)) {
                return Ok(now);
            }
        }
    }
}

/// How many times `put --sequencer` reads the prefixes around its key again
/// when one of them changed between the look and the write.
const FENCED_PUT_TRIES: u32 = 5;

/// The prefixes a key lies in, as etcd's mutex names a lock's records:
/// `a/b/c` lies in `a/` and `a/b/`, the records of locks `a` and `a/b`.
fn enclosing_prefixes(key: &str) -> impl Iterator<Item = &str> {
    key.match_indices('/').map(move |(at, _)| &key[..=at])
}

impl Etcd {
    /// Writes `key` only while the contender key `entry` still exists: a
    /// holder's key lives as long as its lease, and no other lease can
    /// create it (`lockrun put --sequencer`). Whether it was written;
    /// `None` when the prefixes around `key` kept changing between the look
    /// and the write.
    ///
    /// A key inside a lock's own records (`L/...`, where a contender holds
    /// `L`, or a lockrun ever held `L`: its mark, [`lock::lock_mark`]) is
    /// refused: etcd's mutex waits on every key under `L/`, and a key with
    /// no lease there would keep every later contender of `L` waiting for
    /// ever. Which prefixes hold a lock is read first, and the write
    /// applies only if no key was created under any of them, and no mark,
    /// since.
    pub async fn fenced_put(
        &self,
        entry: &str,
        key: &str,
        value: &[u8],
    ) -> Result<Option<bool>, EtcdError> {
        use base64::Engine as _;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        for _ in 0..FENCED_PUT_TRIES {
            let mut compare = vec![serde_json::json!({
                "key": b64(entry.as_bytes()),
                "target": "CREATE",
                "result": "GREATER",
                "create_revision": "0",
            })];
            for prefix in enclosing_prefixes(key) {
                let answer = self
                    .client
                    .range(&Range::prefix(prefix.as_bytes()).first_created().limited(1))
                    .await?;
                // A lock's holder is the oldest key under its prefix, and
                // a contender's key is named after its lease (see
                // `lock::is_entry`).
                if let Some(first) = answer.kvs.first() {
                    if lock::is_entry(prefix.as_bytes(), first) {
                        return Err(EtcdError::Usage(inside_a_lock(key, prefix)));
                    }
                }
                // A lock nobody holds now, that a lockrun has held.
                let mark = lock::lock_mark(prefix.trim_end_matches('/'));
                if !self.client.range(&Range::key(&mark)).await?.kvs.is_empty() {
                    return Err(EtcdError::Usage(inside_a_lock(key, prefix)));
                }
                compare.push(serde_json::json!({
                    "key": b64(&mark),
                    "target": "CREATE",
                    "result": "EQUAL",
                    "create_revision": "0",
                }));
                compare.push(serde_json::json!({
                    "key": b64(prefix.as_bytes()),
                    "range_end": b64(&client::prefix_end(prefix.as_bytes())),
                    "target": "CREATE",
                    "result": "LESS",
                    "create_revision": (answer.revision + 1).to_string(),
                }));
            }
            let answer = self
                .client
                .txn(
                    compare,
                    vec![serde_json::json!({ "request_put": {
                        "key": b64(key.as_bytes()),
                        "value": b64(value),
                    }})],
                    vec![serde_json::json!({
                        "request_range": Range::key(entry.as_bytes()).to_json()
                    })],
                    &format!("writing `{key}` while `{entry}` holds"),
                )
                .await?;
            if answer.succeeded {
                return Ok(Some(true));
            }
            let holds = answer
                .ranges
                .first()
                .is_some_and(|r| !r.kvs.is_empty());
            if !holds {
                return Ok(Some(false));
            }
            // The holder holds, so a key was created meanwhile under a
            // prefix of ours: look again.
        }
        Ok(None)
    }
}

/// Why `put --sequencer` refuses `key`, which lies under `prefix`, a lock's
/// own records.
pub fn inside_a_lock(key: &str, prefix: &str) -> String {
    let lock = prefix.trim_end_matches('/');
    format!(
        "`{key}` lies inside lock `{lock}`'s own records (its contenders under `{prefix}`), where a key would keep the lock from being taken; write the data outside `{prefix}`"
    )
}
