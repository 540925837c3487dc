//! The guard: lockrun re-executed as
//! `lockrun __guard [--go-fd N [--end-fd M]] -- COMMAND [ARGS...]`, or forked from
//! lockrun before its runtime started (see `Child::fork_parked`), running
//! the same `run`.
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
//! It is also the lease's last line (see `deadline`): while COMMAND runs it
//! polls COMMAND's exit, the deadlines lockrun sends after each confirmed
//! renewal, and a CLOCK_BOOTTIME timer; a deadline that passes with no newer
//! one makes it stop the group itself, however stuck lockrun is.
//!
//! lockrun starts the guard *parked*, as `lockrun __guard --go-fd N --end-fd M -- ...`,
//! while it still waits for the lock: the guard sets itself up, then blocks
//! reading descriptor N until lockrun sends the go message (see `go`) with
//! the environment to add; the same pipe then carries the deadlines. Without a whole go message (lockrun gave up, or
//! died) it exits 125, saying nothing, having run nothing. Its parent-death
//! signal is armed while it is parked too.
//!
//! The guard ends COMMAND's whole tree before it exits (`end_tree`). Where
//! that end is certain (COMMAND exited, every process of the tree is gone
//! and reaped, its cgroup removed), the guard says so before its exit: a
//! guard lent the lock's descriptor lets go of the lock itself, if lockrun
//! said it may (see `hand_back`); any other writes its status on the end
//! channel (see `END_REPORT`), and lockrun lets go of the lock then, not
//! after our teardown and the SIGCHLD that follows it (0.2-0.5 ms of a
//! handover). Where it is not certain (we were killed, could not wait for
//! COMMAND, or could not remove its cgroup), lockrun sweeps the group while
//! we are an unreaped zombie pinning the group id, and lets go after that,
//! as ever.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal as NixSignal;
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::Pid;

use super::cgroup::{Cgroup, Containment};
use super::deadline::{self, Deadline, Step, Verdict};
use super::go;
use super::sys::{self, spawn};
pub use super::Leftovers;
use crate::clock::{self, BootTimer};
use crate::signals::Signal;

/// The hidden subcommand lockrun routes to [`main`].
pub const SUBCOMMAND: &str = "__guard";

/// The guard's process name (`comm`: `ps -o comm`, `pgrep`). A guard forked
/// without exec keeps lockrun's command line, so its name is what tells it
/// apart; an exec'd one takes it too. It does not contain "lockrun": `pkill
/// lockrun` matches names, and a guard killed with lockrun leaves the tree
/// unsupervised, where lockrun killed alone has its guard kill the tree.
pub const PROCESS_NAME: &str = "lr-guard";

/// The names guards of earlier lockruns took, still alive during an
/// upgrade: their cgroups are not stale.
pub(super) const FORMER_NAMES: &[&str] = &["lockrun-guard"];

/// Separates the guard's own arguments from COMMAND.
const SEPARATOR: &str = "--";

/// The guard's first option: wait for the go message on this descriptor
/// before running COMMAND. Without it the guard runs COMMAND at once.
const GO_FD: &str = "--go-fd";

/// The guard's second option, only after the first: its end of the end
/// channel, on which it says that COMMAND's tree is gone (see
/// [`END_REPORT`]).
const END_FD: &str = "--end-fd";

/// The end channel's one message: this byte, then the status the guard is
/// about to exit with. Written only where the tree's end is certain
/// (COMMAND exited and was reaped, every other process of the tree is gone
/// and reaped, its cgroup removed), by a guard lent no descriptor: lockrun
/// may let go of the lock at once, without waiting for our teardown.
pub(super) const END_REPORT: u8 = 0xE0;

/// Exit status when COMMAND was not found (as in sh, env and timeout).
const NOT_FOUND: u8 = 127;
/// Exit status when COMMAND was found but could not be executed.
const NOT_EXECUTABLE: u8 = 126;
/// Exit status when the guard itself was misused or failed: lockrun's own
/// failure, from the exit table below every layer, so that `sys` can name
/// it without importing the guard that imports `sys`.
pub(super) use crate::exit::GUARD_FAILED;

/// The arguments that follow [`SUBCOMMAND`] to run `argv` once the go
/// message arrives on descriptor `go`, reporting the tree's end on `end`.
pub(super) fn arguments(
    go: RawFd,
    end: RawFd,
    argv: &[OsString],
) -> impl Iterator<Item = OsString> + '_ {
    [
        OsString::from(GO_FD),
        OsString::from(go.to_string()),
        OsString::from(END_FD),
        OsString::from(end.to_string()),
        OsString::from(SEPARATOR),
    ]
    .into_iter()
    .chain(argv.iter().cloned())
}

/// The guard's entry point. `args` are the words after `__guard`:
/// `[--go-fd N [--end-fd M]] -- PROGRAM [ARGS...]`.
pub fn main(args: Vec<OsString>) -> ExitCode {
    let Some(mut invocation) = parse(&args) else {
        say(format_args!(
            "`{SUBCOMMAND}` is for lockrun's own use: \
             lockrun {SUBCOMMAND} [{GO_FD} N [{END_FD} M]] -- COMMAND [ARGS...]"
        ));
        return ExitCode::from(GUARD_FAILED);
    };
    invocation.leftovers = Leftovers::from_env();
    invocation.cgroup = CgroupPlan::from_env();
    // Exec'd, we were given COMMAND's environment by lockrun's spawn.
    ExitCode::from(run(invocation, &Environment::default()))
}

/// What COMMAND's environment gets besides the guard's own: nothing for an
/// exec'd guard, whose spawn set its environment; lockrun's changes for a
/// guard forked without exec, whose environment is lockrun's.
#[derive(Default)]
pub(super) struct Environment<'a> {
    pub remove: &'a [OsString],
    pub add: &'a [(OsString, OsString)],
}

impl Environment<'_> {
    /// COMMAND's whole environment: the guard's, less what lockrun removes,
    /// plus what it adds and what came with the go message, in that order.
    fn of_command(&self, from_go: go::Env) -> go::Env {
        let mut vars: go::Env = std::env::vars_os()
            .filter(|(key, _)| {
                !self.remove.contains(key) && key != LEFTOVERS_ENV && key != CGROUP_ENV
            })
            .collect();
        for (key, value) in self.add.iter().cloned().chain(from_go) {
            vars.retain(|(k, _)| *k != key);
            vars.push((key, value));
        }
        vars
    }
}

/// The guard itself, exec'd or forked: returns its exit status.
pub(super) fn run(
    Invocation {
        go,
        end,
        forked,
        argv,
        leftovers,
        cgroup: plan,
    }: Invocation<'_>,
    environment: &Environment<'_>,
) -> u8 {
    // The command line, which `pkill -f lockrun` matches: ours is
    // lockrun's (forked) or names lockrun's binary (exec'd). First, so that
    // the descriptor it reads /proc/self/stat through is closed by the time
    // our name says we are the guard (a test counts our descriptors then).
    sys::set_command_line(PROCESS_NAME.as_bytes());
    // Failing to rename ourselves costs operators a hint, nothing else.
    if let Ok(name) = std::ffi::CString::new(PROCESS_NAME) {
        let _ = nix::sys::prctl::set_name(&name);
    }

    // Handlers first: lockrun spawned us with these signals blocked, so any
    // that arrived early are pending, not fatal, and COMMAND gets them below.
    // The parent-death handler must be in place before we park, too.
    sys::guard_install_handlers();
    // The end channel (see `END_REPORT`) is ours, never COMMAND's: it is
    // marked close-on-exec before anything else (an exec'd guard inherits
    // it unmarked), and as a socket it cannot be opened anew through
    // /proc (see `sys::end_channel`). Unmarkable, it is closed, and lockrun
    // hears of the end from our exit, as without it.
    let end = end.and_then(|fd| {
        let file = sys::take_inherited(fd).ok()?;
        sys::close_on_exec(&file).ok()?;
        Some(file)
    });

    // COMMAND's own cgroup, if lockrun found one we may make: made now,
    // while lockrun may still wait for the lock. COMMAND starts straight
    // into it (clone3), so nobody moves between cgroups, which costs an RCU
    // grace period per move; where the kernel cannot do that we enter it
    // now, so that COMMAND starts in it with no move on the handover's
    // path, and leave it once COMMAND runs. Otherwise, or if anything fails
    // on the way, the subreaper alone contains it.
    let direct = plan.is_some() && spawn::clone3_available();
    let mut entered = false;
    let mut cgroup = plan.as_ref().and_then(|plan| {
        let made = Cgroup::create(&plan.parent).and_then(|made| {
            if direct {
                return Ok(made);
            }
            match made.enter() {
                Ok(()) => {
                    entered = true;
                    Ok(made)
                }
                Err(err) => {
                    let _ = made.remove();
                    Err(err)
                }
            }
        });
        match made {
            Ok(made) => Some(made),
            Err(err) => {
                plan.fell_back(format_args!(
                    "cannot make a cgroup of its own in `{}`: {}",
                    plan.parent.display(),
                    reason(&err)
                ));
                None
            }
        }
    });

    // Parked: lockrun may not hold the lock yet. Only a whole go message
    // lets us go on. The pipe then carries deadlines (see `deadline`); it
    // becomes close-on-exec before COMMAND exists, so COMMAND never holds it.
    // The go message may lend us a descriptor to hold (a `flock`ed file):
    // ours until we exit, never COMMAND's (it comes close-on-exec).
    // Armed (see `go`), we wait for the lock ourselves and start COMMAND
    // the moment it is granted; taken back, or refused by the engine's
    // step, we are parked again. `granted` is then what lockrun is told,
    // once COMMAND is started.
    let mut granted = None;
    if forked && go.is_some() {
        sys::own_shared_pages();
    }
    let parked = match go {
        Some(fd) => (|| {
            let pipe = sys::take_inherited(fd).ok()?;
            let go = loop {
                match go::receive(&pipe)? {
                    go::Message::Go(go) => break go,
                    go::Message::Arm(go, arming) => {
                        if let Some((go, report)) = wait_armed(&pipe, go, arming, plan.as_ref()) {
                            granted = Some(report);
                            break go;
                        }
                    }
                }
            };
            sys::close_on_exec(&pipe).ok()?;
            // A verdict is about a lent descriptor, or nothing.
            let held = go.lent.map(|fd| Held {
                fd,
                verdict: go.verdict,
            });
            Some((go.env, Some(pipe), held))
        })(),
        None => Some((Vec::new(), None, None)),
    };
    let Some((env, channel, held)) = parked else {
        // Nothing ran: our cgroup goes with us.
        if let Some(made) = cgroup {
            if !entered || made.leave().is_ok() {
                let _ = made.remove();
            }
        }
        return GUARD_FAILED;
    };
    // From here on every end of ours reads lockrun's verdict on the lent
    // descriptor (see `hand_back`): once lockrun has said we may let go,
    // only we can leave its last word beside the lock.
    let mut channel = Channel {
        pipe: channel,
        reader: deadline::Reader::default(),
    };
    // The job is COMMAND's whole process tree (SPEC §3). As a subreaper we
    // inherit every orphan of it, a daemon that called `setsid` and forked
    // twice included, so the tree stays below us whatever its groups and
    // sessions: we can find it, signal it, and we exit only once it is
    // empty (`end_tree`), which is what lockrun waits for before it gives
    // up the lock on any backend.
    // Armed: lockrun learns of the grant once COMMAND is started (or
    // failed to start, which it then hears of as after a go).
    let tell = |channel: &Channel, granted: Option<String>| {
        if let (Some(report), Some(pipe)) = (granted, channel.pipe.as_ref()) {
            let _ = (&*pipe).write_all(&go::Report::Granted(report).encode());
        }
    };
    if nix::sys::prctl::set_child_subreaper(true).is_err() {
        tell(&channel, granted);
        if let Some(held) = held {
            hand_back(held, &mut channel, false);
        }
        return GUARD_FAILED;
    }

    // COMMAND's exit must wake our poll below, so SIGCHLD arrives on a
    // descriptor; blocked before the spawn, none is missed. Without it we
    // can still wait for COMMAND, only not keep deadlines meanwhile.
    let watch = Watch::new(true);
    if let Err(err) = &watch {
        say(format_args!(
            "cannot watch the lease's deadline ({err}); the command runs under lockrun's watch alone"
        ));
    }

    let spawned = spawn::prepare(argv, &environment.of_command(env)).and_then(|prepared| {
        let into = cgroup
            .as_ref()
            .filter(|_| !entered)
            .and_then(|made| made.fd());
        if let Some(fd) = into {
            match prepared.spawn_into(fd) {
                Ok(spawned) => return spawned,
                // The kernel would not start it there: we move there
                // ourselves, as on a kernel without clone3, and leave below.
                Err(_) => match cgroup.as_ref().map(Cgroup::enter) {
                    Some(Ok(())) => entered = true,
                    Some(Err(err)) => {
                        if let Some(plan) = &plan {
                            plan.fell_back(format_args!(
                                "cannot start the command in `{}`: {}",
                                cgroup.as_ref().map_or(Path::new(""), |c| c.dir()).display(),
                                reason(&err)
                            ));
                        }
                        if let Some(made) = cgroup.take() {
                            let _ = made.remove();
                        }
                    }
                    None => {}
                },
            }
        }
        prepared.spawn()
    });
    tell(&channel, granted);
    let mut child = match spawned {
        Ok(child) => child,
        Err(err) => {
            if let Some(cgroup) = cgroup {
                if !entered || cgroup.leave().is_ok() {
                    let _ = cgroup.remove();
                }
            }
            // Nothing ran; lockrun lets go once it has seen us exit.
            if let Some(held) = held {
                hand_back(held, &mut channel, false);
            }
            let program = argv[0].to_string_lossy();
            say(format_args!("cannot run `{program}`: {}", reason(&err)));
            return exit_for(&err);
        }
    };
    sys::guard_relay_pending_and_unblock(child.id());
    // COMMAND runs in the cgroup; if we entered it, we leave it, so that
    // its `cgroup.kill` spares us. Should we fail to, it stays our cgroup
    // as much as COMMAND's: we do without it.
    // A cgroup we could not leave is not removed by us: lockrun does it
    // once we are gone, so our end is then not certain (see `END_REPORT`).
    let mut stayed_in_cgroup = false;
    if let (true, Some(made)) = (entered, &cgroup) {
        if let Err(err) = made.leave() {
            if let Some(plan) = &plan {
                plan.fell_back(format_args!(
                    "cannot leave `{}` to the command: {}",
                    made.dir().display(),
                    reason(&err)
                ));
            }
            cgroup = None;
            stayed_in_cgroup = true;
        }
    }

    // COMMAND runs. What start-up mapped of the program's code stays
    // mapped here (lockrun itself lets go of it): our kill path at the
    // deadline must not wait for the binary to be read back from a disk
    // or a network file system once the page cache has dropped it (attack
    // review: 0.7-1.8 s on a throttled disk, against 4-17 ms).
    let waited = match watch {
        Ok(watch) => watch.run(&mut child, &mut channel, leftovers, cgroup.as_mut()),
        Err(_) => child.wait().map(Ending::Exited),
    };
    // Whatever ended us, we exit (and the held descriptor closes) only after
    // the rest of the tree is dead.
    // COMMAND's pid is ours to signal only while we have not reaped it.
    let unreaped = matches!(waited, Ok(Ending::Killed)).then(|| child.id());
    end_tree(unreaped, cgroup.as_mut());
    // Empty now; a failure leaves an empty directory, nothing running, or a
    // process moved in from outside the tree, which lockrun kills when it
    // removes the cgroup.
    let removed = cgroup.is_none_or(|cgroup| cgroup.remove().is_ok());
    let certain = removed && !stayed_in_cgroup && matches!(waited, Ok(Ending::Exited(_)));
    let status = match &waited {
        Ok(Ending::Exited(status)) => match (status.code(), status.signal()) {
            (Some(code), _) => code as u8,
            (None, Some(signal)) => 128u8.saturating_add(signal as u8),
            (None, None) => GUARD_FAILED,
        },
        Ok(Ending::Killed) => 128 + libc::SIGKILL as u8,
        Err(err) => {
            // We cannot tell whether COMMAND still runs; lockrun will sweep
            // the group when it sees us exit.
            say(format_args!("cannot wait for the command: {err}"));
            GUARD_FAILED
        }
    };
    let lent = held.is_some();
    match held {
        Some(held) => hand_back(held, &mut channel, certain),
        // Where the tree's end is certain, lockrun may let go now, not
        // after our exit: the one write of our end. Where it is not, our
        // exit is the word, and lockrun's sweep comes before its release.
        None if certain => {
            if let Some(mut end) = end {
                if end.write_all(&[END_REPORT, status]).is_ok() {
                    // lockrun, woken, is often put on this CPU, where our
                    // exit would run first: it goes first.
                    sys::yield_now();
                }
            }
        }
        None => {}
    }
    if matches!(waited, Ok(Ending::Killed)) && !lent {
        // Killed as the rest of the tree was: lockrun reads our end as it
        // always has, as death by SIGKILL.
        let _ = nix::sys::signal::raise(NixSignal::SIGKILL);
    }
    status
}

/// An armed guard's wait (see `go`): the lent descriptor's lock, then the
/// engine's step. The go message to go on with and the report for lockrun,
/// once granted and accepted; `None`, having answered lockrun, when the
/// wait was taken back or the grant refused (let go at once: nothing ran).
fn wait_armed(
    pipe: &File,
    go: go::Go,
    arming: go::Arming,
    plan: Option<&CgroupPlan>,
) -> Option<(go::Go, String)> {
    let answer = |report: go::Report| {
        let _ = (&*pipe).write_all(&report.encode());
    };
    let lent = go.lent.as_ref()?;
    let on_grant = super::grant_step().and_then(|step| step(&arming.grant));
    match sys::guard_wait_lock(lent.as_fd()) {
        Ok(true) => {}
        Ok(false) => {
            answer(go::Report::Disarmed);
            return None;
        }
        Err(_) => {
            answer(go::Report::Declined);
            return None;
        }
    }
    let Some((fence, report)) = on_grant.and_then(|on_grant| on_grant(lent.as_fd())) else {
        let _ = sys::unlock(lent.as_fd());
        answer(go::Report::Declined);
        return None;
    };
    // As lockrun does before a go: a job whose lockrun and guard were both
    // killed runs on in its cgroup, unsupervised, and the lock may have
    // just come to us from it: it is killed before COMMAND starts.
    if let Some(plan) = plan {
        super::cgroup::remove_stale(&plan.parent);
    }
    let mut go = go;
    let fence_text = OsString::from(fence.to_string());
    for key in arming.fence_vars {
        go.env.push((key.into(), fence_text.clone()));
    }
    if let Some((name, backend, key, holder)) = arming.sequencer {
        let sequencer = crate::sequencer::Sequencer {
            backend,
            key,
            fence,
            holder,
        };
        go.env.push((name.into(), sequencer.encode().into()));
    }
    Some((go, report))
}

/// What the guard waits on while COMMAND runs: COMMAND's exit (SIGCHLD on a
/// signalfd), the deadline channel, and a CLOCK_BOOTTIME timer for the
/// deadline, all in one poll(2), so that no thread is needed.
struct Watch {
    exits: SignalFd,
    timer: BootTimer,
    /// Whether we hold a descriptor: then every end of the group goes
    /// through `end_group`, lockrun's death included, so the parent-death
    /// signal arrives here rather than at its handler.
    orderly: bool,
}

/// How [`Watch::run`] ended.
enum Ending {
    /// COMMAND exited.
    Exited(ExitStatus),
    /// The group must die now: the last deadline passed its SIGKILL moment,
    /// or lockrun died. Only when we hold a descriptor; otherwise we SIGKILL
    /// the group, ourselves included, and never return.
    Killed,
}

impl Watch {
    fn new(orderly: bool) -> io::Result<Watch> {
        let mask = sys::guard_watched_signals(orderly);
        mask.thread_block()?;
        let exits = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)?;
        Ok(Watch {
            exits,
            timer: BootTimer::new()?,
            orderly,
        })
    }

    /// Waits for COMMAND, running the stop ladder on our own group if the
    /// last deadline lockrun gave us passes with no newer one.
    fn run(
        self,
        child: &mut spawn::Spawned,
        channel: &mut Channel,
        leftovers: Leftovers,
        mut cgroup: Option<&mut Cgroup>,
    ) -> io::Result<Ending> {
        let mut current: Option<Deadline> = None;
        let mut signalled = false;
        let mut command_exit: Option<ExitStatus> = None;
        // With `--leftovers kill`: when the leftovers get SIGKILL.
        let mut leftovers_kill_at: Option<Duration> = None;
        loop {
            relay_to_strays();
            // The earliest moment something is due: the timer is set to it.
            let mut wake: Option<Duration> = None;
            if command_exit.is_none() {
                command_exit = child.try_wait()?;
            }
            if let Some(status) = command_exit {
                // COMMAND is gone; the job lasts until its tree is empty,
                // unless the operator asked for the leftovers to be killed.
                // Once lockrun asked the job to stop and COMMAND obeyed,
                // what COMMAND left in its group is killed with it, as
                // lockrun's sweep always did; processes outside the group
                // heard the stop signal too (relayed) and get their grace
                // until lockrun's SIGKILL step.
                let stopping = [libc::SIGTERM, libc::SIGINT, libc::SIGQUIT, libc::SIGABRT]
                    .into_iter()
                    .any(sys::guard_survived);
                if stopping {
                    kill_group_but_us();
                }
                if tree_is_empty(cgroup.as_deref_mut()) {
                    return Ok(Ending::Exited(status));
                }
                if let Leftovers::Kill { signal, grace } = leftovers {
                    let now = clock::boottime();
                    let kill_at = *leftovers_kill_at.get_or_insert_with(|| {
                        signal_tree(signal.number());
                        now + grace
                    });
                    // Past the grace, `end_tree` SIGKILLs what is left.
                    if signal == Signal::Kill || now >= kill_at {
                        return Ok(Ending::Exited(status));
                    }
                    wake = Some(kill_at);
                }
            }
            if let Some(deadline) = current {
                match deadline.step(clock::boottime(), signalled) {
                    Step::WaitUntil(at) => wake = Some(wake.map_or(at, |w| w.min(at))),
                    // lockrun, running, sent it to the group (us included)
                    // itself: a second one could cut the child's shutdown
                    // short.
                    Step::Signal(number) if sys::guard_survived(number) => {
                        signalled = true;
                        continue;
                    }
                    // Silently: stderr may be the very pipe nobody reads
                    // that stalled lockrun, and a write would stall us too.
                    // lockrun reports the loss once it runs again.
                    Step::Signal(number) => {
                        signal_own_group(number);
                        signal_strays(number);
                        signalled = true;
                        continue;
                    }
                    Step::Kill if self.orderly => {
                        return Ok(match command_exit {
                            Some(status) => Ending::Exited(status),
                            None => Ending::Killed,
                        })
                    }
                    Step::Kill => {
                        // Ourselves included: this does not return.
                        signal_own_group(libc::SIGKILL);
                        continue;
                    }
                }
            }
            if let Some(at) = wake {
                self.timer.set(at)?;
            }
            let (exited, fired, message) = {
                let interest = PollFlags::POLLIN;
                let mut fds = vec![
                    PollFd::new(self.exits.as_fd(), interest),
                    PollFd::new(self.timer.as_fd(), interest),
                ];
                // Once COMMAND is gone, a cgroup that empties wakes us too,
                // should its last process not be our child. (Only then:
                // `tree_is_empty` has just read the file, re-arming it.)
                if let (Some(cgroup), Some(_)) = (&cgroup, command_exit) {
                    fds.push(PollFd::new(cgroup.events(), PollFlags::POLLPRI));
                }
                let channel_at = fds.len();
                if let Some(pipe) = &channel.pipe {
                    fds.push(PollFd::new(pipe.as_fd(), interest));
                }
                match poll(&mut fds, PollTimeout::NONE) {
                    Ok(_) => {}
                    // A signal for COMMAND met our no-op handler.
                    Err(Errno::EINTR) => continue,
                    Err(err) => return Err(err.into()),
                }
                let ready = |fd: &PollFd<'_>| fd.revents().is_some_and(|r| !r.is_empty());
                (
                    ready(&fds[0]),
                    ready(&fds[1]),
                    fds.get(channel_at).is_some_and(ready),
                )
            };
            if exited {
                let mut orphaned = false;
                while let Ok(Some(info)) = self.exits.read_signal() {
                    orphaned |= info.ssi_signo as i32 == sys::death_signal();
                }
                if orphaned {
                    return Ok(match command_exit {
                        Some(status) => Ending::Exited(status),
                        None => Ending::Killed,
                    });
                }
            }
            if fired {
                self.timer.clear();
            }
            if let (true, Some(pipe)) = (message, channel.pipe.as_mut()) {
                match deadline::read_available(pipe, &mut channel.reader) {
                    // Once stopping, we finish the ladder we started.
                    Ok(Some(Some(deadline))) if !signalled => {
                        // A signal forwarded before this renewal (a HUP to
                        // reload, say) is not lockrun stopping the child.
                        sys::guard_forget_survived();
                        current = Some(deadline);
                    }
                    Ok(Some(_)) => {}
                    // lockrun closed its end or died (its death has its own
                    // signal); we keep the last deadline.
                    Ok(None) | Err(_) => channel.pipe = None,
                }
            }
        }
    }
}

/// lockrun's messages after the go (see `deadline`): the deadlines, and
/// for a guard lent a descriptor, whether it may let go of it.
struct Channel {
    /// `None` once lockrun closed its end, or died.
    pipe: Option<File>,
    reader: deadline::Reader,
}

/// The end of a guard lent the lock's descriptor, COMMAND's tree gone: if
/// lockrun said we may ([`Verdict::LetGo`]), we swap in its last word
/// beside the lock and, where the tree's end is `certain`, let go of the
/// lock ourselves, so that the next holder need not wait for our exit and
/// lockrun's wake-up. Where it is not (we ended killed, or could not wait
/// for COMMAND, or the cgroup would not go), lockrun's sweep comes first and
/// its release after it, as ever.
///
/// Once it has said we may, lockrun writes nothing beside the lock, so the
/// swap is ours on every path; if it fails we keep the lock, and lockrun
/// lets go of it with the facts as they stand, as when it is killed.
fn hand_back(held: Held, channel: &mut Channel, certain: bool) {
    if !held.verdict {
        return;
    }
    let Verdict::LetGo {
        swap: [staged, facts],
    } = deadline::verdict(channel.pipe.as_mut(), &mut channel.reader)
    else {
        return;
    };
    if crate::host::swap_names(&staged, &facts).is_ok() && certain {
        // Silently, as the rest of our end: if it fails, lockrun's release
        // after our exit still frees the lock.
        if sys::unlock(held.fd.as_fd()).is_ok() {
            // The next holder's guard, woken by the unlock, is often put
            // on this CPU, where our exit (its memory torn down, 0.2 ms
            // here) would run first while the other CPU idles: it goes
            // first.
            sys::yield_now();
        }
    }
}

/// The descriptor lockrun lent us, ours until we exit (it comes
/// close-on-exec, so COMMAND never holds it).
struct Held {
    fd: OwnedFd,
    /// Whether lockrun promised to say if we may let go of it.
    verdict: bool,
}

/// Kills every other process of COMMAND's tree (our descendants, whatever
/// their group or session, and any member of our group) and waits until
/// none is alive, reaping those that are our children (as a subreaper, the
/// tree's orphans are). Kill passes repeat until a pass finds nobody, so a
/// fork loop loses: a process SIGKILLed cannot fork again, and what it
/// forked before is found by the next pass. No time limit: a member stuck
/// in the kernel keeps us, and so the lock, alive, which is the side a lock
/// must err on.
fn end_tree(command: Option<u32>, cgroup: Option<&mut Cgroup>) {
    // COMMAND first, before any look at /proc: when a deadline passes, it
    // is what most likely still runs, and it must not wait for a scan.
    if let Some(pid) = command {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid as i32), NixSignal::SIGKILL);
    }
    // In a cgroup, the kernel kills the whole tree at once, whatever forks
    // meanwhile, and tells us when it is empty; the passes below then find
    // nobody but zombies to reap, or a process that joined our group from
    // outside. If the cgroup stops answering, the passes do the work.
    // An empty cgroup (the usual end: COMMAND's tree ended by itself) has
    // nobody to kill, and nobody can enter it but from outside the tree, by
    // a write to its `cgroup.procs`; then our rmdir fails and lockrun kills
    // it when it removes it.
    if let Some(cgroup) = cgroup {
        let empty = command.is_none() && cgroup.populated() == Some(false);
        if !empty && cgroup.kill().is_ok() {
            while cgroup.populated() == Some(true) {
                reap_children();
                cgroup.wait_change(std::time::Duration::from_millis(50));
            }
        }
    }
    // A subreaper with no children has no descendants: COMMAND and all it
    // started are gone, zombies included, so reading every process's /proc
    // entry would find nobody but a process from outside that joined our
    // group, which lockrun kills with the group before it lets go (after
    // our word on the end channel; else its sweep also waits for it).
    if !reap_children() {
        return;
    }
    let me = std::process::id();
    let group = nix::unistd::getpgrp().as_raw() as u32;
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        reap_children();
        let others = match sys::live_tree(me, group) {
            Ok(others) => others,
            Err(_) => {
                // Without /proc we cannot tell who is left: SIGKILL all of
                // the group at once, ourselves included, as before we were
                // a subreaper. Nothing on stderr first: a stalled reader
                // would stall us.
                signal_own_group(libc::SIGKILL);
                return;
            }
        };
        if others.is_empty() && !reap_children() {
            break;
        }
        for pid in &others {
            let _ = nix::sys::signal::kill(Pid::from_raw(*pid as i32), NixSignal::SIGKILL);
        }
        if others.is_empty() {
            // Only zombies of ours are left, or a child is between fork
            // and showing in /proc: look again at once.
            continue;
        }
        // Members that are not our children send us nothing when they die;
        // the pause is short and grows to a bound, as in lockrun's sweep.
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(50));
    }
}

/// Whether COMMAND's tree is gone, its zombies reaped: we have no child
/// left (as a subreaper, every process of the tree is our descendant), and
/// its cgroup, if it has one, holds no process.
fn tree_is_empty(cgroup: Option<&mut Cgroup>) -> bool {
    // Read first, always: the read is what re-arms the events file's
    // wakeup, which would otherwise fire at every poll.
    let populated = cgroup.and_then(|cgroup| cgroup.populated());
    !reap_children() && populated != Some(true)
}

/// SIGKILLs every live member of our group but ourselves.
fn kill_group_but_us() {
    let me = std::process::id();
    let group = nix::unistd::getpgrp().as_raw() as u32;
    if let Ok(members) = sys::live_group_members(group) {
        for pid in members.into_iter().filter(|pid| *pid != me) {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid as i32), NixSignal::SIGKILL);
        }
    }
}

/// Sends signal `number` to the processes of COMMAND's tree outside our
/// process group: a daemon that called `setsid` hears what lockrun sends the
/// group (a stop, a reload) as COMMAND does.
fn signal_strays(number: i32) {
    let Ok(signal) = NixSignal::try_from(number) else {
        return;
    };
    let me = std::process::id();
    let group = nix::unistd::getpgrp().as_raw() as u32;
    if let Ok(tree) = sys::live_tree(me, group) {
        for pid in tree {
            if sys::process_group_of(pid) != Some(group) {
                let _ = nix::sys::signal::kill(Pid::from_raw(pid as i32), signal);
            }
        }
    }
}

/// Sends signal `number` to every process of COMMAND's tree, in our group
/// or not, ourselves excepted.
fn signal_tree(number: i32) {
    let Ok(signal) = NixSignal::try_from(number) else {
        return;
    };
    let me = std::process::id();
    let group = nix::unistd::getpgrp().as_raw() as u32;
    if let Ok(tree) = sys::live_tree(me, group) {
        for pid in tree {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid as i32), signal);
        }
    }
}

/// Passes the signals lockrun sent our group since the last call on to the
/// tree's processes outside the group.
fn relay_to_strays() {
    for number in sys::guard_take_relayed() {
        signal_strays(number);
    }
}

/// The guard's environment variable for [`Leftovers`], set by lockrun for
/// an exec'd guard (a forked one is handed it directly) and removed from
/// COMMAND's environment: `wait`, or `kill:SIGNAL:GRACE_NANOS`.
pub const LEFTOVERS_ENV: &str = "LOCKRUN_GUARD_LEFTOVERS";

impl Leftovers {
    /// The value of [`LEFTOVERS_ENV`] that says `self`.
    pub(super) fn to_env(self) -> OsString {
        match self {
            Leftovers::Wait => OsString::from("wait"),
            Leftovers::Kill { signal, grace } => {
                format!("kill:{}:{}", signal.number(), grace.as_nanos()).into()
            }
        }
    }

    /// Read back from [`LEFTOVERS_ENV`]; anything we did not write is the
    /// default, which keeps the lock longest.
    fn from_env() -> Leftovers {
        std::env::var_os(LEFTOVERS_ENV)
            .and_then(|value| Leftovers::parse(value.to_str()?))
            .unwrap_or_default()
    }

    fn parse(value: &str) -> Option<Leftovers> {
        if value == "wait" {
            return Some(Leftovers::Wait);
        }
        let mut words = value.strip_prefix("kill:")?.split(':');
        let signal = Signal::from_number(words.next()?.parse().ok()?)?;
        let nanos: u64 = words.next()?.parse().ok()?;
        words.next().is_none().then_some(Leftovers::Kill {
            signal,
            grace: Duration::from_nanos(nanos),
        })
    }
}

/// The guard's environment variable for `CgroupPlan`, set by lockrun for
/// an exec'd guard and removed from COMMAND's environment: the cgroup to
/// make COMMAND's in, after `say:` if a fall-back is to be said.
pub const CGROUP_ENV: &str = "LOCKRUN_GUARD_CGROUP";

/// Where the guard is to make COMMAND's cgroup (see `cgroup`).
pub(super) struct CgroupPlan {
    /// The cgroup to make it in: lockrun's (and so ours).
    parent: PathBuf,
    /// Whether to say, on stderr, that we fell back to the subreaper: at
    /// `-v`, where lockrun said we would use a cgroup.
    say: bool,
}

impl CgroupPlan {
    /// The plan for lockrun's choice of mode; its log's verbosity decides
    /// whether a fall-back is said.
    pub(super) fn of(containment: &Containment) -> Option<CgroupPlan> {
        match containment {
            Containment::Cgroup(parent) => Some(CgroupPlan {
                parent: parent.clone(),
                say: tracing::enabled!(tracing::Level::INFO),
            }),
            Containment::Subreaper(_) => None,
        }
    }

    pub(super) fn to_env(&self) -> OsString {
        let mut value = OsString::from(if self.say { "say:" } else { "" });
        value.push(&self.parent);
        value
    }

    fn from_env() -> Option<CgroupPlan> {
        let value = PathBuf::from(std::env::var_os(CGROUP_ENV)?);
        let (parent, say) = match value.strip_prefix("say:") {
            Ok(rest) => (rest.to_owned(), true),
            Err(_) => (value, false),
        };
        parent.is_absolute().then_some(CgroupPlan { parent, say })
    }

    /// Says, if asked to, that the job runs in subreaper mode after all.
    fn fell_back(&self, why: std::fmt::Arguments<'_>) {
        if self.say {
            say(format_args!("containment: subreaper ({why})"));
        }
    }
}

/// Reaps every child of ours that has exited, never blocking. False only
/// when we have no child left at all.
fn reap_children() -> bool {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return true,
            Ok(_) | Err(Errno::EINTR) => {}
            Err(Errno::ECHILD) => return false,
            // We cannot tell: the caller looks the long way.
            Err(_) => return true,
        }
    }
}

/// Sends signal `number` to our process group: COMMAND, its descendants and
/// ourselves, who survive all but SIGKILL.
fn signal_own_group(number: i32) {
    if let Ok(signal) = NixSignal::try_from(number) {
        let _ = nix::sys::signal::kill(Pid::from_raw(0), signal);
    }
}

/// The guard's arguments, understood.
pub(super) struct Invocation<'a> {
    /// The go pipe's descriptor, if we are to wait for the go message.
    pub go: Option<RawFd>,
    /// The end channel's descriptor, if we are to say when the tree is gone.
    pub end: Option<RawFd>,
    /// Forked from lockrun rather than exec'd: our pages are lockrun's
    /// until written.
    pub forked: bool,
    /// COMMAND, never empty.
    pub argv: &'a [OsString],
    /// What to do with what COMMAND leaves running.
    pub leftovers: Leftovers,
    /// Where to make COMMAND's cgroup, if anywhere.
    pub cgroup: Option<CgroupPlan>,
}

fn parse(args: &[OsString]) -> Option<Invocation<'_>> {
    let fd = |word: &OsString| word.to_str()?.parse::<RawFd>().ok().filter(|fd| *fd >= 0);
    let (go, rest) = match args {
        [option, value, tail @ ..] if option == GO_FD => (Some(fd(value)?), tail),
        _ => (None, args),
    };
    let (end, rest) = match rest {
        [option, value, tail @ ..] if go.is_some() && option == END_FD => (Some(fd(value)?), tail),
        _ => (None, rest),
    };
    match rest.split_first() {
        Some((separator, argv)) if separator == SEPARATOR && !argv.is_empty() => Some(Invocation {
            go,
            end,
            forked: false,
            argv,
            leftovers: Leftovers::Wait,
            cgroup: None,
        }),
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
    fn leftovers_survive_the_trip_through_the_environment() {
        for leftovers in [
            Leftovers::Wait,
            Leftovers::Kill {
                signal: Signal::Term,
                grace: Duration::from_millis(2500),
            },
            Leftovers::Kill {
                signal: Signal::Kill,
                grace: Duration::ZERO,
            },
        ] {
            let value = leftovers.to_env();
            assert_eq!(Leftovers::parse(value.to_str().unwrap()), Some(leftovers));
        }
        for bad in ["", "kill", "kill:15", "kill:99:1", "kill:15:1:2", "Wait"] {
            assert_eq!(Leftovers::parse(bad), None, "{bad:?}");
        }
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
        let built: Vec<OsString> = arguments(4, 5, &args(&["a", "b"])).collect();
        assert_eq!(
            built,
            args(&["--go-fd", "4", "--end-fd", "5", "--", "a", "b"])
        );
        let parsed = parse(&built).unwrap();
        assert_eq!((parsed.go, parsed.end), (Some(4), Some(5)));
        assert_eq!(parsed.argv, &args(&["a", "b"])[..]);
        assert_eq!(argv(&["--go-fd", "4", "--", "a", "b"]).unwrap().0, Some(4));
        assert!(parse(&args(&["--go-fd", "1", "--go-fd", "2", "--", "a"])).is_none());
        // The end channel only with a go pipe, once, and a descriptor.
        assert!(parse(&args(&["--end-fd", "5", "--", "a"])).is_none());
        assert!(parse(&args(&["--go-fd", "4", "--end-fd", "x", "--", "a"])).is_none());
        assert!(parse(&args(&[
            "--go-fd", "4", "--end-fd", "5", "--end-fd", "6", "--", "a"
        ]))
        .is_none());
    }
}
