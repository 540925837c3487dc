//! A run's life on every engine, each scenario once: the child's status
//! passes through, signals reach it, a loss from outside stops it within
//! --kill-timeout, `leader` and `release` of a free key, and the status
//! endpoint's /metrics.

use std::os::unix::process::ExitStatusExt;

use nix::sys::signal::Signal;

use crate::places::{last_beat, on_every_engine, stdout, Place};
use crate::procs::{deadline, wait_until};
use crate::support::{now_ns, run, scratch, wait_for_file};

/// The child's own status is lockrun's: 0, 3, and 128+N for a child
/// killed by signal N (SPEC §5).
fn the_childs_own_status_passes_through(place: &Place) {
    let key = place.key("status");
    for (script, code) in [("exit 0", 0), ("exit 3", 3), ("kill -USR1 $$", 138)] {
        let output = run(&mut place.lockrun(&["elect", &key, "--", "sh", "-c", script]));
        place.status(&output, code, script);
    }
}
on_every_engine!(the_childs_own_status_passes_through);

/// SIGINT to lockrun reaches the child, and lockrun ends by it as the
/// child did; SIGHUP reaches the child and the run goes on. (SIGTERM:
/// `locks::a_stop_request_reaches_the_child_and_ends_lockrun_by_it`.)
fn signals_reach_the_child(place: &Place) {
    let key = place.key("signals");
    let work = scratch();
    let holder = place.hold(
        work.path(),
        "trap 'touch \"$1/hup\"' HUP; trap 'touch \"$1/int\"; exit 130' INT;",
        &["elect", &key],
    );
    holder.signal(Signal::SIGHUP);
    wait_for_file(&work.path().join("hup"));
    holder.signal(Signal::SIGINT);
    let output = holder.finish();
    assert_eq!(output.status.signal(), Some(libc::SIGINT), "{output:?}");
    assert!(work.path().join("int").exists(), "the child never saw INT");
    let output = run(&mut place.lockrun(&["elect", "-n", &key, "--", "true"]));
    place.status(&output, 0, "the next run, after INT");
}
on_every_engine!(signals_reach_the_child);

/// The holder's claim taken from outside (`Place::revoke`, the engine's
/// own act): lockrun exits 124, and a child that ignores SIGTERM is gone
/// within --kill-timeout of the loss (plus the time to see it).
fn a_loss_stops_the_child_within_the_kill_timeout(place: &Place) {
    let key = place.key("loss");
    let work = scratch();
    let holder = place.heartbeat(
        work.path(),
        "trap '' TERM;",
        &["elect", "--kill-timeout", "1s", &key],
    );
    let lost = now_ns();
    place.revoke(&key);
    place.status(&holder.finish(), 124, "the holder that lost its lock");
    let after = last_beat(work.path()).saturating_sub(lost) / 1_000_000;
    // 1 s of --kill-timeout, and 1.5 s to see the loss on a loaded host.
    assert!(
        after < 2_500,
        "the child beat {after} ms after its lock was taken"
    );
}
on_every_engine!(a_loss_stops_the_child_within_the_kill_timeout);

/// `leader` of a key nobody holds exits 1 and prints nothing; `release`
/// of it exits 1 (nothing to release) and writes nothing: the key is
/// still free.
fn leader_and_release_of_a_free_key(place: &Place) {
    let key = place.key("free");
    let output = run(&mut place.lockrun(&["leader", &key]));
    place.status(&output, 1, "leader of a free key");
    assert_eq!(stdout(&output), "", "{output:?}");
    let output = run(&mut place.lockrun(&["release", &key]));
    place.status(&output, 1, "release of a free key");
    assert_eq!(stdout(&output), "", "{output:?}");
    let output = run(&mut place.lockrun(&["elect", "-n", &key, "--", "true"]));
    place.status(&output, 0, "a run after the release of a free key");
}
on_every_engine!(leader_and_release_of_a_free_key);

/// The status endpoint (`--status-addr` on a socket path) answers
/// /leader 200 and /metrics `lockrun_held 1` while the lock is held.
fn the_status_endpoint_shows_the_hold(place: &Place) {
    let key = place.key("endpoint");
    let work = scratch();
    let sock = work.path().join("status.sock");
    let holder = place.hold(
        work.path(),
        "",
        &["elect", "--status-addr", sock.to_str().unwrap(), &key],
    );
    let answered = wait_until(deadline(), || {
        crate::ops::get(&sock, "/leader").is_some_and(|(code, _)| code == 200)
    });
    assert!(answered, "/leader never answered 200");
    let (code, metrics) = crate::ops::get(&sock, "/metrics").expect("/metrics answers");
    assert_eq!(code, 200, "{metrics}");
    assert!(metrics.lines().any(|l| l == "lockrun_held 1"), "{metrics}");
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
}
on_every_engine!(the_status_endpoint_shows_the_hold);

/// `check` and a fenced `put` with the holder's sequencer, by the engine's
/// capability: where it keeps data, `put` writes while the holder holds and
/// is refused (nothing written) once the lock was taken from it; where it
/// keeps none, `check` follows the holder and `put` says it has nowhere to
/// write (2).
fn check_and_put_follow_the_sequencer(place: &Place) {
    if place.read(&place.key("probe")).is_some() {
        crate::ops::check_and_put_refuse_after_a_loss(place, |key| place.read(key).flatten());
    } else {
        crate::ops::check_follows_its_holder_where_put_has_nowhere_to_write(place);
    }
}
on_every_engine!(check_and_put_follow_the_sequencer);

/// A command that cannot be found is 127, and one that is not executable
/// 126, as in a shell, each said in one line naming it, before anything is
/// written to the engine: nothing is left under the test's prefix.
fn a_command_that_cannot_run_is_127_or_126_and_writes_nothing(place: &Place) {
    let key = place.key("cannot-run");
    let output = run(&mut place.lockrun(&["elect", &key, "--", "lockrun-no-such-command-xyz"]));
    place.status(&output, 127, "command not found");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("lockrun-no-such-command-xyz"), "{stderr}");
    let work = scratch();
    let file = work.path().join("not-executable");
    std::fs::write(&file, "#!/bin/sh\nexit 0\n").unwrap();
    let output = run(&mut place.lockrun(&["elect", &key, "--", file.to_str().unwrap()]));
    place.status(&output, 126, "not executable");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("not-executable"), "{stderr}");
    place.assert_nothing_written("a command that cannot run");
}
on_every_engine!(a_command_that_cannot_run_is_127_or_126_and_writes_nothing);

/// A key with the characters of a URL's query, spaces and non-ASCII is
/// that key and no other: held under it, shown by `leader` and `list`
/// with its value, and a sibling at the part before the `?` stays free.
fn keys_with_special_characters_work_and_inject_nothing(place: &Place) {
    let prefix = place.key("special");
    let key = format!("{prefix}/a?b c#d&acquire=x/ü");
    let work = scratch();
    let holder = place.hold(work.path(), "", &["elect", "--value", "v1", &key]);
    let output = run(&mut place.lockrun(&["leader", &key]));
    place.status(&output, 0, "leader of the special key");
    assert_eq!(stdout(&output), "v1\n");
    let output = run(&mut place.lockrun(&["elect", "-n", &key, "--", "true"]));
    place.status(&output, 75, "the special key is held");
    let output = run(&mut place.lockrun(&["leader", &format!("{prefix}/a")]));
    place.status(&output, 1, "leader of the key before the `?`");
    let output = run(&mut place.lockrun(&["list", "--json", &prefix]));
    place.status(&output, 0, "list of the prefix");
    let keys: Vec<String> = stdout(&output)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            v["key"].as_str().expect("a key").to_owned()
        })
        .collect();
    assert_eq!(keys, std::slice::from_ref(&key), "{output:?}");
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
}
on_every_engine!(keys_with_special_characters_work_and_inject_nothing);
