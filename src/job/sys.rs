//! The two calls behind `job/` that nix marks unsafe: `fork`, and putting a
//! signal's default action back so the front can die by it.
#![allow(unsafe_code)]

use nix::sys::resource::{setrlimit, Resource};
use nix::sys::signal::{kill, sigaction, SaFlags, SigAction, SigHandler, SigSet, SigmaskHow};
use nix::unistd::{ForkResult, Pid};

/// Forks lockrun in two. Call it only while the process has one thread:
/// `lockrun::main` calls it before any runtime or thread exists.
pub(super) fn fork() -> nix::Result<ForkResult> {
    // SAFETY: the process is single-threaded here (see `job::split`, which
    // runs first thing in `main`), so the child is a full copy with no lock
    // held by a thread that does not exist in it, and it may run anything.
    unsafe { nix::unistd::fork() }
}

/// Dies by signal `number`'s default action, as the worker did. Returns only
/// if that did not end the process (a signal whose default is to ignore, or
/// a failed call), in which case the caller exits with a status instead.
pub(super) fn die_by(number: i32) {
    let Ok(sig) = nix::sys::signal::Signal::try_from(number) else {
        return;
    };
    // The worker's core, if it dumped one, is where it belongs; a second one
    // of the front, which did nothing, would only hide it.
    let _ = setrlimit(Resource::RLIMIT_CORE, 0, 0);
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    // SAFETY: SIG_DFL installs no handler of ours, so nothing can run in
    // signal context.
    if unsafe { sigaction(sig, &default) }.is_err() {
        return;
    }
    let mut only = SigSet::empty();
    only.add(sig);
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&only), None);
    let _ = kill(Pid::this(), sig);
}
