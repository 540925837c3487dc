//! cgroup v2 containment: COMMAND's tree in a cgroup of its own, where the
//! kernel can write one.
//!
//! The subreaper (see `guard`) keeps the tree below the guard, but ending it
//! takes passes over /proc, racing whatever forks meanwhile. A cgroup holds
//! every process COMMAND starts, whatever it does with its parent, group or
//! session; `cgroup.kill` SIGKILLs all of them at once, in the kernel, so a
//! fork loop cannot outrun it; and `cgroup.events` says `populated 0` once
//! none is left, with a poll(2) wakeup when that changes.
//!
//! lockrun looks for a cgroup it may write ([`detect`]) before it starts the
//! guard, and says which mode the job runs in; the guard creates
//! `lockrun-<its pid>` under it ([`Cgroup::create`]) while parked, starts
//! COMMAND straight into it (`clone3(CLONE_INTO_CGROUP)`, see
//! `sys::spawn`), and removes the cgroup once the tree is empty. Where the
//! kernel cannot start a process into a cgroup, the guard moves into it
//! while parked, so that COMMAND starts there, and back out once COMMAND
//! runs. Any failure on the way leaves the job in subreaper mode, which is
//! never an error: cgroups are a better tool, not a requirement.
//!
//! The guard itself lives outside once COMMAND runs: `cgroup.kill` must not
//! reach it. A cgroup that holds processes may not, in cgroup v2's "no
//! internal processes" rule, have controllers enabled for its children. Our
//! own cgroup holds lockrun already, so it has none, and a child of it with
//! none is always allowed.

use std::fs::File;
use std::io::{self, Read, Seek};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::unistd::AccessFlags;

/// The prefix of the cgroups the guards create: `lockrun-<guard pid>`.
pub const PREFIX: &str = "lockrun-";

/// How the job is contained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Containment {
    /// In a cgroup of its own, created under this one (ours).
    Cgroup(PathBuf),
    /// By the guard as a child subreaper alone; why no cgroup.
    Subreaper(String),
}

impl Containment {
    /// The mode lockrun chooses: a cgroup under ours if we may create one
    /// and move processes into it, else the subreaper, with the reason.
    pub fn detect() -> Containment {
        match detect() {
            Ok(parent) => {
                remove_stale(&parent);
                Containment::Cgroup(parent)
            }
            Err(why) => Containment::Subreaper(why),
        }
    }

    /// The cgroup the guard `pid` makes for COMMAND, in cgroup mode.
    pub(super) fn dir_of(&self, pid: u32) -> Option<PathBuf> {
        match self {
            Containment::Cgroup(parent) => Some(parent.join(format!("{PREFIX}{pid}"))),
            Containment::Subreaper(_) => None,
        }
    }

    /// The `-v` line's words for a job whose guard is `pid`.
    pub fn describe(&self, pid: u32) -> String {
        match self {
            Containment::Cgroup(parent) => {
                format!("cgroup {}", parent.join(format!("{PREFIX}{pid}")).display())
            }
            Containment::Subreaper(why) => format!("subreaper ({why})"),
        }
    }
}

/// Our own cgroup v2 directory, if we may create a cgroup in it and move
/// processes there; else why not, as a lowercase fragment.
fn detect() -> Result<PathBuf, String> {
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let path = own
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or("no cgroup v2 hierarchy")?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let (root, mount) = mounts
        .lines()
        .find_map(cgroup2_mount)
        .ok_or("cgroup v2 is not mounted")?;
    // A mount of part of the hierarchy (a container's) shows our path
    // relative to the hierarchy's root, not the mount's.
    let relative = Path::new(path)
        .strip_prefix(&root)
        .map_err(|_| format!("our cgroup `{path}` is outside the mounted cgroup v2"))?;
    let dir = mount.join(relative);
    if let Some(unit) = undelegated_unit(path, delegated(&dir)) {
        return Err(unit);
    }
    for (what, flags) in [
        (dir.clone(), AccessFlags::W_OK | AccessFlags::X_OK),
        (dir.join("cgroup.procs"), AccessFlags::W_OK),
    ] {
        nix::unistd::access(&what, flags)
            .map_err(|e| format!("`{}` is not writable: {}", what.display(), e.desc()))?;
    }
    Ok(dir)
}

/// Why not, when our cgroup is a systemd service's or scope's that was not
/// delegated to it: systemd owns that subtree (it is its only writer, by
/// its delegation rules), and root may write it all the same. With
/// `Delegate=yes` (a unit, `systemd-run -p Delegate=yes`, a user manager's
/// units) the subtree is the unit's to use. Units and scopes are the only
/// cgroups of systemd's that hold processes.
fn undelegated_unit(path: &str, delegated: bool) -> Option<String> {
    let last = path.rsplit('/').next().unwrap_or_default();
    let unit = last.ends_with(".service") || last.ends_with(".scope");
    (unit && !delegated).then(|| {
        format!("`{path}` is systemd's and not delegated; Delegate=yes in the unit lets lockrun use a cgroup")
    })
}

/// Whether systemd marked `dir` delegated: `trusted.delegate` (the system
/// manager, systemd 251 and later) or `user.delegate` (a user manager).
fn delegated(dir: &Path) -> bool {
    ["trusted.delegate", "user.delegate"]
        .iter()
        .any(|name| super::sys::xattr(dir, name).is_some_and(|v| v.starts_with(b"1")))
}

/// Removes the cgroups of guards that are gone: a guard SIGKILLed from
/// outside cannot remove its own. One still populated was left by a guard
/// killed with its lockrun (`kill -9` of both): nothing supervises its
/// tree, which may run beside a rival, so we kill it first. A guard is
/// gone when its pid is, or names another process: a guard names itself
/// before it makes its cgroup.
pub(super) fn remove_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix(PREFIX))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if guard_alive(pid) {
            continue;
        }
        let dir = entry.path();
        let populated = File::open(dir.join("cgroup.events"))
            .ok()
            .and_then(|events| {
                let mut cgroup = Cgroup {
                    dir: dir.clone(),
                    parent: parent.to_owned(),
                    events,
                    fd: None,
                };
                cgroup.populated()
            })
            .unwrap_or(false);
        if !populated {
            let _ = std::fs::remove_dir(&dir);
            continue;
        }
        match remove_after_guard(&dir, STALE_PATIENCE) {
            Ok(()) => tracing::warn!(
                "killed what ran on in `{}`, the cgroup of a job whose lockrun and guard were killed",
                dir.display()
            ),
            Err(err) => tracing::warn!(
                "cannot kill what runs on in `{}`, the cgroup of a job whose lockrun and guard were killed: {err}",
                dir.display()
            ),
        }
    }
}

/// Whether `pid` is a live guard: named as guards are, and neither a
/// zombie (a guard killed with its lockrun is one until init reaps it, and
/// the lock it held is free already) nor exiting. A guard closes the lock's
/// descriptor on its way out, before it shows as a zombie: the lock may
/// have come to us in between, and its tree must not pass for supervised
/// then (a daemon of a killed job beat 29 ms into the next holder's
/// command, once in a CI run).
fn guard_alive(pid: u32) -> bool {
    let Some(stat) = super::sys::proc_stat(pid) else {
        return false;
    };
    let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
        return false;
    };
    let name = &stat[open + 1..close];
    let guard = name == super::guard::PROCESS_NAME || super::guard::FORMER_NAMES.contains(&name);
    guard && !exiting(&stat[close + 1..])
}

/// The kernel's flag for a task in `do_exit` (`PF_EXITING`), set before it
/// closes its files.
const PF_EXITING: u64 = 0x4;

/// Whether the fields of /proc/PID/stat after the name (state, ppid, pgrp,
/// session, tty, tpgid, flags, ...) say the process is gone or going.
fn exiting(fields: &str) -> bool {
    let mut fields = fields.split_whitespace();
    let state = fields.next();
    let flags = fields.nth(5).and_then(|f| f.parse::<u64>().ok());
    match (state, flags) {
        (Some("Z" | "X" | "x"), _) | (None, _) | (_, None) => true,
        (_, Some(flags)) => flags & PF_EXITING != 0,
    }
}

/// How long we wait for a stale cgroup's processes to die once killed.
const STALE_PATIENCE: Duration = Duration::from_secs(5);

/// After the guard that made `dir` is gone: kills whatever is left in it
/// (the guard was killed before it could), waits up to `within` for it to
/// empty, and removes it. Nothing to do, the usual case, costs one stat.
pub(super) fn remove_after_guard(dir: &Path, within: Duration) -> io::Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    std::fs::write(dir.join("cgroup.kill"), "1")?;
    let events = File::open(dir.join("cgroup.events"))?;
    let mut cgroup = Cgroup {
        dir: dir.to_owned(),
        parent: dir.parent().unwrap_or(dir).to_owned(),
        events,
        fd: None,
    };
    let until = std::time::Instant::now() + within;
    while cgroup.populated() == Some(true) {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "processes in it did not die",
            ));
        }
        cgroup.wait_change(left.min(Duration::from_millis(50)));
    }
    cgroup.remove()
}

/// The root and mount point of a cgroup2 line of /proc/self/mountinfo.
fn cgroup2_mount(line: &str) -> Option<(PathBuf, PathBuf)> {
    let (before, after) = line.split_once(" - ")?;
    if after.split(' ').next()? != "cgroup2" {
        return None;
    }
    let mut fields = before.split(' ');
    let root = fields.nth(3)?;
    let mount = fields.next()?;
    Some((unescape(root).into(), unescape(mount).into()))
}

/// A mountinfo field with its octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|digits| {
            let text = std::str::from_utf8(digits).ok()?;
            u8::from_str_radix(text, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The job's own cgroup, created by the guard and removed by it.
pub(super) struct Cgroup {
    dir: PathBuf,
    /// Where the guard goes back to once COMMAND runs in `dir`.
    parent: PathBuf,
    /// `cgroup.events`, open for its poll(2) wakeups.
    events: File,
    /// The cgroup's directory, open for `clone3(CLONE_INTO_CGROUP)`; `None`
    /// after a guard's death, where nothing is to start in it.
    fd: Option<OwnedFd>,
}

impl Cgroup {
    /// Creates `lockrun-<our pid>` under `parent`. A leftover of that name
    /// (a guard with our pid that died before removing its own) is removed
    /// first if it is empty.
    pub fn create(parent: &Path) -> io::Result<Cgroup> {
        let dir = parent.join(format!("{PREFIX}{}", std::process::id()));
        if let Err(err) = std::fs::create_dir(&dir) {
            if err.kind() != io::ErrorKind::AlreadyExists {
                return Err(err);
            }
            remove_tree(&dir)?;
            std::fs::create_dir(&dir)?;
        }
        let made = (|| {
            // Without cgroup.kill (Linux before 5.14) we could not stop the
            // tree atomically, which is what this mode is for.
            if !dir.join("cgroup.kill").exists() {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "no cgroup.kill (Linux 5.14 or later has it)",
                ));
            }
            Ok((File::open(dir.join("cgroup.events"))?, open_dir(&dir)?))
        })();
        match made {
            Ok((events, fd)) => Ok(Cgroup {
                dir,
                parent: parent.to_owned(),
                events,
                fd: Some(fd),
            }),
            Err(err) => {
                let _ = std::fs::remove_dir(&dir);
                Err(err)
            }
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cgroup's directory, to start COMMAND straight into it.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.fd.as_ref().map(|fd| fd.as_fd())
    }

    /// Moves us (the guard) into the cgroup, so that COMMAND starts in it,
    /// where the kernel cannot start COMMAND there directly (see
    /// `spawn::Prepared::spawn_into`).
    ///
    /// Moving a process between cgroups waits for an RCU grace period in
    /// the kernel, 5–12 ms here; the guard pays it while parked, before
    /// lockrun has the lock, rather than on the handover's path, and again
    /// in [`Cgroup::leave`] once COMMAND runs.
    pub fn enter(&self) -> io::Result<()> {
        std::fs::write(self.dir.join("cgroup.procs"), "0")
    }

    /// Moves us back to the cgroup we came from, leaving COMMAND's tree
    /// alone in its own, where `cgroup.kill` cannot reach us.
    pub fn leave(&self) -> io::Result<()> {
        std::fs::write(self.parent.join("cgroup.procs"), "0")
    }

    /// SIGKILLs every process in the cgroup, at once.
    pub fn kill(&self) -> io::Result<()> {
        std::fs::write(self.dir.join("cgroup.kill"), "1")
    }

    /// Whether any process is left in the cgroup (or below it); `None`
    /// when we cannot tell.
    pub fn populated(&mut self) -> Option<bool> {
        let mut text = String::new();
        self.events.rewind().ok()?;
        self.events.read_to_string(&mut text).ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix("populated "))
            .map(|value| value != "0")
    }

    /// `cgroup.events`, whose POLLPRI says the cgroup emptied (or filled).
    pub fn events(&self) -> std::os::fd::BorrowedFd<'_> {
        self.events.as_fd()
    }

    /// Waits up to `within` for `cgroup.events` to change.
    pub fn wait_change(&self, within: Duration) {
        let millis = u16::try_from(within.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(self.events.as_fd(), PollFlags::POLLPRI)];
        let _ = poll(&mut fds, PollTimeout::from(millis));
    }

    /// Removes the cgroup, once empty. A COMMAND with the right may have
    /// made cgroups of its own inside ours; they go too.
    pub fn remove(self) -> io::Result<()> {
        remove_tree(&self.dir)
    }
}

/// `dir` open as a path (O_PATH), never as descriptor 0, which clone3 reads
/// as "no cgroup".
fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let fd: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(dir)?
        .into();
    if fd.as_raw_fd() != 0 {
        return Ok(fd);
    }
    // A copy is never below descriptor 3.
    fd.try_clone()
}

/// Removes the cgroup `dir` and every cgroup below it, deepest first.
/// The usual cgroup has none below it: one rmdir, with no listing of a
/// directory (opening one in cgroupfs is dear) on the handover's path.
fn remove_tree(dir: &Path) -> io::Result<()> {
    match std::fs::remove_dir(dir) {
        Ok(()) => return Ok(()),
        // Cgroups below it (EBUSY), or a process in it, which the rmdir
        // below reports once the walk is done.
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Err(err),
        Err(_) => {}
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            remove_tree(&entry.path())?;
        }
    }
    std::fs::remove_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_in_do_exit_or_a_zombie_is_not_alive() {
        // The fields after `(name)`: state, ppid, pgrp, session, tty,
        // tpgid, flags, ...
        assert!(!exiting(" S 1 2 2 0 -1 4194560 0"));
        assert!(exiting(" R 1 2 2 0 -1 4194564 0"), "PF_EXITING set");
        assert!(exiting(" Z 1 2 2 0 -1 4194304 0"));
        assert!(exiting(" X 1 2 2 0 -1 4194304 0"));
        assert!(exiting(""));
        assert!(exiting(" S 1 2"), "no flags to tell");
        let ours = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(!exiting(&ours[ours.rfind(')').unwrap() + 1..]));
    }

    #[test]
    fn finds_the_cgroup2_mount_and_its_root() {
        let hybrid =
            "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:12 - cgroup2 cgroup2 rw";
        assert_eq!(
            cgroup2_mount(hybrid),
            Some(("/".into(), "/sys/fs/cgroup/unified".into()))
        );
        let container = "30 25 0:26 /kubepods/pod\\0401 /sys/fs/cgroup ro - cgroup2 cgroup2 rw";
        assert_eq!(
            cgroup2_mount(container),
            Some(("/kubepods/pod 1".into(), "/sys/fs/cgroup".into()))
        );
        let v1 = "35 31 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory";
        assert_eq!(cgroup2_mount(v1), None);
    }

    #[test]
    fn a_systemd_unit_is_used_only_when_delegated() {
        let service = "/system.slice/db.service";
        let why = undelegated_unit(service, false).expect("refused");
        assert!(why.contains("Delegate=yes"), "{why}");
        assert_eq!(undelegated_unit(service, true), None);
        assert!(undelegated_unit("/user.slice/run-r1.scope", false).is_some());
        // Below a delegated unit, or outside systemd: the cgroup is ours.
        assert_eq!(
            undelegated_unit("/system.slice/db.service/payload", false),
            None
        );
        assert_eq!(undelegated_unit("/", false), None);
    }

    #[test]
    fn names_the_mode_with_the_guards_cgroup() {
        let cgroup = Containment::Cgroup("/sys/fs/cgroup/unified".into());
        assert_eq!(
            cgroup.describe(42),
            "cgroup /sys/fs/cgroup/unified/lockrun-42"
        );
        let subreaper = Containment::Subreaper("no cgroup v2 hierarchy".into());
        assert_eq!(subreaper.describe(42), "subreaper (no cgroup v2 hierarchy)");
    }
}
