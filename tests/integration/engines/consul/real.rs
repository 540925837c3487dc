//! Real Consul agents for the tests: the static binaries the project keeps
//! beside the repository (`../shared/tools/consul/consul-VERSION.xz`, or the
//! folder `LOCKRUN_TEST_CONSUL_BINARIES` names), unpacked once under Cargo's
//! temporary target folder, started on loopback ports of their own and
//! stopped when dropped.
//!
//! Like the test etcd, each agent runs under a small `sh` that waits on a
//! pipe we hold: when this process exits, however it exits, the pipe closes
//! and the shell kills the agent and removes its data directory.

#![allow(dead_code)] // Not every test module uses every helper.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::engines::consul::support::Api;
use crate::procs::{free_port, PATIENCE};

/// The versions the suite runs against: the oldest HTTP API lockrun
/// supports, and a current one.
pub const VERSIONS: &[&str] = &["1.6.2", "1.15.10"];

/// A folder holding `consul-VERSION.xz`, instead of `../shared/tools/consul`.
pub const BINARIES_ENV: &str = "LOCKRUN_TEST_CONSUL_BINARIES";

/// Where the compressed binaries are, if anywhere: a user's clone has no
/// `../shared`, and then only the emulator runs.
pub fn binaries_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os(BINARIES_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tools/consul"),
    };
    dir.join(format!("consul-{}.xz", VERSIONS[0]))
        .is_file()
        .then_some(dir)
}

/// The unpacked `consul` of `version`, unpacked on first use. Panics with
/// what to do when the binaries are not there: a test that asks for a real
/// agent never passes without one.
pub fn binary(version: &str) -> PathBuf {
    static UNPACKING: Mutex<()> = Mutex::new(());
    let dir = binaries_dir().unwrap_or_else(|| {
        panic!("no real Consul binaries: put consul-{version}.xz in ../shared/tools/consul or name their folder in {BINARIES_ENV}")
    });
    let packed = dir.join(format!("consul-{version}.xz"));
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("consul-{version}"));
    let _one_at_a_time = UNPACKING.lock().unwrap_or_else(|e| e.into_inner());
    if !answers_version(&target, version) {
        // Into a file of this process's own, then renamed: another test
        // binary may be unpacking the same version at the same time.
        let partial = target.with_extension(format!("partial-{}", std::process::id()));
        let out = std::fs::File::create(&partial)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", partial.display()));
        let status = Command::new("xz")
            .arg("-dc")
            .arg(&packed)
            .stdout(out)
            .status()
            .unwrap_or_else(|e| panic!("cannot run xz ({e}): apt-get install xz-utils"));
        assert!(status.success(), "xz -dc {}: {status}", packed.display());
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&partial, &target).unwrap();
        assert!(
            answers_version(&target, version),
            "{} does not say it is Consul v{version}",
            target.display()
        );
    }
    target
}

fn answers_version(binary: &Path, version: &str) -> bool {
    Command::new(binary)
        .arg("version")
        .output()
        .is_ok_and(|out| {
            String::from_utf8_lossy(&out.stdout).contains(&format!("Consul v{version}"))
        })
}

/// What kind of agent to start.
#[derive(Clone, Debug)]
pub enum Role {
    /// `-dev`: a one-node server with its own leader in about a second.
    Dev,
    /// One of `expect` servers (`-bootstrap-expect`).
    Server { expect: usize },
    /// A client agent, no raft.
    Client,
}

/// An agent to start: its version, role, loopback address, the agents to
/// join (their serf LAN addresses) and extra configuration.
#[derive(Clone, Debug)]
pub struct Spec {
    pub version: String,
    pub role: Role,
    pub bind: String,
    pub join: Vec<String>,
    /// HCL fragments, each given as `-hcl` (ACLs, say).
    pub hcl: Vec<String>,
    /// The token our own requests carry (readiness checks, [`Agent::api`]):
    /// with ACLs on and a default deny, the anonymous token sees nothing.
    pub token: Option<String>,
}

impl Spec {
    pub fn dev(version: &str) -> Spec {
        Spec {
            version: version.to_string(),
            role: Role::Dev,
            bind: "127.0.0.1".to_string(),
            join: Vec::new(),
            hcl: Vec::new(),
            token: None,
        }
    }

    pub fn token(mut self, token: &str) -> Spec {
        self.token = Some(token.to_string());
        self
    }

    pub fn hcl(mut self, hcl: &str) -> Spec {
        self.hcl.push(hcl.to_string());
        self
    }
}

/// A running agent, killed (and its data removed) when dropped.
pub struct Agent {
    pub version: String,
    pub node: String,
    http_addr: String,
    dns_addr: String,
    serf_lan: String,
    pid: u32,
    token: Option<String>,
    _keeper: ChildStdin,
    log: Arc<Mutex<Vec<String>>>,
}

impl Agent {
    /// Starts an agent as `spec` says, on new ports, a few times over if a
    /// port was taken between our probe and the agent's bind. It is
    /// started, not ready: see [`Agent::wait_ready`].
    pub fn start(spec: &Spec) -> Agent {
        let mut last = String::new();
        for _ in 0..3 {
            match Agent::launch(spec) {
                Ok(agent) => return agent,
                Err(e) => last = e,
            }
        }
        panic!("cannot start Consul {}: {last}", spec.version);
    }

    /// A dev agent of `version` on 127.0.0.1, ready for sessions.
    pub fn dev(version: &str) -> Agent {
        Agent::dev_with(Spec::dev(version))
    }

    /// A dev agent as `spec` says, ready for sessions.
    pub fn dev_with(spec: Spec) -> Agent {
        let mut last = String::new();
        for _ in 0..3 {
            let agent = Agent::start(&spec);
            match agent.wait_ready(None) {
                Ok(()) => return agent,
                Err(e) => last = e,
            }
        }
        panic!("Consul {} never became ready: {last}", spec.version);
    }

    fn launch(spec: &Spec) -> Result<Agent, String> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let binary = binary(&spec.version);
        let node = format!(
            "lockrun-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let ports: Vec<u16> = (0..7).map(|_| free_port()).collect();
        let dir = tempfile::Builder::new()
            .prefix("lockrun-consul-")
            .tempdir()
            .map_err(|e| format!("no data directory: {e}"))?
            .keep();
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            // SIGKILL, and SIGCONT for an agent a test left stopped: an
            // agent's graceful leave would only slow the suite down.
            r#"dir=$1; shift; "$@" 2>&1 & c=$!; echo "agent-pid $c"; read _; kill -9 $c; kill -CONT $c 2>/dev/null; wait $c; rm -rf "$dir""#,
            "sh",
        ])
        .arg(&dir)
        .arg(&binary)
        .arg("agent")
        .args(["-node", &node, "-bind", &spec.bind, "-client", &spec.bind])
        .arg("-data-dir")
        .arg(dir.join("data"))
        .args(["-http-port", &ports[0].to_string()])
        .args(["-serf-lan-port", &ports[1].to_string()])
        .args(["-serf-wan-port", &ports[2].to_string()])
        .args(["-server-port", &ports[3].to_string()])
        .args(["-grpc-port", &ports[4].to_string()])
        .args(["-dns-port", &ports[5].to_string()]);
        if !spec.version.starts_with("1.6.") {
            // 1.14+ listens for gRPC over TLS on 8503 unless told otherwise,
            // and two agents would collide there; 1.6 has no such flag.
            cmd.args(["-grpc-tls-port", &ports[6].to_string()]);
        }
        match spec.role {
            Role::Dev => {
                cmd.arg("-dev");
            }
            Role::Server { expect } => {
                cmd.args(["-server", "-bootstrap-expect", &expect.to_string()]);
                // Dev-mode raft timing: a cluster elects in a second or two.
                cmd.args(["-hcl", "performance { raft_multiplier = 1 }"]);
            }
            Role::Client => {}
        }
        for peer in &spec.join {
            cmd.args(["-retry-join", peer]);
        }
        if !spec.join.is_empty() {
            // A join tried before its peer listens is retried after 30 s by
            // default, longer than a loaded host's readiness wait.
            cmd.args(["-retry-interval", "1s"]);
        }
        for hcl in &spec.hcl {
            cmd.args(["-hcl", hcl]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run sh: {e}"))?;
        let keeper = child.stdin.take().expect("piped stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut first = String::new();
        stdout
            .read_line(&mut first)
            .map_err(|e| format!("no pid from the agent's shell: {e}"))?;
        let pid = first
            .trim()
            .strip_prefix("agent-pid ")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| format!("no pid from the agent's shell: {first:?}"))?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        // Drains the agent's log for as long as it runs, so it never
        // blocks on a full pipe.
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        std::thread::spawn(move || {
            let _ = child.wait();
        });
        Ok(Agent {
            version: spec.version.clone(),
            node,
            http_addr: format!("{}:{}", spec.bind, ports[0]),
            dns_addr: format!("{}:{}", spec.bind, ports[5]),
            serf_lan: format!("{}:{}", spec.bind, ports[1]),
            pid,
            token: spec.token.clone(),
            _keeper: keeper,
            log,
        })
    }

    /// `host:port` of the HTTP API, the `CONSUL_HTTP_ADDR` form.
    pub fn http_addr(&self) -> String {
        self.http_addr.clone()
    }

    /// `host:port` of the agent's DNS interface (UDP).
    pub fn dns_addr(&self) -> String {
        self.dns_addr.clone()
    }

    /// The serf LAN address other agents join.
    pub fn serf_lan(&self) -> String {
        self.serf_lan.clone()
    }

    /// The agent's own pid (not its shell's), for a test to stop or kill.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends `signal` to the agent: SIGSTOP hangs it with its sockets open,
    /// SIGKILL ends it.
    pub fn signal(&self, signal: Signal) {
        let _ = kill(Pid::from_raw(self.pid as i32), signal);
    }

    pub fn api(&self) -> Api {
        let api = Api::at(&self.http_addr).with_timeout(Duration::from_secs(5));
        match &self.token {
            Some(token) => api.with_token(token),
            None => api,
        }
    }

    /// Waits until the agent knows a raft leader and its own node is
    /// registered with a passing `serfHealth` (before that a session
    /// cannot be created). `within` defaults to [`PATIENCE`].
    pub fn wait_ready(&self, within: Option<Duration>) -> Result<(), String> {
        let until = Instant::now() + within.unwrap_or(PATIENCE);
        let api = self.api();
        let mut last = String::new();
        while Instant::now() < until {
            let leader = api.try_request("GET", "/v1/status/leader", None, &[]);
            let health =
                api.try_request("GET", &format!("/v1/health/node/{}", self.node), None, &[]);
            match (leader, health) {
                (Ok(l), Ok(h)) if l.status == 200 && h.status == 200 => {
                    let known = l.json().as_str().is_some_and(|a| !a.is_empty());
                    let passing = h.json().as_array().is_some_and(|checks| {
                        checks
                            .iter()
                            .any(|c| c["CheckID"] == "serfHealth" && c["Status"] == "passing")
                    });
                    if known && passing {
                        return Ok(());
                    }
                    last = format!("leader {}, node checks {}", l.trimmed(), h.trimmed());
                }
                (l, h) => last = format!("{:?} / {:?}", l.map(|r| r.status), h.map(|r| r.status)),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("{last}\n{}", self.log_tail()))
    }

    /// The agent's last log lines, for a failing test's message.
    pub fn log_tail(&self) -> String {
        let log = self.log.lock().unwrap();
        let start = log.len().saturating_sub(30);
        log[start..].join("\n")
    }
}

/// Servers on 127.0.0.11, .12, … and client agents on 127.0.0.21, .22, …,
/// all of one version and one datacenter, each agent with ports of its own.
pub struct Cluster {
    pub servers: Vec<Agent>,
    pub clients: Vec<Agent>,
}

impl Cluster {
    /// `servers` servers (a leader elected) and `clients` client agents,
    /// every agent ready for sessions.
    pub fn start(version: &str, servers: usize, clients: usize) -> Cluster {
        let spec = |role: Role, bind: String, join: Vec<String>| Spec {
            version: version.to_string(),
            role,
            bind,
            join,
            hcl: Vec::new(),
            token: None,
        };
        let first = Agent::start(&spec(
            Role::Server { expect: servers },
            "127.0.0.11".to_string(),
            Vec::new(),
        ));
        let join = vec![first.serf_lan()];
        let mut all = vec![first];
        for i in 1..servers {
            all.push(Agent::start(&spec(
                Role::Server { expect: servers },
                format!("127.0.0.{}", 11 + i),
                join.clone(),
            )));
        }
        let clients: Vec<Agent> = (0..clients)
            .map(|i| {
                Agent::start(&spec(
                    Role::Client,
                    format!("127.0.0.{}", 21 + i),
                    join.clone(),
                ))
            })
            .collect();
        for agent in all.iter().chain(&clients) {
            if let Err(e) = agent.wait_ready(None) {
                panic!(
                    "Consul {version} cluster agent {} not ready: {e}",
                    agent.node
                );
            }
        }
        Cluster {
            servers: all,
            clients,
        }
    }

    /// The server that is raft leader now, as the cluster says.
    pub fn leader(&self) -> &Agent {
        let leader = self.servers[0]
            .api()
            .request("GET", "/v1/status/leader", None)
            .json();
        let addr = leader.as_str().unwrap_or_default().to_string();
        let host = addr.split(':').next().unwrap_or_default();
        self.servers
            .iter()
            .find(|s| s.http_addr.split(':').next() == Some(host))
            .unwrap_or_else(|| panic!("no server is the leader {addr:?}"))
    }
}

#[test]
#[cfg_attr(
    no_real_consul,
    ignore = "no real Consul binaries (../shared/tools/consul)"
)]
fn a_dev_agent_of_each_version_serves_sessions() {
    for version in VERSIONS {
        let agent = Agent::dev(version);
        let api = agent.api();
        let id = api.session_create("{}");
        assert!(api.session_info(&id).is_some(), "{}", agent.log_tail());
        assert!(api.version().contains(version), "{}", api.version());
    }
}

#[test]
#[cfg_attr(
    no_real_consul,
    ignore = "no real Consul binaries (../shared/tools/consul)"
)]
fn a_cluster_of_each_version_elects_and_serves_clients() {
    for version in VERSIONS {
        let cluster = Cluster::start(version, 3, 1);
        let api = cluster.clients[0].api();
        let id = api.session_create("{}");
        assert!(api.session_info(&id).is_some());
        let _ = cluster.leader();
    }
}

/// Issue #45: `consul lock P` holds `P/.lock`, and `lockrun elect P`
/// (which holds `P`) ran beside it. Against each real agent and the real
/// `consul lock`: `lockrun elect P` refuses (125, one line naming
/// `P/.lock` and the key to use) and its command never runs;
/// `lockrun leader P` names the holder's session and says it cannot tell,
/// never "no holder"; `lockrun elect P/.lock` is excluded (75); once
/// `consul lock` lets go, `lockrun elect P` runs.
#[test]
#[cfg_attr(
    no_real_consul,
    ignore = "no real Consul binaries (../shared/tools/consul)"
)]
fn lockrun_elect_refuses_to_run_beside_consul_lock() {
    use crate::support::{bare, run, scratch, wait_for_file, Running};
    for version in VERSIONS {
        let agent = Agent::dev(version);
        let addr = agent.http_addr();
        let lockrun = |args: &[&str]| {
            let mut cmd = bare(args);
            cmd.env("CONSUL_HTTP_ADDR", &addr);
            cmd
        };
        let work = scratch();
        let w = work.path().display().to_string();
        let key = "jobs/nightly";
        let mut consul_lock = Command::new(binary(version));
        consul_lock
            .args(["lock", &format!("-http-addr={addr}"), key])
            .arg(format!(
                "touch {w}/held; while [ ! -e {w}/go ]; do sleep 0.05; done"
            ))
            .stdin(Stdio::null());
        let consul_lock = Running::spawn(&mut consul_lock);
        // Dropped first on a failure: `consul lock`'s child ends, and with
        // it the output the dropped Running reads to its end.
        struct Go(std::path::PathBuf);
        impl Drop for Go {
            fn drop(&mut self) {
                let _ = std::fs::write(&self.0, "");
            }
        }
        let go = Go(work.path().join("go"));
        wait_for_file(&work.path().join("held"));

        let ran = work.path().join("ran");
        let elect = run(&mut lockrun(&[
            "elect",
            "--no-wait",
            key,
            "--",
            "touch",
            &ran.display().to_string(),
        ]));
        let stderr = String::from_utf8_lossy(&elect.stderr);
        assert_eq!(elect.status.code(), Some(125), "{version}: {elect:?}");
        assert_eq!(stderr.lines().count(), 1, "{version}: {stderr}");
        assert!(
            stderr.contains(&format!("`{key}/.lock`"))
                && stderr.contains(&format!("lockrun elect {key}/.lock")),
            "{version}: {stderr}"
        );
        assert!(
            !ran.exists(),
            "{version}: lockrun's command ran beside consul lock"
        );

        let leader = run(&mut lockrun(&["leader", key]));
        let stderr = String::from_utf8_lossy(&leader.stderr);
        assert_eq!(leader.status.code(), Some(125), "{version}: {leader:?}");
        assert!(
            stderr.contains("is held by session") && stderr.contains(&format!("`{key}/.lock`")),
            "{version}: {stderr}"
        );
        let dotted = format!("{key}/.lock");
        let excluded = run(&mut lockrun(&["elect", "--no-wait", &dotted, "--", "true"]));
        assert_eq!(excluded.status.code(), Some(75), "{version}: {excluded:?}");

        drop(go);
        let out = consul_lock.finish();
        assert!(out.status.success(), "{version}: consul lock: {out:?}");
        let elect = run(&mut lockrun(&[
            "elect",
            "--no-wait",
            key,
            "--",
            "touch",
            &ran.display().to_string(),
        ]));
        assert_eq!(elect.status.code(), Some(0), "{version}: {elect:?}");
        assert!(ran.exists(), "{version}");
    }
}

/// Issue #42: lockrun's readers of P keep their record at `P/.lock`, where
/// `consul lock P` keeps its lock. Against each real `consul lock`: it
/// refuses to run while a lockrun reader holds (the Go API's "Existing key
/// does not match lock use"), and runs once the readers are gone.
#[test]
#[cfg_attr(
    no_real_consul,
    ignore = "no real Consul binaries (../shared/tools/consul)"
)]
fn consul_lock_refuses_to_run_beside_lockrun_readers() {
    use crate::support::{bare, run, scratch, wait_for_file, Running};
    for version in VERSIONS {
        let agent = Agent::dev(version);
        let addr = agent.http_addr();
        let work = scratch();
        let key = "data/v42";
        let mut reader = bare(["elect", "-s", key, "--shell", "--"]);
        reader
            .arg("touch \"$1/ready\"; while [ ! -e \"$1/go\" ]; do sleep 0.05; done")
            .arg(work.path())
            .env("CONSUL_HTTP_ADDR", &addr);
        let reader = Running::spawn(&mut reader);
        wait_for_file(&work.path().join("ready"));
        let ran = work.path().join("ran");
        let consul_lock = || {
            let mut cmd = Command::new(binary(version));
            cmd.args(["lock", &format!("-http-addr={addr}"), "-timeout=10s", key])
                .arg(format!("touch {}", ran.display()))
                .stdin(Stdio::null());
            run(&mut cmd)
        };
        let out = consul_lock();
        assert!(!out.status.success(), "{version}: consul lock: {out:?}");
        assert!(!ran.exists(), "{version}: consul lock ran beside a reader");
        std::fs::write(work.path().join("go"), "").unwrap();
        let done = reader.finish();
        assert!(done.status.success(), "{version}: the reader: {done:?}");
        let out = consul_lock();
        assert!(out.status.success(), "{version}: consul lock: {out:?}");
        assert!(ran.exists(), "{version}");
    }
}

/// Issue #42: a lockrun writer (`elect P`) holds `P/.lock` with `P`, with
/// its session and `consul lock`'s flags, so that a `consul lock P` started
/// while it holds waits for it (before, `P/.lock` was free and `consul lock
/// P` ran beside the writer). Against each real `consul lock`: the two
/// commands' own timestamps never overlap, given `consul lock` time to
/// start its command had it not waited; and the writer leaves nothing at
/// `P/.lock`, so `consul lock -n 2 P` and `lockrun semaphore P` run after
/// it as before. The reverse, `lockrun elect P` while `consul lock P`
/// holds: see `lockrun_elect_refuses_to_run_beside_consul_lock`.
#[test]
#[cfg_attr(
    no_real_consul,
    ignore = "no real Consul binaries (../shared/tools/consul)"
)]
fn consul_lock_waits_for_a_lockrun_writer() {
    use crate::support::{bare, run, scratch, wait_for_file, Running};
    let stamp = |path: &Path| -> u128 {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("no timestamp in {}: {text:?}", path.display()))
    };
    for version in VERSIONS {
        let agent = Agent::dev(version);
        let addr = agent.http_addr();
        let work = scratch();
        let w = work.path();
        let key = "jobs/nightly";
        let mut writer = bare(["elect", key, "--shell", "--"]);
        writer
            .arg(
                "date +%s%N > \"$1/w.start\"; touch \"$1/ready\"; \
                 while [ ! -e \"$1/go\" ]; do sleep 0.02; done; date +%s%N > \"$1/w.end\"",
            )
            .arg(w)
            .env("CONSUL_HTTP_ADDR", &addr);
        let writer = Running::spawn(&mut writer);
        // Dropped first on a failure: the writer's child ends.
        struct Go(std::path::PathBuf);
        impl Drop for Go {
            fn drop(&mut self) {
                let _ = std::fs::write(&self.0, "");
            }
        }
        let go = Go(w.join("go"));
        wait_for_file(&w.join("ready"));
        let mut consul_lock = Command::new(binary(version));
        consul_lock
            .args(["lock", &format!("-http-addr={addr}"), key])
            .arg(format!("date +%s%N > {}/c.start", w.display()))
            .stdin(Stdio::null());
        let consul_lock = Running::spawn(&mut consul_lock);
        // Time enough for `consul lock` to take a free key and start its
        // command (tens of milliseconds when it ran beside the writer).
        let window = Instant::now() + Duration::from_secs(2);
        while Instant::now() < window && !w.join("c.start").exists() {
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(go);
        let done = writer.finish();
        assert!(done.status.success(), "{version}: the writer: {done:?}");
        let out = consul_lock.finish();
        assert!(out.status.success(), "{version}: consul lock: {out:?}");
        let (writer_end, theirs) = (stamp(&w.join("w.end")), stamp(&w.join("c.start")));
        assert!(
            theirs > writer_end,
            "{version}: consul lock's command started {} ms before the writer's ended",
            (writer_end - theirs.min(writer_end)) / 1_000_000
        );
        assert!(stamp(&w.join("w.start")) < writer_end);

        // Nothing left behind by a writer (on a key `consul lock` never
        // used): a semaphore of the same name runs.
        let key = "jobs/weekly";
        let mut elect = bare(["elect", "--no-wait", key, "--", "true"]);
        elect.env("CONSUL_HTTP_ADDR", &addr);
        let out = run(&mut elect);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{version}: lockrun elect: {out:?}"
        );
        let ran = w.join("ran");
        let mut semaphore = Command::new(binary(version));
        semaphore
            .args([
                "lock",
                &format!("-http-addr={addr}"),
                "-n=2",
                "-timeout=10s",
                key,
            ])
            .arg(format!("touch {}", ran.display()))
            .stdin(Stdio::null());
        let out = run(&mut semaphore);
        assert!(out.status.success(), "{version}: consul lock -n 2: {out:?}");
        assert!(ran.exists(), "{version}");
        let mut ours = bare(["semaphore", "--limit", "2", "--no-wait", key, "--", "true"]);
        ours.env("CONSUL_HTTP_ADDR", &addr);
        let out = run(&mut ours);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{version}: lockrun semaphore: {out:?}"
        );
    }
}

/// `lockrun list` (#43) beside the real `consul lock`: its leader lock is
/// listed as the key it holds (`KEY/.lock`), its semaphore (`-n 2`) as a
/// semaphore with its limit, each by its session for want of a value.
/// The newest agent only: the listing is one read, the same on both.
#[test]
#[cfg_attr(
    no_real_consul,
    ignore = "no real Consul binaries (../shared/tools/consul)"
)]
fn list_shows_consul_lock_holders() {
    use crate::support::{bare, run, scratch, wait_for_file, Running};
    let version = VERSIONS[VERSIONS.len() - 1];
    let agent = Agent::dev(version);
    let addr = agent.http_addr();
    let work = scratch();
    let w = work.path().display().to_string();
    let consul_lock = |args: &[&str], tag: &str| {
        let mut cmd = Command::new(binary(version));
        cmd.arg("lock")
            .arg(format!("-http-addr={addr}"))
            .args(args)
            .arg(format!(
                "touch {w}/{tag}; while [ ! -e {w}/go ]; do sleep 0.05; done"
            ))
            .stdin(Stdio::null());
        Running::spawn(&mut cmd)
    };
    let lock = consul_lock(&["jobs/nightly"], "lock");
    let pool = consul_lock(&["-n", "2", "jobs/pool"], "pool");
    struct Go(PathBuf);
    impl Drop for Go {
        fn drop(&mut self) {
            let _ = std::fs::write(&self.0, "");
        }
    }
    let go = Go(work.path().join("go"));
    wait_for_file(&work.path().join("lock"));
    wait_for_file(&work.path().join("pool"));
    let mut cmd = bare(["list", "--json", "jobs"]);
    cmd.env("CONSUL_HTTP_ADDR", &addr);
    let output = run(&mut cmd);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{output:?}");
    assert_eq!(lines[0]["key"], "jobs/nightly/.lock", "{output:?}");
    assert_eq!(lines[0]["kind"], "lock", "{output:?}");
    assert_eq!(lines[1]["key"], "jobs/pool", "{output:?}");
    assert_eq!(lines[1]["kind"], "semaphore", "{output:?}");
    assert_eq!(lines[1]["limit"], 2, "{output:?}");
    assert_eq!(
        lines[1]["holders"].as_array().map(Vec::len),
        Some(1),
        "{output:?}"
    );
    // --replace cannot see `consul lock`'s command end (#43): one line,
    // 125, nothing asked, and it keeps its lock and slot; beside a `consul
    // lock` on the key's `.lock`, `--replace KEY` is refused as `elect` is.
    for (key, args) in [
        ("jobs/nightly/.lock", &["elect"][..]),
        ("jobs/nightly", &["elect"][..]),
        ("jobs/pool", &["semaphore", "--limit", "2"][..]),
    ] {
        let mut cmd = bare(args.iter().copied().chain(["--replace", key, "--", "true"]));
        cmd.env("CONSUL_HTTP_ADDR", &addr);
        let output = run(&mut cmd);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(
            output.status.code(),
            Some(125),
            "--replace {key}: {output:?}"
        );
        assert_eq!(stderr.lines().count(), 1, "--replace {key}: {stderr}");
    }
    let mut cmd = bare(["list", "jobs"]);
    cmd.env("CONSUL_HTTP_ADDR", &addr);
    let output = run(&mut cmd);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).lines().count(),
        3,
        "the header, consul lock's lock and its slot: {output:?}"
    );
    drop(go);
    assert!(lock.finish().status.success());
    assert!(pool.finish().status.success());
    let mut cmd = bare(["list", "jobs"]);
    cmd.env("CONSUL_HTTP_ADDR", &addr);
    let output = run(&mut cmd);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
}
