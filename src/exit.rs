//! The exit-status table of SPEC §4, as one type. README and the man page
//! print the same table; a test keeps them in step with [`Exit::TABLE`].

use std::process::ExitCode;

/// Every way lockrun can end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The child ran and exited by itself: its status (128+N for signal N).
    Child(u8),
    /// Plain success of a command that runs no child (`leader`, `release`).
    Success,
    /// `leader`: no holder; `release`: nothing to release.
    NotHeld,
    /// The command line or configuration is wrong.
    Usage,
    /// Not acquired: `--no-wait` or `--timeout` ran out. The status can be
    /// changed with `--conflict-exit-code`, as with `flock -E`.
    NotAcquired(u8),
    /// Interrupted by signal N while waiting for the lock: 128+N.
    Interrupted(u8),
    /// The lock or slot was lost, so lockrun stopped the child.
    Lost,
    /// lockrun itself failed (Consul unreachable, permission denied, conflict).
    Failure,
    /// COMMAND was found but could not be executed.
    CannotExecute,
    /// COMMAND was not found.
    NotFound,
}

impl Exit {
    pub const NOT_ACQUIRED: u8 = 75;

    /// The table as documented: status, meaning.
    pub const TABLE: &'static [(&'static str, &'static str)] = &[
        (
            "child's status",
            "the child ran and exited by itself (128+N if killed by signal N)",
        ),
        ("0", "`leader`: a holder exists; `release`: released"),
        ("1", "`leader`: no holder; `release`: nothing to release"),
        ("2", "usage error"),
        (
            "75",
            "not acquired: `--no-wait` or `--timeout` ran out (change with `--conflict-exit-code`)",
        ),
        (
            "124",
            "the lock or slot was lost, so lockrun stopped the child",
        ),
        (
            "125",
            "lockrun itself failed: Consul unreachable, permission denied, conflict, bad config",
        ),
        ("126", "COMMAND found but not executable"),
        ("127", "COMMAND not found"),
        (
            "128+N",
            "interrupted by signal N while waiting for the lock",
        ),
    ];

    pub fn code(self) -> u8 {
        match self {
            Exit::Child(code) => code,
            Exit::Success => 0,
            Exit::NotHeld => 1,
            Exit::Usage => 2,
            Exit::NotAcquired(code) => code,
            Exit::Interrupted(code) => code,
            Exit::Lost => 124,
            Exit::Failure => 125,
            Exit::CannotExecute => 126,
            Exit::NotFound => 127,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}
