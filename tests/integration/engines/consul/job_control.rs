//! Job control on a real terminal: an interactive bash on a pseudo-terminal,
//! with job control on, runs lockrun as a user would, and the tests type at
//! it: Ctrl-Z stops the job and gives the prompt back while the lock stays
//! held, `fg` resumes it, Ctrl-C and `kill %1` end it as before.
//!
//! Every wait is for text on the terminal or a state in Consul, with the
//! suite's generous deadline; nothing sleeps.

use std::fs::File;
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use crate::engines::consul::support::{Api, TestConsul};
use crate::procs::{self, deadline, pid_alive, wait_until, KillGroupsOnDrop};
use crate::support::{bin, encode_key, kv_acquire, lockrun, Pty};

/// The flags `consul lock` (and lockrun) put on a lock key.
const CONSUL_LOCK_FLAGS: u64 = 0x2ddc_cbc0_58a5_0c18;

/// bash's prompt: text the tests type never contains it.
const PROMPT: &str = "job-test-prompt> ";

/// An interactive bash on a pseudo-terminal of its own.
struct Terminal {
    master: File,
    transcript: Arc<(Mutex<Vec<u8>>, Condvar)>,
    shell: std::process::Child,
    /// Where the next [`Terminal::expect`] starts looking.
    seen: usize,
}

impl Terminal {
    /// bash as the leader of a new session whose controlling terminal is the
    /// pty, with lockrun's test environment (Consul's address, the TTL).
    fn start(consul: &TestConsul) -> Terminal {
        let mut command = std::process::Command::new("setsid");
        command
            .args(["-c", "bash", "--norc", "--noprofile", "-i"])
            .env("PS1", PROMPT)
            .env("TERM", "dumb")
            .env("HISTFILE", "/dev/null");
        let template = lockrun(consul, ["--version"]);
        for (key, value) in template.get_envs() {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        let (Pty { master, transcript }, shell) = Pty::spawn(command);
        let mut terminal = Terminal {
            master,
            transcript,
            shell,
            seen: 0,
        };
        terminal.prompt();
        terminal
    }

    /// What the terminal shows, and the processes of its session.
    fn output(&self) -> String {
        let text = String::from_utf8_lossy(&self.transcript.0.lock().unwrap()).into_owned();
        format!("{text}\n--- session ---\n{}", self.processes())
    }

    fn processes(&self) -> String {
        let ps = std::process::Command::new("ps")
            .args(["-o", "pid,ppid,pgid,tpgid,stat,wchan:24,args", "-s"])
            .arg(self.shell.id().to_string())
            .output();
        match ps {
            Ok(ps) => String::from_utf8_lossy(&ps.stdout).into_owned(),
            Err(err) => format!("cannot run ps: {err}"),
        }
    }

    /// Types `bytes`, as they are: `\x1a` is Ctrl-Z.
    fn send(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).unwrap();
    }

    /// Types `line` and Enter.
    fn type_line(&mut self, line: &str) {
        self.send(format!("{line}\n").as_bytes());
    }

    /// Waits until `needle` appears after what earlier calls have seen, and
    /// moves past it.
    fn expect(&mut self, needle: &str) {
        let until = deadline();
        let (text, changed) = &*self.transcript;
        let mut text = text.lock().unwrap();
        loop {
            let found = String::from_utf8_lossy(&text[self.seen.min(text.len())..])
                .find(needle)
                .map(|at| at + needle.len());
            if let Some(end) = found {
                // Lossy decoding keeps valid UTF-8 as is; our needles are
                // ASCII, so the offset is the bytes'.
                self.seen += end;
                return;
            }
            let now = Instant::now();
            if now >= until {
                let all = String::from_utf8_lossy(&text).into_owned();
                drop(text);
                panic!(
                    "`{needle}` never appeared on the terminal; it shows:\n{all}\n--- session ---\n{}",
                    self.processes()
                );
            }
            text = changed.wait_timeout(text, until - now).unwrap().0;
        }
    }

    /// Waits for bash's prompt, then until bash reads the next line.
    fn prompt(&mut self) {
        self.expect(PROMPT);
        self.wait_editing();
    }

    /// Waits until bash reads a line: its line editor has the terminal out
    /// of canonical mode. Text typed before that may be lost, as bash
    /// settles its terminal modes after a job.
    fn wait_editing(&self) {
        let editing = || {
            nix::sys::termios::tcgetattr(&self.master).is_ok_and(|modes| {
                !modes
                    .local_flags
                    .contains(nix::sys::termios::LocalFlags::ICANON)
            })
        };
        assert!(
            wait_until(deadline(), editing),
            "bash never read a line; terminal:\n{}",
            self.output()
        );
    }

    /// The terminal's foreground process group.
    fn foreground(&self) -> Option<i32> {
        nix::unistd::tcgetpgrp(&self.master)
            .ok()
            .map(|pgid| pgid.as_raw())
    }

    /// Waits until `group` has the terminal's foreground: typed text then
    /// reaches it, not bash, which may discard what it finds pending when
    /// it hands the terminal to a job.
    fn wait_foreground(&self, group: i32) {
        assert!(
            wait_until(deadline(), || self.foreground() == Some(group)),
            "process group {group} never got the terminal (it is {:?}'s); terminal:\n{}",
            self.foreground(),
            self.output()
        );
    }

    /// Runs `echo` of the last status and returns it, once bash reads the
    /// next line.
    fn status(&mut self) -> String {
        // The quotes keep the echo of what we type from matching.
        self.type_line("echo \"s\"\"tatus=[$?]\"");
        self.expect("status=[");
        let start = self.seen;
        self.expect("]");
        let status = {
            let text = self.transcript.0.lock().unwrap();
            String::from_utf8_lossy(&text[start..self.seen - 1]).into_owned()
        };
        self.prompt();
        status
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        // Hanging up the terminal ends whatever job is left, as closing a
        // terminal window does.
        let _ = self.shell.kill();
        let _ = self.shell.wait();
    }
}

/// The session holding `key`, if any.
fn holder(api: &Api, key: &str) -> Option<String> {
    api.kv_get(key).and_then(|entry| entry.session)
}

/// Waits until someone holds `key`; returns the session.
fn wait_held(api: &Api, key: &str, terminal: &Terminal) -> String {
    let mut session = None;
    let held = wait_until(deadline(), || {
        session = holder(api, key);
        session.is_some()
    });
    assert!(
        held,
        "the lock was never taken; terminal:\n{}",
        terminal.output()
    );
    session.unwrap()
}

fn wait_released(api: &Api, key: &str, terminal: &Terminal) {
    assert!(
        wait_until(deadline(), || holder(api, key).is_none()),
        "the lock was not released; terminal:\n{}",
        terminal.output()
    );
}

/// `lockrun elect KEY -- COMMAND` as typed at the prompt, with the shortest
/// TTL the Consul under test allows, so that renewals come often.
fn elect_line(consul: &TestConsul, key: &str, options: &str, command: &str) -> String {
    format!(
        "{} elect --ttl {}ms {options} {key} -- {command}",
        bin().display(),
        consul.ttl_min().as_millis()
    )
}

/// The parent of process `pid`, from /proc.
fn parent(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain anything.
    stat[stat.rfind(')')? + 1..]
        .split_ascii_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The foreground group when it is a lockrun guard's, the child's group.
fn child_group(terminal: &Terminal) -> Option<i32> {
    let group = terminal.foreground()?;
    let name = procs::process_name(group as u32)?;
    (name == lockrun::child::guard::PROCESS_NAME).then_some(group)
}

/// A job started at the prompt: the lock's session, the child's process
/// group, and the front, the process bash started (the guard's parent is
/// lockrun's worker, whose parent is the front).
struct Job {
    session: String,
    group: i32,
    front: i32,
}

/// Starts `lockrun elect [OPTIONS] KEY -- COMMAND` at the prompt and waits
/// for the lock and for the child's group to have the terminal.
fn start(consul: &TestConsul, key: &str, options: &str, command: &str) -> (Terminal, Job) {
    let mut terminal = Terminal::start(consul);
    terminal.type_line(&elect_line(consul, key, options, command));
    let session = wait_held(&consul.api(), key, &terminal);
    let mut group = None;
    assert!(
        wait_until(deadline(), || {
            group = child_group(&terminal);
            group.is_some()
        }),
        "the child never got the terminal; terminal:\n{}",
        terminal.output()
    );
    let group = group.unwrap();
    let front = parent(group)
        .and_then(parent)
        .expect("the guard's grandparent");
    (
        terminal,
        Job {
            session,
            group,
            front,
        },
    )
}

/// Starts `lockrun elect KEY -- cat` and checks that cat has the terminal.
fn start_cat(consul: &TestConsul, key: &str) -> (Terminal, Job) {
    let (mut terminal, job) = start(consul, key, "", "cat");
    terminal.type_line("first line");
    // Once as the terminal echoes it, once as cat writes it back.
    terminal.expect("first line");
    terminal.expect("first line");
    (terminal, job)
}

/// `fg`, and waits until the child's `group` has the terminal again.
fn resume(terminal: &mut Terminal, group: i32) {
    terminal.type_line("fg");
    terminal.wait_foreground(group);
}

/// Ctrl-Z, and bash's report of the stopped job and its prompt.
fn suspend(terminal: &mut Terminal) {
    terminal.send(b"\x1a");
    terminal.expect("Stopped");
    terminal.prompt();
}

/// Waits until the front has ended, then has bash report the job: bash tells
/// of a job that ended in the background at its next prompt. Ended, not
/// reaped: a SIGCHLD that reaches bash while it runs a builtin (`kill %1`)
/// is queued until its next command, so the front may stay a zombie until
/// the `jobs` below.
fn report_after_end(terminal: &mut Terminal, front: i32) {
    assert!(
        wait_until(deadline(), || !pid_alive(front as u32)),
        "the job did not end; terminal:\n{}",
        terminal.output()
    );
    terminal.wait_editing();
    terminal.type_line("jobs");
}

#[test]
fn ctrl_z_stops_the_job_and_fg_resumes_it_with_the_lock_held() {
    let consul = TestConsul::start_fast();
    let api = consul.api();
    let key = consul.prefix("ctrl-z");
    let (mut terminal, job) = start_cat(&consul, &key);

    suspend(&mut terminal);
    // Stopped, and renewing: on the emulator we see two renewals go by
    // (a real agent does not tell), and the lock is still the same session's.
    if let Some(emulator) = consul.emulator() {
        let renewals = || emulator.request_count(consul_emulator::Endpoint::SessionRenew);
        let before = renewals();
        assert!(
            wait_until(deadline(), || renewals() >= before + 2),
            "no renewal while the job was stopped; terminal:\n{}",
            terminal.output()
        );
    }
    assert_eq!(holder(&api, &key).as_deref(), Some(job.session.as_str()));

    resume(&mut terminal, job.group);
    terminal.type_line("second line");
    terminal.expect("second line");
    terminal.expect("second line");
    terminal.send(b"\x04"); // Ctrl-D: cat reads the end and exits 0.
    terminal.prompt();
    assert_eq!(terminal.status(), "0", "{}", terminal.output());
    wait_released(&api, &key, &terminal);
}

#[test]
fn ctrl_c_after_fg_ends_the_child_as_before() {
    let consul = TestConsul::start_fast();
    let api = consul.api();
    let key = consul.prefix("ctrl-z-ctrl-c");
    let (mut terminal, job) = start_cat(&consul, &key);

    suspend(&mut terminal);
    resume(&mut terminal, job.group);
    terminal.type_line("after fg");
    terminal.expect("after fg");
    terminal.expect("after fg");
    terminal.send(b"\x03");
    terminal.prompt();
    assert_eq!(terminal.status(), "130", "{}", terminal.output());
    wait_released(&api, &key, &terminal);
}

#[test]
fn bg_lets_the_child_run_until_it_reads_the_terminal() {
    let consul = TestConsul::start_fast();
    let api = consul.api();
    let key = consul.prefix("ctrl-z-bg");
    let (mut terminal, job) = start_cat(&consul, &key);

    suspend(&mut terminal);
    // In the background cat reads the terminal at once, and the kernel
    // stops it for that; the job stops with it, by SIGTTIN, which `wait`
    // returns as 128+21 (and bash names in POSIX mode).
    terminal.type_line("set -o posix; bg; wait %1");
    terminal.expect("Stopped(SIGTTIN)");
    terminal.prompt();
    assert_eq!(terminal.status(), "149", "{}", terminal.output());
    assert_eq!(holder(&api, &key).as_deref(), Some(job.session.as_str()));
    resume(&mut terminal, job.group);
    terminal.type_line("after bg");
    terminal.expect("after bg");
    terminal.expect("after bg");
    terminal.send(b"\x04");
    terminal.prompt();
    assert_eq!(terminal.status(), "0", "{}", terminal.output());
    wait_released(&api, &key, &terminal);
}

#[test]
fn kill_of_a_stopped_job_stops_the_child_and_releases() {
    let consul = TestConsul::start_fast();
    let api = consul.api();
    let key = consul.prefix("ctrl-z-kill");
    let (mut terminal, job) = start_cat(&consul, &key);

    suspend(&mut terminal);
    terminal.type_line("kill %1");
    report_after_end(&mut terminal, job.front);
    // lockrun forwarded SIGTERM, cat died of it, and lockrun ended by it:
    // bash says "Terminated" for a job killed by SIGTERM, "Exit 143" for
    // one that exited 143.
    terminal.expect("Terminated");
    wait_released(&api, &key, &terminal);
}

#[test]
fn a_sigkilled_job_leaves_no_child_and_releases() {
    let consul = TestConsul::start_fast();
    let api = consul.api();
    let key = consul.prefix("ctrl-z-kill-9");
    let (mut terminal, job) = start(&consul, &key, "", "cat");
    let mut groups = KillGroupsOnDrop::new();
    groups.watch(job.group as u32);
    let worker = parent(job.group).expect("the guard's parent");

    suspend(&mut terminal);
    // What `kill -KILL %1` does, sent by us: bash sometimes misses the death
    // of a job it saw stopped (it then lists it as stopped, and its zombie
    // unreaped), which would make its report a flaky witness. SIGKILL cannot
    // be caught, so the front's end is the whole fact.
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(job.front),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the job's group");
    assert!(
        wait_until(deadline(), || !pid_alive(job.front as u32)),
        "the job did not end; terminal:\n{}",
        terminal.output()
    );
    assert!(
        wait_until(deadline(), || !procs::group_alive(job.group as u32)
            && !pid_alive(worker as u32)),
        "the child or lockrun outlived the killed job; terminal:\n{}",
        terminal.output()
    );
    // Released by lockrun, not left to the session's TTL: the emulator saw
    // the session destroyed.
    if let Some(emulator) = consul.emulator() {
        assert!(
            emulator
                .wait_for_request(procs::PATIENCE, |request| {
                    request.endpoint == consul_emulator::Endpoint::SessionDestroy
                })
                .is_some(),
            "the session was never destroyed; terminal:\n{}",
            terminal.output()
        );
    }
    wait_released(&api, &key, &terminal);
}

#[test]
fn the_front_ends_as_lockrun_did() {
    let consul = TestConsul::start_fast();
    let api = consul.api();
    let key = consul.prefix("front-status");
    let mut terminal = Terminal::start(&consul);

    terminal.type_line(&format!("{} elect", bin().display()));
    terminal.prompt();
    assert_eq!(terminal.status(), "2", "{}", terminal.output());

    let other = consul.prefix("front-status-exit");
    terminal.type_line(&elect_line(&consul, &other, "--shell", "'exit 7'"));
    terminal.prompt();
    assert_eq!(terminal.status(), "7", "{}", terminal.output());

    // Ctrl-C while waiting for a lock a rival holds reaches the front, the
    // job's only member in the terminal's foreground, which relays it.
    let rival = api.session_create(r#"{"LockDelay":"0s"}"#);
    assert!(kv_acquire(&api, &key, &rival, CONSUL_LOCK_FLAGS));
    terminal.type_line(&elect_line(&consul, &key, "", "cat"));
    if let Some(emulator) = consul.emulator() {
        // A blocking query on the key: lockrun waits for the rival.
        let waiting = emulator.wait_for_request(procs::PATIENCE, |request| {
            request.endpoint == consul_emulator::Endpoint::KvGet
                && request.path.contains(&encode_key(&key))
                && request.path.contains("index=")
        });
        assert!(
            waiting.is_some(),
            "lockrun never waited; terminal:\n{}",
            terminal.output()
        );
    }
    // Not before bash's child has become lockrun: until its exec, it is
    // bash's, whose handler would take the Ctrl-C.
    assert!(
        wait_until(deadline(), || terminal.foreground().is_some_and(|group| {
            std::fs::read(format!("/proc/{group}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains("elect"))
        })),
        "lockrun never got the terminal; terminal:\n{}",
        terminal.output()
    );
    terminal.send(b"\x03");
    terminal.prompt();
    assert_eq!(terminal.status(), "130", "{}", terminal.output());
    assert_eq!(holder(&api, &key).as_deref(), Some(rival.as_str()));
    api.session_destroy(&rival);
}

#[test]
fn a_hangup_ends_a_stopped_job_and_releases() {
    let consul = TestConsul::start_fast();
    let api = consul.api();
    let key = consul.prefix("ctrl-z-hangup");
    let (mut terminal, job) = start_cat(&consul, &key);
    let worker = parent(job.group).expect("the guard's parent");

    suspend(&mut terminal);
    // An interactive bash that gets SIGHUP (its terminal closed) sends
    // SIGHUP, then SIGCONT, to its stopped jobs, and exits.
    terminal.type_line("kill -HUP $$");
    assert!(
        wait_until(deadline(), || !pid_alive(job.front as u32)
            && !pid_alive(worker as u32)
            && !procs::group_alive(job.group as u32)),
        "the job outlived the hangup; terminal:\n{}",
        terminal.output()
    );
    wait_released(&api, &key, &terminal);
}

#[test]
fn a_stopped_job_whose_shell_died_ends_and_releases() {
    let consul = TestConsul::start_fast();
    let api = consul.api();
    let key = consul.prefix("ctrl-z-orphan");
    let (mut terminal, job) = start_cat(&consul, &key);
    let worker = parent(job.group).expect("the guard's parent");

    suspend(&mut terminal);
    // The shell killed outright, as when a terminal emulator crashes: the
    // stopped job is orphaned, and the kernel sends it SIGHUP and SIGCONT.
    let _ = terminal.shell.kill();
    let _ = terminal.shell.wait();
    assert!(
        wait_until(deadline(), || !pid_alive(job.front as u32)
            && !pid_alive(worker as u32)
            && !procs::group_alive(job.group as u32)),
        "the job outlived its shell; terminal:\n{}",
        terminal.output()
    );
    wait_released(&api, &key, &terminal);
}

/// A process that `vfork`ed (dash does, to run `sleep`) waits, unable to
/// stop, until its child execs; a child stopped before its exec keeps it
/// there, in state D, as stopped as it can be. Without lockrun the same.
/// The kernel names that wait `wait_for_vfork_done`, or, where it is
/// inlined, `kernel_clone` (seen in CI); a fork never sleeps there, so
/// either wait with a stopped child is the vfork's.
fn waits_for_a_stopped_vfork(pid: i32) -> bool {
    let in_vfork = std::fs::read_to_string(format!("/proc/{pid}/wchan"))
        .is_ok_and(|wchan| wchan.contains("vfork") || wchan == "kernel_clone");
    in_vfork && has_a_stopped_child(pid)
}

/// Whether a child of `pid` is stopped (state T).
fn has_a_stopped_child(pid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            return false;
        };
        let Some(close) = stat.rfind(')') else {
            return false;
        };
        let fields: Vec<&str> = stat[close + 1..].split_ascii_whitespace().collect();
        fields.len() > 1 && fields[0] == "T" && fields[1].parse() == Ok(pid)
    })
}

/// The processes of the terminal's session but bash and lockrun's worker
/// (which never stops: it keeps the lock), with their states: the job as
/// the user sees it, the front, the guard and the command.
fn job_states(terminal: &Terminal) -> Vec<(i32, char, String)> {
    let session = terminal.shell.id() as i32;
    let mut table = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let name = stat[stat.find('(').unwrap_or(0) + 1..close].to_owned();
        let fields: Vec<&str> = stat[close + 1..].split_ascii_whitespace().collect();
        let state = fields[0].chars().next().unwrap_or('?');
        let ppid: i32 = fields[1].parse().unwrap_or(0);
        let pgid: i32 = fields[2].parse().unwrap_or(0);
        let sid: i32 = fields[3].parse().unwrap_or(0);
        if sid == session && pid != session && state != 'Z' {
            table.push((pid, ppid, pgid, state, name));
        }
    }
    // The guard leads a group of its own from its fork on, before it takes
    // its name (a Ctrl-Z may stop it first); the front is the other group
    // leader, bash's child. The worker is the guard's parent.
    let workers: Vec<i32> = table
        .iter()
        .filter(|(pid, ppid, pgid, _, name)| {
            name == lockrun::child::guard::PROCESS_NAME || (pgid == pid && *ppid != session)
        })
        .map(|(_, ppid, ..)| *ppid)
        .collect();
    table
        .into_iter()
        .filter(|(pid, ..)| !workers.contains(pid))
        .map(|(pid, _, _, state, name)| (pid, state, name))
        .collect()
}

/// Ctrl-Z at any moment of start-up stops the whole job, the command
/// included, and `fg` resumes it to its end: typed at increasing delays
/// after the job takes the terminal, from before lockrun has split to after
/// the command runs, through the guard's spawn of the command.
#[test]
fn ctrl_z_at_any_moment_of_start_up_stops_the_whole_job() {
    let consul = TestConsul::start_fast();
    let dir = crate::support::scratch();
    let mut terminal = Terminal::start(&consul);
    let bash = terminal.shell.id() as i32;
    for (round, delay_us) in [
        0u64, 250, 500, 1000, 1500, 2000, 3000, 4000, 6000, 8000, 10_000, 13_000, 16_000, 20_000,
    ]
    .into_iter()
    .enumerate()
    {
        let mark = dir.path().join(format!("done-{round}"));
        let stops_before = terminal
            .output()
            .matches("the child's group stopped")
            .count();
        terminal.type_line(&format!(
            "{} -vv --backend local --lock-dir {} elect k -- sh -c 'sleep 0.6; touch {}'",
            bin().display(),
            dir.path().display(),
            mark.display()
        ));
        // From the moment lockrun runs in the job bash gave the terminal
        // (earlier, a Ctrl-Z meets bash's own child, which ignores it until
        // it execs: bash's race, not ours). The front holds the terminal
        // for a few milliseconds before the guard's group takes it, so we
        // look often, and a look that finds the guard's group is later in
        // the start-up, never past it.
        let lockrun_runs = || {
            terminal.foreground().is_some_and(|group| {
                group != bash
                    && matches!(
                        procs::process_name(group as u32).as_deref(),
                        Some("lockrun") | Some(lockrun::child::guard::PROCESS_NAME)
                    )
            })
        };
        let until = deadline();
        while !lockrun_runs() {
            assert!(
                std::time::Instant::now() < until,
                "the job never got the terminal; terminal:\n{}",
                terminal.output()
            );
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        std::thread::sleep(std::time::Duration::from_micros(delay_us));
        terminal.send(b"\x1a");
        terminal.expect("Stopped");
        terminal.prompt();
        let mut states = Vec::new();
        let stopped = wait_until(deadline(), || {
            states = job_states(&terminal);
            states
                .iter()
                .all(|(pid, state, _)| *state == 'T' || waits_for_a_stopped_vfork(*pid))
        });
        assert!(
            stopped,
            "Ctrl-Z {delay_us}us after the start left part of the job running: {states:?}\n{}",
            terminal.output()
        );
        assert!(
            !mark.exists(),
            "the command ran on while the job was stopped"
        );
        // `fg` only once lockrun has seen the job stop (its -vv line, one
        // per round), so that the continue must reach it through the front,
        // whenever the Ctrl-Z stopped the front: a SIGCONT the front got
        // before it listened was lost, and the job stayed stopped after
        // `fg` (seen in CI when the `fg` came late).
        // Only a job with a guard has a worker that runs on and logs: a
        // Ctrl-Z before the worker left the job's group (and forked the
        // guard) stopped it too, and needs no relay.
        let stops_seen = |terminal: &Terminal| {
            terminal
                .output()
                .matches("the child's group stopped")
                .count()
        };
        let has_guard = states
            .iter()
            .any(|(_, _, name)| name == lockrun::child::guard::PROCESS_NAME);
        let seen_stop =
            !has_guard || wait_until(deadline(), || stops_seen(&terminal) > stops_before);
        assert!(
            seen_stop,
            "lockrun never said the job stopped:\n{}",
            terminal.output()
        );
        terminal.type_line("fg");
        terminal.prompt();
        assert_eq!(
            terminal.status(),
            "0",
            "after Ctrl-Z {delay_us}us after the start, fg: {}",
            terminal.output()
        );
        assert!(mark.exists(), "the command did not finish after fg");
    }
}

/// A run that ends with no word leaves a person at a terminal guessing
/// (#40): `leader` with no holder (1), `-n` on a held lock (75), and a
/// hook's output, hidden without `-v`. At a terminal each gets one line on
/// stderr; with stderr not a terminal (cron, scripts, the journal) the
/// runs print exactly what they printed before: nothing on stderr.
#[test]
fn a_terminal_gets_one_line_where_a_script_gets_none() {
    let consul = TestConsul::start_fast();
    let dir = crate::support::scratch();
    let locks = dir.path().join("locks");
    let local = format!(
        "{} --backend local --lock-dir '{}'",
        bin().display(),
        locks.display()
    );
    // A holder of `held`, outside the terminal.
    let mut holder = crate::support::bare(["--backend", "local", "--lock-dir"]);
    let ready = dir.path().join("ready");
    holder
        .arg(&locks)
        .args(["elect", "--value", "db-1", "held", "--shell", "--"])
        .arg(format!("touch '{}'; exec sleep 600", ready.display()));
    let holder = crate::support::Running::spawn(&mut holder);
    crate::support::wait_for_file(&ready);
    let runs = [
        (
            format!("{local} leader free"),
            "1",
            "lockrun: nobody holds `free`\r\n",
        ),
        (
            format!("{local} elect -n held -- true"),
            "75",
            "lockrun: `held` is held by db-1; not acquired\r\n",
        ),
        (
            format!("{local} elect --on-acquire 'echo hook-said-hi' other -- true"),
            "0",
            "lockrun: --on-acquire: hook-said-hi\r\n",
        ),
    ];
    let mut terminal = Terminal::start(&consul);
    for (line, status, said) in &runs {
        terminal.type_line(line);
        terminal.expect(said);
        terminal.prompt();
        assert_eq!(&terminal.status(), status, "{}", terminal.output());
    }
    // The same runs with stderr a pipe: not a byte on it.
    for (line, status, _) in &runs {
        let output = std::process::Command::new("sh")
            .args(["-c", line])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(
            output.status.code().map(|c| c.to_string()).as_deref(),
            Some(*status),
            "{line}: {output:?}"
        );
        assert!(output.stderr.is_empty(), "{line}: {output:?}");
        assert!(output.stdout.is_empty(), "{line}: {output:?}");
    }
    drop(holder);
}
