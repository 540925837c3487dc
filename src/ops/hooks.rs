//! `--on-acquire`, `--on-loss`, `--on-release`: a shell command each, run
//! under a guard of its own as COMMAND is (see `child`), with the
//! `LOCKRUN_*` environment, its output in lockrun's log.
//!
//! A hook is the whole tree it starts: a helper it leaves running (`cmd &`,
//! `nohup`, `setsid`, a double fork) is in its cgroup, or below its guard, a
//! subreaper, and gets SIGTERM when the hook's shell exits, then SIGKILL
//! after [`LEFTOVERS_GRACE`]; at `--hook-timeout`, or when lockrun stops
//! waiting for it (a loss or a signal during `--on-acquire`), all of it is
//! SIGKILLed, and the hook is over only once all of it is gone. So nothing
//! a hook started runs once the lock is given up, nor after lockrun exits;
//! a helper that should run while the lock is held belongs in COMMAND.
//!
//! Its output is read in pieces of bounded size: a line longer than
//! [`LINE_LIMIT`] is logged cut, and says so, so that a hook that writes
//! megabytes without a newline cannot grow lockrun's memory.

use std::ffi::OsString;
use std::io::Read;
use std::time::Duration;

use tokio::time::{timeout_at, Instant};

use super::OpsArgs;
use crate::child::{self, Child, ChildExit, ContainmentMode};
use crate::duration::{flag_duration, fmt_duration};
use crate::error::Failure;
use crate::signals::Signal;

/// How long what a hook left running has, after SIGTERM, before SIGKILL.
pub const LEFTOVERS_GRACE: Duration = Duration::from_secs(1);

/// The longest line of a hook's output we log whole, in bytes; the rest of
/// a longer one is dropped. lockrun's log queue holds 1024 lines, so its
/// share of memory stays near 4 MB whatever a hook writes.
pub const LINE_LIMIT: usize = 4096;

/// How much of a hook's output we read at a time.
const READ_SIZE: usize = 8192;

/// When a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Acquire,
    Loss,
    Release,
    /// The lease went unconfirmed past `--warn-before` of the deadline.
    Jeopardy,
}

impl Event {
    pub fn name(self) -> &'static str {
        match self {
            Event::Acquire => "acquire",
            Event::Loss => "loss",
            Event::Release => "release",
            Event::Jeopardy => "jeopardy",
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Event::Acquire => "--on-acquire",
            Event::Loss => "--on-loss",
            Event::Release => "--on-release",
            Event::Jeopardy => "--on-jeopardy",
        }
    }
}

/// The hooks a run was given.
#[derive(Debug, Clone, Default)]
pub struct Hooks {
    on_acquire: Option<String>,
    on_loss: Option<String>,
    on_release: Option<String>,
    on_jeopardy: Option<String>,
    timeout: Duration,
}

impl Hooks {
    pub fn new(args: &OpsArgs) -> Result<Hooks, Failure> {
        for (flag, cmd) in [
            ("--on-acquire", &args.on_acquire),
            ("--on-loss", &args.on_loss),
            ("--on-release", &args.on_release),
            ("--on-jeopardy", &args.on_jeopardy),
        ] {
            if cmd.as_deref().is_some_and(|c| c.trim().is_empty()) {
                return Err(Failure::Usage(format!(
                    "{flag} is empty; give a shell command, or leave {flag} out"
                )));
            }
        }
        if args.hook_timeout.is_zero() {
            return Err(Failure::Usage(
                "--hook-timeout 0 leaves hooks no time to run; give a duration such as 30s".into(),
            ));
        }
        Ok(Hooks {
            on_acquire: args.on_acquire.clone(),
            on_loss: args.on_loss.clone(),
            on_release: args.on_release.clone(),
            on_jeopardy: args.on_jeopardy.clone(),
            timeout: args.hook_timeout,
        })
    }

    pub fn has(&self, event: Event) -> bool {
        self.command(event).is_some()
    }

    fn command(&self, event: Event) -> Option<&str> {
        match event {
            Event::Acquire => self.on_acquire.as_deref(),
            Event::Loss => self.on_loss.as_deref(),
            Event::Release => self.on_release.as_deref(),
            Event::Jeopardy => self.on_jeopardy.as_deref(),
        }
    }

    /// Runs the hook for `event`, if any, to its end or its timeout; why it
    /// failed, if it did. `env` is added to lockrun's own environment.
    pub async fn run(
        &self,
        event: Event,
        env: &[(OsString, OsString)],
        containment: ContainmentMode,
    ) -> Result<(), String> {
        match self.start(event, env, containment)? {
            Some(mut hook) => hook.finish().await,
            None => Ok(()),
        }
    }

    /// Starts the hook for `event`, if any: [`Running::finish`] waits for
    /// it, [`Running::stop`] ends it early.
    pub fn start(
        &self,
        event: Event,
        env: &[(OsString, OsString)],
        containment: ContainmentMode,
    ) -> Result<Option<Running>, String> {
        let Some(script) = self.command(event) else {
            return Ok(None);
        };
        let flag = event.flag();
        let guard_exe = child::guard_exe().map_err(|e| {
            format!("{flag} could not start: cannot find lockrun's own executable ({e})")
        })?;
        let mut env = env.to_vec();
        env.push(("LOCKRUN_HOOK".into(), event.name().into()));
        let command = child::Command {
            argv: vec![script.into()],
            shell: true,
            env,
            env_remove: Vec::new(),
            guard_exe,
            lends: false,
            leftovers: child::Leftovers::Kill {
                signal: Signal::Term,
                grace: LEFTOVERS_GRACE,
            },
            containment: match containment {
                ContainmentMode::Auto => child::Containment::detect(),
                ContainmentMode::Subreaper => {
                    child::Containment::Subreaper("--containment subreaper".into())
                }
            },
        };
        let (child, stdout, stderr) =
            Child::spawn_piped(&command).map_err(|e| format!("{flag} could not start ({e})"))?;
        tracing::info!(hook = event.name(), pid = child.pid(), "running {flag}");
        let drained = [
            Box::new(stdout) as Box<dyn Read + Send>,
            Box::new(stderr) as Box<dyn Read + Send>,
        ]
        .into_iter()
        .map(|out| {
            let (done, drained) = tokio::sync::oneshot::channel::<()>();
            // A thread per pipe, since a hook may write much or nothing,
            // and never holds us up.
            std::thread::spawn(move || {
                let _done = done;
                relay(out, |line| {
                    // Shown by default to a daemon and with -v; at a
                    // terminal, to a one-off run too.
                    if tracing::enabled!(target: crate::logging::EVENT, tracing::Level::INFO) {
                        tracing::info!(target: crate::logging::EVENT, hook = event.name(), "{flag}: {line}")
                    } else {
                        crate::logging::note(&format!("{flag}: {line}"));
                    }
                });
            });
            drained
        })
        .collect();
        Ok(Some(Running {
            child,
            flag,
            timeout: self.timeout,
            until: Instant::now() + self.timeout,
            drained,
        }))
    }

    /// Runs a hook whose failure changes nothing but the log.
    pub async fn run_logged(
        &self,
        event: Event,
        env: &[(OsString, OsString)],
        containment: ContainmentMode,
    ) {
        let started = std::time::Instant::now();
        match self.run(event, env, containment).await {
            Ok(()) if self.has(event) => tracing::info!(
                hook = event.name(),
                "{} finished after {}",
                event.flag(),
                fmt_duration(started.elapsed())
            ),
            Ok(()) => {}
            Err(why) => tracing::warn!(hook = event.name(), "{why}"),
        }
    }
}

/// A hook that runs: its guard, and the threads that log its output.
pub struct Running {
    child: Child,
    flag: &'static str,
    timeout: Duration,
    /// When `--hook-timeout` ends it.
    until: Instant,
    /// Each closes once its pipe has been read to the end.
    drained: Vec<tokio::sync::oneshot::Receiver<()>>,
}

impl Running {
    /// Waits for the hook's whole tree to end, or SIGKILLs it at
    /// `--hook-timeout`; why it failed, if it did. Cancel-safe: call it
    /// again, or [`Running::stop`].
    pub async fn finish(&mut self) -> Result<(), String> {
        let flag = self.flag;
        let exit = match timeout_at(self.until, self.child.wait()).await {
            Ok(exit) => exit,
            Err(_) => {
                self.stop().await;
                return Err(format!(
                    "{flag} did not finish within --hook-timeout {}; all it started was killed",
                    flag_duration(self.timeout)
                ));
            }
        };
        self.last_lines().await;
        match exit {
            ChildExit::Code(0) => Ok(()),
            ChildExit::Code(code) => Err(format!("{flag} exited with status {code}")),
            ChildExit::Signal(signal) => Err(format!("{flag} was killed by signal {signal}")),
        }
    }

    /// SIGKILLs all the hook started, and returns once it is gone.
    pub async fn stop(&mut self) {
        self.child.kill().await;
        self.last_lines().await;
    }

    /// Its last lines, once its tree is gone: a moment, not longer, since
    /// a process from outside the tree may hold its pipes open.
    async fn last_lines(&mut self) {
        let drained = std::mem::take(&mut self.drained);
        let _ = tokio::time::timeout(Duration::from_millis(500), async {
            for rx in drained {
                let _ = rx.await;
            }
        })
        .await;
    }
}

/// Reads `out` to its end, handing `log` each line, lossily decoded, and
/// never more than [`LINE_LIMIT`] bytes of one: a longer line is cut there,
/// once, with a note, and the rest of it read and dropped.
fn relay(mut out: impl Read, mut log: impl FnMut(&str)) {
    let mut buf = vec![0u8; READ_SIZE];
    let mut line: Vec<u8> = Vec::new();
    // Dropping what is left of a line we cut.
    let mut cut = false;
    loop {
        let n = match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        for piece in buf[..n].split_inclusive(|byte| *byte == b'\n') {
            let (body, ends) = match piece.strip_suffix(b"\n") {
                Some(body) => (body, true),
                None => (piece, false),
            };
            if !cut {
                let room = LINE_LIMIT - line.len();
                if body.len() > room {
                    line.extend_from_slice(&body[..room]);
                    log(&format!(
                        "{} [line cut at {LINE_LIMIT} bytes]",
                        String::from_utf8_lossy(&line)
                    ));
                    line.clear();
                    cut = true;
                } else {
                    line.extend_from_slice(body);
                }
            }
            if ends {
                if !cut {
                    log(&String::from_utf8_lossy(&line));
                }
                line.clear();
                cut = false;
            }
        }
    }
    if !line.is_empty() {
        log(&String::from_utf8_lossy(&line));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relayed(input: &[u8]) -> Vec<String> {
        let mut lines = Vec::new();
        relay(input, |line| lines.push(line.to_owned()));
        lines
    }

    #[test]
    fn a_long_line_is_cut_once_and_said() {
        assert_eq!(relayed(b"a\nb\n\nc"), ["a", "b", "", "c"]);
        let mut long = vec![b'x'; LINE_LIMIT * 3 + 5];
        long.extend_from_slice(b"\nnext\n");
        let lines = relayed(&long);
        assert_eq!(
            lines.len(),
            2,
            "{:?}",
            lines.iter().map(String::len).collect::<Vec<_>>()
        );
        assert!(lines[0].starts_with(&"x".repeat(LINE_LIMIT)));
        assert!(lines[0].ends_with(&format!(" [line cut at {LINE_LIMIT} bytes]")));
        assert_eq!(
            lines[0].len(),
            LINE_LIMIT + " [line cut at 4096 bytes]".len()
        );
        assert_eq!(lines[1], "next");
        // Exactly the limit is not cut.
        let mut exact = vec![b'y'; LINE_LIMIT];
        exact.push(b'\n');
        assert_eq!(relayed(&exact), ["y".repeat(LINE_LIMIT)]);
        // Bytes that are not UTF-8 are logged, not the end of the output.
        assert_eq!(relayed(b"\xff\nok\n"), ["\u{fffd}", "ok"]);
    }
}
