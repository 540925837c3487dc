//! The engine-facing parts of this suite again, against each real engine
//! version CI tests: the Consul part against a real Consul 1.6.2 and 1.15.10
//! dev agent (beside the emulator, which the plain run uses), the etcd part
//! against etcd 3.5 (beside the `etcd` on PATH, Debian's 3.4), the shared
//! scenarios' ZooKeeper part against a 3-member ensemble, and the
//! Consul API facts (`engines::consul::api_facts`) against the emulator
//! imitating 1.6.
//!
//! Each test here starts the engine, then runs this very test binary again
//! (`std::env::current_exe()`) with the engine's address in the environment,
//! filtered to the tests whose path names that engine. The re-run skips what
//! needs the emulator itself (fault injection, restarts, request counting),
//! which lives in modules named `emulator_faults` (top-level or nested), and
//! these tests themselves. A failing re-run fails the test with the child's
//! output; every re-run prints its counts.
//!
//! Without the real binaries (a user's clone) the tests are listed as
//! ignored with the reason, and the plain run covers the emulator and the
//! `etcd` on PATH.

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use crate::engines::consul::real::Agent;
use crate::engines::consul::support::{EMULATOR_VERSION_ENV, REAL_AGENT_ENV};
use crate::engines::etcd::support::ETCD_BIN_DIR_ENV;
use crate::engines::zookeeper::support::ENSEMBLE_ENV;

/// Set in a re-run, so that it never starts another (it also skips this
/// module by name).
const RERUN_ENV: &str = "LOCKRUN_TEST_RERUN";

/// The folder holding etcd 3.5's `etcd` and `etcdctl`; .cargo/config.toml
/// points it where .ci/deps installs them.
pub const ETCD_35_ENV: &str = "LOCKRUN_TEST_ETCD_35_BIN_DIR";

/// What the Consul re-runs select: every test whose path names Consul
/// (`engines::consul::..`, `..::on_consul`, `consul_..`), and the
/// cross-engine modules whose tests use Consul among the other engines.
const CONSUL_FILTERS: &[&str] = &["consul", "answers::", "errors::"];

/// What no Consul re-run runs though its path names Consul: tests that
/// start real agents of their own, whatever the agent under test.
const NOT_ON_ANOTHER_AGENT: &[&str] = &[
    "engines::consul::catalog::",
    "engines::consul::partial_views::",
    "clusters::",
    "doc_examples::",
];

/// What no re-run runs, whatever the engine: tests that need the emulator
/// itself (its faults, restarts and counters exist on no real agent), the
/// recorded transcript replayed against the emulator, the real agents'
/// own tests, and this module.
const NEVER_RERUN: &[&str] = &[
    "emulator_faults::",
    "blips::",
    "transcript::",
    "engines::consul::real::",
    "versions::",
];

/// Tests at once in a re-run: a real agent serves them all, and the plain
/// run goes on beside it on the same cores.
const RERUN_THREADS: &str = "3";

#[test]
#[cfg_attr(
    no_real_consul,
    ignore = "no real Consul binaries (../shared/tools/consul or LOCKRUN_TEST_CONSUL_BINARIES): the emulator alone runs"
)]
fn the_consul_suite_passes_on_1_6_2() {
    consul_suite_on("1.6.2");
}

#[test]
#[cfg_attr(
    no_real_consul,
    ignore = "no real Consul binaries (../shared/tools/consul or LOCKRUN_TEST_CONSUL_BINARIES): the emulator alone runs"
)]
fn the_consul_suite_passes_on_1_15_10() {
    consul_suite_on("1.15.10");
}

#[test]
#[cfg_attr(
    no_etcd_35,
    ignore = "LOCKRUN_TEST_ETCD_35_BIN_DIR is empty (.ci/deps installs etcd 3.5 where .cargo/config.toml points it): the etcd on PATH alone runs"
)]
fn the_etcd_suite_passes_on_3_5() {
    if std::env::var_os(RERUN_ENV).is_some() {
        return;
    }
    let dir = PathBuf::from(std::env::var_os(ETCD_35_ENV).unwrap_or_default());
    // Set but wrong is a broken CI machine: fail, never pass unchecked.
    let version = Command::new(dir.join("etcd"))
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}/etcd ({e}); run .ci/deps, which installs etcd 3.5 there, or set {ETCD_35_ENV} to the folder of etcd 3.5's etcd and etcdctl", dir.display()));
    let version = String::from_utf8_lossy(&version.stdout).to_string();
    assert!(
        version.contains("etcd Version: 3.5."),
        "{}/etcd is not etcd 3.5: {version}",
        dir.display()
    );
    let mut child = rerun();
    child.env(ETCD_BIN_DIR_ENV, &dir);
    // Every etcd test says so in its name or module.
    child.arg("etcd");
    run(child, "etcd 3.5");
}

/// The shared scenarios' ZooKeeper tests (`conformance::..::on_zookeeper`)
/// against a 3-member ensemble (the plain run has a standalone server):
/// the client's connect string names all three members.
#[test]
fn the_zookeeper_scenarios_pass_on_an_ensemble() {
    if std::env::var_os(RERUN_ENV).is_some() {
        return;
    }
    let mut child = rerun();
    child.env(ENSEMBLE_ENV, "1");
    child.arg("::on_zookeeper");
    run(child, "a 3-member ZooKeeper ensemble");
}

/// The emulator's Consul 1.6 answers, which the plain run never asks for,
/// against the facts the real 1.6.2 agent showed: a fact that holds on only
/// one of them is a bug in the emulator or in the test.
#[test]
fn the_consul_api_facts_hold_on_the_emulator_imitating_1_6() {
    if std::env::var_os(RERUN_ENV).is_some() {
        return;
    }
    let mut child = rerun();
    child.env(EMULATOR_VERSION_ENV, "1.6.2");
    child.arg("engines::consul::api_facts::");
    run(child, "the emulator imitating Consul 1.6.2");
}

fn consul_suite_on(version: &str) {
    if std::env::var_os(RERUN_ENV).is_some() {
        return;
    }
    let agent = Agent::dev(version);
    let mut child = rerun();
    child.env(REAL_AGENT_ENV, agent.http_addr());
    child.args(CONSUL_FILTERS);
    for skip in NOT_ON_ANOTHER_AGENT {
        child.args(["--skip", skip]);
    }
    let what = format!("Consul {version}");
    run(child, &what);
    drop(agent);
}

/// This test binary, to run again without the meta-tests.
fn rerun() -> Command {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut child = Command::new(exe);
    child.env(RERUN_ENV, "1");
    // The re-run's engine is the one given; no other real engine leaks in.
    child.env_remove(REAL_AGENT_ENV);
    child.env_remove(ETCD_BIN_DIR_ENV);
    child.env_remove(EMULATOR_VERSION_ENV);
    child.env_remove(ENSEMBLE_ENV);
    for skip in NEVER_RERUN {
        child.args(["--skip", skip]);
    }
    child.args(["--test-threads", RERUN_THREADS]);
    child
}

/// Runs the re-run to its end; prints its counts (past the harness's
/// capture, so they show in every run) and fails with its output when it
/// failed.
fn run(mut child: Command, what: &str) {
    let started = Instant::now();
    let out = child.output().expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let counts = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("test result:"))
        .unwrap_or("no `test result:` line")
        .to_string();
    let _ = writeln!(
        std::io::stderr(),
        "\nthe suite against {what}: {counts} ({:.0} s)",
        started.elapsed().as_secs_f64()
    );
    assert!(
        out.status.success(),
        "the suite failed against {what}: {counts}\n{stdout}\n{stderr}"
    );
    // An empty filter match would be a pass that checked nothing.
    assert!(
        !counts.contains(" 0 passed"),
        "the suite ran nothing against {what}: {counts}"
    );
}
