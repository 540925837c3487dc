//! The lock directory as open descriptors: each directory between it and
//! a key's files checked as the lock directory is, and each file opened
//! relative to a checked directory, following no link and never blocking.
//!
//! Who may write where, argued once. A directory is *checked* when it is
//! not writable by others, and
//! - the lock directory (and any directory lockrun creates or finds below
//!   it) belongs to us or to root; or
//! - below a directory its group may write in (a *shared* one, `2770
//!   root:GROUP`, say), it may belong to anyone, provided its group is the
//!   shared directory's: only the owner of the top, or a member of the group
//!   that owner chose, could have put it there.
//!
//! So whoever can change a name in a checked tree is us, root, or a member
//! of a group that us or root made a writer: nobody else can plant, replace
//! or rename anything in it. A group member still can (that is what sharing
//! means), which is why nothing here follows a link or opens anything but a
//! regular file, and why a file we write into is one we made alone: a
//! member may make a lock fail (remove its file, plant a FIFO), never make
//! lockrun write, read or block outside the tree. Files in a directory
//! that is not shared must belong to us or root too: another owner there
//! means someone changed ownership behind the directory's back.
//!
//! Every open is `openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`
//! of one name relative to a checked directory's descriptor, or, on a
//! kernel without it (before 5.6), `openat(2)` with `O_NOFOLLOW`; renames,
//! links and unlinks are relative to the descriptor too, so a directory
//! renamed or replaced after its check cannot redirect us.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};

use super::dir::{FACTS_SUFFIX, NOTE_SUFFIX, SCRATCH_SUFFIX, TURN_SUFFIX};
use super::LocalError;

/// A checked directory, open.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
    uid: u32,
    gid: u32,
    mode: u32,
    /// Whether the rules hold here: off for readers (`leader`), who may look
    /// at anyone's directory but still follow no link and open no FIFO.
    strict: bool,
}

/// What to do about a directory that is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    Create,
    Absent,
}

impl Dir {
    /// The lock directory at `path`, which must itself be no link, checked
    /// (see the module's rules) for acquiring in it.
    pub fn top(path: &Path) -> Result<Dir, LocalError> {
        let fd = open_dir(None, path).map_err(|e| top_error(path, e))?;
        let dir = Dir::of(fd, path.to_owned(), true)?;
        let us = euid();
        if dir.uid != us && dir.uid != 0 {
            return Err(LocalError::dir(format!(
                "lock directory `{}` belongs to uid {}, not to us (uid {us}) or root; choose another with --lock-dir",
                path.display(),
                dir.uid
            )));
        }
        dir.not_world_writable()?;
        Ok(dir)
    }

    /// Checks every directory above the lock directory `path`, up to `/`,
    /// before anything is created or opened in it: whoever may rename or
    /// replace one of them can move the lock directory away under a holder
    /// and let a rival make a new one at its path (issue #45). Each must
    /// belong to us or root, and one its group or others may write in must
    /// have the sticky bit (`/tmp`, 1777 root), where only an entry's owner
    /// (us or root, for the lock directory) or the directory's may rename
    /// it. Checked along the path as given (each parent, links followed, so
    /// a directory holding a link is checked too) and along its resolved
    /// form.
    pub fn check_ancestors(path: &Path) -> Result<(), LocalError> {
        Dir::check_path(path).map(drop)
    }

    /// [`Dir::check_ancestors`], then whether `path` still leads to this
    /// very directory: a link made on the way since the first check (where
    /// nothing was) is refused as it would have been then.
    pub fn check_path_again(&self) -> Result<(), LocalError> {
        let leads = Dir::check_path(&self.path)?.and_then(|end| nix::sys::stat::fstat(&end).ok());
        let here = nix::sys::stat::fstat(&self.fd).ok();
        match (leads, here) {
            (Some(a), Some(b)) if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) => Ok(()),
            _ => Err(LocalError::dir(format!(
                "lock directory `{}` changed while we opened it (a directory or link on its path was replaced); try again",
                self.path.display()
            ))),
        }
    }

    /// The checks of [`Dir::check_ancestors`]; the directory the path
    /// leads to, if it exists.
    fn check_path(path: &Path) -> Result<Option<OwnedFd>, LocalError> {
        let absolute = if path.is_absolute() {
            path.to_owned()
        } else {
            std::env::current_dir()
                .map_err(|e| LocalError::io("cannot read the working directory".into(), e))?
                .join(path)
        };
        let mut above: Vec<PathBuf> = absolute.ancestors().skip(1).map(Path::to_owned).collect();
        if let Some(parent) = absolute.parent() {
            if let Ok(real) = std::fs::canonicalize(parent) {
                above.extend(real.ancestors().map(Path::to_owned));
            }
        }
        let us = euid();
        // Every link on the way (as given, or met in a link's target) is
        // held to the rule a directory is: whoever owns one can re-point it,
        // and the path with it, under a holder; and every directory a name
        // is looked up in, links resolved, as below.
        let mut look = |step: &Step<'_>| match nix::sys::stat::fstat(step.dir) {
            Ok(st) => above_ok(step.dir_path, &st, path, us),
            Err(e) => Err(LocalError::io(
                format!("cannot read `{}`, above lock directory `{}`", step.dir_path.display(), path.display()),
                e.into(),
            )),
        };
        let mut link = |at: &Path, st: &FileStat| {
            if st.st_uid == us || st.st_uid == 0 {
                return Ok(());
            }
            Err(LocalError::dir(format!(
                "`{}`, on the path to lock directory `{}`, is a symbolic link of uid {}, not of us (uid {us}) or root, and its owner could re-point it under a holder; choose a lock directory whose path goes through no link of another user's",
                at.display(),
                path.display(),
                st.st_uid
            )))
        };
        for dir in above {
            let st = match nix::sys::stat::stat(&dir) {
                Ok(st) => st,
                // Made below, or refused there with its own reason.
                Err(Errno::ENOENT) => continue,
                Err(e) => {
                    return Err(LocalError::io(
                        format!("cannot read `{}`, above lock directory `{}`", dir.display(), path.display()),
                        e.into(),
                    ))
                }
            };
            above_ok(&dir, &st, path, us)?;
        }
        walk(path, &mut look, &mut link)
    }

    /// The lock directory for looking only: anyone's, `None` if missing.
    pub fn top_for_reading(path: &Path) -> Result<Option<Dir>, LocalError> {
        match open_dir(None, path) {
            Ok(fd) => Dir::of(fd, path.to_owned(), false).map(Some),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(top_error(path, e)),
        }
    }

    fn of(fd: OwnedFd, path: PathBuf, strict: bool) -> Result<Dir, LocalError> {
        let st = nix::sys::stat::fstat(&fd).map_err(|e| {
            LocalError::io(format!("cannot read `{}`", path.display()), e.into())
        })?;
        Ok(Dir {
            fd,
            path,
            uid: st.st_uid,
            gid: st.st_gid,
            mode: st.st_mode,
            strict,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The path of `name` in here, for messages and for the child.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// A name for this very directory that no rename can redirect, for the
    /// calls that take only a path (inotify).
    pub fn proc_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    /// Whether its group may write in it.
    pub fn shared(&self) -> bool {
        self.mode & 0o020 != 0
    }

    fn not_world_writable(&self) -> Result<(), LocalError> {
        if self.strict && self.mode & 0o002 != 0 {
            return Err(LocalError::dir(format!(
                "directory `{}` is writable by others, who could replace its locks; run `chmod o-w {}`",
                self.path.display(),
                self.path.display()
            )));
        }
        Ok(())
    }

    /// The directories `names` down from here, each checked; `None` when
    /// one is missing and `missing` is [`Missing::Absent`].
    pub fn descend<'a>(
        self: &Arc<Dir>,
        names: impl IntoIterator<Item = &'a str>,
        missing: Missing,
    ) -> Result<Option<Arc<Dir>>, LocalError> {
        let mut here = Arc::clone(self);
        for name in names {
            match here.sub(name, missing)? {
                Some(next) => here = Arc::new(next),
                None => return Ok(None),
            }
        }
        Ok(Some(here))
    }

    /// The subdirectory `name`, checked, created if missing and asked to.
    fn sub(&self, name: &str, missing: Missing) -> Result<Option<Dir>, LocalError> {
        let path = self.path.join(name);
        let mut made = false;
        if missing == Missing::Create {
            // In a shared directory, what we make is shared alike, whatever
            // our umask: the group's other members must be able to lock in it.
            let mode = if self.shared() {
                self.mode & 0o2775
            } else if euid() == 0 {
                0o755
            } else {
                0o700
            };
            match nix::sys::stat::mkdirat(&self.fd, name, Mode::from_bits_truncate(mode)) {
                Ok(()) => made = true,
                Err(Errno::EEXIST) => {}
                Err(e) => {
                    return Err(LocalError::io(
                        format!("cannot create `{}`", path.display()),
                        e.into(),
                    ))
                }
            }
        }
        let fd = match open_dir(Some(self.fd()), Path::new(name)) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) if missing == Missing::Absent => return Ok(None),
            Err(Errno::ENOTDIR | Errno::ELOOP) => {
                let what = self.what_is(name);
                let hint = if what == "a regular file" {
                    " (is a parent of the key already a lock?)"
                } else {
                    "; lockrun follows no link in its lock directory: remove it"
                };
                return Err(LocalError::dir(format!(
                    "`{}` is {what}, not a directory{hint}",
                    path.display()
                )));
            }
            Err(e) => {
                return Err(LocalError::io(
                    format!("cannot open `{}`", path.display()),
                    e.into(),
                ))
            }
        };
        let mut dir = Dir::of(fd, path, self.strict)?;
        if made && self.shared() {
            let mode = Mode::from_bits_truncate(self.mode & 0o2775);
            nix::sys::stat::fchmod(&dir.fd, mode).map_err(|e| {
                LocalError::io(format!("cannot share `{}`", dir.path.display()), e.into())
            })?;
            dir = Dir::of(dir.fd, dir.path, dir.strict)?;
        }
        // Made by us or not, it is what we opened that must pass.
        self.check_sub(&dir)?;
        Ok(Some(dir))
    }

    fn check_sub(&self, sub: &Dir) -> Result<(), LocalError> {
        if !self.strict {
            return Ok(());
        }
        sub.not_world_writable()?;
        let us = euid();
        if sub.uid == us || sub.uid == 0 || (self.shared() && sub.gid == self.gid) {
            return Ok(());
        }
        Err(LocalError::dir(format!(
            "directory `{}` belongs to uid {}, and `{}` is not shared with its group, so someone we do not trust could have made it; remove it",
            sub.path.display(),
            sub.uid,
            self.path.display()
        )))
    }

    /// Refuses what is at `name` unless it is a regular file whose owner
    /// the rules accept here.
    fn check_file(&self, name: &str, st: &FileStat) -> Result<(), LocalError> {
        let path = self.path.join(name);
        let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
        if kind != SFlag::S_IFREG {
            return Err(not_a_file(&path, kind));
        }
        let us = euid();
        if self.strict && st.st_uid != us && st.st_uid != 0 && !self.shared() {
            return Err(LocalError::dir(format!(
                "`{}` belongs to uid {}, who cannot have made it in `{}`, which is not shared; remove it",
                path.display(),
                st.st_uid,
                self.path.display()
            )));
        }
        Ok(())
    }

    /// What is at `name`, without following it: `None` when nothing.
    pub fn stat(&self, name: &str) -> io::Result<Option<FileStat>> {
        match nix::sys::stat::fstatat(&self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn what_is(&self, name: &str) -> &'static str {
        match self.stat(name) {
            Ok(Some(st)) => kind_name(SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT),
            _ => "something else",
        }
    }

    /// Opens `name` read-only, created (empty) if missing when `create`: a
    /// lock file as `flock(1)` opens it, or a record to read. `Ok(None)`
    /// when it is missing and not to be created. Whatever is there must be
    /// a regular file: a FIFO, socket, device or directory is refused at
    /// once, never opened in a way that could block.
    pub fn open_file(
        &self,
        name: &str,
        create: Option<u32>,
    ) -> Result<Option<File>, LocalError> {
        let path = self.path.join(name);
        let fail = |e: Errno| LocalError::io(format!("cannot open `{}`", path.display()), e.into());
        // Looked at first, so that a device is never opened at all.
        if let Some(st) = self.stat(name).map_err(|e| {
            LocalError::io(format!("cannot open `{}`", path.display()), e)
        })? {
            self.check_file(name, &st)?;
        }
        // O_NONBLOCK: were a FIFO put there since we looked, the open
        // returns at once, and the check below refuses it.
        let base = OFlag::O_RDONLY | OFlag::O_NOCTTY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        let mut tries = 0;
        let (fd, made) = loop {
            tries += 1;
            let Some(mode) = create else {
                match open_beneath(self.fd(), name, base, Mode::empty()) {
                    Ok(fd) => break (fd, false),
                    Err(Errno::ENOENT) => return Ok(None),
                    Err(e) => return Err(self.open_error(name, e)),
                }
            };
            // Made by us (so ours to share), or found.
            let excl = base | OFlag::O_CREAT | OFlag::O_EXCL;
            match open_beneath(self.fd(), name, excl, self.file_mode(mode)) {
                Ok(fd) => break (fd, true),
                Err(Errno::EEXIST) => {}
                Err(e) => return Err(self.open_error(name, e)),
            }
            match open_beneath(self.fd(), name, base, Mode::empty()) {
                Ok(fd) => break (fd, false),
                // Removed between the two: make it again.
                Err(Errno::ENOENT) if tries < 3 => {}
                Err(e) => return Err(self.open_error(name, e)),
            }
        };
        // Checked again on the descriptor: the name may have changed since.
        let st = nix::sys::stat::fstat(&fd).map_err(fail)?;
        self.check_file(name, &st)?;
        if made && self.shared() {
            if let Some(mode) = create {
                nix::sys::stat::fchmod(&fd, self.file_mode(mode)).map_err(fail)?;
            }
        }
        clear_nonblock(&fd).map_err(fail)?;
        Ok(Some(File::from(fd)))
    }

    /// A file we create with `mode`: in a shared directory its group may
    /// read it too (a lock needs only that), whatever our umask.
    fn file_mode(&self, mode: u32) -> Mode {
        let mode = if self.shared() { mode | 0o040 } else { mode };
        Mode::from_bits_truncate(mode)
    }

    fn open_error(&self, name: &str, e: Errno) -> LocalError {
        let path = self.path.join(name);
        match e {
            Errno::ELOOP | Errno::EXDEV => LocalError::dir(format!(
                "`{}` is a symbolic link; lockrun follows no link in its lock directory: remove it",
                path.display()
            )),
            Errno::ENXIO | Errno::EISDIR | Errno::ENODEV => {
                let kind = self
                    .stat(name)
                    .ok()
                    .flatten()
                    .map(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT)
                    .unwrap_or(SFlag::S_IFSOCK);
                not_a_file(&path, kind)
            }
            // A directory of root's, say, that is not shared with us.
            Errno::EACCES => LocalError::dir(format!(
                "cannot open `{}`: permission denied to uid {}; use a lock directory of your own, or one shared with your group (see docs/local.md)",
                path.display(),
                euid()
            )),
            e => LocalError::io(format!("cannot open `{}`", path.display()), e.into()),
        }
    }

    /// A file of our own to write at `name`, empty or holding what we last
    /// wrote: reused only if it is ours alone (ours, one link, regular);
    /// anyone else's, in a shared directory, is removed and made afresh, so
    /// nothing we write ever lands in a file someone else can reach.
    pub fn own_file(&self, name: &str, mode: u32) -> Result<File, LocalError> {
        let path = self.path.join(name);
        let fail = |e: io::Error| LocalError::io(format!("cannot write `{}`", path.display()), e);
        for _ in 0..3 {
            match self.stat(name).map_err(fail)? {
                Some(st) => {
                    self.check_file(name, &st)?;
                    if st.st_uid == euid() && st.st_nlink == 1 {
                        let how = OFlag::O_WRONLY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
                        let fd = match open_beneath(self.fd(), name, how, Mode::empty()) {
                            Ok(fd) => fd,
                            Err(Errno::ENOENT) => continue,
                            Err(e) => return Err(self.open_error(name, e)),
                        };
                        let now = nix::sys::stat::fstat(&fd).map_err(|e| fail(e.into()))?;
                        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) || now.st_nlink != 1 {
                            continue;
                        }
                        clear_nonblock(&fd).map_err(|e| fail(e.into()))?;
                        return Ok(File::from(fd));
                    }
                    match self.unlink(name) {
                        Ok(()) | Err(Errno::ENOENT) => {}
                        Err(Errno::EPERM) if self.mode & 0o1000 != 0 => {
                            return Err(LocalError::dir(format!(
                                "`{}` belongs to uid {}, and the sticky bit on `{}` keeps us from replacing it; run `chmod -t {}`",
                                path.display(),
                                st.st_uid,
                                self.path.display(),
                                self.path.display()
                            )))
                        }
                        Err(e) => return Err(fail(e.into())),
                    }
                }
                None => {
                    let how = OFlag::O_WRONLY
                        | OFlag::O_CREAT
                        | OFlag::O_EXCL
                        | OFlag::O_CLOEXEC
                        | OFlag::O_NONBLOCK;
                    match open_beneath(self.fd(), name, how, Mode::from_bits_truncate(mode)) {
                        Ok(fd) => {
                            clear_nonblock(&fd).map_err(|e| fail(e.into()))?;
                            return Ok(File::from(fd));
                        }
                        Err(Errno::EEXIST) => continue,
                        Err(e) => return Err(self.open_error(name, e)),
                    }
                }
            }
        }
        Err(LocalError::io_msg(format!(
            "cannot write `{}`: it kept being replaced while we made it",
            path.display()
        )))
    }

    pub fn unlink(&self, name: &str) -> nix::Result<()> {
        nix::unistd::unlinkat(&self.fd, name, nix::unistd::UnlinkatFlags::NoRemoveDir)
    }

    /// Gives `from` the name `to` too; fails if `to` exists.
    pub fn link(&self, from: &str, to: &str) -> nix::Result<()> {
        nix::unistd::linkat(&self.fd, from, &self.fd, to, AtFlags::empty())
    }

    pub fn rename(&self, from: &str, to: &str) -> nix::Result<()> {
        nix::fcntl::renameat(&self.fd, from, &self.fd, to)
    }

    /// Swaps the names `a` and `b` (see [`crate::host::swap_names_at`]).
    pub fn swap(&self, a: &str, b: &str) -> io::Result<()> {
        crate::host::swap_names_at(self.fd(), Path::new(a), Path::new(b))
    }

    /// The names in here (read through our descriptor's name in /proc,
    /// which leads to this very directory).
    pub fn names(&self) -> Result<Vec<OsString>, LocalError> {
        let fail = |e| LocalError::io(format!("cannot list `{}`", self.path.display()), e);
        std::fs::read_dir(self.proc_path())
            .map_err(fail)?
            .map(|entry| entry.map(|e| e.file_name()).map_err(fail))
            .collect()
    }

    /// The network filesystem this directory is on, if any: its
    /// `statfs(2)` magic.
    pub fn fs_magic(&self) -> Result<i64, LocalError> {
        let stat = nix::sys::statfs::fstatfs(&self.fd).map_err(|e| {
            LocalError::dir(format!(
                "cannot statfs lock directory `{}`: {e}",
                self.path.display()
            ))
        })?;
        #[allow(clippy::unnecessary_cast)]
        Ok(stat.filesystem_type().0 as i64)
    }
}

/// One key's files: its lock file's name in a checked directory, with the
/// holder facts and their scratch beside it.
#[derive(Debug, Clone)]
pub struct KeyFiles {
    pub dir: Arc<Dir>,
    pub lock: String,
}

impl KeyFiles {
    pub fn facts(&self) -> String {
        format!("{}{FACTS_SUFFIX}", self.lock)
    }

    pub fn scratch(&self) -> String {
        format!("{}{SCRATCH_SUFFIX}", self.lock)
    }

    pub fn turnstile(&self) -> String {
        format!("{}{TURN_SUFFIX}", self.lock)
    }

    /// `--replace`'s note for this lock's holder.
    pub fn note(&self) -> String {
        format!("{}{NOTE_SUFFIX}", self.lock)
    }

    pub fn lock_path(&self) -> PathBuf {
        self.dir.join(&self.lock)
    }
}

fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

fn kind_name(kind: SFlag) -> &'static str {
    match kind {
        SFlag::S_IFREG => "a regular file",
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFLNK => "a symbolic link",
        SFlag::S_IFIFO => "a FIFO",
        SFlag::S_IFSOCK => "a socket",
        SFlag::S_IFCHR | SFlag::S_IFBLK => "a device",
        _ => "something else",
    }
}

fn not_a_file(path: &Path, kind: SFlag) -> LocalError {
    LocalError::dir(format!(
        "`{}` is {}, not a file lockrun made; remove it",
        path.display(),
        kind_name(kind)
    ))
}

fn top_error(path: &Path, e: Errno) -> LocalError {
    match e {
        Errno::ENOTDIR | Errno::ELOOP => LocalError::dir(format!(
            "lock directory `{}` is not a directory; remove it or choose another with --lock-dir",
            path.display()
        )),
        e => LocalError::dir(format!(
            "cannot open lock directory `{}`: {}",
            path.display(),
            crate::host::io_reason(&e.into())
        )),
    }
}

/// Opens a directory: `path` itself relative to `at` (or the working
/// directory), which must be no link.
fn open_dir(at: Option<BorrowedFd<'_>>, path: &Path) -> nix::Result<OwnedFd> {
    let how = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    match at {
        Some(at) => open_beneath(at, path, how, Mode::empty()),
        // The lock directory's own path is the user's to choose, links and
        // all above it; only the directory itself must not be one.
        None => nix::fcntl::open(path, how | OFlag::O_NOFOLLOW, Mode::empty()),
    }
}

/// Refuses `dir`, above the lock directory `path`, unless it belongs to
/// us or root and only they may rename what is in it (sticky where others
/// may write).
fn above_ok(dir: &Path, st: &FileStat, path: &Path, us: u32) -> Result<(), LocalError> {
    if st.st_uid != us && st.st_uid != 0 {
        return Err(LocalError::dir(format!(
            "`{}`, above lock directory `{}`, belongs to uid {}, not to us (uid {us}) or root, and its owner could move the lock directory away under a holder; choose a lock directory whose parents are yours or root's",
            dir.display(),
            path.display(),
            st.st_uid
        )));
    }
    if st.st_mode & 0o022 != 0 && st.st_mode & 0o1000 == 0 {
        return Err(LocalError::dir(format!(
            "`{}`, above lock directory `{}`, is writable by its group or others without the sticky bit, so they could move the lock directory away under a holder; run `chmod +t {}` or `chmod go-w {}`",
            dir.display(),
            path.display(),
            dir.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// Whether the kernel lacks `openat2(2)`, once we have seen it say so.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Opens `name`, one component, relative to `dir`, following no link:
/// `openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, or `openat(2)`
/// with `O_NOFOLLOW` where the kernel has no `openat2`. For one name the
/// two refuse the same things (a link, `..`); the first also refuses any
/// magic link.
fn open_beneath<P: AsRef<Path> + ?Sized>(
    dir: BorrowedFd<'_>,
    name: &P,
    flags: OFlag,
    mode: Mode,
) -> nix::Result<OwnedFd> {
    use nix::fcntl::{OpenHow, ResolveFlag};
    let name = name.as_ref();
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        let how = OpenHow::new()
            .flags(flags | OFlag::O_NOFOLLOW)
            .mode(mode)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
        match nix::fcntl::openat2(dir, name, how) {
            Err(Errno::ENOSYS) => NO_OPENAT2.store(true, Ordering::Relaxed),
            result => return result,
        }
    }
    nix::fcntl::openat(dir, name, flags | OFlag::O_NOFOLLOW, mode)
}

fn clear_nonblock(fd: &OwnedFd) -> nix::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg};
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags - OFlag::O_NONBLOCK)).map(drop)
}

/// How many links a path may go through, as the kernel allows.
const MAX_LINKS: u32 = 40;

/// Where resolving a path stands: the directory a name is looked up in,
/// open (`O_PATH`), and its path with every link resolved.
pub struct Step<'a> {
    pub dir: BorrowedFd<'a>,
    pub dir_path: &'a Path,
    pub name: &'a OsStr,
}

/// Resolves `path` (made absolute against the working directory) one name
/// at a time, as the kernel does, links included: `look` is called with
/// each directory just before a name is looked up in it, `link` with each
/// link met (its resolved path and `lstat`). Every lookup is relative to
/// the directory's descriptor, so what `look` saw of a directory is what
/// the walk went through. `None` when a name is missing or not a
/// directory (made below, or refused there with its own reason); else the
/// directory the path leads to.
pub fn walk(
    path: &Path,
    look: &mut dyn FnMut(&Step<'_>) -> Result<(), LocalError>,
    link: &mut dyn FnMut(&Path, &FileStat) -> Result<(), LocalError>,
) -> Result<Option<OwnedFd>, LocalError> {
    let absolute = if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()
            .map_err(|e| LocalError::io("cannot read the working directory".into(), e))?
            .join(path)
    };
    let fail = |what: &Path, e: Errno| {
        LocalError::io(
            format!("cannot read `{}`, on the way to lock directory `{}`", what.display(), path.display()),
            e.into(),
        )
    };
    let how = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW;
    let root = || nix::fcntl::open("/", how, Mode::empty());
    let mut here = root().map_err(|e| fail(Path::new("/"), e))?;
    let mut here_path = PathBuf::from("/");
    let mut todo: VecDeque<OsString> = names_of(&absolute).collect();
    let mut links = 0;
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            here = nix::fcntl::openat(&here, "..", how, Mode::empty())
                .map_err(|e| fail(&here_path, e))?;
            here_path.pop();
            continue;
        }
        look(&Step {
            dir: here.as_fd(),
            dir_path: &here_path,
            name: &name,
        })?;
        let next = here_path.join(&name);
        let st = match nix::sys::stat::fstatat(&here, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(fail(&next, e)),
        };
        match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFLNK => {
                link(&next, &st)?;
                links += 1;
                if links > MAX_LINKS {
                    return Err(fail(&next, Errno::ELOOP));
                }
                let target = PathBuf::from(
                    nix::fcntl::readlinkat(&here, name.as_os_str()).map_err(|e| fail(&next, e))?,
                );
                if target.is_absolute() {
                    here = root().map_err(|e| fail(Path::new("/"), e))?;
                    here_path = PathBuf::from("/");
                }
                for (i, part) in names_of(&target).enumerate() {
                    todo.insert(i, part);
                }
            }
            SFlag::S_IFDIR => {
                here = nix::fcntl::openat(&here, name.as_os_str(), how, Mode::empty())
                    .map_err(|e| fail(&next, e))?;
                here_path = next;
            }
            _ => return Ok(None),
        }
    }
    Ok(Some(here))
}

/// The names along `path`, `..` kept, `.` and `/` dropped.
fn names_of(path: &Path) -> impl Iterator<Item = OsString> + '_ {
    use std::path::Component;
    path.components().filter_map(|c| match c {
        Component::Normal(name) => Some(name.to_owned()),
        Component::ParentDir => Some(OsString::from("..")),
        _ => None,
    })
}
