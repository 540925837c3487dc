//! CLOCK_BOOTTIME: the clock our deadlines live on.
//!
//! `Instant` (std's and tokio's) is CLOCK_MONOTONIC, which stops while the
//! host is suspended, while Consul's servers keep counting a session's TTL.
//! A lease measured on it would still have "time left" after a resume that
//! the servers already spent; CLOCK_BOOTTIME counts the suspended time too.
//! The guard and lockrun read the same clock, so a deadline one computes
//! means the same moment to the other.

pub mod rate;
mod sys;

pub use rate::{ClockState, Ppm};

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use nix::time::{clock_gettime, ClockId as Clock};

/// Now, on CLOCK_BOOTTIME, as time since boot.
pub fn boottime() -> Duration {
    // CLOCK_BOOTTIME exists on every kernel lockrun supports (2.6.39+);
    // clock_gettime fails only for a clock the kernel does not know.
    let now = clock_gettime(Clock::CLOCK_BOOTTIME).expect("CLOCK_BOOTTIME is readable");
    Duration::from(now)
}

/// How the kernel steers this host's clock now (adjtimex(2), read-only),
/// or `None` where it will not say.
pub fn state() -> Option<ClockState> {
    let timex = sys::adjtimex_read()?;
    let user_hz = sys::user_hz().unwrap_or(100);
    Some(ClockState::from_timex(
        &timex,
        user_hz,
        sys::adjtime_remaining(),
    ))
}

/// A CLOCK_BOOTTIME timer on a descriptor: it becomes readable at an
/// absolute moment, and at once after a resume past that moment.
pub struct BootTimer(TimerFd);

impl BootTimer {
    pub fn new() -> io::Result<BootTimer> {
        let flags = TimerFlags::TFD_CLOEXEC | TimerFlags::TFD_NONBLOCK;
        Ok(BootTimer(TimerFd::new(ClockId::CLOCK_BOOTTIME, flags)?))
    }

    /// Arms the timer for `at` (time since boot); a moment already past
    /// fires at once.
    pub fn set(&self, at: Duration) -> io::Result<()> {
        // A zero expiry would disarm the timer rather than fire it.
        let at = at.max(Duration::from_nanos(1));
        self.0.set(
            Expiration::OneShot(TimeSpec::from(at)),
            TimerSetTimeFlags::TFD_TIMER_ABSTIME,
        )?;
        Ok(())
    }

    /// A new timer, registered with tokio's reactor (call on the runtime).
    pub fn on_runtime() -> io::Result<tokio::io::unix::AsyncFd<BootTimer>> {
        sys::register(BootTimer::new()?)
    }

    /// Clears a fired timer so the descriptor stops being readable. Never
    /// blocks: the descriptor is non-blocking.
    pub fn clear(&self) {
        let _ = self.0.wait();
    }

    /// Waits, on tokio's reactor, until CLOCK_BOOTTIME reaches `at`.
    pub async fn sleep_until(timer: &tokio::io::unix::AsyncFd<BootTimer>, at: Duration) {
        if timer.get_ref().set(at).is_err() {
            // Without the timer we still have lockrun's monotonic deadline;
            // only a suspend goes unnoticed until it passes.
            return std::future::pending().await;
        }
        loop {
            let Ok(mut ready) = timer.readable().await else {
                return std::future::pending().await;
            };
            timer.get_ref().clear();
            if boottime() >= at {
                return;
            }
            ready.clear_ready();
        }
    }
}

impl AsFd for BootTimer {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl AsRawFd for BootTimer {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_clock_that_counts_suspended_time() {
        let before = Duration::from(clock_gettime(Clock::CLOCK_BOOTTIME).unwrap());
        let now = boottime();
        let after = Duration::from(clock_gettime(Clock::CLOCK_BOOTTIME).unwrap());
        assert!(before <= now && now <= after);
        // BOOTTIME is MONOTONIC plus the time spent suspended, never less.
        let monotonic = Duration::from(clock_gettime(Clock::CLOCK_MONOTONIC).unwrap());
        assert!(boottime() >= monotonic);
    }

    /// Read-only: whatever NTP does on this host, the kernel answers, and
    /// with a tick Linux allows (±10 %).
    #[test]
    fn reads_how_the_kernel_steers_this_hosts_clock() {
        let state = state().expect("adjtimex answers");
        assert!(state.tick_ppm.abs() <= 100_000.0, "{state:?}");
        assert!(state.steering_ppm().is_finite(), "{state:?}");
    }

    #[test]
    fn a_timer_for_a_moment_already_past_fires_at_once() {
        let timer = BootTimer::new().unwrap();
        // As after a resume: the deadline is behind us when we look.
        timer.set(boottime() - Duration::from_millis(1)).unwrap();
        let mut fds = [nix::poll::PollFd::new(
            timer.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        let ready = nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO).unwrap();
        assert_eq!(ready, 1);
        timer.clear();
        let ready = nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO).unwrap();
        assert_eq!(ready, 0, "cleared");
    }

    #[test]
    fn a_timer_for_the_future_waits() {
        let timer = BootTimer::new().unwrap();
        timer.set(boottime() + Duration::from_secs(3600)).unwrap();
        let mut fds = [nix::poll::PollFd::new(
            timer.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        assert_eq!(
            nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO).unwrap(),
            0
        );
    }
}
