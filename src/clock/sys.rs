//! The system calls behind `clock`: registering the timer with tokio, and
//! reading (never setting) the kernel's clock state.
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

/// adjtimex(2) in read-only mode (`modes` = 0): the kernel's NTP state,
/// which any user may read. `None` where the call fails (a seccomp filter
/// in a container, say).
// `c_long` is 32 bits wide on 32-bit targets, where the conversions are not
// no-ops.
#[allow(clippy::useless_conversion)]
pub(super) fn adjtimex_read() -> Option<super::rate::Timex> {
    timex(0).map(|(t, _)| super::rate::Timex {
        freq: i64::from(t.freq),
        tick: i64::from(t.tick),
        offset: i64::from(t.offset),
        constant: i64::from(t.constant),
        status: t.status,
    })
}

/// What adjtime(3) has still to slew, in µs, read with
/// `ADJ_OFFSET_SS_READ`, which also needs no privilege.
#[allow(clippy::useless_conversion)] // As above.
pub(super) fn adjtime_remaining() -> Option<i64> {
    timex(libc::ADJ_OFFSET_SS_READ).map(|(t, _)| i64::from(t.offset))
}

fn timex(modes: libc::c_uint) -> Option<(libc::timex, libc::c_int)> {
    // SAFETY: `timex` is plain old data, valid zeroed; adjtimex only writes
    // into the struct we own for the duration of the call. `modes` is 0 or
    // ADJ_OFFSET_SS_READ, both read-only: the clock is never changed.
    let mut t: libc::timex = unsafe { std::mem::zeroed() };
    t.modes = modes;
    // SAFETY: as above; the pointer is to our live, exclusively borrowed
    // struct.
    let state = unsafe { libc::adjtimex(&mut t) };
    (state >= 0).then_some((t, state))
}

/// USER_HZ, the unit of `tick`: `sysconf(_SC_CLK_TCK)`.
#[allow(clippy::useless_conversion)] // As above.
pub(super) fn user_hz() -> Option<i64> {
    // SAFETY: sysconf reads a constant of the C library; it takes no
    // pointer and touches no memory of ours.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then_some(i64::from(hz))
}
