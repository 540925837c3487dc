//! `lockrun explain`: the timing promise per backend, worked out from the
//! flags alone. No engine runs in these tests, and addresses that answer
//! nothing show that none is contacted.

use std::process::Command;

use crate::support::{bin, run};

fn explain(args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    for name in ["CONSUL_HTTP_ADDR", "ETCDCTL_ENDPOINTS", "LOCKRUN_BACKEND"] {
        cmd.env_remove(name);
    }
    cmd.args(args);
    cmd
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = run(&mut explain(args));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn etcd_with_the_issues_settings_covers_the_default_bound() {
    // 10.255.255.1 answers nothing: a run that tried would hang, not print.
    let v = json(&[
        "--backend",
        "etcd",
        "--endpoints",
        "10.255.255.1:2379",
        "explain",
        "--json",
        "elect",
        "--ttl",
        "5s",
        "k",
    ]);
    assert_eq!(v["backend"], "etcd");
    assert_eq!(v["rival_after_ms"], 5000);
    // 5 s x (1 - 16.7 %) - 50 ms for late timers.
    assert_eq!(v["killed_by_ms"], 4116);
    assert_eq!(v["margin_ms"], 883);
    assert_eq!(v["rate_margin_ms"], 833);
    assert_eq!(v["scheduling_ms"], 50);
    assert_eq!(v["clock_rate_error_ppm"], 166_666);
    assert_eq!(v["tolerated_rate_error_ppm"], 166_666);
    assert_eq!(v["loss_grace_ms"], 0);
    // This host's clock, read with adjtimex.
    assert!(v["clock"]["steering_ppm"].is_number(), "{v}");
    assert_eq!(v["clock"]["share_ppm"], 83_333);
}

/// A bound given explicitly: the figures follow it, and a clock slower
/// than it is beyond the promise (SIGKILL lands by 5 s x (1 - 5 %) - 1 %).
#[test]
fn an_explicit_clock_rate_bound_sets_the_margin() {
    let v = json(&[
        "--backend",
        "etcd",
        "explain",
        "--json",
        "elect",
        "--ttl",
        "5s",
        "--clock-rate-error",
        "5%",
        "k",
    ]);
    assert_eq!(v["clock_rate_error_ppm"], 50_000);
    assert_eq!(v["rate_margin_ms"], 250);
    // The grace grows into the room the smaller margin leaves: 5 s - 3.33 s
    // window - 300 ms margin is 1.36 s, rounded down to 1.3 s.
    assert_eq!(v["kill_timeout_ms"], 1300);
    assert_eq!(v["killed_by_ms"], 4700);
    assert_eq!(v["tolerated_rate_error_ppm"], 50_000);
    let text = run(&mut explain(&[
        "--backend",
        "etcd",
        "explain",
        "elect",
        "--ttl",
        "5s",
        "--clock-rate-error",
        "50000ppm",
        "k",
    ]));
    let text = String::from_utf8_lossy(&text.stdout);
    for want in [
        "50000ppm (5.0%) combined",
        "this host's clock",
        "steered by",
    ] {
        assert!(text.contains(want), "{want} missing in\n{text}");
    }
}

#[test]
fn the_local_backend_refuses_a_clock_rate_bound() {
    let out = run(&mut explain(&[
        "--backend",
        "local",
        "explain",
        "elect",
        "--clock-rate-error",
        "5%",
        "k",
    ]));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&crate::support::lease_flag_owners("--clock-rate-error")),
        "{err}"
    );
}

#[test]
fn consul_lock_counts_the_lock_delay_and_a_slot_does_not() {
    let lock = json(&[
        "--http-addr",
        "10.255.255.1:8500",
        "explain",
        "--json",
        "elect",
        "k",
    ]);
    assert_eq!(lock["rival_after_ms"], 30_000);
    assert_eq!(lock["killed_by_ms"], 20_000);
    assert_eq!(lock["renew_every_ms"], 7_500);
    let slot = json(&["explain", "--json", "semaphore", "--limit", "2", "p"]);
    assert_eq!(slot["kind"], "semaphore");
    assert_eq!(slot["rival_after_ms"], 15_000);
    assert_eq!(slot["lock_delay_ms"], 0);
}

#[test]
fn local_has_no_lease() {
    let v = json(&["--backend", "local", "explain", "--json", "elect", "k"]);
    assert_eq!(v["rival_after_ms"], serde_json::Value::Null);
    let out = run(&mut explain(&[
        "--backend",
        "local",
        "explain",
        "elect",
        "k",
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("never while any process of the command's tree lives"),
        "{text}"
    );
}

#[test]
fn text_names_the_margin_and_the_assumptions() {
    let out = run(&mut explain(&[
        "--backend",
        "etcd",
        "explain",
        "elect",
        "--ttl",
        "5s",
        "k",
    ]));
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "margin",
        "883ms",
        "16.7%",
        "clock-rate bound",
        "assumptions:",
        "revokes the holder's lease",
    ] {
        assert!(text.contains(want), "{want} missing in\n{text}");
    }
}

#[test]
fn bad_flags_are_the_same_usage_errors_as_elect() {
    for args in [
        &[
            "--backend",
            "etcd",
            "explain",
            "elect",
            "--ttl",
            "5s",
            "--kill-timeout",
            "10s",
            "k",
        ][..],
        &[
            "--backend",
            "etcd",
            "explain",
            "elect",
            "--lock-delay",
            "1s",
            "k",
        ],
        &["explain", "semaphore", "p"],
        &["explain", "elect", "--ttl", "", "k"],
        &["explain", "elect", "--clock-rate-error", "", "k"],
        &[
            "--backend",
            "etcd",
            "explain",
            "elect",
            "--clock-rate-error",
            "50%",
            "k",
        ],
    ] {
        let out = run(&mut explain(args));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
    let out = run(&mut explain(&[
        "--backend",
        "etcd",
        "explain",
        "elect",
        "--ttl",
        "5s",
        "--kill-timeout",
        "10s",
        "k",
    ]));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--kill-timeout 700ms"));
}

/// A run's own line with `explain` put in front: COMMAND is checked as the
/// run would check it and named, never run (#40: it was accepted and
/// ignored).
#[test]
fn a_command_given_is_checked_and_named_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let out = run(&mut explain(&[
        "explain", "elect", "jobs/x", "--", "sh", "-c", &touch,
    ]));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.starts_with("  command ")
            && l.contains("`sh -c touch ")
            && l.ends_with("explain runs nothing")),
        "{text}"
    );
    let shown = json(&[
        "explain",
        "--json",
        "semaphore",
        "-l",
        "2",
        "jobs/x",
        "--",
        "true",
    ]);
    assert_eq!(shown["command"], serde_json::json!(["true"]), "{shown}");
    assert!(json(&["explain", "--json", "elect", "jobs/x"])["command"].is_null());
    let out = run(&mut explain(&[
        "explain",
        "elect",
        "jobs/x",
        "--",
        "no-such-program-40",
    ]));
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(!marker.exists(), "explain ran the command");
}
