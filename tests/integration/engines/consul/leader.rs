//! `lockrun leader` and `lockrun release`: answers for scripts, levers for
//! operators.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;

use crate::engines::consul::support::TestConsul;
use crate::procs;
use crate::support::{assert_status, lockrun, run};

const LOCK_FLAG: u64 = 0x2ddc_cbc0_58a5_0c18;
const SEMAPHORE_FLAG: u64 = 0xe0f6_9a2b_aa41_4de0;

/// A lock held by a session the test owns, with `value`.
fn hold(consul: &TestConsul, key: &str, value: &str) -> String {
    let api = consul.api();
    let session = api.session_create(r#"{"Name":"test holder","TTL":"30s","LockDelay":"0s"}"#);
    let path = format!(
        "/v1/kv/{}?acquire={session}&flags={LOCK_FLAG}",
        crate::support::encode_key(key)
    );
    assert_eq!(api.put(&path, value.as_bytes()).trimmed(), "true");
    session
}

#[test]
fn a_holder_is_printed_and_a_released_key_is_not() {
    let consul = TestConsul::start();
    let key = consul.prefix("leader-held") + "/leader";
    let session = hold(&consul, &key, "db-2.example:5432");
    let output = run(&mut lockrun(&consul, ["leader", key.as_str()]));
    assert_status(&output, 0, "held", &consul);
    assert_eq!(output.stdout, b"db-2.example:5432\n");
    let api = consul.api();
    let path = format!(
        "/v1/kv/{}?release={session}&flags={LOCK_FLAG}",
        crate::support::encode_key(&key)
    );
    assert_eq!(api.put(&path, b"db-2.example:5432").trimmed(), "true");
    let output = run(&mut lockrun(&consul, ["leader", key.as_str()]));
    assert_status(&output, 1, "released key", &consul);
    assert!(output.stdout.is_empty());
    api.session_destroy(&session);
}

#[test]
fn json_has_the_entry_and_the_session() {
    let consul = TestConsul::start();
    let key = consul.prefix("leader-json") + "/leader";
    let session = hold(&consul, &key, "node-a");
    let output = run(&mut lockrun(&consul, ["leader", "--json", key.as_str()]));
    assert_status(&output, 0, "held", &consul);
    let value: serde_json::Value = serde_json::from_slice(&output.stdout).expect("one JSON object");
    assert_eq!(value["key"], key);
    assert_eq!(value["kind"], "lock");
    assert_eq!(value["held"], true);
    assert_eq!(value["limit"], serde_json::Value::Null);
    let holders = value["holders"].as_array().expect("holders is an array");
    assert_eq!(holders.len(), 1, "{value}");
    let holder = &holders[0];
    assert_eq!(holder["value"], "node-a");
    // The fence is the key's ModifyIndex at acquisition, what the holder's
    // child gets as LOCKRUN_LOCK_INDEX; Consul's own facts are in details.
    assert_eq!(holder["fence"], holder["details"]["modify_index"]);
    assert_eq!(holder["host"], holder["details"]["node"]);
    let details = &holder["details"];
    assert_eq!(details["key"], key);
    assert_eq!(details["value_base64"], "bm9kZS1h");
    assert_eq!(details["session"], session);
    assert_eq!(details["session_name"], "test holder");
    assert_eq!(details["ttl"], "30s");
    assert_eq!(details["lock_index"], 1);
    assert!(details["node"].as_str().is_some_and(|n| !n.is_empty()));
    assert!(details["modify_index"].as_u64().is_some_and(|i| i > 0));
    assert!(details["create_index"].as_u64().is_some_and(|i| i > 0));
    // Nobody: the same shape, with no holder.
    let free = consul.prefix("leader-json") + "/free";
    let output = run(&mut lockrun(&consul, ["leader", "--json", free.as_str()]));
    assert_status(&output, 1, "not held", &consul);
    let value: serde_json::Value = serde_json::from_slice(&output.stdout).expect("one JSON object");
    assert_eq!(
        value,
        serde_json::json!({"key": free, "backend": "consul", "kind": "lock", "held": false, "limit": null, "holders": [], "waiters": []})
    );
    consul.api().session_destroy(&session);
}

#[test]
fn release_keeps_value_and_flags_and_can_destroy_the_session() {
    let consul = TestConsul::start();
    let key = consul.prefix("release-keep") + "/leader";
    let session = hold(&consul, &key, "keep-me");
    let api = consul.api();
    let other = "00000000-0000-4000-8000-000000000001";
    let output = run(&mut lockrun(
        &consul,
        ["release", "--session", other, key.as_str()],
    ));
    assert_status(&output, 1, "held by another session", &consul);
    assert!(api.kv_get(&key).unwrap().session.is_some(), "untouched");
    let output = run(&mut lockrun(
        &consul,
        [
            "release",
            "--session",
            &session,
            "--destroy-session",
            key.as_str(),
        ],
    ));
    assert_status(&output, 0, "released", &consul);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&session) && stdout.contains("keep-me"),
        "{stdout}"
    );
    let entry = api.kv_get(&key).unwrap();
    assert!(entry.session.is_none());
    assert_eq!(entry.value, b"keep-me");
    assert_eq!(entry.flags, LOCK_FLAG);
    assert!(api.session_info(&session).is_none(), "session destroyed");
}

#[test]
fn a_semaphore_prefix_lists_its_live_holders() {
    let consul = TestConsul::start();
    let prefix = consul.prefix("leader-sem");
    let api = consul.api();
    let mut holders = Vec::new();
    for value in ["web-1", "web-2"] {
        let s = api.session_create(r#"{"Name":"sem","TTL":"30s","Behavior":"delete"}"#);
        let path = format!(
            "/v1/kv/{}?acquire={s}&flags={SEMAPHORE_FLAG}",
            crate::support::encode_key(&format!("{prefix}/{s}"))
        );
        assert_eq!(api.put(&path, value.as_bytes()).trimmed(), "true");
        holders.push(s);
    }
    let record = format!(
        r#"{{"Limit":3,"Holders":{{"{}":true,"{}":true}}}}"#,
        holders[0], holders[1]
    );
    let path = format!(
        "/v1/kv/{}?cas=0&flags={SEMAPHORE_FLAG}",
        crate::support::encode_key(&format!("{prefix}/.lock"))
    );
    assert_eq!(api.put(&path, record.as_bytes()).trimmed(), "true");
    let output = run(&mut lockrun(&consul, ["leader", prefix.as_str()]));
    assert_status(&output, 0, "semaphore holders", &consul);
    let mut lines: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(String::from)
        .collect();
    lines.sort();
    assert_eq!(lines, ["web-1", "web-2"]);
    // --json: the lock's shape, with the slots and every holder.
    let output = run(&mut lockrun(&consul, ["leader", "--json", prefix.as_str()]));
    assert_status(&output, 0, "semaphore holders as JSON", &consul);
    let value: serde_json::Value = serde_json::from_slice(&output.stdout).expect("one JSON object");
    assert_eq!(value["key"], prefix);
    assert_eq!(value["kind"], "semaphore");
    assert_eq!(value["held"], true);
    assert_eq!(value["limit"], 3);
    let mut values: Vec<&str> = value["holders"]
        .as_array()
        .expect("holders is an array")
        .iter()
        .map(|h| h["value"].as_str().unwrap())
        .collect();
    values.sort();
    assert_eq!(values, ["web-1", "web-2"]);
    let output = run(&mut lockrun(&consul, ["release", "--all", prefix.as_str()]));
    assert_status(&output, 0, "free all slots", &consul);
    let output = run(&mut lockrun(&consul, ["leader", prefix.as_str()]));
    assert_status(&output, 1, "no holder left", &consul);
    for s in holders {
        api.session_destroy(&s);
    }
}

/// `-q` keeps a fatal error: an unreachable Consul is still said (the
/// notes it silences: `leader::quiet_silences_notes_but_not_answers` in
/// the conformance suite).
#[test]
fn quiet_still_prints_a_fatal_error() {
    let consul = TestConsul::start();
    let key = consul.prefix("release-quiet") + "/leader";
    let mut cmd = lockrun(&consul, ["-q", "leader", key.as_str()]);
    cmd.env("CONSUL_HTTP_ADDR", "127.0.0.1:1");
    let output = run(&mut cmd);
    assert_eq!(output.status.code(), Some(125));
    assert!(
        String::from_utf8_lossy(&output.stderr).starts_with("lockrun: cannot reach Consul"),
        "fatal errors are still printed"
    );
}

/// `consul lock` and the Go API's `api.Lock` store no value: such a holder is
/// shown by its session's name and node, by `leader` and by `--watch`, never
/// as the empty line that means "nobody".
#[test]
fn a_holder_without_a_value_is_shown_by_its_session() {
    let consul = TestConsul::start();
    let key = consul.prefix("leader-goapi") + "/.lock";
    let api = consul.api();
    let mut cmd = lockrun(&consul, ["leader", "--watch", key.as_str()]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut watcher = cmd.spawn().expect("start the watcher");
    let stdout = watcher.stdout.take().unwrap();
    let (lines, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let next = || {
        rx.recv_timeout(procs::PATIENCE)
            .expect("a line from --watch")
    };
    assert_eq!(next(), "", "no holder at first");
    let name = "Consul lock for 'sleep 60' at 'jobs/nightly'";
    let session = api.session_create(&format!(
        r#"{{"Name":"{name}","TTL":"30s","LockDelay":"0s"}}"#
    ));
    let node = api.session_info(&session).expect("the session exists")["Node"]
        .as_str()
        .expect("a node name")
        .to_string();
    let path = format!(
        "/v1/kv/{}?acquire={session}&flags={LOCK_FLAG}",
        crate::support::encode_key(&key)
    );
    assert_eq!(api.put(&path, b"").trimmed(), "true");
    let shown = format!("{name} (node {node})");
    assert_eq!(next(), shown, "--watch shows the arrival");
    let output = run(&mut lockrun(&consul, ["leader", key.as_str()]));
    assert_status(&output, 0, "held without a value", &consul);
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("{shown}\n")
    );
    let path = format!(
        "/v1/kv/{}?release={session}&flags={LOCK_FLAG}",
        crate::support::encode_key(&key)
    );
    assert_eq!(api.put(&path, b"").trimmed(), "true");
    assert_eq!(next(), "", "--watch shows the departure as nobody");
    let _ = watcher.kill();
    let _ = watcher.wait();
    api.session_destroy(&session);
}
