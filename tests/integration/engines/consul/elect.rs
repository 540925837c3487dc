//! `lockrun elect`: the leader lock end to end, the real binary against the
//! Consul under test.

use nix::sys::signal::Signal;

use crate::engines::consul::support::TestConsul;
use crate::procs::{self, wait_until};
use crate::support::{
    assert_killed_by, assert_status, elect, kv_acquire, kv_release, lockrun, run, scratch, script,
    script_with, sessions_named_like, wait_for_file, Holder, Running,
};

const LOCK_FLAG: u64 = 0x2ddc_cbc0_58a5_0c18;

#[test]
fn runs_the_child_passes_its_status_and_cleans_up() {
    let consul = TestConsul::start();
    let key = consul.prefix("elect-status") + "/leader";
    let dir = scratch();
    let body = format!(
        "echo \"$LOCKRUN_SESSION\" > {0}/session; exit 3",
        dir.path().display()
    );
    let output = run(&mut elect(&consul, &key, &["--shell"], &[&body]));
    assert_status(&output, 3, "the child's status", &consul);
    let session = std::fs::read_to_string(dir.path().join("session")).unwrap();
    let api = consul.api();
    assert!(
        api.kv_get(&key).is_none(),
        "the lock key is removed after the run"
    );
    assert!(
        api.session_info(session.trim()).is_none(),
        "the session is destroyed after the run"
    );
}

#[test]
fn the_child_sees_the_lock_and_consul_shows_the_value() {
    let consul = TestConsul::start();
    let key = consul.prefix("elect-env") + "/leader";
    let dir = scratch();
    let body = format!(
        "env | grep -E '^(LOCKRUN_|CONSUL_LOCK_HELD)' | sort > {0}/env; {1}",
        dir.path().display(),
        script("while [ ! -e \"$1/go\" ]; do sleep 0.05; done")
    );
    let running = Running::spawn(&mut elect(
        &consul,
        &key,
        &["--shell", "--value", "primary-at-10.0.0.7"],
        &[&body, &dir.path().display().to_string()],
    ));
    wait_for_file(&dir.path().join("ready"));
    let entry = consul
        .api()
        .kv_get(&key)
        .expect("the lock key exists while held");
    assert_eq!(entry.value, b"primary-at-10.0.0.7");
    assert_eq!(entry.flags, LOCK_FLAG, "Go API LockFlagValue");
    let session = entry.session.clone().expect("held by a session");
    let env = std::fs::read_to_string(dir.path().join("env")).unwrap();
    assert!(env.contains("CONSUL_LOCK_HELD=true"), "{env}");
    assert!(env.contains(&format!("LOCKRUN_KEY={key}")), "{env}");
    assert!(env.contains(&format!("LOCKRUN_SESSION={session}")), "{env}");
    assert!(
        env.contains(&format!("LOCKRUN_LOCK_INDEX={}", entry.modify_index)),
        "{env}"
    );
    std::fs::write(dir.path().join("go"), "").unwrap();
    let output = running.finish();
    assert_status(&output, 0, "child exits 0", &consul);
}

#[test]
fn no_wait_on_a_held_lock_exits_75_and_leaves_nothing_behind() {
    let consul = TestConsul::start();
    let key = consul.prefix("elect-nowait") + "/leader";
    let holder = Holder::spawn(|child| elect(&consul, &key, &["--shell"], child));
    let before = consul.api().kv_get(&key).expect("held");

    let marker = holder.dir().join("second-ran");
    let second = format!("touch {}", marker.display());
    let output = run(&mut elect(
        &consul,
        &key,
        &["--no-wait", "--shell"],
        &[&second],
    ));
    assert_status(&output, 75, "--no-wait on a held lock", &consul);
    let output = run(&mut elect(
        &consul,
        &key,
        &["--no-wait", "--shell", "--conflict-exit-code", "9"],
        &[&second],
    ));
    assert_status(&output, 9, "--conflict-exit-code", &consul);
    // flock's idiom for "a conflict is fine", for cron: -E 0.
    let output = run(&mut elect(
        &consul,
        &key,
        &["-n", "-E", "0", "--shell"],
        &[&second],
    ));
    assert_status(&output, 0, "-E 0 on a held lock", &consul);
    assert!(!marker.exists(), "the second child never ran");
    let api = consul.api();
    assert_eq!(
        sessions_named_like(&api, &key),
        1,
        "the runs that gave up left no session behind"
    );
    let after = api.kv_get(&key).expect("still held");
    assert_eq!(after.session, before.session, "the holder is untouched");
    assert_eq!(after.modify_index, before.modify_index);
    holder.finish(&consul);
}

#[test]
fn an_operator_release_stops_the_child_and_exits_124() {
    let consul = TestConsul::start();
    let key = consul.prefix("elect-released") + "/leader";
    let dir = scratch();
    let body = script_with(
        &format!(
            "trap 'echo stopped > {0}/stopped; exit 0' TERM;",
            dir.path().display()
        ),
        "while :; do sleep 0.05; done",
    );
    let running = Running::spawn(&mut elect(
        &consul,
        &key,
        &["--shell"],
        &[&body, &dir.path().display().to_string()],
    ));
    wait_for_file(&dir.path().join("ready"));
    let output = run(&mut lockrun(&consul, ["release", key.as_str()]));
    assert_status(&output, 0, "release", &consul);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("released"), "{stdout}");
    let output = running.finish();
    assert_status(&output, 124, "lock lost", &consul);
    assert!(dir.path().join("stopped").exists(), "the child got SIGTERM");
}

/// Consul's layout for a key with a URL's special characters: the exact key
/// and its `/.lock`, nothing else (the key held, shown and kept apart on
/// every engine: `lifecycle::keys_with_special_characters_work_and_inject_nothing`).
#[test]
fn a_special_key_writes_only_itself_and_its_lock_key() {
    let consul = TestConsul::start();
    let prefix = consul.prefix("elect-keys");
    let key = prefix.clone() + "/a?b c#d&acquire=x/ü";
    let holder = Holder::spawn(|child| elect(&consul, &key, &["--shell"], child));
    let entry = consul.api().kv_get(&key).expect("the exact key is held");
    assert!(entry.session.is_some());
    let keys: Vec<String> = consul
        .api()
        .kv_list(&prefix)
        .into_iter()
        .map(|e| e.key)
        .collect();
    // `KEY/.lock` is the writer's while it holds, so that `consul lock KEY`
    // waits on it (issue #42).
    assert_eq!(
        keys,
        vec![key.clone(), format!("{key}/.lock")],
        "no other key was written"
    );
    holder.finish(&consul);
}

#[test]
fn a_lock_held_by_a_go_api_client_is_respected() {
    let consul = TestConsul::start();
    let key = consul.prefix("elect-interop") + "/.lock";
    let api = consul.api();
    let session = api.session_create(r#"{"Name":"consul lock","TTL":"15s","LockDelay":"0s"}"#);
    assert!(
        kv_acquire(&api, &key, &session, LOCK_FLAG),
        "the Go-style lock is held"
    );
    let output = run(&mut elect(&consul, &key, &["--no-wait"], &["true"]));
    assert_status(&output, 75, "held by consul lock", &consul);
    // Released the way `consul lock` releases: lockrun then gets it.
    assert!(kv_release(&api, &key, &session, LOCK_FLAG));
    let output = run(&mut elect(&consul, &key, &["--no-wait"], &["true"]));
    assert_status(&output, 0, "free after consul lock released it", &consul);
    api.session_destroy(&session);
}

#[test]
fn a_key_holding_foreign_data_is_a_conflict_and_left_untouched() {
    let consul = TestConsul::start();
    let key = consul.prefix("elect-foreign") + "/config";
    let api = consul.api();
    api.kv_put(&key, b"important");
    let before = api.kv_get(&key).unwrap();
    let output = run(&mut elect(&consul, &key, &[], &["true"]));
    assert_status(&output, 125, "foreign data", &consul);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&key) && stderr.lines().count() == 1,
        "{stderr}"
    );
    let after = api.kv_get(&key).unwrap();
    assert_eq!(after.value, b"important");
    assert_eq!(after.modify_index, before.modify_index);
}

#[test]
fn sigterm_while_waiting_ends_by_sigterm_and_cleans_up() {
    let consul = TestConsul::start();
    let key = consul.prefix("elect-wait-signal") + "/leader";
    let holder = Holder::spawn(|child| elect(&consul, &key, &["--shell"], child));
    let waiter = Running::spawn(&mut elect(&consul, &key, &["-v"], &["true"]));
    // Wait until the waiter has said it is waiting.
    let api = consul.api();
    assert!(
        wait_until(procs::deadline(), || sessions_named_like(&api, &key) >= 2),
        "the waiter created its session"
    );
    waiter.signal(Signal::SIGTERM);
    let output = waiter.finish();
    assert_killed_by(&output, Signal::SIGTERM, "SIGTERM while waiting", &consul);
    assert!(
        wait_until(procs::deadline(), || sessions_named_like(&api, &key) == 1),
        "the waiter's session is gone"
    );
    holder.finish(&consul);
}

#[test]
fn a_lock_delay_is_waited_out_and_then_the_lock_is_taken() {
    let consul = TestConsul::start();
    let key = consul.prefix("elect-lock-delay") + "/leader";
    let api = consul.api();
    // A holder whose session is invalidated leaves the key free but, for
    // its lock-delay, unacquirable.
    let session = api.session_create(r#"{"Name":"dies","TTL":"30s","LockDelay":"5s"}"#);
    assert!(kv_acquire(&api, &key, &session, LOCK_FLAG));
    api.session_destroy(&session);
    let entry = api.kv_get(&key).expect("the key stays, without a holder");
    assert!(entry.session.is_none());
    let output = run(&mut elect(&consul, &key, &["--no-wait"], &["true"]));
    assert_status(&output, 75, "--no-wait inside the lock-delay", &consul);
    let output = run(&mut elect(&consul, &key, &["-v"], &["true"]));
    assert_status(&output, 0, "acquired once the lock-delay ran out", &consul);
}

/// SPEC §7: the fencing number grows with every new holder, however the one
/// before ended: a clean exit (which deletes the key, restarting Consul's
/// LockIndex), an operator's release, an expiry, or a `consul lock` holder.
#[test]
fn the_fencing_number_grows_with_every_holder() {
    let consul = TestConsul::start();
    let key = consul.prefix("elect-fencing") + "/leader";
    let api = consul.api();
    let dir = scratch();
    let out = dir.path().join("index");
    let body = format!("echo \"$LOCKRUN_LOCK_INDEX\" >> {}", out.display());
    let run_once = || {
        let output = run(&mut elect(&consul, &key, &["--shell"], &[&body]));
        assert_status(&output, 0, "a clean run", &consul);
    };
    run_once();
    run_once();
    // An operator's release: the key stays, released, and LockIndex is kept.
    let held = scratch();
    let holder = Running::spawn(&mut elect(
        &consul,
        &key,
        &["--shell"],
        &[
            &script_with(
                &format!("echo \"$LOCKRUN_LOCK_INDEX\" >> {};", out.display()),
                "while :; do sleep 0.05; done",
            ),
            &held.path().display().to_string(),
        ],
    ));
    wait_for_file(&held.path().join("ready"));
    let released = run(&mut lockrun(&consul, ["release", key.as_str()]));
    assert_status(&released, 0, "lockrun release", &consul);
    assert_status(&holder.finish(), 124, "the released holder", &consul);
    run_once();
    // A `consul lock` holder: acquire with the Go API's flag, then release
    // and delete the key as it does on exit.
    let go = api.session_create(r#"{"LockDelay":"0s","TTL":"10s"}"#);
    assert!(kv_acquire(&api, &key, &go, LOCK_FLAG));
    assert!(kv_release(&api, &key, &go, LOCK_FLAG));
    api.kv_delete(&key);
    api.session_destroy(&go);
    run_once();
    // An expiry: the session ends while it holds the key (behavior release,
    // no lock-delay), leaving the key with its LockIndex.
    let gone = api.session_create(r#"{"LockDelay":"0s","TTL":"10s"}"#);
    assert!(kv_acquire(&api, &key, &gone, LOCK_FLAG));
    api.session_destroy(&gone);
    run_once();
    run_once();
    let seen: Vec<u64> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().expect("a number"))
        .collect();
    assert_eq!(seen.len(), 7, "{seen:?}");
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "LOCKRUN_LOCK_INDEX must strictly increase: {seen:?}"
    );
}

/// `--lock-delay 0s` alone runs: the default grace shrinks to fit, at `-v`.
#[test]
fn no_lock_delay_shrinks_the_default_kill_timeout() {
    let consul = TestConsul::start();
    let key = consul.prefix("elect-shrunk-grace") + "/leader";
    let output = run(&mut lockrun(
        &consul,
        [
            "-v",
            "elect",
            "--lock-delay",
            "0s",
            key.as_str(),
            "--",
            "true",
        ],
    ));
    assert_status(&output, 0, "the child's status", &consul);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--kill-timeout defaults to 2300ms to fit --ttl 15s and --lock-delay 0s"),
        "{stderr}"
    );
}
