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
        // record that may outrank them has come. Without it they would not
        // know until they look again: priority's order, not the lock, is
        // at stake, so a failure is said and the wait goes on.
        let ring = || super::engine::open_lock(&files.dir, &files.turnstile());
        if let Err(e) = ring().or_else(|_| ring()) {
            tracing::warn!(
                "{e}: lockrun writers already waiting for `{}` may not see our priority before the lock is free",
                files.lock_path().display()
            );
        }
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
/// lock and its waiters; and the turnstile (`KEY.lockrun-rw`), which every
/// record opens once as it comes ([`Record::publish`]). One inotify
/// instance for both: a user has 128 by default.
pub struct Watch {
    fd: AsyncFd<AsyncInotify>,
    /// The directory, kept open for as long as we name it by descriptor.
    dir: Arc<Dir>,
    turnstile: String,
    lock: String,
    records: String,
    state: std::sync::Mutex<Watching>,
}

/// What [`Watch`] watches now.
struct Watching {
    /// The directory's watch, its mask [`EVERYTHING`] or, while only
    /// arrivals count, [`ITSELF`].
    dir: WatchDescriptor,
    narrow: bool,
    /// The turnstile's watch and the file it is on (`None` once the kernel
    /// dropped it, the file gone).
    bell: Option<(WatchDescriptor, Lock)>,
}

/// Every event in the directory a deferring waiter looks again on.
const EVERYTHING: AddWatchFlags = AddWatchFlags::IN_CLOSE_WRITE
    .union(AddWatchFlags::IN_CLOSE_NOWRITE)
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_MOVED_FROM);

/// The directory itself moved (its removal never shows while we hold it
/// open): what the directory's watch narrows to while only arrivals count.
/// A watch's mask is changed in place, which cannot fail for want of
/// watches as a watch removed and added back could.
const ITSELF: AddWatchFlags = AddWatchFlags::IN_MOVE_SELF.union(AddWatchFlags::IN_DELETE_SELF);

/// The turnstile opened (a waiter came, or goes for the lock), its link
/// count changed (removed, or another file renamed over it) or itself
/// renamed away: after the last two, arrivals open another file at the
/// path, and the bell must move there.
const BELL: AddWatchFlags = AddWatchFlags::IN_OPEN
    .union(AddWatchFlags::IN_ATTRIB)
    .union(AddWatchFlags::IN_MOVE_SELF);

impl Watch {
    pub fn new(files: &KeyFiles) -> Result<Watch, LocalError> {
        let fail = |e: nix::Error| {
            LocalError::io(
                format!("cannot watch `{}`", files.dir.path().display()),
                e.into(),
            )
        };
        let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).map_err(fail)?;
        // By descriptor: the directory we checked, whatever its name leads
        // to now.
        let dir = ino.add_watch(&files.dir.proc_path(), EVERYTHING).map_err(fail)?;
        let fd = register_inotify(ino).map_err(|e| {
            LocalError::io(format!("cannot watch `{}`", files.dir.path().display()), e)
        })?;
        let watch = Watch {
            fd,
            dir: Arc::clone(&files.dir),
            turnstile: files.turnstile(),
            lock: files.lock.clone(),
            records: format!("{}{WAIT_INFIX}", files.lock),
            state: std::sync::Mutex::new(Watching {
                dir,
                narrow: false,
                bell: None,
            }),
        };
        watch.ring_here()?;
        Ok(watch)
    }

    /// Puts the bell on the turnstile the path names now (made if it is
    /// missing, as every waiter makes it), unless it is there already.
    fn ring_here(&self) -> Result<(), LocalError> {
        let mut state = self.state.lock().expect("not poisoned");
        let fail = |e: nix::Error| {
            LocalError::io(
                format!("cannot watch `{}`", self.dir.join(&self.turnstile).display()),
                e.into(),
            )
        };
        let inspect = |e| {
            LocalError::io(
                format!("cannot inspect `{}`", self.dir.join(&self.turnstile).display()),
                e,
            )
        };
        let inotify = self.fd.get_ref().inner();
        // A file renamed over the path between our open and our watch
        // rings nothing here: the path is checked again once the watch is
        // on, and a few times at most.
        for _ in 0..3 {
            let now = Lock::at(&self.dir, &self.turnstile).map_err(inspect)?;
            if now.is_some() && now == state.bell.map(|(_, at)| at) {
                return Ok(());
            }
            // Opened as every waiter opens it: no link, no device; watched
            // by descriptor, so the watch is on the very file we checked.
            let file = super::engine::open_lock(&self.dir, &self.turnstile)?;
            let at = Lock::of(&file.metadata().map_err(inspect)?);
            let path = format!("/proc/self/fd/{}", file.as_raw_fd());
            let wd = inotify.add_watch(path.as_str(), BELL).map_err(fail)?;
            if let Some((old, _)) = state.bell.replace((wd, at)) {
                if old != wd {
                    // Gone already when the kernel dropped it with its file.
                    let _ = inotify.rm_watch(old);
                }
            }
        }
        Ok(())
    }

    /// Watches the directory's every event (`false`), as a waiter must
    /// before it looks, or arrivals only (`true`), once its look said `Go`:
    /// then the turnstile's bell. Every record that comes opens it once in
    /// place ([`Record::publish`]), so a waiter in the engine's wait misses
    /// no higher waiter that could send it out; the directory's other
    /// events (each handover's facts, the lock file opened and closed, a
    /// record removed) would wake every waiter of a herd on every
    /// handover, on the CPUs the handover needs. Widening comes before the
    /// look, so that nothing between the look and the wait is missed, and
    /// moves the bell to the turnstile the path names now (removed, or
    /// another file renamed over it, it would ring no more).
    pub fn arrivals_only(&self, narrow: bool) -> Result<(), LocalError> {
        {
            let mut state = self.state.lock().expect("not poisoned");
            if state.narrow != narrow {
                let mask = if narrow { ITSELF } else { EVERYTHING };
                // The same directory: its watch's mask is replaced.
                let wd = self
                    .fd
                    .get_ref()
                    .inner()
                    .add_watch(&self.dir.proc_path(), mask)
                    .map_err(|e| {
                        LocalError::io(
                            format!("cannot watch `{}`", self.dir.path().display()),
                            e.into(),
                        )
                    })?;
                state.dir = wd;
                state.narrow = narrow;
            }
        }
        if !narrow {
            // Best effort: a bell we cannot move costs priority's order
            // only, not the wait.
            if let Err(e) = self.ring_here() {
                tracing::warn!("{e}: a higher waiter that comes may not be seen until the next look");
            }
        }
        Ok(())
    }

    /// Waits for an event about the lock file or a waiter's record: true
    /// when a record came, went or was closed, the turnstile rang (or
    /// events were lost), false for the lock file alone.
    pub async fn next(&self) -> bool {
        loop {
            let Ok(mut ready) = self.fd.readable().await else {
                return std::future::pending().await;
            };
            let events = match ready.get_inner().inner().read_events() {
                Ok(events) if !events.is_empty() => events,
                _ => {
                    ready.clear_ready();
                    continue;
                }
            };
            // The whole batch is read before we answer: the bell's end
            // (IN_IGNORED) must not be lost behind an earlier wake.
            let mut state = self.state.lock().expect("not poisoned");
            let (mut records, mut lock) = (false, false);
            for ev in &events {
                if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    // What was lost may have been the bell's end: it is
                    // put on the turnstile afresh at the next look.
                    state.bell = None;
                    records = true;
                    continue;
                }
                if state.bell.is_some_and(|(wd, _)| wd == ev.wd) {
                    if ev.mask.contains(AddWatchFlags::IN_IGNORED) {
                        state.bell = None;
                    }
                    // The turnstile opened, removed, replaced or moved:
                    // while only arrivals count, a look (which moves the
                    // bell first where it must).
                    records |= state.narrow;
                    continue;
                }
                if ev.wd != state.dir {
                    continue;
                }
                if state.narrow {
                    // The directory itself moved: look. Any other event
                    // came while we watched everything (our own look's
                    // reading of the directory among them) and says
                    // nothing now.
                    records |= ev.mask.intersects(ITSELF | AddWatchFlags::IN_IGNORED);
                    continue;
                }
                let Some(name) = ev.name.as_ref().and_then(|n| n.to_str()) else {
                    continue;
                };
                records |= name.starts_with(&self.records) && !name.ends_with(".new");
                lock |= name == self.lock;
            }
            if records {
                return true;
            }
            if lock {
                return false;
            }
        }
    }
}
