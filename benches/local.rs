//! The local backend against `flock(1)`, in the same run: an uncontended
//! run, a handover with one waiter and with twenty contenders, as the
//! children themselves saw it.
//!
//! Run it with `cargo bench --bench local`. The timed child is this very
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
const JOB_MS: u64 = 50;
/// (contenders, chains).
const HANDOVERS: [(usize, usize); 2] = [(2, 20), (20, 3)];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == "__child") {
        child_main(&args[2..]);
        return;
    }
    if !args.iter().any(|a| a == "--bench") {
        println!("local benchmark: skipped (run it with `cargo bench --bench local`)");
        return;
    }
    let lockrun = PathBuf::from(env!("CARGO_BIN_EXE_lockrun"));
    let me = std::env::current_exe().expect("own path");
    let tools = [Tool::Lockrun(lockrun), Tool::Flock];
    if !Command::new("flock")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        println!("flock(1) is missing (util-linux); nothing to compare with");
        return;
    }
    println!("local backend vs flock(1), medians; ratio = lockrun / flock\n");
    println!(
        "{:<44} {:>12} {:>12} {:>7}",
        "figure", "lockrun", "flock(1)", "ratio"
    );
    let uncontended: Vec<f64> = tools.iter().map(|t| median(&uncontended(t, &me))).collect();
    row(
        "uncontended run of a child that forks nothing",
        &uncontended,
    );
    for (contenders, chains) in HANDOVERS {
        let figures: Vec<f64> = tools
            .iter()
            .map(|t| median(&handovers(t, &me, contenders, chains)))
            .collect();
        let name = if contenders == 2 {
            "handover, one waiter".to_string()
        } else {
            format!("handover, {contenders} contenders")
        };
        row(&name, &figures);
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
    Lockrun(PathBuf),
    Flock,
}

impl Tool {
    /// The command that runs `child` (with its arguments) under the lock
    /// `key` in `dir`.
    fn command(&self, dir: &Path, key: &str, child: &[&str]) -> Command {
        let mut cmd = match self {
            Tool::Lockrun(bin) => {
                let mut cmd = Command::new(bin);
                cmd.args(["--backend", "local", "--lock-dir"])
                    .arg(dir)
                    .args(["elect", key, "--"]);
                cmd
            }
            Tool::Flock => {
                let mut cmd = Command::new("flock");
                cmd.arg(dir.join(key));
                cmd
            }
        };
        cmd.args(child).stdin(Stdio::null()).stdout(Stdio::null());
        cmd
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
    writeln!(file, "start {} {}", now_ns(), std::process::id()).expect("log");
    std::thread::sleep(Duration::from_millis(ms));
    writeln!(file, "end {} {}", now_ns(), std::process::id()).expect("log");
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

/// Wall time of whole runs of `true`-like children, in ms.
fn uncontended(tool: &Tool, me: &Path) -> Vec<f64> {
    let dir = scratch();
    let log = dir.path().join("log");
    let log = log.to_str().expect("utf-8 path");
    let me = me.to_str().expect("utf-8 path");
    let mut times = Vec::new();
    for run in 0..UNCONTENDED_RUNS + 3 {
        let started = Instant::now();
        finish(
            tool.command(dir.path(), "k", &[me, "__child", log, "0"])
                .spawn()
                .expect("spawn"),
        );
        if run >= 3 {
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    times
}

/// Whether some process is blocked in flock(2) on the file with `inode`.
fn someone_waits(inode: u64) -> bool {
    fs::read_to_string("/proc/locks").is_ok_and(|locks| {
        locks
            .lines()
            .any(|l| l.contains("->") && l.contains(&format!(":{inode} ")))
    })
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
        let inode = fs::metadata(dir.path().join("k")).expect("lock file").ino();
        let rest: Vec<Child> = (1..contenders)
            .map(|_| {
                tool.command(dir.path(), "k", &[me, "__child", log_s, &job])
                    .spawn()
                    .expect("spawn")
            })
            .collect();
        // Measured only if the waiters were queued before the holder ended.
        while !someone_waits(inode) && Instant::now() < deadline {
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
