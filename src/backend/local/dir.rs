//! The lock directory and where each key's files live in it.
//!
//! Permissions, argued once: a user's directory is 0700, so nobody else can
//! open, lock, replace or delete anything in it. root's shared directory
//! (`/run/lockrun`) is 0755 so any user can run `leader` on root's locks,
//! and the lock files lockrun creates there are 0600: flock needs an open
//! descriptor, so a user who cannot open a lock file cannot lock it, and
//! with the directory root's alone nobody else can unlink or rename what is
//! in it. Holder facts are 0644: readable by `leader`, written by the holder
//! only. A directory its group may write in is shared with that group
//! instead, under the rules in [`super::tree`].

use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use super::tree::Dir;
use super::LocalError;

/// The suffix of a lock file's holder facts, beside it.
pub const FACTS_SUFFIX: &str = ".lockrun";
/// The suffix of the holder's scratch file for the next facts.
pub const SCRATCH_SUFFIX: &str = ".lockrun-new";
/// The suffix of the turnstile beside a lock that lockrun's readers and
/// waiting writers pass one at a time, so that once a writer waits, readers
/// that come after it wait behind it (`Local::acquire_lock`).
pub const TURN_SUFFIX: &str = ".lockrun-rw";
/// The suffix of the note `--replace` leaves beside the lock for the holder
/// it replaces (`crate::backend::ReplaceNote`): who took over.
pub const NOTE_SUFFIX: &str = ".lockrun-by";

/// What follows the lock's name in a waiting writer's record beside it
/// (`KEY.lockrun-wait-<priority>-<pid>`, see `waiters`).
pub const WAIT_INFIX: &str = ".lockrun-wait-";

/// The default lock directory: `/run/lockrun` for root; for anyone else
/// `$XDG_RUNTIME_DIR/lockrun`, else `/tmp/lockrun-UID`.
pub fn default_dir(uid: u32, xdg_runtime_dir: Option<&Path>) -> PathBuf {
    if uid == 0 {
        return PathBuf::from("/run/lockrun");
    }
    match xdg_runtime_dir {
        Some(dir) if dir.is_absolute() => dir.join("lockrun"),
        _ => PathBuf::from(format!("/tmp/lockrun-{uid}")),
    }
}

/// The default lock directory for this process.
pub fn default_dir_here() -> PathBuf {
    let xdg = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
    default_dir(nix::unistd::geteuid().as_raw(), xdg.as_deref())
}

/// Creates `dir` if needed (0700, or 0755 for root) and opens it,
/// checked (ours or root's, nobody else's to write: see [`tree`]'s rules);
/// refuses a network filesystem unless `allow_network` (see
/// [`network_fs`]).
///
/// [`tree`]: super::tree
pub fn prepare(dir: &Path, allow_network: bool) -> Result<Dir, LocalError> {
    // Before anything is made: the directories above must be trusted too.
    Dir::check_ancestors(dir)?;
    let uid = nix::unistd::geteuid().as_raw();
    let mode = if uid == 0 { 0o755 } else { 0o700 };
    match fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(LocalError::dir(format!(
                "cannot create lock directory `{}`: {e}",
                dir.display()
            )))
        }
    }
    // Opened without following a link (in /tmp anyone could have planted
    // one), and checked on the descriptor that everything after goes by.
    let top = Dir::top(dir)?;
    top.check_path_again()?;
    check_filesystem(&top, allow_network)?;
    Ok(top)
}

const NFS_SUPER_MAGIC: i64 = 0x6969;
const SMB_SUPER_MAGIC: i64 = 0x517b;
const CIFS_MAGIC_NUMBER: i64 = 0xff53_4d42;
const SMB2_MAGIC_NUMBER: i64 = 0xfe53_4d42;

/// Why a filesystem cannot be trusted with flock, by its `statfs` magic.
pub fn network_fs(magic: i64) -> Option<&'static str> {
    match magic {
        NFS_SUPER_MAGIC => Some(
            "NFS emulates flock with fcntl locks, which a client can lose silently (NFSv4 lease expiry)",
        ),
        SMB_SUPER_MAGIC | CIFS_MAGIC_NUMBER | SMB2_MAGIC_NUMBER => Some(
            "CIFS/SMB turns flock into server-side locks that other hosts' clients and reconnects do not honour like local ones",
        ),
        _ => None,
    }
}

fn check_filesystem(dir: &Dir, allow_network: bool) -> Result<(), LocalError> {
    match network_fs(dir.fs_magic()?) {
        Some(why) if !allow_network => Err(LocalError::dir(format!(
            "lock directory `{}` is on a network filesystem: {why}; use a local directory, or allow it explicitly",
            dir.path().display()
        ))),
        _ => Ok(()),
    }
}

/// The names a semaphore keeps for its own files under its prefix.
const SEMAPHORE_FILES: [&str; 2] = [".limit", ".queue"];

/// The longest segment: a file name holds 255 bytes, and the holder facts'
/// scratch file adds its suffix to the last one.
const SEGMENT_MAX: usize = 255 - SCRATCH_SUFFIX.len();

/// Checks a key or prefix: `/`-separated segments, none empty, `.` or `..`,
/// none naming our own side files or a semaphore's, none too long for a
/// file name, no NUL.
pub fn check_key(key: &str) -> Result<(), LocalError> {
    crate::key::check(key).map_err(LocalError::usage)?;
    if key.contains('\0') {
        return Err(LocalError::usage(format!(
            "key `{}` contains a NUL byte; remove it",
            key.escape_debug()
        )));
    }
    for segment in key.split('/') {
        let why = match segment {
            "" => "has an empty segment (a leading, trailing or doubled `/`)",
            "." | ".." => {
                "has a `.` or `..` segment, which would leave its place in the lock directory"
            }
            s if s.ends_with(FACTS_SUFFIX)
                || s.ends_with(SCRATCH_SUFFIX)
                || s.ends_with(TURN_SUFFIX)
                || s.ends_with(NOTE_SUFFIX) =>
            {
                "has a segment ending in `.lockrun`, `.lockrun-new`, `.lockrun-rw` or `.lockrun-by`, names kept for holder facts, the readers' turnstile and --replace's note"
            }
            s if s.contains(WAIT_INFIX) => {
                "has a segment containing `.lockrun-wait-`, names kept for the records of waiting writers"
            }
            s if SEMAPHORE_FILES.contains(&s) => {
                "has a `.limit` or `.queue` segment, names a semaphore keeps for its own files"
            }
            s if s.len() > SEGMENT_MAX => {
                // The key itself may run to kilobytes: name the segment's start.
                let start: String = s.chars().take(32).collect();
                return Err(LocalError::usage(format!(
                    "a key segment (`{start}...`) is {} bytes, longer than a lock file's name may be here ({SEGMENT_MAX}); choose a shorter key",
                    s.len()
                )));
            }
            _ => continue,
        };
        return Err(LocalError::usage(format!(
            "key `{key}` {why}; choose another key"
        )));
    }
    Ok(())
}

/// The files of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPaths {
    pub lock: PathBuf,
    pub facts: PathBuf,
    pub scratch: PathBuf,
}

impl KeyPaths {
    /// `DIR/KEY`, whose `/` segments are subdirectories; `key` is checked.
    pub fn new(dir: &Path, key: &str) -> KeyPaths {
        let lock = dir.join(key);
        let with = |suffix: &str| {
            let mut name = lock.clone().into_os_string();
            name.push(suffix);
            PathBuf::from(name)
        };
        KeyPaths {
            facts: with(FACTS_SUFFIX),
            scratch: with(SCRATCH_SUFFIX),
            lock,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_dir_depends_on_who_we_are() {
        assert_eq!(
            default_dir(0, Some(Path::new("/run/user/0"))),
            Path::new("/run/lockrun")
        );
        assert_eq!(
            default_dir(1000, Some(Path::new("/run/user/1000"))),
            Path::new("/run/user/1000/lockrun")
        );
        assert_eq!(default_dir(1000, None), Path::new("/tmp/lockrun-1000"));
        assert_eq!(
            default_dir(1000, Some(Path::new("rel"))),
            Path::new("/tmp/lockrun-1000")
        );
    }

    #[test]
    fn bad_keys_are_refused_with_the_reason() {
        for (key, why) in [
            ("", "empty"),
            ("/a", "starts with `/`"),
            ("a//b", "`//`"),
            ("a/", "ends with `/`"),
            ("a/../b", "`..`"),
            (".", "`.`"),
            ("a\0b", "U+0000"),
            ("a\nb", "U+000A"),
            ("jobs/x.lockrun", "holder facts"),
            ("jobs/.limit", "semaphore keeps"),
            ("jobs/.queue/x", "semaphore keeps"),
            ("x.lockrun-new", "holder facts"),
        ] {
            let e = check_key(key).unwrap_err().to_string();
            assert!(e.contains(why), "{key:?}: {e}");
            assert!(!e.contains('\n'));
        }
        let long = format!("jobs/{}", "x".repeat(300));
        let e = check_key(&long).unwrap_err().to_string();
        assert!(e.contains("300 bytes") && e.len() < 200, "{e}");
        check_key(&format!("jobs/{}", "x".repeat(SEGMENT_MAX))).unwrap();
        for key in ["a", "a/b/c", "x.lock", ".hidden", "a b", "..."] {
            check_key(key).unwrap();
        }
    }

    #[test]
    fn key_segments_are_subdirectories() {
        let p = KeyPaths::new(Path::new("/d"), "jobs/nightly");
        assert_eq!(p.lock, Path::new("/d/jobs/nightly"));
        assert_eq!(p.facts, Path::new("/d/jobs/nightly.lockrun"));
        assert_eq!(p.scratch, Path::new("/d/jobs/nightly.lockrun-new"));
    }

    #[test]
    fn network_filesystems_are_named() {
        assert!(network_fs(0x6969).unwrap().contains("NFS"));
        for magic in [0x517b, 0xff53_4d42, 0xfe53_4d42] {
            assert!(network_fs(magic).unwrap().contains("SMB"));
        }
        // ext4, tmpfs, btrfs, xfs.
        for magic in [0xef53, 0x0102_1994, 0x9123_683e, 0x5846_5342] {
            assert_eq!(network_fs(magic), None);
        }
    }

    #[test]
    fn a_directory_writable_by_others_or_not_ours_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("locks");
        prepare(&dir, false).unwrap();
        let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        let expect = if nix::unistd::geteuid().is_root() {
            0o755
        } else {
            0o700
        };
        assert_eq!(mode, expect);
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        let e = prepare(&dir, false).unwrap_err().to_string();
        assert!(e.contains("writable by others"), "{e}");
        // Writable by its group is the owner's choice to share it.
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o2770)).unwrap();
        prepare(&dir, false).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let e = prepare(&link, false).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
    }
}
