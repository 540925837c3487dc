//! One blip (a reset connection, a 500 during an election) at any step of a
//! run costs time, not the run: session creation, the lock transaction,
//! the semaphore's first read and its joining transaction are all retried
//! within the patience the user gave. Emulator only: the blips are its
//! fault injection.

use consul_emulator::BlipKind;

use crate::engines::consul::support::TestConsul;
use crate::support::{describe, lockrun, run};

/// A step of a run, as the request that carries it: method, a fragment of
/// the request target, and which matching request (from 1).
struct Step {
    name: &'static str,
    method: &'static str,
    needle: String,
    nth: u32,
}

fn step(name: &'static str, method: &'static str, needle: String) -> Step {
    Step {
        name,
        method,
        needle,
        nth: 1,
    }
}

/// Runs `args` with one blip of each kind at each step, under each kind of
/// patience, and expects the child's own status every time.
fn survives(consul: &TestConsul, steps: &[Step], args: impl Fn(&str) -> Vec<String>) {
    let emu = consul.emulator().expect("blips need the emulator");
    for patience in [&[][..], &["--timeout", "60s"][..], &["--no-wait"][..]] {
        for kind in [BlipKind::Drop, BlipKind::NoLeader] {
            for s in steps {
                emu.blip(s.method, &s.needle, s.nth, kind);
                // The subcommand, then the patience, then its own flags.
                let mut all = args(s.name);
                let flags = patience.iter().map(|a| a.to_string());
                all.splice(1..1, flags);
                let mut cmd = lockrun(consul, &all);
                let output = run(&mut cmd);
                let what = format!(
                    "{:?} at {}\n{}",
                    kind,
                    s.name,
                    describe(&cmd, &output, Some(consul))
                );
                assert_eq!(emu.blips_pending(), 0, "the blip never came\n{what}");
                assert_eq!(output.status.code(), Some(0), "{what}");
                assert_eq!(output.stdout, b"ran\n", "{what}");
            }
        }
    }
}

#[test]
fn a_blip_at_any_step_of_elect_costs_time_not_the_run() {
    let consul = TestConsul::emulator_only(|b| b);
    let prefix = consul.prefix("blips-elect");
    let steps = [
        step("session", "PUT", "/v1/session/create".into()),
        // One transaction both writes the lock and answers the entry.
        step("acquire", "PUT", "/v1/txn".into()),
    ];
    survives(&consul, &steps, |name| {
        [
            "elect",
            "--lock-delay",
            "0s",
            "--kill-timeout",
            "1s",
            &format!("{prefix}/{name}"),
            "--",
            "echo",
            "ran",
        ]
        .map(String::from)
        .to_vec()
    });
}

#[test]
fn a_blip_at_any_step_of_semaphore_costs_time_not_the_run() {
    let consul = TestConsul::emulator_only(|b| b);
    let prefix = consul.prefix("blips-semaphore");
    let steps = [
        step("session", "PUT", "/v1/session/create".into()),
        step("read", "GET", format!("/v1/kv/{prefix}/read/?recurse")),
        // The contender entry and the record, in one transaction.
        step("join", "PUT", "/v1/txn".into()),
    ];
    survives(&consul, &steps, |name| {
        [
            "semaphore",
            "--limit",
            "2",
            &format!("{prefix}/{name}"),
            "--",
            "echo",
            "ran",
        ]
        .map(String::from)
        .to_vec()
    });
}

/// A failure that outlasts the patience ends the run with lockrun's status
/// and a last line naming the step, soon after the patience ran out.
#[test]
fn a_failure_longer_than_the_patience_names_its_step() {
    let consul = TestConsul::emulator_only(|b| b);
    let emu = consul.emulator().expect("blips need the emulator");
    let key = consul.prefix("blips-gave-up") + "/leader";
    emu.set_drop_connections(true);
    for (patience, within) in [("--no-wait", 5), ("--timeout=2s", 10)] {
        let started = std::time::Instant::now();
        let mut cmd = lockrun(&consul, ["elect", patience, &key, "--", "true"]);
        let output = run(&mut cmd);
        let what = describe(&cmd, &output, Some(&consul));
        assert_eq!(output.status.code(), Some(125), "{what}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("lockrun: creating a session: ") && last.ends_with("gave up retrying"),
            "{what}"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(within),
            "{what}"
        );
    }
}
