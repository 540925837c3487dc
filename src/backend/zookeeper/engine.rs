//! The ZooKeeper engine (`Engine`): the session that is the lease, our
//! node in the queue, the claim and its renewal.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use zookeeper_client as zk;

use crate::backend::priority::Priority;
use crate::backend::{
    Acquisition, Claim, Engine, EngineError, Holder, Lease, Lost, Opening, Renewal, ReplaceNote, Target, Wait,
};

use super::client::{riding_out, ONCE_GRACE};
use super::config::ZkConfig;
use super::error::ZkError;
use super::lock::{contenders, dir_of, note_path, Writer, LEASE_NAME, LOCK_NAME, READ_NAME};
use super::{client, lock};

/// What Curator's `Revoker` writes into a holder's node to ask it to let go.
pub const REVOKE: &[u8] = b"__REVOKE__";

/// The session timeout lockrun asks for unless told otherwise.
pub const DEFAULT_TTL: Duration = Duration::from_secs(15);

/// Why KEY is refused on ZooKeeper, before any request: lockrun's rule,
/// and ZooKeeper's own tree, which no lock may live in.
pub fn check_key(key: &str) -> Result<(), String> {
    crate::key::check(key)?;
    if key == "zookeeper" || key.starts_with("zookeeper/") {
        return Err(format!(
            "key `{key}` lies in `/zookeeper`, ZooKeeper's own tree; choose another key"
        ));
    }
    Ok(())
}

/// What lockrun stores in its node: who holds, as `leader` shows it.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Facts {
    value: String,
    host: String,
    pid: u32,
    since: u64,
}

fn facts(value: &str) -> Vec<u8> {
    let facts = Facts {
        value: value.to_owned(),
        host: crate::host::hostname(),
        pid: std::process::id(),
        since: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    serde_json::to_vec(&facts).unwrap_or_default()
}

/// A holder from its node's name, data and stat.
fn holder_of(dir: &str, name: &str, data: &[u8], stat: &zk::Stat, slot: Option<u32>) -> Holder {
    let path = format!("{dir}/{name}");
    let mut holder = Holder {
        fence: u64::try_from(stat.czxid).ok(),
        slot,
        entry: Some(path.clone()),
        holder_id: Some(path),
        ..Holder::default()
    };
    match serde_json::from_slice::<Facts>(data) {
        Ok(f) => {
            holder.value = Some(f.value);
            holder.host = Some(f.host).filter(|h| !h.is_empty());
            holder.pid = Some(f.pid).filter(|p| *p != 0);
            holder.since = Some(SystemTime::UNIX_EPOCH + Duration::from_secs(f.since));
        }
        // Curator stores the client's address, kazoo its identifier: shown
        // with the node's name.
        Err(_) => {
            let text = String::from_utf8_lossy(data);
            holder.label = Some(if text.trim().is_empty() {
                format!("{name} (not lockrun)")
            } else {
                format!("{} ({name}, not lockrun)", text.trim())
            }
            .into_bytes());
        }
    }
    holder
}

/// ZooKeeper's own default `tickTime`, and `--zk-tick-time`'s.
pub const DEFAULT_TICK: Duration = Duration::from_secs(2);

/// How much older than the send time of our last answered request the
/// leader's last touch of our session can be, for a session `timeout` on
/// an ensemble whose tick is `tick`; the session may expire that much
/// sooner than `timeout` after that send.
///
/// Only the leader expires sessions, and it counts from its own touches. A
/// request to a follower touches the session there only: the follower
/// lists the sessions it saw in its answer to the leader's next ping, sent
/// every half tick (`Learner.ping`, `LearnerHandler`'s `PING`,
/// `Leader.lead`), and a request it forwards, our `sync` included, touches
/// nothing on the leader (no connection of the leader's own). A follower
/// cut off right after answering our `sync` leaves the leader with the
/// touch of the last ping answered before that `sync` arrived, up to half a
/// tick earlier, and that answer listed us only if we sent something since
/// the one before: the client pings when idle for a sixteenth of the
/// timeout, checked every forty-eighth, so it sends at least every twelfth.
/// Measured with a 3-member ensemble, the holder's follower stopped right
/// after a renewal: the rival held up to 420 ms before a 6 s timeout had
/// run on a 200 ms tick (tests/integration/zk_cli.rs).
pub fn touch_gap(timeout: Duration, tick: Duration) -> Duration {
    tick / 2 + timeout / 12
}

/// `elect`'s and `semaphore`'s rules: `--ttl` in whole seconds, asked for
/// as the session timeout, and a budget whose TTL is the timeout less
/// [`touch_gap`], since a rival may take the lock as soon as the session
/// expires.
pub fn hold_rules<H>(
    request: &crate::backend::HoldRequest<'_, H>,
    tick: Duration,
) -> Result<crate::backend::HoldRules<Duration>, crate::error::Failure> {
    use crate::duration::flag_duration;
    use crate::error::Failure;
    let ttl = request.ttl;
    if ttl < Duration::from_secs(1) || ttl.subsec_nanos() != 0 || ttl > crate::backend::rules::TTL_MAX {
        return Err(Failure::Usage(format!(
            "--ttl {} is not a ZooKeeper session timeout; use whole seconds from 1s to 24h, e.g. --ttl 15s",
            flag_duration(ttl)
        )));
    }
    if tick.is_zero() || tick > ttl {
        return Err(Failure::Usage(format!(
            "--zk-tick-time {} is not a tick for --ttl {}; give the ensemble's tickTime from zoo.cfg (ZooKeeper's default: --zk-tick-time 2s)",
            flag_duration(tick),
            flag_duration(ttl)
        )));
    }
    let gap = touch_gap(ttl, tick);
    let settings = format!("--ttl {} and --zk-tick-time {}", flag_duration(ttl), flag_duration(tick));
    let mut budget = crate::backend::timing::Budget {
        ttl: ttl.saturating_sub(gap),
        rival_delay: Duration::ZERO,
        kill_timeout: request
            .kill_timeout
            .unwrap_or(request.kind.default_kill_timeout),
        ends_early: false,
        rate_error: request.rate_error,
    };
    crate::backend::rules::fit_default_grace(&mut budget, request.kill_timeout.is_some(), &settings);
    budget.check().map_err(|message| {
        let Some(max) = budget.max_kill_timeout() else {
            // The clock-rate bound leaves nothing, whatever the grace: the
            // message names the TTL the budget counts with, ours less the gap.
            return Failure::Usage(message.replace(
                &format!("--ttl {}", flag_duration(budget.ttl)),
                &settings,
            ));
        };
        Failure::Usage(format!(
            "--kill-timeout {} is too long for {settings}: the session may expire {} after a renewal (the timeout less half a tick and a twelfth of it, for a follower's late report), and the child must be dead by then; use --kill-timeout {} or less, or a longer --ttl",
            flag_duration(budget.kill_timeout),
            flag_duration(budget.ttl),
            flag_duration(max),
        ))
    })?;
    let budget = crate::backend::timing::fit_this_host(budget).map_err(Failure::Config)?;
    Ok(crate::backend::HoldRules {
        budget: Some(budget),
        kill_timeout: budget.kill_timeout,
        plan: tick,
    })
}

/// The ZooKeeper engine: where it is and the session timeout it asks for.
#[derive(Debug, Clone)]
pub struct Zookeeper {
    pub(super) config: ZkConfig,
    pub(super) ttl: Duration,
    /// The ensemble's tick (`--zk-tick-time`), for [`touch_gap`].
    tick: Duration,
    /// How its writers rank among the waiters (`elect --priority`, see
    /// [`waiters`]).
    pub(super) priority: Priority,
    inspect: std::sync::Arc<tokio::sync::OnceCell<zk::Client>>,
}

/// Where a contender stands in the queue.
pub(super) enum Turn {
    /// Ours is the lowest: we hold.
    Mine,
    /// Behind another, with a watch on the one ahead when one was asked for.
    Behind(Option<zk::OneshotWatcher>),
}

impl Zookeeper {
    pub fn new(config: ZkConfig, ttl: Duration) -> Zookeeper {
        Zookeeper {
            config,
            ttl,
            tick: DEFAULT_TICK,
            priority: Priority::NONE,
            inspect: Default::default(),
        }
    }

    /// This engine on an ensemble whose tick is `tick`.
    pub fn with_tick(self, tick: Duration) -> Zookeeper {
        Zookeeper { tick, ..self }
    }

    /// The same engine, waiting for a lock with `priority`.
    pub fn ranked(self, priority: Priority) -> Zookeeper {
        Zookeeper { priority, ..self }
    }

    /// The session `leader`, `release` and `put` look through.
    pub(super) async fn looker(&self) -> Result<&zk::Client, ZkError> {
        self.inspect
            .get_or_try_init(|| client::connect(&self.config, self.ttl, true))
            .await
    }

    pub(super) fn dir(target: &Target) -> Result<String, ZkError> {
        check_key(target.name()).map_err(ZkError::Usage)?;
        Ok(dir_of(target.name()))
    }

    /// Waits, in `dir`, until our node `own` is the lowest contender (for a
    /// `reader`, until no contender ahead of it is a writer's, as Curator's
    /// read lock does); `None` when `wait` ran out (or, for `--no-wait`, at
    /// once when it is not).
    pub(super) async fn wait_turn(
        client: &zk::Client,
        dir: &str,
        own: &str,
        partner: Option<&str>,
        reader: bool,
        wait: Wait,
    ) -> Result<Option<()>, ZkError> {
        loop {
            let watched = match Self::next_turn(client, dir, own, partner, reader, wait, wait != Wait::Once).await? {
                Turn::Mine => return Ok(Some(())),
                Turn::Behind(None) => return Ok(None),
                Turn::Behind(Some(watched)) => watched,
            };
            let changed = watched.changed();
            match wait.deadline() {
                Some(at) => {
                    if tokio::time::timeout_at(at, changed).await.is_err() {
                        return Ok(None);
                    }
                }
                None => {
                    changed.await;
                }
            }
        }
    }

    /// One look at the queue in `dir` for our node `own` (see
    /// [`Self::wait_turn`]); when it is not our turn and `watch` is set,
    /// with a watch on the one we wait for.
    pub(super) async fn next_turn(
        client: &zk::Client,
        dir: &str,
        own: &str,
        partner: Option<&str>,
        reader: bool,
        wait: Wait,
        watch: bool,
    ) -> Result<Turn, ZkError> {
        loop {
            let children = riding_out(wait, "listing contenders", || async {
                client
                    .list_children(dir)
                    .await
                    .map_err(|e| ZkError::of(&format!("listing `{dir}`"), e))
            })
            .await;
            let children = match children {
                Ok(c) => c,
                Err(ZkError::Failed { .. }) | Err(ZkError::NodeGone { .. }) => {
                    return Err(ZkError::NodeGone {
                        path: format!("{dir}/{own}"),
                    })
                }
                Err(e) => return Err(e),
            };
            let found = contenders(&children);
            lock::warn_of_kazoo(dir, &found);
            // A node of ours besides `own`: a create whose answer was lost
            // and that a lagging server did not show us before we created
            // again. It would sit ahead of us for ever: delete it.
            let ours = own.get(..40).filter(|p| p.starts_with("_c_"));
            let strays: Vec<&str> = found
                .iter()
                .map(|c| c.name.as_str())
                .filter(|n| *n != own && Some(*n) != partner && ours.is_some_and(|p| n.starts_with(p)))
                .collect();
            if !strays.is_empty() {
                for stray in strays {
                    lock::leave(client, &format!("{dir}/{stray}")).await?;
                }
                continue;
            }
            let Some(at) = found.iter().position(|c| c.name == own) else {
                return Err(ZkError::NodeGone {
                    path: format!("{dir}/{own}"),
                });
            };
            // The one we wait for: just ahead of us (no herd when the holder
            // leaves), or for a reader the nearest writer ahead.
            let blocker = if reader {
                found[..at].iter().rposition(|c| c.writer != Writer::Reader)
            } else {
                at.checked_sub(1)
            };
            let Some(blocker) = blocker else {
                return Ok(Turn::Mine);
            };
            if !watch {
                return Ok(Turn::Behind(None));
            }
            let ahead = format!("{dir}/{}", found[blocker].name);
            return match client.check_and_watch_stat(&ahead).await {
                Ok((None, _)) => continue,
                Ok((Some(_), watcher)) => Ok(Turn::Behind(Some(watcher))),
                Err(e) => {
                    let e = ZkError::of(&format!("watching `{ahead}`"), e);
                    if e.is_transient() {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                    Err(e)
                }
            };
        }
    }

    async fn acquire_lock(
        &self,
        lease: &ZkLease,
        target: &Target,
        value: &str,
        wait: Wait,
    ) -> Result<Acquisition<ZkClaim>, ZkError> {
        let dir = Self::dir(target)?;
        let client = &lease.client;
        let data = facts(value);
        let reader = matches!(target, Target::Lock { shared: true, .. });
        // A reader is one `__READ__` node; a writer two, `lock-` and
        // `__WRIT__` (see `lock::enter_writer`).
        let (own, stat, partner) = riding_out(wait, "entering the queue", || async {
            if reader {
                let (own, stat) = lock::enter(client, &dir, &lease.uuid, READ_NAME, &data).await?;
                Ok::<_, ZkError>((own, stat, None))
            } else {
                let (own, stat, partner) = lock::enter_writer(client, &dir, &lease.uuid, &data).await?;
                Ok((own, stat, Some(partner)))
            }
        })
        .await?;
        let path = format!("{dir}/{own}");
        let partner_path = partner.as_ref().map(|p| format!("{dir}/{p}"));
        let leave = || async {
            lock::leave(client, &path).await?;
            match &partner_path {
                Some(p) => lock::leave(client, p).await,
                None => Ok(()),
            }
        };
        // A writer that has to wait ranks among the waiters (`--priority`,
        // see [`waiters`]); taking a free lock, and a reader, stay as they
        // were.
        if let (Some(partner), false) = (&partner, wait == Wait::Once) {
            match Self::next_turn(client, &dir, &own, Some(partner), false, wait, false).await {
                Ok(Turn::Mine) => {
                    return Ok(Acquisition::Held(ZkClaim {
                        client: client.clone(),
                        name: target.name().to_owned(),
                        path,
                        partner: partner_path,
                        czxid: stat.czxid,
                        slot: None,
                    }))
                }
                Ok(Turn::Behind(_)) => {}
                Err(e) => {
                    let _ = leave().await;
                    return Err(e);
                }
            }
            let nodes = (own.clone(), stat, partner.clone());
            return match self.wait_ranked(client, &lease.uuid, target.name(), nodes, &data, wait).await? {
                Some((own, stat, partner)) => Ok(Acquisition::Held(ZkClaim {
                    client: client.clone(),
                    name: target.name().to_owned(),
                    path: format!("{dir}/{own}"),
                    partner: Some(format!("{dir}/{partner}")),
                    czxid: stat.czxid,
                    slot: None,
                })),
                None => Ok(Acquisition::Busy {
                    holder: self.first_value(client, target).await,
                }),
            };
        }
        match Self::wait_turn(client, &dir, &own, partner.as_deref(), reader, wait).await {
            Ok(Some(())) => Ok(Acquisition::Held(ZkClaim {
                client: client.clone(),
                name: target.name().to_owned(),
                path,
                partner: partner_path,
                czxid: stat.czxid,
                slot: None,
            })),
            Ok(None) => {
                let _ = riding_out(Wait::Once, "leaving the queue", leave).await;
                let holder = self.first_value(client, target).await;
                Ok(Acquisition::Busy { holder })
            }
            Err(e) => {
                let _ = leave().await;
                Err(e)
            }
        }
    }

    async fn first_value(&self, client: &zk::Client, target: &Target) -> Option<String> {
        let holders = holders_with(client, target).await.ok()?;
        holders
            .into_iter()
            .next()
            .map(|h| String::from_utf8_lossy(&h.label()).into_owned())
    }

    /// Checks the limit stored in PREFIX against ours, storing ours when
    /// none is (Curator stores none).
    async fn agree_limit(client: &zk::Client, prefix: &str, dir: &str, limit: u32) -> Result<(), ZkError> {
        let (data, stat) = match client.get_data(dir).await {
            Ok(found) => found,
            Err(zk::Error::NoNode) => return Ok(()),
            Err(e) => return Err(ZkError::of(&format!("reading `{dir}`"), e)),
        };
        match lock::parse_limit(&data) {
            Some(Ok(n)) if n == limit => Ok(()),
            Some(Ok(n)) => Err(ZkError::LimitMismatch {
                prefix: prefix.to_owned(),
                ours: limit,
                theirs: n.to_string(),
            }),
            Some(Err(text)) => Err(ZkError::LimitMismatch {
                prefix: prefix.to_owned(),
                ours: limit,
                theirs: text,
            }),
            None => match client
                .set_data(dir, limit.to_string().as_bytes(), Some(stat.version))
                .await
            {
                Ok(_) => Ok(()),
                // Someone stored one meanwhile: read it.
                Err(zk::Error::BadVersion) => Box::pin(Self::agree_limit(client, prefix, dir, limit)).await,
                Err(e) => Err(ZkError::of(&format!("storing the limit in `{dir}`"), e)),
            },
        }
    }

    async fn acquire_slot(
        &self,
        lease: &ZkLease,
        target: &Target,
        limit: u32,
        value: &str,
        wait: Wait,
    ) -> Result<Acquisition<ZkClaim>, ZkError> {
        if limit == 0 {
            return Err(ZkError::Usage("a semaphore needs a limit of at least 1".into()));
        }
        let dir = Self::dir(target)?;
        let client = &lease.client;
        // A mismatch is refused before we write anything.
        Self::agree_limit(client, target.name(), &dir, limit).await?;
        let locks = format!("{dir}/locks");
        let leases = format!("{dir}/leases");
        let (gate, _) = riding_out(wait, "entering the admission queue", || {
            lock::enter(client, &locks, &lease.uuid, LOCK_NAME, b"")
        })
        .await?;
        let gate = format!("{locks}/{gate}");
        let gate_name = gate.rsplit('/').next().unwrap_or_default().to_owned();
        let outcome = async {
            if Self::wait_turn(client, &locks, &gate_name, None, false, wait).await?.is_none() {
                return Ok(None);
            }
            Self::agree_limit(client, target.name(), &dir, limit).await?;
            let data = facts(value);
            let (own, stat) = riding_out(wait, "taking a lease", || {
                lock::enter(client, &leases, &lease.uuid, LEASE_NAME, &data)
            })
            .await?;
            let path = format!("{leases}/{own}");
            loop {
                let (children, watcher) = match client.list_and_watch_children(&leases).await {
                    Ok(found) => found,
                    Err(e) => {
                        let e = ZkError::of(&format!("listing `{leases}`"), e);
                        if e.is_transient() {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                        let _ = lock::leave(client, &path).await;
                        return Err(e);
                    }
                };
                if !children.contains(&own) {
                    return Err(ZkError::NodeGone { path });
                }
                if children.len() <= limit as usize {
                    let mut ranked: Vec<_> =
                        children.iter().filter_map(|c| lease_seq(c).map(|s| (s, c))).collect();
                    ranked.sort();
                    let slot = ranked.iter().position(|(_, c)| **c == own).unwrap_or(0);
                    return Ok(Some((path, stat, slot as u32)));
                }
                let gave_up = match (wait, wait.deadline()) {
                    (Wait::Once, _) => true,
                    (_, Some(at)) => tokio::time::timeout_at(at, watcher.changed()).await.is_err(),
                    (_, None) => {
                        watcher.changed().await;
                        false
                    }
                };
                if gave_up {
                    let _ = lock::leave(client, &path).await;
                    return Ok(None);
                }
            }
        }
        .await;
        let _ = riding_out(Wait::Once, "leaving the admission queue", || lock::leave(client, &gate)).await;
        match outcome? {
            Some((path, stat, slot)) => Ok(Acquisition::Held(ZkClaim {
                client: client.clone(),
                name: target.name().to_owned(),
                path,
                partner: None,
                czxid: stat.czxid,
                slot: Some(slot),
            })),
            None => Ok(Acquisition::Busy {
                holder: self.first_value(client, target).await,
            }),
        }
    }
}

/// The sequence of a semaphore's lease node.
pub(super) fn lease_seq(name: &str) -> Option<i64> {
    let (head, digits) = name.split_at(name.len().checked_sub(10)?);
    (head.ends_with(LEASE_NAME) && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The `__WRIT__` partner of a writer's `lock-` node at `path` (see
/// [`lock::enter_writer`]): the sibling with its protection prefix.
pub(super) async fn partner_of(client: &zk::Client, path: &str) -> Option<String> {
    let (dir, name) = path.rsplit_once('/')?;
    let protected = name.get(..40).filter(|p| p.starts_with("_c_") && name[40..].starts_with(LOCK_NAME))?;
    let children = client.list_children(dir).await.ok()?;
    children
        .into_iter()
        .find(|c| c.starts_with(protected) && c[protected.len()..].starts_with(lock::WRITE_NAME))
        .map(|c| format!("{dir}/{c}"))
}

/// The live holders of `target`, read through `client`: a lock's lowest
/// contender; a semaphore's first `limit` leases.
pub(super) async fn holders_with(client: &zk::Client, target: &Target) -> Result<Vec<Holder>, ZkError> {
    let dir = Zookeeper::dir(target)?;
    let (dir, names, limit) = match target {
        Target::Lock { .. } => {
            let children = match client.list_children(&dir).await {
                Ok(c) => c,
                Err(zk::Error::NoNode) => return Ok(Vec::new()),
                Err(e) => return Err(ZkError::of(&format!("listing `{dir}`"), e)),
            };
            let found = contenders(&children);
            // The lowest holds; if it is a reader, so does every reader up
            // to the first writer.
            let held = match found.first() {
                Some(first) if first.writer == Writer::Reader => {
                    found.iter().take_while(|c| c.writer == Writer::Reader).count()
                }
                Some(_) => 1,
                None => 0,
            };
            let names: Vec<String> = found.into_iter().map(|c| c.name).collect();
            (dir, names, held)
        }
        Target::Slot { limit, .. } => {
            let leases = format!("{dir}/leases");
            let children = match client.list_children(&leases).await {
                Ok(c) => c,
                Err(zk::Error::NoNode) => return Ok(Vec::new()),
                Err(e) => return Err(ZkError::of(&format!("listing `{leases}`"), e)),
            };
            let mut ranked: Vec<(i64, String)> = children
                .into_iter()
                .filter_map(|c| lease_seq(&c).map(|s| (s, c)))
                .collect();
            ranked.sort();
            (leases, ranked.into_iter().map(|(_, c)| c).collect(), *limit as usize)
        }
    };
    let mut holders = Vec::new();
    for name in names {
        if holders.len() >= limit {
            break;
        }
        let path = format!("{dir}/{name}");
        match client.get_data(&path).await {
            Ok((data, stat)) => {
                let slot = matches!(target, Target::Slot { .. }).then_some(holders.len() as u32);
                holders.push(holder_of(&dir, &name, &data, &stat, slot));
            }
            // Gone since the listing: the next one holds.
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(ZkError::of(&format!("reading `{path}`"), e)),
        }
    }
    Ok(holders)
}

/// A ZooKeeper session: the lease every claim of a run rides on.
#[derive(Debug)]
pub struct ZkLease {
    client: zk::Client,
    /// The protection prefix of every node this session creates.
    uuid: String,
    opened_at: Instant,
    timeout: Duration,
    /// The ensemble's tick, for [`touch_gap`].
    tick: Duration,
}

impl ZkLease {
    /// The session timeout the server granted.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

impl Lease for ZkLease {
    fn confirmed_at(&self) -> Instant {
        self.opened_at
    }

    /// A `sync`: answered only through the ensemble's leader, after the
    /// server we talk to heard from it, so an answer proves the session
    /// was touched no earlier than its send.
    async fn renew(&self, timeout: Duration) -> Renewal {
        match tokio::time::timeout(timeout, self.client.sync("/")).await {
            Err(_) => Renewal::Failed(format!(
                "no answer to a sync within {}",
                humantime::format_duration(timeout)
            )),
            // The lease lasts the granted timeout less what a follower's
            // late report may take from it.
            Ok(Ok(())) => Renewal::Confirmed {
                ttl: Some(self.timeout.saturating_sub(touch_gap(self.timeout, self.tick))),
            },
            Ok(Err(e)) => match ZkError::of("sync", e) {
                e if e.is_verdict() => Renewal::Gone(e.to_string()),
                e => Renewal::Failed(e.to_string()),
            },
        }
    }

    async fn close(self) {
        client::close(self.client).await;
    }
}

impl Engine for Zookeeper {
    type Lease = ZkLease;
    type Claim = ZkClaim;
    type Error = ZkError;

    /// Opens the session, retrying blips within the patience (for ever for
    /// a daemon); a one-off run's first contact says at once what is wrong.
    async fn open_lease(&self, opening: Opening<'_>) -> Result<ZkLease, ZkError> {
        let until = match (opening.daemon, opening.wait) {
            (true, _) | (false, Wait::Forever) => None,
            (false, Wait::Once) => Some(Instant::now() + ONCE_GRACE),
            (false, Wait::Until(at)) => Some(at),
        };
        let mut pause = Duration::from_millis(100);
        let mut first = opening.first && !opening.daemon;
        loop {
            let opened_at = Instant::now();
            match client::connect(&self.config, self.ttl, first).await {
                Ok(client) => {
                    let timeout = client.session_timeout();
                    if timeout < self.ttl {
                        client::close(client).await;
                        return Err(ZkError::Usage(format!(
                            "ZooKeeper at {} grants sessions of at most {} (its maxSessionTimeout), shorter than --ttl {}; use --ttl {} or less",
                            self.config.hosts(),
                            humantime::format_duration(timeout),
                            humantime::format_duration(self.ttl),
                            humantime::format_duration(Duration::from_secs(timeout.as_secs().max(1))),
                        )));
                    }
                    return Ok(ZkLease {
                        client,
                        uuid: lock::new_uuid(),
                        opened_at,
                        timeout,
                        tick: self.tick,
                    });
                }
                Err(e) if first => return Err(e),
                Err(e @ ZkError::Unreachable { .. }) => {
                    (opening.report)(&format!("engine unreachable, retrying: {e}"));
                    if until.is_some_and(|at| Instant::now() + pause >= at) {
                        return Err(e);
                    }
                    tracing::info!("opening a session: {e}; retrying in {pause:?}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err(e) => return Err(e),
            }
            first = false;
        }
    }

    async fn acquire(
        &self,
        lease: &ZkLease,
        target: &Target,
        value: &str,
        wait: Wait,
    ) -> Result<Acquisition<ZkClaim>, ZkError> {
        match target {
            Target::Lock { .. } => self.acquire_lock(lease, target, value, wait).await,
            Target::Slot { limit, .. } => self.acquire_slot(lease, target, *limit, value, wait).await,
        }
    }
}

/// A lock or slot we hold: our node.
#[derive(Debug)]
pub struct ZkClaim {
    client: zk::Client,
    name: String,
    path: String,
    /// A writer's `__WRIT__` node beside `path` (see
    /// [`lock::enter_writer`]): its loss is the lock's.
    partner: Option<String>,
    czxid: i64,
    slot: Option<u32>,
}

impl ZkClaim {
    /// Our rank when we got the slot, for a semaphore.
    pub fn slot(&self) -> Option<u32> {
        self.slot
    }

    /// Resolves once our node or session is gone.
    async fn lost(&mut self) -> Lost {
        let mut state = self.client.state_watcher();
        loop {
            let s = state.state();
            if s.is_terminated() {
                return Lost::SessionGone(format!("our ZooKeeper session ended ({s})"));
            }
            // A writer's partner first: deleted, and Curator's read-write
            // lock sees no writer, so a rival may hold.
            let partner = match &self.partner {
                Some(partner) => match self.client.check_and_watch_stat(partner).await {
                    Ok((None, _)) => return Lost::Watch(self.partner_gone()),
                    Ok((Some(_), watcher)) => Some(watcher),
                    Err(e) => match ZkError::of("watching our writer's node", e) {
                        e if e.is_verdict() => return Lost::SessionGone(e.to_string()),
                        e if e.is_transient() => {
                            let _ = tokio::time::timeout(Duration::from_secs(1), state.changed()).await;
                            continue;
                        }
                        e => return Lost::Watch(format!("cannot watch our writer's node `{partner}`: {e}")),
                    },
                },
                None => None,
            };
            match self.client.check_and_watch_stat(&self.path).await {
                Ok((None, _)) => return Lost::Watch(self.gone()),
                Ok((Some(stat), _)) if stat.czxid != self.czxid => return Lost::Watch(self.gone()),
                Ok((Some(_), watcher)) => {
                    let event = match partner {
                        Some(partner) => tokio::select! {
                            event = watcher.changed() => event,
                            event = partner.changed() => {
                                if event.event_type == zk::EventType::NodeDeleted {
                                    return Lost::Watch(self.partner_gone());
                                }
                                // A session event: both watchers see it;
                                // look again.
                                continue;
                            }
                        },
                        None => watcher.changed().await,
                    };
                    match event.event_type {
                        zk::EventType::NodeDeleted => return Lost::Watch(self.gone()),
                        // Curator's `Revoker` asks a holder to let go by
                        // writing `__REVOKE__` into its node: the node is
                        // still ours, so the command keeps its grace.
                        zk::EventType::NodeDataChanged => {
                            if let Ok((data, _)) = self.client.get_data(&self.path).await {
                                if data == REVOKE {
                                    return Lost::Released(format!(
                                        "revoked: `__REVOKE__` was written into our node `{}` (Curator's Revoker)",
                                        self.path
                                    ));
                                }
                            }
                        }
                        zk::EventType::Session if event.session_state.is_terminated() => {
                            return Lost::SessionGone(format!(
                                "our ZooKeeper session ended ({})",
                                event.session_state
                            ))
                        }
                        // Disconnected: jeopardy, which the countdown
                        // covers; look again once connected.
                        zk::EventType::Session => {
                            let _ = tokio::time::timeout(Duration::from_secs(1), state.changed()).await;
                        }
                        _ => {}
                    }
                }
                Err(e) => match ZkError::of("watching our node", e) {
                    e if e.is_verdict() => return Lost::SessionGone(e.to_string()),
                    e if e.is_transient() => {
                        let _ = tokio::time::timeout(Duration::from_secs(1), state.changed()).await;
                    }
                    e => return Lost::Watch(format!("cannot watch our node `{}`: {e}", self.path)),
                },
            }
        }
    }

    fn partner_gone(&self) -> String {
        format!(
            "our writer's node `{}` was deleted (by hand, or the session expired)",
            self.partner.as_deref().unwrap_or_default()
        )
    }

    fn gone(&self) -> String {
        format!(
            "our node `{}` was deleted (an operator's release or --replace, or the session expired)",
            self.path
        )
    }
}

impl Claim for ZkClaim {
    type Error = ZkError;

    fn fence(&self) -> u64 {
        u64::try_from(self.czxid).expect("zxids are positive")
    }

    fn env(&self) -> Vec<(OsString, OsString)> {
        vec![
            ("LOCKRUN_KEY".into(), self.name.clone().into()),
            ("LOCKRUN_LOCK_INDEX".into(), self.czxid.to_string().into()),
            ("ZOOKEEPER_LOCK_NODE".into(), self.path.clone().into()),
        ]
    }

    /// Our node's path: no other session can create it.
    fn holder_id(&self) -> Option<String> {
        Some(self.path.clone())
    }

    /// The note, seen by a watch on its node (where polling took up to
    /// [`crate::backend::ASK_POLL`] more): watch first, then read, so a
    /// note left in between is not missed; a failed read is tried again
    /// after the poll's pause.
    fn asked(&self) -> Option<crate::backend::Asked> {
        use crate::backend::{ASK_POLL, ASK_READ};
        let (client, note, path) = (self.client.clone(), note_path(&self.name), self.path.clone());
        Some(Box::pin(async move {
            loop {
                let watched = tokio::time::timeout(ASK_READ, client.check_and_watch_stat(&note)).await;
                let watcher = match watched {
                    Ok(Ok((Some(_), watcher))) => {
                        let read = tokio::time::timeout(ASK_READ, client.get_data(&note)).await;
                        if let Ok(Ok((data, _))) = read {
                            if let Some(asked) = ReplaceNote::decode_for(&data, &path) {
                                return asked;
                            }
                        }
                        // Another claim's note: wait until it changes.
                        watcher
                    }
                    Ok(Ok((None, watcher))) => watcher,
                    _ => {
                        tokio::time::sleep(ASK_POLL).await;
                        continue;
                    }
                };
                // A session event ends the watch as well: look again.
                let event = watcher.changed().await;
                if event.event_type == zk::EventType::Session {
                    tokio::time::sleep(ASK_POLL).await;
                }
            }
        }))
    }

    /// The note, removed once read: our tree is gone, which a replacer on
    /// another host waits for ([`Inspect::note_taken`]).
    async fn replaced_by(&self) -> Option<ReplaceNote> {
        let path = note_path(&self.name);
        let (data, stat) = self.client.get_data(&path).await.ok()?;
        let note = ReplaceNote::decode_for(&data, &self.path)?;
        let _ = self.client.delete(&path, Some(stat.version)).await;
        Some(note)
    }

    fn take_hold_fd(&mut self) -> Option<OwnedFd> {
        None
    }

    async fn record_child(&mut self, _pgid: u32) -> Result<(), ZkError> {
        // A write to our node would look like a revocation to Curator's
        // `Revoker` protocol watchers; the facts stay as entered.
        Ok(())
    }

    fn describe(&self) -> String {
        format!("node `{}`", self.path)
    }

    /// ZooKeeper has no lock-delay: once our node is gone a rival may hold
    /// already, so every loss is a verdict.
    async fn watch(&mut self) -> Lost {
        self.lost().await
    }

    async fn release(self) -> Result<(), ZkError> {
        let client = &self.client;
        riding_out(Wait::Once, "deleting our node", || lock::leave(client, &self.path)).await?;
        match &self.partner {
            Some(partner) => riding_out(Wait::Once, "deleting our writer's node", || lock::leave(client, partner)).await,
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_followers_late_report_is_taken_from_the_lease() {
        let s = Duration::from_secs;
        // The defaults: half of a 2 s tick and a twelfth of 15 s.
        assert_eq!(touch_gap(s(15), DEFAULT_TICK), Duration::from_millis(2250));
        // The suite's ensembles: a 200 ms tick under --ttl 6s.
        assert_eq!(
            touch_gap(s(6), Duration::from_millis(200)),
            Duration::from_millis(600)
        );
    }

    #[test]
    fn keys_in_zookeepers_own_tree_are_refused() {
        assert!(check_key("zookeeper").is_err());
        assert!(check_key("zookeeper/quota").is_err());
        assert!(check_key("zookeepers").is_ok());
    }

    #[test]
    fn lease_nodes() {
        assert_eq!(lease_seq("_c_ab-lease-0000000007"), Some(7));
        assert_eq!(lease_seq("_c_ab-lock-0000000007"), None);
        assert_eq!(lease_seq("short"), None);
    }

    #[test]
    fn holders_of_other_clients_are_named() {
        let stat = zk::Stat {
            czxid: 7,
            mzxid: 7,
            pzxid: 7,
            ctime: 0,
            mtime: 0,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 1,
            data_length: 0,
            num_children: 0,
        };
        let h = holder_of("/k", "_c_1-lock-0000000000", b"10.0.0.1", &stat, None);
        assert_eq!(h.value, None);
        assert!(String::from_utf8_lossy(&h.label()).contains("10.0.0.1"));
        let h = holder_of("/k", "n", &facts("me"), &stat, None);
        assert_eq!(h.value.as_deref(), Some("me"));
    }
}
