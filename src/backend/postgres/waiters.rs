//! lockrun's writers waiting for a lock, made visible for `--priority`
//! (see [`crate::backend::priority`]). A writer that has to wait holds,
//! for as long as it waits, a *shared* advisory lock on the two 32-bit keys
//! (first 8 hex digits of `md5('KEY//wait')`, its priority): `pg_locks`
//! shows it to every role, and the server drops it with the connection, so
//! a waiter killed while it waits leaves nothing. Its try statement carries
//! a comment with its value, host and pid, which `pg_stat_activity.query`
//! shows to `leader`.
//!
//! The ranked try is one statement that reads the other waiters'
//! priorities and whether the lock is held, tries
//! (`pg_try_advisory_lock`) only when no higher one waits (or the grace
//! for a free lock ran out), and lets its own priority lock go in the same
//! statement when the lock is granted. A waiter that defers tries again on
//! each release's NOTIFY and at most [`super::POLL_MAX`] apart.
//!
//! A waiter with nobody to defer to enters the server's own wait queue, as
//! `psql`'s `pg_advisory_lock` does ([`Ranked::queue`]): the server grants
//! it the lock at the release and the statement that waited goes on to
//! take the fence and let the priority lock go, so the handover costs no
//! NOTIFY and no round trip after the grant, and of a herd only the
//! granted waiter wakes. Each such wait is bounded by `lock_timeout` to
//! [`queue_round`] (the lease's renewals on the connection queue behind
//! it), after which the waiter ranks itself again. A waiter that shows a
//! higher priority cancels (`pg_cancel_backend`) the queued waits of
//! lockrun's lower waiters for the same lock that its role may cancel, so
//! that they rank again and defer; a lower waiter never enters the queue
//! past a higher one it sees.
//!
//! `psql`'s waiters hold no priority lock: they count as 0, defer to
//! nobody, and are never cancelled. Two keys whose 32-bit wait keys
//! collide rank each other's waiters, which costs an order, never safety.

use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_postgres::{Client, Statement};

use super::PgError;
use crate::backend::priority::{Deferral, Priority, Verdict};
use crate::backend::Waiter;

/// The SQL expression of the 32-bit key under which KEY's waiters show
/// their priority.
pub const WAIT_KEY_SQL: &str = "('x' || substr(md5($1::text || '//wait'), 1, 8))::bit(32)::int";

/// The rows of `pg_locks` that are other sessions' priority locks on wait
/// key `$3`.
const OTHERS_SQL: &str = "from pg_locks l where l.locktype = 'advisory' and l.objsubid = 2 and l.granted \
     and l.classid::bigint = ($3::int::bigint & 4294967295) and l.pid <> pg_backend_pid() \
     and l.database = (select oid from pg_database where datname = current_database())";

/// Cancels the queued waits (not granted, in the server's queue for lock
/// `$1`) of the sessions that show a priority lower than `$4` on wait key
/// `$3`, where our role may cancel them as `pg_cancel_backend` checks it
/// (we have the privileges of their role, or of `pg_signal_backend`, by
/// inheritance; a superuser's only when we are one: `USAGE` in
/// `pg_has_role`, not mere membership, which a NOINHERIT role has): their
/// count. Any other would fail the whole statement.
const CANCEL_LOWER_SQL: &str = "cardinality(array(select pg_cancel_backend(b.pid) from pg_locks b \
     join pg_stat_activity a on a.pid = b.pid \
     where b.locktype = 'advisory' and b.objsubid = 1 and not b.granted and b.pid <> pg_backend_pid() \
     and ((b.classid::bigint << 32) | b.objid::bigint) = $1::bigint \
     and b.database = (select oid from pg_database where datname = current_database()) \
     and b.pid in (select l.pid from pg_locks l where l.locktype = 'advisory' and l.objsubid = 2 and l.granted \
       and l.classid::bigint = ($3::int::bigint & 4294967295) and l.objid::bigint < $4::int) \
     and (pg_has_role(a.usesysid, 'USAGE') or pg_has_role('pg_signal_backend', 'USAGE')) \
     and (not coalesce((select rolsuper from pg_roles where oid = a.usesysid), true) \
       or (select rolsuper from pg_roles where rolname = current_user))))";

/// Whether a try or a wait must not go on, on server process `$2` for lock
/// `$1`: the statement ran elsewhere (a pooler moved us), or our server
/// process holds the lock already, which this run never took (advisory
/// locks are re-entrant: another client sharing it would be told yes).
const NOT_OURS_SQL: &str = "pg_backend_pid() <> $2::int or exists (select from pg_locks \
     where locktype = 'advisory' and objsubid = 1 and granted and pid = pg_backend_pid() \
     and ((classid::bigint << 32) | objid::bigint) = $1::bigint \
     and database = (select oid from pg_database where datname = current_database()))";

const WAIT_OPEN: &str = "/* lockrun-wait ";

/// How long one wait in the server's queue may last: a sixteenth of the
/// TTL, between 50 and 500 ms. The lease's renewals on the connection are
/// answered only after it, and must be within their attempt's timeout (a
/// quarter of the stop window); a higher waiter that could not cancel us
/// waits no longer for us to rank again.
pub fn queue_round(ttl: std::time::Duration) -> std::time::Duration {
    (ttl / 16).clamp(std::time::Duration::from_millis(50), std::time::Duration::from_millis(500))
}

/// What a waiter's statements say of it.
#[derive(Debug, Serialize, Deserialize)]
struct Shown {
    key: String,
    value: String,
    host: String,
    pid: u32,
}

/// The comment our statements start with while we wait (first, since
/// `pg_stat_activity` shows only a query's first 1024 bytes by default):
/// JSON, every `*` escaped so that no value can end it.
fn comment(key: &str, value: &str) -> String {
    let shown = Shown {
        key: key.to_owned(),
        value: value.to_owned(),
        host: crate::host::hostname(),
        pid: std::process::id(),
    };
    let json = serde_json::to_string(&shown).expect("facts serialize");
    format!("{WAIT_OPEN}{} */", json.replace('*', "\\u002a"))
}

fn parse(query: &str) -> Option<Shown> {
    let start = query.find(WAIT_OPEN)? + WAIT_OPEN.len();
    let end = start + query.get(start..)?.find(" */")?;
    serde_json::from_str(query.get(start..end)?).ok()
}

/// What one ranked try found.
pub enum Tried {
    /// The lock is ours, with its fence (`pg_current_xact_id()`, taken in
    /// the same statement after the grant), and our priority lock and the
    /// turnstile we kept let go.
    Got(u64),
    /// Not ours: held by another, or left to a higher waiter (until
    /// `until`, when set, since it is free).
    Busy { until: Option<Instant> },
    /// A higher waiter's grace ran out just now: try again at once.
    Again,
    /// Held by another (or queued for), and nobody to defer to: wait in
    /// the server's queue ([`Ranked::queue`]).
    Queue,
    /// The statement was cancelled, perhaps after it got the lock: for
    /// [`Ranked::repair`], then rank again.
    Cancelled,
}

/// What one wait in the server's queue came to.
pub enum Queued {
    /// The lock is ours, as [`Tried::Got`].
    Got(u64),
    /// Not ours: a higher waiter appeared, or (`maybe_held`) the round
    /// ran out or the wait was cancelled, which may have come just after
    /// the grant: the lock may then be held on our session, for the caller
    /// to let go. Rank again.
    NotYet { maybe_held: bool },
}

/// What a ranked try's or a queued wait's row says of lock `id`, asked on
/// our server process `backend_pid`: the statement ran on process `pid`,
/// and `result` is the fence when the lock was taken, `''` when it was
/// not, null when the process already held it (see `NOT_OURS_SQL`).
fn taken(pid: i32, backend_pid: i32, id: i64, result: Option<String>) -> Result<Option<u64>, PgError> {
    if pid != backend_pid {
        return Err(PgError::moved(backend_pid, pid));
    }
    match result.as_deref() {
        Some("") => Ok(None),
        Some(xid) => xid.parse().map(Some).map_err(|_| PgError::Server {
            what: "reading the fencing number".into(),
            message: "not a number".into(),
        }),
        None => Err(PgError::shared_process(pid, id)),
    }
}

/// A writer waiting ranked, on one connection.
pub struct Ranked {
    note: String,
    statement: Statement,
    wait_key: i32,
    level: i32,
    deferral: Deferral,
    /// Whether the last verdict let us try past a higher waiter.
    force: bool,
    /// The wait in the server's queue ([`Ranked::queue`]).
    queue: Statement,
}

impl Ranked {
    /// Shows our priority on `client` (the shared lock on the wait key and
    /// our level) and prepares the ranked try for `key`'s lock.
    pub async fn start(client: &Client, key: &str, value: &str, priority: Priority) -> Result<Ranked, PgError> {
        let note = comment(key, value);
        let level = i32::try_from(priority.level).expect("priorities fit");
        let wait_key: i32 = client
            .query_one(&format!("select {WAIT_KEY_SQL}"), &[&key])
            .await
            .map_err(|e| PgError::from_client("computing the wait key", e))?
            .get(0);
        client
            .query_one(
                &format!("{note} select pg_try_advisory_lock_shared($1::int, $2::int)"),
                &[&wait_key, &level],
            )
            .await
            .map_err(|e| PgError::from_client("showing our priority", e))?;
        // A higher waiter sends lower ones out of the server's queue on
        // every try; level 0 has nobody lower.
        let cancel = match level {
            0 => "0",
            _ => CANCEL_LOWER_SQL,
        };
        // The cancel comes first in the row, before the try: a statement
        // that fails in it has taken nothing.
        let ranked_sql = format!(
                "{note} select pg_backend_pid(), {cancel}, \
                 array(select l.objid::bigint {OTHERS_SQL}), \
                 exists (select from pg_locks where locktype = 'advisory' and objsubid = 1 and granted \
                   and ((classid::bigint << 32) | objid::bigint) = $1::bigint \
                   and database = (select oid from pg_database where datname = current_database())), \
                 case when {NOT_OURS_SQL} then null \
                   when not $5::bool and exists (select {OTHERS_SQL} and l.objid::bigint > $4::int) then '' \
                   when not pg_try_advisory_lock($1::bigint) then '' \
                   when pg_advisory_unlock_shared($3::int, $4::int) is not null \
                     and ($7::bool is false or pg_advisory_unlock($6::bigint) is not null) \
                   then pg_current_xact_id()::text end"
            );
        // The queued wait: the same checks as the try, then the server's
        // own wait under a lock_timeout of its own ($5, ms, local to the
        // statement), and after the grant, in nested subqueries that run
        // in that order, the priority lock and the turnstile let go and the
        // fence taken.
        let queue_sql = format!(
            "{note} select pg_backend_pid(), \
             case when {NOT_OURS_SQL} then null \
               when exists (select {OTHERS_SQL} and l.objid::bigint > $4::int) then '' \
               else (select pg_current_xact_id()::text from \
                 (select pg_advisory_unlock_shared($3::int, $4::int), \
                    ($7::bool is false or pg_advisory_unlock($6::bigint)) from \
                   (select pg_advisory_lock($1::bigint) from \
                     (select set_config('lock_timeout', $5::text, true)) t offset 0) g offset 0) d) end"
        );
        // Both prepared in one round trip.
        let (statement, queue) = tokio::try_join!(client.prepare(&ranked_sql), client.prepare(&queue_sql))
            .map_err(|e| PgError::from_client("preparing the ranked try", e))?;
        Ok(Ranked {
            note,
            statement,
            queue,
            wait_key,
            level,
            deferral: priority.deferral(),
            force: false,
        })
    }

    /// Waits in the server's queue for lock `id` on our server process
    /// `backend_pid`, for `round` at most; `turn`, the turnstile when we
    /// keep it, is let go with a grant, as by the ranked try.
    pub async fn queue(
        &mut self,
        client: &Client,
        id: i64,
        backend_pid: i32,
        turn: Option<i64>,
        round: std::time::Duration,
    ) -> Result<Queued, PgError> {
        let timeout = round.as_millis().max(1).to_string();
        let row = client
            .query_one(
                &self.queue,
                &[
                    &id,
                    &backend_pid,
                    &self.wait_key,
                    &self.level,
                    &timeout,
                    &turn.unwrap_or(0),
                    &turn.is_some(),
                ],
            )
            .await;
        let row = match row {
            Ok(row) => row,
            // The round ran out (lock_timeout), or a higher waiter (or an
            // operator, or a statement_timeout) cancelled the wait. Either
            // may come just after the grant (PostgreSQL reports a timeout
            // that fired as the lock was granted), which the caller checks.
            // A deadlock a client of psql's made ends our wait, not us.
            Err(e)
                if e.code().is_some_and(|c| {
                    use tokio_postgres::error::SqlState;
                    [SqlState::LOCK_NOT_AVAILABLE, SqlState::QUERY_CANCELED, SqlState::T_R_DEADLOCK_DETECTED]
                        .contains(c)
                }) =>
            {
                tracing::debug!("queued for the lock: {e}; ranking again");
                return Ok(Queued::NotYet { maybe_held: true });
            }
            Err(e) => return Err(PgError::from_client("waiting for the lock", e)),
        };
        Ok(match taken(row.get(0), backend_pid, id, row.get(1))? {
            Some(fence) => Queued::Got(fence),
            None => Queued::NotYet { maybe_held: false },
        })
    }

    /// The comment that shows us, for our other statements while we wait.
    pub fn note(&self) -> &str {
        &self.note
    }

    /// One ranked try at lock `id` on our server process `backend_pid`;
    /// `turn`, the turnstile when we keep it, is let go with a grant.
    pub async fn try_once(
        &mut self,
        client: &Client,
        id: i64,
        backend_pid: i32,
        turn: Option<i64>,
    ) -> Result<Tried, PgError> {
        let row = client
            .query_one(
                &self.statement,
                &[
                    &id,
                    &backend_pid,
                    &self.wait_key,
                    &self.level,
                    &self.force,
                    &turn.unwrap_or(0),
                    &turn.is_some(),
                ],
            )
            .await;
        let row = match row {
            Ok(row) => row,
            // Cancelled (a higher waiter's cancel meant for our queued wait
            // that came late, an operator): the try may have got the lock
            // and let our pairs go before the cancel ended the statement.
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::QUERY_CANCELED) => {
                tracing::debug!("the ranked try was cancelled: {e}; ranking again");
                return Ok(Tried::Cancelled);
            }
            Err(e) => return Err(PgError::from_client("taking the lock", e)),
        };
        if let Some(fence) = taken(row.get(0), backend_pid, id, row.get(4))? {
            return Ok(Tried::Got(fence));
        }
        let others: Vec<i64> = row.get(2);
        let held: bool = row.get(3);
        let levels = others.into_iter().map(|l| u32::try_from(l).unwrap_or(0));
        let verdict = self.deferral.decide(Instant::now(), levels, !held);
        tracing::debug!(?verdict, held, "ranked among the waiters");
        Ok(match verdict {
            // Deferred by the statement, whose verdict was the last one:
            // the grace ran out since.
            Verdict::Go if !self.force && !held => {
                self.force = true;
                Tried::Again
            }
            Verdict::Go => Tried::Queue,
            Verdict::Defer { until } => {
                self.force = false;
                Tried::Busy { until }
            }
        })
    }

    /// After a wait or a try cut short, perhaps just after the grant and
    /// the release of our pairs in the same statement: lets lock `id` go
    /// if our session holds it (its waiters told on `channel`, as by a
    /// release: nobody runs under it), and shows our priority again, and
    /// takes the turnstile `turn` (kept) again, where the statement let
    /// them go. Whether we hold the turnstile after it. One round trip;
    /// every value is ours.
    pub async fn repair(
        &self,
        client: &Client,
        id: i64,
        channel: &str,
        turn: Option<i64>,
    ) -> Result<bool, PgError> {
        let db = "database = (select oid from pg_database where datname = current_database())";
        let (wait_key, level) = (self.wait_key, self.level);
        let mut sql = format!(
            "select pg_advisory_unlock({id}), pg_notify('{channel}', '') from pg_locks \
             where locktype = 'advisory' and objsubid = 1 and granted and pid = pg_backend_pid() \
             and ((classid::bigint << 32) | objid::bigint) = {id} and {db}; \
             select pg_try_advisory_lock_shared({wait_key}, {level}) where not exists (select from pg_locks \
             where locktype = 'advisory' and objsubid = 2 and granted and pid = pg_backend_pid() \
             and classid::bigint = ({wait_key}::bigint & 4294967295) \
             and objid::bigint = ({level}::bigint & 4294967295) and {db})"
        );
        if let Some(turn) = turn {
            sql.push_str(&format!(
                "; select case when exists (select from pg_locks where locktype = 'advisory' and objsubid = 1 \
                 and granted and pid = pg_backend_pid() \
                 and ((classid::bigint << 32) | objid::bigint) = {turn} and {db}) \
                 then true else pg_try_advisory_lock({turn}) end"
            ));
        }
        // Each statement acts only as what we hold says, so it is tried
        // again when a late cancel (a higher waiter's, meant for our wait
        // that ended) lands on it.
        let mut tries = 0;
        let messages = loop {
            match client.simple_query(&sql).await {
                Ok(messages) => break messages,
                Err(e)
                    if tries < 3
                        && e.code() == Some(&tokio_postgres::error::SqlState::QUERY_CANCELED) =>
                {
                    tries += 1;
                }
                Err(e) => {
                    return Err(PgError::from_client("letting go of a lock granted to a cut wait", e))
                }
            }
        };
        let last = messages.iter().rev().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(|v| v == "t"),
            _ => None,
        });
        Ok(turn.is_some() && last == Some(true))
    }

    /// Lets our priority lock go (we gave up waiting).
    pub async fn stop(self, client: &Client) -> Result<(), PgError> {
        client
            .query_one("select pg_advisory_unlock_shared($1::int, $2::int)", &[&self.wait_key, &self.level])
            .await
            .map_err(|e| PgError::from_client("withdrawing our priority", e))?;
        Ok(())
    }
}

/// `--replace`'s place ahead of the waiters: the priority lock at
/// [`crate::backend::priority::REPLACE`], shared, on a connection of its
/// own, whose last statement's comment shows our value; gone with the
/// connection (the replacer dies, or the connection idles out once the
/// replacer holds).
pub struct Ahead {
    conn: super::client::Conn,
    wait_key: i32,
}

impl Ahead {
    pub async fn put(conn: super::client::Conn, key: &str, value: &str) -> Result<Ahead, PgError> {
        let note = comment(key, value);
        let level = i32::try_from(crate::backend::priority::REPLACE).expect("priorities fit");
        // The record stands while the replacement waits, which may take
        // longer than our TTL (the holder's --kill-timeout, a far holder's
        // lease): not ended as idle meanwhile. A replacer that stops keeps
        // it, and the waiters wait out --priority-grace, as for a stuck
        // waiter; one that dies closes it. Sent first: the last statement is
        // what shows the record.
        conn.keep_when_idle("keeping our place ahead of the waiters")
            .await?;
        let row = conn
            .client
            .query_one(&format!("select {WAIT_KEY_SQL}, {}", super::engine::LOCK_ID_SQL), &[&key])
            .await
            .map_err(|e| PgError::from_client("computing the wait key", e))?;
        let (wait_key, id): (i32, i64) = (row.get(0), row.get(1));
        conn.client
            .query_one(
                &format!("{note} select pg_try_advisory_lock_shared($1::int, $2::int)"),
                &[&wait_key, &level],
            )
            .await
            .map_err(|e| PgError::from_client("showing our place ahead of the waiters", e))?;
        // Those already in the server's queue rank again, and defer to
        // us, before the holder is asked ($2 is unused).
        conn.client
            .query_one(
                &format!("select $2::int, {CANCEL_LOWER_SQL}"),
                &[&id, &0i32, &wait_key, &level],
            )
            .await
            .map_err(|e| PgError::from_client("sending the queued waiters back", e))?;
        Ok(Ahead { conn, wait_key })
    }
}

impl crate::backend::GoneAhead for Ahead {
    fn remove(self: Box<Self>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(async move {
            let Ahead { conn, wait_key } = *self;
            let level = i32::try_from(crate::backend::priority::REPLACE).expect("priorities fit");
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&wait_key, &level];
            let unlock = conn
                .client
                .query_one("select pg_advisory_unlock_shared($1::int, $2::int)", &params);
            if tokio::time::timeout(super::engine::CLEANUP_TIMEOUT, unlock).await.is_err() {
                tracing::warn!("could not withdraw --replace's place ahead of the waiters in time; it goes with the connection");
            }
            let mut closed = conn.closed.clone();
            drop(conn);
            let _ = tokio::time::timeout(super::engine::CLEANUP_TIMEOUT, closed.wait_for(|c| c.is_some())).await;
        })
    }
}

/// The live lockrun waiters for `key`, highest priority first.
pub async fn waiting(client: &Client, key: &str) -> Result<Vec<Waiter>, PgError> {
    let rows = client
        .query(
            &format!(
                "select l.objid::bigint, coalesce(a.query, '') from pg_locks l \
                 left join pg_stat_activity a on a.pid = l.pid \
                 where l.locktype = 'advisory' and l.objsubid = 2 and l.granted \
                 and l.classid::bigint = ({WAIT_KEY_SQL}::bigint & 4294967295) \
                 and l.database = (select oid from pg_database where datname = current_database())"
            ),
            &[&key],
        )
        .await
        .map_err(|e| PgError::from_client("reading pg_locks", e))?;
    let mut seen = Vec::new();
    for row in rows {
        let level: i64 = row.get(0);
        let query: String = row.get(1);
        let shown = parse(&query);
        // Another key's waiter whose wait key is the same.
        if shown.as_ref().is_some_and(|s| s.key != key) {
            continue;
        }
        seen.push(Waiter {
            priority: u32::try_from(level).unwrap_or(0),
            value: shown.as_ref().map(|s| s.value.clone()),
            pid: shown.map(|s| s.pid),
        });
    }
    seen.sort_by_key(|w| std::cmp::Reverse(w.priority));
    Ok(seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_cannot_end_the_comment() {
        let note = comment("k", "a */ select 1; /*");
        assert_eq!(note.matches("*/").count(), 1, "{note}");
        let shown = parse(&format!("{note} select 1 /* x */")).unwrap();
        assert_eq!(shown.value, "a */ select 1; /*");
    }
}
