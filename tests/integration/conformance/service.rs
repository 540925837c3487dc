//! Under systemd and cron, on every engine: the notify protocol against a
//! stand-in for systemd's socket, and `--min-hold` for jobs that run once
//! per period. (The watchdog falling silent with the lease, which needs a
//! relay to freeze: `engines::consul::service`.)

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::places::{on_every_engine, Place};
use crate::procs::{self, wait_until};
use crate::support::{now_ns, run, scratch, script_with, wait_for_file, Running};

/// A datagram socket standing in for systemd's: every message, with the
/// wall-clock time it arrived.
pub struct NotifySocket {
    pub path: std::path::PathBuf,
    messages: Arc<Mutex<Vec<(u128, String)>>>,
}

impl NotifySocket {
    pub fn bind(dir: &Path) -> NotifySocket {
        let path = dir.join("notify");
        let socket = UnixDatagram::bind(&path).expect("bind the notify socket");
        let messages = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&messages);
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            while let Ok(n) = socket.recv(&mut buf) {
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                sink.lock().unwrap().push((now_ns(), text));
            }
        });
        NotifySocket { path, messages }
    }

    pub fn messages(&self) -> Vec<(u128, String)> {
        self.messages.lock().unwrap().clone()
    }

    pub fn texts(&self) -> Vec<String> {
        self.messages().into_iter().map(|(_, m)| m).collect()
    }

    pub fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) {
        assert!(
            wait_until(procs::deadline(), || self.texts().iter().any(|m| pred(m))),
            "no notify message {what}; got {:?}",
            self.texts()
        );
    }
}

pub fn is_ready(message: &str) -> bool {
    message.lines().any(|l| l == "READY=1")
}

/// A fenced block of the operations guide that contains `marker`.
pub fn guide_block(marker: &str) -> String {
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .unwrap();
    guide
        .split("```")
        .skip(1)
        .step_by(2)
        .find(|block| block.contains(marker))
        .unwrap_or_else(|| panic!("docs/operations.md has no block with {marker}"))
        .to_string()
}

/// `--notify`: a standby says it waits and is not ready; once it holds, it
/// is ready, says it leads, and pings the watchdog. COMMAND does not see
/// the socket.
fn notify_is_ready_once_held(place: &Place) {
    let key = place.key("notify");
    let work = scratch();
    let holder = place.hold(work.path(), "", &["elect", &key]);
    let dir = scratch();
    let socket = NotifySocket::bind(dir.path());
    let body = script_with(
        "echo \"${NOTIFY_SOCKET-unset}\" > \"$1/inherited\";",
        "while [ ! -e \"$1/go\" ]; do sleep 0.05; done",
    );
    let mut cmd = place.lockrun(&["elect", "--notify", &key, "--shell", "--", &body]);
    cmd.arg(dir.path())
        .env("NOTIFY_SOCKET", &socket.path)
        .env("WATCHDOG_USEC", "100000");
    let standby = Running::spawn(&mut cmd);
    socket.wait_for("saying it waits", |m| {
        m == format!("STATUS=waiting for `{key}`")
    });
    assert!(
        !socket.texts().iter().any(|m| is_ready(m)),
        "a standby is not ready: {:?}",
        socket.texts()
    );
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the first holder");
    wait_for_file(&dir.path().join("ready"));
    socket.wait_for("of readiness", |m| {
        is_ready(m) && m.contains(&format!("STATUS=leading `{key}` since "))
    });
    socket.wait_for("pinging the watchdog", |m| m == "WATCHDOG=1");
    let inherited = std::fs::read_to_string(dir.path().join("inherited")).unwrap();
    assert_eq!(inherited.trim(), "unset", "COMMAND inherited NOTIFY_SOCKET");
    std::fs::write(dir.path().join("go"), "").unwrap();
    place.status(&standby.finish(), 0, "the second holder");
    socket.wait_for("STOPPING", |m| m.starts_with("STOPPING=1"));
}
on_every_engine!(notify_is_ready_once_held);

/// `--notify=start`: ready at once, even as a standby; a stop says so.
fn notify_start_is_ready_while_waiting(place: &Place) {
    let key = place.key("notify-start");
    let work = scratch();
    let holder = place.hold(work.path(), "", &["elect", &key]);
    let dir = scratch();
    let socket = NotifySocket::bind(dir.path());
    let mut cmd = place.lockrun(&["elect", "--notify=start", &key, "--", "true"]);
    cmd.env("NOTIFY_SOCKET", &socket.path);
    let standby = Running::spawn(&mut cmd);
    socket.wait_for("of readiness", |m| {
        is_ready(m) && m.contains(&format!("STATUS=waiting for `{key}`"))
    });
    standby.signal(Signal::SIGTERM);
    let output = standby.finish();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(output.status.signal(), Some(libc::SIGTERM), "{output:?}");
    socket.wait_for("of stopping", |m| m.starts_with("STOPPING=1"));
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
}
on_every_engine!(notify_start_is_ready_while_waiting);

/// Cron on two hosts fires a few seconds apart: with `--min-hold` the first
/// run keeps the lock after its job is done, and the second, with `-n -E
/// 0`, skips quietly instead of running the job again. The command is the
/// operations guide's crontab line, with a shorter hold.
fn min_hold_runs_a_job_once_per_period(place: &Place) {
    let key = place.key("backup");
    let dir = scratch();
    let log = dir.path().join("ran");
    let job = dir.path().join("backup");
    std::fs::write(&job, format!("#!/bin/sh\necho ran >> {}\n", log.display())).unwrap();
    std::fs::set_permissions(&job, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let crontab = guide_block("PATH=/usr/local/bin");
    let line = crontab.lines().find(|l| l.contains("--min-hold")).unwrap();
    // Five schedule fields, then the command.
    let words: Vec<String> = line.split_whitespace().skip(5).map(String::from).collect();
    assert_eq!(words[0], "lockrun", "{line}");
    let cron = |min_hold: &str| {
        let args: Vec<String> = words[1..]
            .iter()
            .map(|w| match w.as_str() {
                "jobs/backup" => key.clone(),
                "/opt/bin/backup" => job.display().to_string(),
                "1h" => min_hold.to_string(),
                other => other.to_string(),
            })
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        place.lockrun(&args)
    };
    let started = Instant::now();
    let first = Running::spawn(&mut cron("2s"));
    assert!(
        wait_until(procs::deadline(), || log.exists()),
        "the first job never ran"
    );
    let second = run(&mut cron("2s"));
    place.status(&second, 0, "the second host skips quietly");
    place.status(&first.finish(), 0, "the first run's job status");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "the lock was not kept for --min-hold"
    );
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "ran\n");
    let output = run(&mut place.lockrun(&["leader", &key]));
    place.status(&output, 1, "leader after --min-hold");
    // Once the period is over, the next run does the job again.
    place.status(&run(&mut cron("0s")), 0, "next period");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "ran\nran\n");
}
on_every_engine!(min_hold_runs_a_job_once_per_period);
