//! `--backend postgres` against what production puts around a server:
//! PgBouncer in every pooling mode, ports that never answer or answer
//! another protocol, a host list that starts at a standby, a restart under
//! waiting runs, and an L4 relay that stops forwarding while keeping TCP
//! open. Overlap is measured with the commands' own timestamps.

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::engines::postgres::support::{self as pg_support, psql_ok, unique, Bouncer};
use crate::procs::{deadline, wait_until};
use crate::support::{bare, max_overlap, run, scratch, Running};

/// Each run's command: its start and end, a second apart.
const SPAN: &str = "date +%s%N > \"$1/start\"; sleep 1; date +%s%N > \"$1/end\"";

fn stamp(dir: &Path, name: &str) -> Option<u128> {
    std::fs::read_to_string(dir.join(name))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A role whose own statement_timeout equals the TTL the pooled runs
/// use: the setting that once satisfied the pooler check.
fn timed_role() {
    psql_ok(
        "do $$ begin create role lockrun_timed login superuser; \
         exception when duplicate_object then null; end $$; \
         alter role lockrun_timed set statement_timeout = '10s'",
    );
}

/// Every PgBouncer pooling mode, with and without its startup settings
/// dropped, as a role with and without a statement_timeout equal to the
/// TTL: two runs started together either are refused with one line (125)
/// and never run their command, or hold one after the other.
#[test]
fn every_pgbouncer_pooling_is_refused_or_exclusive() {
    timed_role();
    let mut problems = Vec::new();
    for mode in ["session", "transaction", "statement"] {
        for ignore in ["", "ignore_startup_parameters = options"] {
            let bouncer = Bouncer::start(mode, ignore);
            for user in ["postgres", "lockrun_timed"] {
                let what = format!("{mode} pooling, `{ignore}`, as {user}");
                let key = unique("pooled");
                let url = bouncer.url(user);
                let start = || {
                    let dir = scratch();
                    let mut cmd = bare(["--backend", "postgres", "--dsn", &url]);
                    cmd.args(["elect", "--ttl", "10s", "--timeout", "20s", &key])
                        .args(["--shell", "--", SPAN])
                        .arg(dir.path());
                    (Running::spawn(&mut cmd), dir)
                };
                // The second comes once the first holds (or is refused):
                // then it meets the first's server connection idle in the
                // pool, where a plain try is re-entrant.
                let mut first = start();
                assert!(
                    wait_until(deadline(), || stamp(first.1.path(), "start").is_some()
                        || first.0.exited()),
                    "{what}: the first run neither ran nor ended"
                );
                let runs = [first, start()];
                let mut spans = Vec::new();
                let mut codes = Vec::new();
                for (running, dir) in runs {
                    let output = running.finish();
                    let err = String::from_utf8_lossy(&output.stderr);
                    let code = output.status.code();
                    codes.push(code);
                    match code {
                        Some(125) => {
                            if !err.contains("pooler") || err.trim().lines().count() != 1 {
                                problems
                                    .push(format!("{what}: not one line naming the pooler: {err}"));
                            }
                            if stamp(dir.path(), "start").is_some() {
                                problems.push(format!("{what}: a refused run ran its command"));
                            }
                        }
                        Some(0) => spans.push((
                            stamp(dir.path(), "start").expect("start"),
                            stamp(dir.path(), "end").expect("end"),
                        )),
                        _ => problems.push(format!("{what}: exit {code:?}: {err}")),
                    }
                }
                eprintln!("{what}: exits {codes:?}");
                if max_overlap(spans.iter().copied()) > 1 {
                    problems.push(format!("{what}: two runs held the lock at once: {spans:?}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A run against `dsn` that would hold `key` with `--no-wait`: how it
/// ended and how long it took.
fn once(dsn: &str, extra: &[&str]) -> (std::process::Output, Duration) {
    let started = Instant::now();
    let mut cmd = bare(["--backend", "postgres", "--dsn", dsn]);
    cmd.args(extra)
        .args(["elect", "-n", &unique("unreachable"), "--", "true"]);
    let output = run(&mut cmd);
    (output, started.elapsed())
}

/// A port that takes connections and never says a word: the kernel
/// completes the handshake for a listener nobody accepts on.
fn silent_port() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// A port that answers every connection as an HTTP server would, and
/// keeps it open.
fn http_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut open = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let _ = stream
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 11\r\n\r\nbad request");
            open.push(stream);
        }
    });
    port
}

/// libpq's `connect_timeout` bounds the whole connection, per host: a
/// silent port and one that speaks HTTP each end in about that long with
/// one line naming the host and port, with or without -v (psql gives up
/// at 3.04 s on the silent port). Unset, it is 10 s.
#[test]
fn an_unanswering_port_ends_at_connect_timeout_with_one_line() {
    let (_silent, silent) = silent_port();
    let http = http_port();
    for (port, what) in [(silent, "a silent port"), (http, "an HTTP port")] {
        for sslmode in ["prefer", "disable"] {
            for verbose in [false, true] {
                let dsn = format!(
                    "host=127.0.0.1 port={port} user=postgres connect_timeout=3 sslmode={sslmode}"
                );
                let (output, took) = once(&dsn, if verbose { &["-v"] } else { &[] });
                let err = String::from_utf8_lossy(&output.stderr);
                let what = format!("{what}, sslmode={sslmode}, -v {verbose}");
                eprintln!("{what}: exit {:?} after {took:?}", output.status.code());
                assert_eq!(output.status.code(), Some(125), "{what}: {err}");
                assert!(
                    took < Duration::from_secs(8),
                    "{what}: took {took:?} with connect_timeout=3"
                );
                let last = err.trim().lines().last().unwrap_or_default();
                assert!(
                    last.contains(&format!("127.0.0.1:{port}")),
                    "{what}: the last line does not name the host and port: {err}"
                );
                if !verbose {
                    assert_eq!(err.trim().lines().count(), 1, "{what}: {err}");
                }
            }
        }
    }
    let (output, took) = once(&format!("host=127.0.0.1 port={silent} user=postgres"), &[]);
    let err = String::from_utf8_lossy(&output.stderr);
    eprintln!("a silent port, no connect_timeout: after {took:?}: {err}");
    assert_eq!(output.status.code(), Some(125), "{err}");
    assert!(
        took >= Duration::from_secs(9) && took < Duration::from_secs(16),
        "with no connect_timeout the silent port took {took:?}, not 10 s"
    );
    assert!(err.contains("within 10s"), "{err}");
}

/// libpq's `PGCONNECT_TIMEOUT` counts as `connect_timeout` does (the DSN's
/// wins; the unit tests check that): a silent port ends in about 2 s with
/// `PGCONNECT_TIMEOUT=2`, and a value that is not whole seconds, or an
/// empty one, is one line and 2 before any connection.
#[test]
fn pgconnect_timeout_bounds_a_silent_port_and_a_bad_one_is_a_usage_error() {
    let (_silent, silent) = silent_port();
    let with = |value: &str| {
        let started = Instant::now();
        let mut cmd = bare(["--backend", "postgres", "--dsn"]);
        cmd.arg(format!("host=127.0.0.1 port={silent} user=postgres"))
            .args(["elect", "-n", &unique("pgconnect"), "--", "true"])
            .env("PGCONNECT_TIMEOUT", value);
        let output = run(&mut cmd);
        (output, started.elapsed())
    };
    let (output, took) = with("2");
    let err = String::from_utf8_lossy(&output.stderr);
    eprintln!(
        "PGCONNECT_TIMEOUT=2 on a silent port: exit {:?} after {took:?}",
        output.status.code()
    );
    assert_eq!(output.status.code(), Some(125), "{err}");
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(5),
        "PGCONNECT_TIMEOUT=2 took {took:?}: {err}"
    );
    assert!(err.contains("within 2s"), "{err}");
    for (value, says) in [("2s", "not a whole number"), ("", "set but empty")] {
        let (output, took) = with(value);
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "`{value}`: {err}");
        assert_eq!(err.trim().lines().count(), 1, "`{value}`: {err}");
        assert!(
            err.contains("PGCONNECT_TIMEOUT") && err.contains(says),
            "`{value}`: {err}"
        );
        assert!(took < Duration::from_secs(2), "`{value}` took {took:?}");
    }
    let mut cmd = bare(["--backend", "postgres", "--dsn"]);
    cmd.arg(format!("host=127.0.0.1 port={silent} user=postgres"))
        .args(["elect", "-n", &unique("pgattrs"), "--", "true"])
        .env("PGTARGETSESSIONATTRS", "standby");
    let output = run(&mut cmd);
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(
        err.contains("PGTARGETSESSIONATTRS=standby picks a standby"),
        "{err}"
    );
}

/// A host name that resolves to two addresses, the first a silent port,
/// the second a relay to the server: each address has a `connect_timeout`
/// of its own, as in libpq, so the run connects through the second after
/// the first's 2 s; it used to share one deadline, spent on the first, and
/// exit 125. The name comes from an /etc/hosts of the run's own, mounted
/// in a mount namespace only it sees.
#[test]
fn each_address_of_a_host_name_has_its_own_connect_timeout() {
    let pg = pg_support::postgres();
    let silent = TcpListener::bind("127.0.0.2:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let relay =
        TcpListener::bind(("127.0.0.3", port)).expect("127.0.0.3 at the silent port's number");
    let server = pg.port;
    std::thread::spawn(move || {
        for client in relay.incoming() {
            let Ok(client) = client else { return };
            let Ok(upstream) = std::net::TcpStream::connect(("127.0.0.1", server)) else {
                return;
            };
            for (mut from, mut into) in [
                (client.try_clone().unwrap(), upstream.try_clone().unwrap()),
                (upstream, client),
            ] {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut into);
                    let _ = into.shutdown(std::net::Shutdown::Both);
                });
            }
        }
    });
    let work = scratch();
    let hosts = work.path().join("hosts");
    std::fs::write(
        &hosts,
        "127.0.0.1 localhost\n127.0.0.2 twoaddr\n127.0.0.3 twoaddr\n",
    )
    .unwrap();
    let mut cmd = std::process::Command::new("unshare");
    cmd.args([
        "-m",
        "sh",
        "-c",
        "mount --bind \"$0\" /etc/hosts && exec \"$@\"",
    ])
    .arg(&hosts)
    .arg(crate::support::bin())
    .args(["--backend", "postgres", "--dsn"])
    .arg(format!(
        "host=twoaddr port={port} user=postgres dbname=postgres connect_timeout=2 sslmode=disable"
    ))
    .args(["-v", "elect", "-n", &unique("twoaddr"), "--", "true"])
    .stdin(std::process::Stdio::null());
    let started = Instant::now();
    let output = run(&mut cmd);
    let took = started.elapsed();
    drop(silent);
    let err = String::from_utf8_lossy(&output.stderr);
    eprintln!(
        "two addresses, the first silent: exit {:?} after {took:?}",
        output.status.code()
    );
    assert_eq!(output.status.code(), Some(0), "{err}");
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(6),
        "the second address was tried after {took:?}, not after the first's 2 s: {err}"
    );
}

/// A host list whose first host is a hot standby: the run moves on to the
/// primary, as libpq's target_session_attrs=read-write does, whether that
/// is given or not; read-only is refused before any connection.
#[test]
fn a_host_list_moves_past_a_standby_to_the_primary() {
    let primary = pg_support::private();
    let standby = pg_support::standby_of(&primary);
    let psql = pg_support::bin_dir().join("psql");
    // The child asks the primary whether its lock is held there.
    let check = format!(
        "'{psql}' -X -Atq -h 127.0.0.1 -p {port} -U postgres -d postgres -c \
         \"select count(*) from pg_locks where locktype = 'advisory' and granted \
         and ((classid::bigint << 32) | objid::bigint) = $LOCKRUN_PG_LOCK_ID\"",
        psql = psql.display(),
        port = primary.port,
    );
    for attrs in [
        "",
        " target_session_attrs=read-write",
        " target_session_attrs=any",
    ] {
        let dsn = format!(
            "host=127.0.0.1,127.0.0.1 port={},{} user=postgres dbname=postgres{attrs}",
            standby.port, primary.port
        );
        let output = run(bare(["--backend", "postgres", "--dsn", &dsn]).args([
            "elect",
            "-n",
            &unique("hostlist"),
            "--shell",
            "--",
            &check,
        ]));
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "`{attrs}`: {err}");
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            "1",
            "`{attrs}`: the lock is not held on the primary"
        );
    }
    let dsn = format!(
        "host=127.0.0.1,127.0.0.1 port={},{} user=postgres target_session_attrs=read-only",
        standby.port, primary.port
    );
    let (output, _) = once(&dsn, &[]);
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(err.contains("read-only"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// `psql -c sql` against `pg`, trimmed.
fn psql_at(pg: &pg_support::TestPostgres, sql: &str) -> String {
    let out = std::process::Command::new(pg_support::bin_dir().join("psql"))
        .args(["-X", "-q", "-A", "-t", "-d", &pg.url(), "-c", sql])
        .output()
        .expect("psql");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A holder's command: a timestamp every 10 ms until the test writes `go`.
const BEATS: &str = "while [ ! -e \"$1/go\" ]; do date +%s%N >> \"$1/beat\"; sleep 0.01; done";

/// The server restarted (`fast`, then `immediate`) under a holder and two
/// runs waiting with `--timeout 60s`: the holder loses the lock (its
/// connection is gone, and the lock with it: 124), and the waiters ride
/// the restart out and hold one after the other, never two at once.
#[test]
fn waiters_ride_out_a_restart_and_hold_one_at_a_time() {
    let pg = pg_support::private();
    for mode in ["fast", "immediate"] {
        let key = unique("restart");
        let elect = |extra: &[&str], body: &str, dir: &Path| {
            let mut cmd = bare(["--backend", "postgres", "--dsn", &pg.url()]);
            cmd.args(["elect", "--ttl", "10s"])
                .args(extra)
                .arg(&key)
                .args(["--shell", "--", body])
                .arg(dir);
            Running::spawn(&mut cmd)
        };
        let holder_dir = scratch();
        let holder = elect(&[], BEATS, holder_dir.path());
        assert!(
            wait_until(deadline(), || holder_dir.path().join("beat").exists()),
            "{mode}: the holder never ran"
        );
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let dir = scratch();
                (elect(&["--timeout", "60s"], SPAN, dir.path()), dir)
            })
            .collect();
        // Both wait on the server: three lockrun sessions, one holding.
        assert!(
            wait_until(deadline(), || psql_at(
                &pg,
                "select count(*) from pg_stat_activity where application_name = 'lockrun'"
            ) == "3"),
            "{mode}: the waiters never connected"
        );
        pg.restart_with(mode);
        let output = holder.finish();
        assert_eq!(
            output.status.code(),
            Some(124),
            "{mode}: the holder: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let beats: Vec<u128> = std::fs::read_to_string(holder_dir.path().join("beat"))
            .unwrap()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        let mut spans = vec![(beats[0], *beats.last().unwrap())];
        for (waiter, dir) in waiters {
            let output = waiter.finish();
            assert_eq!(
                output.status.code(),
                Some(0),
                "{mode}: a waiter did not ride out the restart: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            spans.push((
                stamp(dir.path(), "start").expect("start"),
                stamp(dir.path(), "end").expect("end"),
            ));
        }
        eprintln!("{mode}: holder and waiters ran {spans:?}");
        assert!(
            max_overlap(spans.iter().copied()) <= 1,
            "{mode}: two ran at once: {spans:?}"
        );
    }
}

/// The holder's command: a `setsid` daemon that notes the time without a
/// pause until `$1/go` appears, outliving the command, which exits.
const BEATING_DAEMON: &str =
    "(setsid sh -c 'while [ ! -e \"$0/go\" ]; do date +%s%N >> \"$0/beat\"; \
     done' \"$1\" </dev/null >/dev/null 2>&1 &); exit 0";

/// Issue #45: lockrun SIGKILLed while a psql rival is blocked in
/// `pg_advisory_lock`. The lock lives on lockrun's connection, whose
/// socket the kernel closed the moment lockrun died while the guard killed
/// the tree in parallel: the rival got the lock before the tree was gone
/// in 12 of 50 runs under load (23 of 60 here, up to 12 ms). The guard now keeps a copy
/// of that socket until the tree is gone, so the server sees the
/// connection end after the tree's last sign of life, in every run, in
/// both containment modes.
#[test]
fn a_sigkilled_holders_daemon_is_gone_before_a_psql_rival_gets_the_lock() {
    let url = pg_support::postgres().url();
    let runs = 30;
    let mut late = Vec::new();
    for i in 0..runs {
        let key = unique("sigkilled");
        let work = scratch();
        // Every other run in each containment mode: a cgroup where this
        // host lets lockrun make one, and the subreaper.
        let containment = if i % 2 == 0 { "auto" } else { "subreaper" };
        let mut cmd = bare(["--backend", "postgres", "--dsn", &url]);
        cmd.args(["elect", "--containment", containment, &key])
            .args(["--shell", "--", BEATING_DAEMON])
            .arg(work.path());
        let holder = Running::spawn(&mut cmd);
        crate::places::wait_for_a_beat(work.path());
        // The rival notes the time the moment the lock is its own, by the
        // server's clock (the host's: the same machine).
        let id = format!("('x' || substr(md5('{key}'), 1, 16))::bit(64)::bigint");
        let rival = pg_support::psql()
            .args([
                "-c",
                &format!(
                    "select pg_advisory_lock({id}) /* {key} */; \
                     select (extract(epoch from clock_timestamp()) * 1000000)::bigint"
                ),
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("psql");
        let blocked = format!(
            "select count(*) from pg_stat_activity where wait_event_type = 'Lock' \
             and query like '%/* {key} */%' and pid <> pg_backend_pid()"
        );
        assert!(
            wait_until(deadline(), || psql_ok(&blocked) == "1"),
            "run {i}: the psql rival never waited for the lock"
        );
        holder.signal(nix::sys::signal::Signal::SIGKILL);
        let _ = holder.finish();
        let answer = rival.wait_with_output().expect("psql");
        let text = String::from_utf8_lossy(&answer.stdout);
        assert!(
            answer.status.success(),
            "run {i}: the psql rival failed: {}",
            String::from_utf8_lossy(&answer.stderr)
        );
        let got: u128 = text
            .lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("run {i}: no time from the rival: {text}"));
        let got = got * 1000;
        std::fs::write(work.path().join("go"), "").unwrap();
        let last = crate::places::last_beat(work.path());
        if last > got {
            late.push(format!(
                "run {i}: the daemon beat {} µs after the rival had the lock",
                (last - got) / 1000
            ));
        }
    }
    eprintln!(
        "{} of {runs} runs with the tree alive after the rival got the lock",
        late.len()
    );
    assert!(late.is_empty(), "{}", late.join("\n"));
}

/// NOTIFY needs no privilege: a role that may not end a holder's session
/// (neither its role, nor pg_signal_backend) sends the note `--replace`
/// would, naming the holder's backend. The holder ignores it and holds on;
/// before, it stopped its command and exited 124 "taken over by --replace"
/// from whoever the forged note named.
#[test]
fn a_note_from_a_role_that_may_not_end_the_holder_is_ignored() {
    let eve = format!("eve_{}", std::process::id());
    psql_ok(&format!("create role {eve} login"));
    let url = pg_support::postgres().url();
    let work = scratch();
    let key = unique("forged-note");
    let beat = work.path().join("beat");
    let mut cmd = bare(["--backend", "postgres", "--dsn", &url]);
    cmd.args(["elect", "--value", "prod", &key, "--shell", "--"])
        .arg("while [ ! -e \"$1/go\" ]; do date +%s%N >> \"$1/beat\"; sleep 0.01; done")
        .arg(work.path());
    let holder = Running::spawn(&mut cmd);
    assert!(
        wait_until(deadline(), || beat.exists()),
        "the holder never ran"
    );
    let pid = psql_ok(
        "select pid from pg_locks where locktype = 'advisory' and granted \
         and pid in (select pid from pg_stat_activity where application_name = 'lockrun')",
    );
    let pid: i32 = pid.lines().next().unwrap().parse().unwrap();
    let as_eve = url.replacen("postgres@", &format!("{eve}@"), 1);
    let forged = format!(
        "select pg_notify('lockrun_replace_{pid:08x}', '{{\"holder\":\"{pid}\",\"host\":\"ops-console\",\"pid\":1,\"value\":\"maintenance\"}}')"
    );
    let out = std::process::Command::new(pg_support::bin_dir().join("psql"))
        .args([
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            &as_eve,
            "-c",
            &forged,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A legitimate note is acted on within a round trip or two; give the
    // forged one ten times that, measured in the holder's own beats.
    let beats = || {
        std::fs::read_to_string(&beat)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let before = beats();
    assert!(
        wait_until(Instant::now() + Duration::from_secs(20), || beats()
            > before + 100),
        "the holder's command stopped beating after the forged note"
    );
    // Nor does the note hide it: its facts stay where `leader`, `list` and
    // `--replace` read them (the statements it sent on the note carry them).
    let mut look = bare(["--backend", "postgres", "--dsn", &url]);
    let shown = look.args(["leader", "--json", &key]).output().unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("\"value\":\"prod\""),
        "leader --json lost the holder's facts after the forged note: {shown}"
    );
    // A lockrun --replace under that role, which may read every session's
    // statement (so it sees the holder's facts) but not end it, is told
    // so at once, and the holder keeps holding.
    psql_ok(&format!("grant pg_read_all_stats to {eve}"));
    let mut replace = bare(["--backend", "postgres", "--dsn", &as_eve]);
    replace.args(["elect", "--replace", "--timeout", "20s", &key, "--", "true"]);
    let asked = Instant::now();
    let out = replace.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("cannot ask the holder"), "{stderr}");
    assert!(asked.elapsed() < Duration::from_secs(10), "{stderr}");
    let before = beats();
    assert!(
        wait_until(Instant::now() + Duration::from_secs(20), || beats()
            > before + 20),
        "the holder's command stopped beating after a refused --replace"
    );
    std::fs::write(work.path().join("go"), "").unwrap();
    let out = holder.finish();
    psql_ok(&format!("drop role {eve}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("taken over"), "{stderr}");
}
