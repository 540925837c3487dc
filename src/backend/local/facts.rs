//! Holder facts and what the kernel says about who holds a lock.
//!
//! The facts live in a sidecar, `DIR/KEY.lockrun`, rather than in the lock
//! file: they are replaced by writing a scratch file and swapping its name
//! with the old one's, so a reader never sees half a record, and renaming
//! over the lock file itself would swap its inode from under every flock on it. The
//! lock file stays an empty file that `flock(1)` can open and lock as it
//! always does. The sidecar also keeps the fencing number, so it survives
//! releases; only the current holder writes it, while holding the lock.

use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::tree::{Dir, KeyFiles};
use super::LocalError;
use crate::backend::Holder;

/// The sidecar's record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Facts {
    /// The last fencing number handed out for this key.
    pub fence: u64,
    /// The lock file (device, inode) these facts describe.
    pub dev: u64,
    pub ino: u64,
    /// Present while a lockrun holds the lock; cleared before it lets go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<HolderFacts>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderFacts {
    pub value: String,
    pub host: String,
    pub pid: u32,
    /// Field 22 of `/proc/PID/stat`: with the pid, names one process.
    pub pid_start: u64,
    /// Milliseconds since the epoch.
    pub since_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_pgid: Option<u32>,
}

impl Facts {
    /// The facts at `name` in `dir`; default (fence 0) when there are none
    /// yet.
    ///
    /// A reader that does not hold the lock (`leader`) may open the record
    /// just before a write swaps it out, and then read it while the holder
    /// writes the next record over it (see [`Facts::write`]). So a read
    /// counts only if the name still leads to the file read once it is
    /// read, and parses; otherwise the name holds a newer, whole record, and
    /// we read again. The holder's own reads happen under the lock, when
    /// nobody writes.
    pub fn read_at(dir: &Dir, name: &str) -> Result<Facts, LocalError> {
        const ATTEMPTS: usize = 5;
        let mut attempt = 1;
        loop {
            match Facts::read_once(dir, name)? {
                Ok(facts) => return Ok(facts),
                Err(_) if attempt < ATTEMPTS => attempt += 1,
                Err(unreadable) => return Err(LocalError::io_msg(unreadable)),
            }
        }
    }

    /// The facts at `path`, for a reader that has only the path.
    pub fn read(path: &Path) -> Result<Facts, LocalError> {
        let (parent, name) = match (path.parent(), path.file_name().and_then(|n| n.to_str())) {
            (Some(parent), Some(name)) => (parent, name),
            _ => return Err(LocalError::io_msg(format!("`{}` names no record", path.display()))),
        };
        match Dir::top_for_reading(parent)? {
            Some(dir) => Facts::read_at(&dir, name),
            None => Ok(Facts::default()),
        }
    }

    /// One read: the facts, or why the bytes read do not parse.
    fn read_once(dir: &Dir, name: &str) -> Result<Result<Facts, String>, LocalError> {
        let path = dir.join(name);
        // Opened as any file in the tree is: no link followed, and a FIFO
        // refused rather than waited on.
        let Some(mut file) = dir.open_file(name, None)? else {
            return Ok(Ok(Facts::default()));
        };
        let read = (|| {
            let mut bytes = Vec::new();
            // Bounded, as every record read from the lock directory.
            (&mut file).take(super::engine::RECORD_MAX).read_to_end(&mut bytes)?;
            let ours = file.metadata()?.ino();
            // Swapped out meanwhile: as unreadable as a torn record.
            let current = dir.stat(name)?.map_or(0, |st| st.st_ino);
            Ok((bytes, ours == current))
        })();
        match read {
            Ok((_, false)) => Ok(Err(format!(
                "holder facts `{}` kept changing while read; try again",
                path.display()
            ))),
            // A crash after renaming a record that had not reached the disk
            // can leave the name on an empty file, or on one of zeros; the
            // clock seeds the next fencing number then (see `next_fence`).
            Ok((bytes, _)) if bytes.iter().all(|b| *b == 0) => Ok(Ok(Facts::default())),
            Ok((bytes, _)) => Ok(serde_json::from_slice(&bytes).map_err(|e| {
                format!(
                    "holder facts `{}` are unreadable ({e}); the fencing number cannot continue from them, remove the file only when nobody holds the lock",
                    path.display()
                )
            })),
            Err(e) => Err(LocalError::io(
                format!("cannot read holder facts `{}`", path.display()),
                e,
            )),
        }
    }

    /// Replaces the facts of `files` through their scratch file: the record
    /// is written there, then the two names are swapped at once, so the
    /// name always leads to a whole record, and the old one stays behind as
    /// the next scratch (a reader that opened it just before checks, see
    /// [`Facts::read_at`]). A rename over the facts would do as well, but it
    /// makes a new file and deletes one at every write, and ext4's search
    /// for a free inode was a third of an uncontended run's CPU here (three
    /// writes a run); where the filesystem cannot swap, we rename.
    ///
    /// Never synced: a lock on one host survives no crash, so after one
    /// nobody holds anything whatever the sidecar says, and the fencing
    /// number needs no disk either, since the next one is never below the
    /// microseconds since the epoch (see [`Facts::next_fence`]) — the same
    /// promise a sidecar on tmpfs gets at every boot. The two `fsync`s this
    /// used to make were most of an uncontended run and of a handover
    /// (7.8 ms median here on ext4, against 2 ms for all of `flock(1)`).
    pub fn write(&self, files: &KeyFiles) -> Result<(), LocalError> {
        self.stage(files)?;
        files
            .dir
            .swap(&files.scratch(), &files.facts())
            .map_err(|e| Facts::failed(&files.dir.join(&files.facts()), e))
    }

    /// Writes the record into the scratch file alone, for a later swap
    /// with the facts (see [`Facts::write`]), by us or by the guard that
    /// lets go of the lock (`Claim::hand_over`). The scratch is a file of
    /// our own (see [`Dir::own_file`]): a link or FIFO planted there is
    /// refused, another user's file replaced, never written into.
    pub fn stage(&self, files: &KeyFiles) -> Result<(), LocalError> {
        let fail = |e: io::Error| Facts::failed(&files.dir.join(&files.facts()), e);
        let mut file = files.dir.own_file(&files.scratch(), 0o644)?;
        let bytes = serde_json::to_vec(self).expect("facts serialise");
        // Over the old bytes, then cut: the file keeps its block.
        file.write_all(&bytes).map_err(fail)?;
        file.set_len(bytes.len() as u64).map_err(fail)?;
        Ok(())
    }

    fn failed(path: &Path, e: io::Error) -> LocalError {
        LocalError::io(format!("cannot write holder facts `{}`", path.display()), e)
    }

    /// The fencing number for the next holder: one more than the last, and
    /// never less than the microseconds since the epoch. The counter alone
    /// would restart at 1 whenever the sidecar is lost — at every boot on
    /// tmpfs, where the default lock directories live — and a service that
    /// remembers the highest number it saw would then refuse every later
    /// holder (SPEC §7). Within one sidecar's life the number increases
    /// whatever the clock does; across a loss, as long as the clock has not
    /// gone back past the last holder's acquisition.
    pub fn next_fence(&self) -> u64 {
        let micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        (self.fence + 1).max(micros)
    }

    /// The holder as `leader` shows it, given that the lock is held.
    pub fn to_holder(&self, lock: &Lock, locker: Option<u32>) -> Holder {
        // The facts describe this holder only if they name this very file and
        // either the locking process itself or, when the kernel no longer
        // names it (pid 0: it died, its descriptor lives on in the guard),
        // a holder that is gone too.
        let ours = self.holder.as_ref().filter(|h| {
            (self.dev, self.ino) == (lock.dev, lock.ino)
                && match locker {
                    Some(pid) => pid == h.pid,
                    None => !process_is(h.pid, h.pid_start),
                }
        });
        match ours {
            Some(h) => Holder {
                value: Some(h.value.clone()),
                host: Some(h.host.clone()),
                pid: Some(h.pid),
                child_pgid: h.child_pgid,
                since: Some(UNIX_EPOCH + Duration::from_millis(h.since_ms)),
                fence: Some(self.fence),
                slot: None,
                entry: None,
                holder_id: Some(h.pid.to_string()),
                label: None,
                details: None,
            },
            None => Holder {
                value: None,
                host: None,
                pid: locker,
                child_pgid: None,
                since: None,
                fence: None,
                slot: None,
                entry: None,
                holder_id: locker.map(|pid| pid.to_string()),
                label: None,
                details: None,
            },
        }
    }
}

/// A lock file's identity, as `/proc/locks` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lock {
    pub dev: u64,
    pub ino: u64,
}

impl Lock {
    pub fn of(meta: &fs::Metadata) -> Lock {
        Lock {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }

    /// The file at `name` in `dir`, if there is one; a link there is not
    /// the file we locked, and so names another.
    pub fn at(dir: &Dir, name: &str) -> io::Result<Option<Lock>> {
        Ok(dir.stat(name)?.map(|st| Lock {
            dev: st.st_dev,
            ino: st.st_ino,
        }))
    }
}

/// The granted exclusive flocks on `lock` in `/proc/locks` text: one entry
/// per holder, `Some(pid)` or `None` when the kernel shows pid 0 (the
/// locking process has died; another keeps the descriptor).
pub fn flock_holders(proc_locks: &str, lock: Lock) -> Vec<Option<u32>> {
    flock_lockers(proc_locks, lock, "WRITE")
}

/// The processes holding `lock` shared (`LOCK_SH`, `flock -s`), as
/// [`flock_holders`] names the exclusive one.
pub fn flock_readers(proc_locks: &str, lock: Lock) -> Vec<Option<u32>> {
    flock_lockers(proc_locks, lock, "READ")
}

fn flock_lockers(proc_locks: &str, lock: Lock, want_mode: &str) -> Vec<Option<u32>> {
    let want = format!(
        "{:02x}:{:02x}:{}",
        nix::sys::stat::major(lock.dev),
        nix::sys::stat::minor(lock.dev),
        lock.ino
    );
    let mut holders: Vec<Option<u32>> = proc_locks
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace().skip(1);
            // "1: FLOCK ADVISORY WRITE 123 fd:01:42 0 EOF"; a blocked
            // request reads "1: -> FLOCK ..." and holds nothing.
            let (kind, _, mode, pid, id) = (
                fields.next()?,
                fields.next()?,
                fields.next()?,
                fields.next()?,
                fields.next()?,
            );
            (kind == "FLOCK" && mode == want_mode && id == want)
                .then(|| pid.parse::<u32>().ok().filter(|&p| p != 0))
        })
        .collect();
    // An exclusive flock is granted once at a time, and a process shows
    // once per open file description it locked shared with: a second line
    // for one pid is a pass that saw it twice.
    holders.sort_unstable();
    holders.dedup();
    holders
}

/// How many passes over `/proc/locks` we make for two that agree.
const PASSES: usize = 8;

/// `/proc/locks`, and whether it came in one `read`. The kernel builds one
/// read's worth (a page) under its lock, then starts the next read by
/// position in a list that may have changed meanwhile, which can repeat or
/// skip an entry: only a file that fits in one read is a snapshot.
/// (`read_to_string` would probe with a 32-byte read first and never get
/// one.)
pub fn read_proc_locks() -> io::Result<(String, bool)> {
    let mut file = fs::File::open("/proc/locks")?;
    let mut buf = vec![0u8; 64 * 1024];
    let (mut text, mut reads) = (Vec::new(), 0);
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        text.extend_from_slice(&buf[..n]);
        reads += 1;
    }
    Ok((String::from_utf8_lossy(&text).into_owned(), reads <= 1))
}

/// A process holding a lock file (its pid, unless the kernel no longer
/// names it) and whether it holds it shared.
pub type Locker = (Option<u32>, bool);

/// The live holders of the lock file `name` in `dir` according to the kernel:
/// from one snapshot of `/proc/locks` or, when it spans several reads, from
/// two consecutive passes that agree about this file (the last pass after
/// `PASSES` that never did).
/// Each holder is named with whether it holds the file shared.
pub fn holders_of(dir: &Dir, name: &str) -> io::Result<Option<(Lock, Vec<Locker>)>> {
    let Some(lock) = Lock::at(dir, name)? else {
        return Ok(None);
    };
    let mut previous = None;
    for _ in 0..PASSES {
        let (text, snapshot) = read_proc_locks()?;
        let mut now: Vec<_> = flock_holders(&text, lock)
            .into_iter()
            .map(|pid| (pid, false))
            .collect();
        now.extend(flock_readers(&text, lock).into_iter().map(|pid| (pid, true)));
        if snapshot || previous.as_ref() == Some(&now) {
            return Ok(Some((lock, now)));
        }
        previous = Some(now);
    }
    Ok(previous.map(|now| (lock, now)))
}

/// Field 22 of `/proc/PID/stat`, the start time in clock ticks since boot.
pub fn start_time(pid: u32) -> io::Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_start_time(&stat)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed /proc/PID/stat"))
}

fn parse_start_time(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: count
    // from the last `)`, after which field 3 begins.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// Whether `pid` is still the process that started at `start`.
pub fn process_is(pid: u32, start: u64) -> bool {
    start_time(pid).is_ok_and(|s| s == start)
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_locks_names_granted_flocks_only() {
        let lock = Lock {
            dev: nix::sys::stat::makedev(0xfd, 1),
            ino: 42,
        };
        let text = "\
1: FLOCK  ADVISORY  WRITE 123 fd:01:42 0 EOF
1: -> FLOCK  ADVISORY  WRITE 456 fd:01:42 0 EOF
2: POSIX  ADVISORY  WRITE 789 fd:01:42 0 EOF
3: FLOCK  ADVISORY  READ 5 fd:01:42 0 EOF
4: FLOCK  ADVISORY  WRITE 0 fd:01:42 0 EOF
5: FLOCK  ADVISORY  WRITE 9 fd:01:420 0 EOF
6: OFDLCK ADVISORY  WRITE -1 00:2a:42 0 EOF
";
        assert_eq!(flock_holders(text, lock), vec![None, Some(123)]);
        let twice = "1: FLOCK ADVISORY WRITE 7 fd:01:42 0 EOF\n".repeat(2);
        assert_eq!(flock_holders(&twice, lock), vec![Some(7)]);
    }

    #[test]
    fn start_time_survives_odd_command_names() {
        let stat = "77 (a) b (c) S 1 77 77 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100";
        assert_eq!(parse_start_time(stat), Some(987_654));
        let me = std::process::id();
        let start = start_time(me).unwrap();
        assert!(process_is(me, start));
        assert!(!process_is(me, start + 1));
    }

    #[test]
    fn facts_round_trip_and_absent_facts_start_at_zero() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = std::sync::Arc::new(Dir::top(tmp.path()).unwrap());
        let files = KeyFiles {
            dir: dir.clone(),
            lock: "k".into(),
        };
        let path = tmp.path().join("k.lockrun");
        let scratch = tmp.path().join("k.lockrun-new");
        let read = || Facts::read_at(&dir, "k.lockrun");
        assert_eq!(read().unwrap(), Facts::default());
        fs::write(&path, b"").unwrap();
        assert_eq!(read().unwrap(), Facts::default());
        fs::write(&path, [0u8; 64]).unwrap();
        assert_eq!(read().unwrap(), Facts::default());
        let facts = Facts {
            fence: 7,
            dev: 1,
            ino: 2,
            holder: Some(HolderFacts {
                value: "v".into(),
                host: "h".into(),
                pid: 3,
                pid_start: 4,
                since_ms: 5,
                child_pgid: None,
            }),
        };
        facts.write(&files).unwrap();
        assert_eq!(read().unwrap(), facts);
        // The second write swaps instead: the first record stays behind
        // as scratch, and nothing of it leaks into the new one.
        let ino = fs::metadata(&path).unwrap().ino();
        let shorter = Facts {
            fence: 8,
            ..Facts::default()
        };
        shorter.write(&files).unwrap();
        assert_eq!(read().unwrap(), shorter);
        assert_eq!(fs::metadata(&scratch).unwrap().ino(), ino);
        assert_eq!(Facts::read(&scratch).unwrap(), facts);
        let seeded = Facts::default().next_fence();
        assert!(seeded > 1_700_000_000_000_000, "{seeded}");
        let counted = Facts {
            fence: u64::MAX - 1,
            ..Facts::default()
        };
        assert_eq!(counted.next_fence(), u64::MAX);
        fs::write(&path, b"{oops").unwrap();
        let e = read().unwrap_err().to_string();
        assert!(e.contains("unreadable"), "{e}");
    }

    #[test]
    fn a_link_or_fifo_beside_the_lock_is_refused_and_never_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let locks = tmp.path().join("locks");
        fs::create_dir(&locks).unwrap();
        let dir = std::sync::Arc::new(Dir::top(&locks).unwrap());
        let files = KeyFiles {
            dir: dir.clone(),
            lock: "k".into(),
        };
        let victim = tmp.path().join("victim");
        fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, locks.join("k.lockrun-new")).unwrap();
        let e = Facts::default().write(&files).unwrap_err().to_string();
        assert!(e.contains("symbolic link") && !e.contains('\n'), "{e}");
        std::os::unix::fs::symlink(&victim, locks.join("k.lockrun")).unwrap();
        let e = Facts::read_at(&dir, "k.lockrun").unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        fs::remove_file(locks.join("k.lockrun")).unwrap();
        nix::unistd::mkfifo(&locks.join("k.lockrun"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let e = Facts::read_at(&dir, "k.lockrun").unwrap_err().to_string();
        assert!(e.contains("a FIFO"), "{e}");
    }
}
