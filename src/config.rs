//! The hold settings every backend shares (waiting, the command, its
//! grace period), validated into a [`HoldConfig`] before the first request:
//! nothing reaches an engine with a bad input. Each backend checks its own
//! settings in its folder (its `hold_rules`); flags beat environment
//! variables, which beat defaults.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::ValueEnum;

use crate::backend::registry::Pick;
use crate::backend::timing::Budget;
#[cfg(doc)]
use crate::backend::Registration;
use crate::backend::{Backend, BackendName, HoldRequest, Wait, BACKENDS};
pub use crate::backend::{Env, Kind, ProcessEnv, LEADER, SEMAPHORE};
use crate::cli::{ChildArgs, SessionArgs, WaitArgs};
use crate::error::Failure;
pub use crate::host::{hostname, io_reason};
use crate::signals::Signal;

/// The validated options of `elect` and `semaphore`, for the hold loop.
#[derive(Debug, Clone)]
pub struct HoldConfig {
    /// The countdown's arithmetic; `None` on an engine whose lease cannot
    /// run out (`local`).
    pub budget: Option<Budget>,
    /// How long to wait for the lock, before the clock starts.
    pub waiting: Wait<Duration>,
    pub conflict_exit_code: u8,
    pub value: String,
    pub child: ChildConfig,
}

impl HoldConfig {
    /// `--timeout` as a deadline from now.
    pub fn deadline(&self) -> Wait {
        self.waiting.from_now()
    }

    /// The grace period when the engine reports the lock lost: what the
    /// budget leaves (the lock-delay on Consul), none without a budget —
    /// the lock file was replaced, and nothing keeps a rival out.
    pub fn loss_grace(&self) -> Duration {
        self.budget.map_or(Duration::ZERO, |b| b.loss_grace())
    }
}

#[derive(Debug, Clone)]
pub struct ChildConfig {
    pub argv: Vec<OsString>,
    pub shell: bool,
    pub kill_signal: Signal,
    pub kill_timeout: Duration,
    /// `--max-time`: how long the job may run.
    pub max_time: Option<Duration>,
    pub leftovers: crate::child::LeftoversMode,
    pub containment: crate::child::ContainmentMode,
}

/// The one line for the first variable that says where the locks are
/// and is set but empty: `LOCKRUN_BACKEND`, or one a backend names in its
/// [`Registration::empty_is_an_error`]. Empty, each would silently pick
/// another lock space (the agent on 127.0.0.1:8500, the default
/// namespace, the default lock directory), and a lock taken there excludes
/// nobody; so an empty one is a usage error, whichever backend is in use.
/// lockrun's own variables are named first, then the engines' tools'.
pub fn empty_variable(is_set_empty: impl Fn(&str) -> bool) -> Option<String> {
    let backends = BackendName::listed(BackendName::value_variants(), "or");
    let mut all = vec![("LOCKRUN_BACKEND", backends.as_str())];
    all.extend(
        BACKENDS
            .iter()
            .flat_map(|b| b.empty_is_an_error.iter().copied()),
    );
    all.sort_by_key(|(name, _)| !name.starts_with("LOCKRUN_"));
    all.into_iter()
        .find(|(name, _)| is_set_empty(name))
        .map(|(name, what)| {
            format!("{name} is set but empty; set it to {what}, or unset it for the default")
        })
}

/// Options shared by `elect` and `semaphore`, and the plan backend `B`'s
/// rules made of its own.
pub fn hold<B: Backend>(
    pick: &Pick<B>,
    kind: Kind,
    key: &str,
    session: &SessionArgs,
    wait: &WaitArgs,
    child: &ChildArgs,
    env: &dyn Env,
) -> Result<(HoldConfig, B::Plan), Failure> {
    if kind.priority.asked {
        if !B::PRIORITY {
            return Err(Failure::Usage(format!(
                "--priority and --priority-grace need waiters that publish their priority, and the {} backend's do not; drop them",
                B::NAME
            )));
        }
        if kind.shared {
            return Err(Failure::Usage(
                "--priority ranks writers waiting for an exclusive lock, and -s takes it shared; drop one of them".into(),
            ));
        }
    }
    let request = HoldRequest {
        kind,
        key,
        ttl: session.ttl,
        rate_error: session.clock_rate_error,
        kill_timeout: child.kill_timeout,
        flags: (pick.hold)(&session.backend),
    };
    let rules = B::hold_rules(&request, env)?;
    let value = child.value.clone().unwrap_or_else(hostname);
    check_value(&value)?;
    let config = assemble(rules.budget, rules.kill_timeout, value, wait, child, env)?;
    Ok((config, rules.plan))
}

/// The value a holder stores is printed by `leader` one holder a line: a
/// newline in it would show as another holder, and any other control
/// character would reach the terminal of whoever looks.
fn check_value(value: &str) -> Result<(), Failure> {
    match value.chars().find(|c| c.is_control()) {
        Some(c) => Err(Failure::Usage(format!(
            "--value `{}` contains U+{:04X}, a control character, which `lockrun leader` would print as is; use printable characters only",
            value.escape_debug(),
            c as u32
        ))),
        None => Ok(()),
    }
}

/// The hold loop's options, once the engine's own are checked; COMMAND is
/// looked up last, so a typo costs no request.
fn assemble(
    budget: Option<Budget>,
    kill_timeout: Duration,
    value: String,
    wait: &WaitArgs,
    child: &ChildArgs,
    env: &dyn Env,
) -> Result<HoldConfig, Failure> {
    let child_config = ChildConfig {
        argv: child.command.clone(),
        shell: child.shell,
        kill_signal: child.kill_signal,
        kill_timeout,
        max_time: child.max_time,
        leftovers: child.leftovers,
        containment: child.containment,
    };
    check_command(&child_config, env)?;
    Ok(HoldConfig {
        budget,
        waiting: match (wait.no_wait, wait.timeout) {
            (true, _) => Wait::Once,
            (false, Some(timeout)) => Wait::Until(timeout),
            (false, None) => Wait::Forever,
        },
        conflict_exit_code: wait.conflict_exit_code,
        value,
        child: child_config,
    })
}

/// Finds COMMAND before anything is written to an engine, so a typo costs no
/// lock and gets the status `env`, `timeout` and shells use (127 or 126).
fn check_command(child: &ChildConfig, env: &dyn Env) -> Result<(), Failure> {
    let Some(program) = child.argv.first() else {
        return Err(Failure::Usage(
            "no COMMAND given; put it after `--`, e.g. `lockrun elect KEY -- ./job`".into(),
        ));
    };
    if program.is_empty() {
        return Err(Failure::Usage(
            "COMMAND is empty; put the program after `--`".into(),
        ));
    }
    if child.shell {
        return Ok(());
    }
    let shown = program.to_string_lossy();
    // The search execvp makes with the PATH the child inherits: glibc's
    // default when it is unset, and an empty entry (or an empty PATH) is
    // the working directory.
    let candidates: Vec<PathBuf> = if shown.contains('/') {
        vec![PathBuf::from(program)]
    } else {
        let path = env.path().unwrap_or_else(|| "/bin:/usr/bin".into());
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .collect()
    };
    let mut found_unexecutable = None;
    for candidate in candidates {
        match std::fs::metadata(&candidate) {
            Ok(meta) if meta.is_file() => {
                if is_executable(&candidate) {
                    return check_format(&shown, &candidate);
                }
                found_unexecutable.get_or_insert(candidate);
            }
            Ok(_) => {
                found_unexecutable.get_or_insert(candidate);
            }
            Err(_) => {}
        }
    }
    match found_unexecutable {
        Some(path) => Err(Failure::CommandNotExecutable(format!(
            "cannot run `{shown}`: `{}` is not an executable file; check its permissions (chmod +x)",
            path.display()
        ))),
        // One word holding spaces or shell syntax was meant for a shell.
        None if child.argv.len() == 1 && shown.contains(|c: char| c.is_whitespace() || "&|;<>$`()*?".contains(c)) => {
            Err(Failure::CommandNotFound(format!(
                "cannot run `{shown}`: no program has that name, and it reads as a shell command line; add --shell to run it with /bin/sh -c, or give the program and its arguments as separate words after `--`"
            )))
        }
        None => Err(Failure::CommandNotFound(format!(
            "cannot run `{shown}`: command not found; check the name and PATH"
        ))),
    }
}

/// What the kernel would say when executing `path`: a script whose `#!`
/// interpreter is missing fails as "not found" (127), and a file in no
/// executable format fails with ENOEXEC (126), which execvp would hide by
/// handing the file to /bin/sh. A file we cannot read, or a machine with
/// binfmt_misc handlers that may know the format, is left to exec.
fn check_format(shown: &str, path: &Path) -> Result<(), Failure> {
    use std::io::Read;
    let mut head = [0u8; 256];
    // Non-blocking: an executable FIFO at the path must not hang us here.
    let opened = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
    };
    let regular = opened.and_then(|f| {
        if f.metadata()?.is_file() {
            Ok(f)
        } else {
            Err(std::io::Error::other("not a regular file"))
        }
    });
    let Ok(len) = regular.and_then(|mut f| f.read(&mut head)) else {
        return Ok(());
    };
    let head = &head[..len];
    if head.starts_with(b"\x7fELF") {
        return Ok(());
    }
    if let Some(line) = head.strip_prefix(b"#!") {
        let line = line.split(|&b| b == b'\n').next().unwrap_or_default();
        let interpreter = String::from_utf8_lossy(line);
        let Some(interpreter) = interpreter.split([' ', '\t']).find(|w| !w.is_empty()) else {
            return Err(Failure::CommandNotExecutable(format!(
                "cannot run `{shown}`: its `#!` line names no interpreter; write one, e.g. `#!/bin/sh`"
            )));
        };
        return match std::fs::metadata(interpreter) {
            Err(_) => Err(Failure::CommandNotFound(format!(
                "cannot run `{shown}`: its interpreter `{interpreter}` is missing; install it or fix the `#!` line"
            ))),
            Ok(meta) if !meta.is_file() || !is_executable(Path::new(interpreter)) => {
                Err(Failure::CommandNotExecutable(format!(
                    "cannot run `{shown}`: its interpreter `{interpreter}` is not an executable file; fix the `#!` line"
                )))
            }
            Ok(_) => Ok(()),
        };
    }
    if binfmt_misc_handlers() {
        return Ok(());
    }
    Err(Failure::CommandNotExecutable(format!(
        "cannot run `{shown}`: `{}` is not in an executable format; give a script a `#!` line, or use --shell",
        path.display()
    )))
}

/// Whether the kernel has extra binary formats registered (Java, Wine,
/// QEMU...), any of which might run a file we do not recognise.
fn binfmt_misc_handlers() -> bool {
    std::fs::read_dir("/proc/sys/fs/binfmt_misc").is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.file_name() != "register" && e.file_name() != "status")
    })
}

fn is_executable(path: &Path) -> bool {
    nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order the backends' lists give: lockrun's own variables first
    /// (`LOCKRUN_BACKEND`, then the backends' own such as a lock
    /// directory's), then the engines' tools', in the order of `BACKENDS`.
    #[test]
    fn the_first_empty_variable_is_named_in_the_registrations_order() {
        let theirs = || {
            BACKENDS
                .iter()
                .flat_map(|b| b.empty_is_an_error.iter().map(|(name, _)| *name))
        };
        let mut order = vec!["LOCKRUN_BACKEND"];
        order.extend(theirs().filter(|n| n.starts_with("LOCKRUN_")));
        order.extend(theirs().filter(|n| !n.starts_with("LOCKRUN_")));
        for (i, first) in order.iter().enumerate() {
            let empty = &order[i..];
            let line = empty_variable(|name| empty.contains(&name)).unwrap();
            assert!(
                line.starts_with(&format!("{first} is set but empty")),
                "{line}"
            );
        }
        // A variable that counts as unset when empty is never the one named.
        for backend in BACKENDS {
            for (name, _) in backend.empty_is_unset {
                assert_eq!(empty_variable(|n| n == *name), None, "{name}");
            }
        }
    }

    /// The backends' names come from `BackendName`: every one is offered.
    #[test]
    fn an_empty_backend_variable_lists_every_backend() {
        use clap::ValueEnum;
        let line = empty_variable(|name| name == "LOCKRUN_BACKEND").unwrap();
        assert!(
            line.starts_with("LOCKRUN_BACKEND is set but empty; set it to ")
                && line.ends_with(", or unset it for the default"),
            "{line}"
        );
        for name in BackendName::value_variants() {
            assert!(
                line.contains(&format!(" {name}")),
                "{name} is not offered: {line}"
            );
        }
    }
}
