//! Each backend without a server we can start here against its engine's own
//! tool, in the same run: `--backend local` against `flock(1)`, and
//! `--backend etcd` against `etcdctl lock` on an etcd this benchmark starts
//! (when `etcd` and `etcdctl` are on PATH): an uncontended run, a handover
//! with one waiter and with twenty contenders, as the children saw it;
//! and `--backend postgres` against `psql` holding
//! `pg_advisory_lock` on the same lock id while it runs the child (`\!`),
//! on a throwaway PostgreSQL cluster this benchmark starts (when
//! PostgreSQL's server binaries are in /usr/lib/postgresql). Where the peer
//! has a shared mode, eight readers started at once on a free lock
//! (`elect -s` against `flock -s` and against psql's
//! `pg_advisory_lock_shared`): the time until the last child started, all
//! holding at once. (`benches/lockrun.rs` does the same for Consul.)
//!
//! Run it with `cargo bench --bench peers`; `LOCKRUN_BENCH_BIN=PATH` runs
//! another build of lockrun instead of this one's, and
//! `LOCKRUN_BENCH_ROUNDS=N` takes N times the runs and handovers. The timed child is this very
//! program run as `__child LOG MS`: it appends a `start` and an `end` line
//! with nanosecond wall-clock timestamps and forks nothing, so a handover
//! (the next start minus the previous end) is the tool's own cost. Under
//! `cargo test --all-targets` (no `--bench`) it does nothing.

use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const PATIENCE: Duration = Duration::from_secs(30);
const UNCONTENDED_RUNS: usize = 30;
/// Runs of one tool before the other's turn.
const UNCONTENDED_ROUND: usize = 3;
/// Long enough for every waiter to queue behind the first holder.
const JOB_MS: u64 = 300;
/// (contenders, chains).
const HANDOVERS: [(usize, usize); 2] = [(2, 10), (20, 2)];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == "__child") {
        child_main(&args[2..]);
        return;
    }
    if !args.iter().any(|a| a == "--bench") {
        println!("peers benchmark: skipped (run it with `cargo bench --bench peers`)");
        return;
    }
    // Another build of lockrun, to compare binaries in one session.
    let lockrun = std::env::var_os("LOCKRUN_BENCH_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_lockrun")),
        PathBuf::from,
    );
    let me = std::env::current_exe().expect("own path");
    // `cargo bench --bench peers -- postgres` measures only that backend.
    let only: Vec<&String> = args[1..].iter().filter(|a| !a.starts_with('-')).collect();
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| name.contains(o.as_str()));
    if !wanted("local") {
    } else if works("flock", &["--version"]) {
        compare(
            "local backend vs flock(1)",
            "flock(1)",
            [Tool::Local(lockrun.clone()), Tool::Flock],
            &me,
            Some(1.0),
        );
    } else {
        println!("flock(1) is missing (util-linux): local not measured");
    }
    if !wanted("etcd") {
    } else if works("etcd", &["--version"]) && works("etcdctl", &["version"]) {
        let etcd = Etcd::start();
        compare(
            "etcd backend vs etcdctl lock",
            "etcdctl",
            [
                Tool::Etcd(lockrun.clone(), etcd.endpoint.clone()),
                Tool::Etcdctl(etcd.endpoint.clone()),
            ],
            &me,
            Some(0.5),
        );
    } else {
        println!("etcd or etcdctl is missing: etcd not measured (apt-get install etcd-server etcd-client)");
    }
    match wanted("postgres").then(Postgres::start) {
        None => {}
        Some(Some(pg)) => compare(
            "postgres backend vs psql holding pg_advisory_lock",
            "psql",
            [
                Tool::Postgres(lockrun.clone(), pg.url.clone()),
                Tool::Psql(pg.psql.clone(), pg.url.clone()),
            ],
            &me,
            Some(1.0),
        ),
        Some(None) => println!(
            "PostgreSQL's server binaries are missing: postgres not measured (apt-get install postgresql)"
        ),
    }
}

/// A PostgreSQL cluster of the benchmark's own on loopback, run as
/// `nobody` when we are root (the server refuses root), stopped when
/// dropped.
struct Postgres {
    url: String,
    psql: PathBuf,
    child: Child,
    _data: tempfile::TempDir,
}

impl Postgres {
    fn start() -> Option<Postgres> {
        let bin = fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("bin"))
            .filter(|b| b.join("initdb").exists() && b.join("postgres").exists())
            .max()?;
        let data = scratch();
        let root = nix_is_root();
        let as_owner = |program: &str| {
            let mut cmd = if root {
                let mut cmd = Command::new("setpriv");
                cmd.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]);
                cmd.arg(bin.join(program));
                cmd
            } else {
                Command::new(bin.join(program))
            };
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
            cmd
        };
        if root {
            let ok = Command::new("chown")
                .arg("nobody:nogroup")
                .arg(data.path())
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "chown of the cluster dir failed");
        }
        let cluster = data.path().join("data");
        let ok = as_owner("initdb")
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(&cluster)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "initdb failed");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a port")
            .port();
        let child = as_owner("postgres")
            .arg("-D")
            .arg(&cluster)
            .args(["-p", &port.to_string(), "-k"])
            .arg(data.path())
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(["-c", "max_connections=100"])
            .spawn()
            .expect("start postgres");
        let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
        let psql = bin.join("psql");
        let deadline = Instant::now() + PATIENCE;
        while !Command::new(&psql)
            .args(["-X", "-q", "-d", &url, "-c", "select 1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            assert!(Instant::now() < deadline, "postgres did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(Postgres {
            url,
            psql,
            child,
            _data: data,
        })
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT: a fast shutdown that ends every session.
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn nix_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// The documented lock id of `key`, as a psql script computes it.
fn pg_lock_id_sql(key: &str) -> String {
    format!("('x' || substr(md5('{key}'), 1, 16))::bit(64)::bigint")
}

fn works(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `goal`: the handover goal, as a ratio to the peer's (issue 34).
fn compare(title: &str, peer: &str, tools: [Tool; 2], me: &Path, goal: Option<f64>) {
    println!("\n{title}, medians; ratio = lockrun / {peer}\n");
    println!(
        "{:<44} {:>12} {:>12} {:>7}",
        "figure", "lockrun", peer, "ratio"
    );
    // Run by run, the two tools alternate, so whatever else loads the
    // machine meanwhile weighs on both alike.
    let rounds = rounds();
    let mut times = [Vec::new(), Vec::new()];
    for _ in 0..rounds * UNCONTENDED_RUNS / UNCONTENDED_ROUND {
        for (tool, times) in tools.iter().zip(times.iter_mut()) {
            times.extend(uncontended(tool, me));
        }
    }
    let uncontended: Vec<f64> = times.iter().map(|t| median(t)).collect();
    row(
        "uncontended run of a child that forks nothing",
        &uncontended,
    );
    let mut one_waiter = Vec::new();
    for (contenders, chains) in HANDOVERS {
        let mut gaps = [Vec::new(), Vec::new()];
        for _ in 0..rounds * chains {
            for (tool, gaps) in tools.iter().zip(gaps.iter_mut()) {
                gaps.extend(handovers(tool, me, contenders, 1));
            }
        }
        let figures: Vec<f64> = gaps.iter().map(|g| median(g)).collect();
        let name = if contenders == 2 {
            "handover, one waiter".to_string()
        } else {
            format!("handover, {contenders} contenders")
        };
        row(&name, &figures);
        if contenders == 2 {
            one_waiter = figures;
        }
    }
    if tools.iter().all(Tool::has_shared) {
        let mut times = [Vec::new(), Vec::new()];
        for _ in 0..READER_ROUNDS {
            for (tool, times) in tools.iter().zip(times.iter_mut()) {
                times.push(readers_at_once(tool, me, READERS));
            }
        }
        let figures: Vec<f64> = times.iter().map(|t| median(t)).collect();
        row(
            &format!("{READERS} readers started at once, all in"),
            &figures,
        );
    }
    where_the_time_goes(&tools, me, &one_waiter, goal);
    resident_sets(&tools, me);
}

/// How many times the usual number of uncontended runs and handover
/// chains to measure: `LOCKRUN_BENCH_ROUNDS` (a whole number from 1), for
/// figures steadier than the default's, as comparing two builds needs.
fn rounds() -> usize {
    match std::env::var("LOCKRUN_BENCH_ROUNDS") {
        Err(_) => 1,
        Ok(text) => match text.parse::<usize>() {
            Ok(n) if n >= 1 => n,
            _ => panic!("LOCKRUN_BENCH_ROUNDS={text:?}: give a whole number from 1"),
        },
    }
}

/// Samples of the resident set while holding, the largest kept.
const RSS_SAMPLES: usize = 5;
/// Issue 46's goal for lockrun's supervisor and guard together, in MiB.
const RSS_GOAL_MIB: f64 = 8.0;

/// The figure `benches/lockrun.rs` prints for Consul, for this backend:
/// VmRSS while holding, the largest of [`RSS_SAMPLES`], of lockrun and its
/// guard together, against the peer's own process (its child is COMMAND).
fn resident_sets(tools: &[Tool; 2], me: &Path) {
    let kib: Vec<(u64, u64)> = tools.iter().map(|tool| resident_set(tool, me)).collect();
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "\nresident set while holding (VmRSS, max of {RSS_SAMPLES} samples): \
         lockrun supervisor {:.2} + guard {:.2} = {:.2} MiB (goal {RSS_GOAL_MIB} MiB: {}); the peer {:.2} MiB",
        mib(kib[0].0),
        mib(kib[0].1),
        mib(kib[0].0 + kib[0].1),
        if mib(kib[0].0 + kib[0].1) <= RSS_GOAL_MIB { "met" } else { "not met" },
        mib(kib[1].0),
    );
}

/// The holder's VmRSS and, for lockrun, its guard's (its one child), in
/// KiB, sampled while the child sleeps.
fn resident_set(tool: &Tool, me: &Path) -> (u64, u64) {
    let dir = scratch();
    let log = dir.path().join("log");
    let log_s = log.to_str().expect("utf-8 path");
    let me = me.to_str().expect("utf-8 path");
    let ms = (RSS_SAMPLES as u64 + 5) * 100;
    let holder = tool
        .command(dir.path(), "k", &[me, "__child", log_s, &ms.to_string()])
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + PATIENCE;
    while !fs::read_to_string(&log).is_ok_and(|t| t.contains("start")) {
        assert!(
            Instant::now() < deadline,
            "the holder's child never started"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let pid = holder.id();
    let guarded = matches!(tool, Tool::Local(_) | Tool::Etcd(..) | Tool::Postgres(..));
    let (mut own, mut guard) = (0, 0);
    for _ in 0..RSS_SAMPLES {
        std::thread::sleep(Duration::from_millis(100));
        own = own.max(vm_rss(pid));
        if guarded {
            guard = guard.max(children(pid).first().map_or(0, |&g| vm_rss(g)));
        }
    }
    finish(holder);
    (own, guard)
}

/// `VmRSS` of `pid` in KiB (0 once it is gone).
fn vm_rss(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// The children of `pid`, from every thread's `children` list.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.flatten() {
            if let Ok(text) = fs::read_to_string(task.path().join("children")) {
                out.extend(
                    text.split_whitespace()
                        .filter_map(|w| w.parse::<u32>().ok()),
                );
            }
        }
    }
    out
}

/// Readers started together, and how many times.
const READERS: usize = 8;
const READER_ROUNDS: usize = 5;

/// `n` readers (`-s`, `flock -s`, `pg_advisory_lock_shared`) spawned at
/// once on a free lock, each child holding long enough for all to be in:
/// ms from the spawns to the last child's start, as the children saw it.
/// Every child must start before the first one ends: all held at once.
fn readers_at_once(tool: &Tool, me: &Path, n: usize) -> f64 {
    let me = me.to_str().expect("utf-8 path");
    let dir = scratch();
    let log = dir.path().join("log");
    let log_s = log.to_str().expect("utf-8 path");
    // One untimed run first: it creates the lock file (local).
    finish(
        tool.command_as(dir.path(), "k", &[me, "__child", log_s, "0"], true)
            .spawn()
            .expect("spawn"),
    );
    fs::remove_file(&log).expect("log");
    let job = (JOB_MS * 4).to_string();
    let began = now_ns();
    let readers: Vec<Child> = (0..n)
        .map(|_| {
            tool.command_as(dir.path(), "k", &[me, "__child", log_s, &job], true)
                .spawn()
                .expect("spawn")
        })
        .collect();
    for child in readers {
        finish(child);
    }
    let text = fs::read_to_string(&log).expect("log");
    let at = |kind: &str| -> Vec<u128> {
        text.lines()
            .filter(|l| l.starts_with(kind))
            .map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .expect("time")
                    .parse()
                    .expect("ns")
            })
            .collect()
    };
    let (starts, ends) = (at("start"), at("end"));
    assert_eq!(starts.len(), n, "every reader ran: {text}");
    let last_start = *starts.iter().max().expect("a start");
    let first_end = *ends.iter().min().expect("an end");
    assert!(
        last_start < first_end,
        "the readers did not all hold at once ({JOB_MS} ms × 4 each): {text}"
    );
    (last_start - began) as f64 / 1e6
}

/// Runs of each part measured on its own.
const PART_RUNS: usize = 20;

/// What a handover is made of, each part measured on its own in the same
/// run: the child's own start (in every handover, for either tool), the
/// program's own start (`--version`: off the handover's path, but most of
/// an uncontended run), and the one engine write a handover cannot do
/// without (etcd's revoke, PostgreSQL's unlock); what is left is each tool's own share: its
/// processes waking, deciding and handing on. `goal`: the handover goal,
/// as a ratio to the peer's.
fn where_the_time_goes(tools: &[Tool; 2], me: &Path, one_waiter: &[f64], goal: Option<f64>) {
    let child = median(&(0..PART_RUNS).map(|_| child_start(me)).collect::<Vec<_>>());
    let mut starts = [Vec::new(), Vec::new()];
    for _ in 0..PART_RUNS {
        for (tool, times) in tools.iter().zip(starts.iter_mut()) {
            times.push(tool.program_start());
        }
    }
    let start: Vec<f64> = starts.iter().map(|t| median(t)).collect();
    let write = tools[0].engine_write();
    println!("\nwhere the time goes (medians of {PART_RUNS}, each part alone, in this run):");
    println!("  the child's own start, spawned directly: {child:.2} ms (in every run and handover, either tool)");
    println!(
        "  the program's own start (`--version`): lockrun {:.2} ms, the peer {:.2} ms",
        start[0], start[1]
    );
    if let Some(ms) = write {
        println!("  the one engine write a handover needs, lockrun's way, on a warm connection: {ms:.2} ms");
    }
    let own = |i: usize| one_waiter[i] - child;
    println!(
        "  left of a one-waiter handover, less the child's start: lockrun {:.2} ms{}, the peer {:.2} ms",
        own(0),
        write.map_or(String::new(), |ms| format!(" (the write {ms:.2} ms of it)")),
        own(1)
    );
    if let (Some(goal), Some(ms)) = (goal, write) {
        // A goal below what physics allows gives way to the floor + 0.3 ms.
        let floor = ms + child;
        let wanted = (goal * one_waiter[1]).max(floor + 0.3);
        println!(
            "  the floor, the write and one exec of the child: {floor:.2} ms; the goal, the larger of {goal}x the peer's and the floor + 0.3 ms: {wanted:.2} ms; lockrun's handover {:.2} ms ({:.2}x the peer's)",
            one_waiter[0],
            one_waiter[0] / one_waiter[1]
        );
    }
    if let Some(goal) = goal {
        let room = goal * one_waiter[1] - child - write.unwrap_or(0.0);
        println!(
            "  the goal, {goal}x the peer's handover, leaves lockrun {room:.2} ms beyond the child's start{}: it takes {:.2}",
            if write.is_some() { " and the write" } else { "" },
            own(0) - write.unwrap_or(0.0)
        );
        // Issue 46: where the ratio lies below what physics allows, the
        // goal is the floor (the one write and the child's start) + 0.3 ms.
        if let Some(ms) = write {
            let floor = ms + child;
            let target = (goal * one_waiter[1]).max(floor + 0.3);
            println!(
                "  the floor, the write and the child's start: {floor:.2} ms; the goal, the larger of {goal}x the peer's {:.2} ms and the floor + 0.3 ms: {target:.2} ms; lockrun's handover {:.2} ms ({})",
                one_waiter[1],
                one_waiter[0],
                if one_waiter[0] <= target { "met" } else { "not met" }
            );
        }
    }
}

/// How long the child takes from its spawn to its `start` line, in ms.
fn child_start(me: &Path) -> f64 {
    let dir = scratch();
    let log = dir.path().join("log");
    let spawned = now_ns();
    finish(
        Command::new(me)
            .arg("__child")
            .arg(&log)
            .arg("0")
            .spawn()
            .expect("spawn the child"),
    );
    let text = fs::read_to_string(&log).expect("the child's log");
    let started: u128 = text
        .split_whitespace()
        .nth(1)
        .and_then(|t| t.parse().ok())
        .expect("a start time");
    (started - spawned) as f64 / 1e6
}

/// An etcd of the benchmark's own on loopback, stopped when dropped.
struct Etcd {
    endpoint: String,
    child: Child,
    _data: tempfile::TempDir,
}

impl Etcd {
    fn start() -> Etcd {
        let data = scratch();
        let port = |()| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a port")
                .port()
        };
        let (client, peer) = (port(()), port(()));
        let endpoint = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let child = Command::new("etcd")
            .arg("--data-dir")
            .arg(data.path())
            .args(["--listen-client-urls", &endpoint])
            .args(["--advertise-client-urls", &endpoint])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("default={peer_url}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start etcd");
        let deadline = Instant::now() + PATIENCE;
        while !works("etcdctl", &["--endpoints", &endpoint, "endpoint", "health"]) {
            assert!(Instant::now() < deadline, "etcd did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        Etcd {
            endpoint,
            child,
            _data: data,
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn row(name: &str, figures: &[f64]) {
    println!(
        "{name:<44} {:>9.2} ms {:>9.2} ms {:>7.2}",
        figures[0],
        figures[1],
        figures[0] / figures[1]
    );
}

enum Tool {
    Local(PathBuf),
    Flock,
    Etcd(PathBuf, String),
    Etcdctl(String),
    Postgres(PathBuf, String),
    /// psql and the URL.
    Psql(PathBuf, String),
}

impl Tool {
    /// The command that runs `child` (with its arguments) under the lock
    /// `key` in `dir`.
    fn command(&self, dir: &Path, key: &str, child: &[&str]) -> Command {
        self.command_as(dir, key, child, false)
    }

    /// As [`Tool::command`], a reader (`shared`) or a writer: `elect -s`,
    /// `flock -s`, `pg_advisory_lock_shared`. etcdctl has no shared mode.
    fn command_as(&self, dir: &Path, key: &str, child: &[&str], shared: bool) -> Command {
        let elect: &[&str] = if shared { &["elect", "-s"] } else { &["elect"] };
        let mut cmd = match self {
            Tool::Local(bin) => {
                let mut cmd = Command::new(bin);
                cmd.args(["--backend", "local", "--lock-dir"])
                    .arg(dir)
                    .args(elect)
                    .args([key, "--"]);
                cmd
            }
            Tool::Flock => {
                let mut cmd = Command::new("flock");
                if shared {
                    cmd.arg("-s");
                }
                cmd.arg(dir.join(key));
                cmd
            }
            Tool::Etcd(bin, endpoint) => {
                let mut cmd = Command::new(bin);
                cmd.args(["--backend", "etcd", "--endpoints", endpoint])
                    .args(elect)
                    .args([&etcd_key(dir, key), "--"]);
                cmd
            }
            Tool::Etcdctl(endpoint) => {
                assert!(!shared, "etcdctl has no shared lock");
                let mut cmd = Command::new("etcdctl");
                cmd.env("ETCDCTL_API", "3").args([
                    "--endpoints",
                    endpoint,
                    "lock",
                    &etcd_key(dir, key),
                    "--",
                ]);
                cmd
            }
            Tool::Postgres(bin, url) => {
                let mut cmd = Command::new(bin);
                cmd.args(["--backend", "postgres", "--dsn", url])
                    .args(elect)
                    .args([&etcd_key(dir, key), "--"]);
                cmd
            }
            Tool::Psql(psql, url) => {
                // The session holds the lock while `\!` runs the child.
                let mut cmd = Command::new(psql);
                let lock = format!(
                    "select pg_advisory_lock{}({})",
                    if shared { "_shared" } else { "" },
                    pg_lock_id_sql(&etcd_key(dir, key))
                );
                let run = format!("\\! {}", child.join(" "));
                cmd.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url])
                    .args(["-c", &lock, "-c", &run])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null());
                return cmd;
            }
        };
        cmd.args(child).stdin(Stdio::null()).stdout(Stdio::null());
        cmd
    }
}

impl Tool {
    /// Whether it takes a shared lock.
    fn has_shared(&self) -> bool {
        !matches!(self, Tool::Etcdctl(_))
    }

    /// The wall time of the program's `--version`, in ms: loading and
    /// starting it, and no more.
    fn program_start(&self) -> f64 {
        let (program, args): (&std::ffi::OsStr, &[&str]) = match self {
            Tool::Local(bin) | Tool::Etcd(bin, _) | Tool::Postgres(bin, _) => {
                (bin.as_os_str(), &["--version"])
            }
            Tool::Flock => ("flock".as_ref(), &["--version"]),
            Tool::Etcdctl(_) => ("etcdctl".as_ref(), &["version"]),
            Tool::Psql(psql, _) => (psql.as_os_str(), &["--version"]),
        };
        let started = Instant::now();
        let ok = Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "{} --version failed", Path::new(program).display());
        started.elapsed().as_secs_f64() * 1000.0
    }

    /// The median time of the one write a handover cannot do without, on a
    /// warm connection, in ms: etcd's lease revoke, as lockrun's client
    /// sends it over gRPC (each lease granted beforehand, untimed). `None`
    /// where no engine write is on the path.
    fn engine_write(&self) -> Option<f64> {
        if let Tool::Postgres(_, url) = self {
            return Some(pg_unlock(url));
        }
        use lockrun::backend::etcd::{Client, EtcdConfig};
        let Tool::Etcd(_, endpoint) = self else {
            return None;
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let config = EtcdConfig::plain(&[endpoint]).expect("the endpoint");
            let client = Client::new(&config).expect("a client");
            let mut times = Vec::new();
            for _ in 0..PART_RUNS + 1 {
                let lease = client
                    .grant(Duration::from_secs(60))
                    .await
                    .expect("a lease");
                let started = Instant::now();
                client
                    .revoke(lease.id, Duration::from_secs(5))
                    .await
                    .expect("a revoke");
                times.push(started.elapsed().as_secs_f64() * 1000.0);
            }
            // The first opened the connection.
            Some(median(&times[1..]))
        })
    }
}

fn child_main(args: &[String]) {
    let log = &args[0];
    let ms: u64 = args[1].parse().expect("MS");
    let mut file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("open log");
    // One write(2) per line: readers run at once and append to the same
    // log, and `writeln!` on a file writes each piece of its format alone.
    let line = |kind: &str| format!("{kind} {} {}\n", now_ns(), std::process::id());
    file.write_all(line("start").as_bytes()).expect("log");
    std::thread::sleep(Duration::from_millis(ms));
    file.write_all(line("end").as_bytes()).expect("log");
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos()
}

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("lockrun-bench-")
        .tempdir()
        .expect("temp dir")
}

fn finish(mut child: Child) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            assert!(status.success(), "a run failed: {status}");
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("a run took longer than {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Wall time of [`UNCONTENDED_ROUND`] whole runs of `true`-like children,
/// in ms.
fn uncontended(tool: &Tool, me: &Path) -> Vec<f64> {
    let dir = scratch();
    let log = dir.path().join("log");
    let log = log.to_str().expect("utf-8 path");
    let me = me.to_str().expect("utf-8 path");
    let mut times = Vec::new();
    // One untimed run first: it creates the lock file.
    for run in 0..UNCONTENDED_ROUND + 1 {
        let started = Instant::now();
        finish(
            tool.command(dir.path(), "k", &[me, "__child", log, "0"])
                .spawn()
                .expect("spawn"),
        );
        if run >= 1 {
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    times
}

/// A key unique to this scratch directory, for the engines with a server.
fn etcd_key(dir: &Path, key: &str) -> String {
    format!(
        "bench/{}/{key}",
        dir.file_name().expect("a name").to_string_lossy()
    )
}

impl Tool {
    /// Whether `waiters` contenders queue behind the holder of `key`.
    fn queued(&self, dir: &Path, key: &str, waiters: usize) -> bool {
        match self {
            Tool::Local(_) | Tool::Flock => {
                let Ok(inode) = fs::metadata(dir.join(key)).map(|m| m.ino()) else {
                    return false;
                };
                fs::read_to_string("/proc/locks").is_ok_and(|locks| {
                    locks
                        .lines()
                        .filter(|l| l.contains("->") && l.contains(&format!(":{inode} ")))
                        .count()
                        >= waiters
                })
            }
            Tool::Etcd(_, endpoint) | Tool::Etcdctl(endpoint) => Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", endpoint, "get", "--prefix", "--keys-only"])
                .arg(format!("{}/", etcd_key(dir, key)))
                .output()
                .is_ok_and(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .filter(|l| !l.is_empty())
                        .count()
                        > waiters
                }),
            Tool::Postgres(_, url) | Tool::Psql(_, url) => {
                let Tool::Postgres(..) = self else {
                    // psql waiters queue in pg_locks, not granted.
                    return pg_count(
                        url,
                        &format!(
                            "select count(*) from pg_locks where locktype = 'advisory' \
                             and not granted and (classid::bigint << 32 | objid::bigint) = {}",
                            pg_lock_id_sql(&etcd_key(dir, key))
                        ),
                    ) >= waiters;
                };
                // lockrun's waiters each hold a connection of their own.
                pg_count(
                    url,
                    "select count(*) from pg_stat_activity where application_name = 'lockrun'",
                ) > waiters
            }
        }
    }
}

/// The median round trip of `pg_advisory_unlock` on one warm connection,
/// as psql's `\timing` sees it from the client, in ms.
fn pg_unlock(url: &str) -> f64 {
    let mut script = String::from("\\timing on\n");
    for _ in 0..PART_RUNS + 1 {
        script.push_str(
            "select pg_advisory_lock(4242424242);\nselect pg_advisory_unlock(4242424242);\n",
        );
    }
    let mut child = Command::new(Postgres::psql_path())
        .args(["-X", "-A", "-t", "-d", url])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("psql");
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(script.as_bytes())
        .expect("a script to psql");
    let out = child.wait_with_output().expect("psql");
    let times: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            l.strip_prefix("Time: ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(
        times.len(),
        2 * (PART_RUNS + 1),
        "psql's timings: {times:?}"
    );
    // Each unlock, the first pair left out (it warmed the session).
    let unlocks: Vec<f64> = times.iter().skip(2).skip(1).step_by(2).copied().collect();
    median(&unlocks)
}

/// One number a query counts, by psql (0 when it fails).
fn pg_count(url: &str, sql: &str) -> usize {
    let psql = Postgres::psql_path();
    Command::new(psql)
        .args(["-X", "-A", "-t", "-d", url, "-c", sql])
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(0)
}

impl Postgres {
    fn psql_path() -> PathBuf {
        fs::read_dir("/usr/lib/postgresql")
            .ok()
            .and_then(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.path().join("bin/psql"))
                    .filter(|p| p.exists())
                    .max()
            })
            .unwrap_or_else(|| PathBuf::from("psql"))
    }
}

/// Handovers in ms: `contenders` runs start together (the first is let in
/// alone, the others queue behind it), each child holding `JOB_MS`.
fn handovers(tool: &Tool, me: &Path, contenders: usize, chains: usize) -> Vec<f64> {
    let me = me.to_str().expect("utf-8 path");
    let mut gaps = Vec::new();
    for _ in 0..chains {
        let dir = scratch();
        let log = dir.path().join("log");
        let log_s = log.to_str().expect("utf-8 path");
        let job = JOB_MS.to_string();
        let first = tool
            .command(dir.path(), "k", &[me, "__child", log_s, &job])
            .spawn()
            .expect("spawn");
        let deadline = Instant::now() + PATIENCE;
        while !fs::read_to_string(&log).is_ok_and(|t| t.contains("start")) {
            assert!(Instant::now() < deadline, "the first holder never started");
            std::thread::sleep(Duration::from_millis(1));
        }
        let rest: Vec<Child> = (1..contenders)
            .map(|_| {
                tool.command(dir.path(), "k", &[me, "__child", log_s, &job])
                    .spawn()
                    .expect("spawn")
            })
            .collect();
        // The holder's job is long enough for the waiters to queue.
        while !tool.queued(dir.path(), "k", contenders - 1) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        finish(first);
        for child in rest {
            finish(child);
        }
        let text = fs::read_to_string(&log).expect("log");
        let mut events: Vec<(u128, bool)> = text
            .lines()
            .map(|l| {
                let mut words = l.split_whitespace();
                let kind = words.next().expect("kind");
                let at: u128 = words.next().expect("time").parse().expect("ns");
                (at, kind == "start")
            })
            .collect();
        events.sort();
        for pair in events.windows(2) {
            if let [(end, false), (start, true)] = pair {
                gaps.push((start - end) as f64 / 1e6);
            }
        }
    }
    gaps
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    sorted[sorted.len() / 2]
}
