//! lockrun's writers waiting for a lock, made visible for `--priority`
//! (see [`crate::backend::priority`]). A writer that has to wait keeps an
//! ephemeral record `/KEY.lockrun-wait/<priority>-<uuid>` (its session's
//! protection uuid), holding its facts: beside the lock's directory, not in
//! it, so that no client counts it as a contender (every child of `/KEY`
//! with a sequence suffix is one), and gone with the waiter's session. The
//! name alone tells a rival the priority. A waiter stays out of the queue
//! while a record of a higher priority is there, watching the records and
//! the lock's directory (ZooKeeper watches, no polling), and leaves the
//! queue when a higher record comes while it waits in it. Curator's and
//! kazoo's waiters keep no record: they count as 0 and defer to nobody.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client as zk;

use super::client::open_acl;
use super::error::ZkError;
use super::lock::{self, contenders, dir_of};
use crate::backend::priority::{self, Verdict};
use crate::backend::{Wait, Waiter};

/// The directory of `key`'s waiters' records.
pub fn records_dir(key: &str) -> String {
    format!("{}.lockrun-wait", dir_of(key))
}

/// A record's name: `<priority>-<uuid>`.
fn record_name(level: u32, uuid: &str) -> String {
    format!("{level}-{uuid}")
}

/// A record's priority and uuid, by its name; `None` for any other child.
pub fn parse(name: &str) -> Option<(u32, &str)> {
    let (text, uuid) = name.split_once('-')?;
    let level: u32 = text.parse().ok()?;
    (level <= priority::REPLACE && level.to_string() == text && !uuid.is_empty()).then_some((level, uuid))
}

/// Puts our record (`data`: our facts), making its directory (a container)
/// when absent; one already there is ours, from a create whose answer was
/// lost. Returns its path.
pub async fn publish(
    client: &zk::Client,
    key: &str,
    level: u32,
    uuid: &str,
    data: &[u8],
) -> Result<String, ZkError> {
    let dir = records_dir(key);
    let path = format!("{dir}/{}", record_name(level, uuid));
    let options = zk::CreateMode::Ephemeral.with_acls(open_acl());
    for _ in 0..5 {
        match client.create(&path, data, &options).await {
            Ok(_) | Err(zk::Error::NodeExists) => return Ok(path),
            // The container is made, or was reaped empty meanwhile.
            Err(zk::Error::NoNode) => lock::make_dirs(client, &dir).await?,
            Err(e) => return Err(ZkError::of(&format!("creating `{path}`"), e)),
        }
    }
    Err(ZkError::Failed {
        what: format!("creating `{path}`"),
        cause: "its directory kept being removed; try again".into(),
    })
}

/// `--replace`'s record ahead of the waiters ([`priority::REPLACE`]), on a
/// session of its own, so that it lives until removed or the session ends
/// (the replacer dies: its ephemeral record goes with it).
pub struct Ahead {
    client: zk::Client,
    path: String,
}

impl Ahead {
    pub async fn put(client: zk::Client, key: &str, value: &str) -> Result<Ahead, ZkError> {
        let facts = serde_json::json!({ "value": value, "pid": std::process::id() });
        let uuid = lock::new_uuid();
        let data = facts.to_string();
        match publish(&client, key, priority::REPLACE, &uuid, data.as_bytes()).await {
            Ok(path) => Ok(Ahead { client, path }),
            Err(e) => {
                super::client::close(client).await;
                Err(e)
            }
        }
    }
}

impl crate::backend::GoneAhead for Ahead {
    fn remove(self: Box<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            let Ahead { client, path } = *self;
            let delete = client.delete(&path, None);
            match tokio::time::timeout(Duration::from_secs(2), delete).await {
                Ok(Ok(()) | Err(zk::Error::NoNode)) => {}
                Ok(Err(e)) => tracing::warn!("could not remove --replace's record `{path}` ({e}); it goes with our session"),
                Err(_) => tracing::warn!("could not remove --replace's record `{path}` in time; it goes with our session"),
            }
            super::client::close(client).await;
        })
    }
}

/// A boxed wait for one watch event.
type Fired = Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>;

fn fired(watcher: zk::OneshotWatcher) -> Fired {
    Box::pin(watcher.changed())
}

/// The other waiters' records (name and priority; ours, `uuid`, left out)
/// and a watch on the records.
async fn others(client: &zk::Client, key: &str, uuid: &str) -> Result<(Vec<(String, u32)>, Fired), ZkError> {
    let dir = records_dir(key);
    loop {
        match client.list_and_watch_children(&dir).await {
            Ok((children, watcher)) => {
                let seen = children
                    .iter()
                    .filter_map(|c| parse(c).filter(|(_, u)| *u != uuid).map(|(l, _)| (c.clone(), l)))
                    .collect();
                return Ok((seen, fired(watcher)));
            }
            // Ours is there while we look, but a role that may not read it
            // or a reaped directory is no reason to stop: no records.
            Err(zk::Error::NoNode) => match client.check_and_watch_stat(&dir).await {
                Ok((None, watcher)) => return Ok((Vec::new(), fired(watcher))),
                Ok((Some(_), _)) => continue,
                Err(e) => return Err(ZkError::of(&format!("watching `{dir}`"), e)),
            },
            Err(e) => return Err(ZkError::of(&format!("listing `{dir}`"), e)),
        }
    }
}

/// Whether the lock in `dir` is free (no contender) and a watch on its
/// contenders.
async fn queue(client: &zk::Client, dir: &str) -> Result<(bool, Fired), ZkError> {
    loop {
        match client.list_and_watch_children(dir).await {
            Ok((children, watcher)) => return Ok((contenders(&children).is_empty(), fired(watcher))),
            Err(zk::Error::NoNode) => match client.check_and_watch_stat(dir).await {
                Ok((None, watcher)) => return Ok((true, fired(watcher))),
                Ok((Some(_), _)) => continue,
                Err(e) => return Err(ZkError::of(&format!("watching `{dir}`"), e)),
            },
            Err(e) => return Err(ZkError::of(&format!("listing `{dir}`"), e)),
        }
    }
}

/// The live waiters of `key`, highest priority first, for `leader`.
pub async fn waiting(client: &zk::Client, key: &str) -> Result<Vec<Waiter>, ZkError> {
    let dir = records_dir(key);
    let children = match client.list_children(&dir).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => return Ok(Vec::new()),
        Err(e) => return Err(ZkError::of(&format!("listing `{dir}`"), e)),
    };
    let mut seen = Vec::new();
    for name in children {
        let Some((level, _)) = parse(&name) else { continue };
        let path = format!("{dir}/{name}");
        let data = match client.get_data(&path).await {
            Ok((data, _)) => data,
            // Gone since the listing: it holds, or gave up.
            Err(zk::Error::NoNode) => continue,
            Err(e) => return Err(ZkError::of(&format!("reading `{path}`"), e)),
        };
        let facts: serde_json::Value = serde_json::from_slice(&data).unwrap_or_default();
        seen.push(Waiter {
            priority: level,
            value: facts["value"].as_str().map(str::to_owned),
            pid: facts["pid"].as_u64().and_then(|p| u32::try_from(p).ok()).filter(|p| *p != 0),
        });
    }
    seen.sort_by_key(|w| std::cmp::Reverse(w.priority));
    Ok(seen)
}

/// A writer's two nodes in the queue: our `lock-` node's name and stat,
/// and its `__WRIT__` partner's name (see [`lock::enter_writer`]).
pub type Nodes = (String, zk::Stat, String);

/// How a wait in the queue ended.
enum InQueue {
    Held,
    /// A waiter of a higher priority than ours came.
    Higher,
    /// The patience ran out.
    Over,
}

impl super::Zookeeper {
    /// A writer's wait, ranked by `--priority`, from the queue it entered
    /// (`nodes`, not first): our record published; in the queue while no
    /// record of a higher priority is there, out of it while one is (or
    /// until the lock has sat free for the grace with that waiter not in
    /// it). `Some(nodes)` once ours is the lowest; `None` when the patience
    /// ran out, our nodes gone. Our record goes after, off the handover's
    /// path.
    pub(super) async fn wait_ranked(
        &self,
        client: &zk::Client,
        uuid: &str,
        key: &str,
        nodes: Nodes,
        data: &[u8],
        wait: Wait,
    ) -> Result<Option<Nodes>, ZkError> {
        let dir = dir_of(key);
        let leave = |n: Nodes| {
            let dir = dir.clone();
            async move {
                lock::leave(client, &format!("{dir}/{}", n.0)).await?;
                lock::leave(client, &format!("{dir}/{}", n.2)).await
            }
        };
        let published = super::client::riding_out(wait, "publishing our priority", || {
            publish(client, key, self.priority.level, uuid, data)
        })
        .await;
        let record = match published {
            Ok(record) => record,
            // A role that may not write beside the lock waits as before,
            // in the queue, unranked.
            Err(e @ ZkError::Denied { .. }) => {
                tracing::warn!("waiting for `{key}` without priorities: {e}");
                let (own, _, partner) = &nodes;
                return match Self::wait_turn(client, &dir, own, Some(partner), false, wait).await {
                    Ok(Some(())) => Ok(Some(nodes)),
                    Ok(None) => {
                        let _ = leave(nodes).await;
                        Ok(None)
                    }
                    Err(e) => {
                        let _ = leave(nodes).await;
                        Err(e)
                    }
                };
            }
            Err(e) => {
                let _ = leave(nodes).await;
                return Err(e);
            }
        };
        let mut queued = Some(nodes);
        let outcome = self.ranked_wait(client, uuid, key, &dir, &mut queued, data, wait).await;
        let (c, r) = (client.clone(), record);
        tokio::spawn(async move {
            let _ = lock::leave(&c, &r).await;
        });
        match outcome {
            Ok(true) => Ok(queued),
            Ok(false) => Ok(None),
            Err(e) => {
                if let Some(n) = queued {
                    let _ = leave(n).await;
                }
                Err(e)
            }
        }
    }

    /// [`Self::wait_ranked`]'s loop: `true` once our nodes in `queued`
    /// hold, `false` when the patience ran out with `queued` left empty.
    #[allow(clippy::too_many_arguments)]
    async fn ranked_wait(
        &self,
        client: &zk::Client,
        uuid: &str,
        key: &str,
        dir: &str,
        queued: &mut Option<Nodes>,
        data: &[u8],
        wait: Wait,
    ) -> Result<bool, ZkError> {
        let deadline = wait.deadline();
        let sleep_until = |at: Option<Instant>| async move {
            match at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let look = |what: &'static str| {
            super::client::riding_out(wait, what, move || others(client, key, uuid))
        };
        let mut deferral = self.priority.deferral();
        loop {
            let (seen, records) = look("looking at the waiters").await?;
            let (free, contenders) = match queued {
                Some(_) => (false, None),
                None => {
                    let (free, watch) = super::client::riding_out(wait, "looking at the queue", || queue(client, dir)).await?;
                    (free, Some(watch))
                }
            };
            let verdict = deferral.decide(Instant::now(), seen.iter().map(|(_, l)| *l), free);
            tracing::debug!(?verdict, waiting = ?seen, free, "ranked among the waiters");
            match verdict {
                Verdict::Defer { until } => {
                    if let Some((own, _, partner)) = queued.take() {
                        super::client::riding_out(wait, "leaving the queue", || async {
                            lock::leave(client, &format!("{dir}/{own}")).await?;
                            lock::leave(client, &format!("{dir}/{partner}")).await
                        })
                        .await?;
                        continue;
                    }
                    let contenders = contenders.expect("looked at while out of the queue");
                    let wake = [until, deadline].into_iter().flatten().min();
                    tokio::select! {
                        _ = records => {}
                        _ = contenders => {}
                        () = sleep_until(wake) => {}
                    }
                    if deadline.is_some_and(|at| Instant::now() >= at) {
                        return Ok(false);
                    }
                }
                Verdict::Go => {
                    let nodes = match queued.take() {
                        Some(nodes) => nodes,
                        None => {
                            super::client::riding_out(wait, "entering the queue", || {
                                lock::enter_writer(client, dir, uuid, data)
                            })
                            .await?
                        }
                    };
                    // The higher waiters seen now (a stuck one whose grace
                    // ran out) do not send us out again; a new one does.
                    let known: Vec<String> = seen
                        .into_iter()
                        .filter(|(_, l)| *l > self.priority.level)
                        .map(|(n, _)| n)
                        .collect();
                    let outcome = self.in_queue(client, uuid, key, dir, &nodes, known, records, wait).await;
                    *queued = Some(nodes);
                    match outcome? {
                        InQueue::Held => return Ok(true),
                        // Looked at again: the higher waiter sends us out.
                        InQueue::Higher => {}
                        InQueue::Over => {
                            let (own, _, partner) = queued.take().expect("just put");
                            super::client::riding_out(Wait::Once, "leaving the queue", || async {
                                lock::leave(client, &format!("{dir}/{own}")).await?;
                                lock::leave(client, &format!("{dir}/{partner}")).await
                            })
                            .await?;
                            return Ok(false);
                        }
                    }
                }
            }
        }
    }

    /// Waits in the queue, as [`Self::wait_turn`] does, for our turn, a
    /// record of a higher priority than ours not among `known`, or the
    /// end of the patience, whichever comes first. `records` fires at the
    /// records' next change.
    #[allow(clippy::too_many_arguments)]
    async fn in_queue(
        &self,
        client: &zk::Client,
        uuid: &str,
        key: &str,
        dir: &str,
        (own, _, partner): &Nodes,
        known: Vec<String>,
        records: Fired,
        wait: Wait,
    ) -> Result<InQueue, ZkError> {
        let over = async {
            match wait.deadline() {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(over);
        let mut turn: Option<Fired> = None;
        let mut records = Some(records);
        loop {
            if turn.is_none() {
                match Self::next_turn(client, dir, own, Some(partner), false, wait, true).await? {
                    super::engine::Turn::Mine => return Ok(InQueue::Held),
                    super::engine::Turn::Behind(watcher) => turn = watcher.map(fired),
                }
            }
            if records.is_none() {
                let (seen, watch) = super::client::riding_out(wait, "looking at the waiters", || others(client, key, uuid)).await?;
                if seen.iter().any(|(n, l)| *l > self.priority.level && !known.contains(n)) {
                    return Ok(InQueue::Higher);
                }
                records = Some(watch);
            }
            let (Some(t), Some(r)) = (turn.as_mut(), records.as_mut()) else {
                // No watch could be set on the one ahead: look again soon.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            tokio::select! {
                biased;
                _ = t => turn = None,
                _ = r => records = None,
                () = &mut over => return Ok(InQueue::Over),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_name_their_priority() {
        assert_eq!(parse("3-0b5c-11"), Some((3, "0b5c-11")));
        assert_eq!(parse("1000-u"), Some((1000, "u")));
        // --replace's record is one above every --priority.
        assert_eq!(parse("1001-u"), Some((priority::REPLACE, "u")));
        assert_eq!(parse("1002-u"), None);
        assert_eq!(parse("03-u"), None);
        assert_eq!(parse("+3-u"), None);
        assert_eq!(parse("3-"), None);
        assert_eq!(parse("_c_0a-lock-0000000001"), None);
        assert_eq!(records_dir("a/b"), "/a/b.lockrun-wait");
        // No record is a contender, whatever its uuid.
        assert!(lock::contender(&record_name(7, "x-1-0000000001")).is_none());
    }
}
