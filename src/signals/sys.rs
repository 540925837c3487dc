//! Ending lockrun by a signal, and the signals pending: the one place
//! outside `child/` that needs `unsafe`, to put a signal's default action
//! back after tokio took it and to read the pending set.
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

/// The numbers of the signals pending for this thread or process (held
/// back by the signal mask); empty when that cannot be read.
pub fn pending() -> Vec<i32> {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigpending fills the set it is given, which is read only
    // when it says it did.
    if unsafe { libc::sigpending(set.as_mut_ptr()) } != 0 {
        return Vec::new();
    }
    // SAFETY: filled above.
    let set = unsafe { set.assume_init() };
    (1..libc::SIGRTMIN())
        // SAFETY: a filled set and a signal number below SIGRTMIN.
        .filter(|&n| unsafe { libc::sigismember(&set, n) } == 1)
        .collect()
}
