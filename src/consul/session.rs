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
    /// `None`: Consul's default (`serfHealth`).
    pub node_checks: Option<Vec<String>>,
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
        if let Some(checks) = &self.node_checks {
            body["NodeChecks"] = serde_json::json!(checks);
        }
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
            node_checks: None,
            service_checks: vec![],
        };
        let body = spec.body();
        assert_eq!(body["LockDelay"], "0s");
        assert_eq!(body["TTL"], "15s");
        assert!(body.get("NodeChecks").is_none());
    }

    #[test]
    fn sub_second_durations_in_milliseconds() {
        assert_eq!(duration_param(Duration::from_millis(1500)), "1500ms");
    }
}
