//! What can go wrong talking to Consul, classified so that policy code can
//! tell a transient hiccup (retry while the lease lasts) from a verdict.

use std::fmt;
use std::time::Duration;

use crate::backend::one_line;

/// What we were doing when Consul failed us; it names the ACL permission a
/// denial is about, so the message can say what the token lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    SessionCreate,
    SessionRenew,
    SessionDestroy,
    SessionRead,
    KvRead(String),
    KvWrite(String),
    AgentRead,
}

impl Op {
    fn permission(&self) -> String {
        match self {
            Op::SessionCreate | Op::SessionRenew | Op::SessionDestroy => {
                "session:write on this agent's node".to_string()
            }
            Op::SessionRead => "session:read".to_string(),
            Op::KvRead(key) => format!("key:read on `{key}`"),
            Op::KvWrite(key) => format!("key:write on `{key}`"),
            Op::AgentRead => "agent:read".to_string(),
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::SessionCreate => f.write_str("creating a session"),
            Op::SessionRenew => f.write_str("renewing the session"),
            Op::SessionDestroy => f.write_str("destroying the session"),
            Op::SessionRead => f.write_str("reading a session"),
            Op::KvRead(key) => write!(f, "reading `{key}`"),
            Op::KvWrite(key) => write!(f, "writing `{key}`"),
            Op::AgentRead => f.write_str("reading the agent's configuration"),
        }
    }
}

#[derive(Debug, Clone)]
pub enum ConsulError {
    /// No connection could be made (refused, DNS, TLS handshake).
    Unreachable { addr: String, cause: String },
    /// The request got no answer in time.
    Timeout { addr: String, after: Duration },
    /// The connection broke mid-request.
    Broken { addr: String, cause: String },
    /// TLS failed: the certificates or the scheme are wrong. `problem` says
    /// what to fix.
    Tls { addr: String, problem: String },
    /// 403: the token is missing, unknown or lacks a permission.
    Forbidden { op: Op, body: String },
    /// 404 where a resource must exist (a session renewal, say).
    NotFound { op: Op, body: String },
    /// An HTTP server that is not Consul answered: Go's plain 404.
    NotConsul { addr: String, op: Op },
    /// 400/413: Consul rejected the request itself (an invalid key, say).
    Rejected { op: Op, status: u16, body: String },
    /// 5xx and 429: the cluster is in trouble (no leader, an RPC failure).
    Server { op: Op, status: u16, body: String },
    /// An answer we could not understand.
    Decode { op: Op, cause: String },
    /// A transient failure that outlasted the patience the user gave.
    GaveUp {
        step: String,
        last: Box<ConsulError>,
    },
}

impl ConsulError {
    /// Worth retrying while the local lease still holds: the cluster or the
    /// network is in trouble, but nothing has said our session is gone.
    pub fn is_transient(&self) -> bool {
        match self {
            // A TLS failure mid-lock is a network problem like any other: the
            // lease decides. At start-up it is reported at once.
            ConsulError::Unreachable { .. }
            | ConsulError::Timeout { .. }
            | ConsulError::Broken { .. }
            | ConsulError::Tls { .. }
            | ConsulError::Server { .. } => true,
            ConsulError::Forbidden { .. }
            | ConsulError::NotFound { .. }
            | ConsulError::NotConsul { .. }
            | ConsulError::Rejected { .. }
            | ConsulError::Decode { .. }
            | ConsulError::GaveUp { .. } => false,
        }
    }
}

impl ConsulError {
    /// Whether a one-off run's first request should wait this out: a
    /// connection reset, or Consul saying it has no leader (an election
    /// under way) or too many requests. An address that refuses or stays
    /// silent, a TLS mismatch, an unknown datacenter or check: at the first
    /// contact those are settings to fix far more often than blips, and a
    /// cron job retrying them for ever would wait without a word.
    pub fn may_pass_soon(&self) -> bool {
        match self {
            ConsulError::Broken { .. } => true,
            ConsulError::Server { status, body, .. } => {
                *status == 429 || (server_hint(body).is_empty() && is_election(body))
            }
            _ => false,
        }
    }
}

/// What Consul's servers answer while they elect a leader, or while the
/// agent's server has just died: no leader yet, the leader lost while a
/// write was committing, or the agent's RPC to a server that is gone ("rpc
/// error ... failed to get conn ... connection refused", seen on 1.6.2 and
/// 1.15.10 right after the raft leader was killed). All pass within an
/// election or the agent's next pick of server.
fn is_election(body: &str) -> bool {
    const MARKERS: &[&str] = &[
        "No cluster leader",
        "leadership lost",
        "not the leader",
        "failed to get conn",
        "rpc error making call: EOF",
        "rpc error getting client",
        "connection refused",
        "connection reset",
        "i/o timeout",
        "stream closed",
    ];
    MARKERS.iter().any(|m| body.contains(m))
}

/// What to do about the 500s that are settings, not trouble.
fn server_hint(body: &str) -> &'static str {
    if body.contains("No path to datacenter") {
        "; check --datacenter"
    } else if body.contains("Missing check") || body.contains("Missing node registration") {
        "; --node-checks and --service-checks must name checks registered on this agent's node"
    } else {
        ""
    }
}

const NAMESPACE_REFUSAL: &str = "Namespaces are a Consul Enterprise feature";

/// What to say when the agent has no namespaces.
pub const NO_NAMESPACES: &str = "namespaces need Consul Enterprise, and this agent is the community edition; drop --namespace and CONSUL_NAMESPACE";

impl ConsulError {
    /// Consul's community edition refusing `?ns=`.
    pub fn is_namespace_refusal(&self) -> bool {
        matches!(self, ConsulError::Rejected { body, .. } if body.contains(NAMESPACE_REFUSAL))
    }
}

impl fmt::Display for ConsulError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConsulError::Unreachable { addr, cause } => write!(
                f,
                "cannot reach Consul at {addr} ({cause}); is an agent running? set CONSUL_HTTP_ADDR"
            ),
            ConsulError::Timeout { addr, after } => write!(
                f,
                "Consul at {addr} did not answer within {}",
                crate::duration::fmt_duration(*after)
            ),
            ConsulError::Broken { addr, cause } => {
                write!(f, "the connection to Consul at {addr} broke ({cause})")
            }
            ConsulError::Tls { addr, problem } => {
                write!(f, "TLS with Consul at {addr} failed: {problem}")
            }
            ConsulError::Forbidden { op, body } => {
                if body.contains("ACL not found") {
                    write!(
                        f,
                        "permission denied {op}: Consul does not know the token (ACL not found); check CONSUL_HTTP_TOKEN or --token-file"
                    )
                } else {
                    write!(
                        f,
                        "permission denied {op}: the token lacks {}; set CONSUL_HTTP_TOKEN or --token-file",
                        op.permission()
                    )
                }
            }
            ConsulError::NotConsul { addr, op } => write!(
                f,
                "{addr} answered \"404 page not found\" {op}: is this Consul? Consul's HTTP API is at port 8500 unless set otherwise; check CONSUL_HTTP_ADDR or --http-addr"
            ),
            ConsulError::NotFound { op, body } => {
                write!(f, "Consul answered 404 {op} ({})", one_line(body))
            }
            ConsulError::Rejected { .. } if self.is_namespace_refusal() => {
                f.write_str(NO_NAMESPACES)
            }
            ConsulError::Rejected { op, status, body } => {
                write!(f, "Consul refused {op} ({status}: {})", one_line(body))
            }
            ConsulError::Server { op, status, body } => write!(
                f,
                "Consul failed {op} ({status}: {}){}",
                one_line(body),
                server_hint(body)
            ),
            ConsulError::Decode { op, cause } => {
                write!(f, "unexpected answer from Consul {op} ({cause})")
            }
            ConsulError::GaveUp { step, last } => {
                write!(f, "{step}: {last}; gave up retrying")
            }
        }
    }
}

impl std::error::Error for ConsulError {}

impl From<ConsulError> for crate::error::Failure {
    fn from(e: ConsulError) -> crate::error::Failure {
        crate::error::Failure::Engine(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_namespace_says_it_needs_enterprise() {
        let e = ConsulError::Rejected {
            op: Op::SessionCreate,
            status: 400,
            body: "Invalid query parameter: \"ns\" - Namespaces are a Consul Enterprise feature"
                .into(),
        };
        assert_eq!(e.to_string(), NO_NAMESPACES);
    }

    #[test]
    fn election_answers_pass_and_settings_do_not() {
        let server = |body: &str| ConsulError::Server {
            op: Op::SessionCreate,
            status: 500,
            body: body.into(),
        };
        for body in [
            "No cluster leader",
            "rpc error making call: failed to get conn: dial tcp 127.0.0.11:8300: connect: connection refused",
            "rpc error getting client: failed to get conn: rpc error: lead thread didn't get connection",
            "rpc error making call: EOF",
            "raft apply failed: leadership lost while committing log",
            "rpc error making call: node is not the leader",
        ] {
            assert!(server(body).may_pass_soon(), "{body}");
        }
        for body in [
            "rpc error making call: Missing check 'web' registration",
            "No path to datacenter",
            "invalid session",
        ] {
            assert!(!server(body).may_pass_soon(), "{body}");
        }
    }

    #[test]
    fn durations_in_messages_are_whole_milliseconds() {
        let e = ConsulError::Timeout {
            addr: "http://127.0.0.1:8500".into(),
            after: Duration::new(3, 998_025_657),
        };
        assert_eq!(
            e.to_string(),
            "Consul at http://127.0.0.1:8500 did not answer within 3s 998ms"
        );
    }
}
