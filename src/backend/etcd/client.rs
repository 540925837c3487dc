//! etcd's native gRPC API over one HTTP/2 connection per endpoint: one
//! call per RPC, no retries and no policy (the caller owns both). The
//! messages are derived by hand (`super::proto`), so the build needs no
//! `protoc`; tonic frames them and reads etcd's status trailers, over a
//! connection we dial ourselves (TCP, then rustls with ALPN `h2` for
//! `https://` endpoints, with the CA, client certificate and key files the
//! other backends read too). Every unary call, the lease's keepalive
//! stream and the watches share that connection: a handover opens
//! nothing.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use url::Url;

use super::config::EtcdConfig;
use super::error::EtcdError;
use super::proto;
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

/// How long dialing an endpoint may take (TCP, TLS and HTTP/2's preface):
/// one that does not answer in it is passed over for the next.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A connection to an etcd cluster through any of its endpoints.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    /// Endpoints (tried in order), TLS files and user.
    config: EtcdConfig,
    /// rustls's settings, built once when an endpoint is `https://`.
    tls: Option<Arc<rustls::ClientConfig>>,
    /// The HTTP/2 connection to each endpoint, dialed at its first call and
    /// again once it is closed.
    conns: Vec<tokio::sync::Mutex<Option<Conn>>>,
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

/// One endpoint's HTTP/2 connection, and the lease keepalive stream open
/// on it.
#[derive(Clone)]
struct Conn {
    send: hyper::client::conn::http2::SendRequest<tonic::body::Body>,
    origin: http::Uri,
    keepalive: Arc<tokio::sync::Mutex<Option<KeepAliveStream>>>,
    /// What TLS said when it ended the connection: with TLS 1.3 a server
    /// refuses our client certificate only after the handshake, and the
    /// requests then out learn no more than that the connection closed.
    tls_ended: Arc<Mutex<Option<String>>>,
    /// Over TLS without a client certificate of ours.
    anonymous_tls: bool,
    /// Whether the server has answered a request on this connection.
    answered: Arc<std::sync::atomic::AtomicBool>,
}

impl Conn {
    /// `e`, or the TLS failure that broke the connection under it. A
    /// server that requires a client certificate we did not give closes
    /// the connection right after the handshake (TLS 1.3), and its alert
    /// is not always read: our request's write may fail first (CI saw
    /// "broke (connection closed)" once). A connection over TLS without a
    /// certificate of ours that broke before any answer stays a broken
    /// connection (a restarting server does the same, and is tried again),
    /// but its line names the certificate flags.
    fn why(&self, e: EtcdError) -> EtcdError {
        match e {
            EtcdError::Broken { endpoint, cause } => {
                let answered = self.answered.load(std::sync::atomic::Ordering::Acquire);
                match self.tls_ended.lock().expect("tls_ended lock").clone() {
                    Some(cause) => EtcdError::Tls { endpoint, cause },
                    None if self.anonymous_tls && !answered => EtcdError::Broken {
                        endpoint,
                        cause: format!(
                            "{cause}, before any answer, over TLS without a client certificate: if the server requires one, give --cert and --cert-key (or ETCDCTL_CERT and ETCDCTL_KEY)"
                        ),
                    },
                    None => EtcdError::Broken { endpoint, cause },
                }
            }
            e => e,
        }
    }

    /// Notes that the server answered: a later break is not a refused
    /// certificate.
    fn answered(&self) {
        self.answered
            .store(true, std::sync::atomic::Ordering::Release);
    }
}

/// A TLS stream that keeps rustls's verdict when it ends the connection:
/// HTTP/2 passes on an io error as its kind and text alone, so the error
/// the requests get no longer holds it.
struct Recording<T> {
    io: T,
    tls_ended: Arc<Mutex<Option<String>>>,
}

impl<T> Recording<T> {
    fn note<R>(&self, polled: Poll<std::io::Result<R>>) -> Poll<std::io::Result<R>> {
        if let Poll::Ready(Err(e)) = &polled {
            if let Some(problem) = tls::rustls_error(e) {
                *self.tls_ended.lock().expect("tls_ended lock") = Some(problem.to_string());
            }
        }
        polled
    }
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Recording<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        self.note(polled)
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Recording<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.note(polled)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.note(polled)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_shutdown(cx);
        self.note(polled)
    }
}

/// The service tonic's client calls through: our HTTP/2 connection.
#[derive(Clone)]
struct H2(hyper::client::conn::http2::SendRequest<tonic::body::Body>);

type H2Future = Pin<
    Box<dyn Future<Output = Result<http::Response<hyper::body::Incoming>, hyper::Error>> + Send>,
>;

impl tower_service::Service<http::Request<tonic::body::Body>> for H2 {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future = H2Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), hyper::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> H2Future {
        Box::pin(self.0.send_request(request))
    }
}

/// The one LeaseKeepAlive stream of a connection: each request is answered
/// in order on it. `waiting` is set while a request is out: a caller that
/// gave up (its deadline passed) leaves it set, and its answer, should it
/// come late, must never be taken for a later request's, so the next caller
/// opens a fresh stream instead.
struct KeepAliveStream {
    requests: mpsc::UnboundedSender<proto::LeaseId>,
    answers: tonic::Streaming<proto::LeaseKeepAliveResponse>,
    waiting: bool,
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

    fn from_proto(kv: proto::KeyValue) -> Kv {
        Kv {
            key: kv.key,
            value: kv.value,
            create_revision: kv.create_revision,
            mod_revision: kv.mod_revision,
            lease: kv.lease,
        }
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

    /// The request itself.
    pub fn to_proto(&self) -> proto::RangeRequest {
        proto::RangeRequest {
            key: self.key.clone(),
            range_end: self.range_end.clone().unwrap_or_default(),
            limit: self.limit.max(0),
            sort_order: match self.by_create {
                None => 0,
                Some(false) => 1,
                Some(true) => 2,
            },
            sort_target: if self.by_create.is_some() { 2 } else { 0 },
            max_create_revision: self.max_create_revision.max(0),
            ..proto::RangeRequest::default()
        }
    }

    /// The op in the JSON form [`Client::txn`] takes (etcd's own JSON
    /// mapping of `RangeRequest`, as its gateway spoke it).
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

/// A JSON field as bytes: base64, as etcd's JSON mapping of `bytes`.
fn b64_field(v: &Value, field: &str) -> Result<Vec<u8>, String> {
    bytes(v, field)
}

/// A `Compare` in etcd's JSON mapping, as [`Client::txn`] takes it.
fn compare_of(v: &Value) -> Result<proto::Compare, String> {
    use proto::compare::TargetUnion;
    let result = match v.get("result").and_then(Value::as_str).unwrap_or("EQUAL") {
        "EQUAL" => 0,
        "GREATER" => 1,
        "LESS" => 2,
        "NOT_EQUAL" => 3,
        other => return Err(format!("unknown compare result `{other}`")),
    };
    let (target, union) = match v.get("target").and_then(Value::as_str).unwrap_or("VERSION") {
        "VERSION" => (0, TargetUnion::Version(int(v, "version")?)),
        "CREATE" => (1, TargetUnion::CreateRevision(int(v, "create_revision")?)),
        "MOD" => (2, TargetUnion::ModRevision(int(v, "mod_revision")?)),
        "VALUE" => (3, TargetUnion::Value(b64_field(v, "value")?)),
        "LEASE" => (4, TargetUnion::Lease(int(v, "lease")?)),
        other => return Err(format!("unknown compare target `{other}`")),
    };
    Ok(proto::Compare {
        result,
        target,
        key: b64_field(v, "key")?,
        target_union: Some(union),
        range_end: b64_field(v, "range_end")?,
    })
}

/// A `RangeRequest` in etcd's JSON mapping ([`Range::to_json`]).
fn range_of(v: &Value) -> Result<proto::RangeRequest, String> {
    let sort_order = match v.get("sort_order").and_then(Value::as_str) {
        None | Some("NONE") => 0,
        Some("ASCEND") => 1,
        Some("DESCEND") => 2,
        Some(other) => return Err(format!("unknown sort order `{other}`")),
    };
    let sort_target = match v.get("sort_target").and_then(Value::as_str) {
        None | Some("KEY") => 0,
        Some("VERSION") => 1,
        Some("CREATE") => 2,
        Some("MOD") => 3,
        Some("VALUE") => 4,
        Some(other) => return Err(format!("unknown sort target `{other}`")),
    };
    Ok(proto::RangeRequest {
        key: b64_field(v, "key")?,
        range_end: b64_field(v, "range_end")?,
        limit: int(v, "limit")?,
        sort_order,
        sort_target,
        max_create_revision: int(v, "max_create_revision")?,
        ..proto::RangeRequest::default()
    })
}

/// A `RequestOp` in etcd's JSON mapping: `request_range`, `request_put`
/// or `request_delete_range`.
fn op_of(v: &Value) -> Result<proto::RequestOp, String> {
    use proto::request_op::Request;
    let request = if let Some(range) = v.get("request_range") {
        Request::Range(range_of(range)?)
    } else if let Some(put) = v.get("request_put") {
        Request::Put(proto::PutRequest {
            key: b64_field(put, "key")?,
            value: b64_field(put, "value")?,
            lease: int(put, "lease")?,
        })
    } else if let Some(delete) = v.get("request_delete_range") {
        Request::DeleteRange(proto::DeleteRangeRequest {
            key: b64_field(delete, "key")?,
            range_end: b64_field(delete, "range_end")?,
        })
    } else {
        return Err(format!("not a transaction op: {v}"));
    };
    Ok(proto::RequestOp {
        request: Some(request),
    })
}

fn revision_of(header: &Option<proto::ResponseHeader>) -> i64 {
    header.as_ref().map_or(0, |h| h.revision)
}

fn range_answer(r: proto::RangeResponse) -> RangeAnswer {
    RangeAnswer {
        revision: revision_of(&r.header),
        kvs: r.kvs.into_iter().map(Kv::from_proto).collect(),
    }
}

fn txn_answer(r: proto::TxnResponse) -> TxnAnswer {
    use proto::response_op::Response;
    let ranges = r
        .responses
        .into_iter()
        .filter_map(|op| match op.response {
            Some(Response::Range(range)) => Some(range_answer(range)),
            _ => None,
        })
        .collect();
    TxnAnswer {
        revision: revision_of(&r.header),
        succeeded: r.succeeded,
        ranges,
    }
}

fn watch_batch(r: proto::WatchResponse) -> WatchBatch {
    WatchBatch {
        revision: revision_of(&r.header),
        events: r
            .events
            .into_iter()
            .map(|e| Event {
                deleted: e.r#type == 1,
                kv: Kv::from_proto(e.kv.unwrap_or_default()),
            })
            .collect(),
        canceled: r.canceled,
        compact_revision: r.compact_revision,
    }
}

/// Why dialing failed when TLS is what failed: rustls's own verdict (a
/// certificate refused either way, TLS spoken to a port that answers
/// otherwise), or etcd's plain port hanging up on our handshake, with an
/// end of stream or a reset.
fn tls_failure(e: &std::io::Error) -> Option<String> {
    if let Some(problem) = tls::rustls_error(e) {
        return Some(problem.to_string());
    }
    (tls::handshake_cut_short(e) || tls::reset_by_peer(e))
        .then(|| "the server hung up during the handshake, as a port without TLS does".into())
}

/// rustls's settings for `config`: its CA file, else the system's roots,
/// and its client certificate; ALPN `h2`, which etcd's gRPC needs.
fn tls_config(config: &EtcdConfig) -> Result<Option<Arc<rustls::ClientConfig>>, String> {
    let verifies_tls = config.endpoints.iter().any(|e| e.scheme() != "http");
    if !verifies_tls {
        // A CA file given with plain endpoints is still read, so a wrong
        // path is reported as with TLS.
        if let Some(file) = &config.cacert {
            tls::read_roots(file).map_err(|e| format!("{e:#}"))?;
        }
        if let (Some(cert), Some(key)) = (&config.cert, &config.key) {
            tls::read_identity(cert, key).map_err(|e| format!("{e:#}"))?;
        }
        return Ok(None);
    }
    let mut roots = rustls::RootCertStore::empty();
    match &config.cacert {
        Some(file) => {
            for certificate in tls::read_roots(file).map_err(|e| format!("{e:#}"))? {
                roots.add(certificate).map_err(|e| {
                    format!("CA certificate `{}` is not usable ({e})", file.display())
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS ({e})"))?
        .with_root_certificates(roots);
    let mut tls = match (&config.cert, &config.key) {
        (Some(cert), Some(key)) => {
            let (chain, private_key) =
                tls::read_identity(cert, key).map_err(|e| format!("{e:#}"))?;
            builder
                .with_client_auth_cert(chain, private_key)
                .map_err(|e| {
                    format!(
                        "the client certificate `{}` and key `{}` are not usable together ({e})",
                        cert.display(),
                        key.display()
                    )
                })?
        }
        _ => builder.with_no_client_auth(),
    };
    tls.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Some(Arc::new(tls)))
}

/// The endpoint as users write it.
fn shown(url: &Url) -> String {
    url.as_str().trim_end_matches('/').to_owned()
}

/// Why a dial failed: TLS, or anything else (the next endpoint may do).
enum DialError {
    Tls(String),
    Other(String),
}

/// Starts HTTP/2 over `io` and drives the connection on a task of its own.
async fn handshake<T>(
    io: T,
) -> Result<hyper::client::conn::http2::SendRequest<tonic::body::Body>, hyper::Error>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (send, connection) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .handshake(hyper_util::rt::TokioIo::new(io))
            .await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!("the HTTP/2 connection to etcd ended: {e}");
        }
    });
    Ok(send)
}

/// A request with our auth token, when we have one, in the metadata etcd
/// reads it from.
fn request<T>(message: T, token: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(value) = token.and_then(|t| t.parse().ok()) {
        request.metadata_mut().insert("token", value);
    }
    request
}

impl Client {
    /// Builds the client; file problems are reported here, before any
    /// request, with the path that is wrong.
    pub fn new(config: &EtcdConfig) -> Result<Client, String> {
        let tls = tls_config(config)?;
        if config.endpoints.is_empty() {
            return Err("no etcd endpoint given; set ETCDCTL_ENDPOINTS or --endpoints".into());
        }
        Ok(Client {
            inner: Arc::new(Inner {
                tls,
                conns: config
                    .endpoints
                    .iter()
                    .map(|_| tokio::sync::Mutex::new(None))
                    .collect(),
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

    /// Dials `endpoint`: TCP, TLS for `https://`, HTTP/2's preface.
    async fn dial(&self, endpoint: &Url) -> Result<Conn, DialError> {
        let dialed = async {
            let port = endpoint.port_or_known_default().unwrap_or(2379);
            let host = endpoint
                .host()
                .ok_or_else(|| DialError::Other("no host".into()))?;
            let tcp = match &host {
                url::Host::Domain(name) => tokio::net::TcpStream::connect((*name, port)).await,
                url::Host::Ipv4(ip) => tokio::net::TcpStream::connect((*ip, port)).await,
                url::Host::Ipv6(ip) => tokio::net::TcpStream::connect((*ip, port)).await,
            }
            .map_err(|e| DialError::Other(innermost(&e)))?;
            let _ = tcp.set_nodelay(true);
            let tls_ended = Arc::new(Mutex::new(None));
            let anonymous_tls = match (&self.inner.tls, endpoint.scheme()) {
                (Some(config), "https") => !config.client_auth_cert_resolver.has_certs(),
                _ => false,
            };
            let send = match (&self.inner.tls, endpoint.scheme()) {
                (Some(config), "https") => {
                    let name = match host {
                        url::Host::Domain(name) => {
                            rustls::pki_types::ServerName::try_from(name.to_owned())
                                .map_err(|e| DialError::Tls(e.to_string()))?
                        }
                        url::Host::Ipv4(ip) => std::net::IpAddr::from(ip).into(),
                        url::Host::Ipv6(ip) => std::net::IpAddr::from(ip).into(),
                    };
                    let stream = tokio_rustls::TlsConnector::from(config.clone())
                        .connect(name, tcp)
                        .await
                        .map_err(|e| match tls_failure(&e) {
                            Some(cause) => DialError::Tls(cause),
                            None => DialError::Other(innermost(&e)),
                        })?;
                    handshake(Recording {
                        io: stream,
                        tls_ended: tls_ended.clone(),
                    })
                    .await
                }
                _ => handshake(tcp).await,
            }
            .map_err(|e| DialError::Other(innermost(&e)))?;
            let origin = shown(endpoint)
                .parse()
                .map_err(|e: http::uri::InvalidUri| DialError::Other(e.to_string()))?;
            Ok(Conn {
                send,
                origin,
                keepalive: Arc::new(tokio::sync::Mutex::new(None)),
                tls_ended,
                anonymous_tls,
                answered: Arc::default(),
            })
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, dialed).await {
            Ok(dialed) => dialed,
            Err(_) => Err(DialError::Other(format!(
                "no connection within {}",
                crate::duration::fmt_duration(CONNECT_TIMEOUT)
            ))),
        }
    }

    /// The connection to the first endpoint that accepts one, starting
    /// with the one that answered last, dialed unless it is open. Only a
    /// failed dial moves on: no request left, so trying the next endpoint
    /// cannot apply one twice.
    async fn connection(&self) -> Result<(Conn, String), EtcdError> {
        let endpoints = &self.inner.config.endpoints;
        let n = endpoints.len();
        let start = self.inner.current.load(Ordering::Relaxed);
        let mut causes = Vec::new();
        for i in 0..n {
            let index = (start + i) % n;
            let endpoint = &endpoints[index];
            let mut slot = self.inner.conns[index].lock().await;
            if let Some(conn) = slot.as_ref().filter(|c| !c.send.is_closed()) {
                self.inner.current.store(index, Ordering::Relaxed);
                return Ok((conn.clone(), shown(endpoint)));
            }
            *slot = None;
            match self.dial(endpoint).await {
                Ok(conn) => {
                    *slot = Some(conn.clone());
                    self.inner.current.store(index, Ordering::Relaxed);
                    return Ok((conn, shown(endpoint)));
                }
                Err(DialError::Tls(cause)) if n == 1 => {
                    return Err(EtcdError::Tls {
                        endpoint: shown(endpoint),
                        cause,
                    });
                }
                Err(DialError::Tls(cause) | DialError::Other(cause)) => {
                    causes.push(format!("{}: {cause}", shown(endpoint)));
                }
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

    /// Drops `conn` from its endpoint's slot, so that the next request
    /// dials afresh.
    async fn forget(&self, conn: &Conn) {
        for slot in self.inner.conns.iter() {
            let mut slot = slot.lock().await;
            if slot
                .as_ref()
                .is_some_and(|c| Arc::ptr_eq(&c.keepalive, &conn.keepalive))
            {
                *slot = None;
            }
        }
    }

    /// Our auth token, authenticating first when we have none.
    async fn token(&self) -> Result<Option<String>, EtcdError> {
        let Some(user) = &self.inner.config.user else {
            return Ok(None);
        };
        if let Some(token) = self.inner.token.lock().expect("token lock").clone() {
            return Ok(Some(token));
        }
        let what = format!("authenticating as `{}`", user.name);
        let answer: proto::AuthenticateResponse = self
            .attempt(
                proto::method::AUTHENTICATE,
                proto::AuthenticateRequest {
                    name: user.name.clone(),
                    password: user.password.secret().to_owned(),
                },
                None,
                &what,
            )
            .await?;
        if answer.token.is_empty() {
            return Err(EtcdError::Decode {
                what,
                cause: "no token in the answer; is auth enabled?".into(),
            });
        }
        *self.inner.token.lock().expect("token lock") = Some(answer.token.clone());
        Ok(Some(answer.token))
    }

    /// One unary call on the current connection, with `token`.
    async fn attempt<Req, Resp>(
        &self,
        method: &'static str,
        message: Req,
        token: Option<&str>,
        what: &str,
    ) -> Result<Resp, EtcdError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let (conn, endpoint) = self.connection().await?;
        let started = std::time::Instant::now();
        let mut grpc =
            tonic::client::Grpc::with_origin(H2(conn.send.clone()), conn.origin.clone());
        grpc.ready()
            .await
            .map_err(|e| conn.why(transport_error(&endpoint, &e)))?;
        let answer = grpc
            .unary(
                request(message, token),
                http::uri::PathAndQuery::from_static(method),
                tonic_prost::ProstCodec::<Req, Resp>::default(),
            )
            .await;
        tracing::debug!(
            "gRPC {endpoint}{method} -> {} in {:?} ({what})",
            match &answer {
                Ok(_) => "OK".to_owned(),
                Err(status) => format!("{:?}", status.code()),
            },
            started.elapsed()
        );
        // etcd's own error statuses are answers too; a transport's has a
        // source.
        if answer.as_ref().map_or_else(
            |status| std::error::Error::source(status).is_none(),
            |_| true,
        ) {
            conn.answered();
        }
        answer
            .map(tonic::Response::into_inner)
            .map_err(|status| conn.why(self.status_error(status, &endpoint, what)))
    }

    /// A failed call's status as our error: etcd's answer, or the
    /// connection's failure (tonic keeps the transport's error as the
    /// status's source; etcd's own statuses have none).
    fn status_error(&self, status: tonic::Status, endpoint: &str, what: &str) -> EtcdError {
        use std::error::Error as _;
        if let Some(source) = status.source() {
            return transport_error(endpoint, source);
        }
        let e = EtcdError::from_status(what, status.code() as i64, status.message());
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

    /// `work` within `timeout`; a timeout or broken connection sends the
    /// next call to the next endpoint, and a daemon's log says once when
    /// etcd stops answering, and again when it answers
    /// (`logging::engine_trouble`).
    async fn bounded<T>(
        &self,
        timeout: Duration,
        work: impl Future<Output = Result<T, EtcdError>>,
    ) -> Result<T, EtcdError> {
        // On the heap: tonic's futures are large, and a call is awaited
        // deep in lockrun's own.
        let answer = match tokio::time::timeout(timeout, Box::pin(work)).await {
            Ok(answer) => answer,
            Err(_) => Err(EtcdError::Timeout {
                endpoint: self.current_endpoint(),
                after: timeout,
            }),
        };
        if let Err(EtcdError::Timeout { .. } | EtcdError::Broken { .. }) = answer {
            self.move_on();
        }
        match &answer {
            Err(e) if e.is_transient() => crate::logging::engine_trouble("etcd", e),
            _ => crate::logging::engine_answered("etcd"),
        }
        answer
    }

    /// One call, with our token when we have a user.
    async fn call<Req, Resp>(
        &self,
        method: &'static str,
        message: Req,
        timeout: Duration,
        what: &str,
    ) -> Result<Resp, EtcdError>
    where
        Req: prost::Message + Clone + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        // Authenticating counts against the caller's timeout too.
        self.bounded(timeout, async {
            let token = self.token().await?;
            match self
                .attempt(method, message.clone(), token.as_deref(), what)
                .await
            {
                // etcd refused the request unapplied because our token
                // expired (simple tokens last five minutes): one fresh
                // token, one resend.
                Err(EtcdError::TokenExpired { .. }) if token.is_some() => {
                    let token = self.token().await?;
                    self.attempt(method, message, token.as_deref(), what).await
                }
                other => other,
            }
        })
        .await
    }

    fn current_endpoint(&self) -> String {
        let index = self.inner.current.load(Ordering::Relaxed);
        shown(&self.inner.config.endpoints[index % self.inner.config.endpoints.len()])
    }

    /// `LeaseGrant`; the server may grant a longer TTL than asked.
    pub async fn grant(&self, ttl: Duration) -> Result<Granted, EtcdError> {
        let what = "granting a lease";
        let secs = ttl.as_secs().max(1);
        let answer: proto::LeaseGrantResponse = self
            .call(
                proto::method::LEASE_GRANT,
                proto::LeaseGrantRequest {
                    ttl: i64::try_from(secs).unwrap_or(i64::MAX),
                    id: 0,
                },
                self.inner.call_timeout,
                what,
            )
            .await?;
        if answer.id == 0 || answer.ttl <= 0 {
            return Err(EtcdError::Decode {
                what: what.to_owned(),
                cause: format!("no lease in the answer {}", answer.error),
            });
        }
        Ok(Granted {
            id: answer.id,
            ttl: Duration::from_secs(answer.ttl as u64),
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

    /// One keepalive on the current connection's LeaseKeepAlive stream,
    /// opened at the first; after a broken connection or stream, sent once
    /// more on a fresh one (dialed again if the connection is gone).
    async fn keepalive_once(&self, id: i64, timeout: Duration) -> Result<Duration, EtcdError> {
        let what = "renewing the lease";
        let answer = self
            .bounded(timeout, async {
                let token = self.token().await?;
                let mut tries = 0;
                loop {
                    tries += 1;
                    let (conn, endpoint) = self.connection().await?;
                    let mut stream = conn.keepalive.lock().await;
                    let answer = self
                        .keepalive_on(&conn, &mut stream, id, token.as_deref(), &endpoint, what)
                        .await
                        .map_err(|e| conn.why(e));
                    match answer {
                        Ok(ttl) => {
                            conn.answered();
                            return Ok(ttl);
                        }
                        Err(e) => {
                            *stream = None;
                            if tries > 1 || !matches!(e, EtcdError::Broken { .. }) {
                                return Err(e);
                            }
                            // A connection that broke may not say so yet
                            // (hyper's "connection was not ready" after a
                            // frozen link thawed): the second try dials.
                            drop(stream);
                            self.forget(&conn).await;
                        }
                    }
                }
            })
            .await
            .map_err(|e| lease_gone(e, id))?;
        if answer <= 0 {
            // etcd answers a keepalive for an unknown lease with TTL 0.
            return Err(EtcdError::LeaseNotFound { lease: id });
        }
        Ok(Duration::from_secs(answer as u64))
    }

    /// Sends one keepalive on `stream` (opened first when it is not, or
    /// when an earlier request on it was given up) and reads its answer:
    /// the TTL.
    async fn keepalive_on(
        &self,
        conn: &Conn,
        stream: &mut Option<KeepAliveStream>,
        id: i64,
        token: Option<&str>,
        endpoint: &str,
        what: &str,
    ) -> Result<i64, EtcdError> {
        let broken = |cause: &str| EtcdError::Broken {
            endpoint: endpoint.to_owned(),
            cause: cause.to_owned(),
        };
        if stream.as_ref().is_some_and(|s| s.waiting) {
            *stream = None;
        }
        let open = match stream.take() {
            Some(mut open) => {
                open.waiting = true;
                open.requests
                    .send(proto::LeaseId { id })
                    .map_err(|_| broken("the keepalive stream was closed"))?;
                open
            }
            None => {
                // gRPC's server sends its headers with the first answer,
                // so the first request goes before we wait for them.
                let (requests, queue) = mpsc::unbounded_channel();
                let _ = requests.send(proto::LeaseId { id });
                let mut grpc =
                    tonic::client::Grpc::with_origin(H2(conn.send.clone()), conn.origin.clone());
                grpc.ready()
                    .await
                    .map_err(|e| transport_error(endpoint, &e))?;
                let answers = grpc
                    .streaming(
                        request(
                            tokio_stream::wrappers::UnboundedReceiverStream::new(queue),
                            token,
                        ),
                        http::uri::PathAndQuery::from_static(proto::method::LEASE_KEEP_ALIVE),
                        tonic_prost::ProstCodec::<proto::LeaseId, proto::LeaseKeepAliveResponse>::default(),
                    )
                    .await
                    .map_err(|status| self.status_error(status, endpoint, what))?
                    .into_inner();
                KeepAliveStream {
                    requests,
                    answers,
                    waiting: true,
                }
            }
        };
        let open = stream.insert(open);
        let started = std::time::Instant::now();
        loop {
            match open.answers.message().await {
                Ok(Some(answer)) if answer.id == id => {
                    open.waiting = false;
                    tracing::debug!(
                        "gRPC {endpoint}{} -> OK in {:?} ({what})",
                        proto::method::LEASE_KEEP_ALIVE,
                        started.elapsed()
                    );
                    return Ok(answer.ttl);
                }
                // Another lease's: not ours to take.
                Ok(Some(_)) => {}
                Ok(None) => return Err(broken("the keepalive stream ended")),
                Err(status) => return Err(self.status_error(status, endpoint, what)),
            }
        }
    }

    /// `LeaseRevoke`: deletes every key attached to the lease.
    /// Like a keepalive, a revoke may be sent again elsewhere (a second one
    /// answers "lease not found"), so one that hangs is tried on the next
    /// endpoint within `timeout`.
    pub async fn revoke(&self, id: i64, timeout: Duration) -> Result<(), EtcdError> {
        let until = tokio::time::Instant::now() + timeout;
        loop {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            let answer = self
                .call::<_, proto::LeaseRevokeResponse>(
                    proto::method::LEASE_REVOKE,
                    proto::LeaseId { id },
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

    /// `LeaseTimeToLive`.
    async fn lease_ttl(&self, id: i64) -> Result<proto::LeaseTimeToLiveResponse, EtcdError> {
        self.call(
            proto::method::LEASE_TIME_TO_LIVE,
            proto::LeaseId { id },
            self.inner.call_timeout,
            "reading a lease",
        )
        .await
    }

    /// `LeaseTimeToLive`: the remaining TTL, `None` if the lease is gone.
    pub async fn time_to_live(&self, id: i64) -> Result<Option<Duration>, EtcdError> {
        let ttl = self.lease_ttl(id).await?.ttl;
        Ok((ttl >= 0).then(|| Duration::from_secs(ttl as u64)))
    }

    /// `LeaseTimeToLive`: the TTL the lease was granted, `None` if the
    /// lease is gone.
    pub async fn granted_ttl(&self, id: i64) -> Result<Option<Duration>, EtcdError> {
        let answer = self.lease_ttl(id).await?;
        if answer.ttl < 0 {
            return Ok(None);
        }
        Ok(Some(Duration::from_secs(answer.granted_ttl.max(0) as u64)))
    }

    /// `Range`.
    pub async fn range(&self, range: &Range) -> Result<RangeAnswer, EtcdError> {
        let what = format!("reading `{}`", String::from_utf8_lossy(&range.key));
        let answer = self
            .call(
                proto::method::RANGE,
                range.to_proto(),
                self.inner.call_timeout,
                &what,
            )
            .await?;
        Ok(range_answer(answer))
    }

    /// `Txn`, with the compares and ops in etcd's JSON mapping of its
    /// messages (the form its gateway speaks; `Range::to_json` writes a
    /// range's), each turned into its protobuf message here.
    pub async fn txn(
        &self,
        compare: Vec<Value>,
        success: Vec<Value>,
        failure: Vec<Value>,
        what: &str,
    ) -> Result<TxnAnswer, EtcdError> {
        let built = (|| -> Result<proto::TxnRequest, String> {
            Ok(proto::TxnRequest {
                compare: compare.iter().map(compare_of).collect::<Result<_, _>>()?,
                success: success.iter().map(op_of).collect::<Result<_, _>>()?,
                failure: failure.iter().map(op_of).collect::<Result<_, _>>()?,
            })
        })();
        let request = built.map_err(|cause| EtcdError::Decode {
            what: what.to_owned(),
            cause,
        })?;
        let answer = self
            .call(proto::method::TXN, request, self.inner.call_timeout, what)
            .await?;
        Ok(txn_answer(answer))
    }

    /// `DeleteRange` of one key: how many keys went.
    pub async fn delete(&self, key: &[u8], timeout: Duration) -> Result<i64, EtcdError> {
        let what = format!("deleting `{}`", String::from_utf8_lossy(key));
        let answer: proto::DeleteRangeResponse = self
            .call(
                proto::method::DELETE_RANGE,
                proto::DeleteRangeRequest {
                    key: key.to_vec(),
                    range_end: Vec::new(),
                },
                timeout,
                &what,
            )
            .await?;
        Ok(answer.deleted)
    }

    /// Opens a watch on `key` (to `range_end`) from `start_revision`; only
    /// deletions when `deletes_only`.
    pub async fn watch(
        &self,
        key: &[u8],
        range_end: Option<&[u8]>,
        start_revision: i64,
        deletes_only: bool,
    ) -> Result<Watch, EtcdError> {
        let what = format!("watching `{}`", String::from_utf8_lossy(key));
        let create = proto::WatchCreateRequest {
            key: key.to_vec(),
            range_end: range_end.map(<[u8]>::to_vec).unwrap_or_default(),
            start_revision,
            progress_notify: false,
            // NOPUT
            filters: if deletes_only { vec![0] } else { Vec::new() },
        };
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

    /// Opens one watch stream from `start_revision` on the current
    /// connection and reads the message that confirms it, within the call
    /// deadline: a member that hangs never confirms, and then the next try
    /// goes to the next endpoint.
    async fn open_watch(
        &self,
        create: &proto::WatchCreateRequest,
        start_revision: i64,
        what: &str,
    ) -> Result<(WatchStream, String, WatchBatch), EtcdError> {
        let mut create = create.clone();
        create.start_revision = start_revision;
        self.bounded(self.inner.call_timeout, async {
            let token = self.token().await?;
            let (conn, endpoint) = self.connection().await?;
            let (requests, queue) = mpsc::unbounded_channel();
            let _ = requests.send(proto::WatchRequest {
                request_union: Some(proto::watch_request::RequestUnion::CreateRequest(create)),
            });
            let mut grpc =
                tonic::client::Grpc::with_origin(H2(conn.send.clone()), conn.origin.clone());
            grpc.ready()
                .await
                .map_err(|e| conn.why(transport_error(&endpoint, &e)))?;
            let started = std::time::Instant::now();
            let answers = grpc
                .streaming(
                    request(
                        tokio_stream::wrappers::UnboundedReceiverStream::new(queue),
                        token.as_deref(),
                    ),
                    http::uri::PathAndQuery::from_static(proto::method::WATCH),
                    tonic_prost::ProstCodec::<proto::WatchRequest, proto::WatchResponse>::default(),
                )
                .await
                .map_err(|status| conn.why(self.status_error(status, &endpoint, what)))?
                .into_inner();
            let mut stream = WatchStream {
                _requests: requests,
                answers,
            };
            // The first message confirms the watch; events may only follow it.
            let created = stream.message(self, &endpoint, what).await?;
            conn.answered();
            tracing::debug!(
                "gRPC {endpoint}{} -> created in {:?} ({what})",
                proto::method::WATCH,
                started.elapsed()
            );
            if !created.created {
                return Err(EtcdError::Decode {
                    what: what.to_owned(),
                    cause: format!(
                        "the watch was not created (canceled: {}, {})",
                        created.canceled, created.cancel_reason
                    ),
                });
            }
            Ok((stream, endpoint, watch_batch(created)))
        })
        .await
    }
}

/// A connection's failure: TLS's (with TLS 1.3 a server refuses our
/// client certificate only after the handshake, at the first request), or
/// a broken connection.
fn transport_error(endpoint: &str, e: &(dyn std::error::Error + 'static)) -> EtcdError {
    match tls::rustls_error(e) {
        Some(problem) => EtcdError::Tls {
            endpoint: endpoint.to_owned(),
            cause: problem.to_string(),
        },
        None => EtcdError::Broken {
            endpoint: endpoint.to_owned(),
            cause: innermost(e),
        },
    }
}

/// A "lease not found" answer as the verdict it is.
fn lease_gone(e: EtcdError, id: i64) -> EtcdError {
    if e.is_lease_not_found() {
        EtcdError::LeaseNotFound { lease: id }
    } else {
        e
    }
}

/// One watch stream: its request side, kept open while we read, and its
/// answers.
struct WatchStream {
    _requests: mpsc::UnboundedSender<proto::WatchRequest>,
    answers: tonic::Streaming<proto::WatchResponse>,
}

impl WatchStream {
    async fn message(
        &mut self,
        client: &Client,
        endpoint: &str,
        what: &str,
    ) -> Result<proto::WatchResponse, EtcdError> {
        match self.answers.message().await {
            Ok(Some(message)) => Ok(message),
            Ok(None) => Err(EtcdError::Broken {
                endpoint: endpoint.to_owned(),
                cause: format!("the stream {what} ended"),
            }),
            Err(status) => Err(client.status_error(status, endpoint, what)),
        }
    }
}

/// An open watch. One that stays silent for twice the call deadline is
/// opened again from where it was, so that a watch on a member that hangs
/// (which confirms nothing and delivers nothing) moves to a member that
/// answers instead of waiting for ever: a waiter would otherwise never see
/// the lock come free. etcd's progress notifications come every ten
/// minutes by default, and its gRPC server refuses pings more often than
/// every five seconds on a connection without a call.
pub struct Watch {
    client: Client,
    /// The create request, its start revision set at each opening.
    create: proto::WatchCreateRequest,
    /// Every event before this revision was delivered (or filtered out).
    resume_from: i64,
    stream: WatchStream,
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
            let message = tokio::time::timeout(
                idle,
                self.stream.message(&self.client, &self.endpoint, &self.what),
            )
            .await;
            let message = match message {
                Ok(message) => message?,
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
            let batch = watch_batch(message);
            self.note(&batch);
            if batch.canceled || !batch.events.is_empty() {
                return Ok(batch);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_ops_become_etcds_messages() {
        use proto::compare::TargetUnion;
        use proto::request_op::Request;
        let compare = compare_of(&json!({
            "key": B64.encode(b"a/"),
            "range_end": B64.encode(b"a0"),
            "target": "CREATE",
            "result": "LESS",
            "create_revision": "7",
        }))
        .unwrap();
        assert_eq!((compare.result, compare.target), (2, 1));
        assert_eq!(compare.key, b"a/");
        assert_eq!(compare.range_end, b"a0");
        assert_eq!(compare.target_union, Some(TargetUnion::CreateRevision(7)));
        let range = Range::prefix(b"a/").newest_first().limited(3);
        let op = op_of(&json!({ "request_range": range.to_json() })).unwrap();
        assert_eq!(op.request, Some(Request::Range(range.to_proto())));
        let Some(Request::Range(read)) = op.request else {
            unreachable!()
        };
        assert_eq!((read.sort_order, read.sort_target, read.limit), (2, 2, 3));
        let put = op_of(&json!({ "request_put": {
            "key": B64.encode(b"k"), "value": "", "lease": "255",
        }}))
        .unwrap();
        assert_eq!(
            put.request,
            Some(Request::Put(proto::PutRequest {
                key: b"k".to_vec(),
                value: Vec::new(),
                lease: 255,
            }))
        );
        assert!(op_of(&json!({ "request_nothing": {} })).is_err());
        assert!(compare_of(&json!({ "target": "SIZE" })).is_err());
    }
}
