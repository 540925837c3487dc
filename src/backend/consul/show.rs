//! `lockrun leader KEY` on Consul: a lock's holder from its key, a
//! semaphore's from its `.lock` record, shown by value or by session.

use base64::Engine;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::blocking::QueryIndex;
use super::kv::Read;
use super::lock::semaphore::{self, View};
use super::lock::{Patience, Waiter};
use super::{Client, KvPair};
use crate::cli::LeaderArgs;
use crate::error::Failure;
use crate::exit::{write_stdout, Exit};

/// What a key holds right now: a lock's holder, or a semaphore's holders.
struct State {
    semaphore: bool,
    /// A semaphore's slot count, as its record says.
    limit: Option<u64>,
    /// The entries held by a session: one at most for a lock.
    holders: Vec<KvPair>,
}

impl State {
    fn held(&self) -> bool {
        !self.holders.is_empty()
    }

    /// What identifies the holder(s), to tell a change of holder from any
    /// other write.
    fn identity(&self) -> Vec<(String, Vec<u8>)> {
        self.holders
            .iter()
            .map(|p| {
                (
                    p.holder().unwrap_or_default().to_string(),
                    p.value_bytes().to_vec(),
                )
            })
            .collect()
    }
}

pub async fn leader(client: &Client, args: &LeaderArgs) -> Result<Exit, Failure> {
    let key = args.key.strip_suffix('/').unwrap_or(&args.key).to_string();
    if args.watch {
        return watch(client, &key, args.json).await;
    }
    if !args.wait {
        let (pairs, _) = client.kv_list(&key, Read::now()).await?;
        return print_state(client, &key, &state_of(&key, pairs)?, args.json).await;
    }
    let patience = match args.timeout {
        Some(timeout) => Patience::Until(Instant::now() + timeout),
        None => Patience::Forever,
    };
    let mut waiter = Waiter::acquiring(patience);
    let mut last = None;
    while let Some(read) = waiter.next_read().await {
        let result = client.kv_list(&key, read).await;
        let Some(pairs) = waiter.answer(&format!("reading `{key}`"), result).await? else {
            continue;
        };
        let state = state_of(&key, pairs)?;
        if state.held() {
            return print_state(client, &key, &state, args.json).await;
        }
        last = Some(state);
        waiter.block();
    }
    // --timeout ran out with no holder.
    let state = last.unwrap_or(State {
        semaphore: false,
        limit: None,
        holders: Vec::new(),
    });
    print_state(client, &key, &state, args.json).await
}

/// One listing of KEY as a string prefix answers both questions: the key
/// itself, and whether it is a semaphore prefix (`KEY/.lock` with the
/// semaphore flag).
fn state_of(key: &str, pairs: Vec<KvPair>) -> Result<State, Failure> {
    let lock = pairs
        .iter()
        .find(|p| p.key == key && p.holder().is_some())
        .cloned();
    if let Some(lock) = lock {
        return Ok(State {
            semaphore: false,
            limit: None,
            holders: vec![lock],
        });
    }
    let record_key = semaphore::record_key(key);
    let under: Vec<KvPair> = pairs
        .into_iter()
        .filter(|p| p.key.starts_with(&format!("{key}/")))
        .collect();
    let is_semaphore = under
        .iter()
        .any(|p| p.key == record_key && p.flags == crate::backend::consul::lock::SEMAPHORE_FLAG);
    if !is_semaphore {
        return Ok(State {
            semaphore: false,
            limit: None,
            holders: Vec::new(),
        });
    }
    let view = View::read(key, under).map_err(Failure::Conflict)?;
    let live = view.live_holders();
    let limit = view.record.as_ref().map(|(record, _)| record.limit);
    let holders = view
        .contenders
        .into_iter()
        .filter(|p| p.holder().is_some_and(|h| live.contains(h)))
        .collect();
    Ok(State {
        semaphore: true,
        limit,
        holders,
    })
}

async fn print_state(
    client: &Client,
    key: &str,
    state: &State,
    json: bool,
) -> Result<Exit, Failure> {
    let mut out = Vec::new();
    if json {
        out = json_line(client, key, state).await?;
    } else {
        for pair in &state.holders {
            out.extend(label(client, pair).await?);
            out.push(b'\n');
        }
    }
    write_stdout(&out);
    Ok(if state.held() {
        Exit::Success
    } else {
        Exit::NotHeld
    })
}

/// How a holder is shown: its value, or, for a holder that stores none (as
/// `consul lock` and the Go API's do), its session's name and node, so that
/// a held lock never prints as an empty line.
async fn label(client: &Client, pair: &KvPair) -> Result<Vec<u8>, Failure> {
    if !pair.value_bytes().is_empty() {
        return Ok(pair.value_bytes().to_vec());
    }
    let id = pair.holder().unwrap_or_default();
    Ok(match client.session_info(id).await? {
        Some(session) => format!("{} (node {})", session.name, session.node),
        // The session ended between the two reads.
        None => format!("session {id}"),
    }
    .into_bytes())
}

/// The one JSON shape of `--json` and `--json --watch`, for a key and for a
/// semaphore alike, as a line.
async fn json_line(client: &Client, key: &str, state: &State) -> Result<Vec<u8>, Failure> {
    let mut holders = Vec::new();
    for pair in &state.holders {
        holders.push(holder_json(client, pair, state.semaphore).await?);
    }
    let value = json!({
        "key": key,
        "backend": "consul",
        "kind": if state.semaphore { "semaphore" } else { "lock" },
        "held": state.held(),
        "limit": state.limit,
        "holders": holders,
    });
    let mut line = serde_json::to_vec(&value).expect("JSON serialises");
    line.push(b'\n');
    Ok(line)
}

/// A held entry and its holder's session facts as one JSON object: the
/// fields every backend shows, and Consul's own under `details`.
///
/// `fence` is what the holder's child got as LOCKRUN_LOCK_INDEX: for a lock,
/// the key's ModifyIndex at acquisition, which is its ModifyIndex now
/// unless the key was written while held (a plain `consul kv put`); not
/// LockIndex, which counts acquisitions of the key. A slot's number was the
/// record's ModifyIndex when the slot was taken, which every later change
/// of holders overwrites: unknown (null).
async fn holder_json(client: &Client, pair: &KvPair, semaphore: bool) -> Result<Value, Failure> {
    let session = match pair.holder() {
        Some(id) => client.session_info(id).await?,
        None => None,
    };
    let value = pair.value.as_ref();
    Ok(json!({
        "value": value.and_then(|v| std::str::from_utf8(v).ok()),
        "fence": (!semaphore).then_some(pair.modify_index),
        "since": null,
        "since_unix": null,
        "host": session.as_ref().map(|s| s.node.clone()),
        "pid": null,
        "details": {
            "key": pair.key,
            "value_base64": value.map(|v| base64::engine::general_purpose::STANDARD.encode(v)),
            "flags": pair.flags,
            "session": pair.holder(),
            "session_name": session.as_ref().map(|s| s.name.clone()),
            "node": session.as_ref().map(|s| s.node.clone()),
            "ttl": session.as_ref().map(|s| s.ttl.clone()),
            "lock_index": pair.lock_index,
            "create_index": pair.create_index,
            "modify_index": pair.modify_index,
        },
    }))
}

/// Prints the holder now and at every change of holder, until interrupted.
async fn watch(client: &Client, key: &str, json: bool) -> Result<Exit, Failure> {
    let mut waiter = Waiter::watching(QueryIndex::NONE);
    let mut last: Option<Vec<(String, Vec<u8>)>> = None;
    loop {
        let read = waiter.next_read().await.expect("a watch waits for ever");
        let result = client.kv_list(key, read).await;
        let Some(pairs) = waiter.answer(&format!("watching `{key}`"), result).await? else {
            continue;
        };
        let state = state_of(key, pairs)?;
        let identity = state.identity();
        if last.as_ref() == Some(&identity) {
            continue;
        }
        last = Some(identity);
        let line = if json {
            json_line(client, key, &state).await?
        } else {
            // One line per change: the holders' labels joined by spaces, or
            // an empty line for "no holder".
            let mut labels = Vec::new();
            for pair in &state.holders {
                labels.push(label(client, pair).await?);
            }
            let mut line = labels.join(&b' ');
            line.push(b'\n');
            line
        };
        if !write_stdout(&line) {
            return Ok(Exit::Success);
        }
    }
}
