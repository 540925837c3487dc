//! `lockrun semaphore`: N slots, in the format `consul lock -n N` uses.

use nix::sys::signal::Signal;

use consul_emulator::BlipKind;

use crate::engines::consul::support::TestConsul;
use crate::procs::{self, pid_alive, read_pid_file, wait_until};
use crate::support::{
    assert_killed_by, assert_status, encode_key, kv_acquire, lockrun, run, scratch, script,
    script_with, sessions_named_like, wait_for_file, Holder, Running,
};

const SEMAPHORE_FLAG: u64 = 0xe0f6_9a2b_aa41_4de0;

fn semaphore(
    consul: &TestConsul,
    prefix: &str,
    limit: u32,
    extra: &[&str],
    child: &[&str],
) -> std::process::Command {
    let limit = limit.to_string();
    let mut args = vec![
        "semaphore",
        "--limit",
        &limit,
        "--lock-delay",
        "0s",
        "--kill-timeout",
        "1s",
    ];
    args.extend_from_slice(extra);
    args.push(prefix);
    args.push("--");
    args.extend_from_slice(child);
    lockrun(consul, args)
}

/// The highest number of children running at once, from a start/end log.
fn max_concurrency(log: &str) -> usize {
    let mut running = 0usize;
    let mut max = 0;
    for line in log.lines() {
        if line.starts_with("start") {
            running += 1;
            max = max.max(running);
        } else if line.starts_with("end") {
            running = running.saturating_sub(1);
        }
    }
    max
}

#[test]
fn twelve_contenders_never_exceed_three_slots_and_all_run() {
    let consul = TestConsul::start();
    let prefix = consul.prefix("sem-limit");
    let dir = scratch();
    let log = dir.path().join("log");
    let mut runs = Vec::new();
    for i in 0..12 {
        let body = format!(
            "echo start {i} >> {log}; sleep 0.2; echo end {i} >> {log}",
            log = log.display()
        );
        runs.push(Running::spawn(&mut semaphore(
            &consul,
            &prefix,
            3,
            &["--shell"],
            &[&body],
        )));
    }
    for running in runs {
        assert_status(&running.finish(), 0, "contender", &consul);
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        text.lines().filter(|l| l.starts_with("start")).count(),
        12,
        "{text}"
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with("end")).count(),
        12,
        "{text}"
    );
    let max = max_concurrency(&text);
    assert!(max <= 3, "{max} children ran at once:\n{text}");
    assert!(
        consul.api().kv_list(&prefix).is_empty(),
        "the last one out removes the record and every contender entry"
    );
}

#[test]
fn the_records_are_in_the_go_api_format() {
    let consul = TestConsul::start();
    let prefix = consul.prefix("sem-format");
    let holder = Holder::spawn(|child| {
        semaphore(&consul, &prefix, 2, &["--shell", "--value", "web-1"], child)
    });
    let api = consul.api();
    let record = api
        .kv_get(&format!("{prefix}/.lock"))
        .expect("the record exists");
    assert_eq!(record.flags, SEMAPHORE_FLAG);
    assert!(record.session.is_none(), "the record is never acquired");
    let value: serde_json::Value = serde_json::from_slice(&record.value).unwrap();
    assert_eq!(value["Limit"], 2);
    let holders = value["Holders"]
        .as_object()
        .expect("Holders in the Go map form");
    assert_eq!(holders.len(), 1);
    let (session, held) = holders.iter().next().unwrap();
    assert_eq!(held, &serde_json::Value::Bool(true));
    let contender = api
        .kv_get(&format!("{prefix}/{session}"))
        .expect("contender entry");
    assert_eq!(contender.flags, SEMAPHORE_FLAG);
    assert_eq!(contender.session.as_deref(), Some(session.as_str()));
    assert_eq!(contender.value, b"web-1");
    let info = api.session_info(session).expect("live session");
    assert_eq!(info["Behavior"], "delete", "like Go's Semaphore");
    holder.finish(&consul);
}

#[test]
fn no_wait_with_every_slot_busy_exits_75() {
    let consul = TestConsul::start();
    let prefix = consul.prefix("sem-nowait");
    let holder = Holder::spawn(|child| semaphore(&consul, &prefix, 1, &["--shell"], child));
    let output = run(&mut semaphore(
        &consul,
        &prefix,
        1,
        &["--no-wait"],
        &["true"],
    ));
    assert_status(&output, 75, "all slots busy", &consul);
    // The contender that gave up left no entry behind: only the holder's.
    let entries: Vec<String> = consul
        .api()
        .kv_list(&prefix)
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(entries.len(), 2, "record + the holder's entry: {entries:?}");
    holder.finish(&consul);
}

#[test]
fn a_limit_that_disagrees_is_refused_and_the_record_untouched() {
    let consul = TestConsul::start();
    let prefix = consul.prefix("sem-conflict");
    let holder = Holder::spawn(|child| semaphore(&consul, &prefix, 2, &["--shell"], child));
    let api = consul.api();
    let before = api.kv_get(&format!("{prefix}/.lock")).unwrap();
    let output = run(&mut semaphore(&consul, &prefix, 3, &[], &["true"]));
    assert_status(&output, 125, "limit conflict", &consul);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains('2') && stderr.contains('3'),
        "names both limits: {stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let after = api.kv_get(&format!("{prefix}/.lock")).unwrap();
    assert_eq!(
        after.modify_index, before.modify_index,
        "the record is untouched"
    );
    assert_eq!(
        api.kv_list(&prefix).len(),
        2,
        "no contender entry left behind"
    );
    holder.finish(&consul);
}

#[test]
fn the_tutorial_list_form_of_holders_is_read_and_pruned() {
    let consul = TestConsul::start();
    let prefix = consul.prefix("sem-list");
    let api = consul.api();
    // A live holder written by a tutorial-style client.
    let live = api
        .session_create(r#"{"Name":"tutorial","TTL":"30s","Behavior":"delete","LockDelay":"0s"}"#);
    assert!(kv_acquire(
        &api,
        &format!("{prefix}/{live}"),
        &live,
        SEMAPHORE_FLAG
    ));
    let record = format!(r#"{{"Limit":1,"Holders":["{live}"]}}"#);
    let path = format!(
        "/v1/kv/{}?cas=0&flags={SEMAPHORE_FLAG}",
        encode_key(&format!("{prefix}/.lock"))
    );
    assert_eq!(api.put(&path, record.as_bytes()).trimmed(), "true");
    let output = run(&mut semaphore(
        &consul,
        &prefix,
        1,
        &["--no-wait"],
        &["true"],
    ));
    assert_status(
        &output,
        75,
        "the list-form holder occupies the slot",
        &consul,
    );
    // Its session dies: the holder is pruned and the slot is ours.
    api.session_destroy(&live);
    let output = run(&mut semaphore(
        &consul,
        &prefix,
        1,
        &["--no-wait"],
        &["true"],
    ));
    assert_status(&output, 0, "a dead holder is pruned", &consul);
}

#[test]
fn an_operator_freeing_a_slot_stops_that_holder_with_124() {
    let consul = TestConsul::start();
    let prefix = consul.prefix("sem-released");
    let dir = scratch();
    let body = script("while :; do sleep 0.05; done");
    let holder = Running::spawn(&mut semaphore(
        &consul,
        &prefix,
        2,
        &["--shell"],
        &[&body, &dir.path().display().to_string()],
    ));
    wait_for_file(&dir.path().join("ready"));
    let pid = read_pid_file(&dir.path().join("pid"), procs::deadline());
    let record = consul.api().kv_get(&format!("{prefix}/.lock")).unwrap();
    let value: serde_json::Value = serde_json::from_slice(&record.value).unwrap();
    let session = value["Holders"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let output = run(&mut lockrun(
        &consul,
        ["release", "--session", &session, &prefix],
    ));
    assert_status(&output, 0, "release a slot", &consul);
    assert_status(&holder.finish(), 124, "slot lost", &consul);
    assert!(!pid_alive(pid), "the child is gone");
}

#[test]
fn a_killed_holders_slot_is_reclaimed_once_its_session_expires() {
    let consul = TestConsul::start_fast();
    let prefix = consul.prefix("sem-reclaim");
    let ttl = format!("{}ms", consul.ttl_min().as_millis());
    let dir = scratch();
    let body = script("while :; do sleep 0.05; done");
    let holder = Running::spawn(&mut semaphore(
        &consul,
        &prefix,
        1,
        &["--shell", "--ttl", &ttl, "--kill-timeout", "0s"],
        &[&body, &dir.path().display().to_string()],
    ));
    wait_for_file(&dir.path().join("ready"));
    holder.signal(Signal::SIGKILL);
    let _ = holder.finish();
    let marker = dir.path().join("second");
    let second = format!("touch {}", marker.display());
    let output = run(&mut semaphore(
        &consul,
        &prefix,
        1,
        &["--shell", "--ttl", &ttl, "--kill-timeout", "0s"],
        &[&second],
    ));
    assert_status(&output, 0, "the slot was reclaimed", &consul);
    assert!(marker.exists());
}

#[test]
fn a_contender_that_gives_up_leaves_no_entry() {
    let consul = TestConsul::start();
    let prefix = consul.prefix("sem-giveup");
    let holder = Holder::spawn(|child| semaphore(&consul, &prefix, 1, &["--shell"], child));
    let api = consul.api();
    // One gives up on --timeout, one on SIGINT.
    let output = run(&mut semaphore(
        &consul,
        &prefix,
        1,
        &["--timeout", "300ms"],
        &["true"],
    ));
    assert_status(&output, 75, "timeout", &consul);
    let waiter = Running::spawn(&mut semaphore(&consul, &prefix, 1, &[], &["true"]));
    // A waiter writes nothing until a slot is free: its session shows it.
    assert!(
        wait_until(procs::deadline(), || sessions_named_like(&api, &prefix)
            == 2),
        "the waiter created its session"
    );
    waiter.signal(Signal::SIGINT);
    assert_killed_by(
        &waiter.finish(),
        Signal::SIGINT,
        "SIGINT while waiting",
        &consul,
    );
    assert_eq!(api.kv_list(&prefix).len(), 2, "record + holder only");
    holder.finish(&consul);
}

/// A TTL chosen without a kill timeout shrinks the default grace period to
/// fit the budget instead of refusing the run, and says so at `-v`.
#[test]
fn a_short_ttl_shrinks_the_default_kill_timeout() {
    let consul = TestConsul::start();
    let prefix = consul.prefix("sem-shrunk-grace");
    let output = run(&mut lockrun(
        &consul,
        [
            "-v",
            "semaphore",
            "--limit",
            "2",
            "--ttl",
            "10s",
            prefix.as_str(),
            "--",
            "true",
        ],
    ));
    assert_status(&output, 0, "the child's status", &consul);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // 10 s TTL: 3.33 s of room minus a 1.77 s margin (16.7 % for the
    // clocks, 1 % for late timers).
    assert!(
        stderr.contains("--kill-timeout defaults to 1500ms to fit --ttl 10s"),
        "{stderr}"
    );
}

/// SPEC §7 for slots: every new holder of a one-slot semaphore gets a
/// greater `LOCKRUN_LOCK_INDEX`, after clean exits, a holder whose session
/// was destroyed under it, and a `consul lock -n` holder.
#[test]
fn the_fencing_number_grows_with_every_slot_holder() {
    let consul = TestConsul::start();
    let prefix = consul.prefix("sem-fencing");
    let api = consul.api();
    let dir = scratch();
    let out = dir.path().join("index");
    let body = format!("echo \"$LOCKRUN_LOCK_INDEX\" >> {}", out.display());
    let run_once = || {
        let output = run(&mut semaphore(&consul, &prefix, 1, &["--shell"], &[&body]));
        assert_status(&output, 0, "a clean run", &consul);
    };
    run_once();
    run_once();
    let held = scratch();
    let holder = Running::spawn(&mut semaphore(
        &consul,
        &prefix,
        1,
        &["--shell"],
        &[
            &crate::support::script_with(
                &format!("echo \"$LOCKRUN_LOCK_INDEX\" >> {};", out.display()),
                "while :; do sleep 0.05; done",
            ),
            &held.path().display().to_string(),
        ],
    ));
    wait_for_file(&held.path().join("ready"));
    for session in api.session_list() {
        if session["Name"]
            .as_str()
            .is_some_and(|n| n.ends_with(&*prefix))
        {
            api.session_destroy(session["ID"].as_str().unwrap());
        }
    }
    assert_status(&holder.finish(), 124, "the destroyed holder", &consul);
    run_once();
    // A `consul lock -n 1` holder: its contender entry, then the record
    // rewritten with it as the one holder, then its entry deleted on exit.
    let go = api.session_create(r#"{"LockDelay":"0s","TTL":"10s","Behavior":"delete"}"#);
    assert!(kv_acquire(
        &api,
        &format!("{prefix}/{go}"),
        &go,
        SEMAPHORE_FLAG
    ));
    let record = api.kv_get(&format!("{prefix}/.lock"));
    let cas = record.map_or(0, |r| r.modify_index);
    let body = format!(r#"{{"Limit":1,"Holders":{{"{go}":true}}}}"#);
    let path = format!(
        "/v1/kv/{}?cas={cas}&flags={SEMAPHORE_FLAG}",
        encode_key(&format!("{prefix}/.lock"))
    );
    assert_eq!(
        api.put(&path, body).trimmed(),
        "true",
        "the Go holder joined"
    );
    api.kv_delete(&format!("{prefix}/{go}"));
    api.session_destroy(&go);
    run_once();
    let seen: Vec<u64> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().expect("a number"))
        .collect();
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "LOCKRUN_LOCK_INDEX must strictly increase: {seen:?}"
    );
}

/// What needs the emulator itself; the re-runs against real agents skip
/// modules of this name (`versions.rs`).
mod emulator_faults {
    use super::*;

    /// SPEC §7: every admission gets a number of its own. Another admission
    /// lands just after ours, before we could look at the record again (one
    /// failed look makes that gap wide, if the holder looks at all): the number
    /// must still be our own admission's, below the newcomer's.
    #[test]
    fn a_slot_holder_is_numbered_by_its_own_admission() {
        let consul = TestConsul::emulator_only(|b| b);
        let emu = consul.emulator().expect("emulator");
        let prefix = consul.prefix("sem-own-number");
        let api = consul.api();
        emu.blip(
            "GET",
            &format!("/v1/kv/{prefix}/?recurse&consistent"),
            1,
            BlipKind::Drop,
        );
        let dir = scratch();
        let body = script_with(
            "echo \"$LOCKRUN_LOCK_INDEX\" > \"$1/index\";",
            "while [ ! -e \"$1/go\" ]; do sleep 0.05; done",
        );
        let arg = dir.path().display().to_string();
        let holder = Running::spawn(&mut semaphore(
            &consul,
            &prefix,
            2,
            &["--shell"],
            &[&body, &arg],
        ));
        // Its admission: the write that puts it in the record's holders.
        let admitted = emu.wait_for_request(procs::PATIENCE, |r| {
            r.method == "PUT"
                && r.status == Some(200)
                && (r.path.starts_with("/v1/txn")
                    || r.path
                        .contains(&format!("{}?cas=", encode_key(&format!("{prefix}/.lock")))))
        });
        assert!(admitted.is_some(), "the holder never joined");
        // A Go API client takes the second slot at once.
        let go = api.session_create(r#"{"LockDelay":"0s","TTL":"10s","Behavior":"delete"}"#);
        assert!(kv_acquire(
            &api,
            &format!("{prefix}/{go}"),
            &go,
            SEMAPHORE_FLAG
        ));
        let record = api
            .kv_get(&format!("{prefix}/.lock"))
            .expect("the holder wrote the record");
        let mut holders: serde_json::Value = serde_json::from_slice(&record.value).unwrap();
        holders["Holders"][&go] = serde_json::Value::Bool(true);
        let path = format!(
            "/v1/kv/{}?cas={}&flags={SEMAPHORE_FLAG}",
            encode_key(&format!("{prefix}/.lock")),
            record.modify_index
        );
        assert_eq!(
            api.put(&path, holders.to_string()).trimmed(),
            "true",
            "the Go client joined"
        );
        let go_number = api
            .kv_get(&format!("{prefix}/.lock"))
            .expect("the record")
            .modify_index;
        wait_for_file(&dir.path().join("ready"));
        let number: u64 = std::fs::read_to_string(dir.path().join("index"))
            .unwrap()
            .trim()
            .parse()
            .expect("a number");
        api.kv_delete(&format!("{prefix}/{go}"));
        api.session_destroy(&go);
        std::fs::write(dir.path().join("go"), "").unwrap();
        assert_status(&holder.finish(), 0, "the holder", &consul);
        assert!(
            number < go_number,
            "the holder admitted first got LOCKRUN_LOCK_INDEX {number}, the Go client after it {go_number}"
        );
    }
}
