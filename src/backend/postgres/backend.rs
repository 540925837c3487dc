//! The PostgreSQL backend's registration: its flag, its part of the man
//! page, and how a job gets its engine.

use super::args::PostgresArgs;
use super::Postgres;
use crate::backend::{
    Backend, BackendName, HoldRequest, HoldRules, Look, Peer, Prose, Registration,
};
use crate::backend::{Env, PromiseText, Topic};
use crate::backend::rules::LeasePlan;
use crate::error::Failure;

const REGISTRATION: Registration = Registration {
    peer: Peer {
        tool: "the documented `pg_advisory_lock` id",
        page: "psql(1) (`pg_advisory_lock`, with the id lockrun documents)",
    },
    name: BackendName::Postgres,
    flags: crate::backend::registry::flags_of::<PostgresBackend>,
    lease: true,
    empty_is_an_error: &[],
    empty_is_unset: &[],
    environment: ENVIRONMENT,
    child_environment: &[Prose::Item(
        "postgres",
        "`LOCKRUN_PG_LOCK_ID`, the advisory lock id held (above). `LOCKRUN_LOCK_INDEX` is \
         `pg_current_xact_id()` taken right after acquisition: a transaction id, \
         cluster-wide, never reused and assigned in order.",
    )],
    safety: &[Prose::Item(
        "postgres",
        "The server frees the advisory lock when the holding connection ends: at once \
         when lockrun dies or its backend is terminated (`lockrun release`, \
         `pg_terminate_backend`, a restart, a failover), so COMMAND gets SIGKILL at once; \
         on a partition when the server's TCP keepalive or tcp_user_timeout gives up, \
         or its idle_session_timeout ends a session that sent nothing (behind a relay \
         that keeps TCP open), which lockrun sets to `--ttl` after the last data the \
         server received (PostgreSQL 14 or later). The \
         budget is etcd's: a rival no earlier than the TTL after the last confirmed round \
         trip, no lock-delay.",
    )],
    examples: &[(
        "elect",
        "lockrun --backend postgres elect jobs/migrate -- ./job  # the server psql reaches (PGHOST...)",
    )],
    notes: NOTES,
    habits: None,
};

/// Its words in the shared help (see [`Topic`]).
const NOTES: &[(Topic, &str)] = &[
    (Topic::Where, "in PostgreSQL (--backend postgres)"),
    (
        Topic::Excludes,
        "`pg_advisory_lock` on the id lockrun documents with --backend postgres",
    ),
    (
        Topic::List,
        "On PostgreSQL an advisory lock whose key no lockrun holder names (a `psql` session's) \
         is listed by its 64-bit id, and only without PREFIX, since its key cannot be told.",
    ),
    (
        Topic::ListJson,
        "A PostgreSQL lock listed by its id has \"key\": null and its id under \"id\".",
    ),
    (
        Topic::Release,
        "On PostgreSQL its child gets SIGKILL at once: the release terminates the holder's backend.",
    ),
    (Topic::Holder, "a PostgreSQL holder's backend pid"),
    (
        Topic::Ttl,
        "On PostgreSQL it is the session deadline, in whole seconds.",
    ),
    (
        Topic::Replace,
        "On PostgreSQL the note is a pg_notify to the holder's connection, taken only from a \
         role that may end its session (pg_terminate_backend's rule). A holder on another \
         host is never released: it is waited for until it answers or the server ends its \
         session (idle_session_timeout, which lockrun sets to the holder's TTL), within which \
         its own stop window ends its tree; a stopped holder on this host is waited for until \
         its lockrun exits; so give --timeout (which bounds this wait and the lock's \
         together), or end the wait with a signal.",
    ),
    (Topic::SharedMode, "psql's `pg_advisory_lock_shared`"),
];

const ENVIRONMENT: &[Prose] = &[Prose::P(
    "On PostgreSQL (`--backend postgres`) lockrun reads libpq's variables, which \
         `--dsn` overrides: `PGHOST` (a host or a unix-socket directory), `PGPORT`, \
         `PGUSER`, `PGDATABASE`, `PGPASSWORD` (never printed), `PGPASSFILE` (else \
         `~/.pgpass`, ignored if others can read it), and for TLS `PGSSLMODE` (libpq's \
         modes; default prefer), `PGSSLROOTCERT`, `PGSSLCERT` and `PGSSLKEY` (else the \
         files in `~/.postgresql`), `PGCONNECT_TIMEOUT` (seconds per host and address; \
         default 10) and `PGTARGETSESSIONATTRS`. A connection pooler such as PgBouncer is refused. \
         KEY's advisory lock \
         id is `('x' || substr(md5('KEY'), 1, 16))::bit(64)::bigint`; slot i of PREFIX \
         is that of `PREFIX//i`.",
)];

/// PostgreSQL, its connection settings checked.
pub struct PostgresBackend(Postgres);

impl Backend for PostgresBackend {
    type Args = PostgresArgs;
    type HoldArgs = crate::backend::NoFlags;
    type ReleaseArgs = crate::backend::NoFlags;
    type Engine = Postgres;
    type Inspect = Postgres;
    type Plan = LeasePlan;

    const NAME: &'static str = "postgres";
    const PRIORITY: bool = true;
    const REGISTRATION: Registration = REGISTRATION;

    fn check_key(key: &str) -> Result<(), Failure> {
        super::check_key(key).map_err(Failure::Usage)
    }

    fn promise(_lock: bool, _ends_early: bool) -> PromiseText {
        PromiseText {
            rival: "when the connection ends: at once if our process exits or an operator terminates our backend; on a network partition when the server's TCP keepalive, tcp_user_timeout or idle_session_timeout (behind a relay that keeps TCP open) gives up, which lockrun sets to the TTL after the last round trip the server received",
            release: "`lockrun release` terminates the holder's backend (pg_terminate_backend): the server frees the lock at once, so the holder sends SIGKILL at once (no grace period)",
            lost_state: "a connection the server ended (pg_terminate_backend, a restart, a failover: a replica keeps no advisory locks): a rival may hold at once, so the command gets SIGKILL at once; no delay covers that window",
            engine: &["the PostgreSQL server (Linux, 14 or later) honours the per-session tcp_keepalives_*, tcp_user_timeout and idle_session_timeout lockrun sets, and every contender connects directly to the same primary and database (a pooler such as PgBouncer is refused where lockrun can tell)"],
        }
    }

    /// The server gives up on a silent connection (its TCP keepalive and
    /// `tcp_user_timeout`, whole seconds) the TTL after the last data it
    /// received from us, and frees the lock at once: etcd's shape.
    fn hold_rules(
        request: &HoldRequest<'_, Self::HoldArgs>,
        _env: &dyn Env,
    ) -> Result<HoldRules<LeasePlan>, Failure> {
        crate::key::check(request.key).map_err(Failure::Usage)?;
        crate::backend::rules::plain_lease(
            request,
            "a postgres TTL",
            "on postgres a rival takes the lock as soon as the server gives up on our connection",
        )
    }

    fn prepare(
        args: &Self::Args,
        plan: Option<&LeasePlan>,
        _env: &dyn Env,
    ) -> Result<Self, Failure> {
        super::engine(args.dsn.as_deref(), plan.map(|plan| plan.ttl)).map(PostgresBackend)
    }

    fn engine(&self, LeasePlan { priority, .. }: LeasePlan) -> Result<Postgres, Failure> {
        Ok(self.0.clone().ranked(priority))
    }

    fn inspect(&self, _look: &Look<'_, Self::ReleaseArgs>) -> Postgres {
        self.0.clone()
    }
}
