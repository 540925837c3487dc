//! Shared locks (issue #42): `lockrun elect -s KEY` holds KEY with readers,
//! never beside a writer (`elect KEY`, `-x`), in each engine's own shared
//! mode, so that the engine's own tools (`flock -s`/`-x`) take part. Spans
//! are the children's own timestamps; waits are for events, with the
//! suite's generous deadline.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::places::{on_every_engine, stdout, Place};
use crate::procs;
use crate::support::{max_overlap, now_ns, run, scratch, wait_for_file, Running};

/// A child's span, `start end` in ns, as it wrote it to `span-NAME`.
fn span(work: &Path, name: &str) -> (u128, u128) {
    let text = std::fs::read_to_string(work.join(format!("span-{name}")))
        .unwrap_or_else(|e| panic!("span-{name}: {e}"));
    let mut words = text.split_whitespace().map(|w| w.parse::<u128>().unwrap());
    (words.next().unwrap(), words.next().unwrap())
}

/// `lockrun elect ARGS... --shell -- BODY WORK NAME`: the child logs its
/// span to `span-NAME` around `body`.
fn spawn(place: &Place, args: &[&str], work: &Path, name: &str, body: &str) -> Running {
    let script = format!("s=$(date +%s%N); {body}; e=$(date +%s%N); echo $s $e > \"$1/span-$2\"");
    let mut cmd = place.lockrun(args);
    cmd.args(["--shell", "--", &script]).arg(work).arg(name);
    Running::spawn(&mut cmd)
}

/// Four readers hold together: each child waits (boundedly) until all four
/// have started, which only happens if they hold at once; meanwhile
/// `leader` shows kind "shared" and every reader.
fn four_readers_hold_together(place: &Place) {
    let key = place.key("readers");
    let work = scratch();
    let body = "touch \"$1/in-$2\"; n=0; \
                while [ $(ls \"$1\" | grep -c '^in-') -lt 4 ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done; \
                while [ ! -e \"$1/go\" ] && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done";
    let readers: Vec<Running> = (0..4)
        .map(|i| {
            let value = format!("reader-{i}");
            spawn(
                place,
                &["elect", "-s", "--value", &value, &key],
                work.path(),
                &i.to_string(),
                body,
            )
        })
        .collect();
    for i in 0..4 {
        wait_for_file(&work.path().join(format!("in-{i}")));
    }
    let output = run(&mut place.lockrun(&["leader", "--json", &key]));
    place.status(&output, 0, "leader of a shared lock");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["kind"], "shared", "{json}");
    assert_eq!(json["holders"].as_array().unwrap().len(), 4, "{json}");
    std::fs::write(work.path().join("go"), "").unwrap();
    for reader in readers {
        place.status(&reader.finish(), 0, "a reader");
    }
    let spans: Vec<_> = (0..4).map(|i| span(work.path(), &i.to_string())).collect();
    assert_eq!(max_overlap(spans.iter().copied()), 4, "{spans:?}");
}
on_every_engine!(four_readers_hold_together);

/// Readers and writers started at once: a writer's span meets no other.
fn a_writer_runs_alone(place: &Place) {
    let key = place.key("mixed");
    let work = scratch();
    let runs: Vec<Running> = (0..8)
        .map(|i| {
            let mode = if i % 2 == 0 { "-s" } else { "-x" };
            spawn(
                place,
                &["elect", mode, &key],
                work.path(),
                &format!("{mode}{i}"),
                "sleep 0.1",
            )
        })
        .collect();
    for running in runs {
        place.status(&running.finish(), 0, "a contender");
    }
    let spans: Vec<(String, (u128, u128))> = (0..8)
        .map(|i| {
            let name = format!("{}{i}", if i % 2 == 0 { "-s" } else { "-x" });
            let span = span(work.path(), &name);
            (name, span)
        })
        .collect();
    for (name, (start, end)) in spans.iter().filter(|(n, _)| n.starts_with("-x")) {
        for (other, (s, e)) in spans.iter().filter(|(o, _)| o != name) {
            assert!(
                e <= start || s >= end,
                "writer {name} overlaps {other}: {spans:?}"
            );
        }
    }
}
on_every_engine!(a_writer_runs_alone);

/// A writer that waits is not starved by readers arriving every 50 ms,
/// each holding 400 ms (so that, without writer preference, some reader
/// always holds). The stream goes on until the writer has started (or 200
/// readers, a minute): a writer that waited for the stream to end fails,
/// however slowly a loaded machine starts the readers. It runs within a
/// reader's hold time, plus slack for a loaded machine (5 s: at a load of
/// 11 on 2 cores, PostgreSQL's took 2.5 s), of the last reader that
/// started ahead of it.
fn a_waiting_writer_is_not_starved(place: &Place) {
    const READERS: usize = 200;
    let key = place.key("starve");
    let work = scratch();
    let hold = Duration::from_millis(400);
    let reader_body = format!("sleep {}", hold.as_secs_f64());
    let mut readers = Vec::new();
    let mut writer = None;
    let stream_start = Instant::now();
    let writer_in = work.path().join("writer-in");
    while readers.len() < READERS
        && !writer_in.exists()
        && stream_start.elapsed() < Duration::from_secs(60)
    {
        let i = readers.len();
        if i == 6 {
            writer = Some(spawn(
                place,
                &["elect", &key],
                work.path(),
                "writer",
                "touch \"$1/writer-in\"; sleep 0.1",
            ));
        }
        readers.push(spawn(
            place,
            &["elect", "-s", &key],
            work.path(),
            &i.to_string(),
            &reader_body,
        ));
        let next = stream_start + Duration::from_millis(50 * (i as u64 + 1));
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let spawned = readers.len();
    place.status(&writer.unwrap().finish(), 0, "the writer");
    for reader in readers {
        place.status(&reader.finish(), 0, "a reader");
    }
    let (start, end) = span(work.path(), "writer");
    assert!(
        spawned < READERS,
        "the writer waited until the stream of {READERS} readers ended"
    );
    let spans: Vec<(u128, u128)> = (0..spawned)
        .map(|i| span(work.path(), &i.to_string()))
        .collect();
    for (i, (s, e)) in spans.iter().enumerate() {
        assert!(*e <= start || *s >= end, "reader {i} overlaps the writer");
    }
    let ahead = spans.iter().map(|(s, _)| *s).filter(|s| *s < start).max();
    if let Some(last) = ahead {
        let waited = Duration::from_nanos((start - last) as u64);
        assert!(
            waited < hold + Duration::from_secs(5),
            "the writer started {waited:?} after the last reader ahead of it, more than a reader's hold and slack"
        );
    }
}
on_every_engine!(a_waiting_writer_is_not_starved);

/// `-s` and `-x` together: one line, exit 2, nothing sent.
#[test]
fn shared_and_exclusive_together_are_refused() {
    let output = run(&mut crate::support::bare([
        "--backend",
        "local",
        "elect",
        "-s",
        "-x",
        "k",
        "--",
        "true",
    ]));
    crate::support::assert_exit(&output, 2, "-s with -x", String::new);
}

/// The Go API's `LockFlagValue`, which `consul lock` writes.
const LOCK_FLAG: u64 = 0x2ddc_cbc0_58a5_0c18;

/// The test's Consul (emulator or real agent) behind a Consul place.
fn consul_api(place: &Place) -> crate::engines::consul::support::Api {
    match place {
        Place::Consul(consul, _) => consul.api(),
        _ => unreachable!("a Consul place"),
    }
}

/// A reader whose session is destroyed stops with 124; the other reader
/// runs on, still holding, and a writer waits for it.
#[test]
fn consul_a_lost_reader_stops_alone() {
    let place = Place::consul("shared-loss");
    let api = consul_api(&place);
    let key = place.key("loss");
    let lose = |one: &Path| {
        // `list` shows the lock once per reader, of kind "shared".
        let output = run(&mut place.lockrun(&["list", &key]));
        place.status(&output, 0, "list");
        let rows = stdout(&output);
        let shared: Vec<&str> = rows.lines().filter(|l| l.starts_with(&key)).collect();
        assert_eq!(shared.len(), 2, "{rows}");
        assert!(
            shared
                .iter()
                .all(|l| l.split_whitespace().nth(1) == Some("shared")),
            "{rows}"
        );
        let session = std::fs::read_to_string(one.join("session")).unwrap();
        api.session_destroy(session.trim());
    };
    a_lost_reader_stops_alone(
        &place,
        &key,
        "echo $LOCKRUN_SESSION > \"$1/session\";",
        lose,
        || {
            let output = run(&mut place.lockrun(&["elect", "-n", &key, "--", "true"]));
            place.status(&output, 75, "a writer beside the reader left");
        },
    );
}

/// Two readers of `key` hold, the first after `setup` (which may write to
/// its work folder, `$1`); `lose` ends the first one's claim, given that
/// folder. It stops with 124, and the other holds on (`leader` names it)
/// while `meanwhile` runs.
fn a_lost_reader_stops_alone(
    place: &Place,
    key: &str,
    setup: &str,
    lose: impl FnOnce(&Path),
    meanwhile: impl FnOnce(),
) {
    let (one, two) = (scratch(), scratch());
    let lost = place.hold(one.path(), setup, &["elect", "-s", "--value", "lost", key]);
    let kept = place.hold(two.path(), "", &["elect", "-s", "--value", "kept", key]);
    lose(one.path());
    place.status(&lost.finish(), 124, "the reader that lost its claim");
    let output = run(&mut place.lockrun(&["leader", key]));
    assert_eq!(stdout(&output), "kept\n", "the other reader holds on");
    meanwhile();
    std::fs::write(two.path().join("go"), "").unwrap();
    place.status(&kept.finish(), 0, "the reader that kept its claim");
}

/// The readers' record and entry flags (docs/consul.md, "Shared locks").
const SHARED_FLAG: u64 = 0x6c6f_636b_7264_7273;

/// A holder in the layout of docs/consul.md, written through the HTTP API
/// with a session of a 1 s lock-delay: a writer holds `KEY`; a reader
/// holds `KEY/.lock/<session>` and is listed in the record `KEY/.lock`.
/// Its session is destroyed, which arms the lock-delay; the other side's
/// lockrun, started at once, waits it out: its child starts no sooner than
/// 1 s after the destruction. Then lockrun's own holders: one whose session
/// is destroyed is stopped, and the other side's child starts only after
/// the lost one's last heartbeat.
#[test]
fn consul_a_lost_holders_lock_delay_holds_the_other_side_off() {
    use crate::support::{encode_key, kv_acquire};
    let place = Place::consul("shared-delay");
    let api = consul_api(&place);
    let delay = Duration::from_secs(1);
    for (lost, rival) in [("reader", "-x"), ("writer", "-s")] {
        let key = place.key(&format!("delay-{lost}"));
        let session = api.session_create(r#"{"Name":"lost","LockDelay":"1s"}"#);
        if lost == "reader" {
            let entry = format!("{key}/.lock/{session}");
            assert!(kv_acquire(&api, &entry, &session, SHARED_FLAG));
            let record = format!(r#"{{"Readers":{{"{session}":true}}}}"#);
            let path = format!(
                "/v1/kv/{}?flags={SHARED_FLAG}",
                encode_key(&format!("{key}/.lock"))
            );
            assert_eq!(api.put(&path, record).trimmed(), "true");
        } else {
            assert!(kv_acquire(&api, &key, &session, LOCK_FLAG));
        }
        let work = scratch();
        let destroyed = now_ns();
        api.session_destroy(&session);
        let waiter = spawn(
            &place,
            &["elect", rival, &key],
            work.path(),
            "rival",
            "true",
        );
        place.status(&waiter.finish(), 0, "the other side");
        let (start, _) = span(work.path(), "rival");
        let after = Duration::from_nanos((start - destroyed) as u64);
        assert!(
            after >= delay,
            "{rival} started {after:?} after the {lost}'s session was destroyed, within its lock-delay"
        );
    }
    for (lost, rival) in [("-s", "-x"), ("-x", "-s")] {
        let key = place.key(&format!("lost{lost}"));
        let work = scratch();
        let holder = place.heartbeat(
            work.path(),
            "echo $LOCKRUN_SESSION > \"$1/session\";",
            &["elect", lost, "--lock-delay", "1s", &key],
        );
        let session = std::fs::read_to_string(work.path().join("session")).unwrap();
        api.session_destroy(session.trim());
        let waiter = spawn(
            &place,
            &["elect", rival, &key],
            work.path(),
            "rival",
            "true",
        );
        place.status(&waiter.finish(), 0, "the other side");
        place.status(&holder.finish(), 124, "the holder that lost its session");
        let (start, _) = span(work.path(), "rival");
        let last = crate::places::last_beat(work.path());
        assert!(
            start > last,
            "{rival} started {} ms before {lost}'s last beat",
            (last - start) / 1_000_000
        );
    }
}

/// More dead readers in the record than one transaction removes (30,
/// written through the API, their sessions destroyed): a writer prunes
/// them in batches and runs, and leaves no record behind.
#[test]
fn consul_a_writer_prunes_many_dead_readers() {
    use crate::support::{encode_key, kv_acquire};
    let place = Place::consul("shared-prune");
    let api = consul_api(&place);
    let key = place.key("prune");
    let sessions: Vec<String> = (0..30)
        .map(|_| api.session_create(r#"{"Name":"dead reader","LockDelay":"0s"}"#))
        .collect();
    for session in &sessions {
        let entry = format!("{key}/.lock/{session}");
        assert!(kv_acquire(&api, &entry, session, SHARED_FLAG));
    }
    let members: Vec<String> = sessions.iter().map(|s| format!(r#""{s}":true"#)).collect();
    let record = format!(r#"{{"Readers":{{{}}}}}"#, members.join(","));
    let path = format!(
        "/v1/kv/{}?flags={SHARED_FLAG}",
        encode_key(&format!("{key}/.lock"))
    );
    assert_eq!(api.put(&path, record).trimmed(), "true");
    for session in &sessions {
        api.session_destroy(session);
    }
    let output = run(&mut place.lockrun(&["elect", "--timeout", "20s", &key, "--", "true"]));
    place.status(&output, 0, "the writer beside 30 dead readers");
    assert!(
        api.kv_get(&format!("{key}/.lock")).is_none(),
        "the record is gone"
    );
}

/// `consul lock KEY` holds `KEY/.lock` (written here as its Go API writes
/// it): a reader refuses to run beside it (125, one line naming that key)
/// and its command never runs. While readers hold, `KEY/.lock` is their
/// record, no lock (which `consul lock KEY` refuses to take: see
/// real_consul.rs for the real binary), and it is gone once they are.
#[test]
fn consul_lock_and_readers_exclude_each_other() {
    let place = Place::consul("shared-consul-lock");
    let api = consul_api(&place);
    let key = place.key("interop");
    let dot = format!("{key}/.lock");
    let work = scratch();
    let ran = work.path().join("ran");
    let session = api.session_create(r#"{"Name":"consul lock","TTL":"15s","LockDelay":"0s"}"#);
    assert!(crate::support::kv_acquire(&api, &dot, &session, LOCK_FLAG));
    for wait in [&["-n"][..], &[][..]] {
        let mut args = vec!["elect", "-s"];
        args.extend_from_slice(wait);
        args.extend([key.as_str(), "--", "touch", ran.to_str().unwrap()]);
        let output = run(&mut place.lockrun(&args));
        place.status(&output, 125, "a reader beside consul lock");
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(&format!("`{dot}`")), "{err}");
        assert!(!ran.exists(), "a reader ran beside consul lock");
    }
    assert!(crate::support::kv_release(&api, &dot, &session, LOCK_FLAG));
    api.session_destroy(&session);
    // Left behind free, as a `consul lock` that died leaves it: taken over.
    let reader = place.hold(work.path(), "", &["elect", "-s", &key]);
    let record = api.kv_get(&dot).expect("the readers' record");
    assert_ne!(record.flags, LOCK_FLAG, "{record:?}");
    assert_eq!(record.session, None, "{record:?}");
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&reader.finish(), 0, "the reader");
    assert!(
        api.kv_get(&dot).is_none(),
        "the last reader deletes the record"
    );
}

/// While a writer holds KEY it holds `KEY/.lock` too, with its session and
/// `consul lock`'s flags, so that `consul lock KEY` waits on it (the real
/// binary: real_consul.rs): a reader that comes meanwhile is busy (75 with
/// `-n`), never refused as beside `consul lock`, and one that waits runs
/// after the writer; `semaphore KEY` is a usage error naming the lock;
/// `list` shows the lock once. Once the writer is gone, so is `KEY/.lock`,
/// and a semaphore of the same name runs.
#[test]
fn consul_a_writer_holds_consul_lock_s_key() {
    let place = Place::consul("shared-writer-dot");
    let api = consul_api(&place);
    let key = place.key("writer-dot");
    let dot = format!("{key}/.lock");
    let work = scratch();
    let writer = place.hold(
        work.path(),
        "echo $LOCKRUN_SESSION > \"$1/session\";",
        &["elect", &key],
    );
    let session = std::fs::read_to_string(work.path().join("session")).unwrap();
    let held = api.kv_get(&dot).expect("the writer's `KEY/.lock`");
    assert_eq!(held.flags, LOCK_FLAG, "{held:?}");
    assert_eq!(held.session.as_deref(), Some(session.trim()), "{held:?}");

    let output = run(&mut place.lockrun(&["elect", "-s", "-n", &key, "--", "true"]));
    place.status(&output, 75, "a reader beside the writer");
    let output = run(&mut place.lockrun(&["semaphore", "--limit", "2", "-n", &key, "--", "true"]));
    place.status(&output, 2, "a semaphore of the writer's name");
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains(&format!("lockrun elect {key}")), "{err}");
    let output = run(&mut place.lockrun(&["list", &key]));
    place.status(&output, 0, "list");
    let rows = stdout(&output);
    assert_eq!(
        rows.lines().filter(|l| l.contains(&key)).count(),
        1,
        "{rows}"
    );

    let reader = spawn(
        &place,
        &["elect", "-s", &key],
        work.path(),
        "reader",
        "true",
    );
    std::thread::sleep(Duration::from_millis(300));
    let writer_end = now_ns();
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&writer.finish(), 0, "the writer");
    place.status(&reader.finish(), 0, "the reader that waited");
    let (start, _) = span(work.path(), "reader");
    assert!(start > writer_end, "the reader ran beside the writer");
    assert!(api.kv_get(&dot).is_none(), "the writer left `{dot}` behind");
    let output = run(&mut place.lockrun(&["semaphore", "--limit", "2", "-n", &key, "--", "true"]));
    place.status(&output, 0, "a semaphore once the writer is gone");
}

/// `flock(1)` on the lock file, with `args` (`-s`, `-x`, `-n`).
fn flock(file: &Path, args: &[&str], script: &str) -> Command {
    let mut cmd = Command::new("flock");
    cmd.args(args).arg(file).args(["sh", "-c", script]);
    cmd
}

/// lockrun's readers and `flock -s` share the lock; `flock -x` and a
/// lockrun writer exclude them, both ways.
#[test]
fn local_readers_interoperate_with_flock() {
    let place = Place::local();
    let key = place.key("interop");
    let file = place.lock_dir().join(&key);
    let work = scratch();
    // lockrun -s holding: flock -s gets in at once, flock -x does not.
    let reader = place.hold(work.path(), "", &["elect", "-s", &key]);
    let output = run(&mut flock(&file, &["-n", "-s"], "true"));
    assert_eq!(output.status.code(), Some(0), "flock -s beside lockrun -s");
    let output = run(&mut flock(&file, &["-n", "-x"], "true"));
    assert_eq!(output.status.code(), Some(1), "flock -x beside lockrun -s");
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&reader.finish(), 0, "the reader");
    // flock -s holding: lockrun -s runs, lockrun -x is busy.
    let held = scratch();
    let mut holder = Running::spawn(&mut flock(
        &file,
        &["-s"],
        &format!(
            "touch {0}/ready; while [ ! -e {0}/go ]; do sleep 0.05; done",
            held.path().display()
        ),
    ));
    wait_for_file(&held.path().join("ready"));
    let output = run(&mut place.lockrun(&["elect", "-n", "-s", &key, "--", "true"]));
    place.status(&output, 0, "lockrun -s beside flock -s");
    let output = run(&mut place.lockrun(&["elect", "-n", &key, "--", "true"]));
    place.status(&output, 75, "lockrun -x beside flock -s");
    let output = run(&mut place.lockrun(&["leader", &key]));
    assert!(stdout(&output).contains("(shared)"), "{}", stdout(&output));
    std::fs::write(held.path().join("go"), "").unwrap();
    assert!(procs::wait_until(procs::deadline(), || holder.exited()));
    // flock -x holding: lockrun -s is busy.
    let held = scratch();
    let _x = crate::support::FlockHolder::start(&file, held.path());
    let output = run(&mut place.lockrun(&["elect", "-n", "-s", &key, "--", "true"]));
    place.status(&output, 75, "lockrun -s beside flock -x");
}

/// A psql session holding `lock(id)` (`pg_advisory_lock_shared` or
/// `pg_advisory_lock`) until its input closes; it touches `ready` once the
/// lock is its.
fn psql_holding(lock: &str, id: &str, ready: &Path) -> std::process::Child {
    use std::io::Write;
    let mut child = crate::engines::postgres::support::psql()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("psql");
    let stdin = child.stdin.as_mut().expect("piped");
    writeln!(stdin, "select {lock}({id});\n\\! touch {}", ready.display()).unwrap();
    stdin.flush().unwrap();
    wait_for_file(ready);
    child
}

/// Ends a [`psql_holding`] session and waits until the server freed `id`.
fn psql_ends(mut child: std::process::Child, id: &str) {
    drop(child.stdin.take());
    let _ = child.wait();
    let held = format!(
        "select count(*) from pg_locks where locktype = 'advisory' and objsubid = 1 \
         and ((classid::bigint << 32) | objid::bigint) = {id}"
    );
    assert!(
        procs::wait_until(
            procs::deadline(),
            || crate::engines::postgres::support::psql_ok(&held) == "0"
        ),
        "the server kept psql's lock {id}"
    );
}

/// lockrun's readers and psql's `pg_advisory_lock_shared` on the same id
/// share the lock; `pg_advisory_lock` and a lockrun writer exclude them,
/// both ways.
#[test]
fn postgres_readers_interoperate_with_psql() {
    use crate::engines::postgres::support::psql_ok;
    let place = Place::postgres("shared-psql");
    let key = place.key("interop");
    let id = psql_ok(&format!(
        "select ('x' || substr(md5('{key}'), 1, 16))::bit(64)::bigint"
    ));
    let work = scratch();
    // lockrun -s holding: psql's shared try succeeds, its exclusive one
    // fails (each psql -c is a session of its own, whose lock ends with it).
    let reader = place.hold(work.path(), "", &["elect", "-s", &key]);
    assert_eq!(
        psql_ok(&format!("select pg_try_advisory_lock_shared({id})")),
        "t"
    );
    assert_eq!(psql_ok(&format!("select pg_try_advisory_lock({id})")), "f");
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&reader.finish(), 0, "the reader");
    // psql holding shared: lockrun -s runs, lockrun -x is busy, and leader
    // shows kind "shared".
    let held = scratch();
    let psql = psql_holding("pg_advisory_lock_shared", &id, &held.path().join("ready"));
    let output = run(&mut place.lockrun(&["elect", "-n", "-s", &key, "--", "true"]));
    place.status(&output, 0, "lockrun -s beside psql's shared lock");
    let output = run(&mut place.lockrun(&["elect", "-n", &key, "--", "true"]));
    place.status(&output, 75, "lockrun -x beside psql's shared lock");
    let output = run(&mut place.lockrun(&["leader", "--json", &key]));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["kind"], "shared", "{json}");
    psql_ends(psql, &id);
    // psql holding exclusive: lockrun -s is busy.
    let held = scratch();
    let psql = psql_holding("pg_advisory_lock", &id, &held.path().join("ready"));
    let output = run(&mut place.lockrun(&["elect", "-n", "-s", &key, "--", "true"]));
    place.status(&output, 75, "lockrun -s beside psql's exclusive lock");
    psql_ends(psql, &id);
}

/// A reader whose lease is lost (its server process terminated) stops with
/// 124; the other reader runs on.
#[test]
fn a_lost_postgres_reader_stops_alone() {
    use crate::engines::postgres::support::psql_ok;
    let place = Place::postgres("shared-loss");
    let key = place.key("loss");
    let lose = |one: &Path| {
        let id = std::fs::read_to_string(one.join("id")).unwrap();
        // The backend holding "lost"'s lock: its facts name its value.
        let terminated = psql_ok(&format!(
            "select pg_terminate_backend(l.pid) from pg_locks l join pg_stat_activity a on a.pid = l.pid \
             where l.locktype = 'advisory' and l.objsubid = 1 and l.granted \
             and ((l.classid::bigint << 32) | l.objid::bigint) = {} and a.query like '%lost%'",
            id.trim()
        ));
        assert_eq!(terminated, "t", "one reader's backend terminated");
    };
    a_lost_reader_stops_alone(
        &place,
        &key,
        "echo $LOCKRUN_PG_LOCK_ID > \"$1/id\";",
        lose,
        || {},
    );
}

/// A lease of 60 s from `etcdctl lease grant`, in hex as etcdctl takes it.
fn etcd_lease() -> String {
    let out = crate::engines::etcd::support::etcdctl_ok(&["lease", "grant", "60"]);
    // "lease 694d8c3b5d0a1c0a granted with TTL(60s)"
    out.split_whitespace()
        .nth(1)
        .expect("a lease id")
        .to_owned()
}

/// etcd's reader-writer recipe (`client/v3/experimental/recipes`), its
/// layout driven through etcdctl: a `KEY/write/N` key with a lease holds
/// lockrun's readers off, a `KEY/read/N` key shares with them and holds
/// lockrun's writers off, and a lockrun reader's own key is a `KEY/read/`
/// key with its lease, older than any writer's that comes after it, which
/// the recipe's writer therefore waits for.
#[test]
fn etcd_readers_interoperate_with_the_recipe_layout() {
    use crate::engines::etcd::support::etcdctl_ok;
    let place = Place::etcd("shared-recipe");
    let key = place.key("interop");
    // A recipe writer holds.
    let lease = etcd_lease();
    etcdctl_ok(&["put", "--lease", &lease, &format!("{key}/write/1"), ""]);
    let output = run(&mut place.lockrun(&["elect", "-n", "-s", &key, "--", "true"]));
    place.status(&output, 75, "lockrun -s beside the recipe's writer");
    etcdctl_ok(&["lease", "revoke", &lease]);
    // A recipe reader holds.
    let lease = etcd_lease();
    etcdctl_ok(&["put", "--lease", &lease, &format!("{key}/read/1"), ""]);
    let output = run(&mut place.lockrun(&["elect", "-n", "-s", &key, "--", "true"]));
    place.status(&output, 0, "lockrun -s beside the recipe's reader");
    let output = run(&mut place.lockrun(&["elect", "-n", &key, "--", "true"]));
    place.status(&output, 75, "lockrun -x beside the recipe's reader");
    let output = run(&mut place.lockrun(&["leader", "--json", &key]));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["kind"], "shared", "{json}");
    etcdctl_ok(&["lease", "revoke", &lease]);
    // A lockrun reader holds: its key is where the recipe's writer looks.
    let work = scratch();
    let reader = place.hold(work.path(), "", &["elect", "-s", "--value", "r", &key]);
    let keys = etcdctl_ok(&["get", "--prefix", &format!("{key}/"), "--keys-only"]);
    let keys: Vec<&str> = keys.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(keys[0].starts_with(&format!("{key}/read/")), "{keys:?}");
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&reader.finish(), 0, "the reader");
}

/// A reader whose lease is revoked stops with 124; the other reader runs
/// on, still holding.
#[test]
fn a_lost_etcd_reader_stops_alone() {
    let place = Place::etcd("shared-loss");
    let key = place.key("loss");
    let lose = |one: &Path| {
        let entry = std::fs::read_to_string(one.join("entry")).unwrap();
        let lease = entry.trim().rsplit('/').next().unwrap().to_owned();
        crate::engines::etcd::support::etcdctl_ok(&["lease", "revoke", &lease]);
    };
    a_lost_reader_stops_alone(
        &place,
        &key,
        "echo $ETCD_LOCK_KEY > \"$1/entry\";",
        lose,
        || {},
    );
}

/// One lock of etcd's reader-writer recipe (`client/v3/experimental/
/// recipes/rwmutex.go`), its steps driven through etcdctl: a `side`
/// (`read` or `write`) key `KEY/<side>/<ns>` on a lease of its own, then
/// the recipe's wait, the newest key by ModRevision older than ours under
/// `KEY/write` for a reader and under `KEY/` for a writer, until there is
/// none (the recipe watches that key's deletion and looks again; here the
/// look is repeated). It holds for `hold`, then revokes its lease; its span
/// is its own timestamps.
fn recipe_lock(key: &str, side: &str, hold: Duration) -> (u128, u128) {
    use crate::engines::etcd::support::etcdctl_ok;
    let lease = etcd_lease();
    let mine = format!("{key}/{side}/{}", crate::support::now_ns());
    let put = etcdctl_ok(&["put", "--lease", &lease, &mine, "", "-w", "json"]);
    let put: serde_json::Value = serde_json::from_str(&put).expect("etcdctl's JSON");
    let revision = put["header"]["revision"].as_i64().expect("a revision");
    let blockers = match side {
        "read" => format!("{key}/write"),
        _ => format!("{key}/"),
    };
    // The recipe's `Get(prefix, WithLastRev(), WithMaxModRev(rev - 1))`,
    // its filter applied here (etcdctl 3.4 has no --max-mod-rev).
    let older = || {
        let found = etcdctl_ok(&["get", "--prefix", &blockers, "-w", "json"]);
        let found: serde_json::Value = serde_json::from_str(&found).expect("etcdctl's JSON");
        found["kvs"].as_array().is_some_and(|kvs| {
            kvs.iter()
                .any(|kv| kv["mod_revision"].as_i64().is_some_and(|m| m < revision))
        })
    };
    let clear = procs::wait_until(procs::deadline(), || !older());
    assert!(clear, "the recipe's {side} lock never got `{key}`");
    let start = crate::support::now_ns();
    std::thread::sleep(hold);
    let end = crate::support::now_ns();
    etcdctl_ok(&["lease", "revoke", &lease]);
    (start, end)
}

/// The recipe's reader waits for a lockrun writer, which puts
/// `KEY/write/<lease>` where the recipe's reader looks (etcd's mutex key,
/// `KEY/<lease>`, it would not see); the recipe's writer and lockrun's
/// readers exclude each other, both ways. Spans are the holders' own
/// timestamps; each first holder holds a second so the other is surely
/// queued meanwhile.
#[test]
fn etcd_recipe_locks_and_lockrun_exclude_each_other_both_ways() {
    let place = Place::etcd("shared-recipe-both");
    let key = place.key("both");
    let work = scratch();
    let hold = Duration::from_secs(1);
    let apart = |a: (u128, u128), b: (u128, u128), what: &str| {
        assert!(a.1 <= b.0 || b.1 <= a.0, "{what} overlap: {a:?} {b:?}");
    };
    // A lockrun writer holds: the recipe's reader waits for it.
    let writer = spawn(
        &place,
        &["elect", &key],
        work.path(),
        "w",
        "touch \"$1/in-w\"; sleep 1",
    );
    wait_for_file(&work.path().join("in-w"));
    let reader = recipe_lock(&key, "read", Duration::from_millis(100));
    place.status(&writer.finish(), 0, "the lockrun writer");
    apart(
        span(work.path(), "w"),
        reader,
        "lockrun's writer and the recipe's reader",
    );
    // A lockrun reader holds: the recipe's writer waits for it.
    let lockrun_reader = spawn(
        &place,
        &["elect", "-s", &key],
        work.path(),
        "r",
        "touch \"$1/in-r\"; sleep 1",
    );
    wait_for_file(&work.path().join("in-r"));
    let writer = recipe_lock(&key, "write", Duration::from_millis(100));
    place.status(&lockrun_reader.finish(), 0, "the lockrun reader");
    apart(
        span(work.path(), "r"),
        writer,
        "lockrun's reader and the recipe's writer",
    );
    // The recipe's writer holds: a lockrun reader that comes meanwhile
    // waits for it.
    let k = key.clone();
    let recipe = std::thread::spawn(move || recipe_lock(&k, "write", hold));
    let queued = procs::wait_until(procs::deadline(), || {
        crate::engines::etcd::support::etcdctl_ok(&[
            "get",
            "--prefix",
            &format!("{key}/write/"),
            "--keys-only",
        ])
        .lines()
        .any(|l| !l.is_empty())
    });
    assert!(queued, "the recipe's writer never put its key");
    let late = spawn(&place, &["elect", "-s", &key], work.path(), "late", "true");
    let writer = recipe.join().unwrap();
    place.status(
        &late.finish(),
        0,
        "the lockrun reader behind the recipe's writer",
    );
    apart(
        span(work.path(), "late"),
        writer,
        "the recipe's writer and a lockrun reader",
    );
}

/// `list` names a lock held by a reader by its own key, with kind
/// "shared" (on etcd the reader's entry is `KEY/read/<lease>`, and a
/// writer's `KEY/write/<lease>`: neither is a lock of its own).
fn list_names_a_shared_lock_by_its_key(place: &Place) {
    let prefix = place.key("ls");
    let lock = format!("{prefix}/a");
    let work = scratch();
    let reader = place.hold(work.path(), "", &["elect", "-s", "--value", "r1", &lock]);
    let output = run(&mut place.lockrun(&["list", "--json", &prefix]));
    place.status(&output, 0, "list --json while a reader holds");
    let lines: Vec<serde_json::Value> = stdout(&output)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{output:?}");
    assert_eq!(lines[0]["key"], lock.as_str(), "{output:?}");
    assert_eq!(lines[0]["kind"], "shared", "{output:?}");
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&reader.finish(), 0, "the reader");
}
on_every_engine!(list_names_a_shared_lock_by_its_key);
