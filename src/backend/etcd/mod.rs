//! The `etcd` backend (issue #14, SPEC §6): locks and semaphore slots as
//! keys attached to an etcd lease, in etcd's own concurrency-mutex layout
//! so that `etcdctl lock` and `etcdctl elect` interoperate (see [`lock`]).
//!
//! The lease is what keeps our claims alive: the hold loop sends a
//! keepalive about every TTL/3, and etcd's leader expires the lease one TTL
//! after the last keepalive it received, deleting our key at once. There is
//! no lock-delay: a rival may hold the lock the moment our key is gone, so
//! the budget is the send time of the last acknowledged keepalive plus the
//! TTL in its answer.
//!
//! Cancelling an acquisition by dropping its future may leave our contender
//! key behind (we never do I/O in `Drop`), and a key that reaches the front
//! of the queue holds the lock for `etcdctl` too. The key is attached to the
//! lease, so closing the lease ([`Lease::close`](crate::backend::Lease::close), which revokes it) deletes
//! it: whoever drops an acquisition must close the lease, as the hold loop
//! does on every path. A lease nobody closes expires one TTL after its last
//! keepalive.

pub mod args;
pub mod backend;
pub mod client;
pub mod config;
mod engine;
pub mod error;
mod inspect;
pub mod lock;
mod proto;
mod waiters;

pub use self::client::Client;
pub use self::config::{EtcdConfig, EtcdFlags, Password, User};
pub use self::engine::{check_key, Etcd, EtcdClaim, EtcdLease, DEFAULT_TTL};
pub use self::error::EtcdError;
pub use self::inspect::{inside_a_lock, EtcdChanges};
