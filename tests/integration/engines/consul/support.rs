//! The Consul every integration test talks to, and a small synchronous
//! client for it.
//!
//! By default each test gets a fresh emulator. With
//! `LOCKRUN_TEST_CONSUL_ADDR=host:port` the tests run against that (real)
//! agent instead, each under its own key prefix so they can share it. The
//! choice is made at run time: `versions.rs` re-runs this binary so. Tests
//! that need the emulator itself take [`TestConsul::emulator_only`] and live
//! in modules named `emulator_faults`, which those re-runs skip.
//!
//! The client speaks HTTP/1.1 over a plain `TcpStream`, one connection per
//! request: nothing to share between tests, no runtime, and a connection
//! closed without an answer shows up as exactly that.

// A shared harness: not every test module uses every helper.
#![allow(dead_code)]

use base64::Engine;
use consul_emulator::Emulator;
use serde_json::Value;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Set to `host:port` of a Consul 1.6 or 1.10 agent to run the suite
/// against it.
pub const REAL_AGENT_ENV: &str = "LOCKRUN_TEST_CONSUL_ADDR";
/// Set to `1.6.2` to have the emulator imitate Consul 1.6 where its answers
/// differ, so both branches of a version-dependent assertion run here.
pub const EMULATOR_VERSION_ENV: &str = "LOCKRUN_TEST_EMULATOR_VERSION";

/// An emulator builder imitating [`EMULATOR_VERSION_ENV`]'s version.
fn builder() -> consul_emulator::Builder {
    match std::env::var(EMULATOR_VERSION_ENV) {
        Ok(v) if !v.trim().is_empty() => Emulator::builder().version(v.trim()),
        _ => Emulator::builder(),
    }
}

/// The Consul under test. Dropping it stops the emulator, if there is one.
pub struct TestConsul {
    emulator: Option<Emulator>,
    addr: String,
    ttl_min: Duration,
}

fn real_agent() -> Option<String> {
    let addr = std::env::var(REAL_AGENT_ENV).ok()?;
    let addr = addr.trim();
    let addr = addr.strip_prefix("http://").unwrap_or(addr);
    (!addr.is_empty()).then(|| addr.trim_end_matches('/').to_string())
}

impl TestConsul {
    /// The real agent if configured, else an emulator with Consul's default
    /// 10 s minimum session TTL.
    pub fn start() -> TestConsul {
        Self::with(|b| b)
    }

    /// Like [`TestConsul::start`], but an emulator accepts TTLs down to 1 s,
    /// for tests that wait for expiries. (A real agent keeps its own
    /// minimum: read [`TestConsul::ttl_min`].)
    pub fn start_fast() -> TestConsul {
        Self::with(fast)
    }

    /// An emulator built by `configure`, or the real agent.
    pub fn with(
        configure: impl FnOnce(consul_emulator::Builder) -> consul_emulator::Builder,
    ) -> TestConsul {
        if let Some(addr) = real_agent() {
            return TestConsul {
                emulator: None,
                addr,
                ttl_min: Duration::from_secs(10),
            };
        }
        let emulator = configure(builder()).start();
        TestConsul {
            addr: emulator.http_addr(),
            ttl_min: emulator.session_ttl_min(),
            emulator: Some(emulator),
        }
    }

    /// Always an emulator, whatever the environment says: for tests that
    /// need a fresh, private agent (the transcript replay, fault tests).
    pub fn emulator_only(
        configure: impl FnOnce(consul_emulator::Builder) -> consul_emulator::Builder,
    ) -> TestConsul {
        let emulator = configure(builder()).start();
        TestConsul {
            addr: emulator.http_addr(),
            ttl_min: emulator.session_ttl_min(),
            emulator: Some(emulator),
        }
    }

    /// `None` on a real agent.
    pub fn emulator(&self) -> Option<&Emulator> {
        self.emulator.as_ref()
    }

    /// `host:port`, the `CONSUL_HTTP_ADDR` form.
    pub fn http_addr(&self) -> String {
        self.addr.clone()
    }

    /// The server's minimum session TTL.
    pub fn ttl_min(&self) -> Duration {
        self.ttl_min
    }

    /// A key prefix no other test (or run) uses: `lockrun-test/<name>-<hex>`.
    pub fn prefix(&self, test_name: &str) -> String {
        format!("lockrun-test/{test_name}-{:08x}", random_u64() as u32)
    }

    pub fn api(&self) -> Api {
        Api::at(&self.addr)
    }

    /// The emulator's request log, one request a line, for failure
    /// messages; `""` on a real agent.
    pub fn request_log_dump(&self) -> String {
        let Some(emu) = &self.emulator else {
            return String::new();
        };
        let mut out = String::new();
        for r in emu.request_log() {
            let status = match (r.status, r.dropped) {
                (Some(s), _) => s.to_string(),
                (None, true) => "dropped".to_string(),
                (None, false) => "no answer".to_string(),
            };
            let took = r
                .elapsed
                .map(|d| format!(" ({} ms)", d.as_millis()))
                .unwrap_or_default();
            out.push_str(&format!(
                "  +{:.3}s {} {} -> {status}{took}\n",
                r.at.as_secs_f64(),
                r.method,
                r.path
            ));
        }
        out
    }
}

/// The emulator of [`TestConsul::start_fast`]: TTLs down to 1 s. A test
/// that needs the emulator itself takes `TestConsul::emulator_only(fast)`
/// and lives in a module named `emulator_faults`, which the re-runs against
/// real agents skip.
pub fn fast(b: consul_emulator::Builder) -> consul_emulator::Builder {
    b.session_ttl_min(Duration::from_secs(1))
}

pub fn random_u64() -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

/// A response.
#[derive(Clone, Debug)]
pub struct Resp {
    pub status: u16,
    /// In the order received, names as sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    /// Header lookup, case-insensitive.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `X-Consul-Index`.
    pub fn index(&self) -> Option<u64> {
        self.header("X-Consul-Index").and_then(|v| v.parse().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body without trailing whitespace: Consul 1.6 ends `true` and
    /// JSON with a newline, 1.10 does not.
    pub fn trimmed(&self) -> String {
        self.text().trim_end().to_string()
    }

    /// The body as JSON; panics with the body when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): status {} body {:?}",
                self.status,
                self.text()
            )
        })
    }
}

/// A KV entry with its value decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvEntry {
    pub key: String,
    pub value: Vec<u8>,
    pub flags: u64,
    pub session: Option<String>,
    pub lock_index: u64,
    pub create_index: u64,
    pub modify_index: u64,
}

impl KvEntry {
    pub fn from_json(v: &Value) -> KvEntry {
        let value = match &v["Value"] {
            Value::String(b64) => base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap_or_else(|e| panic!("bad base64 in {v}: {e}")),
            _ => Vec::new(),
        };
        let num = |field: &str| {
            v[field]
                .as_u64()
                .unwrap_or_else(|| panic!("{field} is not a u64 in {v}"))
        };
        KvEntry {
            key: v["Key"].as_str().unwrap_or_default().to_string(),
            value,
            flags: num("Flags"),
            session: v["Session"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            lock_index: num("LockIndex"),
            create_index: num("CreateIndex"),
            modify_index: num("ModifyIndex"),
        }
    }
}

/// Percent-encodes each segment of a key, so any key reaches Consul intact
/// (`a?b c` → `a%3Fb%20c`).
pub fn encode_key(key: &str) -> String {
    key.split('/')
        .map(|seg| {
            let mut out = String::new();
            for &b in seg.as_bytes() {
                match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                        out.push(char::from(b))
                    }
                    b => out.push_str(&format!("%{b:02X}")),
                }
            }
            out
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// A small synchronous Consul client. Paths are sent as given (`/v1/...`
/// with query); the conveniences encode keys themselves.
#[derive(Clone, Debug)]
pub struct Api {
    addr: String,
    token: Option<String>,
    timeout: Duration,
}

impl Api {
    /// A client of the agent at `host:port`, waiting 60 s for an answer.
    pub fn at(addr: &str) -> Api {
        Api {
            addr: addr.to_string(),
            token: None,
            timeout: Duration::from_secs(60),
        }
    }

    /// Sends `X-Consul-Token: token` from now on.
    pub fn with_token(&self, token: &str) -> Api {
        Api {
            token: Some(token.to_string()),
            ..self.clone()
        }
    }

    /// How long to wait for an answer (default 60 s).
    pub fn with_timeout(&self, timeout: Duration) -> Api {
        Api {
            timeout,
            ..self.clone()
        }
    }

    /// One request, any outcome: an `Err` is a connection that failed,
    /// closed without an answer, or timed out.
    pub fn try_request(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        headers: &[(&str, &str)],
    ) -> io::Result<Resp> {
        let mut stream = TcpStream::connect(&self.addr)?;
        stream.set_read_timeout(Some(self.timeout))?;
        stream.set_write_timeout(Some(self.timeout))?;
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.addr
        );
        if let Some(token) = &self.token {
            head.push_str(&format!("X-Consul-Token: {token}\r\n"));
        }
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some(body) = body {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        let mut request = head.into_bytes();
        request.extend_from_slice(body.unwrap_or_default());
        stream.write_all(&request)?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw)?;
        parse_response(&raw)
    }

    /// One request; panics when no answer comes.
    pub fn request(&self, method: &str, path: &str, body: Option<&[u8]>) -> Resp {
        self.try_request(method, path, body, &[])
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    pub fn get(&self, path: &str) -> Resp {
        self.request("GET", path, None)
    }

    pub fn put(&self, path: &str, body: impl AsRef<[u8]>) -> Resp {
        self.request("PUT", path, Some(body.as_ref()))
    }

    pub fn delete(&self, path: &str) -> Resp {
        self.request("DELETE", path, None)
    }

    fn expect(resp: Resp, what: &str) -> Resp {
        assert_eq!(resp.status, 200, "{what}: {}", resp.text());
        resp
    }

    pub fn kv_get(&self, key: &str) -> Option<KvEntry> {
        let resp = self.get(&format!("/v1/kv/{}", encode_key(key)));
        if resp.status == 404 {
            return None;
        }
        let resp = Self::expect(resp, key);
        Some(KvEntry::from_json(&resp.json()[0]))
    }

    /// A plain PUT; Consul answers `true`.
    pub fn kv_put(&self, key: &str, value: impl AsRef<[u8]>) -> bool {
        let resp = self.put(&format!("/v1/kv/{}", encode_key(key)), value);
        Self::expect(resp, key).json() == Value::Bool(true)
    }

    /// `PUT ?acquire=session`; the `true`/`false` answer.
    pub fn kv_acquire(&self, key: &str, session: &str, value: impl AsRef<[u8]>) -> bool {
        let resp = self.put(
            &format!("/v1/kv/{}?acquire={session}", encode_key(key)),
            value,
        );
        Self::expect(resp, key).json() == Value::Bool(true)
    }

    /// `PUT ?release=session`; the `true`/`false` answer.
    pub fn kv_release(&self, key: &str, session: &str, value: impl AsRef<[u8]>) -> bool {
        let resp = self.put(
            &format!("/v1/kv/{}?release={session}", encode_key(key)),
            value,
        );
        Self::expect(resp, key).json() == Value::Bool(true)
    }

    pub fn kv_delete(&self, key: &str) {
        Self::expect(self.delete(&format!("/v1/kv/{}", encode_key(key))), key);
    }

    /// Everything under a prefix (empty when nothing is there).
    pub fn kv_list(&self, prefix: &str) -> Vec<KvEntry> {
        let resp = self.get(&format!("/v1/kv/{}?recurse", encode_key(prefix)));
        if resp.status == 404 {
            return Vec::new();
        }
        let list = Self::expect(resp, prefix).json();
        list.as_array()
            .map(|items| items.iter().map(KvEntry::from_json).collect())
            .unwrap_or_default()
    }

    pub fn kv_delete_tree(&self, prefix: &str) {
        Self::expect(
            self.delete(&format!("/v1/kv/{}?recurse", encode_key(prefix))),
            prefix,
        );
    }

    /// Creates a session from a JSON body; returns its ID.
    pub fn session_create(&self, json: &str) -> String {
        let resp = Self::expect(self.put("/v1/session/create", json), "session create");
        resp.json()["ID"]
            .as_str()
            .unwrap_or_else(|| panic!("no ID in {}", resp.text()))
            .to_string()
    }

    /// The session object, or `None` when Consul has no such session.
    pub fn session_info(&self, id: &str) -> Option<Value> {
        let resp = Self::expect(self.get(&format!("/v1/session/info/{id}")), "session info");
        resp.json().as_array().and_then(|a| a.first().cloned())
    }

    pub fn session_renew(&self, id: &str) -> Resp {
        self.put(&format!("/v1/session/renew/{id}"), "")
    }

    pub fn session_destroy(&self, id: &str) {
        Self::expect(
            self.put(&format!("/v1/session/destroy/{id}"), ""),
            "session destroy",
        );
    }

    pub fn session_list(&self) -> Vec<Value> {
        let resp = Self::expect(self.get("/v1/session/list"), "session list");
        resp.json().as_array().cloned().unwrap_or_default()
    }

    /// The agent's node name (`/v1/agent/self`).
    pub fn node_name(&self) -> String {
        let resp = Self::expect(self.get("/v1/agent/self"), "agent self");
        resp.json()["Config"]["NodeName"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The agent's `Config.Version`, e.g. `1.6.2`.
    pub fn version(&self) -> String {
        let resp = Self::expect(self.get("/v1/agent/self"), "agent self");
        resp.json()["Config"]["Version"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Whether the agent predates 1.7. Where Consul's answers differ by
    /// version (CONSUL_API.md Part A2) a test asserts the agent's own.
    pub fn is_pre_1_7(&self) -> bool {
        self.version_number() < (1, 7)
    }

    /// The agent's (major, minor) version, for facts that changed.
    pub fn version_number(&self) -> (u32, u32) {
        let version = self.version();
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        assert!(major > 0, "agent/self reports no version: {version:?}");
        (major, minor)
    }
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

fn parse_response(raw: &[u8]) -> io::Result<Resp> {
    if raw.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed without a response",
        ));
    }
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("incomplete response head"))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let rest = &raw[split + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(format!("bad status line {status_line:?}")))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let body = if header("Transfer-Encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        dechunk(rest)?
    } else if let Some(len) = header("Content-Length").and_then(|v| v.parse::<usize>().ok()) {
        if rest.len() < len {
            return Err(bad("response body cut short"));
        }
        rest[..len].to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Resp {
        status,
        headers,
        body,
    })
}

fn dechunk(mut rest: &[u8]) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| bad("bad chunk"))?;
        let size_text = String::from_utf8_lossy(&rest[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| bad("bad chunk size"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(body);
        }
        if rest.len() < size + 2 {
            return Err(bad("chunk cut short"));
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}
