//! How fast `lockrun` takes and hands over a lock, how much it asks of
//! Consul while others wait, and how much memory it keeps while supervising,
//! measured against the targets of the performance issue and against
//! `consul lock` doing the same work in the same run.
//!
//! Run it with `cargo bench --bench lockrun`. Where the real Consul binaries
//! sit beside the repository (`../shared/tools/consul/consul-VERSION.xz`,
//! or the folder `LOCKRUN_TEST_CONSUL_BINARIES` names) it unpacks one
//! (`LOCKRUN_BENCH_CONSUL_VERSION`, 1.15.10 by default), starts a dev agent
//! of its own and runs both lockrun and that binary's `consul lock` against
//! it. Otherwise, or with `LOCKRUN_BENCH_EMULATOR=1`, it talks to an
//! in-process consul-emulator, the only Consul that counts requests (with
//! `consul lock` beside it when a `consul` is on PATH); or to the agent
//! `LOCKRUN_TEST_CONSUL_ADDR` names. Against a real agent request counts per
//! handover are "n/a"; the idle waiters' requests are counted there too,
//! from the agent's own debug log (`consul monitor`), and with either
//! Consul the CPU time and wake-ups of the tools' own processes over the
//! same window. `LOCKRUN_BENCH_LOCKRUN` names another lockrun binary to
//! measure (an older build, for a before-and-after).
//!
//! The timed children are this very program run as `__child`: it appends
//! `start`/`end` lines with nanosecond wall-clock timestamps to a file and
//! forks nothing, so a handover (the next start minus the previous end, as
//! the children themselves saw it) is the tool's own cost, not a shell's or
//! `date`'s. Only the lock-loss and memory scenarios use `sh -c` scripts.
//!
//! Name sections after `--` to run only those, e.g. `cargo bench --bench
//! lockrun -- semaphore handover` (sections: uncontended, handover,
//! semaphore, loss, requests, idle, memory).
//!
//! `cargo test --all-targets` runs bench targets too, without `--bench`; we
//! do nothing then, so the suite does not pay for a benchmark run.

use std::fmt;
use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use consul_emulator::{Emulator, Endpoint, LoggedRequest};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Set to `host:port` of a Consul agent to measure against it.
const REAL_AGENT_ENV: &str = "LOCKRUN_TEST_CONSUL_ADDR";

/// Set (to anything) to measure against the in-process emulator, the only
/// Consul that counts requests, even where real binaries are at hand.
const EMULATOR_ENV: &str = "LOCKRUN_BENCH_EMULATOR";

/// The Consul version to unpack from `../shared/tools/consul` (or the folder
/// `LOCKRUN_TEST_CONSUL_BINARIES` names), when that folder holds it.
const VERSION_ENV: &str = "LOCKRUN_BENCH_CONSUL_VERSION";

/// Set to the path of another lockrun binary (an older build, say) to
/// measure it in place of the one cargo built beside this benchmark.
const LOCKRUN_ENV: &str = "LOCKRUN_BENCH_LOCKRUN";
const DEFAULT_VERSION: &str = "1.15.10";

/// A `consul agent -dev` of ours on loopback ports of its own, killed when
/// dropped, from the real binaries beside the repository: both tools then
/// run against the same real agent, and `consul lock` is that binary.
struct Agent {
    addr: String,
    binary: PathBuf,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Agent {
    fn start() -> Option<Agent> {
        let folder = std::env::var_os("LOCKRUN_TEST_CONSUL_BINARIES")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tools/consul")
            });
        let version = std::env::var(VERSION_ENV).unwrap_or_else(|_| DEFAULT_VERSION.into());
        let packed = folder.join(format!("consul-{version}.xz"));
        if !packed.is_file() {
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("lockrun-bench-consul-")
            .tempdir()
            .expect("a folder for Consul");
        let binary = dir.path().join("consul");
        let unpacked = Command::new("sh")
            .arg("-c")
            .arg("xz -dc \"$1\" > \"$2\" && chmod +x \"$2\"")
            .arg("sh")
            .arg(&packed)
            .arg(&binary)
            .status()
            .is_ok_and(|s| s.success());
        if !unpacked {
            println!(
                "cannot unpack {} (is xz installed?): using the emulator",
                packed.display()
            );
            return None;
        }
        let port = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port()
        };
        let (http, lan, wan, server, grpc, dns, tls) =
            (port(), port(), port(), port(), port(), port(), port());
        let data = dir.path().join("data");
        let mut cmd = Command::new(&binary);
        cmd.args([
            "agent",
            "-dev",
            "-bind",
            "127.0.0.1",
            "-client",
            "127.0.0.1",
        ])
        .arg("-data-dir")
        .arg(&data);
        if version.starts_with("1.6.") {
            // 1.6 knows no `grpc_tls` port; its flags name the others.
            for (flag, p) in [
                ("-http-port", http),
                ("-serf-lan-port", lan),
                ("-serf-wan-port", wan),
                ("-server-port", server),
                ("-grpc-port", grpc),
                ("-dns-port", dns),
            ] {
                cmd.arg(flag).arg(p.to_string());
            }
        } else {
            cmd.arg("-hcl").arg(format!(
                "ports {{ http = {http}, serf_lan = {lan}, serf_wan = {wan}, server = {server}, \
                 grpc = {grpc}, dns = {dns}, grpc_tls = {tls} }}"
            ));
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the Consul agent");
        let agent = Agent {
            addr: format!("127.0.0.1:{http}"),
            binary,
            child,
            _dir: dir,
        };
        let ready = wait_until(Instant::now() + PATIENCE, || {
            http_get_leader(&agent.addr).is_some_and(|l| l.len() > 2)
        });
        assert!(ready, "the Consul {version} dev agent never elected itself");
        Some(agent)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The agent's answer to `/v1/status/leader` (a quoted address once ready).
fn http_get_leader(addr: &str) -> Option<String> {
    http(addr, "GET", "/v1/status/leader")
        .ok()
        .filter(|r| r.status == 200)
        .map(|r| String::from_utf8_lossy(&r.body).trim().to_string())
}

/// Consul's Go API `LockFlagValue`, sent with our own forced release.
const LOCK_FLAG: u64 = 0x2ddc_cbc0_58a5_0c18;

/// The upper bound on every wait: a scenario that exceeds it is reported as
/// failed, and its processes are killed.
const PATIENCE: Duration = Duration::from_secs(30);

const UNCONTENDED_WARMUP: usize = 3;
const UNCONTENDED_RUNS: usize = 30;
/// Handover chains: (waiters queued behind the holder, chains). One waiter
/// is the tools' own floor; twenty contenders add the herd.
const HANDOVERS: [(usize, usize); 2] = [(1, 20), (19, 3)];
/// The 50 ms job of a handover chain.
const JOB_MS: u64 = 50;
const SEMAPHORE_JOBS: usize = 12;
const SEMAPHORE_LIMIT: usize = 3;
const SEMAPHORE_JOB_SECS: f64 = 0.2;
const SEMAPHORE_RUNS: usize = 3;
const LOSS_RUNS: usize = 6;
/// (waiters, chains): who wins each race varies from run to run, so we
/// sum several chains.
const WAITER_COUNTS: [(usize, usize); 3] = [(1, 3), (10, 3), (50, 2)];
const RSS_SAMPLES: usize = 5;
/// Idle waiters queued behind one holder, and how long their requests are
/// counted once they all wait: a minute holds one of lockrun's longest
/// waits and four of `consul lock`'s.
const IDLE_WAITERS: usize = 50;
const IDLE_WINDOW: Duration = Duration::from_secs(60);
const IDLE_SETTLE: Duration = Duration::from_secs(20);

/// Options that make a handover quick: no lock-delay, and a kill timeout
/// short enough for the safety budget to allow that.
const QUICK: [&str; 4] = ["--lock-delay", "0s", "--kill-timeout", "1s"];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == "__child") {
        child_main(&args[2..]);
    }
    if !args.iter().any(|a| a == "--bench") {
        println!("lockrun benchmark: skipped (run it with `cargo bench --bench lockrun`)");
        return;
    }
    let started = Instant::now();
    let cpu_before = CpuTimes::now();
    let only: Vec<String> = args[1..]
        .iter()
        .filter(|a| !a.starts_with('-'))
        .cloned()
        .collect();
    let bench = Bench::new(only);
    bench.print_header();
    let rows = bench.run_all();
    println!();
    print_table(&rows, bench.consul_bin.is_some());
    println!(
        "\nbenchmark wall time: {:.1} s; {}",
        started.elapsed().as_secs_f64(),
        cpu_before.report()
    );
}

// ---------------------------------------------------------------------------
// The Consul under test and the tools that use it

struct Consul {
    emulator: Option<Emulator>,
    addr: String,
    /// A dev agent of real Consul we started, and the binary it runs.
    agent: Option<Agent>,
}

impl Consul {
    fn start() -> Consul {
        if let Ok(addr) = std::env::var(REAL_AGENT_ENV) {
            let addr = addr.trim();
            let addr = addr.strip_prefix("http://").unwrap_or(addr);
            let addr = addr.trim_end_matches('/');
            if !addr.is_empty() {
                return Consul {
                    emulator: None,
                    addr: addr.to_string(),
                    agent: None,
                };
            }
        }
        if std::env::var_os(EMULATOR_ENV).is_none() {
            if let Some(agent) = Agent::start() {
                return Consul {
                    emulator: None,
                    addr: agent.addr.clone(),
                    agent: Some(agent),
                };
            }
        }
        let emulator = Emulator::builder().start();
        Consul {
            addr: emulator.http_addr(),
            emulator: Some(emulator),
            agent: None,
        }
    }

    fn describe(&self) -> String {
        match &self.emulator {
            Some(_) => format!(
                "consul-emulator (in-process, Consul 1.10 HTTP API) at {}",
                self.addr
            ),
            None => {
                let version = http(&self.addr, "GET", "/v1/agent/self")
                    .ok()
                    .filter(|r| r.status == 200)
                    .and_then(|r| serde_json::from_slice::<serde_json::Value>(&r.body).ok())
                    .and_then(|v| v["Config"]["Version"].as_str().map(str::to_string))
                    .unwrap_or_else(|| "version unknown".into());
                format!("real agent at {} (Consul {version})", self.addr)
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tool {
    Lockrun,
    ConsulLock,
}

impl fmt::Display for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Tool::Lockrun => "lockrun",
            Tool::ConsulLock => "consul lock",
        })
    }
}

struct Bench {
    consul: Consul,
    lockrun: PathBuf,
    consul_bin: Option<PathBuf>,
    scratch: tempfile::TempDir,
    /// The sections named on the command line; empty for all of them.
    only: Vec<String>,
}

impl Bench {
    fn new(only: Vec<String>) -> Bench {
        let scratch = tempfile::Builder::new()
            .prefix("lockrun-bench-")
            .tempdir()
            .expect("create a scratch directory");
        let consul = Consul::start();
        // The agent's own binary when we started one: like for like.
        let consul_bin = match &consul.agent {
            Some(agent) => Some(agent.binary.clone()),
            None => find_on_path("consul"),
        };
        Bench {
            consul,
            lockrun: std::env::var_os(LOCKRUN_ENV)
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_lockrun"))),
            consul_bin,
            scratch,
            only,
        }
    }

    fn print_header(&self) {
        println!("lockrun benchmark");
        println!("machine:  {} CPUs, {}", cpus(), cpu_model());
        println!("kernel:   {}", read_trimmed("/proc/sys/kernel/osrelease"));
        println!("consul:   {}", self.consul.describe());
        println!(
            "lockrun:  {} ({})",
            self.lockrun.display(),
            command_output(Command::new(&self.lockrun).arg("--version"))
        );
        match &self.consul_bin {
            Some(bin) => println!(
                "compare:  {} ({})",
                bin.display(),
                command_output(Command::new(bin).arg("version"))
                    .lines()
                    .next()
                    .unwrap_or("")
            ),
            None => println!(
                "compare:  no real Consul binaries beside the repository and no consul on PATH: comparison skipped"
            ),
        }
        match timestamp_probe() {
            Ok(ms) => println!(
                "timestamp probe: two consecutive `date +%s%N` in sh are {ms:.2} ms apart \
                 (lock-loss figures include about one such fork; handovers use the tool-only child)"
            ),
            Err(e) => println!("timestamp probe failed: {e}"),
        }
        match self.child_probe() {
            Ok(ms) => println!(
                "child probe: the tool-only child logs its start {ms:.2} ms after it is spawned \
                 (its own start-up, part of every handover for either tool)"
            ),
            Err(e) => println!("child probe failed: {e}"),
        }
    }

    /// The median time from spawning the tool-only child to its `start`
    /// line: the share of a handover that is the child's, not the tool's.
    fn child_probe(&self) -> Result<f64, String> {
        let dir = self.dir("child-probe");
        let Job::Exec(argv) = Job::timed(&dir, 0, false) else {
            unreachable!("the timed child runs without a shell");
        };
        let mut delays = Vec::new();
        for _ in 0..15 {
            let _ = fs::remove_file(dir.join("events"));
            let mut child = Command::new(&argv[0]);
            scrub(&mut child);
            child.args(&argv[1..]);
            let spawned_at = realtime_ns();
            let status = child.status().map_err(|e| format!("run the child: {e}"))?;
            if !status.success() {
                return Err(format!("the child failed: {status}"));
            }
            let events = read_events(&dir.join("events"))?;
            let start = events
                .iter()
                .find(|e| e.1)
                .ok_or("the child logged no start")?;
            delays.push((start.0 as f64 - spawned_at as f64) / 1e6);
        }
        Ok(Stats::of(delays).median)
    }

    /// What a one-waiter handover is made of, each part measured alone in
    /// this run: the child's own start, the two writes lockrun's handover
    /// cannot do without (the holder's delete, the waiter's acquiring
    /// transaction) on a warm connection, and the programs' own start
    /// (`--version`, off the handover's path: both tools' waiters are up
    /// before it); the rest is lockrun's processes waking and handing on.
    fn where_a_handover_goes(&self, lockrun: Option<f64>, consul_lock: Option<f64>) {
        let (Some(lockrun), Ok(child)) = (lockrun, self.child_probe()) else {
            return;
        };
        let writes = match self.consul_writes() {
            Ok(writes) => writes,
            Err(e) => {
                println!("  where the time goes: cannot time Consul's writes: {e}");
                return;
            }
        };
        let mut starts = [Vec::new(), Vec::new()];
        for _ in 0..PART_RUNS {
            starts[0].push(wall_ms(Command::new(&self.lockrun).arg("--version")));
            if let Some(bin) = &self.consul_bin {
                starts[1].push(wall_ms(Command::new(bin).arg("version")));
            }
        }
        println!("\n  where the time goes (medians of {PART_RUNS}, each part alone, in this run):");
        println!("    the child's own start, spawned directly: {child:.2} ms (in either tool's handover)");
        println!(
            "    before the hand-off: the holder's delete, then the waiter's transaction, on a warm connection: {:.2} + {:.2} ms",
            writes[0], writes[1]
        );
        let start = |t: &Vec<f64>| (!t.is_empty()).then(|| Stats::of(t.clone()).median);
        match (start(&starts[0]), start(&starts[1])) {
            (Some(ours), Some(theirs)) => println!(
                "    the program's own start (`--version`), off the path: lockrun {ours:.2} ms, consul {theirs:.2} ms"
            ),
            (Some(ours), None) => println!("    lockrun's own start (`--version`), off the path: {ours:.2} ms"),
            _ => {}
        }
        let path = match self.handover_requests() {
            Ok([list, hand]) => {
                println!(
                    "    lockrun's handover now: the holder's queue listing, then its hand-off transaction, on a warm connection: {list:.2} + {hand:.2} ms (the head writes nothing)"
                );
                list + hand
            }
            Err(e) => {
                println!("    cannot time the hand-off's requests: {e}");
                writes[0] + writes[1]
            }
        };
        let own = lockrun - child - path;
        println!("    left of lockrun's handover ({lockrun:.2} ms): {own:.2} ms, its processes waking and handing on");
        if let Some(peer) = consul_lock {
            let room = 0.5 * peer - child - path;
            println!(
                "    the goal, half `consul lock`'s {peer:.2} ms, leaves lockrun {room:.2} ms beyond the child's start and its requests"
            );
        }
    }

    /// The floor of an uncontended run (issue #46), measured in this run:
    /// the one write a run cannot do without, lockrun's release
    /// transaction (`KEY` and `KEY/.lock` deleted) on a warm connection,
    /// plus one exec of the child (`true`); printed beside lockrun's median
    /// with the goal, the larger of 0.1x `consul lock`'s and floor + 0.3 ms.
    fn uncontended_floor(&self, lockrun: Option<f64>, consul_lock: Option<f64>) {
        let release = match self.release_txn() {
            Ok(release) => release,
            Err(e) => {
                println!("  floor: cannot time the release: {e}");
                return;
            }
        };
        let exec = Stats::of(
            (0..PART_RUNS)
                .map(|_| wall_ms(&mut Command::new("true")))
                .collect(),
        )
        .median;
        let floor = release + exec;
        let mut line = format!(
            "  floor: release transaction {release:.2} ms + exec of `true` {exec:.2} ms = {floor:.2} ms"
        );
        if let Some(ours) = lockrun {
            line.push_str(&format!(
                "; lockrun {ours:.2} ms = floor + {:.2} ms",
                ours - floor
            ));
        }
        if let Some(peer) = consul_lock {
            let goal = (0.1 * peer).max(floor + 0.3);
            line.push_str(&format!(
                "; goal max(0.1x consul lock {:.2}, floor + 0.3 = {:.2}) = {goal:.2} ms",
                0.1 * peer,
                floor + 0.3
            ));
            if let Some(ours) = lockrun {
                line.push_str(if ours <= goal { " (met)" } else { " (missed)" });
            }
        }
        println!("{line}");
    }

    /// The median time of lockrun's release transaction of a lock it took
    /// with `KEY/.lock` (both deleted, the latter checked ours), on one
    /// warm connection, in ms.
    fn release_txn(&self) -> Result<f64, String> {
        let mut conn = Warm::connect(&self.consul.addr)?;
        let session = session_on(&mut conn)?;
        let key = unique_prefix("floor");
        let take = format!(
            r#"[{{"KV":{{"Verb":"lock","Key":"{key}","Value":"eA==","Flags":3304740253564472344,"Session":"{session}"}}}},{{"KV":{{"Verb":"lock","Key":"{key}/.lock","Value":"","Flags":3304740253564472344,"Session":"{session}"}}}}]"#
        );
        let mut times = Vec::new();
        for _ in 0..PART_RUNS + 1 {
            let taken = conn.send("PUT", "/v1/txn", take.as_bytes())?;
            let index = serde_json::from_slice::<serde_json::Value>(&taken)
                .ok()
                .and_then(|v| v["Results"][0]["KV"]["ModifyIndex"].as_u64())
                .ok_or("a transaction's answer without the key's index")?;
            let release = format!(
                r#"[{{"KV":{{"Verb":"delete-cas","Key":"{key}","Index":{index}}}}},{{"KV":{{"Verb":"check-session","Key":"{key}/.lock","Session":"{session}"}}}},{{"KV":{{"Verb":"delete","Key":"{key}/.lock"}}}}]"#
            );
            let started = Instant::now();
            conn.send("PUT", "/v1/txn", release.as_bytes())?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        conn.send("PUT", &format!("/v1/session/destroy/{session}"), b"")?;
        Ok(Stats::of(times[1..].to_vec()).median)
    }

    /// The median times of the two requests of lockrun's handover (#46),
    /// each on one warm connection, in ms: the holder's listing of the
    /// queue, and its transaction that hands the lock to the head (unlock,
    /// lock with the head's session, the head's entry checked and
    /// deleted); the head writes nothing.
    fn handover_requests(&self) -> Result<[f64; 2], String> {
        let mut conn = Warm::connect(&self.consul.addr)?;
        let (holder, head) = (session_on(&mut conn)?, session_on(&mut conn)?);
        let key = unique_prefix("where");
        let queue = format!("{key}/.lockrun-queue/");
        let entry = format!("{queue}{head}");
        let lock = |session: &str| {
            format!(
                r#"{{"KV":{{"Verb":"lock","Key":"{key}","Value":"eA==","Flags":3304740253564472344,"Session":"{session}"}}}}"#
            )
        };
        let setup = format!(
            r#"[{},{{"KV":{{"Verb":"lock","Key":"{entry}","Value":"","Session":"{head}"}}}}]"#,
            lock(&holder)
        );
        let hand = format!(
            r#"[{{"KV":{{"Verb":"unlock","Key":"{key}","Value":"","Flags":3304740253564472344,"Session":"{holder}"}}}},{},{{"KV":{{"Verb":"check-session","Key":"{entry}","Session":"{head}"}}}},{{"KV":{{"Verb":"delete","Key":"{entry}"}}}}]"#,
            lock(&head)
        );
        let (mut lists, mut hands) = (Vec::new(), Vec::new());
        for _ in 0..PART_RUNS + 1 {
            conn.send("PUT", "/v1/txn", setup.as_bytes())?;
            let started = Instant::now();
            conn.send("GET", &format!("/v1/kv/{queue}?recurse"), b"")?;
            lists.push(started.elapsed().as_secs_f64() * 1000.0);
            let started = Instant::now();
            conn.send("PUT", "/v1/txn", hand.as_bytes())?;
            hands.push(started.elapsed().as_secs_f64() * 1000.0);
            conn.send("DELETE", &format!("/v1/kv/{key}"), b"")?;
        }
        for session in [holder, head] {
            conn.send("PUT", &format!("/v1/session/destroy/{session}"), b"")?;
        }
        Ok([
            Stats::of(lists[1..].to_vec()).median,
            Stats::of(hands[1..].to_vec()).median,
        ])
    }

    /// The median time of a check-and-set delete of a key and of a
    /// transaction that takes a lock, each on one warm connection, as
    /// lockrun's holder and waiter sent them before the hand-off, in ms.
    fn consul_writes(&self) -> Result<[f64; 2], String> {
        let mut conn = Warm::connect(&self.consul.addr)?;
        let session = conn.send(
            "PUT",
            "/v1/session/create",
            br#"{"TTL":"60s","LockDelay":"0s"}"#,
        )?;
        let session = serde_json::from_slice::<serde_json::Value>(&session)
            .ok()
            .and_then(|v| v["ID"].as_str().map(str::to_string))
            .ok_or("no session ID")?;
        let key = unique_prefix("where");
        let txn = format!(
            r#"[{{"KV":{{"Verb":"lock","Key":"{key}","Value":"eA==","Session":"{session}"}}}}]"#
        );
        let (mut deletes, mut txns) = (Vec::new(), Vec::new());
        for _ in 0..PART_RUNS + 1 {
            let started = Instant::now();
            let taken = conn.send("PUT", "/v1/txn", txn.as_bytes())?;
            txns.push(started.elapsed().as_secs_f64() * 1000.0);
            let index = serde_json::from_slice::<serde_json::Value>(&taken)
                .ok()
                .and_then(|v| v["Results"][0]["KV"]["ModifyIndex"].as_u64())
                .ok_or("a transaction's answer without the key's index")?;
            let started = Instant::now();
            conn.send("DELETE", &format!("/v1/kv/{key}?cas={index}"), b"")?;
            deletes.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        conn.send("PUT", &format!("/v1/session/destroy/{session}"), b"")?;
        // The first of each opened what the agent keeps for the next.
        Ok([
            Stats::of(deletes[1..].to_vec()).median,
            Stats::of(txns[1..].to_vec()).median,
        ])
    }

    fn wants(&self, section: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == section)
    }

    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![Tool::Lockrun];
        if self.consul_bin.is_some() {
            tools.push(Tool::ConsulLock);
        }
        tools
    }

    /// A fresh directory for one run's scripts and logs. Its unique path is
    /// in every script we start, which is how [`sweep`] finds leftovers.
    fn dir(&self, name: &str) -> PathBuf {
        let dir = self
            .scratch
            .path()
            .join(format!("{name}-{:08x}", random_u64() as u32));
        fs::create_dir_all(&dir).expect("create a run directory");
        dir
    }

    /// The tool's program with a scrubbed environment pointed at our Consul.
    fn program(&self, tool: Tool) -> Command {
        let program = match tool {
            Tool::Lockrun => self.lockrun.as_path(),
            Tool::ConsulLock => self.consul_bin.as_deref().expect("consul on PATH"),
        };
        let mut cmd = Command::new(program);
        scrub(&mut cmd);
        for (name, _) in std::env::vars_os() {
            let name_text = name.to_string_lossy();
            if name_text.starts_with("CONSUL_")
                || name_text.starts_with("LOCKRUN_")
                || name_text == "RUST_LOG"
            {
                cmd.env_remove(&name);
            }
        }
        cmd.env("CONSUL_HTTP_ADDR", &self.consul.addr);
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
        cmd
    }

    /// The leader lock on `prefix/.lock` around `script`: the key
    /// `consul lock PREFIX` uses, so both tools contend for the same key.
    fn elect(&self, tool: Tool, prefix: &str, job: &Job, quick: bool, verbose: bool) -> Command {
        let mut cmd = self.program(tool);
        match tool {
            Tool::Lockrun => {
                if verbose {
                    cmd.arg("-v");
                }
                cmd.arg("elect");
                if quick {
                    cmd.args(QUICK);
                }
                job.lockrun_args(&mut cmd, &format!("{prefix}/.lock"));
            }
            // consul lock has no lock-delay option; a handover by release
            // never waits for one, and every loss test uses a fresh key.
            Tool::ConsulLock => {
                cmd.args(["lock", prefix, &job.command_line()]);
            }
        }
        cmd
    }

    fn semaphore(&self, tool: Tool, prefix: &str, limit: usize, job: &Job) -> Command {
        let mut cmd = self.program(tool);
        let limit = limit.to_string();
        match tool {
            Tool::Lockrun => {
                cmd.args(["semaphore", "--limit", &limit]);
                job.lockrun_args(&mut cmd, prefix);
            }
            Tool::ConsulLock => {
                cmd.args(["lock", "-n", &limit, prefix, &job.command_line()]);
            }
        }
        cmd
    }

    fn run_all(&self) -> Vec<Row> {
        let tools = self.tools();
        let mut rows = Vec::new();

        if self.wants("uncontended") {
            println!("\n== uncontended: `elect k -- true`, wall time of the whole run");
            let figures = self.for_tools(&tools, |tool| {
                let s = Stats::of(self.uncontended(tool)?);
                println!("  {tool}: {s}");
                Ok(Figure::value(s.median, Unit::Ms, ""))
            });
            let median = |wanted: Tool| {
                figures.iter().find_map(|(tool, f)| match f {
                    Ok(f) if *tool == wanted => f.number().map(|(v, _)| v),
                    _ => None,
                })
            };
            self.uncontended_floor(median(Tool::Lockrun), median(Tool::ConsulLock));
            rows.push(Row::new(
                "uncontended `elect k -- true` (median)",
                figures,
                Some(8.0),
            ));
        }

        if self.wants("handover") {
            for (waiters, chains) in HANDOVERS {
                let contenders = waiters + 1;
                println!(
                    "\n== handover: {contenders} contenders, {JOB_MS} ms jobs, --lock-delay 0s, \
                 {chains} chains; child exit -> next child start"
                );
                let handovers = self.for_tools(&tools, |tool| {
                    let mut all = Vec::new();
                    for _ in 0..chains {
                        let chain = self.chain(tool, "handover", waiters)?;
                        all.extend(chain.handovers_ms);
                    }
                    let s = Stats::of(all);
                    println!("  {tool}: {s}");
                    Ok(s)
                });
                let label = match waiters {
                    1 => "handover, one waiter".to_string(),
                    _ => format!("handover, {contenders} contenders"),
                };
                rows.push(
                    Row::new(
                        &format!("{label} (median)"),
                        map_results(&handovers, |s| Figure::value(s.median, Unit::Ms, "")),
                        None,
                    )
                    .vs_consul(0.5),
                );
                rows.push(Row::new(
                    &format!("{label} (max)"),
                    map_results(&handovers, |s| Figure::value(s.max, Unit::Ms, "")),
                    None,
                ));
                if waiters == 1 {
                    let median = |wanted: Tool| {
                        handovers.iter().find_map(|(tool, s)| match s {
                            Ok(s) if *tool == wanted => Some(s.median),
                            _ => None,
                        })
                    };
                    self.where_a_handover_goes(median(Tool::Lockrun), median(Tool::ConsulLock));
                }
            }
        }

        if self.wants("semaphore") {
            let ideal = SEMAPHORE_JOBS as f64 * SEMAPHORE_JOB_SECS / SEMAPHORE_LIMIT as f64;
            println!(
            "\n== semaphore: {SEMAPHORE_JOBS} jobs of {SEMAPHORE_JOB_SECS} s, --limit {SEMAPHORE_LIMIT}, \
             all started at once; ideal {ideal:.2} s"
        );
            let figures = self.for_tools(&tools, |tool| {
                let mut walls = Vec::new();
                for _ in 0..SEMAPHORE_RUNS {
                    let run = self.semaphore_run(tool)?;
                    let handover = Stats::of(run.slot_handovers_ms.clone());
                    println!(
                        "  {tool}: wall {:.3} s = spawn -> first start {:.1} ms + first start -> \
                     last end {:.3} s + last end -> last exit {:.1} ms; slot handover median \
                     {:.1} max {:.1} ms; at most {} at once",
                        run.wall_s,
                        run.startup_ms,
                        run.span_s,
                        run.tail_ms,
                        handover.median,
                        handover.max,
                        run.max_concurrent
                    );
                    walls.push(run.wall_s);
                }
                let s = Stats::of(walls);
                Ok(Figure::value(
                    s.median,
                    Unit::Sec,
                    &format!("{:+.0}% vs ideal", (s.median / ideal - 1.0) * 100.0),
                ))
            });
            rows.push(Row::new(
                "semaphore 12 x 0.2 s, 3 slots (median wall)",
                figures,
                Some(ideal * 1.05),
            ));
        }

        if self.wants("loss") {
            for (how, label) in [
                (Loss::Release, "lock loss (release) -> child signalled"),
                (
                    Loss::DestroySession,
                    "lock loss (session destroyed) -> signal",
                ),
            ] {
                println!("\n== {label}: {LOSS_RUNS} runs");
                let figures = self.for_tools(&tools, |tool| {
                    let s = Stats::of(self.lock_loss(tool, how)?);
                    println!("  {tool}: {s}");
                    Ok(Figure::value(
                        s.median,
                        Unit::Ms,
                        &format!("max {:.1}", s.max),
                    ))
                });
                rows.push(Row::new(&format!("{label} (median)"), figures, Some(50.0)));
            }
        }

        if self.wants("requests") {
            println!(
            "\n== requests to Consul per waiter per handover: N waiters queued behind a holder, \
             then N handovers (50 ms jobs)"
        );
            for (n, chains) in WAITER_COUNTS {
                let figures = self.for_tools(&tools, |tool| {
                    let mut handovers = Vec::new();
                    let mut sum: Option<Accounting> = None;
                    for _ in 0..chains {
                        let chain = self.chain(tool, &format!("waiters-{n}"), n)?;
                        handovers.extend(chain.handovers_ms);
                        if let Some(a) = chain.accounting {
                            sum = Some(match sum {
                                Some(s) => s.add(&a),
                                None => a,
                            });
                        }
                    }
                    let latency = Stats::of(handovers);
                    match sum {
                        Some(a) => {
                            println!("  {tool}, N={n}, {chains} chains: {a}; handover {latency}");
                            Ok(Figure::value(
                                a.per_waiter_handover(),
                                Unit::Req,
                                &format!("total {} in {chains} chains", a.total),
                            ))
                        }
                        None => {
                            println!("  {tool}, N={n}, {chains} chains: handover {latency}");
                            Ok(Figure::NotApplicable(
                                "real agent: no request counts".into(),
                            ))
                        }
                    }
                });
                rows.push(Row::new(
                    &format!("requests/waiter/handover, N={n}"),
                    figures,
                    Some(2.0),
                ));
            }
        }

        if self.wants("idle") {
            println!(
                "\n== 1 holder and {IDLE_WAITERS} idle waiters over {} s (default session settings): \
                 requests/s to Consul; CPU and wake-ups of the tools' own processes",
                IDLE_WINDOW.as_secs()
            );
            let runs = self.for_tools(&tools, |tool| {
                let run = self.idle(tool)?;
                match &run.requests {
                    Some(kinds) => println!("  {tool}: {kinds}"),
                    None => println!("  {tool}: requests not counted: no `consul monitor`"),
                }
                println!("  {tool}: {}", run.cost.describe(run.renewals()));
                Ok(run)
            });
            rows.push(
                Row::new(
                    &format!("requests/s, 1 holder + {IDLE_WAITERS} idle waiters"),
                    map_results(&runs, |run| match &run.requests {
                        Some(kinds) => {
                            Figure::value(kinds.per_second(kinds.total()), Unit::Req, "")
                        }
                        None => Figure::NotApplicable("no `consul monitor` to count with".into()),
                    }),
                    None,
                )
                .vs_consul(1.0),
            );
            rows.push(
                Row::new(
                    &format!("CPU ms/s, 1 holder + {IDLE_WAITERS} idle waiters"),
                    map_results(&runs, |run| {
                        Figure::value(run.cost.cpu_ms_per_second(), Unit::Ms, "")
                    }),
                    None,
                )
                .vs_consul(1.0),
            );
            rows.push(
                Row::new(
                    &format!("wake-ups/s, 1 holder + {IDLE_WAITERS} idle waiters"),
                    map_results(&runs, |run| {
                        Figure::value(run.cost.wakeups_per_second(), Unit::Req, "")
                    }),
                    None,
                )
                .vs_consul(1.0),
            );
        }

        if self.wants("memory") {
            println!("\n== memory while holding (VmRSS from /proc, max of {RSS_SAMPLES} samples)");
            let rss = self.for_tools(&tools, |tool| {
                let r = self.rss(tool)?;
                let mib = |kib: u64| kib as f64 / 1024.0;
                println!(
                    "  {tool}: supervisor {:.2} MiB (anonymous {:.2} MiB; peak {:.2} MiB){}",
                    mib(r.supervisor_kib),
                    mib(r.supervisor_anon_kib),
                    mib(r.supervisor_hwm_kib),
                    match r.child_kib {
                        Some(kib) => format!(
                            ", its child {:.2} MiB (anonymous {:.2} MiB)",
                            mib(kib),
                            mib(r.child_anon_kib)
                        ),
                        None => String::new(),
                    }
                );
                for (who, parts) in [
                    ("supervisor", Some(&r.supervisor_parts)),
                    ("child", r.child_parts.as_ref()),
                ] {
                    if let Some(parts) = parts {
                        println!("    {tool}'s {who}, where it lies: {parts}");
                    }
                }
                Ok(r)
            });
            rows.push(Row::new(
                "supervisor RSS while holding",
                map_results(&rss, |r| {
                    Figure::value(r.supervisor_kib as f64 / 1024.0, Unit::Mib, "")
                }),
                None,
            ));
            // Issue 46's goal: 8 MiB for the two together.
            rows.push(Row::new(
                "supervisor + guard RSS (8 MiB)",
                map_results(&rss, |r| {
                    let guard = match r.tool {
                        Tool::Lockrun => r.child_kib.unwrap_or(0),
                        Tool::ConsulLock => 0,
                    };
                    Figure::value((r.supervisor_kib + guard) as f64 / 1024.0, Unit::Mib, "")
                }),
                Some(8.0),
            ));
            rows.push(Row::new(
                "supervisor + guard Pss",
                map_results(&rss, |r| {
                    Figure::value(r.proportional_kib as f64 / 1024.0, Unit::Mib, "")
                }),
                None,
            ));
            rows.push(Row::new(
                "guard (lockrun's child) RSS",
                map_results(&rss, |r| match (r.tool, r.child_kib) {
                    (Tool::Lockrun, Some(kib)) => Figure::value(kib as f64 / 1024.0, Unit::Mib, ""),
                    (Tool::Lockrun, None) => Figure::Failed("guard not found".into()),
                    (Tool::ConsulLock, _) => Figure::NotApplicable("no guard".into()),
                }),
                None,
            ));
        }

        rows
    }

    /// Runs `measure` for each tool, catching failures so one broken
    /// scenario does not hide the others.
    fn for_tools<T>(
        &self,
        tools: &[Tool],
        mut measure: impl FnMut(Tool) -> Result<T, String>,
    ) -> Vec<(Tool, Result<T, String>)> {
        tools
            .iter()
            .map(|&tool| {
                let result = measure(tool);
                if let Err(e) = &result {
                    println!("  {tool}: FAILED: {e}");
                }
                sweep(self.scratch.path());
                (tool, result)
            })
            .collect()
    }

    // -----------------------------------------------------------------------
    // Scenarios

    fn uncontended(&self, tool: Tool) -> Result<Vec<f64>, String> {
        let dir = self.dir("uncontended");
        let prefix = unique_prefix("uncontended");
        let mut times = Vec::new();
        for i in 0..UNCONTENDED_WARMUP + UNCONTENDED_RUNS {
            let mut cmd = self.program(tool);
            match tool {
                Tool::Lockrun => cmd.args(["elect", &format!("{prefix}/.lock"), "--", "true"]),
                Tool::ConsulLock => cmd.args(["lock", &prefix, "true"]),
            };
            let began = Instant::now();
            let mut proc = Proc::spawn(cmd, &dir.join(format!("stderr-{i}")))?;
            let status = proc.wait(Instant::now() + PATIENCE)?;
            let took = began.elapsed();
            if !status.success() {
                return Err(proc.failure(status));
            }
            if i >= UNCONTENDED_WARMUP {
                times.push(ms(took));
            }
        }
        Ok(times)
    }

    /// A holder takes the lock and waits at a gate while `waiters` more
    /// contenders queue behind it; then the gate opens and the lock passes
    /// down the chain, every child running a 50 ms job.
    fn chain(&self, tool: Tool, name: &str, waiters: usize) -> Result<ChainResult, String> {
        let dir = self.dir(name);
        let prefix = unique_prefix(name);
        let job = Job::timed(&dir, JOB_MS, true);
        let events = dir.join("events");
        let mut procs = self.queue_behind_holder(tool, &dir, &prefix, &job, true, waiters)?;

        let snapshot = self.consul.emulator.as_ref().map(|emulator| {
            emulator.reset_counters();
            emulator.request_log()
        });
        fs::write(dir.join("gate"), b"").map_err(|e| format!("open the gate: {e}"))?;
        let deadline = Instant::now() + PATIENCE + Duration::from_millis(200) * waiters as u32;
        for proc in &mut procs {
            let status = proc.wait(deadline)?;
            if !status.success() {
                return Err(proc.failure(status));
            }
        }
        let accounting = match (&self.consul.emulator, snapshot) {
            (Some(emulator), Some(before)) => {
                Some(Accounting::of(emulator, &before, &prefix, waiters))
            }
            _ => None,
        };

        let events = read_events(&events)?;
        let handovers_ms = handovers(&events)?;
        if handovers_ms.len() != waiters {
            return Err(format!(
                "expected {waiters} handovers, the children logged {}",
                handovers_ms.len()
            ));
        }
        Ok(ChainResult {
            handovers_ms,
            accounting,
        })
    }

    /// One holder and [`IDLE_WAITERS`] waiters behind it, with each tool's
    /// default session settings; the requests Consul received from them
    /// over [`IDLE_WINDOW`] once all wait, by kind (`None` against a real
    /// agent when no `consul` binary can follow its log), and what the
    /// tools' own processes spent meanwhile.
    fn idle(&self, tool: Tool) -> Result<IdleRun, String> {
        let dir = self.dir("idle");
        let prefix = unique_prefix("idle");
        let job = Job::timed(&dir, 0, true);
        // Requests are logged as they finish, so we follow the log from
        // before the first contender and count only what lands in the
        // window.
        let monitor = match (&self.consul.emulator, &self.consul_bin) {
            (Some(_), _) => None,
            (None, Some(bin)) => {
                let mut cmd = Command::new(bin);
                scrub(&mut cmd);
                cmd.args(["monitor", "-log-level", "debug"])
                    .arg(format!("-http-addr={}", self.consul.addr))
                    .stdout(
                        fs::File::create(dir.join("monitor"))
                            .map_err(|e| format!("create the monitor's log: {e}"))?,
                    );
                Some(Proc::spawn(cmd, &dir.join("monitor-stderr"))?)
            }
            (None, None) => None,
        };
        let mut procs = self.queue_behind_holder(tool, &dir, &prefix, &job, false, IDLE_WAITERS)?;
        // The waiters queued together, so their waits end together: from
        // 20 s on, a minute holds the end of each lockrun waiter's first
        // minute-long wait (and the listing after it) once, and four of
        // `consul lock`'s 15 s waits, as a long run would on average.
        sleep(IDLE_SETTLE);
        let logged = |path: &Path| fs::read(path).map(|b| b.len()).unwrap_or(0);
        let from = (
            self.consul.emulator.as_ref().map(|e| e.request_log().len()),
            logged(&dir.join("monitor")),
        );
        let tool_pids: Vec<u32> = procs.iter().map(Proc::pid).collect();
        let before = ProcessCost::of(tool, &tool_pids)?;
        sleep(IDLE_WINDOW);
        let cost = ProcessCost::of(tool, &tool_pids)?.since(&before)?;
        let mut kinds = IdleRequests::default();
        match &self.consul.emulator {
            Some(emulator) => {
                let log = emulator.request_log();
                for r in log.get(from.0.unwrap_or(0)..).unwrap_or_default() {
                    kinds.add(&r.method, &r.path);
                }
            }
            None if monitor.is_none() => {}
            None => {
                let text =
                    fs::read(dir.join("monitor")).map_err(|e| format!("the monitor: {e}"))?;
                let window = text.get(from.1..).unwrap_or_default();
                for line in String::from_utf8_lossy(window).lines() {
                    if let Some((method, url)) = logged_request(line) {
                        kinds.add(method, url);
                    }
                }
            }
        }
        // Everyone stops as on Ctrl-C: the waiters leave the queue, the
        // holder releases. `consul lock` 1.6's waiters may sleep through
        // it; what is left then is killed with the rest when `procs` goes.
        for proc in procs.iter().rev() {
            let _ = kill(Pid::from_raw(proc.pid() as i32), Signal::SIGTERM);
        }
        let deadline = Instant::now() + PATIENCE;
        for proc in &mut procs {
            let _ = proc.wait(deadline);
        }
        let counted = self.consul.emulator.is_some() || monitor.is_some();
        drop(monitor);
        Ok(IdleRun {
            requests: counted.then_some(kinds),
            cost,
        })
    }

    /// Waits until every contender in `procs` is queued for `key`: for the
    /// emulator, a blocking read of the key is waiting for each; for a real
    /// agent, each lockrun has said so with `-v`; `consul lock` says
    /// nothing, so there we allow a generous settling time.
    /// One contender for `prefix` whose child has started (its `job` logs
    /// to `dir/events`), then `waiters` more, returned once all of them wait
    /// in line behind it, the holder first; each one's stderr goes to
    /// `dir/stderr-N`.
    fn queue_behind_holder(
        &self,
        tool: Tool,
        dir: &Path,
        prefix: &str,
        job: &Job,
        quick: bool,
        waiters: usize,
    ) -> Result<Vec<Proc>, String> {
        let deadline = Instant::now() + PATIENCE;
        let verbose = self.consul.emulator.is_none();
        let spawn = |i: usize| {
            Proc::spawn(
                self.elect(tool, prefix, job, quick, verbose),
                &dir.join(format!("stderr-{i}")),
            )
        };
        let mut procs = vec![spawn(0)?];
        if !wait_until(deadline, || count_lines(&dir.join("events"), "start ") >= 1) {
            return Err(format!(
                "the holder did not start its child\n{}",
                procs[0].stderr_text()
            ));
        }
        for i in 1..=waiters {
            procs.push(spawn(i)?);
        }
        self.wait_queued(tool, &format!("{prefix}/.lock"), &procs[1..], deadline)?;
        Ok(procs)
    }

    fn wait_queued(
        &self,
        tool: Tool,
        key: &str,
        procs: &[Proc],
        deadline: Instant,
    ) -> Result<(), String> {
        let want = procs.len();
        let queued = if let Some(emulator) = &self.consul.emulator {
            // lockrun's waiters block on the key or on their queue
            // entries under it; `consul lock` on the key.
            let path = format!("/v1/kv/{key}");
            let waiting = |r: &LoggedRequest| {
                r.endpoint == Endpoint::KvGet
                    && r.status.is_none()
                    && !r.dropped
                    && r.path.starts_with(&path)
                    && r.path.contains("index=")
                    && !r.path.contains("consistent")
            };
            wait_until_every(deadline, Duration::from_millis(10), || {
                emulator.request_log().iter().filter(|r| waiting(r)).count() >= want
            })
        } else if tool == Tool::Lockrun {
            wait_until_every(deadline, Duration::from_millis(10), || {
                procs
                    .iter()
                    // `waiting: held by another` (a lock), `waiting: all
                    // slots are taken` (a semaphore).
                    .all(|p| p.stderr_text().contains("waiting: "))
            })
        } else {
            sleep(Duration::from_secs(1) + Duration::from_millis(20) * want as u32);
            true
        };
        if queued {
            Ok(())
        } else {
            Err(format!(
                "{want} contenders did not all queue for `{key}` in time"
            ))
        }
    }

    fn semaphore_run(&self, tool: Tool) -> Result<SemaphoreRun, String> {
        let dir = self.dir("semaphore");
        let prefix = unique_prefix("semaphore");
        let job = Job::timed(&dir, (SEMAPHORE_JOB_SECS * 1000.0) as u64, false);
        let began = Instant::now();
        let began_ns = realtime_ns();
        let mut procs = Vec::new();
        for i in 0..SEMAPHORE_JOBS {
            procs.push(Proc::spawn(
                self.semaphore(tool, &prefix, SEMAPHORE_LIMIT, &job),
                &dir.join(format!("stderr-{i}")),
            )?);
        }
        let deadline = Instant::now() + PATIENCE;
        let mut last_exit = (began, began_ns);
        let ok = wait_until_every(deadline, Duration::from_millis(1), || {
            let all = procs.iter_mut().all(|p| p.try_exit().is_some());
            if all {
                last_exit = (Instant::now(), realtime_ns());
            }
            all
        });
        if !ok {
            return Err("the semaphore jobs did not all finish in time".into());
        }
        for proc in &mut procs {
            let status = proc.wait(deadline)?;
            if !status.success() {
                return Err(proc.failure(status));
            }
        }
        let events = read_events(&dir.join("events"))?;
        let starts: Vec<u64> = events.iter().filter(|e| e.1).map(|e| e.0).collect();
        if starts.len() != SEMAPHORE_JOBS {
            return Err(format!(
                "expected {SEMAPHORE_JOBS} jobs, {} started",
                starts.len()
            ));
        }
        let max_concurrent = max_concurrent(&events);
        if max_concurrent > SEMAPHORE_LIMIT {
            return Err(format!(
                "{max_concurrent} jobs ran at once with --limit {SEMAPHORE_LIMIT}: the semaphore was violated"
            ));
        }
        let first = events.first().map(|e| e.0).unwrap_or(0);
        let last = events.last().map(|e| e.0).unwrap_or(0);
        Ok(SemaphoreRun {
            wall_s: last_exit.0.duration_since(began).as_secs_f64(),
            startup_ms: (first as f64 - began_ns as f64) / 1e6,
            span_s: (last - first) as f64 / 1e9,
            slot_handovers_ms: slot_handovers(&events, SEMAPHORE_LIMIT),
            tail_ms: (last_exit.1 as f64 - last as f64) / 1e6,
            max_concurrent,
        })
    }

    /// The child traps TERM (and INT, for tools that send it) and logs the
    /// time; we take the lock away and log the time just before the request
    /// leaves.
    fn lock_loss(&self, tool: Tool, how: Loss) -> Result<Vec<f64>, String> {
        let mut delays = Vec::new();
        for i in 0..LOSS_RUNS {
            let dir = self.dir(&format!("loss-{i}"));
            // A fresh key each time: a destroyed session leaves a lock-delay
            // behind (15 s for consul lock, which cannot set it).
            let prefix = unique_prefix("loss");
            let key = format!("{prefix}/.lock");
            let d = sh_quote(&dir);
            let script = format!(
                "trap 'date +%s%N > {d}/signalled; exit 0' TERM INT; \
                 touch {d}/ready; sleep 30 & wait"
            );
            // Without a lock-delay a destroyed session lets a rival in at
            // once, so lockrun rightly kills the child outright, which no
            // trap sees; the default lock-delay leaves room for SIGTERM.
            let quick = matches!(how, Loss::Release);
            let mut proc = Proc::spawn(
                self.elect(tool, &prefix, &Job::Shell(script), quick, false),
                &dir.join("stderr"),
            )?;
            let deadline = Instant::now() + PATIENCE;
            if !wait_until(deadline, || dir.join("ready").exists()) {
                return Err(format!("the child never started\n{}", proc.stderr_text()));
            }
            // Let the holder's watch reach the server before we strike, so
            // we measure a settled holder, not one still starting up.
            sleep(Duration::from_millis(50));
            let session = holder_session(&self.consul.addr, &key)?;
            let (path, expect) = match how {
                Loss::Release => (
                    format!("/v1/kv/{key}?release={session}&flags={LOCK_FLAG}"),
                    "true",
                ),
                Loss::DestroySession => (format!("/v1/session/destroy/{session}"), "true"),
            };
            let answer = http(&self.consul.addr, "PUT", &path)?;
            if answer.status != 200 || String::from_utf8_lossy(&answer.body).trim() != expect {
                return Err(format!(
                    "PUT {path} answered {} {}",
                    answer.status,
                    String::from_utf8_lossy(&answer.body)
                ));
            }
            let signalled = dir.join("signalled");
            if !wait_until(deadline, || {
                fs::read_to_string(&signalled).is_ok_and(|t| t.ends_with('\n'))
            }) {
                return Err(format!(
                    "the child was not signalled after the lock was lost\n{}",
                    proc.stderr_text()
                ));
            }
            let at: u64 = read_trimmed(&signalled)
                .parse()
                .map_err(|e| format!("bad timestamp in {}: {e}", signalled.display()))?;
            delays.push((at as f64 - answer.sent_ns as f64) / 1e6);
            let status = proc.wait(deadline)?;
            if tool == Tool::Lockrun && status.code() != Some(124) {
                return Err(format!(
                    "expected exit 124 after the loss; {}",
                    proc.failure(status)
                ));
            }
        }
        Ok(delays)
    }

    fn rss(&self, tool: Tool) -> Result<Rss, String> {
        let dir = self.dir("rss");
        let prefix = unique_prefix("rss");
        let d = sh_quote(&dir);
        let script = format!("touch {d}/ready; sleep 30 & wait");
        let mut proc = Proc::spawn(
            self.elect(tool, &prefix, &Job::Shell(script), false, false),
            &dir.join("stderr"),
        )?;
        let deadline = Instant::now() + PATIENCE;
        if !wait_until(deadline, || dir.join("ready").exists()) {
            return Err(format!("the child never started\n{}", proc.stderr_text()));
        }
        let pid = proc.pid();
        let mut supervisor_kib = 0;
        let mut supervisor_anon_kib = 0;
        let mut child_kib = None;
        let mut child_anon_kib = 0;
        for _ in 0..RSS_SAMPLES {
            sleep(Duration::from_millis(100));
            supervisor_kib = supervisor_kib.max(status_kib(pid, "VmRSS")?);
            supervisor_anon_kib = supervisor_anon_kib.max(status_kib(pid, "RssAnon")?);
            if let Some(child) = children(pid).first() {
                let kib = status_kib(*child, "VmRSS")?;
                child_kib = Some(child_kib.unwrap_or(0).max(kib));
                child_anon_kib = child_anon_kib.max(status_kib(*child, "RssAnon")?);
            }
        }
        let supervisor_hwm_kib = status_kib(pid, "VmHWM")?;
        let supervisor_parts = Parts::of(pid)?;
        let child_parts = match children(pid).first() {
            Some(child) => Some(Parts::of(*child)?),
            None => None,
        };
        // `consul lock`'s child is COMMAND; lockrun's is the guard.
        let mut proportional_kib = rollup_kib(pid, "Pss")?;
        if let (Tool::Lockrun, Some(guard)) = (tool, children(pid).first()) {
            proportional_kib += rollup_kib(*guard, "Pss")?;
        }
        // SIGTERM is forwarded to the child, which ends the run normally.
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
        proc.wait(deadline)?;
        Ok(Rss {
            tool,
            supervisor_kib,
            supervisor_anon_kib,
            supervisor_hwm_kib,
            child_kib,
            child_anon_kib,
            proportional_kib,
            supervisor_parts,
            child_parts,
        })
    }
}

// ---------------------------------------------------------------------------
// Results

struct ChainResult {
    handovers_ms: Vec<f64>,
    accounting: Option<Accounting>,
}

/// The wall time, cut into spawn -> first child start, first start -> last
/// end, and last end -> last exit.
struct SemaphoreRun {
    wall_s: f64,
    startup_ms: f64,
    span_s: f64,
    /// A slot's previous end -> its next start, for every slot handover.
    slot_handovers_ms: Vec<f64>,
    tail_ms: f64,
    max_concurrent: usize,
}

#[derive(Clone, Copy)]
enum Loss {
    Release,
    DestroySession,
}

struct Rss {
    tool: Tool,
    supervisor_kib: u64,
    /// The part of the resident set that is the process's own (heap,
    /// stacks, written data); the rest is files mapped from the page cache
    /// (the program's and the libraries' code and constants), shared with
    /// every other process that maps them.
    supervisor_anon_kib: u64,
    supervisor_hwm_kib: u64,
    child_kib: Option<u64>,
    child_anon_kib: u64,
    /// Supervisor and child together, each file page divided among the
    /// processes that map it (`Pss`): what they add to the host, where the
    /// resident sets count the guard's code, shared with lockrun, twice.
    proportional_kib: u64,
    supervisor_parts: Parts,
    child_parts: Option<Parts>,
}

/// A resident set cut by what the pages hold, from `/proc/PID/smaps`, in
/// KiB: where each MiB of the figure comes from (issue 46).
struct Parts {
    /// The program's own code (its executable mapping), as mapped from the
    /// page cache: what the process touched, rounded up by the kernel's
    /// fault-around to whole folios.
    code: u64,
    /// The program's other file pages: constants, unwind tables, relocations.
    constants: u64,
    /// Shared libraries' pages (libc, libm, the loader).
    libraries: u64,
    /// Anonymous pages: heap, stacks, relocated and written data.
    anonymous: u64,
}

impl Parts {
    fn of(pid: u32) -> Result<Parts, String> {
        let path = format!("/proc/{pid}/smaps");
        let text = fs::read_to_string(&path).map_err(|e| format!("read {path}: {e}"))?;
        let exe =
            fs::read_link(format!("/proc/{pid}/exe")).map_err(|e| format!("{pid}'s exe: {e}"))?;
        let exe = exe.to_string_lossy().into_owned();
        let mut parts = Parts {
            code: 0,
            constants: 0,
            libraries: 0,
            anonymous: 0,
        };
        // (is it the program's, is it code, is it a file) of the mapping
        // whose fields follow.
        let mut mapping = (false, false, false);
        let kib = |line: &str, field: &str| -> Option<u64> {
            line.strip_prefix(field)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        };
        let mut rss = 0;
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            // A mapping's header (`ADDR-ADDR PERMS OFFSET DEV INODE [NAME]`)
            // begins with no `Field:`.
            if words.len() >= 5 && !words[0].ends_with(':') {
                let name = words.get(5).copied().unwrap_or("");
                mapping = (name == exe, words[1].contains('x'), name.starts_with('/'));
            } else if let Some(value) = kib(line, "Rss:") {
                rss = value;
            } else if let Some(anonymous) = kib(line, "Anonymous:") {
                parts.anonymous += anonymous;
                let file = rss.saturating_sub(anonymous);
                match mapping {
                    (true, true, _) => parts.code += file,
                    (true, false, _) => parts.constants += file,
                    (false, _, true) => parts.libraries += file,
                    // [vdso] and the like.
                    _ => parts.libraries += file,
                }
            }
        }
        Ok(parts)
    }
}

impl fmt::Display for Parts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |kib: u64| kib as f64 / 1024.0;
        write!(
            f,
            "code {:.2}, constants {:.2}, libraries {:.2}, anonymous {:.2} MiB",
            mib(self.code),
            mib(self.constants),
            mib(self.libraries),
            mib(self.anonymous)
        )
    }
}

/// The requests of one chain, split into the winners' own work and what
/// waiting costs.
///
/// We count every request that arrived after the gate opened, plus the
/// blocking reads already waiting then (their answers deliver the first
/// handover). The winners' own work: each handover's successful acquire,
/// the holder's consistent reads (the read-back after acquiring and the
/// watch), its release and session destroy, and renewals (which follow the
/// clock, not handovers). The rest is the waiters': the blocking reads that
/// wake them, their failed acquires and the reads that follow. At the k-th
/// of N handovers N-k+1 contenders are waiting, so a chain has N(N+1)/2
/// waiter-handovers.
struct Accounting {
    waiter_handovers: usize,
    total: usize,
    winners: usize,
    wakeups: usize,
    failed_acquires: usize,
    other_reads: usize,
    other: usize,
}

impl Accounting {
    fn of(
        emulator: &Emulator,
        before: &[LoggedRequest],
        prefix: &str,
        waiters: usize,
    ) -> Accounting {
        let after = emulator.request_log();
        let ours = |r: &LoggedRequest| r.path.contains(&format!("/v1/kv/{prefix}/"));
        let pending = before
            .iter()
            .filter(|r| r.status.is_none() && !r.dropped && ours(r));
        let window = after.get(before.len()..).unwrap_or_default();
        let handovers = waiters;
        let mut a = Accounting {
            waiter_handovers: waiters * (waiters + 1) / 2,
            total: 0,
            winners: handovers,
            wakeups: 0,
            failed_acquires: 0,
            other_reads: 0,
            other: 0,
        };
        for r in pending.chain(window) {
            a.total += 1;
            let path = &r.path;
            match r.endpoint {
                Endpoint::SessionDestroy | Endpoint::SessionRenew | Endpoint::KvDelete => {
                    a.winners += 1
                }
                Endpoint::KvPut if path.contains("release=") => a.winners += 1,
                Endpoint::KvPut if path.contains("acquire=") => a.failed_acquires += 1,
                // The lock transaction: one per handover succeeds.
                Endpoint::Txn => a.failed_acquires += 1,
                Endpoint::KvGet if path.contains("consistent") => a.winners += 1,
                Endpoint::KvGet if path.contains("index=") => a.wakeups += 1,
                Endpoint::KvGet => a.other_reads += 1,
                _ => a.other += 1,
            }
        }
        // One acquire per handover succeeded; it was counted above as failed.
        a.failed_acquires = a.failed_acquires.saturating_sub(handovers);
        a
    }

    fn waiter_requests(&self) -> usize {
        self.total - self.winners
    }

    fn per_waiter_handover(&self) -> f64 {
        self.waiter_requests() as f64 / self.waiter_handovers as f64
    }

    fn add(&self, other: &Accounting) -> Accounting {
        Accounting {
            waiter_handovers: self.waiter_handovers + other.waiter_handovers,
            total: self.total + other.total,
            winners: self.winners + other.winners,
            wakeups: self.wakeups + other.wakeups,
            failed_acquires: self.failed_acquires + other.failed_acquires,
            other_reads: self.other_reads + other.other_reads,
            other: self.other + other.other,
        }
    }
}

impl fmt::Display for Accounting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requests, winners' own {}, waiters' {} (wake-up reads {}, failed acquires {}, \
             other reads {}, other {}) over {} waiter-handovers = {:.2}",
            self.total,
            self.winners,
            self.waiter_requests(),
            self.wakeups,
            self.failed_acquires,
            self.other_reads,
            self.other,
            self.waiter_handovers,
            self.per_waiter_handover()
        )
    }
}

#[derive(Clone, Copy)]
struct Stats {
    n: usize,
    min: f64,
    median: f64,
    p90: f64,
    max: f64,
}

impl Stats {
    fn of(mut v: Vec<f64>) -> Stats {
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            return Stats {
                n: 0,
                min: f64::NAN,
                median: f64::NAN,
                p90: f64::NAN,
                max: f64::NAN,
            };
        }
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        let p90 = v[((n as f64 * 0.9).ceil() as usize).clamp(1, n) - 1];
        Stats {
            n,
            min: v[0],
            median,
            p90,
            max: v[n - 1],
        }
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "n={} min {:.2} median {:.2} p90 {:.2} max {:.2} ms",
            self.n, self.min, self.median, self.p90, self.max
        )
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Unit {
    Ms,
    Sec,
    Mib,
    Req,
}

impl Unit {
    fn show(self, v: f64) -> String {
        match self {
            Unit::Ms => format!("{v:.1} ms"),
            Unit::Sec => format!("{v:.3} s"),
            Unit::Mib => format!("{v:.1} MiB"),
            Unit::Req => format!("{v:.2}"),
        }
    }
}

enum Figure {
    Value { v: f64, unit: Unit, note: String },
    NotApplicable(String),
    Failed(String),
}

impl Figure {
    fn value(v: f64, unit: Unit, note: &str) -> Figure {
        Figure::Value {
            v,
            unit,
            note: note.to_string(),
        }
    }

    fn show(&self) -> String {
        match self {
            Figure::Value { v, unit, note } if note.is_empty() => unit.show(*v),
            Figure::Value { v, unit, note } => format!("{} ({note})", unit.show(*v)),
            Figure::NotApplicable(_) => "n/a".into(),
            Figure::Failed(_) => "FAILED".into(),
        }
    }

    fn number(&self) -> Option<(f64, Unit)> {
        match self {
            Figure::Value { v, unit, .. } => Some((*v, *unit)),
            _ => None,
        }
    }
}

struct Row {
    scenario: String,
    lockrun: Figure,
    consul: Option<Figure>,
    /// Every target of the issue is an upper bound.
    target: Option<f64>,
    /// A target relative to `consul lock` in the same run: lockrun's figure
    /// at most this fraction of its.
    vs_consul: Option<f64>,
}

impl Row {
    fn new(
        scenario: &str,
        figures: Vec<(Tool, Result<Figure, String>)>,
        target: Option<f64>,
    ) -> Row {
        let mut lockrun = Figure::Failed("not run".into());
        let mut consul = None;
        for (tool, figure) in figures {
            let figure = figure.unwrap_or_else(Figure::Failed);
            match tool {
                Tool::Lockrun => lockrun = figure,
                Tool::ConsulLock => consul = Some(figure),
            }
        }
        Row {
            scenario: scenario.to_string(),
            lockrun,
            consul,
            target,
            vs_consul: None,
        }
    }

    fn vs_consul(mut self, fraction: f64) -> Row {
        self.vs_consul = Some(fraction);
        self
    }

    fn target_text(&self) -> String {
        if let Some(fraction) = self.vs_consul {
            return format!("<= {fraction}x consul lock");
        }
        match (self.target, self.lockrun.number()) {
            (Some(t), Some((_, unit))) => format!("<= {}", unit.show(t)),
            (Some(t), None) => format!("<= {t}"),
            (None, _) => "-".into(),
        }
    }

    fn verdict(&self) -> &'static str {
        if let Some(fraction) = self.vs_consul {
            return match (
                self.lockrun.number(),
                self.consul.as_ref().and_then(Figure::number),
            ) {
                _ if matches!(self.lockrun, Figure::Failed(_)) => "FAILED",
                (Some((l, _)), Some((c, _))) if l <= fraction * c => "met",
                (Some(_), Some(_)) => "MISSED",
                _ => "no consul",
            };
        }
        match (&self.lockrun, self.target) {
            (Figure::Failed(_), _) => "FAILED",
            (Figure::NotApplicable(_), _) | (_, None) => "-",
            (Figure::Value { v, .. }, Some(t)) if *v <= t => "met",
            (Figure::Value { .. }, Some(_)) => "MISSED",
        }
    }

    fn ratio(&self) -> String {
        match (
            self.consul.as_ref().and_then(Figure::number),
            self.lockrun.number(),
        ) {
            (Some((c, _)), Some((l, _))) if l > 0.0 => format!("{:.1}x", c / l),
            _ => "-".into(),
        }
    }
}

fn map_results<T>(
    results: &[(Tool, Result<T, String>)],
    f: impl Fn(&T) -> Figure,
) -> Vec<(Tool, Result<Figure, String>)> {
    results
        .iter()
        .map(|(tool, r)| (*tool, r.as_ref().map(&f).map_err(Clone::clone)))
        .collect()
}

fn print_table(rows: &[Row], compare: bool) {
    let mut lines = vec![vec![
        "scenario".to_string(),
        "lockrun".into(),
        "target".into(),
        "verdict".into(),
        "consul lock".into(),
        "consul/lockrun".into(),
    ]];
    for row in rows {
        let (consul, ratio) = if compare {
            (
                row.consul.as_ref().map(Figure::show).unwrap_or_default(),
                row.ratio(),
            )
        } else {
            ("skipped".into(), "-".into())
        };
        lines.push(vec![
            row.scenario.clone(),
            row.lockrun.show(),
            row.target_text(),
            row.verdict().into(),
            consul,
            ratio,
        ]);
    }
    let widths: Vec<usize> = (0..lines[0].len())
        .map(|c| {
            lines
                .iter()
                .map(|l| l[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for (i, line) in lines.iter().enumerate() {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        println!("{}", cells.join("  ").trim_end());
        if i == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            println!("{}", rule.join("  "));
        }
    }
    if !compare {
        println!("consul not on PATH: comparison skipped");
    }
    for row in rows {
        for (tool, figure) in [
            (Tool::Lockrun, Some(&row.lockrun)),
            (Tool::ConsulLock, row.consul.as_ref()),
        ] {
            match figure {
                Some(Figure::Failed(why)) => println!("{} / {tool}: {why}", row.scenario),
                Some(Figure::NotApplicable(why)) => {
                    println!("{} / {tool}: n/a: {why}", row.scenario)
                }
                _ => {}
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Child scripts and their event logs

/// A job that logs `start NS` and `end NS` to `DIR/events`; with `gate`, it
/// waits for `DIR/gate` to exist between the two (only the first holder of
/// a chain ever waits there).
/// What a contender runs.
enum Job {
    /// A `sh -c` script (lockrun's `--shell`).
    Shell(String),
    /// A program and its arguments, run without a shell.
    Exec(Vec<String>),
}

impl Job {
    /// This benchmark as the timed child: it logs `start`, waits for the
    /// `gate` file if asked, works for `ms`, logs `end`; it forks nothing.
    fn timed(dir: &Path, ms: u64, gate: bool) -> Job {
        let me = std::env::current_exe().expect("the benchmark's own path");
        Job::Exec(vec![
            me.display().to_string(),
            "__child".into(),
            dir.display().to_string(),
            if gate { "gate" } else { "-" }.into(),
            ms.to_string(),
        ])
    }

    fn lockrun_args(&self, cmd: &mut Command, key: &str) {
        match self {
            Job::Shell(script) => cmd.args(["--shell", key, "--", script]),
            Job::Exec(argv) => cmd.arg(key).arg("--").args(argv),
        };
    }

    /// The one command string `consul lock` takes (it runs it with `sh -c`).
    fn command_line(&self) -> String {
        match self {
            Job::Shell(script) => script.clone(),
            Job::Exec(argv) => argv
                .iter()
                .map(|a| sh_quote(Path::new(a)))
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// The timed child (see [`Job::timed`]): `DIR GATE MS`.
fn child_main(args: &[String]) -> ! {
    let [dir, gate, ms] = args else {
        eprintln!("usage: __child DIR GATE|- MS");
        std::process::exit(2);
    };
    let dir = Path::new(dir);
    let log = |what: &str| {
        // One write of one line with O_APPEND: lines from contenders never
        // interleave.
        let line = format!("{what} {}\n", realtime_ns());
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("events"))
            .expect("open the events file");
        f.write_all(line.as_bytes()).expect("log an event");
    };
    log("start");
    if gate == "gate" {
        while !dir.join("gate").exists() {
            sleep(Duration::from_millis(1));
        }
    }
    sleep(Duration::from_millis(ms.parse().expect("MS")));
    log("end");
    std::process::exit(0);
}

/// `(nanoseconds, is_start)`, in time order.
fn read_events(path: &Path) -> Result<Vec<(u64, bool)>, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let mut events = Vec::new();
    for line in text.lines() {
        let (kind, at) = line
            .split_once(' ')
            .ok_or_else(|| format!("bad event line `{line}`"))?;
        let at: u64 = at
            .trim()
            .parse()
            .map_err(|_| format!("bad event line `{line}`"))?;
        events.push((at, kind == "start"));
    }
    events.sort();
    Ok(events)
}

/// Next start minus previous end, in ms. Under a lock, starts and ends must
/// alternate; anything else means two children overlapped.
fn handovers(events: &[(u64, bool)]) -> Result<Vec<f64>, String> {
    let mut out = Vec::new();
    let mut running = false;
    let mut last_end = None;
    for &(at, is_start) in events {
        if is_start {
            if running {
                return Err("two children ran at once: mutual exclusion violated".into());
            }
            running = true;
            if let Some(end) = last_end {
                out.push((at - end) as f64 / 1e6);
            }
        } else {
            running = false;
            last_end = Some(at);
        }
    }
    Ok(out)
}

/// For a semaphore of `limit` slots: each start after the first `limit`
/// took the slot of the earliest end not yet handed over.
fn slot_handovers(events: &[(u64, bool)], limit: usize) -> Vec<f64> {
    let mut free_since = std::collections::VecDeque::new();
    let mut out = Vec::new();
    let mut started = 0;
    for &(at, is_start) in events {
        if !is_start {
            free_since.push_back(at);
        } else {
            started += 1;
            if started > limit {
                if let Some(end) = free_since.pop_front() {
                    out.push((at - end) as f64 / 1e6);
                }
            }
        }
    }
    out
}

fn max_concurrent(events: &[(u64, bool)]) -> usize {
    let mut now = 0usize;
    let mut max = 0;
    for &(_, is_start) in events {
        if is_start {
            now += 1;
            max = max.max(now);
        } else {
            now = now.saturating_sub(1);
        }
    }
    max
}

fn count_lines(path: &Path, prefix: &str) -> usize {
    fs::read_to_string(path)
        .map(|t| t.lines().filter(|l| l.starts_with(prefix)).count())
        .unwrap_or(0)
}

/// The median gap between two consecutive `date +%s%N` in one shell.
fn timestamp_probe() -> Result<f64, String> {
    let mut gaps = Vec::new();
    for _ in 0..7 {
        let mut sh = Command::new("sh");
        scrub(&mut sh);
        let out = sh
            .args(["-c", "date +%s%N; date +%s%N"])
            .output()
            .map_err(|e| format!("run sh: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let v: Vec<u64> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        if v.len() != 2 {
            return Err(format!("unexpected output `{text}`"));
        }
        gaps.push((v[1] - v[0]) as f64 / 1e6);
    }
    Ok(Stats::of(gaps).median)
}

/// `cargo bench` puts its target and toolchain directories on
/// LD_LIBRARY_PATH, and the dynamic loader then searches them at every exec
/// (lockrun, its guard, sh, date; about 0.1 ms each here), a cost no user
/// pays. Nothing we run needs them.
fn scrub(cmd: &mut Command) {
    cmd.env_remove("LD_LIBRARY_PATH");
}

fn sh_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

// ---------------------------------------------------------------------------
// Processes

/// A tool run in the background, SIGKILLed if dropped while running (a
/// lockrun takes its child down with it; [`sweep`] catches the rest).
struct Proc {
    child: Option<Child>,
    stderr: PathBuf,
    description: String,
}

impl Proc {
    fn spawn(mut cmd: Command, stderr: &Path) -> Result<Proc, String> {
        let description = format!("{cmd:?}");
        let file =
            fs::File::create(stderr).map_err(|e| format!("create {}: {e}", stderr.display()))?;
        cmd.stderr(file);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {description}: {e}"))?;
        Ok(Proc {
            child: Some(child),
            stderr: stderr.to_path_buf(),
            description,
        })
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    fn try_exit(&mut self) -> Option<ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    fn wait(&mut self, deadline: Instant) -> Result<ExitStatus, String> {
        let mut status = None;
        wait_until_every(deadline, Duration::from_millis(1), || {
            status = self.try_exit();
            status.is_some()
        });
        status.ok_or_else(|| {
            format!(
                "{} did not exit in time\n{}",
                self.description,
                self.stderr_text()
            )
        })
    }

    fn stderr_text(&self) -> String {
        fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn failure(&self, status: ExitStatus) -> String {
        format!(
            "{} exited with {status}\n--- stderr ---\n{}",
            self.description,
            self.stderr_text()
        )
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// SIGKILLs any process whose command line names `marker` (our scratch
/// directory, which only the scripts we started mention), so a failed
/// scenario leaves nothing running.
fn sweep(marker: &Path) {
    let marker = marker.to_string_lossy().into_owned();
    let me = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmdline).contains(&marker) {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
    }
}

/// A `kB` field of `/proc/PID/status`.
fn status_kib(pid: u32, field: &str) -> Result<u64, String> {
    proc_kib(pid, "status", field)
}

/// A field of `/proc/PID/smaps_rollup`, in KiB.
fn rollup_kib(pid: u32, field: &str) -> Result<u64, String> {
    proc_kib(pid, "smaps_rollup", field)
}

/// A `Field: N kB` line of `/proc/PID/FILE`.
fn proc_kib(pid: u32, file: &str, field: &str) -> Result<u64, String> {
    let path = format!("/proc/{pid}/{file}");
    let text = fs::read_to_string(&path).map_err(|e| format!("read {path}: {e}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no {field} in {path}"))
}

/// The children of `pid`, from every thread's `children` list.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.flatten() {
            if let Ok(text) = fs::read_to_string(task.path().join("children")) {
                out.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<u32>().ok()),
                );
            }
        }
    }
    out
}

fn wait_until(deadline: Instant, cond: impl FnMut() -> bool) -> bool {
    wait_until_every(deadline, Duration::from_millis(2), cond)
}

fn wait_until_every(deadline: Instant, pause: Duration, mut cond: impl FnMut() -> bool) -> bool {
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        sleep(pause);
    }
}

/// What one tool did over the idle window: the requests Consul saw (when
/// they could be counted) and what its own processes cost this host.
struct IdleRun {
    requests: Option<IdleRequests>,
    cost: ProcessCost,
}

impl IdleRun {
    fn renewals(&self) -> Option<usize> {
        self.requests.as_ref().map(|r| r.renewals)
    }
}

/// CPU time and wake-ups of a tool's own processes: each lockrun and its
/// guard (not COMMAND, the guard's child), or each `consul lock` (not
/// COMMAND, its child). The job is the same program under both tools, so
/// leaving it out compares the tools alone.
#[derive(Clone, Default)]
struct ProcessCost {
    /// Per process: utime + stime in clock ticks (`/proc/PID/stat` fields
    /// 14 and 15), which count the threads that have ended too.
    ticks: std::collections::BTreeMap<u32, u64>,
    /// Per process: voluntary and involuntary context switches summed over
    /// its threads (`/proc/PID/task/*/status`); a thread that ends takes
    /// its own with it, which an idle tool's threads do not.
    switches: std::collections::BTreeMap<u32, u64>,
    /// Per process: time on a CPU in nanoseconds, summed over its threads
    /// (`/proc/PID/task/*/schedstat`), where ticks are 10 ms coarse.
    run_ns: std::collections::BTreeMap<u32, u64>,
    window: Duration,
}

impl ProcessCost {
    /// A snapshot of `pids`, and of each lockrun's children (its guard).
    fn of(tool: Tool, pids: &[u32]) -> Result<ProcessCost, String> {
        let mut cost = ProcessCost::default();
        for &pid in pids {
            let mut own = vec![pid];
            if tool == Tool::Lockrun {
                own.extend(children(pid));
            }
            for p in own {
                let stat = fs::read_to_string(format!("/proc/{p}/stat"))
                    .map_err(|e| format!("read /proc/{p}/stat: {e}"))?;
                // After the command name: field 3 (state) is index 0, so
                // utime and stime (fields 14 and 15) are 11 and 12.
                let fields: Vec<&str> = stat
                    .rsplit_once(')')
                    .map(|(_, rest)| rest)
                    .unwrap_or("")
                    .split_whitespace()
                    .collect();
                let ticks = (11..13)
                    .map(|i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
                    .sum::<Option<u64>>()
                    .ok_or_else(|| format!("no utime and stime in /proc/{p}/stat"))?;
                let (mut switches, mut run_ns) = (0, 0);
                let tasks = fs::read_dir(format!("/proc/{p}/task"))
                    .map_err(|e| format!("list /proc/{p}/task: {e}"))?;
                for task in tasks.flatten() {
                    // A thread may end between the listing and the read.
                    if let Ok(status) = fs::read_to_string(task.path().join("status")) {
                        switches += status
                            .lines()
                            .filter(|l| l.contains("ctxt_switches:"))
                            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                            .sum::<u64>();
                    }
                    if let Ok(schedstat) = fs::read_to_string(task.path().join("schedstat")) {
                        run_ns += schedstat
                            .split_whitespace()
                            .next()
                            .and_then(|n| n.parse::<u64>().ok())
                            .unwrap_or(0);
                    }
                }
                cost.ticks.insert(p, ticks);
                cost.switches.insert(p, switches);
                cost.run_ns.insert(p, run_ns);
            }
        }
        Ok(cost)
    }

    /// The cost between `before` and this later snapshot of the same
    /// processes; one that came or went meanwhile spoils the comparison.
    fn since(&self, before: &ProcessCost) -> Result<ProcessCost, String> {
        if self.ticks.keys().ne(before.ticks.keys()) {
            let was: Vec<_> = before.ticks.keys().collect();
            let now: Vec<_> = self.ticks.keys().collect();
            return Err(format!(
                "the tool's processes changed during the window: {was:?} then {now:?}"
            ));
        }
        let delta = |now: &std::collections::BTreeMap<u32, u64>,
                     was: &std::collections::BTreeMap<u32, u64>| {
            now.iter()
                .map(|(p, n)| (*p, n.saturating_sub(was[p])))
                .collect()
        };
        Ok(ProcessCost {
            ticks: delta(&self.ticks, &before.ticks),
            switches: delta(&self.switches, &before.switches),
            run_ns: delta(&self.run_ns, &before.run_ns),
            window: IDLE_WINDOW,
        })
    }

    /// Time on a CPU, from schedstat: each idle process spends about a
    /// millisecond a minute, which its ticks round down to nothing.
    fn cpu_ms(&self) -> f64 {
        self.run_ns.values().sum::<u64>() as f64 / 1e6
    }

    fn tick_ms(&self) -> f64 {
        self.ticks.values().sum::<u64>() as f64 * 1000.0 / clock_ticks_per_second()
    }

    fn cpu_ms_per_second(&self) -> f64 {
        self.cpu_ms() / self.window.as_secs_f64()
    }

    fn wakeups(&self) -> u64 {
        self.switches.values().sum()
    }

    fn wakeups_per_second(&self) -> f64 {
        self.wakeups() as f64 / self.window.as_secs_f64()
    }

    fn describe(&self, renewals: Option<usize>) -> String {
        let secs = self.window.as_secs_f64();
        let per_renewal = |v: f64, unit: &str| match renewals {
            Some(n) if n > 0 => format!(", {:.3}{unit} per session renewal", v / n as f64),
            _ => String::new(),
        };
        format!(
            "{} processes: on a CPU {:.2} ms/s (schedstat{}; utime+stime {:.2} ms/s, \
             in 10 ms ticks per process); wake-ups {:.2}/s ({} context switches{})",
            self.ticks.len(),
            self.cpu_ms() / secs,
            per_renewal(self.cpu_ms(), " ms"),
            self.tick_ms() / secs,
            self.wakeups_per_second(),
            self.wakeups(),
            per_renewal(self.wakeups() as f64, ""),
        )
    }
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`, almost always
/// 100), the unit of `/proc/PID/stat`'s times.
fn clock_ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        command_output(Command::new("getconf").arg("CLK_TCK"))
            .trim()
            .parse()
            .unwrap_or(100.0)
    })
}

/// Requests in the idle window, by kind.
#[derive(Default)]
struct IdleRequests {
    renewals: usize,
    blocking_reads: usize,
    lists: usize,
    reads: usize,
    other: usize,
}

impl IdleRequests {
    fn add(&mut self, method: &str, url: &str) {
        let count = if url.starts_with("/v1/session/renew/") {
            &mut self.renewals
        } else if method == "GET" && url.starts_with("/v1/kv/") && url.contains("recurse") {
            &mut self.lists
        } else if method == "GET" && url.starts_with("/v1/kv/") && url.contains("index=") {
            &mut self.blocking_reads
        } else if method == "GET" && url.starts_with("/v1/kv/") {
            &mut self.reads
        } else {
            &mut self.other
        };
        *count += 1;
    }

    fn total(&self) -> usize {
        self.renewals + self.blocking_reads + self.lists + self.reads + self.other
    }

    fn per_second(&self, n: usize) -> f64 {
        n as f64 / IDLE_WINDOW.as_secs_f64()
    }
}

impl fmt::Display for IdleRequests {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rate = |n| format!("{:.2}/s", self.per_second(n));
        write!(
            f,
            "{} requests, {}: session renewals {}, blocking reads {}, queue listings {}, \
             other reads {}, other {}",
            self.total(),
            rate(self.total()),
            rate(self.renewals),
            rate(self.blocking_reads),
            rate(self.lists),
            rate(self.reads),
            rate(self.other)
        )
    }
}

/// The method and URL of a request in an agent's debug log: Consul 1.15's
/// `Request finished: method=GET url="/v1/kv/k?index=7&wait=15000ms" ...`,
/// or 1.6's `http: Request GET /v1/kv/k?index=7&wait=15000ms (15.0s) ...`.
fn logged_request(line: &str) -> Option<(&str, &str)> {
    if let Some((_, rest)) = line.split_once("Request finished: method=") {
        let (method, rest) = rest.split_once(" url=")?;
        let url = match rest.strip_prefix('"') {
            Some(quoted) => quoted.split('"').next()?,
            None => rest.split(' ').next()?,
        };
        return Some((method, url));
    }
    let (_, rest) = line.split_once("http: Request ")?;
    let mut words = rest.split(' ');
    Some((words.next()?, words.next()?))
}

// ---------------------------------------------------------------------------
// A minimal HTTP client: one connection per request, so we can stamp the
// moment a request leaves (the connection is set up before).

struct Answer {
    status: u16,
    body: Vec<u8>,
    /// Wall-clock nanoseconds just before the request was written.
    sent_ns: u64,
}

/// Runs of each part of a handover timed alone.
const PART_RUNS: usize = 20;

/// The wall time of one run of `cmd`, its output dropped, in ms.
/// A session of no lock-delay made on `conn`, for timing requests.
fn session_on(conn: &mut Warm) -> Result<String, String> {
    let session = conn.send(
        "PUT",
        "/v1/session/create",
        br#"{"TTL":"60s","LockDelay":"0s"}"#,
    )?;
    serde_json::from_slice::<serde_json::Value>(&session)
        .ok()
        .and_then(|v| v["ID"].as_str().map(str::to_string))
        .ok_or_else(|| "no session ID".to_string())
}

fn wall_ms(cmd: &mut Command) -> f64 {
    let started = Instant::now();
    let _ = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status();
    started.elapsed().as_secs_f64() * 1000.0
}

/// One kept-alive connection to Consul's HTTP API, as lockrun keeps its
/// own: requests timed on it pay no connect.
struct Warm {
    stream: TcpStream,
    addr: String,
}

impl Warm {
    fn connect(addr: &str) -> Result<Warm, String> {
        let stream = TcpStream::connect(addr).map_err(|e| format!("connect to {addr}: {e}"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .and_then(|()| stream.set_nodelay(true))
            .map_err(|e| format!("{addr}: {e}"))?;
        Ok(Warm {
            stream,
            addr: addr.to_string(),
        })
    }

    /// Sends one request and reads its answer (Consul's carry a length);
    /// its body, or an error for any status but 200.
    fn send(&mut self, method: &str, path: &str, body: &[u8]) -> Result<Vec<u8>, String> {
        let fail = |e: std::io::Error| format!("{method} {path}: {e}");
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            body.len()
        );
        self.stream.write_all(head.as_bytes()).map_err(fail)?;
        self.stream.write_all(body).map_err(fail)?;
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = self.stream.read(&mut buf).map_err(fail)?;
            if n == 0 {
                return Err(format!("{method} {path}: Consul closed the connection"));
            }
            raw.extend_from_slice(&buf[..n]);
            let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or_else(|| format!("{method} {path}: an answer without a length"))?;
            if raw.len() < split + 4 + length {
                continue;
            }
            if !head.starts_with("http/1.1 200") {
                return Err(format!(
                    "{method} {path}: {}",
                    head.lines().next().unwrap_or("")
                ));
            }
            return Ok(raw[split + 4..split + 4 + length].to_vec());
        }
    }
}

fn http(addr: &str, method: &str, path: &str) -> Result<Answer, String> {
    let fail = |e: std::io::Error| format!("{method} {path} to {addr}: {e}");
    let mut stream = TcpStream::connect(addr).map_err(fail)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(fail)?;
    stream.set_nodelay(true).map_err(fail)?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let sent_ns = realtime_ns();
    stream.write_all(request.as_bytes()).map_err(fail)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(fail)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("{method} {path}: malformed answer"))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{method} {path}: no status"))?;
    let mut body = raw[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    Ok(Answer {
        status,
        body,
        sent_ns,
    })
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&raw[..eol]);
        let size_text = size_text.split(';').next().unwrap_or("").trim().to_string();
        let Ok(size) = usize::from_str_radix(&size_text, 16) else {
            break;
        };
        raw = &raw[eol + 2..];
        if size == 0 || raw.len() < size {
            break;
        }
        out.extend_from_slice(&raw[..size]);
        raw = raw.get(size + 2..).unwrap_or_default();
    }
    out
}

/// The session holding `key`.
fn holder_session(addr: &str, key: &str) -> Result<String, String> {
    let answer = http(addr, "GET", &format!("/v1/kv/{key}"))?;
    let entries: serde_json::Value = serde_json::from_slice(&answer.body)
        .map_err(|e| format!("GET /v1/kv/{key} answered {}: {e}", answer.status))?;
    entries[0]["Session"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .ok_or_else(|| format!("nobody holds `{key}`"))
}

// ---------------------------------------------------------------------------
// Small things

/// CPU time of the whole machine and of this process tree (the emulator,
/// every lockrun and child we reaped), to tell whether other work competed
/// with the benchmark: on a 2-core machine it shifts every figure.
struct CpuTimes {
    machine_busy: u64,
    machine_total: u64,
    ours: u64,
}

impl CpuTimes {
    fn now() -> CpuTimes {
        let stat = read_trimmed("/proc/stat");
        let ticks: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .filter_map(|t| t.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal ...
        let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
        let total: u64 = ticks.iter().take(8).sum();
        let own = read_trimmed("/proc/self/stat");
        let fields: Vec<&str> = own
            .rsplit_once(')')
            .map(|(_, rest)| rest)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        // After the command name: state ppid pgrp session tty tpgid flags
        // minflt cminflt majflt cmajflt utime stime cutime cstime.
        let ours = (11..15)
            .filter_map(|i| fields.get(i)?.parse::<u64>().ok())
            .sum();
        CpuTimes {
            machine_busy: total - idle,
            machine_total: total,
            ours,
        }
    }

    fn report(&self) -> String {
        let now = CpuTimes::now();
        let total = now.machine_total.saturating_sub(self.machine_total).max(1) as f64;
        let busy = now.machine_busy.saturating_sub(self.machine_busy) as f64;
        let ours = now.ours.saturating_sub(self.ours) as f64;
        let others = (busy - ours).max(0.0) / total * 100.0;
        let mut text = format!(
            "CPU busy {:.0}% of the machine, {:.0}% by others than this benchmark",
            busy / total * 100.0,
            others
        );
        if others > 10.0 {
            text.push_str(
                " (other work competed: figures are pessimistic, rerun on a quiet machine)",
            );
        }
        text
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn realtime_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// `bench/<scenario>-<random>`: every run gets its own keys, so runs can
/// share a real agent and never see each other's lock-delays.
fn unique_prefix(scenario: &str) -> String {
    format!("bench/{scenario}-{:016x}", random_u64())
}

/// Random bits without a dependency: std's `RandomState` is seeded from the
/// OS, and hashing a counter with it gives independent values.
fn random_u64() -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish()
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn cpus() -> usize {
    std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(0)
}

fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name") || l.starts_with("Hardware"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

fn read_trimmed(path: impl AsRef<Path>) -> String {
    fs::read_to_string(path)
        .map(|t| t.trim().to_string())
        .unwrap_or_default()
}

fn command_output(cmd: &mut Command) -> String {
    cmd.stdin(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("cannot run: {e}"))
}
