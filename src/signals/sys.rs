//! Ending lockrun by a signal: the one place outside `child/` that needs
//! `unsafe`, to put a signal's default action back after tokio took it.
#![allow(unsafe_code)]

use nix::sys::resource::{setrlimit, Resource};
use nix::sys::signal::{raise, sigaction, SaFlags, SigAction, SigHandler, SigSet, SigmaskHow};

use super::Signal;

/// Dies by `signal`'s default action. Returns only if that did not end the
/// process (a signal whose default is to ignore, or a failed call), in which
/// case the caller exits with a status instead.
pub fn die_by(signal: Signal) {
    die_by_number(signal.number());
}

/// [`die_by`] for any signal number: the job-control front ends by
/// whatever signal ended the worker, named by us or not.
pub fn die_by_number(number: i32) {
    let Ok(sig) = nix::sys::signal::Signal::try_from(number) else {
        return;
    };
    // QUIT and ABRT dump core by default: the core would be lockrun's (or
    // the front's), of no use to anyone, and it is another's stop we are
    // passing on.
    let _ = setrlimit(Resource::RLIMIT_CORE, 0, 0);
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    // SAFETY: SIG_DFL installs no handler of ours, so nothing can run in
    // signal context; tokio's own handler is simply replaced, and its
    // runtime is gone by the time we end.
    if unsafe { sigaction(sig, &default) }.is_err() {
        return;
    }
    let mut only = SigSet::empty();
    only.add(sig);
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&only), None);
    let _ = raise(sig);
}
