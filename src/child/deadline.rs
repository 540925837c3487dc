//! The deadline channel: the guard as the lease's last line (SPEC §8).
//!
//! lockrun stops the child when its lease runs out, but only if lockrun
//! runs: SIGSTOPped, frozen by a cgroup, starved, or blocked in a write, it
//! stops nothing, and the child would run on beside a rival. So after each
//! confirmed renewal lockrun hands the guard the new deadline over the go
//! pipe, which stays open after the go message. If a deadline passes with no
//! newer one, the guard runs the stop ladder itself: the kill signal to the
//! group at `stop_at`, SIGKILL at `kill_at`. Both are CLOCK_BOOTTIME times
//! (see `crate::clock`), so a suspend counts.
//!
//! Each deadline is one fixed-size record, written whole (it is far below
//! PIPE_BUF, so the kernel never splits or interleaves it):
//!
//! ```text
//! u64 LE   stop_at, nanoseconds since boot
//! u64 LE   kill_at, nanoseconds since boot
//! u32 LE   the kill signal's number
//! u32      zero
//! ```
//!
//! lockrun's end is non-blocking: a full pipe (a guard that reads nothing)
//! costs the update, and the guard then acts on an older, earlier deadline,
//! which is the safe side.
//!
//! A guard lent a descriptor (see `Command::lends`) is also told, once,
//! whether it may let go of the lock itself once COMMAND's tree is gone
//! (see [`Verdict`]), in a record whose last word is not zero:
//!
//! ```text
//! u64 LE   length of the first name (0 for "keep")
//! u64 LE   length of the second name (0 for "keep")
//! u32      zero
//! u32 LE   1: let go, after swapping the two names that follow; 2: keep
//! ```

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::signals::Signal;

/// How much later than lockrun the guard sends the kill signal, at most.
const SIGNAL_LAG: Duration = Duration::from_millis(100);

/// The size of one record (a verdict's names follow its record).
pub(super) const RECORD: usize = 24;

/// The last word of a verdict's record.
const LET_GO: u32 = 1;
const KEEP: u32 = 2;

/// The longest name a verdict may carry: a path, as the kernel takes one.
const MAX_NAME: usize = libc::PATH_MAX as usize;

/// What lockrun tells a guard it lent a descriptor to, once the go has
/// been sent: whether the guard may let go of the lock itself once the
/// tree is gone, rather than leave that to lockrun after its exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Let go, having first swapped these two files' names: lockrun's last
    /// word beside the lock, written while it held it, which it can no
    /// longer write itself once the lock may be someone else's.
    LetGo { swap: [PathBuf; 2] },
    /// Keep it until we exit: lockrun keeps the lock after the child, or
    /// has nothing ready to leave beside it.
    Keep,
}

impl Verdict {
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut record = vec![0; RECORD];
        match self {
            Verdict::LetGo { swap } => {
                record[20..].copy_from_slice(&LET_GO.to_le_bytes());
                for (at, name) in [0, 8].into_iter().zip(swap) {
                    let len = name.as_os_str().len() as u64;
                    record[at..at + 8].copy_from_slice(&len.to_le_bytes());
                }
                for name in swap {
                    record.extend_from_slice(name.as_os_str().as_bytes());
                }
            }
            Verdict::Keep => record[20..].copy_from_slice(&KEEP.to_le_bytes()),
        }
        record
    }
}

/// When the guard must stop the group, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    /// When the kill signal goes to the group (time since boot).
    pub stop_at: Duration,
    /// When SIGKILL goes to the group (time since boot).
    pub kill_at: Duration,
    /// The kill signal's number.
    pub signal: i32,
}

impl Deadline {
    /// The ladder lockrun itself runs from `stop_at`: `signal`, then SIGKILL
    /// once `grace` has passed (at once for SIGKILL or no grace). The guard
    /// sends the signal a moment later than lockrun would, so that a lockrun
    /// that runs gets there first and the guard, seeing the signal arrive,
    /// does not send a second one; SIGKILL keeps its moment.
    pub fn new(stop_at: Duration, signal: Signal, grace: Duration) -> Deadline {
        let kill_at = if signal == Signal::Kill {
            stop_at
        } else {
            stop_at.saturating_add(grace)
        };
        let stop_at = stop_at
            .saturating_add((grace / 4).min(SIGNAL_LAG))
            .min(kill_at);
        Deadline {
            stop_at,
            kill_at,
            signal: signal.number(),
        }
    }

    pub(super) fn encode(&self) -> [u8; RECORD] {
        let mut record = [0; RECORD];
        record[..8].copy_from_slice(&nanos(self.stop_at).to_le_bytes());
        record[8..16].copy_from_slice(&nanos(self.kill_at).to_le_bytes());
        record[16..20].copy_from_slice(&(self.signal as u32).to_le_bytes());
        record
    }

    /// A record, or `None` for one that cannot be ours; the guard then keeps
    /// the deadline it had.
    pub(super) fn decode(record: &[u8; RECORD]) -> Option<Deadline> {
        let word = |at: usize| u64::from_le_bytes(record[at..at + 8].try_into().unwrap());
        let signal = u32::from_le_bytes(record[16..20].try_into().unwrap());
        let signal = i32::try_from(signal)
            .ok()
            .filter(|s| (1..=64).contains(s))?;
        let (stop_at, kill_at) = (word(0), word(8));
        (kill_at >= stop_at && record[20..] == [0; 4]).then_some(Deadline {
            stop_at: Duration::from_nanos(stop_at),
            kill_at: Duration::from_nanos(kill_at),
            signal,
        })
    }

    /// What the guard does at `now`, having already sent the kill signal
    /// or not.
    pub(super) fn step(&self, now: Duration, signalled: bool) -> Step {
        if now >= self.kill_at {
            Step::Kill
        } else if signalled {
            Step::WaitUntil(self.kill_at)
        } else if now >= self.stop_at {
            Step::Signal(self.signal)
        } else {
            Step::WaitUntil(self.stop_at)
        }
    }
}

/// The guard's next move on its ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Nothing to do before this moment (time since boot).
    WaitUntil(Duration),
    /// Send this signal to the group.
    Signal(i32),
    /// SIGKILL the group, ourselves included.
    Kill,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// lockrun's end of the channel, held by the lease while the child runs.
/// Dropping it closes the pipe; the guard keeps the last deadline it read.
#[derive(Debug)]
pub struct GuardDeadlines {
    pipe: File,
    signal: Signal,
    grace: Duration,
    /// The last deadline handed over, in nanoseconds since boot (0 for
    /// none yet), shared with the `Child`, which continues a stopped job
    /// only before it (see `Child::resume`).
    latest: Arc<AtomicU64>,
}

impl GuardDeadlines {
    pub(super) fn new(
        pipe: File,
        signal: Signal,
        grace: Duration,
        latest: Arc<AtomicU64>,
    ) -> GuardDeadlines {
        GuardDeadlines {
            pipe,
            signal,
            grace,
            latest,
        }
    }

    /// Tells the guard to start stopping the child at `stop_at` (time since
    /// boot) unless a later call moves it.
    pub fn extend(&mut self, stop_at: Duration) {
        self.latest.store(nanos(stop_at).max(1), Ordering::Release);
        let deadline = Deadline::new(stop_at, self.signal, self.grace);
        match self.pipe.write(&deadline.encode()) {
            Ok(RECORD) => {}
            // A guard that is gone, or a pipe it has not drained: it acts on
            // an earlier deadline, or not at all because it is gone.
            Ok(_) | Err(_) => {
                tracing::debug!("could not hand the guard its new deadline");
            }
        }
    }
}

/// Collects records from what the guard reads, across reads that may end
/// mid-record.
#[derive(Default)]
pub(super) struct Reader {
    partial: Vec<u8>,
    /// The verdict, once it came; a malformed one counts as [`Verdict::Keep`].
    verdict: Option<Verdict>,
}

impl Reader {
    /// Feeds `bytes`; returns the newest valid deadline they complete.
    pub(super) fn feed(&mut self, bytes: &[u8]) -> Option<Deadline> {
        self.partial.extend_from_slice(bytes);
        let mut newest = None;
        let mut used = 0;
        while let Some(record) = self.partial.get(used..used + RECORD) {
            let record: &[u8; RECORD] = record.try_into().unwrap();
            let kind = u32::from_le_bytes(record[20..].try_into().unwrap());
            if kind != LET_GO {
                match kind {
                    KEEP => {
                        self.verdict.get_or_insert(Verdict::Keep);
                    }
                    _ => newest = Deadline::decode(record).or(newest),
                }
                used += RECORD;
                continue;
            }
            let len = |at: usize| u64::from_le_bytes(record[at..at + 8].try_into().unwrap());
            let (first, second) = (len(0) as usize, len(8) as usize);
            if first > MAX_NAME || second > MAX_NAME {
                // Not ours: nothing after it can be trusted to line up.
                self.verdict.get_or_insert(Verdict::Keep);
                used = self.partial.len();
                break;
            }
            let Some(names) = self
                .partial
                .get(used + RECORD..used + RECORD + first + second)
            else {
                break;
            };
            let name = |bytes: &[u8]| PathBuf::from(OsStr::from_bytes(bytes));
            let swap = [name(&names[..first]), name(&names[first..])];
            let named = swap.iter().all(|p| !p.as_os_str().is_empty());
            self.verdict.get_or_insert(match named {
                true => Verdict::LetGo { swap },
                false => Verdict::Keep,
            });
            used += RECORD + first + second;
        }
        self.partial.drain(..used);
        newest
    }

    /// The verdict, if it has come.
    pub(super) fn verdict(&self) -> Option<&Verdict> {
        self.verdict.as_ref()
    }
}

/// Reads what is available on the guard's end of the channel. `Ok(None)`
/// means lockrun closed it (or died): no more deadlines will come.
pub(super) fn read_available(
    pipe: &mut File,
    reader: &mut Reader,
) -> io::Result<Option<Option<Deadline>>> {
    use std::io::Read;
    let mut buf = [0u8; RECORD * 64];
    match pipe.read(&mut buf) {
        Ok(0) => Ok(None),
        Ok(n) => Ok(Some(reader.feed(&buf[..n]))),
        Err(err) if err.kind() == io::ErrorKind::Interrupted => Ok(Some(None)),
        Err(err) => Err(err),
    }
}

/// The verdict on the lent descriptor, waiting for it if it has not come:
/// lockrun sends it right after the go, so this waits at most for lockrun
/// to get that far. [`Verdict::Keep`] if lockrun closed the channel or died
/// without one (then it is lockrun, or its death, that lets go).
pub(super) fn verdict(pipe: Option<&mut File>, reader: &mut Reader) -> Verdict {
    if let Some(pipe) = pipe {
        while reader.verdict().is_none() {
            match read_available(pipe, reader) {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
    reader.verdict().cloned().unwrap_or(Verdict::Keep)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn records_round_trip() {
        let d = Deadline::new(Duration::from_nanos(123_456_789_012), Signal::Term, secs(5));
        assert_eq!(d.stop_at, Duration::from_nanos(123_556_789_012));
        assert_eq!(d.kill_at, Duration::from_nanos(128_456_789_012));
        assert_eq!(Deadline::decode(&d.encode()), Some(d));
    }

    #[test]
    fn sigkill_or_no_grace_kills_at_the_stop() {
        let d = Deadline::new(secs(10), Signal::Kill, secs(5));
        assert_eq!(d.kill_at, secs(10));
        assert_eq!(d.step(secs(10), false), Step::Kill);
        let d = Deadline::new(secs(10), Signal::Term, Duration::ZERO);
        assert_eq!(d.step(secs(10), false), Step::Kill);
    }

    #[test]
    fn the_guard_signals_just_after_lockrun_and_kills_on_time() {
        // A short grace period shrinks the lag, never the SIGKILL moment.
        let d = Deadline::new(secs(100), Signal::Term, Duration::from_millis(200));
        assert_eq!(d.stop_at, secs(100) + Duration::from_millis(50));
        assert_eq!(d.kill_at, secs(100) + Duration::from_millis(200));
        let d = Deadline::new(secs(100), Signal::Term, secs(60));
        assert_eq!(d.stop_at, secs(100) + SIGNAL_LAG);
        assert_eq!(d.kill_at, secs(160));
    }

    #[test]
    fn the_ladder_runs_signal_then_kill() {
        let d = Deadline::new(secs(100), Signal::Term, secs(2));
        let signal_at = secs(100) + SIGNAL_LAG;
        assert_eq!(d.step(secs(99), false), Step::WaitUntil(signal_at));
        assert_eq!(d.step(secs(100), false), Step::WaitUntil(signal_at));
        assert_eq!(d.step(signal_at, false), Step::Signal(libc::SIGTERM));
        assert_eq!(d.step(secs(101), true), Step::WaitUntil(secs(102)));
        assert_eq!(d.step(secs(102), true), Step::Kill);
        // Woken long after both (a resume from suspend): straight to SIGKILL,
        // the grace period having passed while we slept.
        assert_eq!(d.step(secs(5000), false), Step::Kill);
    }

    #[test]
    fn nothing_malformed_moves_the_deadline() {
        let good = Deadline::new(secs(7), Signal::Int, secs(1)).encode();
        let mut bad_signal = good;
        bad_signal[16..20].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(Deadline::decode(&bad_signal), None);
        let mut backwards = good;
        backwards[8..16].copy_from_slice(&1u64.to_le_bytes());
        assert_eq!(Deadline::decode(&backwards), None);
        let mut padded = good;
        padded[23] = 1;
        assert_eq!(Deadline::decode(&padded), None);
    }

    #[test]
    fn records_split_across_reads_are_reassembled() {
        let first = Deadline::new(secs(1), Signal::Term, secs(1));
        let second = Deadline::new(secs(2), Signal::Term, secs(1));
        let mut bytes = first.encode().to_vec();
        bytes.extend_from_slice(&second.encode());
        let mut reader = Reader::default();
        assert_eq!(reader.feed(&bytes[..10]), None);
        assert_eq!(reader.feed(&bytes[10..30]), Some(first));
        assert_eq!(reader.feed(&bytes[30..]), Some(second));
        assert!(reader.partial.is_empty());
    }

    #[test]
    fn a_verdict_comes_whole_between_deadlines_and_once() {
        let before = Deadline::new(secs(1), Signal::Term, secs(1));
        let after = Deadline::new(secs(2), Signal::Term, secs(1));
        let swap = [
            PathBuf::from("/d/k.lockrun-new"),
            PathBuf::from("/d/k.lockrun"),
        ];
        let mut bytes = before.encode().to_vec();
        bytes.extend(Verdict::LetGo { swap: swap.clone() }.encode());
        bytes.extend(Verdict::Keep.encode());
        bytes.extend(after.encode());
        // Byte by byte: every cut is waited out.
        let mut reader = Reader::default();
        let mut seen = Vec::new();
        for byte in &bytes {
            seen.extend(reader.feed(std::slice::from_ref(byte)));
        }
        assert_eq!(seen, [before, after]);
        assert_eq!(reader.verdict(), Some(&Verdict::LetGo { swap }));
        assert!(reader.partial.is_empty());
        // A verdict whose names no path could have is no leave to let go.
        let mut huge = Verdict::Keep.encode();
        huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        huge[20..].copy_from_slice(&LET_GO.to_le_bytes());
        let mut reader = Reader::default();
        assert_eq!(reader.feed(&huge), None);
        assert_eq!(reader.verdict(), Some(&Verdict::Keep));
        let empty = Verdict::LetGo {
            swap: [PathBuf::new(), PathBuf::from("/d/k")],
        };
        let mut reader = Reader::default();
        reader.feed(&empty.encode());
        assert_eq!(reader.verdict(), Some(&Verdict::Keep));
    }
}
