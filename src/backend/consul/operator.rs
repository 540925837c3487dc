//! `lockrun release KEY` on Consul: the operator's lever. Consul lets any client
//! release a lock on behalf of its holder, as long as it names the holder's
//! session; we read it from the key, and send the value and flags back so
//! the entry keeps them. The holder's lockrun sees the change on its watch
//! and stops its child.

use std::collections::BTreeSet;

use super::kv::Read;
use super::lock::semaphore::{self, Record, View};
use super::lock::SEMAPHORE_FLAG;
use super::{Client, KvPair, SessionId};
use crate::cli::ReleaseArgs;
use crate::error::Failure;
use crate::exit::{write_stdout, Exit};

pub async fn release(client: &Client, key: &str, args: &ReleaseArgs) -> Result<Exit, Failure> {
    let (pairs, _) = client.kv_list(key, Read::consistent()).await?;
    let lock = pairs.iter().find(|p| p.key == key).cloned();
    let record_key = semaphore::record_key(key);
    let is_semaphore = pairs
        .iter()
        .any(|p| p.key == record_key && p.flags == SEMAPHORE_FLAG);
    match lock {
        Some(pair) if pair.holder().is_some() => release_lock(client, key, args, pair).await,
        _ if is_semaphore => release_slots(client, key, args).await,
        _ => {
            tracing::error!("nothing to release: `{key}` is not held");
            Ok(Exit::NotHeld)
        }
    }
}

async fn release_lock(
    client: &Client,
    key: &str,
    args: &ReleaseArgs,
    pair: KvPair,
) -> Result<Exit, Failure> {
    let holder = pair.holder().unwrap_or_default().to_string();
    if let Some(only) = &args.session {
        if only != &holder {
            tracing::error!("nothing released: `{key}` is held by session {holder}, not {only}");
            return Ok(Exit::NotHeld);
        }
    }
    let info = client.session_info(&holder).await?;
    // Send the value and flags back: a bare release would wipe them.
    let released = client
        .kv_release(key, &holder, pair.value_bytes(), pair.flags)
        .await?;
    if !released {
        tracing::error!("nothing released: `{key}` changed hands while we released it; run again");
        return Ok(Exit::NotHeld);
    }
    let mut line = format!("released `{key}` held by session {holder}",);
    if let Some(info) = &info {
        line.push_str(&format!(" (node {}, name \"{}\")", info.node, info.name));
    }
    if let Ok(value) = std::str::from_utf8(pair.value_bytes()) {
        if !value.is_empty() {
            line.push_str(&format!(", value {value}"));
        }
    }
    if args.destroy_session {
        client
            .session_destroy(&SessionId::new(holder.clone()))
            .await?;
        line.push_str("; session destroyed");
    }
    // The lock is released whether or not anyone reads this line.
    write_stdout(format!("{line}\n").as_bytes());
    Ok(Exit::Success)
}

async fn release_slots(client: &Client, key: &str, args: &ReleaseArgs) -> Result<Exit, Failure> {
    if args.session.is_none() && !args.all {
        return Err(Failure::Usage(format!(
            "`{key}` is a semaphore; name the holder to free with --session ID, or free every slot with --all"
        )));
    }
    for _ in 0..16 {
        let (pairs, _) = semaphore::list(client, key, Read::consistent()).await?;
        let view = View::read(key, pairs).map_err(Failure::Conflict)?;
        let Some((record, modify)) = &view.record else {
            break;
        };
        let freed: BTreeSet<String> = match &args.session {
            Some(id) => record
                .holders
                .iter()
                .filter(|h| *h == id)
                .cloned()
                .collect(),
            None => record.holders.clone(),
        };
        if freed.is_empty() {
            break;
        }
        let updated = Record {
            limit: record.limit,
            holders: record.holders.difference(&freed).cloned().collect(),
        };
        if !client
            .kv_cas(
                &semaphore::record_key(key),
                &updated.encode(),
                SEMAPHORE_FLAG,
                *modify,
            )
            .await?
        {
            continue;
        }
        for id in &freed {
            let value = view
                .contenders
                .iter()
                .find(|p| p.key == format!("{key}/{id}"))
                .and_then(|p| {
                    std::str::from_utf8(p.value_bytes())
                        .ok()
                        .map(str::to_string)
                })
                .unwrap_or_default();
            let mut line = format!("released a slot of `{key}` held by session {id}");
            if !value.is_empty() {
                line.push_str(&format!(", value {value}"));
            }
            if args.destroy_session {
                client.session_destroy(&SessionId::new(id.clone())).await?;
                line.push_str("; session destroyed");
            }
            write_stdout(format!("{line}\n").as_bytes());
        }
        return Ok(Exit::Success);
    }
    tracing::error!("nothing to release: no matching holder of `{key}`");
    Ok(Exit::NotHeld)
}
