//! The call behind `job/` that nix marks unsafe: `fork`.
#![allow(unsafe_code)]

use nix::unistd::ForkResult;

/// Forks lockrun in two. Call it only while the process has one thread:
/// `lockrun::main` calls it before any runtime or thread exists.
pub(super) fn fork() -> nix::Result<ForkResult> {
    // SAFETY: the process is single-threaded here (see `job::split`, which
    // runs first thing in `main`), so the child is a full copy with no lock
    // held by a thread that does not exist in it, and it may run anything.
    unsafe { nix::unistd::fork() }
}
