//! `PUT /v1/txn`: Consul's `Txn` handler for KV operations. Every op
//! applies at one raft index or none does; a refusal is a 409 naming the op
//! and why (CONSUL_API.md Part A2).

use crate::http::{self, Answer, Outcome, Request};
use crate::state::{Entry, TxnOp, TxnVerb};
use crate::{acl, Shared};
use base64::Engine;
use serde::Serialize;
use serde_json::{Map, Value};

/// Consul's `maxTxnOps`.
const MAX_TXN_OPS: usize = 64;
/// Consul's default `kv_max_value_size`, which a txn value obeys too.
const MAX_VALUE_SIZE: usize = 512 * 1024;

#[derive(Serialize)]
struct TxnResult<'a> {
    #[serde(rename = "KV")]
    kv: crate::kv::EntryJson<'a>,
}

#[derive(Serialize)]
struct TxnError {
    #[serde(rename = "OpIndex")]
    op_index: usize,
    #[serde(rename = "What")]
    what: String,
}

#[derive(Serialize)]
struct TxnResponse<'a> {
    #[serde(rename = "Results")]
    results: Option<Vec<TxnResult<'a>>>,
    #[serde(rename = "Errors")]
    errors: Option<Vec<TxnError>>,
}

/// Go's JSON decoding matches field names case-insensitively.
fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
        .filter(|v| !v.is_null())
}

fn decode_op(op: &Value) -> Result<TxnOp, String> {
    let kv = op
        .as_object()
        .and_then(|o| field(o, "KV"))
        .and_then(Value::as_object)
        // Node, service and check ops exist in Consul; we emulate KV only.
        .ok_or("emulator: only KV operations are emulated")?;
    let text = |name: &str| -> Result<String, String> {
        match field(kv, name) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(v) => Err(format!(
                "json: cannot unmarshal {} into Go struct field KVTxnOp.KV.{name} of type string",
                crate::gojson::kind_name(v)
            )),
        }
    };
    let number = |name: &str| -> Result<u64, String> {
        match field(kv, name) {
            None => Ok(0),
            Some(v) => v.as_u64().ok_or_else(|| {
                format!(
                    "json: cannot unmarshal {} into Go struct field KVTxnOp.KV.{name} of type uint64",
                    crate::gojson::kind_name(v)
                )
            }),
        }
    };
    let verb_text = text("Verb")?;
    let verb = match verb_text.as_str() {
        "set" => TxnVerb::Set,
        "cas" => TxnVerb::Cas,
        "lock" => TxnVerb::Lock,
        "unlock" => TxnVerb::Unlock,
        "get" => TxnVerb::Get,
        "delete" => TxnVerb::Delete,
        "delete-cas" => TxnVerb::DeleteCas,
        "check-session" => TxnVerb::CheckSession,
        other => return Err(format!("emulator: KV verb {other:?} is not emulated")),
    };
    let value = base64::engine::general_purpose::STANDARD
        .decode(text("Value")?)
        .map_err(|e| format!("illegal base64 data: {e}"))?;
    Ok(TxnOp {
        verb,
        key: text("Key")?,
        value,
        flags: number("Flags")?,
        index: number("Index")?,
        session: text("Session")?,
    })
}

pub fn handle(shared: &Shared, req: &Request) -> Outcome {
    let ops: Vec<Value> = match serde_json::from_slice(&req.body) {
        Ok(Value::Array(ops)) => ops,
        Ok(Value::Null) => Vec::new(),
        Ok(other) => {
            return Answer::text(
                400,
                format!(
                "Failed to parse body: json: cannot unmarshal {} into Go value of type api.TxnOps",
                crate::gojson::kind_name(&other)
            ),
            )
            .into()
        }
        Err(e) => return Answer::text(400, format!("Failed to parse body: {e}")).into(),
    };
    if ops.len() > MAX_TXN_OPS {
        return Answer::text(
            413,
            format!(
                "Transaction contains too many operations ({} > {MAX_TXN_OPS})",
                ops.len()
            ),
        )
        .into();
    }
    let ops = match ops.iter().map(decode_op).collect::<Result<Vec<_>, _>>() {
        Ok(ops) => ops,
        Err(e) if e.starts_with("emulator:") => return Answer::text(400, e).into(),
        Err(e) => return Answer::text(400, format!("Failed to parse body: {e}")).into(),
    };
    for op in &ops {
        if op.value.len() > MAX_VALUE_SIZE {
            return Answer::text(
                413,
                format!(
                    "Value for key {:?} is too large ({} > {MAX_VALUE_SIZE} bytes)",
                    op.key,
                    op.value.len()
                ),
            )
            .into();
        }
    }
    let read_only = ops.iter().all(|op| op.verb == TxnVerb::Get);
    let authz = match http::rpc_gate(shared, req, false) {
        Ok(a) => a,
        Err(a) => return a.into(),
    };
    let outcome = shared.mutate(|st, now| {
        // What the leader checks before raft sees the transaction: the
        // token, and a lock-delay on any key an op would lock.
        let refused: Vec<TxnError> = ops
            .iter()
            .enumerate()
            .filter_map(|(i, op)| {
                let allowed = match op.verb {
                    TxnVerb::Get => authz.key_read(&op.key),
                    _ => authz.key_write(&op.key),
                };
                let what = if !allowed {
                    acl::PERMISSION_DENIED.to_string()
                } else if op.verb == TxnVerb::Lock && st.lock_delay_active(&op.key, now) {
                    format!(
                        "failed to lock key {} due to lock delay",
                        crate::duration::go_quote(&op.key)
                    )
                } else {
                    return None;
                };
                Some(TxnError { op_index: i, what })
            })
            .collect();
        if !refused.is_empty() {
            return Err((refused, false));
        }
        if read_only {
            return st
                .kv_txn_read(&ops)
                .map_err(|(i, what)| (vec![TxnError { op_index: i, what }], false));
        }
        st.kv_txn(ops)
            .map_err(|(i, what)| (vec![TxnError { op_index: i, what }], true))
    });
    if !read_only && !matches!(&outcome, Err((_, false))) {
        shared.record.count_write();
    }
    let answer = match outcome {
        Ok(entries) => Answer::json(
            &TxnResponse {
                results: Some(entries.iter().map(result).collect()),
                errors: None,
            },
            req,
        ),
        Err((errors, _)) => {
            let mut a = Answer::json(
                &TxnResponse {
                    results: None,
                    errors: Some(errors),
                },
                req,
            );
            a.status = 409;
            a
        }
    };
    // A write answers without X-Consul-Index; a read-only transaction goes
    // to `Txn.Read`, whose answer carries the leader headers but no index
    // either.
    let answer = if read_only {
        let known_leader = !shared.faults.borrow().no_leader;
        answer
            .header("x-consul-knownleader", known_leader.to_string())
            .header("x-consul-lastcontact", "0")
    } else {
        answer
    };
    answer.into()
}

fn result(e: &Entry) -> TxnResult<'_> {
    TxnResult {
        kv: crate::kv::EntryJson::from(e),
    }
}
