//! lockrun's waiters for a leader lock, made visible for `--priority`
//! (see [`crate::backend::priority`]). flock(2) keeps its waiters to
//! itself, so each lockrun writer that waits puts a record beside the lock:
//! `KEY.lockrun-wait-<priority>-<pid>-<n>` (`n` counts the process's
//! waits, for an engine that several tasks share), holding its value, locked
//! (`LOCK_EX`) by the waiter for as long as it waits and removed by it once
//! it holds the lock or gives up. A record nobody has locked is a dead
//! waiter's (killed before it could remove it): it counts for nothing.
//! Rivals read the priority from the name and the liveness from
//! `/proc/locks`, opening nothing, so that looking makes no inotify event
//! of its own.
//!
//! A waiter watches the lock's directory with inotify: a record that comes
//! (renamed into place), goes, or whose waiter dies (its descriptor closes),
//! and the lock file closed by its holder, each wake it to look again. It
//! never polls. A waiter in the engine's wait (its verdict `Go`) watches
//! for arrivals only, as opens of the turnstile (see [`Watch::arrivals_only`]):
//! nothing but a new waiter can send it out, and every other event in the
//! directory (each handover's facts, the lock file opened and closed, a
//! record removed by the waiter that got the lock) would wake every waiter
//! of a herd at once, on the CPUs the handover needs.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use tokio::io::unix::AsyncFd;

use super::dir::WAIT_INFIX;
use super::facts::{self, Lock};
use super::sys::{self, register_inotify, AsyncInotify};
use super::tree::{Dir, KeyFiles};
use super::LocalError;

/// Our record, while we wait: unlinked, then closed, when dropped.
pub struct Record {
    dir: Arc<Dir>,
    name: String,
    _file: File,
}

impl Record {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Writes our record beside `files`' lock: made under a scratch name,
    /// locked, then renamed into place, so that no rival ever sees it
    /// unlocked while we live.
    pub fn publish(files: &KeyFiles, level: u32, value: &str) -> Result<Record, LocalError> {
        static WAITS: AtomicU64 = AtomicU64::new(0);
        let n = WAITS.fetch_add(1, Ordering::Relaxed);
        let name = format!(
            "{}{WAIT_INFIX}{level}-{}-{n}",
            files.lock,
            std::process::id()
        );
        let scratch = format!("{name}.new");
        let path = files.dir.join(&name);
        let fail = |e: std::io::Error| LocalError::io(format!("cannot write `{}`", path.display()), e);
        // Ours alone, as the lock file is: a user who could open it could
        // lock it once we are gone and keep a dead waiter alive.
        let mut file = files.dir.own_file(&scratch, 0o600)?;
        file.set_len(0).map_err(fail)?;
        file.write_all(value.as_bytes()).map_err(fail)?;
        if !sys::try_lock(file.as_fd(), false).map_err(fail)? {
            return Err(fail(std::io::Error::other("someone else has locked it")));
        }
        files
            .dir
            .rename(&scratch, &name)
            .map_err(|e| fail(e.into()))?;
        // The bell for waiters already in the engine's wait, which watch
        // the turnstile's opens alone (see [`Watch::arrivals_only`]): a
        // record that may outrank them has come. Best effort: a turnstile
        // we cannot open is one no waiter can be in either.
        drop(super::engine::open_lock(&files.dir, &files.turnstile()));
        Ok(Record {
            dir: Arc::clone(&files.dir),
            name,
            _file: file,
        })
    }
}

impl crate::backend::GoneAhead for Record {
    fn remove(self: Box<Self>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        drop(self);
        Box::pin(async {})
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        // Best effort: a record left behind is unlocked once we close it.
        let _ = self.dir.unlink(&self.name);
    }
}

/// A live waiter seen beside a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub level: u32,
    pub pid: u32,
    /// Its record's name, to read its value.
    pub name: String,
}

/// The live lockrun waiters for `files`' lock, `ours` left out, and
/// whether the lock itself is free (nobody holds it, or it does not exist).
pub fn look(files: &KeyFiles, ours: Option<&str>) -> Result<(Vec<Seen>, bool), LocalError> {
    let fail = |e| LocalError::io(format!("cannot inspect `{}`", files.lock_path().display()), e);
    let (text, _) = facts::read_proc_locks().map_err(fail)?;
    let locked = |name: &str| -> Result<bool, LocalError> {
        Ok(match Lock::at(&files.dir, name).map_err(fail)? {
            Some(lock) => {
                !facts::flock_holders(&text, lock).is_empty()
                    || !facts::flock_readers(&text, lock).is_empty()
            }
            None => false,
        })
    };
    // A record counts while the waiter its name gives holds it: locked
    // by anyone else (a record of a waiter gone, locked by a stranger), it
    // is no waiter. A pid /proc/locks cannot show (another pid namespace)
    // is taken at its word.
    let alive = |name: &str, pid: u32| -> Result<bool, LocalError> {
        Ok(match Lock::at(&files.dir, name).map_err(fail)? {
            Some(lock) => facts::flock_holders(&text, lock)
                .into_iter()
                .any(|holder| holder.is_none_or(|h| h == pid)),
            None => false,
        })
    };
    let mut seen = Vec::new();
    for name in records(files)? {
        let Some((level, pid)) = parse(files, &name) else {
            continue;
        };
        if Some(name.as_str()) != ours && alive(&name, pid)? {
            seen.push(Seen { level, pid, name });
        }
    }
    let free = !locked(&files.lock)?;
    Ok((seen, free))
}

/// The live waiters for `files`' lock with their values, for `leader`
/// and `list`, highest priority first.
pub fn waiting(files: &KeyFiles) -> Result<Vec<(Seen, Option<String>)>, LocalError> {
    let (mut seen, _) = look(files, None)?;
    seen.sort_by_key(|s| std::cmp::Reverse(s.level));
    Ok(seen
        .into_iter()
        .map(|s| {
            let value = super::semaphore::read_text(&files.dir, &s.name).ok();
            (s, value)
        })
        .collect())
}

/// The names of the records beside `files`' lock, finished ones only.
fn records(files: &KeyFiles) -> Result<Vec<String>, LocalError> {
    let start = format!("{}{WAIT_INFIX}", files.lock);
    Ok(files
        .dir
        .names()?
        .into_iter()
        .filter_map(|n| n.into_string().ok())
        .filter(|n| n.starts_with(&start) && !n.ends_with(".new"))
        .collect())
}

/// A record's priority and pid, from its name.
fn parse(files: &KeyFiles, name: &str) -> Option<(u32, u32)> {
    let rest = name.strip_prefix(&files.lock)?.strip_prefix(WAIT_INFIX)?;
    let mut parts = rest.split('-');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The lock's directory under watch, for the events that concern `files`'
/// lock and its waiters; and the turnstile (`KEY.lockrun-rw`), opened by
/// every waiter that goes for the lock, a higher one that came included.
pub struct Watch {
    /// The directory's events, while we watch them.
    fd: AsyncFd<AsyncInotify>,
    /// The directory, kept open for as long as we name it by descriptor.
    dir: Arc<Dir>,
    /// Its watch on `fd`, `None` while only arrivals are watched.
    watching: std::sync::Mutex<Option<WatchDescriptor>>,
    /// The turnstile's opens.
    bell: AsyncFd<AsyncInotify>,
    lock: String,
    records: String,
}

/// Every event in the directory a deferring waiter looks again on.
const EVERYTHING: AddWatchFlags = AddWatchFlags::IN_CLOSE_WRITE
    .union(AddWatchFlags::IN_CLOSE_NOWRITE)
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_MOVED_FROM);

impl Watch {
    pub fn new(files: &KeyFiles) -> Result<Watch, LocalError> {
        let fail = |e: nix::Error| {
            LocalError::io(
                format!("cannot watch `{}`", files.dir.path().display()),
                e.into(),
            )
        };
        let init = || Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).map_err(fail);
        let register = |ino| {
            register_inotify(ino).map_err(|e| {
                LocalError::io(format!("cannot watch `{}`", files.dir.path().display()), e)
            })
        };
        let ino = init()?;
        // By descriptor: the directory we checked, whatever its name leads
        // to now.
        let wd = ino.add_watch(&files.dir.proc_path(), EVERYTHING).map_err(fail)?;
        // The turnstile as every waiter opens it, made if it is missing.
        let turnstile = super::engine::open_lock(&files.dir, &files.turnstile())?;
        let bell = init()?;
        let at = format!("/proc/self/fd/{}", turnstile.as_raw_fd());
        bell.add_watch(at.as_str(), AddWatchFlags::IN_OPEN)
            .map_err(fail)?;
        Ok(Watch {
            fd: register(ino)?,
            dir: Arc::clone(&files.dir),
            watching: std::sync::Mutex::new(Some(wd)),
            bell: register(bell)?,
            lock: files.lock.clone(),
            records: format!("{}{WAIT_INFIX}", files.lock),
        })
    }

    /// Watches the directory's every event (`false`), as a waiter must
    /// before it looks, or arrivals only (`true`), once its look said `Go`:
    /// then only the turnstile's opens. Every record that comes opens it
    /// once in place ([`Record::publish`]), so a waiter in the engine's
    /// wait misses no higher waiter that could send it out; the
    /// directory's other events (each
    /// handover's facts, records that go) would wake every waiter of a herd
    /// at once, on the CPUs the handover needs. Widening comes before the
    /// look, so that nothing between the look and the wait is missed.
    pub fn arrivals_only(&self, narrow: bool) -> Result<(), LocalError> {
        let mut watching = self.watching.lock().expect("not poisoned");
        let inotify = self.fd.get_ref().inner();
        let outcome = match (watching.take(), narrow) {
            (Some(wd), true) => inotify.rm_watch(wd).map(|()| None),
            (None, false) => inotify
                .add_watch(&self.dir.proc_path(), EVERYTHING)
                .map(Some),
            (same, _) => Ok(same),
        };
        match outcome {
            Ok(now) => {
                *watching = now;
                Ok(())
            }
            Err(e) => Err(LocalError::io(
                format!("cannot watch `{}`", self.dir.path().display()),
                e.into(),
            )),
        }
    }

    /// Waits for an event about the lock file or a waiter's record: true
    /// when a record came, went or was closed, or a waiter opened the
    /// turnstile (or events were lost), false for the lock file alone.
    pub async fn next(&self) -> bool {
        loop {
            let narrow = self.watching.lock().expect("not poisoned").is_none();
            tokio::select! {
                biased;
                rang = Self::events(&self.bell) => {
                    // Opens of the turnstile count only while nothing
                    // else is watched.
                    if narrow || rang.is_none() {
                        return true;
                    }
                }
                events = Self::events(&self.fd), if !narrow => {
                    let Some(events) = events else {
                        return true;
                    };
                    let mut lock = false;
                    for ev in &events {
                        // The directory's watch removed (IN_IGNORED) says
                        // nothing; the rest does.
                        if ev.mask.contains(AddWatchFlags::IN_IGNORED) {
                            continue;
                        }
                        let Some(name) = ev.name.as_ref().and_then(|n| n.to_str()) else {
                            continue;
                        };
                        if name.starts_with(&self.records) && !name.ends_with(".new") {
                            return true;
                        }
                        lock |= name == self.lock;
                    }
                    if lock {
                        return false;
                    }
                }
            }
        }
    }

    /// The next events of `ino`; `None` when some were lost.
    async fn events(ino: &AsyncFd<AsyncInotify>) -> Option<Vec<nix::sys::inotify::InotifyEvent>> {
        loop {
            let Ok(mut ready) = ino.readable().await else {
                return std::future::pending().await;
            };
            match ready.get_inner().inner().read_events() {
                Ok(events) if !events.is_empty() => {
                    return (!events
                        .iter()
                        .any(|ev| ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW)))
                    .then_some(events);
                }
                _ => ready.clear_ready(),
            }
        }
    }
}
