//! What can go wrong talking to PostgreSQL, classified so that policy code
//! can tell a blip (retry while the lease lasts) from a verdict.

use std::fmt;
use std::time::Duration;

use crate::backend::one_line;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgError {
    /// No host took the connection (refused, DNS, reset).
    Unreachable { cause: String },
    /// A request got no answer in time.
    Timeout { what: String, after: Duration },
    /// Our connection closed: the server ended our session (an operator's
    /// `pg_terminate_backend`, a restart) or the network dropped it. Every
    /// advisory lock it held is free.
    Closed { cause: String },
    /// The server refused us: a wrong user, password or database, or a
    /// missing privilege.
    Denied { what: String, message: String },
    /// The server answered with an error we do not expect.
    Server { what: String, message: String },
    /// The server is a hot standby: advisory locks there exclude nobody on
    /// the primary.
    Standby,
    /// TLS failed: a certificate refused by either side, or no TLS where
    /// the sslmode demands it. Retrying cannot help.
    Tls { cause: String },
    /// A contender for the semaphore uses another limit.
    LimitMismatch {
        prefix: String,
        ours: u32,
        theirs: u32,
        backend: i32,
    },
    /// A connection pooler stands between us and the server.
    Pooler { why: String },
    /// A key lockrun cannot use.
    Usage(String),
    /// What our role may not do to another session (ask a holder to let
    /// go): lockrun's own status 125, not the engine's trouble.
    Refused(String),
}

impl PgError {
    /// Our statements reached server process `to`, not `from`, the one our
    /// hold is on: a pooler between us and the server.
    pub(super) fn moved(from: i32, to: i32) -> PgError {
        PgError::Pooler {
            why: format!("our statements moved from server process {from} to {to}"),
        }
    }

    /// Server process `pid` held lock `id` before this run took it: advisory
    /// locks are re-entrant, and another client shares the process.
    pub(super) fn shared_process(pid: i32, id: i64) -> PgError {
        PgError::Pooler {
            why: format!(
                "our server process {pid} already held lock {id}, which this run never took: another client shares it"
            ),
        }
    }

    /// Classifies a client error for `what` (`taking the lock`, say).
    pub fn from_client(what: &str, e: tokio_postgres::Error) -> PgError {
        if let Some(db) = e.as_db_error() {
            let message = one_line(db.message());
            let code = db.code().code();
            // 28: invalid authorization; 42501: insufficient privilege;
            // 3D000: no such database.
            if code.starts_with("28") || code == "42501" || code == "3D000" {
                return PgError::Denied {
                    what: what.to_string(),
                    message,
                };
            }
            // 57P01..57P03: the server is shutting down or terminated us.
            if code.starts_with("57P") {
                return PgError::Closed { cause: message };
            }
            // PgBouncer refuses startup parameters it does not know.
            if message.contains("unsupported startup parameter") {
                return PgError::Pooler {
                    why: format!(
                        "the server refused the settings lockrun sends at connection ({message})"
                    ),
                };
            }
            // 42704 at startup: a server before 14 knows no
            // idle_session_timeout, which our lease rests on.
            if code == "42704" && message.contains("idle_session_timeout") {
                return PgError::Server {
                    what: what.to_string(),
                    message: format!(
                        "{message}; lockrun needs PostgreSQL 14 or later, whose idle_session_timeout frees the lock of a client silenced behind a relay"
                    ),
                };
            }
            // 26000, 42P05: a statement we prepared is missing, or one of
            // that name exists already: another server process answers
            // than the one we prepared it on, as under transaction pooling.
            if code == "26000" || code == "42P05" {
                return PgError::Pooler {
                    why: format!("{what} reached another server process ({message})"),
                };
            }
            return PgError::Server {
                what: what.to_string(),
                message: format!("{message} (SQLSTATE {code})"),
            };
        }
        // tokio-postgres fails before asking when it has no password.
        if source_chain(&e).contains("password missing") {
            return PgError::Denied {
                what: what.to_string(),
                message: "the server asks for a password, and no password was given".into(),
            };
        }
        if let Some(tls) = crate::backend::tls::rustls_error(&e) {
            return PgError::Tls {
                cause: tls_hint(&tls),
            };
        }
        if source_chain(&e).contains("server does not support TLS") {
            return PgError::Tls {
                cause: "the server does not accept TLS (ssl is off in postgresql.conf), and the sslmode demands it; turn ssl on or use sslmode=prefer".into(),
            };
        }
        if e.is_closed() {
            return PgError::Closed {
                cause: one_line(&e.to_string()),
            };
        }
        PgError::Unreachable {
            cause: one_line(&source_chain(&e)),
        }
    }

    /// Worth retrying while the patience lasts.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            PgError::Unreachable { .. } | PgError::Timeout { .. } | PgError::Closed { .. }
        )
    }
}

/// What a rustls failure means to a PostgreSQL user, and the fix.
fn tls_hint(e: &rustls::Error) -> String {
    use rustls::{AlertDescription, CertificateError, Error};
    match e {
        Error::InvalidCertificate(CertificateError::UnknownIssuer | CertificateError::BadSignature) => format!(
            "the server's certificate is not signed by a CA in sslrootcert ({e}); give the CA that signed it in sslrootcert or PGSSLROOTCERT"
        ),
        Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => format!(
            "the server's certificate does not name the host we connected to ({e}); connect by a name it lists, or use sslmode=verify-ca to check only its CA"
        ),
        Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. } | CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. },
        ) => format!("the server's certificate is outside its validity period ({e}); renew it or check the clock"),
        Error::AlertReceived(AlertDescription::CertificateRequired | AlertDescription::BadCertificate | AlertDescription::UnknownCA | AlertDescription::CertificateUnknown) => format!(
            "the server refused our client certificate ({e}); give one its ssl_ca_file trusts in sslcert and sslkey (PGSSLCERT, PGSSLKEY)"
        ),
        e => format!("{e}"),
    }
}

/// The error and its causes on one line: tokio-postgres says `error
/// connecting to server` and keeps the reason (refused, no such file) in
/// its source.
fn source_chain(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        next = cause.source();
    }
    line
}

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PgError::Unreachable { cause } => write!(
                f,
                "cannot reach PostgreSQL ({cause}); check --dsn or PGHOST and PGPORT"
            ),
            PgError::Timeout { what, after } => write!(
                f,
                "PostgreSQL did not answer {what} within {}",
                humantime::format_duration(*after)
            ),
            PgError::Closed { cause } => write!(f, "our PostgreSQL connection closed ({cause})"),
            PgError::Denied { what, message } => {
                write!(f, "PostgreSQL refused {what}: {message}")
            }
            PgError::Server { what, message } => {
                write!(f, "PostgreSQL failed {what}: {message}")
            }
            PgError::Standby => write!(
                f,
                "the PostgreSQL server is a hot standby (pg_is_in_recovery()), whose advisory locks exclude nobody on the primary; point --dsn at the primary"
            ),
            PgError::Tls { cause } => write!(f, "TLS to PostgreSQL failed: {cause}"),
            PgError::LimitMismatch {
                prefix,
                ours,
                theirs,
                backend,
            } => write!(
                f,
                "semaphore `{prefix}` has limit {theirs} (a contender on backend {backend} uses it), not {ours}; use --limit {theirs} or another prefix"
            ),
            PgError::Pooler { why } => write!(
                f,
                "{why}: a connection pooler such as PgBouncer seems to stand between us and PostgreSQL, and session advisory locks do not survive its pooling; point --dsn at the server itself"
            ),
            PgError::Usage(m) | PgError::Refused(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for PgError {}

impl crate::backend::EngineError for PgError {
    fn is_transient(&self) -> bool {
        PgError::is_transient(self)
    }
}

impl From<PgError> for crate::error::Failure {
    fn from(e: PgError) -> crate::error::Failure {
        use crate::error::Failure;
        match e {
            PgError::Usage(m) => Failure::Usage(m),
            PgError::Refused(m) => Failure::Conflict(m),
            e @ PgError::LimitMismatch { .. } => Failure::Conflict(e.to_string()),
            e => Failure::Engine(e.to_string()),
        }
    }
}
