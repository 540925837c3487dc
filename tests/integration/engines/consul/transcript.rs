//! Replays the 88 requests recorded against a real Consul 1.10.12 agent
//! (`consul-emulator/testdata/consul-1.10-transcript.json`) against fresh
//! emulators and compares each answer's status, normalised body and
//! whether it carried `X-Consul-Index`.
//!
//! Normalisation follows the transcript's legend: session IDs become the
//! `<Sn>` the recording gave them (learned from the create responses), the
//! all-zero UUID `<ZERO>`, `CreateIndex`/`ModifyIndex` `<I>`, the node name
//! `<NODE>`; `<I>` in a request is the `X-Consul-Index` of the previous read.
//!
//! Emulator only: the replay needs an agent with nothing in it.

use crate::engines::consul::support::{Api, Resp, TestConsul};
use base64::Engine;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const TRANSCRIPT: &str =
    include_str!("../../../consul-emulator/testdata/consul-1.10-transcript.json");
const ZERO: &str = "00000000-0000-0000-0000-000000000000";
const LOCK_FLAGS: &str = "3304740253564472344";
const SEMAPHORE_FLAGS: &str = "16210313421097356768";

fn steps() -> Vec<Value> {
    let doc: Value = serde_json::from_str(TRANSCRIPT).expect("transcript is JSON");
    assert_eq!(doc["consul_version"], "1.10.12");
    doc["steps"].as_array().expect("steps").clone()
}

fn step(all: &[Value], n: u64) -> &Value {
    all.iter()
        .find(|s| s["step"] == n)
        .unwrap_or_else(|| panic!("no step {n} in the transcript"))
}

struct Replay {
    consul: TestConsul,
    api: Api,
    node: String,
    /// Real session ID → its label in the recording.
    ids: Vec<(String, String)>,
    last_index: Option<u64>,
}

impl Replay {
    fn new(consul: TestConsul) -> Replay {
        let node = consul
            .emulator()
            .map(|e| e.node_name().to_string())
            .unwrap_or_default();
        Replay {
            api: consul.api(),
            consul,
            node,
            ids: Vec::new(),
            last_index: None,
        }
    }

    fn label(&mut self, real: &str, label: &str) {
        self.ids.push((real.to_string(), label.to_string()));
    }

    fn real(&self, label: &str) -> &str {
        self.ids
            .iter()
            .find(|(_, l)| l == label)
            .map(|(r, _)| r.as_str())
            .unwrap_or_else(|| panic!("no session learned for {label}"))
    }

    /// A recorded request text with our IDs and index filled in.
    fn fill(&self, text: &str) -> String {
        let mut out = text.replace("<ZERO>", ZERO);
        for (real, label) in &self.ids {
            out = out.replace(label, real);
        }
        if let Some(i) = self.last_index {
            out = out.replace("<I>", &i.to_string());
        }
        out
    }

    fn normalise_text(&self, s: &str) -> String {
        if !self.node.is_empty() && s == self.node {
            return "<NODE>".to_string();
        }
        let mut out = s.replace(ZERO, "<ZERO>");
        for (real, label) in &self.ids {
            out = out.replace(real, label);
        }
        out
    }

    fn normalise(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.normalise_text(s)),
            Value::Array(items) => Value::Array(items.iter().map(|i| self.normalise(i)).collect()),
            Value::Object(fields) => Value::Object(
                fields
                    .iter()
                    .map(|(k, v)| {
                        let v = match k.as_str() {
                            "CreateIndex" | "ModifyIndex" if v.is_u64() => json!("<I>"),
                            _ => self.normalise(v),
                        };
                        // Object keys can be session IDs too (a semaphore's holders).
                        (self.normalise_text(k), v)
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    fn send(&mut self, request: &str, body: Option<&str>, headers: &[(&str, &str)]) -> Resp {
        let (method, path) = request.split_once(' ').expect("METHOD PATH");
        let path = self.fill(path);
        let body = body.map(|b| self.fill(b));
        let resp = self
            .api
            .try_request(method, &path, body.as_deref().map(str::as_bytes), headers)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        if let Some(i) = resp.index() {
            self.last_index = Some(i);
        }
        resp
    }

    /// The body as the transcript shows it: null when empty, JSON when it
    /// parses, else a string.
    fn body_value(resp: &Resp) -> Value {
        if resp.body.is_empty() {
            return Value::Null;
        }
        serde_json::from_slice(&resp.body).unwrap_or_else(|_| Value::String(resp.text()))
    }

    /// Sends a recorded step; returns what differs, if anything.
    fn try_step(&mut self, s: &Value, headers: &[(&str, &str)]) -> Result<(), String> {
        let request = s["request"].as_str().expect("request");
        let resp = self.send(request, s["request_body"].as_str(), headers);
        let mut actual = Self::body_value(&resp);
        let mut expected = s["response"].clone();
        if let (Some(real), Some(label)) = (actual["ID"].as_str(), expected["ID"].as_str()) {
            if label.starts_with("<S") && !self.ids.iter().any(|(r, _)| r == real) {
                self.label(real, label);
            }
        }
        actual = self.normalise(&actual);
        if let Some(decoded) = s["lock_value_decoded"].as_str() {
            self.compare_semaphore_listing(&mut actual, &mut expected, decoded)?;
        }
        let mut problems = Vec::new();
        if resp.status != s["status"] {
            problems.push(format!("status {} (recorded {})", resp.status, s["status"]));
        }
        if actual != expected {
            problems.push(format!("body {actual} (recorded {expected})"));
        }
        let has_index = resp.index().is_some();
        if Value::Bool(has_index) != s["has_index_header"] {
            problems.push(format!("X-Consul-Index present: {has_index}"));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "step {} `{request}`: {}",
                s["step"],
                problems.join("; ")
            ))
        }
    }

    fn step(&mut self, s: &Value) {
        self.step_with(s, &[]);
    }

    fn step_with(&mut self, s: &Value, headers: &[(&str, &str)]) {
        if let Err(e) = self.try_step(s, headers) {
            panic!("{e}\nrequests:\n{}", self.consul.request_log_dump());
        }
    }

    /// Step 85 lists `consul lock -n 2`'s records. Its `.lock` value holds
    /// the real session IDs in base64, which the recording left as they
    /// were (it gives them decoded and labelled beside); and the listing is
    /// ordered by key, which holds session IDs we cannot choose. So the
    /// value is compared decoded and the entries in key order after
    /// labelling.
    fn compare_semaphore_listing(
        &self,
        actual: &mut Value,
        expected: &mut Value,
        recorded_lock_value: &str,
    ) -> Result<(), String> {
        let lock = |list: &mut Value| -> Option<Value> {
            let entry = list
                .as_array_mut()?
                .iter_mut()
                .find(|e| e["Key"].as_str().is_some_and(|k| k.ends_with("/.lock")))?;
            Some(std::mem::replace(
                &mut entry["Value"],
                json!("<compared decoded>"),
            ))
        };
        let ours = lock(actual).ok_or("no .lock entry in our listing")?;
        lock(expected);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(ours.as_str().unwrap_or_default())
            .map_err(|e| e.to_string())?;
        let ours: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        let recorded: Value =
            serde_json::from_str(recorded_lock_value).map_err(|e| e.to_string())?;
        if self.normalise(&ours) != recorded {
            return Err(format!("`.lock` holds {ours}, recorded {recorded}"));
        }
        for list in [actual, expected] {
            if let Some(items) = list.as_array_mut() {
                items.sort_by(|a, b| a["Key"].as_str().cmp(&b["Key"].as_str()));
            }
        }
        Ok(())
    }

    /// A write of our own that must succeed with `true`.
    fn must(&mut self, request: &str, body: &str) {
        let resp = self.send(request, Some(body), &[]);
        assert_eq!(
            (resp.status, Self::body_value(&resp)),
            (200, json!(true)),
            "{request}\n{}",
            self.consul.request_log_dump()
        );
    }

    fn create_session(&mut self, label: &str, body: Value) {
        let id = self.api.session_create(&body.to_string());
        self.label(&id, label);
    }
}

fn emulator(
    configure: impl FnOnce(consul_emulator::Builder) -> consul_emulator::Builder,
) -> TestConsul {
    // The recording's agent was a 1.10 with Consul's default
    // session_ttl_min of 10 s, whatever version the rest of the run imitates.
    TestConsul::emulator_only(|b| {
        configure(
            b.version("1.10.12")
                .session_ttl_min(Duration::from_secs(10)),
        )
    })
}

#[test]
fn transcript_has_88_steps_in_order() {
    let all = steps();
    assert_eq!(all.len(), 88);
    for (i, s) in all.iter().enumerate() {
        assert_eq!(s["step"], i as u64 + 1);
    }
}

#[test]
fn replays_the_transcript_kv_and_session_steps() {
    let all = steps();
    let mut replay = Replay::new(emulator(|b| b));
    let mut destroyed_at = None;
    for s in all
        .iter()
        .filter(|s| s["step"].as_u64().is_some_and(|n| n <= 78))
    {
        let n = s["step"].as_u64().unwrap_or_default();
        let started = Instant::now();
        match n {
            50 => {
                destroyed_at = Some(Instant::now());
                replay.step(s);
            }
            // Recorded after the lock-delay (3 s) ran out: we retry until it
            // has, and check that it did not end early.
            53 => {
                let deadline = Instant::now() + Duration::from_secs(15);
                while let Err(e) = replay.try_step(s, &[]) {
                    assert!(
                        Instant::now() < deadline,
                        "{e}\n{}",
                        replay.consul.request_log_dump()
                    );
                    std::thread::sleep(Duration::from_millis(100));
                }
                let since = destroyed_at.map(|t| t.elapsed()).unwrap_or_default();
                assert!(
                    since >= Duration::from_millis(2950),
                    "lock-delay ended after {since:?}"
                );
            }
            _ => replay.step(s),
        }
        if let Some(recorded) = s["elapsed_s"].as_f64() {
            // Blocking reads that timed out: they may not return early.
            let floor = Duration::from_secs_f64(recorded) - Duration::from_millis(20);
            assert!(
                started.elapsed() >= floor,
                "step {n} returned after {:?}",
                started.elapsed()
            );
        }
    }
}

#[test]
fn replays_the_transcript_acl_steps() {
    // Recorded on a second agent with ACLs on and `default_policy = "deny"`.
    let all = steps();
    let mut replay = Replay::new(emulator(|b| b.acl_default_deny()));
    replay.step(step(&all, 79));
    replay.step_with(step(&all, 80), &[("X-Consul-Token", "nope")]);
    replay.step(step(&all, 81));
    replay.step(step(&all, 82));
}

/// Steps 83–88 read what the real `consul lock` and `consul lock -n 2`
/// wrote. We cannot run that binary, so we write the same records through
/// the same API calls (Go's `api.Lock` and `api.Semaphore`, see
/// CONSUL_API.md §6), then replay the recorded reads; likewise for their
/// clean-up on exit before steps 87 and 88.
#[test]
fn replays_the_transcript_consul_lock_steps() {
    let all = steps();
    let mut r = Replay::new(emulator(|b| b));

    // `consul lock t/cl sleep 3`: a release session with TTL 15s and the
    // default lock-delay, holding t/cl/.lock with an empty value.
    r.create_session(
        "<S8>",
        json!({ "Name": "Consul lock for 'sleep 3' at 't/cl'", "TTL": "15s" }),
    );
    r.must(
        &format!("PUT /v1/kv/t/cl/.lock?acquire=<S8>&flags={LOCK_FLAGS}"),
        "",
    );
    r.step(step(&all, 83));
    r.step(step(&all, 84));

    // `consul lock -n 2 t/cs sleep 3`, two holders: delete-behaviour
    // sessions, a contender key each, and the `.lock` record written by CAS.
    for label in ["<S9>", "<S10>"] {
        let session = json!({ "Name": "Consul lock for 'sleep 3' at 't/cs'", "TTL": "15s", "Behavior": "delete" });
        r.create_session(label, session);
        r.must(
            &format!("PUT /v1/kv/t/cs/{label}?acquire={label}&flags={SEMAPHORE_FLAGS}"),
            "",
        );
    }
    let holders = r#"{"Limit":2,"Holders":{"<S9>":true,"<S10>":true}}"#;
    r.must(
        &format!("PUT /v1/kv/t/cs/.lock?cas=0&flags={SEMAPHORE_FLAGS}"),
        holders,
    );
    r.step(step(&all, 85));
    r.step(step(&all, 86));

    // Each holder leaves: drop itself from `.lock` by CAS, delete its
    // contender key, destroy its session; the last one's clean-up deletes
    // the now empty `.lock`.
    for (label, left) in [
        ("<S9>", r#"{"Limit":2,"Holders":{"<S10>":true}}"#),
        ("<S10>", r#"{"Limit":2,"Holders":{}}"#),
    ] {
        let modify = r
            .api
            .kv_get("t/cs/.lock")
            .expect(".lock present")
            .modify_index;
        r.must(
            &format!("PUT /v1/kv/t/cs/.lock?cas={modify}&flags={SEMAPHORE_FLAGS}"),
            left,
        );
        r.must(&format!("DELETE /v1/kv/t/cs/{label}"), "");
        let id = r.real(label).to_string();
        r.api.session_destroy(&id);
    }
    let modify = r
        .api
        .kv_get("t/cs/.lock")
        .expect(".lock present")
        .modify_index;
    r.must(&format!("DELETE /v1/kv/t/cs/.lock?cas={modify}"), "");
    r.step(step(&all, 87));

    // `consul lock` exits: release, destroy the session, delete the unheld
    // lock key by CAS.
    r.must(
        &format!("PUT /v1/kv/t/cl/.lock?release=<S8>&flags={LOCK_FLAGS}"),
        "",
    );
    let id = r.real("<S8>").to_string();
    r.api.session_destroy(&id);
    let modify = r
        .api
        .kv_get("t/cl/.lock")
        .expect(".lock present")
        .modify_index;
    r.must(&format!("DELETE /v1/kv/t/cl/.lock?cas={modify}"), "");
    r.step(step(&all, 88));
}
