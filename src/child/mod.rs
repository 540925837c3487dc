//! Running COMMAND, and stopping all of it.
//!
//! lockrun never spawns COMMAND itself. It starts a *guard* (see [`guard`])
//! that leads a new process group and runs COMMAND in that group: a copy of
//! lockrun forked before the runtime started, for the first round
//! ([`Child::fork_parked`]), or else lockrun re-run as
//! `lockrun __guard -- COMMAND...`. Either way it is named `lr-guard`
//! (`ps -o comm`), a name `pkill lockrun` does not match. The pieces, and why:
//!
//! - **Process group.** Every signal goes to the whole group, so `sh -c`
//!   wrappers and grandchildren are stopped with COMMAND. A process that
//!   calls `setsid` or `setpgid` leaves the group; the guard, a child
//!   subreaper, still finds it below itself, and in cgroup mode it stays in
//!   the job's cgroup (see `cgroup`).
//! - **Parent death.** The guard's `PR_SET_PDEATHSIG` fires when the
//!   *thread* that spawned it exits, which is why lockrun runs a
//!   current-thread runtime and spawns from it. The guard answers by
//!   SIGKILLing its group, so even a SIGKILLed lockrun leaves nothing running.
//!   A setuid COMMAND clears the setting the guard gives it; the guard's own,
//!   which is what matters, is unaffected.
//! - **Waiting.** The guard's exit is not the group's death (`sh -c 'a &'`).
//!   A guard that has ended COMMAND's whole tree says so on the end channel
//!   before it exits (see `guard::END_REPORT`): we take its word, SIGKILL
//!   the group (the guard, exiting, and anyone who joined the group from
//!   outside the tree: killed, not waited for, as a member of the tree
//!   never is) and go on, reaping the guard once it is gone.
//!   Otherwise, when the guard has exited we leave it a zombie, which pins
//!   its pid and so the group id against reuse, and SIGKILL the group; then
//!   we reap the guard. If members remain (they keep the id alive
//!   themselves) we confirm none is left alive before the lock is released.
//!   We learn of the guard's word or exit from the channel, SIGCHLD and
//!   `waitid(WNOHANG | WNOWAIT)`, never by polling.
//! - **Stopping.** The ladder: the chosen signal to the group, a grace period
//!   as a timer racing the exit, then SIGKILL to the group.
//! - **Terminal.** An interactive COMMAND gets the terminal's foreground for
//!   its lifetime (`terminal`).
//! - **Job control.** In a lockrun split for job control (`job`), a child
//!   whose group stops (Ctrl-Z) hands the terminal back and has the job
//!   stopped, and is continued, with the terminal if the job is in the
//!   foreground, when the job is; all within [`Child::wait`], which the
//!   supervisor polls for as long as the child runs.
//! - **Starting early.** Exec'ing and initialising the guard takes about a
//!   millisecond, which a handover should not wait for. So lockrun starts the
//!   guard while it still waits for the lock ([`Child::prepare`]), parked: it
//!   runs nothing until lockrun sends it the go message over a pipe
//!   ([`Prepared::start`], the `go` module), and it exits without running
//!   anything if the pipe closes first or lockrun dies. A parked guard is
//!   never given the terminal and never signalled, except SIGKILLed when
//!   lockrun gives up.
//! - **Forking, not exec'ing.** Even parked, an exec'd guard costs CPU: a
//!   second lockrun to load, link and start (about 0.9 ms), forked from a
//!   lockrun whose runtime and connections make the fork itself dear. Twelve
//!   jobs started at once on two CPUs wait for one another's start-up. So the
//!   first round's guard is forked while lockrun is still small and has one
//!   thread, right after the command line is checked ([`Forked`]); it closes
//!   what an exec would have closed, and runs the same code. A lockrun that
//!   already has a thread, or a later round, exec's it.
//! - **Spawning COMMAND.** Once the go message arrives the guard starts
//!   COMMAND as `posix_spawn` does, sharing its memory until the exec
//!   (`sys::spawn`), rather than by `fork`, which would copy the guard's
//!   address space on the handover's path. COMMAND arms its own parent-death
//!   signal first (killed with the guard, even outside its group), which is
//!   why `posix_spawn` itself will not do.
//! - **Lending.** On one host the lock is a `flock`ed descriptor, which the
//!   guard must keep until the whole group is dead, and which exists only
//!   once the lock is taken. Its go channel is then a Unix socket, and the
//!   descriptor comes with the go message ([`Prepared::start_lending`]), so
//!   that this guard too is parked while lockrun waits. Where lockrun would
//!   let go right after the child anyway, it says so ([`Verdict`]), and the
//!   guard lets go of the lock itself the moment the tree is gone, rather
//!   than leave it to its exit and lockrun's wake-up: a handover's path is
//!   then one process on each side, as `flock(1)`'s is.

mod cgroup;
mod deadline;
mod go;
pub mod guard;
mod orphans;
mod sys;
mod terminal;

use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{ChildStderr, ChildStdout};
use std::sync::Arc;
use std::time::Duration;

pub use cgroup::Containment;
pub use deadline::{Deadline, GuardDeadlines, Verdict};
pub use go::{Arming, Report};
pub use orphans::adopt as adopt_orphans;

/// Kills and removes the cgroups of jobs whose guard is gone (lockrun and
/// its guard both killed), before anything is acquired or released: see
/// `cgroup`. Nothing to do, or no cgroup of ours, costs a few reads.
pub fn kill_stale_jobs() {
    Containment::detect();
}
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::{sleep, timeout, Instant};

use crate::signals::Signal;

/// `--leftovers`: what becomes of what COMMAND leaves running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LeftoversMode {
    /// The job lasts until the last process of COMMAND's tree is gone.
    Wait,
    /// What COMMAND left is stopped when COMMAND exits.
    Kill,
}

/// `--containment`: how COMMAND's tree is kept together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ContainmentMode {
    /// A cgroup of its own where possible, else the subreaper.
    Auto,
    /// The guard as a child subreaper alone, never a cgroup.
    Subreaper,
}

/// How long we keep confirming that a SIGKILLed group is gone. Dying takes a
/// process microseconds to milliseconds, but tearing down a very large
/// address space, or a process blocked in the kernel (a hung NFS mount), can
/// take far longer; SIGKILL is delivered either way, and we would rather
/// report than hang.
const SWEEP_LIMIT: Duration = Duration::from_secs(5);
/// The longest pause between two checks of the group while sweeping.
const SWEEP_MAX_PAUSE: Duration = Duration::from_millis(50);
/// How long we wait, after the guard stopped, for the rest of its group to
/// stop before we report the job stopped anyway. A member that has a stop
/// signal pending but has not run yet may still take input the user types
/// at the shell (a terminal read that finds data returns it before the
/// signal is acted on), so the shell gets the terminal only once the whole
/// group has stopped; a member that never stops (it catches SIGTSTP and
/// goes on) must not keep the shell from it forever.
const STOP_SETTLE_LIMIT: Duration = Duration::from_secs(2);
/// The longest pause between two looks at a stopping group.
const STOP_SETTLE_MAX_PAUSE: Duration = Duration::from_millis(20);
/// How long dropping a [`Prepared`] waits, in short naps on lockrun's thread,
/// for the SIGKILLed guard to die before leaving the reaping to a thread of
/// its own. A killed guard is usually gone within a fraction of a
/// millisecond; one stuck in the kernel must not hold up the runtime.
const DISCARD_PATIENCE: Duration = Duration::from_millis(20);

/// How long after the child's start lockrun drops the pages only its
/// start-up needed (`sys::forget_startup_pages_once`): what follows the
/// start (the facts, the first renewal's set-up) runs first, so that it is
/// not faulted back in for nothing. One wake-up per job.
const STARTUP_SETTLES: Duration = Duration::from_millis(50);

/// What to run.
#[derive(Debug, Clone)]
pub struct Command {
    /// With `shell` false: the program, looked up in PATH, and its arguments.
    /// With `shell` true: a shell command line, then the values of `$1`, `$2`...
    pub argv: Vec<OsString>,
    /// Run `argv[0]` as `/bin/sh -c <argv[0]> lockrun <argv[1..]>`.
    pub shell: bool,
    /// Added to (or replacing in) the inherited environment.
    pub env: Vec<(OsString, OsString)>,
    /// Removed from the inherited environment.
    pub env_remove: Vec<OsString>,
    /// The lockrun executable to run as the guard; see [`guard_exe`].
    pub guard_exe: PathBuf,
    /// Whether the guard will be lent a descriptor at start
    /// ([`Prepared::start_lending`]) to keep open for as long as anything of
    /// the child's group lives: a `flock`ed file, say, which the kernel then
    /// releases only after the whole group is gone. COMMAND never inherits
    /// it, nor does any other child of lockrun's.
    pub lends: bool,
    /// What becomes of the processes COMMAND leaves running when it exits.
    pub leftovers: Leftovers,
    /// How COMMAND's tree is kept together (see the `cgroup` module).
    pub containment: Containment,
}

/// What the job does with the processes COMMAND leaves running when it
/// exits (`--leftovers`). The job's exit status is COMMAND's either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Leftovers {
    /// The job, and so the lock, lasts until the last of them is gone: a
    /// daemon COMMAND started is the job (`pg_ctl start`).
    #[default]
    Wait,
    /// They get `signal`, then SIGKILL after `grace`; the job ends once
    /// they are gone.
    Kill { signal: Signal, grace: Duration },
}

/// The executable to use as [`Command::guard_exe`]: this very program.
///
/// On Linux we name it `/proc/self/exe`, which `exec` follows to the running
/// image even after a package upgrade has replaced or deleted the file on
/// disk, which a long-running lockrun must expect.
pub fn guard_exe() -> io::Result<PathBuf> {
    let proc_self = PathBuf::from("/proc/self/exe");
    if proc_self.exists() {
        Ok(proc_self)
    } else {
        std::env::current_exe()
    }
}

impl Command {
    /// The guard's command line: `lockrun __guard --go-fd GO --end-fd END
    /// -- PROGRAM [ARGS...]`, where `GO` is the descriptor it waits on for
    /// the go message and `END` its end of the end channel.
    fn guard_command(&self, [go, end]: [RawFd; 2]) -> io::Result<std::process::Command> {
        let program = self.program()?;
        let mut cmd = std::process::Command::new(&self.guard_exe);
        cmd.arg0(guard::PROCESS_NAME)
            .arg(guard::SUBCOMMAND)
            .args(guard::arguments(go, end, &program));
        for key in &self.env_remove {
            cmd.env_remove(key);
        }
        cmd.envs(self.env.iter().map(|(key, value)| (key, value)));
        // Always set, so that a value in lockrun's own environment (a
        // lockrun run by another's COMMAND never sees one, but a user might
        // set it) cannot choose for us.
        cmd.env(guard::LEFTOVERS_ENV, self.leftovers.to_env());
        match guard::CgroupPlan::of(&self.containment) {
            Some(plan) => cmd.env(guard::CGROUP_ENV, plan.to_env()),
            None => cmd.env_remove(guard::CGROUP_ENV),
        };
        cmd.process_group(0);
        Ok(cmd)
    }

    /// What the guard runs: `argv`, or with `shell` the shell running it.
    /// An empty `argv` is an error: there is nothing to run.
    fn program(&self) -> io::Result<Vec<OsString>> {
        let Some((first, rest)) = self.argv.split_first() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no command to run",
            ));
        };
        Ok(if self.shell {
            ["/bin/sh", "-c"]
                .into_iter()
                .map(OsString::from)
                .chain([first.clone(), OsString::from("lockrun")])
                .chain(rest.iter().cloned())
                .collect()
        } else {
            self.argv.clone()
        })
    }
}

/// Whether the child may take the terminal's foreground.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Terminal {
    /// If stdin is a terminal and lockrun is in its foreground group, lend
    /// the foreground to the child (see the `terminal` module).
    Auto,
    /// Leave the terminal alone.
    Never,
}

/// How the child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildExit {
    /// The guard exited with this status. COMMAND killed by signal N shows
    /// here as `Code(128 + N)`, the guard having mapped it.
    Code(i32),
    /// The guard itself was killed by this signal, as by a SIGKILL to the
    /// group.
    Signal(i32),
}

impl ChildExit {
    /// The status to exit with: the code, or 128+N for death by signal N.
    pub fn code(&self) -> u8 {
        match *self {
            ChildExit::Code(code) => code as u8,
            ChildExit::Signal(signal) => 128u8.saturating_add(signal as u8),
        }
    }
}

impl fmt::Display for ChildExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ChildExit::Code(code) => write!(f, "exited with status {code}"),
            ChildExit::Signal(number) => match Signal::from_number(number) {
                Some(signal) => write!(f, "killed by {signal}"),
                None => write!(f, "killed by signal {number}"),
            },
        }
    }
}

enum State {
    Running,
    /// The guard has exited and is a zombie: the group id is still ours.
    Exited(ChildExit),
    /// The guard said COMMAND's whole tree is gone and it is exiting with
    /// this status: nothing is left to sweep, and it is reaped once it is
    /// gone. The group id is ours until then.
    Ended(ChildExit),
    /// The guard is reaped: the group id may belong to someone else now, so
    /// we never signal it again.
    Reaped(ChildExit),
}

/// A running COMMAND, under its guard, in its own process group.
///
/// Dropping a `Child` that was not waited for SIGKILLs its group (a safety
/// net for early returns; the supervisor should always await [`Child::wait`],
/// [`Child::stop`] or [`Child::kill`]) but cannot reap it.
pub struct Child {
    pid: u32,
    state: State,
    sigchld: tokio::signal::unix::Signal,
    foreground: Option<terminal::Foreground>,
    /// Set while members of the group may outlive the reaped guard: until
    /// when we keep confirming they are gone. A `wait` cancelled during
    /// that confirmation resumes it rather than skip it.
    sweep_until: Option<Instant>,
    /// lockrun's end of the go pipe, kept after the go message to carry
    /// deadlines to the guard (see `deadline`), until the lease takes it.
    deadlines: Option<File>,
    /// The guard was lent a descriptor and promised a [`Verdict`] on it,
    /// which it waits for at its end until we send one or close the channel.
    verdict_owed: bool,
    /// Whether the child may have the terminal: at `fg`, too.
    terminal: Terminal,
    /// The front's messages, in a lockrun split for job control.
    job: Option<crate::job::Watch>,
    /// The child's group stopped and has not been continued by us since.
    stopped: bool,
    /// The guard stopped by this signal at this time, and the job is to be
    /// reported stopped once the rest of the group has stopped too.
    stopping: Option<(i32, Instant)>,
    /// The last deadline the lease handed the guard (see
    /// [`GuardDeadlines`]), in nanoseconds since boot; 0 before the first.
    latest_deadline: Arc<std::sync::atomic::AtomicU64>,
    /// The child was asked to end: a stop of its group from now on (a read
    /// of the terminal in the background, say) is answered with SIGCONT,
    /// never reported, or the child could not act on that request.
    ending: bool,
    /// The cgroup the guard was to make for COMMAND, in cgroup mode: the
    /// guard removes it, unless it was killed first; then we do.
    cgroup: Option<PathBuf>,
    /// We stopped the guard before it ran COMMAND, the job being stopped
    /// already: its stop is the job's, not news for the front.
    started_stopped: bool,
    /// The pages start-up alone needed are to be dropped (see
    /// [`STARTUP_SETTLES`]).
    trim_armed: bool,
    /// The end channel, on which the guard says the tree is gone before it
    /// exits (see `guard::END_REPORT`); `None` once it has spoken, closed
    /// or could not be watched.
    ended: Option<tokio::io::unix::AsyncFd<File>>,
}

/// A guard started ahead of COMMAND and parked: it runs nothing until
/// [`Prepared::start`]. Dropping it (or lockrun dying) ends the guard without
/// COMMAND ever running; see [`Child::prepare`].
pub struct Prepared {
    pid: u32,
    /// Always `Some` until `start` takes it or `drop` discards it.
    parked: Option<Parked>,
    /// The mode the guard was asked to contain COMMAND in, to say at start.
    containment: Containment,
    /// Whether to say it at `-v`: for COMMAND, not for a hook.
    announce: bool,
}

/// The two channels between lockrun and a guard: the go pipe (see `go`)
/// and the end channel (see `guard::END_REPORT`), both ends of each until
/// the guard is started.
struct Channels {
    /// lockrun's end of the go pipe, and the guard's (its read end).
    go: (File, OwnedFd),
    /// lockrun's end of the end channel, and the guard's.
    end: (File, OwnedFd),
}

impl Channels {
    fn new(lends: bool) -> io::Result<Channels> {
        let (go_read, go) = sys::go_pipe(lends)?;
        let (end, end_theirs) = sys::end_channel()?;
        Ok(Channels {
            go: (go, go_read),
            end: (end, end_theirs),
        })
    }

    /// The guard's descriptors, go then end, for it to inherit.
    fn guards(&self) -> [RawFd; 2] {
        [self.go.1.as_raw_fd(), self.end.1.as_raw_fd()]
    }

    /// Our ends, go then end, once the guard has its own: our copies of
    /// its ends close, so that a guard that is gone makes `start` fail
    /// (EPIPE) rather than write into the void, and the end channel's end
    /// of file is the guard's.
    fn ours(self) -> (File, File) {
        (self.go.0, self.end.0)
    }
}

struct Parked {
    /// lockrun's end of the go pipe.
    go: File,
    /// lockrun's end of the end channel (see `guard::END_REPORT`).
    end: File,
    sigchld: tokio::signal::unix::Signal,
    terminal: Terminal,
}

impl Child {
    /// Spawns the guard, which runs `cmd`: [`Child::prepare`], then
    /// [`Prepared::start`] at once with no more environment.
    pub fn spawn(cmd: &Command) -> io::Result<Child> {
        Child::spawn_with(cmd, Terminal::Auto)
    }

    /// [`Child::spawn`], choosing what happens to the terminal.
    pub fn spawn_with(cmd: &Command, terminal: Terminal) -> io::Result<Child> {
        Child::prepare_with(cmd, terminal)?.start(Vec::new())
    }

    /// Starts the guard, parked: it runs nothing until [`Prepared::start`].
    /// Dropping the returned value (or lockrun dying) makes the guard exit
    /// without ever running COMMAND.
    ///
    /// Call it on the current-thread runtime's thread (see the module docs):
    /// the guard's parent-death signal is armed now, and fires when this
    /// thread exits. The runtime needs its IO (for signals) and time drivers.
    /// The terminal is not touched until `start`.
    ///
    /// Errors are lockrun's own failures to start the guard. COMMAND not
    /// being found or executable is not an error here: the guard reports it
    /// on stderr, once started, and exits 127 or 126.
    pub fn prepare(cmd: &Command) -> io::Result<Prepared> {
        Child::prepare_with(cmd, Terminal::Auto)
    }

    /// [`Child::prepare`], choosing what `start` does with the terminal.
    pub fn prepare_with(cmd: &Command, terminal: Terminal) -> io::Result<Prepared> {
        let channels = Channels::new(cmd.lends)?;
        let mut guard = cmd.guard_command(channels.guards())?;
        // Listening before the fork means no exit can happen unnoticed.
        let sigchld = signal(SignalKind::child())?;
        sys::arm_guard(&mut guard, channels.guards());
        let pid = guard.spawn().map_err(|err| spawn_error(cmd, err))?.id();
        orphans::guard_started(pid);
        // std's Child neither waits nor kills on drop; we reap by pid.
        let (go, end) = channels.ours();
        tracing::debug!(pid, "spawned the guard, parked");
        Ok(Prepared {
            pid,
            parked: Some(Parked {
                go,
                end,
                sigchld,
                terminal,
            }),
            containment: cmd.containment.clone(),
            announce: true,
        })
    }

    /// Spawns the guard running `cmd` for a hook: never given the
    /// terminal, stdin from /dev/null, and stdout and stderr as pipes,
    /// returned for us to read. Its tree is contained and stopped as
    /// COMMAND's is.
    pub fn spawn_piped(cmd: &Command) -> io::Result<(Child, ChildStdout, ChildStderr)> {
        let channels = Channels::new(cmd.lends)?;
        let mut guard = cmd.guard_command(channels.guards())?;
        guard
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let sigchld = signal(SignalKind::child())?;
        sys::arm_guard(&mut guard, channels.guards());
        let mut spawned = guard.spawn().map_err(|err| spawn_error(cmd, err))?;
        let pid = spawned.id();
        orphans::guard_started(pid);
        let (go, end) = channels.ours();
        let prepared = Prepared {
            pid,
            parked: Some(Parked {
                go,
                end,
                sigchld,
                terminal: Terminal::Never,
            }),
            containment: cmd.containment.clone(),
            announce: false,
        };
        let (Some(stdout), Some(stderr)) = (spawned.stdout.take(), spawned.stderr.take()) else {
            unreachable!("both were asked to be pipes");
        };
        Ok((prepared.start(Vec::new())?, stdout, stderr))
    }

    /// Forks the guard without exec'ing it, parked, as [`Child::prepare`]
    /// starts one: the cheap way, about a millisecond of CPU less, for the
    /// round that starts with lockrun (see [`Forked`]).
    ///
    /// Call it before the runtime starts, from the thread that will run it.
    /// `Ok(None)` when it cannot be done safely, lockrun having a thread
    /// besides this one (a line was logged, say): [`Child::prepare`] then
    /// starts the guard as before.
    pub fn fork_parked(cmd: &Command) -> io::Result<Option<Forked>> {
        if !sys::single_threaded() {
            return Ok(None);
        }
        let argv = cmd.program()?;
        let channels = Channels::new(cmd.lends)?;
        let keep = channels.guards();
        let environment = guard::Environment {
            remove: &cmd.env_remove,
            add: &cmd.env,
        };
        let invocation = || guard::Invocation {
            go: Some(keep[0]),
            end: Some(keep[1]),
            forked: true,
            argv: &argv,
            leftovers: cmd.leftovers,
            cgroup: guard::CgroupPlan::of(&cmd.containment),
        };
        let pid = sys::fork_guard(keep, || guard::run(invocation(), &environment))?;
        orphans::guard_started(pid);
        let (go, end) = channels.ours();
        tracing::debug!(pid, "forked the guard, parked");
        Ok(Some(Forked {
            pid,
            go: Some(go),
            end: Some(end),
            containment: cmd.containment.clone(),
        }))
    }

    /// The guard's pid, which is also the child's process group id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Hands the guard its first deadline the moment COMMAND has started,
    /// without taking the channel ([`Child::deadlines`] still follows, with
    /// the verdict before it). Between the start and that hand-over lockrun
    /// writes the child's group beside the lock (a round trip to the
    /// engine) and tells the guard its verdict; a lockrun stopped meanwhile
    /// (SIGSTOP, a frozen cgroup, starvation) must leave a guard that stops
    /// COMMAND by the lease's deadline all the same, or a rival runs beside
    /// it once the lease lapses.
    pub fn first_deadline(&mut self, stop_at: Duration, signal: Signal, grace: Duration) {
        let Some(pipe) = self.deadlines.as_mut() else {
            return;
        };
        let deadline = deadline::Deadline::new(stop_at, signal, grace);
        self.latest_deadline.store(
            u64::try_from(stop_at.as_nanos()).unwrap_or(u64::MAX).max(1),
            std::sync::atomic::Ordering::Release,
        );
        if !matches!(io::Write::write(pipe, &deadline.encode()), Ok(n) if n == deadline::RECORD) {
            tracing::debug!("could not hand the guard its first deadline");
        }
    }

    /// The channel on which the guard takes its deadlines: past the last one
    /// it was given, it stops the group itself with `signal`, then SIGKILL
    /// after `grace`. `None` once taken. Until the first deadline the guard
    /// waits for COMMAND alone, as it does when lockrun drops the channel
    /// without ever sending one.
    pub fn deadlines(&mut self, signal: Signal, grace: Duration) -> Option<GuardDeadlines> {
        let pipe = self.deadlines.take()?;
        Some(GuardDeadlines::new(
            pipe,
            signal,
            grace,
            Arc::clone(&self.latest_deadline),
        ))
    }

    /// Tells a guard promised a [`Verdict`] ([`Prepared::start_handing_over`])
    /// whether it may let go of the lent descriptor itself once the tree is
    /// gone; once, before [`Child::deadlines`]. Whether it was told (never,
    /// for a guard promised nothing). The guard reads it, at the latest, at
    /// its end.
    pub fn hand_over(&mut self, verdict: Verdict) -> bool {
        if !std::mem::take(&mut self.verdict_owed) {
            return false;
        }
        let Some(pipe) = self.deadlines.as_mut() else {
            return false;
        };
        let record = verdict.encode();
        let told = matches!(io::Write::write(pipe, &record), Ok(n) if n == record.len());
        if !told {
            // The guard waits at its end for the verdict it was promised, so
            // a channel that would not take it whole (full, or the guard
            // gone) is closed instead: the guard reads its end as "keep",
            // holds the lock until it exits and keeps the deadline it has,
            // as when we die. Left open, it would wait for us while we wait
            // for its exit.
            tracing::debug!("could not hand the guard its verdict; closing its channel");
            self.deadlines = None;
        }
        told
    }

    /// Sends `sig` to the whole group. Does nothing once the child is reaped.
    pub fn signal(&mut self, sig: Signal) {
        if matches!(self.state, State::Reaped(_)) {
            return;
        }
        if sig == Signal::Kill && matches!(self.state, State::Running) {
            // A SIGKILL would kill the guard too, and the tree's processes
            // outside the group (a daemon that called `setsid`) would be
            // orphaned to init, out of reach. The guard kills the whole
            // tree, then exits, when it hears its parent-death signal.
            sys::ask_guard_to_end(self.pid);
            return;
        }
        if let Err(err) = sys::kill_group(self.pid, sig.number()) {
            tracing::warn!("cannot send {sig} to the child's process group: {err}");
        }
        if self.job.is_none() {
            return;
        }
        // A stopped child cannot act on a signal that asks it to end; shells
        // continue a stopped job after `kill` for the same reason. USR1 and
        // USR2 wait for the job's `fg` or `bg`; HUP, which daemons take as
        // "reload", continues a stopped child once.
        match sig {
            Signal::Kill | Signal::Usr1 | Signal::Usr2 => {}
            Signal::Hup => {
                if self.stopped {
                    self.resume(Resume::ToHear);
                }
            }
            Signal::Int | Signal::Quit | Signal::Abrt | Signal::Alrm | Signal::Term => {
                self.ending = true;
                self.resume(Resume::ToHear);
            }
        }
    }

    /// Waits for the child's whole tree to be gone, and returns its status:
    /// a guard that says its tree is gone (see `guard::END_REPORT`) is
    /// taken at its word, the group SIGKILLed with the guard in it, and the
    /// guard reaped then or when this `Child` is dropped; else, once the
    /// guard has exited, its group is swept (every member confirmed dead)
    /// and the guard reaped. Cancel-safe: a later call picks up where this
    /// one was.
    pub async fn wait(&mut self) -> ChildExit {
        if let State::Reaped(exit) = self.state {
            self.sweep().await;
            return self.finish(exit);
        }
        let exit = self.exited().await;
        // A guard that said the tree is gone left nothing to sweep: the
        // lock may go now, the guard's exit and reaping after it.
        if !matches!(self.state, State::Ended(_)) {
            self.sweep().await;
        }
        self.finish(exit)
    }

    /// The stop ladder: `sig` to the group, up to `grace` for the child to
    /// exit, then SIGKILL. A zero grace (or `sig` = KILL) kills at once.
    /// Returns as [`Child::wait`] does. If cancelled
    /// during the grace period, the child has been signalled already: call
    /// `stop` or `kill` again.
    pub async fn stop(&mut self, sig: Signal, grace: Duration) -> ChildExit {
        if grace.is_zero() || sig == Signal::Kill || !matches!(self.state, State::Running) {
            return self.kill().await;
        }
        self.signal(sig);
        if timeout(grace, self.exited()).await.is_err() {
            tracing::debug!(
                "the child outlived the {}ms grace period after {sig}; killing it",
                grace.as_millis()
            );
            self.signal(Signal::Kill);
        }
        self.wait().await
    }

    /// SIGKILLs the group now, then waits as [`Child::wait`] does.
    pub async fn kill(&mut self) -> ChildExit {
        self.signal(Signal::Kill);
        self.wait().await
    }

    /// Resolves once the guard has exited, leaving it unreaped.
    async fn exited(&mut self) -> ChildExit {
        loop {
            match self.state {
                State::Exited(exit) | State::Ended(exit) | State::Reaped(exit) => return exit,
                State::Running => {}
            }
            match sys::peek_exit(self.pid) {
                Ok(Some(exit)) => {
                    tracing::debug!(pid = self.pid, "the guard {exit}");
                    self.state = State::Exited(exit);
                    continue;
                }
                Ok(None) => {}
                Err(err) => {
                    // Someone else reaped our child (ECHILD). The group id
                    // is no longer pinned, so we must not signal it.
                    tracing::error!("cannot wait for the child: {err}");
                    let exit = ChildExit::Code(i32::from(guard::GUARD_FAILED));
                    self.state = State::Reaped(exit);
                    return exit;
                }
            }
            // The child runs: once what follows its start is done, what
            // start-up alone needed of our code need not stay mapped for
            // the job's whole life.
            if !self.trim_armed {
                self.trim_armed = true;
                tokio::spawn(async {
                    sleep(STARTUP_SETTLES).await;
                    sys::forget_startup_pages_once();
                });
            }
            let settle = if self.job.is_some() {
                self.check_stopped()
            } else {
                None
            };
            let woke = match &mut self.job {
                Some(job) => tokio::select! {
                    got = self.sigchld.recv() => got.is_some(),
                    exit = next_end(&mut self.ended) => {
                        self.end_reported(exit);
                        true
                    }
                    () = job.continued() => {
                        self.resume(Resume::Job);
                        true
                    }
                    () = sleep_for(settle) => true,
                },
                None => tokio::select! {
                    got = self.sigchld.recv() => got.is_some(),
                    exit = next_end(&mut self.ended) => {
                        self.end_reported(exit);
                        true
                    }
                },
            };
            if !woke {
                // The runtime's signal driver is gone, so is the runtime:
                // nothing will poll us again.
                std::future::pending::<()>().await;
            }
        }
    }

    /// What the end channel said: the status the guard exits with, its
    /// tree gone (see `guard::END_REPORT`), or nothing, the channel closed.
    fn end_reported(&mut self, exit: Option<ChildExit>) {
        if let (Some(exit), State::Running) = (exit, &self.state) {
            tracing::debug!(pid = self.pid, "the guard's tree is gone; it {exit}");
            self.state = State::Ended(exit);
            // The guard removed COMMAND's cgroup (its word comes only then),
            // so nothing of it is ours to remove once its pid may be
            // another's.
            self.cgroup = None;
            // The tree is gone; what else is in the group joined it from
            // outside, and goes before the lock does, with the guard, which
            // has nothing left to do. The guard is unreaped: the id is ours.
            if let Err(err) = sys::kill_group(self.pid, Signal::Kill.number()) {
                tracing::warn!("cannot kill the child's process group: {err}");
            }
        }
    }

    /// In a lockrun split for job control: if the guard stopped (its group
    /// did, by Ctrl-Z or a read of the terminal in the background), gives
    /// the terminal back to the job's group and has the job stopped, once
    /// the whole group has stopped. Returns how long to wait before looking
    /// again while the group is still stopping.
    fn check_stopped(&mut self) -> Option<Duration> {
        if let Some(signal) = sys::take_stop(self.pid) {
            tracing::debug!(pid = self.pid, signal, "the child's guard stopped");
            self.stopped = true;
            if self.ending {
                self.resume(Resume::ToHear);
                return None;
            }
            self.stopping = Some((signal, Instant::now()));
        }
        let (signal, since) = self.stopping?;
        let settled = sys::group_stopped(self.pid).unwrap_or(true);
        if !settled && since.elapsed() < STOP_SETTLE_LIMIT {
            let waited = since.elapsed();
            return Some((waited / 2).clamp(Duration::from_millis(1), STOP_SETTLE_MAX_PAUSE));
        }
        self.stopping = None;
        tracing::debug!(pid = self.pid, signal, "the child's group stopped");
        if let Some(foreground) = &self.foreground {
            foreground.take_back();
        }
        if std::mem::take(&mut self.started_stopped) {
            // Our own stop, for the job's: if the job was continued before
            // the guard's stop reached us, we continue the child now.
            if !crate::job::job_stopping() {
                self.resume(Resume::Job);
            }
        } else if let Some(job) = &self.job {
            job.report_stop(signal);
        }
        None
    }

    /// Continues the child's group; for the job's `fg` or `bg`, with the
    /// terminal if the job has it.
    ///
    /// The job is continued only while the lease the guard last heard of
    /// holds. The guard stopped with the group, so it cannot stop the child
    /// itself before it runs again, and lockrun may learn of a lapse (it was
    /// stopped too, or the host slept) only after the `fg` reached it: a
    /// child continued then could run while a rival holds the lock. Left
    /// stopped, it is stopped for good by the loss that follows, through
    /// [`Resume::ToHear`].
    fn resume(&mut self, why: Resume) {
        if !matches!(self.state, State::Running) {
            return;
        }
        if why == Resume::Job {
            let until = self
                .latest_deadline
                .load(std::sync::atomic::Ordering::Acquire);
            if until != 0 && crate::clock::boottime() >= Duration::from_nanos(until) {
                tracing::warn!("not continuing the child: its lease is not confirmed");
                return;
            }
        }
        if self.job.is_some() && self.terminal == Terminal::Auto && why == Resume::Job {
            match &self.foreground {
                Some(foreground) => foreground.give_again(),
                // The child started while the job was stopped or in the
                // background: this `fg` is its first hand-off.
                None => {
                    self.foreground = terminal::Claim::detect().map(|claim| claim.hand_to(self.pid))
                }
            }
        }
        self.stopped = false;
        self.stopping = None;
        if let Err(err) = sys::kill_group(self.pid, libc::SIGCONT) {
            tracing::warn!("cannot continue the child's process group: {err}");
        }
    }

    /// SIGKILLs the group while the exited guard, unreaped, pins the group
    /// id, reaps the guard, and confirms no member is left alive.
    ///
    /// The confirmation has to poll: the members are not our children (they
    /// are reparented to init, or to a container's pid 1), so no SIGCHLD or
    /// waitid tells us of their death. The loop is short and bounded. A
    /// guard killed alone leaves its tree's orphans to us (see `orphans`),
    /// which we kill and reap first.
    async fn sweep(&mut self) {
        if let State::Exited(exit) = self.state {
            // The fast path, taken whenever COMMAND left nothing behind: one
            // SIGKILL while the zombie guard pins the id, then reap the
            // guard; if that emptied the group, and the guard left us no
            // orphans, there is nothing to confirm. Scanning /proc costs
            // about a millisecond per handover on a busy host.
            if let Err(err) = sys::kill_group(self.pid, Signal::Kill.number()) {
                tracing::warn!("cannot kill the child's process group: {err}");
            }
            match sys::reap(self.pid) {
                Ok(()) => {
                    orphans::guard_reaped(self.pid);
                    self.state = State::Reaped(exit);
                    self.remove_cgroup();
                }
                Err(err) => {
                    tracing::warn!("cannot reap the guard: {err}");
                    return;
                }
            }
            self.sweep_until = Some(Instant::now() + SWEEP_LIMIT);
        }
        let Some(deadline) = self.sweep_until else {
            return;
        };
        // A guard killed alone left its tree to us (see `orphans`): gone
        // before anything of ours lets go of the lock. Where it was not,
        // there is nothing, and the look costs a read of our children.
        let left = orphans::sweep(deadline.saturating_duration_since(Instant::now())).await;
        if !left.is_empty() {
            tracing::warn!(
                "processes {left:?} left by the killed guard are still alive {}s after SIGKILL",
                SWEEP_LIMIT.as_secs()
            );
        }
        // Members may remain (alive, or zombies nobody reaps) now that we
        // reaped the guard. We look before we signal: while any member is
        // alive the group keeps its id, so the signal reaches only our group.
        if !sys::group_exists(self.pid) {
            self.sweep_until = None;
            return;
        }
        let mut pause = Duration::from_millis(1);
        loop {
            match sys::live_group_members(self.pid) {
                Ok(members) if members.is_empty() => break,
                Ok(members) if Instant::now() >= deadline => {
                    tracing::warn!(
                        "processes {members:?} of the child's group are still alive {}s after SIGKILL",
                        SWEEP_LIMIT.as_secs()
                    );
                    break;
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!("cannot confirm the child's process group is gone: {err}");
                    break;
                }
            }
            if let Err(err) = sys::kill_group(self.pid, Signal::Kill.number()) {
                tracing::warn!("cannot kill the child's process group: {err}");
            }
            sleep(pause).await;
            pause = (pause * 2).min(SWEEP_MAX_PAUSE);
        }
        self.sweep_until = None;
    }

    /// Gives the terminal back and reaps the guard, if the sweep did not.
    /// A guard that said its tree is gone is reaped if it is gone too, else
    /// when we drop it.
    fn finish(&mut self, exit: ChildExit) -> ChildExit {
        if let Some(foreground) = self.foreground.take() {
            foreground.restore();
        }
        match self.state {
            State::Exited(_) => {
                match sys::reap(self.pid) {
                    Ok(()) => orphans::guard_reaped(self.pid),
                    Err(err) => tracing::warn!("cannot reap the guard: {err}"),
                }
                self.state = State::Reaped(exit);
            }
            State::Ended(_) => {
                if reap_ended(self.pid) {
                    self.state = State::Reaped(exit);
                }
                // Else the guard, killed, is still on its way out: it is
                // reaped when we are dropped. It removed its cgroup itself.
                return exit;
            }
            State::Running | State::Reaped(_) => self.state = State::Reaped(exit),
        }
        self.remove_cgroup();
        exit
    }

    /// Once the guard is reaped: its cgroup, if it left one (killed before
    /// it could remove it), is emptied and removed.
    fn remove_cgroup(&mut self) {
        if let Some(dir) = self.cgroup.take() {
            if let Err(err) = cgroup::remove_after_guard(&dir, SWEEP_LIMIT) {
                tracing::warn!("cannot remove the cgroup `{}`: {err}", dir.display());
            }
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        match self.state {
            State::Running => sys::ask_guard_to_end(self.pid),
            // Unreaped, so the group id is still ours to signal.
            State::Exited(_) => {
                let _ = sys::kill_group(self.pid, Signal::Kill.number());
            }
            // Its tree gone, the guard was killed on its way out when it
            // said so: it is reaped once it is gone, without holding up the
            // runtime, so that no zombie of it outlasts its round.
            State::Ended(_) => {
                let pid = self.pid;
                if !reap_ended(pid) {
                    let later = async move {
                        for _ in 0..ENDED_REAP_TRIES {
                            sleep(Duration::from_millis(1)).await;
                            if reap_ended(pid) {
                                break;
                            }
                        }
                    };
                    match tokio::runtime::Handle::try_current() {
                        Ok(runtime) => drop(runtime.spawn(later)),
                        // No runtime, no wait: lockrun's own exit leaves
                        // the zombie to init.
                        Err(_) => drop(later),
                    }
                }
            }
            State::Reaped(_) => {}
        }
        if let Some(foreground) = self.foreground.take() {
            foreground.restore();
        }
    }
}

impl Prepared {
    /// The parked guard's pid, which will be the child's process group id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Hands the guard `env` (added to COMMAND's environment: what is known
    /// only once the lock is held), gives its group the terminal's
    /// foreground if [`Terminal`] allows, and lets it run COMMAND.
    ///
    /// On error the guard is ended as if dropped, having run nothing.
    pub fn start(self, env: Vec<(OsString, OsString)>) -> io::Result<Child> {
        self.start_with(env, None, false)
    }

    /// [`Prepared::start`], lending the guard `hold` to keep until every
    /// member of the group is dead (see [`Command::lends`], which must have
    /// been set). Our copy is closed once sent.
    pub fn start_lending(self, env: Vec<(OsString, OsString)>, hold: OwnedFd) -> io::Result<Child> {
        self.start_with(env, Some(hold), false)
    }

    /// [`Prepared::start_lending`], promising the guard a [`Verdict`] on
    /// `hold` ([`Child::hand_over`]), which it waits for at its end: until
    /// it comes, or we close the channel, the guard does not exit.
    pub fn start_handing_over(
        self,
        env: Vec<(OsString, OsString)>,
        hold: OwnedFd,
    ) -> io::Result<Child> {
        self.start_with(env, Some(hold), true)
    }

    fn start_with(
        mut self,
        env: Vec<(OsString, OsString)>,
        hold: Option<OwnedFd>,
        verdict: bool,
    ) -> io::Result<Child> {
        let message = go::encode(&env, verdict)?;
        let pid = self.pid;
        // A job whose lockrun and guard were both killed runs on in its
        // cgroup, unsupervised, and the lock may have just come to us from
        // it: it is killed before COMMAND starts (see `cgroup`).
        if let Containment::Cgroup(parent) = &self.containment {
            cgroup::remove_stale(parent);
        }
        let Some(Parked {
            go,
            end,
            sigchld,
            terminal,
        }) = self.parked.take()
        else {
            unreachable!("a Prepared is parked until started or dropped");
        };
        // Listening for the job's continues before anything else: a job
        // stopped before its child started may be continued at any moment.
        let job = watch_job();
        let claim = match terminal {
            Terminal::Auto => terminal::Claim::detect(),
            Terminal::Never => None,
        };
        // The foreground first: the guard runs COMMAND only after reading the
        // go message, so COMMAND can never read the terminal before its group
        // owns it.
        let foreground = claim.map(|claim| claim.hand_to(pid));
        // A Ctrl-Z that reached the job's group before the hand-off stopped
        // (or is stopping) the front alone: COMMAND starts stopped with it,
        // the guard stopped before it reads the go message, and `fg`
        // continues them all. (After the hand-off, a Ctrl-Z reaches the
        // guard's group itself.)
        let started_stopped =
            crate::job::job_stopping() && sys::kill_group(pid, libc::SIGSTOP).is_ok() && {
                tracing::debug!(pid, "the job is stopped: the child starts stopped");
                true
            };
        if let Err(err) = go::send(&go, &message, hold.as_ref()) {
            discard(pid);
            if let Some(foreground) = foreground {
                foreground.restore();
            }
            return Err(io::Error::new(
                err.kind(),
                format!("cannot send the guard its go: {err}"),
            ));
        }
        tracing::debug!(pid, "started the guard");
        // Should the guard fail to use the cgroup, it says so itself, at
        // the same verbosity.
        self.announce_containment(pid);
        Ok(Child {
            pid,
            state: State::Running,
            sigchld,
            foreground,
            sweep_until: None,
            deadlines: Some(go),
            verdict_owed: verdict,
            terminal,
            job,
            stopped: false,
            stopping: None,
            latest_deadline: Arc::default(),
            ending: false,
            cgroup: self.containment.dir_of(pid),
            started_stopped,
            trim_armed: false,
            ended: sys::register_end(end),
        })
    }
}

/// The engine's step in an armed guard (see `go`): given the arming's
/// `grant` text, before the wait, what to do once the lock is granted
/// (what can be done before, opening the lock's directory, is done then,
/// off the handover's path). That takes the granted descriptor and returns
/// the fencing number and the text to report to lockrun; `None`, from
/// either, refuses the grant, and the guard lets go and runs nothing. Set
/// once, at start-up, before any guard is forked or exec'd.
pub type GrantStep = fn(&str) -> Option<OnGrant>;

/// What an armed guard does once granted (see [`GrantStep`]).
pub type OnGrant = Box<dyn FnOnce(std::os::fd::BorrowedFd<'_>) -> Option<(u64, String)>>;

static GRANT_STEP: std::sync::OnceLock<GrantStep> = std::sync::OnceLock::new();

/// Sets the step an armed guard runs on the grant ([`GrantStep`]).
pub fn set_grant_step(step: GrantStep) {
    let _ = GRANT_STEP.set(step);
}

fn grant_step() -> Option<GrantStep> {
    GRANT_STEP.get().copied()
}

/// How often lockrun repeats the disarm signal until the guard answers: one
/// that lands between the guard's look at its flag and its `flock` call
/// cannot interrupt it.
const DISARM_REPEAT: Duration = Duration::from_millis(5);

/// The job's stops and continues, watched from the child's start; `None`
/// outside a job, or when they cannot be watched.
fn watch_job() -> Option<crate::job::Watch> {
    match crate::job::Watch::new() {
        Some(Ok(watch)) => Some(watch),
        Some(Err(err)) => {
            tracing::debug!("cannot watch the job's stops and continues: {err}");
            None
        }
        None => None,
    }
}

/// How many times, a millisecond apart, a dropped [`Child`] whose guard said
/// its tree is gone looks for the guard's exit, having killed it; past that
/// it is left to be reaped when lockrun exits.
const ENDED_REAP_TRIES: u32 = 5000;

/// Reaps the guard `pid`, which said its tree is gone (having removed its
/// cgroup: its word comes only then) and was killed, if it is gone.
/// Whether it was reaped (or is not ours to reap).
fn reap_ended(pid: u32) -> bool {
    if matches!(sys::try_reap(pid), Ok(None)) {
        return false;
    }
    orphans::guard_reaped(pid);
    true
}

/// What the end channel brings: the status of a guard whose tree is gone, or
/// `None` once it is closed or says anything else (the guard's exit then
/// tells). Pending for ever without a channel. Cancel-safe: nothing is read
/// but in the poll that returns it.
async fn next_end(ended: &mut Option<tokio::io::unix::AsyncFd<File>>) -> Option<ChildExit> {
    let Some(pipe) = ended.as_ref() else {
        return std::future::pending().await;
    };
    let said = loop {
        let Ok(mut ready) = pipe.readable().await else {
            break None;
        };
        let mut record = [0u8; 2];
        match ready.try_io(|fd| io::Read::read(&mut fd.get_ref(), &mut record)) {
            Ok(Ok(2)) if record[0] == guard::END_REPORT => {
                break Some(ChildExit::Code(i32::from(record[1])))
            }
            Ok(Err(err)) if err.kind() == io::ErrorKind::Interrupted => {}
            Ok(_) => break None,
            Err(_would_block) => {}
        }
    };
    *ended = None;
    said
}

/// How long lockrun waits for an armed guard's answer once it has asked
/// for its wait back: past that, the guard is taken for stuck, and ended.
const DISARM_PATIENCE: Duration = Duration::from_secs(5);

impl Prepared {
    /// Arms the parked guard (see `go`): it waits for the lock of `lock`
    /// itself and starts COMMAND with `env` and what `arming` adds the
    /// moment it is granted, with nobody to wake between the grant and the
    /// start; with `verdict`, promised one as [`Prepared::start_handing_over`]'s
    /// guard is. Its answer comes from [`Prepared::report`]; until then it
    /// may be asked for its wait back ([`Prepared::disarm`]).
    ///
    /// Only where nothing must happen in lockrun between the grant and the
    /// start: not on a terminal, nor in a job stopped now
    /// (`ErrorKind::Unsupported` then, and nothing was sent).
    pub fn arm(
        &mut self,
        env: &[(OsString, OsString)],
        arming: &Arming,
        lock: &OwnedFd,
        verdict: bool,
    ) -> io::Result<()> {
        let Some(parked) = self.parked.as_ref() else {
            unreachable!("a Prepared is parked until started or dropped");
        };
        // On a terminal, whether COMMAND gets it is decided as it starts
        // (lockrun may be moved to the foreground meanwhile): not here.
        let terminal = match parked.terminal {
            Terminal::Auto => {
                use std::os::fd::AsFd;
                nix::unistd::isatty(io::stdin().as_fd()).unwrap_or(true)
            }
            Terminal::Never => false,
        };
        if terminal || crate::job::job_stopping() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the guard cannot start the child alone here",
            ));
        }
        let message = go::encode_arm(env, verdict, arming)?;
        go::send(&parked.go, &message, Some(lock))
    }

    /// The armed guard's answer (see `go`). An error when it is gone or
    /// said what no guard says: it then runs nothing, or is ended with us.
    pub async fn report(&mut self) -> io::Result<Report> {
        let Some(parked) = self.parked.as_ref() else {
            unreachable!("a Prepared is parked until started or dropped");
        };
        let channel = sys::register_channel(&parked.go)?;
        let mut bytes = Vec::new();
        loop {
            match Report::decode(&bytes) {
                Ok(Some(report)) => return Ok(report),
                Ok(None) => {}
                Err(()) => return Err(io::Error::other("the guard's answer is garbled")),
            }
            let mut guard = channel.readable().await?;
            let mut buf = [0u8; 512];
            // One record at most is in flight: read no further than it.
            match guard.try_io(|fd| io::Read::read(&mut fd.get_ref(), &mut buf)) {
                Ok(Ok(0)) => return Err(io::Error::other("the guard is gone")),
                Ok(Ok(n)) => bytes.extend_from_slice(&buf[..n]),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => {}
            }
        }
    }

    /// Takes an armed guard's wait back, and returns its answer: a grant
    /// may have come first. Ends with an error, the guard left to be
    /// dropped, if none comes within [`DISARM_PATIENCE`].
    pub async fn disarm(&mut self) -> io::Result<Report> {
        let pid = self.pid;
        let deadline = Instant::now() + DISARM_PATIENCE;
        let asking = async {
            loop {
                sys::ask_guard_to_disarm(pid);
                sleep(DISARM_REPEAT).await;
                if Instant::now() >= deadline {
                    return;
                }
            }
        };
        tokio::select! {
            report = self.report() => report,
            () = asking => Err(io::Error::other("the guard did not give its wait back")),
        }
    }

    /// Says how the started child is contained: at the default verbosity
    /// when asked to ([`Prepared`]'s `announce`), else under `-v`.
    fn announce_containment(&self, pid: u32) {
        if self.announce {
            tracing::info!("containment: {}", self.containment.describe(pid));
        } else {
            tracing::debug!("containment: {}", self.containment.describe(pid));
        }
    }

    /// The guard an armed wait was granted to, running COMMAND already, as
    /// [`Prepared::start_with`] would have returned it.
    pub fn into_started(mut self, verdict: bool) -> Child {
        let pid = self.pid;
        let Some(Parked {
            go,
            end,
            sigchld,
            terminal,
        }) = self.parked.take()
        else {
            unreachable!("a Prepared is parked until started or dropped");
        };
        let job = watch_job();
        tracing::debug!(pid, "the armed guard started the child");
        self.announce_containment(pid);
        Child {
            pid,
            state: State::Running,
            sigchld,
            foreground: None,
            sweep_until: None,
            deadlines: Some(go),
            verdict_owed: verdict,
            terminal,
            job,
            stopped: false,
            stopping: None,
            latest_deadline: Arc::default(),
            ending: false,
            cgroup: self.containment.dir_of(pid),
            started_stopped: false,
            trim_armed: false,
            ended: sys::register_end(end),
        }
    }
}

/// A parked guard forked before the runtime started ([`Child::fork_parked`]):
/// a copy of lockrun taken while it was small and had one thread, so that
/// no exec, dynamic linking or start-up of a second lockrun is paid. It is
/// the guard of the first round; later rounds [`Child::prepare`] their own.
/// Dropping it ends the guard, having run nothing.
pub struct Forked {
    pid: u32,
    /// lockrun's end of the go pipe; `None` once adopted.
    go: Option<File>,
    /// lockrun's end of the end channel; `None` once adopted.
    end: Option<File>,
    containment: Containment,
}

impl Forked {
    /// Takes the guard on, within the runtime, as [`Child::prepare`] would
    /// have returned it. Its exit may already have happened unheard: the
    /// first look at it asks the kernel, not the signal.
    pub fn adopt(mut self) -> io::Result<Prepared> {
        let sigchld = signal(SignalKind::child())?;
        let go = self.go.take().expect("a Forked is adopted once");
        let end = self.end.take().expect("a Forked is adopted once");
        Ok(Prepared {
            pid: self.pid,
            parked: Some(Parked {
                go,
                end,
                sigchld,
                terminal: Terminal::Auto,
            }),
            containment: self.containment.clone(),
            announce: true,
        })
    }
}

impl Drop for Forked {
    fn drop(&mut self) {
        if let Some(go) = self.go.take() {
            drop(go);
            discard(self.pid);
            discard_cgroup(&self.containment, self.pid);
        }
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if let Some(Parked { go, .. }) = self.parked.take() {
            // Closing the pipe alone would end the guard (EOF before go);
            // `discard` does not wait for it to notice.
            drop(go);
            discard(self.pid);
            discard_cgroup(&self.containment, self.pid);
        }
    }
}

/// The cgroup a discarded guard made while parked (see `cgroup`): killed
/// before it could remove it, it leaves it to us.
fn discard_cgroup(containment: &Containment, pid: u32) {
    if let Some(dir) = containment.dir_of(pid) {
        if let Err(err) = cgroup::remove_after_guard(&dir, DISCARD_PATIENCE) {
            tracing::debug!("cannot remove the cgroup `{}`: {err}", dir.display());
        }
    }
}

/// Ends a guard that never got its go, and reaps it. Its group is itself
/// alone, and, unreaped, ours to signal.
///
/// No I/O and no unbounded wait: SIGKILL, then short naps until it is gone,
/// and if it is slow to die (stuck in the kernel), a thread reaps it.
fn discard(pid: u32) {
    if let Err(err) = sys::kill_group(pid, Signal::Kill.number()) {
        tracing::warn!("cannot kill the parked guard: {err}");
    }
    let deadline = std::time::Instant::now() + DISCARD_PATIENCE;
    let mut pause = Duration::from_micros(20);
    loop {
        match sys::try_reap(pid) {
            Ok(Some(_)) => {
                orphans::guard_reaped(pid);
                return;
            }
            Ok(None) => {}
            Err(err) => {
                tracing::warn!("cannot reap the parked guard: {err}");
                return;
            }
        }
        if std::time::Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(2));
    }
    tracing::debug!(
        pid,
        "the parked guard is slow to die; reaping it on a thread"
    );
    let reaper = std::thread::Builder::new()
        .name("lockrun-reaper".into())
        .spawn(move || {
            if let Err(err) = sys::reap_blocking(pid) {
                tracing::warn!("cannot reap the parked guard: {err}");
            }
        });
    if let Err(err) = reaper {
        tracing::warn!("cannot reap the parked guard: {err}");
    }
}

/// Why [`Child::resume`] continues a stopped child.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Resume {
    /// The job was continued, by `fg` or `bg`.
    Job,
    /// The child must hear a signal that asks it to end (or to hang up),
    /// which a stopped process cannot act on.
    ToHear,
}

/// Sleeps for `pause`, or forever without one.
async fn sleep_for(pause: Option<Duration>) {
    match pause {
        Some(pause) => sleep(pause).await,
        None => std::future::pending().await,
    }
}

/// Adds which program failed to start, keeping the error's kind.
fn spawn_error(cmd: &Command, err: io::Error) -> io::Error {
    let detail = if err.raw_os_error() == Some(libc::ESRCH) {
        // From sys::arm_guard: lockrun's parent check failed.
        "lockrun's process changed under it while starting the guard".to_owned()
    } else {
        err.to_string()
    };
    io::Error::new(
        err.kind(),
        format!(
            "cannot start the guard process `{}`: {detail}",
            cmd.guard_exe.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell_convention() {
        assert_eq!(ChildExit::Code(0).code(), 0);
        assert_eq!(ChildExit::Code(3).code(), 3);
        assert_eq!(ChildExit::Signal(9).code(), 137);
        assert_eq!(ChildExit::Signal(15).code(), 143);
        assert_eq!(ChildExit::Signal(9).to_string(), "killed by SIGKILL");
        assert_eq!(ChildExit::Code(3).to_string(), "exited with status 3");
    }

    fn args(cmd: &Command) -> Vec<String> {
        let guard = cmd.guard_command([3, 4]).unwrap();
        guard
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn builds_the_guard_command_line() {
        let mut cmd = Command {
            argv: vec!["echo".into(), "a b".into()],
            shell: false,
            env: vec![],
            env_remove: vec![],
            guard_exe: "/bin/lockrun".into(),
            lends: false,
            leftovers: Leftovers::Wait,
            containment: Containment::Subreaper("a test".into()),
        };
        assert_eq!(
            args(&cmd),
            ["__guard", "--go-fd", "3", "--end-fd", "4", "--", "echo", "a b"]
        );
        cmd.shell = true;
        cmd.argv = vec!["echo \"$1\"".into(), "x".into()];
        assert_eq!(
            args(&cmd),
            [
                "__guard",
                "--go-fd",
                "3",
                "--end-fd",
                "4",
                "--",
                "/bin/sh",
                "-c",
                "echo \"$1\"",
                "lockrun",
                "x"
            ]
        );
        cmd.argv.clear();
        assert_eq!(
            cmd.guard_command([3, 4]).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    /// A `Child` for `pid` in `state`, as the tests below build one by
    /// hand: no terminal, no job, no deadlines, no verdict owed.
    fn bare(pid: u32, state: State) -> Child {
        Child {
            pid,
            state,
            sigchld: signal(SignalKind::child()).unwrap(),
            foreground: None,
            sweep_until: None,
            deadlines: None,
            verdict_owed: false,
            terminal: Terminal::Never,
            job: None,
            stopped: false,
            stopping: None,
            latest_deadline: Arc::default(),
            ending: false,
            cgroup: None,
            started_stopped: false,
            trim_armed: false,
            ended: None,
        }
    }

    /// A stopped job is continued at `fg` only while the lease the guard
    /// last heard of holds: past it, the child stays stopped (the loss that
    /// follows ends it), since the stopped guard could not stop it first.
    #[test]
    fn a_job_is_continued_only_within_its_lease() {
        fn state(pid: u32) -> char {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            let rest = &stat[stat.rfind(')').unwrap() + 2..];
            rest.chars().next().unwrap()
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut leader = std::process::Command::new("sleep")
                .arg("600")
                .process_group(0)
                .spawn()
                .unwrap();
            let pid = leader.id();
            let stop = || {
                sys::kill_group(pid, libc::SIGSTOP).unwrap();
                // WUNTRACED returns once the stop has happened.
                let status = nix::sys::wait::waitpid(
                    nix::unistd::Pid::from_raw(pid as i32),
                    Some(nix::sys::wait::WaitPidFlag::WUNTRACED),
                )
                .unwrap();
                assert!(matches!(status, nix::sys::wait::WaitStatus::Stopped(..)));
            };
            let mut child = bare(pid, State::Running);
            child.stopped = true;
            let lapsed = crate::clock::boottime().saturating_sub(Duration::from_secs(1));
            let ahead = crate::clock::boottime() + Duration::from_secs(3600);

            stop();
            child.latest_deadline.store(
                lapsed.as_nanos() as u64,
                std::sync::atomic::Ordering::Release,
            );
            child.resume(Resume::Job);
            let after_lapse = state(pid);
            child.resume(Resume::ToHear);
            let to_hear = state(pid);

            stop();
            child.latest_deadline.store(
                ahead.as_nanos() as u64,
                std::sync::atomic::Ordering::Release,
            );
            child.resume(Resume::Job);
            let within = state(pid);

            let _ = leader.kill();
            let _ = leader.wait();
            child.state = State::Reaped(ChildExit::Code(0));
            // SIGCONT sets the process running at once, before kill returns.
            assert_eq!(after_lapse, 'T', "continued past its lease");
            assert_ne!(to_hear, 'T', "not continued to hear a stop request");
            assert_ne!(within, 'T', "not continued within its lease");
        });
    }

    /// A guard promised a verdict waits for it at its end: a channel too
    /// full to take it whole is closed instead, which the guard reads as
    /// "keep", so that neither waits for the other.
    #[test]
    fn a_verdict_the_channel_cannot_take_closes_it() {
        use std::io::Read;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
            ours.set_nonblocking(true).unwrap();
            theirs.set_nonblocking(true).unwrap();
            // A channel the guard has not read: full to the last byte.
            let mut ours = File::from(std::os::fd::OwnedFd::from(ours));
            let filler = [0u8; 4096];
            while io::Write::write(&mut ours, &filler).is_ok_and(|n| n > 0) {}
            while io::Write::write(&mut ours, &filler[..1]).is_ok_and(|n| n > 0) {}
            let mut child = bare(u32::MAX, State::Reaped(ChildExit::Code(0)));
            child.deadlines = Some(ours);
            child.verdict_owed = true;
            let swap = [PathBuf::from("/d/k.new"), PathBuf::from("/d/k")];
            assert!(!child.hand_over(Verdict::LetGo { swap }));
            // The guard, reading all there is, comes to the channel's end,
            // not to a wait for a verdict that will never come. A blocking
            // read with a deadline: a process another test spawns holds a
            // copy of every descriptor between its fork and its exec, so
            // the end may come a moment after the close, never not at all.
            theirs.set_nonblocking(false).unwrap();
            theirs
                .set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            let mut theirs = theirs;
            let mut buf = [0u8; 65536];
            let end = loop {
                match theirs.read(&mut buf) {
                    Ok(0) => break Ok(()),
                    Ok(_) => continue,
                    Err(e) => break Err(e),
                }
            };
            assert!(end.is_ok(), "the channel stayed open: {end:?}");
        });
    }

    /// Issue #12: a `wait` cancelled after the guard was reaped but before
    /// the group was confirmed empty used to return at once when polled
    /// again. We build that very state: a group whose leader is reaped and
    /// one of whose members still runs.
    #[test]
    fn a_wait_resumed_after_a_cancelled_sweep_still_empties_the_group() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut leader = std::process::Command::new("/bin/sh")
                .args(["-c", "sleep 600 & echo $!"])
                .process_group(0)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut line = String::new();
            io::BufRead::read_line(
                &mut io::BufReader::new(leader.stdout.take().unwrap()),
                &mut line,
            )
            .unwrap();
            let member: i32 = line.trim().parse().unwrap();
            let pgid = leader.id();
            leader.wait().unwrap();
            assert_eq!(sys::live_group_members(pgid).unwrap(), [member as u32]);

            let mut child = bare(pgid, State::Reaped(ChildExit::Code(0)));
            child.sweep_until = Some(Instant::now() + SWEEP_LIMIT);
            let exit = tokio::time::timeout(Duration::from_secs(60), child.wait())
                .await
                .unwrap();
            assert_eq!(exit, ChildExit::Code(0));
            let members = sys::live_group_members(pgid).unwrap();
            if !members.is_empty() {
                let _ = sys::kill_group(pgid, libc::SIGKILL);
            }
            assert!(members.is_empty(), "{members:?} outlived the wait");
            assert!(child.sweep_until.is_none());
        });
    }
}
