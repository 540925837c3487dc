//! `lockrun --backend etcd` end to end against a real etcd and etcdctl: the
//! failures etcd's own tools get wrong (BACKENDS.md), measured with the
//! children's own timestamps.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::etcd_support::{closed_endpoint, etcd, etcdctl, etcdctl_ok, unique};
use crate::link::Link;
use crate::procs::{self, wait_until};
use crate::support::{self, run, scratch, script, wait_for_file, Running};

fn lockrun(endpoint: &str, args: &[&str]) -> Command {
    let mut cmd = support::bare(["--backend", "etcd", "--endpoints", endpoint]);
    cmd.args(args);
    cmd
}

fn status(output: &Output, code: i32, what: &str) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "{what}: {}\n--- stderr ---\n{}\n--- etcd ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        etcd().log_tail()
    );
}

/// A holder whose child writes a timestamp every 10 ms to `beat` (and its
/// etcd key to `key`) until `go` appears.
fn heartbeat(endpoint: &str, work: &Path, args: &[&str]) -> Running {
    let body = script(
        "echo \"$ETCD_LOCK_KEY\" > \"$1/key\"; \
         while [ ! -e \"$1/go\" ]; do date +%s%N >> \"$1/beat\"; sleep 0.01; done; \
         date +%s%N >> \"$1/beat\"",
    );
    let mut cmd = lockrun(endpoint, args);
    cmd.args(["--shell", "--", &body]).arg(work);
    let running = Running::spawn(&mut cmd);
    wait_for_file(&work.join("ready"));
    wait_for_file(&work.join("beat"));
    running
}

fn last_beat(work: &Path) -> u128 {
    std::fs::read_to_string(work.join("beat"))
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .max()
        .expect("a heartbeat")
}

/// `etcdctl lock KEY` whose child writes its start time to `file`.
fn rival(key: &str, file: &Path) -> Running {
    Running::spawn(
        etcdctl()
            .args(["lock", key, "--", "sh", "-c"])
            .arg(format!("date +%s%N > {}", file.display()))
            .stdin(Stdio::null()),
    )
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
    let endpoint = &etcd().endpoint;
    let key = unique("interop");
    let work = scratch();
    let holder = heartbeat(
        endpoint,
        work.path(),
        &["elect", "--value", "db-1:5432", &key],
    );
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
    status(&holder.finish(), 0, "the holder");
    assert!(etcdctl_lock.finish().status.success());
    assert!(
        last_beat(work.path()) < read_ns(&started),
        "etcdctl's child started while lockrun's ran"
    );
}

#[test]
fn a_revoked_lease_stops_the_child_before_the_rivals_starts() {
    let endpoint = &etcd().endpoint;
    let key = unique("revoked");
    let work = scratch();
    let holder = heartbeat(endpoint, work.path(), &["elect", &key]);
    let started = work.path().join("rival");
    let etcdctl_lock = rival(&key, &started);
    let own = std::fs::read_to_string(work.path().join("key")).unwrap();
    let lease = own.trim().rsplit('/').next().unwrap().to_string();
    let revoked = run(etcdctl().args(["lease", "revoke", &lease]));
    assert!(revoked.status.success(), "{revoked:?}");
    status(&holder.finish(), 124, "the holder whose lease was revoked");
    assert!(etcdctl_lock.finish().status.success());
    assert!(
        last_beat(work.path()) < read_ns(&started),
        "lockrun's child ran after etcdctl's started"
    );
}

#[test]
fn a_frozen_link_stops_the_child_before_etcd_expires_the_lease() {
    let endpoint = &etcd().endpoint;
    let link = Link::new(endpoint.trim_start_matches("http://"));
    let key = unique("frozen");
    let work = scratch();
    let holder = heartbeat(
        &link.http_addr(),
        work.path(),
        &["elect", "--ttl", "3s", &key],
    );
    link.freeze();
    // The rival talks to etcd directly and gets the lock once etcd expires
    // lockrun's lease; lockrun, cut off, must have stopped its child by then.
    let started = work.path().join("rival");
    let etcdctl_lock = rival(&key, &started);
    status(&holder.finish(), 124, "the cut-off holder");
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

/// `leader` and `release` refuse the keys `elect` refuses, before any
/// request: one line naming the key, status 2, nothing in etcd; the same
/// with no etcd to ask at all.
#[test]
fn leader_and_release_refuse_a_key_elect_refuses() {
    let base = unique("refused");
    let slashed = format!("/{base}");
    let doubled = format!("{base}//b");
    let closed = closed_endpoint();
    for (endpoint, args, key) in [
        (&etcd().endpoint, ["leader", slashed.as_str()], &slashed),
        (&etcd().endpoint, ["release", doubled.as_str()], &doubled),
        (&closed, ["leader", doubled.as_str()], &doubled),
        (&closed, ["release", slashed.as_str()], &slashed),
    ] {
        let output = run(&mut lockrun(endpoint, &args));
        status(&output, 2, &format!("{args:?}"));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(&format!("`{key}`")), "{args:?}: {stderr}");
    }
    for prefix in [base.as_str(), slashed.as_str()] {
        let stored = etcdctl_ok(&["get", "--prefix", "--keys-only", prefix]);
        assert_eq!(stored.trim(), "", "keys under `{prefix}`");
    }
}
