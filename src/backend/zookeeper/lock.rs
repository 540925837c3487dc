//! The layout on ZooKeeper: Curator's `InterProcessMutex` and
//! `InterProcessSemaphoreV2`, read as every client of the path writes it
//! (`../shared/ZOOKEEPER.md`, rules 2 to 5 and 12).
//!
//! A lock is the directory `/KEY` (a container, as Curator makes it) and
//! one `EPHEMERAL_SEQUENTIAL` child per contender, `_c_<uuid>-lock-<seq>`
//! (a writer of ours adds its `__WRIT__` partner, see [`enter_writer`]; a
//! reader of ours is one `__READ__` node).
//! Every child whose name ends in a 10-digit sequence after `lock-`
//! (Curator, go-zookeeper), `__lock__` (kazoo) or `x-<session>-`
//! (ZooKeeper's own `WriteLock` recipe) is a contender, ordered by that
//! number: the lowest holds. A semaphore `PREFIX` keeps its limit in
//! `PREFIX`'s data, admits through the lock `PREFIX/locks` and holds a slot
//! as a node `PREFIX/leases/_c_<uuid>-lease-<seq>`.

use std::sync::atomic::{AtomicBool, Ordering};

use zookeeper_client as zk;

use super::client::open_acl;
use super::error::ZkError;

/// What Curator's mutex names its nodes after the protection prefix.
pub const LOCK_NAME: &str = "lock-";
/// What Curator's `InterProcessReadWriteLock` names a reader's node, and
/// a writer's (rule 13 of the design notes).
pub const READ_NAME: &str = "__READ__";
pub const WRITE_NAME: &str = "__WRIT__";
/// What Curator's semaphore names its lease nodes.
pub const LEASE_NAME: &str = "lease-";

/// The directory of a key: `service/db` is `/service/db`.
pub fn dir_of(key: &str) -> String {
    format!("/{key}")
}

/// Where `--replace` leaves its note for the holder of `key`
/// ([`ReplaceNote`](crate::backend::ReplaceNote)): beside the lock's directory, not in it.
pub fn note_path(key: &str) -> String {
    format!("{}.lockrun-by", dir_of(key))
}

/// Who wrote a contender node, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// Curator, go-zookeeper and lockrun: `…lock-<seq>`.
    Curator,
    /// kazoo's default: `<hex>__lock__<seq>`.
    Kazoo,
    /// ZooKeeper's `WriteLock` recipe: `x-<session>-<seq>`.
    WriteLock,
    /// A reader of Curator's read-write lock, and lockrun's `elect -s`:
    /// `…__READ__<seq>`. Readers hold together.
    Reader,
    /// A writer of Curator's read-write lock: `…__WRIT__<seq>`.
    CuratorWriter,
}

/// A child of a lock's directory that counts as a contender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contender {
    pub name: String,
    pub seq: i64,
    pub writer: Writer,
}

/// The sequence of a contender node, by the rules above; `None` for any
/// other child (data some tool left, a nested lock's directory).
pub fn contender(name: &str) -> Option<Contender> {
    if name.len() < 10 {
        return None;
    }
    let (head, digits) = name.split_at(name.len() - 10);
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seq: i64 = digits.parse().ok()?;
    let writer = if head.ends_with(LOCK_NAME) {
        Writer::Curator
    } else if head.ends_with(READ_NAME) {
        Writer::Reader
    } else if head.ends_with(WRITE_NAME) {
        Writer::CuratorWriter
    } else if head.ends_with("__lock__") || head.ends_with("__rlock__") {
        // kazoo's Lock, and its ReadLock: a reader excludes a writer.
        Writer::Kazoo
    } else if head.starts_with("x-") && head.ends_with('-') && head.len() > 3 {
        Writer::WriteLock
    } else {
        return None;
    };
    Some(Contender {
        name: name.to_owned(),
        seq,
        writer,
    })
}

/// The contenders among `children`, the holder first.
pub fn contenders(children: &[String]) -> Vec<Contender> {
    let mut found: Vec<Contender> = children.iter().filter_map(|c| contender(c)).collect();
    found.sort_by(|a, b| a.seq.cmp(&b.seq).then_with(|| a.name.cmp(&b.name)));
    found
}

static KAZOO_WARNED: AtomicBool = AtomicBool::new(false);

/// Says once per run, at every verbosity but `-q`, that a default kazoo
/// client contends on `dir`: Curator clients on the same lock do not see it,
/// so both may hold at once, which only lockrun can tell.
pub fn warn_of_kazoo(dir: &str, found: &[Contender]) {
    if found.iter().any(|c| c.writer == Writer::Kazoo) && !KAZOO_WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            target: crate::logging::SAFETY,
            "a kazoo client contends on `{dir}` with its default node names (`__lock__`): lockrun counts it, but Curator clients do not; kazoo clients on this path must pass extra_lock_patterns=[\"-lock-\"]"
        );
    }
}

/// A random UUID (version 4), the protection prefix Curator's
/// `withProtection()` puts in a node's name.
pub fn new_uuid() -> String {
    let mut b = [0u8; 16];
    match std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
    {
        Ok(()) => {}
        Err(_) => {
            // No /dev/urandom: the time and pid still make a name no other
            // process here writes.
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos();
            b[..12].copy_from_slice(&t.to_le_bytes()[..12]);
            b[12..].copy_from_slice(&std::process::id().to_le_bytes());
        }
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// Creates `path` and the directories above it as containers, as Curator's
/// `creatingParentContainersIfNeeded` does.
pub async fn make_dirs(client: &zk::Client, path: &str) -> Result<(), ZkError> {
    let options = zk::CreateMode::Container.with_acls(open_acl());
    match client.mkdir(path, &options).await {
        Ok(()) => Ok(()),
        // Only the chroot itself can be missing: mkdir makes the rest.
        Err(zk::Error::NoNode) => Err(ZkError::Failed {
            what: format!("creating `{path}`"),
            cause: "the chroot of the connect string does not exist; create it, or drop it from --zk-hosts (ZOOKEEPER_HOSTS)".into(),
        }),
        Err(e) => Err(ZkError::of(&format!("creating `{path}`"), e)),
    }
}

/// Our contender node, created in `dir` as `_c_<uuid>-<name><seq>`: its
/// name and its stat. On a connection lost during the create (closed, or
/// given up as silent), the directory is searched for our uuid before
/// creating again (ZOOKEEPER-1262: the first create may have happened).
pub async fn enter(
    client: &zk::Client,
    dir: &str,
    uuid: &str,
    name: &str,
    data: &[u8],
) -> Result<(String, zk::Stat), ZkError> {
    let protected = format!("_c_{uuid}-");
    let options = zk::CreateMode::EphemeralSequential.with_acls(open_acl());
    let mut tries = 0;
    loop {
        tries += 1;
        match client.create(&format!("{dir}/{protected}{name}"), data, &options).await {
            Ok((stat, seq)) => return Ok((format!("{protected}{name}{seq}"), stat)),
            Err(zk::Error::NoNode) if tries < 5 => make_dirs(client, dir).await?,
            // The connection ended with the create unanswered: by loss,
            // or by the client giving up a silent server (a custom error
            // saying so), each in-flight request failing with that cause.
            Err(zk::Error::ConnectionLoss | zk::Error::Timeout | zk::Error::Custom(_)) => {
                let found = riding_lost(client, dir, &protected).await?;
                if let Some(found) = found {
                    return Ok(found);
                }
                if tries >= 5 {
                    return Err(ZkError::of(
                        &format!("creating our node in `{dir}`"),
                        zk::Error::ConnectionLoss,
                    ));
                }
            }
            Err(e) => return Err(ZkError::of(&format!("creating our node in `{dir}`"), e)),
        }
    }
}

/// A writer's two nodes, created in one transaction in `dir`:
/// `_c_<uuid>-lock-<seq>` (ours, the one that holds, watched and fenced)
/// and its partner `_c_<uuid>-__WRIT__<seq + 1>`. No single name is seen
/// by both of Curator's recipes: its `InterProcessMutex` orders children
/// by the text after their last `lock-` and its read-write lock by the
/// text after `__READ__` or `__WRIT__`, each sorting the other's nodes by
/// their whole name, after every sequence number, so each would take the
/// lock beside a writer named only for the other. With both nodes the
/// mutex sees us as its `lock-` contender and the read-write lock, both its
/// sides, as a writer. One transaction: the two sequence numbers are
/// consecutive, and no contender comes between them. Returns our node's
/// name and stat, and the partner's name. On a connection lost during the
/// create, the directory is searched for our uuid, as in [`enter`].
pub async fn enter_writer(
    client: &zk::Client,
    dir: &str,
    uuid: &str,
    data: &[u8],
) -> Result<(String, zk::Stat, String), ZkError> {
    let protected = format!("_c_{uuid}-");
    let options = zk::CreateMode::EphemeralSequential.with_acls(open_acl());
    let what = format!("creating our nodes in `{dir}`");
    let mut tries = 0;
    loop {
        tries += 1;
        let mut multi = client.new_multi_writer();
        for name in [LOCK_NAME, WRITE_NAME] {
            multi
                .add_create(&format!("{dir}/{protected}{name}"), data, &options)
                .map_err(|e| ZkError::of(&what, e))?;
        }
        let e = match multi.commit().await {
            Ok(results) => {
                let created: Vec<(String, zk::Stat)> = results
                    .into_iter()
                    .filter_map(|r| match r {
                        zk::MultiWriteResult::Create { path, stat } => {
                            Some((path.rsplit('/').next().unwrap_or_default().to_owned(), stat))
                        }
                        _ => None,
                    })
                    .collect();
                let [(own, stat), (partner, _)] = <[_; 2]>::try_from(created).map_err(|c| ZkError::Failed {
                    what: what.clone(),
                    cause: format!("{} creations answered where 2 were asked", c.len()),
                })?;
                // Some servers answer a transaction's creation with no
                // stat (ZOOKEEPER-4026): read it.
                if !stat.is_invalid() {
                    return Ok((own, stat, partner));
                }
                let path = format!("{dir}/{own}");
                return match client.check_stat(&path).await {
                    Ok(Some(stat)) => Ok((own, stat, partner)),
                    Ok(None) => Err(ZkError::NodeGone { path }),
                    Err(e) => Err(ZkError::of(&format!("reading `{path}`"), e)),
                };
            }
            Err(e) => zk::Error::from(e),
        };
        match e {
            zk::Error::NoNode if tries < 5 => make_dirs(client, dir).await?,
            zk::Error::ConnectionLoss | zk::Error::Timeout | zk::Error::Custom(_) => {
                if let Some(found) = writer_nodes(client, dir, &protected).await? {
                    return Ok(found);
                }
                if tries >= 5 {
                    return Err(ZkError::of(&what, zk::Error::ConnectionLoss));
                }
            }
            e => return Err(ZkError::of(&what, e)),
        }
    }
}

/// A writer's two nodes in `dir`, by their protection prefix, once the
/// server is caught up with the leader: our `lock-` node's name and stat,
/// and its `__WRIT__` partner's name. The transaction made both or none.
async fn writer_nodes(
    client: &zk::Client,
    dir: &str,
    protected: &str,
) -> Result<Option<(String, zk::Stat, String)>, ZkError> {
    let Some((first, _)) = riding_lost(client, dir, protected).await? else {
        return Ok(None);
    };
    let children = client
        .list_children(dir)
        .await
        .map_err(|e| ZkError::of(&format!("listing `{dir}`"), e))?;
    let ours = |kind: &str| {
        children
            .iter()
            .find(|c| c.starts_with(protected) && contender(c).is_some() && c[protected.len()..].starts_with(kind))
            .cloned()
    };
    let (Some(own), Some(partner)) = (ours(LOCK_NAME), ours(WRITE_NAME)) else {
        return Err(ZkError::NodeGone {
            path: format!("{dir}/{first}"),
        });
    };
    let path = format!("{dir}/{own}");
    match client.check_stat(&path).await {
        Ok(Some(stat)) => Ok(Some((own, stat, partner))),
        Ok(None) => Err(ZkError::NodeGone { path }),
        Err(e) => Err(ZkError::of(&format!("reading `{path}`"), e)),
    }
}

/// Our node in `dir` after a lost create, if the create happened.
async fn riding_lost(
    client: &zk::Client,
    dir: &str,
    protected: &str,
) -> Result<Option<(String, zk::Stat)>, ZkError> {
    for _ in 0..20 {
        // The server we reconnected to may lag behind the one that took
        // the create: catch up with the leader first.
        if client.sync(dir).await.is_err() {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        }
        match client.list_children(dir).await {
            Ok(children) => {
                let Some(ours) = children.into_iter().find(|c| c.starts_with(protected)) else {
                    return Ok(None);
                };
                let path = format!("{dir}/{ours}");
                return match client.check_stat(&path).await {
                    Ok(Some(stat)) => Ok(Some((ours, stat))),
                    Ok(None) => Ok(None),
                    Err(e) => Err(ZkError::of(&format!("reading `{path}`"), e)),
                };
            }
            Err(zk::Error::NoNode) => return Ok(None),
            Err(zk::Error::ConnectionLoss | zk::Error::Timeout | zk::Error::Custom(_)) => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await
            }
            Err(e) => return Err(ZkError::of(&format!("listing `{dir}`"), e)),
        }
    }
    Err(ZkError::of(
        &format!("listing `{dir}` after a lost create"),
        zk::Error::ConnectionLoss,
    ))
}

/// Deletes our node; one already gone is fine.
pub async fn leave(client: &zk::Client, path: &str) -> Result<(), ZkError> {
    match client.delete(path, None).await {
        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
        Err(e) => Err(ZkError::of(&format!("deleting `{path}`"), e)),
    }
}

/// The limit stored in a semaphore prefix's data: lockrun writes it as
/// decimal text; empty data (Curator's) has none.
pub fn parse_limit(data: &[u8]) -> Option<Result<u32, String>> {
    if data.is_empty() {
        return None;
    }
    let text = String::from_utf8_lossy(data);
    Some(
        text.trim()
            .parse::<u32>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("`{}`", text.escape_debug())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kazoo's ReadLock names its nodes `__rlock__`: a reader that holds
    /// excludes lockrun's writer, so it is a contender (second review).
    #[test]
    fn a_kazoo_reader_is_a_contender() {
        let found = contender("4f2a__rlock__0000000004").expect("counted");
        assert_eq!((found.seq, found.writer), (4, Writer::Kazoo));
    }

    #[test]
    fn every_recipe_counts_and_orders_by_its_number() {
        let children: Vec<String> = [
            "_c_6c19-lock-0000000003",
            "a3df__lock__0000000001",
            "x-72057594037927936-0000000002",
            "data",
            "leases",
            "lock-000000000x",
            "locks",
        ]
        .map(String::from)
        .to_vec();
        let found = contenders(&children);
        let names: Vec<&str> = found.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "a3df__lock__0000000001",
                "x-72057594037927936-0000000002",
                "_c_6c19-lock-0000000003"
            ]
        );
        assert_eq!(found[0].writer, Writer::Kazoo);
    }

    #[test]
    fn curators_read_write_nodes_are_readers_and_writers() {
        let r = contender("_c_0a-__READ__0000000004").unwrap();
        assert_eq!((r.seq, r.writer), (4, Writer::Reader));
        let w = contender("_c_0a-__WRIT__0000000005").unwrap();
        assert_eq!((w.seq, w.writer), (5, Writer::CuratorWriter));
    }

    #[test]
    fn uuids_look_like_curators() {
        let u = new_uuid();
        assert_eq!(u.len(), 36);
        assert_ne!(u, new_uuid());
    }

    #[test]
    fn limits() {
        assert_eq!(parse_limit(b""), None);
        assert_eq!(parse_limit(b"3"), Some(Ok(3)));
        assert!(parse_limit(b"0").unwrap().is_err());
        assert!(parse_limit(b"x").unwrap().is_err());
    }
}
