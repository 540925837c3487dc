//! A real ZooKeeper for the zookeeper tests: one standalone server per test
//! binary run, started on first use on loopback with its own data directory
//! and a 200 ms tick (sessions from 0.4 s to 30 s), shared (each test uses
//! its own key prefix); and 3-member ensembles on 127.0.0.11-13 for the
//! fault tests. It never touches :2181, where Debian's `zookeeperd` may run.
//!
//! Each server runs in the foreground (`java ... QuorumPeerMain zoo.cfg`)
//! under a small `sh` that waits on a pipe we hold: when this process exits,
//! however it exits, the pipe closes, and the shell stops the server and
//! removes its data directory. Missing jars fail the tests loudly with the
//! Debian package to install.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::procs::{free_port, PATIENCE};

pub const INSTALL_HINT: &str = "the zookeeper tests need ZooKeeper 3.8 and Java 17: apt-get install zookeeper default-jre-headless (and libcurator-recipes-java for the Curator rival)";

/// The servers' tickTime, which every holding lockrun is told
/// (`--zk-tick-time`): its budget leaves half a tick for a follower's late
/// report of the session to the leader.
pub const TICK: &str = "200ms";

/// `lockrun --backend zookeeper --zk-hosts HOSTS ARGS...`, with
/// `--zk-tick-time` [`TICK`] after `elect` or `semaphore` (the flag is
/// theirs), nothing else from the developer's shell.
pub fn lockrun(hosts: &str, args: &[&str]) -> Command {
    let mut cmd = crate::support::bare(["--backend", "zookeeper", "--zk-hosts", hosts]);
    let mut told = false;
    for arg in args {
        cmd.arg(arg);
        if !told && matches!(*arg, "elect" | "semaphore") {
            cmd.args(["--zk-tick-time", TICK]);
            told = true;
        }
    }
    cmd
}

/// The jars a server needs, from Debian's packages.
fn classpath() -> String {
    let jars = [
        "zookeeper.jar",
        "zookeeper-jute.jar",
        "slf4j-api.jar",
        "slf4j-simple.jar",
        "netty-handler.jar",
        "netty-common.jar",
        "netty-buffer.jar",
        "netty-transport.jar",
        "netty-codec.jar",
        "netty-resolver.jar",
        "netty-transport-native-epoll.jar",
        "netty-transport-native-unix-common.jar",
        "commons-io.jar",
        "snappy-java.jar",
        "metrics-core.jar",
    ];
    let dir = Path::new("/usr/share/java");
    assert!(
        dir.join("zookeeper.jar").exists(),
        "no /usr/share/java/zookeeper.jar; {INSTALL_HINT}"
    );
    jars.iter()
        .map(|j| dir.join(j))
        .filter(|p| p.exists())
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}

/// One running server.
pub struct TestZk {
    /// `host:port` of its client port.
    pub addr: String,
    _keeper: Mutex<ChildStdin>,
    log: Arc<Mutex<Vec<String>>>,
    pid: Arc<AtomicU32>,
}

impl TestZk {
    pub fn pid(&self) -> u32 {
        self.pid.load(Ordering::Relaxed)
    }

    /// Sends `signal` to the server (SIGSTOP: it hangs; SIGKILL: gone).
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid() as i32), signal);
    }

    /// Its last log lines, for a failing test's message.
    pub fn log_tail(&self) -> String {
        let log = self.log.lock().unwrap();
        let start = log.len().saturating_sub(30);
        log[start..].join("\n")
    }

    /// Its mode by the `srvr` command: `standalone`, `leader`, `follower`;
    /// `None` while it serves no clients.
    pub fn mode(&self) -> Option<String> {
        srvr_mode(&self.addr)
    }
}

/// A four-letter command's answer (`srvr`, `cons`), `None` from a server
/// that does not answer.
pub fn four_letters(addr: &str, command: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(command.as_bytes()).ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    Some(text)
}

fn srvr_mode(addr: &str) -> Option<String> {
    let text = four_letters(addr, "srvr")?;
    text.lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(|m| m.trim().to_owned())
}

static SHARED: OnceLock<TestZk> = OnceLock::new();

/// Set (to anything), the shared server is a 3-member ensemble: `versions`
/// re-runs the shared scenarios' ZooKeeper tests so.
pub const ENSEMBLE_ENV: &str = "LOCKRUN_TEST_ZK_ENSEMBLE";

/// The shared ensemble's members but the first, which [`zk`] holds.
static SHARED_PEERS: OnceLock<Vec<TestZk>> = OnceLock::new();

/// The shared standalone server, started on first use; with
/// [`ENSEMBLE_ENV`] set, the first member of a shared 3-member ensemble,
/// its `addr` the ensemble's connect string.
pub fn zk() -> &'static TestZk {
    SHARED.get_or_init(|| {
        if std::env::var_os(ENSEMBLE_ENV).is_some() {
            let mut servers = ensemble();
            let addr = hosts(&servers);
            let mut first = servers.remove(0);
            first.addr = addr;
            assert!(SHARED_PEERS.set(servers).is_ok(), "one shared ensemble");
            return first;
        }
        let mut last = String::new();
        for _ in 0..3 {
            match launch(1, &["127.0.0.1".to_owned()], &[free_port()], None, "") {
                Ok(mut servers) => return servers.remove(0),
                Err(e) => last = e,
            }
        }
        panic!("cannot start a test ZooKeeper: {last}");
    })
}

/// A 3-member ensemble on 127.0.0.11-13 of a test's own, stopped when
/// dropped.
pub fn ensemble() -> Vec<TestZk> {
    let mut last = String::new();
    for _ in 0..3 {
        let hosts: Vec<String> = (11..14).map(|i| format!("127.0.0.{i}")).collect();
        let ports: Vec<u16> = hosts.iter().map(|_| free_port()).collect();
        let peers: Vec<(u16, u16)> = hosts.iter().map(|_| (free_port(), free_port())).collect();
        match launch(3, &hosts, &ports, Some(&peers), "") {
            Ok(servers) => return servers,
            Err(e) => last = e,
        }
    }
    panic!("cannot start a test ZooKeeper ensemble: {last}");
}

/// The connect string of `servers`.
pub fn hosts(servers: &[TestZk]) -> String {
    servers
        .iter()
        .map(|s| s.addr.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// A standalone server of a test's own with `extra` lines in its zoo.cfg
/// (a secure client port, say), stopped when dropped.
pub fn standalone_with(extra: &str) -> TestZk {
    let mut last = String::new();
    for _ in 0..3 {
        match launch(1, &["127.0.0.1".to_owned()], &[free_port()], None, extra) {
            Ok(mut servers) => return servers.remove(0),
            Err(e) => last = e,
        }
    }
    panic!("cannot start a test ZooKeeper: {last}");
}

fn launch(
    n: usize,
    hosts: &[String],
    ports: &[u16],
    peers: Option<&[(u16, u16)]>,
    extra: &str,
) -> Result<Vec<TestZk>, String> {
    let cp = classpath();
    let mut servers = Vec::new();
    for i in 0..n {
        let dir = tempfile::Builder::new()
            .prefix("lockrun-zk-")
            .tempdir()
            .expect("a data directory")
            .keep();
        let mut cfg = format!(
            "tickTime={}\ninitLimit=20\nsyncLimit=5\ndataDir={}\nclientPort={}\nclientPortAddress={}\n\
             maxSessionTimeout=30000\nadmin.enableServer=false\n4lw.commands.whitelist=srvr,cons\n\
             maxClientCnxns=0\n",
            humantime::parse_duration(TICK).unwrap().as_millis(),
            dir.join("data").display(),
            ports[i],
            hosts[i]
        );
        cfg.push_str(extra);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        if let Some(peers) = peers {
            for (j, (quorum, election)) in peers.iter().enumerate() {
                cfg.push_str(&format!(
                    "server.{}={}:{quorum}:{election}\n",
                    j + 1,
                    hosts[j]
                ));
            }
            std::fs::write(dir.join("data/myid"), format!("{}\n", i + 1)).unwrap();
        }
        std::fs::write(dir.join("zoo.cfg"), cfg).unwrap();
        servers.push(spawn(&dir, &cp, format!("{}:{}", hosts[i], ports[i]))?);
    }
    let until = Instant::now() + PATIENCE;
    for s in &servers {
        while s.mode().is_none() {
            if Instant::now() > until {
                return Err(format!(
                    "ZooKeeper {} not serving within {PATIENCE:?}:\n{}",
                    s.addr,
                    s.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(servers)
}

fn spawn(dir: &Path, cp: &str, addr: String) -> Result<TestZk, String> {
    let mut child = Command::new("sh")
        .args([
            "-c",
            r#"dir=$1; shift; "$@" 2>&1 & z=$!; echo "zk-pid $z"; read _; kill -CONT $z; kill $z; wait $z; rm -rf "$dir""#,
            "sh",
        ])
        .arg(dir)
        .arg(java())
        .args([
            "-Xmx96m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            cp,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        ])
        .arg(dir.join("zoo.cfg"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run sh: {e}"))?;
    let keeper = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
    let log = Arc::new(Mutex::new(Vec::new()));
    let pid = Arc::new(AtomicU32::new(0));
    let (sink, pid_sink) = (log.clone(), pid.clone());
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.strip_prefix("zk-pid ") {
                pid_sink.store(n.trim().parse().unwrap_or(0), Ordering::Relaxed);
                continue;
            }
            sink.lock().unwrap().push(line);
        }
    });
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    Ok(TestZk {
        addr,
        _keeper: Mutex::new(keeper),
        log,
        pid,
    })
}

fn java() -> PathBuf {
    let java = PathBuf::from("/usr/bin/java");
    assert!(java.exists(), "no /usr/bin/java; {INSTALL_HINT}");
    java
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

/// Runs `f` with a session on `hosts`, on a runtime of its own.
pub fn with_client<T>(hosts: &str, f: impl AsyncFnOnce(&zookeeper_client::Client) -> T) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = zookeeper_client::Client::connector()
            .with_session_timeout(Duration::from_secs(5))
            .connect(hosts)
            .await
            .unwrap_or_else(|e| panic!("cannot connect to ZooKeeper at {hosts}: {e}"));
        f(&client).await
    })
}

/// Every node under `/PREFIX`, depth first (empty when it does not exist).
pub fn tree(hosts: &str, prefix: &str) -> Vec<String> {
    with_client(hosts, async |client| {
        let mut found = Vec::new();
        let mut todo = vec![format!("/{prefix}")];
        while let Some(path) = todo.pop() {
            match client.list_children(&path).await {
                Ok(children) => {
                    for c in children {
                        let child = format!("{path}/{c}");
                        found.push(child.clone());
                        todo.push(child);
                    }
                }
                Err(zookeeper_client::Error::NoNode) => {}
                Err(e) => panic!("listing {path}: {e}"),
            }
        }
        found
    })
}
