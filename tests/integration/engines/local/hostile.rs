//! The local backend's lock directory against another user on the host
//! (issue #45): links, FIFOs, sockets, devices and files of someone else's
//! planted at every path lockrun opens, by `nobody` (through `setpriv`, as
//! PostgreSQL runs in pg_support), while root runs lockrun. Nothing outside
//! the lock directory is written, created or followed, nothing blocks, and
//! each refusal is one line and 125. Needs root, as CI runs.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime};

use crate::procs::wait_until;
use crate::support::{bare, run, scratch, FlockHolder, Running};

/// The user and group the attacker runs as; the group is the one a shared
/// lock directory is shared with, so the attacker is one of its members.
const USER: &str = "nobody";
const GROUP: &str = "nogroup";

/// How long a refusal may take: it must come at once, never after a wait.
const PROMPT: Duration = Duration::from_secs(5);

fn require_root() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "hostile_local plants files as another user and runs lockrun as root: run the suite as root (CI does)"
    );
}

fn ids(name: &str) -> (u32, u32) {
    let user = nix::unistd::User::from_name(name).unwrap().unwrap();
    let group = nix::unistd::Group::from_name(GROUP).unwrap().unwrap();
    (user.uid.as_raw(), group.gid.as_raw())
}

/// Runs `script` as the attacker, a member of [`GROUP`] and nothing else.
fn as_attacker(script: &str) {
    let output = run(Command::new("setpriv")
        .args([
            &format!("--reuid={USER}"),
            &format!("--regid={GROUP}"),
            "--clear-groups",
            "--",
            "sh",
            "-ec",
            script,
        ])
        .env("LC_ALL", "C"));
    assert!(
        output.status.success(),
        "the attacker's `{script}` failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `lockrun` run by `user` (root unless given) as a member of [`GROUP`].
fn lockrun_as(user: Option<&str>, dir: &Path, args: &[&str]) -> Command {
    let mut words = vec![
        "--backend".to_owned(),
        "local".to_owned(),
        "--lock-dir".to_owned(),
    ];
    words.push(dir.display().to_string());
    words.extend(args.iter().map(|a| a.to_string()));
    match user {
        None => bare(words),
        Some(user) => {
            // A copy the user can surely reach, wherever the build lives.
            let copy = dir.parent().unwrap().join("lockrun");
            if !copy.exists() {
                std::fs::copy(crate::support::bin(), &copy).unwrap();
            }
            let mut cmd = Command::new("setpriv");
            cmd.args([
                format!("--reuid={user}"),
                format!("--regid={GROUP}"),
                "--clear-groups".into(),
                "--".into(),
            ])
            .arg(&copy)
            .args(words)
            .env_remove("LOCKRUN_LOCK_DIR")
            .stdin(std::process::Stdio::null());
            cmd
        }
    }
}

/// A root-owned file outside every lock directory that no run may touch.
struct Victim {
    path: PathBuf,
    mtime: SystemTime,
}

const PRECIOUS: &str = "precious: root's own file\n";

impl Victim {
    fn new(dir: &Path) -> Victim {
        let path = dir.join("victim");
        std::fs::write(&path, PRECIOUS).unwrap();
        // An mtime in the past, so a write within the same tick still shows.
        let then = SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(then)
            .unwrap();
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        Victim { path, mtime }
    }

    fn untouched(&self, case: &str) {
        let meta = std::fs::metadata(&self.path).unwrap();
        assert_eq!(
            std::fs::read_to_string(&self.path).unwrap(),
            PRECIOUS,
            "{case}: the victim was written"
        );
        assert_eq!(
            meta.modified().unwrap(),
            self.mtime,
            "{case}: the victim was touched"
        );
        assert_eq!(meta.uid(), 0, "{case}");
    }
}

/// A scratch directory the attacker can reach (but not write in).
fn arena() -> tempfile::TempDir {
    let tmp = scratch();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    tmp
}

/// A lock directory root shares with [`GROUP`]: `2770 root:GROUP`, as
/// docs/local.md recommends.
fn shared_dir(tmp: &Path, name: &str) -> PathBuf {
    let dir = tmp.join(name);
    std::fs::create_dir(&dir).unwrap();
    let (_, gid) = ids(USER);
    std::os::unix::fs::chown(&dir, Some(0), Some(gid)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o2770)).unwrap();
    dir
}

/// A lock directory root alone may write in.
fn root_dir(tmp: &Path, name: &str) -> PathBuf {
    let dir = tmp.join(name);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Runs root's lockrun and checks it refused at once: 125, one line
/// containing `why`.
fn refused(dir: &Path, args: &[&str], why: &str, case: &str) -> Output {
    let mut cmd = lockrun_as(None, dir, args);
    let started = Instant::now();
    let output = Running::spawn(&mut cmd).finish();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{case}: {cmd:?}\n{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{case}: one line\n{stderr}");
    assert!(stderr.contains(why), "{case}: `{why}` not said\n{stderr}");
    assert!(took < PROMPT, "{case}: took {took:?}");
    output
}

fn elect_no_wait(key: &str) -> Vec<&str> {
    vec!["elect", "--no-wait", key, "--", "true"]
}

#[test]
fn a_directory_others_can_write_on_the_way_to_a_key_is_refused_before_anything_is_opened() {
    require_root();
    let tmp = arena();
    let victim = Victim::new(tmp.path());
    let v = victim.path.display().to_string();
    let (uid, gid) = ids(USER);

    // The issue's case: a subdirectory everyone may write in (sticky, as
    // /tmp), where the attacker points every name lockrun would open at
    // root's file.
    let dir = root_dir(tmp.path(), "sticky");
    std::fs::create_dir(dir.join("jobs")).unwrap();
    std::fs::set_permissions(dir.join("jobs"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let jobs = dir.join("jobs").display().to_string();
    as_attacker(&format!(
        "ln -s '{v}' '{jobs}/k.lockrun-new'; ln -s '{v}' '{jobs}/k.lockrun'; ln -s '{v}' '{jobs}/k'"
    ));
    refused(
        &dir,
        &elect_no_wait("jobs/k"),
        "is writable by others",
        "1777 jobs/",
    );
    refused(
        &dir,
        &["semaphore", "--limit", "2", "-n", "jobs", "--", "true"],
        "is writable by others",
        "1777 semaphore",
    );
    victim.untouched("1777 jobs/");

    // A subdirectory the attacker owns, not writable by others.
    let dir = root_dir(tmp.path(), "owned");
    std::fs::create_dir(dir.join("jobs")).unwrap();
    std::os::unix::fs::chown(dir.join("jobs"), Some(uid), Some(gid)).unwrap();
    let jobs = dir.join("jobs").display().to_string();
    as_attacker(&format!("ln -s '{v}' '{jobs}/k.lockrun-new'"));
    refused(
        &dir,
        &elect_no_wait("jobs/k"),
        &format!("belongs to uid {uid}"),
        "owned jobs/",
    );
    victim.untouched("owned jobs/");

    // Files of the attacker's in a directory only root may write in:
    // someone changed their owner behind the directory's back.
    for name in ["k", "k.lockrun", "k.lockrun-new"] {
        let dir = root_dir(tmp.path(), &format!("foreign-{name}"));
        std::fs::write(dir.join(name), "").unwrap();
        std::os::unix::fs::chown(dir.join(name), Some(uid), Some(gid)).unwrap();
        let case = format!("`{name}` of uid {uid}");
        refused(
            &dir,
            &elect_no_wait("k"),
            &format!("belongs to uid {uid}"),
            &case,
        );
        assert_eq!(
            std::fs::read(dir.join(name)).unwrap(),
            b"",
            "{case}: written into"
        );
    }
}

#[test]
fn a_member_of_a_shared_directory_plants_links_fifos_and_files_and_root_follows_none() {
    require_root();
    let tmp = arena();
    let victim = Victim::new(tmp.path());
    let v = victim.path.display().to_string();
    // Where a link leads that would make a file lockrun creates: nothing
    // may appear there.
    let evil = tmp.path().join("evil");
    std::fs::create_dir(&evil).unwrap();
    let (uid, gid) = ids(USER);
    std::os::unix::fs::chown(&evil, Some(uid), Some(gid)).unwrap();
    let e = evil.display().to_string();
    as_attacker(&format!(
        "ln -s '{v}' '{e}/k.lockrun-new'; ln -s '{v}' '{e}/k.lockrun'"
    ));

    let plants: [(&str, &str, String); 4] = [
        (
            "a link to root's file",
            "symbolic link",
            format!("ln -s '{v}' \"$1\""),
        ),
        (
            "a dangling link",
            "symbolic link",
            format!("ln -s '{e}/made' \"$1\""),
        ),
        ("a FIFO", "a FIFO", "mkfifo \"$1\"".to_owned()),
        ("a directory", "a directory", "mkdir \"$1\"".to_owned()),
    ];
    let mut n = 0;
    for name in [
        "k",
        "k.lockrun",
        "k.lockrun-new",
        "jobs/k",
        "jobs/k.lockrun",
        "jobs/k.lockrun-new",
    ] {
        for (what, why, plant) in &plants {
            n += 1;
            let dir = shared_dir(tmp.path(), &format!("shared-{n}"));
            let at = dir.join(name).display().to_string();
            as_attacker(&format!(
                "mkdir -p \"$(dirname '{at}')\"; set -- '{at}'; {plant}"
            ));
            let key = name
                .trim_end_matches(".lockrun-new")
                .trim_end_matches(".lockrun");
            let case = format!("{what} at `{name}`");
            refused(&dir, &elect_no_wait(key), why, &case);
            // Readers follow nothing and wait on nothing either.
            let output = Running::spawn(&mut lockrun_as(None, &dir, &["leader", key])).finish();
            assert!(
                matches!(output.status.code(), Some(1 | 125)),
                "{case}: leader {output:?}"
            );
            victim.untouched(&case);
            assert!(
                !evil.join("made").exists(),
                "{case}: created through the link"
            );
        }
    }

    // A directory on the way replaced by a link to the attacker's own,
    // which holds links to the victim.
    let dir = shared_dir(tmp.path(), "shared-link");
    let d = dir.display().to_string();
    as_attacker(&format!("ln -s '{e}' '{d}/jobs'"));
    refused(
        &dir,
        &elect_no_wait("jobs/k"),
        "is a symbolic link, not a directory",
        "jobs -> evil",
    );
    refused(
        &dir,
        &["semaphore", "--limit", "1", "-n", "jobs", "--", "true"],
        "is a symbolic link, not a directory",
        "semaphore jobs -> evil",
    );
    victim.untouched("jobs -> evil");

    // A socket and a device, which the attacker cannot make: root plants
    // them and gives them away.
    for (what, why) in [("socket", "a socket"), ("device", "a device")] {
        let dir = shared_dir(tmp.path(), &format!("shared-{what}"));
        let at = dir.join("k");
        if what == "socket" {
            std::mem::forget(std::os::unix::net::UnixListener::bind(&at).unwrap());
        } else {
            let ok = run(Command::new("mknod").arg(&at).args(["c", "1", "3"]));
            assert!(ok.status.success(), "mknod: {ok:?}");
        }
        nix::unistd::fchownat(
            nix::fcntl::AT_FDCWD,
            &at,
            Some(uid.into()),
            Some(gid.into()),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .unwrap();
        refused(&dir, &elect_no_wait("k"), why, what);
    }

    // A semaphore's own files.
    for (name, plant, why) in [
        (".limit", format!("ln -s '{v}' \"$1\""), "symbolic link"),
        (".limit", "mkfifo \"$1\"".to_owned(), "a FIFO"),
        ("slot-0", "mkfifo \"$1\"".to_owned(), "a FIFO"),
        ("slot-0", format!("ln -s '{v}' \"$1\""), "symbolic link"),
    ] {
        let dir = shared_dir(tmp.path(), &format!("sem-{name}-{why}").replace(' ', "-"));
        let at = dir.join("p").join(name).display().to_string();
        as_attacker(&format!(
            "mkdir \"$(dirname '{at}')\"; set -- '{at}'; {plant}"
        ));
        let case = format!("{why} at `p/{name}`");
        refused(
            &dir,
            &["semaphore", "--limit", "1", "-n", "p", "--", "true"],
            why,
            &case,
        );
        victim.untouched(&case);
    }

    // The attacker's own regular file where lockrun writes its next
    // record, hard-linked to a file the attacker keeps: lockrun replaces
    // it with one of its own and never writes into it, and the run goes on
    // (a member's files are the normal state of a shared directory).
    let dir = shared_dir(tmp.path(), "shared-spy");
    let d = dir.display().to_string();
    as_attacker(&format!(
        "echo spy > '{e}/spy'; ln '{e}/spy' '{d}/k.lockrun-new'"
    ));
    let output = run(&mut lockrun_as(
        None,
        &dir,
        &["elect", "--no-wait", "k", "--", "true"],
    ));
    assert_eq!(output.status.code(), Some(0), "spy: {output:?}");
    assert_eq!(
        std::fs::read_to_string(evil.join("spy")).unwrap(),
        "spy\n",
        "written into the attacker's file"
    );
    victim.untouched("spy");
}

#[test]
fn a_fifo_at_the_lock_path_ends_a_no_wait_run_at_once_and_leader_does_not_wait_on_one() {
    require_root();
    let tmp = arena();
    let dir = root_dir(tmp.path(), "locks");
    nix::unistd::mkfifo(
        &dir.join("k"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let started = Instant::now();
    refused(
        &dir,
        &elect_no_wait("k"),
        "is a FIFO, not a file lockrun made; remove it",
        "FIFO at k",
    );
    eprintln!("a FIFO at the lock path: 125 after {:?}", started.elapsed());

    // `leader` reads the holder facts of a held lock: a FIFO there.
    nix::unistd::mkfifo(
        &dir.join("h.lockrun"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    std::fs::write(dir.join("h"), "").unwrap();
    let flock = FlockHolder::start(&dir.join("h"), tmp.path());
    refused(
        &dir,
        &["leader", "h"],
        "is a FIFO",
        "leader over a FIFO of facts",
    );
    drop(flock);
}

#[test]
fn root_and_a_user_exclude_each_other_through_a_directory_shared_with_a_group() {
    require_root();
    let tmp = arena();
    // Made as docs/local.md says, by its own example.
    let dir = tmp.path().join("shared");
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/local.md"))
        .unwrap();
    let example = doc
        .split("## Sharing a lock between users")
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .expect("docs/local.md shows how to share a lock directory in an sh block");
    let example = example
        .replace("lockers", GROUP)
        .replace("/run/lockrun-shared", &dir.display().to_string())
        .replace(
            "lockrun --backend",
            &format!("{} --backend", crate::support::bin().display()),
        );
    let output = run(Command::new("sh").args(["-ec", &example]));
    assert!(
        output.status.success(),
        "docs/local.md's example: {output:?}"
    );
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777)).unwrap();
    let hold = |user: Option<&str>, tag: &str| {
        let ready = work.join(format!("{tag}.ready"));
        let script = format!("touch '{}'; sleep 30", ready.display());
        let running = Running::spawn(&mut lockrun_as(
            user,
            &dir,
            &["elect", "jobs/k", "--", "sh", "-c", &script],
        ));
        assert!(
            wait_until(crate::procs::deadline(), || ready.exists()),
            "{tag} never held"
        );
        running
    };
    let try_once = |user: Option<&str>| {
        run(&mut lockrun_as(
            user,
            &dir,
            &["elect", "--no-wait", "jobs/k", "--", "true"],
        ))
        .status
        .code()
    };
    // Each in turn holds while the other is refused, then gets it: each
    // time over the other's lock file, facts and scratch.
    for round in 0..2 {
        let root = hold(None, &format!("root-{round}"));
        assert_eq!(
            try_once(Some(USER)),
            Some(75),
            "round {round}: {USER} beside root"
        );
        root.signal(nix::sys::signal::Signal::SIGTERM);
        root.finish();
        let user = hold(Some(USER), &format!("user-{round}"));
        assert_eq!(
            try_once(None),
            Some(75),
            "round {round}: root beside {USER}"
        );
        let leader = run(&mut lockrun_as(None, &dir, &["leader", "jobs/k"]));
        assert_eq!(leader.status.code(), Some(0), "{leader:?}");
        user.signal(nix::sys::signal::Signal::SIGTERM);
        user.finish();
    }
    // What lockrun made here is shared with the group, whatever the umask.
    let jobs = std::fs::metadata(dir.join("jobs")).unwrap();
    assert_eq!(jobs.mode() & 0o7777, 0o2770);
    assert_eq!(
        std::fs::metadata(dir.join("jobs/k")).unwrap().mode() & 0o040,
        0o040
    );
}

/// Two unprivileged users the test makes up (numeric ids no account
/// has): the one whose lockruns hold, and another.
const HOLDER_ID: u32 = 61_001;
const OTHER_ID: u32 = 61_002;

/// `sh -ec SCRIPT` as the made-up user `id` (its own group, no others).
fn as_id(id: u32, script: &str) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        format!("--reuid={id}"),
        format!("--regid={id}"),
        "--clear-groups".into(),
        "--".into(),
        "sh".into(),
        "-ec".into(),
        script.into(),
    ])
    .env("LC_ALL", "C")
    .env_remove("LOCKRUN_LOCK_DIR")
    .env_remove("XDG_RUNTIME_DIR")
    .stdin(std::process::Stdio::null());
    cmd
}

/// A holder's command: notes its start in `WORK/TAG.start`, then a beat
/// in `WORK/TAG.beat` every 10 ms until it is stopped or `WORK/go` shows.
fn beating(work: &Path, tag: &str) -> String {
    let w = work.display();
    format!(
        "date +%s%N > {w}/{tag}.start; while [ ! -e {w}/go ]; do date +%s%N >> {w}/{tag}.beat; sleep 0.01; done"
    )
}

/// The last beat, or the start, of `TAG`'s command, in ns; 0 if it never
/// ran.
fn last_of(work: &Path, tag: &str) -> u128 {
    ["beat", "start"]
        .iter()
        .filter_map(|what| std::fs::read_to_string(work.join(format!("{tag}.{what}"))).ok())
        .filter_map(|text| text.lines().last().and_then(|l| l.trim().parse().ok()))
        .max()
        .unwrap_or(0)
}

fn started_at(work: &Path, tag: &str) -> Option<u128> {
    std::fs::read_to_string(work.join(format!("{tag}.start")))
        .ok()
        .and_then(|t| t.trim().parse().ok())
}

/// `lockrun --backend local --lock-dir DIR elect ARGS -- sh -c COMMAND`
/// as `id`, through a copy of lockrun at `bin`.
/// The first run (tag `a`) ran where it should have been refused: runs a
/// second `--no-wait` one beside it (tag `b`), lets the first beat on for up
/// to 2 s past the second's start, ends it, and fails saying by how much
/// they overlapped.
fn second_beside_first(first: Running, bin: &Path, locks: &Path, work: &Path, how: &str) -> ! {
    let second = run(&mut elect_as(
        HOLDER_ID,
        bin,
        locks,
        "--no-wait k",
        &format!("date +%s%N > {}/b.start", work.display()),
    ));
    // The first still beats after the second's command started.
    let b = started_at(work, "b").unwrap_or(u128::MAX);
    wait_until(Instant::now() + Duration::from_secs(2), || {
        last_of(work, "a") > b
    });
    std::fs::write(work.join("go"), "").unwrap();
    let _ = first.finish();
    let overlap_us = last_of(work, "a").saturating_sub(b) / 1_000;
    panic!(
        "the first run was not refused {how} (second run: {:?}; the first ran {overlap_us} µs after the second's command started)",
        second.status.code()
    );
}

fn elect_as(id: u32, bin: &Path, dir: &Path, args: &str, command: &str) -> Command {
    as_id(
        id,
        &format!(
            "exec {} --backend local --lock-dir {} elect {args} -- sh -c '{command}'",
            bin.display(),
            dir.display()
        ),
    )
}

/// A scratch arena root owns (0755) with a copy of lockrun anyone may run
/// and a work directory anyone may write in.
fn arena_with_bin() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = arena();
    let bin = tmp.path().join("lockrun");
    std::fs::copy(crate::support::bin(), &bin).unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777)).unwrap();
    (tmp, bin, work)
}

/// Issue #45, the reviewer's repro: the lock directory's *parent* belongs
/// to another user, who moves the lock directory away while a holder runs;
/// a second run then makes a new one at the same path and runs beside the
/// first. Now every directory above the lock directory must be ours or
/// root's (and sticky where others may write): the first run is refused
/// (125, one line naming the parent) and nothing runs. The overlap is
/// measured from the commands' own timestamps, whichever way it goes.
#[test]
fn a_lock_directory_whose_parent_another_user_owns_is_refused() {
    require_root();
    let (tmp, bin, work) = arena_with_bin();
    let base = tmp.path().join("base");
    std::fs::create_dir(&base).unwrap();
    std::os::unix::fs::chown(&base, Some(OTHER_ID), Some(OTHER_ID)).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
    let locks = base.join("locks");
    let first = Running::spawn(&mut elect_as(
        HOLDER_ID,
        &bin,
        &locks,
        "k",
        &beating(&work, "a"),
    ));
    // Either it refuses, or its command starts.
    let mut first = Some(first);
    let settled = wait_until(crate::procs::deadline(), || {
        started_at(&work, "a").is_some() || first.as_mut().unwrap().exited()
    });
    assert!(settled, "the first run neither refused nor ran");
    if started_at(&work, "a").is_some() {
        // Not refused: the attack goes on, and the overlap tells.
        let mv = run(&mut as_id(
            OTHER_ID,
            &format!("mv {0}/locks {0}/old", base.display()),
        ));
        assert!(mv.status.success(), "{mv:?}");
        second_beside_first(
            first.take().unwrap(),
            &bin,
            &locks,
            &work,
            "under another user's parent",
        );
    }
    let output = first.take().unwrap().finish();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("`{}`", base.display()))
            && stderr.contains(&format!("uid {OTHER_ID}")),
        "{stderr}"
    );
    assert!(!locks.exists(), "the refused run made the lock directory");
    // Writable by others without the sticky bit, though root's: refused
    // too; with the sticky bit (as /tmp), taken.
    std::os::unix::fs::chown(&base, Some(0), Some(0)).unwrap();
    let output = run(&mut elect_as(
        HOLDER_ID,
        &bin,
        &locks,
        "--no-wait k",
        "true",
    ));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("sticky"), "{stderr}");
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let output = run(&mut elect_as(
        HOLDER_ID,
        &bin,
        &locks,
        "--no-wait k",
        "true",
    ));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}

/// Issue #45: a holder did not notice its lock directory moved away (by
/// whoever may: its owner, root, an operator's `mv`), and a rival made a
/// new one at the same path and ran beside it. Now the holder checks that
/// the whole path still leads to the file it locked, and watches every
/// directory above it: it stops its command as on any loss. Once while
/// the holder still looks at the path (its first second), once when it
/// watches (inotify); each time the holder's last beat comes before the
/// next holder's command starts.
#[test]
fn a_holder_whose_lock_directory_is_moved_away_stops_its_command() {
    require_root();
    let (tmp, bin, work) = arena_with_bin();
    let base = tmp.path().join("base");
    std::fs::create_dir(&base).unwrap();
    std::os::unix::fs::chown(&base, Some(HOLDER_ID), Some(HOLDER_ID)).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    let locks = base.join("locks");
    for (round, watched) in [(0, false), (1, true)] {
        let a = format!("a{round}");
        let b = format!("b{round}");
        let mut holder = Running::spawn(&mut elect_as(
            HOLDER_ID,
            &bin,
            &locks,
            "jobs/k",
            &beating(&work, &a),
        ));
        assert!(
            wait_until(crate::procs::deadline(), || started_at(&work, &a).is_some()),
            "round {round}: the holder never ran"
        );
        if watched {
            // Past its first second, the holder watches with inotify.
            let pid = holder.pid();
            assert!(
                wait_until(crate::procs::deadline(), || crate::procs::open_fds(pid)
                    .iter()
                    .any(|(_, what)| what.contains("inotify"))),
                "round {round}: the holder never watched"
            );
        }
        let mv = run(&mut as_id(
            HOLDER_ID,
            &format!("mv {0}/locks {0}/old{round}", base.display()),
        ));
        assert!(mv.status.success(), "{mv:?}");
        let noticed = wait_until(crate::procs::deadline(), || holder.exited());
        if !noticed {
            // The next holder runs beside it: measure that.
            let _ = run(&mut elect_as(
                HOLDER_ID,
                &bin,
                &locks,
                "--no-wait jobs/k",
                &format!("date +%s%N > {}/{b}.start", work.display()),
            ));
            std::fs::write(work.join("go"), "").unwrap();
            let _ = holder.finish();
            let overlap =
                last_of(&work, &a).saturating_sub(started_at(&work, &b).unwrap_or(u128::MAX));
            panic!(
                "round {round}: the holder ran on after its lock directory was moved away; the next holder ran beside it ({} ms)",
                overlap / 1_000_000
            );
        }
        let output = holder.finish();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_ne!(output.status.code(), Some(0), "round {round}: {stderr}");
        assert!(
            stderr.contains("no longer leads to the lock file"),
            "round {round}: {stderr}"
        );
        let next = run(&mut elect_as(
            HOLDER_ID,
            &bin,
            &locks,
            "--no-wait jobs/k",
            &format!("date +%s%N > {}/{b}.start", work.display()),
        ));
        assert_eq!(next.status.code(), Some(0), "round {round}: {next:?}");
        let started = started_at(&work, &b).unwrap();
        let last = last_of(&work, &a);
        assert!(
            last < started,
            "round {round}: the holder beat {} ms after the next holder's command started",
            (last - started) / 1_000_000
        );
    }
}

/// The reviewer's first repro: the lock directory's path goes through a
/// link another user owns (in a sticky directory, as `/tmp`), pointing at
/// a directory that passes every check. Its owner re-points it under a
/// holder, and a second run makes a new lock directory at the same path and
/// runs beside the first. Now a link on the path is held to the rule a
/// directory is: the first run is refused (125, one line naming the link)
/// and creates nothing. If it is not, the attack goes on and the overlap,
/// from the commands' own timestamps, is in the failure.
#[test]
fn a_link_another_user_owns_on_the_lock_directory_path_is_refused() {
    require_root();
    let (tmp, bin, work) = arena_with_bin();
    let sticky = tmp.path().join("sticky");
    std::fs::create_dir(&sticky).unwrap();
    std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let mut targets = Vec::new();
    for name in ["one", "two"] {
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(HOLDER_ID), Some(HOLDER_ID)).unwrap();
        targets.push(dir);
    }
    let link = sticky.join("link");
    let point = |to: &Path| {
        let ln = run(&mut as_id(
            OTHER_ID,
            &format!("ln -sfn {} {}", to.display(), link.display()),
        ));
        assert!(ln.status.success(), "{ln:?}");
    };
    point(&targets[0]);
    let locks = link.join("locks");
    let mut first = Some(Running::spawn(&mut elect_as(
        HOLDER_ID,
        &bin,
        &locks,
        "k",
        &beating(&work, "a"),
    )));
    let settled = wait_until(crate::procs::deadline(), || {
        started_at(&work, "a").is_some() || first.as_mut().unwrap().exited()
    });
    assert!(settled, "the first run neither refused nor ran");
    if started_at(&work, "a").is_some() {
        point(&targets[1]);
        second_beside_first(
            first.take().unwrap(),
            &bin,
            &locks,
            &work,
            "through another user's link",
        );
    }
    let output = first.take().unwrap().finish();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("`{}`", link.display()))
            && stderr.contains("symbolic link")
            && stderr.contains(&format!("uid {OTHER_ID}")),
        "{stderr}"
    );
    assert!(
        !targets[0].join("locks").exists(),
        "the refused run made the lock directory"
    );
    // The same link made by the holder itself is taken.
    std::fs::remove_file(&link).unwrap();
    let ln = run(&mut as_id(
        HOLDER_ID,
        &format!("ln -s {} {}", targets[0].display(), link.display()),
    ));
    assert!(ln.status.success(), "{ln:?}");
    let output = run(&mut elect_as(
        HOLDER_ID,
        &bin,
        &locks,
        "--no-wait k",
        "true",
    ));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}

/// How soon a watching holder must notice its path re-pointed: far more
/// than inotify takes (milliseconds) on a loaded machine, far less than the
/// 5 s backstop that was all that noticed it before.
const NOTICE: Duration = Duration::from_millis(2_500);

/// The reviewer's second repro, with no attacker: `--lock-dir
/// app/current/locks`, where `current -> releases/1` is swapped for
/// `releases/2` atomically, as deployments do. Re-pointing a link moves
/// and removes no directory, so a holder past its first second (watching
/// with inotify) noticed only at its 5 s backstop, and a second run ran
/// beside it for seconds. Now the holder watches the directory holding the
/// link for that name and stops its command at once: within [`NOTICE`] of
/// the swap, and its last beat comes before the next holder's command
/// starts.
#[test]
fn a_holder_whose_path_goes_through_a_link_that_is_re_pointed_stops_its_command() {
    re_pointed_under_a_holder(false);
}

/// The same where the holder may pass through `app` but not read it (root's,
/// 0711), so no watch can be put there (second review: 4 s of overlap, the
/// backstop's): the holder then looks at its path as in its first second.
#[test]
fn a_holder_that_cannot_watch_a_directory_on_its_path_still_sees_it_re_pointed() {
    re_pointed_under_a_holder(true);
}

fn re_pointed_under_a_holder(unreadable: bool) {
    require_root();
    let (tmp, bin, work) = arena_with_bin();
    let app = tmp.path().join("app");
    std::fs::create_dir_all(app.join("releases/1")).unwrap();
    std::fs::create_dir_all(app.join("releases/2")).unwrap();
    let owner = if unreadable { 0 } else { HOLDER_ID };
    for dir in ["", "releases"] {
        std::os::unix::fs::chown(app.join(dir), Some(owner), Some(owner)).unwrap();
    }
    for dir in ["releases/1", "releases/2"] {
        std::os::unix::fs::chown(app.join(dir), Some(HOLDER_ID), Some(HOLDER_ID)).unwrap();
    }
    if unreadable {
        use std::os::unix::fs::PermissionsExt;
        for dir in ["", "releases"] {
            std::fs::set_permissions(app.join(dir), std::fs::Permissions::from_mode(0o711))
                .unwrap();
        }
    }
    std::os::unix::fs::symlink("releases/1", app.join("current")).unwrap();
    std::os::unix::fs::lchown(app.join("current"), Some(owner), Some(owner)).unwrap();
    let locks = app.join("current/locks");
    let mut holder = Running::spawn(&mut elect_as(
        HOLDER_ID,
        &bin,
        &locks,
        "k",
        &beating(&work, "a"),
    ));
    assert!(
        wait_until(crate::procs::deadline(), || started_at(&work, "a")
            .is_some()),
        "the holder never ran"
    );
    let pid = holder.pid();
    assert!(
        wait_until(crate::procs::deadline(), || crate::procs::open_fds(pid)
            .iter()
            .any(|(_, what)| what.contains("inotify"))),
        "the holder never watched"
    );
    let swap = run(&mut as_id(
        owner,
        &format!(
            "cd {} && ln -sfn releases/2 current.tmp && mv -T current.tmp current",
            app.display()
        ),
    ));
    assert!(swap.status.success(), "{swap:?}");
    let swapped = Instant::now();
    let noticed = wait_until(swapped + NOTICE, || holder.exited());
    let took = swapped.elapsed();
    let next = run(&mut elect_as(
        HOLDER_ID,
        &bin,
        &locks,
        "--no-wait k",
        &format!("date +%s%N > {}/b.start", work.display()),
    ));
    if !noticed {
        // Watched beside the next holder's start for a second at most,
        // then stopped: the overlap shown is a floor.
        let b = started_at(&work, "b").unwrap_or(u128::MAX);
        wait_until(Instant::now() + Duration::from_secs(2), || {
            last_of(&work, "a") > b.saturating_add(1_000_000_000) || holder.exited()
        });
        std::fs::write(work.join("go"), "").unwrap();
        let _ = holder.finish();
        let overlap = last_of(&work, "a").saturating_sub(b);
        panic!(
            "the holder ran on for {NOTICE:?} after `current` was re-pointed; it still beat {} ms after the next holder's command started ({:?})",
            overlap / 1_000_000,
            next.status.code()
        );
    }
    eprintln!("the holder stopped {took:?} after the swap");
    let output = holder.finish();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_ne!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("no longer leads to the lock file"),
        "{stderr}"
    );
    assert_eq!(next.status.code(), Some(0), "{next:?}");
    let started = started_at(&work, "b").unwrap();
    let last = last_of(&work, "a");
    assert!(
        last < started,
        "the holder beat {} ms after the next holder's command started",
        (last - started) / 1_000_000
    );
}

/// A waiter's record beside a lock counts only while the waiter its name
/// gives holds it: a record whose waiter is gone, locked again by anyone
/// else (here flock(1) on a record naming a pid that is not flock's), is
/// no waiter, so it cannot make every handover wait out --priority-grace
/// (attack review: it counted, and a plain waiter behind a 3 s holder
/// took 5.8 s).
#[test]
fn a_record_locked_by_another_process_is_no_waiter() {
    let dir = scratch();
    let work = scratch();
    // pid 1 never runs lockrun here: the record's waiter is not its locker.
    let record = dir.path().join("k.lockrun-wait-7-1-0");
    std::fs::write(&record, "forged").unwrap();
    let flock = FlockHolder::start(&record, work.path());
    let mut look = bare(["--backend", "local", "--lock-dir"]);
    look.arg(dir.path()).args(["leader", "--json", "k"]);
    let out = run(&mut look);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        !shown.contains("\"priority\":7"),
        "a record locked by flock(1) counted as a waiter: {shown}"
    );
    flock.end();
}
