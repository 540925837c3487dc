//! What can go wrong talking to etcd, classified so that policy code can
//! tell a transient hiccup (retry while the lease lasts) from a verdict.

use std::fmt;
use std::time::Duration;

use crate::backend::one_line;

/// gRPC status codes etcd answers with.
pub mod code {
    pub const INVALID_ARGUMENT: i64 = 3;
    pub const DEADLINE_EXCEEDED: i64 = 4;
    pub const NOT_FOUND: i64 = 5;
    pub const PERMISSION_DENIED: i64 = 7;
    pub const RESOURCE_EXHAUSTED: i64 = 8;
    pub const FAILED_PRECONDITION: i64 = 9;
    pub const UNAVAILABLE: i64 = 14;
    pub const UNAUTHENTICATED: i64 = 16;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtcdError {
    /// No endpoint accepted a connection (refused, DNS, TLS handshake).
    Unreachable { endpoints: String, cause: String },
    /// The request got no answer in time.
    Timeout { endpoint: String, after: Duration },
    /// The connection broke mid-request.
    Broken { endpoint: String, cause: String },
    /// TLS failed: the certificates or the scheme are wrong.
    Tls { endpoint: String, cause: String },
    /// The user or password is wrong, or the user lacks a permission.
    Denied { what: String, message: String },
    /// Our auth token expired; the next call authenticates afresh.
    TokenExpired { message: String },
    /// The lease is gone: revoked by an operator or expired. A verdict.
    LeaseNotFound { lease: i64 },
    /// Our contender key vanished while we waited: its lease ran out or was
    /// revoked. A verdict.
    KeyGone { key: String },
    /// No leader, a timeout inside the cluster, too many requests.
    Server {
        what: String,
        code: i64,
        message: String,
    },
    /// etcd refused the request itself.
    Rejected {
        what: String,
        code: i64,
        message: String,
    },
    /// An answer we could not understand.
    Decode { what: String, cause: String },
    /// The semaphore's contenders agreed on another limit.
    LimitMismatch {
        prefix: String,
        ours: u32,
        theirs: u32,
        key: String,
    },
    /// A key under a semaphore prefix that is not a lockrun contender.
    Foreign { prefix: String, key: String },
    /// `release` found, where a holder would be, an entry that is not a
    /// contender's: a nested lock's, or data without a lease.
    NotAContender { key: String, entry: String },
    /// A key or prefix lockrun cannot use.
    Usage(String),
}

impl EtcdError {
    /// Worth retrying while the local lease still holds: the cluster or the
    /// network is in trouble, but nothing has said our lease is gone.
    pub fn is_transient(&self) -> bool {
        match self {
            EtcdError::Unreachable { .. }
            | EtcdError::Timeout { .. }
            | EtcdError::Broken { .. }
            // A TLS failure mid-lock is a network problem like any other:
            // the lease decides. At start-up it is reported at once.
            | EtcdError::Tls { .. }
            | EtcdError::TokenExpired { .. }
            | EtcdError::Server { .. } => true,
            EtcdError::Denied { .. }
            | EtcdError::LeaseNotFound { .. }
            | EtcdError::KeyGone { .. }
            | EtcdError::Rejected { .. }
            | EtcdError::Decode { .. }
            | EtcdError::LimitMismatch { .. }
            | EtcdError::Foreign { .. }
            | EtcdError::NotAContender { .. }
            | EtcdError::Usage(_) => false,
        }
    }

    /// Whether a one-off run's first request should wait this out: a
    /// connection reset, etcd answering that it is in trouble (no leader,
    /// too many requests, a timeout inside the cluster) or that our token
    /// expired. An endpoint that refuses or stays silent, or a TLS
    /// mismatch: at the first contact those are settings to fix far more
    /// often than blips, and a cron job retrying them for ever would wait
    /// without a word.
    pub fn may_pass_soon(&self) -> bool {
        matches!(
            self,
            EtcdError::Broken { .. } | EtcdError::Server { .. } | EtcdError::TokenExpired { .. }
        )
    }

    /// etcd said our lease is gone: whatever we held with it is lost now,
    /// and etcd has no lock-delay, so a rival may already hold it.
    pub fn is_verdict(&self) -> bool {
        matches!(
            self,
            EtcdError::LeaseNotFound { .. } | EtcdError::KeyGone { .. }
        )
    }

    /// Classifies etcd's gRPC status: its code and message.
    pub(crate) fn from_status(what: &str, code: i64, message: &str) -> EtcdError {
        let message = one_line(message);
        let what = what.to_owned();
        match code {
            code::UNAUTHENTICATED if message.contains("invalid auth token") => {
                EtcdError::TokenExpired { message }
            }
            code::PERMISSION_DENIED | code::UNAUTHENTICATED => EtcdError::Denied { what, message },
            code::INVALID_ARGUMENT if message.contains("authentication failed") => {
                EtcdError::Denied { what, message }
            }
            code::DEADLINE_EXCEEDED | code::RESOURCE_EXHAUSTED | code::UNAVAILABLE => {
                EtcdError::Server {
                    what,
                    code,
                    message,
                }
            }
            _ => EtcdError::Rejected {
                what,
                code,
                message,
            },
        }
    }

    /// Whether etcd answered "requested lease not found".
    pub(crate) fn is_lease_not_found(&self) -> bool {
        matches!(self, EtcdError::Rejected { code: code::NOT_FOUND, message, .. } if message.contains("lease not found"))
    }
}

impl fmt::Display for EtcdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtcdError::Unreachable { endpoints, cause } => write!(
                f,
                "cannot reach etcd at {endpoints} ({cause}); is etcd running? set ETCDCTL_ENDPOINTS or --endpoints"
            ),
            EtcdError::Timeout { endpoint, after } => write!(
                f,
                "etcd at {endpoint} did not answer within {}",
                crate::duration::fmt_duration(*after)
            ),
            EtcdError::Broken { endpoint, cause } => {
                write!(f, "the connection to etcd at {endpoint} broke ({cause})")
            }
            EtcdError::Tls { endpoint, cause } => write!(
                f,
                "TLS with etcd at {endpoint} failed ({cause}); check --cacert, --cert and --cert-key (or ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY) and the endpoint's scheme"
            ),
            EtcdError::Denied { what, message } => write!(
                f,
                "permission denied {what} ({message}); check ETCDCTL_USER and the user's role"
            ),
            EtcdError::TokenExpired { message } => {
                write!(f, "etcd refused our auth token ({message}); authenticating again")
            }
            EtcdError::LeaseNotFound { lease } => write!(
                f,
                "etcd no longer knows our lease {lease:x}: it was revoked or ran out"
            ),
            EtcdError::KeyGone { key } => write!(
                f,
                "our contender key `{key}` vanished: its lease was revoked or ran out"
            ),
            EtcdError::Server {
                what,
                code,
                message,
            } => write!(f, "etcd failed {what} (code {code}: {message})"),
            EtcdError::Rejected {
                what,
                code,
                message,
            } => write!(f, "etcd refused {what} (code {code}: {message})"),
            EtcdError::Decode { what, cause } => {
                write!(f, "unexpected answer from etcd {what} ({cause})")
            }
            EtcdError::LimitMismatch {
                prefix,
                ours,
                theirs,
                key,
            } => write!(
                f,
                "semaphore `{prefix}` has limit {theirs} (stored by `{key}`), not {ours}; use --limit {theirs} or another prefix"
            ),
            EtcdError::NotAContender { key, entry } => write!(
                f,
                "`{entry}` is not a contender's entry (`{key}/<lease id>`, `{key}/read/<lease id>` or `{key}/write/<lease id>`, with that lease), so it was left alone and nothing was released; etcd's mutex waits for it as for a holder: delete it yourself if it should go"
            ),
            EtcdError::Foreign { prefix, key } => write!(
                f,
                "`{key}` under semaphore prefix `{prefix}` is not a lockrun contender; keep nothing else under `{prefix}/`"
            ),
            EtcdError::Usage(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for EtcdError {}

impl crate::backend::EngineError for EtcdError {
    fn is_transient(&self) -> bool {
        EtcdError::is_transient(self)
    }
}

impl From<EtcdError> for crate::error::Failure {
    fn from(e: EtcdError) -> crate::error::Failure {
        use crate::error::Failure;
        match e {
            EtcdError::Usage(m) => Failure::Usage(m),
            e @ (EtcdError::LimitMismatch { .. }
            | EtcdError::Foreign { .. }
            | EtcdError::NotAContender { .. }) => Failure::Conflict(e.to_string()),
            e => Failure::Engine(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_statuses_are_classified_by_their_code() {
        let e = EtcdError::from_status(
            "renewing the lease",
            5,
            "etcdserver: requested lease not found",
        );
        assert!(e.is_lease_not_found());
        let e = EtcdError::from_status("reading `a`", 14, "etcdserver: no leader");
        assert!(e.is_transient(), "{e}");
        assert_eq!(
            e.to_string(),
            "etcd failed reading `a` (code 14: etcdserver: no leader)"
        );
        let e = EtcdError::from_status(
            "authenticating",
            3,
            "etcdserver: authentication failed, invalid user ID or password",
        );
        assert!(matches!(e, EtcdError::Denied { .. }), "{e:?}");
        assert!(!e.is_transient());
        let e = EtcdError::from_status("x", 16, "etcdserver: invalid auth token");
        assert!(matches!(e, EtcdError::TokenExpired { .. }), "{e:?}");
        let e = EtcdError::from_status("reading `a`", 12, "unknown service etcdserverpb.KV");
        assert!(!e.is_transient() && !e.is_verdict());
    }
}
