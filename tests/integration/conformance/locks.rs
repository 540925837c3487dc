//! The backend-independent suite: the same scenarios, word for word, on
//! every engine (SPEC §6: the subcommands, exit statuses, signals and the
//! safety promise are the same everywhere). Consul runs on the emulator, or
//! on a real agent with `LOCKRUN_TEST_CONSUL_ADDR`; etcd is the real one the
//! suite starts, and so is PostgreSQL; `local` needs nothing.

use nix::sys::signal::Signal;

use crate::places::{on_every_engine, stdout, Place};
use crate::support::{max_overlap, run, scratch, Running};

/// `lockrun elect KEY -- sh -c SCRIPT` on `place`, run to its end.
fn elect_sh(place: &Place, key: &str, script: &str) -> std::process::Output {
    run(&mut place.lockrun(&["elect", key, "--", "sh", "-c", script]))
}

fn the_childs_status_key_and_a_growing_fence(place: &Place) {
    let key = place.key("status");
    let mut fences = Vec::new();
    for _ in 0..3 {
        let output = elect_sh(place, &key, "echo $LOCKRUN_KEY $LOCKRUN_LOCK_INDEX; exit 7");
        place.status(&output, 7, "the child's own status");
        let out = stdout(&output);
        let words: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(words.first(), Some(&key.as_str()), "{out}");
        fences.push(words[1].parse::<u64>().unwrap());
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
}
on_every_engine!(the_childs_status_key_and_a_growing_fence);

/// The first round's guard is forked from lockrun before its runtime, not
/// exec'd: the child's parent is named `lr-guard` and has lockrun's own
/// environment, without the leftovers an exec'd guard is given there. (An
/// exec'd guard would cost each start a second exec, not safety, so only
/// this test would notice.) Its command line is `lr-guard` alone, which
/// `pkill -f lockrun` does not match (issue #45).
fn the_first_guard_is_forked_not_execd(place: &Place) {
    let key = place.key("forked");
    let output = elect_sh(
        place,
        &key,
        r#"cat /proc/$PPID/comm; tr '\0' ' ' < /proc/$PPID/cmdline; echo; tr '\0' '\n' < /proc/$PPID/environ | cut -d= -f1 | tr '\n' ' '"#,
    );
    place.status(&output, 0, "the child reading its guard");
    let out = stdout(&output);
    let mut lines = out.lines();
    let name = lines.next().unwrap_or_default();
    let cmdline = lines.next().unwrap_or_default();
    let environ = lines.next().unwrap_or_default();
    assert_eq!(name, lockrun::child::guard::PROCESS_NAME, "{out}");
    assert_eq!(
        cmdline.split_whitespace().collect::<Vec<_>>(),
        [lockrun::child::guard::PROCESS_NAME],
        "the guard's command line is not its name alone: {out}"
    );
    assert!(
        !environ
            .split_whitespace()
            .any(|name| name == lockrun::child::guard::LEFTOVERS_ENV),
        "the guard was exec'd: {out}"
    );
}
on_every_engine!(the_first_guard_is_forked_not_execd);

/// Runs `count` lockruns with `args` at once; each child logs its own span.
fn contend(place: &Place, count: usize, args: &[&str]) -> Vec<(u128, u128)> {
    let work = scratch();
    let body = "s=$(date +%s%N); sleep 0.1; e=$(date +%s%N); echo $s $e > \"$1/span-$2\"";
    let runs: Vec<Running> = (0..count)
        .map(|i| {
            let mut cmd = place.lockrun(args);
            cmd.args(["--shell", "--", body])
                .arg(work.path())
                .arg(i.to_string());
            Running::spawn(&mut cmd)
        })
        .collect();
    for running in runs {
        place.status(&running.finish(), 0, "a contender");
    }
    (0..count)
        .map(|i| {
            let text = std::fs::read_to_string(work.path().join(format!("span-{i}"))).unwrap();
            let mut words = text.split_whitespace().map(|w| w.parse::<u128>().unwrap());
            (words.next().unwrap(), words.next().unwrap())
        })
        .collect()
}

fn contenders_never_overlap(place: &Place) {
    let key = place.key("churn");
    let spans = contend(place, 6, &["elect", &key]);
    assert_eq!(max_overlap(spans.iter().copied()), 1, "{spans:?}");
}
on_every_engine!(contenders_never_overlap);

fn a_semaphore_never_exceeds_its_limit(place: &Place) {
    let prefix = place.key("pool");
    let spans = contend(place, 5, &["semaphore", "--limit", "2", &prefix]);
    let overlap = max_overlap(spans.iter().copied());
    assert!(overlap <= 2, "{overlap} at once: {spans:?}");
    let output = run(&mut place.lockrun(&["leader", &prefix]));
    place.status(&output, 1, "leader of an idle semaphore");
}
on_every_engine!(a_semaphore_never_exceeds_its_limit);

fn a_taken_lock_gives_75_or_the_chosen_status(place: &Place) {
    let key = place.key("busy");
    let work = scratch();
    let holder = place.hold(work.path(), "", &["elect", "--value", "h1", &key]);
    let output = run(&mut place.lockrun(&["elect", "-n", &key, "--", "true"]));
    place.status(&output, 75, "--no-wait while held");
    let output = run(&mut place.lockrun(&["elect", "-n", "-E", "0", &key, "--", "true"]));
    place.status(&output, 0, "-E 0 while held");
    let output = run(&mut place.lockrun(&["elect", "--timeout", "300ms", &key, "--", "true"]));
    place.status(&output, 75, "--timeout while held");
    let output = run(&mut place.lockrun(&["leader", &key]));
    place.status(&output, 0, "leader while held");
    assert_eq!(stdout(&output), "h1\n");
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
    let output = run(&mut place.lockrun(&["leader", &key]));
    place.status(&output, 1, "leader once released");
}
on_every_engine!(a_taken_lock_gives_75_or_the_chosen_status);

fn release_stops_the_holder_with_124(place: &Place) {
    let key = place.key("released");
    let work = scratch();
    let holder = place.hold(
        work.path(),
        "trap 'touch \"$1/term\"; exit 143' TERM;",
        &["elect", "--value", "web-3", &key],
    );
    let output = run(&mut place.lockrun(&["release", &key]));
    place.status(&output, 0, "release");
    assert!(stdout(&output).contains("web-3"), "{output:?}");
    // The line says what release did (#40): etcd revokes the holder's
    // lease and PostgreSQL ends its session, asking nobody.
    let did = match place {
        Place::Etcd { .. } => "revoked the lease holding `",
        Place::Postgres { .. } => "ended server process ",
        Place::Consul(..) => "released `",
        Place::Local(_) => "asked the holder of `",
        Place::Zookeeper { .. } => "released `",
    };
    assert!(stdout(&output).starts_with(did), "{output:?}");
    place.status(&holder.finish(), 124, "the released holder");
    if place.release_keeps_the_grace() {
        assert!(
            work.path().join("term").exists(),
            "the child was not asked to stop"
        );
    }
}
on_every_engine!(release_stops_the_holder_with_124);

fn a_stop_request_reaches_the_child_and_ends_lockrun_by_it(place: &Place) {
    let key = place.key("stopped");
    let work = scratch();
    let holder = place.hold(
        work.path(),
        "trap 'touch \"$1/term\"; exit 143' TERM;",
        &["elect", &key],
    );
    holder.signal(Signal::SIGTERM);
    let output = holder.finish();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(output.status.signal(), Some(libc::SIGTERM), "{output:?}");
    assert!(
        work.path().join("term").exists(),
        "the child never saw TERM"
    );
    // Released on the way out: the next run takes the lock at once.
    let output = run(&mut place.lockrun(&["elect", "-n", &key, "--", "true"]));
    place.status(&output, 0, "the next run");
}
on_every_engine!(a_stop_request_reaches_the_child_and_ends_lockrun_by_it);

/// Issue #43: `--max-time` stops a job that outlives it with the status
/// of its own (123), the release hook runs, and the lock is free after.
/// A zero time is a usage error that writes nothing.
fn a_job_past_max_time_exits_123_and_releases(place: &Place) {
    let key = place.key("max-time");
    let work = scratch();
    let hook = format!("touch {}/released", work.path().display());
    let output = run(&mut place.lockrun(&[
        "-v",
        "elect",
        "--max-time",
        "500ms",
        "--on-release",
        &hook,
        &key,
        "--",
        "sleep",
        "60",
    ]));
    place.status(&output, 123, "a job past --max-time");
    // `-v` says why the job ended.
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("ran --max-time 500ms and was stopped"),
        "{output:?}"
    );
    assert!(work.path().join("released").exists(), "no release hook");
    let output = run(&mut place.lockrun(&["leader", &key]));
    place.status(&output, 1, "leader after the stop");
    let output = run(&mut place.lockrun(&["elect", "--max-time", "0", &key, "--", "true"]));
    place.status(&output, 2, "--max-time 0");
    // A campaigner whose job ran its time campaigns again: its job starts
    // a second time, and a stop ends the run as ever.
    let runs = work.path().join("runs");
    let mut cmd = place.lockrun(&[
        "elect",
        "--campaign",
        "--max-time",
        "300ms",
        &key,
        "--shell",
        "--",
        "echo run >> \"$1\"; exec sleep 60",
    ]);
    cmd.arg(&runs);
    let campaigner = Running::spawn(&mut cmd);
    let twice = crate::procs::wait_until(
        std::time::Instant::now() + std::time::Duration::from_secs(30),
        || std::fs::read_to_string(&runs).is_ok_and(|t| t.lines().count() >= 2),
    );
    campaigner.signal(Signal::SIGTERM);
    let output = campaigner.finish();
    assert!(twice, "the campaigner's job did not run again: {output:?}");
}
on_every_engine!(a_job_past_max_time_exits_123_and_releases);

/// `lockrun list PREFIX` (#43): nothing held is 1; then a lock and a
/// semaphore slot under PREFIX are its rows and JSON lines, in the schema
/// of `leader --json`, and a lock beside PREFIX (`PREFIXx`) is not.
fn list_shows_what_is_held_under_a_prefix(place: &Place) {
    let prefix = place.key("l");
    let output = run(&mut place.lockrun(&["list", &prefix]));
    place.status(&output, 1, "list of an empty prefix");
    assert_eq!(stdout(&output), "", "{output:?}");
    let (lock, sem, beside) = (
        format!("{prefix}/a"),
        format!("{prefix}/s"),
        place.key("lx"),
    );
    let works = [scratch(), scratch(), scratch()];
    let holders = [
        place.hold(works[0].path(), "", &["elect", "--value", "lock-1", &lock]),
        place.hold(
            works[1].path(),
            "",
            &["semaphore", "--limit", "2", "--value", "slot-1", &sem],
        ),
        place.hold(
            works[2].path(),
            "",
            &["elect", "--value", "beside", &beside],
        ),
    ];
    let output = run(&mut place.lockrun(&["list", "--json", &prefix]));
    place.status(&output, 0, "list --json while held");
    let lines: Vec<serde_json::Value> = stdout(&output)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{output:?}");
    let leader = run(&mut place.lockrun(&["leader", "--json", &lock]));
    let leader: serde_json::Value = serde_json::from_str(&stdout(&leader)).unwrap();
    assert_eq!(lines[0], leader, "list's line is leader's");
    assert_eq!(lines[1]["key"], sem.as_str());
    assert_eq!(lines[1]["kind"], "semaphore");
    assert_eq!(lines[1]["limit"], 2);
    assert_eq!(lines[1]["holders"][0]["value"], "slot-1");
    let output = run(&mut place.lockrun(&["list", &prefix]));
    place.status(&output, 0, "list while held");
    let table = stdout(&output);
    let rows: Vec<&str> = table.lines().collect();
    assert!(rows[0].starts_with("KEY "), "{table}");
    assert!(
        rows[1].starts_with(&format!("{lock} ")) && rows[1].contains(" lock-1 "),
        "{table}"
    );
    assert!(
        rows[2].starts_with(&format!("{sem} ")) && rows[2].contains(" slot-1 "),
        "{table}"
    );
    assert_eq!(rows.len(), 3, "{table}");
    for (work, holder) in works.iter().zip(holders) {
        std::fs::write(work.path().join("go"), "").unwrap();
        place.status(&holder.finish(), 0, "a holder");
    }
    let output = run(&mut place.lockrun(&["list", &prefix]));
    place.status(&output, 1, "list once all is released");
}
on_every_engine!(list_shows_what_is_held_under_a_prefix);

/// `elect --replace` (#43) against a lockrun holder whose command started
/// a daemon: the replacer's command starts only after the daemon's last
/// beat (by their own timestamps), the replacer says whom it replaced, and
/// the replaced holder exits 124 with a loss line naming the replacer's
/// host, pid and value, from the note (on PostgreSQL, a notification).
fn replace_takes_the_lock_without_overlap(place: &Place) {
    let key = place.key("replaced");
    let work = scratch();
    // The daemon ignores SIGTERM, so it beats until the SIGKILL a second
    // later: where a release leaves the holder its grace (Consul, local),
    // a replacer that did not wait for the holder's end would start well
    // inside that second.
    let mut cmd = place.lockrun(&[
        "elect",
        "--kill-timeout",
        "1s",
        "--value",
        "old-holder",
        &key,
        "--shell",
        "--",
        &stubborn_daemon(),
    ]);
    cmd.arg(work.path());
    let holder = Running::spawn(&mut cmd);
    crate::places::wait_for_a_beat(work.path());
    let mark = work.path().join("replacer");
    let mut cmd = place.lockrun(&[
        "elect",
        "--replace",
        "--value",
        "new-holder",
        &key,
        "--shell",
        "--",
        "date +%s%N > \"$1\"",
    ]);
    cmd.arg(&mark);
    let replacer = Running::spawn(&mut cmd);
    let replacer_pid = replacer.pid();
    let output = replacer.finish();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    place.status(&output, 0, "--replace");
    assert!(
        stderr.contains("replaced old-holder (lockrun pid "),
        "{stderr}"
    );
    let held = holder.finish();
    place.status(&held, 124, "the replaced holder");
    let lost = String::from_utf8_lossy(&held.stderr).into_owned();
    let named = format!(
        "taken over by --replace from host {} pid {replacer_pid} (new-holder)",
        lockrun::host::hostname()
    );
    assert!(lost.contains(&named), "{lost}");
    std::fs::write(work.path().join("go"), "").unwrap();
    daemon_gone_before_replacer(work.path(), &mark);
    // Nothing holds it once the replacer is done.
    let listed = run(&mut place.lockrun(&["list", &key]));
    place.status(&listed, 1, "list once the replacer is done");
}
on_every_engine!(replace_takes_the_lock_without_overlap);

/// `--replace --timeout` that runs out while the asked holder's daemon
/// still runs (it ignores SIGTERM for a 2 s kill timeout): one line says
/// so, and the run exits as `--timeout` does, 75, with nothing run; the
/// holder, asked already, stops all the same (#43, attack review: it was
/// 125, where the docs say 75).
fn replace_that_runs_out_of_time_exits_75(place: &Place) {
    let key = place.key("replace-timeout");
    let work = scratch();
    let mut cmd = place.lockrun(&[
        "elect",
        "--kill-timeout",
        "2s",
        &key,
        "--shell",
        "--",
        &stubborn_daemon(),
    ]);
    cmd.arg(work.path());
    let holder = Running::spawn(&mut cmd);
    crate::places::wait_for_a_beat(work.path());
    let mark = work.path().join("replacer");
    let mut cmd = place.lockrun(&[
        "elect",
        "--replace",
        "--timeout",
        "500ms",
        &key,
        "--shell",
        "--",
        "date +%s%N > \"$1\"",
    ]);
    cmd.arg(&mark);
    let output = Running::spawn(&mut cmd).finish();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    place.status(&output, 75, "--replace whose --timeout ran out");
    assert!(stderr.contains("--timeout ran out"), "{stderr}");
    assert!(!mark.exists(), "the replacer ran its command: {stderr}");
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 124, "the asked holder");
}
on_every_engine!(replace_that_runs_out_of_time_exits_75);

/// `elect --replace` (#43) with others about: a lockrun holder whose
/// daemon ignores SIGTERM (killed a second later), a plain waiter queued
/// before the replacer, the replacer, and a second `--replace` from
/// another host at the same moment. The lock stays held in the engine
/// until the old tree is gone (the holder lets go once asked through the
/// note, after its stop), so no two of the four commands ever beat at the
/// same time, by their own timestamps. The replaced holder exits 124
/// naming one of the replacers; the others end 0, or 124 when a later
/// replacer took over from them, and the far replacer 125 where the engine
/// refuses a holder on another host.
fn replace_leaves_the_lock_held_until_the_old_tree_is_gone(place: &Place) {
    let key = place.key("crowded");
    let work = scratch();
    let mut cmd = place.lockrun(&[
        "elect",
        "--kill-timeout",
        "1s",
        "--value",
        "old-holder",
        &key,
        "--shell",
        "--",
        &stubborn_daemon(),
    ]);
    cmd.arg(work.path());
    let holder = Running::spawn(&mut cmd);
    crate::places::wait_for_a_beat(work.path());
    // Each contender's command beats into a file of its own for a while.
    let beats = "i=0; while [ $i -lt 20 ]; do date +%s%N >> \"$1\"; sleep 0.01; i=$((i+1)); done";
    let contender = |args: &[&str], name: &str| {
        let mut all = vec!["elect", "--kill-timeout", "1s", "--value", name];
        all.extend_from_slice(args);
        all.extend([key.as_str(), "--shell", "--", beats]);
        let mut cmd = place.lockrun(&all);
        cmd.arg(work.path().join(name));
        cmd
    };
    let waiter = Running::spawn(&mut contender(&[], "waiter"));
    // Queued before the replacers, where the engine shows its queue.
    let queued = crate::procs::wait_until(crate::procs::deadline(), || {
        let out = run(&mut place.lockrun(&["leader", "--json", &key]));
        let line: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        match &line["waiters"] {
            serde_json::Value::Array(w) => !w.is_empty(),
            _ => true,
        }
    });
    assert!(queued, "the waiter never queued");
    // The holder's lockrun is stopped (its daemon beats on) until a
    // contender's command beats, or for 2 s: where the lock were free while
    // the replacers wait, the waiter would run beside the daemon then, not
    // only in the moment a holder takes to see its loss.
    let stopped = nix::unistd::Pid::from_raw(holder.pid() as i32);
    nix::sys::signal::kill(stopped, Signal::SIGSTOP).unwrap();
    let replacer = Running::spawn(&mut contender(&["--replace"], "replacer"));
    let far = Running::spawn(&mut on_host(
        &contender(&["--replace"], "far-replacer"),
        "elsewhere-host",
    ));
    let soon = std::time::Instant::now() + std::time::Duration::from_secs(2);
    crate::procs::wait_until(soon, || {
        ["waiter", "replacer", "far-replacer"].iter().any(|f| {
            std::fs::read_to_string(work.path().join(f)).is_ok_and(|t| t.lines().count() >= 3)
        })
    });
    nix::sys::signal::kill(stopped, Signal::SIGCONT).unwrap();
    let (replacer_pid, far_pid) = (replacer.pid(), far.pid());
    let held = holder.finish();
    place.status(&held, 124, "the replaced holder");
    let lost = String::from_utf8_lossy(&held.stderr).into_owned();
    let here = lockrun::host::hostname();
    assert!(
        lost.contains(&format!(
            "taken over by --replace from host {here} pid {replacer_pid} (replacer)"
        )) || lost.contains(&format!(
            "taken over by --replace from host elsewhere-host pid {far_pid} (far-replacer)"
        )),
        "{lost}"
    );
    let ended = [
        ("waiter", waiter.finish(), &[0, 124][..]),
        ("replacer", replacer.finish(), &[0, 124][..]),
        ("far-replacer", far.finish(), &[0, 124, 125][..]),
    ];
    for (name, output, codes) in &ended {
        let code = output.status.code().unwrap_or(-1);
        if !codes.contains(&code) {
            place.status(output, codes[0], name);
        }
    }
    std::fs::write(work.path().join("go"), "").unwrap();
    // Every command's span, from its first beat to its last.
    let span = |file: &str| -> Option<(u128, u128)> {
        let text = std::fs::read_to_string(work.path().join(file)).ok()?;
        let beats: Vec<u128> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        Some((*beats.iter().min()?, *beats.iter().max()?))
    };
    let spans: Vec<(&str, (u128, u128))> = ["beat", "waiter", "replacer", "far-replacer"]
        .into_iter()
        .filter_map(|f| span(f).map(|s| (f, s)))
        .collect();
    assert!(spans.len() >= 3, "too few commands ran: {spans:?}");
    for (i, (a, (a0, a1))) in spans.iter().enumerate() {
        for (b, (b0, b1)) in &spans[i + 1..] {
            let overlap = a1.min(b1).saturating_sub(*a0.max(b0));
            assert!(
                a1 < b0 || b1 < a0,
                "{a} and {b} ran together for {} ms",
                overlap / 1_000_000
            );
        }
    }
}

on_every_engine!(replace_leaves_the_lock_held_until_the_old_tree_is_gone);

/// A holder's COMMAND for the `--replace` tests: the daemon of
/// `contain::DAEMONIZE`, beating into `$1/beat`, made to ignore SIGTERM, so
/// that it beats until the SIGKILL at the end of the kill timeout.
pub fn stubborn_daemon() -> String {
    crate::conformance::contain::DAEMONIZE.replacen("'while", "'trap \"\" TERM; while", 1)
}

/// The replaced holder's daemon beat for the last time (in `work/beat`)
/// before the replacer's command started (its time in `mark`).
fn daemon_gone_before_replacer(work: &std::path::Path, mark: &std::path::Path) {
    let started: u128 = std::fs::read_to_string(mark)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let last = crate::places::last_beat(work);
    assert!(
        last < started,
        "the replaced holder's daemon beat {} ms after the replacer's command started",
        (last - started) / 1_000_000
    );
}

/// `cmd`, run in a UTS namespace of its own whose host name is `host`: a
/// lockrun there says it runs on another host.
fn on_host(cmd: &std::process::Command, host: &str) -> std::process::Command {
    let mut other = std::process::Command::new("unshare");
    other
        .args([
            "-u",
            "sh",
            "-c",
            "hostname \"$1\" && shift && exec \"$@\"",
            "sh",
        ])
        .arg(host)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (name, value) in cmd.get_envs() {
        match value {
            Some(value) => other.env(name, value),
            None => other.env_remove(name),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        other.current_dir(dir);
    }
    other
}

/// `elect --replace` of a lockrun holder on another host (#43), whose
/// command's daemon ignores SIGTERM and is killed a second later: on every
/// engine with a server the replacer asks it by the note, waits until the
/// holder says its tree is gone (it removes the note naming the replacer;
/// on PostgreSQL it answers on the replacer's channel), and only then
/// starts; the replaced holder exits 124 naming it. On local (a lock on
/// this host's files) one line, 125, and the holder keeps the lock.
fn replace_waits_out_a_holder_on_another_host(place: &Place) {
    let key = place.key("elsewhere");
    let work = scratch();
    let holder = place.lockrun(&[
        "elect",
        "--kill-timeout",
        "1s",
        "--value",
        "far-holder",
        &key,
        "--shell",
        "--",
        &stubborn_daemon(),
    ]);
    let mut cmd = on_host(&holder, "elsewhere-host");
    cmd.arg(work.path());
    let holder = Running::spawn(&mut cmd);
    crate::places::wait_for_a_beat(work.path());
    let mark = work.path().join("replacer");
    let mut cmd = place.lockrun(&[
        "elect",
        "--replace",
        "--timeout",
        "60s",
        "--value",
        "new-holder",
        &key,
        "--shell",
        "--",
        "date +%s%N > \"$1\"",
    ]);
    cmd.arg(&mark);
    let replacer = Running::spawn(&mut cmd);
    let replacer_pid = replacer.pid();
    let output = replacer.finish();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if !matches!(place, Place::Local(..)) {
        place.status(&output, 0, "--replace of a holder on another host");
        assert!(
            stderr.contains("replaced far-holder on elsewhere-host as the holder of `")
                && stderr.contains("its lockrun said its command had stopped"),
            "{stderr}"
        );
        let held = holder.finish();
        place.status(&held, 124, "the replaced holder");
        let lost = String::from_utf8_lossy(&held.stderr).into_owned();
        let named = format!(
            "taken over by --replace from host {} pid {replacer_pid} (new-holder)",
            lockrun::host::hostname()
        );
        assert!(lost.contains(&named), "{lost}");
        std::fs::write(work.path().join("go"), "").unwrap();
        daemon_gone_before_replacer(work.path(), &mark);
    } else {
        place.status(&output, 125, "--replace of a holder on another host");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("runs on elsewhere-host")
                && stderr.contains("run --replace on elsewhere-host"),
            "{stderr}"
        );
        assert!(!mark.exists(), "the replacer's command ran");
        let leader = run(&mut place.lockrun(&["leader", &key]));
        assert_eq!(stdout(&leader), "far-holder\n");
        std::fs::write(work.path().join("go"), "").unwrap();
        place.status(&holder.finish(), 0, "the holder left alone");
    }
}
on_every_engine!(replace_waits_out_a_holder_on_another_host);

/// `elect --replace` of a lockrun holder that cannot say its command
/// stopped nor exit (SIGSTOPped, as a frozen or cut-off host's would be),
/// on another host (`far`) or this one: the replacer waits until the
/// holder's lease would have lapsed, within which the holder's guard kills
/// the tree by itself, and its command starts after the daemon's last
/// beat. On a real Consul agent, whose shortest TTL makes this 14 s, only
/// the far holder is tried. On ZooKeeper and PostgreSQL, whose engines do
/// not show the holder's lease, the replacer never releases a far holder:
/// it waits until the engine ends the claim itself (the session's expiry,
/// idle_session_timeout), within which the holder's guard ends its tree.
fn replace_waits_for_a_silent_holders_lease(place: &Place, far: bool) {
    use nix::sys::signal::kill;
    use nix::unistd::Pid;
    let key = place.key("silent");
    let work = scratch();
    // The shortest lease each engine takes with a grace period that fits
    // (a real Consul agent's shortest session TTL is 10s).
    let real_consul = std::env::var_os(crate::engines::consul::support::REAL_AGENT_ENV)
        .is_some_and(|a| !a.is_empty());
    if real_consul && !far {
        return;
    }
    let mut args = vec!["elect"];
    match place {
        Place::Consul(..) => args.extend([
            "--ttl",
            if real_consul { "10s" } else { "3s" },
            "--lock-delay",
            "1s",
            "--kill-timeout",
            "1s",
        ]),
        _ => args.extend(["--ttl", "3s", "--kill-timeout", "300ms"]),
    }
    let daemon = stubborn_daemon();
    args.extend(["--value", "silent-holder", &key, "--shell", "--", &daemon]);
    let mut cmd = if far {
        on_host(&place.lockrun(&args), "elsewhere-host")
    } else {
        place.lockrun(&args)
    };
    cmd.arg(work.path());
    let holder = Running::spawn(&mut cmd);
    crate::places::wait_for_a_beat(work.path());
    let stopped = Pid::from_raw(holder.pid() as i32);
    kill(stopped, Signal::SIGSTOP).unwrap();
    let mark = work.path().join("replacer");
    let mut cmd = place.lockrun(&[
        "elect",
        "--replace",
        "--timeout",
        "60s",
        "--value",
        "new-holder",
        &key,
        "--shell",
        "--",
        "date +%s%N > \"$1\"",
    ]);
    cmd.arg(&mark);
    let output = run(&mut cmd);
    kill(stopped, Signal::SIGCONT).unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    place.status(&output, 0, "--replace of a silent holder on another host");
    let said = if far && matches!(place, Place::Postgres { .. } | Place::Zookeeper { .. }) {
        stderr.contains("replaced silent-holder on elsewhere-host as the holder of `")
            && stderr.contains(
                "did not say its command had stopped, so we waited until the engine ended its claim",
            )
    } else if far {
        stderr.contains("replaced silent-holder on elsewhere-host as the holder of `")
            && stderr.contains("did not say its command had stopped, so we waited")
    } else {
        stderr.contains(&format!(
            "replaced silent-holder (lockrun pid {}) as the holder of `",
            holder.pid()
        )) && stderr.contains("it did not exit, so we waited")
    };
    assert!(said, "{stderr}");
    daemon_gone_before_replacer(work.path(), &mark);
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(
        &holder.finish(),
        124,
        "the replaced holder, once it runs again",
    );
}

mod replace_waits_for_a_silent_holders_lease {
    use super::*;

    #[test]
    fn on_consul() {
        super::replace_waits_for_a_silent_holders_lease(
            &Place::consul("replace_waits_for_a_silent_holders_lease"),
            true,
        );
    }

    #[test]
    fn on_etcd() {
        super::replace_waits_for_a_silent_holders_lease(
            &Place::etcd("replace_waits_for_a_silent_holders_lease"),
            true,
        );
    }

    #[test]
    fn on_postgres() {
        super::replace_waits_for_a_silent_holders_lease(
            &Place::postgres("replace_waits_for_a_silent_holders_lease"),
            true,
        );
    }

    #[test]
    fn on_zookeeper() {
        super::replace_waits_for_a_silent_holders_lease(
            &Place::zookeeper("replace_waits_for_a_silent_holders_lease"),
            true,
        );
    }

    #[test]
    fn on_consul_on_this_host() {
        super::replace_waits_for_a_silent_holders_lease(
            &Place::consul("replace_waits_for_a_silent_holders_lease_here"),
            false,
        );
    }

    #[test]
    fn on_etcd_on_this_host() {
        super::replace_waits_for_a_silent_holders_lease(
            &Place::etcd("replace_waits_for_a_silent_holders_lease_here"),
            false,
        );
    }
}

/// `semaphore --replace` (#43) takes the oldest slot: of two holders of a
/// full semaphore, the first is replaced (124) and the second keeps its
/// slot.
fn replace_takes_a_semaphores_oldest_slot(place: &Place) {
    let prefix = place.key("pool");
    let works = [scratch(), scratch()];
    let first = place.hold(
        works[0].path(),
        "",
        &["semaphore", "--limit", "2", "--value", "first", &prefix],
    );
    let second = place.hold(
        works[1].path(),
        "",
        &["semaphore", "--limit", "2", "--value", "second", &prefix],
    );
    let output = run(&mut place.lockrun(&[
        "semaphore",
        "--limit",
        "2",
        "--replace",
        "--value",
        "third",
        &prefix,
        "--",
        "true",
    ]));
    place.status(&output, 0, "semaphore --replace");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(stderr.contains("replaced first "), "{stderr}");
    let first = first.finish();
    place.status(&first, 124, "the oldest holder");
    let lost = String::from_utf8_lossy(&first.stderr).into_owned();
    let named = format!(
        "taken over by --replace from host {} pid ",
        lockrun::host::hostname()
    );
    match place {
        Place::Postgres { .. } => assert!(lost.contains("--replace"), "{lost}"),
        _ => assert!(lost.contains(&named) && lost.contains(" (third)"), "{lost}"),
    }
    std::fs::write(works[1].path().join("go"), "").unwrap();
    place.status(&second.finish(), 0, "the second holder, left alone");
}
on_every_engine!(replace_takes_a_semaphores_oldest_slot);

/// A TERM to a `--replace` waiting for a stopped holder that may never
/// answer (PostgreSQL's, on this host, with no --timeout): it ends that
/// wait at once, answered as a signal while waiting for the lock (lockrun
/// dies by it, as systemd expects of a clean stop), where it used to pend
/// for ever with the signal held back.
#[test]
fn a_signal_ends_a_replace_that_waits() {
    let place = Place::postgres("replace_signal");
    let key = place.key("k");
    let work = scratch();
    let holder = place.heartbeat(work.path(), "", &["elect", "--value", "stuck", &key]);
    let stopped = nix::unistd::Pid::from_raw(holder.pid() as i32);
    nix::sys::signal::kill(stopped, Signal::SIGSTOP).unwrap();
    let replacer = Running::spawn(&mut place.lockrun(&[
        "elect",
        "--replace",
        "--value",
        "replacer",
        &key,
        "--",
        "true",
    ]));
    // A moment in (the outcome is the same whether it has asked yet).
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let sent = std::time::Instant::now();
    replacer.signal(Signal::SIGTERM);
    let out = replacer.finish();
    let took = sent.elapsed();
    nix::sys::signal::kill(stopped, Signal::SIGCONT).unwrap();
    std::fs::write(work.path().join("go"), "").unwrap();
    let _ = holder.finish();
    let stderr = String::from_utf8_lossy(&out.stderr);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGTERM),
        "{:?}: {stderr}",
        out.status
    );
    assert!(
        took < std::time::Duration::from_secs(5),
        "took {took:?}: {stderr}"
    );
}

/// A `--campaign` holder that `--replace` takes the lock from ends (124)
/// instead of campaigning again: it took the lock straight back from its
/// replacer, which then waited out its --timeout (attack review).
#[test]
fn a_replaced_campaigner_does_not_campaign_again() {
    let place = Place::etcd("replace_campaigner");
    let key = place.key("k");
    let work = scratch();
    let holder = place.hold(
        work.path(),
        "",
        &["elect", "--campaign", "--value", "camp", &key],
    );
    let out = run(&mut place.lockrun(&[
        "elect",
        "--replace",
        "--timeout",
        "30s",
        "--value",
        "replacer",
        &key,
        "--",
        "true",
    ]));
    place.status(&out, 0, "the replacer");
    place.status(&holder.finish(), 124, "the replaced campaigner");
}

/// The waiters `leader --json` shows for `key` (priority, value); empty
/// where the engine shows none.
fn shown_waiters(place: &Place, key: &str) -> Vec<(u64, String)> {
    let out = run(&mut place.lockrun(&["leader", "--json", key]));
    let line: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    line["waiters"]
        .as_array()
        .map(|w| {
            w.iter()
                .map(|w| {
                    let priority = w["priority"].as_u64().unwrap_or(0);
                    (priority, w["value"].as_str().unwrap_or("").to_owned())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `elect --replace` (#43, goal 2) goes ahead of a plain lockrun waiter
/// queued before it: the replacer's command runs first, then the
/// waiter's, never together (their own timestamps). And a replacer that
/// gives up (`--timeout` runs out on a stopped holder) leaves nothing that
/// keeps the waiter out: no record above every priority is shown once it
/// has exited 125, and the waiter takes the lock when its holder lets go.
fn replace_goes_ahead_of_earlier_waiters(place: &Place) {
    let key = place.key("jump");
    let work = scratch();
    let spans = scratch();
    let stamped = "date +%s%N >> \"$1\"; sleep 0.3; date +%s%N >> \"$1\"";
    let contender = |args: &[&str], name: &str| {
        let mut all = vec!["elect", "--value", name];
        all.extend_from_slice(args);
        all.extend([key.as_str(), "--shell", "--", stamped]);
        let mut cmd = place.lockrun(&all);
        cmd.arg(spans.path().join(name));
        cmd
    };
    let queued = |value: &str| {
        let shown = crate::procs::wait_until(crate::procs::deadline(), || {
            shown_waiters(place, &key).iter().any(|(_, v)| v == value)
        });
        assert!(shown, "{value} never showed as a waiter");
    };
    let holder = place.hold(work.path(), "", &["elect", "--value", "old", &key]);
    let waiter = Running::spawn(&mut contender(&[], "waiter"));
    queued("waiter");
    let replacer = run(&mut contender(&["--replace"], "replacer"));
    place.status(&replacer, 0, "--replace");
    place.status(&holder.finish(), 124, "the replaced holder");
    place.status(&waiter.finish(), 0, "the waiter");
    let span = |name: &str| -> (u128, u128) {
        let text = std::fs::read_to_string(spans.path().join(name)).unwrap();
        let stamps: Vec<u128> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        assert_eq!(stamps.len(), 2, "{name}: {text}");
        (stamps[0], stamps[1])
    };
    let (first, then) = (span("replacer"), span("waiter"));
    assert!(
        first.1 < then.0,
        "the waiter queued before --replace ran first or beside it: replacer {first:?}, waiter {then:?}"
    );

    // Giving up: the holder is stopped, so it never answers, and
    // --timeout runs out with our record put.
    let work = scratch();
    std::fs::remove_file(spans.path().join("waiter")).unwrap();
    let holder = place.hold(work.path(), "", &["elect", "--value", "old", &key]);
    let waiter = Running::spawn(&mut contender(&[], "waiter"));
    queued("waiter");
    let stopped = nix::unistd::Pid::from_raw(holder.pid() as i32);
    nix::sys::signal::kill(stopped, Signal::SIGSTOP).unwrap();
    let gave_up = run(&mut contender(&["--replace", "--timeout", "2s"], "gave-up"));
    let left = shown_waiters(place, &key);
    nix::sys::signal::kill(stopped, Signal::SIGCONT).unwrap();
    place.status(&gave_up, 75, "--replace whose --timeout ran out");
    assert!(
        left.iter().all(|(p, _)| *p <= 1000),
        "a record ahead of the waiters outlived the replacer that gave up: {left:?}"
    );
    std::fs::write(work.path().join("go"), "").unwrap();
    let held = holder.finish();
    let code = held.status.code().unwrap_or(-1);
    if code != 124 {
        place.status(&held, 0, "the holder the replacer gave up on");
    }
    place.status(&waiter.finish(), 0, "the waiter after a replacer gave up");
    assert!(
        !spans.path().join("gave-up").exists(),
        "the replacer that gave up ran"
    );
}
mod replace_goes_ahead_of_earlier_waiters {
    use super::*;

    #[test]
    fn on_local() {
        super::replace_goes_ahead_of_earlier_waiters(&Place::local());
    }

    #[test]
    fn on_etcd() {
        super::replace_goes_ahead_of_earlier_waiters(&Place::etcd(
            "replace_goes_ahead_of_earlier_waiters",
        ));
    }

    #[test]
    fn on_postgres() {
        super::replace_goes_ahead_of_earlier_waiters(&Place::postgres(
            "replace_goes_ahead_of_earlier_waiters",
        ));
    }

    #[test]
    fn on_zookeeper() {
        super::replace_goes_ahead_of_earlier_waiters(&Place::zookeeper(
            "replace_goes_ahead_of_earlier_waiters",
        ));
    }
}
