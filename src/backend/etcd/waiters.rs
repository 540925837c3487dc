//! lockrun's writers waiting for a lock, made visible for `--priority`
//! (see [`crate::backend::priority`]). A writer that has to wait keeps a
//! record `\0lockrun/wait/<name>/<lease id in hex>` with its lease, whose
//! value is `{"priority", "value"}`: like the holder facts, under no lock's
//! prefix, so it is no contender of any lock, and it goes with the waiter's
//! lease. It stays out of the queue (`NAME/`) while a record of a higher
//! priority is there, watching the records and the queue, and leaves the
//! queue when a higher record comes while it waits in it. `etcdctl lock`'s
//! waiters keep no record: they count as 0 and defer to nobody.

use serde_json::{json, Value};

use super::client::{prefix_end, Client, Kv, Range, Watch};
use super::error::EtcdError;

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The records of `name`'s waiters.
pub fn records_of(name: &str) -> Vec<u8> {
    format!("\0lockrun/wait/{name}/").into_bytes()
}

/// Our record's key.
pub fn record_key(name: &str, lease: i64) -> Vec<u8> {
    let mut key = records_of(name);
    key.extend_from_slice(format!("{lease:x}").as_bytes());
    key
}

/// A waiter seen: its lease, priority and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub lease: i64,
    pub level: u32,
    pub value: Option<String>,
}

/// A record of `name`'s own (not of a key under it), decoded; a record
/// that does not decode counts as priority 0.
fn seen(name: &str, kv: &Kv) -> Option<Seen> {
    let rest = kv.key.strip_prefix(records_of(name).as_slice())?;
    if rest.contains(&b'/') {
        return None;
    }
    let doc: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
    Some(Seen {
        lease: kv.lease,
        level: doc["priority"]
            .as_u64()
            .and_then(|l| u32::try_from(l).ok())
            .unwrap_or(0),
        value: doc["value"].as_str().map(str::to_owned),
    })
}

/// The op that puts our record with our lease.
fn publish_op(name: &str, lease: i64, level: u32, value: &str) -> Value {
    let key = record_key(name, lease);
    let doc = json!({ "priority": level, "value": value }).to_string();
    json!({ "request_put": {
        "key": b64(&key),
        "value": b64(doc.as_bytes()),
        "lease": lease.to_string(),
    }})
}

/// Removes our record.
pub async fn withdraw(client: &Client, name: &str, lease: i64) -> Result<(), EtcdError> {
    client
        .delete(&record_key(name, lease), super::lock::CLEANUP_TIMEOUT)
        .await
        .map(drop)
}

/// `--replace`'s record ahead of the waiters, at
/// [`crate::backend::priority::REPLACE`], with a lease of its own that we
/// renew while it lives: a replacer that dies leaves it to lapse within its
/// TTL, and removing it revokes the lease.
pub struct Ahead {
    client: Client,
    lease: i64,
    renew: tokio::task::JoinHandle<()>,
}

impl Ahead {
    pub async fn put(
        client: &Client,
        name: &str,
        ttl: std::time::Duration,
        value: &str,
    ) -> Result<Ahead, EtcdError> {
        let lease = client.grant(ttl).await?.id;
        let op = publish_op(name, lease, crate::backend::priority::REPLACE, value);
        let what = format!("putting --replace's record ahead of the waiters for `{name}`");
        if let Err(e) = client.txn(Vec::new(), vec![op], Vec::new(), &what).await {
            let _ = client.revoke(lease, super::lock::CLEANUP_TIMEOUT).await;
            return Err(e);
        }
        let renewer = client.clone();
        let every = ttl / 3;
        let renew = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                // A renewal missed is tried again at the next: the record
                // only orders the waiters, it guards nothing.
                let _ = renewer.keepalive(lease, every).await;
            }
        });
        Ok(Ahead {
            client: client.clone(),
            lease,
            renew,
        })
    }
}

impl crate::backend::GoneAhead for Ahead {
    fn remove(self: Box<Self>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        self.renew.abort();
        let (client, lease) = (self.client.clone(), self.lease);
        Box::pin(async move {
            if let Err(e) = client.revoke(lease, super::lock::CLEANUP_TIMEOUT).await {
                tracing::warn!("could not withdraw --replace's record ahead of the waiters ({e}); it lapses with its lease");
            }
        })
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.renew.abort();
    }
}

/// What one look found: the other waiters, whether the lock is free (no
/// contender under `prefix`), and the revision it was read at.
pub struct Look {
    pub others: Vec<Seen>,
    pub free: bool,
    pub revision: i64,
}

/// The live waiters of `name` (ours, `lease`, left out) and whether its
/// queue `prefix` is empty, in one read; `publish` (our priority and value)
/// puts our record first, in the same transaction.
pub async fn look(
    client: &Client,
    name: &str,
    prefix: &[u8],
    lease: i64,
    publish: Option<(u32, &str)>,
) -> Result<Look, EtcdError> {
    let mut ops: Vec<Value> = publish
        .map(|(level, value)| publish_op(name, lease, level, value))
        .into_iter()
        .collect();
    ops.push(json!({ "request_range": Range::prefix(&records_of(name)).to_json() }));
    ops.push(json!({ "request_range": Range::prefix(prefix).limited(1).to_json() }));
    let answer = client
        .txn(
            Vec::new(),
            ops,
            Vec::new(),
            &format!("looking at the waiters for `{name}`"),
        )
        .await?;
    let [records, queue] = answer.ranges.as_slice() else {
        return Err(EtcdError::Decode {
            what: format!("looking at the waiters for `{name}`"),
            cause: format!("{} range answers where 2 were asked", answer.ranges.len()),
        });
    };
    Ok(Look {
        others: records
            .kvs
            .iter()
            .filter_map(|kv| seen(name, kv))
            .filter(|s| s.lease != lease)
            .collect(),
        free: queue.kvs.is_empty(),
        revision: answer.revision,
    })
}

/// The live waiters of `name`, highest priority first, for `leader`.
pub async fn waiting(client: &Client, name: &str) -> Result<Vec<Seen>, EtcdError> {
    let answer = client.range(&Range::prefix(&records_of(name))).await?;
    let mut seen: Vec<Seen> = answer.kvs.iter().filter_map(|kv| seen(name, kv)).collect();
    seen.sort_by_key(|s| std::cmp::Reverse(s.level));
    Ok(seen)
}

/// A watch on `name`'s records from `revision` on.
pub async fn watch_records(client: &Client, name: &str, revision: i64) -> Result<Watch, EtcdError> {
    let records = records_of(name);
    client
        .watch(&records, Some(&prefix_end(&records)), revision, false)
        .await
}

/// A watch on the queue `prefix` from `revision` on.
pub async fn watch_queue(client: &Client, prefix: &[u8], revision: i64) -> Result<Watch, EtcdError> {
    client
        .watch(prefix, Some(&prefix_end(prefix)), revision, false)
        .await
}

/// Whether a batch of record events brings a waiter of a higher priority
/// than `mine`.
pub fn brings_higher(name: &str, events: &[super::client::Event], mine: u32) -> bool {
    events
        .iter()
        .filter(|e| !e.deleted)
        .filter_map(|e| seen(name, &e.kv))
        .any(|s| s.level > mine)
}
