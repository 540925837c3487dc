//! Failures the user sees, each as one line, each with its exit status.

use std::fmt;

use crate::backend::consul::lock::AcquireError;
use crate::backend::consul::ConsulError;
use crate::exit::Exit;

#[derive(Debug)]
pub enum Failure {
    /// A bad flag or argument.
    Usage(String),
    /// Bad configuration from the environment or files.
    Config(String),
    /// COMMAND was not found.
    CommandNotFound(String),
    /// COMMAND was found but cannot be executed.
    CommandNotExecutable(String),
    /// Consul refused, failed or could not be reached.
    Consul(ConsulError),
    /// The key or prefix is in use in an incompatible way.
    Conflict(String),
    /// Something else failed in lockrun itself (spawning, the runtime).
    Internal(String),
}

impl Failure {
    /// The exit status; exhaustive on purpose, so a new kind of failure
    /// cannot go unclassified.
    pub fn exit(&self) -> Exit {
        match self {
            Failure::Usage(_) => Exit::Usage,
            Failure::Config(_) => Exit::Failure,
            Failure::CommandNotFound(_) => Exit::NotFound,
            Failure::CommandNotExecutable(_) => Exit::CannotExecute,
            Failure::Consul(_) => Exit::Failure,
            Failure::Conflict(_) => Exit::Failure,
            Failure::Internal(_) => Exit::Failure,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(m)
            | Failure::Config(m)
            | Failure::CommandNotFound(m)
            | Failure::CommandNotExecutable(m)
            | Failure::Conflict(m)
            | Failure::Internal(m) => f.write_str(m),
            Failure::Consul(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Failure {}

impl From<ConsulError> for Failure {
    fn from(e: ConsulError) -> Failure {
        Failure::Consul(e)
    }
}

impl From<AcquireError> for Failure {
    fn from(e: AcquireError) -> Failure {
        match e {
            AcquireError::Consul(e) => Failure::Consul(e),
            AcquireError::Conflict(m) => Failure::Conflict(m),
        }
    }
}
