//! `/v1/session/*`: Consul's session HTTP handlers and the checks of its
//! `Session.Apply` / `Session.Renew` RPCs.

use crate::acl;
use crate::duration;
use crate::gojson;
use crate::http::{self, Answer, Outcome, Request};
use crate::random_uuid;
use crate::state::{self, Behavior, NewSession, ServiceCheck, Session};
use crate::Shared;
use serde::Serialize;
use serde_json::Value;

/// A session as Consul's `structs.Session` marshals, in struct order.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct SessionJson<'a> {
    #[serde(rename = "ID")]
    id: &'a str,
    name: &'a str,
    node: &'a str,
    /// Nanoseconds, Go's `time.Duration`.
    lock_delay: i64,
    behavior: &'static str,
    #[serde(rename = "TTL")]
    ttl: &'a str,
    /// Absent before 1.7, like `ServiceChecks`.
    #[serde(skip_serializing_if = "Option::is_none")]
    node_checks: Option<&'a Option<Vec<String>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    service_checks: Option<Option<Vec<ServiceCheckJson<'a>>>>,
    /// Omitted on 1.7+ when empty; `null` always before 1.7.
    #[serde(skip_serializing_if = "Option::is_none")]
    checks: Option<Option<&'a [String]>>,
    create_index: u64,
    modify_index: u64,
}

#[derive(Serialize)]
struct ServiceCheckJson<'a> {
    #[serde(rename = "ID")]
    id: &'a str,
    #[serde(rename = "Namespace")]
    namespace: &'a str,
}

impl<'a> SessionJson<'a> {
    fn new(s: &'a Session, pre_1_7: bool) -> SessionJson<'a> {
        if pre_1_7 {
            // 1.6.2 shows the checks the session has, `[]` included, and
            // no NodeChecks/ServiceChecks.
            return SessionJson {
                node_checks: None,
                service_checks: None,
                checks: Some(Some(&s.checks[..])),
                ..SessionJson::new(s, false)
            };
        }
        SessionJson {
            id: &s.id,
            name: &s.name,
            node: &s.node,
            lock_delay: s.lock_delay_ns,
            behavior: s.behavior.as_str(),
            ttl: &s.ttl,
            node_checks: Some(&s.node_checks),
            service_checks: Some(s.service_checks.as_ref().map(|list| {
                list.iter()
                    .map(|c| ServiceCheckJson {
                        id: &c.id,
                        namespace: &c.namespace,
                    })
                    .collect()
            })),
            checks: (!s.checks.is_empty()).then_some(Some(&s.checks[..])),
            create_index: s.create_index,
            modify_index: s.modify_index,
        }
    }
}

fn sessions_json(list: &[Session], pre_1_7: bool) -> Vec<SessionJson<'_>> {
    list.iter().map(|s| SessionJson::new(s, pre_1_7)).collect()
}

/// The create request after Consul's defaults and JSON decoding.
#[derive(Debug)]
struct CreateBody {
    name: String,
    node: String,
    lock_delay_ns: i64,
    behavior: String,
    ttl: String,
    node_checks: Option<Vec<String>>,
    checks: Option<Vec<String>>,
    service_checks: Option<Vec<ServiceCheck>>,
}

impl CreateBody {
    fn defaults(node: &str) -> CreateBody {
        CreateBody {
            name: String::new(),
            node: node.to_string(),
            lock_delay_ns: 15_000_000_000,
            behavior: "release".to_string(),
            ttl: String::new(),
            node_checks: Some(vec![state::SERF_CHECK.to_string()]),
            checks: Some(vec![state::SERF_CHECK.to_string()]),
            service_checks: None,
        }
    }
}

/// Decodes a create body onto the defaults as Go's `Session.UnmarshalJSON`
/// does: field names match case-insensitively, `null` leaves a field alone
/// (but empties a list), a type mismatch is an error, unknown fields are
/// ignored, and `LockDelay` is a duration string or a number where anything
/// under 1000 means seconds (for strings too: `"20ns"` is 20 s).
/// Consul 1.6 (`legacy_1_6`) knows no `NodeChecks` or `ServiceChecks` and
/// ignores them.
fn decode(body: &[u8], into: &mut CreateBody, legacy_1_6: bool) -> Result<(), String> {
    let range = gojson::first_value(body)?;
    let text = String::from_utf8_lossy(&body[range]);
    let value: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let fields = match value {
        Value::Null => return Ok(()),
        Value::Object(fields) => fields,
        other => {
            return Err(format!(
                "json: cannot unmarshal {} into Go value of type struct {{ LockDelay interface {{}}; *structs.Alias }}",
                gojson::kind_name(&other)
            ))
        }
    };
    let mut first_error: Option<String> = None;
    let mut lock_delay: Option<Value> = None;
    for (name, value) in fields {
        let known = [
            "ID",
            "Name",
            "Node",
            "LockDelay",
            "Behavior",
            "TTL",
            "NodeChecks",
            "ServiceChecks",
            "Checks",
            "CreateIndex",
            "ModifyIndex",
        ];
        let Some(field) = known.into_iter().find(|k| k.eq_ignore_ascii_case(&name)) else {
            continue;
        };
        if legacy_1_6 && matches!(field, "NodeChecks" | "ServiceChecks") {
            continue;
        }
        let result = match field {
            "LockDelay" => {
                lock_delay = Some(value);
                Ok(())
            }
            "ID" => go_string(field, &value).map(drop),
            "Name" => go_string(field, &value).map(|s| keep_or_set(&mut into.name, s)),
            "Node" => go_string(field, &value).map(|s| keep_or_set(&mut into.node, s)),
            "Behavior" => go_string(field, &value).map(|s| keep_or_set(&mut into.behavior, s)),
            "TTL" => go_string(field, &value).map(|s| keep_or_set(&mut into.ttl, s)),
            "NodeChecks" => go_strings(field, &value).map(|l| into.node_checks = l),
            "Checks" => go_strings(field, &value).map(|l| into.checks = l),
            "ServiceChecks" => service_checks(&value).map(|l| into.service_checks = l),
            _ => go_u64(field, &value),
        };
        if let Err(e) = result {
            first_error.get_or_insert(e);
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    if let Some(v) = lock_delay.filter(|v| !v.is_null()) {
        let mut ns = match v {
            Value::String(s) => duration::parse(&s)?,
            // Go reads JSON numbers as float64 and converts.
            Value::Number(n) => n.as_f64().unwrap_or(0.0) as i64,
            _ => 0,
        };
        if ns < 1000 {
            ns = ns.wrapping_mul(1_000_000_000);
        }
        into.lock_delay_ns = ns;
    }
    Ok(())
}

fn type_error(field: &str, value: &Value, go_type: &str) -> String {
    let shown = match value {
        Value::Number(n) if go_type != "string" => format!("number {n}"),
        other => gojson::kind_name(other).to_string(),
    };
    format!("json: cannot unmarshal {shown} into Go struct field .{field} of type {go_type}")
}

fn keep_or_set(field: &mut String, value: Option<String>) {
    if let Some(v) = value {
        *field = v;
    }
}

/// `Ok(None)` for null, which leaves a Go string unchanged.
fn go_string(field: &str, v: &Value) -> Result<Option<String>, String> {
    match v {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        other => Err(type_error(field, other, "string")),
    }
}

fn go_strings(field: &str, v: &Value) -> Result<Option<Vec<String>>, String> {
    match v {
        Value::Null => Ok(None),
        Value::Array(items) => items
            .iter()
            .map(|item| go_string(field, item).map(Option::unwrap_or_default))
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        other => Err(type_error(field, other, "[]string")),
    }
}

fn go_u64(field: &str, v: &Value) -> Result<(), String> {
    match v {
        Value::Null => Ok(()),
        Value::Number(n) if n.is_u64() => Ok(()),
        other => Err(type_error(field, other, "uint64")),
    }
}

fn service_checks(v: &Value) -> Result<Option<Vec<ServiceCheck>>, String> {
    let items = match v {
        Value::Null => return Ok(None),
        Value::Array(items) => items,
        other => return Err(type_error("ServiceChecks", other, "[]structs.ServiceCheck")),
    };
    let mut out = Vec::new();
    for item in items {
        let mut check = ServiceCheck {
            id: String::new(),
            namespace: String::new(),
        };
        match item {
            Value::Null => {}
            Value::Object(fields) => {
                for (name, value) in fields {
                    if name.eq_ignore_ascii_case("ID") {
                        check.id = go_string("ServiceChecks.ID", value)?.unwrap_or_default();
                    } else if name.eq_ignore_ascii_case("Namespace") {
                        check.namespace =
                            go_string("ServiceChecks.Namespace", value)?.unwrap_or_default();
                    }
                }
            }
            other => return Err(type_error("ServiceChecks", other, "structs.ServiceCheck")),
        }
        out.push(check);
    }
    Ok(Some(out))
}

/// Consul's `fixupEmptySessionChecks`: the deprecated `Checks` and the
/// newer `NodeChecks` both default to `[serfHealth]`; an empty `Checks`
/// means "no checks at all".
fn fixup_checks(b: &mut CreateBody) {
    if b.checks.as_ref().map_or(true, Vec::is_empty) {
        b.node_checks = Some(Vec::new());
        return;
    }
    if b.checks.as_deref() == Some(&[state::SERF_CHECK.to_string()][..]) {
        b.checks = None;
        return;
    }
    if b.node_checks.as_ref().map_or(true, Vec::is_empty) {
        b.checks = None;
    }
}

pub fn create(shared: &Shared, req: &Request) -> Outcome {
    if let Err(a) = http::refuse_namespace(req) {
        return a.into();
    }
    let mut body = CreateBody::defaults(&shared.config.node_name);
    // Consul decodes the body only when Content-Length says there is one.
    if req.content_length.unwrap_or(0) > 0 {
        if let Err(e) = decode(&req.body, &mut body, req.legacy_1_6) {
            return Answer::text(400, format!("Request decode failed: {e}")).into();
        }
    }
    if shared.config.pre_1_7 {
        // Fields it does not know are ignored; only `Checks` binds.
        body.node_checks = None;
        body.service_checks = None;
        if body.checks.as_ref().map_or(true, Vec::is_empty) {
            body.checks = Some(Vec::new());
        }
    } else {
        fixup_checks(&mut body);
    }
    let authz = match http::rpc_gate(shared, req, false) {
        Ok(a) => a,
        Err(a) => return a.into(),
    };
    if body.node.is_empty() {
        return Answer::text(500, "Must provide Node").into();
    }
    if !authz.session_write() {
        return acl::denied().into();
    }
    let behavior = match body.behavior.as_str() {
        "" | "release" => Behavior::Release,
        "delete" => Behavior::Delete,
        other => return Answer::text(500, format!("Invalid Behavior setting '{other}'")).into(),
    };
    let mut ttl_ns = 0;
    if !body.ttl.is_empty() {
        ttl_ns = match duration::parse(&body.ttl) {
            Ok(ns) => ns,
            Err(e) => {
                return Answer::text(500, format!("Session TTL '{}' invalid: {e}", body.ttl)).into()
            }
        };
        let min = shared.config.session_ttl_min.as_nanos() as i64;
        if ttl_ns != 0 && (ttl_ns < min || ttl_ns > state::SESSION_TTL_MAX_NS) {
            return Answer::text(
                500,
                format!(
                    "Invalid Session TTL '{ttl_ns}', must be between [{}={}]",
                    duration::format(min),
                    duration::format(state::SESSION_TTL_MAX_NS)
                ),
            )
            .into();
        }
    }
    let created = shared.mutate(|st, now| {
        let id = loop {
            let id = random_uuid();
            if matches!(st.session_get(&id), Ok((_, None))) {
                break id;
            }
        };
        let new = NewSession {
            id: id.clone(),
            name: body.name,
            node: body.node,
            lock_delay_ns: body.lock_delay_ns,
            behavior,
            ttl: body.ttl,
            ttl_ns: ttl_ns.max(0),
            node_checks: body.node_checks,
            service_checks: body.service_checks,
            checks: body.checks.unwrap_or_default(),
        };
        st.session_create(new, now).map(|()| id)
    });
    shared.record.count_write();
    match created {
        Ok(id) => Answer::json(&serde_json::json!({ "ID": id }), req).into(),
        // 1.6.2 answers the FSM's text bare.
        Err(e) if req.legacy_1_6 => Answer::text(500, e).into(),
        Err(e) => Answer::text(500, format!("apply failed: {e}")).into(),
    }
}

fn session_id<'a>(req: &'a Request, prefix: &str) -> Result<&'a str, Outcome> {
    match req.path.strip_prefix(prefix) {
        Some(id) if !id.is_empty() => Ok(id),
        _ => Err(Answer::text(400, "Missing session").into()),
    }
}

pub fn destroy(shared: &Shared, req: &Request) -> Outcome {
    if let Err(a) = http::refuse_namespace(req) {
        return a.into();
    }
    let id = match session_id(req, "/v1/session/destroy/") {
        Ok(id) => id,
        Err(o) => return o,
    };
    let authz = match http::rpc_gate(shared, req, false) {
        Ok(a) => a,
        Err(a) => return a.into(),
    };
    let exists = match shared.state().session_get(id) {
        Ok((_, found)) => found.is_some(),
        Err(e) => return Answer::text(500, format!("Session lookup failed: {e}")).into(),
    };
    // Destroying what is not there succeeds: destroy is idempotent.
    if exists {
        if !authz.session_write() {
            return acl::denied().into();
        }
        shared.record.count_write();
        // The lookup above already accepted the ID.
        let _ = shared.mutate(|st, now| st.session_destroy(id, now));
    }
    Answer::json(&true, req).into()
}

pub fn renew(shared: &Shared, req: &Request) -> Outcome {
    if let Err(o) = read_opts(req) {
        return o;
    }
    let id = match session_id(req, "/v1/session/renew/") {
        Ok(id) => id,
        Err(o) => return o,
    };
    let authz = match http::rpc_gate(shared, req, false) {
        Ok(a) => a,
        Err(a) => return a.into(),
    };
    let exists = match shared.state().session_get(id) {
        Ok((_, found)) => found.is_some(),
        Err(e) => return Answer::text(500, e).into(),
    };
    if !exists {
        return Answer::text(404, format!("Session id '{id}' not found")).into();
    }
    if !authz.session_write() {
        return acl::denied().into();
    }
    shared.record.count_write();
    match shared.mutate(|st, now| st.session_renew(id, now)) {
        Ok(Some(s)) => Answer::json(&[SessionJson::new(&s, shared.config.pre_1_7)], req).into(),
        // Expired between the two looks.
        Ok(None) => Answer::text(404, format!("Session id '{id}' not found")).into(),
        Err(e) => Answer::text(500, e).into(),
    }
}

/// Consul's `parse` and namespace check, which every read does first.
fn read_opts(req: &Request) -> Result<http::ReadOpts, Outcome> {
    let opts = http::parse_read_opts(&req.query)?;
    http::refuse_namespace(req)?;
    Ok(opts)
}

/// The blocking session reads share everything but the selection.
async fn read(
    shared: &Shared,
    req: &Request,
    opts: &http::ReadOpts,
    select: impl Fn(&state::State) -> Result<(u64, Vec<Session>), String>,
) -> Outcome {
    let authz = match http::rpc_gate(shared, req, opts.stale) {
        Ok(a) => a,
        Err(a) => return a.into(),
    };
    let result = http::blocking(shared, opts, |st| {
        let (index, list) = select(st).map_err(|e| Answer::text(500, e))?;
        // Reads are filtered by ACLs, not refused.
        Ok((
            index,
            if authz.session_read() {
                list
            } else {
                Vec::new()
            },
        ))
    })
    .await;
    match result {
        Ok((index, list)) => http::with_meta(
            Answer::json(&sessions_json(&list, shared.config.pre_1_7), req),
            index,
            opts,
            shared,
        )
        .into(),
        Err(outcome) => outcome,
    }
}

pub async fn info(shared: &Shared, req: &Request) -> Outcome {
    let opts = match read_opts(req) {
        Ok(o) => o,
        Err(o) => return o,
    };
    let id = match session_id(req, "/v1/session/info/") {
        Ok(id) => id.to_string(),
        Err(o) => return o,
    };
    read(shared, req, &opts, |st| {
        let (index, found) = st.session_get(&id)?;
        Ok((index, found.cloned().into_iter().collect()))
    })
    .await
}

pub async fn list(shared: &Shared, req: &Request) -> Outcome {
    let opts = match read_opts(req) {
        Ok(o) => o,
        Err(o) => return o,
    };
    read(shared, req, &opts, |st| {
        let (index, all) = st.session_list();
        Ok((index, all.into_iter().cloned().collect()))
    })
    .await
}

pub async fn node(shared: &Shared, req: &Request) -> Outcome {
    let opts = match read_opts(req) {
        Ok(o) => o,
        Err(o) => return o,
    };
    let node = match req.path.strip_prefix("/v1/session/node/") {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => return Answer::text(400, "Missing node name").into(),
    };
    read(shared, req, &opts, |st| {
        let (index, list) = st.node_sessions(&node);
        Ok((index, list.into_iter().cloned().collect()))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(json: &str) -> Result<CreateBody, String> {
        let mut b = CreateBody::defaults("n");
        decode(json.as_bytes(), &mut b, false)?;
        fixup_checks(&mut b);
        Ok(b)
    }

    #[test]
    fn lock_delay_forms() {
        assert_eq!(
            decoded(r#"{"LockDelay":"3s"}"#).unwrap().lock_delay_ns,
            3_000_000_000
        );
        assert_eq!(
            decoded(r#"{"LockDelay":2000000000}"#)
                .unwrap()
                .lock_delay_ns,
            2_000_000_000
        );
        assert_eq!(
            decoded(r#"{"LockDelay":5}"#).unwrap().lock_delay_ns,
            5_000_000_000
        );
        assert_eq!(
            decoded(r#"{"LockDelay":"20ns"}"#).unwrap().lock_delay_ns,
            20_000_000_000
        );
        assert_eq!(decoded(r#"{"LockDelay":"0s"}"#).unwrap().lock_delay_ns, 0);
        assert_eq!(
            decoded(r#"{"LockDelay":null}"#).unwrap().lock_delay_ns,
            15_000_000_000
        );
        assert_eq!(
            decoded(r#"{"LockDelay":"soon"}"#).unwrap_err(),
            "time: invalid duration \"soon\""
        );
    }

    #[test]
    fn fields_match_case_insensitively_and_types_are_checked() {
        let b = decoded(r#"{"ttl":"10s","name":"x","Unknown":1}"#).unwrap();
        assert_eq!((b.ttl.as_str(), b.name.as_str()), ("10s", "x"));
        assert_eq!(
            decoded(r#"{"TTL":10}"#).unwrap_err(),
            "json: cannot unmarshal number into Go struct field .TTL of type string"
        );
        assert!(decoded("[]")
            .unwrap_err()
            .starts_with("json: cannot unmarshal array"));
        assert_eq!(decoded("null").unwrap().node, "n");
        assert_eq!(
            decoded("{not json").unwrap_err(),
            "invalid character 'n' looking for beginning of object key string"
        );
    }

    #[test]
    fn check_fixups() {
        let b = decoded("{}").unwrap();
        assert_eq!(b.node_checks, Some(vec!["serfHealth".to_string()]));
        assert_eq!(b.checks, None);
        assert_eq!(
            decoded(r#"{"NodeChecks":[]}"#).unwrap().node_checks,
            Some(vec![])
        );
        // An empty deprecated list means no checks at all.
        assert_eq!(
            decoded(r#"{"Checks":[]}"#).unwrap().node_checks,
            Some(vec![])
        );
        let b = decoded(r#"{"Checks":["a"]}"#).unwrap();
        assert_eq!(b.checks, Some(vec!["a".to_string()]));
    }
}
