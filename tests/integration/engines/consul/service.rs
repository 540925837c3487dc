//! Running under systemd, on Consul: the watchdog falling silent with a
//! frozen lease, the documented unit, the journal's lines, an agent down
//! at start. (`--notify` readiness and `--min-hold` on every engine:
//! `conformance::service`.)

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::conformance::service::{guide_block, is_ready, NotifySocket};
use crate::engines::consul::support::TestConsul;
use crate::link::Link;
use crate::procs::{self, wait_until};
use crate::support::{
    assert_status, lockrun, run, scratch, script, script_with, wait_for_file, Holder, Running,
};

/// `--notify`: a standby says it waits and is not ready; the holder is ready,
/// says it leads, and pings the watchdog only while its lease is confirmed.
/// COMMAND does not see the socket.
#[test]
fn notify_is_ready_once_held_and_pings_only_while_the_lease_is_confirmed() {
    let consul = TestConsul::start_fast();
    let key = consul.prefix("service-notify") + "/leader";
    let ttl = format!("{}ms", consul.ttl_min().as_millis());
    let dir = scratch();
    let socket = NotifySocket::bind(dir.path());
    let link = Link::new(&consul.http_addr());

    let holder = Holder::spawn(|child| {
        let mut args = vec!["elect", "--shell", &key, "--"];
        args.extend(child);
        lockrun(&consul, args)
    });

    let d = dir.path().display().to_string();
    // The child ignores TERM and so lives out --kill-timeout: the watchdog
    // must fall silent when the lease runs out, not when lockrun exits.
    let body = script_with(
        &format!(
            "echo \"${{NOTIFY_SOCKET-unset}}\" > {d}/inherited; trap 'date +%s%N > {d}/term' TERM;"
        ),
        "while :; do sleep 0.05; done",
    );
    let mut cmd = lockrun(
        &consul,
        [
            "elect",
            "--notify",
            "--ttl",
            &ttl,
            "--lock-delay",
            "3s",
            "--kill-timeout",
            "1500ms",
            "--shell",
            &key,
            "--",
            &body,
            &d,
        ],
    );
    cmd.env("CONSUL_HTTP_ADDR", link.http_addr())
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

    holder.finish(&consul);
    wait_for_file(&dir.path().join("ready"));
    socket.wait_for("of readiness", |m| {
        is_ready(m) && m.contains(&format!("STATUS=leading `{key}` since "))
    });
    socket.wait_for("pinging the watchdog", |m| m == "WATCHDOG=1");
    let inherited = std::fs::read_to_string(dir.path().join("inherited")).unwrap();
    assert_eq!(inherited.trim(), "unset", "COMMAND inherited NOTIFY_SOCKET");

    link.freeze();
    let output = standby.finish();
    assert_status(&output, 124, "the frozen holder lost the lock", &consul);
    let term: u128 = std::fs::read_to_string(dir.path().join("term"))
        .expect("the child got TERM")
        .trim()
        .parse()
        .unwrap();
    let messages = socket.messages();
    let last_ping = messages
        .iter()
        .filter(|(_, m)| m == "WATCHDOG=1")
        .map(|(at, _)| *at)
        .max()
        .unwrap();
    // Pings stop when the lease does, which is when the child is told to
    // stop; the child then lives 1.5 s more. 500 ms covers a loaded machine.
    assert!(
        last_ping < term + 500_000_000,
        "the watchdog was pinged {} ms after the lease ran out",
        (last_ping - term) / 1_000_000
    );
    // Sent just before lockrun exits; the reader may not have taken it in
    // yet when lockrun's exit is seen.
    socket.wait_for("STOPPING", |m| m.starts_with("STOPPING=1"));
}

/// The documented unit file is complete and its ExecStart is a valid lockrun
/// command line with `--notify`, as `Type=notify` needs.
#[test]
fn the_readme_unit_is_complete_and_its_command_parses() {
    use clap::Parser;
    let unit = guide_block("db-primary.service");
    for needed in [
        "[Unit]",
        "[Service]",
        "[Install]",
        "Type=notify",
        "Restart=",
        "RestartSec=",
        "ExecReload=",
        "CONSUL_HTTP_TOKEN_FILE=",
    ] {
        assert!(unit.contains(needed), "the documented unit lacks {needed}");
    }
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let words: Vec<String> = exec
        .replace("%H", "db-1")
        .split_whitespace()
        .map(String::from)
        .collect();
    assert!(words[0].ends_with("/lockrun"), "{exec}");
    let cli = lockrun::cli::Cli::try_parse_from(&words)
        .unwrap_or_else(|e| panic!("the documented ExecStart does not parse: {e}"));
    match cli.command {
        lockrun::cli::Command::Elect(args) => {
            // Ready at start: a standby must count as started (see the
            // unit's comment).
            assert_eq!(args.service.notify, Some(lockrun::notify::Ready::Start))
        }
        _ => panic!("the documented unit runs `elect`"),
    }
}

/// A file for lockrun's stderr, and the `JOURNAL_STREAM` value that names it,
/// as systemd sets it for a unit whose output goes to the journal.
fn journal_stream(dir: &Path) -> (std::fs::File, String) {
    use std::os::unix::fs::MetadataExt;
    let path = dir.join("journal");
    let file = std::fs::File::create(&path).unwrap();
    let meta = file.metadata().unwrap();
    (file, format!("{}:{}", meta.dev(), meta.ino()))
}

/// A campaigning daemon at the default verbosity: the journal shows each
/// change of who runs, once, with its priority: acquired, lost and why,
/// campaigning again, acquired again.
#[test]
fn a_campaigning_daemon_logs_each_failover_to_the_journal() {
    let consul = TestConsul::start();
    let key = consul.prefix("service-journal") + "/leader";
    let dir = scratch();
    let d = dir.path().display().to_string();
    let (journal, stream) = journal_stream(dir.path());
    let body = script(&format!(
        "echo \"$LOCKRUN_SESSION\" >> {d}/sessions; while :; do sleep 0.05; done"
    ));
    let mut cmd = lockrun(
        &consul,
        [
            "elect",
            "--campaign",
            "--lock-delay",
            "1s",
            "--kill-timeout",
            "500ms",
            "--value",
            "db-1:5432",
            "--shell",
            &key,
            "--",
            &body,
            &d,
        ],
    );
    cmd.env("JOURNAL_STREAM", &stream);
    cmd.stderr(journal);
    let mut daemon = cmd.spawn().unwrap();
    let sessions = dir.path().join("sessions");
    let count = || {
        std::fs::read_to_string(&sessions)
            .unwrap_or_default()
            .lines()
            .count()
    };
    assert!(wait_until(procs::deadline(), || count() == 1), "it leads");
    let first = std::fs::read_to_string(&sessions).unwrap();
    consul.api().session_destroy(first.trim());
    assert!(
        wait_until(procs::deadline() + procs::PATIENCE, || count() == 2),
        "it leads again"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        Signal::SIGTERM,
    )
    .unwrap();
    let status = daemon.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(Signal::SIGTERM as i32), "{status}");
    let log = std::fs::read_to_string(dir.path().join("journal")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    let find = |what: &str| {
        lines
            .iter()
            .filter(|l| l.contains(what))
            .copied()
            .collect::<Vec<_>>()
    };
    let acquired = find("acquired");
    assert_eq!(acquired.len(), 2, "{log}");
    assert!(
        acquired.iter().all(|l| l.starts_with("<5>lockrun: ")),
        "{log}"
    );
    let lost = find("lost `");
    assert_eq!(lost.len(), 1, "{log}");
    assert!(lost[0].starts_with("<4>lockrun: warning: "), "{log}");
    assert_eq!(find("campaigning again").len(), 1, "{log}");
    assert!(
        lines.iter().all(|l| l.starts_with('<')),
        "every line has a priority: {log}"
    );
    assert!(
        !log.contains("debug:") && !log.contains("session created"),
        "the default verbosity shows only what changes who runs: {log}"
    );
}

/// Outside the journal, a daemon's lines carry a timestamp; a one-off run
/// is silent at the default verbosity (cron mails every line).
#[test]
fn text_lines_carry_a_timestamp_and_one_off_runs_stay_quiet() {
    let consul = TestConsul::start();
    let key = consul.prefix("service-text") + "/leader";
    let output = run(&mut lockrun(&consul, ["elect", &key, "--", "true"]));
    assert_status(&output, 0, "one-off", &consul);
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        "",
        "one-off runs are quiet"
    );
    let output = run(&mut lockrun(&consul, ["elect", "-v", &key, "--", "true"]));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("acquired"))
        .unwrap_or_else(|| panic!("{stderr}"));
    let (time, rest) = line.split_once(' ').unwrap();
    assert!(rest.starts_with("lockrun: "), "{line}");
    assert!(
        humantime::parse_rfc3339(time).is_ok(),
        "`{time}` is not an RFC 3339 timestamp: {line}"
    );
}

/// What needs the emulator itself; the re-runs against real agents skip
/// modules of this name (`versions.rs`).
mod emulator_faults {
    use super::*;

    /// A daemon says once that the engine is unreachable (not at every retry)
    /// and once that it answers again.
    #[test]
    fn a_daemon_reports_an_outage_once_and_the_recovery() {
        let consul = TestConsul::emulator_only(|b| b);
        let emulator = consul.emulator().expect("an emulator");
        let key = consul.prefix("service-outage") + "/leader";
        let holder = Holder::spawn(|child| {
            let mut args = vec!["elect", "--shell", &key, "--"];
            args.extend(child);
            lockrun(&consul, args)
        });
        let standby = Running::spawn(&mut lockrun(
            &consul,
            ["elect", "--campaign", &key, "--", "true"],
        ));
        let api = consul.api();
        assert!(
            wait_until(procs::deadline(), || crate::support::sessions_named_like(
                &api, &key
            ) == 2),
            "the standby waits"
        );
        emulator.set_no_leader(true);
        // Longer than the 5 s a daemon keeps quiet about trouble.
        let outage = std::time::Instant::now();
        while outage.elapsed() < Duration::from_secs(7) {
            std::thread::sleep(Duration::from_millis(100));
        }
        emulator.set_no_leader(false);
        holder.finish(&consul);
        let output = standby.finish();
        assert_status(&output, 0, "the standby led and its child exited", &consul);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let unreachable = stderr
            .lines()
            .filter(|l| l.contains("Consul unreachable for"))
            .count();
        assert_eq!(unreachable, 1, "{stderr}");
        assert_eq!(
            stderr
                .lines()
                .filter(|l| l.contains("Consul answers again"))
                .count(),
            1,
            "{stderr}"
        );
    }
}

/// `--notify` without `--campaign`, with the agent not up yet (a unit
/// started at boot before Consul): lockrun retries, says so in STATUS=,
/// and takes the lock once the agent answers. It used to exit 125 at once.
#[test]
fn notify_retries_an_engine_that_is_down_at_start() {
    let port = procs::free_port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let dir = scratch();
    let socket = NotifySocket::bind(dir.path());
    let mut cmd = crate::support::bare(["elect", "--notify", "service/boot/leader", "--", "true"]);
    cmd.env("CONSUL_HTTP_ADDR", addr.to_string())
        .env("NOTIFY_SOCKET", &socket.path);
    let mut service = Running::spawn(&mut cmd);
    // Nothing listens yet: the run must keep trying and say why.
    let retrying = wait_until(procs::deadline(), || {
        service.exited()
            || socket
                .texts()
                .iter()
                .any(|m| m.contains("STATUS=") && m.contains("retrying"))
    });
    assert!(retrying && !service.exited(), "{:?}", socket.texts());
    let consul = consul_emulator::Emulator::builder().bind(addr).start();
    let output = service.finish();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(
        socket.texts().iter().any(|m| is_ready(m)),
        "{:?}",
        socket.texts()
    );
    drop(consul);
}
