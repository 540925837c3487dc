//! `/v1/session/*`: create, renew, destroy, info.

use std::fmt;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::Deserialize;

use super::{decode, Client, ConsulError, Op, REQUEST_TIMEOUT};

/// A Consul session ID (a UUID, as Consul gave it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionId(String);

impl SessionId {
    pub fn new(id: impl Into<String>) -> SessionId {
        SessionId(id.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What happens to held keys when the session is invalidated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Behavior {
    Release,
    Delete,
}

impl Behavior {
    fn as_str(self) -> &'static str {
        match self {
            Behavior::Release => "release",
            Behavior::Delete => "delete",
        }
    }
}

/// The session lockrun asks for.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    pub name: String,
    pub ttl: Duration,
    pub lock_delay: Duration,
    pub behavior: Behavior,
    /// Empty: none at all (not Consul's default, `serfHealth`).
    pub node_checks: Vec<String>,
    pub service_checks: Vec<String>,
}

impl SessionSpec {
    fn body(&self) -> serde_json::Value {
        let mut body = serde_json::json!({
            "Name": self.name,
            "TTL": duration_param(self.ttl),
            // Always sent, "0s" included: an omitted LockDelay means Consul's
            // 15 s default, the trap Go API users fall into.
            "LockDelay": duration_param(self.lock_delay),
            "Behavior": self.behavior.as_str(),
        });
        // Consul before 1.7 knows only `Checks` and ignores `NodeChecks`;
        // later versions take both (and an empty `Checks` empties
        // `NodeChecks`), so we send the same list in each.
        body["NodeChecks"] = serde_json::json!(self.node_checks);
        body["Checks"] = serde_json::json!(self.node_checks);
        if !self.service_checks.is_empty() {
            let checks: Vec<serde_json::Value> = self
                .service_checks
                .iter()
                .map(|id| serde_json::json!({ "ID": id }))
                .collect();
            body["ServiceChecks"] = serde_json::Value::Array(checks);
        }
        body
    }
}

/// A duration as Go's `time.ParseDuration` reads it.
fn duration_param(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// A session as `/v1/session/info` shows it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SessionInfo {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub node: String,
    #[serde(default, rename = "TTL")]
    pub ttl: String,
    #[serde(default)]
    pub lock_delay: u64,
    #[serde(default)]
    pub behavior: String,
    /// `None` when the field is absent, as from servers before 1.7, which
    /// know nothing of node and service checks apart from `Checks`.
    #[serde(default, deserialize_with = "present")]
    pub node_checks: Option<Option<Vec<String>>>,
    #[serde(default)]
    pub service_checks: Option<Vec<ServiceCheck>>,
    /// On 1.6 the session's checks (`[]` for none, as 1.6.2 answers); on
    /// 1.7+ absent when only `serfHealth` is set (the rest is in
    /// NodeChecks). `null` is taken as "not shown", never as "none".
    #[serde(default)]
    pub checks: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ServiceCheck {
    #[serde(rename = "ID")]
    pub id: String,
}

/// Tells a field that is `null` from one that is absent.
fn present<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<Vec<String>>>, D::Error> {
    Ok(Some(Option::deserialize(d)?))
}

impl SessionInfo {
    /// Refuses a session whose checks, TTL or lock-delay are not what we
    /// asked for: the safety budget was computed for those, and a server
    /// that silently dropped or added a check would void it.
    pub fn verify(&self, spec: &SessionSpec) -> Result<(), String> {
        use std::collections::BTreeSet;
        let asked_node: BTreeSet<&str> = spec.node_checks.iter().map(String::as_str).collect();
        let asked_service: BTreeSet<&str> =
            spec.service_checks.iter().map(String::as_str).collect();
        let legacy: BTreeSet<&str> = self.checks.iter().flatten().map(String::as_str).collect();
        let (node, service) = match &self.node_checks {
            Some(node) => {
                // 1.7+: `null` lists are truly empty here.
                let node: BTreeSet<&str> = node
                    .iter()
                    .flatten()
                    .map(String::as_str)
                    .chain(legacy.iter().copied())
                    .collect();
                let service: BTreeSet<&str> = self
                    .service_checks
                    .iter()
                    .flatten()
                    .map(|c| c.id.as_str())
                    .collect();
                (node, service)
            }
            None => {
                if !asked_service.is_empty() {
                    return Err(
                        "this Consul server predates 1.7 and silently ignores --service-checks; upgrade Consul or leave the flag out".into(),
                    );
                }
                if self.checks.is_none() {
                    // Before 1.7 the info shows `null` whatever the checks
                    // are; we sent them in `Checks`, which it honours.
                    return self.verify_timing(spec);
                }
                (legacy, BTreeSet::new())
            }
        };
        if node != asked_node || service != asked_service {
            let list = |set: &BTreeSet<&str>| {
                if set.is_empty() {
                    "none".to_string()
                } else {
                    set.iter()
                        .map(|c| format!("`{c}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            };
            return Err(format!(
                "Consul bound the session to node checks {} and service checks {}, not the {} and {} asked for; lockrun's safety budget would be wrong, so it stops here (check the Consul version and the check names)",
                list(&node),
                list(&service),
                list(&asked_node),
                list(&asked_service),
            ));
        }
        self.verify_timing(spec)
    }

    fn verify_timing(&self, spec: &SessionSpec) -> Result<(), String> {
        let lock_delay = Duration::from_nanos(self.lock_delay);
        if lock_delay < spec.lock_delay {
            return Err(format!(
                "Consul applied a lock-delay of {} instead of the {} asked for; use --lock-delay {} or less",
                crate::duration::flag_duration(lock_delay),
                crate::duration::flag_duration(spec.lock_delay),
                crate::duration::flag_duration(lock_delay),
            ));
        }
        match humantime::parse_duration(&self.ttl) {
            Ok(ttl) if ttl >= spec.ttl => Ok(()),
            _ => Err(format!(
                "Consul applied a session TTL of `{}` instead of the {} asked for; check the server's session_ttl_min",
                self.ttl,
                crate::duration::flag_duration(spec.ttl),
            )),
        }
    }
}

#[derive(Deserialize)]
struct Created {
    #[serde(rename = "ID")]
    id: String,
}

impl Client {
    pub async fn session_create(&self, spec: &SessionSpec) -> Result<SessionId, ConsulError> {
        let op = Op::SessionCreate;
        let url = self.url(&["session", "create"], "");
        let body = serde_json::to_vec(&spec.body()).expect("a JSON value serialises");
        let answer = self
            .send(Method::PUT, url, Some(body), REQUEST_TIMEOUT, &op, &[])
            .await?;
        let created: Created = decode(&op, &answer.body)?;
        Ok(SessionId(created.id))
    }

    /// Renews the session; answers the TTL Consul now applies, which may be
    /// longer than asked for under load. A 404 is the verdict "session gone".
    pub async fn session_renew(
        &self,
        id: &SessionId,
        timeout: Duration,
    ) -> Result<Option<Duration>, ConsulError> {
        let op = Op::SessionRenew;
        let url = self.url(&["session", "renew"], id.as_str());
        let answer = self.send(Method::PUT, url, None, timeout, &op, &[]).await?;
        let sessions: Vec<SessionInfo> = decode(&op, &answer.body)?;
        match sessions.first() {
            Some(session) => Ok(humantime::parse_duration(&session.ttl).ok()),
            None => Err(ConsulError::NotFound {
                op,
                body: "renewal answered no session".into(),
            }),
        }
    }

    /// Destroys the session; Consul answers `true` for unknown IDs too.
    pub async fn session_destroy(&self, id: &SessionId) -> Result<(), ConsulError> {
        let op = Op::SessionDestroy;
        let url = self.url(&["session", "destroy"], id.as_str());
        self.send(Method::PUT, url, None, REQUEST_TIMEOUT, &op, &[])
            .await?;
        Ok(())
    }

    pub async fn session_info(&self, id: &str) -> Result<Option<SessionInfo>, ConsulError> {
        let op = Op::SessionRead;
        if super::path::check_key(id).is_err() || id.contains('/') {
            return Ok(None);
        }
        let url = self.url(&["session", "info"], id);
        let answer = self
            .send(
                Method::GET,
                url,
                None,
                REQUEST_TIMEOUT,
                &op,
                &[StatusCode::NOT_FOUND],
            )
            .await?;
        if answer.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let sessions: Vec<SessionInfo> = decode(&op, &answer.body)?;
        Ok(sessions.into_iter().next())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_always_carries_the_lock_delay() {
        let spec = SessionSpec {
            name: "n".into(),
            ttl: Duration::from_secs(15),
            lock_delay: Duration::ZERO,
            behavior: Behavior::Release,
            node_checks: vec![],
            service_checks: vec![],
        };
        let body = spec.body();
        assert_eq!(body["LockDelay"], "0s");
        assert_eq!(body["TTL"], "15s");
        // No checks, in both the old field and the new one.
        assert_eq!(body["NodeChecks"], serde_json::json!([]));
        assert_eq!(body["Checks"], serde_json::json!([]));
    }

    fn spec(node: &[&str], service: &[&str]) -> SessionSpec {
        SessionSpec {
            name: "n".into(),
            ttl: Duration::from_secs(15),
            lock_delay: Duration::from_secs(15),
            behavior: Behavior::Release,
            node_checks: node.iter().map(|c| c.to_string()).collect(),
            service_checks: service.iter().map(|c| c.to_string()).collect(),
        }
    }

    fn info(json: &str) -> SessionInfo {
        let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
        v["ID"] = "x".into();
        v["TTL"] = "15s".into();
        v["LockDelay"] = 15_000_000_000u64.into();
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn read_back_accepts_what_was_asked_for() {
        // 1.10, no checks.
        let i = info(r#"{"NodeChecks":null,"ServiceChecks":null}"#);
        assert!(i.verify(&spec(&[], &[])).is_ok());
        // 1.10, serfHealth: Checks omitted, NodeChecks carries it.
        let i = info(r#"{"NodeChecks":["serfHealth"],"ServiceChecks":null}"#);
        assert!(i.verify(&spec(&["serfHealth"], &[])).is_ok());
        let i = info(r#"{"NodeChecks":["a"],"Checks":["a"],"ServiceChecks":[{"ID":"s"}]}"#);
        assert!(i.verify(&spec(&["a"], &["s"])).is_ok());
        // 1.6.2: no NodeChecks field; `Checks` as set.
        let i = info(r#"{"Checks":[]}"#);
        assert!(i.verify(&spec(&[], &[])).is_ok());
        let i = info(r#"{"Checks":["serfHealth"]}"#);
        assert!(i.verify(&spec(&["serfHealth"], &[])).is_ok());
        // A server that shows `Checks: null` tells us nothing to refuse.
        let i = info(r#"{"Checks":null}"#);
        assert!(i.verify(&spec(&[], &[])).is_ok());
        assert!(i.verify(&spec(&["serfHealth"], &[])).is_ok());
    }

    #[test]
    fn read_back_refuses_checks_the_server_changed() {
        let i = info(r#"{"NodeChecks":["serfHealth"],"ServiceChecks":null}"#);
        let err = i.verify(&spec(&[], &[])).unwrap_err();
        assert!(err.contains("node checks `serfHealth`"), "{err}");
        let i = info(r#"{"NodeChecks":null,"ServiceChecks":null}"#);
        assert!(i.verify(&spec(&["a"], &[])).is_err());
        let i = info(r#"{"Checks":["serfHealth"]}"#);
        assert!(i.verify(&spec(&[], &[])).is_err());
        let err = info(r#"{"Checks":null}"#)
            .verify(&spec(&[], &["s"]))
            .unwrap_err();
        assert!(err.contains("predates 1.7"), "{err}");
    }

    #[test]
    fn read_back_refuses_a_shorter_lock_delay() {
        let mut i = info(r#"{"NodeChecks":null}"#);
        i.lock_delay = 1_000_000_000;
        let err = i.verify(&spec(&[], &[])).unwrap_err();
        assert!(err.contains("use --lock-delay 1s or less"), "{err}");
    }

    #[test]
    fn sub_second_durations_in_milliseconds() {
        assert_eq!(duration_param(Duration::from_millis(1500)), "1500ms");
    }
}
