//! What `leader`, `list`, `release`, `put` and `--replace` read and write
//! on ZooKeeper (`Inspect`).

use zookeeper_client as zk;

use crate::backend::{
    Changes, Holder, Inspect,
    Released, ReplaceNote, Target, Which,
};

use super::engine::{Zookeeper, check_key, holders_with, lease_seq, partner_of};
use super::error::ZkError;
use tokio::time::Instant;
use super::lock::{contenders, dir_of, note_path, Writer};
use super::{client, lock, waiters};

impl Inspect for Zookeeper {
    type Error = ZkError;
    type Changes = ZkChanges;

    /// An ephemeral record beside the lock's directory at `--replace`'s
    /// level, as a writer that waits keeps ([`waiters`]), on a session of
    /// its own.
    async fn go_ahead(&self, target: &Target, value: &str) -> Result<Option<crate::backend::Ahead>, ZkError> {
        let Target::Lock { key, shared: false } = target else {
            return Ok(None);
        };
        let client = client::connect(&self.config, self.ttl, true).await?;
        Ok(Some(Box::new(waiters::Ahead::put(client, key, value).await?)))
    }

    /// A prefix whose data holds a limit and that has `leases` is a
    /// semaphore; anything else a lock.
    async fn target_of(&self, key: &str) -> Result<Target, ZkError> {
        let lock = Target::Lock { key: key.to_owned(), shared: false };
        let dir = Self::dir(&lock)?;
        let client = self.looker().await?;
        let data = match client.get_data(&dir).await {
            Ok((data, _)) => data,
            Err(zk::Error::NoNode) => return Ok(lock),
            Err(e) => return Err(ZkError::of(&format!("reading `{dir}`"), e)),
        };
        let leases = client
            .check_stat(&format!("{dir}/leases"))
            .await
            .map_err(|e| ZkError::of(&format!("reading `{dir}/leases`"), e))?;
        Ok(match (lock::parse_limit(&data), leases) {
            (Some(Ok(limit)), Some(_)) => Target::Slot {
                prefix: key.to_owned(),
                limit,
            },
            // Readers hold it while the lowest contender is a reader.
            _ => match client.list_children(&dir).await {
                Ok(children) => Target::Lock {
                    key: key.to_owned(),
                    shared: contenders(&children)
                        .first()
                        .is_some_and(|c| c.writer == Writer::Reader),
                },
                Err(_) => lock,
            },
        })
    }

    /// A walk of the tree from `prefix`'s node: a node with contenders
    /// (Curator's, kazoo's, `WriteLock`'s) names a lock, one with `leases`
    /// a semaphore; ZooKeeper's own `/zookeeper` is left alone.
    async fn names_under(&self, prefix: &str) -> Result<Vec<String>, ZkError> {
        const DEPTH: usize = 32;
        let client = self.looker().await?;
        let mut out = Vec::new();
        let mut todo = vec![(prefix.to_owned(), 0usize)];
        while let Some((name, depth)) = todo.pop() {
            let dir = if name.is_empty() { "/".to_owned() } else { lock::dir_of(&name) };
            let children = match client.list_children(&dir).await {
                Ok(children) => children,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(ZkError::of(&format!("listing `{dir}`"), e)),
            };
            if !name.is_empty() && (children.iter().any(|c| c == "leases") || !lock::contenders(&children).is_empty()) {
                out.push(name.clone());
            }
            if depth >= DEPTH {
                continue;
            }
            for child in children {
                if lock::contender(&child).is_some() {
                    continue;
                }
                let sub = if name.is_empty() { child } else { format!("{name}/{child}") };
                if check_key(&sub).is_ok() {
                    todo.push((sub, depth + 1));
                }
            }
        }
        Ok(out)
    }

    async fn holders(&self, target: &Target) -> Result<Vec<Holder>, ZkError> {
        holders_with(self.looker().await?, target).await
    }

    /// lockrun's writers waiting for a lock, from their records (see
    /// [`waiters`]); Curator's and kazoo's keep none and are not shown.
    async fn waiters(&self, target: &Target) -> Result<Option<Vec<crate::backend::Waiter>>, ZkError> {
        let Target::Lock { key, .. } = target else {
            return Ok(None);
        };
        check_key(key).map_err(ZkError::Usage)?;
        Ok(Some(waiters::waiting(self.looker().await?, key).await?))
    }

    async fn changes(&self, target: &Target) -> Result<ZkChanges, ZkError> {
        Self::dir(target)?;
        Ok(ZkChanges {
            engine: self.clone(),
            target: target.clone(),
            last: None,
        })
    }

    fn asks_by_note(&self) -> bool {
        true
    }

    /// A silent holder's node goes with its session, which the server
    /// expires only after the negotiated session timeout, within which the
    /// holder's lockrun stops its command, as for any rival.
    fn ends_silent_claims(&self) -> bool {
        true
    }

    /// Our note's node is gone (its holder removes it once its tree is),
    /// seen by an exists watch.
    async fn note_taken(&self, target: &Target, _holder: &Holder, until: Instant) -> bool {
        let path = note_path(target.name());
        // Whether it went; `false` when we cannot tell (no session).
        let taken = async {
            let Ok(client) = self.looker().await else {
                return false;
            };
            loop {
                match client.check_and_watch_stat(&path).await {
                    Ok((None, _)) => return true,
                    Ok((Some(_), watcher)) => {
                        if watcher.changed().await.event_type == zk::EventType::NodeDeleted {
                            return true;
                        }
                    }
                    Err(_) => return false,
                }
            }
        };
        match tokio::time::timeout_at(until, taken).await {
            Ok(true) => true,
            _ => {
                tokio::time::sleep_until(until).await;
                false
            }
        }
    }

    /// An ephemeral node of our session beside the lock's directory,
    /// `/KEY.lockrun-by`: outside the directory, so no contender sees it,
    /// and gone with our session should we die before removing it.
    async fn leave_note(
        &self,
        target: &Target,
        _holder: &Holder,
        note: &ReplaceNote,
    ) -> Result<bool, ZkError> {
        let client = self.looker().await?;
        let path = note_path(target.name());
        let options = zk::CreateMode::Ephemeral.with_acls(client::open_acl());
        match client.create(&path, &note.encode(), &options).await {
            Ok(_) => Ok(true),
            Err(zk::Error::NodeExists) => Ok(false),
            Err(e) => Err(ZkError::of(&format!("creating `{path}`"), e)),
        }
    }

    async fn clear_note(&self, target: &Target, _holder: &Holder) {
        let path = note_path(target.name());
        if let Ok(client) = self.looker().await {
            match client.delete(&path, None).await {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => tracing::warn!("could not remove --replace's note `{path}`: {e}"),
            }
        }
    }

    /// Deletes the chosen holders' nodes: a lockrun holder sees its node go
    /// and stops its child at once.
    async fn force_release(&self, target: &Target, which: &Which) -> Result<Released<ZkError>, ZkError> {
        let client = self.looker().await?;
        let holders = holders_with(client, target).await?;
        let mut asked = Vec::new();
        let mut refused = Vec::new();
        for holder in holders {
            if !which.picks(&holder) {
                continue;
            }
            let Some(path) = holder.entry.clone() else { continue };
            match client.delete(&path, None).await {
                Ok(()) => {
                    // A writer's `__WRIT__` partner, by its protection
                    // prefix: its holder lets go of it once it sees its
                    // node gone, but Curator's read-write lock need not
                    // wait for that.
                    if let Some(partner) = partner_of(client, &path).await {
                        let _ = lock::leave(client, &partner).await;
                    }
                    asked.push(holder)
                }
                Err(zk::Error::NoNode) => {}
                Err(e) => refused.push(ZkError::of(&format!("deleting `{path}`"), e)),
            }
        }
        Ok(Released {
            asked,
            refused,
            nothing: None,
        })
    }

    fn asked_line(&self, target: &Target, holder: &Holder) -> String {
        let what = match holder.slot {
            Some(slot) => format!("slot {slot} of `{}`", target.name()),
            None => format!("`{}`", target.name()),
        };
        format!(
            "released {what}: deleted {}, held by {}",
            holder.entry.as_deref().unwrap_or("its node"),
            String::from_utf8_lossy(&holder.label())
        )
    }
}

/// The holders of a target each time they change, from child watches.
#[derive(Debug)]
pub struct ZkChanges {
    engine: Zookeeper,
    target: Target,
    last: Option<Vec<Holder>>,
}

impl Changes for ZkChanges {
    type Error = ZkError;

    async fn next(&mut self) -> Result<Vec<Holder>, ZkError> {
        let client = self.engine.looker().await?.clone();
        let dir = Zookeeper::dir(&self.target)?;
        let watched = match self.target {
            Target::Lock { .. } => dir.clone(),
            Target::Slot { .. } => format!("{dir}/leases"),
        };
        loop {
            // Watch first, then read: no change falls between.
            let watcher = match client.list_and_watch_children(&watched).await {
                Ok((_, w)) => w,
                Err(zk::Error::NoNode) => match client.check_and_watch_stat(&watched).await {
                    Ok((None, w)) => w,
                    Ok((Some(_), _)) => continue,
                    Err(e) => return Err(ZkError::of(&format!("watching `{watched}`"), e)),
                },
                Err(e) => return Err(ZkError::of(&format!("watching `{watched}`"), e)),
            };
            let now = holders_with(&client, &self.target).await?;
            if self.last.as_ref() != Some(&now) {
                self.last = Some(now.clone());
                return Ok(now);
            }
            let event = watcher.changed().await;
            if event.event_type == zk::EventType::Session && event.session_state.is_terminated() {
                return Err(ZkError::SessionGone {
                    why: format!("the watch ended ({})", event.session_state),
                });
            }
        }
    }
}

impl Zookeeper {
    /// Refuses a `put` KEY inside a lock's or semaphore's own records,
    /// which would wedge, revoke or reconfigure it (#45): a path segment
    /// shaped as a contender or lease node (`…lock-0000000007`, kazoo's
    /// `__lock__`, `x-…-`, `…lease-…`), or under a node that has such
    /// children, or a semaphore's prefix or anything under it (its `leases`
    /// and `locks` children). One line, 2, nothing written.
    async fn refuse_lock_records(client: &zk::Client, key: &str) -> Result<(), ZkError> {
        let refuse = |what: String| {
            Err(ZkError::Usage(format!(
                "`{key}` is {what}; a write there would break that lock, so `put` refuses it: give data keys a prefix of their own"
            )))
        };
        if let Some(segment) = key
            .split('/')
            .find(|s| lock::contender(s).is_some() || lease_seq(s).is_some())
        {
            return refuse(format!("shaped as a lock's contender node (`{segment}`)"));
        }
        // A record there would pass for a waiter that never takes the lock
        // (see [`waiters`]).
        if let Some(segment) = key.split('/').find(|s| s.ends_with(".lockrun-wait")) {
            return refuse(format!("inside a lock's waiter records (`{segment}`)"));
        }
        let mut path = String::new();
        for segment in key.split('/') {
            path.push('/');
            path.push_str(segment);
            let children = match client.list_children(&path).await {
                Ok(children) => children,
                Err(zk::Error::NoNode) => return Ok(()),
                Err(e) => return Err(ZkError::of(&format!("reading `{path}`"), e)),
            };
            if let Some(c) = lock::contenders(&children).first() {
                return refuse(format!("inside the lock `{path}` (its contender `{}`)", c.name));
            }
            if children.iter().any(|c| c == "leases" || c == "locks") {
                return refuse(format!("inside the semaphore `{path}` (its `leases` and `locks`)"));
            }
        }
        Ok(())
    }

    /// Writes `key` only while `holder`, a holder's node, still exists:
    /// `multi(check(holder), create(missing parents…), setData or create(key))`,
    /// so a holder that has lost the lock writes nothing at all. A key
    /// inside a lock's or semaphore's own records is refused first
    /// ([`Zookeeper::refuse_lock_records`]).
    pub async fn fenced_put(&self, holder: &str, key: &str, value: &[u8]) -> Result<bool, ZkError> {
        check_key(key).map_err(ZkError::Usage)?;
        let client = self.looker().await?;
        let path = dir_of(key);
        Self::refuse_lock_records(client, key).await?;
        for _ in 0..3 {
            let exists = client
                .check_stat(&path)
                .await
                .map_err(|e| ZkError::of(&format!("reading `{path}`"), e))?;
            // The parents that do not exist yet, outermost first.
            let mut missing = Vec::new();
            if exists.is_none() {
                let mut parent = path.as_str();
                while let Some((up, _)) = parent.rsplit_once('/').filter(|(p, _)| !p.is_empty()) {
                    let there = client
                        .check_stat(up)
                        .await
                        .map_err(|e| ZkError::of(&format!("reading `{up}`"), e))?;
                    if there.is_some() {
                        break;
                    }
                    missing.push(up.to_owned());
                    parent = up;
                }
                missing.reverse();
            }
            let mut multi = client.new_multi_writer();
            let bad = |e: zk::Error| ZkError::of("building the fenced write", e);
            let persistent = zk::CreateMode::Persistent.with_acls(client::open_acl());
            multi.add_check_version(holder, -1).map_err(bad)?;
            for dir in &missing {
                multi.add_create(dir, &[], &persistent).map_err(bad)?;
            }
            match exists {
                Some(_) => multi.add_set_data(&path, value, None).map_err(bad)?,
                None => multi.add_create(&path, value, &persistent).map_err(bad)?,
            }
            match multi.commit().await {
                Ok(_) => return Ok(true),
                Err(zk::MultiWriteError::OperationFailed { index: 0, .. }) => return Ok(false),
                // Created or deleted meanwhile: look again.
                Err(zk::MultiWriteError::OperationFailed {
                    source: zk::Error::NodeExists | zk::Error::NoNode,
                    ..
                }) => continue,
                Err(e) => return Err(ZkError::of(&format!("writing `{path}`"), e.into())),
            }
        }
        Err(ZkError::Failed {
            what: format!("writing `{path}`"),
            cause: "it kept being created and deleted meanwhile; try again".into(),
        })
    }
}
