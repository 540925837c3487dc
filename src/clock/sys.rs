//! The one system-level promise `clock` makes to tokio.
#![allow(unsafe_code)]

use std::io;

use tokio::io::unix::AsyncFd;

use super::BootTimer;

/// Registers the timer's descriptor with tokio's reactor.
pub(super) fn register(timer: BootTimer) -> io::Result<AsyncFd<BootTimer>> {
    // SAFETY: the descriptor is the timerfd that `BootTimer` owns: open from
    // `BootTimer::new` until the timer is dropped, which the `AsyncFd` does
    // as it drops itself, and `as_raw_fd` always returns that same number.
    unsafe { AsyncFd::register(timer) }.map_err(io::Error::from)
}
