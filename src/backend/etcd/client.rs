//! etcd's JSON gateway over reqwest: one call per RPC, no retries and no
//! policy (the caller owns both). Keys and values travel base64-encoded in
//! JSON bodies, so a key never reaches a URL; int64 fields come back as
//! JSON strings.
//!
//! We chose the gateway over the `etcd-client` crate because that crate
//! compiles `.proto` files at build time and so needs `protoc`, which a
//! fresh machine lacks; the gateway needs nothing lockrun does not already
//! build, and is on by default since etcd 3.4.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use reqwest::Url;
use serde_json::{json, Value};

use super::config::EtcdConfig;
use super::error::EtcdError;
use crate::backend::one_line;
use crate::backend::tls::{self, innermost};

/// How long a call other than a watch may take unless the caller says,
/// when no lease TTL says shorter (see [`Client::set_call_timeout`]).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The shortest deadline we give a call: a loaded member on a loaded host
/// still answers a keepalive or a small transaction well within it.
pub const CALL_TIMEOUT_MIN: Duration = Duration::from_secs(1);

/// How long a keepalive waits for an answer before another goes to the
/// next endpoint ([`Client::keepalive`]): a healthy member on a loaded
/// host answers well within it, and an election (a second or two by
/// etcd's default timeouts) spans several.
pub const KEEPALIVE_GAP: Duration = Duration::from_millis(250);

/// A connection to an etcd cluster through any of its endpoints.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    /// Watch streams go over connections of their own, built at the first
    /// watch. A watch dropped when its event came (our predecessor left, or
    /// our child exited) takes its connection with it; on a shared pool the
    /// request that follows, at the moment of a handover, would wait for a
    /// new connection or TLS handshake.
    watch_http: OnceLock<reqwest::Client>,
    /// Endpoints (tried in order), TLS files and user.
    config: EtcdConfig,
    /// The endpoint that answered last; calls start there.
    current: AtomicUsize,
    token: Mutex<Option<String>>,
    /// The deadline of a grant, read or transaction, and of a watch's
    /// creation; a watch that stays silent for twice this is opened again.
    /// A member that hangs (stopped, partitioned, a stalled disk) accepts
    /// connections and never answers: like etcd's clientv3, which gives
    /// every call a context deadline, we bound each call so that the hang
    /// costs one short timeout and the caller's next try goes to the next
    /// endpoint, well before a lease runs out.
    call_timeout: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoints", &self.inner.config.endpoints)
            .field("user", &self.inner.config.user)
            .finish_non_exhaustive()
    }
}

/// A key as etcd stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kv {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    /// 0 when no lease is attached.
    pub lease: i64,
}

impl Kv {
    pub fn key_str(&self) -> String {
        String::from_utf8_lossy(&self.key).into_owned()
    }

    pub fn value_str(&self) -> String {
        String::from_utf8_lossy(&self.value).into_owned()
    }

    fn from_json(v: &Value) -> Result<Kv, String> {
        Ok(Kv {
            key: bytes(v, "key")?,
            value: bytes(v, "value")?,
            create_revision: int(v, "create_revision")?,
            mod_revision: int(v, "mod_revision")?,
            lease: int(v, "lease")?,
        })
    }
}

/// A range read: one key, or every key from `key` up to `range_end`.
#[derive(Debug, Clone, Default)]
pub struct Range {
    pub key: Vec<u8>,
    pub range_end: Option<Vec<u8>>,
    /// 0 for no limit.
    pub limit: i64,
    /// Sorted by CreateRevision, descending when true.
    pub by_create: Option<bool>,
    /// Only keys created at or before this revision (0: any).
    pub max_create_revision: i64,
}

impl Range {
    pub fn key(key: &[u8]) -> Range {
        Range {
            key: key.to_vec(),
            ..Range::default()
        }
    }

    /// Every key under `prefix` (a byte prefix, as etcd's WithPrefix).
    pub fn prefix(prefix: &[u8]) -> Range {
        Range {
            key: prefix.to_vec(),
            range_end: Some(prefix_end(prefix)),
            ..Range::default()
        }
    }

    /// The oldest first.
    pub fn first_created(mut self) -> Range {
        self.by_create = Some(false);
        self
    }

    /// The newest first.
    pub fn newest_first(mut self) -> Range {
        self.by_create = Some(true);
        self
    }

    pub fn limited(mut self, limit: i64) -> Range {
        self.limit = limit;
        self
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({ "key": B64.encode(&self.key) });
        if let Some(end) = &self.range_end {
            v["range_end"] = B64.encode(end).into();
        }
        if self.limit > 0 {
            v["limit"] = self.limit.to_string().into();
        }
        if let Some(descending) = self.by_create {
            v["sort_target"] = "CREATE".into();
            v["sort_order"] = if descending { "DESCEND" } else { "ASCEND" }.into();
        }
        if self.max_create_revision > 0 {
            v["max_create_revision"] = self.max_create_revision.to_string().into();
        }
        v
    }
}

/// The end of the range of keys that start with `prefix`: its last byte
/// below 0xff incremented, as etcd's `GetPrefixRangeEnd`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff (or empty): every key from the prefix on.
    vec![0]
}

/// What a range read found, at which revision.
#[derive(Debug, Clone)]
pub struct RangeAnswer {
    pub revision: i64,
    pub kvs: Vec<Kv>,
}

/// What a transaction did.
#[derive(Debug, Clone)]
pub struct TxnAnswer {
    pub revision: i64,
    pub succeeded: bool,
    /// The answers of the range requests among the ops that ran, in order.
    pub ranges: Vec<RangeAnswer>,
}

/// One change a watch reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub deleted: bool,
    pub kv: Kv,
}

/// One message of a watch stream.
#[derive(Debug, Clone)]
pub struct WatchBatch {
    pub revision: i64,
    pub events: Vec<Event>,
    /// The watch was cancelled, e.g. because its start revision was
    /// compacted away (then `compact_revision` is set).
    pub canceled: bool,
    pub compact_revision: i64,
}

/// A granted lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    pub id: i64,
    pub ttl: Duration,
}

fn int(v: &Value, field: &str) -> Result<i64, String> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(0),
        Some(Value::String(s)) => s
            .parse()
            .map_err(|_| format!("`{field}` is not a number: {s}")),
        Some(Value::Number(n)) => n
            .as_i64()
            .ok_or_else(|| format!("`{field}` is out of range")),
        Some(other) => Err(format!("`{field}` is not a number: {other}")),
    }
}

fn bytes(v: &Value, field: &str) -> Result<Vec<u8>, String> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => B64
            .decode(s)
            .map_err(|e| format!("`{field}` is not base64 ({e})")),
        Some(other) => Err(format!("`{field}` is not a string: {other}")),
    }
}

fn revision(v: &Value) -> Result<i64, String> {
    int(v.get("header").unwrap_or(&Value::Null), "revision")
}

fn range_answer(v: &Value) -> Result<RangeAnswer, String> {
    let kvs = match v.get("kvs") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(kvs)) => kvs.iter().map(Kv::from_json).collect::<Result<_, _>>()?,
        Some(other) => return Err(format!("`kvs` is not a list: {other}")),
    };
    Ok(RangeAnswer {
        revision: revision(v)?,
        kvs,
    })
}

/// Why TLS failed, if that is what failed: rustls's own verdict (a
/// certificate refused either way, TLS spoken to a port that answers
/// otherwise), or etcd's plain port hanging up on our handshake, with an
/// end of stream or, while connecting over TLS, a reset.
fn tls_failure(e: &reqwest::Error) -> Option<String> {
    if let Some(problem) = tls::rustls_error(e) {
        return Some(problem.to_string());
    }
    let connecting_over_tls = e.is_connect() && e.url().is_some_and(|url| url.scheme() == "https");
    (tls::handshake_cut_short(e) || (connecting_over_tls && tls::reset_by_peer(e)))
        .then(|| "the server hung up during the handshake, as a port without TLS does".into())
}

/// The HTTP client for `config`'s endpoints and TLS files.
fn http_client(config: &EtcdConfig) -> Result<reqwest::Client, String> {
    let verifies_tls = config.endpoints.iter().any(|e| e.scheme() != "http");
    let mut builder = tls::client_builder(Duration::from_secs(3), verifies_tls);
    if let Some(file) = &config.cacert {
        let certificates = tls::read_certificates(file).map_err(|e| format!("{e:#}"))?;
        for certificate in certificates {
            builder = builder.add_root_certificate(certificate);
        }
    }
    if let (Some(cert), Some(key)) = (&config.cert, &config.key) {
        let identity = tls::identity(cert, key).map_err(|e| format!("{e:#}"))?;
        builder = builder.identity(identity);
    }
    builder
        .build()
        .map_err(|e| format!("cannot set up the HTTP client ({})", innermost(&e)))
}

/// The endpoint as users write it.
fn shown(url: &Url) -> String {
    url.as_str().trim_end_matches('/').to_owned()
}

impl Client {
    /// Builds the client; file problems are reported here, before any
    /// request, with the path that is wrong.
    pub fn new(config: &EtcdConfig) -> Result<Client, String> {
        let http = http_client(config)?;
        if config.endpoints.is_empty() {
            return Err("no etcd endpoint given; set ETCDCTL_ENDPOINTS or --endpoints".into());
        }
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                watch_http: OnceLock::new(),
                config: config.clone(),
                current: AtomicUsize::new(0),
                token: Mutex::new(None),
                call_timeout: CALL_TIMEOUT,
            }),
        })
    }

    /// Bounds every call by `timeout` (at least [`CALL_TIMEOUT_MIN`]);
    /// only before the client is shared.
    pub fn set_call_timeout(&mut self, timeout: Duration) {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.call_timeout = timeout.clamp(CALL_TIMEOUT_MIN, CALL_TIMEOUT);
        }
    }

    /// The deadline of one call.
    pub fn call_timeout(&self) -> Duration {
        self.inner.call_timeout
    }

    pub fn endpoints(&self) -> &[Url] {
        &self.inner.config.endpoints
    }

    fn all_endpoints(&self) -> String {
        let all: Vec<String> = self.inner.config.endpoints.iter().map(shown).collect();
        all.join(",")
    }

    /// Sends one request to the first endpoint that accepts a connection,
    /// starting with the one that answered last. Only a failed connection
    /// moves on: the request never left, so trying the next endpoint cannot
    /// apply it twice.
    async fn send(
        &self,
        path: &str,
        body: &Value,
        timeout: Option<Duration>,
        token: Option<&str>,
    ) -> Result<(reqwest::Response, String), EtcdError> {
        self.send_over(&self.inner.http, path, body, timeout, token)
            .await
    }

    /// [`Client::send`] for a watch stream, over a connection of its own.
    async fn send_watch(
        &self,
        body: &Value,
        token: Option<&str>,
    ) -> Result<(reqwest::Response, String), EtcdError> {
        // The same settings were built once already; should the second build
        // fail all the same (a file removed meanwhile), the shared pool
        // still works.
        let http = self.inner.watch_http.get_or_init(|| {
            http_client(&self.inner.config).unwrap_or_else(|_| self.inner.http.clone())
        });
        self.send_over(http, "/v3/watch", body, None, token).await
    }

    async fn send_over(
        &self,
        http: &reqwest::Client,
        path: &str,
        body: &Value,
        timeout: Option<Duration>,
        token: Option<&str>,
    ) -> Result<(reqwest::Response, String), EtcdError> {
        let n = self.inner.config.endpoints.len();
        let start = self.inner.current.load(Ordering::Relaxed);
        let mut causes = Vec::new();
        for i in 0..n {
            let index = (start + i) % n;
            let endpoint = &self.inner.config.endpoints[index];
            let url = endpoint.join(path).expect("API paths are valid URLs");
            let mut request = http.post(url).json(body);
            if let Some(timeout) = timeout {
                request = request.timeout(timeout);
            }
            if let Some(token) = token {
                request = request.header(reqwest::header::AUTHORIZATION, token);
            }
            match request.send().await {
                Ok(response) => {
                    self.inner.current.store(index, Ordering::Relaxed);
                    return Ok((response, shown(endpoint)));
                }
                Err(e) if e.is_connect() => match tls_failure(&e) {
                    Some(cause) if n == 1 => {
                        return Err(EtcdError::Tls {
                            endpoint: shown(endpoint),
                            cause,
                        });
                    }
                    _ => causes.push(format!("{}: {}", shown(endpoint), innermost(&e))),
                },
                Err(e) => return Err(transport(e, &shown(endpoint), timeout)),
            }
        }
        let cause = if n == 1 {
            causes
                .pop()
                .and_then(|c| c.split_once(": ").map(|(_, c)| c.to_owned()))
        } else {
            Some(causes.join("; "))
        };
        Err(EtcdError::Unreachable {
            endpoints: self.all_endpoints(),
            cause: cause.unwrap_or_default(),
        })
    }

    /// Our auth token, authenticating first when we have none.
    async fn token(&self) -> Result<Option<String>, EtcdError> {
        let Some(user) = &self.inner.config.user else {
            return Ok(None);
        };
        if let Some(token) = self.inner.token.lock().expect("token lock").clone() {
            return Ok(Some(token));
        }
        let body = json!({ "name": user.name, "password": user.password.secret() });
        let what = format!("authenticating as `{}`", user.name);
        let answer = self
            .answer(
                "/v3/auth/authenticate",
                &body,
                Some(self.inner.call_timeout),
                None,
                &what,
            )
            .await?;
        let token = answer
            .get("token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| EtcdError::Decode {
                what: what.clone(),
                cause: "no token in the answer; is auth enabled?".into(),
            })?
            .to_owned();
        *self.inner.token.lock().expect("token lock") = Some(token.clone());
        Ok(Some(token))
    }

    async fn answer(
        &self,
        path: &str,
        body: &Value,
        timeout: Option<Duration>,
        token: Option<&str>,
        what: &str,
    ) -> Result<Value, EtcdError> {
        let started = std::time::Instant::now();
        let (response, endpoint) = self.send(path, body, timeout, token).await?;
        let status = response.status().as_u16();
        tracing::debug!(
            "POST {endpoint}{path} -> {status} in {:?} ({what})",
            started.elapsed()
        );
        let text = response
            .text()
            .await
            .map_err(|e| transport(e, &endpoint, timeout))?;
        if status != 200 {
            return Err(self.refused(what, status, &text));
        }
        // Streaming RPCs (keepalive) answer `{"result": ...}` or
        // `{"error": ...}` lines.
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let value: Value = serde_json::from_str(first).map_err(|e| EtcdError::Decode {
            what: what.to_owned(),
            cause: format!("{e}: {}", one_line(&text)),
        })?;
        if let Some(error) = value.get("error").filter(|e| e.is_object()) {
            return Err(self.refused(what, status, &error.to_string()));
        }
        Ok(match value.get("result") {
            Some(result) => result.clone(),
            None => value,
        })
    }

    fn refused(&self, what: &str, status: u16, body: &str) -> EtcdError {
        let e = EtcdError::from_answer(what, status, body);
        match e {
            // The next call authenticates afresh.
            EtcdError::TokenExpired { .. } => {
                *self.inner.token.lock().expect("token lock") = None;
            }
            // A member without a leader (or overloaded) is as good as down.
            EtcdError::Server { .. } => self.move_on(),
            _ => {}
        }
        e
    }

    /// The next call starts at the next endpoint. For a member that
    /// answered that it is in trouble, or did not answer in time, or broke
    /// the connection: the request may have been applied there, so only the
    /// caller's retry goes elsewhere, never this call.
    fn move_on(&self) {
        let n = self.inner.config.endpoints.len();
        let _ = self
            .inner
            .current
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |i| Some((i + 1) % n));
    }

    /// One call, with our token when we have a user.
    async fn call(
        &self,
        path: &str,
        body: &Value,
        timeout: Duration,
        what: &str,
    ) -> Result<Value, EtcdError> {
        // Authenticating counts against the caller's timeout too.
        let bounded = async {
            let token = self.token().await?;
            match self
                .answer(path, body, Some(timeout), token.as_deref(), what)
                .await
            {
                // etcd refused the request unapplied because our token
                // expired (simple tokens last five minutes): one fresh
                // token, one resend.
                Err(EtcdError::TokenExpired { .. }) if token.is_some() => {
                    let token = self.token().await?;
                    self.answer(path, body, Some(timeout), token.as_deref(), what)
                        .await
                }
                other => other,
            }
        };
        let answer = match tokio::time::timeout(timeout, bounded).await {
            Ok(answer) => answer,
            Err(_) => Err(EtcdError::Timeout {
                endpoint: self.current_endpoint(),
                after: timeout,
            }),
        };
        if let Err(EtcdError::Timeout { .. } | EtcdError::Broken { .. }) = answer {
            self.move_on();
        }
        // A daemon's log says once when etcd stops answering, and again
        // when it answers (`logging::engine_trouble`).
        match &answer {
            Err(e) if e.is_transient() => crate::logging::engine_trouble("etcd", e),
            _ => crate::logging::engine_answered("etcd"),
        }
        answer
    }

    fn current_endpoint(&self) -> String {
        let index = self.inner.current.load(Ordering::Relaxed);
        shown(&self.inner.config.endpoints[index % self.inner.config.endpoints.len()])
    }

    fn decode<T>(what: &str, r: Result<T, String>) -> Result<T, EtcdError> {
        r.map_err(|cause| EtcdError::Decode {
            what: what.to_owned(),
            cause,
        })
    }

    /// `/v3/lease/grant`; the server may grant a longer TTL than asked.
    pub async fn grant(&self, ttl: Duration) -> Result<Granted, EtcdError> {
        let what = "granting a lease";
        let secs = ttl.as_secs().max(1);
        let v = self
            .call(
                "/v3/lease/grant",
                &json!({ "TTL": secs.to_string() }),
                self.inner.call_timeout,
                what,
            )
            .await?;
        let id = Self::decode(what, int(&v, "ID"))?;
        let granted = Self::decode(what, int(&v, "TTL"))?;
        if id == 0 || granted <= 0 {
            let error = v.get("error").map(Value::to_string).unwrap_or_default();
            return Err(EtcdError::Decode {
                what: what.to_owned(),
                cause: format!("no lease in the answer {error}"),
            });
        }
        Ok(Granted {
            id,
            ttl: Duration::from_secs(granted as u64),
        })
    }

    /// A keepalive that outlasts a leader's election, within `timeout`:
    /// the TTL the lease now has, counted from when the leader received it.
    ///
    /// Unlike a transaction, a keepalive may be sent again anywhere:
    /// applied twice it only restarts the lease's TTL twice. So while none
    /// has answered, another goes to the next endpoint every
    /// [`KEEPALIVE_GAP`], the ones sent still waiting. A leader that hangs
    /// holds its own request, and a follower's too, which it forwards there
    /// and waits for long after a new leader is elected; only a request
    /// sent after the election reaches the new leader, and one now leaves
    /// within a gap of it, where a single retry could land in the election
    /// and wait there until the lease was given up (issue #45).
    pub async fn keepalive(&self, id: i64, timeout: Duration) -> Result<Duration, EtcdError> {
        if self.inner.config.endpoints.len() == 1 {
            return self.keepalive_once(id, timeout).await;
        }
        let until = tokio::time::Instant::now() + timeout;
        // Dropped, it aborts the requests still out.
        let mut sent = tokio::task::JoinSet::new();
        let mut last = None;
        loop {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                break;
            }
            let client = self.clone();
            sent.spawn(async move { client.keepalive_once(id, left).await });
            let gap = tokio::time::sleep(KEEPALIVE_GAP.min(left));
            tokio::pin!(gap);
            loop {
                tokio::select! {
                    Some(done) = sent.join_next() => match done {
                        Ok(Ok(ttl)) => return Ok(ttl),
                        Ok(Err(e)) if !e.is_transient() => return Err(e),
                        Ok(Err(e)) => last = Some(e),
                        Err(_) => {}
                    },
                    _ = &mut gap => break,
                }
            }
            // The next one goes elsewhere, whichever way this one went.
            self.move_on();
        }
        Err(last.unwrap_or_else(|| EtcdError::Timeout {
            endpoint: self.current_endpoint(),
            after: timeout,
        }))
    }

    /// One `/v3/lease/keepalive` to the current endpoint.
    async fn keepalive_once(&self, id: i64, timeout: Duration) -> Result<Duration, EtcdError> {
        let what = "renewing the lease";
        let v = self
            .call(
                "/v3/lease/keepalive",
                &json!({ "ID": id.to_string() }),
                timeout,
                what,
            )
            .await
            .map_err(|e| lease_gone(e, id))?;
        let ttl = Self::decode(what, int(&v, "TTL"))?;
        if ttl <= 0 {
            // etcd answers a keepalive for an unknown lease with TTL 0.
            return Err(EtcdError::LeaseNotFound { lease: id });
        }
        Ok(Duration::from_secs(ttl as u64))
    }

    /// `/v3/lease/revoke`: deletes every key attached to the lease.
    /// Like a keepalive, a revoke may be sent again elsewhere (a second one
    /// answers "lease not found"), so one that hangs is tried on the next
    /// endpoint within `timeout`.
    pub async fn revoke(&self, id: i64, timeout: Duration) -> Result<(), EtcdError> {
        let until = tokio::time::Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            let answer = self
                .call(
                    "/v3/lease/revoke",
                    &json!({ "ID": id.to_string() }),
                    left.min(self.inner.call_timeout),
                    "revoking a lease",
                )
                .await
                .map_err(|e| lease_gone(e, id));
            match answer {
                Err(EtcdError::Timeout { .. } | EtcdError::Broken { .. })
                    if until.saturating_duration_since(tokio::time::Instant::now())
                        > CALL_TIMEOUT_MIN / 4 => {}
                other => return other.map(drop),
            }
        }
    }

    /// `/v3/lease/timetolive`: the remaining TTL, `None` if the lease is gone.
    pub async fn time_to_live(&self, id: i64) -> Result<Option<Duration>, EtcdError> {
        let what = "reading a lease";
        let v = self
            .call(
                "/v3/lease/timetolive",
                &json!({ "ID": id.to_string() }),
                self.inner.call_timeout,
                what,
            )
            .await?;
        let ttl = Self::decode(what, int(&v, "TTL"))?;
        Ok((ttl >= 0).then(|| Duration::from_secs(ttl as u64)))
    }

    /// `/v3/lease/timetolive`: the TTL the lease was granted, `None` if the
    /// lease is gone.
    pub async fn granted_ttl(&self, id: i64) -> Result<Option<Duration>, EtcdError> {
        let what = "reading a lease";
        let v = self
            .call(
                "/v3/lease/timetolive",
                &json!({ "ID": id.to_string() }),
                self.inner.call_timeout,
                what,
            )
            .await?;
        if Self::decode(what, int(&v, "TTL"))? < 0 {
            return Ok(None);
        }
        let granted = Self::decode(what, int(&v, "grantedTTL"))?;
        Ok(Some(Duration::from_secs(granted.max(0) as u64)))
    }

    /// `/v3/kv/range`.
    pub async fn range(&self, range: &Range) -> Result<RangeAnswer, EtcdError> {
        let what = format!("reading `{}`", String::from_utf8_lossy(&range.key));
        let v = self
            .call(
                "/v3/kv/range",
                &range.to_json(),
                self.inner.call_timeout,
                &what,
            )
            .await?;
        Self::decode(&what, range_answer(&v))
    }

    /// `/v3/kv/txn`, with the ops already in the gateway's JSON form.
    pub async fn txn(
        &self,
        compare: Vec<Value>,
        success: Vec<Value>,
        failure: Vec<Value>,
        what: &str,
    ) -> Result<TxnAnswer, EtcdError> {
        let body = json!({ "compare": compare, "success": success, "failure": failure });
        let v = self
            .call("/v3/kv/txn", &body, self.inner.call_timeout, what)
            .await?;
        Self::decode(what, txn_answer(&v))
    }

    /// `/v3/kv/deleterange` of one key: how many keys went.
    pub async fn delete(&self, key: &[u8], timeout: Duration) -> Result<i64, EtcdError> {
        let what = format!("deleting `{}`", String::from_utf8_lossy(key));
        let v = self
            .call(
                "/v3/kv/deleterange",
                &json!({ "key": B64.encode(key) }),
                timeout,
                &what,
            )
            .await?;
        Self::decode(&what, int(&v, "deleted"))
    }

    /// Opens a `/v3/watch` stream on `key` (to `range_end`) from
    /// `start_revision`; only deletions when `deletes_only`.
    pub async fn watch(
        &self,
        key: &[u8],
        range_end: Option<&[u8]>,
        start_revision: i64,
        deletes_only: bool,
    ) -> Result<Watch, EtcdError> {
        let what = format!("watching `{}`", String::from_utf8_lossy(key));
        let mut create = json!({
            "key": B64.encode(key),
            "start_revision": start_revision.to_string(),
        });
        if let Some(end) = range_end {
            create["range_end"] = B64.encode(end).into();
        }
        if deletes_only {
            create["filters"] = json!(["NOPUT"]);
        }
        let (stream, endpoint, first) = self.open_watch(&create, start_revision, &what).await?;
        let mut watch = Watch {
            client: self.clone(),
            create,
            resume_from: start_revision,
            stream,
            endpoint,
            what,
            pending: None,
        };
        watch.note(&first);
        if first.canceled || !first.events.is_empty() {
            watch.pending = Some(first);
        }
        Ok(watch)
    }

    /// Opens one watch stream from `start_revision` and reads the message
    /// that confirms it, within the call deadline: a member that hangs
    /// accepts the connection and never confirms, and then the next try
    /// goes to the next endpoint.
    async fn open_watch(
        &self,
        create: &Value,
        start_revision: i64,
        what: &str,
    ) -> Result<(Stream, String, WatchBatch), EtcdError> {
        let mut create = create.clone();
        create["start_revision"] = start_revision.to_string().into();
        let timeout = self.inner.call_timeout;
        let opened = async {
            let token = self.token().await?;
            let (response, endpoint) = self
                .send_watch(&json!({ "create_request": create }), token.as_deref())
                .await?;
            let status = response.status().as_u16();
            if status != 200 {
                let text = response.text().await.unwrap_or_default();
                return Err(self.refused(what, status, &text));
            }
            let mut stream = Stream {
                response,
                buffer: Vec::new(),
            };
            // The first message confirms the watch; events may only follow it.
            let created = stream.message(&endpoint, what).await?;
            if created.get("created").and_then(Value::as_bool) != Some(true) {
                return Err(EtcdError::Decode {
                    what: what.to_owned(),
                    cause: format!(
                        "the watch was not created: {}",
                        one_line(&created.to_string())
                    ),
                });
            }
            let batch = Self::decode(what, watch_batch(&created))?;
            Ok((stream, endpoint, batch))
        };
        let answer = match tokio::time::timeout(timeout, opened).await {
            Ok(answer) => answer,
            Err(_) => Err(EtcdError::Timeout {
                endpoint: self.current_endpoint(),
                after: timeout,
            }),
        };
        if let Err(EtcdError::Timeout { .. } | EtcdError::Broken { .. }) = answer {
            self.move_on();
        }
        answer
    }
}

fn txn_answer(v: &Value) -> Result<TxnAnswer, String> {
    let mut ranges = Vec::new();
    if let Some(Value::Array(responses)) = v.get("responses") {
        for r in responses {
            if let Some(range) = r.get("response_range").or_else(|| r.get("responseRange")) {
                ranges.push(range_answer(range)?);
            }
        }
    }
    Ok(TxnAnswer {
        revision: revision(v)?,
        succeeded: v.get("succeeded").and_then(Value::as_bool).unwrap_or(false),
        ranges,
    })
}

fn watch_batch(v: &Value) -> Result<WatchBatch, String> {
    let mut events = Vec::new();
    if let Some(Value::Array(list)) = v.get("events") {
        for e in list {
            events.push(Event {
                deleted: e.get("type").and_then(Value::as_str) == Some("DELETE"),
                kv: Kv::from_json(e.get("kv").unwrap_or(&Value::Null))?,
            });
        }
    }
    Ok(WatchBatch {
        revision: revision(v)?,
        events,
        canceled: v.get("canceled").and_then(Value::as_bool).unwrap_or(false),
        compact_revision: int(v, "compact_revision")?,
    })
}

/// A "lease not found" answer as the verdict it is.
fn lease_gone(e: EtcdError, id: i64) -> EtcdError {
    if e.is_lease_not_found() {
        EtcdError::LeaseNotFound { lease: id }
    } else {
        e
    }
}

fn transport(e: reqwest::Error, endpoint: &str, timeout: Option<Duration>) -> EtcdError {
    if e.is_timeout() {
        EtcdError::Timeout {
            endpoint: endpoint.to_owned(),
            after: timeout.unwrap_or_default(),
        }
    } else if let Some(cause) = tls_failure(&e) {
        EtcdError::Tls {
            endpoint: endpoint.to_owned(),
            cause,
        }
    } else {
        EtcdError::Broken {
            endpoint: endpoint.to_owned(),
            cause: innermost(&e),
        }
    }
}

/// The bytes of one watch stream: JSON messages, one a line.
struct Stream {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl Stream {
    /// The next message as JSON (the `result` of the gateway's envelope).
    async fn message(&mut self, endpoint: &str, what: &str) -> Result<Value, EtcdError> {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line);
                let line = line.trim();
                if line.is_empty() {
                    continue;
                }
                let value: Value = serde_json::from_str(line).map_err(|e| EtcdError::Decode {
                    what: what.to_owned(),
                    cause: format!("{e}: {}", one_line(line)),
                })?;
                if let Some(error) = value.get("error").filter(|e| e.is_object()) {
                    return Err(EtcdError::from_answer(what, 200, &error.to_string()));
                }
                return Ok(value.get("result").cloned().unwrap_or(value));
            }
            match self.response.chunk().await {
                Ok(Some(chunk)) => self.buffer.extend_from_slice(&chunk),
                Ok(None) => {
                    return Err(EtcdError::Broken {
                        endpoint: endpoint.to_owned(),
                        cause: format!("the stream {what} ended"),
                    })
                }
                Err(e) => return Err(transport(e, endpoint, None)),
            }
        }
    }
}

/// An open watch. One that stays silent for twice the call deadline is
/// opened again from where it was, so that a watch on a member that hangs
/// (which accepts the connection, confirms nothing and delivers nothing)
/// moves to a member that answers instead of waiting for ever: a waiter
/// would otherwise never see the lock come free. The gateway's HTTP/1
/// stream has no pings of its own (gRPC's keepalive, in clientv3), and
/// etcd's progress notifications come every ten minutes by default.
pub struct Watch {
    client: Client,
    /// The create request, without its start revision.
    create: Value,
    /// Every event before this revision was delivered (or filtered out).
    resume_from: i64,
    stream: Stream,
    endpoint: String,
    what: String,
    pending: Option<WatchBatch>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("endpoint", &self.endpoint)
            .field("what", &self.what)
            .finish_non_exhaustive()
    }
}

impl Watch {
    /// Records what a batch delivered, for reopening after it.
    fn note(&mut self, batch: &WatchBatch) {
        if let Some(last) = batch.events.iter().map(|e| e.kv.mod_revision).max() {
            self.resume_from = self.resume_from.max(last + 1);
        }
    }

    /// The next batch of events (or cancellation).
    pub async fn next(&mut self) -> Result<WatchBatch, EtcdError> {
        if let Some(batch) = self.pending.take() {
            return Ok(batch);
        }
        let idle = self.client.call_timeout() * 2;
        loop {
            let message =
                tokio::time::timeout(idle, self.stream.message(&self.endpoint, &self.what)).await;
            let v = match message {
                Ok(v) => v?,
                Err(_) => {
                    // Silent for long: open it again where it was. Should
                    // this member hang, the reopening times out and the
                    // caller's next try goes to the next endpoint.
                    tracing::debug!(
                        "no word from {} {} for {idle:?}; opening the watch again",
                        self.endpoint,
                        self.what
                    );
                    let (stream, endpoint, batch) = self
                        .client
                        .open_watch(&self.create, self.resume_from, &self.what)
                        .await?;
                    self.stream = stream;
                    self.endpoint = endpoint;
                    self.note(&batch);
                    if batch.canceled || !batch.events.is_empty() {
                        return Ok(batch);
                    }
                    continue;
                }
            };
            let batch = Client::decode(&self.what, watch_batch(&v))?;
            self.note(&batch);
            if batch.canceled || !batch.events.is_empty() {
                return Ok(batch);
            }
        }
    }
}
