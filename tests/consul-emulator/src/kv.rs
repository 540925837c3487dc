//! `/v1/kv/<key>`: Consul's `KVSEndpoint` handler and the checks its
//! `KVS.Apply` RPC makes before a write reaches raft.

use crate::acl;
use crate::http::{self, Answer, Outcome, ReadOpts, Request};
use crate::state::{DeleteOp, Entry, KvOp, KvWrite};
use crate::Shared;
use base64::Engine;
use hyper::Method;
use serde::Serialize;
use std::time::Instant;

/// Consul's default `kv_max_value_size`.
const MAX_VALUE_SIZE: u64 = 512 * 1024;

/// The entry as Consul's `DirEntry` marshals: struct order, `Session`
/// omitted when empty, `Value` null for an empty value.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct EntryJson<'a> {
    lock_index: u64,
    key: &'a str,
    flags: u64,
    value: Option<String>,
    #[serde(skip_serializing_if = "str::is_empty")]
    session: &'a str,
    create_index: u64,
    modify_index: u64,
}

impl<'a> From<&'a Entry> for EntryJson<'a> {
    fn from(e: &'a Entry) -> EntryJson<'a> {
        EntryJson {
            lock_index: e.lock_index,
            key: &e.key,
            flags: e.flags,
            value: (!e.value.is_empty())
                .then(|| base64::engine::general_purpose::STANDARD.encode(&e.value)),
            session: &e.session,
            create_index: e.create_index,
            modify_index: e.modify_index,
        }
    }
}

fn entries_json(entries: &[Entry]) -> Vec<EntryJson<'_>> {
    entries.iter().map(EntryJson::from).collect()
}

pub async fn handle(shared: &Shared, req: &Request) -> Outcome {
    let key = req.path.strip_prefix("/v1/kv/").unwrap_or_default();
    // Consul parses the read options for every method, so even a PUT with
    // `?wait=bogus` is refused.
    let opts = match http::parse_read_opts(&req.query) {
        Ok(o) => o,
        Err(a) => return a.into(),
    };
    if let Err(a) = http::refuse_namespace(req) {
        return a.into();
    }
    match req.method {
        Method::GET if req.query.has("keys") => list_keys(shared, req, key, &opts).await,
        Method::GET => get(shared, req, key, &opts).await,
        Method::PUT => put(shared, req, key),
        _ => delete(shared, req, key),
    }
}

fn missing_key() -> Outcome {
    Answer::text(400, "Missing key name").into()
}

/// Consul's `conflictingFlags`: the message quotes the whole query in
/// `url.Values.Encode` form.
fn conflicting(req: &Request, flags: &[&str]) -> Option<Outcome> {
    let present = flags.iter().filter(|f| req.query.has(f)).count();
    (present > 1)
        .then(|| Answer::text(400, format!("Conflicting flags: {}", req.query.encode())).into())
}

async fn get(shared: &Shared, req: &Request, key: &str, opts: &ReadOpts) -> Outcome {
    let recurse = req.query.has("recurse");
    if !recurse && key.is_empty() {
        return missing_key();
    }
    let authz = match http::rpc_gate(shared, req, opts.stale) {
        Ok(a) => a,
        Err(a) => return a.into(),
    };
    if recurse {
        // Lists are filtered by ACLs, not refused.
        let listed = http::blocking(shared, opts, |st| {
            let (index, entries) = st.kv_list(key);
            let visible: Vec<Entry> = entries
                .into_iter()
                .filter(|e| authz.key_read(&e.key))
                .cloned()
                .collect();
            Ok((index, visible))
        })
        .await;
        let (index, entries) = match listed {
            Ok(r) => r,
            Err(outcome) => return outcome,
        };
        let answer = if entries.is_empty() {
            Answer::empty(404)
        } else {
            Answer::json(&entries_json(&entries), req)
        };
        return http::with_meta(answer, index, opts, shared).into();
    }
    if !authz.key_read(key) {
        return acl::denied().into();
    }
    let got = http::blocking(shared, opts, |st| {
        let (index, entry) = st.kv_get(key);
        Ok((index, entry.cloned()))
    })
    .await;
    let (index, entry) = match got {
        Ok(r) => r,
        Err(outcome) => return outcome,
    };
    let answer = match entry {
        None => Answer::empty(404),
        Some(e) if req.query.has("raw") => {
            let mut raw = Answer::empty(200)
                .header("content-type", "text/plain")
                .header("x-content-type-options", "nosniff")
                .header("content-security-policy", "sandbox");
            raw.body = e.value;
            raw
        }
        Some(e) => Answer::json(&[EntryJson::from(&e)], req),
    };
    http::with_meta(answer, index, opts, shared).into()
}

async fn list_keys(shared: &Shared, req: &Request, prefix: &str, opts: &ReadOpts) -> Outcome {
    // The misspelling came first and is still honoured; the right spelling
    // wins when both are there.
    let separator = req
        .query
        .get("separator")
        .or_else(|| req.query.get("seperator"))
        .unwrap_or_default()
        .to_string();
    let authz = match http::rpc_gate(shared, req, opts.stale) {
        Ok(a) => a,
        Err(a) => return a.into(),
    };
    let listed = http::blocking(shared, opts, |st| {
        let (index, keys) = st.kv_keys(prefix, &separator);
        let visible: Vec<String> = keys.into_iter().filter(|k| authz.key_read(k)).collect();
        Ok((index, visible))
    })
    .await;
    let (index, keys) = match listed {
        Ok(r) => r,
        Err(outcome) => return outcome,
    };
    // An empty listing of the root is `[]`; of anything else, a 404.
    let answer = if keys.is_empty() && !prefix.is_empty() {
        Answer::empty(404)
    } else {
        Answer::json(&keys, req)
    };
    http::with_meta(answer, index, opts, shared).into()
}

fn put(shared: &Shared, req: &Request, key: &str) -> Outcome {
    if key.is_empty() {
        return missing_key();
    }
    if let Some(refused) = conflicting(req, &["cas", "acquire", "release"]) {
        return refused;
    }
    let q = &req.query;
    // The handler starts from flags 0: a write without `flags` clears them.
    let flags = match q
        .has("flags")
        .then(|| http::parse_u64(q.get("flags").unwrap_or_default()))
    {
        None => 0,
        Some(Ok(f)) => f,
        Some(Err(e)) => return Answer::text(500, e).into(),
    };
    let mut op = KvOp::Set;
    if q.has("cas") {
        match http::parse_u64(q.get("cas").unwrap_or_default()) {
            Ok(cas) => op = KvOp::Cas(cas),
            Err(e) => return Answer::text(500, e).into(),
        }
    }
    if q.has("acquire") {
        op = KvOp::Lock(q.get("acquire").unwrap_or_default().to_string());
    }
    if q.has("release") {
        op = KvOp::Unlock(q.get("release").unwrap_or_default().to_string());
    }
    if let Some(len) = req.content_length.filter(|&len| len > MAX_VALUE_SIZE) {
        return Answer::text(
            413,
            format!(
                "Request body({len} bytes) too large, max size: {MAX_VALUE_SIZE} bytes. See \
                 https://www.consul.io/docs/agent/options.html#kv_max_value_size."
            ),
        )
        .into();
    }
    let authz = match http::rpc_gate(shared, req, false) {
        Ok(a) => a,
        Err(a) => return a.into(),
    };
    if !authz.key_write(key) {
        return acl::denied().into();
    }
    let plain = op == KvOp::Set;
    let write = KvWrite {
        key: key.to_string(),
        value: req.body.to_vec(),
        flags,
        op,
    };
    let applied = shared.mutate(|st, now| {
        // The leader checks the lock-delay before raft sees the acquire;
        // the refusal is a plain `false`.
        if matches!(write.op, KvOp::Lock(_)) && st.lock_delay_active(key, now) {
            return None;
        }
        Some(st.kv_apply(write))
    });
    let result = match applied {
        None => false,
        Some(result) => {
            shared.record.count_write();
            match result {
                Ok(ok) => ok,
                Err(e) if req.legacy_1_6 => return Answer::text(500, e).into(),
                Err(e) => return Answer::text(500, format!("raft apply failed: {e}")).into(),
            }
        }
    };
    // A plain set always answers true.
    Answer::json(&(plain || result), req).into()
}

fn delete(shared: &Shared, req: &Request, key: &str) -> Outcome {
    if let Some(refused) = conflicting(req, &["recurse", "cas"]) {
        return refused;
    }
    let mut op = DeleteOp::Delete;
    if req.query.has("recurse") {
        op = DeleteOp::Tree;
    } else if key.is_empty() {
        return missing_key();
    }
    if req.query.has("cas") {
        match http::parse_u64(req.query.get("cas").unwrap_or_default()) {
            Ok(cas) => op = DeleteOp::Cas(cas),
            Err(e) => return Answer::text(500, e).into(),
        }
    }
    let authz = match http::rpc_gate(shared, req, false) {
        Ok(a) => a,
        Err(a) => return a.into(),
    };
    let allowed = match op {
        DeleteOp::Tree => authz.key_write_prefix(key),
        _ => authz.key_write(key),
    };
    if !allowed {
        return acl::denied().into();
    }
    shared.record.count_write();
    let deleted = shared.mutate(|st, _: Instant| st.kv_delete(key, op));
    // Only a CAS delete reports its result.
    let answer = matches!(op, DeleteOp::Cas(_))
        .then_some(deleted)
        .unwrap_or(true);
    Answer::json(&answer, req).into()
}
