//! The PostgreSQL engine (`Engine`): the connection that holds the advisory
//! lock, its claim and its renewal.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_postgres::Client;

use crate::backend::retry::ONCE_GRACE;
use crate::backend::{
    Acquisition, Claim, Engine, Holder, Inspect, Lease, Lost, Opening, Renewal,
    ReplaceNote, Target, Wait,
};

use super::client::Conn;
use super::error::PgError;
use super::{config, tls, waiters};

/// The TTL unless told otherwise: how long after our last round trip the
/// server may give up on a silent connection.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);


/// The longest pause between two tries at a taken lock by a waiter that
/// defers to a higher one (see [`waiters`]; one with nobody to defer to
/// waits in the server's queue). It LISTENs on the lock's channel and
/// tries again the moment a lockrun holder's release NOTIFYs it; the tries
/// between only catch a holder that ended without a word (killed, its
/// backend terminated, a psql session).
const POLL_MAX: Duration = Duration::from_millis(200);

/// The shortest wait in the server's queue worth a round trip: less of
/// `--timeout` left is spent as a deferring waiter's.
const QUEUE_ROUND_MIN: Duration = Duration::from_millis(20);

/// What `leader` and `release` poll at for `--wait`.
pub(super) const CHANGES_POLL: Duration = Duration::from_millis(200);

/// How long clean-up (unlock, close) may take.
pub(super) const CLEANUP_TIMEOUT: Duration = Duration::from_secs(2);

/// The SQL expression of a text's lock id, documented above.
pub(super) const LOCK_ID_SQL: &str = "('x' || substr(md5($1::text), 1, 16))::bit(64)::bigint";

/// Why KEY is refused: lockrun's one rule for keys.
pub fn check_key(key: &str) -> Result<(), String> {
    crate::key::check(key)
}

/// The SQL expression of the 32-bit key under which a semaphore's
/// contenders show their limit.
pub(super) const LIMIT_KEY_SQL: &str = "('x' || substr(md5($1::text || '//limit'), 1, 8))::bit(32)::int";

/// The channel a lock's (or a semaphore's) waiters LISTEN on: named after
/// its (slot 0's) lock id, so a script can wake them too with
/// `select pg_notify('lockrun_' || lpad(to_hex(ID), 16, '0'), '')`.
fn channel_of(id: i64) -> String {
    format!("lockrun_{:016x}", id as u64)
}

/// The channel every connection of ours LISTENs on from its start, named
/// after its server process: `--replace` asks the holder on it (a
/// `pg_notify` whose payload is its note), so the holder stops its command
/// and only then unlocks, rather than being terminated, which would free
/// the lock at once.
pub(super) fn replace_channel(backend_pid: i32) -> String {
    format!("lockrun_replace_{:08x}", backend_pid as u32)
}

/// What a holder asked by `--replace` sends back on its replacer's
/// [`replace_channel`] once its command's tree is gone: no note, so a
/// holder that gets it reads nothing into it.
pub(super) const REPLACE_ANSWER: &str = "stopped";

/// The text whose lock id is slot `slot` of `prefix`.
pub fn slot_text(prefix: &str, slot: u32) -> String {
    format!("{prefix}//{slot}")
}

/// The text whose lock id is KEY's turnstile: taken shared, for one round
/// trip, by each lockrun reader before its shared try, and exclusive by a
/// lockrun writer for as long as it waits, so that readers that come after a waiting writer wait
/// behind it (a poll never enters the server's wait queue, which would
/// order them). Like a slot's, no key holds `//`.
pub fn turnstile_text(key: &str) -> String {
    format!("{key}//rw")
}

/// The engine from `--dsn` and libpq's variables, checked before any
/// connection; `ttl` is the holding job's (`None`: the default).
pub fn engine(dsn: Option<&str>, ttl: Option<Duration>) -> Result<Postgres, crate::error::Failure> {
    use crate::error::Failure;
    let settings = config::resolve(dsn, |name| std::env::var(name).ok()).map_err(Failure::Usage)?;
    Postgres::new(settings, ttl.unwrap_or(DEFAULT_TTL)).map_err(Failure::Usage)
}

/// The PostgreSQL engine: where the server is and the TTL of our sessions.
#[derive(Clone)]
pub struct Postgres {
    pub(super) config: tokio_postgres::Config,
    pub(super) tls: tls::MakeRustls,
    pub(super) ttl: Duration,
    pub(super) password_note: Option<String>,
    /// How its writers rank among the waiters (`elect --priority`, see
    /// [`waiters`]).
    priority: crate::backend::priority::Priority,
    /// The connection a `--replace` sent its note on, kept open while it
    /// waits: the holder checks that its role may end the holder's session
    /// ([`may_replace`]), which it can only while the sender is there.
    pub(super) note_conn: Arc<std::sync::Mutex<Option<Conn>>>,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Postgres")
            .field("config", &self.config)
            .field("ttl", &self.ttl)
            .finish()
    }
}

/// A holder's facts, in a comment on each of its queries.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(super) struct Facts {
    pub(super) key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    slot: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) limit: Option<u32>,
    value: String,
    host: String,
    pid: u32,
    fence: u64,
    since: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    child_pgid: Option<u32>,
}

const FACTS_OPEN: &str = "/* lockrun ";

impl Facts {
    /// `select pg_backend_pid()` with our facts: JSON, with every `*` escaped so that no
    /// value can end the comment.
    fn query(&self) -> String {
        let json = serde_json::to_string(self).expect("facts serialize");
        format!(
            "select pg_backend_pid() {FACTS_OPEN}{} */",
            json.replace('*', "\\u002a")
        )
    }

    pub(super) fn parse(query: &str) -> Option<Facts> {
        let start = query.find(FACTS_OPEN)? + FACTS_OPEN.len();
        let end = query.rfind(" */")?;
        serde_json::from_str(query.get(start..end)?).ok()
    }
}

impl Postgres {
    /// The engine; `ttl` in whole seconds, as TCP keepalive counts them.
    /// The TLS files are read now, so a wrong one is a usage error.
    pub fn new(settings: config::Settings, ttl: Duration) -> Result<Postgres, String> {
        let tls = tls::MakeRustls::new(&settings.tls)?;
        Ok(Postgres {
            config: settings.config,
            tls,
            ttl,
            password_note: settings.password_note,
            priority: crate::backend::priority::Priority::NONE,
            note_conn: Arc::default(),
        })
    }

    /// The same engine, waiting for a lock with `priority`.
    pub fn ranked(self, priority: crate::backend::priority::Priority) -> Postgres {
        Postgres { priority, ..self }
    }

    /// The lock ids of `texts`, computed by the server.
    pub(super) async fn ids(client: &Client, texts: &[String]) -> Result<Vec<i64>, PgError> {
        let mut ids = Vec::with_capacity(texts.len());
        let statement = format!("select {LOCK_ID_SQL}");
        for text in texts {
            let row = client
                .query_one(&statement, &[text])
                .await
                .map_err(|e| PgError::from_client("computing a lock id", e))?;
            ids.push(row.get(0));
        }
        Ok(ids)
    }

    /// The texts whose ids `target` takes, with their slot.
    pub(super) fn texts(target: &Target) -> Result<Vec<(String, Option<u32>)>, PgError> {
        check_key(target.name()).map_err(PgError::Usage)?;
        Ok(match target {
            Target::Lock { key, .. } => vec![(key.clone(), None)],
            Target::Slot { prefix, limit } => {
                if *limit == 0 {
                    return Err(PgError::Usage(
                        "a semaphore needs a limit of at least 1".into(),
                    ));
                }
                (0..*limit)
                    .map(|i| (slot_text(prefix, i), Some(i)))
                    .collect()
            }
        })
    }

    /// A short-lived connection for `leader` and `release`.
    pub(super) async fn looker(&self) -> Result<Conn, PgError> {
        self.connect().await
    }

    /// The holders of `target` now, with their backends' pids.
    pub(super) async fn holders_with_pids(
        &self,
        conn: &Conn,
        target: &Target,
    ) -> Result<Vec<(Holder, i32)>, PgError> {
        let texts = Self::texts(target)?;
        let names: Vec<String> = texts.iter().map(|(t, _)| t.clone()).collect();
        let ids = Self::ids(&conn.client, &names).await?;
        let rows = conn
            .client
            .query(
                "select l.pid, coalesce(a.query, ''), \
                 (l.classid::bigint << 32) | l.objid::bigint, a.backend_start \
                 from pg_locks l left join pg_stat_activity a on a.pid = l.pid \
                 where l.locktype = 'advisory' and l.granted and l.objsubid = 1 \
                 and l.database = (select oid from pg_database where datname = current_database()) \
                 and ((l.classid::bigint << 32) | l.objid::bigint) = any($1)",
                &[&ids],
            )
            .await
            .map_err(|e| PgError::from_client("reading pg_locks", e))?;
        let mut holders = Vec::new();
        for row in rows {
            let pid: i32 = row.get(0);
            let query: String = row.get(1);
            let id: i64 = row.get(2);
            let Some(index) = ids.iter().position(|i| *i == id) else {
                continue;
            };
            let slot = texts[index].1;
            let facts = Facts::parse(&query).filter(|f| f.key == target.name() && f.slot == slot);
            let started: Option<SystemTime> = row.get(3);
            // What `leader --json` shows under `details`: what a psql user
            // needs to find the holder (pg_stat_activity, pg_locks).
            let details = Some(serde_json::json!({
                "backend_pid": pid,
                "lock_id": id,
                "slot": slot,
            }));
            let holder = match facts {
                Some(f) => Holder {
                    value: Some(f.value),
                    host: Some(f.host),
                    pid: Some(f.pid),
                    child_pgid: f.child_pgid,
                    since: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(f.since)),
                    fence: Some(f.fence),
                    slot,
                    entry: Some(format!("backend {pid}")),
                    holder_id: Some(pid.to_string()),
                    label: None,
                    details: details.clone(),
                },
                None => Holder {
                    value: None,
                    host: None,
                    pid: None,
                    child_pgid: None,
                    since: started,
                    fence: None,
                    slot,
                    entry: Some(format!("backend {pid}")),
                    holder_id: Some(pid.to_string()),
                    label: None,
                    details: details.clone(),
                },
            };
            holders.push((holder, pid));
        }
        holders.sort_by_key(|(h, _)| h.slot);
        Ok(holders)
    }

    /// Shows our limit (a shared lock on the prefix's limit key and
    /// LIMIT, kept for the lease's life) and then checks that no
    /// contender shows another.
    async fn agree_on_limit(client: &Client, prefix: &str, limit: u32) -> Result<(), PgError> {
        let limit_sql = i32::try_from(limit).map_err(|_| {
            PgError::Usage(format!(
                "--limit {limit} is too large; give at most {}",
                i32::MAX
            ))
        })?;
        client
            .query_one(
                &format!("select pg_advisory_lock_shared({LIMIT_KEY_SQL}, $2)"),
                &[&prefix, &limit_sql],
            )
            .await
            .map_err(|e| PgError::from_client("showing our semaphore limit", e))?;
        let others = client
            .query(
                &format!(
                    "select l.objid::bigint, l.pid from pg_locks l \
                     where l.locktype = 'advisory' and l.objsubid = 2 and l.granted \
                     and l.database = (select oid from pg_database where datname = current_database()) \
                     and l.classid::bigint = ({LIMIT_KEY_SQL}::bigint & 4294967295) \
                     and l.objid::bigint <> $2::bigint"
                ),
                &[&prefix, &i64::from(limit)],
            )
            .await
            .map_err(|e| PgError::from_client("reading the semaphore's limit", e))?;
        if let Some(row) = others.first() {
            let theirs: i64 = row.get(0);
            let pid: i32 = row.get(1);
            let _ = client
                .query_one(
                    &format!("select pg_advisory_unlock_shared({LIMIT_KEY_SQL}, $2)"),
                    &[&prefix, &limit_sql],
                )
                .await;
            return Err(PgError::LimitMismatch {
                prefix: prefix.to_string(),
                ours: limit,
                theirs: u32::try_from(theirs).unwrap_or(u32::MAX),
                backend: pid,
            });
        }
        Ok(())
    }

    /// Tries `pg_try_advisory_lock` on `conn`; then a writer with nobody to
    /// defer to waits in the server's queue, a round at a time (see
    /// [`waiters`]), and every other waiter tries again on each release's
    /// NOTIFY and at most `POLL_MAX` apart: the id and slot taken, the
    /// channel, and the fence when the ranked try or the queued wait took
    /// it with the lock; or `None` when the patience ran out. Dropping the
    /// future may leave a lock granted on `conn`; closing it frees it (a
    /// queued wait dropped mid-statement shuts the socket).
    async fn wait_on(
        &self,
        conn: &Conn,
        target: &Target,
        texts: &[(String, Option<u32>)],
        value: &str,
        wait: Wait,
    ) -> Result<Option<((i64, Option<u32>), String, Option<u64>)>, PgError> {
        let client = &conn.client;
        let names: Vec<String> = texts.iter().map(|(t, _)| t.clone()).collect();
        let ids = Self::ids(client, &names).await?;
        let ids: Vec<(i64, Option<u32>)> =
            ids.into_iter().zip(texts.iter().map(|(_, s)| *s)).collect();
        if let Target::Slot { prefix, limit } = target {
            Self::agree_on_limit(client, prefix, *limit).await?;
        }
        let shared = matches!(target, Target::Lock { shared: true, .. });
        // The turnstile's id, for a reader at once, for a writer once it
        // has to wait; and whether we (a waiting writer) keep it.
        let mut turn = None;
        if shared {
            turn = Some(Self::ids(client, &[turnstile_text(target.name())]).await?[0]);
        }
        let mut keep_turn = false;
        let channel = channel_of(ids[0].0);
        let queue_round = waiters::queue_round(self.ttl);
        let mut notices = conn.notices.clone();
        let mut listening = false;
        let mut pause = Duration::from_millis(10);
        // A writer that has to wait ranks among the waiters (see
        // [`waiters`]): `until` is when a free lock left to a higher one
        // is ours to try.
        let mut ranked: Option<waiters::Ranked> = None;
        let mut until: Option<Instant> = None;
        // Whether the last ranked try found nobody to defer to: then we
        // wait in the server's queue.
        let mut queue = false;
        let mut fence = None;
        let got = loop {
            // Marked before the try: a release after it wakes us below.
            notices.borrow_and_update();
            let tried = match (turn, ranked.as_mut()) {
                (Some(turn), _) if shared => Self::try_shared(conn, &ids, turn).await?,
                (_, Some(r)) => match r.try_once(client, ids[0].0, conn.backend_pid, turn.filter(|_| keep_turn)).await? {
                    waiters::Tried::Got(xid) => {
                        fence = Some(xid);
                        Some(ids[0])
                    }
                    waiters::Tried::Again => continue,
                    waiters::Tried::Busy { until: at } => {
                        until = at;
                        None
                    }
                    waiters::Tried::Queue => {
                        until = None;
                        queue = true;
                        None
                    }
                    waiters::Tried::Cancelled => {
                        keep_turn = r.repair(client, ids[0].0, &channel, turn.filter(|_| keep_turn)).await?;
                        continue;
                    }
                },
                _ => Self::try_ids(conn, &ids, false).await?,
            };
            if let Some(got) = tried {
                break got;
            }
            if matches!(target, Target::Lock { shared: false, .. })
                && wait != Wait::Once
                && !keep_turn
            {
                let id = match turn {
                    Some(id) => id,
                    None => Self::ids(client, &[turnstile_text(target.name())]).await?[0],
                };
                turn = Some(id);
                let note = ranked.as_ref().map(waiters::Ranked::note);
                keep_turn = Self::take_turn(conn, id, note).await?;
            }
            if ranked.is_none() && matches!(target, Target::Lock { shared: false, .. }) && wait != Wait::Once {
                ranked = Some(waiters::Ranked::start(client, target.name(), value, self.priority).await?);
            }
            if !listening && wait != Wait::Once {
                client
                    .batch_execute(&format!("LISTEN {channel}"))
                    .await
                    .map_err(|e| PgError::from_client("listening for releases", e))?;
                listening = true;
                // A release between our try and the LISTEN told no one.
                continue;
            }
            let out_of_time = match wait {
                Wait::Once => true,
                Wait::Until(at) => Instant::now() + pause >= at,
                Wait::Forever => false,
            };
            if out_of_time {
                if let Wait::Until(at) = wait {
                    // The rest of the time, or a release before then.
                    let _ = tokio::time::timeout_at(at, notices.changed()).await;
                    let tried = match (turn, ranked.as_mut()) {
                        (Some(turn), _) if shared => Self::try_shared(conn, &ids, turn).await?,
                        (_, Some(r)) => match r.try_once(client, ids[0].0, conn.backend_pid, turn.filter(|_| keep_turn)).await? {
                            waiters::Tried::Got(xid) => {
                                fence = Some(xid);
                                Some(ids[0])
                            }
                            // Perhaps after the grant: let go of it, so
                            // that the holder named is not our session.
                            waiters::Tried::Cancelled => {
                                keep_turn = r.repair(client, ids[0].0, &channel, turn.filter(|_| keep_turn)).await?;
                                None
                            }
                            _ => None,
                        },
                        _ => Self::try_ids(conn, &ids, false).await?,
                    };
                    if let Some(got) = tried {
                        break got;
                    }
                }
                if let (true, Some(id)) = (keep_turn, turn) {
                    Self::leave_turn(conn, id).await?;
                }
                if let Some(r) = ranked {
                    r.stop(client).await?;
                }
                return Ok(None);
            }
            if let (true, Some(r)) = (std::mem::take(&mut queue), ranked.as_mut()) {
                let round = match wait {
                    Wait::Until(at) => queue_round.min(at.saturating_duration_since(Instant::now())),
                    _ => queue_round,
                };
                if round >= QUEUE_ROUND_MIN {
                    let kept = turn.filter(|_| keep_turn);
                    // Given up meanwhile (a signal, the lease lost): the
                    // statement would hold the connection's close up until
                    // its round ends; the socket is cut instead (nothing of
                    // ours is held on it yet, and nothing lent).
                    let cut = CutOnDrop(Some(&conn.socket));
                    let queued = r.queue(client, ids[0].0, conn.backend_pid, kept, round).await;
                    cut.disarm();
                    match queued? {
                        waiters::Queued::Got(xid) => {
                            fence = Some(xid);
                            break ids[0];
                        }
                        waiters::Queued::NotYet { maybe_held } => {
                            if maybe_held {
                                keep_turn = r.repair(client, ids[0].0, &channel, kept).await?;
                            }
                            continue;
                        }
                    }
                }
            }
            // The first of a release's word, the pause, and the end of a
            // grace.
            let wake = Instant::now() + pause;
            let wake = until.map_or(wake, |at| at.min(wake));
            let _ = tokio::time::timeout_at(wake, notices.changed()).await;
            pause = (pause * 2).min(POLL_MAX);
        };
        // A ranked try that got the lock let the turnstile go with it, and
        // stays LISTENing: a NOTIFY on our channel while we hold (our own
        // release's) only bumps a counter, and the handover is spared the
        // round trips.
        if fence.is_some() {
            return Ok(Some((got, channel, fence)));
        }
        if let (true, Some(id)) = (keep_turn, turn) {
            Self::leave_turn(conn, id).await?;
        }
        if listening {
            client
                .batch_execute(&format!("UNLISTEN {channel}"))
                .await
                .map_err(|e| PgError::from_client("listening for releases", e))?;
        }
        Ok(Some((got, channel, None)))
    }

    /// Takes the turnstile `turn` exclusive without waiting: whether we
    /// got it (readers passing it, or another writer waiting, have it).
    /// A ranked waiter's `note` goes with it, which `leader` reads.
    async fn take_turn(conn: &Conn, turn: i64, note: Option<&str>) -> Result<bool, PgError> {
        let row = conn
            .client
            .query_one(
                &format!("{} select pg_try_advisory_lock($1)", note.unwrap_or_default()),
                &[&turn],
            )
            .await
            .map_err(|e| PgError::from_client("taking the turnstile", e))?;
        Ok(row.get(0))
    }

    /// Lets the turnstile go.
    async fn leave_turn(conn: &Conn, turn: i64) -> Result<(), PgError> {
        conn.client
            .query_one("select pg_advisory_unlock($1)", &[&turn])
            .await
            .map_err(|e| PgError::from_client("leaving the turnstile", e))?;
        Ok(())
    }

    /// A reader's try: through the turnstile, shared (readers pass it
    /// together; a writer that waits holds it), then the lock shared, then
    /// the turnstile let go.
    async fn try_shared(
        conn: &Conn,
        ids: &[(i64, Option<u32>)],
        turn: i64,
    ) -> Result<Option<(i64, Option<u32>)>, PgError> {
        let row = conn
            .client
            .query_one("select pg_try_advisory_lock_shared($1)", &[&turn])
            .await
            .map_err(|e| PgError::from_client("passing the turnstile", e))?;
        if !row.get::<_, bool>(0) {
            return Ok(None);
        }
        let got = Self::try_ids(conn, ids, true).await;
        conn.client
            .query_one("select pg_advisory_unlock_shared($1)", &[&turn])
            .await
            .map_err(|e| PgError::from_client("leaving the turnstile", e))?;
        got
    }

    /// A new connection for a waiting run whose connection ended with
    /// `why`, tried until `until` as [`Engine::open_lease`] tries.
    async fn reconnect(&self, until: Option<Instant>, why: PgError) -> Result<Conn, PgError> {
        let mut pause = Duration::from_millis(100);
        let mut last = why;
        loop {
            if until.is_some_and(|at| Instant::now() + pause >= at) {
                return Err(last);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
            match self.connect().await {
                Ok(conn) => return Ok(conn),
                Err(e) if e.is_transient() => {
                    tracing::info!("connecting again: {e}; retrying in {pause:?}");
                    last = e;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Tries each id with `pg_try_advisory_lock`, the first granted ours.
    /// The statement takes nothing on a server process other than our
    /// session's, nor a lock that process holds already: advisory locks
    /// are re-entrant, and a pooler that slipped past [`Postgres::connect`]
    /// could have put another client's hold on our server process, where a
    /// plain try would say yes to us too.
    /// `shared` takes it with `pg_try_advisory_lock_shared`.
    async fn try_ids(
        conn: &Conn,
        ids: &[(i64, Option<u32>)],
        shared: bool,
    ) -> Result<Option<(i64, Option<u32>)>, PgError> {
        let take = if shared {
            "pg_try_advisory_lock_shared"
        } else {
            "pg_try_advisory_lock"
        };
        for &(id, slot) in ids {
            let row = conn
                .client
                .query_one(
                    &format!(
                        "select pg_backend_pid(), \
                         case when pg_backend_pid() <> $2 or exists (select from pg_locks \
                           where locktype = 'advisory' and objsubid = 1 and granted \
                           and pid = pg_backend_pid() \
                           and ((classid::bigint << 32) | objid::bigint) = $1 \
                           and database = (select oid from pg_database where datname = current_database())) \
                         then null else {take}($1) end"
                    ),
                    &[&id, &conn.backend_pid],
                )
                .await
                .map_err(|e| PgError::from_client("taking the lock", e))?;
            let pid: i32 = row.get(0);
            if pid != conn.backend_pid {
                return Err(PgError::moved(conn.backend_pid, pid));
            }
            match row.get::<_, Option<bool>>(1) {
                Some(true) => return Ok(Some((id, slot))),
                Some(false) => {}
                None => return Err(PgError::shared_process(pid, id)),
            }
        }
        Ok(None)
    }
}

/// Shuts a waiting connection's socket down if dropped armed: a queued
/// wait abandoned mid-statement.
struct CutOnDrop<'a>(Option<&'a OwnedFd>);

impl CutOnDrop<'_> {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CutOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(fd) = self.0 {
            let _ = nix::sys::socket::shutdown(fd.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        }
    }
}

/// Whether the role of server process `sender` (a `--replace`'s
/// connection, which stays open while it waits) may end our session, as
/// `pg_terminate_backend` would let it: a superuser, a member of our role,
/// or a member of `pg_signal_backend` when we are no superuser. NOTIFY
/// needs no privilege, so without this any role that can connect could stop
/// any holder with a note. Within two seconds; a sender gone, or no answer,
/// is no.
async fn may_replace(client: &Client, sender: i32, facts: &str) -> bool {
    const MAY: &str = "select coalesce((select r.rolsuper \
           or pg_has_role(a.usesysid, session_user, 'MEMBER') \
           or (pg_has_role(a.usesysid, 'pg_signal_backend', 'MEMBER') \
               and not (select rolsuper from pg_roles where rolname = session_user)) \
         from pg_stat_activity a join pg_roles r on r.oid = a.usesysid \
         where a.pid = $1), false)";
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&sender];
    let query = format!("{MAY} {facts}");
    let asked = client.query_one(&query, &params);
    matches!(
        tokio::time::timeout(Duration::from_secs(2), asked).await,
        Ok(Ok(row)) if row.get::<_, bool>(0)
    )
}

/// The facts' comment of `renew_query` (`/* lockrun {...} */`), or
/// nothing before we hold: what every other statement a holder sends
/// carries too, since `pg_stat_activity.query` shows its last statement
/// and `leader`, `list` and `--replace` find a holder by it.
fn facts_of(renew_query: &str) -> String {
    renew_query
        .find(FACTS_OPEN)
        .map_or_else(String::new, |at| renew_query[at..].to_string())
}

/// What a lease and its claim share.
struct Shared {
    /// The lease's connection: replaced while we wait if it ends (a
    /// restart), never once a lock is ours on it.
    conn: Mutex<Arc<Conn>>,
    /// The query each renewal sends: `select pg_backend_pid()`, with our
    /// facts once we hold.
    renew_query: Mutex<String>,
}

impl Shared {
    fn conn(&self) -> Arc<Conn> {
        self.conn.lock().expect("not poisoned").clone()
    }
}

/// A lease: our dedicated connection.
pub struct PgLease {
    shared: Arc<Shared>,
    opened_at: Instant,
}

impl std::fmt::Debug for PgLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgLease(backend {})", self.shared.conn().backend_pid)
    }
}

impl PgLease {
    /// The server process serving our connection.
    pub fn backend_pid(&self) -> i32 {
        self.shared.conn().backend_pid
    }

    /// A setting of our session as the server applies it (`SHOW name`):
    /// how the tests check that the timeouts the budget rests on took.
    pub async fn setting(&self, name: &str) -> Result<String, PgError> {
        let row = self
            .shared
            .conn()
            .client
            .query_one("select current_setting($1)", &[&name])
            .await
            .map_err(|e| PgError::from_client("reading a setting", e))?;
        Ok(row.get(0))
    }
}

impl Lease for PgLease {
    fn confirmed_at(&self) -> Instant {
        self.opened_at
    }

    /// One round trip, which also checks that we still talk to the same
    /// server process: under a transaction-pooling proxy it may change
    /// between statements, and our advisory lock stays behind.
    async fn renew(&self, timeout: Duration) -> Renewal {
        let conn = self.shared.conn();
        if let Some(why) = conn.closed.borrow().clone() {
            return Renewal::Gone(format!("our PostgreSQL connection closed ({why})"));
        }
        let query = self
            .shared
            .renew_query
            .lock()
            .expect("not poisoned")
            .clone();
        match tokio::time::timeout(timeout, conn.client.simple_query(&query)).await {
            Ok(Ok(messages)) => {
                let pid = messages.iter().find_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(row) => {
                        row.get(0).and_then(|p| p.parse::<i32>().ok())
                    }
                    _ => None,
                });
                match pid {
                    Some(pid) if pid != conn.backend_pid => {
                        Renewal::Gone(PgError::moved(conn.backend_pid, pid).to_string())
                    }
                    _ => Renewal::Confirmed { ttl: None },
                }
            }
            Ok(Err(e)) => {
                let e = PgError::from_client("a round trip", e);
                match e {
                    PgError::Closed { .. } => Renewal::Gone(e.to_string()),
                    e => Renewal::Failed(e.to_string()),
                }
            }
            Err(_) => Renewal::Failed(
                PgError::Timeout {
                    what: "a round trip".into(),
                    after: timeout,
                }
                .to_string(),
            ),
        }
    }

    /// Closing the connection frees every lock it held; we wait, briefly,
    /// for the driver to see the end.
    async fn close(self) {
        let mut closed = self.shared.conn().closed.clone();
        drop(self);
        let _ = tokio::time::timeout(CLEANUP_TIMEOUT, closed.wait_for(|c| c.is_some())).await;
    }
}

impl Engine for Postgres {
    type Lease = PgLease;
    type Claim = PgClaim;
    type Error = PgError;

    /// The guard keeps a copy of the connection's socket
    /// ([`PgClaim::take_hold_fd`]).
    const CLAIM_LENDS_FD: bool = true;

    /// Connects, retrying blips within the patience (for ever for a
    /// daemon); a one-off run's first contact says at once what is wrong.
    async fn open_lease(&self, opening: Opening<'_>) -> Result<PgLease, PgError> {
        let until = match (opening.daemon, opening.wait) {
            (true, _) | (false, Wait::Forever) => None,
            (false, Wait::Once) => Some(Instant::now() + ONCE_GRACE),
            (false, Wait::Until(at)) => Some(at),
        };
        let mut pause = Duration::from_millis(100);
        loop {
            let opened_at = Instant::now();
            match self.connect().await {
                Ok(conn) => {
                    return Ok(PgLease {
                        shared: Arc::new(Shared {
                            conn: Mutex::new(Arc::new(conn)),
                            renew_query: Mutex::new("select pg_backend_pid()".into()),
                        }),
                        opened_at,
                    })
                }
                Err(e) if opening.first && !opening.daemon => return Err(e),
                Err(e) if e.is_transient() => {
                    (opening.report)(&format!("engine unreachable, retrying: {e}"));
                    if until.is_some_and(|at| Instant::now() + pause >= at) {
                        return Err(e);
                    }
                    tracing::info!("connecting: {e}; retrying in {pause:?}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits for the lock on the lease's connection (see
    /// [`Postgres::wait_on`]). A connection that ends while we wait (a
    /// restart, a failover) held nothing of ours: we connect again within
    /// the patience, as a first contact's blips are ridden out, and wait
    /// on. Once a lock is ours, its connection's end is its loss.
    async fn acquire(
        &self,
        lease: &PgLease,
        target: &Target,
        value: &str,
        wait: Wait,
    ) -> Result<Acquisition<PgClaim>, PgError> {
        let texts = Self::texts(target)?;
        let mut conn = lease.shared.conn();
        let ((id, slot), channel, taken) = loop {
            let why = match self.wait_on(&conn, target, &texts, value, wait).await {
                Ok(Some(got)) => break got,
                Ok(None) => {
                    let holder = self
                        .holders(target)
                        .await
                        .ok()
                        .and_then(|hs| hs.into_iter().find_map(|h| h.value));
                    return Ok(Acquisition::Busy { holder });
                }
                Err(e) if e.is_transient() => e,
                Err(e) => return Err(e),
            };
            let until = match wait {
                Wait::Once => Some(Instant::now() + ONCE_GRACE),
                Wait::Until(at) => Some(at),
                Wait::Forever => None,
            };
            tracing::warn!("waiting for `{}`: {why}; connecting again", target.name());
            conn = Arc::new(self.reconnect(until, why).await?);
            *lease.shared.conn.lock().expect("not poisoned") = conn.clone();
        };
        let client = &conn.client;
        // The fence: a transaction id assigned after the lock is ours, so
        // after every earlier holder's; a ranked try took it in the
        // statement that got the lock.
        let fence: u64 = match taken {
            Some(fence) => fence,
            None => client
                .query_one("select pg_current_xact_id()::text", &[])
                .await
                .map_err(|e| PgError::from_client("reading the fencing number", e))?
                .get::<_, String>(0)
                .parse()
                .map_err(|_| PgError::Server {
                    what: "reading the fencing number".into(),
                    message: "not a number".into(),
                })?,
        };
        let facts = Facts {
            key: target.name().to_string(),
            slot,
            limit: match target {
                Target::Slot { limit, .. } => Some(*limit),
                Target::Lock { .. } => None,
            },
            value: value.to_string(),
            host: crate::host::hostname(),
            pid: std::process::id(),
            fence,
            since: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            child_pgid: None,
        };
        let query = facts.query();
        // Shown by `leader` once it lands: sent, not waited for, so the
        // command's start does not wait a round trip for it (#46). Every
        // renewal carries the facts too, and a connection that ends is
        // the claim's loss, which its watch sees.
        let (on, facts_query) = (conn.clone(), query.clone());
        tokio::spawn(async move {
            if let Err(e) = on.client.simple_query(&facts_query).await {
                tracing::debug!("recording our facts: {e}");
            }
        });
        *lease.shared.renew_query.lock().expect("not poisoned") = query;
        Ok(Acquisition::Held(PgClaim {
            shared: lease.shared.clone(),
            reader: matches!(target, Target::Lock { shared: true, .. }),
            conn: conn.clone(),
            name: target.name().to_string(),
            id,
            channel,
            facts,
            lent: false,
        }))
    }
}

/// A lock or slot we hold: an advisory lock on our connection.
pub struct PgClaim {
    shared: Arc<Shared>,
    /// Held with `pg_advisory_lock_shared`: unlocked as such.
    reader: bool,
    /// The connection the lock is on.
    conn: Arc<Conn>,
    name: String,
    id: i64,
    /// Where waiters LISTEN for our release.
    channel: String,
    facts: Facts,
    /// Whether the guard got its copy of the socket.
    lent: bool,
}

impl std::fmt::Debug for PgClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PgClaim({} on backend {})",
            self.id, self.conn.backend_pid
        )
    }
}

impl Claim for PgClaim {
    type Error = PgError;

    fn fence(&self) -> u64 {
        self.facts.fence
    }

    fn env(&self) -> Vec<(OsString, OsString)> {
        vec![
            ("LOCKRUN_KEY".into(), self.name.clone().into()),
            (
                "LOCKRUN_LOCK_INDEX".into(),
                self.facts.fence.to_string().into(),
            ),
            ("LOCKRUN_PG_LOCK_ID".into(), self.id.to_string().into()),
        ]
    }

    /// Our connection's backend pid, which pg_locks shows for the holder
    /// of our advisory lock.
    fn holder_id(&self) -> Option<String> {
        Some(self.conn.backend_pid.to_string())
    }

    /// The note a `--replace` sent on our connection's channel, kept by the
    /// driver: a terminated connection keeps what it got before.
    fn asked(&self) -> Option<crate::backend::Asked> {
        let mut asked = self.conn.asked.clone();
        let us = self.conn.backend_pid.to_string();
        let conn = Arc::clone(&self.conn);
        let shared = Arc::clone(&self.shared);
        Some(Box::pin(async move {
            loop {
                let payload = asked.borrow_and_update().clone();
                if let Some((sender, payload)) = payload {
                    if let Some(note) = ReplaceNote::decode_for(payload.as_bytes(), &us) {
                        let facts = facts_of(&shared.renew_query.lock().expect("not poisoned"));
                        if may_replace(&conn.client, sender, &facts).await {
                            return note;
                        }
                        tracing::warn!(
                            "ignored a --replace note from server process {sender}: its role may not end our session (it needs ours, or pg_signal_backend, as pg_terminate_backend does)"
                        );
                    }
                }
                if asked.changed().await.is_err() {
                    // The driver ended: the connection's end is the loss.
                    return std::future::pending().await;
                }
            }
        }))
    }

    /// The note, answered on its sender's own channel, which it LISTENs
    /// on as every connection of ours does: our tree is gone, which a
    /// replacer on another host waits for ([`Inspect::note_taken`]).
    async fn replaced_by(&self) -> Option<ReplaceNote> {
        let (sender, payload) = self.conn.asked.borrow().clone()?;
        let note =
            ReplaceNote::decode_for(payload.as_bytes(), &self.conn.backend_pid.to_string())?;
        let facts = facts_of(&self.shared.renew_query.lock().expect("not poisoned"));
        if !may_replace(&self.conn.client, sender, &facts).await {
            return None;
        }
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
            [&replace_channel(sender), &REPLACE_ANSWER];
        let notify = format!("select pg_notify($1, $2) {facts}");
        let answer = self.conn.client.query_one(&notify, &params);
        let _ = tokio::time::timeout(CLEANUP_TIMEOUT, answer).await;
        Some(note)
    }

    /// A copy of our connection's socket, for the guard to keep until the
    /// command's tree is gone: if lockrun is SIGKILLed, the kernel closes
    /// our copy at once, but the server sees the connection end, and frees
    /// the lock, only when the guard's copy closes too, after the tree.
    /// An orderly end does not wait for it: the unlock and the session's
    /// end (`Terminate`) are messages, not the socket's close.
    fn take_hold_fd(&mut self) -> Option<OwnedFd> {
        if self.lent || self.conn.closed.borrow().is_some() {
            return None;
        }
        match self.conn.socket.try_clone() {
            Ok(copy) => {
                self.lent = true;
                Some(copy)
            }
            Err(e) => {
                tracing::warn!("cannot lend the guard our connection's socket: {e}");
                None
            }
        }
    }

    /// The next round trip carries the child's group too.
    async fn record_child(&mut self, pgid: u32) -> Result<(), PgError> {
        self.facts.child_pgid = Some(pgid);
        *self.shared.renew_query.lock().expect("not poisoned") = self.facts.query();
        Ok(())
    }

    fn describe(&self) -> String {
        format!(
            "advisory lock {} on backend {}",
            self.id, self.conn.backend_pid
        )
    }

    /// The server freed our lock the moment our connection ended: a rival
    /// may hold it already, so every loss is a verdict.
    async fn watch(&mut self) -> Lost {
        let mut closed = self.conn.closed.clone();
        let why = match closed.wait_for(|c| c.is_some()).await {
            Ok(why) => why.clone().unwrap_or_default(),
            Err(_) => "its driver ended".into(),
        };
        Lost::Watch(format!(
            "our PostgreSQL connection closed ({why}), which frees our advisory lock"
        ))
    }

    /// Unlocks and wakes the waiters in one statement: the notification
    /// goes out when it commits, after the unlock. Sent as a simple query,
    /// one round trip: a statement with parameters is parsed in a round
    /// trip of its own first, on the handover's path (`perf`: 0.3-0.4 ms of
    /// a handover). Both values are ours: the lock id a number, the channel
    /// `channel_of` it.
    async fn release(self) -> Result<(), PgError> {
        let unlock = if self.reader {
            "pg_advisory_unlock_shared"
        } else {
            "pg_advisory_unlock"
        };
        let statement = format!(
            "select {unlock}({}), pg_notify('{}', '')",
            self.id, self.channel
        );
        let unlock = self.conn.client.simple_query(&statement);
        match tokio::time::timeout(CLEANUP_TIMEOUT, unlock).await {
            Ok(Ok(_)) => Ok(()),
            // Closed: the server freed it with the connection.
            Ok(Err(e)) if e.is_closed() => Ok(()),
            Ok(Err(e)) => Err(PgError::from_client("releasing the lock", e)),
            Err(_) => Err(PgError::Timeout {
                what: "releasing the lock".into(),
                after: CLEANUP_TIMEOUT,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_survive_a_value_that_would_end_the_comment() {
        let facts = Facts {
            key: "k".into(),
            slot: Some(1),
            limit: Some(2),
            value: "a */ drop table x; /*".into(),
            host: "h".into(),
            pid: 7,
            fence: 9,
            since: 1,
            child_pgid: None,
        };
        let query = facts.query();
        assert_eq!(query.matches("*/").count(), 1, "{query}");
        assert_eq!(Facts::parse(&query), Some(facts));
    }
}
