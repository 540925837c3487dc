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
//! never polls.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
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
/// lock and its waiters.
pub struct Watch {
    fd: AsyncFd<AsyncInotify>,
    lock: String,
    records: String,
}

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
        ino.add_watch(
            &files.dir.proc_path(),
            AddWatchFlags::IN_CLOSE_WRITE
                | AddWatchFlags::IN_CLOSE_NOWRITE
                | AddWatchFlags::IN_DELETE
                | AddWatchFlags::IN_MOVED_TO
                | AddWatchFlags::IN_MOVED_FROM,
        )
        .map_err(fail)?;
        let fd = register_inotify(ino).map_err(|e| {
            LocalError::io(format!("cannot watch `{}`", files.dir.path().display()), e)
        })?;
        Ok(Watch {
            fd,
            lock: files.lock.clone(),
            records: format!("{}{WAIT_INFIX}", files.lock),
        })
    }

    /// Waits for an event about the lock file or a waiter's record: true
    /// when a record came, went or was closed (or events were lost), false
    /// for the lock file alone.
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
            let mut lock = false;
            for ev in &events {
                if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    return true;
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
