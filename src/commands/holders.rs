//! `leader` and `release` on an engine seen through [`Inspect`]: the live
//! holders, their changes, and asking them to let go.

use std::time::SystemTime;

use serde_json::{json, Value};

use crate::backend::{Changes, Holder, Inspect, Target, Which};
use crate::error::Failure;
use crate::exit::Exit;

use super::{leader, release};
use crate::exit::write_stdout;

fn seconds(at: Option<SystemTime>) -> Option<u64> {
    at.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(|d| d.as_secs())
}

/// The fields every backend shows, and the engine's own under `details`.
/// `fence` is the holder's LOCKRUN_LOCK_INDEX where the engine keeps it:
/// local's facts, an etcd slot's CreateRevision, a Consul lock's
/// ModifyIndex; an etcd lock holder's is the revision at which it found the
/// lock its own, which a lockrun holder records beside its key once its
/// command runs (null for `etcdctl lock`, and until then), and a Consul
/// slot's was overwritten by the next change of holders (null).
fn holder_json<I: Inspect>(inspect: &I, holder: &Holder) -> Value {
    json!({
        "value": holder.value,
        "fence": holder.fence,
        "since": holder.since.map(|t| humantime::format_rfc3339_seconds(t).to_string()),
        "since_unix": seconds(holder.since),
        "host": holder.host,
        "pid": holder.pid,
        "details": inspect.details(holder),
    })
}

/// The one JSON shape of `--json` and `--json --watch`, as a line.
fn json_line<I: Inspect>(
    inspect: &I,
    backend: &str,
    target: &Target,
    holders: &[Holder],
) -> Vec<u8> {
    let (kind, limit) = match target {
        Target::Lock { shared: false, .. } => ("lock", None),
        Target::Lock { shared: true, .. } => ("shared", None),
        Target::Slot { limit, .. } => ("semaphore", Some(*limit)),
    };
    let value = json!({
        "key": target.name(),
        "backend": backend,
        "kind": kind,
        "held": !holders.is_empty(),
        "limit": limit,
        "holders": holders.iter().map(|h| holder_json(inspect, h)).collect::<Vec<_>>(),
    });
    let mut line = serde_json::to_vec(&value).expect("JSON serialises");
    line.push(b'\n');
    line
}

fn print<I: Inspect>(
    inspect: &I,
    backend: &str,
    target: &Target,
    holders: &[Holder],
    json: bool,
) -> Exit {
    let out = if json {
        json_line(inspect, backend, target, holders)
    } else {
        holders
            .iter()
            .flat_map(|h| {
                let mut line = h.label();
                line.push(b'\n');
                line
            })
            .collect()
    };
    write_stdout(&out);
    if holders.is_empty() {
        crate::logging::note(&format!("nobody holds `{}`", target.name()));
        Exit::NotHeld
    } else {
        Exit::Success
    }
}

/// What `key` names, asked again when holders appear where there were none:
/// a prefix nobody used yet reads as a lock, and its first holder may show
/// it to be a semaphore (or the other way round).
async fn target_again<I: Inspect>(
    inspect: &I,
    key: &str,
    target: &Target,
) -> Result<Option<Target>, Failure> {
    let now = inspect.target_of(key).await.map_err(Into::into)?;
    Ok((now != *target).then_some(now))
}

/// `backend` names the engine in `--json` (`consul`, `etcd`, `local`).
pub async fn leader<I: Inspect>(
    inspect: &I,
    backend: &str,
    job: leader::Job,
) -> Result<Exit, Failure> {
    let mut target = inspect.target_of(job.key()).await.map_err(Into::into)?;
    let json = job.args.json;
    if job.args.watch {
        let mut changes = inspect.changes(&target).await.map_err(Into::into)?;
        let mut had_none = true;
        loop {
            let mut holders = changes.next().await.map_err(Into::into)?;
            if had_none && !holders.is_empty() {
                if let Some(now) = target_again(inspect, job.key(), &target).await? {
                    target = now;
                    changes = inspect.changes(&target).await.map_err(Into::into)?;
                    holders = changes.next().await.map_err(Into::into)?;
                }
            }
            had_none = holders.is_empty();
            let line = if json {
                json_line(inspect, backend, &target, &holders)
            } else {
                // One line per change: the holders' labels joined by spaces,
                // or an empty line for "no holder".
                let labels: Vec<Vec<u8>> = holders.iter().map(Holder::label).collect();
                let mut line = labels.join(&b' ');
                line.push(b'\n');
                line
            };
            if !write_stdout(&line) {
                return Ok(Exit::Success);
            }
        }
    }
    let holders = match job.wait {
        Some(wait) => {
            let waited = crate::backend::wait_for_holder(inspect, &target);
            let holders = match wait.deadline() {
                Some(at) => match tokio::time::timeout_at(at, waited).await {
                    Ok(holders) => holders.map_err(Into::into)?,
                    Err(_) => Vec::new(),
                },
                None => waited.await.map_err(Into::into)?,
            };
            if holders.is_empty() {
                holders
            } else if let Some(now) = target_again(inspect, job.key(), &target).await? {
                target = now;
                inspect.holders(&target).await.map_err(Into::into)?
            } else {
                holders
            }
        }
        None => inspect.holders(&target).await.map_err(Into::into)?,
    };
    Ok(print(inspect, backend, &target, &holders, json))
}

pub async fn release<I: Inspect>(inspect: &I, job: release::Job) -> Result<Exit, Failure> {
    let target = inspect.target_of(&job.key).await.map_err(Into::into)?;
    if let Target::Slot { prefix, .. } = &target {
        if !job.args.all {
            if let Some(why) = inspect.refuse_every_slot(prefix) {
                return Err(Failure::Usage(why));
            }
        }
    }
    let released = inspect
        .force_release(&target, &Which::All)
        .await
        .map_err(Into::into)?;
    let (asked, mut refused) = (released.asked, released.refused);
    if asked.is_empty() && refused.is_empty() {
        match released.nothing {
            Some(why) => tracing::error!("{why}"),
            None => tracing::error!("nothing to release: `{}` is not held", job.key),
        }
        return Ok(Exit::NotHeld);
    }
    let mut out = String::new();
    for holder in &asked {
        out.push_str(&inspect.asked_line(&target, holder));
        out.push('\n');
    }
    write_stdout(out.as_bytes());
    // The holders we could not ask come after those we asked, one line
    // each; any of them makes the run a failure (125): the lock, or a slot
    // of it, is still held.
    let Some(last) = refused.pop() else {
        return Ok(Exit::Success);
    };
    for e in refused {
        let failure: Failure = e.into();
        tracing::error!("{failure}");
    }
    Err(last.into())
}
