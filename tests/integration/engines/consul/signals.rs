//! Signals sent to lockrun while the child runs: forwarded to the child's
//! whole process group; INT/TERM/QUIT bounded by --kill-timeout.

use nix::sys::signal::Signal;

use crate::engines::consul::support::TestConsul;
use crate::procs::{self, pid_alive, read_pid_file, wait_until};
use crate::support::{
    assert_killed_by, assert_status, lockrun, scratch, script, script_with, wait_for_file, Running,
};

fn elect_shell(
    consul: &TestConsul,
    key: &str,
    kill_timeout: &str,
    body: &str,
    dir: &str,
) -> Running {
    // The lock-delay only has to leave room for the grace period; with the
    // clock-rate margin (a sixth of TTL + lock-delay) a 61 s grace needs a
    // TTL of 90 s to leave a stop window.
    Running::spawn(&mut lockrun(
        consul,
        [
            "elect",
            "--ttl",
            "90s",
            "--lock-delay",
            "60s",
            "--kill-timeout",
            kill_timeout,
            "--shell",
            key,
            "--",
            body,
            dir,
        ],
    ))
}

#[test]
fn usr1_and_hup_reach_the_child_and_its_grandchildren_and_term_ends_the_run() {
    let consul = TestConsul::start();
    let key = consul.prefix("signals-forward") + "/leader";
    let dir = scratch();
    let d = dir.path().display().to_string();
    let body = script(&format!(
        "sh -c 'trap \"echo usr1 >> {d}/grandchild\" USR1; echo $$ > {d}/gpid; while :; do sleep 0.05; done' & \
         trap 'echo usr1 >> {d}/child' USR1; trap 'echo hup >> {d}/child' HUP; \
         trap 'echo term >> {d}/child; exit 7' TERM; \
         while [ ! -e {d}/gpid ]; do sleep 0.05; done; touch {d}/armed; while :; do sleep 0.05; done"
    ));
    let running = elect_shell(&consul, &key, "2s", &body, &d);
    wait_for_file(&dir.path().join("armed"));
    let grandchild = read_pid_file(&dir.path().join("gpid"), procs::deadline());
    running.signal(Signal::SIGUSR1);
    let child_log = dir.path().join("child");
    let grand_log = dir.path().join("grandchild");
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
    assert!(
        wait_until(procs::deadline(), || read(&child_log).contains("usr1")),
        "child got USR1"
    );
    assert!(
        wait_until(procs::deadline(), || read(&grand_log).contains("usr1")),
        "grandchild got USR1"
    );
    running.signal(Signal::SIGHUP);
    assert!(
        wait_until(procs::deadline(), || read(&child_log).contains("hup")),
        "child got HUP"
    );
    let child = read_pid_file(&dir.path().join("pid"), procs::deadline());
    assert!(pid_alive(child), "HUP and USR1 leave the run going");
    running.signal(Signal::SIGTERM);
    let output = running.finish();
    assert_status(&output, 7, "the child's own status after TERM", &consul);
    assert!(read(&child_log).contains("term"));
    assert!(
        wait_until(procs::deadline(), || !pid_alive(grandchild)),
        "the grandchild is gone with the run (HUP ended it, or the final sweep)"
    );
    assert!(consul.api().kv_get(&key).is_none(), "released");
}

#[test]
fn a_child_that_ignores_term_is_killed_after_the_kill_timeout() {
    let consul = TestConsul::start();
    let key = consul.prefix("signals-ladder") + "/leader";
    let dir = scratch();
    let d = dir.path().display().to_string();
    let body = script_with(
        &format!("trap 'echo ignored >> {d}/term' TERM;"),
        "while :; do sleep 0.05; done",
    );
    let running = elect_shell(&consul, &key, "300ms", &body, &d);
    wait_for_file(&dir.path().join("ready"));
    let pid = read_pid_file(&dir.path().join("pid"), procs::deadline());
    running.signal(Signal::SIGTERM);
    let output = running.finish();
    assert_status(
        &output,
        128 + 9,
        "SIGKILLed after the grace period",
        &consul,
    );
    assert!(dir.path().join("term").exists(), "TERM was delivered first");
    assert!(!pid_alive(pid));
}

#[test]
fn a_second_interrupt_kills_at_once() {
    let consul = TestConsul::start();
    let key = consul.prefix("signals-twice") + "/leader";
    let dir = scratch();
    let d = dir.path().display().to_string();
    let body = script_with(
        &format!("trap 'echo int >> {d}/int' INT;"),
        "while :; do sleep 0.05; done",
    );
    // A grace period longer than the test waits for the run to end: only the
    // second signal can end it in time.
    let running = elect_shell(&consul, &key, "61s", &body, &d);
    wait_for_file(&dir.path().join("ready"));
    running.signal(Signal::SIGINT);
    assert!(wait_until(procs::deadline(), || dir
        .path()
        .join("int")
        .exists()));
    running.signal(Signal::SIGINT);
    let output = running.finish();
    assert_status(&output, 128 + 9, "killed on the second interrupt", &consul);
}

/// systemd's `systemctl stop` sends TERM: the child dies of it, and lockrun
/// must then die of it too (a clean stop to systemd), not exit 143 (a
/// failure), having released the lock first.
#[test]
fn term_while_holding_ends_lockrun_by_term_after_releasing() {
    let consul = TestConsul::start();
    let key = consul.prefix("signals-stop") + "/leader";
    let dir = scratch();
    let d = dir.path().display().to_string();
    let body = script("while :; do sleep 0.05; done");
    let running = elect_shell(&consul, &key, "5s", &body, &d);
    wait_for_file(&dir.path().join("ready"));
    let pid = read_pid_file(&dir.path().join("pid"), procs::deadline());
    running.signal(Signal::SIGTERM);
    let output = running.finish();
    assert_killed_by(&output, Signal::SIGTERM, "TERM while holding", &consul);
    assert!(!pid_alive(pid));
    assert!(consul.api().kv_get(&key).is_none(), "released before dying");
}

/// Issue #12: once the lock was lost, lockrun stopped the child without
/// listening: an interrupt during the grace period neither reached the child
/// nor cut the grace short.
#[test]
fn an_interrupt_while_stopping_after_a_loss_kills_at_once() {
    let consul = TestConsul::start();
    let key = consul.prefix("signals-after-loss") + "/leader";
    let dir = scratch();
    let d = dir.path().display().to_string();
    let body = script_with(
        &format!("trap 'echo term >> {d}/term' TERM; echo \"$LOCKRUN_SESSION\" > {d}/session;"),
        "while :; do sleep 0.05; done",
    );
    // A grace period longer than the test waits for the run to end: only
    // the interrupt can end it in time.
    let running = elect_shell(&consul, &key, "61s", &body, &d);
    wait_for_file(&dir.path().join("ready"));
    let session = std::fs::read_to_string(dir.path().join("session")).unwrap();
    let destroyed = consul
        .api()
        .put(&format!("/v1/session/destroy/{}", session.trim()), "");
    assert_eq!(destroyed.status, 200, "{}", destroyed.text());
    // The loss was noticed and the ladder started: the child got TERM.
    assert!(
        wait_until(procs::deadline(), || dir.path().join("term").exists()),
        "the child was asked to stop after the loss"
    );
    running.signal(Signal::SIGINT);
    let output = running.finish();
    assert_status(
        &output,
        124,
        "the lock was lost; the interrupt killed the child at once",
        &consul,
    );
}

/// A signal that arrives before lockrun has its handlers (here: pending
/// when lockrun starts, which `env --block-signal` and `exec` arrange
/// without a race) is answered like a later one: death by it, nothing held.
#[test]
fn a_signal_during_start_up_is_honoured() {
    let consul = TestConsul::start();
    let key = consul.prefix("signals-start-up") + "/leader";
    let supported = std::process::Command::new("env")
        .args(["--block-signal=HUP", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !supported {
        eprintln!("skipped: needs env --block-signal (GNU coreutils 8.31 or later)");
        return;
    }
    let lockrun_cmd = lockrun(&consul, ["elect", &key, "--", "true"]);
    let mut cmd = std::process::Command::new("env");
    cmd.args([
        "--block-signal=HUP",
        "sh",
        "-c",
        r#"kill -HUP $$; exec "$0" "$@""#,
    ])
    .arg(lockrun_cmd.get_program())
    .args(lockrun_cmd.get_args());
    for (name, value) in lockrun_cmd.get_envs() {
        match value {
            Some(value) => cmd.env(name, value),
            None => cmd.env_remove(name),
        };
    }
    let output = crate::support::run(&mut cmd);
    let what = crate::support::describe(&cmd, &output, Some(&consul));
    // Ended by the signal itself, as a shell reports with 129.
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        output.status.signal(),
        Some(Signal::SIGHUP as i32),
        "{what}"
    );
    assert!(
        consul.api().kv_get(&key).and_then(|e| e.session).is_none(),
        "{what}"
    );
}
