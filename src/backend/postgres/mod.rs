//! The `postgres` backend (issue #31): a lock or semaphore slot is a
//! session-level advisory lock, held by one dedicated connection for the
//! life of the hold.
//!
//! **Lock ids.** KEY's lock id is the first 16 hex digits of `md5(KEY)` as
//! a signed 64-bit number, which a script computes with psql alone:
//!
//! ```sql
//! select pg_advisory_lock(('x' || substr(md5('KEY'), 1, 16))::bit(64)::bigint);
//! ```
//!
//! Slot i of a semaphore PREFIX is the lock id of the text `PREFIX//i`
//! (no key holds `//`, so no lock shares a slot's id). Each contender for
//! a semaphore also holds, from before its first try until its lease ends,
//! a *shared* advisory lock on the two 32-bit keys (first 8 hex digits of
//! `md5('PREFIX//limit')`, LIMIT), and refuses to go on if pg_locks shows
//! one with another LIMIT: of two contenders disagreeing on the limit, the
//! later to look sees the other, so they never both believe they are
//! within it. We let the server
//! compute the ids, with that very expression, so that the two cannot
//! drift apart. Advisory locks belong to one database: every contender
//! must connect to the same one.
//!
//! **The lease** is the connection. The server frees our locks the moment
//! the connection ends: at once when an operator terminates our backend,
//! when our process exits once the guard has let go of its copy of the
//! socket (it keeps one until the command's tree is gone, so a SIGKILL of
//! lockrun frees the lock only after the tree), and on a network
//! partition only when its TCP keepalive or `tcp_user_timeout` gives up.
//! We set both per session to
//! give up no earlier than the TTL after the last data the server received
//! from us, so the budget is etcd's: the send time of the last confirmed
//! round trip plus the TTL, with no lock-delay. Renewal is one round trip
//! (`select pg_backend_pid()`, which also tells a pooler's switch of server
//! process) on the hold loop's schedule. A closed connection is
//! noticed at once: the connection task ends, and the claim's watch with it.
//!
//! **The fence** is `pg_current_xact_id()` taken right after acquisition:
//! 64-bit, cluster-wide, never reused, and assigned in order, so a later
//! holder's is greater.
//!
//! **Who holds it** comes from `pg_locks` joined with `pg_stat_activity`:
//! the holder's queries carry a comment with its facts (value, host, pid,
//! fence), which `pg_stat_activity.query` shows.

pub mod args;
pub mod backend;
mod client;
pub mod config;
mod engine;
pub mod error;
mod inspect;
mod socket;
pub mod tls;
mod waiters;

pub use self::client::APPLICATION_NAME;
pub use self::engine::{
    check_key, engine, slot_text, turnstile_text, PgClaim, PgLease, Postgres,     DEFAULT_TTL,
};
pub use self::error::PgError;
pub use self::inspect::PgChanges;
