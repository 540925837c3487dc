//! What can go wrong talking to ZooKeeper, classified so that policy code
//! can tell a blip (retry while the session lasts) from a verdict.

use std::fmt;

use zookeeper_client as zk;

use crate::error::Failure;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkError {
    /// A bad key, limit or setting, found before anything was written.
    Usage(String),
    /// No server of the connect string gave us a session in time.
    Unreachable { hosts: String, cause: String },
    /// A server took the connection but not our TLS session (a CA, a name
    /// or a client certificate): the flags are wrong, not the servers.
    Tls { server: String, problem: String },
    /// The session expired, was closed, or authentication failed: every
    /// ephemeral node of ours is gone. A verdict.
    SessionGone { why: String },
    /// Our own contender node vanished while we waited. A verdict.
    NodeGone { path: String },
    /// The server refused a request for want of a permission.
    Denied { what: String },
    /// The semaphore's prefix holds another limit.
    LimitMismatch {
        prefix: String,
        ours: u32,
        theirs: String,
    },
    /// A request failed in a way that may pass (connection loss, timeout).
    Transient { what: String, cause: String },
    /// A request failed for good.
    Failed { what: String, cause: String },
}

impl ZkError {
    /// Classifies the client's error for the request `what`.
    pub fn of(what: &str, e: zk::Error) -> ZkError {
        use zk::Error as E;
        let what = what.to_string();
        match e {
            E::SessionExpired | E::ClientClosed => ZkError::SessionGone {
                why: format!("{what}: {e}"),
            },
            E::AuthFailed => ZkError::SessionGone {
                why: format!("{what}: authentication failed (check ZOOKEEPER_AUTH or --zk-auth-file)"),
            },
            E::NoAuth => ZkError::Denied { what },
            // A custom error on a request is the reason the client ended
            // its connection with the request in flight (no answer within
            // the connection timeout, an I/O error): a blip, as a loss is.
            E::ConnectionLoss
            | E::Timeout
            | E::Throttled
            | E::SessionMoved
            | E::NoHosts
            | E::Custom(_) => {
                ZkError::Transient {
                    what,
                    cause: e.to_string(),
                }
            }
            e => ZkError::Failed {
                what,
                cause: e.to_string(),
            },
        }
    }

    /// The engine said our claim is gone: no retry brings it back.
    pub fn is_verdict(&self) -> bool {
        matches!(self, ZkError::SessionGone { .. } | ZkError::NodeGone { .. })
    }
}

impl fmt::Display for ZkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ZkError::Usage(m) => f.write_str(m),
            ZkError::Tls { server, problem } => write!(
                f,
                "cannot reach ZooKeeper at {server} over TLS: {problem}"
            ),
            ZkError::Unreachable { hosts, cause } => write!(
                f,
                "cannot reach ZooKeeper at {hosts}: {cause}; check --zk-hosts (or ZOOKEEPER_HOSTS), that the servers run, and --zk-ca-file where they serve TLS"
            ),
            ZkError::SessionGone { why } => write!(f, "our ZooKeeper session is gone ({why})"),
            ZkError::NodeGone { path } => write!(
                f,
                "our contender node `{path}` was deleted (an operator's release, or our session expired)"
            ),
            ZkError::Denied { what } => write!(
                f,
                "ZooKeeper refused {what}: not authorized; give credentials in ZOOKEEPER_AUTH or --zk-auth-file, or ask for the node's ACL"
            ),
            ZkError::LimitMismatch {
                prefix,
                ours,
                theirs,
            } => write!(
                f,
                "semaphore `{prefix}` has limit {theirs} in ZooKeeper but --limit is {ours}; use --limit {theirs}, or wait until every holder left and the prefix is gone"
            ),
            ZkError::Transient { what, cause } | ZkError::Failed { what, cause } => {
                write!(f, "{what}: {cause}")
            }
        }
    }
}

impl std::error::Error for ZkError {}

impl crate::backend::EngineError for ZkError {
    fn is_transient(&self) -> bool {
        matches!(self, ZkError::Transient { .. })
    }
}

impl From<ZkError> for Failure {
    fn from(e: ZkError) -> Failure {
        match e {
            ZkError::Usage(m) => Failure::Usage(m),
            ZkError::LimitMismatch { .. } => Failure::Conflict(e.to_string()),
            e => Failure::Engine(e.to_string()),
        }
    }
}
