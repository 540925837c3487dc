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

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use super::dir;
use super::tree::{Dir, KeyFiles, Missing};
use super::watch::Retiring;
use super::engine::{in_thread, lock_opened, lock_path, open_lock, Attempt, Granted};
use super::{Kind, Local, LocalError};
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
) -> Result<Vec<(KeyFiles, Option<u32>)>, LocalError> {
    dir::check_key(prefix)?;
    let Some(dir) = local.descend(prefix.split('/'), Missing::Absent)? else {
        return Ok(Vec::new());
    };
    let mut slots: Vec<u32> = dir
        .names()?
        .into_iter()
        .filter_map(|name| name.to_str()?.strip_prefix("slot-")?.parse().ok())
        .collect();
    slots.sort_unstable();
    Ok(slots
        .into_iter()
        .map(|i| {
            let files = KeyFiles {
                dir: Arc::clone(&dir),
                lock: format!("slot-{i}"),
            };
            (files, Some(i))
        })
        .collect())
}

/// The text of `name` in `dir`, opened as every file in the tree is.
pub(super) fn read_text(dir: &Dir, name: &str) -> Result<String, LocalError> {
    let path = dir.join(name);
    let mut text = String::new();
    match dir.open_file(name, None)? {
        // Bounded: anyone who may write in the lock directory may plant a
        // record (a waiter's, a limit), and ours are a few hundred bytes.
        Some(file) => file
            .take(super::engine::RECORD_MAX)
            .read_to_string(&mut text)
            .map_err(|e| LocalError::io(format!("cannot read `{}`", path.display()), e))?,
        None => {
            return Err(LocalError::io(
                format!("cannot read `{}`", path.display()),
                std::io::ErrorKind::NotFound.into(),
            ))
        }
    };
    Ok(text)
}

/// A usage error when `prefix` names a leader lock's file (`lockrun elect
/// PREFIX` or `flock DIR/PREFIX` made it): a semaphore's prefix is a
/// directory, and [`Local::descend`] would refuse the file in words that
/// do not say what to type instead. Nothing is created to find out.
fn a_lock_already(local: &Local, prefix: &str) -> Option<LocalError> {
    use nix::sys::stat::SFlag;
    let (parents, last) = match prefix.rsplit_once('/') {
        Some((parents, last)) => (Some(parents), last),
        None => (None, prefix),
    };
    let names = parents.into_iter().flat_map(|p| p.split('/'));
    let dir = local.descend(names, Missing::Absent).ok()??;
    let st = dir.stat(last).ok()??;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return None;
    }
    Some(LocalError::usage(format!(
        "`{prefix}` is a leader lock (the file `{}`), not a semaphore's prefix; use `lockrun elect {prefix}`, or another PREFIX for the semaphore",
        dir.join(last).display()
    )))
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
    if let Some(e) = a_lock_already(local, prefix) {
        return Err(e);
    }
    let dir = local
        .descend(prefix.split('/'), Missing::Create)?
        .expect("created where missing");
    let sem = Sem {
        dir,
        prefix: prefix.to_owned(),
        limit,
    };
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
    /// The prefix's directory, checked.
    dir: Arc<Dir>,
    prefix: String,
    limit: u32,
}

pub(super) const LIMIT: &str = ".limit";

impl Sem {
    fn slot(&self, i: u32) -> KeyFiles {
        KeyFiles {
            dir: Arc::clone(&self.dir),
            lock: format!("slot-{i}"),
        }
    }

    fn read_limit(&self) -> Result<Option<u32>, LocalError> {
        let path = self.dir.join(LIMIT);
        let Some(mut file) = self.dir.open_file(LIMIT, None)? else {
            return Ok(None);
        };
        let mut text = String::new();
        file.read_to_string(&mut text)
            .map_err(|e| LocalError::io(format!("cannot read `{}`", path.display()), e))?;
        text.trim().parse().map(Some).map_err(|_| {
            LocalError::io_msg(format!(
                "`{}` does not hold a limit; remove it when nobody holds a slot",
                path.display()
            ))
        })
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
            match lock_path(&self.dir, &self.slot(i).lock, false)? {
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
        let path = self.dir.join(LIMIT);
        // Unique per call: contenders in one process race here too.
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let call = CALLS.fetch_add(1, Ordering::Relaxed);
        let scratch = format!(".limit-{}-{call}", std::process::id());
        let fail = |e| LocalError::io(format!("cannot write `{}`", path.display()), e);
        self.dir
            .own_file(&scratch, 0o644)?
            .write_all(format!("{}\n", self.limit).as_bytes())
            .map_err(fail)?;
        let placed = if replace {
            self.dir.rename(&scratch, LIMIT).map(|()| true)
        } else {
            // A hard link never replaces: the first contender's limit wins.
            let linked = match self.dir.link(&scratch, LIMIT) {
                Ok(()) => Ok(true),
                Err(Errno::EEXIST) => Ok(false),
                Err(e) => Err(e),
            };
            let _ = self.dir.unlink(&scratch);
            linked
        };
        placed.map_err(|e| fail(e.into()))
    }

    /// After getting a slot: the limit must still be ours.
    fn granted(&self, file: File, lock: super::facts::Lock, i: u32) -> Result<Granted, LocalError> {
        match self.read_limit()? {
            Some(limit) if limit == self.limit && i < limit => Ok(Granted {
                file,
                lock,
                files: self.slot(i),
                slot: Some(i),
                shared: false,
                turn: None,
            }),
            Some(stored) => Err(self.mismatch(stored)),
            None => Err(self.mismatch(0)),
        }
    }

    fn try_once(&self) -> Result<Option<Granted>, LocalError> {
        self.agree_limit()?;
        for i in 0..self.limit {
            if let Some((file, lock)) = lock_path(&self.dir, &self.slot(i).lock, false)? {
                return self.granted(file, lock, i).map(Some);
            }
        }
        Ok(None)
    }

    fn wait(&self, cancel: &Cancel) -> Result<Option<Granted>, LocalError> {
        self.agree_limit()?;
        let Some(_queue) = lock_path(&self.dir, ".queue", true)? else {
            unreachable!("a blocking lock always ends held");
        };
        if cancel.is_set() {
            return Ok(None);
        }
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .and_then(|ino| {
                // By descriptor: the directory we checked, whatever its
                // name leads to now.
                ino.add_watch(
                    &self.dir.proc_path(),
                    AddWatchFlags::IN_CLOSE_WRITE
                        | AddWatchFlags::IN_CLOSE_NOWRITE
                        | AddWatchFlags::IN_DELETE
                        | AddWatchFlags::IN_MOVED_TO,
                )
                .map(|_| Retiring::new(ino))
            })
            .map_err(|e| {
                LocalError::io(
                    format!("cannot watch `{}`", self.dir.path().display()),
                    e.into(),
                )
            })?;
        let mut files = (0..self.limit)
            .map(|i| open_lock(&self.dir, &self.slot(i).lock))
            .collect::<Result<Vec<_>, _>>()?;
        loop {
            // Drained before trying, so a release after our attempt still
            // wakes us.
            while inotify.read_events().is_ok_and(|evs| !evs.is_empty()) {}
            for i in 0..self.limit {
                let name = self.slot(i).lock;
                match lock_opened(&files[i as usize], &self.dir, &name, false)? {
                    Attempt::Got(lock) => {
                        let file = files.swap_remove(i as usize);
                        return self.granted(file, lock, i).map(Some);
                    }
                    Attempt::Taken => {}
                    Attempt::Replaced => files[i as usize] = open_lock(&self.dir, &name)?,
                }
            }
            let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
            match nix::poll::poll(&mut fds, PollTimeout::from(RECHECK_MS)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => {
                    return Err(LocalError::io(
                        format!("cannot wait on `{}`", self.dir.path().display()),
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
