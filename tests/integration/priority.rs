//! `elect --priority N` (issue #44 item 2): preferred standbys. Waiters
//! publish their priority where rivals see it, and a free lock goes to the
//! highest one waiting; a stuck higher waiter delays a lower one by
//! `--priority-grace` at most. The order is read from the children's own
//! timestamps. Local only so far: the other backends refuse the flags.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::places::{stdout, Place};
use crate::procs::wait_until;
use crate::support::{bare, max_overlap, now_ns, run, scratch, FlockHolder, Running};

/// A waiter's child: writes `start LABEL NS` and, 200 ms later, `end LABEL
/// NS` to `LOG`.
const CHILD: &str =
    "echo \"start $1 $(date +%s%N)\" >> \"$2\"; sleep 0.2; echo \"end $1 $(date +%s%N)\" >> \"$2\"";

/// `lockrun elect --priority P KEY` whose child logs its span as `P`.
fn waiter(place: &Place, key: &str, priority: u32, extra: &[&str], log: &Path) -> Running {
    let (p, value) = (priority.to_string(), format!("w{priority}"));
    let mut args = vec!["elect"];
    args.extend(extra);
    args.extend(["--priority", &p, "--value", &value, key]);
    let mut cmd = place.lockrun(&args);
    cmd.args(["--shell", "--", CHILD, &p]).arg(log);
    Running::spawn(&mut cmd)
}

/// Waits until the waiter `pid` has published its record beside `key`.
fn wait_for_record(place: &Place, key: &str, priority: u32, pid: u32) {
    let record = format!("{key}.lockrun-wait-{priority}-{pid}-");
    let published = || {
        std::fs::read_dir(place.lock_dir()).is_ok_and(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .any(|n| n.starts_with(&record) && !n.ends_with(".new"))
        })
    };
    assert!(
        wait_until(Instant::now() + Duration::from_secs(10), published),
        "{record}N did not appear: the waiter never waited"
    );
}

/// The children's spans, `(label, start, end)`, in the order they started.
fn spans(log: &Path) -> Vec<(String, u128, u128)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut starts = Vec::new();
    let mut ends = std::collections::HashMap::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let at: u128 = words[2].parse().unwrap();
        match words[0] {
            "start" => starts.push((words[1].to_owned(), at)),
            _ => {
                ends.insert(words[1].to_owned(), at);
            }
        }
    }
    starts.sort_by_key(|(_, at)| *at);
    starts
        .into_iter()
        .map(|(label, start)| {
            let end = ends[&label];
            (label, start, end)
        })
        .collect()
}

#[test]
fn local_waiters_take_a_free_lock_highest_priority_first() {
    let place = Place::local();
    let work = scratch();
    let log = work.path().join("log");
    let holder = place.hold(work.path(), "", &["elect", "k"]);
    // They start waiting lowest first: without priorities the first to
    // wait is first in line for the turnstile.
    let mut waiters = Vec::new();
    for p in 1..=3 {
        let w = waiter(&place, "k", p, &[], &log);
        wait_for_record(&place, "k", p, w.pid());
        waiters.push(w);
    }
    let output = run(&mut place.lockrun(&["leader", "--json", "k"]));
    place.status(&output, 0, "leader --json while three wait");
    let json: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    let shown: Vec<(u64, &str)> = json["waiters"]
        .as_array()
        .expect("waiters listed")
        .iter()
        .map(|w| {
            (
                w["priority"].as_u64().unwrap(),
                w["value"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(shown, [(3, "w3"), (2, "w2"), (1, "w1")], "{json}");

    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
    for w in waiters {
        place.status(&w.finish(), 0, "a waiter");
    }
    let spans = spans(&log);
    let order: Vec<&str> = spans.iter().map(|(l, _, _)| l.as_str()).collect();
    assert_eq!(order, ["3", "2", "1"], "{spans:?}");
    assert_eq!(
        max_overlap(spans.iter().map(|&(_, s, e)| (s, e))),
        1,
        "{spans:?}"
    );
    // Every record went with its waiter.
    let left: Vec<_> = std::fs::read_dir(place.lock_dir())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains(".lockrun-wait-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_low_priority_waiter_takes_a_free_lock_at_once_alone_and_within_its_grace_past_a_stuck_one() {
    let place = Place::local();
    let work = scratch();
    let log = work.path().join("log");

    // Alone: it takes the lock as soon as the holder lets go.
    let holder = place.hold(work.path(), "", &["elect", "k"]);
    let lone = waiter(&place, "k", 1, &["--priority-grace", "2s"], &log);
    wait_for_record(&place, "k", 1, lone.pid());
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
    let freed = now_ns();
    place.status(&lone.finish(), 0, "the lone waiter");
    let (_, start, _) = spans(&log)[0].clone();
    let waited_ms = start.saturating_sub(freed) / 1_000_000;
    assert!(
        waited_ms < 1_500,
        "the lone waiter started {waited_ms} ms after the lock was free"
    );

    // Behind a priority-3 waiter that never takes the lock (a record held
    // by flock(1), as a stopped waiter's would be): not before the lock has
    // been free for its 2 s grace, and not much after.
    let work = scratch();
    let log = work.path().join("log");
    let stuck_at = place.lock_dir().join("k.lockrun-wait-3-1-0");
    let stuck_work = scratch();
    let stuck = FlockHolder::start(&stuck_at, stuck_work.path());
    let holder = place.hold(work.path(), "", &["elect", "k"]);
    let low = waiter(&place, "k", 1, &["--priority-grace", "2s"], &log);
    wait_for_record(&place, "k", 1, low.pid());
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
    let freed = now_ns();
    place.status(&low.finish(), 0, "the low waiter");
    stuck.end();
    let (_, start, _) = spans(&log)[0].clone();
    let waited_ms = start.saturating_sub(freed) / 1_000_000;
    assert!(
        (1_500..6_000).contains(&waited_ms),
        "the low waiter started {waited_ms} ms after the lock was free, not after its 2 s grace"
    );
}

#[test]
fn bad_priorities_are_one_line_and_exit_2() {
    let place = Place::local();
    for (args, says) in [
        (&["--priority", ""][..], "--priority"),
        (&["--priority", "1001"], "--priority"),
        (&["--priority", "-1"], "--priority"),
        (&["--priority-grace", "0s"], "--priority-grace"),
        (&["--priority-grace", ""], "--priority-grace"),
        (&["-s", "--priority", "2"], "-s"),
    ] {
        let mut cmd = place.lockrun(&["elect"]);
        cmd.args(args).args(["k", "--", "true"]);
        let output = run(&mut cmd);
        place.status(&output, 2, &format!("elect {args:?}"));
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // Nothing was made in the lock directory.
    let made: Vec<_> = std::fs::read_dir(place.lock_dir())
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(made.is_empty(), "{made:?}");

    // A backend whose waiters publish no priority refuses it before it
    // sends anything (nothing listens on the endpoint: a try would be 125).
    let output = run(bare([
        "--backend",
        "etcd",
        "--endpoints",
        "http://127.0.0.1:9",
        "elect",
        "--priority",
        "2",
        "k",
        "--",
        "true",
    ])
    .env_remove("ETCDCTL_ENDPOINTS"));
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("local backend"), "{err}");
}
