//! `--backend local` end to end: the real binary, real `flock(1)`, no
//! server. Every test has its own lock directory.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use nix::sys::signal::Signal;

use crate::places::{stdout, Place};
use crate::procs::{self, wait_until};
use crate::support::{bare, now_ns, run, scratch, script, wait_for_file, FlockHolder, Running};

/// `flock -n FILE true`: 0 when the lock is free, 1 when held.
fn flock_free(file: &Path) -> bool {
    let output = run(Command::new("flock").arg("-n").arg(file).arg("true"));
    match output.status.code() {
        Some(0) => true,
        Some(1) => false,
        _ => panic!("flock(1) failed: {output:?}"),
    }
}

#[test]
fn runs_the_child_with_its_status_and_a_fence_that_only_grows() {
    let place = Place::local();
    let dir = place.lock_dir();
    let mut fences = Vec::new();
    for _ in 0..3 {
        let output = run(&mut place.lockrun(&[
            "elect",
            "jobs/nightly",
            "--",
            "sh",
            "-c",
            "echo $LOCKRUN_LOCK_INDEX $LOCKRUN_LOCK_FILE $LOCKRUN_KEY; exit 7",
        ]));
        place.status(&output, 7, "the child's own status");
        let out = stdout(&output);
        let words: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(words.len(), 3, "{out}");
        assert_eq!(Path::new(words[1]), dir.join("jobs/nightly"), "{out}");
        assert_eq!(words[2], "jobs/nightly");
        fences.push(words[0].parse::<u64>().unwrap());
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
}

#[test]
fn flock_and_lockrun_exclude_each_other_both_ways() {
    let place = Place::local();
    let dir = place.lock_dir();
    let work = scratch();
    let file = dir.join("k");
    // flock(1) holds: lockrun finds the lock taken, and `leader` shows
    // flock's process for want of a value.
    std::fs::write(&file, "").unwrap();
    let flock = FlockHolder::start(&file, work.path());
    let output = run(&mut place.lockrun(&["elect", "-n", "k", "--", "true"]));
    place.status(&output, 75, "lockrun while flock(1) holds");
    let output = run(&mut place.lockrun(&["leader", "k"]));
    place.status(&output, 0, "leader while flock(1) holds");
    assert!(stdout(&output).contains("(not lockrun)"), "{output:?}");
    flock.end();

    // lockrun holds: flock(1) finds it taken, and `leader` prints the value.
    let work = scratch();
    let holder = place.hold(work.path(), "", &["elect", "--value", "db-1:5432", "k"]);
    assert!(!flock_free(&file), "flock(1) took a lock lockrun holds");
    let output = run(&mut place.lockrun(&["leader", "k"]));
    place.status(&output, 0, "leader while lockrun holds");
    assert_eq!(stdout(&output), "db-1:5432\n");
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
    assert!(flock_free(&file), "the lock outlived its holder");
    let output = run(&mut place.lockrun(&["leader", "k"]));
    place.status(&output, 1, "leader with no holder");
    assert_eq!(stdout(&output), "");
}

#[test]
fn a_killed_lockrun_keeps_the_lock_until_its_childs_group_is_dead() {
    let place = Place::local();
    let dir = place.lock_dir();
    let work = scratch();
    let file = dir.join("k");
    // The child starts a crowd (so that stopping the group takes a while)
    // and lists its descriptors, since COMMAND must not inherit the lock's.
    let body = script(
        "for i in $(seq 30); do sleep 1000 & echo $! >> \"$1/pids\"; done; \
         echo $$ >> \"$1/pids\"; ls -l /proc/$$/fd > \"$1/fds\"; touch \"$1/crowd\"; wait",
    );
    let mut cmd = place.lockrun(&["elect", "k", "--shell", "--", &body]);
    cmd.arg(work.path());
    let mut lockrun = Running::spawn(&mut cmd);
    wait_for_file(&work.path().join("crowd"));
    let pids: Vec<i32> = std::fs::read_to_string(work.path().join("pids"))
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let fds = std::fs::read_to_string(work.path().join("fds")).unwrap();
    assert!(
        !fds.contains(&file.display().to_string()),
        "COMMAND inherited the lock's descriptor:\n{fds}"
    );
    // A zombie counts as alive: it is gone only once reaped.
    let alive = |pid: i32| nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
    let mut ours = std::fs::File::open(&file).unwrap();
    lockrun.signal(Signal::SIGKILL);
    // On one host there is no TTL to hide a kill in: the moment the lock is
    // free, nothing of the child's group may be left. We try without pause,
    // so as to see the first moment it is free.
    let deadline = procs::deadline();
    let left = loop {
        use nix::fcntl::{Flock, FlockArg};
        match Flock::lock(ours, FlockArg::LockExclusiveNonblock) {
            Ok(_held) => break pids.iter().filter(|p| alive(**p)).count(),
            Err((file, _)) => ours = file,
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lock stayed held after lockrun was killed"
        );
        std::thread::yield_now();
    };
    assert_eq!(left, 0, "the lock was free while the child's group lived");
    assert!(wait_until(procs::deadline(), || lockrun.exited()));
}

#[test]
fn release_stops_the_holders_child_and_it_exits_124() {
    let place = Place::local();
    let dir = place.lock_dir();
    let work = scratch();
    let holder = place.hold(work.path(), "", &["elect", "--value", "web-3", "k"]);
    let output = run(&mut place.lockrun(&["release", "k"]));
    place.status(&output, 0, "release");
    assert!(stdout(&output).contains("web-3"), "{output:?}");
    let output = holder.finish();
    place.status(&output, 124, "the released holder");
    assert!(flock_free(&dir.join("k")));
    let output = run(&mut place.lockrun(&["release", "k"]));
    place.status(&output, 1, "release with no holder");
}

#[test]
fn leader_json_wait_and_timeout() {
    let place = Place::local();
    let output = run(&mut place.lockrun(&["leader", "--wait", "--timeout", "200ms", "k"]));
    place.status(&output, 1, "leader --wait that times out");
    let work = scratch();
    let before = now_ns();
    let holder = place.hold(work.path(), "", &["elect", "--value", "v1", "k"]);
    let output = run(&mut place.lockrun(&["leader", "--wait", "--json", "k"]));
    place.status(&output, 0, "leader --wait --json");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["kind"], "lock");
    assert_eq!(json["held"], true);
    let holders = json["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "{json}");
    assert_eq!(holders[0]["value"], "v1");
    assert!(holders[0]["fence"].as_u64().is_some(), "{json}");
    assert!(
        u128::from(holders[0]["since_unix"].as_u64().unwrap()) * 1_000_000_000 + 1_000_000_000
            >= before,
        "{json}"
    );
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
}

#[test]
fn waiting_ends_on_timeout_with_75_and_on_a_signal_by_that_signal() {
    let place = Place::local();
    let dir = place.lock_dir();
    let work = scratch();
    let holder = place.hold(work.path(), "", &["elect", "k"]);
    let output = run(&mut place.lockrun(&["elect", "--timeout", "300ms", "k", "--", "true"]));
    place.status(&output, 75, "--timeout while held");
    let output = run(&mut place.lockrun(&["elect", "-n", "-E", "0", "k", "--", "true"]));
    place.status(&output, 0, "-E 0 while held");

    let waiter = Running::spawn(&mut place.lockrun(&["elect", "k", "--", "true"]));
    // The waiter is blocked in flock(2) once /proc/locks lists a blocked
    // request (`->`) on the lock file.
    let inode = std::fs::metadata(dir.join("k")).unwrap().ino();
    let blocked = wait_until(procs::deadline(), || {
        std::fs::read_to_string("/proc/locks").is_ok_and(|locks| {
            locks
                .lines()
                .any(|l| l.contains("->") && l.contains(&format!(":{inode} ")))
        })
    });
    assert!(blocked, "the waiter never blocked on the lock");
    waiter.signal(Signal::SIGTERM);
    let output = waiter.finish();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(output.status.signal(), Some(libc::SIGTERM), "{output:?}");
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
}

#[test]
fn flags_of_the_other_backend_are_refused_and_nothing_falls_back() {
    let place = Place::local();
    let dir = place.lock_dir();
    let output = run(&mut place.lockrun(&["elect", "--ttl", "20s", "k", "--", "true"]));
    place.status(&output, 2, "--ttl with --backend local");
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        err.contains(&crate::support::lease_flag_owners("--ttl")),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    let mut cmd = bare(["--lock-dir"]);
    cmd.arg(dir).args(["elect", "k", "--", "true"]);
    let output = run(&mut cmd);
    place.status(&output, 2, "--lock-dir with the consul backend");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("--lock-dir belongs to the local backend")
    );

    let output = run(&mut bare(["--backend", "nfs", "elect", "k", "--", "true"]));
    place.status(&output, 2, "an unknown backend");

    // No backend chosen and no Consul listening: an error, never a local lock.
    let output = run(bare(["elect", "-n", "k", "--", "true"])
        .env("CONSUL_HTTP_ADDR", "127.0.0.1:1")
        .env("LOCKRUN_LOCK_DIR", dir));
    place.status(&output, 125, "consul unreachable");
    assert_eq!(
        std::fs::read_dir(dir).unwrap().count(),
        0,
        "something was written to the lock directory"
    );

    // LOCKRUN_BACKEND chooses as --backend does.
    let output = run(bare(["elect", "k", "--", "true"])
        .env("LOCKRUN_BACKEND", "local")
        .env("LOCKRUN_LOCK_DIR", dir));
    place.status(&output, 0, "LOCKRUN_BACKEND=local");
    assert!(dir.join("k").exists());

    let output = run(&mut place.lockrun(&["elect", "../k", "--", "true"]));
    place.status(&output, 2, "a key that climbs out of the lock directory");
}

/// Keys that would collide with a semaphore's own files, or that no file
/// name can hold: one line, status 2, and nothing in the lock directory.
#[test]
fn keys_no_lock_file_can_carry_are_refused_before_any_file() {
    let place = Place::local();
    let dir = place.lock_dir();
    let long = format!("jobs/{}", "x".repeat(300));
    for key in ["pool/.limit", "pool/.queue", long.as_str()] {
        let output = run(&mut place.lockrun(&["elect", key, "--", "true"]));
        place.status(&output, 2, "a key no lock file can carry");
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.len() < 300, "{err}");
    }
    assert_eq!(
        std::fs::read_dir(dir).unwrap().count(),
        0,
        "something was written to the lock directory"
    );
}

/// Whether `pid` has an inotify instance open.
fn has_inotify(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.flatten().any(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|target| target.to_string_lossy().contains("inotify"))
            })
        })
        .unwrap_or(false)
}

#[test]
fn a_short_hold_opens_no_inotify_instance_and_a_long_one_sees_its_file_removed() {
    // Closing an inotify instance that had a watch waits for a kernel grace
    // period (10–15 ms), and the exit of the process that holds it waits
    // with it: four times a whole run of `-- true`. A hold watches its lock
    // file by looking at it for the first second, then with inotify.
    let place = Place::local();
    let dir = place.lock_dir();
    let work = scratch();
    let holder = place.hold(work.path(), "", &["elect", "k"]);
    let pid = holder.pid();
    let started = std::time::Instant::now();
    // Well inside the first second (the hold started before `ready`).
    while started.elapsed() < std::time::Duration::from_millis(300) {
        assert!(!has_inotify(pid), "a hold of under a second opened inotify");
        std::thread::yield_now();
    }
    // Past it, the watch is a real one: a removal is seen at once.
    assert!(
        wait_until(procs::deadline(), || has_inotify(pid)),
        "a long hold never watched its lock file"
    );
    std::fs::remove_file(dir.join("k")).unwrap();
    let output = holder.finish();
    place.status(&output, 124, "the holder whose lock file was removed");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("removed or replaced"),
        "{output:?}"
    );
}

/// Whether `pid` exists, a zombie included: gone only once reaped.
fn exists(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}

/// A pid a command wrote into `path` (through a rename, so whole).
fn read_pid(path: &Path) -> i32 {
    wait_for_file(path);
    let text = std::fs::read_to_string(path).unwrap();
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a pid: {text:?}"))
}

/// With `--min-hold` lockrun keeps the lock after its child: the guard,
/// which holds the lock's descriptor too, must not let go of it when the
/// child's tree ends, as it may where lockrun releases right after.
#[test]
fn min_hold_keeps_the_lock_after_its_guard_is_gone() {
    let place = Place::local();
    let file = place.lock_dir().join("k");
    let work = scratch();
    let guard_file = work.path().join("guard");
    // COMMAND's parent is its guard.
    let mut cmd = place.lockrun(&[
        "elect",
        "--min-hold",
        "10m",
        "k",
        "--shell",
        "--",
        "echo $PPID > \"$1.new\" && mv \"$1.new\" \"$1\"",
    ]);
    cmd.arg(&guard_file);
    let holder = Running::spawn(&mut cmd);
    let guard = read_pid(&guard_file);
    // lockrun reaps the guard once the whole tree is gone.
    assert!(
        wait_until(procs::deadline(), || !exists(guard)),
        "the guard {guard} outlived its child"
    );
    assert!(!flock_free(&file), "the lock was let go during --min-hold");
    holder.signal(Signal::SIGTERM);
    place.status(
        &holder.finish(),
        0,
        "a holder whose --min-hold a signal ended",
    );
    assert!(flock_free(&file), "the lock outlived its holder");
}

/// The guard lets go of the lock itself once the job's whole tree is gone,
/// without lockrun: so with lockrun stopped, a daemon COMMAND left behind
/// (`--leftovers wait`) keeps the lock until it ends, and then the lock is
/// free, with the facts beside it cleared.
#[test]
fn the_guard_lets_go_once_the_tree_is_gone_with_lockrun_stopped() {
    let place = Place::local();
    let dir = place.lock_dir();
    let file = dir.join("k");
    let work = scratch();
    let daemonize =
        "(setsid sh -c 'touch \"$0/up\"; while [ ! -e \"$0/go\" ]; do sleep 0.01; done' \
         \"$1\" </dev/null >/dev/null 2>&1 &); echo $$ > \"$1/command.new\"; \
         mv \"$1/command.new\" \"$1/command\"";
    let mut cmd = place.lockrun(&[
        "elect",
        "--leftovers",
        "wait",
        "k",
        "--shell",
        "--",
        daemonize,
    ]);
    cmd.arg(work.path());
    let holder = Running::spawn(&mut cmd);
    wait_for_file(&work.path().join("up"));
    let command = read_pid(&work.path().join("command"));
    // From here on only the guard can let go.
    holder.signal(Signal::SIGSTOP);
    // Reaped by the guard, which waits on for the daemon.
    assert!(
        wait_until(procs::deadline(), || !exists(command)),
        "COMMAND did not exit"
    );
    let held_while_the_daemon_ran = !flock_free(&file);
    std::fs::write(work.path().join("go"), "").unwrap();
    let freed = wait_until(procs::deadline(), || flock_free(&file));
    let facts = std::fs::read_to_string(dir.join("k.lockrun")).unwrap();
    holder.signal(Signal::SIGCONT);
    assert!(
        held_while_the_daemon_ran,
        "the lock was let go while the daemon ran"
    );
    assert!(freed, "the lock stayed held after the tree was gone");
    assert!(
        !facts.contains("\"holder\""),
        "the facts name a holder of a free lock: {facts}"
    );
    place.status(&holder.finish(), 0, "the holder");
    assert!(flock_free(&file), "the lock outlived its holder");
}

/// `lockrun list` (#43) shows a flock(1) holder by its process, beside a
/// lockrun holder, and nothing of the files nobody holds.
#[test]
fn list_shows_a_flock_holder_beside_lockrun() {
    let place = Place::local();
    let dir = place.lock_dir();
    std::fs::create_dir(dir.join("jobs")).unwrap();
    std::fs::write(dir.join("jobs/free"), "").unwrap();
    let file = dir.join("jobs/peer");
    std::fs::write(&file, "").unwrap();
    let work = scratch();
    let flock = FlockHolder::start(&file, work.path());
    let work = scratch();
    let holder = place.hold(work.path(), "", &["elect", "--value", "mine", "jobs/mine"]);
    let output = run(&mut place.lockrun(&["list", "jobs"]));
    place.status(&output, 0, "list while flock(1) and lockrun hold");
    let table = stdout(&output);
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 3, "{table}");
    assert!(
        rows[1].starts_with("jobs/mine ") && rows[1].contains(" mine "),
        "{table}"
    );
    assert!(
        rows[2].starts_with("jobs/peer ") && rows[2].contains("(not lockrun)"),
        "{table}"
    );
    // A lockrun waiter queued behind flock(1), which the refused
    // --replace below must leave nothing to defer to.
    let waiter = Running::spawn(&mut place.lockrun(&["elect", "jobs/peer", "--", "true"]));
    let queued = crate::procs::wait_until(crate::procs::deadline(), || {
        stdout(&run(&mut place.lockrun(&["leader", "--json", "jobs/peer"])))
            .contains("\"waiters\":[{")
    });
    assert!(queued, "the waiter never queued");
    // --replace cannot see a flock(1) end: one line, 125, flock keeps it.
    let output = run(&mut place.lockrun(&["elect", "--replace", "jobs/peer", "--", "true"]));
    place.status(&output, 125, "--replace of a flock(1) holder");
    assert_eq!(
        String::from_utf8_lossy(&output.stderr).lines().count(),
        1,
        "{output:?}"
    );
    assert!(!flock_free(&file), "flock(1) lost its lock");
    let left = stdout(&run(&mut place.lockrun(&["leader", "--json", "jobs/peer"])));
    assert!(
        !left.contains("\"priority\":1001"),
        "the refused --replace left a record: {left}"
    );
    flock.end();
    // Once flock(1) lets go, the waiter takes it.
    place.status(&waiter.finish(), 0, "the waiter after a refused --replace");
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
    let output = run(&mut place.lockrun(&["list"]));
    place.status(&output, 1, "list with nothing held");
}

/// The pids blocked in `flock` on `file` (`->` lines of /proc/locks).
fn blocked_on(file: &Path) -> Vec<u32> {
    let Ok(meta) = std::fs::metadata(file) else {
        return Vec::new();
    };
    let inode = format!(":{}", meta.ino());
    std::fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "->")?;
            let (pid, id) = (words.get(at + 4)?, words.get(at + 5)?);
            id.ends_with(&inode).then(|| pid.parse().ok())?
        })
        .collect()
}

/// `lockrun elect k` holding, its command running until `work/go` appears.
fn hold_until_go(place: &Place, work: &Path) -> Running {
    let mut hold = place.lockrun(&[
        "elect",
        "k",
        "--",
        "sh",
        "-c",
        "touch \"$0/up\"; while [ ! -e \"$0/go\" ]; do sleep 0.01; done",
    ]);
    hold.arg(work);
    let holder = Running::spawn(&mut hold);
    wait_for_file(&work.join("up"));
    holder
}

/// A child that logs `START_NS FENCE SEQUENCER` to `$1/$2.start` and its end
/// to `$1/$2.end`, the time stamps its own.
const LOGGED: &str =
    "echo \"$(date +%s%N) $LOCKRUN_LOCK_INDEX $LOCKRUN_SEQUENCER\" > \"$0/$1.start\"; \
     sleep 0.05; date +%s%N > \"$0/$1.end\"";

/// The span, fence and sequencer a [`LOGGED`] child wrote as `name`.
fn logged(work: &Path, name: &str) -> ((u128, u128), u64, String) {
    let start = std::fs::read_to_string(work.join(format!("{name}.start"))).unwrap();
    let end = std::fs::read_to_string(work.join(format!("{name}.end"))).unwrap();
    let words: Vec<&str> = start.split_whitespace().collect();
    assert_eq!(words.len(), 3, "{name}: {start}");
    (
        (words[0].parse().unwrap(), end.trim().parse().unwrap()),
        words[1].parse().unwrap(),
        words[2].to_owned(),
    )
}

/// Waiters whose guard waits for the lock itself and starts COMMAND on the
/// grant (#46): each command runs alone, with a fencing number above the
/// last holder's, its sequencer carrying that number and its own lockrun,
/// and the facts left behind naming no holder and the last number.
#[test]
fn waiters_started_by_their_guards_on_the_grant_run_alone_with_growing_fences() {
    use base64::Engine as _;
    let place = Place::local();
    let dir = place.lock_dir();
    let file = dir.join("k");
    let work = scratch();
    let spawn = |name: &str| {
        let mut cmd = place.lockrun(&["elect", "k", "--", "sh", "-c", LOGGED]);
        cmd.arg(work.path()).arg(name);
        Running::spawn(&mut cmd)
    };
    let holder = hold_until_go(&place, work.path());
    let first = spawn("w0");
    // Its guard, armed, waits in flock(2) on the lock file itself.
    assert!(
        wait_until(procs::deadline(), || blocked_on(&file).len() == 1),
        "the first waiter never waited on the lock"
    );
    let others: Vec<Running> = (1..3).map(|n| spawn(&format!("w{n}"))).collect();
    let turnstile = dir.join("k.lockrun-rw");
    assert!(
        wait_until(procs::deadline(), || blocked_on(&turnstile).len() == 2),
        "the other waiters never queued"
    );
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
    let mut runs = Vec::new();
    for (n, waiter) in std::iter::once(first).chain(others).enumerate() {
        place.status(&waiter.finish(), 0, "a waiter");
        runs.push(logged(work.path(), &format!("w{n}")));
    }
    runs.sort();
    let spans: Vec<(u128, u128)> = runs.iter().map(|r| r.0).collect();
    assert_eq!(
        crate::support::max_overlap(spans.iter().copied()),
        1,
        "{runs:?}"
    );
    assert!(runs.windows(2).all(|w| w[0].1 < w[1].1), "{runs:?}");
    for (_, fence, sequencer) in &runs {
        let body = sequencer.strip_prefix("lockrun-seq-1.").unwrap();
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(body)
            .unwrap();
        let seq: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(seq["fence"], serde_json::json!(fence), "{seq}");
        assert_eq!(seq["key"], "k", "{seq}");
    }
    let facts = std::fs::read_to_string(dir.join("k.lockrun")).unwrap();
    let facts: serde_json::Value = serde_json::from_str(&facts).unwrap();
    assert_eq!(facts["fence"], serde_json::json!(runs[2].1), "{facts}");
    assert!(facts.get("holder").is_none(), "{facts}");
}

/// The lock file replaced while a waiter's guard waited on the old one: the
/// old one's grant is no grant (a rival may hold the new file), and the
/// waiter's command starts only once the new file's holder has let go.
#[test]
fn a_guard_granted_a_replaced_lock_file_runs_nothing_until_the_new_one_is_free() {
    let place = Place::local();
    let dir = place.lock_dir();
    let file = dir.join("k");
    let work = scratch();
    let holder = hold_until_go(&place, work.path());
    // A shell builtin first: the start is on disk before anything can stop it.
    let child = format!(": > \"$0/began\"; {LOGGED}");
    let mut wait = place.lockrun(&["elect", "k", "--", "sh", "-c", &child]);
    wait.arg(work.path()).arg("w");
    let mut waiter = Running::spawn(&mut wait);
    assert!(
        wait_until(procs::deadline(), || blocked_on(&file).len() == 1),
        "the waiter never waited on the lock"
    );
    // A new file, held by flock(1), renamed over the path: from then on the
    // path names a held file at every moment (a removal and a new file
    // would leave a gap in which the path's next file is rightly the
    // waiter's). The old one's holder ends (its watch sees the
    // replacement, or its command ends first).
    let rival = scratch();
    let new = dir.join("k.new");
    let flock = FlockHolder::start(&new, rival.path());
    std::fs::rename(&new, &file).unwrap();
    std::fs::write(work.path().join("go"), "").unwrap();
    let _ = holder.finish();
    // The waiter's command started (wrongly), or it waits on the new
    // file, or it ended (a command started and stopped as lost).
    let began = work.path().join("began");
    assert!(
        wait_until(procs::deadline(), || began.exists()
            || !blocked_on(&file).is_empty()
            || waiter.exited()),
        "the waiter neither started nor waited on the new file"
    );
    let early = began.exists();
    let freed_at = now_ns();
    flock.end();
    assert!(
        !early,
        "the waiter's command started while flock(1) held the new file"
    );
    place.status(&waiter.finish(), 0, "the waiter");
    let ((start, _), _, _) = logged(work.path(), "w");
    assert!(
        start > freed_at,
        "the waiter's command started {} ms before flock(1) let go of the new file",
        (freed_at - start) / 1_000_000
    );
}

/// Every context switch of `pid`'s threads so far (voluntary and not).
fn switches(pid: u32) -> u64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.ends_with("ctxt_switches") || l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// A waiter in the engine's wait sleeps through what goes on beside its
/// lock: runs of another key in the same directory (each writes its facts
/// there, as every handover does) wake none of its threads, where the
/// whole directory's watch woke each waiter of a herd on every handover.
/// A waiter that comes at a higher `--priority` still sends it out, the
/// turnstile it watches for arrivals replaced by then (another file
/// renamed over it, as a cleaner or a group member may): the higher one
/// runs first.
#[test]
fn a_waiter_in_the_wait_sleeps_through_other_runs_and_wakes_for_a_higher_one() {
    sleeps_through_other_runs_and_wakes_for_a_higher_one(|turnstile| {
        let new = turnstile.with_extension("lockrun-rw.new");
        std::fs::write(&new, "").unwrap();
        std::fs::rename(&new, turnstile).unwrap();
    });
}

/// The same, the turnstile renamed away rather than replaced (the next
/// waiter makes a new one at the path).
#[test]
fn a_waiter_in_the_wait_hears_a_higher_one_once_the_turnstile_is_moved_away() {
    sleeps_through_other_runs_and_wakes_for_a_higher_one(|turnstile| {
        std::fs::rename(turnstile, turnstile.with_extension("lockrun-rw.moved")).unwrap();
    });
}

fn sleeps_through_other_runs_and_wakes_for_a_higher_one(moved: fn(&Path)) {
    let place = Place::local();
    let dir = place.lock_dir();
    let work = scratch();
    let holder = hold_until_go(&place, work.path());
    let stamped = "date +%s%N >> \"$0/$1\"; sleep 0.1; date +%s%N >> \"$0/$1\"";
    let mut wait = place.lockrun(&["elect", "k", "--", "sh", "-c", stamped]);
    wait.arg(work.path()).arg("low");
    let waiter = Running::spawn(&mut wait);
    let file = dir.join("k");
    assert!(
        wait_until(procs::deadline(), || blocked_on(&file).len() == 1),
        "the waiter never waited on the lock"
    );
    let before = switches(waiter.pid());
    for _ in 0..5 {
        let other = run(&mut place.lockrun(&["elect", "other", "--", "true"]));
        place.status(&other, 0, "a run of another key");
    }
    let woken = switches(waiter.pid()).saturating_sub(before);
    assert!(
        woken <= 1,
        "the waiting lockrun's threads were switched in {woken} times by 5 runs of another key"
    );
    moved(&dir.join("k.lockrun-rw"));
    let mut high = place.lockrun(&["elect", "--priority", "5", "k", "--", "sh", "-c", stamped]);
    high.arg(work.path()).arg("high");
    let high = Running::spawn(&mut high);
    // Its guard waits on the lock now, the lower one's no longer.
    let parent = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    assert!(
        wait_until(procs::deadline(), || {
            let waiting = blocked_on(&file);
            waiting.len() == 1 && parent(waiting[0]) == Some(high.pid())
        }),
        "the higher waiter never took the lower one's place"
    );
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
    place.status(&high.finish(), 0, "the higher waiter");
    place.status(&waiter.finish(), 0, "the lower waiter");
    let span = |name: &str| -> Vec<u128> {
        let text = std::fs::read_to_string(work.path().join(name)).unwrap();
        text.lines().map(|l| l.trim().parse().unwrap()).collect()
    };
    let (high, low) = (span("high"), span("low"));
    assert!(
        high[1] < low[0],
        "the lower waiter ran first or beside: high {high:?}, low {low:?}"
    );
}
