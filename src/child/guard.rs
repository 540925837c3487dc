//! The guard: lockrun re-executed as
//! `lockrun __guard [--go-fd N] -- COMMAND [ARGS...]`.
//!
//! `PR_SET_PDEATHSIG` reaches only a *direct* child of lockrun, and with
//! `--shell` or any COMMAND that forks, that is not enough: grandchildren
//! would outlive a SIGKILLed lockrun and keep running outside the lock. So
//! lockrun's direct child is this guard. It leads the child's process group,
//! its parent-death signal is a real-time signal nobody forwards, and its
//! handler for that signal SIGKILLs the whole group, itself included. It
//! survives the signals lockrun forwards (they are meant for COMMAND, which is
//! in the same group and gets them too), runs COMMAND, and exits with
//! COMMAND's status. It is synchronous and tiny on purpose: no runtime, no
//! threads, so nothing in it can delay or reorder that work.
//!
//! lockrun starts the guard *parked*, as `lockrun __guard --go-fd N -- ...`,
//! while it still waits for the lock: the guard sets itself up, then blocks
//! reading descriptor N until lockrun sends the go message (see `go`) with
//! the environment to add. Without a whole go message (lockrun gave up, or
//! died) it exits 125, saying nothing, having run nothing. Its parent-death
//! signal is armed while it is parked too.
//!
//! The guard does not sweep the group after COMMAND exits; lockrun does,
//! while the guard is still an unreaped zombie pinning the group id.

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::fd::RawFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitCode;

use super::{go, sys};

/// The hidden subcommand lockrun routes to [`main`].
pub const SUBCOMMAND: &str = "__guard";

/// Separates the guard's own arguments from COMMAND.
const SEPARATOR: &str = "--";

/// The guard's one option: wait for the go message on this descriptor
/// before running COMMAND. Without it the guard runs COMMAND at once.
const GO_FD: &str = "--go-fd";

/// Exit status when COMMAND was not found (as in sh, env and timeout).
const NOT_FOUND: u8 = 127;
/// Exit status when COMMAND was found but could not be executed.
const NOT_EXECUTABLE: u8 = 126;
/// Exit status when the guard itself was misused or failed.
pub(super) const GUARD_FAILED: u8 = 125;

/// The arguments that follow [`SUBCOMMAND`] to run `argv` once the go
/// message arrives on descriptor `go`.
pub(super) fn arguments(go: RawFd, argv: &[OsString]) -> impl Iterator<Item = OsString> + '_ {
    [
        OsString::from(GO_FD),
        OsString::from(go.to_string()),
        OsString::from(SEPARATOR),
    ]
    .into_iter()
    .chain(argv.iter().cloned())
}

/// The guard's entry point. `args` are the words after `__guard`:
/// `[--go-fd N] -- PROGRAM [ARGS...]`.
pub fn main(args: Vec<OsString>) -> ExitCode {
    let Some(Invocation { go, argv }) = parse(&args) else {
        say(format_args!(
            "`{SUBCOMMAND}` is for lockrun's own use: \
             lockrun {SUBCOMMAND} [{GO_FD} N] -- COMMAND [ARGS...]"
        ));
        return ExitCode::from(GUARD_FAILED);
    };

    // Handlers first: lockrun spawned us with these signals blocked, so any
    // that arrived early are pending, not fatal, and COMMAND gets them below.
    // The parent-death handler must be in place before we park, too.
    sys::guard_install_handlers();

    // Parked: lockrun may not hold the lock yet. Only a whole go message
    // lets us go on; we close the pipe before COMMAND exists, so COMMAND
    // never inherits it.
    let env = match go {
        Some(fd) => match sys::take_go_pipe(fd).ok().and_then(go::receive) {
            Some(env) => env,
            None => return ExitCode::from(GUARD_FAILED),
        },
        None => Vec::new(),
    };

    let mut command = std::process::Command::new(&argv[0]);
    command.args(&argv[1..]).envs(env);
    sys::arm_command(&mut command);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            let program = argv[0].to_string_lossy();
            say(format_args!("cannot run `{program}`: {}", reason(&err)));
            return ExitCode::from(exit_for(&err));
        }
    };
    sys::guard_relay_pending_and_unblock(child.id());

    match child.wait() {
        Ok(status) => ExitCode::from(match (status.code(), status.signal()) {
            (Some(code), _) => code as u8,
            (None, Some(signal)) => 128u8.saturating_add(signal as u8),
            (None, None) => GUARD_FAILED,
        }),
        Err(err) => {
            // We cannot tell whether COMMAND still runs; lockrun will sweep
            // the group when it sees us exit.
            say(format_args!("cannot wait for the command: {err}"));
            ExitCode::from(GUARD_FAILED)
        }
    }
}

/// The guard's arguments, understood.
struct Invocation<'a> {
    /// The go pipe's descriptor, if we are to wait for the go message.
    go: Option<RawFd>,
    /// COMMAND, never empty.
    argv: &'a [OsString],
}

fn parse(args: &[OsString]) -> Option<Invocation<'_>> {
    let (go, rest) = match args {
        [option, fd, rest @ ..] if option == GO_FD => {
            let fd = fd.to_str()?.parse::<RawFd>().ok().filter(|fd| *fd >= 0)?;
            (Some(fd), rest)
        }
        _ => (None, args),
    };
    match rest.split_first() {
        Some((separator, argv)) if separator == SEPARATOR && !argv.is_empty() => {
            Some(Invocation { go, argv })
        }
        _ => None,
    }
}

/// One line on stderr; a closed stderr is not worth failing over.
fn say(message: std::fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr(), "lockrun: {message}");
}

fn exit_for(err: &io::Error) -> u8 {
    match err.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR) => NOT_FOUND,
        _ if err.kind() == io::ErrorKind::NotFound => NOT_FOUND,
        _ => NOT_EXECUTABLE,
    }
}

/// Why exec failed, as a lowercase fragment without "(os error N)".
fn reason(err: &io::Error) -> String {
    match err.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR) => "not found".to_owned(),
        Some(libc::EACCES) => "permission denied".to_owned(),
        Some(libc::ENOEXEC) => "not in an executable format".to_owned(),
        Some(code) => {
            let desc = nix::errno::Errno::from_raw(code).desc();
            let mut chars = desc.chars();
            match chars.next() {
                Some(first) => first.to_lowercase().chain(chars).collect(),
                None => err.to_string(),
            }
        }
        None => err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_exec_errors_to_126_and_127() {
        let not_found = io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(exit_for(&not_found), 127);
        assert_eq!(reason(&not_found), "not found");
        let denied = io::Error::from_raw_os_error(libc::EACCES);
        assert_eq!(exit_for(&denied), 126);
        assert_eq!(reason(&denied), "permission denied");
        let format = io::Error::from_raw_os_error(libc::ENOEXEC);
        assert_eq!(exit_for(&format), 126);
        let busy = io::Error::from_raw_os_error(libc::ETXTBSY);
        assert_eq!(exit_for(&busy), 126);
        assert_eq!(reason(&busy), "text file busy");
    }

    #[test]
    fn takes_command_after_the_separator() {
        let args = |words: &[&str]| words.iter().map(OsString::from).collect::<Vec<_>>();
        let argv = |words: &[&str]| parse(&args(words)).map(|i| (i.go, i.argv.to_vec()));
        assert_eq!(argv(&[]), None);
        assert_eq!(argv(&["--"]), None);
        assert_eq!(argv(&["true"]), None);
        assert_eq!(argv(&["--", "a", "--"]), Some((None, args(&["a", "--"]))));
        assert_eq!(
            argv(&["--go-fd", "7", "--", "a", "--go-fd"]),
            Some((Some(7), args(&["a", "--go-fd"])))
        );
        assert_eq!(argv(&["--go-fd", "7", "--"]), None);
        assert_eq!(argv(&["--go-fd", "-1", "--", "a"]), None);
        assert_eq!(argv(&["--go-fd", "x", "--", "a"]), None);
        assert_eq!(argv(&["--go-fd", "--", "a"]), None);
        let built: Vec<OsString> = arguments(4, &args(&["a", "b"])).collect();
        assert_eq!(built, args(&["--go-fd", "4", "--", "a", "b"]));
        assert_eq!(argv(&["--go-fd", "4", "--", "a", "b"]).unwrap().0, Some(4));
    }
}
