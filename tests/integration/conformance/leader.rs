//! `lockrun leader` and `release` as scripts use them, on every engine:
//! `--wait` for a holder, `--watch` each change of holder, `-q`.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;

use crate::places::{on_every_engine, stdout, Place};
use crate::procs;
use crate::support::{run, scratch, Running};

/// `leader --wait` blocks while nobody holds the key and answers with the
/// holder's value once someone takes it; with a short --timeout and no
/// holder it exits 1.
fn leader_wait_returns_when_someone_acquires(place: &Place) {
    let key = place.key("wait");
    let mut waiter =
        Running::spawn(&mut place.lockrun(&["leader", "--wait", "--timeout", "60s", &key]));
    let output = run(&mut place.lockrun(&["leader", "--wait", "--timeout", "300ms", &key]));
    place.status(&output, 1, "no holder by the deadline");
    assert_eq!(stdout(&output), "", "{output:?}");
    // The first waiter was there all along, and still waits.
    assert!(!waiter.exited(), "--wait returned with nobody holding");
    let work = scratch();
    let holder = place.hold(
        work.path(),
        "",
        &["elect", "--value", "the-new-leader", &key],
    );
    let output = waiter.finish();
    place.status(&output, 0, "--wait saw a holder");
    assert_eq!(stdout(&output), "the-new-leader\n");
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
}
on_every_engine!(leader_wait_returns_when_someone_acquires);

/// `leader --watch` prints a line per change of holder, in order: the
/// empty line for nobody, then each holder's value.
fn leader_watch_prints_each_change_of_holder_in_order(place: &Place) {
    let key = place.key("watch");
    let mut cmd = place.lockrun(&["leader", "--watch", &key]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut watcher = cmd.spawn().expect("start the watcher");
    let out = watcher.stdout.take().unwrap();
    let (lines, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            if lines.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    // One line per change of what is printed: a line repeated would be a
    // change of the engine's record that is no change of holder (on local,
    // the holder's facts growing its child's group), which --watch keeps
    // to itself.
    let next = || {
        rx.recv_timeout(procs::PATIENCE)
            .expect("a line from --watch")
    };
    assert_eq!(next(), "", "no holder at first");
    for value in ["alpha", "beta"] {
        let work = scratch();
        let holder = place.hold(work.path(), "", &["elect", "--value", value, &key]);
        assert_eq!(next(), value, "the arrival of {value}");
        std::fs::write(work.path().join("go"), "").unwrap();
        place.status(&holder.finish(), 0, "a holder");
        assert_eq!(next(), "", "the departure of {value}");
    }
    let _ = watcher.kill();
    let _ = watcher.wait();
}
on_every_engine!(leader_watch_prints_each_change_of_holder_in_order);

/// `-q` silences notes, not answers: `release` of a free key says
/// "nothing to release" by default and nothing with `-q` (1 both ways);
/// `-q leader` still prints the holder.
fn quiet_silences_notes_but_not_answers(place: &Place) {
    let key = place.key("quiet");
    let output = run(&mut place.lockrun(&["release", &key]));
    place.status(&output, 1, "nothing held");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("nothing to release"),
        "a note by default: {stderr}"
    );
    let output = run(&mut place.lockrun(&["-q", "release", &key]));
    place.status(&output, 1, "nothing held, quietly");
    assert!(output.stderr.is_empty(), "-q prints no note: {output:?}");
    let work = scratch();
    let holder = place.hold(work.path(), "", &["elect", "--value", "v", &key]);
    let output = run(&mut place.lockrun(&["-q", "leader", &key]));
    place.status(&output, 0, "held");
    assert_eq!(stdout(&output), "v\n", "answers still go to stdout");
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
}
on_every_engine!(quiet_silences_notes_but_not_answers);
