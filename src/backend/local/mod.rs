//! The `local` backend: locks that are `flock(2)` locks on files in a lock
//! directory, for one host and no server (issue #13, SPEC §6).
//!
//! The lock for KEY is the file `DIR/KEY`, opened the way `flock(1)` opens
//! it (read-only, created if missing), so `flock DIR/KEY cmd` and lockrun
//! exclude each other both ways. Holder facts and the fencing number sit
//! beside it in `DIR/KEY.lockrun` (see [`facts`]). A semaphore PREFIX is the
//! directory `DIR/PREFIX` with slot files `slot-0..N-1`, the agreed limit in
//! `.limit` and a `.queue` lock that lets one waiter at a time look for a
//! free slot.
//!
//! There is no lease: the kernel drops a flock only when the last
//! descriptor of its open file description closes, so nothing can run out
//! while we (or the guard, which keeps a duplicate until the child's whole
//! group is dead) hold it.
//!
//! Waiting never spins. A blocking `flock` runs in a thread of its own; to
//! cancel we abandon that thread, and a grant that arrives after nobody
//! wants it lands in a dropped channel, which closes the descriptor and so
//! releases the lock at once. Nothing is written beside the lock before the
//! grant reaches the waiting future, so a late grant leaves no trace but a
//! brief hold with no child. A writer's wait for a leader lock is its
//! guard's own where the hold allows it (see `Local::wait_in_guard`):
//! the guard blocks in `flock` and, granted, writes the facts and starts
//! the child itself ([`grant_in_guard`]), as `flock(1)` does.
//!
//! There is no `client.rs`: the engine is the kernel's `flock(2)` on files
//! under the lock directory (`dir.rs`, `tree.rs`), reached by no connection;
//! nor `config.rs`: its one setting, the lock directory, is checked by
//! `backend.rs`'s `prepare`.

pub mod args;
pub mod backend;
pub mod dir;
mod engine;
pub mod error;
pub mod facts;
mod inspect;
mod semaphore;
mod sys;
pub mod tree;
mod waiters;
mod watch;

pub use self::engine::{grant_in_guard, Local, LocalClaim, NoLease};
pub use self::error::{Kind, LocalError};
