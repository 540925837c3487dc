//! The call behind `--replace` that libc marks unsafe: `pidfd_open`.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// A handle on process `pid` that stays valid across pid reuse: it reads
/// as ready once the process has exited.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: pidfd_open takes a pid and flags by value and returns a new
    // descriptor or -1; it touches no memory of ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nobody else
    // owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Registers a pidfd with tokio's reactor.
pub fn register(pidfd: OwnedFd) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: the `AsyncFd` owns the `OwnedFd`, which nobody can close or
    // replace while it holds it, so it stays the same open descriptor.
    unsafe { tokio::io::unix::AsyncFd::register(pidfd) }.map_err(io::Error::from)
}
