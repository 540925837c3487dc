//! Job control for an interactive run: Ctrl-Z stops the job and gives the
//! shell its terminal back, `fg` and `bg` resume it, and the lock stays held
//! meanwhile, as a stopped `flock` job keeps its lock.
//!
//! The problem. An interactive child gets the terminal's foreground for its
//! own process group (see `child::terminal`), so Ctrl-Z stops the child's
//! group and nothing else. lockrun, the process the shell started, keeps
//! running, so the shell never sees its job stop and never takes the
//! terminal back, and Ctrl-C and Ctrl-\ go to the stopped group: the
//! terminal is wedged. Letting lockrun stop with the child is no answer
//! either: a stopped lockrun renews nothing, and the lock is lost.
//!
//! The design. When lockrun starts interactive (stdin is a terminal whose
//! foreground group is lockrun's own), [`split`] forks it in two, first
//! thing in `main`, before any runtime or thread exists:
//!
//! - the *front*, the process the shell started, stays in the shell's job
//!   and does nothing but stand in for the job: it relays every signal it
//!   gets to the worker (the shell's `kill %1` and the terminal's Ctrl-C
//!   while lockrun waits reach the job's group alone), stops itself when the
//!   worker says the child stopped, tells the worker when it is continued,
//!   and ends the way the worker ended: its exit status, or death by the
//!   same signal, so shells and service managers see what they saw before;
//! - the *worker*, in a process group of its own, is lockrun as before:
//!   renewals, the child, the terminal hand-off. Being outside the terminal's
//!   foreground group, it keeps SIGTTOU blocked for its whole life, so that
//!   its terminal calls and log lines are not stopped by the kernel (the
//!   rules are in `child::terminal`).
//!
//! The dance. The child's group stops (Ctrl-Z, or a read of the terminal
//! from the background): the guard, which leads that group, stops with it,
//! and the worker learns it from SIGCHLD and `waitid(WSTOPPED)`. It takes
//! the terminal back for the front's group if the child's group still has
//! it, and writes the stop signal to the front, which stops itself with the
//! same signal: the shell sees its job stopped (and prints `Stopped`, or
//! `Stopped (tty input)`), takes the terminal and saves its modes. The
//! worker goes on renewing. `fg` gives the front's group the terminal, then
//! SIGCONT; `bg` only the SIGCONT. The front tells the worker it was
//! continued, and the worker gives the terminal to the child's group if the
//! front's group has it (that was `fg`), then sends the child's group
//! SIGCONT. A child that started while the job was stopped gets the
//! terminal this way at the first `fg`.
//!
//! Why a separate process rather than a stopped lockrun with a live thread:
//! a stopped process stops all its threads. Why not the worker in the
//! job's group: the shell's `kill -STOP %1` would stop it, and the terminal
//! would send it the Ctrl-C meant for the job while it waits, twice over
//! with the front's relay.
//!
//! The edges:
//! - The front SIGKILLed (`kill -9 %1`): the worker's parent-death signal is
//!   SIGTERM, which it answers as it answers a user's SIGTERM, by stopping
//!   the child with the stop ladder and releasing the lock. A SIGKILL would
//!   leave the child to the guard's own parent-death kill and the lock to
//!   the session's TTL; nobody waits for the worker's status any more, but
//!   a clean release is still worth having.
//! - A terminal hang-up: the kernel and the shell send SIGHUP (and SIGCONT
//!   to a stopped job) to the job's group, the front relays it, and the
//!   worker forwards it to the child as before.
//! - A signal for a stopped job (`kill %1`): the front relays it, and the
//!   worker continues a stopped child after any signal that ends processes
//!   by default, as shells do, so that the child can act on it.
//! - `kill -STOP %1` stops the front alone; the child runs on until `fg`.
//!   Nothing can relay SIGSTOP.
//! - While the job is stopped, the guard is stopped too and reads none of
//!   the deadlines the worker sends it after each renewal; the pipe holds
//!   thousands of them (hours of renewals at the default TTL). Past that the
//!   worker's writes fail, and on `fg` the guard acts on the last deadline
//!   it can read, which may have passed: it stops the child. That errs on
//!   the side of the lock.
//! - A run that is not interactive (cron, systemd, pipes) does not fork at
//!   all, nor does a subcommand that runs no child, nor a lockrun that
//!   cannot fork: lockrun then runs whole, as it always has.

mod sys;

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::process::ExitCode;
use std::sync::OnceLock;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal as NixSignal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{getpgrp, getppid, isatty, pipe2, setpgid, tcgetpgrp, ForkResult, Pid};

use crate::signals::Signal;

/// The worker's end of the link to its front, set once by [`split`].
struct Link {
    front: Pid,
    /// The job's process group: the front's, the one the shell knows.
    group: Pid,
    to_front: OwnedFd,
}

static WORKER: OnceLock<Link> = OnceLock::new();

/// Splits an interactive lockrun into front and worker (see the module
/// docs). Returns `None` in the worker, and in a lockrun that is not
/// interactive or cannot split, which then goes on as lockrun; returns the
/// exit status in the front, which has nothing left to do but return it
/// (if the worker died by a signal, the front has died by it already).
///
/// Call it first thing in `main`, while the process has a single thread.
pub fn split(args: &[std::ffi::OsString]) -> Option<ExitCode> {
    if !runs_a_command(args) || !interactive() {
        return None;
    }
    let cloexec = OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    let (front_reads, worker_writes) = pipe2(cloexec).ok()?;
    let front = Pid::this();
    let group = getpgrp();
    // What the front listens for is blocked before the fork, so that
    // nothing of it comes and goes before the front's signalfd exists. A
    // worker that ends at once (a usage error) must not end unnoticed:
    // SIGCHLD is ignored by default. And a Ctrl-Z can stop the front
    // before it listens: the `fg` that follows sends SIGCONT, which would
    // continue the front and vanish, unrelayed, and the worker would never
    // hear that the job was continued (the job hung, stopped, after `fg`).
    let mut listened = SigSet::empty();
    for sig in relayed() {
        listened.add(sig);
    }
    listened.add(NixSignal::SIGCHLD);
    let mut before = SigSet::empty();
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&listened), Some(&mut before))
        .ok()?;
    let forked = sys::fork();
    if !matches!(forked, Ok(ForkResult::Parent { .. })) {
        // The worker, or lockrun whole: its runtime listens for these.
        let _ = before.thread_set_mask();
    }
    match forked.ok()? {
        ForkResult::Child => {
            drop(front_reads);
            become_worker(Link {
                front,
                group,
                to_front: worker_writes,
            });
            None
        }
        ForkResult::Parent { child } => {
            drop(worker_writes);
            // As shells do, both sides move the worker, so that no signal
            // from the terminal reaches it in the job's group whichever
            // runs first.
            let _ = setpgid(child, child);
            Some(Front::new(child, front_reads).run())
        }
    }
}

/// Whether the command line may be `elect` or `semaphore`, which run a
/// child. The others (`leader --watch` among them) stop whole at Ctrl-Z, as
/// before, which is what a user pausing their output wants; split, they
/// would go on writing to the terminal from the background. We look before
/// clap does, so we err on the side of splitting: a word `elect` or
/// `semaphore` anywhere before `--` will do.
fn runs_a_command(args: &[std::ffi::OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|arg| *arg != "--")
        .any(|arg| arg == "elect" || arg == "semaphore")
}

/// stdin is a terminal and our group is its foreground group: the case in
/// which the child gets the terminal, and Ctrl-Z would wedge it.
fn interactive() -> bool {
    let stdin = io::stdin();
    isatty(stdin.as_fd()).unwrap_or(false) && tcgetpgrp(stdin.as_fd()) == Ok(getpgrp())
}

fn become_worker(link: Link) {
    let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
    // Outside the foreground group for good: see `child::terminal`. Only the
    // guard is spawned from here on, and it sets its own mask.
    let mut ttou = SigSet::empty();
    ttou.add(NixSignal::SIGTTOU);
    let _ = ttou.thread_block();
    // A front that died before the prctl would send nothing: we act as if
    // it had. SIGTERM is held back until lockrun's handlers exist
    // (`signals::hold_until_handled`), so it waits for them, pending.
    let armed = nix::sys::prctl::set_pdeathsig(NixSignal::SIGTERM).is_ok();
    if !armed || getppid() != link.front {
        let _ = kill(Pid::this(), NixSignal::SIGTERM);
    }
    let _ = WORKER.set(link);
}

/// In the worker: the job's process group, to which the terminal belongs
/// when the job is in the foreground. `None` in a lockrun that did not
/// split.
pub(crate) fn job_group() -> Option<Pid> {
    WORKER.get().map(|link| link.group)
}

/// In the worker, for the child that runs: the front's word that the job
/// was continued, and the way to tell the front the child stopped.
///
/// The front passes SIGCONT on as it gets it, a signal rather than a
/// message: the worker's runtime already listens to signals, and a SIGCONT
/// from anyone else only makes us look at the terminal and continue a
/// child's group that may not be stopped, which changes nothing.
pub(crate) struct Watch {
    continues: tokio::signal::unix::Signal,
}

impl Watch {
    /// `None` in a lockrun that did not split. Call it on the runtime.
    pub(crate) fn new() -> Option<io::Result<Watch>> {
        WORKER.get()?;
        let kind = tokio::signal::unix::SignalKind::from_raw(libc::SIGCONT);
        Some(tokio::signal::unix::signal(kind).map(|continues| Watch { continues }))
    }

    /// Resolves once the job has been continued since the last call.
    /// Cancel-safe.
    pub(crate) async fn continued(&mut self) {
        if self.continues.recv().await.is_none() {
            // The runtime's signal driver is gone: nothing will poll us.
            std::future::pending::<()>().await;
        }
    }

    /// The child's group stopped by `signal`: the front stops with the same
    /// signal, so the shell sees its job stop. A front stopped already (the
    /// job was stopped while lockrun waited) is left alone, or it would stop
    /// again after its `fg`.
    pub(crate) fn report_stop(&self, signal: i32) {
        let Some(link) = WORKER.get() else {
            return;
        };
        if is_stopped(link.front) {
            return;
        }
        let Ok(byte) = u8::try_from(signal) else {
            return;
        };
        if let Err(err) = write_fd(&link.to_front, &[byte]) {
            tracing::debug!("cannot tell lockrun's front process the child stopped: {err}");
        }
    }
}

/// In the worker: whether the job is stopped, or about to be: the front is
/// stopped, or has a stop signal pending that it has not acted on yet (a
/// Ctrl-Z that reached the job's group an instant ago). A child about to
/// start must then start stopped, or it would run while the shell shows
/// the job stopped. False in a lockrun that did not split.
pub(crate) fn job_stopping() -> bool {
    let Some(link) = WORKER.get() else {
        return false;
    };
    let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", link.front)) else {
        return false;
    };
    let stops = [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU, libc::SIGSTOP]
        .into_iter()
        .fold(0u64, |mask, sig| mask | 1 << (sig - 1));
    status.lines().any(|line| match line.split_once(':') {
        Some(("State", value)) => value.trim_start().starts_with('T'),
        Some(("SigPnd" | "ShdPnd", value)) => {
            u64::from_str_radix(value.trim(), 16).is_ok_and(|pending| pending & stops != 0)
        }
        _ => false,
    })
}

/// Whether process `pid` is stopped, from its state in /proc.
fn is_stopped(pid: Pid) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which may itself hold ") ".
    stat.rsplit_once(") ")
        .is_some_and(|(_, rest)| rest.starts_with('T'))
}

fn write_fd(fd: &OwnedFd, buf: &[u8]) -> io::Result<usize> {
    Ok(nix::unistd::write(fd, buf)?)
}

/// The signals the front relays: every one lockrun names that can be
/// caught, and SIGCONT, which tells the worker the job was continued.
/// SIGTSTP, SIGTTIN and SIGTTOU are not: they stop the front itself, which
/// is what the job's stop means while lockrun still waits (see [`Watch`]
/// for what happens once a child runs).
fn relayed() -> impl Iterator<Item = NixSignal> {
    Signal::ALL
        .into_iter()
        .filter(|sig| *sig != Signal::Kill)
        .filter_map(|sig| NixSignal::try_from(sig.number()).ok())
        .chain([NixSignal::SIGCONT])
}

/// The process the shell started, standing in for the job.
struct Front {
    worker: Pid,
    from_worker: OwnedFd,
}

impl Front {
    fn new(worker: Pid, from_worker: OwnedFd) -> Front {
        Front {
            worker,
            from_worker,
        }
    }

    fn run(self) -> ExitCode {
        let mut watched = SigSet::empty();
        for sig in relayed() {
            watched.add(sig);
        }
        watched.add(NixSignal::SIGCHLD);
        let signals = watched.thread_block().and_then(|()| {
            SignalFd::with_flags(&watched, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        });
        let Ok(signals) = signals else {
            // Without a signalfd we cannot relay; we still stand in for the
            // worker's status.
            return self.wait_blocking();
        };
        // The worker may have ended before the signalfd existed; its
        // SIGCHLD, blocked since before the fork, is pending and will wake
        // the poll, but we need not wait for it.
        if let Ok(status @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) =
            waitpid(self.worker, Some(nix::sys::wait::WaitPidFlag::WNOHANG))
        {
            return mirror(status);
        }
        let mut worker_open = true;
        loop {
            let (signalled, message) = {
                let mut fds = vec![PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
                if worker_open {
                    fds.push(PollFd::new(self.from_worker.as_fd(), PollFlags::POLLIN));
                }
                match poll(&mut fds, PollTimeout::NONE) {
                    Ok(_) | Err(Errno::EINTR) => {}
                    Err(_) => return self.wait_blocking(),
                }
                let ready = |fd: &PollFd<'_>| fd.revents().is_some_and(|r| !r.is_empty());
                (ready(&fds[0]), fds.get(1).is_some_and(ready))
            };
            if signalled {
                if let Some(code) = self.on_signals(&signals) {
                    return code;
                }
            }
            if message {
                let mut bytes = [0u8; 64];
                match nix::unistd::read(&self.from_worker, &mut bytes) {
                    Ok(0) => worker_open = false,
                    Ok(n) => {
                        // One stop for a burst: each would need its own `fg`.
                        if let Some(&last) = bytes[..n].last() {
                            stop_self(last);
                        }
                    }
                    Err(Errno::EAGAIN) => {}
                    Err(_) => worker_open = false,
                }
            }
        }
    }

    /// Relays what arrived, in one batch; returns the status to end with
    /// once the worker has ended.
    ///
    /// A SIGCONT that comes with a signal asking the job to end (as `kill
    /// %1` sends SIGTERM, then SIGCONT, to a stopped job, and a hang-up
    /// SIGHUP and SIGCONT) is not relayed: the worker continues the child
    /// itself once it has forwarded the other signal (see
    /// `Child::signal`). Relayed first, the SIGCONT could let the child
    /// resume in the background, read the terminal and stop again before
    /// the worker forwards the signal, and the job would look stopped
    /// again instead of ending.
    fn on_signals(&self, signals: &SignalFd) -> Option<ExitCode> {
        let mut batch = Vec::new();
        while let Ok(Some(info)) = signals.read_signal() {
            batch.push(info.ssi_signo as i32);
        }
        let ending = batch.iter().any(|&number| {
            Signal::from_number(number)
                .is_some_and(|sig| !matches!(sig, Signal::Usr1 | Signal::Usr2 | Signal::Kill))
        });
        let mut worker_changed = false;
        for number in batch {
            if number == libc::SIGCHLD {
                worker_changed = true;
                continue;
            }
            if number == libc::SIGCONT && ending {
                continue;
            }
            if let Ok(sig) = NixSignal::try_from(number) {
                let _ = kill(self.worker, sig);
            }
        }
        if !worker_changed {
            return None;
        }
        match waitpid(self.worker, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => None,
            Ok(status) => Some(mirror(status)),
            Err(_) => Some(ExitCode::from(crate::exit::Exit::Failure.code())),
        }
    }

    fn wait_blocking(&self) -> ExitCode {
        loop {
            match waitpid(self.worker, None) {
                Err(Errno::EINTR) => continue,
                Ok(status) => return mirror(status),
                Err(_) => return ExitCode::from(crate::exit::Exit::Failure.code()),
            }
        }
    }
}

/// Ends as the worker ended.
fn mirror(status: WaitStatus) -> ExitCode {
    match status {
        WaitStatus::Exited(_, code) => ExitCode::from(code as u8),
        WaitStatus::Signaled(_, sig, _) => {
            crate::signals::die_by_number(sig as i32);
            ExitCode::from(128u8.saturating_add(sig as u8))
        }
        _ => ExitCode::from(crate::exit::Exit::Failure.code()),
    }
}

/// Stops the front by `number`, one of the stop signals, whose default
/// action we never change and which we never block: `kill` returns once we
/// have been continued, and the SIGCONT waits on the signalfd.
fn stop_self(number: u8) {
    let stops = [
        NixSignal::SIGTSTP,
        NixSignal::SIGTTIN,
        NixSignal::SIGTTOU,
        NixSignal::SIGSTOP,
    ];
    let Some(sig) = stops
        .into_iter()
        .find(|sig| *sig as i32 == i32::from(number))
    else {
        return;
    };
    // Make sure it is deliverable even if some ancestor left it blocked.
    let mut only = SigSet::empty();
    only.add(sig);
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&only), None);
    let _ = kill(Pid::this(), sig);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_stopped_state_from_proc() {
        assert!(!is_stopped(Pid::this()));
        let mut child = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap();
        let pid = Pid::from_raw(child.id() as i32);
        kill(pid, NixSignal::SIGSTOP).unwrap();
        // WUNTRACED returns once the stop has happened: no polling.
        let status = waitpid(pid, Some(nix::sys::wait::WaitPidFlag::WUNTRACED)).unwrap();
        assert!(matches!(status, WaitStatus::Stopped(_, NixSignal::SIGSTOP)));
        let stopped = is_stopped(pid);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(stopped);
    }

    #[test]
    fn splits_only_for_the_subcommands_that_run_a_child() {
        let words =
            |line: &str| -> Vec<std::ffi::OsString> { line.split(' ').map(Into::into).collect() };
        assert!(runs_a_command(&words("lockrun elect k -- cat")));
        assert!(runs_a_command(&words(
            "lockrun -v semaphore --limit 2 p -- cat"
        )));
        assert!(!runs_a_command(&words("lockrun leader --watch k")));
        assert!(!runs_a_command(&words("lockrun release k")));
        assert!(!runs_a_command(&words("lockrun leader k -- elect")));
        assert!(!runs_a_command(&words("lockrun")));
    }

    #[test]
    fn relays_every_catchable_named_signal() {
        let relayed: Vec<NixSignal> = relayed().collect();
        assert!(relayed.contains(&NixSignal::SIGTERM));
        assert!(relayed.contains(&NixSignal::SIGHUP));
        assert!(relayed.contains(&NixSignal::SIGINT));
        assert!(!relayed.contains(&NixSignal::SIGKILL));
        assert!(!relayed.contains(&NixSignal::SIGTSTP));
    }
}
