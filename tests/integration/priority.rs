//! `elect --priority N` (issue #44 item 2): preferred standbys. Waiters
//! publish their priority where rivals see it, and a free lock goes to the
//! highest one waiting; a stuck higher waiter delays a lower one by
//! `--priority-grace` at most. The order is read from the children's own
//! timestamps. On every backend: local, etcd, Consul, ZooKeeper and
//! PostgreSQL.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::places::{stdout, Place};
use crate::procs::wait_until;
use crate::support::{max_overlap, now_ns, run, scratch, FlockHolder, Running};

/// A waiter's child: writes `start LABEL NS` and, 200 ms later, `end LABEL
/// NS` to `LOG`.
pub(crate) const CHILD: &str =
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

/// The children's spans, `(label, start, end)`, in the order they started.
pub(crate) fn spans(log: &Path) -> Vec<(String, u128, u128)> {
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

/// The waiters `leader --json` lists for `key`: (priority, value).
fn shown_waiters(place: &Place, key: &str) -> Vec<(u64, String)> {
    let output = run(&mut place.lockrun(&["leader", "--json", key]));
    let json: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap_or_default();
    json["waiters"]
        .as_array()
        .map(|ws| {
            ws.iter()
                .map(|w| {
                    (
                        w["priority"].as_u64().unwrap_or(u64::MAX),
                        w["value"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Three waiters that start waiting lowest first (without priorities the
/// first to wait is first in line) take the freed lock highest first,
/// never two at once; `leader --json` lists them highest first.
fn highest_priority_first(place: &Place) {
    let key = place.key("k");
    let work = scratch();
    let log = work.path().join("log");
    let holder = place.hold(work.path(), "", &["elect", &key]);
    let mut waiters = Vec::new();
    for p in 1..=3u64 {
        let w = waiter(place, &key, p as u32, &[], &log);
        assert!(
            wait_until(Instant::now() + Duration::from_secs(10), || {
                shown_waiters(place, &key).contains(&(p, format!("w{p}")))
            }),
            "the priority-{p} waiter never showed as waiting: {:?}",
            shown_waiters(place, &key)
        );
        waiters.push(w);
    }
    let shown = shown_waiters(place, &key);
    let want: Vec<(u64, String)> = (1..=3).rev().map(|p| (p, format!("w{p}"))).collect();
    assert_eq!(shown, want);
    // `list` shows them too, a row each under the holder's.
    let output = run(&mut place.lockrun(&["list", &key]));
    place.status(&output, 0, "list while three wait");
    let kinds: Vec<String> = stdout(&output)
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().nth(1).unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        kinds,
        ["lock", "waiting/3", "waiting/2", "waiting/1"],
        "{}",
        stdout(&output)
    );

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
    assert_eq!(
        shown_waiters(place, &key),
        [],
        "a record outlived its waiter"
    );
}

#[test]
fn local_waiters_take_a_free_lock_highest_priority_first() {
    let place = Place::local();
    highest_priority_first(&place);
    // Every record went with its waiter.
    let left: Vec<_> = std::fs::read_dir(place.lock_dir())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains(".lockrun-wait-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn etcd_waiters_take_a_free_lock_highest_priority_first() {
    highest_priority_first(&Place::etcd("priority_order"));
}

/// A lone priority-1 waiter takes the freed lock at once; one behind a
/// priority-3 waiter that never takes the lock (`stuck` makes its record
/// and keeps it while its result lives) waits out its 2 s grace and no
/// more.
fn low_waiter_passes_after_its_grace<T>(place: &Place, stuck: impl FnOnce(&str) -> T) {
    let key = place.key("k");
    let work = scratch();
    let log = work.path().join("log");
    let holder = place.hold(work.path(), "", &["elect", &key]);
    let lone = waiter(place, &key, 1, &["--priority-grace", "2s"], &log);
    assert!(wait_until(Instant::now() + Duration::from_secs(10), || {
        !shown_waiters(place, &key).is_empty()
    }));
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

    let work = scratch();
    let log = work.path().join("log");
    let stuck = stuck(&key);
    let holder = place.hold(work.path(), "", &["elect", &key]);
    let low = waiter(place, &key, 1, &["--priority-grace", "2s"], &log);
    assert!(wait_until(Instant::now() + Duration::from_secs(10), || {
        shown_waiters(place, &key).len() == 2
    }));
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
    let freed = now_ns();
    place.status(&low.finish(), 0, "the low waiter");
    drop(stuck);
    let (_, start, _) = spans(&log)[0].clone();
    let waited_ms = start.saturating_sub(freed) / 1_000_000;
    assert!(
        (1_500..6_000).contains(&waited_ms),
        "the low waiter started {waited_ms} ms after the lock was free, not after its 2 s grace"
    );
}

#[test]
fn local_a_low_priority_waiter_takes_a_free_lock_at_once_alone_and_within_its_grace_past_a_stuck_one(
) {
    let place = Place::local();
    let dir = place.lock_dir().to_owned();
    low_waiter_passes_after_its_grace(&place, |key| {
        // A record held by the process its name gives (flock(1), under a
        // scratch name first, then named after its pid), as a live
        // waiter's is.
        let work = scratch();
        let scratch_name = dir.join(format!("{key}.stuck-record"));
        let holder = FlockHolder::start(&scratch_name, work.path());
        let record = dir.join(format!("{key}.lockrun-wait-3-{}-0", holder.pid()));
        std::fs::rename(&scratch_name, record).unwrap();
        (holder, work)
    });
}

#[test]
fn etcd_a_low_priority_waiter_takes_a_free_lock_at_once_alone_and_within_its_grace_past_a_stuck_one(
) {
    use base64::Engine as _;
    let place = Place::etcd("priority_grace");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let etcd = crate::engines::etcd::support::engine(Duration::from_secs(30));
    low_waiter_passes_after_its_grace(&place, |key| {
        // A record with a live lease, as a waiter's that stays out of the
        // queue and never enters it.
        let client = etcd.client();
        let lease = rt.block_on(client.grant(Duration::from_secs(30))).unwrap();
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let record = format!("\0lockrun/wait/{key}/{:x}", lease.id);
        let put = serde_json::json!({ "request_put": {
            "key": b64(record.as_bytes()),
            "value": b64(br#"{"priority":3,"value":"stuck"}"#),
            "lease": lease.id.to_string(),
        }});
        rt.block_on(client.txn(Vec::new(), vec![put], Vec::new(), "a stuck record"))
            .unwrap();
        Revoke(&rt, client, lease.id)
    });
}

#[test]
fn consul_waiters_take_a_free_lock_highest_priority_first() {
    let place = Place::consul("priority_order");
    highest_priority_first(&place);
    // Every queue entry went with its waiter.
    let Place::Consul(consul, _) = &place else {
        unreachable!()
    };
    let left = consul.api().kv_list(&format!("{}/", place.key("k")));
    assert!(left.is_empty(), "{:?}", left.len());
}

#[test]
fn consul_a_low_priority_waiter_takes_a_free_lock_at_once_alone_and_within_its_grace_past_a_stuck_one(
) {
    let place = Place::consul("priority_grace");
    let Place::Consul(consul, _) = &place else {
        unreachable!()
    };
    let api = consul.api();
    low_waiter_passes_after_its_grace(&place, |key| {
        // A queue entry held by a live session, as a waiter's that stopped
        // is until its session lapses.
        let session = api.session_create(r#"{"TTL":"60s","LockDelay":"0s"}"#);
        let entry = format!("{key}/.lockrun-queue/{session}");
        let resp = api.put(
            &format!(
                "/v1/kv/{}?acquire={session}",
                crate::engines::consul::support::encode_key(&entry)
            ),
            r#"{"priority":3,"value":"stuck"}"#,
        );
        assert_eq!(resp.text().trim(), "true", "the stuck entry");
        Destroy(consul.api(), session)
    });
}

#[test]
fn zookeeper_waiters_take_a_free_lock_highest_priority_first() {
    let place = Place::zookeeper("priority_order");
    highest_priority_first(&place);
    // No waiter was a contender of Curator's: nothing in the lock's
    // directory but what holders made.
    let key = place.key("k");
    let left = crate::engines::zookeeper::support::tree(
        &crate::engines::zookeeper::support::zk().addr,
        &format!("{key}.lockrun-wait"),
    );
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn zookeeper_a_low_priority_waiter_takes_a_free_lock_at_once_alone_and_within_its_grace_past_a_stuck_one(
) {
    let place = Place::zookeeper("priority_grace");
    let hosts = crate::engines::zookeeper::support::zk().addr.clone();
    low_waiter_passes_after_its_grace(&place, |key| {
        // A record of a live session, as a waiter's that stays out of the
        // queue and never enters it. The session needs a runtime that
        // runs while the test waits.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let client = rt.block_on(async {
            use zookeeper_client::{Acls, Client, CreateMode};
            let client = Client::connector()
                .with_session_timeout(Duration::from_secs(30))
                .connect(&hosts)
                .await
                .unwrap();
            let dir = format!("/{key}.lockrun-wait");
            client
                .mkdir(&dir, &CreateMode::Container.with_acls(Acls::anyone_all()))
                .await
                .unwrap();
            client
                .create(
                    &format!("{dir}/3-stuck"),
                    br#"{"value":"stuck"}"#,
                    &CreateMode::Ephemeral.with_acls(Acls::anyone_all()),
                )
                .await
                .unwrap();
            client
        });
        (client, rt)
    });
}

#[test]
fn postgres_waiters_take_a_free_lock_highest_priority_first() {
    highest_priority_first(&Place::postgres("priority_order"));
}

#[test]
fn postgres_a_low_priority_waiter_takes_a_free_lock_at_once_alone_and_within_its_grace_past_a_stuck_one(
) {
    let place = Place::postgres("priority_grace");
    low_waiter_passes_after_its_grace(&place, |key| {
        // A session holding a priority-3 waiter's shared lock, as a waiter
        // that stays out of the lock and never tries it.
        let work = scratch();
        let ready = work.path().join("ready");
        let mut child = crate::engines::postgres::support::psql()
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("psql");
        let stdin = child.stdin.as_mut().expect("piped");
        std::io::Write::write_all(
            stdin,
            format!(
                "select pg_advisory_lock_shared(('x' || substr(md5('{key}//wait'), 1, 8))::bit(32)::int, 3);\n\\! touch {}\n",
                ready.display()
            )
            .as_bytes(),
        )
        .unwrap();
        std::io::Write::flush(stdin).unwrap();
        crate::support::wait_for_file(&ready);
        (Psql(child), work)
    });
}

/// A psql session, ended when dropped.
struct Psql(std::process::Child);

impl Drop for Psql {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let _ = self.0.wait();
    }
}

/// Destroys a Consul session when dropped.
struct Destroy(crate::engines::consul::support::Api, String);

impl Drop for Destroy {
    fn drop(&mut self) {
        self.0.session_destroy(&self.1);
    }
}

/// Revokes a lease when dropped.
struct Revoke<'a>(
    &'a tokio::runtime::Runtime,
    &'a lockrun::backend::etcd::client::Client,
    i64,
);

impl Drop for Revoke<'_> {
    fn drop(&mut self) {
        let _ = self
            .0
            .block_on(self.1.revoke(self.2, Duration::from_secs(5)));
    }
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
}
