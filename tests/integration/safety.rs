//! The safety model under faults (SPEC §3): no split brain under a
//! partition, no needless failover on brief trouble, no orphan when lockrun
//! dies, and invariants that hold under churn.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::consul::{fast, TestConsul};
use crate::link::Link;
use crate::procs::{self, pid_alive, read_pid_file, wait_until};
use crate::support::{assert_status, lockrun, scratch, script, wait_for_file, Running};

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn ms(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// A child that logs `start NAME ts` and, on SIGTERM or exit, `end NAME ts`.
fn logged_child(name: &str, log: &Path, body: &str) -> String {
    let log = log.display();
    // The trap comes first: a TERM right after `start` must still log `end`.
    format!(
        "trap 'echo \"end {name} $(date +%s%N)\" >> {log}; exit 0' TERM; \
         echo \"start {name} $(date +%s%N)\" >> {log}; \
         {body}; echo \"end {name} $(date +%s%N)\" >> {log}"
    )
}

/// `(name, start, end)` for each child in a log; a child without an end
/// line is open-ended.
fn intervals(log: &str) -> Vec<(String, u128, u128)> {
    let mut open: HashMap<String, u128> = HashMap::new();
    let mut done = Vec::new();
    for line in log.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if parts.len() != 3 {
            continue;
        }
        let ts: u128 = parts[2].parse().unwrap_or(0);
        match parts[0] {
            "start" => {
                open.insert(parts[1].to_string(), ts);
            }
            "end" => {
                if let Some(start) = open.remove(parts[1]) {
                    done.push((parts[1].to_string(), start, ts));
                }
            }
            _ => {}
        }
    }
    for (name, start) in open {
        done.push((name, start, u128::MAX));
    }
    done.sort_by_key(|(_, start, _)| *start);
    done
}

/// The most intervals that overlap at any moment.
fn max_overlap(intervals: &[(String, u128, u128)]) -> usize {
    let mut events: Vec<(u128, i32)> = Vec::new();
    for (_, start, end) in intervals {
        events.push((*start, 1));
        events.push((*end, -1));
    }
    // Ends sort before starts at the same instant.
    events.sort();
    let (mut now, mut max) = (0i32, 0i32);
    for (_, delta) in events {
        now += delta;
        max = max.max(now);
    }
    max as usize
}

#[test]
fn a_partitioned_holder_stops_its_child_before_a_rival_starts() {
    let consul = TestConsul::start_fast();
    let key = consul.prefix("safety-partition") + "/leader";
    let ttl = consul.ttl_min();
    let link = Link::new(&consul.http_addr());
    let dir = scratch();
    let log = dir.path().join("log");
    let opts = |extra: &[&str]| {
        let mut args = vec![
            "elect".to_string(),
            "--ttl".into(),
            ms(ttl),
            "--lock-delay".into(),
            "1s".into(),
            "--kill-timeout".into(),
            "500ms".into(),
            "--shell".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let holder_body = script(&logged_child(
        "holder",
        &log,
        "while :; do sleep 0.05; done",
    ));
    let mut args = opts(&[]);
    args.extend([
        key.clone(),
        "--".into(),
        holder_body,
        dir.path().display().to_string(),
    ]);
    let mut holder_cmd = lockrun(&consul, &args);
    holder_cmd.env("CONSUL_HTTP_ADDR", link.http_addr());
    let holder = Running::spawn(&mut holder_cmd);
    wait_for_file(&dir.path().join("ready"));

    let rival_body = logged_child("rival", &log, "true");
    let mut args = opts(&[]);
    args.extend([key.clone(), "--".into(), rival_body]);
    let rival = Running::spawn(&mut lockrun(&consul, &args));

    let frozen_at = now_ns();
    link.freeze();
    let output = holder.finish();
    assert_status(
        &output,
        124,
        "the partitioned holder lost the lock",
        &consul,
    );
    assert_status(&rival.finish(), 0, "the rival ran", &consul);

    let text = std::fs::read_to_string(&log).unwrap();
    let spans = intervals(&text);
    assert_eq!(spans.len(), 2, "{text}");
    assert_eq!(spans[0].0, "holder", "{text}");
    assert!(
        spans[0].2 < spans[1].1,
        "the holder's child ended before the rival's began:\n{text}"
    );
    eprintln!(
        "partition: child stopped {} ms after the link froze; rival started {} ms after (TTL {}, lock-delay 1s, kill-timeout 500ms)",
        (spans[0].2 - frozen_at) / 1_000_000,
        (spans[1].1 - frozen_at) / 1_000_000,
        ms(ttl)
    );
}

#[test]
#[cfg_attr(real_consul, ignore = "needs the emulator: fault injection")]
fn brief_trouble_does_not_stop_the_child() {
    let consul = TestConsul::emulator_only(fast);
    let emulator = consul.emulator().expect("an emulator");
    let key = consul.prefix("safety-transient") + "/leader";
    let dir = scratch();
    let body =
        script("while [ ! -e \"$1/go\" ]; do sleep 0.05; done; echo finished > \"$1/finished\"");
    let holder = Running::spawn(&mut lockrun(
        &consul,
        [
            "elect",
            "--ttl",
            "2s",
            "--lock-delay",
            "2s",
            "--kill-timeout",
            "500ms",
            "--shell",
            &key,
            "--",
            &body,
            &dir.path().display().to_string(),
        ],
    ));
    wait_for_file(&dir.path().join("ready"));
    let renewals =
        |e: &consul_emulator::Emulator| e.request_count(consul_emulator::Endpoint::SessionRenew);
    let wait_renewal = |e: &consul_emulator::Emulator| {
        let before = renewals(e);
        assert!(
            wait_until(procs::deadline(), || renewals(e) > before + 1),
            "renewals resumed"
        );
    };
    // Each fault lasts well under the 2 s lease.
    emulator.set_no_leader(true);
    std::thread::sleep(Duration::from_millis(500));
    emulator.set_no_leader(false);
    wait_renewal(emulator);
    emulator.set_drop_connections(true);
    std::thread::sleep(Duration::from_millis(500));
    emulator.set_drop_connections(false);
    wait_renewal(emulator);
    emulator.set_latency(Duration::from_millis(300));
    wait_renewal(emulator);
    emulator.set_latency(Duration::ZERO);
    std::fs::write(dir.path().join("go"), "").unwrap();
    let output = holder.finish();
    assert_status(&output, 0, "the child ran to its own end", &consul);
    assert!(dir.path().join("finished").exists());
}

#[test]
#[cfg_attr(real_consul, ignore = "needs the emulator: restarts Consul")]
fn a_restarted_consul_ends_the_lock_and_campaign_leads_again() {
    let consul = TestConsul::emulator_only(fast);
    let emulator = consul.emulator().expect("an emulator");
    let key = consul.prefix("safety-restart") + "/leader";
    let dir = scratch();
    let log = dir.path().join("log");
    let body = script(&format!(
        "echo run >> {}; while [ ! -e \"$1/go\" ]; do sleep 0.05; done",
        log.display()
    ));
    let args = |extra: &[&str]| {
        let mut v: Vec<String> = [
            "elect",
            "--ttl",
            "2s",
            "--lock-delay",
            "1s",
            "--kill-timeout",
            "500ms",
            "--shell",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v.extend([
            key.clone(),
            "--".into(),
            body.clone(),
            dir.path().display().to_string(),
        ]);
        v
    };
    // Without --campaign: the lock is gone, so is the child, exit 124.
    let holder = Running::spawn(&mut lockrun(&consul, args(&[])));
    wait_for_file(&dir.path().join("ready"));
    let pid = read_pid_file(&dir.path().join("pid"), procs::deadline());
    emulator.restart();
    assert_status(&holder.finish(), 124, "state lost", &consul);
    assert!(!pid_alive(pid));

    // With --campaign: it leads again once Consul is back.
    std::fs::remove_file(&log).unwrap();
    let holder = Running::spawn(&mut lockrun(&consul, args(&["--campaign"])));
    assert!(
        wait_until(procs::deadline(), || count_lines(&log) == 1),
        "first run"
    );
    emulator.restart();
    assert!(
        wait_until(procs::deadline(), || count_lines(&log) == 2),
        "led again after the restart"
    );
    std::fs::write(dir.path().join("go"), "").unwrap();
    assert_status(
        &holder.finish(),
        0,
        "the second run ended by itself",
        &consul,
    );
}

fn count_lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

#[test]
fn after_lockrun_is_killed_a_rival_leads_once_the_session_expires() {
    let consul = TestConsul::start_fast();
    let key = consul.prefix("safety-killed") + "/leader";
    let ttl = ms(consul.ttl_min());
    let dir = scratch();
    let log = dir.path().join("log");
    let body = script(&format!(
        "sh -c 'sleep 600; true' & echo $! > \"$1/grandchild\"; {}",
        logged_child("holder", &log, "wait")
    ));
    let mut groups = procs::KillGroupsOnDrop::new();
    // Both runs: a short TTL, so the dead holder's session expires soon.
    let elect = |child: &[&str]| {
        let mut args = vec![
            "elect",
            "--ttl",
            &ttl,
            "--lock-delay",
            "1s",
            "--kill-timeout",
            "500ms",
            "--shell",
            &key,
            "--",
        ];
        args.extend_from_slice(child);
        lockrun(&consul, args)
    };
    let dir_arg = dir.path().display().to_string();
    let holder = Running::spawn(&mut elect(&[&body, &dir_arg]));
    let child = read_pid_file(&dir.path().join("pid"), procs::deadline());
    let grandchild = read_pid_file(&dir.path().join("grandchild"), procs::deadline());
    groups.watch(
        nix::unistd::getpgid(Some(Pid::from_raw(child as i32)))
            .map(|p| p.as_raw() as u32)
            .unwrap_or(child),
    );
    holder.signal(Signal::SIGKILL);
    let _ = holder.finish();
    assert!(
        wait_until(procs::deadline(), || !pid_alive(child)
            && !pid_alive(grandchild)),
        "the child and grandchild died with lockrun"
    );
    let marker = dir.path().join("rival");
    let output = crate::support::run(&mut elect(&[&format!("touch {}", marker.display())]));
    assert_status(
        &output,
        0,
        "the rival led after the session expired",
        &consul,
    );
    assert!(marker.exists());
}

/// Many contenders, several rounds each, with children that exit at random
/// and a chaos thread that destroys holders' sessions (an operator's or a
/// failed health check's doing) and, on the emulator, SIGKILLs holders.
fn churn(kind: &str, limit: usize) {
    let consul = TestConsul::start_fast();
    let key = consul.prefix(&format!("safety-churn-{kind}"));
    let target = if kind == "elect" {
        format!("{key}/leader")
    } else {
        key.clone()
    };
    let ttl = ms(consul.ttl_min());
    let dir = scratch();
    let log = dir.path().join("log");
    let holders = dir.path().join("holders");
    std::fs::create_dir(&holders).unwrap();
    let mut workers = Vec::new();
    for worker in 0..10 {
        let consul_addr = consul.http_addr();
        let ttl_min = consul.ttl_min();
        let (log, holders, target, ttl) =
            (log.clone(), holders.clone(), target.clone(), ttl.clone());
        let kind = kind.to_string();
        workers.push(std::thread::spawn(move || {
            for round in 0..3 {
                let name = format!("w{worker}r{round}");
                let code = [0, 3, 4][(worker + round) % 3];
                let body = format!(
                    "echo $$ > {h}/{name}.pid; {}; exit {code}",
                    logged_child(
                        &name,
                        &log,
                        &format!("sleep 0.0{} & wait", (worker * 7 + round * 3) % 10)
                    ),
                    h = holders.display()
                );
                let mut args: Vec<String> = vec![kind.clone()];
                if kind == "semaphore" {
                    args.extend(["--limit".into(), limit.to_string()]);
                }
                args.extend(
                    [
                        "--ttl",
                        &ttl,
                        "--lock-delay",
                        "1s",
                        "--kill-timeout",
                        "100ms",
                        "--shell",
                        &target,
                        "--",
                        &body,
                    ]
                    .iter()
                    .map(|s| s.to_string()),
                );
                let mut cmd = crate::support::bare(&args);
                cmd.env("CONSUL_HTTP_ADDR", &consul_addr);
                cmd.env("LOCKRUN_SESSION_TTL_MIN", ms(ttl_min));
                let output = Running::spawn(&mut cmd).finish();
                let status = output.status.code();
                assert!(
                    matches!(status, Some(0 | 3 | 4 | 124) | None),
                    "unexpected status {status:?}: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
        }));
    }
    let api = consul.api();
    let mut actions = 0;
    while workers.iter().any(|w| !w.is_finished()) && actions < 6 {
        std::thread::sleep(Duration::from_millis(300));
        actions += 1;
        let sessions: Vec<String> = api
            .kv_list(&key)
            .into_iter()
            .filter_map(|e| e.session)
            .collect();
        let Some(session) = sessions.first() else {
            continue;
        };
        // A destroyed session arms the lock-delay on a lock key, which keeps a
        // rival out while the child is stopped; a semaphore slot has no such
        // delay, so there an operator's destroy is an advisory override and
        // only kills (the session then lives on until its TTL) are fair.
        let kill_now = kind == "semaphore" || actions % 2 == 0;
        if kill_now && consul.emulator().is_none() {
            continue;
        }
        if kill_now {
            // Kill a holder's lockrun outright: find its child by pid file.
            for entry in std::fs::read_dir(&holders).unwrap().flatten() {
                let Ok(pid) = std::fs::read_to_string(entry.path())
                    .unwrap_or_default()
                    .trim()
                    .parse::<i32>()
                else {
                    continue;
                };
                if !pid_alive(pid as u32) {
                    continue;
                }
                let guard = parent_of(pid);
                let Some(lockrun_pid) = guard.and_then(parent_of) else {
                    continue;
                };
                let _ = kill(Pid::from_raw(lockrun_pid), Signal::SIGKILL);
                assert!(
                    wait_until(procs::deadline(), || !pid_alive(pid as u32)),
                    "the child died with lockrun"
                );
                let name = entry
                    .path()
                    .file_stem()
                    .unwrap()
                    .to_string_lossy()
                    .to_string();
                let line = format!("end {name} {}\n", now_ns());
                use std::io::Write;
                std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&log)
                    .unwrap()
                    .write_all(line.as_bytes())
                    .unwrap();
                break;
            }
        } else {
            api.session_destroy(session);
        }
    }
    for worker in workers {
        worker.join().expect("worker");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let spans = intervals(&text);
    assert!(spans.len() >= 25, "most runs ran:\n{text}");
    let max = max_overlap(&spans);
    assert!(
        max <= limit,
        "{max} children overlapped (limit {limit}):\n{text}"
    );
}

fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn churn_never_breaks_mutual_exclusion() {
    churn("elect", 1);
}

#[test]
fn churn_never_exceeds_the_semaphore_limit() {
    churn("semaphore", 3);
}
