//! What `leader`, `list`, `release`, `put` and `--replace` read and write
//! on PostgreSQL (`Inspect`).

use crate::backend::{
    Changes, Holder, Inspect, Released,
    ReplaceNote, Target, Which,
};

use super::client::APPLICATION_NAME;
use super::engine::{check_key, replace_channel, slot_text, REPLACE_ANSWER, Facts, Postgres, CHANGES_POLL, LIMIT_KEY_SQL};
use super::error::PgError;
use super::waiters;
use tokio::time::Instant;

impl Inspect for Postgres {
    type Error = PgError;
    type Changes = PgChanges;

    /// A priority lock at `--replace`'s level, as a writer that waits holds
    /// ([`waiters`]), on a connection of its own.
    async fn go_ahead(&self, target: &Target, value: &str) -> Result<Option<crate::backend::Ahead>, PgError> {
        let Target::Lock { key, shared: false } = target else {
            return Ok(None);
        };
        let conn = self.connect().await?;
        Ok(Some(Box::new(waiters::Ahead::put(conn, key, value).await?)))
    }

    /// A semaphore's holders record their limit in their facts; a key no
    /// holder names with a limit is a lock.
    async fn target_of(&self, key: &str) -> Result<Target, PgError> {
        check_key(key).map_err(PgError::Usage)?;
        let conn = self.looker().await?;
        let rows = conn
            .client
            .query(
                "select query from pg_stat_activity where application_name = $1",
                &[&APPLICATION_NAME],
            )
            .await
            .map_err(|e| PgError::from_client("reading pg_stat_activity", e))?;
        let queries: Vec<Option<String>> = rows.iter().map(|r| r.get(0)).collect();
        // The limit its contenders show in pg_locks, visible to every
        // role; else one a holder's facts name.
        let shown: Option<i64> = conn
            .client
            .query_one(
                &format!(
                    "select max(objid::bigint) from pg_locks where locktype = 'advisory' \
                     and objsubid = 2 and granted \
                     and database = (select oid from pg_database where datname = current_database()) \
                     and classid::bigint = ({LIMIT_KEY_SQL}::bigint & 4294967295)"
                ),
                &[&key],
            )
            .await
            .map_err(|e| PgError::from_client("reading pg_locks", e))?
            .get(0);
        let limit = shown.and_then(|l| u32::try_from(l).ok()).or_else(|| {
            queries
                .iter()
                .filter_map(|q| Facts::parse(q.as_deref().unwrap_or_default()))
                .find(|f| f.key == key && f.limit.is_some())
                .and_then(|f| f.limit)
        });
        // Other roles' queries are hidden from us: a semaphore whose
        // holders we cannot read would pass for a free lock. Slot 0 of a
        // held semaphore is held, whoever holds it; then we cannot tell.
        let hidden = queries
            .iter()
            .any(|q| q.as_deref().is_none_or(|q| q == "<insufficient privilege>"));
        if limit.is_none() && hidden {
            let ids = Self::ids(&conn.client, &[slot_text(key, 0)]).await?;
            let row = conn
                .client
                .query_one(
                    "select exists (select from pg_locks where locktype = 'advisory' \
                     and objsubid = 1 and ((classid::bigint << 32) | objid::bigint) = $1)",
                    &[&ids[0]],
                )
                .await
                .map_err(|e| PgError::from_client("reading pg_locks", e))?;
            if row.get::<_, bool>(0) {
                return Err(PgError::Denied {
                    what: format!("reading who holds `{key}`"),
                    message: "a semaphore's holders run as a role whose queries this role cannot see; connect as that role or a member of pg_read_all_stats".into(),
                });
            }
        }
        Ok(match limit {
            Some(limit) => Target::Slot {
                prefix: key.to_string(),
                limit,
            },
            None => {
                // Shared while readers hold it (`leader` says kind
                // "shared"): pg_locks shows their ShareLock to every role.
                let ids = Self::ids(&conn.client, &[key.to_string()]).await?;
                let row = conn
                    .client
                    .query_one(
                        "select exists (select from pg_locks where locktype = 'advisory' \
                         and objsubid = 1 and granted and mode = 'ShareLock' \
                         and database = (select oid from pg_database where datname = current_database()) \
                         and ((classid::bigint << 32) | objid::bigint) = $1)",
                        &[&ids[0]],
                    )
                    .await
                    .map_err(|e| PgError::from_client("reading pg_locks", e))?;
                Target::Lock {
                    key: key.to_string(),
                    shared: row.get(0),
                }
            }
        })
    }

    /// PostgreSQL's release asks nobody: it ends the holder's session
    /// (`pg_terminate_backend`), which frees its advisory lock at once.
    fn asked_line(&self, target: &Target, holder: &Holder) -> String {
        let what = match holder.slot {
            Some(slot) => format!("slot {slot} of `{}`", target.name()),
            None => format!("`{}`", target.name()),
        };
        let backend = holder
            .details
            .as_ref()
            .and_then(|d| d["backend_pid"].as_i64())
            .map(|pid| format!("server process {pid}"))
            .unwrap_or_else(|| "the session".into());
        let mut line = format!("ended {backend}, which held {what} (");
        line.push_str(&String::from_utf8_lossy(&holder.label()));
        if let Some(pid) = holder.pid {
            line.push_str(&format!(", lockrun pid {pid}"));
        }
        line.push_str(
            "): it is free now, a rival may take it, and a lockrun holder kills its command",
        );
        line
    }

    /// lockrun's writers waiting for a lock, from their priority locks in
    /// `pg_locks` (see [`waiters`]); `psql`'s show no priority and are not
    /// listed.
    async fn waiters(&self, target: &Target) -> Result<Option<Vec<crate::backend::Waiter>>, PgError> {
        let Target::Lock { key, .. } = target else {
            return Ok(None);
        };
        check_key(key).map_err(PgError::Usage)?;
        let conn = self.looker().await?;
        Ok(Some(waiters::waiting(&conn.client, key).await?))
    }

    async fn holders(&self, target: &Target) -> Result<Vec<Holder>, PgError> {
        let conn = self.looker().await?;
        Ok(self
            .holders_with_pids(&conn, target)
            .await?
            .into_iter()
            .map(|(h, _)| h)
            .collect())
    }

    /// The keys lockrun holders name in their facts (in their sessions'
    /// query text): an advisory lock keeps only a number, so a key no
    /// lockrun holder names is found by [`Inspect::unnamed`] instead.
    async fn names_under(&self, _prefix: &str) -> Result<Vec<String>, PgError> {
        let conn = self.looker().await?;
        let rows = conn
            .client
            .query(
                "select query from pg_stat_activity where application_name = $1",
                &[&APPLICATION_NAME],
            )
            .await
            .map_err(|e| PgError::from_client("reading pg_stat_activity", e))?;
        Ok(rows
            .iter()
            .filter_map(|r| r.get::<_, Option<String>>(0))
            .filter_map(|q| Facts::parse(&q))
            .map(|f| f.key)
            .filter(|k| check_key(k).is_ok())
            .collect())
    }

    /// Every granted session-level advisory lock in this database whose id
    /// is none of the named keys' ids (a `psql` session's
    /// `pg_advisory_lock(N)`), by its id, with its server process.
    async fn unnamed(&self) -> Result<Vec<(String, Vec<Holder>)>, PgError> {
        let mut known: Vec<i64> = Vec::new();
        let conn = self.looker().await?;
        for name in self.names_under("").await? {
            let target = self.target_of(&name).await?;
            let texts: Vec<String> = Self::texts(&target)?.into_iter().map(|(t, _)| t).collect();
            known.extend(Self::ids(&conn.client, &texts).await?);
        }
        let rows = conn
            .client
            .query(
                "select l.pid, (l.classid::bigint << 32) | l.objid::bigint, a.backend_start, \
                 a.application_name, host(a.client_addr) \
                 from pg_locks l left join pg_stat_activity a on a.pid = l.pid \
                 where l.locktype = 'advisory' and l.granted and l.objsubid = 1 \
                 and l.database = (select oid from pg_database where datname = current_database()) \
                 and not (((l.classid::bigint << 32) | l.objid::bigint) = any($1)) \
                 order by 2, 1",
                &[&known],
            )
            .await
            .map_err(|e| PgError::from_client("reading pg_locks", e))?;
        let mut out: Vec<(String, Vec<Holder>)> = Vec::new();
        for row in rows {
            let pid: i32 = row.get(0);
            let id: i64 = row.get(1);
            let app: Option<String> = row.get(3);
            let holder = Holder {
                since: row.get(2),
                host: row.get(4),
                entry: Some(format!("backend {pid}")),
                holder_id: Some(pid.to_string()),
                label: Some(
                    format!(
                        "server process {pid}{} (not lockrun)",
                        app.filter(|a| !a.is_empty())
                            .map(|a| format!(", application {a}"))
                            .unwrap_or_default()
                    )
                    .into_bytes(),
                ),
                details: Some(serde_json::json!({ "backend_pid": pid, "lock_id": id })),
                ..Holder::default()
            };
            match out.last_mut() {
                Some((last, holders)) if *last == id.to_string() => holders.push(holder),
                _ => out.push((id.to_string(), vec![holder])),
            }
        }
        Ok(out)
    }

    async fn changes(&self, target: &Target) -> Result<PgChanges, PgError> {
        Self::texts(target)?;
        Ok(PgChanges {
            engine: self.clone(),
            target: target.clone(),
            last: None,
        })
    }

    /// Terminates the chosen holders' backends, which frees their locks at
    /// once; a lockrun holder sees its connection end and stops its child.
    /// Needs the right to signal those backends (superuser, the same role,
    /// or pg_signal_backend).
    fn asks_by_note(&self) -> bool {
        true
    }

    /// The note as the payload of a `pg_notify` on the holder's channel,
    /// which its connection LISTENs on from its start.
    async fn leave_note(
        &self,
        _target: &Target,
        holder: &Holder,
        note: &ReplaceNote,
    ) -> Result<bool, PgError> {
        let Some(pid) = holder.holder_id.as_deref().and_then(|p| p.parse::<i32>().ok()) else {
            return Ok(false);
        };
        let conn = self.looker().await?;
        // The holder takes a note only from a role that may end its
        // session (pg_terminate_backend's rule, [`super::engine`]'s
        // may_replace); a note it would ignore is one line here, not a
        // wait for a holder that keeps holding.
        const MAY: &str = "select coalesce((select \
               (select rolsuper from pg_roles where rolname = session_user) \
               or pg_has_role(session_user, a.usesysid, 'MEMBER') \
               or (pg_has_role(session_user, 'pg_signal_backend', 'MEMBER') and not r.rolsuper) \
             from pg_stat_activity a join pg_roles r on r.oid = a.usesysid \
             where a.pid = $1), false)";
        let may = conn
            .client
            .query_one(MAY, &[&pid])
            .await
            .map_err(|e| PgError::from_client("the holder's role", e))?;
        if !may.get::<_, bool>(0) {
            return Err(PgError::Refused(format!(
                "--replace cannot ask the holder (server process {pid}) to let go: its lockrun takes the ask only from a role that may end its session (a superuser, a member of its role, or of pg_signal_backend when it is no superuser), and ours may not; run --replace as such a role, or stop the holder"
            )));
        }
        let payload = String::from_utf8_lossy(&note.encode()).into_owned();
        conn.client
            .query_one(
                "select pg_notify($1, $2)",
                &[&replace_channel(pid), &payload],
            )
            .await
            .map_err(|e| PgError::from_client("the note to the replaced holder", e))?;
        // The holder answers on this connection once its tree is gone,
        // which may take longer than our own TTL (its --kill-timeout):
        // the server must not end it as idle meanwhile. A failure here
        // costs only the answer's words ("its lease lapsed").
        if let Err(e) = conn.keep_when_idle("keeping the note's connection").await {
            tracing::debug!("the note's connection may end as idle: {e}");
        }
        *self.note_conn.lock().expect("not poisoned") = Some(conn);
        Ok(true)
    }

    /// A silent holder's session is ended by the server (its
    /// idle_session_timeout, TCP keepalive and tcp_user_timeout, set to
    /// its TTL), which frees its lock only the TTL after the last data the
    /// server received, within which its lockrun stops its command, as for
    /// any rival.
    fn ends_silent_claims(&self) -> bool {
        true
    }

    /// The holder's answer ([`REPLACE_ANSWER`]) from its own server
    /// process, on the channel of the connection our note went out on.
    async fn note_taken(&self, _target: &Target, holder: &Holder, until: Instant) -> bool {
        let pid = holder.holder_id.as_deref().and_then(|p| p.parse::<i32>().ok());
        let asked = self
            .note_conn
            .lock()
            .expect("not poisoned")
            .as_ref()
            .map(|c| c.asked.clone());
        let (Some(pid), Some(mut asked)) = (pid, asked) else {
            tokio::time::sleep_until(until).await;
            return false;
        };
        let answered = async move {
            asked
                .wait_for(|a| {
                    a.as_ref()
                        .is_some_and(|(from, payload)| *from == pid && payload == REPLACE_ANSWER)
                })
                .await
                .is_ok()
        };
        match tokio::time::timeout_at(until, answered).await {
            Ok(true) => true,
            _ => {
                tokio::time::sleep_until(until).await;
                false
            }
        }
    }

    async fn clear_note(&self, _target: &Target, _holder: &Holder) {
        self.note_conn.lock().expect("not poisoned").take();
    }

    async fn force_release(
        &self,
        target: &Target,
        which: &Which,
    ) -> Result<Released<PgError>, PgError> {
        let conn = self.looker().await?;
        let holders = self.holders_with_pids(&conn, target).await?;
        let mut asked = Vec::new();
        let mut refused = Vec::new();
        for (holder, pid) in holders {
            if !which.picks(&holder) {
                continue;
            }
            let done = conn
                .client
                .query_one("select pg_terminate_backend($1)", &[&pid])
                .await;
            match done {
                Ok(_) => asked.push(holder),
                Err(e) => {
                    let e = PgError::from_client(&format!("terminating backend {pid}"), e);
                    refused.push(match e {
                        PgError::Denied { what, message } => PgError::Denied {
                            what,
                            message: format!(
                                "{message}; a superuser, the holder's own role or a member of pg_signal_backend can release it"
                            ),
                        },
                        e => e,
                    });
                }
            }
        }
        Ok(Released {
            asked,
            refused,
            nothing: None,
        })
    }
}

/// The holders of a target each time they change, polled: PostgreSQL
/// tells no one when an advisory lock changes hands.
pub struct PgChanges {
    engine: Postgres,
    target: Target,
    last: Option<Vec<Holder>>,
}

impl Changes for PgChanges {
    type Error = PgError;

    async fn next(&mut self) -> Result<Vec<Holder>, PgError> {
        loop {
            if self.last.is_some() {
                tokio::time::sleep(CHANGES_POLL).await;
            }
            let now = self.engine.holders(&self.target).await?;
            if self.last.as_ref() != Some(&now) {
                self.last = Some(now.clone());
                return Ok(now);
            }
        }
    }
}
