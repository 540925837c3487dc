//! `lockrun leader KEY`: who holds it, for shell scripts and humans.

use base64::Engine;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::cli::LeaderArgs;
use crate::consul::blocking::QueryIndex;
use crate::consul::kv::Read;
use crate::consul::{path, Client, KvPair};
use crate::error::Failure;
use crate::exit::Exit;
use crate::lock::semaphore::{self, View};
use crate::lock::{Patience, Waiter};

pub struct Job {
    args: LeaderArgs,
}

pub fn prepare(args: LeaderArgs) -> Result<Job, Failure> {
    path::check_key(args.key.strip_suffix('/').unwrap_or(&args.key)).map_err(Failure::Usage)?;
    Ok(Job { args })
}

/// What a key holds right now: a lock's holder, or a semaphore's holders.
enum State {
    Lock(Option<KvPair>),
    Semaphore(Vec<KvPair>),
}

impl State {
    fn held(&self) -> bool {
        match self {
            State::Lock(pair) => pair.as_ref().and_then(KvPair::holder).is_some(),
            State::Semaphore(holders) => !holders.is_empty(),
        }
    }

    /// What identifies the holder(s), to tell a change of holder from any
    /// other write.
    fn identity(&self) -> Vec<(String, Vec<u8>)> {
        match self {
            State::Lock(pair) => pair
                .iter()
                .filter_map(|p| {
                    p.holder()
                        .map(|h| (h.to_string(), p.value_bytes().to_vec()))
                })
                .collect(),
            State::Semaphore(holders) => holders
                .iter()
                .map(|p| {
                    (
                        p.holder().unwrap_or_default().to_string(),
                        p.value_bytes().to_vec(),
                    )
                })
                .collect(),
        }
    }
}

pub async fn run(client: &Client, job: Job) -> Result<Exit, Failure> {
    let key = job
        .args
        .key
        .strip_suffix('/')
        .unwrap_or(&job.args.key)
        .to_string();
    if job.args.watch {
        return watch(client, &key, job.args.json).await;
    }
    if !job.args.wait {
        let (pairs, _) = client.kv_list(&key, Read::now()).await?;
        return print_state(client, &key, &state_of(&key, pairs)?, job.args.json).await;
    }
    let patience = match job.args.timeout {
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
            return print_state(client, &key, &state, job.args.json).await;
        }
        last = Some(state);
        waiter.block();
    }
    // --timeout ran out with no holder.
    let state = last.unwrap_or(State::Lock(None));
    print_state(client, &key, &state, job.args.json).await
}

/// One listing of KEY as a string prefix answers both questions: the key
/// itself, and whether it is a semaphore prefix (`KEY/.lock` with the
/// semaphore flag).
fn state_of(key: &str, pairs: Vec<KvPair>) -> Result<State, Failure> {
    let lock = pairs.iter().find(|p| p.key == key).cloned();
    if lock.as_ref().and_then(KvPair::holder).is_some() {
        return Ok(State::Lock(lock));
    }
    let record_key = semaphore::record_key(key);
    let under: Vec<KvPair> = pairs
        .into_iter()
        .filter(|p| p.key.starts_with(&format!("{key}/")))
        .collect();
    let is_semaphore = under
        .iter()
        .any(|p| p.key == record_key && p.flags == crate::lock::SEMAPHORE_FLAG);
    if !is_semaphore {
        return Ok(State::Lock(lock));
    }
    let view = View::read(key, under).map_err(Failure::Conflict)?;
    let live = view.live_holders();
    let holders = view
        .contenders
        .into_iter()
        .filter(|p| p.holder().is_some_and(|h| live.contains(h)))
        .collect();
    Ok(State::Semaphore(holders))
}

async fn print_state(
    client: &Client,
    key: &str,
    state: &State,
    json: bool,
) -> Result<Exit, Failure> {
    let mut out = Vec::new();
    if json {
        let value = match state {
            State::Lock(pair) => entry_json(client, key, pair.as_ref()).await?,
            State::Semaphore(holders) => {
                let mut list = Vec::new();
                for pair in holders {
                    list.push(entry_json(client, &pair.key, Some(pair)).await?);
                }
                Value::Array(list)
            }
        };
        out.extend(serde_json::to_vec(&value).expect("JSON serialises"));
        out.push(b'\n');
    } else {
        match state {
            State::Lock(Some(pair)) if pair.holder().is_some() => {
                out.extend_from_slice(pair.value_bytes());
                out.push(b'\n');
            }
            State::Lock(_) => {}
            State::Semaphore(holders) => {
                for pair in holders {
                    out.extend_from_slice(pair.value_bytes());
                    out.push(b'\n');
                }
            }
        }
    }
    super::write_stdout(&out);
    Ok(if state.held() {
        Exit::Success
    } else {
        Exit::NotHeld
    })
}

/// The entry and its holder's session facts as one JSON object.
async fn entry_json(client: &Client, key: &str, pair: Option<&KvPair>) -> Result<Value, Failure> {
    let Some(pair) = pair else {
        return Ok(
            json!({ "key": key, "held": false, "value": null, "value_base64": null, "session": null }),
        );
    };
    let session = match pair.holder() {
        Some(id) => client.session_info(id).await?,
        None => None,
    };
    let value = pair.value.as_ref();
    Ok(json!({
        "key": pair.key,
        "held": pair.holder().is_some(),
        "value": value.and_then(|v| std::str::from_utf8(v).ok()),
        "value_base64": value.map(|v| base64::engine::general_purpose::STANDARD.encode(v)),
        "flags": pair.flags,
        "session": pair.holder(),
        "session_name": session.as_ref().map(|s| s.name.clone()),
        "node": session.as_ref().map(|s| s.node.clone()),
        "ttl": session.as_ref().map(|s| s.ttl.clone()),
        "lock_index": pair.lock_index,
        "create_index": pair.create_index,
        "modify_index": pair.modify_index,
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
            let value = match &state {
                State::Lock(pair) => entry_json(client, key, pair.as_ref()).await?,
                State::Semaphore(holders) => {
                    let mut list = Vec::new();
                    for pair in holders {
                        list.push(entry_json(client, &pair.key, Some(pair)).await?);
                    }
                    json!({ "key": key, "held": !holders.is_empty(), "holders": list })
                }
            };
            let mut line = serde_json::to_vec(&value).expect("JSON serialises");
            line.push(b'\n');
            line
        } else {
            // One line per change: the holder's value, holders' values joined
            // by spaces for a semaphore, or an empty line for "no holder".
            let mut line = match &state {
                State::Lock(pair) => pair
                    .as_ref()
                    .filter(|p| p.holder().is_some())
                    .map(|p| p.value_bytes().to_vec())
                    .unwrap_or_default(),
                State::Semaphore(holders) => holders
                    .iter()
                    .map(|p| p.value_bytes().to_vec())
                    .collect::<Vec<_>>()
                    .join(&b' '),
            };
            line.push(b'\n');
            line
        };
        if !super::write_stdout(&line) {
            return Ok(Exit::Success);
        }
    }
}
