//! The local engine's errors and the exit statuses they map to.

use std::fmt;
use std::io;

/// What kind of failure, for the exit status the CLI gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A bad key or prefix.
    Usage,
    /// The lock directory is unusable.
    Dir,
    /// The semaphore's stored limit differs from ours.
    LimitMismatch,
    /// `release` cannot ask this holder to let go.
    Refused,
    /// The filesystem failed us.
    Io,
}

/// A failure of the local backend, as one line for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalError {
    pub kind: Kind,
    message: String,
}

impl LocalError {
    pub fn usage(message: String) -> LocalError {
        LocalError {
            kind: Kind::Usage,
            message,
        }
    }
    pub fn dir(message: String) -> LocalError {
        LocalError {
            kind: Kind::Dir,
            message,
        }
    }
    pub fn io(what: String, e: io::Error) -> LocalError {
        LocalError::io_msg(format!("{what}: {e}"))
    }
    pub fn io_msg(message: String) -> LocalError {
        LocalError {
            kind: Kind::Io,
            message,
        }
    }
    pub(super) fn new(kind: Kind, message: String) -> LocalError {
        LocalError { kind, message }
    }
}

impl fmt::Display for LocalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for LocalError {}

impl crate::backend::EngineError for LocalError {
    fn is_transient(&self) -> bool {
        false
    }
}

impl From<LocalError> for crate::error::Failure {
    fn from(e: LocalError) -> crate::error::Failure {
        use crate::error::Failure;
        match e.kind {
            Kind::Usage => Failure::Usage(e.message),
            Kind::Dir => Failure::Config(e.message),
            Kind::LimitMismatch | Kind::Refused => Failure::Conflict(e.message),
            Kind::Io => Failure::Engine(e.message),
        }
    }
}
