//! The local engine (`Engine`): `flock(2)` on a lock file under the lock
//! directory, the claim it makes and the guard that may wait for it.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::backend::priority::Priority;
use crate::backend::{
    Acquisition, Claim, Engine, GuardWait, Holder, Inspect, Lease, Lost, Opening,
    Renewal, ReplaceNote, Target, Wait,
};

use super::error::LocalError;
use super::facts::{Facts, HolderFacts, Lock};
use super::tree::{Dir, KeyFiles, Missing};
use super::{dir, facts, semaphore, sys, waiters, watch};

/// The local engine: a prepared lock directory.
#[derive(Debug, Clone)]
pub struct Local {
    pub(super) dir: PathBuf,
    host: String,
    /// `dir`, open, once prepared (created, checked): only then may we
    /// acquire in it.
    top: Option<Arc<Dir>>,
    /// How our waits for a leader lock rank among other lockrun waiters'.
    priority: Priority,
}

impl Local {
    /// Prepares `dir` (see [`dir::prepare`]); `allow_network` accepts a lock
    /// directory on NFS or CIFS.
    pub fn open(dir: PathBuf, allow_network: bool) -> Result<Local, LocalError> {
        let top = dir::prepare(&dir, allow_network)?;
        let host = nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(Local {
            dir,
            host,
            top: Some(Arc::new(top)),
            priority: Priority::NONE,
        })
    }

    /// The same engine, waiting for a leader lock with `priority`.
    pub fn ranked(self, priority: Priority) -> Local {
        Local { priority, ..self }
    }

    /// For looking only (`leader`): creates nothing and accepts a directory
    /// that is not ours, such as root's `/run/lockrun` for any user; a
    /// missing directory has no holders.
    pub fn for_reading(dir: PathBuf) -> Local {
        Local {
            dir,
            host: String::new(),
            top: None,
            priority: Priority::NONE,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory `names` lead to from the lock directory, each one
    /// checked: created where missing, if `missing` says so and we may
    /// acquire here; `None` where one is missing (or, for a reader, the
    /// lock directory itself).
    pub(super) fn descend<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
        missing: Missing,
    ) -> Result<Option<Arc<Dir>>, LocalError> {
        let top = match &self.top {
            Some(top) => Arc::clone(top),
            None if missing == Missing::Create => return Err(self.read_only()),
            None => match Dir::top_for_reading(&self.dir)? {
                Some(top) => Arc::new(top),
                None => return Ok(None),
            },
        };
        top.descend(names, missing)
    }

    /// The files of `key`: its directory checked (see [`Local::descend`]).
    pub(super) fn key_files(&self, key: &str, missing: Missing) -> Result<Option<KeyFiles>, LocalError> {
        dir::check_key(key)?;
        let (parents, lock) = match key.rsplit_once('/') {
            Some((parents, lock)) => (Some(parents), lock),
            None => (None, key),
        };
        let names = parents.into_iter().flat_map(|p| p.split('/'));
        Ok(self.descend(names, missing)?.map(|dir| KeyFiles {
            dir,
            lock: lock.to_owned(),
        }))
    }

    fn read_only(&self) -> LocalError {
        LocalError::dir(format!(
            "lock directory `{}` was opened for reading only; open it with Local::open to acquire",
            self.dir.display()
        ))
    }

    /// Turns a granted lock into a claim: the next fencing number and our
    /// holder facts, written before the claim (and so the child) exists.
    /// `me` is our pid and start time, read before the wait.
    fn claim(
        &self,
        target: &Target,
        value: &str,
        granted: Granted,
        (me, pid_start): (u32, u64),
    ) -> Result<LocalClaim, LocalError> {
        let Granted {
            file,
            lock,
            files,
            slot,
            shared,
            turn,
        } = granted;
        let previous = Facts::read_at(&files.dir, &files.facts())?;
        let holder = HolderFacts {
                value: value.to_owned(),
                host: self.host.clone(),
                pid: me,
                pid_start,
                since_ms: facts::now_ms(),
                child_pgid: None,
        };
        // The record names one holder, the writer; a reader only moves the
        // fence on (under the turnstile, so no two readers take the same
        // one) and keeps its own facts, which nobody else reads.
        let facts = Facts {
            fence: previous.next_fence(),
            dev: lock.dev,
            ino: lock.ino,
            holder: (!shared).then(|| holder.clone()),
        };
        facts.write(&files)?;
        drop(turn);
        let facts = Facts {
            holder: Some(holder),
            ..facts
        };
        Ok(LocalClaim {
            file,
            lent: false,
            handed_over: false,
            lock,
            lock_path: files.lock_path(),
            files,
            facts,
            name: target.name().to_owned(),
            slot,
            shared,
        })
    }
}

/// Why `key` cannot be a leader lock when a directory that passes the
/// tree's checks stands where its lock file would: a usage error when it is
/// a semaphore's prefix (its `.limit` is there), else the refusal (125)
/// [`Dir::open_file`] would give, in words that say what to do. Said
/// before the lock file is opened; a directory that fails the checks is
/// refused by them.
fn not_a_lock(files: &KeyFiles, key: &str) -> Option<LocalError> {
    use nix::sys::stat::SFlag;
    let st = files.dir.stat(&files.lock).ok()??;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFDIR {
        return None;
    }
    let sub = files
        .dir
        .descend([files.lock.as_str()], Missing::Absent)
        .ok()??;
    let limit = semaphore::read_text(&sub, semaphore::LIMIT)
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok());
    Some(match limit {
        Some(limit) => LocalError::usage(format!(
            "`{key}` is a semaphore's prefix (`{}` holds its slots); use `lockrun semaphore --limit {limit} {key}`, or another KEY for a leader lock",
            files.lock_path().display()
        )),
        // Most likely the parent of other keys (`KEY/...`), but anyone who
        // may write here could have made it: refused as before, with both.
        None => LocalError::dir(format!(
            "`{}` is a directory, not a lock file: other keys live under it (`{key}/...`), or something else made it; choose another KEY, or remove it if nothing uses it",
            files.lock_path().display()
        )),
    })
}

/// A lock file we hold, not yet a claim.
#[derive(Debug)]
pub(super) struct Granted {
    pub(super) file: File,
    pub(super) lock: Lock,
    pub(super) files: KeyFiles,
    pub(super) slot: Option<u32>,
    /// Held shared, by one of any number of readers.
    pub(super) shared: bool,
    /// A reader's turnstile, kept until its fence is written: readers take
    /// their fences one at a time.
    pub(super) turn: Option<File>,
}

/// Opens the lock file `name` in `dir` as `flock(1)` does (read-only,
/// created if missing), 0600 when we create it, so only its owner can ever
/// lock it (0640 in a directory shared with a group, whose members lock it
/// too). Anything there but a regular file is refused at once (see
/// [`Dir::open_file`]): a FIFO would block the open for ever.
pub(super) fn open_lock(dir: &Dir, name: &str) -> Result<File, LocalError> {
    Ok(dir
        .open_file(name, Some(0o600))?
        .expect("a file opened with O_CREAT exists"))
}

/// What one attempt on an open lock file found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Attempt {
    Got(Lock),
    /// Someone else holds it (only without blocking).
    Taken,
    /// We got it, but the path no longer names this file: it was removed or
    /// replaced while we waited, and a rival may lock the new one. Open the
    /// path afresh.
    Replaced,
}

pub(super) fn lock_opened(file: &File, dir: &Dir, name: &str, block: bool) -> Result<Attempt, LocalError> {
    lock_opened_as(file, dir, name, block, false)
}

/// [`lock_opened`], shared (`LOCK_SH`) when `shared`.
fn lock_opened_as(
    file: &File,
    dir: &Dir,
    name: &str,
    block: bool,
    shared: bool,
) -> Result<Attempt, LocalError> {
    let fail = |e| LocalError::io(format!("cannot lock `{}`", dir.join(name).display()), e);
    if block {
        sys::lock(file.as_fd(), shared).map_err(fail)?;
    } else if !sys::try_lock(file.as_fd(), shared).map_err(fail)? {
        return Ok(Attempt::Taken);
    }
    let mine = Lock::of(&file.metadata().map_err(fail)?);
    match Lock::at(dir, name).map_err(fail)? {
        Some(now) if now == mine => Ok(Attempt::Got(mine)),
        _ => Ok(Attempt::Replaced),
    }
}

/// Locks the file `name` in `dir`: `Ok(None)` only when `block` is false
/// and it is taken.
pub(super) fn lock_path(dir: &Dir, name: &str, block: bool) -> Result<Option<(File, Lock)>, LocalError> {
    lock_path_as(dir, name, block, false)
}

/// [`lock_path`], shared (`LOCK_SH`) when `shared`.
fn lock_path_as(
    dir: &Dir,
    name: &str,
    block: bool,
    shared: bool,
) -> Result<Option<(File, Lock)>, LocalError> {
    loop {
        let file = open_lock(dir, name)?;
        match lock_opened_as(&file, dir, name, block, shared)? {
            Attempt::Got(lock) => return Ok(Some((file, lock))),
            Attempt::Taken => return Ok(None),
            Attempt::Replaced => continue,
        }
    }
}

/// A lock file we hold, and a reader's turnstile.
type Locked = ((File, Lock), Option<File>);

/// Waits in a thread of its own for the turnstile, then the lock of
/// `files`, until `deadline`: `None` when it passed.
async fn wait_in_thread(
    files: &KeyFiles,
    shared: bool,
    deadline: Option<tokio::time::Instant>,
) -> Result<Option<Locked>, LocalError> {
    let (dir, lock, turn) = (Arc::clone(&files.dir), files.lock.clone(), files.turnstile());
    let work = move |cancel: semaphore::Cancel| -> Result<_, LocalError> {
        let (turn, _) = lock_path(&dir, &turn, true)?.expect("a blocking lock is granted");
        if cancel.is_set() {
            return Ok(None);
        }
        let got = lock_path_as(&dir, &lock, true, shared)?;
        // The reader keeps the turnstile until its facts are
        // written; a writer lets it go now.
        Ok(got.map(|got| (got, shared.then_some(turn))))
    };
    match in_thread(deadline, semaphore::Cancel::default(), work).await {
        Some(result) => result,
        None => Ok(None),
    }
}

/// Runs blocking `work` in a thread of its own and waits for it until
/// `deadline`; dropping the returned future abandons the thread, whose
/// result, when it comes, is dropped (a granted lock closes and is free).
pub(super) async fn in_thread<T: Send + 'static>(
    deadline: Option<tokio::time::Instant>,
    cancel: semaphore::Cancel,
    work: impl FnOnce(semaphore::Cancel) -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let flag = cancel.clone();
    std::thread::Builder::new()
        .name("lockrun-wait".into())
        .spawn(move || {
            let _ = tx.send(work(flag));
        })
        .expect("spawn a waiting thread");
    // Whatever ends this wait (deadline, drop), the thread learns it.
    let _cancel_on_drop = cancel.on_drop();
    let result = match deadline {
        Some(at) => tokio::time::timeout_at(at, rx).await.ok()?,
        None => rx.await,
    };
    Some(result.expect("the waiting thread never panics"))
}

/// How long a reader with `--no-wait` waits for the turnstile another
/// reader passes: a writer that waits keeps it far longer.
const ONCE_TURN: Duration = Duration::from_millis(200);

/// The most lockrun reads of any record beside a lock (facts, notes,
/// waiters' records, a semaphore's limit): ours are far smaller, and a
/// planted file of gigabytes must not be read whole.
pub(super) const RECORD_MAX: u64 = 1 << 20;

/// The local engine's non-lease: nothing to renew, never runs out.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoLease;

impl Lease for NoLease {
    fn confirmed_at(&self) -> tokio::time::Instant {
        tokio::time::Instant::now()
    }

    async fn renew(&self, _timeout: Duration) -> Renewal {
        Renewal::Confirmed { ttl: None }
    }

    async fn close(self) {}
}

impl Engine for Local {
    type Lease = NoLease;
    type Claim = LocalClaim;
    type Error = LocalError;

    const CLAIM_LENDS_FD: bool = true;

    async fn open_lease(&self, _opening: Opening<'_>) -> Result<NoLease, LocalError> {
        Ok(NoLease)
    }

    async fn acquire(
        &self,
        _lease: &NoLease,
        target: &Target,
        value: &str,
        wait: Wait,
    ) -> Result<Acquisition<LocalClaim>, LocalError> {
        if self.top.is_none() {
            return Err(self.read_only());
        }
        // Read before the wait, so that a handover does not wait for it.
        let me = std::process::id();
        let pid_start = facts::start_time(me)
            .map_err(|e| LocalError::io("cannot read our own start time".into(), e))?;
        let granted = match target {
            Target::Lock { key, shared } => {
                self.acquire_lock(key, *shared, wait, value).await?
            }
            Target::Slot { prefix, limit } => {
                semaphore::acquire(self, prefix, *limit, wait).await?
            }
        };
        match granted {
            Some(granted) => Ok(Acquisition::Held(self.claim(
                target,
                value,
                granted,
                (me, pid_start),
            )?)),
            None => Ok(self.busy(target).await),
        }
    }

    /// A writer's wait for a leader lock is the guard's own (see
    /// [`Local::wait_in_guard`]): it starts the child the moment the
    /// kernel grants the lock, as `flock(1)` does. The first attempt, a
    /// reader, a semaphore, `--no-wait`, and a guard that cannot be armed
    /// (on a terminal) go as [`Engine::acquire`] does.
    async fn acquire_in_guard<G: GuardWait>(
        &self,
        lease: &NoLease,
        target: &Target,
        value: &str,
        wait: Wait,
        guard: &mut G,
    ) -> Result<(Acquisition<LocalClaim>, bool), LocalError> {
        let key = match target {
            Target::Lock { key, shared: false } if wait != Wait::Once && self.top.is_some() => key,
            _ => return Ok((self.acquire(lease, target, value, wait).await?, false)),
        };
        let me = std::process::id();
        let pid_start = facts::start_time(me)
            .map_err(|e| LocalError::io("cannot read our own start time".into(), e))?;
        let files = self
            .key_files(key, Missing::Create)?
            .expect("created where missing");
        if let Some(e) = not_a_lock(&files, key) {
            return Err(e);
        }
        let granted = |(file, lock): (File, Lock), files: KeyFiles| Granted {
            file,
            lock,
            files,
            slot: None,
            shared: false,
            turn: None,
        };
        if let Some(got) = lock_path(&files.dir, &files.lock, false)? {
            let claim = self.claim(target, value, granted(got, files), (me, pid_start))?;
            return Ok((Acquisition::Held(claim), false));
        }
        let grant = GuardGrant {
            dir: self.dir.clone(),
            key: key.clone(),
            value: value.to_owned(),
            host: self.host.clone(),
            pid: me,
            pid_start,
        };
        let got = match self.wait_in_guard(&files, wait, value, &grant, guard).await? {
            InGuard::Started(claim) => return Ok((Acquisition::Held(*claim), true)),
            InGuard::Waited(got) => got,
            // The guard could not wait (a terminal), or could not use the
            // grant (the lock file replaced meanwhile): we wait ourselves.
            InGuard::Ours => self.wait_ranked(&files, wait, value).await?,
        };
        match got {
            Some((got, _)) => {
                let claim = self.claim(target, value, granted(got, files), (me, pid_start))?;
                Ok((Acquisition::Held(claim), false))
            }
            None => Ok((self.busy(target).await, false)),
        }
    }
}

impl Local {
    /// Locks `key`'s file, shared (`LOCK_SH`, as `flock -s`) for a reader,
    /// else exclusive. flock(2) itself lets readers in for as long as any
    /// reader holds, so that a writer could wait for ever: lockrun's readers
    /// and waiting writers therefore pass a turnstile first (the file
    /// `KEY.lockrun-rw`, locked exclusive while they wait for the lock and
    /// let go once they have it). A writer that waits keeps it, so readers
    /// that come after it wait behind it. A writer that finds the lock free
    /// takes it at once, and `flock -s`/`flock -x` never pass it: they
    /// exclude lockrun as before, without the writer preference.
    ///
    /// A writer that has to wait ranks itself among lockrun's writers
    /// ([`Local::wait_ranked`]).
    async fn acquire_lock(
        &self,
        key: &str,
        shared: bool,
        wait: Wait,
        value: &str,
    ) -> Result<Option<Granted>, LocalError> {
        let files = self
            .key_files(key, Missing::Create)?
            .expect("created where missing");
        if let Some(e) = not_a_lock(&files, key) {
            return Err(e);
        }
        // One attempt first, without a thread: the common uncontended case,
        // and a `--timeout` that has already run out still gets its try. A
        // reader takes it only through the turnstile, which is free unless
        // a writer waits (or another reader is passing it this moment).
        let turnstile = files.turnstile();
        let first = if shared {
            match lock_path(&files.dir, &turnstile, false)? {
                Some((turn, _)) => lock_path_as(&files.dir, &files.lock, false, true)?
                    .map(|got| (got, Some(turn))),
                None => None,
            }
        } else {
            lock_path(&files.dir, &files.lock, false)?.map(|got| (got, None))
        };
        let got = match first {
            Some(got) => Some(got),
            None if wait == Wait::Once && !shared => None,
            None if !shared => self.wait_ranked(&files, wait, value).await?,
            None => {
                // A reader told not to wait still waits out a turnstile
                // that another reader passes this moment, never a writer:
                // one that waits or holds makes it busy within the bound.
                let deadline = match wait {
                    Wait::Once => Some(tokio::time::Instant::now() + ONCE_TURN),
                    _ => wait.deadline(),
                };
                wait_in_thread(&files, shared, deadline).await?
            }
        };
        Ok(got.map(|((file, lock), turn)| Granted {
            file,
            lock,
            files,
            slot: None,
            shared,
            turn,
        }))
    }

    /// Busy, with the holder's value when known.
    async fn busy(&self, target: &Target) -> Acquisition<LocalClaim> {
        let holder = self
            .holders(target)
            .await
            .ok()
            .and_then(|hs| hs.into_iter().find_map(|h| h.value));
        Acquisition::Busy { holder }
    }

    /// [`Local::wait_ranked`], with the lock's own wait the guard's: once
    /// our turn among lockrun's writers has come (the turnstile, taken in a
    /// thread as ever), the lock file is lent to the parked guard, which
    /// blocks in `flock`, and, granted, runs [`grant_in_guard`] (the
    /// fencing number and our facts, written before anything runs) and
    /// starts the child. A higher-priority waiter that comes, or the
    /// deadline, takes the wait back (the disarm signal); a grant that came
    /// first wins, and the child runs.
    async fn wait_in_guard<G: GuardWait>(
        &self,
        files: &KeyFiles,
        wait: Wait,
        value: &str,
        grant: &GuardGrant,
        guard: &mut G,
    ) -> Result<InGuard, LocalError> {
        let watch = waiters::Watch::new(files)?;
        let record = waiters::Record::publish(files, self.priority.level, value)?;
        let result = self
            .wait_in_guard_with(files, wait, &watch, &record, grant, guard)
            .await;
        drop(watch::Retiring::new((record, watch)));
        result
    }

    async fn wait_in_guard_with<G: GuardWait>(
        &self,
        files: &KeyFiles,
        wait: Wait,
        watch: &waiters::Watch,
        record: &waiters::Record,
        grant: &GuardGrant,
        guard: &mut G,
    ) -> Result<InGuard, LocalError> {
        use crate::backend::priority::Verdict;
        let deadline = wait.deadline();
        let mut deferral = self.priority.deferral();
        let decide = |deferral: &mut crate::backend::priority::Deferral| {
            rank(files, watch, record, deferral)
        };
        let until = |at: Option<tokio::time::Instant>| async move {
            match at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let grant_text = format!(
            "local {}",
            serde_json::to_string(grant).expect("a grant serialises")
        );
        let guard_failed =
            |e: io::Error| LocalError::io_msg(format!("the guard cannot wait for the lock: {e}"));
        loop {
            if let Verdict::Defer { until: later } = decide(&mut deferral)? {
                let wake = [later, deadline].into_iter().flatten().min();
                tokio::select! {
                    _ = watch.next() => {}
                    () = until(wake) => {}
                }
                if deadline.is_some_and(|at| tokio::time::Instant::now() >= at) {
                    return Ok(InGuard::Waited(None));
                }
                continue;
            }
            // Our turn among lockrun's writers first, as in `wait_in_thread`.
            let (dir, turnstile) = (Arc::clone(&files.dir), files.turnstile());
            let taking = in_thread(deadline, semaphore::Cancel::default(), move |_| {
                lock_path(&dir, &turnstile, true)
            });
            tokio::pin!(taking);
            let turn = loop {
                tokio::select! {
                    biased;
                    got = &mut taking => break got,
                    records = watch.next() => {
                        if records && decide(&mut deferral)? != Verdict::Go {
                            break Some(Ok(None));
                        }
                    }
                }
            };
            let turn = match turn {
                None => return Ok(InGuard::Waited(None)),
                Some(Ok(Some((turn, _)))) => turn,
                // Sent out by a higher waiter: rank again.
                Some(Ok(None)) => continue,
                Some(Err(e)) => return Err(e),
            };
            let file = open_lock(&files.dir, &files.lock)?;
            let lent = OwnedFd::from(
                file.try_clone()
                    .map_err(|e| LocalError::io("cannot lend the lock file".into(), e))?,
            );
            let env = claim_env(&grant.key, None, &files.lock_path());
            let armed = guard.arm(
                &lent,
                env,
                vec![INDEX_VARIABLE.to_owned()],
                Some(grant.pid.to_string()),
                grant_text.clone(),
            );
            drop(lent);
            if let Err(e) = armed {
                tracing::debug!("{e}; lockrun waits for the lock itself");
                return Ok(InGuard::Ours);
            }
            let report = loop {
                tokio::select! {
                    biased;
                    report = guard.report() => break report.map_err(guard_failed)?,
                    records = watch.next() => {
                        if records && decide(&mut deferral)? != Verdict::Go {
                            break guard.disarm().await.map_err(guard_failed)?;
                        }
                    }
                    () = until(deadline) => break guard.disarm().await.map_err(guard_failed)?,
                }
            };
            drop(turn);
            match report {
                crate::child::Report::Granted(text) => {
                    let granted: GuardGranted = serde_json::from_str(&text).map_err(|e| {
                        LocalError::io_msg(format!("the guard's grant is garbled ({e})"))
                    })?;
                    return Ok(InGuard::Started(Box::new(self.claim_from_guard(
                        files, grant, file, granted,
                    ))));
                }
                crate::child::Report::Declined => return Ok(InGuard::Ours),
                crate::child::Report::Disarmed => {
                    if deadline.is_some_and(|at| tokio::time::Instant::now() >= at) {
                        return Ok(InGuard::Waited(None));
                    }
                }
            }
        }
    }

    /// The claim an armed guard was granted, its facts as the guard wrote
    /// them ([`grant_in_guard`]); lent to the guard already.
    fn claim_from_guard(
        &self,
        files: &KeyFiles,
        grant: &GuardGrant,
        file: File,
        granted: GuardGranted,
    ) -> LocalClaim {
        let lock = Lock {
            dev: granted.dev,
            ino: granted.ino,
        };
        LocalClaim {
            file,
            lent: true,
            handed_over: false,
            lock,
            lock_path: files.lock_path(),
            files: files.clone(),
            facts: Facts {
                fence: granted.fence,
                dev: granted.dev,
                ino: granted.ino,
                holder: Some(HolderFacts {
                    value: grant.value.clone(),
                    host: grant.host.clone(),
                    pid: grant.pid,
                    pid_start: grant.pid_start,
                    since_ms: granted.since_ms,
                    child_pgid: Some(granted.pgid),
                }),
            },
            name: grant.key.clone(),
            slot: None,
            shared: false,
        }
    }

    /// A writer's wait, ranked by `--priority` (see
    /// [`crate::backend::priority`]): our record beside the lock says we
    /// wait and with what priority; while a live lockrun writer of a higher
    /// priority waits, we stay out of the turnstile and the lock, watching
    /// the directory, and enter them once none does (or once the lock has
    /// sat free for the grace with that waiter not in it). A higher waiter
    /// that comes while we are in the wait makes us leave it: the waiting
    /// thread is abandoned, and a grant it gets later is let go at once.
    async fn wait_ranked(
        &self,
        files: &KeyFiles,
        wait: Wait,
        value: &str,
    ) -> Result<Option<Locked>, LocalError> {
        let watch = waiters::Watch::new(files)?;
        let record = waiters::Record::publish(files, self.priority.level, value)?;
        let result = self.wait_ranked_with(files, wait, &watch, &record).await;
        // Off the handover's path, on a thread of their own: removing our
        // record, and closing the inotify instance, which waits for the
        // kernel to retire its watch. Until the record goes, a rival that
        // sees it defers to a waiter that holds: the lock is not free.
        drop(watch::Retiring::new((record, watch)));
        result
    }

    async fn wait_ranked_with(
        &self,
        files: &KeyFiles,
        wait: Wait,
        watch: &waiters::Watch,
        record: &waiters::Record,
    ) -> Result<Option<Locked>, LocalError> {
        use crate::backend::priority::Verdict;
        let deadline = wait.deadline();
        let mut deferral = self.priority.deferral();
        let decide = |deferral: &mut crate::backend::priority::Deferral| {
            rank(files, watch, record, deferral)
        };
        loop {
            match decide(&mut deferral)? {
                Verdict::Defer { until } => {
                    let wake = [until, deadline].into_iter().flatten().min();
                    let sleep = async {
                        match wake {
                            Some(at) => tokio::time::sleep_until(at).await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        _ = watch.next() => {}
                        () = sleep => {}
                    }
                    if deadline.is_some_and(|at| tokio::time::Instant::now() >= at) {
                        return Ok(None);
                    }
                }
                Verdict::Go => {
                    let waiting = wait_in_thread(files, false, deadline);
                    tokio::pin!(waiting);
                    loop {
                        tokio::select! {
                            // A grant first: it is the handover's path.
                            biased;
                            got = &mut waiting => return got,
                            // Only a waiter that comes can send us out:
                            // the lock file's own events (its holder
                            // closing it, on the handover's path) cannot.
                            records = watch.next() => {
                                if records && decide(&mut deferral)? != Verdict::Go {
                                    break;
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Each live holder of `target` with its facts when they describe it.
    pub(super) fn holders_with_facts(
        &self,
        target: &Target,
    ) -> Result<Vec<(Holder, Option<HolderFacts>)>, LocalError> {
        let files = match target {
            Target::Lock { key, .. } => self
                .key_files(key, Missing::Absent)?
                .map(|files| (files, None))
                .into_iter()
                .collect(),
            Target::Slot { prefix, .. } => semaphore::slot_files(self, prefix)?,
        };
        let mut out = Vec::new();
        for (files, slot) in files {
            let Some((lock, lockers)) =
                facts::holders_of(&files.dir, &files.lock).map_err(|e| {
                    LocalError::io(format!("cannot inspect `{}`", files.lock_path().display()), e)
                })?
            else {
                continue;
            };
            if lockers.is_empty() {
                continue;
            }
            let facts = Facts::read_at(&files.dir, &files.facts())?;
            for (locker, shared) in lockers {
                let mut holder = facts.to_holder(&lock, locker);
                holder.slot = slot;
                if shared {
                    // Readers keep no record beside the lock (it names the
                    // writer): the kernel's pid is all there is.
                    holder.label = Some(
                        match locker {
                            Some(pid) => format!("pid {pid} (shared)"),
                            None => "a process that has exited, through a descriptor it passed on (shared)".into(),
                        }
                        .into_bytes(),
                    );
                }
                let known = holder.value.as_ref().and(facts.holder.clone());
                out.push((holder, known));
            }
        }
        Ok(out)
    }
}

/// A lock or slot held through an open file description.
#[derive(Debug)]
pub struct LocalClaim {
    file: File,
    lent: bool,
    /// The guard may let go of the lock (see `Claim::hand_over`): we
    /// write nothing beside it any more.
    handed_over: bool,
    lock: Lock,
    lock_path: PathBuf,
    files: KeyFiles,
    facts: Facts,
    name: String,
    slot: Option<u32>,
    /// A reader: the record beside the lock is not ours to write.
    shared: bool,
}

impl LocalClaim {
    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.lock_path
    }

    /// The slot, for a semaphore.
    pub fn slot(&self) -> Option<u32> {
        self.slot
    }
}

impl Claim for LocalClaim {
    type Error = LocalError;

    fn fence(&self) -> u64 {
        self.facts.fence
    }

    fn env(&self) -> Vec<(OsString, OsString)> {
        claim_env(&self.name, Some(self.facts.fence), &self.lock_path)
    }

    /// The holding lockrun's pid, as our facts name it: the lock lives in
    /// our open file description, so no other process holds this claim.
    fn holder_id(&self) -> Option<String> {
        self.facts.holder.as_ref().map(|h| h.pid.to_string())
    }

    async fn replaced_by(&self) -> Option<ReplaceNote> {
        use std::io::Read;
        let mut file = self.files.dir.open_file(&self.files.note(), None).ok()??;
        let mut bytes = Vec::new();
        // Anyone who may write in the lock directory may plant the note:
        // a note is a few hundred bytes, so more is no note.
        (&mut file).take(RECORD_MAX).read_to_end(&mut bytes).ok()?;
        ReplaceNote::decode_for(&bytes, &self.holder_id()?)
    }

    fn take_hold_fd(&mut self) -> Option<OwnedFd> {
        if self.lent {
            return None;
        }
        // A duplicate shares the open file description, and so the lock.
        let lent = self.file.try_clone().ok().map(OwnedFd::from)?;
        self.lent = true;
        Some(lent)
    }

    async fn record_child(&mut self, pgid: u32) -> Result<(), LocalError> {
        if let Some(h) = self.facts.holder.as_mut() {
            h.child_pgid = Some(pgid);
        }
        if self.shared {
            return Ok(());
        }
        self.facts.write(&self.files)
    }

    /// The record that says nobody holds the lock, staged in the scratch
    /// file for the guard to swap in just before it lets go, as
    /// [`LocalClaim::release`] would write it just before we do. Readers
    /// then find the facts cleared by the time the lock is free, as ever,
    /// and never a record naming a holder that is gone over a lock someone
    /// else took (`facts::Facts::to_holder` could not tell them apart where
    /// the kernel names no pid).
    fn hand_over(&mut self, offer: impl FnOnce([PathBuf; 2]) -> bool) {
        if !self.lent {
            return;
        }
        if self.shared {
            // A reader has no record to clear, and writes nothing after.
            return;
        }
        let cleared = Facts {
            holder: None,
            ..self.facts.clone()
        };
        if let Err(e) = cleared.stage(&self.files) {
            tracing::debug!("{e}; the guard keeps the lock until it exits");
            return;
        }
        // The guard swaps by path: the directories on it are checked, so
        // only those we trust could rename them meanwhile.
        let dir = &self.files.dir;
        self.handed_over = offer([dir.join(&self.files.scratch()), dir.join(&self.files.facts())]);
    }

    fn describe(&self) -> String {
        format!("`{}`", self.lock_path.display())
    }

    async fn watch(&mut self) -> Lost {
        // Someone removed or replaced the lock file: a rival may lock the
        // new one at once, and nothing delays it.
        Lost::Watch(watch::lock_file_replaced(&self.files, self.lock).await)
    }

    async fn release(mut self) -> Result<(), LocalError> {
        if self.handed_over {
            // The guard swapped in the cleared facts and let go, or left
            // the release to us with the facts cleared: either way the
            // sidecar may be the next holder's by now.
            drop(self.file);
            return Ok(());
        }
        if self.shared {
            drop(self.file);
            return Ok(());
        }
        // Cleared while we still hold the lock: once we let go, the next
        // holder owns the sidecar.
        self.facts.holder = None;
        let cleared = self.facts.write(&self.files);
        drop(self.file);
        cleared
    }
}

/// The variable that carries the fencing number.
const INDEX_VARIABLE: &str = "LOCKRUN_LOCK_INDEX";

/// `LOCKRUN_*` for the child: the key, the fencing number (when known:
/// an armed guard sets it from its grant), the lock file.
fn claim_env(name: &str, fence: Option<u64>, lock_path: &Path) -> Vec<(OsString, OsString)> {
    let mut env = vec![("LOCKRUN_KEY".into(), name.into())];
    if let Some(fence) = fence {
        env.push((INDEX_VARIABLE.into(), fence.to_string().into()));
    }
    env.push(("LOCKRUN_LOCK_FILE".into(), lock_path.into()));
    env
}

/// How [`Local::wait_in_guard`] ended.
enum InGuard {
    /// The guard was granted the lock and runs the child.
    Started(Box<LocalClaim>),
    /// We were sent out of the wait for good: `None` at the deadline.
    Waited(Option<Locked>),
    /// The guard cannot wait, or refused its grant: we wait ourselves.
    Ours,
}

/// What an armed guard needs to take a granted lock as lockrun would:
/// where the lock is, and our holder facts.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct GuardGrant {
    dir: PathBuf,
    key: String,
    value: String,
    host: String,
    pid: u32,
    pid_start: u64,
}

/// Where we stand among lockrun's waiters for `files`' lock now; the
/// watch widened to every event before the look, narrowed to arrivals
/// after a `Go` (see [`waiters::Watch::arrivals_only`]).
fn rank(
    files: &KeyFiles,
    watch: &waiters::Watch,
    record: &waiters::Record,
    deferral: &mut crate::backend::priority::Deferral,
) -> Result<crate::backend::priority::Verdict, LocalError> {
    watch.arrivals_only(false)?;
    let (seen, free) = waiters::look(files, Some(record.name()))?;
    let verdict = deferral.decide(tokio::time::Instant::now(), seen.iter().map(|s| s.level), free);
    tracing::debug!(?verdict, waiting = ?seen, free, "ranked among the waiters");
    if verdict == crate::backend::priority::Verdict::Go {
        watch.arrivals_only(true)?;
    }
    Ok(verdict)
}

/// What it tells lockrun it wrote.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct GuardGranted {
    fence: u64,
    since_ms: u64,
    dev: u64,
    ino: u64,
    pgid: u32,
}

/// The local engine's step in an armed guard (see
/// [`crate::backend::GuardWait`]): the key's directory opened and checked
/// before the wait; once the lock is granted, what `Local::claim` does
/// for lockrun's own grant. The lock file must still be the one the path
/// names (else a rival may lock the new one: refused, and lockrun waits
/// again); the next fencing number and our facts, with the guard's group
/// as the child's, are written before the child exists.
pub fn grant_in_guard(grant: &str) -> Option<crate::child::OnGrant> {
    let grant: GuardGrant = serde_json::from_str(grant).ok()?;
    let local = Local::open(grant.dir.clone(), true).ok()?;
    let files = local.key_files(&grant.key, Missing::Absent).ok()??;
    Some(Box::new(move |lock| on_grant(grant, &files, lock)))
}

/// [`grant_in_guard`]'s work once the lock is granted.
fn on_grant(
    grant: GuardGrant,
    files: &KeyFiles,
    lock: std::os::fd::BorrowedFd<'_>,
) -> Option<(u64, String)> {
    let st = nix::sys::stat::fstat(lock).ok()?;
    let mine = Lock {
        dev: st.st_dev,
        ino: st.st_ino,
    };
    if Lock::at(&files.dir, &files.lock).ok()?? != mine {
        return None;
    }
    let previous = Facts::read_at(&files.dir, &files.facts()).ok()?;
    let pgid = std::process::id();
    let since_ms = facts::now_ms();
    let facts = Facts {
        fence: previous.next_fence(),
        dev: mine.dev,
        ino: mine.ino,
        holder: Some(HolderFacts {
            value: grant.value,
            host: grant.host,
            pid: grant.pid,
            pid_start: grant.pid_start,
            since_ms,
            child_pgid: Some(pgid),
        }),
    };
    facts.write(files).ok()?;
    let granted = GuardGranted {
        fence: facts.fence,
        since_ms,
        dev: mine.dev,
        ino: mine.ino,
        pgid,
    };
    Some((facts.fence, serde_json::to_string(&granted).ok()?))
}
