//! The `consul` backend: locks and semaphore slots as KV entries acquired
//! by a Consul session, in the layout of `consul lock`. [`client`] is a
//! small Consul HTTP client: one async call per endpoint lockrun uses, each
//! returning typed data or a classified [`ConsulError`]. Retries, backoff and
//! deadlines are policy, and policy lives with the callers (`lease`, `lock`).
//!
//! There is no `waiters.rs`: lockrun's waiters queue in KV entries of their
//! own (`lock/queue.rs`), which are also where their priorities are read.

pub mod agent;
pub mod args;
pub mod backend;
pub mod blocking;
pub mod client;
mod config;
pub mod connect;
pub mod engine;
pub mod error;
pub mod inspect;
pub mod kv;
pub mod lock;
pub mod path;
pub mod session;
pub mod txn;

pub use agent::Agent;
pub(crate) use client::decode;
pub use client::{Client, REQUEST_TIMEOUT};
pub use connect::{ConsulConfig, Token};
pub use error::{ConsulError, Op};
pub use kv::KvPair;
pub use session::{Behavior, SessionId, SessionInfo, SessionSpec};
