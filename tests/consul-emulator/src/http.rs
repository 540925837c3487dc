//! The HTTP server: connections, routing, the parts every Consul endpoint
//! shares (query options, datacenter/leader/token checks, blocking, response
//! headers) and the two agent endpoints. KV and sessions live in their own
//! modules.

use crate::acl::{self, Authz};
use crate::faults::{self, NO_LEADER};
use crate::query::{self, Query};
use crate::record::Endpoint;
use crate::state::State;
use crate::{duration, gojson, kv, random_u64, session, txn, Shared};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Response};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Notify};

/// A response ready to send.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn empty(status: u16) -> Answer {
        Answer {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// An error or message written with Go's `fmt.Fprint`, which net/http
    /// sniffs as plain text.
    pub fn text(status: u16, msg: impl Into<String>) -> Answer {
        let body = msg.into().into_bytes();
        let mut answer = Answer::empty(status);
        if !body.is_empty() {
            answer = answer.header("content-type", "text/plain; charset=utf-8");
        }
        answer.body = body;
        answer
    }

    pub fn json<T: Serialize>(value: &T, req: &Request) -> Answer {
        Answer {
            status: 200,
            headers: vec![("content-type", "application/json".to_string())],
            body: gojson::to_vec(value, req.pretty),
        }
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Answer {
        self.headers.push((name, value.into()));
        self
    }
}

/// How a request ends.
#[derive(Debug)]
pub enum Outcome {
    Answer(Answer),
    /// No answer, ever (a partition).
    Hang,
    /// The connection is closed without an answer.
    Drop,
}

impl From<Answer> for Outcome {
    fn from(a: Answer) -> Outcome {
        Outcome::Answer(a)
    }
}

/// A request as our handlers see it: path decoded, query parsed.
pub struct Request {
    pub method: Method,
    /// Percent-decoded, as Go's `req.URL.Path`.
    pub path: String,
    pub query: Query,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The `Content-Length` header; Consul decides on it, not on the body.
    pub content_length: Option<u64>,
    /// `?pretty`, or always on a 1.6 dev agent.
    pub pretty: bool,
    /// Imitating Consul 1.6 ([`crate::Builder::version`]).
    pub legacy_1_6: bool,
}

pub async fn serve(
    shared: Arc<Shared>,
    listener: std::net::TcpListener,
    mut stop: oneshot::Receiver<()>,
) {
    let Ok(listener) = TcpListener::from_std(listener) else {
        return;
    };
    let reaper = tokio::spawn(reaper(Arc::clone(&shared)));
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(connection(Arc::clone(&shared), stream));
                }
                // Out of file descriptors or similar: back off instead of
                // spinning, and keep serving.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
        }
    }
    reaper.abort();
}

/// The leader's session timers.
async fn reaper(shared: Arc<Shared>) {
    loop {
        let no_leader = shared.faults.borrow().no_leader;
        let next = if no_leader {
            None
        } else {
            shared.state().next_expiry()
        };
        match next {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at.into()) => {}
                    _ = shared.reaper.notified() => {}
                }
            }
            None => shared.reaper.notified().await,
        }
        let no_leader = shared.faults.borrow().no_leader;
        let due = shared
            .state()
            .next_expiry()
            .is_some_and(|t| t <= Instant::now());
        if due && !no_leader {
            shared.mutate(|st, now| st.expire_sessions(now));
        }
    }
}

async fn connection(shared: Arc<Shared>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let kill = Arc::new(Notify::new());
    let mut generation = shared.connections.subscribe();
    let service = {
        let shared = Arc::clone(&shared);
        let kill = Arc::clone(&kill);
        service_fn(move |req| respond(Arc::clone(&shared), Arc::clone(&kill), req))
    };
    let mut builder = http1::Builder::new();
    // Go writes canonical header names (`X-Consul-Knownleader`); hyper's
    // title case produces the same spelling.
    builder.title_case_headers(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    // Dropping `conn` closes the socket without another byte.
    tokio::select! {
        _ = conn => {}
        _ = kill.notified() => {}
        _ = generation.changed() => {}
    }
}

async fn respond(
    shared: Arc<Shared>,
    kill: Arc<Notify>,
    req: hyper::Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    match handle(&shared, req).await {
        Outcome::Answer(a) => Ok(to_hyper(a)),
        Outcome::Hang => std::future::pending().await,
        Outcome::Drop => {
            kill.notify_one();
            std::future::pending().await
        }
    }
}

fn to_hyper(a: Answer) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(a.body)));
    *resp.status_mut() =
        hyper::StatusCode::from_u16(a.status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in a.headers {
        // Values can echo client input (a redirect's Location); one that is
        // not a legal header value is left out rather than failing the reply.
        if let Ok(v) = HeaderValue::from_str(&value) {
            resp.headers_mut().append(HeaderName::from_static(name), v);
        }
    }
    resp
}

/// Logs the request on arrival, and its fate when done. A request whose
/// future is dropped (its connection went away) is logged as dropped.
struct Logged<'a> {
    shared: &'a Shared,
    seq: u64,
    done: bool,
}

impl Logged<'_> {
    fn finish(mut self, outcome: &Outcome) {
        self.done = true;
        match outcome {
            Outcome::Answer(a) => self.shared.record.finish(self.seq, Some(a.status), false),
            Outcome::Hang => self.shared.record.finish(self.seq, None, false),
            Outcome::Drop => self.shared.record.finish(self.seq, None, true),
        }
    }
}

impl Drop for Logged<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.shared.record.finish(self.seq, None, true);
        }
    }
}

async fn handle(shared: &Shared, req: hyper::Request<Incoming>) -> Outcome {
    let raw = req.uri().path_and_query().map_or_else(
        || req.uri().path().to_string(),
        |pq| pq.as_str().to_string(),
    );
    let endpoint = find_route(req.uri().path())
        .map_or(Endpoint::Other, |(route, _)| route.endpoint(req.method()));
    let logged = Logged {
        shared,
        seq: shared.record.arrive(req.method().as_str(), &raw, endpoint),
        done: false,
    };
    let blip = {
        let mut blips = shared.blips.lock().unwrap_or_else(|e| e.into_inner());
        let method = req.method().as_str();
        let hit = blips.iter_mut().position(|b| b.hits(method, &raw));
        hit.map(|i| blips.remove(i).outcome())
    };
    let outcome = match blip {
        Some(outcome) => outcome,
        None => meet_faults(shared, req).await,
    };
    logged.finish(&outcome);
    outcome
}

async fn meet_faults(shared: &Shared, req: hyper::Request<Incoming>) -> Outcome {
    let (parts, body) = req.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return Outcome::Drop;
    };
    let latency = shared.faults.borrow().latency;
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let network = shared.faults.borrow().network();
    if let Some(outcome) = network {
        return outcome;
    }
    let outcome = route(shared, parts, body).await;
    // A fault that began while we worked swallows the answer, as the
    // network would; the work itself stays done.
    let network = shared.faults.borrow().network();
    match (outcome, network) {
        (Outcome::Answer(_), Some(fault)) => fault,
        (outcome, _) => outcome,
    }
}

#[derive(Clone, Copy)]
enum Route {
    Kv,
    SessionCreate,
    SessionDestroy,
    SessionRenew,
    SessionInfo,
    SessionNode,
    SessionList,
    AgentSelf,
    AgentCheck,
    AgentService,
    HealthNode,
    StatusLeader,
    Txn,
}

impl Route {
    /// How the counters file a request for this route.
    fn endpoint(self, method: &Method) -> Endpoint {
        match (self, method) {
            (Route::Kv, &Method::GET) => Endpoint::KvGet,
            (Route::Kv, &Method::PUT) => Endpoint::KvPut,
            (Route::Kv, &Method::DELETE) => Endpoint::KvDelete,
            (Route::Kv, _) => Endpoint::Other,
            (Route::SessionCreate, _) => Endpoint::SessionCreate,
            (Route::SessionDestroy, _) => Endpoint::SessionDestroy,
            (Route::SessionRenew, _) => Endpoint::SessionRenew,
            (Route::SessionInfo, _) => Endpoint::SessionInfo,
            (Route::SessionNode, _) => Endpoint::SessionNode,
            (Route::SessionList, _) => Endpoint::SessionList,
            (Route::AgentSelf, _) => Endpoint::AgentSelf,
            (Route::AgentCheck | Route::AgentService | Route::HealthNode, _) => Endpoint::Other,
            (Route::StatusLeader, _) => Endpoint::StatusLeader,
            (Route::Txn, _) => Endpoint::Txn,
        }
    }
}

/// Consul's mux: subtree patterns end in `/`, the rest match exactly.
fn find_route(path: &str) -> Option<(Route, &'static [&'static str])> {
    const GET: &[&str] = &["GET"];
    const PUT: &[&str] = &["PUT"];
    const KV: &[&str] = &["GET", "PUT", "DELETE"];
    let subtrees = [
        ("/v1/kv/", Route::Kv, KV),
        ("/v1/session/destroy/", Route::SessionDestroy, PUT),
        ("/v1/session/renew/", Route::SessionRenew, PUT),
        ("/v1/session/info/", Route::SessionInfo, GET),
        ("/v1/session/node/", Route::SessionNode, GET),
        ("/v1/agent/check/pass/", Route::AgentCheck, PUT),
        ("/v1/agent/check/fail/", Route::AgentCheck, PUT),
        ("/v1/agent/check/deregister/", Route::AgentCheck, PUT),
        ("/v1/agent/service/deregister/", Route::AgentService, PUT),
        ("/v1/health/node/", Route::HealthNode, GET),
    ];
    if let Some(&(_, r, m)) = subtrees.iter().find(|(p, _, _)| path.starts_with(p)) {
        return Some((r, m));
    }
    match path {
        "/v1/session/create" => Some((Route::SessionCreate, PUT)),
        "/v1/session/list" => Some((Route::SessionList, GET)),
        "/v1/agent/self" => Some((Route::AgentSelf, GET)),
        "/v1/agent/check/register" => Some((Route::AgentCheck, PUT)),
        "/v1/agent/service/register" => Some((Route::AgentService, PUT)),
        "/v1/status/leader" => Some((Route::StatusLeader, GET)),
        "/v1/txn" => Some((Route::Txn, PUT)),
        _ => None,
    }
}

/// Go's `unicode.IsPrint`, near enough: Consul refuses paths with anything
/// else (an encoded line feed, say).
fn printable(c: char) -> bool {
    c == ' ' || !(c.is_control() || c.is_whitespace())
}

async fn route(shared: &Shared, parts: hyper::http::request::Parts, body: Bytes) -> Outcome {
    let Some(decoded) = query::unescape(parts.uri.path(), false) else {
        // Go's server refuses a request-target it cannot parse.
        return Answer::text(400, "400 Bad Request").into();
    };
    let path = String::from_utf8_lossy(&decoded).into_owned();
    if !path.chars().all(printable) {
        return Answer::empty(400).into();
    }
    let raw_query = parts.uri.query().unwrap_or("");
    // ServeMux redirects a path it would clean, and a subtree root without
    // its slash, before any handler sees them.
    const SUBTREE_ROOTS: [&str; 5] = [
        "/v1/kv",
        "/v1/session/destroy",
        "/v1/session/renew",
        "/v1/session/info",
        "/v1/session/node",
    ];
    if SUBTREE_ROOTS.contains(&path.as_str()) {
        return redirect(&parts.method, &format!("{path}/"), raw_query).into();
    }
    let cleaned = query::clean_path(&path);
    if cleaned != path {
        return redirect(&parts.method, &cleaned, raw_query).into();
    }
    let Some((route, methods)) = find_route(&path) else {
        return Answer::empty(404).into();
    };
    let (query, bad_query) = Query::parse(raw_query);
    let content_length = parts
        .headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok());
    let legacy_1_6 = shared.config.legacy_1_6;
    let req = Request {
        method: parts.method,
        path,
        pretty: legacy_1_6 || query.has("pretty"),
        query,
        headers: parts.headers,
        body,
        content_length,
        legacy_1_6,
    };
    let policy = if shared.config.acl_tokens.is_some() {
        "deny"
    } else {
        "allow"
    };
    let outcome = if bad_query {
        // Consul's handler wrapper parses the query to hide tokens from its
        // log, and gives up with a bare 500 when it cannot.
        Answer::empty(500).into()
    } else if req.method == Method::OPTIONS {
        Answer::empty(200)
            .header("allow", format!("OPTIONS,{}", methods.join(",")))
            .into()
    } else if !methods.contains(&req.method.as_str()) {
        Answer::text(405, format!("method {} not allowed", req.method))
            .header("allow", format!("OPTIONS,{}", methods.join(",")))
            .into()
    } else {
        match route {
            Route::Kv => kv::handle(shared, &req).await,
            Route::SessionCreate => session::create(shared, &req),
            Route::SessionDestroy => session::destroy(shared, &req),
            Route::SessionRenew => session::renew(shared, &req),
            Route::SessionInfo => session::info(shared, &req).await,
            Route::SessionNode => session::node(shared, &req).await,
            Route::SessionList => session::list(shared, &req).await,
            Route::AgentSelf => agent_self(shared, &req),
            Route::AgentCheck => agent_check(shared, &req),
            Route::AgentService => agent_service(shared, &req),
            Route::HealthNode => health_node(shared, &req),
            Route::StatusLeader => status_leader(shared, &req),
            Route::Txn => txn::handle(shared, &req),
        }
    };
    match outcome {
        Outcome::Answer(a) => a.header("x-consul-default-acl-policy", policy).into(),
        other => other,
    }
}

/// ServeMux's 301 for unclean paths (`a//b`) and subtree roots (`/v1/kv`).
fn redirect(method: &Method, target: &str, raw_query: &str) -> Answer {
    let mut location = query::path_escape(target);
    if !raw_query.is_empty() {
        location = format!("{location}?{raw_query}");
    }
    let mut answer = Answer::empty(301).header("location", location.clone());
    if *method == Method::GET || *method == Method::HEAD {
        answer = answer.header("content-type", "text/html; charset=utf-8");
        answer.body = format!("<a href=\"{location}\">Moved Permanently</a>.\n\n").into_bytes();
    }
    answer
}

// ---- What every server endpoint shares ----

/// Query options of a read (Consul's `parse`): consistency mode, `wait`,
/// `index`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadOpts {
    pub min_index: u64,
    /// Nanoseconds, as given (≤ 0 means the default).
    pub wait_ns: Option<i64>,
    pub stale: bool,
    pub consistent: bool,
}

impl ReadOpts {
    fn consistency(&self) -> &'static str {
        if self.consistent {
            "consistent"
        } else if self.stale {
            "stale"
        } else {
            "leader"
        }
    }
}

/// Go's `strconv.ParseUint(s, 10, 64)`: digits only.
pub fn parse_u64(s: &str) -> Result<u64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "strconv.ParseUint: parsing {}: invalid syntax",
            duration::go_quote(s)
        ));
    }
    s.parse().map_err(|_| {
        format!(
            "strconv.ParseUint: parsing {}: value out of range",
            duration::go_quote(s)
        )
    })
}

pub fn parse_read_opts(q: &Query) -> Result<ReadOpts, Answer> {
    let mut opts = ReadOpts {
        stale: q.has("stale"),
        consistent: q.has("consistent"),
        ..ReadOpts::default()
    };
    let cached = q.has("cached");
    if let Some(max_stale) = q.get("max_stale").filter(|v| !v.is_empty()) {
        match duration::parse(max_stale) {
            Ok(d) if d > 0 => opts.stale = true,
            Ok(_) => {}
            Err(_) => {
                return Err(Answer::text(
                    400,
                    format!("Invalid max_stale value {}", duration::go_quote(max_stale)),
                ))
            }
        }
    }
    if opts.stale && opts.consistent {
        return Err(Answer::text(
            400,
            "Cannot specify ?stale with ?consistent, conflicting semantics.",
        ));
    }
    if cached && opts.consistent {
        return Err(Answer::text(
            400,
            "Cannot specify ?cached with ?consistent, conflicting semantics.",
        ));
    }
    if let Some(wait) = q.get("wait").filter(|v| !v.is_empty()) {
        let ns = duration::parse(wait).map_err(|_| Answer::text(400, "Invalid wait time"))?;
        opts.wait_ns = Some(ns);
    }
    if let Some(index) = q.get("index").filter(|v| !v.is_empty()) {
        opts.min_index = parse_u64(index).map_err(|_| Answer::text(400, "Invalid index"))?;
    }
    Ok(opts)
}

/// OSS Consul's `parseEntMeta`: namespaces are refused (1.10 knows nothing
/// of partitions and ignores `?partition=`). Consul 1.6 predates
/// namespaces and ignores them (a missing key read with `?ns=` is the 404
/// Part A2 records).
pub fn refuse_namespace(req: &Request) -> Result<(), Answer> {
    if req.legacy_1_6 {
        return Ok(());
    }
    if req
        .headers
        .get("x-consul-namespace")
        .is_some_and(|v| !v.is_empty())
    {
        return Err(Answer::text(
            400,
            "Invalid header: \"X-Consul-Namespace\" - Namespaces are a Consul Enterprise feature",
        ));
    }
    if req.query.get("ns").is_some_and(|ns| !ns.is_empty()) {
        return Err(Answer::text(
            400,
            "Invalid query parameter: \"ns\" - Namespaces are a Consul Enterprise feature",
        ));
    }
    Ok(())
}

/// What a server RPC checks before its own work: the datacenter, a leader
/// (stale reads do without), the token.
pub fn rpc_gate(shared: &Shared, req: &Request, stale_read: bool) -> Result<Authz, Answer> {
    if let Some(dc) = req.query.get("dc").filter(|dc| !dc.is_empty()) {
        if dc != shared.config.datacenter {
            return Err(Answer::text(500, "No path to datacenter"));
        }
    }
    if !stale_read && shared.faults.borrow().no_leader {
        return Err(Answer::text(500, NO_LEADER));
    }
    acl::resolve(shared.config.acl_tokens.as_ref(), req)
}

/// Runs `query` as a Consul blocking query: at once without `index`,
/// otherwise again on every state change until its index passes `index` or
/// the wait (plus up to 1/16 jitter) runs out. Faults that arrive meanwhile
/// end it. The index returned is never 0.
pub async fn blocking<T>(
    shared: &Shared,
    opts: &ReadOpts,
    mut query: impl FnMut(&State) -> Result<(u64, T), Answer>,
) -> Result<(u64, T), Outcome> {
    let deadline = (opts.min_index > 0).then(|| {
        let asked = opts
            .wait_ns
            .filter(|&ns| ns > 0)
            .map(|ns| Duration::from_nanos(ns as u64))
            .unwrap_or(shared.config.default_query_time);
        let wait = asked.min(shared.config.max_query_time);
        let jitter_cap = (wait / 16).as_nanos() as u64;
        let jitter = if jitter_cap == 0 {
            0
        } else {
            random_u64() % jitter_cap
        };
        Instant::now() + wait + Duration::from_nanos(jitter)
    });
    let interrupted = faults::interrupts(shared.faults.subscribe(), !opts.stale);
    tokio::pin!(interrupted);
    loop {
        let (result, mut changed) = {
            let state = shared.state();
            (query(&state), shared.changes.subscribe())
        };
        let (index, value) = result.map_err(Outcome::Answer)?;
        let index = index.max(1);
        let Some(deadline) = deadline else {
            return Ok((index, value));
        };
        if index > opts.min_index || Instant::now() >= deadline {
            return Ok((index, value));
        }
        tokio::select! {
            _ = changed.changed() => {}
            _ = tokio::time::sleep_until(deadline.into()) => {}
            outcome = &mut interrupted => return Err(outcome),
        }
    }
}

/// The headers Consul's `setMeta` adds to a read.
pub fn with_meta(answer: Answer, index: u64, opts: &ReadOpts, shared: &Shared) -> Answer {
    let known_leader = !shared.faults.borrow().no_leader;
    answer
        .header("x-consul-index", index.max(1).to_string())
        .header("x-consul-knownleader", known_leader.to_string())
        .header("x-consul-lastcontact", "0")
        .header("x-consul-effective-consistency", opts.consistency())
}

// ---- The agent's own endpoints (no server RPC: they work without a leader) ----

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct AgentSelf<'a> {
    config: AgentConfig<'a>,
    member: Member<'a>,
    meta: BTreeMap<&'static str, &'static str>,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct AgentConfig<'a> {
    datacenter: &'a str,
    primary_datacenter: &'a str,
    node_name: &'a str,
    #[serde(rename = "NodeID")]
    node_id: &'a str,
    revision: &'static str,
    server: bool,
    version: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Member<'a> {
    name: &'a str,
    addr: &'static str,
    port: u16,
    tags: BTreeMap<&'static str, String>,
    status: u8,
    protocol_min: u8,
    protocol_max: u8,
    protocol_cur: u8,
    delegate_min: u8,
    delegate_max: u8,
    delegate_cur: u8,
}

/// The version imitated unless [`crate::Builder::version`] says otherwise.
pub const VERSION: &str = "1.10.12";

fn agent_self(shared: &Shared, req: &Request) -> Outcome {
    let authz = match acl::resolve(shared.config.acl_tokens.as_ref(), req) {
        Ok(a) => a,
        Err(a) => return a.into(),
    };
    if !authz.agent_read() {
        return acl::denied().into();
    }
    let c = &shared.config;
    let tags = BTreeMap::from([
        ("build", format!("{}:emulator", c.version)),
        ("dc", c.datacenter.clone()),
        ("id", c.node_id.clone()),
        ("port", "8300".to_string()),
        ("role", "consul".to_string()),
        ("vsn", "2".to_string()),
    ]);
    let body = AgentSelf {
        config: AgentConfig {
            datacenter: &c.datacenter,
            primary_datacenter: &c.datacenter,
            node_name: &c.node_name,
            node_id: &c.node_id,
            revision: "emulator",
            server: true,
            version: &c.version,
        },
        member: Member {
            name: &c.node_name,
            addr: "127.0.0.1",
            port: 8301,
            tags,
            status: 1,
            protocol_min: 1,
            protocol_max: 5,
            protocol_cur: 2,
            delegate_min: 2,
            delegate_max: 5,
            delegate_cur: 4,
        },
        meta: BTreeMap::from([("consul-network-segment", "")]),
    };
    Answer::json(&body, req).into()
}

/// TTL checks on the one node, enough to fail a check a session is bound
/// to: register (`ID` or `Name`, `Status`, default critical as Consul's TTL
/// checks start), pass, fail, deregister. The agent's catalog sync is
/// immediate here.
fn agent_check(shared: &Shared, req: &Request) -> Outcome {
    let authz = match acl::resolve(shared.config.acl_tokens.as_ref(), req) {
        Ok(a) => a,
        Err(a) => return a.into(),
    };
    if !authz.session_write() {
        return acl::denied().into();
    }
    let path = req.path.trim_start_matches("/v1/agent/check/");
    let (verb, id) = path.split_once('/').unwrap_or((path, ""));
    match verb {
        "register" => {
            let body: serde_json::Value = match serde_json::from_slice(&req.body) {
                Ok(v) => v,
                Err(e) => return Answer::text(400, format!("Request decode failed: {e}")).into(),
            };
            let field = |name: &str| body[name].as_str().unwrap_or_default().to_string();
            let id = Some(field("ID"))
                .filter(|i| !i.is_empty())
                .unwrap_or_else(|| field("Name"));
            if id.is_empty() {
                return Answer::text(400, "Missing check name").into();
            }
            let passing = field("Status") == "passing";
            shared.mutate(|st, now| st.check_set(&id, passing, now));
        }
        "pass" | "fail" => {
            let known = shared.state().node_checks().iter().any(|(c, _)| c == id);
            if !known {
                return Answer::text(404, format!("Unknown check ID \"{id}\"")).into();
            }
            shared.mutate(|st, now| st.check_set(id, verb == "pass", now));
        }
        _ => {
            shared.mutate(|st, now| st.check_deregister(id, now));
        }
    }
    shared.record.count_write();
    Answer::empty(200).into()
}

/// `/v1/agent/service/register` (with at most one `Check`, passing if its
/// `Status` says so) and `/v1/agent/service/deregister/:id`: enough for
/// `--register-service`; the catalog itself is not served, the tests that
/// read it run on real agents.
fn agent_service(shared: &Shared, req: &Request) -> Outcome {
    let authz = match acl::resolve(shared.config.acl_tokens.as_ref(), req) {
        Ok(a) => a,
        Err(a) => return a.into(),
    };
    if !authz.session_write() {
        return acl::denied().into();
    }
    if let Some(id) = req.path.strip_prefix("/v1/agent/service/deregister/") {
        let id = id.to_string();
        if !shared.mutate(|st, now| st.service_deregister(&id, now)) {
            return Answer::text(404, format!("Unknown service ID \"{id}\"")).into();
        }
    } else {
        let body: serde_json::Value = match serde_json::from_slice(&req.body) {
            Ok(v) => v,
            Err(e) => return Answer::text(400, format!("Request decode failed: {e}")).into(),
        };
        let field =
            |v: &serde_json::Value, name: &str| v[name].as_str().unwrap_or_default().to_string();
        let id = Some(field(&body, "ID"))
            .filter(|i| !i.is_empty())
            .unwrap_or_else(|| field(&body, "Name"));
        if id.is_empty() {
            return Answer::text(400, "Missing service name").into();
        }
        let check = &body["Check"];
        let check_id = field(check, "CheckID");
        let passing = field(check, "Status") == "passing";
        shared.mutate(|st, now| {
            let check = (!check_id.is_empty()).then_some((check_id.as_str(), passing));
            st.service_set(&id, check, now)
        });
    }
    shared.record.count_write();
    Answer::empty(200).into()
}

/// `/v1/health/node/:node`: the node's checks with their status.
fn health_node(shared: &Shared, req: &Request) -> Outcome {
    let node = req.path.trim_start_matches("/v1/health/node/");
    let checks: Vec<serde_json::Value> = if node == shared.config.node_name {
        shared
            .state()
            .node_checks()
            .into_iter()
            .map(|(id, ok)| {
                serde_json::json!({
                    "Node": node,
                    "CheckID": id,
                    "Name": id,
                    "Status": if ok { "passing" } else { "critical" },
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    Answer::json(&checks, req).into()
}

fn status_leader(shared: &Shared, req: &Request) -> Outcome {
    let leader = if shared.faults.borrow().no_leader {
        ""
    } else {
        "127.0.0.1:8300"
    };
    Answer::json(&leader, req).into()
}
