//! The queue among lockrun's waiters for a leader key or a semaphore: they
//! take the lock in the order they came, a release wakes one of them, and
//! one that gives up or dies leaves the queue without stalling those behind
//! it.

use std::time::{Duration, Instant};

use consul_emulator::{AclPolicy, BlipKind};

use crate::engines::consul::support::{encode_key, Api, KvEntry, TestConsul};
use crate::procs::{self, wait_until};
use crate::support::{assert_status, elect, lockrun, scratch, Holder, Running};

/// Where lockrun's waiters for a leader key queue.
fn line_of(key: &str) -> String {
    format!("{key}/.lockrun-queue/")
}

/// Live entries in a queue. Read with `?stale` first, so a blip aimed at
/// lockrun's own listing (`/?recurse`) cannot hit this one.
fn queued(api: &Api, line: &str) -> usize {
    let path = format!("/v1/kv/{}?stale&recurse", encode_key(line));
    let resp = api.get(&path);
    if resp.status == 404 {
        return 0;
    }
    assert_eq!(resp.status, 200, "GET {path}: {}", resp.text());
    resp.json()
        .as_array()
        .expect("a list")
        .iter()
        .map(KvEntry::from_json)
        .filter(|e| e.session.is_some())
        .count()
}

fn wait_queued(api: &Api, line: &str, n: usize) {
    assert!(
        wait_until(procs::deadline(), || queued(api, line) == n),
        "{n} waiters did not queue in `{line}` (queued: {})",
        queued(api, line)
    );
}

/// Starts `n` waiters one after the other, each once the previous one is in
/// the queue; each appends its number to `log` when it runs.
fn waiters(
    consul: &TestConsul,
    key: &str,
    n: usize,
    log: &std::path::Path,
    extra: &[&str],
) -> Vec<Running> {
    let api = consul.api();
    let mut runs = Vec::new();
    for i in 0..n {
        let body = format!("echo {i} >> {}", log.display());
        let mut args = vec!["--shell"];
        args.extend_from_slice(extra);
        runs.push(Running::spawn(&mut elect(consul, key, &args, &[&body])));
        wait_queued(&api, &line_of(key), i + 1);
    }
    runs
}

/// Three waiters queued in turn behind a holder: one that logs 0, one
/// with `args` that runs `true`, and one that logs 2.
fn one_between(
    consul: &TestConsul,
    key: &str,
    log: &std::path::Path,
    args: &[&str],
) -> [Running; 3] {
    let api = consul.api();
    let first = waiters(consul, key, 1, log, &[]).pop().expect("one waiter");
    let between = Running::spawn(&mut elect(consul, key, args, &["true"]));
    wait_queued(&api, &line_of(key), 2);
    let last = Running::spawn(&mut elect(
        consul,
        key,
        &["--shell"],
        &[&format!("echo 2 >> {}", log.display())],
    ));
    wait_queued(&api, &line_of(key), 3);
    [first, between, last]
}

fn order(log: &std::path::Path) -> Vec<usize> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| l.trim().parse().expect("a number"))
        .collect()
}

#[test]
fn waiters_take_the_lock_in_the_order_they_came() {
    let consul = TestConsul::start();
    let key = consul.prefix("queue-order") + "/leader";
    let dir = scratch();
    let log = dir.path().join("log");
    let holder = Holder::spawn(|child| elect(&consul, &key, &["--shell"], child));
    let runs = waiters(&consul, &key, 6, &log, &[]);
    holder.finish(&consul);
    for running in runs {
        assert_status(&running.finish(), 0, "a waiter", &consul);
    }
    assert_eq!(order(&log), (0..6).collect::<Vec<_>>());
    assert_eq!(
        queued(&consul.api(), &line_of(&key)),
        0,
        "the queue is empty"
    );
    assert!(
        consul.api().kv_list(&line_of(&key)).is_empty(),
        "no entry is left behind"
    );
}

/// A waiter that gives up (`--timeout`) leaves the queue, and the one that
/// was behind it moves up.
#[test]
fn a_waiter_that_gives_up_leaves_the_queue() {
    let consul = TestConsul::start();
    let api = consul.api();
    let key = consul.prefix("queue-give-up") + "/leader";
    let dir = scratch();
    let log = dir.path().join("log");
    let holder = Holder::spawn(|child| elect(&consul, &key, &["--shell"], child));
    let [first, quitter, last] = one_between(&consul, &key, &log, &["--timeout", "2s"]);
    assert_status(&quitter.finish(), 75, "the waiter that gave up", &consul);
    wait_queued(&api, &line_of(&key), 2);
    holder.finish(&consul);
    for running in [first, last] {
        assert_status(&running.finish(), 0, "a waiter", &consul);
    }
    assert_eq!(order(&log), vec![0, 2]);
    assert!(
        api.kv_list(&line_of(&key)).is_empty(),
        "no entry is left behind"
    );
}

/// The holder's release hands the lock to the head of the queue (#46) once
/// the head said it waits on the lock, so a head killed outright (SIGKILL)
/// after that is handed a lock nobody runs: it keeps it until its session lapses (up to twice the TTL after
/// its last renewal) and its lock-delay passes, and only then does the
/// waiter behind it run: within that bound of the kill, after the
/// holder's command, and with a larger fence. (Before the hand-off the
/// lock fell free and the waiter behind took it after the stuck check.)
#[test]
fn a_killed_head_holds_up_the_queue_only_until_its_session_lapses() {
    let consul = TestConsul::start_fast();
    let api = consul.api();
    let key = consul.prefix("queue-killed") + "/leader";
    let dir = scratch();
    let log = dir.path().join("log");
    let go = dir.path().join("go");
    // Short, where the server allows it (the emulator 1 s, real agents 10 s).
    let ttl = consul.ttl_min().max(Duration::from_secs(2));
    let ttl_arg = format!("{}ms", ttl.as_millis());
    let delay = Duration::from_secs(1);
    let run = |name: &str, body: &str| {
        let line = format!(
            "s=$(date +%s%N); {body}; echo \"{name} $s $(date +%s%N) $LOCKRUN_LOCK_INDEX\" >> {}",
            log.display()
        );
        Running::spawn(&mut elect(
            &consul,
            &key,
            &["--shell", "--ttl", &ttl_arg, "--lock-delay", "1s"],
            &[&line],
        ))
    };
    let holder = run(
        "holder",
        &format!("while [ ! -e {} ]; do sleep 0.02; done", go.display()),
    );
    assert!(
        wait_until(procs::deadline(), || api
            .kv_get(&key)
            .is_some_and(|e| e.session.is_some())),
        "the holder never took the lock"
    );
    let head = run("head", "true");
    // Once it says it waits on the lock itself: a head that never did is
    // not handed the lock (the stuck checks below are for it).
    assert!(
        wait_until(procs::deadline(), || api
            .kv_list(&line_of(&key))
            .iter()
            .any(
                |e| String::from_utf8_lossy(&e.value).contains(r#""ready":true"#)
            )),
        "the head never said it waits on the lock"
    );
    let behind = run("behind", "true");
    wait_queued(&api, &line_of(&key), 2);
    head.signal(nix::sys::signal::Signal::SIGKILL);
    let killed = Instant::now();
    let _ = head.finish();
    std::fs::write(&go, "").unwrap();
    assert_status(&holder.finish(), 0, "the holder", &consul);
    let handed = api.kv_get(&key).and_then(|e| e.session);
    assert_status(&behind.finish(), 0, "the waiter behind", &consul);
    let waited = killed.elapsed();
    let lines: Vec<Vec<String>> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    let names: Vec<&str> = lines.iter().map(|l| l[0].as_str()).collect();
    assert_eq!(names, ["holder", "behind"], "the killed head ran nothing");
    let number = |l: &[String], i: usize| l[i].parse::<u128>().unwrap();
    assert!(
        number(&lines[1], 1) > number(&lines[0], 2),
        "the waiter behind ran beside the holder"
    );
    assert!(
        number(&lines[1], 3) > number(&lines[0], 3),
        "the fence did not grow: {lines:?}"
    );
    assert!(
        handed.is_some(),
        "the lock was not handed to the killed head (free after the holder)"
    );
    // Its session lapses 2×TTL after its last renewal at most, and then its
    // lock-delay runs; some time for a loaded host.
    let bound = ttl * 2 + delay + Duration::from_secs(5);
    assert!(
        waited < bound,
        "the waiter behind the killed head ran {waited:?} after the kill (bound {bound:?})"
    );
}

/// A waiter stopped (SIGSTOP) while its session lives on becomes the head
/// when the one ahead of it takes the lock; the waiter behind it, which
/// queued when it was not the head and so blocks on its entry for a minute
/// at a time, finds it the head at the end of that minute and takes the
/// lock once it is free: a stuck head keeps a free lock waiting at most a
/// minute and Consul's jitter, not for as long as its session lives.
#[test]
fn a_stopped_waiter_that_became_the_head_keeps_a_free_lock_waiting_at_most_a_minute() {
    let consul = TestConsul::start();
    let api = consul.api();
    let key = consul.prefix("queue-stopped") + "/leader";
    let dir = scratch();
    let log = dir.path().join("log");
    let holder = Holder::spawn(|child| elect(&consul, &key, &["--shell"], child));
    // Its session outlives the test: only the check can get past it.
    let [first, stopped, last] = one_between(&consul, &key, &log, &["--ttl", "300s"]);
    stopped.signal(nix::sys::signal::Signal::SIGSTOP);
    let freed = Instant::now();
    holder.finish(&consul);
    assert_status(&first.finish(), 0, "the head", &consul);
    assert!(
        wait_until(freed + queue_watch_wait() + Duration::from_secs(20), || {
            order(&log).len() == 2
        }),
        "the waiter behind the stopped one did not run within {:?} of the lock being freed",
        freed.elapsed()
    );
    let waited = freed.elapsed();
    // Within a minute of its last look (and Consul's jitter of a
    // sixteenth), and some time for a loaded host.
    assert!(
        waited < queue_watch_wait() + queue_watch_wait() / 16 + Duration::from_secs(10),
        "the waiter behind the stopped one ran {waited:?} after the lock was freed"
    );
    assert_eq!(order(&log), vec![0, 2]);
    assert_status(&last.finish(), 0, "the waiter behind", &consul);
    assert_eq!(
        queued(&api, &line_of(&key)),
        1,
        "the stopped waiter's session lives on"
    );
    stopped.signal(nix::sys::signal::Signal::SIGKILL);
}

/// How long a waiter further back blocks on the entry ahead of its own.
fn queue_watch_wait() -> Duration {
    Duration::from_secs(60)
}

/// Semaphore waiters queue the same way, beside the prefix, and the queue
/// is no business of the slots: `lockrun leader` shows the holders only.
#[test]
fn semaphore_waiters_take_slots_in_the_order_they_came() {
    let consul = TestConsul::start();
    let api = consul.api();
    let prefix = consul.prefix("queue-sem");
    let dir = scratch();
    let log = dir.path().join("log");
    let semaphore = |extra: &[&str], child: &[&str]| {
        let mut args = vec![
            "semaphore",
            "--limit",
            "1",
            "--lock-delay",
            "0s",
            "--kill-timeout",
            "1s",
        ];
        args.extend_from_slice(extra);
        args.push(&prefix);
        args.push("--");
        args.extend_from_slice(child);
        lockrun(&consul, args)
    };
    let holder = Holder::spawn(|child| semaphore(&["--shell", "--value", "first"], child));
    let mut runs = Vec::new();
    for i in 0..4 {
        let body = format!("echo {i} >> {}", log.display());
        runs.push(Running::spawn(&mut semaphore(&["--shell"], &[&body])));
        wait_queued(&api, &format!("{prefix}.lockrun-queue/"), i + 1);
    }
    let output = crate::support::run(&mut lockrun(&consul, ["leader", prefix.as_str()]));
    assert_status(&output, 0, "leader while waiters queue", &consul);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "first",
        "the holder alone"
    );
    holder.finish(&consul);
    for running in runs {
        assert_status(&running.finish(), 0, "a waiter", &consul);
    }
    assert_eq!(order(&log), (0..4).collect::<Vec<_>>());
    assert!(
        api.kv_list(&format!("{prefix}.lockrun-queue/")).is_empty(),
        "no entry is left behind"
    );
}

/// Spans `(start, end)` in nanoseconds from lines `start NS` / `end NS`
/// that one child at a time appends.
fn spans(log: &std::path::Path) -> Vec<(u128, u128)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut spans = Vec::new();
    let mut open = None;
    for line in text.lines() {
        let (what, at) = line.split_once(' ').expect("`start NS` or `end NS`");
        let at: u128 = at.trim().parse().expect("nanoseconds");
        match what {
            "start" => open = Some(at),
            _ => spans.push((open.take().expect("a start before its end"), at)),
        }
    }
    spans
}

/// What needs the emulator itself; the re-runs against real agents skip
/// modules of this name (`versions.rs`).
mod emulator_faults {
    use super::*;

    /// Only the waiter at the head of the queue blocks on the key itself, so a
    /// release wakes one waiter; the others block on the entry ahead of theirs.
    #[test]
    fn only_the_head_of_the_queue_waits_on_the_key() {
        let consul = TestConsul::emulator_only(|b| b);
        let emu = consul.emulator().expect("emulator");
        let key = consul.prefix("queue-head") + "/leader";
        let dir = scratch();
        let log = dir.path().join("log");
        let holder = Holder::spawn(|child| elect(&consul, &key, &["--shell"], child));
        let runs = waiters(&consul, &key, 5, &log, &[]);
        let key_path = format!("/v1/kv/{key}?");
        let entry_path = format!("/v1/kv/{}", line_of(&key));
        let blocked = |path: &str| {
            emu.request_log()
                .iter()
                .filter(|r| {
                    r.status.is_none()
                        && !r.dropped
                        && r.path.starts_with(path)
                        && r.path.contains("index=")
                        && !r.path.contains("consistent")
                })
                .count()
        };
        assert!(
            wait_until(procs::deadline(), || blocked(&key_path) == 1
                && blocked(&entry_path) == 4),
            "blocking reads on the key: {} (want 1), on queue entries: {} (want 4)",
            blocked(&key_path),
            blocked(&entry_path)
        );
        holder.finish(&consul);
        for running in runs {
            assert_status(&running.finish(), 0, "a waiter", &consul);
        }
        assert_eq!(order(&log), (0..5).collect::<Vec<_>>());
    }

    /// Idle waiters ask no more of Consul than `consul lock`'s would: one
    /// read per 15 s each (its blocking read's wait) and a renewal every
    /// half TTL. Only the head (on the key, every minute) and the waiter
    /// just behind it (on the head's entry and the key, every 10 s) read
    /// within half a minute; the others block on the entry ahead for a
    /// minute.
    #[test]
    fn idle_waiters_ask_no_more_than_consul_lock() {
        use consul_emulator::Endpoint;
        const WAITERS: u64 = 10;
        const WINDOW: Duration = Duration::from_secs(30);
        let consul = TestConsul::emulator_only(|b| b);
        let emu = consul.emulator().expect("emulator");
        let key = consul.prefix("queue-idle") + "/leader";
        let dir = scratch();
        let log = dir.path().join("log");
        let holder = Holder::spawn(|child| elect(&consul, &key, &["--shell"], child));
        let runs = waiters(&consul, &key, WAITERS as usize, &log, &[]);
        let entry_path = format!("/v1/kv/{}", line_of(&key));
        let blocked_on_entries = || {
            emu.request_log()
                .iter()
                .filter(|r| r.status.is_none() && r.path.starts_with(&entry_path))
                .count()
        };
        assert!(
            wait_until(procs::deadline(), || blocked_on_entries()
                == WAITERS as usize - 1),
            "the waiters never all blocked in the queue"
        );
        emu.reset_counters();
        let started = Instant::now();
        // `consul lock`'s waiters: a blocking read of 15 s each, and
        // sessions (the holder's too) renewed every 7.5 s.
        let reads_bound = WAITERS * WINDOW.as_secs().div_ceil(15);
        let renewals_bound = (WAITERS + 1) * (WINDOW.as_secs() * 2 / 15 + 1);
        let over = wait_until(started + WINDOW, || {
            emu.request_count(Endpoint::KvGet) > reads_bound
                || emu.request_count(Endpoint::SessionRenew) > renewals_bound
        });
        let (reads, renewals, total) = (
            emu.request_count(Endpoint::KvGet),
            emu.request_count(Endpoint::SessionRenew),
            emu.request_count(Endpoint::Total),
        );
        assert!(
            !over,
            "in {:?}, {WAITERS} idle waiters read {reads} times (at most {reads_bound}) and renewed \
             {renewals} times (at most {renewals_bound})\n{}",
            started.elapsed(),
            consul.request_log_dump()
        );
        assert_eq!(
            total,
            reads + renewals,
            "idle waiters only read and renew\n{}",
            consul.request_log_dump()
        );
        assert_eq!(queued(&consul.api(), &line_of(&key)), WAITERS as usize);
        holder.finish(&consul);
        for running in runs {
            assert_status(&running.finish(), 0, "a waiter", &consul);
        }
        assert_eq!(order(&log), (0..WAITERS as usize).collect::<Vec<_>>());
    }

    /// A blip (a reset connection, a 500 during an election) while a waiter
    /// takes its place in the queue or reads it costs time, not the run.
    #[test]
    fn a_blip_in_the_queue_costs_time_not_the_run() {
        let consul = TestConsul::emulator_only(|b| b);
        let emu = consul.emulator().expect("emulator");
        for (i, kind) in [BlipKind::Drop, BlipKind::NoLeader].into_iter().enumerate() {
            let key = consul.prefix(&format!("queue-blips-{i}")) + "/leader";
            let dir = scratch();
            let log = dir.path().join("log");
            let holder = Holder::spawn(|child| elect(&consul, &key, &["--shell"], child));
            // The first waiter's transactions: its attempt on the held key,
            // then its queue entry.
            emu.blip("PUT", "/v1/txn", 2, kind);
            emu.blip("GET", &format!("/v1/kv/{}?recurse", line_of(&key)), 1, kind);
            let runs = waiters(&consul, &key, 2, &log, &[]);
            assert_eq!(emu.blips_pending(), 0, "{kind:?}: the blips never came");
            holder.finish(&consul);
            for running in runs {
                assert_status(&running.finish(), 0, "a waiter", &consul);
            }
            assert_eq!(order(&log), vec![0, 1], "{kind:?}");
        }
    }

    /// A token that may not write the queue's keys (a `deny` rule on them)
    /// turns the queue off: waiters block on the key or the slots themselves,
    /// as they did before the queue, and each still runs, one at a time; the
    /// releases, which also clear a queue entry, fall back to the plain delete.
    #[test]
    fn waiters_whose_token_may_not_queue_still_take_turns() {
        let consul = TestConsul::emulator_only(|b| {
            b.acl_token("root", AclPolicy::Full)
                .acl_token(
                    "no-queue-leader",
                    AclPolicy::DenyKeysUnder("acl/leader/.lockrun-queue/"),
                )
                .acl_token(
                    "no-queue-slots",
                    AclPolicy::DenyKeysUnder("acl/slots.lockrun-queue/"),
                )
        });
        let emu = consul.emulator().expect("emulator");
        let root = consul.api().with_token("root");
        for (what, target, token, line) in [
            (
                "elect",
                "acl/leader",
                "no-queue-leader",
                "acl/leader/.lockrun-queue/",
            ),
            (
                "semaphore",
                "acl/slots",
                "no-queue-slots",
                "acl/slots.lockrun-queue/",
            ),
        ] {
            let dir = scratch();
            let log = dir.path().join("log");
            let run = |child: &[&str]| {
                let mut args = vec![what];
                if what == "semaphore" {
                    args.extend(["--limit", "1"]);
                }
                args.extend(["--lock-delay", "0s", "--kill-timeout", "1s", "--shell"]);
                args.push(target);
                args.push("--");
                args.extend_from_slice(child);
                let mut cmd = lockrun(&consul, args);
                cmd.env("CONSUL_HTTP_TOKEN", token);
                cmd
            };
            let holder = Holder::spawn(run);
            let body = format!(
                "echo start $(date +%s%N) >> {0}; sleep 0.2; echo end $(date +%s%N) >> {0}",
                log.display()
            );
            let waiters: Vec<Running> =
                (0..3).map(|_| Running::spawn(&mut run(&[&body]))).collect();
            // Without a queue every waiter blocks on the key (or the slots'
            // listing) itself; the holder's own watch reads consistently.
            let on_target = format!("/v1/kv/{target}");
            let blocked = || {
                emu.request_log()
                    .iter()
                    .filter(|r| {
                        r.status.is_none()
                            && !r.dropped
                            && r.path.starts_with(&on_target)
                            && !r.path.contains(".lockrun-queue")
                            // The holder's read of a note `--replace` may
                            // leave it, beside the key.
                            && !r.path.contains(".lockrun-replaced")
                            && r.path.contains("index=")
                            && !r.path.contains("consistent")
                    })
                    .count()
            };
            assert!(
                wait_until(procs::deadline(), || blocked() == 3),
                "{what}: {} waiters block on `{target}` (want 3)",
                blocked()
            );
            assert!(root.kv_list(line).is_empty(), "{what}: nobody queued");
            holder.finish(&consul);
            for running in waiters {
                assert_status(&running.finish(), 0, &format!("a {what} waiter"), &consul);
            }
            let spans = spans(&log);
            assert_eq!(spans.len(), 3, "{what}: every waiter ran");
            assert_eq!(
                crate::support::max_overlap(spans),
                1,
                "{what}: one at a time"
            );
            assert!(
                root.kv_list(&format!("{target}/")).is_empty() && root.kv_get(target).is_none(),
                "{what}: every release cleared its entries"
            );
        }
    }
}
