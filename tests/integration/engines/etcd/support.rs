//! A real etcd for the etcd tests: one per test binary run, started on the
//! first use on loopback ephemeral ports with its own data directory, and
//! shared (each test uses its own key prefix). It never touches :2379, where
//! Debian's package may run a system etcd.
//!
//! The server runs under a small `sh` that waits on a pipe we hold: when
//! this process exits, however it exits, the pipe closes, and the shell
//! stops etcd and removes its data directory. A missing `etcd` binary fails
//! the tests loudly with the install hint; it never passes silently.

use std::io::{BufRead, BufReader};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use lockrun::backend::etcd::{Etcd, EtcdConfig};

use crate::procs::{free_port, PATIENCE};

/// A folder whose `etcd` and `etcdctl` the tests run instead of those on
/// PATH: how the suite runs again against etcd 3.5 (`versions.rs`).
pub const ETCD_BIN_DIR_ENV: &str = "LOCKRUN_TEST_ETCD_BIN_DIR";

/// `etcd` or `etcdctl`: from [`ETCD_BIN_DIR_ENV`]'s folder if set, else
/// from PATH.
pub fn etcd_bin(name: &str) -> std::path::PathBuf {
    match std::env::var_os(ETCD_BIN_DIR_ENV) {
        Some(dir) if !dir.is_empty() => std::path::Path::new(&dir).join(name),
        _ => name.into(),
    }
}

pub const INSTALL_HINT: &str =
    "the etcd tests need etcd and etcdctl 3.4 or later: apt-get install etcd-server etcd-client";

/// The shared etcd.
pub struct TestEtcd {
    pub endpoint: String,
    /// Closing it (dropping this) stops etcd; the shared one lives as long
    /// as the test binary.
    _keeper: Mutex<ChildStdin>,
    log: Arc<Mutex<Vec<String>>>,
    /// etcd's own pid, for the tests that stop or kill a member.
    pid: Arc<std::sync::atomic::AtomicU32>,
}

impl TestEtcd {
    /// etcd's process id.
    pub fn pid(&self) -> u32 {
        self.pid.load(Ordering::Relaxed)
    }

    /// Sends `signal` to this member (SIGSTOP: it hangs; SIGKILL: it is
    /// gone). Dropping it continues it first, so a stopped member ends too.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid() as i32), signal);
    }

    /// etcd's last log lines, for a failing test's message.
    pub fn log_tail(&self) -> String {
        let log = self.log.lock().unwrap();
        let start = log.len().saturating_sub(30);
        log[start..].join("\n")
    }
}

static ETCD: OnceLock<TestEtcd> = OnceLock::new();

/// The shared etcd, started on first use.
pub fn etcd() -> &'static TestEtcd {
    ETCD.get_or_init(|| start_with_retries("http", &[]))
}

/// `start` tried a few times, with new ports each time: a port may still
/// be taken by another program between our probe and etcd's bind.
fn start_with_retries(scheme: &str, extra: &[&str]) -> TestEtcd {
    let mut last = String::new();
    for _ in 0..3 {
        match start(scheme, extra) {
            Ok(etcd) => return etcd,
            Err(e) => last = e,
        }
    }
    panic!("cannot start a test etcd: {last}");
}

/// An etcd of a test's own with `extra` flags (auth, say), stopped when
/// dropped.
pub fn private(extra: &[&str]) -> TestEtcd {
    start_with_retries("http", extra)
}

/// As [`private`], serving clients over TLS (`extra` names the files).
pub fn private_tls(extra: &[&str]) -> TestEtcd {
    start_with_retries("https", extra)
}

fn start(scheme: &str, extra: &[&str]) -> Result<TestEtcd, String> {
    let member = Member::new(scheme, "127.0.0.1");
    let cluster = member.cluster_entry();
    let (etcd, ready) = member.launch(&cluster, extra)?;
    etcd.ready(ready)
}

/// A cluster of `n` members, each stopped when dropped. Stopping one of
/// two leaves the other without a leader; one of three leaves a quorum.
pub fn cluster(n: usize) -> Vec<TestEtcd> {
    let mut last = String::new();
    // As `start_with_retries`: the whole cluster again, on new ports.
    for _ in 0..3 {
        match try_cluster(n) {
            Ok(members) => return members,
            Err(e) => last = e,
        }
    }
    panic!("cannot start a test etcd cluster: {last}");
}

fn try_cluster(n: usize) -> Result<Vec<TestEtcd>, String> {
    // Each member on an address of its own, as on separate hosts: 127.0.0.31, .32, …
    let members: Vec<Member> = (0..n)
        .map(|i| Member::new("http", &format!("127.0.0.{}", 31 + i)))
        .collect();
    let all: Vec<String> = members.iter().map(Member::cluster_entry).collect();
    let all = all.join(",");
    let launched = members
        .into_iter()
        .map(|m| m.launch(&all, &[]))
        .collect::<Result<Vec<_>, _>>()?;
    // None is ready before a quorum runs: launch all, then wait. Dropping
    // the others on a failure stops them.
    launched
        .into_iter()
        .map(|(etcd, ready)| etcd.ready(ready))
        .collect()
}

/// One etcd process to be: its name, ports and data directory.
struct Member {
    name: String,
    endpoint: String,
    peer_url: String,
}

impl Member {
    fn new(scheme: &str, host: &str) -> Member {
        let (client, peer) = (free_port(), free_port());
        Member {
            name: format!("lockrun-test-{peer}"),
            endpoint: format!("{scheme}://{host}:{client}"),
            peer_url: format!("http://{host}:{peer}"),
        }
    }

    fn cluster_entry(&self) -> String {
        format!("{}={}", self.name, self.peer_url)
    }

    /// Starts etcd; readiness arrives on the receiver.
    fn launch(
        self,
        cluster: &str,
        extra: &[&str],
    ) -> Result<(TestEtcd, mpsc::Receiver<bool>), String> {
        match Command::new(etcd_bin("etcd")).arg("--version").output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => panic!("`etcd --version` failed ({}); {INSTALL_HINT}", out.status),
            Err(e) => panic!("cannot run `etcd` ({e}); {INSTALL_HINT}"),
        }
        let dir = tempfile::Builder::new()
            .prefix("lockrun-etcd-")
            .tempdir()
            .expect("a data directory")
            .keep();
        let mut child = Command::new("sh")
            .args([
                "-c",
                r#"dir=$1; bin=$2; shift 2; "$bin" "$@" 2>&1 & e=$!; echo "etcd-pid $e"; read _; kill $e; kill -CONT $e; wait $e; rm -rf "$dir""#,
                "sh",
            ])
            .arg(&dir)
            .arg(etcd_bin("etcd"))
            .args(["--name", &self.name, "--data-dir"])
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &self.endpoint])
            .args(["--advertise-client-urls", &self.endpoint])
            .args(["--listen-peer-urls", &self.peer_url])
            .args(["--initial-advertise-peer-urls", &self.peer_url])
            .args(["--initial-cluster", cluster])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run sh: {e}"))?;
        let keeper = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = mpsc::channel();
        let sink = log.clone();
        let pid = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let pid_sink = pid.clone();
        // Drains etcd's log for as long as it runs, so it never blocks on a
        // full pipe, and reports readiness.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = line.strip_prefix("etcd-pid ") {
                    pid_sink.store(n.trim().parse().unwrap_or(0), Ordering::Relaxed);
                    continue;
                }
                if line.contains("ready to serve client requests") {
                    let _ = ready_tx.send(true);
                }
                sink.lock().unwrap().push(line);
            }
            let _ = ready_tx.send(false);
        });
        // The shell reaps etcd; we reap the shell in the background.
        std::thread::spawn(move || {
            let _ = child.wait();
        });
        let etcd = TestEtcd {
            endpoint: self.endpoint,
            _keeper: Mutex::new(keeper),
            log,
            pid,
        };
        Ok((etcd, ready_rx))
    }
}

impl TestEtcd {
    fn ready(self, ready: mpsc::Receiver<bool>) -> Result<TestEtcd, String> {
        match ready.recv_timeout(PATIENCE) {
            Ok(true) => Ok(self),
            Ok(false) => Err(format!("etcd exited:\n{}", self.log_tail())),
            Err(_) => Err(format!(
                "etcd was not ready within {PATIENCE:?}:\n{}",
                self.log_tail()
            )),
        }
    }
}

/// A key prefix no other test uses.
pub fn unique(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "lockrun-test/{}-{}/{name}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A closed port on loopback: connecting to it is refused.
pub fn closed_endpoint() -> String {
    format!("http://127.0.0.1:{}", free_port())
}

/// An engine on the shared etcd granting leases of `ttl`.
pub fn engine(ttl: Duration) -> Etcd {
    let config = EtcdConfig::plain(&[&etcd().endpoint]).expect("a valid endpoint");
    Etcd::new(&config, ttl).expect("a valid engine")
}

/// `etcdctl` pointed at the shared etcd.
pub fn etcdctl() -> Command {
    etcdctl_at(&etcd().endpoint)
}

/// `etcdctl` pointed at `endpoint`.
pub fn etcdctl_at(endpoint: &str) -> Command {
    let mut cmd = Command::new(etcd_bin("etcdctl"));
    cmd.env("ETCDCTL_API", "3")
        .env_remove("ETCDCTL_USER")
        .args(["--endpoints", endpoint]);
    cmd
}

/// Runs `etcdctl ARGS` to completion, failing the test if it fails.
pub fn etcdctl_ok(args: &[&str]) -> String {
    run_ok(etcdctl().args(args), args)
}

/// Runs a prepared etcdctl to completion, failing the test if it fails.
pub fn run_ok(cmd: &mut Command, args: &[&str]) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run etcdctl ({e}); {INSTALL_HINT}"));
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A long-running etcdctl (`lock` or `elect`) whose stdout lines arrive on a
/// channel; interrupted and reaped on drop.
pub struct Etcdctl {
    child: std::process::Child,
    stopped: bool,
    lines: mpsc::Receiver<String>,
}

impl Etcdctl {
    pub fn spawn(args: &[&str]) -> Etcdctl {
        let mut child = etcdctl()
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run etcdctl ({e}); {INSTALL_HINT}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Etcdctl {
            child,
            stopped: false,
            lines,
        }
    }

    /// The next stdout line, waiting at most [`PATIENCE`].
    pub fn line(&self) -> String {
        self.lines
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|e| panic!("etcdctl printed nothing within {PATIENCE:?} ({e})"))
    }

    /// A line already printed, without waiting.
    pub fn printed(&self) -> Option<String> {
        self.lines.try_recv().ok()
    }

    /// SIGINT, as an operator's Ctrl-C: etcdctl lets go and exits.
    pub fn interrupt(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let _ = self.child.wait();
    }
}

impl Drop for Etcdctl {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Waits (without sleeping blindly) until `check` holds, polling etcd.
pub async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let until = tokio::time::Instant::now() + PATIENCE;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < until,
            "{what}: not within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
