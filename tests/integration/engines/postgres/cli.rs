//! `--backend postgres` end to end against a real PostgreSQL, beside
//! `psql`: the documented lock id excludes both ways, a terminated backend
//! stops the holder's command before a rival starts, and bad settings are
//! one line with status 2.

use std::io::Write;
use std::process::{Child, Command, Stdio};

use crate::engines::postgres::support::{self as pg_support, psql, psql_ok, Bouncer};
use crate::places::{last_beat, stdout, Place};
use crate::priority::{spans, CHILD};
use crate::procs::{deadline, wait_until};
use crate::support::{bare, run, scratch, wait_for_file, Running};

/// The lock id of `text`, as docs/postgres.md tells a script to compute it.
fn lock_id(text: &str) -> String {
    psql_ok(&format!(
        "select ('x' || substr(md5('{text}'), 1, 16))::bit(64)::bigint"
    ))
}

/// A psql session holding the advisory lock `id` until dropped; it
/// touches `ready` once the lock is its.
struct PsqlHolder {
    child: Child,
    id: String,
}

impl PsqlHolder {
    fn take(id: &str, ready: &std::path::Path) -> PsqlHolder {
        let mut child = psql()
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("psql");
        let stdin = child.stdin.as_mut().expect("piped");
        writeln!(
            stdin,
            "select pg_advisory_lock({id});\n\\! touch {}",
            ready.display()
        )
        .unwrap();
        stdin.flush().unwrap();
        wait_for_file(ready);
        PsqlHolder {
            child,
            id: id.to_string(),
        }
    }
}

impl Drop for PsqlHolder {
    fn drop(&mut self) {
        // Closing its input ends psql, and with it its session and lock;
        // the server ends the backend, and so frees the lock, a moment after
        // psql has gone. We wait for that, as the next holder must.
        drop(self.child.stdin.take());
        let _ = self.child.wait();
        let held = format!(
            "select count(*) from pg_locks where locktype = 'advisory' and objsubid = 1 \
             and ((classid::bigint << 32) | objid::bigint) = {}",
            self.id
        );
        assert!(
            wait_until(deadline(), || psql_ok(&held) == "0"),
            "the server kept psql's lock {} after psql exited",
            self.id
        );
    }
}

#[test]
fn a_psql_holder_excludes_lockrun_and_is_shown_by_leader() {
    let place = Place::postgres("psql-holds");
    let key = place.key("job");
    let work = scratch();
    let holder = PsqlHolder::take(&lock_id(&key), &work.path().join("ready"));
    let output = run(&mut place.lockrun(&["elect", "-n", &key, "--", "true"]));
    place.status(&output, 75, "--no-wait while psql holds the lock");
    let output = run(&mut place.lockrun(&["leader", &key]));
    place.status(&output, 0, "leader while psql holds it");
    assert!(stdout(&output).contains("backend"), "{output:?}");
    drop(holder);
    let output = run(&mut place.lockrun(&["elect", "-n", &key, "--", "true"]));
    place.status(&output, 0, "--no-wait once psql let go");
}

/// `check` follows a PostgreSQL holder as it does a local one; a psql
/// session holding the lock, which shows no fence, only its backend, is
/// not the sequencer's holder either.
#[test]
fn check_follows_a_postgres_holder_and_put_is_refused_there() {
    let place = Place::postgres("check");
    let seq = crate::ops::check_follows_its_holder_where_put_has_nowhere_to_write(&place);
    let work = scratch();
    let psql = PsqlHolder::take(&lock_id(&place.key("k")), &work.path().join("ready"));
    let output = run(&mut place.lockrun(&["check", &seq]));
    place.status(&output, 1, "check while psql holds");
    drop(psql);
}

#[test]
fn a_lockrun_holder_excludes_psql_with_the_documented_id() {
    let place = Place::postgres("lockrun-holds");
    let key = place.key("job");
    let id = lock_id(&key);
    let work = scratch();
    let holder = place.hold(
        work.path(),
        "echo $LOCKRUN_PG_LOCK_ID > \"$1/id\";",
        &["elect", "--value", "web-1", &key],
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("id"))
            .unwrap()
            .trim(),
        id
    );
    assert_eq!(
        psql_ok(&format!("select pg_try_advisory_lock({id})")),
        "f",
        "psql took a lock lockrun holds"
    );
    // A slot's id is that of `PREFIX//i`.
    let prefix = place.key("pool");
    let slot = lock_id(&format!("{prefix}//0"));
    let work2 = scratch();
    let slot_holder = place.hold(work2.path(), "", &["semaphore", "--limit", "1", &prefix]);
    assert_eq!(
        psql_ok(&format!("select pg_try_advisory_lock({slot})")),
        "f"
    );
    let output = run(&mut place.lockrun(&["leader", &prefix]));
    place.status(&output, 0, "leader of a semaphore");
    std::fs::write(work2.path().join("go"), "").unwrap();
    place.status(&slot_holder.finish(), 0, "the slot holder");
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
    assert_eq!(
        psql_ok(&format!(
            "select pg_try_advisory_lock({id}) and pg_advisory_unlock({id})"
        )),
        "t",
        "the lock was not released"
    );
}

/// The backend pid holding `id`, once one does.
fn holder_backend(id: &str) -> String {
    let mut pid = String::new();
    assert!(
        wait_until(deadline(), || {
            pid = psql_ok(&format!(
                "select pid from pg_locks where locktype = 'advisory' and granted \
                 and (classid::bigint << 32 | objid::bigint) = {id}"
            ));
            !pid.is_empty()
        }),
        "nobody holds {id}"
    );
    pid
}

#[test]
fn a_terminated_backend_stops_the_child_at_once() {
    let place = Place::postgres("terminated");
    let key = place.key("job");
    let id = lock_id(&key);
    let work = scratch();
    let holder = place.heartbeat(
        work.path(),
        "echo $LOCKRUN_LOCK_INDEX > \"$1/fence\";",
        &["elect", "--ttl", "5s", &key],
    );
    let rival_work = scratch();
    let body = "date +%s%N > \"$1/start\"; echo $LOCKRUN_LOCK_INDEX > \"$1/fence\"";
    let mut rival_cmd = place.lockrun(&["elect", &key, "--shell", "--", body]);
    rival_cmd.arg(rival_work.path());
    let rival = Running::spawn(&mut rival_cmd);
    let backend = holder_backend(&id);
    let terminated = crate::support::now_ns();
    assert_eq!(
        psql_ok(&format!("select pg_terminate_backend({backend})")),
        "t"
    );
    let output = holder.finish();
    place.status(&output, 124, "the holder whose backend was terminated");
    place.status(&rival.finish(), 0, "the rival");
    let started: u128 = std::fs::read_to_string(rival_work.path().join("start"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let last = last_beat(work.path());
    // The server frees the lock the moment the backend ends, so nothing
    // can promise the child is gone before a waiting rival gets it (the
    // docs/postgres.md and explain say so, as for a revoked etcd lease). What lockrun
    // promises is to notice the closed connection at once and SIGKILL the
    // child: its last beat comes within a moment of the termination, not
    // at the next round trip (1.59 s later without the connection watch).
    let after_ms = last.saturating_sub(terminated) / 1_000_000;
    eprintln!(
        "the child's last beat {after_ms} ms after the termination; the rival started {} ms after it",
        started as i128 / 1_000_000 - last as i128 / 1_000_000
    );
    assert!(
        after_ms < 1_000,
        "the holder's child beat on {after_ms} ms after its backend was terminated"
    );
    let fence = |dir: &std::path::Path| -> u64 {
        std::fs::read_to_string(dir.join("fence"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    assert!(fence(work.path()) < fence(rival_work.path()));
}

#[test]
fn release_without_the_privilege_says_who_can() {
    let place = Place::postgres("unprivileged");
    let key = place.key("job");
    psql_ok("do $$ begin if not exists (select from pg_roles where rolname = 'plain') then create role plain login; end if; end $$");
    let work = scratch();
    let holder = place.hold(work.path(), "", &["elect", "--value", "h1", &key]);
    let url = format!(
        "postgres://plain@127.0.0.1:{}/postgres",
        pg_support::postgres().port
    );
    let output = run(bare(["--backend", "postgres", "--dsn", &url]).args(["release", &key]));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{output:?}");
    assert!(err.contains("pg_signal_backend"), "{err}");
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder, never released");
}

#[test]
fn bad_settings_are_one_line_with_status_2() {
    let cases: Vec<(Command, &str)> = vec![
        (
            {
                let mut c = bare(["--backend", "postgres", "elect", "k", "--", "true"]);
                c.env("PGHOST", "");
                c
            },
            "PGHOST is set but empty",
        ),
        (
            bare([
                "--backend",
                "postgres",
                "--dsn",
                "postgres://u:s3cret@h/db?sslmode=verify",
                "elect",
                "k",
                "--",
                "true",
            ]),
            "sslmode `verify` in --dsn (sslmode) is not one of",
        ),
        (
            bare([
                "--backend",
                "postgres",
                "--dsn",
                "",
                "elect",
                "k",
                "--",
                "true",
            ]),
            "--dsn",
        ),
        (
            bare([
                "--backend",
                "etcd",
                "--dsn",
                "postgres://h/db",
                "elect",
                "k",
                "--",
                "true",
            ]),
            "--dsn belongs to the postgres backend",
        ),
        (
            bare([
                "--backend",
                "postgres",
                "elect",
                "--ttl",
                "1500ms",
                "k",
                "--",
                "true",
            ]),
            "whole seconds",
        ),
    ];
    for (mut cmd, expected) in cases {
        let output = run(&mut cmd);
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{cmd:?}: {err}");
        assert!(err.contains(expected), "{cmd:?}: {err}");
        assert!(!err.contains("s3cret"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

#[test]
fn libpq_variables_and_a_unix_socket_reach_the_server() {
    let pg = pg_support::postgres();
    let mut cmd = bare(["--backend", "postgres", "elect", "-n"]);
    cmd.arg(pg_support::unique("socket"))
        .args(["--", "sh", "-c", "echo $LOCKRUN_LOCK_INDEX"])
        .env("PGHOST", &pg.socket_dir)
        .env("PGPORT", pg.port.to_string())
        .env("PGUSER", "postgres")
        .env("PGDATABASE", "postgres");
    let output = run(&mut cmd);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout(&output).trim().parse::<u64>().is_ok(), "{output:?}");
}

/// A server that shuts down ends every session, and so frees every lock:
/// the holder stops its child at once, not a TTL later.
#[test]
fn a_server_shutdown_stops_the_holder_at_once() {
    let pg = pg_support::private();
    let place = Place::Postgres {
        prefix: pg_support::unique("shutdown"),
        url: pg.url(),
    };
    let key = place.key("job");
    let work = scratch();
    let holder = place.heartbeat(work.path(), "", &["elect", "--ttl", "30s", &key]);
    let stopped = std::time::Instant::now();
    drop(pg);
    let output = holder.finish();
    place.status(&output, 124, "the holder whose server shut down");
    let took = stopped.elapsed();
    eprintln!("the holder ended {took:?} after the shutdown began");
    assert!(
        took < std::time::Duration::from_secs(5),
        "the holder took {took:?}, renewals come every 10s, so: the closed connection went unnoticed"
    );
}

/// The session settings the budget rests on are the server's, over TCP:
/// it gives up on a silent connection no earlier than the TTL, and no idle
/// timeout ends us.
#[test]
fn the_server_applies_the_timeouts_the_budget_rests_on() {
    use lockrun::backend::postgres::{config, Postgres};
    use lockrun::backend::{Engine, Opening, Wait};
    let url = pg_support::postgres().url();
    let config = config::resolve(Some(&url), |_| None).unwrap();
    let engine = Postgres::new(config, std::time::Duration::from_secs(9)).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let report = |_: &str| {};
        let lease = engine
            .open_lease(Opening {
                wait: Wait::Once,
                daemon: false,
                first: true,
                report: &report,
            })
            .await
            .unwrap();
        for (name, expected) in [
            ("tcp_user_timeout", "9000"),
            ("tcp_keepalives_idle", "9"),
            ("tcp_keepalives_interval", "3"),
            ("tcp_keepalives_count", "3"),
            ("idle_session_timeout", "9s"),
            ("idle_in_transaction_session_timeout", "9s"),
            ("statement_timeout", "9s"),
            ("application_name", "lockrun"),
        ] {
            assert_eq!(lease.setting(name).await.unwrap(), expected, "{name}");
        }
    });
}

/// A hot standby's advisory locks exclude nobody on the primary: refused,
/// with the fix, before anything is held.
#[test]
fn a_hot_standby_is_refused() {
    let primary = pg_support::private();
    let standby = pg_support::standby_of(&primary);
    let key = pg_support::unique("standby");
    let output = run(bare(["--backend", "postgres", "--dsn", &standby.url()])
        .args(["elect", "-n", &key, "--", "true"]));
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{err}");
    assert!(
        err.contains("hot standby") && err.contains("primary"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// Another role's queries are hidden from a plain role, and with them a
/// semaphore holder's facts; its limit is in pg_locks, which every role
/// reads, so `leader` still finds the holder (by backend), never a free
/// lock.
#[test]
fn leader_finds_a_semaphore_whose_holders_are_hidden() {
    let place = Place::postgres("hidden");
    let prefix = place.key("pool");
    psql_ok("do $$ begin if not exists (select from pg_roles where rolname = 'plain') then create role plain login; end if; end $$");
    let work = scratch();
    let holder = place.hold(work.path(), "", &["semaphore", "--limit", "2", &prefix]);
    let url = format!(
        "postgres://plain@127.0.0.1:{}/postgres",
        pg_support::postgres().port
    );
    let output = run(bare(["--backend", "postgres", "--dsn", &url]).args(["leader", &prefix]));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(stdout(&output).contains("backend"), "{output:?}");
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
}

/// Two contenders disagreeing on a semaphore's limit must not both run:
/// without the check, `--limit 2` would take slot 1 beside the holder of
/// `--limit 1`'s only slot.
#[test]
fn a_semaphore_limit_that_differs_from_a_contenders_is_refused() {
    let place = Place::postgres("limits");
    let prefix = place.key("pool");
    let work = scratch();
    let holder = place.hold(work.path(), "", &["semaphore", "--limit", "1", &prefix]);
    let output =
        run(&mut place.lockrun(&["semaphore", "--limit", "2", "-n", &prefix, "--", "true"]));
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(125), "{err}");
    assert!(
        err.contains(&format!("semaphore `{prefix}` has limit 1")) && err.contains("--limit 1"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    // A waiter with another limit is refused too, at once.
    let output = run(&mut place.lockrun(&[
        "semaphore",
        "--limit",
        "3",
        "--timeout",
        "30s",
        &prefix,
        "--",
        "true",
    ]));
    assert_eq!(output.status.code(), Some(125), "{output:?}");
    // The same limit waits its turn as usual.
    let output =
        run(&mut place.lockrun(&["semaphore", "--limit", "1", "-n", &prefix, "--", "true"]));
    place.status(&output, 75, "--no-wait on a full semaphore");
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
    // Once the holder is gone, another limit is free to start afresh.
    let output =
        run(&mut place.lockrun(&["semaphore", "--limit", "2", "-n", &prefix, "--", "true"]));
    place.status(&output, 0, "a new limit once nobody contends");
}

/// Transaction pooling hands a session's advisory locks to whoever runs
/// next on the server connection: lockrun refuses a pooler, whether it
/// refuses our startup settings (its default) or is told to drop them.
#[test]
fn a_pgbouncer_in_front_is_refused() {
    for extra in ["", "ignore_startup_parameters = options"] {
        let bouncer = Bouncer::start("transaction", extra);
        let url = format!("postgres://postgres@127.0.0.1:{}/postgres", bouncer.port);
        let output = run(bare(["--backend", "postgres", "--dsn", &url]).args([
            "elect",
            "-n",
            &pg_support::unique("bouncer"),
            "--",
            "true",
        ]));
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(125), "{extra}: {err}");
        assert!(err.contains("PgBouncer"), "{extra}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

/// The password file as libpq reads it, against a server that asks for a
/// password over TCP: found by PGPASSFILE (a wildcard line), ignored with
/// libpq's warning when others can read it.
#[test]
fn the_password_comes_from_the_password_file() {
    use std::os::unix::fs::PermissionsExt;
    let files = tempfile::Builder::new()
        .prefix("lockrun-pgpass-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(files.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let hba = files.path().join("pg_hba.conf");
    std::fs::write(
        &hba,
        "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n",
    )
    .unwrap();
    std::fs::set_permissions(&hba, std::fs::Permissions::from_mode(0o644)).unwrap();
    let pg = pg_support::private_with(&[format!("hba_file={}", hba.display())]);
    let set = Command::new(pg_support::bin_dir().join("psql"))
        .args(["-X", "-q", "-h"])
        .arg(&pg.socket_dir)
        .args(["-p", &pg.port.to_string(), "-U", "postgres", "-c"])
        .arg("alter role postgres password 's3cret'")
        .output()
        .unwrap();
    assert!(set.status.success(), "{set:?}");
    let pgpass = files.path().join("pgpass");
    std::fs::write(
        &pgpass,
        format!(
            "# ours\nelsewhere:*:*:*:wrong\n127.0.0.1:{}:*:postgres:s3cret\n",
            pg.port
        ),
    )
    .unwrap();
    let elect = |mode: u32| {
        std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(mode)).unwrap();
        let mut cmd = bare(["--backend", "postgres", "--dsn", &pg.url(), "elect", "-n"]);
        cmd.arg(pg_support::unique("pgpass"))
            .args(["--", "true"])
            .env("PGPASSFILE", &pgpass);
        run(&mut cmd)
    };
    let output = elect(0o600);
    assert!(output.status.success(), "{output:?}");
    let output = elect(0o644);
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{err}");
    assert!(err.contains("group or world access"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
}

/// A waiter (LISTENing, with its tries between) still keeps every promise
/// of waiting: SIGTERM ends it at once by that signal, `--timeout` gives
/// 75 on time, and either way its session is gone from the server; a
/// holder's release wakes the next waiter, which runs.
#[test]
fn a_waiter_can_be_stopped_and_is_woken_by_the_release() {
    use std::os::unix::process::ExitStatusExt;
    let place = Place::postgres("waiters");
    let key = place.key("job");
    let work = scratch();
    let holder = place.hold(work.path(), "", &["elect", &key]);
    let count_sessions = || {
        psql_ok(&format!(
            "select count(*) from pg_stat_activity where application_name = 'lockrun' \
             and query like '%{}%'",
            key.replace('\'', "''")
        ))
    };
    let waiter =
        Running::spawn(&mut place.lockrun(&["elect", "--timeout", "60s", &key, "--", "true"]));
    assert!(
        wait_until(deadline(), || {
            psql_ok(
                "select count(*) from pg_stat_activity where application_name = 'lockrun' \
                 and (query ilike 'listen%' or query like '%pg_try_advisory_lock%' \
                      or query like '/* lockrun-wait %')",
            ) != "0"
        }),
        "the waiter never tried: {}",
        psql_ok("select string_agg(query, ' | ') from pg_stat_activity where application_name = 'lockrun'")
    );
    let asked = std::time::Instant::now();
    waiter.signal(nix::sys::signal::Signal::SIGTERM);
    let output = waiter.finish();
    eprintln!("the waiter ended {:?} after SIGTERM", asked.elapsed());
    assert_eq!(output.status.signal(), Some(15), "{output:?}");
    let started = std::time::Instant::now();
    let output = run(&mut place.lockrun(&["elect", "--timeout", "1s", &key, "--", "true"]));
    place.status(&output, 75, "--timeout 1s behind a holder");
    let took = started.elapsed();
    assert!(
        took >= std::time::Duration::from_secs(1),
        "gave up after {took:?}"
    );
    // The next waiter runs once the holder lets go.
    let next =
        Running::spawn(&mut place.lockrun(&["elect", "--timeout", "60s", &key, "--", "true"]));
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
    place.status(&next.finish(), 0, "the waiter after the release");
    assert!(
        wait_until(deadline(), || count_sessions() == "0"),
        "a lockrun session outlived its run"
    );
}

/// `lockrun list` (#43): a psql session's advisory lock has no key lockrun
/// can know; without a prefix it is listed by its id (key null), and under
/// a prefix it is not.
#[test]
fn list_shows_a_psql_lock_by_its_id() {
    let place = Place::postgres("list-peer");
    let key = place.key("jobs/peer");
    let id = lock_id(&key);
    let work = scratch();
    let psql_holder = PsqlHolder::take(&id, &work.path().join("ready"));
    let output = run(&mut place.lockrun(&["list", "--json"]));
    place.status(&output, 0, "list while psql holds");
    let line = stdout(&output)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|l| l["id"] == id.as_str())
        .unwrap_or_else(|| panic!("no line for id {id}: {output:?}"));
    assert_eq!(line["key"], serde_json::Value::Null, "{line}");
    assert!(
        line["holders"][0]["details"]["backend_pid"].is_i64(),
        "{line}"
    );
    let output = run(&mut place.lockrun(&["list"]));
    assert!(
        stdout(&output).contains(&format!("(id {id})")),
        "{output:?}"
    );
    let output = run(&mut place.lockrun(&["list", &place.key("jobs")]));
    place.status(
        &output,
        1,
        "list under a prefix, where psql's lock cannot be told",
    );
    // --replace may not end a psql session: one line, 125, psql keeps it.
    let output = run(&mut place.lockrun(&["elect", "--replace", &key, "--", "true"]));
    place.status(&output, 125, "--replace of a psql holder");
    assert_eq!(
        String::from_utf8_lossy(&output.stderr).lines().count(),
        1,
        "{output:?}"
    );
    let output = run(&mut place.lockrun(&["leader", &key]));
    place.status(&output, 0, "leader after the refused --replace");
    drop(psql_holder);
}

/// How many sessions wait in the server's queue for lock `id` (its
/// not-granted rows in `pg_locks`).
fn queued_for(id: &str) -> u32 {
    psql_ok(&format!(
        "select count(*) from pg_locks where locktype = 'advisory' and objsubid = 1 \
         and not granted and ((classid::bigint << 32) | objid::bigint) = {id}"
    ))
    .parse()
    .unwrap()
}

/// A waiter with nobody to defer to waits in the server's queue, as
/// `psql`'s `pg_advisory_lock` does. One SIGKILLed there (lockrun and its
/// parked guard gone, its backend still queued) holds up nobody: the
/// waiter queued behind it starts within a second of the holder's end
/// (its TTL is 30 s), and the killed one's command never runs.
#[test]
fn a_waiter_killed_in_the_servers_queue_holds_up_nobody() {
    let place = Place::postgres("queue-killed");
    let key = place.key("job");
    let id = lock_id(&key);
    let work = scratch();
    let holder = place.heartbeat(work.path(), "", &["elect", &key]);
    let queued = || queued_for(&id);
    let stamp = |name: &str| format!("date +%s%N > {}/{name}", work.path().display());
    let waiter = |name: &str| {
        Running::spawn(&mut place.lockrun(&[
            "elect",
            "--ttl",
            "30s",
            &key,
            "--",
            "sh",
            "-c",
            &stamp(name),
        ]))
    };
    let killed = waiter("killed");
    assert!(
        wait_until(deadline(), || queued() == 1),
        "the first waiter never queued"
    );
    let next = waiter("next");
    assert!(
        wait_until(deadline(), || queued() == 2),
        "the second waiter never queued"
    );
    killed.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = killed.finish();
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
    place.status(&next.finish(), 0, "the waiter behind the killed one");
    let end = last_beat(work.path());
    let start: u128 = std::fs::read_to_string(work.path().join("next"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let after = std::time::Duration::from_nanos((start - end) as u64);
    eprintln!("the next waiter started {after:?} after the holder's end");
    assert!(
        after < std::time::Duration::from_secs(1),
        "the next waiter started {after:?} after the holder's end"
    );
    assert!(
        !work.path().join("killed").exists(),
        "the killed waiter's command ran"
    );
}

/// `--priority` across roles: a higher waiter cancels a lower one's wait in
/// the server's queue only where PostgreSQL lets it, as `pg_cancel_backend`
/// checks (the lower role's privileges, inherited; a NOINHERIT member has
/// none). One that may not waits behind it, as documented: it neither
/// fails (it exited 125 on the refused cancel, when membership was taken
/// for the right) nor runs beside it.
#[test]
fn a_higher_waiter_that_may_not_cancel_a_lower_one_waits_behind_it() {
    let place = Place::postgres("noinherit");
    let key = place.key("job");
    let id = lock_id(&key);
    psql_ok(
        "do $$ begin \
         if not exists (select from pg_roles where rolname = 'lr_low') then create role lr_low login; end if; \
         if not exists (select from pg_roles where rolname = 'lr_high') then \
           create role lr_high login noinherit in role lr_low; end if; end $$",
    );
    let work = scratch();
    let holder = place.hold(work.path(), "", &["elect", &key]);
    let port = pg_support::postgres().port;
    let log = work.path().join("log");
    let waiter = |role: &str, priority: &str| {
        let url = format!("postgres://{role}@127.0.0.1:{port}/postgres");
        Running::spawn(
            bare(["--backend", "postgres", "--dsn", &url])
                .args(["elect", "--priority", priority, &key])
                .args(["--shell", "--", CHILD, role])
                .arg(&log),
        )
    };
    let queued = || queued_for(&id);
    let low = waiter("lr_low", "1");
    assert!(
        wait_until(deadline(), || queued() == 1),
        "the low waiter never queued"
    );
    let high = waiter("lr_high", "5");
    // The high waiter made its ranked try, the statement that cancels the
    // lower waiters it may, could not cancel the low one, and queued
    // behind it.
    assert!(
        wait_until(deadline(), || queued() == 2),
        "the high waiter never queued"
    );
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
    place.status(&low.finish(), 0, "the low waiter");
    place.status(
        &high.finish(),
        0,
        "the high waiter that could not cancel it",
    );
    one_after_the_other(&log, ["lr_low", "lr_high"]);
}

/// The children in `log` (see [`CHILD`]) are `labels`, in that order, each
/// started only once the one before it had ended.
fn one_after_the_other(log: &std::path::Path, labels: [&str; 2]) {
    let spans = spans(log);
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let started: Vec<&str> = spans.iter().map(|(label, _, _)| label.as_str()).collect();
    assert_eq!(started, labels, "{text}");
    assert!(spans[0].2 <= spans[1].1, "they overlapped: {text}");
}

/// psql's own waiter beside lockrun's queued ones: a lockrun waiter of
/// the highest priority cancels only lockrun's lower waiters (those that
/// show a priority pair), never a psql session queued in
/// `pg_advisory_lock` on the same id, which keeps its place ahead of it.
#[test]
fn a_psql_waiter_in_the_queue_is_never_cancelled() {
    let place = Place::postgres("psql-queued");
    let key = place.key("job");
    let id = lock_id(&key);
    let work = scratch();
    let log = work.path().join("log");
    let holder = place.hold(work.path(), "", &["elect", &key]);
    let mut peer = psql()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("psql");
    let stdin = peer.stdin.as_mut().expect("piped");
    writeln!(
        stdin,
        "\\set ON_ERROR_STOP on\nselect pg_advisory_lock({id});\n\\! echo \"start psql $(date +%s%N)\" >> {l}\nselect pg_sleep(0.2);\n\\! echo \"end psql $(date +%s%N)\" >> {l}",
        l = log.display()
    )
    .unwrap();
    drop(peer.stdin.take());
    assert!(
        wait_until(deadline(), || queued_for(&id) == 1),
        "psql never queued"
    );
    let waiter = Running::spawn(
        place
            .lockrun(&["elect", "--priority", "1000", &key])
            .args(["--shell", "--", CHILD, "lockrun"])
            .arg(&log),
    );
    assert!(
        wait_until(deadline(), || queued_for(&id) == 2),
        "the lockrun waiter never queued behind psql"
    );
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
    place.status(&waiter.finish(), 0, "the lockrun waiter");
    let out = peer.wait_with_output().expect("psql");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "psql: {err}");
    one_after_the_other(&log, ["psql", "lockrun"]);
}
