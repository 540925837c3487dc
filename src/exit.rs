//! The exit-status table of SPEC §4, as one type. README and the man page
//! print the same table; a test keeps them in step with [`Exit::TABLE`].

use std::process::ExitCode;

use crate::signals::Signal;

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
    /// Asked to stop by a signal: while waiting, or while holding when the
    /// child ended of the signal we forwarded. lockrun ends by the same
    /// signal (see [`Exit::end`]), so a shell reads 128+N and a service
    /// manager sees a clean stop.
    Interrupted(Signal),
    /// The lock or slot was lost, so lockrun stopped the child.
    Lost,
    /// The job ran its `--max-time`, so lockrun stopped the child.
    TimeUp,
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
            "123",
            "the job ran its `--max-time`, so lockrun stopped the child and released",
        ),
        (
            "124",
            "the lock or slot was lost, so lockrun stopped the child",
        ),
        (
            "125",
            "lockrun itself failed: the engine unreachable, permission denied, conflict, bad config",
        ),
        ("126", "COMMAND found but not executable"),
        ("127", "COMMAND not found"),
        (
            "128+N",
            "stopped by signal N, while waiting or holding (the child ended of the signal \
             lockrun forwarded): lockrun ends by signal N itself, so a shell reads 128+N and \
             systemd a clean stop",
        ),
    ];

    pub fn code(self) -> u8 {
        match self {
            Exit::Child(code) => code,
            Exit::Success => 0,
            Exit::NotHeld => 1,
            Exit::Usage => 2,
            Exit::NotAcquired(code) => code,
            Exit::Interrupted(signal) => 128u8.saturating_add(signal.number() as u8),
            Exit::TimeUp => 123,
            Exit::Lost => 124,
            Exit::Failure => 125,
            Exit::CannotExecute => 126,
            Exit::NotFound => 127,
        }
    }
}

/// The guard's status when it failed itself (misused, or could not set
/// COMMAND up): [`Exit::Failure`]'s, as a constant the child layer can use.
pub const GUARD_FAILED: u8 = 125;

impl Exit {
    /// Ends the process the way this outcome should look to our parent. For
    /// [`Exit::Interrupted`] that is death by the signal itself, as
    /// `timeout(1)` and shells do: systemd counts a main process killed by
    /// SIGTERM, SIGINT or SIGHUP as a clean stop but an exit status of 143 as
    /// a failure. Call it last, once every line is written and every child
    /// is gone.
    pub fn end(self) -> ExitCode {
        if let Exit::Interrupted(signal) = self {
            crate::signals::die_by(signal);
        }
        self.into()
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

/// Writes to stdout, false once nobody reads it. A reader that went away
/// (`lockrun leader K | head -0`) is not our failure: like ripgrep we stop
/// writing, quietly, and the status stays what the work earned.
pub fn write_stdout(bytes: &[u8]) -> bool {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(bytes)
        .and_then(|()| stdout.flush())
        .is_ok()
}
