//! Semaphores: N slot files under a prefix directory, the limit every
//! contender must agree on, and a queue so that waiters neither spin nor
//! stampede.
//!
//! Only the waiter holding `.queue` looks for a free slot; the others sleep
//! in `flock` on the queue. That waiter keeps every slot file open (so its
//! own attempts make no inotify events), tries each without blocking, and
//! sleeps until something in the directory is closed, re-checking every
//! second in case a holder unlocked without closing (`flock -u`).
//!
//! The limit lives in `.limit`. Whoever finds it different from its own may
//! replace it only while holding every slot of both limits at once (so
//! nobody holds any), and every contender re-reads it after getting a slot
//! and gives the slot back if it changed: so no child ever runs under a
//! limit other than the one in force.

use std::fs::{self, File};
use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use super::dir::{self, KeyPaths};
use super::watch::Retiring;
use super::{
    in_thread, lock_opened, lock_path, open_lock, Attempt, Granted, Kind, Local, LocalError,
};
use crate::backend::Wait;

/// How often the queue's head re-checks the slots without any event.
const RECHECK_MS: u16 = 1000;

/// Tells a waiting thread that nobody wants its result any more.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Sets the flag when the returned value is dropped.
    pub fn on_drop(&self) -> CancelOnDrop {
        CancelOnDrop(self.clone())
    }
}

pub struct CancelOnDrop(Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0 .0.store(true, Ordering::SeqCst);
    }
}

/// The slot files that exist under `prefix`, with their numbers.
pub(super) fn slot_files(
    local: &Local,
    prefix: &str,
) -> Result<Vec<(KeyPaths, Option<u32>)>, LocalError> {
    dir::check_key(prefix)?;
    let dir = local.dir().join(prefix);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(LocalError::io(
                format!("cannot list `{}`", dir.display()),
                e,
            ))
        }
    };
    let mut slots: Vec<u32> = entries
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_prefix("slot-")?
                .parse()
                .ok()
        })
        .collect();
    slots.sort_unstable();
    Ok(slots
        .into_iter()
        .map(|i| {
            (
                KeyPaths::new(local.dir(), &format!("{prefix}/slot-{i}")),
                Some(i),
            )
        })
        .collect())
}

pub(super) async fn acquire(
    local: &Local,
    prefix: &str,
    limit: u32,
    wait: Wait,
) -> Result<Option<Granted>, LocalError> {
    dir::check_key(prefix)?;
    if limit == 0 {
        return Err(LocalError::usage("--limit must be at least 1".to_owned()));
    }
    let sem = Sem {
        root: local.dir().to_owned(),
        dir: local.dir().join(prefix),
        prefix: prefix.to_owned(),
        limit,
    };
    KeyPaths::new(&sem.root, &format!("{prefix}/.queue")).create_parents(&sem.root)?;
    if let Some(granted) = sem.try_once()? {
        return Ok(Some(granted));
    }
    match wait {
        Wait::Once => Ok(None),
        Wait::Until(_) | Wait::Forever => {
            let work = move |cancel: Cancel| sem.wait(&cancel);
            Ok(in_thread(wait.deadline(), Cancel::default(), work)
                .await
                .transpose()?
                .flatten())
        }
    }
}

struct Sem {
    root: PathBuf,
    dir: PathBuf,
    prefix: String,
    limit: u32,
}

impl Sem {
    fn slot(&self, i: u32) -> KeyPaths {
        KeyPaths::new(&self.root, &format!("{}/slot-{i}", self.prefix))
    }

    fn limit_path(&self) -> PathBuf {
        self.dir.join(".limit")
    }

    fn read_limit(&self) -> Result<Option<u32>, LocalError> {
        let path = self.limit_path();
        match fs::read_to_string(&path) {
            Ok(text) => text.trim().parse().map(Some).map_err(|_| {
                LocalError::io_msg(format!(
                    "`{}` does not hold a limit; remove it when nobody holds a slot",
                    path.display()
                ))
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(LocalError::io(
                format!("cannot read `{}`", path.display()),
                e,
            )),
        }
    }

    fn mismatch(&self, stored: u32) -> LocalError {
        LocalError::new(
            Kind::LimitMismatch,
            format!(
                "semaphore `{}` has limit {stored} while its slots are held, and we asked for --limit {}; use --limit {stored}, or wait until its holders are gone",
                self.prefix, self.limit
            ),
        )
    }

    /// Makes `.limit` say our limit, or fails naming both.
    fn agree_limit(&self) -> Result<(), LocalError> {
        let stored = match self.read_limit()? {
            Some(stored) if stored == self.limit => return Ok(()),
            Some(stored) => stored,
            None => match self.publish_limit(false)? {
                true => return Ok(()),
                // Someone else created it first: theirs is the one in force.
                false => return self.agree_limit(),
            },
        };
        // Holding every slot of both limits, we know nobody holds any.
        let mut held = Vec::new();
        for i in 0..stored.max(self.limit) {
            match lock_path(&self.slot(i).lock, false)? {
                Some(file) => held.push(file),
                None => return Err(self.mismatch(stored)),
            }
        }
        self.publish_limit(true)?;
        Ok(())
    }

    /// Writes our limit to `.limit`; unless `replace`, only if there is
    /// none yet (`Ok(false)` when someone else's appeared first).
    fn publish_limit(&self, replace: bool) -> Result<bool, LocalError> {
        let path = self.limit_path();
        // Unique per call: contenders in one process race here too.
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let call = CALLS.fetch_add(1, Ordering::Relaxed);
        let scratch = self
            .dir
            .join(format!(".limit-{}-{call}", std::process::id()));
        let fail = |e| LocalError::io(format!("cannot write `{}`", path.display()), e);
        fs::write(&scratch, format!("{}\n", self.limit)).map_err(fail)?;
        let placed = if replace {
            fs::rename(&scratch, &path).map(|()| true)
        } else {
            // A hard link never replaces: the first contender's limit wins.
            let linked = match fs::hard_link(&scratch, &path) {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
                Err(e) => Err(e),
            };
            let _ = fs::remove_file(&scratch);
            linked
        };
        placed.map_err(fail)
    }

    /// After getting a slot: the limit must still be ours.
    fn granted(&self, file: File, lock: super::Lock, i: u32) -> Result<Granted, LocalError> {
        match self.read_limit()? {
            Some(limit) if limit == self.limit && i < limit => Ok(Granted {
                file,
                lock,
                paths: self.slot(i),
                slot: Some(i),
            }),
            Some(stored) => Err(self.mismatch(stored)),
            None => Err(self.mismatch(0)),
        }
    }

    fn try_once(&self) -> Result<Option<Granted>, LocalError> {
        self.agree_limit()?;
        for i in 0..self.limit {
            if let Some((file, lock)) = lock_path(&self.slot(i).lock, false)? {
                return self.granted(file, lock, i).map(Some);
            }
        }
        Ok(None)
    }

    fn wait(&self, cancel: &Cancel) -> Result<Option<Granted>, LocalError> {
        self.agree_limit()?;
        let queue = self.dir.join(".queue");
        let Some(_queue) = lock_path(&queue, true)? else {
            unreachable!("a blocking lock always ends held");
        };
        if cancel.is_set() {
            return Ok(None);
        }
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .and_then(|ino| {
                ino.add_watch(
                    &self.dir,
                    AddWatchFlags::IN_CLOSE_WRITE
                        | AddWatchFlags::IN_CLOSE_NOWRITE
                        | AddWatchFlags::IN_DELETE
                        | AddWatchFlags::IN_MOVED_TO,
                )
                .map(|_| Retiring::new(ino))
            })
            .map_err(|e| {
                LocalError::io(format!("cannot watch `{}`", self.dir.display()), e.into())
            })?;
        let mut files = (0..self.limit)
            .map(|i| open_lock(&self.slot(i).lock))
            .collect::<Result<Vec<_>, _>>()?;
        loop {
            // Drained before trying, so a release after our attempt still
            // wakes us.
            while inotify.read_events().is_ok_and(|evs| !evs.is_empty()) {}
            for i in 0..self.limit {
                let path = self.slot(i).lock;
                match lock_opened(&files[i as usize], &path, false)? {
                    Attempt::Got(lock) => {
                        let file = files.swap_remove(i as usize);
                        return self.granted(file, lock, i).map(Some);
                    }
                    Attempt::Taken => {}
                    Attempt::Replaced => files[i as usize] = open_lock(&path)?,
                }
            }
            let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
            match nix::poll::poll(&mut fds, PollTimeout::from(RECHECK_MS)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    return Err(LocalError::io(
                        format!("cannot wait on `{}`", self.dir.display()),
                        e.into(),
                    ))
                }
            }
            if cancel.is_set() {
                return Ok(None);
            }
        }
    }
}
