//! The connection to the Consul agent: one async call per endpoint lockrun
//! uses, its TLS and token, and how a failure to reach the agent is told.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Result;
use reqwest::{Method, StatusCode, Url};
use tracing::debug;

use super::{connect, path, ConsulConfig, ConsulError, Op, Token};

/// How long a request that is not a blocking read may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    /// The pool of [`Client::for_watch`], built at its first use.
    watch_http: Arc<OnceLock<reqwest::Client>>,
    config: Arc<ConsulConfig>,
    /// Every agent address (requests go to one): the base URL and the
    /// address as the user gave it, for messages.
    bases: Arc<Vec<(Url, String)>>,
    /// The agent requests go to now; shared by every clone.
    current: Arc<AtomicUsize>,
    /// The token as a sensitive header value: built once, so a token that
    /// cannot travel in a header fails here instead of being sent as
    /// something else.
    token: Option<reqwest::header::HeaderValue>,
    datacenter: Option<String>,
    namespace: Option<String>,
    partition: Option<String>,
}

/// A successful answer: status, body and the `X-Consul-Index` header.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: StatusCode,
    pub body: bytes::Bytes,
    pub index: Option<u64>,
    /// `X-Consul-Results-Filtered-By-ACLs: true` (Consul 1.11 and later):
    /// the token's rights left entries out of the answer.
    pub filtered: bool,
}

fn token_header(token: &Token) -> Result<reqwest::header::HeaderValue> {
    let mut value = reqwest::header::HeaderValue::from_str(token.secret()).map_err(|_| {
        anyhow::anyhow!(
            "the ACL token cannot be sent in an HTTP header; write it on one line of visible ASCII"
        )
    })?;
    value.set_sensitive(true);
    Ok(value)
}

impl Client {
    pub fn new(config: &ConsulConfig) -> Result<Client> {
        Ok(Client {
            http: connect::http_client(config)?,
            watch_http: Arc::new(OnceLock::new()),
            config: Arc::new(config.clone()),
            bases: Arc::new(
                std::iter::once(Ok((connect::effective_base(config)?, shown(&config.base))))
                    .chain(config.more.iter().map(|url| Ok((url.clone(), shown(url)))))
                    .collect::<Result<_>>()?,
            ),
            current: Arc::new(AtomicUsize::new(0)),
            token: config.token.as_ref().map(token_header).transpose()?,
            datacenter: config.datacenter.clone(),
            namespace: config.namespace.clone(),
            partition: config.partition.clone(),
        })
    }

    /// This client over connections of its own, for a holder's watch. The
    /// watch's blocking read is cancelled when the child exits, and takes
    /// its connection with it; on the shared pool the release that follows
    /// would then wait for a new connection (or TLS handshake) at the one
    /// moment a waiter waits for us. Waiters keep to the shared pool: their
    /// blocking reads end with an answer, which leaves the connection for
    /// the transaction that follows.
    pub fn for_watch(&self) -> Client {
        // The same settings were built once already; should the second build
        // fail all the same (a CA file removed meanwhile), the shared pool
        // still works.
        let http = self.watch_http.get_or_init(|| {
            connect::http_client(&self.config).unwrap_or_else(|_| self.http.clone())
        });
        Client {
            http: http.clone(),
            ..self.clone()
        }
    }

    /// Whether the agent is known to lack namespaces: a community-edition
    /// agent, by the version `agent/self` reports (Enterprise builds end in
    /// `+ent`), or by its refusal of `?ns=`. `false` when we cannot tell
    /// (the token may lack agent:read); the first real request then says.
    pub async fn lacks_namespaces(&self) -> bool {
        let op = Op::AgentRead;
        let url = self.url(&["agent", "self"], "");
        let answer = match self
            .send(Method::GET, url, None, REQUEST_TIMEOUT, &op, &[])
            .await
        {
            Ok(answer) => answer,
            Err(e) => return e.is_namespace_refusal(),
        };
        let version = serde_json::from_slice::<serde_json::Value>(&answer.body)
            .ok()
            .and_then(|v| v["Config"]["Version"].as_str().map(str::to_string));
        version.is_some_and(|v| !v.contains("+ent"))
    }

    /// The address requests go to, as shown in messages.
    pub fn addr(&self) -> &str {
        &self.bases[self.index()].1
    }

    fn index(&self) -> usize {
        self.current.load(Ordering::Relaxed) % self.bases.len()
    }

    /// The next request goes to the next agent: this one hung, broke the
    /// connection, or answered that its servers are out of reach. Only the
    /// caller's retry goes there, never the request itself, which may have
    /// been applied.
    fn move_on(&self, from: usize) {
        let n = self.bases.len();
        if n > 1 {
            let _ = self.current.compare_exchange(
                from,
                (from + 1) % n,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// A URL under `/v1/`: fixed `segments`, then the key's parts, encoded.
    pub(crate) fn url(&self, segments: &[&str], key: &str) -> Url {
        let mut all = vec!["v1"];
        all.extend_from_slice(segments);
        let mut url = path::url_for(&self.bases[self.index()].0, &all, key);
        {
            let mut query = url.query_pairs_mut();
            if let Some(dc) = &self.datacenter {
                query.append_pair("dc", dc);
            }
            if let Some(ns) = &self.namespace {
                query.append_pair("ns", ns);
            }
            if let Some(partition) = &self.partition {
                query.append_pair("partition", partition);
            }
        }
        if url.query() == Some("") {
            url.set_query(None);
        }
        url
    }

    /// Sends one request and classifies failures. 2xx answers are returned;
    /// `accept` lists other statuses the caller wants to see (404 on a read).
    pub(crate) async fn send(
        &self,
        method: Method,
        url: Url,
        body: Option<Vec<u8>>,
        timeout: Duration,
        op: &Op,
        accept: &[StatusCode],
    ) -> Result<Answer, ConsulError> {
        let result = self.send_once(method, url, body, timeout, op, accept).await;
        // Any answer, even a refusal, shows Consul is there; only transient
        // failures count as trouble for the operator's log.
        match &result {
            Err(e) if e.is_transient() => crate::logging::engine_trouble("Consul", e),
            _ => crate::logging::engine_answered("Consul"),
        }
        result
    }

    async fn send_once(
        &self,
        method: Method,
        url: Url,
        body: Option<Vec<u8>>,
        timeout: Duration,
        op: &Op,
        accept: &[StatusCode],
    ) -> Result<Answer, ConsulError> {
        // The agent the URL was built for; a connection it refuses moves
        // the request itself to the next agent (it never left), once round.
        let n = self.bases.len();
        let mut at = (0..n)
            .find(|i| url.as_str().starts_with(self.bases[*i].0.as_str()))
            .unwrap_or_else(|| self.index());
        let mut url = url;
        let mut tried = 0;
        let started = tokio::time::Instant::now();
        let response = loop {
            debug!(target: "lockrun::http", "{method} {}", url.as_str());
            let mut request = self
                .http
                .request(method.clone(), url.clone())
                .timeout(timeout.saturating_sub(started.elapsed()));
            if let Some(token) = &self.token {
                request = request.header("X-Consul-Token", token.clone());
            }
            if let Some(body) = &body {
                request = request.body(body.clone());
            }
            match request.send().await {
                Ok(response) => {
                    self.current.store(at, Ordering::Relaxed);
                    break response;
                }
                Err(e) => {
                    let error = self.transport_error(e, timeout, at);
                    tried += 1;
                    match error {
                        ConsulError::Unreachable { .. } if tried < n => {
                            debug!(target: "lockrun::http", "{error}; trying the next agent");
                            let next = (at + 1) % n;
                            let rest = &url.as_str()[self.bases[at].0.as_str().len()..];
                            url = Url::parse(&format!("{}{rest}", self.bases[next].0))
                                .expect("a valid base and path make a valid URL");
                            at = next;
                        }
                        ConsulError::Unreachable { cause, .. } if n > 1 => {
                            // Every agent refused: name them all.
                            let all: Vec<&str> =
                                self.bases.iter().map(|(_, shown)| shown.as_str()).collect();
                            return Err(ConsulError::Unreachable {
                                addr: all.join(","),
                                cause,
                            });
                        }
                        _ => {
                            self.move_on(at);
                            return Err(error);
                        }
                    }
                }
            }
        };
        let status = response.status();
        let index = response
            .headers()
            .get("X-Consul-Index")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let filtered = response
            .headers()
            .get("X-Consul-Results-Filtered-By-ACLs")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
        let body = match response.bytes().await {
            Ok(body) => body,
            Err(e) => {
                self.move_on(at);
                return Err(self.transport_error(e, timeout, at));
            }
        };
        debug!(
            target: "lockrun::http",
            "{method} {} -> {} in {:?}{}",
            url.path(),
            status.as_u16(),
            started.elapsed(),
            index.map(|i| format!(" index={i}")).unwrap_or_default()
        );
        // Go's own 404, which no Consul path we call answers (an unknown
        // one says "Invalid URL path"): another HTTP server, etcd's gateway
        // say. A read that accepts 404 would take it for a missing key.
        if status == reqwest::StatusCode::NOT_FOUND
            && index.is_none()
            && body.trim_ascii() == b"404 page not found"
        {
            return Err(ConsulError::NotConsul {
                addr: self.bases[at].1.clone(),
                op: op.clone(),
            });
        }
        if status.is_success() || accept.contains(&status) {
            return Ok(Answer {
                status,
                body,
                index,
                filtered,
            });
        }
        let text = String::from_utf8_lossy(&body).into_owned();
        let op = op.clone();
        let error = match status.as_u16() {
            403 => ConsulError::Forbidden { op, body: text },
            404 => ConsulError::NotFound { op, body: text },
            429 | 500..=599 => ConsulError::Server {
                op,
                status: status.as_u16(),
                body: text,
            },
            code => ConsulError::Rejected {
                op,
                status: code,
                body: text,
            },
        };
        // An agent whose servers are out of reach (an election, its server
        // gone): another agent may reach a server that answers.
        if error.may_pass_soon() {
            self.move_on(at);
        }
        Err(error)
    }

    fn transport_error(&self, error: reqwest::Error, timeout: Duration, at: usize) -> ConsulError {
        let (base, addr) = &self.bases[at];
        let addr = addr.clone();
        if error.is_timeout() {
            return ConsulError::Timeout {
                addr,
                after: timeout,
            };
        }
        if let Some(problem) = tls_problem(&error, base, true) {
            return ConsulError::Tls { addr, problem };
        }
        let cause = root_cause(&error);
        if error.is_connect() {
            ConsulError::Unreachable { addr, cause }
        } else {
            ConsulError::Broken { addr, cause }
        }
    }
}

/// An address as the user wrote it.
pub(super) fn shown(url: &Url) -> String {
    url.as_str().trim_end_matches('/').to_string()
}

/// What a TLS failure means for the operator, if the error is one; `flags`
/// when the backend's flags (`--ca-file`) may be named beside the variables.
pub(super) fn tls_problem(error: &reqwest::Error, base: &Url, flags: bool) -> Option<String> {
    use rustls::{AlertDescription, CertificateError, Error as Tls};
    let tls = crate::backend::tls::rustls_error(error);
    let host = base.host_str().unwrap_or_default();
    let scheme_hint = if flags {
        "check http:// versus https:// in CONSUL_HTTP_ADDR, and CONSUL_HTTP_SSL"
    } else {
        "check http:// versus https:// in --service-agent or CONSUL_HTTP_ADDR, and CONSUL_HTTP_SSL"
    };
    let Some(tls) = tls else {
        // Plain HTTP sent to a TLS port gets an answer hyper cannot parse.
        let garbled = crate::backend::tls::chain(error)
            .iter()
            .any(|link| link.to_string().contains("invalid HTTP version"));
        return (base.scheme() == "http" && garbled).then(|| {
            format!("the agent did not answer in plain HTTP, it may expect TLS; {scheme_hint}")
        });
    };
    Some(match &tls {
        Tls::InvalidCertificate(CertificateError::UnknownIssuer) => {
            format!(
                "its certificate is not signed by a trusted CA; set CONSUL_CACERT or CONSUL_CAPATH{}",
                if flags { " (or --ca-file)" } else { "" }
            )
        }
        Tls::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => format!(
            "its certificate is not issued for `{host}`; set CONSUL_TLS_SERVER_NAME to a name it holds"
        ),
        Tls::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => "its certificate has expired".into(),
        Tls::InvalidCertificate(
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. },
        ) => "its certificate is not valid yet (check this host's clock)".into(),
        Tls::InvalidCertificate(other) => format!("its certificate is not acceptable ({other:?})"),
        Tls::AlertReceived(AlertDescription::CertificateRequired) => {
            "the agent requires a client certificate; set CONSUL_CLIENT_CERT and CONSUL_CLIENT_KEY".into()
        }
        Tls::AlertReceived(
            AlertDescription::UnknownCA
            | AlertDescription::BadCertificate
            | AlertDescription::CertificateUnknown
            | AlertDescription::AccessDenied,
        ) => "the agent refused lockrun's client certificate; check CONSUL_CLIENT_CERT".into(),
        Tls::InvalidMessage(_) => format!("the agent does not speak TLS on this port; {scheme_hint}"),
        other => format!("{other}"),
    })
}

/// The innermost cause, lowercased the way users read errno texts
/// ("connection refused"), without reqwest's URL-bearing wrappers.
pub(super) fn root_cause(error: &reqwest::Error) -> String {
    let mut source: &dyn std::error::Error = error;
    while let Some(next) = source.source() {
        source = next;
    }
    let text = source.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text).to_string();
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().collect::<String>() + chars.as_str(),
        None => "unknown error".to_string(),
    }
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    op: &Op,
    body: &[u8],
) -> Result<T, ConsulError> {
    serde_json::from_slice(body).map_err(|e| ConsulError::Decode {
        op: op.clone(),
        cause: e.to_string(),
    })
}
