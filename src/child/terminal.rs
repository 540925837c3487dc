//! Lending the terminal to an interactive child.
//!
//! The child runs in its own process group, which makes it a *background*
//! job as far as the terminal is concerned: the kernel stops a background
//! process that reads the terminal with SIGTTIN, and Ctrl-C goes to the
//! foreground group only. So when stdin is a terminal and lockrun's group is
//! its foreground group, we hand the foreground to the child's group for the
//! child's lifetime and take it back afterwards, as a job-control shell does.
//!
//! The kernel rules (`tty_check_change` in drivers/tty/tty_jobctrl.c): a
//! process outside the foreground group that calls `tcsetpgrp` or
//! `tcsetattr` on its controlling terminal is sent SIGTTOU (which stops it)
//! *unless* it blocks or ignores SIGTTOU, in which case the call simply
//! succeeds. An ignored disposition survives `exec` and would reach COMMAND,
//! so we never ignore it; we *block* it on lockrun's thread instead. A mask
//! survives `exec` too, and std's fork path does not reset it, but the guard
//! sets its mask explicitly before it executes (`sys::arm_guard`) and gives
//! COMMAND an empty one, so the block cannot leak into COMMAND. (Anything
//! else spawned from lockrun's thread while the child owns the terminal
//! would inherit it; the guard of lockrun's next round is spawned only after
//! the terminal is given back.)
//!
//! We keep SIGTTOU blocked on lockrun's thread for as long as the child owns
//! the terminal, not just around the calls: with the terminal's TOSTOP flag
//! set, lockrun writing a log line from the background would otherwise be
//! stopped by SIGTTOU, and a stopped lockrun cannot stop its child when the
//! lock is lost. lockrun's runtime is current-thread, so "lockrun's thread"
//! is the one that writes logs and calls [`Foreground::restore`].
//!
//! The hand-off happens when the child starts, not when its guard is
//! spawned: a guard spawned while lockrun waits for the lock is parked
//! (`Child::prepare`), and a parked guard must not own the foreground, or
//! Ctrl-C while waiting would go to it instead of to lockrun. lockrun gives
//! the foreground away *before* it sends the guard the go message, and the
//! guard runs COMMAND only after reading it, so there is no window in which
//! COMMAND could read the terminal before its group owns it. If any of this
//! fails, the child still runs; it gets SIGTTIN only if it reads the
//! terminal.
//!
//! An interactive lockrun is split in two (see `job`): the terminal's
//! foreground then belongs to the *job's* group, the front's, while lockrun
//! proper runs in a background group of its own with SIGTTOU blocked for
//! good. "Our" group below is the job's group; the child's group may lose
//! the foreground to Ctrl-Z and get it back at `fg` ([`Foreground::take_back`],
//! [`Foreground::give_again`]).

use std::io::stdin;
use std::os::fd::AsFd;

use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow, Signal};
use nix::sys::termios::{tcgetattr, tcsetattr, SetArg, Termios};
use nix::unistd::{getpgrp, isatty, tcgetpgrp, tcsetpgrp, Pid};

/// lockrun owns the terminal's foreground and may lend it: stdin is a
/// terminal and its foreground group is ours.
pub(super) struct Claim {
    own_group: Pid,
    // What the child may change and we put back (raw mode, echo...).
    termios: Option<Termios>,
}

impl Claim {
    /// Checked as the child starts: lockrun may have been moved to the
    /// background (or back) while its guard was parked.
    pub(super) fn detect() -> Option<Claim> {
        let stdin = stdin();
        if !isatty(stdin.as_fd()).unwrap_or(false) {
            return None;
        }
        let own_group = crate::job::job_group().unwrap_or_else(getpgrp);
        if tcgetpgrp(stdin.as_fd()).ok()? != own_group {
            return None;
        }
        Some(Claim {
            own_group,
            termios: tcgetattr(stdin.as_fd()).ok(),
        })
    }

    /// Gives the foreground to the child's group, before the guard is told
    /// to run COMMAND.
    pub(super) fn hand_to(self, child_group: u32) -> Foreground {
        let child_group = Pid::from_raw(child_group as i32);
        let ttou_was_blocked = block_sigttou();
        if let Err(err) = tcsetpgrp(stdin().as_fd(), child_group) {
            tracing::debug!("cannot give the terminal to the child's process group: {err}");
        }
        Foreground {
            own_group: self.own_group,
            child_group,
            termios: self.termios,
            ttou_was_blocked,
        }
    }
}

/// The child's group holds the terminal's foreground; [`Foreground::restore`]
/// takes it back.
pub(super) struct Foreground {
    own_group: Pid,
    child_group: Pid,
    termios: Option<Termios>,
    ttou_was_blocked: bool,
}

impl Foreground {
    /// The child's group stopped: the foreground goes back to our group, if
    /// the child's group still has it, before the job is reported stopped.
    pub(super) fn take_back(&self) {
        let stdin = stdin();
        if tcgetpgrp(stdin.as_fd()) == Ok(self.child_group) {
            if let Err(err) = tcsetpgrp(stdin.as_fd(), self.own_group) {
                tracing::debug!("cannot take the terminal back from the stopped child: {err}");
            }
        }
    }

    /// The job was continued: if that was `fg`, which gave our group the
    /// foreground, the child's group gets it again.
    pub(super) fn give_again(&self) {
        let stdin = stdin();
        if tcgetpgrp(stdin.as_fd()) == Ok(self.own_group) {
            if let Err(err) = tcsetpgrp(stdin.as_fd(), self.child_group) {
                tracing::debug!("cannot give the terminal back to the child: {err}");
            }
        }
    }

    /// Takes the foreground back and restores the terminal modes the child
    /// may have left changed. Call it once the child's group is dead.
    pub(super) fn restore(self) {
        let stdin = stdin();
        // Only take back what is still the child's: if someone else (a
        // shell, after Ctrl-Z) has taken the terminal meanwhile, it is not
        // ours to grab, nor are its modes ours to change.
        let holder = tcgetpgrp(stdin.as_fd());
        if holder == Ok(self.child_group) {
            if let Err(err) = tcsetpgrp(stdin.as_fd(), self.own_group) {
                tracing::debug!("cannot take the terminal back from the child: {err}");
            }
        }
        let ours = holder == Ok(self.child_group) || holder == Ok(self.own_group);
        if let (true, Some(termios)) = (ours, &self.termios) {
            // TCSANOW: TCSADRAIN could wait forever on output held by XOFF.
            if let Err(err) = tcsetattr(stdin.as_fd(), SetArg::TCSANOW, termios) {
                tracing::debug!("cannot restore the terminal modes: {err}");
            }
        }
        if !self.ttou_was_blocked {
            let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&sigttou()), None);
        }
    }
}

fn sigttou() -> SigSet {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTTOU);
    set
}

/// Blocks SIGTTOU on this thread; tells whether it was blocked already.
fn block_sigttou() -> bool {
    let mut old = SigSet::empty();
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&sigttou()), Some(&mut old));
    old.contains(Signal::SIGTTOU)
}
