//! One test per fact in `shared/CONSUL_API.md` that lockrun relies on,
//! checked over plain HTTP. They must pass on the emulator and on a real
//! Consul 1.6 or 1.10 agent (`LOCKRUN_TEST_CONSUL_ADDR`): TTLs are at least the
//! agent's minimum, lock-delays short, keys under a private prefix that is
//! removed afterwards.

use crate::engines::consul::support::{encode_key, Api, KvEntry, TestConsul};
use serde_json::{json, Value};
use std::cell::RefCell;
use std::time::{Duration, Instant};

const ZERO: &str = "00000000-0000-0000-0000-000000000000";
const LOCK_FLAGS: u64 = 3304740253564472344;
const SEMAPHORE_FLAGS: u64 = 16210313421097356768;

/// A test's private corner of Consul. Dropping it destroys the sessions it
/// made and deletes its keys, also when the test failed, so a shared real
/// agent stays clean.
struct Scratch {
    consul: TestConsul,
    api: Api,
    prefix: String,
    sessions: RefCell<Vec<String>>,
}

fn scratch(name: &str) -> Scratch {
    let consul = TestConsul::start();
    Scratch {
        api: consul.api(),
        prefix: consul.prefix(name),
        consul,
        sessions: RefCell::new(Vec::new()),
    }
}

impl Scratch {
    fn key(&self, name: &str) -> String {
        format!("{}/{name}", self.prefix)
    }

    /// `/v1/kv/<prefix>/<name>` with the name percent-encoded.
    fn kv(&self, name: &str) -> String {
        format!("/v1/kv/{}", encode_key(&self.key(name)))
    }

    fn session(&self, body: Value) -> String {
        let id = self.api.session_create(&body.to_string());
        self.sessions.borrow_mut().push(id.clone());
        id
    }

    fn get(&self, name: &str) -> Option<KvEntry> {
        self.api.kv_get(&self.key(name))
    }

    fn put(&self, path_and_query: &str, body: &str) -> Value {
        let resp = self.api.put(path_and_query, body);
        assert_eq!(
            resp.status,
            200,
            "PUT {path_and_query}: {}\n{}",
            resp.text(),
            self.log()
        );
        resp.json()
    }

    fn log(&self) -> String {
        self.consul.request_log_dump()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let api = self.api.with_timeout(Duration::from_secs(10));
        for id in self.sessions.borrow().iter() {
            let _ = api.try_request("PUT", &format!("/v1/session/destroy/{id}"), Some(b""), &[]);
        }
        let tree = format!("/v1/kv/{}?recurse", encode_key(&self.prefix));
        let _ = api.try_request("DELETE", &tree, None, &[]);
    }
}

fn go_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs % 3600 == 0 && secs > 0 {
        format!("{}h0m0s", secs / 3600)
    } else {
        format!("{secs}s")
    }
}

// ---- Sessions ----

#[test]
fn session_ttl_below_the_minimum_is_a_500_naming_the_bounds() {
    let s = scratch("ttl-min");
    let below = s.consul.ttl_min() / 2;
    let resp = s.api.put(
        "/v1/session/create",
        json!({ "TTL": format!("{}ms", below.as_millis()) }).to_string(),
    );
    assert_eq!(resp.status, 500, "{}", s.log());
    assert_eq!(
        resp.text(),
        format!(
            "Invalid Session TTL '{}', must be between [{}=24h0m0s]",
            below.as_nanos(),
            go_duration(s.consul.ttl_min())
        )
    );
}

#[test]
fn session_ttl_above_24h_is_a_500() {
    let s = scratch("ttl-max");
    let resp = s.api.put("/v1/session/create", r#"{"TTL":"86401s"}"#);
    assert_eq!(resp.status, 500);
    assert_eq!(
        resp.text(),
        format!(
            "Invalid Session TTL '86401000000000', must be between [{}=24h0m0s]",
            go_duration(s.consul.ttl_min())
        )
    );
}

#[test]
fn unknown_session_behavior_is_a_500() {
    let s = scratch("behavior");
    let resp = s.api.put("/v1/session/create", r#"{"Behavior":"bogus"}"#);
    assert_eq!(
        (resp.status, resp.text().as_str()),
        (500, "Invalid Behavior setting 'bogus'")
    );
}

#[test]
fn malformed_session_body_is_a_400_with_the_decoder_error() {
    let s = scratch("bad-json");
    let resp = s.api.put("/v1/session/create", "{not json");
    assert_eq!(resp.status, 400);
    assert_eq!(
        resp.text(),
        "Request decode failed: invalid character 'n' looking for beginning of object key string"
    );
}

#[test]
fn session_info_is_an_array_with_consul_defaults() {
    let s = scratch("info-shape");
    let id = s.session(json!({ "Name": "shape" }));
    let resp = s.api.get(&format!("/v1/session/info/{id}"));
    assert_eq!(resp.status, 200);
    assert!(
        resp.index().is_some_and(|i| i > 0),
        "info carries X-Consul-Index"
    );
    let list = resp.json();
    let info = &list.as_array().expect("an array")[0];
    assert_eq!(info["ID"], id);
    assert_eq!(info["Name"], "shape");
    assert_eq!(info["Node"], s.api.node_name());
    assert_eq!(
        info["LockDelay"], 15_000_000_000u64,
        "default lock-delay, in ns"
    );
    assert_eq!(info["Behavior"], "release");
    assert_eq!(info["TTL"], "");
    if s.api.is_pre_1_7() {
        // 1.6 predates NodeChecks/ServiceChecks: the default check shows in
        // `Checks` (observed on 1.6.2).
        assert_eq!(info["Checks"], json!(["serfHealth"]), "{info}");
        assert!(info.get("NodeChecks").is_none(), "{info}");
    } else {
        assert_eq!(info["NodeChecks"], json!(["serfHealth"]));
        assert_eq!(info["ServiceChecks"], Value::Null);
    }
    assert!(info["CreateIndex"].as_u64().is_some_and(|i| i > 0));
    assert_eq!(info["CreateIndex"], info["ModifyIndex"]);
}

#[test]
fn numeric_lock_delay_is_nanoseconds_from_1000_and_seconds_below() {
    let s = scratch("lock-delay-number");
    let ns = s.session(json!({ "LockDelay": 2_000_000_000u64 }));
    let secs = s.session(json!({ "LockDelay": 5 }));
    assert_eq!(
        s.api.session_info(&ns).unwrap()["LockDelay"],
        2_000_000_000u64
    );
    assert_eq!(
        s.api.session_info(&secs).unwrap()["LockDelay"],
        5_000_000_000u64
    );
}

#[test]
fn lock_delay_above_60s_is_stored_unclamped() {
    let s = scratch("lock-delay-61");
    let id = s.session(json!({ "LockDelay": "61s" }));
    assert_eq!(
        s.api.session_info(&id).unwrap()["LockDelay"],
        61_000_000_000u64
    );
}

#[test]
fn empty_node_checks_make_a_session_without_checks() {
    let s = scratch("no-checks");
    if s.api.is_pre_1_7() {
        // 1.6 knows only `Checks`, and shows the empty list (observed on
        // 1.6.2).
        let id = s.session(json!({ "Checks": [], "LockDelay": "0s" }));
        let info = s.api.session_info(&id).unwrap();
        assert_eq!(info["Checks"], json!([]), "{info}");
        assert_eq!(info["LockDelay"], 0);
        return;
    }
    let id = s.session(json!({ "NodeChecks": [], "LockDelay": "0s" }));
    let info = s.api.session_info(&id).unwrap();
    assert_eq!(info["NodeChecks"], json!([]));
    assert_eq!(info["LockDelay"], 0);
}

#[test]
fn unknown_node_check_is_a_500() {
    let s = scratch("missing-check");
    let resp = s
        .api
        .put("/v1/session/create", r#"{"NodeChecks":["no-such-check"]}"#);
    if s.api.is_pre_1_7() {
        // 1.6 ignores the field it does not know: a session with the
        // default check.
        assert_eq!(resp.status, 200, "{}", resp.text());
        let id = resp.json()["ID"].as_str().unwrap().to_string();
        s.sessions.borrow_mut().push(id.clone());
        assert_eq!(
            s.api.session_info(&id).unwrap()["Checks"],
            json!(["serfHealth"])
        );
    } else {
        assert_eq!(resp.status, 500);
        assert_eq!(
            resp.text(),
            "apply failed: Missing check 'no-such-check' registration"
        );
    }
    // `Checks`, which every version knows, is checked by every version;
    // 1.6 words the refusal without the `apply failed: ` prefix.
    let resp = s
        .api
        .put("/v1/session/create", r#"{"Checks":["no-such-check"]}"#);
    assert_eq!(resp.status, 500, "{}", resp.text());
    let expected = if s.api.is_pre_1_7() {
        "Missing check 'no-such-check' registration"
    } else {
        "apply failed: Missing check 'no-such-check' registration"
    };
    assert_eq!(resp.text(), expected);
}

#[test]
fn renew_of_unknown_session_is_a_404() {
    let s = scratch("renew-404");
    let resp = s.api.session_renew(ZERO);
    assert_eq!(resp.status, 404);
    assert_eq!(resp.text(), format!("Session id '{ZERO}' not found"));
}

#[test]
fn renew_answers_the_session_in_an_array() {
    let s = scratch("renew-200");
    let ttl = go_duration(s.consul.ttl_min());
    let id = s.session(json!({ "TTL": ttl, "LockDelay": "0s" }));
    let resp = s.api.session_renew(&id);
    assert_eq!(resp.status, 200, "{}", resp.text());
    let list = resp.json();
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    assert_eq!(list[0]["ID"], id);
    assert!(list[0]["TTL"].as_str().is_some_and(|t| !t.is_empty()));
}

#[test]
fn info_of_unknown_session_is_an_empty_array_with_an_index() {
    let s = scratch("info-404");
    let resp = s.api.get(&format!("/v1/session/info/{ZERO}"));
    assert_eq!(resp.status, 200);
    assert_eq!(resp.json(), json!([]));
    assert!(resp.index().is_some_and(|i| i > 0));
}

#[test]
fn destroy_is_idempotent() {
    let s = scratch("destroy");
    let resp = s.api.put(&format!("/v1/session/destroy/{ZERO}"), "");
    assert_eq!((resp.status, resp.json()), (200, json!(true)));
    let id = s.session(json!({ "LockDelay": "0s" }));
    for _ in 0..2 {
        let resp = s.api.put(&format!("/v1/session/destroy/{id}"), "");
        assert_eq!((resp.status, resp.json()), (200, json!(true)));
    }
    assert!(s.api.session_info(&id).is_none());
}

// ---- Locks ----

#[test]
fn acquire_is_exclusive_and_the_holder_may_acquire_again() {
    let s = scratch("acquire");
    let s1 = s.session(json!({ "LockDelay": "0s" }));
    let s2 = s.session(json!({ "LockDelay": "0s" }));
    assert_eq!(
        s.put(
            &format!("{}?acquire={s1}&flags={LOCK_FLAGS}", s.kv("lock")),
            "v1"
        ),
        json!(true)
    );
    let held = s.get("lock").unwrap();
    assert_eq!(
        (held.lock_index, held.session.as_deref(), held.flags),
        (1, Some(s1.as_str()), LOCK_FLAGS)
    );
    assert_eq!(
        s.put(&format!("{}?acquire={s2}", s.kv("lock")), "v2"),
        json!(false)
    );
    assert_eq!(
        s.put(&format!("{}?acquire={s1}", s.kv("lock")), "v1b"),
        json!(true)
    );
    let again = s.get("lock").unwrap();
    assert_eq!(
        again.lock_index, 1,
        "re-acquire by the holder keeps LockIndex"
    );
    assert_eq!(again.value, b"v1b");
}

#[test]
fn a_write_without_flags_sets_flags_to_zero() {
    let s = scratch("flags-reset");
    let s1 = s.session(json!({ "LockDelay": "0s" }));
    s.put(&format!("{}?acquire={s1}&flags=42", s.kv("lock")), "a");
    s.put(&format!("{}?acquire={s1}", s.kv("lock")), "b");
    assert_eq!(s.get("lock").unwrap().flags, 0, "re-acquire without flags");
    s.put(&format!("{}?flags=7", s.kv("plain")), "x");
    s.put(&s.kv("plain"), "y");
    assert_eq!(s.get("plain").unwrap().flags, 0, "plain PUT without flags");
}

#[test]
fn release_by_a_non_holder_is_false() {
    let s = scratch("release-other");
    let s1 = s.session(json!({ "LockDelay": "0s" }));
    let s2 = s.session(json!({ "LockDelay": "0s" }));
    s.put(&format!("{}?acquire={s1}", s.kv("lock")), "v");
    assert_eq!(
        s.put(&format!("{}?release={s2}", s.kv("lock")), ""),
        json!(false)
    );
    assert_eq!(s.get("lock").unwrap().session.as_deref(), Some(s1.as_str()));
    assert_eq!(
        s.put(&format!("{}?release={s1}", s.kv("missing")), ""),
        json!(false)
    );
}

#[test]
fn release_writes_its_own_body_and_flags() {
    let s = scratch("release-body");
    let s1 = s.session(json!({ "LockDelay": "0s" }));
    s.put(&format!("{}?acquire={s1}&flags=5", s.kv("lock")), "held");
    assert_eq!(
        s.put(
            &format!("{}?release={s1}&flags={LOCK_FLAGS}", s.kv("lock")),
            "kept"
        ),
        json!(true)
    );
    let e = s.get("lock").unwrap();
    assert_eq!((e.session, e.lock_index, e.flags), (None, 1, LOCK_FLAGS));
    assert_eq!(e.value, b"kept");

    s.put(&format!("{}?acquire={s1}&flags=5", s.kv("lock")), "again");
    assert_eq!(
        s.put(&format!("{}?release={s1}", s.kv("lock")), ""),
        json!(true)
    );
    let resp = s.api.get(&s.kv("lock"));
    assert_eq!(
        resp.json()[0]["Value"],
        Value::Null,
        "a bare release empties the value"
    );
    assert_eq!(resp.json()[0]["Flags"], 0);
    assert!(
        resp.json()[0].get("Session").is_none(),
        "no Session field when unlocked"
    );
}

#[test]
fn plain_put_on_a_held_key_keeps_the_session_and_zeroes_lock_index() {
    let s = scratch("hijack");
    let s1 = s.session(json!({ "LockDelay": "0s" }));
    s.put(&format!("{}?acquire={s1}", s.kv("lock")), "mine");
    assert_eq!(s.put(&s.kv("lock"), "hijack"), json!(true));
    let e = s.get("lock").unwrap();
    assert_eq!((e.session.as_deref(), e.lock_index), (Some(s1.as_str()), 0));
    assert_eq!(e.value, b"hijack");
}

#[test]
fn cas_zero_only_creates_and_cas_n_needs_the_modify_index() {
    let s = scratch("cas");
    assert_eq!(s.put(&format!("{}?cas=0", s.kv("k")), "first"), json!(true));
    assert_eq!(
        s.put(&format!("{}?cas=0", s.kv("k")), "second"),
        json!(false)
    );
    let m = s.get("k").unwrap().modify_index;
    assert_eq!(
        s.put(&format!("{}?cas={}", s.kv("k"), m + 1000), "stale"),
        json!(false)
    );
    assert_eq!(
        s.put(&format!("{}?cas={m}", s.kv("k")), "third"),
        json!(true)
    );
    assert_eq!(s.get("k").unwrap().value, b"third");
}

#[test]
fn delete_with_a_wrong_cas_is_false_and_with_the_right_one_deletes() {
    let s = scratch("delete-cas");
    s.put(&s.kv("k"), "v");
    let m = s.get("k").unwrap().modify_index;
    let resp = s.api.delete(&format!("{}?cas={}", s.kv("k"), m + 1000));
    assert_eq!(resp.json(), json!(false));
    assert_eq!(
        s.api.delete(&format!("{}?cas=0", s.kv("k"))).json(),
        json!(false)
    );
    assert!(s.get("k").is_some());
    assert_eq!(
        s.api.delete(&format!("{}?cas={m}", s.kv("k"))).json(),
        json!(true)
    );
    assert!(s.get("k").is_none());
    assert_eq!(
        s.api.delete(&s.kv("never-there")).json(),
        json!(true),
        "plain DELETE is always true"
    );
}

#[test]
fn destroy_releases_the_key_and_arms_the_lock_delay() {
    let s = scratch("lock-delay");
    let delay = Duration::from_secs(2);
    let s1 = s.session(json!({ "LockDelay": "2s" }));
    let s2 = s.session(json!({ "LockDelay": "0s" }));
    s.put(&format!("{}?acquire={s1}", s.kv("lock")), "v");
    let before = s.get("lock").unwrap().modify_index;
    let destroyed_at = Instant::now();
    s.api.session_destroy(&s1);

    let e = s.get("lock").unwrap();
    assert_eq!(
        (e.session, e.lock_index),
        (None, 1),
        "released, LockIndex kept"
    );
    assert_eq!(e.value, b"v");
    assert!(e.modify_index > before);
    assert_eq!(
        s.put(&format!("{}?acquire={s2}", s.kv("lock")), "mine"),
        json!(false),
        "refused inside the lock-delay although nobody holds the key"
    );
    assert_eq!(s.get("lock").unwrap().session, None);

    let deadline = Instant::now() + Duration::from_secs(15);
    while s.put(&format!("{}?acquire={s2}", s.kv("lock")), "mine") != json!(true) {
        assert!(
            Instant::now() < deadline,
            "never acquirable after the lock-delay\n{}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(destroyed_at.elapsed() >= delay - Duration::from_millis(50));
    assert_eq!(s.get("lock").unwrap().lock_index, 2);
}

#[test]
fn lock_delay_zero_allows_acquiring_at_once() {
    let s = scratch("no-delay");
    let s1 = s.session(json!({ "LockDelay": "0s" }));
    let s2 = s.session(json!({ "LockDelay": "0s" }));
    s.put(&format!("{}?acquire={s1}", s.kv("lock")), "v");
    s.api.session_destroy(&s1);
    assert_eq!(
        s.put(&format!("{}?acquire={s2}", s.kv("lock")), "v2"),
        json!(true)
    );
}

#[test]
fn behavior_delete_removes_held_keys_when_the_session_goes() {
    let s = scratch("behavior-delete");
    let id = s.session(json!({ "Behavior": "delete", "LockDelay": "0s" }));
    s.put(&format!("{}?acquire={id}", s.kv("eph")), "e");
    s.api.session_destroy(&id);
    let resp = s.api.get(&s.kv("eph"));
    assert_eq!(resp.status, 404);
}

#[test]
fn acquire_with_an_unknown_or_malformed_session_is_a_500() {
    let s = scratch("bad-session");
    let resp = s.api.put(&format!("{}?acquire={ZERO}", s.kv("k")), "v");
    assert_eq!(resp.status, 500);
    // 1.10 prefixes `raft apply failed: `, 1.6 does not: the stable part is
    // the end.
    assert!(
        resp.text()
            .ends_with(&format!("invalid session \"{ZERO}\"")),
        "{}",
        resp.text()
    );
    // A malformed ID fails the index lookup up to 1.10 (1.6.2 observed,
    // 1.10 recorded); 1.15.10 checks the session first and words it as an
    // unknown one. Between those we know neither, so accept both.
    let resp = s.api.put(&format!("{}?acquire=nope", s.kv("k")), "v");
    assert_eq!(resp.status, 500);
    let (lookup, unknown) = (
        resp.text().contains("UUID must be 36 characters"),
        resp.text().ends_with("invalid session \"nope\""),
    );
    let version = s.api.version_number();
    assert!(
        match version {
            v if v < (1, 11) => lookup,
            v if v >= (1, 15) => unknown,
            _ => lookup || unknown,
        },
        "Consul {version:?}: {}",
        resp.text()
    );
    assert!(s.get("k").is_none());
}

// ---- Values and keys ----

#[test]
fn an_empty_body_stores_a_null_value() {
    let s = scratch("empty");
    s.put(&s.kv("empty"), "");
    let resp = s.api.get(&s.kv("empty"));
    assert_eq!(resp.json()[0]["Value"], Value::Null);
}

#[test]
fn percent_encoded_keys_are_stored_decoded() {
    let s = scratch("encoded");
    let path = format!("/v1/kv/{}/a%3Fb%20c%23d", encode_key(&s.prefix));
    s.put(&path, "q");
    let resp = s.api.get(&path);
    assert_eq!(resp.json()[0]["Key"], format!("{}/a?b c#d", s.prefix));
    assert_eq!(s.get("a?b c#d").unwrap().value, b"q");
}

#[test]
fn flags_above_i64_max_round_trip_exactly() {
    let s = scratch("big-flags");
    s.put(&format!("{}?flags={SEMAPHORE_FLAGS}", s.kv("f")), "f");
    let resp = s.api.get(&s.kv("f"));
    // The number as written, digit for digit (an f64 would round it); 1.6
    // pretty-prints, so the space after the colon is optional.
    let text = resp.text().replace(": ", ":");
    assert!(
        text.contains(&format!("\"Flags\":{SEMAPHORE_FLAGS}")),
        "{}",
        resp.text()
    );
    assert_eq!(s.get("f").unwrap().flags, SEMAPHORE_FLAGS);
}

#[test]
fn raw_answers_the_bare_value() {
    let s = scratch("raw");
    s.put(&s.kv("r"), "hello \u{1F600}");
    let resp = s.api.get(&format!("{}?raw", s.kv("r")));
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, "hello \u{1F600}".as_bytes());
    assert!(resp.index().is_some());
}

#[test]
fn keys_with_a_separator_fold_deeper_keys() {
    let s = scratch("keys");
    for k in ["a", "b/1", "b/2", "c"] {
        s.put(&s.kv(k), "");
    }
    let resp = s.api.get(&format!(
        "/v1/kv/{}/?keys&separator=/",
        encode_key(&s.prefix)
    ));
    let p = &s.prefix;
    assert_eq!(
        resp.json(),
        json!([format!("{p}/a"), format!("{p}/b/"), format!("{p}/c")])
    );
    let all = s
        .api
        .get(&format!("/v1/kv/{}/?keys", encode_key(&s.prefix)));
    assert_eq!(all.json().as_array().map(Vec::len), Some(4));
}

#[test]
fn empty_recurse_and_keys_listings_are_404() {
    let s = scratch("empty-list");
    let recurse = s.api.get(&format!("{}?recurse", s.kv("nothing/")));
    assert_eq!(recurse.status, 404);
    assert!(recurse.index().is_some());
    assert_eq!(s.api.get(&format!("{}?keys", s.kv("nothing/"))).status, 404);
}

#[test]
fn recurse_matches_by_string_prefix_not_by_path() {
    let s = scratch("string-prefix");
    s.put(&s.kv("jobs/a"), "");
    s.put(&s.kv("jobs/abc"), "");
    s.put(&s.kv("jobs/b"), "");
    let keys: Vec<String> = s
        .api
        .kv_list(&s.key("jobs/a"))
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(keys, vec![s.key("jobs/a"), s.key("jobs/abc")]);
}

// ---- Indexes and blocking ----

#[test]
fn missing_key_is_a_404_with_empty_body_and_index_headers() {
    let s = scratch("missing");
    s.put(&s.kv("other"), "x");
    let written = s.get("other").unwrap().modify_index;
    let resp = s.api.get(&s.kv("missing"));
    assert_eq!(resp.status, 404);
    assert!(resp.body.is_empty());
    let index = resp.index().expect("X-Consul-Index on a 404");
    assert!(
        index >= written,
        "the table index ({index}) is at least our last write ({written})"
    );
    // Go's canonical spelling, which clients matching case-sensitively see.
    let names: Vec<&str> = resp.headers.iter().map(|(k, _)| k.as_str()).collect();
    assert!(names.contains(&"X-Consul-Knownleader"), "{names:?}");
    assert_eq!(resp.header("x-consul-knownleader"), Some("true"));
    assert_eq!(resp.header("X-Consul-Lastcontact"), Some("0"));
}

#[test]
fn writes_carry_no_index_header() {
    let s = scratch("write-headers");
    let resp = s.api.put(&s.kv("k"), "v");
    assert_eq!(resp.status, 200);
    assert!(resp.index().is_none());
}

#[test]
fn a_key_read_reports_the_keys_modify_index_and_a_listing_the_highest_under_it() {
    let s = scratch("indexes");
    s.put(&s.kv("dir/a"), "1");
    s.put(&s.kv("dir/b"), "2");
    s.put(&s.kv("elsewhere"), "3");
    let a = s.get("dir/a").unwrap();
    let b = s.get("dir/b").unwrap();
    assert_eq!(s.api.get(&s.kv("dir/a")).index(), Some(a.modify_index));
    let listing = s.api.get(&format!("{}?recurse", s.kv("dir/")));
    assert_eq!(listing.index(), Some(a.modify_index.max(b.modify_index)));
}

#[test]
fn a_blocking_read_returns_when_the_key_changes() {
    let s = scratch("block-change");
    s.put(&s.kv("k"), "before");
    let index = s.api.get(&s.kv("k")).index().unwrap();
    let api = s.api.clone();
    let path = format!("{}?index={index}&wait=30s", s.kv("k"));
    let started = Instant::now();
    let waiter = std::thread::spawn(move || api.get(&path));
    s.put(&s.kv("k"), "after");
    let resp = waiter.join().expect("blocking read thread");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "woke on the change\n{}",
        s.log()
    );
    assert!(resp.index().unwrap() > index);
    assert_eq!(KvEntry::from_json(&resp.json()[0]).value, b"after");
}

#[test]
fn a_blocking_read_ignores_writes_to_other_keys() {
    let s = scratch("block-other");
    s.put(&s.kv("watched"), "v");
    let index = s.api.get(&s.kv("watched")).index().unwrap();
    s.put(&s.kv("unrelated"), "o");
    let started = Instant::now();
    let resp = s
        .api
        .get(&format!("{}?index={index}&wait=2s", s.kv("watched")));
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "returned early\n{}",
        s.log()
    );
    assert_eq!(resp.status, 200);
    assert_eq!(resp.index(), Some(index));
}

#[test]
fn a_blocking_listing_wakes_when_a_key_under_it_is_deleted() {
    let s = scratch("block-delete");
    s.put(&s.kv("dir/a"), "1");
    s.put(&s.kv("dir/b"), "2");
    let index = s
        .api
        .get(&format!("{}?recurse", s.kv("dir/")))
        .index()
        .unwrap();
    let api = s.api.clone();
    let path = format!("{}?recurse&index={index}&wait=30s", s.kv("dir/"));
    let started = Instant::now();
    let waiter = std::thread::spawn(move || api.get(&path));
    // The lower key: without tombstones the listing's index would not move.
    s.api.kv_delete(&s.key("dir/a"));
    let resp = waiter.join().expect("blocking listing thread");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "woke on the delete\n{}",
        s.log()
    );
    assert!(resp.index().unwrap() > index);
    assert_eq!(resp.json().as_array().map(Vec::len), Some(1));
}

#[test]
fn a_bad_wait_or_index_is_a_400() {
    let s = scratch("bad-wait");
    let resp = s.api.get(&format!("{}?index=1&wait=bogus", s.kv("k")));
    assert_eq!(
        (resp.status, resp.text().as_str()),
        (400, "Invalid wait time")
    );
    let resp = s.api.get(&format!("{}?index=abc", s.kv("k")));
    assert_eq!((resp.status, resp.text().as_str()), (400, "Invalid index"));
}

// ---- Refusals ----

#[test]
fn acquire_release_and_cas_together_are_a_400() {
    let s = scratch("conflict");
    let resp = s.api.put(&format!("{}?cas=0&acquire=x", s.kv("k")), "v");
    assert_eq!(
        (resp.status, resp.text().as_str()),
        (400, "Conflicting flags: acquire=x&cas=0")
    );
    let resp = s.api.delete(&format!("{}?recurse&cas=1", s.kv("k")));
    assert_eq!(resp.status, 400);
    assert!(resp.text().starts_with("Conflicting flags: "));
}

#[test]
fn stale_and_consistent_together_are_a_400_and_consistent_alone_works() {
    let s = scratch("consistency");
    s.put(&s.kv("k"), "v");
    assert_eq!(
        s.api.get(&format!("{}?stale&consistent", s.kv("k"))).status,
        400
    );
    let resp = s.api.get(&format!("{}?consistent", s.kv("k")));
    assert_eq!(resp.status, 200);
    assert!(resp.index().is_some());
}

#[test]
fn another_datacenter_is_a_500() {
    let s = scratch("dc");
    let resp = s.api.get(&format!("{}?dc=no-such-dc", s.kv("k")));
    assert_eq!(
        (resp.status, resp.text().as_str()),
        (500, "No path to datacenter")
    );
}

#[test]
fn a_wrong_method_is_a_405() {
    let s = scratch("method");
    let resp = s.api.get("/v1/session/create");
    assert_eq!(resp.status, 405);
    assert!(resp.header("Allow").is_some_and(|a| a.contains("PUT")));
}

/// Not in CONSUL_API.md: OSS Consul refuses namespaces outright (1.10's
/// `parseEntMeta`), which is what `CONSUL_NAMESPACE` meets on such an agent.
#[test]
fn oss_consul_refuses_a_namespace_with_a_400() {
    let s = scratch("namespace");
    let resp = s.api.get(&format!("{}?ns=team", s.kv("k")));
    if s.api.is_pre_1_7() {
        // 1.6 knows no namespaces and ignores `ns`: a missing key is a 404
        // as without it.
        assert_eq!(resp.status, 404, "{}", resp.text());
        return;
    }
    assert_eq!(resp.status, 400);
    assert_eq!(
        resp.text(),
        "Invalid query parameter: \"ns\" - Namespaces are a Consul Enterprise feature"
    );
    let resp = s.api.put("/v1/session/create?ns=team", "{}");
    assert_eq!(resp.status, 400);
}

// ---- Transactions (CONSUL_API.md Part A2) ----

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

impl Scratch {
    /// `PUT /v1/txn` with `ops`; the status and the parsed body.
    fn txn(&self, ops: Value) -> (u16, Value, crate::engines::consul::support::Resp) {
        let resp = self.api.put("/v1/txn", ops.to_string());
        assert!(
            matches!(resp.status, 200 | 409),
            "txn {ops}: {} {}\n{}",
            resp.status,
            resp.text(),
            self.log()
        );
        (resp.status, resp.json(), resp)
    }

    fn lock_op(&self, name: &str, session: &str, value: &str) -> Value {
        json!({ "KV": {
            "Verb": "lock",
            "Key": self.key(name),
            "Value": b64(value),
            "Flags": LOCK_FLAGS,
            "Session": session,
        }})
    }

    /// A refused transaction's one error: its op index and text.
    fn txn_refused(&self, ops: Value) -> (u64, String) {
        let (status, body, _) = self.txn(ops);
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["Results"], Value::Null, "{body}");
        let errors = body["Errors"].as_array().expect("an error list");
        assert_eq!(errors.len(), 1, "{body}");
        (
            errors[0]["OpIndex"].as_u64().expect("OpIndex"),
            errors[0]["What"].as_str().expect("What").to_string(),
        )
    }
}

#[test]
fn txn_lock_on_a_free_key_answers_the_entry_with_its_indexes_but_no_value() {
    let s = scratch("txn-lock");
    let id = s.session(json!({ "TTL": go_duration(s.consul.ttl_min()), "LockDelay": "0s" }));
    let get = json!({ "KV": { "Verb": "get", "Key": s.key("k") } });
    let (status, body, resp) = s.txn(json!([s.lock_op("k", &id, "node-a"), get]));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["Errors"], Value::Null, "{body}");
    assert_eq!(resp.index(), None, "a txn write sends no X-Consul-Index");
    let results = body["Results"].as_array().expect("a result list");
    assert_eq!(results.len(), 2, "{body}");
    let locked = &results[0]["KV"];
    assert_eq!(locked["Key"], s.key("k"));
    assert_eq!(locked["LockIndex"], 1);
    assert_eq!(locked["Flags"], LOCK_FLAGS);
    assert_eq!(locked["Session"], id.as_str());
    assert_eq!(locked["Value"], Value::Null, "lock omits the value: {body}");
    let modify = locked["ModifyIndex"].as_u64().expect("ModifyIndex");
    assert!(modify > 0);
    assert_eq!(locked["CreateIndex"], modify);
    // `get` answers the same entry, with the value.
    let got = &results[1]["KV"];
    assert_eq!(got["Value"], b64("node-a"));
    assert_eq!(got["ModifyIndex"], modify);
    assert_eq!(got["LockIndex"], 1);
    let entry = s.get("k").expect("the lock was written");
    assert_eq!(entry.session.as_deref(), Some(id.as_str()));
    assert_eq!(entry.value, b"node-a");
    assert_eq!(entry.modify_index, modify);
}

#[test]
fn txn_lock_by_the_holder_keeps_lock_index_and_bumps_modify_index() {
    let s = scratch("txn-relock");
    let id = s.session(json!({ "TTL": go_duration(s.consul.ttl_min()), "LockDelay": "0s" }));
    let (_, first, _) = s.txn(json!([s.lock_op("k", &id, "one")]));
    let (status, again, _) = s.txn(json!([s.lock_op("k", &id, "two")]));
    assert_eq!(status, 200, "{again}");
    let (first, again) = (&first["Results"][0]["KV"], &again["Results"][0]["KV"]);
    assert_eq!(again["LockIndex"], first["LockIndex"]);
    assert!(again["ModifyIndex"].as_u64() > first["ModifyIndex"].as_u64());
}

#[test]
fn txn_lock_held_by_another_session_is_a_409_saying_so() {
    let s = scratch("txn-held");
    let ttl = go_duration(s.consul.ttl_min());
    let holder = s.session(json!({ "TTL": ttl, "LockDelay": "0s" }));
    let rival = s.session(json!({ "TTL": ttl, "LockDelay": "0s" }));
    assert_eq!(s.txn(json!([s.lock_op("k", &holder, "h")])).0, 200);
    let (op, what) = s.txn_refused(json!([s.lock_op("k", &rival, "r")]));
    assert_eq!(op, 0);
    assert!(what.contains("lock is already held"), "{what}");
    assert!(what.contains(&format!("{:?}", s.key("k"))), "{what}");
    assert_eq!(
        s.get("k").unwrap().session.as_deref(),
        Some(holder.as_str())
    );
}

#[test]
fn txn_lock_during_a_lock_delay_is_a_409_saying_so_where_acquire_says_false() {
    let s = scratch("txn-delay");
    let ttl = go_duration(s.consul.ttl_min());
    let dies = s.session(json!({ "TTL": ttl, "LockDelay": "15s" }));
    let rival = s.session(json!({ "TTL": ttl, "LockDelay": "0s" }));
    assert!(s.api.kv_acquire(&s.key("k"), &dies, "d"));
    s.api.session_destroy(&dies);
    let (op, what) = s.txn_refused(json!([s.lock_op("k", &rival, "r")]));
    assert_eq!(op, 0);
    assert!(what.contains("lock delay"), "{what}");
    assert!(what.contains(&format!("{:?}", s.key("k"))), "{what}");
    // The plain acquire cannot tell this from a lost race.
    assert!(!s.api.kv_acquire(&s.key("k"), &rival, "r"));
    assert!(s.get("k").unwrap().session.is_none());
}

#[test]
fn txn_lock_with_an_unknown_session_is_a_409() {
    let s = scratch("txn-bad-session");
    let (op, what) = s.txn_refused(json!([s.lock_op("k", ZERO, "v")]));
    assert_eq!(op, 0);
    assert!(
        what.contains(&format!("invalid session \"{ZERO}\"")),
        "{what}"
    );
    assert!(s.get("k").is_none());
}

#[test]
fn txn_applies_all_ops_at_one_index_or_none() {
    let s = scratch("txn-atomic");
    let ttl = go_duration(s.consul.ttl_min());
    let holder = s.session(json!({ "TTL": ttl, "LockDelay": "0s" }));
    let rival = s.session(json!({ "TTL": ttl, "LockDelay": "0s" }));
    let set = |name: &str, value: &str| json!({ "KV": { "Verb": "set", "Key": s.key(name), "Value": b64(value) } });
    let (status, body, _) = s.txn(json!([set("a", "1"), set("b", "2")]));
    assert_eq!(status, 200, "{body}");
    let (a, b) = (s.get("a").unwrap(), s.get("b").unwrap());
    assert_eq!(
        (a.value.as_slice(), b.value.as_slice()),
        (&b"1"[..], &b"2"[..])
    );
    assert_eq!(a.modify_index, b.modify_index, "one raft index");
    assert_eq!(body["Results"][0]["KV"]["ModifyIndex"], a.modify_index);
    // The second op fails: the first is not applied either.
    assert_eq!(s.txn(json!([s.lock_op("held", &holder, "h")])).0, 200);
    let (op, what) = s.txn_refused(json!([set("a", "changed"), s.lock_op("held", &rival, "r")]));
    assert_eq!(op, 1);
    assert!(what.contains("lock is already held"), "{what}");
    assert_eq!(s.get("a").unwrap().value, b"1");
    assert_eq!(s.get("a").unwrap().modify_index, a.modify_index);
}

#[test]
fn txn_unlock_cas_and_delete_cas_refuse_with_a_409() {
    let s = scratch("txn-verbs");
    let ttl = go_duration(s.consul.ttl_min());
    let holder = s.session(json!({ "TTL": ttl, "LockDelay": "0s" }));
    let rival = s.session(json!({ "TTL": ttl, "LockDelay": "0s" }));
    let (_, locked, _) = s.txn(json!([s.lock_op("k", &holder, "h")]));
    let index = locked["Results"][0]["KV"]["ModifyIndex"].as_u64().unwrap();
    let op = |verb: &str, extra: Value| {
        let mut kv = json!({ "Verb": verb, "Key": s.key("k") });
        kv.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!([{ "KV": kv }])
    };
    let (_, what) = s.txn_refused(op("unlock", json!({ "Session": rival })));
    assert!(what.contains("lock isn't held"), "{what}");
    let (_, what) = s.txn_refused(op("cas", json!({ "Index": index + 1000 })));
    assert!(what.contains("index is stale"), "{what}");
    let (_, what) = s.txn_refused(op("delete-cas", json!({ "Index": index + 1000 })));
    assert!(what.contains("index is stale"), "{what}");
    assert_eq!(
        s.get("k").unwrap().session.as_deref(),
        Some(holder.as_str())
    );
    // The holder's unlock releases and keeps the lock index.
    let (status, body, _) = s.txn(op("unlock", json!({ "Session": holder })));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["Results"][0]["KV"]["LockIndex"], 1);
    assert!(s.get("k").unwrap().session.is_none());
    // A matching delete-cas deletes, and a delete has no result.
    let index = s.get("k").unwrap().modify_index;
    let (status, body, _) = s.txn(op("delete-cas", json!({ "Index": index })));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["Results"], json!([]), "{body}");
    assert!(s.get("k").is_none());
}

#[test]
fn txn_write_wakes_a_blocking_read() {
    let s = scratch("txn-wakes");
    s.put(&s.kv("k"), "before");
    let index = s.api.get(&s.kv("k")).index().unwrap();
    let api = s.api.clone();
    let path = format!("{}?index={index}&wait=60s", s.kv("k"));
    let sent = path.clone();
    let started = Instant::now();
    let waiter = std::thread::spawn(move || api.get(&sent));
    if let Some(emu) = s.consul.emulator() {
        // Here we can be sure the read is parked before the write.
        assert!(emu
            .wait_for_request(Duration::from_secs(10), |r| r.path == path)
            .is_some());
    }
    let set = json!([{ "KV": { "Verb": "set", "Key": s.key("k"), "Value": b64("after") } }]);
    assert_eq!(s.txn(set).0, 200);
    let resp = waiter.join().expect("blocking read thread");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "woke on the txn write\n{}",
        s.log()
    );
    assert!(resp.index().unwrap() > index);
    assert_eq!(KvEntry::from_json(&resp.json()[0]).value, b"after");
}
