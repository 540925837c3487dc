//! The child layer through its library API: exit statuses, the stop ladder,
//! group sweeps, forwarding, parent death, the terminal hand-off and the
//! parked guard, with the real lockrun binary as the guard; and one run of
//! the binary to show that a waiting lockrun parks its guard.
//!
//! Tests that need a process of their own (one to SIGKILL, one that owns a
//! pseudo-terminal) re-run this test binary on an ignored `helper_*` test,
//! which does its part only when `HELPER_DIR_VAR` is set.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::future::Future;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use lockrun::child::{Child, ChildExit, Command, Containment, Leftovers, Prepared, Terminal};
use lockrun::signals::Signal;

use crate::engines::consul::support::TestConsul;
use crate::procs::{
    deadline, group_alive, inheritable_fds, open_fds, pid_alive, pid_exists, process_name,
    read_line_file, read_pid_file, reading_a_pipe, wait_until, KillGroupsOnDrop, PATIENCE,
};
use crate::support::{assert_killed_by, assert_status, lockrun, wait_for_file, Pty, Running};

const GUARD: &str = env!("CARGO_BIN_EXE_lockrun");
const HELPER_DIR_VAR: &str = "LOCKRUN_CHILD_TEST_DIR";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("build a current-thread runtime")
}

/// Runs `future` on a fresh current-thread runtime, as lockrun does, failing
/// the test rather than hanging it.
fn block_on<F: Future>(future: F) -> F::Output {
    runtime().block_on(async {
        tokio::time::timeout(PATIENCE, future)
            .await
            .expect("the test did not finish within its deadline")
    })
}

fn direct<S: AsRef<OsStr>>(argv: &[S]) -> Command {
    Command {
        argv: argv.iter().map(|a| a.as_ref().to_owned()).collect(),
        shell: false,
        env: vec![],
        env_remove: vec![],
        guard_exe: GUARD.into(),
        lends: false,
        leftovers: Leftovers::Wait,
        containment: Containment::detect(),
    }
}

/// `script` run by `/bin/sh -c`, with `args` as `$1`, `$2`...
fn shell<S: AsRef<OsStr>>(script: &str, args: &[S]) -> Command {
    let mut argv = vec![OsString::from(script)];
    argv.extend(args.iter().map(|a| a.as_ref().to_owned()));
    Command {
        argv,
        shell: true,
        env: vec![],
        env_remove: vec![],
        guard_exe: GUARD.into(),
        lends: false,
        leftovers: Leftovers::Wait,
        containment: Containment::detect(),
    }
}

/// Spawns `cmd` without touching the terminal (tests run in parallel, and
/// may run from an interactive terminal) and registers its group for cleanup.
fn spawn(cmd: &Command, groups: &mut KillGroupsOnDrop) -> Child {
    let child = Child::spawn_with(cmd, Terminal::Never).expect("spawn the guard");
    groups.watch(child.pid());
    child
}

/// Prepares `cmd` without touching the terminal and registers its group.
fn prepare(cmd: &Command, groups: &mut KillGroupsOnDrop) -> Prepared {
    let prepared = Child::prepare_with(cmd, Terminal::Never).expect("prepare the guard");
    groups.watch(prepared.pid());
    prepared
}

/// Waits until the guard `pid` is parked: asleep reading its go pipe.
fn wait_until_parked(pid: u32) {
    assert!(
        wait_until(deadline(), || reading_a_pipe(pid)),
        "the guard {pid} never parked"
    );
}

/// The go message the guard expects (see `src/child/go.rs`), built by hand
/// so the test does not share the code it checks.
fn go_message(env: &[(&str, &str)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (key, value) in env {
        for part in [key, value] {
            body.extend_from_slice(&(part.len() as u32).to_le_bytes());
            body.extend_from_slice(part.as_bytes());
        }
    }
    // The body's length, then the flag that no verdict on a lent
    // descriptor follows.
    let mut message = (body.len() as u32).to_le_bytes().to_vec();
    message.extend(0u32.to_le_bytes());
    message.extend(body);
    message
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("create a temporary directory")
}

fn killed_by(sig: Signal) -> ChildExit {
    ChildExit::Signal(sig.number())
}

fn exited_on(sig: Signal) -> ChildExit {
    ChildExit::Code(128 + sig.number())
}

#[test]
fn exit_status_passes_through() {
    let dir = tempdir();
    let not_executable = dir.path().join("not-executable");
    std::fs::write(&not_executable, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&not_executable, std::fs::Permissions::from_mode(0o644)).unwrap();
    let cases = [
        (direct(&["true"]), ChildExit::Code(0)),
        (shell::<&str>("exit 3", &[]), ChildExit::Code(3)),
        (shell::<&str>("kill -USR1 $$", &[]), exited_on(Signal::Usr1)),
        (
            direct(&["lockrun-test-no-such-program"]),
            ChildExit::Code(127),
        ),
        (direct(&[&not_executable]), ChildExit::Code(126)),
    ];
    let mut groups = KillGroupsOnDrop::new();
    block_on(async {
        for (cmd, expected) in &cases {
            let exit = spawn(cmd, &mut groups).wait().await;
            assert_eq!(exit, *expected, "{:?}", cmd.argv);
        }
    });
    assert_eq!(exited_on(Signal::Usr1).code(), 138);
}

#[test]
fn the_guard_explains_a_command_it_cannot_run() {
    let output = std::process::Command::new(GUARD)
        .args(["__guard", "--", "lockrun-test-no-such-program"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(127), "stderr: {stderr}");
    assert_eq!(
        stderr,
        "lockrun: cannot run `lockrun-test-no-such-program`: not found\n"
    );
}

#[test]
fn arguments_and_environment_reach_the_command() {
    let dir = tempdir();
    let shell_out = dir.path().join("shell");
    let direct_out = dir.path().join("direct");
    let mut with_shell = shell(
        r#"out=$1; shift; printf '%s|' "$LOCKRUN_TEST_VALUE" "$0" "$@" > "$out""#,
        &[
            shell_out.as_os_str(),
            OsStr::new("a b"),
            OsStr::new(""),
            OsStr::new("$HOME"),
        ],
    );
    with_shell.env = vec![("LOCKRUN_TEST_VALUE".into(), "hello world".into())];
    let without_shell = direct(&[
        OsStr::new("/bin/sh"),
        OsStr::new("-c"),
        OsStr::new(r#"printf '%s|' "$@" > "$0""#),
        direct_out.as_os_str(),
        OsStr::new("x  y"),
        OsStr::new("*"),
    ]);
    let mut groups = KillGroupsOnDrop::new();
    block_on(async {
        for cmd in [&with_shell, &without_shell] {
            assert_eq!(spawn(cmd, &mut groups).wait().await, ChildExit::Code(0));
        }
    });
    let read = |path: &Path| std::fs::read_to_string(path).unwrap();
    assert_eq!(read(&shell_out), "hello world|lockrun|a b||$HOME|");
    assert_eq!(read(&direct_out), "x  y|*|");
}

/// Returns once the dropped guard `pid` is reaped, which the runtime does
/// (so this waits on it, not on the thread).
async fn reaped(pid: u32) {
    let gone = async {
        while pid_exists(pid) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(PATIENCE, gone)
        .await
        .expect("the guard was never reaped");
}

#[test]
fn waiting_sweeps_what_the_command_left_behind() {
    let dir = tempdir();
    let grandchild_file = dir.path().join("grandchild");
    let mut cmd = shell(r#"sleep 600 & echo $! > "$1""#, &[&grandchild_file]);
    // The job would otherwise last as long as the sleep (`--leftovers wait`).
    cmd.leftovers = Leftovers::Kill {
        signal: Signal::Term,
        grace: Duration::ZERO,
    };
    let mut groups = KillGroupsOnDrop::new();
    block_on(async {
        let mut child = spawn(&cmd, &mut groups);
        assert_eq!(child.wait().await, ChildExit::Code(0));
        let grandchild = read_pid_file(&grandchild_file, deadline());
        // wait() returned only once the tree was gone (the guard's word,
        // or the sweep), so no polling here.
        assert!(!pid_alive(grandchild), "the background sleep survived");
        // The guard itself may still be on its way out; dropped, it is
        // gone, and with it the group.
        let pgid = child.pid();
        drop(child);
        reaped(pgid).await;
        assert!(!group_alive(pgid));
    });
}

#[test]
fn stop_kills_the_whole_group() {
    let dir = tempdir();
    let (grandchild_file, shell_file) = (dir.path().join("grandchild"), dir.path().join("sh"));
    // The grandchild ignores TERM, so only the sweep can end it.
    let cmd = shell(
        r#"(trap '' TERM; exec sleep 600) & echo $! > "$1"; echo $$ > "$2"; wait"#,
        &[&grandchild_file, &shell_file],
    );
    let mut groups = KillGroupsOnDrop::new();
    block_on(async {
        let mut child = spawn(&cmd, &mut groups);
        let grandchild = read_pid_file(&grandchild_file, deadline());
        let sh = read_pid_file(&shell_file, deadline());
        let exit = child.stop(Signal::Term, PATIENCE).await;
        assert_eq!(exit, exited_on(Signal::Term), "sh should die of TERM");
        assert!(!pid_alive(sh));
        assert!(!pid_alive(grandchild), "the grandchild survived the stop");
        // The guard said the tree was gone, and may still be exiting:
        // dropped, it is gone, and with it the group.
        let pgid = child.pid();
        drop(child);
        reaped(pgid).await;
        assert!(!group_alive(pgid));
    });
}

#[test]
fn stop_escalates_to_sigkill_after_the_grace_period() {
    let dir = tempdir();
    let pid_file = dir.path().join("pid");
    let cmd = shell(
        r#"trap '' TERM; echo $$ > "$1"; exec sleep 600"#,
        &[&pid_file],
    );
    let grace = Duration::from_millis(300);
    let mut groups = KillGroupsOnDrop::new();
    block_on(async {
        let mut child = spawn(&cmd, &mut groups);
        let pid = read_pid_file(&pid_file, deadline());
        let started = Instant::now();
        let exit = child.stop(Signal::Term, grace).await;
        assert!(started.elapsed() >= grace, "killed before the grace period");
        assert_eq!(exit, killed_by(Signal::Kill));
        assert!(!pid_alive(pid));
        assert!(!group_alive(child.pid()));

        // A zero grace period means SIGKILL at once.
        let mut child = spawn(&shell::<&str>("exec sleep 600", &[]), &mut groups);
        let exit = child.stop(Signal::Term, Duration::ZERO).await;
        assert_eq!(exit, killed_by(Signal::Kill));
    });
}

#[test]
fn signals_reach_the_command_and_the_guard_survives_them() {
    let dir = tempdir();
    let (got, ready) = (dir.path().join("got"), dir.path().join("ready"));
    // `wait` returns as soon as a trapped signal arrives.
    let cmd = shell(
        r#"trap 'echo USR1 > "$1"; exit 0' USR1; echo ready > "$2"
           while :; do sleep 1 & wait $!; done"#,
        &[&got, &ready],
    );
    let mut groups = KillGroupsOnDrop::new();
    block_on(async {
        let mut child = spawn(&cmd, &mut groups);
        read_line_file(&ready, deadline());
        child.signal(Signal::Usr1);
        // Code(0), not death by USR1: the guard survived and relayed the exit.
        assert_eq!(child.wait().await, ChildExit::Code(0));
    });
    assert_eq!(read_line_file(&got, deadline()), "USR1");
}

#[test]
fn a_signal_sent_at_once_still_reaches_the_command() {
    // Sent right after the spawn, TERM finds the guard at any point of its
    // start: before its handlers exist (blocked, then relayed), before
    // COMMAND exists (pending, then relayed), or after. COMMAND must get it
    // in every case, and the guard must survive it.
    let cmd = shell::<&str>("exec sleep 600", &[]);
    let mut groups = KillGroupsOnDrop::new();
    block_on(async {
        for _ in 0..10 {
            let mut child = spawn(&cmd, &mut groups);
            child.signal(Signal::Term);
            let exit = child.stop(Signal::Term, PATIENCE).await;
            assert_eq!(exit, exited_on(Signal::Term));
        }
    });
}

#[test]
fn wait_is_cancel_safe_and_kill_is_final() {
    let dir = tempdir();
    let pid_file = dir.path().join("pid");
    let cmd = shell(r#"echo $$ > "$1"; exec sleep 600"#, &[&pid_file]);
    let mut groups = KillGroupsOnDrop::new();
    block_on(async {
        let mut child = spawn(&cmd, &mut groups);
        let pid = read_pid_file(&pid_file, deadline());
        for _ in 0..3 {
            let waited = tokio::time::timeout(Duration::from_millis(20), child.wait()).await;
            assert!(waited.is_err(), "the sleep exited by itself");
        }
        assert_eq!(child.kill().await, killed_by(Signal::Kill));
        assert!(!pid_alive(pid));
        // Reaped: the outcome is remembered, and signalling is a no-op.
        child.signal(Signal::Term);
        assert_eq!(child.wait().await, killed_by(Signal::Kill));
        assert_eq!(
            child.stop(Signal::Term, PATIENCE).await,
            killed_by(Signal::Kill)
        );
    });
}

#[test]
fn the_group_dies_when_the_spawning_thread_exits() {
    let dir = tempdir();
    let (grandchild_file, shell_file) = (dir.path().join("grandchild"), dir.path().join("sh"));
    let cmd = shell(
        r#"sleep 600 & echo $! > "$1"; echo $$ > "$2"; wait"#,
        &[&grandchild_file, &shell_file],
    );
    let mut groups = KillGroupsOnDrop::new();
    // PR_SET_PDEATHSIG fires when the thread that forked the guard exits, so
    // a short-lived thread stands in for a dying lockrun.
    let guard = std::thread::spawn(move || {
        runtime().block_on(async {
            let child = Child::spawn_with(&cmd, Terminal::Never).expect("spawn the guard");
            // Let the command start its grandchild before we go away.
            read_pid_file(&shell_file, deadline());
            let pid = child.pid();
            // A lockrun that dies runs no destructors (ours would SIGKILL).
            std::mem::forget(child);
            pid
        })
    })
    .join()
    .expect("the spawning thread panicked");
    groups.watch(guard);
    let grandchild = read_pid_file(&grandchild_file, deadline());
    let gone = wait_until(deadline(), || !group_alive(guard));
    assert!(gone, "the group outlived the thread that spawned it");
    assert!(!pid_alive(grandchild));
    // The guard is our child: reap it, and check it was its own handler
    // (SIGKILL to the group) rather than the death signal that ended it.
    let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(guard as i32), None).unwrap();
    assert_eq!(
        status,
        nix::sys::wait::WaitStatus::Signaled(
            nix::unistd::Pid::from_raw(guard as i32),
            nix::sys::signal::Signal::SIGKILL,
            false
        )
    );
}

/// COMMAND starts as if exec'd by a plain shell: no signal blocked, SIGPIPE
/// at its default (lockrun, being Rust, ignores it), whatever the guard
/// blocked or handled meanwhile.
#[test]
fn the_command_starts_with_no_signal_blocked_and_sigpipe_at_its_default() {
    let mut groups = KillGroupsOnDrop::new();
    let dir = tempdir();
    let status = dir.path().join("status");
    let cmd = shell(r#"exec cat /proc/self/status > "$1""#, &[&status]);
    let exit = block_on(async { spawn(&cmd, &mut groups).wait().await });
    assert_eq!(exit, ChildExit::Code(0));
    let text = std::fs::read_to_string(&status).unwrap();
    let mask = |name: &str| {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {text}"));
        u64::from_str_radix(line.trim(), 16).unwrap()
    };
    assert_eq!(mask("SigBlk:"), 0, "signals blocked in the command");
    let sigpipe = 1u64 << (libc::SIGPIPE - 1);
    assert_eq!(
        mask("SigIgn:") & sigpipe,
        0,
        "SIGPIPE ignored in the command"
    );
}

/// A guard killed on its own takes COMMAND with it, even a COMMAND that left
/// the guard's group and session (`setsid`), which no group kill reaches.
#[test]
fn a_command_that_left_the_group_dies_with_its_guard() {
    let mut groups = KillGroupsOnDrop::new();
    let cmd = direct(&["setsid", "sleep", "600"]);
    block_on(async {
        let mut child = spawn(&cmd, &mut groups);
        let guard = child.pid();
        let sid = |pid: u32| nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(pid as i32))).ok();
        let mut command = None;
        let left = wait_until(deadline(), || {
            let children = std::fs::read_to_string(format!("/proc/{guard}/task/{guard}/children"))
                .unwrap_or_default();
            command = children.split_whitespace().find_map(|pid| pid.parse().ok());
            command.is_some_and(|pid: u32| {
                process_name(pid).is_some_and(|name| name == "sleep") && sid(pid) != sid(guard)
            })
        });
        assert!(
            left,
            "the command never ran in a session of its own ({command:?})"
        );
        let command = groups.watch(command.unwrap());
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(guard as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        assert_eq!(child.wait().await, killed_by(Signal::Kill));
        assert!(
            wait_until(deadline(), || !pid_alive(command)),
            "the command outlived its guard"
        );
    });
}

#[test]
fn a_dropped_prepared_guard_runs_nothing() {
    let dir = tempdir();
    let marker = dir.path().join("marker");
    let cmd = direct(&[OsStr::new("touch"), marker.as_os_str()]);
    let mut groups = KillGroupsOnDrop::new();
    block_on(async {
        // Dropped at once (the guard may still be starting up), and dropped
        // once parked on its go pipe.
        for parked in [false, false, false, true] {
            let prepared = prepare(&cmd, &mut groups);
            let pid = prepared.pid();
            if parked {
                wait_until_parked(pid);
            }
            drop(prepared);
            let reaped = wait_until(deadline(), || !pid_exists(pid));
            assert!(reaped, "the guard {pid} is still there (or a zombie)");
            assert!(!group_alive(pid));
        }
    });
    assert!(!marker.exists(), "a dropped guard ran its command");
}

#[test]
fn a_parked_guard_dies_with_the_thread_that_prepared_it() {
    let dir = tempdir();
    let marker = dir.path().join("marker");
    let cmd = direct(&[OsStr::new("touch"), marker.as_os_str()]);
    let mut groups = KillGroupsOnDrop::new();
    let guard = std::thread::spawn(move || {
        runtime().block_on(async {
            let prepared = Child::prepare_with(&cmd, Terminal::Never).expect("prepare the guard");
            let pid = prepared.pid();
            wait_until_parked(pid);
            // A lockrun that dies runs no destructors. Forgetting also keeps
            // the go pipe open in this process, so no EOF can end the guard:
            // only its parent-death signal can.
            std::mem::forget(prepared);
            pid
        })
    })
    .join()
    .expect("the preparing thread panicked");
    groups.watch(guard);
    let gone = wait_until(deadline(), || !pid_alive(guard));
    assert!(gone, "the parked guard outlived the thread that spawned it");
    // Its handler SIGKILLed its group, that is, itself.
    let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(guard as i32), None).unwrap();
    assert_eq!(
        status,
        nix::sys::wait::WaitStatus::Signaled(
            nix::unistd::Pid::from_raw(guard as i32),
            nix::sys::signal::Signal::SIGKILL,
            false
        )
    );
    assert!(!marker.exists(), "a guard without its go ran its command");
}

#[test]
fn a_parked_guard_dies_with_lockrun() {
    let dir = tempdir();
    let mut helper = helper("helper_prepare_and_hang", dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut groups = KillGroupsOnDrop::new();
    let guard = groups.watch(read_pid_file(&dir.path().join("guard"), deadline()));
    helper.kill().unwrap();
    helper.wait().unwrap();
    let gone = wait_until(deadline(), || !pid_alive(guard));
    assert!(
        gone,
        "the parked guard outlived the SIGKILLed process that spawned it"
    );
    assert!(!dir.path().join("marker").exists());
}

#[test]
#[ignore = "helper process for a_parked_guard_dies_with_lockrun"]
fn helper_prepare_and_hang() {
    let Some(dir) = helper_dir() else { return };
    let cmd = direct(&[OsStr::new("touch"), dir.join("marker").as_os_str()]);
    runtime().block_on(async {
        let prepared = Child::prepare_with(&cmd, Terminal::Never).expect("prepare the guard");
        wait_until_parked(prepared.pid());
        publish(&dir.join("guard"), &prepared.pid().to_string());
        std::future::pending::<()>().await;
    });
}

#[test]
fn start_passes_the_environment() {
    let dir = tempdir();
    let out = dir.path().join("out");
    let mut cmd = shell(
        r#"printf '%s|' "$FROM_COMMAND" "$FROM_START" "$SHARED" "$EMPTY" > "$1""#,
        &[&out],
    );
    cmd.env = vec![
        ("FROM_COMMAND".into(), "command".into()),
        ("SHARED".into(), "command".into()),
    ];
    let mut groups = KillGroupsOnDrop::new();
    block_on(async {
        let prepared = prepare(&cmd, &mut groups);
        wait_until_parked(prepared.pid());
        let env = vec![
            ("FROM_START".into(), "a b=c\nd".into()),
            ("SHARED".into(), "start".into()),
            ("EMPTY".into(), "".into()),
        ];
        let mut child = prepared.start(env).expect("start the guard");
        assert_eq!(child.wait().await, ChildExit::Code(0));
    });
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "command|a b=c\nd|start||"
    );
}

#[test]
fn the_command_does_not_inherit_the_go_pipe_or_the_end_channel() {
    let dir = tempdir();
    let pid_file = dir.path().join("pid");
    let cmd = shell(r#"echo $$ > "$1"; exec sleep 600"#, &[&pid_file]);
    let mut groups = KillGroupsOnDrop::new();
    block_on(async {
        let prepared = prepare(&cmd, &mut groups);
        let guard = prepared.pid();
        wait_until_parked(guard);
        // Exec'd, its command line is its name alone, which `pkill -f
        // lockrun` does not match (issue #45), though `--shell` gave it
        // `sh -c ... lockrun` to run.
        let cmdline = std::fs::read(format!("/proc/{guard}/cmdline")).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&cmdline).trim_end_matches('\0'),
            lockrun::child::guard::PROCESS_NAME
        );
        // The guard's go pipe and end channel (a socket): what it holds
        // beyond stdio (its command line, which named them, is blanked to
        // `lr-guard`). COMMAND holding the end channel could say its own
        // tree is gone while it runs, and have the lock let go.
        // (A pipe our own parent leaked to us, cargo's, is no concern.)
        let leaked = inheritable_fds();
        let ours: Vec<String> = open_fds(std::process::id())
            .into_iter()
            .filter(|(fd, _)| leaked.contains(fd))
            .map(|(_, target)| target)
            .collect();
        let pipes: Vec<String> = open_fds(guard)
            .into_iter()
            .filter(|(fd, target)| {
                *fd > 2 && (target.starts_with("pipe:") || target.starts_with("socket:"))
            })
            .map(|(_, target)| target)
            .filter(|target| !ours.contains(target))
            .collect();
        assert_eq!(
            pipes.len(),
            2,
            "the parked guard's go pipe and end channel: {pipes:?}"
        );

        let mut child = prepared.start(Vec::new()).expect("start the guard");
        let command = read_pid_file(&pid_file, deadline());
        // COMMAND holds exactly what this process lets any child inherit
        // (stdin, stdout, stderr, and whatever our own parent leaked to us).
        let expected = inheritable_fds();
        let mut seen = Vec::new();
        let clean = wait_until(deadline(), || {
            seen = open_fds(command);
            seen.iter().map(|(fd, _)| *fd).collect::<Vec<_>>() == expected
        });
        assert!(
            clean,
            "COMMAND holds {seen:?}; expected descriptors {expected:?}"
        );
        assert!(
            seen.iter().all(|(_, target)| !pipes.contains(target)),
            "COMMAND inherited the go pipe or the end channel: {seen:?}"
        );
        assert_eq!(child.kill().await, killed_by(Signal::Kill));
    });
}

/// The guard's word that its tree is gone lets the lock go, so nobody else
/// may say it: a process that opens the guard's descriptors anew through
/// /proc (COMMAND can, as can anyone of the same user allowed to read that
/// directory) and writes the word to each must not end the wait while
/// COMMAND runs. The end channel is a socket, which /proc cannot open; as
/// a pipe, it could (attack review), and `wait` returned at once.
#[test]
fn nobody_but_the_guard_can_say_its_tree_is_gone() {
    let dir = tempdir();
    let pid_file = dir.path().join("pid");
    let cmd = shell(r#"echo $$ > "$1"; exec sleep 2"#, &[&pid_file]);
    let mut groups = KillGroupsOnDrop::new();
    block_on(async {
        let mut child = spawn(&cmd, &mut groups);
        let command = read_pid_file(&pid_file, deadline());
        let started = Instant::now();
        let mut forged = Vec::new();
        for (fd, target) in open_fds(child.pid()) {
            if fd <= 2 {
                continue;
            }
            let path = format!("/proc/{}/fd/{fd}", child.pid());
            let opened = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&path);
            if let Ok(mut file) = opened {
                if file.write_all(&[0xE0, 0]).is_ok() {
                    forged.push(target);
                }
            }
        }
        let exit = child.wait().await;
        assert!(
            started.elapsed() >= Duration::from_millis(1500),
            "wait() returned {exit} after {:?}, while COMMAND ({command}) ran; written to: {forged:?}",
            started.elapsed()
        );
        assert_eq!(exit, ChildExit::Code(0));
        assert!(!pid_alive(command));
    });
}

#[test]
fn the_guard_runs_nothing_without_a_whole_go_message() {
    let dir = tempdir();
    let marker = dir.path().join("marker");
    let whole = go_message(&[("X", "1")]);
    let cases: [(&str, &[u8]); 4] = [
        ("EOF", b""),
        ("a cut header", &whole[..2]),
        ("a cut body", &whole[..whole.len() - 1]),
        (
            "an oversized length",
            &[0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0, 0, 0],
        ),
    ];
    // The guard run by hand, its go pipe being its stdin.
    let guard = || {
        let mut command = std::process::Command::new(GUARD);
        command
            .args(["__guard", "--go-fd", "0", "--", "touch"])
            .arg(&marker)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    };
    for (what, message) in cases {
        let mut child = guard().spawn().unwrap();
        child.stdin.take().unwrap().write_all(message).unwrap();
        let output = child.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(125), "{what}");
        assert!(
            output.stdout.is_empty() && output.stderr.is_empty(),
            "{what}: {output:?}"
        );
        assert!(!marker.exists(), "{what}: the guard ran its command");
    }
    // The same guard, given a whole message, runs the command.
    let mut child = guard().spawn().unwrap();
    child.stdin.take().unwrap().write_all(&whole).unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(marker.exists());
}

/// A guard lent a descriptor (the local engine's `flock`ed file) keeps the
/// lock by holding it. If its descriptor table is full when the go message
/// comes, the kernel drops the descriptor and only flags the message: the
/// guard must then run nothing, as without a go message at all.
#[test]
fn a_guard_that_cannot_take_the_lent_descriptor_runs_nothing() {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, UnixAddr};
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::unix::net::UnixStream;

    let dir = tempdir();
    let marker = dir.path().join("marker");
    let lent = File::create(dir.path().join("lock")).unwrap();
    let run = |table_full: bool| {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let child = std::process::Command::new(GUARD)
            .args(["__guard", "--go-fd", "0", "--", "touch"])
            .arg(&marker)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        // The guard names itself once started, and opens nothing between
        // that and reading the go message.
        let named = wait_until(deadline(), || {
            process_name(pid).is_some_and(|name| name == lockrun::child::guard::PROCESS_NAME)
        });
        assert!(named, "the guard did not start");
        if table_full {
            // Every descriptor number the guard may still use is above its
            // limit: the lowest free one is where the next would go.
            let open: Vec<u32> = open_fds(pid).into_iter().map(|(fd, _)| fd).collect();
            let lowest_free = (0..).find(|fd| !open.contains(fd)).unwrap();
            let status = std::process::Command::new("prlimit")
                .args([
                    "--pid",
                    &pid.to_string(),
                    &format!("--nofile={lowest_free}"),
                ])
                .status()
                .expect("run prlimit(1)");
            assert!(status.success(), "prlimit: {status}");
        }
        let message = go_message(&[]);
        let sent = sendmsg::<UnixAddr>(
            ours.as_raw_fd(),
            &[std::io::IoSlice::new(&message)],
            &[ControlMessage::ScmRights(&[lent.as_raw_fd()])],
            MsgFlags::empty(),
            None,
        )
        .unwrap();
        assert_eq!(sent, message.len());
        drop(ours);
        child.wait_with_output().unwrap()
    };

    let output = run(true);
    assert_eq!(output.status.code(), Some(125), "{output:?}");
    assert!(
        output.stdout.is_empty() && output.stderr.is_empty(),
        "{output:?}"
    );
    assert!(
        !marker.exists(),
        "the guard ran its command without the lock"
    );
    // The same guard, with room for the descriptor, runs the command.
    let output = run(false);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(marker.exists());
}

#[test]
fn a_waiting_lockrun_parks_its_guard_and_an_interrupt_ends_it_on_consul() {
    let consul = TestConsul::start();
    let key = consul.prefix("child-parked") + "/leader";
    let dir = tempdir();
    let d = dir.path().display().to_string();
    let marker = dir.path().join("marker");
    let elect = |child: &[&str]| {
        let mut args = vec![
            "elect",
            "--lock-delay",
            "0s",
            "--kill-timeout",
            "1s",
            "--shell",
            &key,
            "--",
        ];
        args.extend_from_slice(child);
        lockrun(&consul, args)
    };
    let holder = Running::spawn(&mut elect(&[
        r#"touch "$1/held"; while [ ! -e "$1/go" ]; do sleep 0.05; done"#,
        &d,
    ]));
    wait_for_file(&dir.path().join("held"));
    let waiter = Running::spawn(&mut elect(&[r#"touch "$1/marker""#, &d]));
    // The waiter's one child is its guard, parked while the lock is held.
    let mut guard = None;
    let parked = wait_until(deadline(), || {
        let children =
            std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", waiter.pid()))
                .unwrap_or_default();
        guard = children.split_whitespace().find_map(|pid| pid.parse().ok());
        guard.is_some_and(reading_a_pipe)
    });
    assert!(
        parked,
        "the waiting lockrun has no parked guard ({guard:?})"
    );
    let guard = guard.unwrap();
    assert_eq!(
        process_name(guard).as_deref(),
        Some(lockrun::child::guard::PROCESS_NAME)
    );
    // Forked, not exec'd: it has the waiter's own environment (an exec'd
    // one is given its leftovers there)...
    let environ = |pid| std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    assert_eq!(
        environ(guard),
        environ(waiter.pid()),
        "the guard was exec'd"
    );
    // ...and holds only what an exec would have left it: none of the
    // waiter's connections or runtime, only its own end of the go pipe and
    // of the end channel (its one socket).
    let fds = open_fds(guard);
    assert!(
        fds.iter().all(|(_, what)| !what.starts_with("anon_inode:"))
            && fds
                .iter()
                .filter(|(_, what)| what.starts_with("socket:"))
                .count()
                == 1,
        "the parked guard holds lockrun's descriptors: {fds:?}"
    );
    let pipes: Vec<&String> = fds
        .iter()
        .map(|(_, what)| what)
        .filter(|what| what.starts_with("pipe:"))
        .collect();
    let distinct: std::collections::BTreeSet<_> = pipes.iter().collect();
    assert_eq!(
        pipes.len(),
        distinct.len(),
        "the parked guard holds both ends of a pipe: {fds:?}"
    );
    waiter.signal(nix::sys::signal::Signal::SIGINT);
    assert_killed_by(
        &waiter.finish(),
        nix::sys::signal::Signal::SIGINT,
        "SIGINT while waiting",
        &consul,
    );
    assert!(
        wait_until(deadline(), || !pid_alive(guard)),
        "the parked guard outlived its lockrun"
    );
    std::fs::write(dir.path().join("go"), "").unwrap();
    assert_status(&holder.finish(), 0, "holder", &consul);
    assert!(!marker.exists(), "the interrupted waiter's command ran");
}

/// A guard is forked only from a process with one thread: the child of a
/// fork would hold every lock another thread held at that moment.
#[test]
fn a_guard_is_never_forked_from_a_process_with_threads() {
    let (_keep, parked) = std::sync::mpsc::channel::<()>();
    let other = std::thread::spawn(move || parked.recv());
    assert!(matches!(Child::fork_parked(&direct(&["true"])), Ok(None)));
    drop(_keep);
    let _ = other.join();
}

/// This test binary, run on one ignored helper test with `dir` shared.
fn helper(name: &str, dir: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        &format!("child::{name}"),
        "--exact",
        "--ignored",
        "--test-threads=1",
    ])
    .env(HELPER_DIR_VAR, dir);
    cmd
}

fn helper_dir() -> Option<PathBuf> {
    std::env::var_os(HELPER_DIR_VAR).map(PathBuf::from)
}

/// Writes `text` and a newline to `path` in one rename, for `read_line_file`.
fn publish(path: &Path, text: &str) {
    let partial = path.with_extension("partial");
    std::fs::write(&partial, format!("{text}\n")).unwrap();
    std::fs::rename(partial, path).unwrap();
}

#[test]
fn the_group_dies_when_lockrun_is_sigkilled() {
    let dir = tempdir();
    let mut helper = helper("helper_spawn_and_hang", dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut groups = KillGroupsOnDrop::new();
    let guard = groups.watch(read_pid_file(&dir.path().join("guard"), deadline()));
    let sh = read_pid_file(&dir.path().join("sh"), deadline());
    let grandchild = read_pid_file(&dir.path().join("grandchild"), deadline());
    helper.kill().unwrap();
    helper.wait().unwrap();
    let gone = wait_until(deadline(), || !group_alive(guard));
    assert!(
        gone,
        "the group outlived the SIGKILLed process that spawned it"
    );
    for pid in [guard, sh, grandchild] {
        assert!(!pid_alive(pid), "{pid} survived");
    }
}

#[test]
#[ignore = "helper process for the_group_dies_when_lockrun_is_sigkilled"]
fn helper_spawn_and_hang() {
    let Some(dir) = helper_dir() else { return };
    let cmd = shell(
        r#"sleep 600 & echo $! > "$1"; echo $$ > "$2"; wait"#,
        &[dir.join("grandchild"), dir.join("sh")],
    );
    runtime().block_on(async {
        let mut child = Child::spawn_with(&cmd, Terminal::Never).expect("spawn the guard");
        publish(&dir.join("guard"), &child.pid().to_string());
        child.wait().await;
    });
}

#[test]
fn an_interactive_child_gets_the_terminal() {
    let dir = tempdir();
    // setsid -c: a new session whose controlling terminal is stdin, with the
    // helper in its foreground group, like a login shell's job.
    let mut command = std::process::Command::new("setsid");
    command
        .args(["-w", "-c"])
        .arg(std::env::current_exe().unwrap())
        .args(helper("helper_interactive", dir.path()).get_args())
        .env(HELPER_DIR_VAR, dir.path());
    let (pty, mut helper) = Pty::spawn(command);
    let output = || pty.text();

    read_line_file(&dir.path().join("reading"), deadline());
    pty.send(b"typed at the terminal\n");
    read_line_file(&dir.path().join("sleeping"), deadline());
    pty.send(b"\x03"); // Ctrl-C

    let mut status = None;
    let finished = wait_until(deadline(), || {
        status = helper.try_wait().unwrap();
        status.is_some()
    });
    if !finished {
        let _ = helper.kill();
        panic!("the helper hung; terminal output:\n{}", output());
    }
    assert!(
        status.unwrap().success(),
        "the helper failed ({status:?}); terminal output:\n{}",
        output()
    );
    assert_eq!(
        read_line_file(&dir.path().join("line"), deadline()),
        "typed at the terminal"
    );
}

#[test]
fn ctrl_c_while_parked_reaches_lockrun() {
    let dir = tempdir();
    let mut command = std::process::Command::new("setsid");
    command
        .args(["-w", "-c"])
        .arg(std::env::current_exe().unwrap())
        .args(helper("helper_parked", dir.path()).get_args())
        .env(HELPER_DIR_VAR, dir.path());
    let (pty, mut helper) = Pty::spawn(command);
    let output = || pty.text();

    let mut groups = KillGroupsOnDrop::new();
    groups.watch(read_pid_file(&dir.path().join("parked"), deadline()));
    pty.send(b"\x03"); // Ctrl-C, while the guard is parked
    read_line_file(&dir.path().join("reading"), deadline());
    pty.send(b"after the interrupt\n");

    let mut status = None;
    let finished = wait_until(deadline(), || {
        status = helper.try_wait().unwrap();
        status.is_some()
    });
    if !finished {
        let _ = helper.kill();
        panic!("the helper hung; terminal output:\n{}", output());
    }
    assert!(
        status.unwrap().success(),
        "the helper failed ({status:?}); terminal output:\n{}",
        output()
    );
    assert_eq!(
        read_line_file(&dir.path().join("line"), deadline()),
        "after the interrupt"
    );
}

#[test]
#[ignore = "helper process for ctrl_c_while_parked_reaches_lockrun"]
fn helper_parked() {
    use nix::unistd::{getpgrp, tcgetpgrp};
    use tokio::signal::unix::{signal, SignalKind};

    let Some(dir) = helper_dir() else { return };
    let stdin = std::io::stdin();
    assert_eq!(
        tcgetpgrp(&stdin),
        Ok(getpgrp()),
        "setsid -c left us in the background"
    );
    runtime().block_on(async {
        // lockrun listens for SIGINT while it waits for the lock.
        let mut interrupts = signal(SignalKind::interrupt()).unwrap();
        let reader = shell(
            r#"echo ready > "$1"; IFS= read -r line; echo "$line" > "$2""#,
            &[dir.join("reading"), dir.join("line")],
        );
        let prepared = Child::prepare(&reader).expect("prepare the guard");
        let guard = prepared.pid();
        wait_until_parked(guard);
        assert_eq!(
            tcgetpgrp(&stdin),
            Ok(getpgrp()),
            "the parked guard took the terminal"
        );
        publish(&dir.join("parked"), &guard.to_string());
        tokio::time::timeout(PATIENCE, interrupts.recv())
            .await
            .expect("Ctrl-C did not reach us while the guard was parked");
        assert!(pid_alive(guard), "Ctrl-C reached the parked guard");
        // Started now, the guard gets the terminal; had it been sent the
        // interrupt, it would have relayed it to COMMAND (status 130).
        let mut child = prepared.start(Vec::new()).expect("start the guard");
        assert_eq!(child.wait().await, ChildExit::Code(0));
        assert_eq!(
            tcgetpgrp(&stdin),
            Ok(getpgrp()),
            "the terminal was not given back"
        );
    });
}

#[test]
#[ignore = "helper process for an_interactive_child_gets_the_terminal"]
fn helper_interactive() {
    use nix::sys::termios::{tcgetattr, LocalFlags};
    use nix::unistd::{getpgrp, tcgetpgrp};

    let Some(dir) = helper_dir() else { return };
    let stdin = std::io::stdin();
    let echoes = || {
        tcgetattr(&stdin)
            .unwrap()
            .local_flags
            .contains(LocalFlags::ECHO)
    };
    assert_eq!(
        tcgetpgrp(&stdin),
        Ok(getpgrp()),
        "setsid -c left us in the background"
    );
    assert!(echoes());

    runtime().block_on(async {
        // Reading the terminal would stop a background child (SIGTTIN), and
        // stty would stop it too (SIGTTOU): both need the foreground.
        let reader = shell(
            r#"stty -echo; echo ready > "$1"; IFS= read -r line; echo "$line" > "$2""#,
            &[dir.join("reading"), dir.join("line")],
        );
        let mut child = Child::spawn(&reader).expect("spawn the guard");
        assert_eq!(child.wait().await, ChildExit::Code(0));
        assert_eq!(
            tcgetpgrp(&stdin),
            Ok(getpgrp()),
            "the terminal was not given back"
        );
        assert!(echoes(), "the terminal modes were not restored");

        // Ctrl-C goes to the child's group only; we (not in the foreground
        // group) would die of it otherwise.
        let sleeper = shell(
            r#"echo ready > "$1"; exec sleep 600"#,
            &[dir.join("sleeping")],
        );
        let mut child = Child::spawn(&sleeper).expect("spawn the guard");
        assert_eq!(child.wait().await, exited_on(Signal::Int));
        assert_eq!(
            tcgetpgrp(&stdin),
            Ok(getpgrp()),
            "the terminal was not given back"
        );
    });
}

/// A locked file to lend the guard: the lock belongs to the open file
/// description, which the returned descriptor is the only one to refer to.
fn locked_file(path: &Path) -> std::os::fd::OwnedFd {
    let file = File::create(path).expect("create the lock file");
    #[allow(deprecated)] // Flock<T> would unlock on drop, for every holder.
    nix::fcntl::flock(
        std::os::fd::AsRawFd::as_raw_fd(&file),
        nix::fcntl::FlockArg::LockExclusiveNonblock,
    )
    .expect("lock the file");
    file.into()
}

/// Whether `flock -n` (util-linux) could take the lock right now.
fn flock_free(path: &Path) -> bool {
    std::process::Command::new("flock")
        .args(["-n", "-E", "75"])
        .arg(path)
        .arg("true")
        .status()
        .expect("run flock(1)")
        .success()
}

/// Waits until the lock is free and returns which of `pids` were alive at
/// that moment, as seen right after.
fn alive_when_released(lock: &Path, pids: &[u32]) -> Vec<u32> {
    assert!(
        wait_until(deadline(), || flock_free(lock)),
        "the held lock was never released"
    );
    pids.iter().copied().filter(|pid| pid_alive(*pid)).collect()
}

/// The local backend's lock: the guard keeps the flocked descriptor until
/// every other member of the group is dead, so when COMMAND exits and
/// leaves a grandchild that ignores SIGTERM behind, the lock stays taken
/// until the guard has killed and reaped it.
#[test]
fn a_held_lock_outlives_every_member_when_the_command_exits() {
    let dir = tempdir();
    let lock = dir.path().join("lock");
    let (grandchild_file, go_on) = (dir.path().join("grandchild"), dir.path().join("go-on"));
    // COMMAND exits only once we have seen the guard hold the lock: under
    // load the whole job could otherwise be over before our first look.
    nix::unistd::mkfifo(&go_on, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let mut cmd = shell(
        r#"(trap '' TERM; exec sleep 600) & echo $! > "$1"; read _ < "$2"; exit 0"#,
        &[&grandchild_file, &go_on],
    );
    cmd.lends = true;
    // The job would otherwise last as long as the sleep (`--leftovers wait`).
    cmd.leftovers = Leftovers::Kill {
        signal: Signal::Term,
        grace: Duration::ZERO,
    };
    let mut groups = KillGroupsOnDrop::new();
    block_on(async {
        let mut child = Child::prepare_with(&cmd, Terminal::Never)
            .and_then(|parked| parked.start_lending(Vec::new(), locked_file(&lock)))
            .expect("start the guard");
        groups.watch(child.pid());
        // Only the guard holds the lock now.
        assert!(!flock_free(&lock), "the guard holds the lock");
        let grandchild = read_pid_file(&grandchild_file, deadline());
        // Opened once COMMAND reads it; closed at once, which ends the read.
        drop(
            std::fs::OpenOptions::new()
                .write(true)
                .open(&go_on)
                .expect("open the fifo"),
        );
        // The grandchild, not the guard: the guard's descriptor closes as
        // it exits, a moment before /proc shows it a zombie, and a loaded
        // machine let this test look in between (a re-run on real Consul).
        let alive = alive_when_released(&lock, &[grandchild]);
        assert!(
            alive.is_empty(),
            "{alive:?} still ran when the lock was free"
        );
        assert_eq!(child.wait().await, ChildExit::Code(0));
    });
}

/// The same when lockrun dies (the spawning thread exits): the guard ends
/// the group in order instead of SIGKILLing itself with it. COMMAND never
/// holds the descriptor itself.
#[test]
fn a_held_lock_outlives_every_member_when_lockrun_dies() {
    let dir = tempdir();
    let lock = dir.path().join("lock");
    let (grandchild_file, shell_file) = (dir.path().join("grandchild"), dir.path().join("sh"));
    let mut cmd = shell(
        r#"(trap '' TERM; exec sleep 600) & echo $! > "$1"; echo $$ > "$2"; wait"#,
        &[&grandchild_file, &shell_file],
    );
    cmd.lends = true;
    let held = locked_file(&lock);
    let lock_name = lock.display().to_string();
    let mut groups = KillGroupsOnDrop::new();
    let (guard, command) = std::thread::spawn(move || {
        runtime().block_on(async {
            let child = Child::prepare_with(&cmd, Terminal::Never)
                .and_then(|parked| parked.start_lending(Vec::new(), held))
                .expect("start the guard");
            let command = read_pid_file(&shell_file, deadline());
            let pid = child.pid();
            // A lockrun that dies runs no destructors (ours would SIGKILL).
            std::mem::forget(child);
            (pid, command)
        })
    })
    .join()
    .expect("the spawning thread panicked");
    groups.watch(guard);
    let grandchild = read_pid_file(&grandchild_file, deadline());
    let held_by_command = open_fds(command)
        .into_iter()
        .chain(open_fds(grandchild))
        .filter(|(_, target)| *target == lock_name)
        .collect::<Vec<_>>();
    // Not the guard, whose descriptor closes as it exits (see above).
    let alive = alive_when_released(&lock, &[grandchild, command]);
    assert!(
        alive.is_empty(),
        "{alive:?} still ran when the lock was free"
    );
    assert!(
        held_by_command.is_empty(),
        "COMMAND inherited {held_by_command:?}"
    );
    // The guard is our child; it exited on its own after ending the group.
    let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(guard as i32), None).unwrap();
    assert_eq!(
        status,
        nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(guard as i32), 137)
    );
}
