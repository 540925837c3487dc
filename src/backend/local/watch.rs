//! Watching the lock directory with inotify, never with a polling loop
//! that burns CPU: for a held lock, whether its file is removed or
//! replaced; for `leader`, when the holders may have changed.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use super::dir::{FACTS_SUFFIX, SCRATCH_SUFFIX};
use super::facts::Lock;
use super::tree::{walk, KeyFiles, Step};
use super::sys::{register_inotify, AsyncInotify as Ino};
use super::{Local, LocalError};
use crate::backend::{Changes, Holder, Inspect, Target};

/// A safety net for what inotify cannot see (a holder that unlocks without
/// closing, a directory created above the one we watch).
const BACKSTOP: Duration = Duration::from_secs(5);

/// How long a holder with no value must last before we report it.
const SETTLE: Duration = Duration::from_millis(20);

/// After someone opens a lock file, when to look again: `flock(1)` opens
/// first and locks a moment later, which makes no event of its own.
const AFTER_OPEN: [Duration; 3] = [
    Duration::from_millis(10),
    Duration::from_millis(100),
    Duration::from_secs(1),
];

/// Owns an inotify instance and, once dropped, closes it on a thread of its
/// own. Closing one waits for the kernel to retire its watches (4.5 ms
/// measured here), and ours are dropped at the worst moment: when a holder's
/// child has exited and the lock is about to go, or when a waiter has just
/// got its slot.
pub(super) struct Retiring<T: Send + 'static>(Option<T>);

impl<T: Send + 'static> Retiring<T> {
    pub(super) fn new(inner: T) -> Retiring<T> {
        Retiring(Some(inner))
    }
}

impl<T: Send + 'static> std::ops::Deref for Retiring<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.0.as_ref().expect("present until dropped")
    }
}

impl<T: Send + 'static> Drop for Retiring<T> {
    fn drop(&mut self) {
        if let Some(inner) = self.0.take() {
            // Without a thread it closes here, as it would have anyway.
            let _ = std::thread::Builder::new()
                .name("lockrun-close".into())
                .spawn(move || drop(inner));
        }
    }
}

fn watch(dir: &Path, flags: AddWatchFlags) -> nix::Result<(AsyncFd<Ino>, WatchDescriptor)> {
    let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
    let wd = ino.add_watch(dir, flags)?;
    let fd = register_inotify(ino)
        .map_err(|e| nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(0)))?;
    Ok((fd, wd))
}

/// The events that arrived, waiting for at least one.
async fn events(fd: &AsyncFd<Ino>) -> Vec<InotifyEvent> {
    loop {
        let Ok(mut ready) = fd.readable().await else {
            // The reactor is going away; the callers' timers take over
            // rather than a loop on an error that comes back at once.
            return std::future::pending().await;
        };
        match ready.get_inner().inner().read_events() {
            Ok(events) if !events.is_empty() => return events,
            _ => ready.clear_ready(),
        }
    }
}

/// For how long a new hold looks at its lock file's path instead of
/// watching it: an inotify instance that has had a watch costs the exit of
/// the process that closes it one kernel grace period (10–15 ms measured,
/// where the whole run of `-- true` takes 3), so a short job must never
/// create one. Longer holds get the watch, and so an instant verdict.
const LOOKED_AT: Duration = Duration::from_secs(1);

/// The first look after the hold starts; each next one waits twice as long,
/// up to [`LOOK_EVERY`].
const FIRST_LOOK: Duration = Duration::from_millis(2);
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// Why the hold is over, when the lock file's name no longer names the
/// file we locked: in its directory, or along its whole path, which is the
/// one a rival opens (issue #45: the lock directory, or one below it,
/// renamed away or replaced, and a rival made a new one at its path).
fn replaced(files: &KeyFiles, lock: Lock) -> Option<String> {
    match Lock::at(&files.dir, &files.lock) {
        Ok(Some(now)) if now == lock => {}
        Ok(_) => {
            return Some(format!(
                "lock file `{}` was removed or replaced, so a rival could lock it",
                files.lock_path().display()
            ))
        }
        Err(e) => {
            tracing::warn!("cannot check `{}`: {e}", files.lock_path().display());
            return None;
        }
    }
    let path = files.lock_path();
    match std::fs::symlink_metadata(&path) {
        Ok(meta) if Lock::of(&meta) == lock => None,
        Ok(_) => Some(format!(
            "`{}` no longer leads to the lock file we hold (a directory on its path was moved or replaced), so a rival could lock another there",
            path.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(format!(
            "`{}` no longer leads to the lock file we hold (a directory on its path was moved away or removed), so a rival could make and lock another there",
            path.display()
        )),
        Err(e) => {
            tracing::warn!("cannot check `{}`: {e}", path.display());
            None
        }
    }
}

/// The names that matter in each directory watched for the path: an
/// event about any other name there (in `/tmp`, say) is no reason to look.
type OnPath = HashMap<WatchDescriptor, Vec<OsString>>;

/// Adds to `fd`'s inotify instance a watch on every directory a name is
/// looked up in on the way to the lock file's directory, the path as given
/// and the targets of the links on it alike (`/srv/app` for
/// `/srv/app/current/locks`, with `current -> releases/2`, and
/// `/srv/app/releases`), for that name's creation, removal or renaming, and
/// the directory's own: a link re-pointed, or a directory moved away or
/// replaced, says so at once, not at the next backstop. Each watch is in
/// place before its name is looked up, so no change slips between.
/// Also says whether every directory on the way is watched: one that
/// cannot be (a non-root holder that may pass through a directory but not
/// read it, 0711) leaves the path to be looked at every [`LOOK_EVERY`].
fn watch_path(fd: &AsyncFd<Ino>, files: &KeyFiles) -> (OnPath, bool) {
    let flags = AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        // Added to what a directory watched twice (the lock file's own, or one
        // two names are looked up in) already has, never in its stead.
        | AddWatchFlags::from_bits_retain(libc::IN_MASK_ADD);
    let mut on_path = OnPath::new();
    let mut whole = true;
    let mut look = |step: &Step<'_>| {
        let at = PathBuf::from(format!("/proc/self/fd/{}", step.dir.as_raw_fd()));
        match fd.get_ref().inner().add_watch(&at, flags) {
            Ok(wd) => on_path.entry(wd).or_default().push(step.name.to_owned()),
            Err(e) => {
                tracing::info!(
                    "cannot watch `{}` ({e}); looking at the lock's path every {}",
                    step.dir_path.display(),
                    crate::duration::fmt_duration(LOOK_EVERY)
                );
                whole = false;
            }
        }
        Ok(())
    };
    if let Err(e) = walk(files.dir.path(), &mut look, &mut |_, _| Ok(())) {
        tracing::info!("cannot watch the way to `{}`: {e}", files.dir.path().display());
        whole = false;
    }
    (on_path, whole)
}

/// Whether `ev` may mean the lock file's path changed: anything in its own
/// directory (`own`), or about the directories on its path, and a name on
/// it; not another name beside one.
fn on_path(ev: &InotifyEvent, own: WatchDescriptor, path: &OnPath) -> bool {
    let (Some(name), Some(names)) = (&ev.name, path.get(&ev.wd)) else {
        return true;
    };
    ev.wd == own || names.iter().any(|n| n == name)
}

/// Resolves once the lock file's name no longer names the file we locked:
/// someone removed or replaced it, and a rival may lock whatever is there
/// now.
pub async fn lock_file_replaced(files: &KeyFiles, lock: Lock) -> String {
    // Some fifteen looks (a `stat` each) in the first second, then the
    // watch: a removal is seen within 0.1 s at first and at once after.
    let until = Instant::now() + LOOKED_AT;
    let mut gap = FIRST_LOOK;
    while Instant::now() < until {
        if let Some(why) = replaced(files, lock) {
            return why;
        }
        tokio::time::sleep(gap).await;
        gap = (gap * 2).min(LOOK_EVERY);
    }
    // The directory we checked and locked in, by its descriptor.
    let parent = files.dir.proc_path();
    let flags = AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF;
    let fd = match watch(&parent, flags) {
        Ok((fd, own)) => {
            let (path, whole) = watch_path(&fd, files);
            // Where a directory on the way is not watched, a change there
            // is found by looking, as in the first second.
            let backstop = if whole { BACKSTOP } else { LOOK_EVERY };
            Some((Retiring::new(fd), own, path, backstop))
        }
        Err(e) => {
            tracing::warn!(
                "cannot watch `{}` ({e}); checking it every {}",
                files.dir.path().display(),
                crate::duration::fmt_duration(LOOK_EVERY)
            );
            None
        }
    };
    loop {
        // Checked after the watch is in place, so no change slips between.
        if let Some(why) = replaced(files, lock) {
            return why;
        }
        match &fd {
            Some((fd, own, path, every)) => {
                let backstop = Instant::now() + *every;
                loop {
                    tokio::select! {
                        evs = events(fd) => {
                            if evs.iter().any(|ev| on_path(ev, *own, path)) {
                                break;
                            }
                        }
                        _ = tokio::time::sleep_until(backstop) => break,
                    }
                }
            }
            None => tokio::time::sleep(LOOK_EVERY).await,
        }
    }
}

/// `leader --wait` and `--watch` on the local backend.
pub struct LocalChanges {
    local: Local,
    target: Target,
    last: Option<Vec<Holder>>,
    /// The directory the target's files live in, and the one we watch: the
    /// nearest that exists, since `leader` creates nothing.
    wanted: PathBuf,
    watched: Option<(PathBuf, AsyncFd<Ino>)>,
    rechecks: BTreeSet<Instant>,
}

impl LocalChanges {
    pub(super) fn new(local: Local, target: Target) -> Result<LocalChanges, LocalError> {
        let wanted = match &target {
            Target::Lock { key, .. } => {
                super::dir::check_key(key)?;
                let lock = local.dir().join(key);
                lock.parent().unwrap_or(local.dir()).to_owned()
            }
            Target::Slot { prefix, .. } => {
                super::dir::check_key(prefix)?;
                local.dir().join(prefix)
            }
        };
        Ok(LocalChanges {
            local,
            target,
            last: None,
            wanted,
            watched: None,
            rechecks: BTreeSet::new(),
        })
    }

    fn arm(&mut self) -> Result<(), LocalError> {
        if self
            .watched
            .as_ref()
            .is_some_and(|(dir, _)| *dir == self.wanted)
        {
            return Ok(());
        }
        let mut dir = self.wanted.clone();
        while !dir.is_dir() && dir.pop() {}
        if self.watched.as_ref().is_some_and(|(d, _)| *d == dir) {
            return Ok(());
        }
        let flags = AddWatchFlags::IN_OPEN
            | AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_CLOSE_NOWRITE
            | AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_MOVED_TO;
        let (fd, _) = watch(&dir, flags)
            .map_err(|e| LocalError::io(format!("cannot watch `{}`", dir.display()), e.into()))?;
        self.watched = Some((dir, fd));
        Ok(())
    }

    /// Takes the events that may mean a change; ignores our own reads of
    /// holder facts and the directory, which would otherwise wake us for
    /// ever.
    fn note(&mut self, events: &[InotifyEvent]) -> bool {
        let mut changed = false;
        for ev in events {
            let Some(name) = ev.name.as_ref().and_then(|n| n.to_str()) else {
                continue;
            };
            if name.ends_with(SCRATCH_SUFFIX) {
                continue;
            }
            if name.ends_with(FACTS_SUFFIX) {
                changed |= ev.mask.contains(AddWatchFlags::IN_MOVED_TO);
                continue;
            }
            if ev.mask.contains(AddWatchFlags::IN_OPEN) {
                let now = Instant::now();
                self.rechecks.extend(AFTER_OPEN.iter().map(|d| now + *d));
            }
            changed = true;
        }
        changed
    }
}

impl Changes for LocalChanges {
    type Error = LocalError;

    async fn next(&mut self) -> Result<Vec<Holder>, LocalError> {
        let mut settled = false;
        loop {
            self.arm()?;
            let now = self.local.holders(&self.target).await?;
            if self.last.as_ref() != Some(&now) {
                // A lockrun clears its facts just before it lets go, and
                // takes the lock just before it writes them: a holder with
                // no value is usually one of those instants. We look once
                // more before reporting it, so a watch does not print a
                // phantom holder at every handover.
                if !settled && now.iter().any(|h| h.value.is_none()) {
                    settled = true;
                    tokio::time::sleep(SETTLE).await;
                    continue;
                }
                self.last = Some(now.clone());
                return Ok(now);
            }
            // Wait for an event that may matter, a scheduled re-check, or
            // the backstop.
            loop {
                let at = Instant::now();
                self.rechecks.retain(|t| *t > at);
                let wake = self
                    .rechecks
                    .first()
                    .copied()
                    .unwrap_or(at + BACKSTOP)
                    .min(at + BACKSTOP);
                let (_, fd) = self.watched.as_ref().expect("armed above");
                let got = tokio::select! {
                    evs = events(fd) => Some(evs),
                    _ = tokio::time::sleep_until(wake) => None,
                };
                match got {
                    Some(evs) if !self.note(&evs) => continue,
                    _ => break,
                }
            }
        }
    }
}
