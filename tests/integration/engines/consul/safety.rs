//! The safety model under faults (SPEC §3): no split brain under a
//! partition, no needless failover on brief trouble, no orphan when lockrun
//! dies, and invariants that hold under churn.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::engines::consul::support::{fast, TestConsul};
use crate::link::Link;
use crate::procs::{self, pid_alive, read_pid_file, wait_until};
use crate::support::{
    assert_status, lockrun, max_overlap, now_ns, scratch, script, wait_for_file, Running,
};

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
    // The lock-delay must leave the child a grace period after a destroyed
    // session (lock-delay minus the budget's margin for it), so that its
    // TERM trap logs its end: with a real agent's 10 s TTL, 1 s leaves none,
    // the child is SIGKILLed unlogged, and its span would never close.
    let lock_delay = if consul.emulator().is_some() {
        "1s"
    } else {
        "3s"
    };
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
                        lock_delay,
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
    let max = max_overlap(spans.iter().map(|(_, start, end)| (*start, *end)));
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

/// A child that ignores SIGTERM and logs `beat NAME ts` every 20 ms until
/// it is killed, so its last beat bounds the moment it died.
fn stubborn_child(name: &str, log: &Path) -> String {
    let log = log.display();
    crate::support::script_with(
        "trap '' TERM;",
        &format!("while :; do echo \"beat {name} $(date +%s%N)\" >> {log}; sleep 0.02; done"),
    )
}

/// A rival child that logs its start and whether the holder's child (pid
/// in `pidfile`) still runs at that moment (a zombie does not run).
fn rival_child(log: &Path, pidfile: &Path) -> String {
    let (log, pidfile) = (log.display(), pidfile.display());
    format!(
        "echo \"start rival $(date +%s%N)\" >> {log}; \
         p=$(cat {pidfile}); \
         if [ -r /proc/$p/stat ] && ! grep -q '^[0-9]* (.*) Z' /proc/$p/stat; then \
           echo \"overlap rival $(date +%s%N)\" >> {log}; fi"
    )
}

/// The holder's session is destroyed (an operator, or a graceful agent
/// stop) while its child ignores SIGTERM: Consul arms only the lock-delay,
/// so the child must be SIGKILLed within it, not after `--kill-timeout`.
fn destroyed_session_kills_before_the_rival_runs(kind: &str) {
    let consul = TestConsul::start();
    let name = consul.prefix(&format!("safety-destroy-{kind}"));
    let api = consul.api();
    let dir = scratch();
    let log = dir.path().join("log");
    // 3 s of grace fits the TTL budget but not the 2 s lock-delay (and a
    // semaphore slot has none): only the loss-bounded grace keeps order.
    let args = |child: Vec<String>| {
        let mut v: Vec<String> = match kind {
            "elect" => vec!["elect".into(), name.clone() + "/leader"],
            _ => vec![
                "semaphore".into(),
                "--limit".into(),
                "1".into(),
                name.clone(),
            ],
        };
        // A slot's grace must fit its TTL: 4 s needs 30 s, and is long
        // enough to tell a SIGKILL at once from one after the grace.
        let (ttl, kill) = if kind == "elect" {
            ("10s", "3s")
        } else {
            ("30s", "4s")
        };
        v.extend(
            [
                "--ttl",
                ttl,
                "--lock-delay",
                "2s",
                "--kill-timeout",
                kill,
                "--shell",
                "--",
            ]
            .map(String::from),
        );
        v.extend(child);
        v
    };
    let holder = Running::spawn(&mut lockrun(
        &consul,
        args(vec![
            stubborn_child("holder", &log),
            dir.path().display().to_string(),
        ]),
    ));
    wait_for_file(&dir.path().join("ready"));
    let session = api
        .session_list()
        .into_iter()
        .find(|s| {
            s["Name"]
                .as_str()
                .is_some_and(|n| n.ends_with(&*name) || n.ends_with(&(name.clone() + "/leader")))
        })
        .and_then(|s| s["ID"].as_str().map(str::to_string))
        .expect("the holder's session");
    let rival = Running::spawn(&mut lockrun(
        &consul,
        args(vec![rival_child(&log, &dir.path().join("pid"))]),
    ));
    // The rival waits with a session of its own before we strike.
    assert!(
        wait_until(procs::deadline(), || {
            crate::support::sessions_named_like(&api, &name)
                + crate::support::sessions_named_like(&api, &(name.clone() + "/leader"))
                >= 2
        }),
        "the rival is waiting"
    );
    let destroyed_at = now_ns();
    api.session_destroy(&session);
    assert_status(&holder.finish(), 124, "the holder lost the lock", &consul);
    assert_status(&rival.finish(), 0, "the rival ran", &consul);

    let text = std::fs::read_to_string(&log).unwrap();
    let last_beat = text
        .lines()
        .filter(|l| l.starts_with("beat holder"))
        .filter_map(|l| l.split_whitespace().nth(2)?.parse::<u128>().ok())
        .max()
        .expect("the holder's child beat");
    let rival_start = text
        .lines()
        .find(|l| l.starts_with("start rival"))
        .and_then(|l| l.split_whitespace().nth(2)?.parse::<u128>().ok())
        .expect("the rival's child started");
    if kind == "elect" {
        assert!(
            !text.contains("overlap"),
            "the holder's child still ran when the rival's started:\n{text}"
        );
        assert!(
            last_beat < rival_start,
            "the holder's child beat after the rival's started:\n{text}"
        );
    } else {
        assert!(
            last_beat.saturating_sub(destroyed_at) < 2_000_000_000,
            "the slot holder's child was not killed at once, but {} ms after the destroy:\n{text}",
            last_beat.saturating_sub(destroyed_at) / 1_000_000
        );
    }
    eprintln!(
        "{kind} destroy: child's last beat {} ms after the destroy; rival started {} ms after",
        (last_beat.saturating_sub(destroyed_at)) / 1_000_000,
        (rival_start - destroyed_at) / 1_000_000,
    );
}

#[test]
fn a_destroyed_session_kills_a_stubborn_child_before_the_rival_leads() {
    destroyed_session_kills_before_the_rival_runs("elect");
}

/// A slot has no lock-delay: the rival may take it the moment the session
/// is gone, so what lockrun promises is a SIGKILL at once, with no grace;
/// whether it lands before the rival's child starts is a race of one
/// wake-up against three requests and a process start (docs/consul.md),
/// which a loaded host can lose by milliseconds, and so is not asserted.
#[test]
fn a_destroyed_session_kills_a_stubborn_slot_holder_at_once() {
    destroyed_session_kills_before_the_rival_runs("semaphore");
}

/// The holder's agent dies (cut off from the servers, its checks
/// critical): Consul invalidates the health-checked session at once, and a
/// rival leads after only the lock-delay. lockrun, hearing nothing, must
/// have stopped the child within the lock-delay of its last renewal. We
/// bind the session to a TTL check of our own and fail it through the agent
/// API, which works on the emulator and a real agent alike.
#[test]
fn a_failed_check_on_a_cut_off_holder_stops_the_child_before_the_rival_leads() {
    let consul = TestConsul::start();
    let api = consul.api();
    let check = consul.prefix("check").replace('/', "-");
    let registered = api.put(
        "/v1/agent/check/register",
        format!(r#"{{"ID":"{check}","Name":"{check}","TTL":"1h","Status":"passing"}}"#),
    );
    assert_eq!(registered.status, 200, "{}", registered.text());
    let node = api.node_name();
    assert!(
        wait_until(procs::deadline(), || {
            api.get(&format!("/v1/health/node/{node}"))
                .json()
                .as_array()
                .is_some_and(|l| {
                    l.iter()
                        .any(|c| c["CheckID"] == check.as_str() && c["Status"] == "passing")
                })
        }),
        "the check reached the catalog"
    );
    let key = consul.prefix("safety-check") + "/leader";
    let link = Link::new(&consul.http_addr());
    let dir = scratch();
    let log = dir.path().join("log");
    let args = |extra: &[&str], child: &[String]| {
        let mut v: Vec<String> = [
            "elect",
            "--ttl",
            "10s",
            "--lock-delay",
            "5s",
            "--kill-timeout",
            "1s",
            "--shell",
        ]
        .map(String::from)
        .to_vec();
        v.extend(extra.iter().map(|s| s.to_string()));
        v.push(key.clone());
        v.push("--".into());
        v.extend_from_slice(child);
        v
    };
    let holder_body = script(&logged_child(
        "holder",
        &log,
        "while :; do sleep 0.05; done",
    ));
    let mut holder_cmd = lockrun(
        &consul,
        args(
            &["--node-checks", &check],
            &[holder_body, dir.path().display().to_string()],
        ),
    );
    holder_cmd.env("CONSUL_HTTP_ADDR", link.http_addr());
    let holder = Running::spawn(&mut holder_cmd);
    wait_for_file(&dir.path().join("ready"));
    let rival = Running::spawn(&mut lockrun(
        &consul,
        args(&[], &[logged_child("rival", &log, "true")]),
    ));
    assert!(
        wait_until(procs::deadline(), || {
            crate::support::sessions_named_like(&consul.api(), &key) >= 2
        }),
        "the rival is waiting"
    );
    let failed_at = now_ns();
    link.freeze();
    let failed = api.put(&format!("/v1/agent/check/fail/{check}"), "");
    assert_eq!(failed.status, 200, "{}", failed.text());
    assert_status(&holder.finish(), 124, "the cut-off holder", &consul);
    assert_status(&rival.finish(), 0, "the rival ran", &consul);
    api.put(&format!("/v1/agent/check/deregister/{check}"), "");
    let text = std::fs::read_to_string(&log).unwrap();
    let spans = intervals(&text);
    assert_eq!(spans.len(), 2, "{text}");
    assert_eq!(spans[0].0, "holder", "{text}");
    assert!(
        spans[0].2 < spans[1].1,
        "the holder's child ended before the rival's began:\n{text}"
    );
    eprintln!(
        "check failure: child stopped {} ms after; rival started {} ms after (TTL 10s, lock-delay 5s, kill-timeout 1s)",
        spans[0].2.saturating_sub(failed_at) / 1_000_000,
        (spans[1].1 - failed_at) / 1_000_000,
    );
}

/// A server before 1.7 ignores `ServiceChecks`: the session it creates is
/// not the one the budget is for, so lockrun refuses to run (125), destroys
/// it, and writes no lock.
#[test]
fn a_server_that_drops_checks_is_refused() {
    let consul = TestConsul::emulator_only(|b| b.pre_1_7());
    let api = consul.api();
    let key = consul.prefix("safety-old-server") + "/leader";
    let output = crate::support::run(&mut lockrun(
        &consul,
        [
            "elect",
            "--service-checks",
            "web",
            key.as_str(),
            "--",
            "true",
        ],
    ));
    assert_status(&output, 125, "dropped checks are refused", &consul);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("predates 1.7"), "{stderr}");
    assert!(api.session_list().is_empty(), "the session was destroyed");
    assert!(api.kv_get(&key).is_none(), "no lock was written");
    // Without checks it runs, on a session with none: `Checks: []` is the
    // field such a server honours.
    let dir = scratch();
    let body = format!(
        "echo \"$LOCKRUN_SESSION\" > {}/session; sleep 30",
        dir.path().display()
    );
    let running = Running::spawn(&mut lockrun(
        &consul,
        ["elect", "--shell", key.as_str(), "--", &body],
    ));
    assert!(wait_until(procs::deadline(), || {
        std::fs::read_to_string(dir.path().join("session")).is_ok_and(|s| !s.trim().is_empty())
    }));
    // The check failing must not touch a session bound to none.
    consul.emulator().unwrap().fail_check("serfHealth");
    let session = std::fs::read_to_string(dir.path().join("session")).unwrap();
    assert!(
        api.session_info(session.trim()).is_some(),
        "a session without checks survives a failing serfHealth"
    );
    running.signal(Signal::SIGTERM);
    let _ = running.finish();
}

/// An operator's `lockrun release` arms no lock-delay and leaves the
/// session alive: the child keeps its full, documented grace period, unlike
/// a loss Consul reports.
#[test]
fn an_operators_release_keeps_the_full_grace_period() {
    let consul = TestConsul::start();
    let key = consul.prefix("safety-release-grace") + "/leader";
    let dir = scratch();
    let log = dir.path().join("log");
    let holder = Running::spawn(&mut lockrun(
        &consul,
        [
            "elect",
            "--lock-delay",
            "0s",
            "--kill-timeout",
            "2s",
            "--shell",
            key.as_str(),
            "--",
            &stubborn_child("holder", &log),
            &dir.path().display().to_string(),
        ],
    ));
    wait_for_file(&dir.path().join("ready"));
    let released_at = now_ns();
    let released = crate::support::run(&mut lockrun(&consul, ["release", key.as_str()]));
    assert_status(&released, 0, "lockrun release", &consul);
    assert_status(&holder.finish(), 124, "the released holder", &consul);
    let text = std::fs::read_to_string(&log).unwrap();
    let last_beat = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2)?.parse::<u128>().ok())
        .max()
        .unwrap();
    let lived = (last_beat.saturating_sub(released_at)) / 1_000_000;
    // SIGKILL comes 2 s after SIGTERM; beats are 20 ms apart.
    assert!(
        lived >= 1_500,
        "the child was killed {lived} ms after the release, before its grace period ended"
    );
}

/// Issue #11: `lockrun -vv` with stderr into a pipe nobody reads blocked its
/// only thread in a log write; renewals stopped, a rival ran beside the old
/// child. A stalled stderr must cost log lines, never the lock.
#[test]
fn a_stalled_stderr_costs_log_lines_not_the_lock() {
    let consul = TestConsul::start_fast();
    let key = consul.prefix("safety-stalled-stderr") + "/leader";
    let ttl = consul.ttl_min();
    let dir = scratch();
    let log = dir.path().join("log");
    let elect = |verbose: &str, timeout: Option<String>, child: &[String]| {
        let mut args = vec![
            verbose.to_string(),
            "elect".into(),
            "--ttl".into(),
            ms(ttl),
            "--lock-delay".into(),
            "1s".into(),
            "--kill-timeout".into(),
            "500ms".into(),
        ];
        if let Some(timeout) = timeout {
            args.extend(["--timeout".into(), timeout]);
        }
        args.extend(["--shell".into(), key.clone(), "--".into()]);
        args.extend(child.iter().cloned());
        lockrun(&consul, args)
    };
    // The child fills the pipe lockrun logs into and keeps it full, so
    // every later line lockrun writes would block.
    let holder_body = script(&logged_child(
        "holder",
        &log,
        "head -c 4194304 /dev/zero >&2 & while :; do sleep 0.05; done",
    ));
    let (unread, stderr) = nix::unistd::pipe().unwrap();
    let holder = Running::spawn_with_stderr(
        &mut elect(
            "-vv",
            None,
            &[holder_body, dir.path().display().to_string()],
        ),
        stderr.into(),
    );
    wait_for_file(&dir.path().join("ready"));

    // Several TTLs: a lockrun that stopped renewing loses the session
    // within two, and the rival would run.
    let patience = ttl * 4 + Duration::from_secs(1);
    let rival = Running::spawn(&mut elect(
        "-v",
        Some(ms(patience)),
        &[logged_child("rival", &log, "true")],
    ));
    assert_status(
        &rival.finish(),
        75,
        "the rival never got the lock while the holder's stderr was stalled",
        &consul,
    );
    holder.signal(Signal::SIGTERM);
    let output = holder.finish();
    assert_ne!(output.status.code(), Some(124), "the holder kept its lock");
    drop(unread);

    let text = std::fs::read_to_string(&log).unwrap();
    let spans = intervals(&text);
    assert_eq!(spans.len(), 1, "only the holder's child ran:\n{text}");
    assert_eq!(spans[0].0, "holder", "{text}");
}

/// Issue #11: a SIGSTOPped lockrun (a debugger, a cgroup freezer, a starved
/// host) renews nothing and stops nothing. The guard holds the last
/// deadline lockrun gave it and stops the child itself before a rival
/// could lead; lockrun, continued, finds the lock lost.
#[test]
fn a_stopped_lockrun_still_stops_its_child_before_a_rival_starts() {
    stopped_lockrun(false);
}

/// The same with lockrun's stderr (which the guard and the child share) a
/// pipe nobody reads: the guard must not stall on it either.
#[test]
fn a_stopped_lockrun_with_a_stalled_stderr_still_stops_its_child() {
    stopped_lockrun(true);
}

fn stopped_lockrun(stall_stderr: bool) {
    let consul = TestConsul::start_fast();
    let key = consul.prefix("safety-sigstop") + "/leader";
    let ttl = consul.ttl_min();
    let dir = scratch();
    let log = dir.path().join("log");
    let elect = |child: &[String]| {
        let mut args = vec![
            "elect".to_string(),
            "--ttl".into(),
            ms(ttl),
            "--lock-delay".into(),
            "1s".into(),
            "--kill-timeout".into(),
            "500ms".into(),
            "--shell".into(),
            key.clone(),
            "--".into(),
        ];
        args.extend(child.iter().cloned());
        lockrun(&consul, args)
    };
    // With `stall_stderr`, the child fills the stderr pipe it shares with
    // lockrun and the guard, and keeps it full; its shell then writes its
    // own stderr elsewhere, since a shell reports on stderr a command that
    // a signal killed, and would block there before logging its end.
    let fill = if stall_stderr {
        "head -c 4194304 /dev/zero >&2 & exec 2>/dev/null; "
    } else {
        ""
    };
    let holder_body = script(&logged_child(
        "holder",
        &log,
        &format!("{fill}while :; do sleep 0.05; done"),
    ));
    let (unread, stderr) = nix::unistd::pipe().unwrap();
    let stderr = if stall_stderr {
        stderr.into()
    } else {
        std::process::Stdio::piped()
    };
    let holder = Running::spawn_with_stderr(
        &mut elect(&[holder_body, dir.path().display().to_string()]),
        stderr,
    );
    let child = read_pid_file(&dir.path().join("pid"), procs::deadline());
    wait_for_file(&dir.path().join("ready"));
    let rival = Running::spawn(&mut elect(&[logged_child("rival", &log, "true")]));

    let stopped_at = now_ns();
    holder.signal(Signal::SIGSTOP);
    assert_status(&rival.finish(), 0, "the rival ran", &consul);
    // Nothing of the holder's may run once the rival has: its child is gone
    // while lockrun is still stopped.
    assert!(
        !pid_alive(child),
        "the holder's child died while lockrun was stopped"
    );
    holder.signal(Signal::SIGCONT);
    let output = holder.finish();
    drop(unread);
    assert_status(
        &output,
        124,
        "the continued holder found its lock lost",
        &consul,
    );

    let text = std::fs::read_to_string(&log).unwrap();
    let spans = intervals(&text);
    assert_eq!(spans.len(), 2, "{text}");
    assert_eq!(spans[0].0, "holder", "{text}");
    assert!(
        spans[0].2 < spans[1].1,
        "the holder's child ended before the rival's began:\n{text}"
    );
    eprintln!(
        "sigstop (stalled stderr: {stall_stderr}): child stopped {} ms after SIGSTOP; rival started {} ms after (TTL {}, lock-delay 1s, kill-timeout 500ms)",
        (spans[0].2 - stopped_at) / 1_000_000,
        (spans[1].1 - stopped_at) / 1_000_000,
        ms(ttl)
    );
}

/// What needs the emulator itself; the re-runs against real agents skip
/// modules of this name (`versions.rs`).
mod emulator_faults {
    use super::*;

    #[test]
    fn brief_trouble_does_not_stop_the_child() {
        let consul = TestConsul::emulator_only(fast);
        let emulator = consul.emulator().expect("an emulator");
        let key = consul.prefix("safety-transient") + "/leader";
        let dir = scratch();
        let body = script(
            "while [ ! -e \"$1/go\" ]; do sleep 0.05; done; echo finished > \"$1/finished\"",
        );
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
        let renewals = |e: &consul_emulator::Emulator| {
            e.request_count(consul_emulator::Endpoint::SessionRenew)
        };
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
}
