//! The system calls of the `local` backend that neither std nor nix offer
//! without deprecation: `flock(2)`, `pidfd_open(2)`, `pidfd_send_signal(2)`,
//! and registering an inotify descriptor with tokio.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::inotify::Inotify;
use tokio::io::unix::AsyncFd;

/// `flock(fd, LOCK_SH)` when `shared`, else `LOCK_EX`, blocking until
/// granted. A signal that interrupts it is not a reason to give up:
/// cancellation abandons the waiting thread.
pub fn lock(fd: BorrowedFd<'_>, shared: bool) -> io::Result<()> {
    let op = if shared { libc::LOCK_SH } else { libc::LOCK_EX };
    loop {
        // SAFETY: flock only reads the descriptor number, which `fd`
        // guarantees is open for the call.
        if unsafe { libc::flock(fd.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// `flock(fd, LOCK_SH | LOCK_NB)` when `shared`, else `LOCK_EX | LOCK_NB`:
/// `Ok(false)` when a holder excludes us.
pub fn try_lock(fd: BorrowedFd<'_>, shared: bool) -> io::Result<bool> {
    let op = if shared { libc::LOCK_SH } else { libc::LOCK_EX };
    loop {
        // SAFETY: as in `lock`.
        if unsafe { libc::flock(fd.as_raw_fd(), op | libc::LOCK_NB) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
}

/// A handle on process `pid` that stays valid across pid reuse.
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

/// Sends `signal` to the process behind `pidfd`.
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, signal: i32) -> io::Result<()> {
    // SAFETY: a null siginfo asks the kernel to fill it in as kill(2)
    // would; the descriptor is open for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// An inotify instance the tokio reactor can wait on.
pub struct AsyncInotify(Inotify);

impl AsRawFd for AsyncInotify {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

impl AsyncInotify {
    pub fn inner(&self) -> &Inotify {
        &self.0
    }
}

/// Registers a non-blocking inotify instance with the reactor.
pub fn register_inotify(ino: Inotify) -> io::Result<AsyncFd<AsyncInotify>> {
    // SAFETY: `AsyncInotify` owns the descriptor (through `Inotify`'s
    // `OwnedFd`) and exposes no way to close or replace it, so it stays the
    // same open descriptor for as long as the `AsyncFd` holds it.
    unsafe { AsyncFd::register(AsyncInotify(ino)) }.map_err(io::Error::from)
}
