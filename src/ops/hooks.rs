//! `--on-acquire`, `--on-loss`, `--on-release`: a shell command each, run
//! in its own process group with the `LOCKRUN_*` environment, its output
//! in lockrun's log, its whole group killed at `--hook-timeout`.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::OpsArgs;
use crate::duration::{flag_duration, fmt_duration};
use crate::error::Failure;

/// A hook's process group, killed when dropped unless it has ended.
struct Group(Option<Pid>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

/// When a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Acquire,
    Loss,
    Release,
}

impl Event {
    pub fn name(self) -> &'static str {
        match self {
            Event::Acquire => "acquire",
            Event::Loss => "loss",
            Event::Release => "release",
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Event::Acquire => "--on-acquire",
            Event::Loss => "--on-loss",
            Event::Release => "--on-release",
        }
    }
}

/// The hooks a run was given.
#[derive(Debug, Clone, Default)]
pub struct Hooks {
    on_acquire: Option<String>,
    on_loss: Option<String>,
    on_release: Option<String>,
    timeout: Duration,
}

impl Hooks {
    pub fn new(args: &OpsArgs) -> Result<Hooks, Failure> {
        for (flag, cmd) in [
            ("--on-acquire", &args.on_acquire),
            ("--on-loss", &args.on_loss),
            ("--on-release", &args.on_release),
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
        }
    }

    /// Runs the hook for `event`, if any, to its end or its timeout; why it
    /// failed, if it did. `env` is added to lockrun's own environment.
    pub async fn run(&self, event: Event, env: &[(OsString, OsString)]) -> Result<(), String> {
        let Some(script) = self.command(event) else {
            return Ok(());
        };
        let flag = event.flag();
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(script)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env("LOCKRUN_HOOK", event.name())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so that a timeout ends whatever it started.
            .process_group(0);
        let mut child = command
            .spawn()
            .map_err(|e| format!("{flag} could not start `sh` ({e})"))?;
        let pgid = Pid::from_raw(child.id() as i32);
        tracing::info!(hook = event.name(), pid = child.id(), "running {flag}");
        let mut drained = Vec::new();
        for out in [
            child
                .stdout
                .take()
                .map(|o| Box::new(o) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|e| Box::new(e) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let name = event.name();
            let (done, drained_rx) = tokio::sync::oneshot::channel::<()>();
            drained.push(drained_rx);
            // Output goes to our log line by line; a thread per pipe, since
            // a hook may write much or nothing, and never holds us up.
            std::thread::spawn(move || {
                let _done = done;
                for line in BufReader::new(out).lines() {
                    match line {
                        Ok(line) => {
                            tracing::info!(target: crate::logging::EVENT, hook = name, "{flag}: {line}")
                        }
                        Err(_) => break,
                    }
                }
            });
        }
        // Killed with its group if we stop waiting for it (a loss or a
        // signal while `--on-acquire` runs).
        let mut group = Group(Some(pgid));
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        // Its last lines, once it has ended: a moment, not longer, since
        // what it left running may hold the pipes open.
        let last_lines = async {
            let _ = tokio::time::timeout(Duration::from_millis(500), async {
                for rx in drained {
                    let _ = rx.await;
                }
            })
            .await;
        };
        let status = match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(Ok(status))) => {
                group.0 = None;
                last_lines.await;
                status
            }
            Ok(_) => return Err(format!("{flag} could not be waited for")),
            Err(_) => {
                drop(group);
                last_lines.await;
                return Err(format!(
                    "{flag} did not finish within --hook-timeout {}; its process group was killed",
                    flag_duration(self.timeout)
                ));
            }
        };
        if status.success() {
            return Ok(());
        }
        Err(match (status.code(), status.signal()) {
            (Some(code), _) => format!("{flag} exited with status {code}"),
            (None, Some(signal)) => format!("{flag} was killed by signal {signal}"),
            _ => format!("{flag} failed ({status})"),
        })
    }

    /// Runs a hook whose failure changes nothing but the log.
    pub async fn run_logged(&self, event: Event, env: &[(OsString, OsString)]) {
        let started = std::time::Instant::now();
        match self.run(event, env).await {
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
