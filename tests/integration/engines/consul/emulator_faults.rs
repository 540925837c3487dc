//! The emulator's fault injection and bookkeeping, which lockrun's failure
//! tests lean on. Emulator only: on a real agent every test here shows as
//! ignored.

use crate::engines::consul::support::{fast, Api, TestConsul};
use consul_emulator::{AclPolicy, Endpoint};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Polls `cond` until it holds; for conditions that only the passing of
/// server-side time makes true (a TTL running out).
fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts a blocking read of `path` on another thread and returns once the
/// emulator has received it.
fn blocking_read(
    consul: &TestConsul,
    api: &Api,
    path: String,
) -> std::thread::JoinHandle<std::io::Result<crate::engines::consul::support::Resp>> {
    let api = api.clone();
    let sent = path.clone();
    let waiter = std::thread::spawn(move || api.try_request("GET", &sent, None, &[]));
    let emu = consul.emulator().expect("an emulator");
    let seen = emu.wait_for_request(Duration::from_secs(10), |r| r.path == path);
    assert!(
        seen.is_some(),
        "the blocking read never arrived\n{}",
        consul.request_log_dump()
    );
    waiter
}

#[test]
fn partition_hangs_requests_and_applies_nothing() {
    let consul = TestConsul::emulator_only(fast);
    let emu = consul.emulator().expect("an emulator");
    let api = consul.api();
    emu.set_partitioned(true);
    let writes = emu.write_count();
    let stalled =
        api.with_timeout(Duration::from_secs(1))
            .try_request("PUT", "/v1/kv/p/k", Some(b"v"), &[]);
    assert!(
        stalled.is_err(),
        "got an answer through a partition: {stalled:?}"
    );
    emu.set_partitioned(false);
    assert!(
        api.kv_get("p/k").is_none(),
        "the write was applied\n{}",
        consul.request_log_dump()
    );
    assert_eq!(emu.write_count(), writes);
    let put = emu
        .request_log()
        .into_iter()
        .find(|r| r.method == "PUT")
        .expect("the PUT was logged");
    assert_eq!(put.status, None);
}

#[test]
fn sessions_expire_during_a_partition() {
    let consul = TestConsul::emulator_only(fast);
    let emu = consul.emulator().expect("an emulator");
    let api = consul.api();
    let created = Instant::now();
    let id = api.session_create(r#"{"TTL":"1s","LockDelay":"0s"}"#);
    assert!(api.kv_acquire("p/lock", &id, "v"));
    emu.set_partitioned(true);
    wait_until("the session to expire", Duration::from_secs(15), || {
        !emu.session_ids().contains(&id)
    });
    assert!(
        created.elapsed() >= Duration::from_secs(2),
        "expired before 2×TTL"
    );
    emu.set_partitioned(false);
    let entry = api.kv_get("p/lock").expect("released, not deleted");
    assert_eq!(entry.session, None);
}

#[test]
fn a_blocking_read_caught_by_a_partition_is_never_answered() {
    let consul = TestConsul::emulator_only(fast);
    let emu = consul.emulator().expect("an emulator");
    let api = consul.api();
    let id = api.session_create(r#"{"LockDelay":"0s"}"#);
    assert!(api.kv_acquire("p/lock", &id, "v"));
    let index = api.get("/v1/kv/p/lock").index().unwrap();
    let waiter = blocking_read(
        &consul,
        &api.with_timeout(Duration::from_millis(1500)),
        format!("/v1/kv/p/lock?index={index}&wait=30s"),
    );
    emu.set_partitioned(true);
    // A change that would wake the read, made server-side.
    emu.invalidate_session(&id);
    let result = waiter.join().expect("reader thread");
    assert!(result.is_err(), "answered through a partition: {result:?}");
    emu.set_partitioned(false);
    assert_eq!(api.kv_get("p/lock").unwrap().session, None);
}

#[test]
fn no_leader_fails_server_requests_with_500_and_applies_nothing() {
    let consul = TestConsul::emulator_only(fast);
    let emu = consul.emulator().expect("an emulator");
    let api = consul.api();
    emu.set_no_leader(true);
    for resp in [
        api.get("/v1/kv/p/k"),
        api.put("/v1/kv/p/k", "v"),
        api.put("/v1/session/create", "{}"),
        api.get("/v1/session/list"),
    ] {
        assert_eq!(
            (resp.status, resp.text().as_str()),
            (500, "No cluster leader")
        );
    }
    // Stale reads are served by any server, and say there is no leader.
    let stale = api.get("/v1/kv/p/k?stale");
    assert_eq!(stale.status, 404);
    assert_eq!(stale.header("X-Consul-Knownleader"), Some("false"));
    assert_eq!(api.get("/v1/status/leader").json(), json!(""));
    emu.set_no_leader(false);
    assert!(api.kv_get("p/k").is_none(), "the PUT was applied");
    assert!(api.kv_put("p/k", "v"));
}

#[test]
fn losing_the_leader_ends_waiting_blocking_reads_with_500() {
    let consul = TestConsul::emulator_only(fast);
    let emu = consul.emulator().expect("an emulator");
    let api = consul.api();
    api.kv_put("p/k", "v");
    let index = api.get("/v1/kv/p/k").index().unwrap();
    let started = Instant::now();
    let waiter = blocking_read(&consul, &api, format!("/v1/kv/p/k?index={index}&wait=30s"));
    emu.set_no_leader(true);
    let resp = waiter.join().expect("reader thread").expect("an answer");
    assert_eq!(
        (resp.status, resp.text().as_str()),
        (500, "No cluster leader")
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn dropped_connections_get_no_answer_and_apply_nothing() {
    let consul = TestConsul::emulator_only(fast);
    let emu = consul.emulator().expect("an emulator");
    let api = consul.api();
    emu.set_drop_connections(true);
    let result = api.try_request("PUT", "/v1/kv/p/k", Some(b"v"), &[]);
    assert!(result.is_err(), "answered: {result:?}");
    emu.set_drop_connections(false);
    assert!(api.kv_get("p/k").is_none());
    let put = emu
        .request_log()
        .into_iter()
        .find(|r| r.method == "PUT")
        .unwrap();
    assert!(put.dropped && put.status.is_none(), "{put:?}");
}

#[test]
fn restart_loses_all_state_and_the_index_goes_down() {
    let consul = TestConsul::emulator_only(fast);
    let emu = consul.emulator().expect("an emulator");
    let api = consul.api();
    for i in 0..20 {
        api.kv_put(&format!("p/k{i}"), "v");
    }
    let id = api.session_create(r#"{"LockDelay":"10s"}"#);
    assert!(api.kv_acquire("p/lock", &id, "v"));
    api.session_destroy(&id);
    let before = api.get("/v1/kv/p/k19").index().unwrap();
    let addr = emu.http_addr();

    emu.restart();
    assert_eq!(emu.http_addr(), addr);
    let after = api.get("/v1/kv/p/k19");
    assert_eq!(after.status, 404);
    assert!(
        after.index().unwrap() < before,
        "index {:?} not below {before}",
        after.index()
    );
    assert!(api.session_info(&id).is_none());
    assert!(api.kv_list("p/").is_empty());
    // The lock-delay went with the old agent.
    let fresh = api.session_create(r#"{"LockDelay":"0s"}"#);
    assert!(api.kv_acquire("p/lock", &fresh, "v"));
}

#[test]
fn restart_drops_waiting_blocking_reads() {
    let consul = TestConsul::emulator_only(fast);
    let emu = consul.emulator().expect("an emulator");
    let api = consul.api().with_timeout(Duration::from_secs(20));
    api.kv_put("p/k", "v");
    let index = api.get("/v1/kv/p/k").index().unwrap();
    let started = Instant::now();
    let waiter = blocking_read(&consul, &api, format!("/v1/kv/p/k?index={index}&wait=30s"));
    emu.restart();
    let result = waiter.join().expect("reader thread");
    assert!(result.is_err(), "answered across a restart: {result:?}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "dropped only by the client timeout"
    );
}

#[test]
fn latency_delays_every_answer() {
    let consul = TestConsul::emulator_only(fast);
    let emu = consul.emulator().expect("an emulator");
    let api = consul.api();
    emu.set_latency(Duration::from_millis(300));
    let started = Instant::now();
    assert_eq!(api.get("/v1/status/leader").status, 200);
    assert!(started.elapsed() >= Duration::from_millis(300));
    emu.set_latency(Duration::ZERO);
}

#[test]
fn acl_tokens_are_enforced_with_consuls_messages() {
    let consul = TestConsul::emulator_only(|b| {
        b.acl_token("root", AclPolicy::Full)
            .acl_token("kv-only", AclPolicy::KvWriteOnly)
            .acl_token("not-q", AclPolicy::DenyKeysUnder("p/q/"))
    });
    let anonymous = consul.api();
    let denied = |resp: crate::engines::consul::support::Resp, text: &str| {
        assert_eq!((resp.status, resp.text().as_str()), (403, text));
    };
    denied(
        anonymous.put("/v1/session/create", "{}"),
        "Permission denied",
    );
    denied(anonymous.put("/v1/kv/p/k", "v"), "Permission denied");
    denied(anonymous.get("/v1/kv/p/k"), "Permission denied");
    denied(anonymous.get("/v1/agent/self"), "Permission denied");
    let unknown = anonymous.with_token("nope");
    denied(unknown.put("/v1/session/create", "{}"), "ACL not found");
    denied(unknown.get("/v1/kv/p/k"), "ACL not found");
    let bearer = anonymous
        .try_request(
            "GET",
            "/v1/kv/p/k",
            None,
            &[("Authorization", "Bearer nope")],
        )
        .unwrap();
    denied(bearer, "ACL not found");

    let kv = anonymous.with_token("kv-only");
    assert!(kv.kv_put("p/k", "v"));
    assert_eq!(kv.kv_get("p/k").unwrap().value, b"v");
    denied(kv.put("/v1/session/create", "{}"), "Permission denied");

    let root = anonymous.with_token("root");
    let id = root.session_create("{}");
    assert!(root.kv_acquire("p/lock", &id, ""));
    let resp = anonymous
        .try_request(
            "GET",
            "/v1/session/list",
            None,
            &[("Authorization", "Bearer root")],
        )
        .unwrap();
    assert_eq!(resp.json().as_array().map(Vec::len), Some(1));
    // Lists are filtered rather than refused.
    assert_eq!(anonymous.get("/v1/session/list").json(), json!([]));
    assert_eq!(anonymous.get("/v1/kv/p/?recurse").status, 404);
    assert_eq!(resp.header("X-Consul-Default-Acl-Policy"), Some("deny"));

    // A deny rule on a prefix: its keys are refused one by one, hidden from
    // lists, refused per op in a transaction, and a recursive delete above
    // them is refused whole.
    let not_q = anonymous.with_token("not-q");
    assert!(root.kv_put("p/q/x", "hidden"));
    assert!(not_q.kv_put("p/k2", "v"));
    denied(not_q.put("/v1/kv/p/q/y", "v"), "Permission denied");
    denied(not_q.get("/v1/kv/p/q/x"), "Permission denied");
    let keys: Vec<String> = not_q.kv_list("p/").into_iter().map(|e| e.key).collect();
    assert!(keys.contains(&"p/k2".to_string()) && !keys.iter().any(|k| k.starts_with("p/q/")));
    let txn = not_q.put(
        "/v1/txn",
        r#"[{"KV":{"Verb":"set","Key":"p/k3","Value":""}},{"KV":{"Verb":"delete","Key":"p/q/x"}}]"#,
    );
    assert_eq!(txn.status, 409);
    assert_eq!(
        txn.json()["Errors"],
        json!([{"OpIndex": 1, "What": "Permission denied"}])
    );
    assert!(
        root.kv_get("p/k3").is_none(),
        "nothing of a refused transaction applies"
    );
    denied(not_q.delete("/v1/kv/p/?recurse"), "Permission denied");
    assert_eq!(root.kv_get("p/q/x").unwrap().value, b"hidden");
}

#[test]
fn counters_count_requests_per_endpoint_and_writes() {
    let consul = TestConsul::emulator_only(fast);
    let emu = consul.emulator().expect("an emulator");
    let api = consul.api();
    let id = api.session_create("{}");
    api.session_renew(&id);
    api.kv_put("p/k", "v");
    api.kv_get("p/k");
    api.kv_get("p/k");
    api.kv_delete("p/k");
    api.get(&format!("/v1/session/info/{id}"));
    assert_eq!(emu.request_count(Endpoint::SessionCreate), 1);
    assert_eq!(emu.request_count(Endpoint::SessionRenew), 1);
    assert_eq!(emu.request_count(Endpoint::KvPut), 1);
    assert_eq!(emu.request_count(Endpoint::KvGet), 2);
    assert_eq!(emu.request_count(Endpoint::KvDelete), 1);
    assert_eq!(emu.request_count(Endpoint::SessionInfo), 1);
    assert_eq!(emu.request_count(Endpoint::Total), 7);
    assert_eq!(emu.write_count(), 4, "create, renew, put, delete");
    emu.reset_counters();
    assert_eq!(emu.request_count(Endpoint::Total), 0);
    assert_eq!(emu.write_count(), 0);
    api.kv_get("p/k");
    assert_eq!(emu.write_count(), 0, "reads write nothing");
    assert_eq!(emu.request_log().len(), 8, "the log is kept");
}

#[test]
fn invalidate_session_releases_held_keys_and_arms_the_lock_delay() {
    let consul = TestConsul::emulator_only(fast);
    let emu = consul.emulator().expect("an emulator");
    let api = consul.api();
    let holder = api.session_create(r#"{"LockDelay":"30s"}"#);
    let rival = api.session_create(r#"{"LockDelay":"0s"}"#);
    assert!(api.kv_acquire("p/lock", &holder, "v"));
    emu.invalidate_session(&holder);
    assert!(api.session_info(&holder).is_none());
    let entry = api.kv_get("p/lock").unwrap();
    assert_eq!((entry.session, entry.lock_index), (None, 1));
    assert!(
        !api.kv_acquire("p/lock", &rival, "mine"),
        "inside the lock-delay"
    );
}

#[test]
fn a_ttl_session_expires_after_twice_its_ttl_unless_renewed() {
    let consul = TestConsul::emulator_only(fast);
    let emu = consul.emulator().expect("an emulator");
    let api = consul.api();
    let created = Instant::now();
    let lapsing = api.session_create(r#"{"TTL":"1s","LockDelay":"0s","Behavior":"delete"}"#);
    let renewed = api.session_create(r#"{"TTL":"1s","LockDelay":"0s"}"#);
    assert!(api.kv_acquire("p/eph", &lapsing, "v"));
    // Renew at TTL/3 (the renewal cadence, not a wait for a result) until
    // the other has lapsed.
    while emu.session_ids().contains(&lapsing) {
        assert!(created.elapsed() < Duration::from_secs(15), "never expired");
        assert_eq!(api.session_renew(&renewed).status, 200);
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(
        created.elapsed() >= Duration::from_secs(2),
        "expired before 2×TTL"
    );
    assert!(
        api.session_info(&renewed).is_some(),
        "renewals keep it alive"
    );
    assert!(
        api.kv_get("p/eph").is_none(),
        "behavior delete removed the key"
    );
    let renew = api.session_renew(&lapsing);
    assert_eq!(renew.status, 404);
}

#[test]
fn the_node_name_and_datacenter_are_configurable() {
    let consul = TestConsul::emulator_only(|b| b.node_name("node-7").datacenter("east"));
    let api = consul.api();
    let me = api.get("/v1/agent/self").json();
    assert_eq!(me["Config"]["NodeName"], "node-7");
    assert_eq!(me["Config"]["Datacenter"], "east");
    assert_eq!(me["Member"]["Name"], "node-7");
    let id = api.session_create("{}");
    assert_eq!(
        api.session_info(&id).unwrap()["Node"],
        Value::from("node-7")
    );
    assert_eq!(api.get("/v1/kv/x?dc=east").status, 404);
    assert_eq!(api.get("/v1/kv/x?dc=dc1").status, 500);
}

/// Consul's shared locks (#42): a reader that joins between a writer's look
/// at the readers' record and the writer's transaction refuses that
/// transaction (it deletes the record only as it read it), so the writer
/// waits for the reader. The emulator's latency holds each request 600 ms,
/// and the reader's transaction, sent 200 ms after the writer's look was
/// answered, lands between the two. Without the check the writer's child
/// starts before the reader leaves.
#[test]
fn a_reader_between_a_writers_look_and_its_transaction_holds_the_writer_off() {
    use crate::support::{lockrun, scratch, Running};
    use base64::Engine;
    let consul = TestConsul::emulator_only(fast);
    let emu = consul.emulator().expect("an emulator");
    let api = consul.api();
    let key = consul.prefix("shared-race") + "/k";
    let session = api.session_create(r#"{"Name":"reader","LockDelay":"0s"}"#);
    let work = scratch();
    let span = work.path().join("span");
    emu.set_latency(Duration::from_millis(600));
    let mut writer = lockrun(&consul, ["elect", &key, "--shell", "--"]);
    writer.arg("s=$(date +%s%N); echo $s > \"$1\"").arg(&span);
    let writer = Running::spawn(&mut writer);
    // The look answered (an empty listing is followed by one more read,
    // which lands before the reader too).
    let looked = || {
        emu.request_log()
            .iter()
            .any(|r| r.method == "GET" && r.path.contains("/.lock?recurse") && r.status.is_some())
    };
    assert!(
        crate::procs::wait_until(crate::procs::deadline(), looked),
        "the writer never looked\n{}",
        consul.request_log_dump()
    );
    std::thread::sleep(Duration::from_millis(200));
    let b64 = |v: &[u8]| base64::engine::general_purpose::STANDARD.encode(v);
    let shared_flag: u64 = 0x6c6f_636b_7264_7273;
    let record = format!(r#"{{"Readers":{{"{session}":true}}}}"#);
    let join = json!([
        {"KV": {"Verb": "lock", "Key": format!("{key}/.lock/{session}"), "Value": b64(b"raw"), "Flags": shared_flag, "Session": session}},
        {"KV": {"Verb": "cas", "Key": format!("{key}/.lock"), "Value": b64(record.as_bytes()), "Flags": shared_flag, "Index": 0}},
    ]);
    assert_eq!(
        api.put("/v1/txn", join.to_string()).status,
        200,
        "the reader joins"
    );
    // The writer's transaction, answered (refused, with the check).
    let answered = || {
        emu.request_log()
            .iter()
            .filter(|r| r.path.starts_with("/v1/txn") && r.status.is_some())
            .count()
            >= 2
    };
    assert!(
        crate::procs::wait_until(crate::procs::deadline(), answered),
        "the writer never sent its transaction\n{}",
        consul.request_log_dump()
    );
    the_writer_waits_for_the_reader(&consul, &key, &session, &span, writer);
}

/// The same when `KEY/.lock` is a free `consul lock KEY` key (its holder
/// died, its session gone), which a reader takes over: the reader's
/// transaction (as lockrun's reader sends it) lands between the writer's
/// look and its transaction, and the writer's transaction, which checks
/// the key is as it read it, is refused. Without that check the writer ran
/// about 2 s beside the reader here (attack review), and 9 of 60 racing
/// pairs overlapped on a real 1.15.10.
#[test]
fn a_reader_between_a_writers_look_and_its_transaction_over_a_free_consul_lock_key() {
    use crate::support::{lockrun, scratch, Running};
    use base64::Engine;
    let consul = TestConsul::emulator_only(fast);
    let emu = consul.emulator().expect("an emulator");
    let api = consul.api();
    let key = consul.prefix("shared-race") + "/k";
    let lock_flag: u64 = 0x2ddc_cbc0_58a5_0c18;
    let put = api.put(&format!("/v1/kv/{key}/.lock?flags={lock_flag}"), "");
    assert_eq!(put.status, 200, "a free consul lock key");
    let free_index = api.kv_get(&format!("{key}/.lock")).unwrap().modify_index;
    let session = api.session_create(r#"{"Name":"reader","LockDelay":"0s"}"#);
    let work = scratch();
    let span = work.path().join("span");
    emu.set_latency(Duration::from_millis(600));
    let mut writer = lockrun(&consul, ["elect", &key, "--shell", "--"]);
    writer.arg("s=$(date +%s%N); echo $s > \"$1\"").arg(&span);
    let writer = Running::spawn(&mut writer);
    // The look sent (it is held 600 ms): the reader's transaction goes in
    // before the writer's, which follows the look's answer.
    let looked = || {
        emu.request_log()
            .iter()
            .any(|r| r.method == "GET" && r.path.contains("/.lock?recurse"))
    };
    assert!(
        crate::procs::wait_until(crate::procs::deadline(), looked),
        "the writer never looked\n{}",
        consul.request_log_dump()
    );
    std::thread::sleep(Duration::from_millis(100));
    let b64 = |v: &[u8]| base64::engine::general_purpose::STANDARD.encode(v);
    let shared_flag: u64 = 0x6c6f_636b_7264_7273;
    let record = format!(r#"{{"Readers":{{"{session}":true}}}}"#);
    let join = json!([
        {"KV": {"Verb": "cas", "Key": key, "Value": "", "Flags": lock_flag, "Index": 0}},
        {"KV": {"Verb": "lock", "Key": key, "Value": "", "Flags": lock_flag, "Session": session}},
        {"KV": {"Verb": "delete", "Key": key}},
        {"KV": {"Verb": "lock", "Key": format!("{key}/.lock/{session}"), "Value": b64(b"raw"), "Flags": shared_flag, "Session": session}},
        {"KV": {"Verb": "cas", "Key": format!("{key}/.lock"), "Value": b64(record.as_bytes()), "Flags": shared_flag, "Index": free_index}},
    ]);
    assert_eq!(
        api.put("/v1/txn", join.to_string()).status,
        200,
        "the reader joins"
    );
    the_writer_waits_for_the_reader(&consul, &key, &session, &span, writer);
}

/// The end of the two tests above: the emulator answers at once again;
/// once the writer runs or waits on the readers' record, the reader (its
/// `session`) leaves; the writer's child, which logs its start to `span`,
/// must have started only after that.
fn the_writer_waits_for_the_reader(
    consul: &TestConsul,
    key: &str,
    session: &str,
    span: &std::path::Path,
    writer: crate::support::Running,
) {
    use crate::support::now_ns;
    let emu = consul.emulator().expect("an emulator");
    emu.set_latency(Duration::ZERO);
    // The writer either runs or waits on the readers' record.
    let settled = || {
        span.exists()
            || emu.request_log().iter().any(|r| {
                r.method == "GET" && r.path.contains("/.lock?") && r.path.contains("index=")
            })
    };
    assert!(
        crate::procs::wait_until(crate::procs::deadline(), settled),
        "the writer neither ran nor waited\n{}",
        consul.request_log_dump()
    );
    let left = now_ns();
    let leave = json!([
        {"KV": {"Verb": "delete", "Key": format!("{key}/.lock/{session}")}},
        {"KV": {"Verb": "delete", "Key": format!("{key}/.lock")}},
    ]);
    assert_eq!(
        consul.api().put("/v1/txn", leave.to_string()).status,
        200,
        "the reader leaves"
    );
    let output = writer.finish();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let start: u128 = std::fs::read_to_string(span)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        start > left,
        "the writer's child started {} ms before the reader left\n{}",
        (left - start) / 1_000_000,
        consul.request_log_dump()
    );
}
