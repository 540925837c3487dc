//! An in-process emulator of the Consul 1.10 HTTP API subset lockrun uses:
//! KV (locks, CAS, blocking reads), KV transactions (`/v1/txn`), sessions
//! (TTL, lock-delay, behaviors), `agent/self`, `status/leader`, plus ACLs and
//! fault injection. It imitates 1.10 unless told to imitate 1.6
//! ([`Builder::version`]).
//!
//! It copies what a real agent does, quirks included (see
//! `shared/CONSUL_API.md` and the recorded transcript in `testdata/`), so that
//! a test passing here also passes against Consul. It runs a hyper server on
//! `127.0.0.1:0` on its own runtime in a background thread: usable from plain
//! `#[test]`s and from async code alike. Dropping the [`Emulator`] stops it.
//!
//! ```no_run
//! let consul = consul_emulator::Emulator::start();
//! std::env::set_var("CONSUL_HTTP_ADDR", consul.http_addr());
//! ```
//!
//! Where we knowingly differ from a real agent:
//! - one server that is also the only node, with one check (`serfHealth`)
//!   that never fails: a session ends by destroy, TTL or
//!   [`Emulator::invalidate_session`], never by gossip;
//! - every consistency mode reads the same (there are no followers);
//! - tombstones are never reaped (tests are shorter than Consul's GC);
//! - two ACL policies only ([`AclPolicy`]);
//! - `/v1/txn` takes KV ops only, with the verbs `set`, `cas`, `lock`,
//!   `unlock`, `get`, `delete` and `delete-cas`; anything else is a 400
//!   saying so;
//! - type errors in a session-create body are worded after Go's decoder but
//!   not guaranteed identical; syntax errors are.

mod acl;
mod duration;
mod faults;
mod gojson;
mod http;
mod kv;
mod query;
mod record;
mod session;
mod state;
mod txn;

pub use acl::AclPolicy;
pub use record::{Endpoint, LoggedRequest};

pub use faults::BlipKind;
use faults::Faults;
use state::State;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch, Notify};

/// Settings a real agent would take from its configuration.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub node_name: String,
    pub node_id: String,
    pub datacenter: String,
    pub session_ttl_min: Duration,
    /// `None`: ACLs disabled. `Some`: default deny with these tokens.
    pub acl_tokens: Option<HashMap<String, AclPolicy>>,
    pub default_query_time: Duration,
    pub max_query_time: Duration,
    /// Imitate Consul before 1.7: sessions know only `Checks`.
    pub pre_1_7: bool,
    /// What `agent/self` reports as `Config.Version`.
    pub version: String,
    /// Answer as a Consul 1.6 dev agent does where it differs from 1.10.
    pub legacy_1_6: bool,
}

/// Everything the server tasks and the [`Emulator`] handle share.
pub(crate) struct Shared {
    pub config: Config,
    state: Mutex<State>,
    /// Bumped after every state change; blocking queries wait on it.
    pub changes: watch::Sender<u64>,
    pub faults: watch::Sender<Faults>,
    /// Wakes the session reaper when timers may have moved.
    pub reaper: Notify,
    /// Bumped to drop every open connection (restart).
    pub connections: watch::Sender<u64>,
    pub record: record::Recorder,
    /// One-off faults still waiting for their request.
    pub blips: Mutex<Vec<faults::Blip>>,
}

impl Shared {
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs a state transition and wakes everything that watches state.
    pub fn mutate<R>(&self, f: impl FnOnce(&mut State, Instant) -> R) -> R {
        let r = f(&mut self.state(), Instant::now());
        self.changes.send_modify(|v| *v += 1);
        self.reaper.notify_one();
        r
    }
}

/// Builds an [`Emulator`] with non-default agent settings.
#[derive(Clone, Debug)]
pub struct Builder {
    config: Config,
    /// Where to listen; `127.0.0.1:0` unless [`Builder::bind`] says.
    bind: Option<SocketAddr>,
}

impl Default for Builder {
    fn default() -> Builder {
        Builder {
            config: Config {
                node_name: "emulator".to_string(),
                node_id: random_uuid(),
                datacenter: "dc1".to_string(),
                session_ttl_min: Duration::from_secs(10),
                acl_tokens: None,
                default_query_time: Duration::from_secs(300),
                max_query_time: Duration::from_secs(600),
                pre_1_7: false,
                version: http::VERSION.to_string(),
                legacy_1_6: false,
            },
            bind: None,
        }
    }
}

impl Builder {
    /// Listens on `addr`: an agent that comes up where a client was
    /// already knocking (a unit started before its agent, at boot).
    pub fn bind(mut self, addr: SocketAddr) -> Builder {
        self.bind = Some(addr);
        self
    }

    /// The server's `session_ttl_min` (Consul's default: 10 s). Fault tests
    /// use 1 s to see expiries quickly.
    pub fn session_ttl_min(mut self, min: Duration) -> Builder {
        self.config.session_ttl_min = min;
        self
    }

    pub fn node_name(mut self, name: &str) -> Builder {
        self.config.node_name = name.to_string();
        self
    }

    pub fn datacenter(mut self, dc: &str) -> Builder {
        self.config.datacenter = dc.to_string();
        self
    }

    /// Turns ACLs on with `default_policy = "deny"` (no tokens yet: every
    /// request is anonymous and denied).
    pub fn acl_default_deny(mut self) -> Builder {
        self.config.acl_tokens.get_or_insert_with(HashMap::new);
        self
    }

    /// Turns ACLs on (default deny) and adds a token with `policy`.
    pub fn acl_token(mut self, secret: &str, policy: AclPolicy) -> Builder {
        self.config
            .acl_tokens
            .get_or_insert_with(HashMap::new)
            .insert(secret.to_string(), policy);
        self
    }

    /// [`Builder::acl_token`] for several tokens at once.
    pub fn acl_tokens<'a>(
        mut self,
        tokens: impl IntoIterator<Item = (&'a str, AclPolicy)>,
    ) -> Builder {
        for (secret, policy) in tokens {
            self = self.acl_token(secret, policy);
        }
        self
    }

    /// The blocking wait used when a query sends none (Consul: 5 min).
    pub fn default_query_time(mut self, d: Duration) -> Builder {
        self.config.default_query_time = d;
        self
    }

    /// The cap on a blocking query's wait (Consul: 10 min).
    pub fn max_query_time(mut self, d: Duration) -> Builder {
        self.config.max_query_time = d;
        self
    }

    /// The Consul version to imitate: `1.10.x` (the default, 1.10.12) or
    /// `1.6.x`. A 1.6 agent (observed on a 1.6.2 dev agent, CONSUL_API.md
    /// Part A2) pretty-prints every JSON answer (so a KV write answers
    /// `true\n`), words an acquire by an unknown session without the
    /// `raft apply failed: ` prefix and a failed session create without
    /// `apply failed: `, knows no `NodeChecks`/`ServiceChecks` (a session
    /// shows its `Checks`: `["serfHealth"]` by default, `[]` for none), and
    /// ignores `?ns=`.
    /// Panics on any other version: we imitate only what was observed.
    pub fn version(mut self, version: &str) -> Builder {
        let legacy = if version.starts_with("1.6.") {
            true
        } else if version.starts_with("1.10.") {
            false
        } else {
            panic!("emulator: cannot imitate Consul {version}; 1.6.x and 1.10.x only")
        };
        self.config.version = version.to_string();
        self.config.legacy_1_6 = legacy;
        self.config.pre_1_7 = legacy;
        self
    }

    /// Imitates a Consul server before 1.7 (1.6.2 observed, CONSUL_API Part
    /// A2): session create ignores `NodeChecks` and `ServiceChecks` and
    /// knows only `Checks` (default `[serfHealth]`, `[]` for none); session
    /// reads have no `NodeChecks`/`ServiceChecks` fields and show the
    /// session's `Checks` (`[]` when it has none).
    pub fn pre_1_7(mut self) -> Builder {
        self.config.pre_1_7 = true;
        self
    }

    /// Binds `127.0.0.1:0` and starts serving. Panics if the port cannot be
    /// bound or the runtime cannot start, which only a broken machine does.
    pub fn start(self) -> Emulator {
        let at = self
            .bind
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        let listener =
            std::net::TcpListener::bind(at).unwrap_or_else(|e| panic!("emulator: bind {at}: {e}"));
        listener
            .set_nonblocking(true)
            .expect("emulator: make the listener non-blocking");
        let addr = listener.local_addr().expect("emulator: listener address");
        let node_name = self.config.node_name.clone();
        let shared = Arc::new(Shared {
            config: self.config,
            state: Mutex::new(State::new(&node_name)),
            changes: watch::Sender::new(0),
            faults: watch::Sender::new(Faults::default()),
            reaper: Notify::new(),
            connections: watch::Sender::new(0),
            record: record::Recorder::new(Instant::now()),
            blips: Mutex::new(Vec::new()),
        });
        let (stop, stopped) = oneshot::channel();
        let server = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("consul-emulator-{}", addr.port()))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("consul-emulator-worker")
                    .enable_all()
                    .build()
                    .expect("emulator: start its tokio runtime");
                runtime.block_on(http::serve(server, listener, stopped));
                // Hung requests (partitions) never finish on their own.
                runtime.shutdown_timeout(Duration::from_millis(500));
            })
            .expect("emulator: spawn its thread");
        Emulator {
            shared,
            addr,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

/// A running emulated agent. Dropping it shuts the server down.
pub struct Emulator {
    shared: Arc<Shared>,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Emulator {
    /// An agent with Consul's defaults (`session_ttl_min` 10 s, ACLs off,
    /// node `emulator`, datacenter `dc1`).
    pub fn start() -> Emulator {
        Builder::default().start()
    }

    pub fn builder() -> Builder {
        Builder::default()
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `127.0.0.1:PORT`, the form `CONSUL_HTTP_ADDR` takes.
    pub fn http_addr(&self) -> String {
        self.addr.to_string()
    }

    pub fn node_name(&self) -> &str {
        &self.shared.config.node_name
    }

    pub fn datacenter(&self) -> &str {
        &self.shared.config.datacenter
    }

    pub fn session_ttl_min(&self) -> Duration {
        self.shared.config.session_ttl_min
    }

    /// Every request, new or already waiting, hangs with no answer and is
    /// not applied, while server-side time runs on (TTL sessions expire).
    /// Lifting it lets new requests through; the ones stalled during it stay
    /// unanswered and are never applied late.
    pub fn set_partitioned(&self, on: bool) {
        self.shared.faults.send_modify(|f| f.partitioned = on);
    }

    /// Server requests (KV, sessions) answer 500 `No cluster leader`, also
    /// the blocking queries already waiting; `?stale` reads and the agent's
    /// own endpoints still work, as on a real agent. TTL timers stop; when a
    /// leader is back every TTL session gets a full 2×TTL again, as after a
    /// real election.
    pub fn set_no_leader(&self, on: bool) {
        let mut was = false;
        self.shared.faults.send_modify(|f| {
            was = f.no_leader;
            f.no_leader = on;
        });
        if was && !on {
            self.shared.mutate(|st, now| st.rearm_timers(now));
        } else {
            self.shared.reaper.notify_one();
        }
    }

    /// Every request, new or waiting, has its connection closed with no
    /// answer (and is not applied).
    pub fn set_drop_connections(&self, on: bool) {
        self.shared.faults.send_modify(|f| f.drop_connections = on);
    }

    /// Hits the `nth` request (from 1) with method `method` whose target
    /// (path and query, as sent) contains `needle`, once: its connection is
    /// reset, or it answers 500 `No cluster leader`; either way it is not
    /// applied. Returns at once; [`Emulator::blips_pending`] tells whether
    /// the request came.
    pub fn blip(&self, method: &'static str, needle: &str, nth: u32, kind: BlipKind) {
        assert!(nth >= 1, "requests count from 1");
        self.shared
            .blips
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(faults::Blip {
                method,
                needle: needle.to_string(),
                nth,
                kind,
            });
    }

    /// How many blips have not met their request yet.
    pub fn blips_pending(&self) -> usize {
        self.shared
            .blips
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// A delay before each request is handled.
    pub fn set_latency(&self, d: Duration) {
        self.shared.faults.send_modify(|f| f.latency = d);
    }

    /// Like restarting a dev agent: all state is lost (KV, sessions,
    /// lock-delays), the index starts low again, every open connection
    /// (including waiting blocking queries) is dropped. Same port. Faults,
    /// counters and the request log stay.
    pub fn restart(&self) {
        let node = self.shared.config.node_name.clone();
        self.shared.mutate(|st, _| *st = State::new(&node));
        self.shared.connections.send_modify(|g| *g += 1);
    }

    /// Invalidates a session as if its TTL ran out or its check failed: held
    /// keys are released (or deleted) and get the lock-delay.
    pub fn invalidate_session(&self, id: &str) {
        // An ID that cannot name a session invalidates nothing.
        let _ = self.shared.mutate(|st, now| st.session_destroy(id, now));
    }

    /// Turns a node check critical, as a crashed, frozen or cut-off agent's
    /// `serfHealth` does: every session bound to it is invalidated at once
    /// (keys released or deleted, lock-delay armed), as Consul does. The
    /// check passes again right after, so new sessions can bind to it.
    pub fn fail_check(&self, check: &str) {
        self.shared.mutate(|st, now| st.fail_check(check, now));
    }

    /// The IDs of the live sessions (readable during a partition).
    pub fn session_ids(&self) -> Vec<String> {
        self.shared.state().session_ids()
    }

    /// The raft index of the last write.
    pub fn raft_index(&self) -> u64 {
        self.shared.state().raft_index()
    }

    pub fn request_log(&self) -> Vec<LoggedRequest> {
        self.shared.record.log()
    }

    /// Blocks until a logged request satisfies `pred` (it may already have),
    /// or `timeout` passes. For tests that must know a request reached the
    /// server, e.g. that a blocking query is waiting.
    pub fn wait_for_request(
        &self,
        timeout: Duration,
        pred: impl Fn(&LoggedRequest) -> bool,
    ) -> Option<LoggedRequest> {
        self.shared.record.wait_for(timeout, pred)
    }

    /// Requests received for `endpoint` (or all, for [`Endpoint::Total`])
    /// since the start or the last [`Emulator::reset_counters`].
    pub fn request_count(&self, endpoint: Endpoint) -> u64 {
        self.shared.record.count(endpoint)
    }

    /// Zeroes the request counters and [`Emulator::write_count`]; the log
    /// stays.
    pub fn reset_counters(&self) {
        self.shared.record.reset_counters();
    }

    /// State-changing requests that reached the state machine (KV PUT and
    /// DELETE, session create, destroy and renew), whatever their answer.
    pub fn write_count(&self) -> u64 {
        self.shared.record.writes()
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Random bits without a dependency: std's `RandomState` is seeded from the
/// OS, and hashing a counter with it gives independent values.
pub(crate) fn random_u64() -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

/// A session ID as Consul's `uuid.GenerateUUID` makes them: 16 random bytes
/// in 8-4-4-4-12 hex (no version bits).
pub(crate) fn random_uuid() -> String {
    let hex = format!("{:016x}{:016x}", random_u64(), random_u64());
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}
