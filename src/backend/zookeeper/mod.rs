//! The `zookeeper` backend (issue #41): locks and semaphore slots as
//! ephemeral sequential nodes of a ZooKeeper session, in Curator's layout
//! so that Curator, go-zookeeper and kazoo (with
//! `extra_lock_patterns=["-lock-"]`) interoperate (see [`lock`]).
//!
//! The session is the lease. The server expires it no earlier than the
//! negotiated timeout after the last request of ours it received, on its
//! own monotonic clock, and deletes our node with it; nothing delays a
//! rival after that. The hold loop renews about every timeout/3 with a
//! `sync`, which only the ensemble's leader answers (a follower cut off
//! from the leader would answer a read for a while), and counts the
//! deadline from the send time of the last answered one. A lost
//! connection is jeopardy, not a loss: the client moves to another server
//! and the session goes on if it is back in time; the countdown runs
//! meanwhile. An expired session, our node deleted, or failed
//! authentication is a loss at once.
//!
//! The fence is our node's `czxid`, the ensemble's transaction number of
//! its creation: global and increasing, unlike the sequence number, which
//! restarts when an empty directory is reaped.

pub mod args;
pub mod backend;
pub mod client;
pub mod config;
mod engine;
pub mod error;
mod inspect;
pub mod lock;
pub mod waiters;

pub use self::config::{ZkConfig, ZkFlags};
pub use self::engine::{
    check_key, hold_rules, touch_gap, ZkClaim, ZkLease, Zookeeper, DEFAULT_TICK, DEFAULT_TTL, REVOKE,
};
pub use self::error::ZkError;
pub use self::inspect::ZkChanges;
