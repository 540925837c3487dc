//! `lockrun --backend etcd` end to end against a real etcd and etcdctl: the
//! failures etcd's own tools get wrong (BACKENDS.md), measured with the
//! children's own timestamps.

use std::path::Path;
use std::process::Stdio;

use crate::engines::etcd::support::{closed_endpoint, etcd, etcdctl, etcdctl_ok};
use crate::link::Link;
use crate::places::{last_beat, stdout, Place};
use crate::procs::{self, wait_until};
use crate::support::{run, scratch, Running};

/// What the heartbeat's child does first: keep its etcd key (lease ID
/// included) in `key`.
const KEEP_KEY: &str = "echo \"$ETCD_LOCK_KEY\" > \"$1/key\";";

/// `etcdctl lock KEY -- sh -c SCRIPT`.
fn etcdctl_lock(key: &str, script: &str) -> Running {
    Running::spawn(
        etcdctl()
            .args(["lock", key, "--", "sh", "-c", script])
            .stdin(Stdio::null()),
    )
}

/// `etcdctl lock KEY` whose child writes its start time to `file`.
fn rival(key: &str, file: &Path) -> Running {
    etcdctl_lock(key, &format!("date +%s%N > {}", file.display()))
}

fn read_ns(file: &Path) -> u128 {
    std::fs::read_to_string(file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn etcdctl_lock_waits_for_lockrun_and_elect_shows_its_value() {
    let place = Place::etcd("interop");
    let key = place.key("k");
    let work = scratch();
    let holder = place.heartbeat(work.path(), "", &["elect", "--value", "db-1:5432", &key]);
    // `elect -l` prints the leader's value, then keeps observing.
    let shown_file = work.path().join("observed");
    let mut observer = etcdctl()
        .args(["elect", "-l", &key])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&shown_file).unwrap())
        .spawn()
        .unwrap();
    let shown = wait_until(procs::deadline(), || {
        std::fs::read_to_string(&shown_file).is_ok_and(|t| t.contains("db-1:5432"))
    });
    let _ = observer.kill();
    let _ = observer.wait();
    assert!(
        shown,
        "etcdctl elect -l showed: {:?}",
        std::fs::read_to_string(&shown_file)
    );
    let started = work.path().join("rival");
    let etcdctl_lock = rival(&key, &started);
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
    assert!(etcdctl_lock.finish().status.success());
    assert!(
        last_beat(work.path()) < read_ns(&started),
        "etcdctl's child started while lockrun's ran"
    );
}

/// The fencing number grows across an `etcdctl lock` holder: lockrun, then
/// etcdctl, then a lockrun that queued while etcdctl still waited. That last
/// one created its key before etcdctl took the lock, at a revision below the
/// `ETCD_LOCK_REV` etcdctl handed its child; a service fenced on that number
/// would have refused it.
#[test]
fn the_fencing_number_grows_across_an_etcdctl_holder() {
    let place = Place::etcd("fence");
    let key = place.key("k");
    let work = scratch();
    let number = |name: &str| -> u64 {
        let text = std::fs::read_to_string(work.path().join(name)).unwrap();
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}: {text:?}"))
    };
    let queued = |n: usize| {
        wait_until(procs::deadline(), || {
            etcdctl_ok(&["get", "--prefix", "--keys-only", &format!("{key}/")])
                .lines()
                .filter(|l| !l.is_empty())
                .count()
                == n
        })
    };
    let first = place.hold(
        work.path(),
        "echo \"$LOCKRUN_LOCK_INDEX\" > \"$1/first\";",
        &["elect", &key],
    );
    let etcdctl_lock = etcdctl_lock(
        &key,
        &format!(
            "echo \"$ETCD_LOCK_REV\" > {}",
            work.path().join("etcdctl").display()
        ),
    );
    assert!(queued(2), "etcdctl lock never queued");
    let mut last = place.lockrun(&["elect", &key, "--shell", "--"]);
    last.arg("echo \"$LOCKRUN_LOCK_INDEX\" > \"$1/last\"")
        .arg(work.path());
    let last = Running::spawn(&mut last);
    assert!(queued(3), "the second lockrun never queued");
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&first.finish(), 0, "the first holder");
    assert!(etcdctl_lock.finish().status.success());
    place.status(&last.finish(), 0, "the last holder");
    let numbers = [number("first"), number("etcdctl"), number("last")];
    assert!(
        numbers[0] < numbers[1] && numbers[1] < numbers[2],
        "lockrun, etcdctl, lockrun were handed {numbers:?}"
    );
}

/// Issue #45: `leader --json` gave `"fence": null, "host": null, "pid":
/// null` for a lockrun holder on etcd. Its facts are recorded beside its
/// key now: the fence is the number its child got as LOCKRUN_LOCK_INDEX,
/// for a holder that queued behind another (whose number is not its key's
/// CreateRevision) as for the first; host and pid are its lockrun's.
#[test]
fn leader_json_gives_a_lockrun_holders_fence_host_and_pid() {
    let place = Place::etcd("facts");
    let key = place.key("k");
    let first_work = scratch();
    let work = scratch();
    let first = place.hold(first_work.path(), "", &["elect", &key]);
    let queued = wait_until(procs::deadline(), || {
        etcdctl_ok(&["get", "--prefix", "--keys-only", &format!("{key}/")])
            .lines()
            .filter(|l| !l.is_empty())
            .count()
            == 1
    });
    assert!(queued, "the first holder has no key");
    let mut second = place.lockrun(&["elect", "--value", "db-2", &key, "--shell", "--"]);
    second
        .arg(
            "echo \"$LOCKRUN_LOCK_INDEX\" > \"$1/index.new\"; mv \"$1/index.new\" \"$1/index\"; \
             while [ ! -e \"$1/go\" ]; do sleep 0.05; done",
        )
        .arg(work.path());
    let second = Running::spawn(&mut second);
    std::fs::write(first_work.path().join("go"), "").unwrap();
    place.status(&first.finish(), 0, "the first holder");
    crate::support::wait_for_file(&work.path().join("index"));
    let index: u64 = std::fs::read_to_string(work.path().join("index"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Recorded a round trip after the command starts.
    let mut shown = serde_json::Value::Null;
    let recorded = wait_until(procs::deadline(), || {
        let json = run(&mut place.lockrun(&["leader", "--json", &key]));
        shown = serde_json::from_str(&stdout(&json)).unwrap_or_default();
        !shown["holders"][0]["fence"].is_null()
    });
    std::fs::write(work.path().join("go"), "").unwrap();
    let pid = second.pid();
    place.status(&second.finish(), 0, "the second holder");
    assert!(recorded, "leader --json never gave a fence: {shown}");
    let holder = &shown["holders"][0];
    assert_eq!(holder["fence"], index, "{shown}");
    assert_eq!(holder["pid"], pid, "{shown}");
    assert_eq!(holder["host"], lockrun::host::hostname(), "{shown}");
    assert_eq!(holder["value"], "db-2", "{shown}");
}

/// A holder that stored no value (`etcdctl lock`) is shown by its key, not
/// an empty line, by `leader` and by `release`; `--json` names the key and
/// gives no number (etcd does not keep the revision a holder took the lock
/// at).
#[test]
fn an_etcdctl_holder_is_shown_by_its_key() {
    let place = Place::etcd("shown");
    let key = place.key("k");
    let work = scratch();
    let started = work.path().join("started");
    let etcdctl_lock = etcdctl_lock(
        &key,
        &format!(
            "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
            started.display(),
            work.path().join("go").display()
        ),
    );
    assert!(
        wait_until(procs::deadline(), || started.exists()),
        "etcdctl lock never ran its child"
    );
    let entry = etcdctl_ok(&["get", "--prefix", "--keys-only", &format!("{key}/")]);
    let entry = entry.trim();
    let plain = run(&mut place.lockrun(&["leader", &key]));
    let json = run(&mut place.lockrun(&["leader", "--json", &key]));
    let released = run(&mut place.lockrun(&["release", &key]));
    // etcdctl's child does not stop for a revoked lease: let it end.
    std::fs::write(work.path().join("go"), "").unwrap();
    let _ = etcdctl_lock.finish();
    place.status(&plain, 0, "leader");
    assert_eq!(stdout(&plain), format!("{entry} (no value)\n"));
    place.status(&json, 0, "leader --json");
    let shown: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    let holder = &shown["holders"][0];
    assert_eq!(holder["details"]["key"], entry, "{shown}");
    assert!(holder["value"].is_null(), "{shown}");
    assert!(holder["fence"].is_null(), "{shown}");
    place.status(&released, 0, "release");
    assert!(stdout(&released).contains(entry), "{released:?}");
    // It asked nobody: it revoked the lease (#40).
    assert!(
        stdout(&released).starts_with(&format!("revoked the lease holding `{key}`")),
        "{released:?}"
    );
}

#[test]
fn a_revoked_lease_stops_the_child_before_the_rivals_starts() {
    let place = Place::etcd("revoked");
    let key = place.key("k");
    let work = scratch();
    let holder = place.heartbeat(work.path(), KEEP_KEY, &["elect", &key]);
    let started = work.path().join("rival");
    let etcdctl_lock = rival(&key, &started);
    let own = std::fs::read_to_string(work.path().join("key")).unwrap();
    let lease = own.trim().rsplit('/').next().unwrap().to_string();
    let revoked = run(etcdctl().args(["lease", "revoke", &lease]));
    assert!(revoked.status.success(), "{revoked:?}");
    place.status(&holder.finish(), 124, "the holder whose lease was revoked");
    let holder_ended = crate::support::now_ns();
    assert!(etcdctl_lock.finish().status.success());
    // A revoked lease lets etcdctl's rival in at once (SPEC §3 states it
    // for etcd, docs/etcd.md too): what lockrun promises is the SIGKILL at
    // once, so its child is gone by the time lockrun has ended. Whether
    // the rival's command started before that is a race on a loaded host,
    // and is said, not asserted.
    let last = last_beat(work.path());
    assert!(
        last < holder_ended,
        "lockrun ended before its child's last beat"
    );
    let rival = read_ns(&started);
    if last >= rival {
        eprintln!(
            "the revoked holder's child beat {} ms into etcdctl's run (revocation frees the lock at once)",
            (last - rival) / 1_000_000
        );
    }
}

#[test]
fn a_frozen_link_stops_the_child_before_etcd_expires_the_lease() {
    let link = Link::new(etcd().endpoint.trim_start_matches("http://"));
    let place = Place::etcd_at("frozen", &link.http_addr());
    let key = place.key("k");
    let work = scratch();
    let holder = place.heartbeat(work.path(), "", &["elect", "--ttl", "3s", &key]);
    link.freeze();
    // The rival talks to etcd directly and gets the lock once etcd expires
    // lockrun's lease; lockrun, cut off, must have stopped its child by then.
    let started = work.path().join("rival");
    let etcdctl_lock = rival(&key, &started);
    place.status(&holder.finish(), 124, "the cut-off holder");
    assert!(etcdctl_lock.finish().status.success());
    assert!(
        wait_until(procs::deadline(), || started.exists()),
        "the rival never ran"
    );
    let (last, rival) = (last_beat(work.path()), read_ns(&started));
    assert!(
        last < rival,
        "lockrun's child ran {} ms into the rival's run",
        (last - rival) / 1_000_000
    );
    link.thaw();
}

/// A lockrun stopped (SIGSTOP) just after its command started, while it
/// writes the child's group beside its key (the link holds that request
/// back): its guard must already know the lease's deadline and stop the
/// whole tree by it. Before, the guard got its first deadline only after
/// that write was answered, and a daemon that ignores SIGTERM ran on beside
/// the rival that took the lock once etcd expired the lease (once in some
/// twenty runs under load, by timing alone, before this test made the
/// window wide).
#[test]
fn a_lockrun_stopped_as_its_command_starts_leaves_the_guard_a_deadline() {
    let link = Link::new(etcd().endpoint.trim_start_matches("http://"));
    let place = Place::etcd_at("stopped-at-start", &link.http_addr());
    let key = place.key("k");
    let work = scratch();
    link.freeze_at("\"child_pgid\"");
    let daemon = crate::conformance::locks::stubborn_daemon();
    let mut cmd = place.lockrun(&[
        "elect",
        "--ttl",
        "3s",
        "--kill-timeout",
        "300ms",
        &key,
        "--shell",
        "--",
        &daemon,
    ]);
    cmd.arg(work.path());
    let holder = Running::spawn(&mut cmd);
    crate::places::wait_for_a_beat(work.path());
    let stopped = nix::unistd::Pid::from_raw(holder.pid() as i32);
    nix::sys::signal::kill(stopped, nix::sys::signal::Signal::SIGSTOP).unwrap();
    // The rival talks to etcd directly and gets the lock once etcd expires
    // the stopped lockrun's lease.
    let started = work.path().join("rival");
    let etcdctl_lock = rival(&key, &started);
    assert!(etcdctl_lock.finish().status.success());
    assert!(
        wait_until(procs::deadline(), || started.exists()),
        "the rival never ran"
    );
    let (last, rival) = (last_beat(work.path()), read_ns(&started));
    nix::sys::signal::kill(stopped, nix::sys::signal::Signal::SIGCONT).unwrap();
    link.thaw();
    std::fs::write(work.path().join("go"), "").unwrap();
    let _ = holder.finish();
    assert!(
        last < rival,
        "the stopped lockrun's daemon beat {} ms into the rival's run",
        (last - rival) / 1_000_000
    );
}

/// `leader --wait` and `--watch` on a prefix nobody used yet, which reads as
/// a lock: its first holder shows it to be a semaphore, and is shown by its
/// value, not as a lock holder whose value is the slot's JSON.
#[test]
fn leader_learns_a_prefix_is_a_semaphore_when_its_first_holder_comes() {
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let place = Place::etcd("late-semaphore");
    let prefix = place.key("pool");
    let work = scratch();
    let watched = work.path().join("watched");
    let watch = Killed(
        place
            .lockrun(&["leader", "--watch", &prefix])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&watched).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let seen = || std::fs::read_to_string(&watched).unwrap_or_default();
    assert!(
        wait_until(procs::deadline(), || seen() == "\n"),
        "{:?}",
        seen()
    );
    let waiter = Running::spawn(&mut place.lockrun(&["leader", "--wait", &prefix]));
    let holder = place.hold(
        work.path(),
        "",
        &["semaphore", "--limit", "2", "--value", "web-1", &prefix],
    );
    let waited = waiter.finish();
    let shown = wait_until(procs::deadline(), || seen().contains("web-1\n"));
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the slot holder");
    drop(watch);
    place.status(&waited, 0, "leader --wait");
    assert_eq!(stdout(&waited), "web-1\n");
    assert!(shown && !seen().contains('{'), "{:?}", seen());
}

/// `release KEY` touches only a contender's entry: neither a nested lock
/// under `KEY/` (its holder keeps running) nor plain data there, though
/// etcd's mutex waits for both as for a holder.
#[test]
fn release_leaves_what_is_not_a_contender_alone() {
    let place = Place::etcd("not-mine");
    let key = place.key("k");
    let work = scratch();
    let inner = format!("{key}/inner");
    let nested = place.hold(work.path(), "", &["elect", "--value", "inner", &inner]);
    let output = run(&mut place.lockrun(&["release", &key]));
    std::fs::write(work.path().join("go"), "").unwrap();
    // 0, not 124: its lease was not revoked.
    place.status(&nested.finish(), 0, "the nested lock's holder");
    place.status(&output, 125, "release over a nested lock");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("not a contender's entry"), "{stderr}");

    let data = format!("{key}/settings");
    etcdctl_ok(&["put", &data, "keep me"]);
    let output = run(&mut place.lockrun(&["release", &key]));
    place.status(&output, 125, "release over plain data");
    assert_eq!(
        etcdctl_ok(&["get", "--print-value-only", &data]).trim(),
        "keep me"
    );
    etcdctl_ok(&["del", &data]);
}

/// An endpoint that takes connections and never answers: a one-off run
/// says so once its first request times out, instead of retrying for ever
/// without a word; given another endpoint, it goes on to that one.
#[test]
fn a_silent_endpoint_is_reported_or_passed_over() {
    let link = Link::new(etcd().endpoint.trim_start_matches("http://"));
    link.freeze();
    let silent = Place::etcd_at("silent", &link.http_addr());
    let key = silent.key("k");
    let output = run(&mut silent.lockrun(&["elect", &key, "--", "true"]));
    silent.status(&output, 125, "a one-off run against a silent etcd");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("did not answer within"), "{stderr}");
    let both = format!("{},{}", link.http_addr(), etcd().endpoint);
    let place = Place::etcd_at("silent", &both);
    let output = run(&mut place.lockrun(&["elect", &key, "--", "sh", "-c", "exit 7"]));
    place.status(&output, 7, "a run whose first endpoint is silent");
    link.thaw();
}

/// A member that falls silent after a one-off run's first contact (an
/// election beginning between its lease and its place in the queue) is
/// passed over as at the first contact: the lock held, the run answers 75,
/// never 125, and leaves nothing in the queue.
#[test]
fn an_endpoint_silent_after_the_first_contact_is_passed_over() {
    let direct = Place::etcd("silent-later");
    let key = direct.key("k");
    let work = scratch();
    let _holder = direct.hold(work.path(), "", &["elect", &key]);
    let link = Link::new(etcd().endpoint.trim_start_matches("http://"));
    // The lease passes; the entry in the queue, a transaction, does not.
    // gRPC's headers are compressed (HPACK), so the marker is the key,
    // which the transaction's body holds as it is and the grant does not.
    link.freeze_at(&format!("{key}/"));
    let both = format!("{},{}", link.http_addr(), etcd().endpoint);
    let place = Place::etcd_at("silent-later", &both);
    let output = run(&mut place.lockrun(&["elect", "--no-wait", &key, "--", "true"]));
    place.status(
        &output,
        75,
        "a one-off run whose member fell silent after its lease",
    );
    let queued = etcdctl_ok(&["get", "--prefix", "--keys-only", &format!("{key}/")]);
    assert_eq!(
        queued.lines().filter(|l| !l.is_empty()).count(),
        1,
        "only the holder is queued: {queued}"
    );
    link.thaw();
}

/// `leader` and `release` refuse the keys `elect` refuses, before any
/// request: one line naming the key, status 2, nothing in etcd; the same
/// with no etcd to ask at all.
#[test]
fn leader_and_release_refuse_a_key_elect_refuses() {
    let place = Place::etcd("refused");
    let closed = Place::etcd_at("refused", &closed_endpoint());
    let slashed = format!("/{}", place.key("a"));
    let doubled = place.key("a//b");
    for (place, args, key) in [
        (&place, ["leader", slashed.as_str()], &slashed),
        (&place, ["release", doubled.as_str()], &doubled),
        (&closed, ["leader", doubled.as_str()], &doubled),
        (&closed, ["release", slashed.as_str()], &slashed),
    ] {
        let output = run(&mut place.lockrun(&args));
        place.status(&output, 2, &format!("{args:?}"));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(&format!("`{key}`")), "{args:?}: {stderr}");
    }
    for prefix in [place.key(""), format!("/{}", place.key(""))] {
        let stored = etcdctl_ok(&["get", "--prefix", "--keys-only", &prefix]);
        assert_eq!(stored.trim(), "", "keys under `{prefix}`");
    }
}

/// `lockrun list` (#43) shows an `etcdctl lock` holder, by its entry for
/// want of a value.
#[test]
fn list_shows_an_etcdctl_lock_holder() {
    let place = Place::etcd("list-peer");
    let key = place.key("jobs/peer");
    let work = scratch();
    let w = work.path().display().to_string();
    let peer = etcdctl_lock(
        &key,
        &format!("touch {w}/held; while [ ! -e {w}/go ]; do sleep 0.05; done"),
    );
    crate::support::wait_for_file(&work.path().join("held"));
    let output = run(&mut place.lockrun(&["list", "--json", &place.key("jobs")]));
    place.status(&output, 0, "list while etcdctl holds");
    let line: serde_json::Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(line["key"], key.as_str(), "{output:?}");
    assert_eq!(
        line["holders"][0]["value"],
        serde_json::Value::Null,
        "{output:?}"
    );
    // --replace cannot see etcdctl's command end: one line, 125, and
    // etcdctl keeps its lock (its lease is not revoked).
    let output = run(&mut place.lockrun(&["elect", "--replace", &key, "--", "true"]));
    place.status(&output, 125, "--replace of an etcdctl lock holder");
    assert_eq!(
        String::from_utf8_lossy(&output.stderr).lines().count(),
        1,
        "{output:?}"
    );
    let output = run(&mut place.lockrun(&["leader", &key]));
    place.status(&output, 0, "leader after the refused --replace");
    std::fs::write(work.path().join("go"), "").unwrap();
    assert!(peer.finish().status.success());
    let output = run(&mut place.lockrun(&["list", &place.key("jobs")]));
    place.status(&output, 1, "list once etcdctl let go");
}
