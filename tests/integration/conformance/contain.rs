//! The job is the command's whole process tree (SPEC §3): a command that
//! daemonizes (`setsid` and a double fork, as `pg_ctl start` does) keeps the
//! lock while its daemon runs, and the daemon is gone before a rival's
//! command starts, however the job ends. Every scenario compares the
//! daemon's own heartbeats with the rival's own start.

use nix::sys::signal::Signal;

use crate::places::{last_beat, on_every_engine, Place};
use crate::support::{run, scratch, wait_for_file, Running};

/// The containment a scenario runs in.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    /// `--containment auto`, where the host lets us write a cgroup v2:
    /// cgroup mode. Elsewhere the test says why, and checks the subreaper.
    Cgroup,
    /// `--containment subreaper`.
    Subreaper,
}

impl Mode {
    /// The holder's flags for this mode, `-v` to have it say which it got.
    fn flags(self) -> &'static [&'static str] {
        match self {
            Mode::Cgroup => &["-v", "--containment", "auto"],
            Mode::Subreaper => &["-v", "--containment", "subreaper"],
        }
    }

    /// Asserts from the holder's `-v` output that it ran in this mode, and
    /// that its cgroup, if any, is gone now; the cgroup's path.
    fn check(self, stderr: &str) -> Option<std::path::PathBuf> {
        let line = stderr
            .lines()
            .find_map(|line| line.split_once("containment: ").map(|(_, mode)| mode))
            .unwrap_or_else(|| panic!("the holder did not say its containment:\n{stderr}"));
        let expected = match self {
            Mode::Cgroup => match writable_cgroup_v2() {
                Ok(_) => "cgroup ",
                Err(why) => {
                    eprintln!("cgroup mode not checked: {why}");
                    "subreaper ("
                }
            },
            Mode::Subreaper => "subreaper (--containment subreaper)",
        };
        assert!(
            line.starts_with(expected),
            "ran in `{line}`, not `{expected}`:\n{stderr}"
        );
        let dir = line.strip_prefix("cgroup ").map(std::path::PathBuf::from)?;
        // A guard whose lockrun was SIGKILLed removes it on its own time.
        let gone = crate::procs::wait_until(crate::procs::deadline(), || !dir.exists());
        assert!(gone, "the job's cgroup `{}` was left behind", dir.display());
        Some(dir)
    }
}

/// Our own cgroup v2 directory if we may create cgroups in it, else why
/// not: where lockrun must use cgroup mode.
fn writable_cgroup_v2() -> Result<std::path::PathBuf, String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
    let path = own
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or("no cgroup v2 hierarchy")?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
    let mount = mounts
        .lines()
        .filter(|line| line.contains(" - cgroup2 "))
        .find_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            (fields.get(3) == Some(&"/")).then(|| fields[4].to_owned())
        })
        .ok_or("no whole cgroup v2 hierarchy mounted")?;
    let dir = std::path::Path::new(&mount).join(path.trim_start_matches('/'));
    nix::unistd::access(&dir, nix::unistd::AccessFlags::W_OK)
        .map_err(|e| format!("`{}` is not writable ({e})", dir.display()))?;
    if !nix::unistd::Uid::effective().is_root() && std::env::var_os("LOCKRUN_TEST_CGROUP").is_none()
    {
        return Err("not root".into());
    }
    Ok(dir)
}

/// A command that starts a daemon (a double fork, then `setsid`) beating
/// into `$1/beat` every 10 ms until `$1/go` appears, and exits at once.
pub(crate) const DAEMONIZE: &str =
    "(setsid sh -c 'while [ ! -e \"$0/go\" ]; do date +%s%N >> \"$0/beat\"; \
     sleep 0.01; done' \"$1\" </dev/null >/dev/null 2>&1 &); exit 0";

/// A fork loop that leaves every group: each process beats, starts the
/// next in a session of its own, and exits, until `$1/go` appears.
const WANDER: &str = "export S='[ -e \"$W/go\" ] && exit 0; date +%s%N >> \"$W/beat\"; \
     (setsid sh -c \"$S\" </dev/null >/dev/null 2>&1 &)'; W=\"$1\" setsid sh -c \"$S\" \
     </dev/null >/dev/null 2>&1 & exit 0";

/// How the holder's job ends.
#[derive(Clone, Copy, PartialEq)]
enum End {
    ByItself,
    Release,
    Signal(Signal),
    /// SIGKILL to the holder's guard alone, as an operator's `kill -9` or
    /// the OOM killer sends it.
    KillGuard,
    /// The job runs past `--max-time`.
    MaxTime,
}

/// A rival waiting for KEY whose command notes when it started.
struct Rival {
    running: Running,
    mark: std::path::PathBuf,
}

impl Rival {
    fn wait_for(place: &Place, key: &str, work: &std::path::Path) -> Rival {
        let mark = work.join("rival");
        let mut cmd = place.lockrun(&["elect", key, "--shell", "--", "date +%s%N > \"$1\""]);
        cmd.arg(&mark);
        Rival {
            running: Running::spawn(&mut cmd),
            mark,
        }
    }

    /// Waits for it to end with status 0, and tells when its command
    /// started (ns since the epoch).
    fn started(self, place: &Place) -> u128 {
        place.status(&self.running.finish(), 0, "the rival");
        std::fs::read_to_string(&self.mark)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

/// Starts `lockrun elect KEY --shell -- SCRIPT WORK` and a waiting rival,
/// ends the holder's job as `end` says, and asserts the tree's last beat
/// came before the rival's command started.
fn contained(place: &Place, mode: Mode, name: &str, script: &str, end: End) {
    let key = place.key(name);
    let work = scratch();
    let mut args = vec!["elect", &key];
    args.extend(mode.flags());
    if end == End::MaxTime {
        args.extend(["--max-time", "2s"]);
    }
    args.extend(["--shell", "--", script]);
    let mut cmd = place.lockrun(&args);
    cmd.arg(work.path());
    let mut holder = Running::spawn(&mut cmd);
    crate::places::wait_for_a_beat(work.path());
    let rival = Rival::wait_for(place, &key, work.path());
    // The rival gets time to start, measured in the daemon's own beats: a
    // daemon that escaped would beat beside it. Past --max-time the job may
    // end first on a slow machine (its beats stop with it).
    let beats = beat_count(work.path());
    if end == End::MaxTime {
        assert!(
            crate::procs::wait_until(crate::procs::deadline(), || {
                beat_count(work.path()) >= beats + 30 || holder.exited()
            }),
            "the daemon stopped beating while its job ran"
        );
    } else {
        wait_until_beats(work.path(), beats + 30);
    }
    match end {
        End::ByItself => {
            // Still holding while the daemon runs, though its command exited.
            std::fs::write(work.path().join("go"), "").unwrap();
        }
        End::Release => {
            let output = run(&mut place.lockrun(&["release", &key]));
            place.status(&output, 0, "release");
        }
        End::Signal(signal) => holder.signal(signal),
        End::KillGuard => kill_the_guard_of(holder.pid()),
        End::MaxTime => {}
    }
    let output = holder.finish();
    if end == End::MaxTime {
        place.status(&output, 123, "the holder past --max-time");
    }
    let holder_ended = crate::support::now_ns();
    let started = rival.started(place);
    mode.check(&String::from_utf8_lossy(&output.stderr));
    // Whatever happened, nothing of ours beats on after the test.
    std::fs::write(work.path().join("go"), "").unwrap();
    let last = last_beat(work.path());
    if end == End::Release && !matches!(place, Place::Local(_)) {
        // On Consul and etcd an operator's release frees the key at once
        // (SPEC §3 states it per backend), so the rival may start while the
        // holder stops its tree; what we promise there is that the holder
        // ends only once its whole tree is gone.
        assert!(
            last < holder_ended,
            "the holder's daemon beat {} ms after the holder ended",
            (last - holder_ended) / 1_000_000
        );
        return;
    }
    assert!(
        last < started,
        "the holder's daemon beat {} ms after the rival's command started",
        (last - started) / 1_000_000
    );
}

fn a_daemon_ending_by_itself_keeps_the_lock(place: &Place, mode: Mode) {
    contained(place, mode, "by-itself", DAEMONIZE, End::ByItself);
}
on_every_engine!(
    a_daemon_ending_by_itself_keeps_the_lock,
    cgroup = Mode::Cgroup,
    subreaper = Mode::Subreaper
);

fn a_released_daemon_is_gone_before_the_rival(place: &Place, mode: Mode) {
    contained(place, mode, "released", DAEMONIZE, End::Release);
}
on_every_engine!(
    a_released_daemon_is_gone_before_the_rival,
    cgroup = Mode::Cgroup,
    subreaper = Mode::Subreaper
);

fn a_daemon_is_gone_after_sigterm_to_lockrun(place: &Place, mode: Mode) {
    contained(place, mode, "term", DAEMONIZE, End::Signal(Signal::SIGTERM));
}
on_every_engine!(
    a_daemon_is_gone_after_sigterm_to_lockrun,
    cgroup = Mode::Cgroup,
    subreaper = Mode::Subreaper
);

fn a_daemon_is_gone_after_sigkill_to_lockrun(place: &Place, mode: Mode) {
    contained(place, mode, "kill", DAEMONIZE, End::Signal(Signal::SIGKILL));
}
on_every_engine!(
    a_daemon_is_gone_after_sigkill_to_lockrun,
    cgroup = Mode::Cgroup,
    subreaper = Mode::Subreaper
);

fn a_fork_loop_is_gone_after_release(place: &Place, mode: Mode) {
    contained(place, mode, "fork-loop", WANDER, End::Release);
}
on_every_engine!(
    a_fork_loop_is_gone_after_release,
    cgroup = Mode::Cgroup,
    subreaper = Mode::Subreaper
);

fn a_fork_loop_is_gone_after_sigkill_to_lockrun(place: &Place, mode: Mode) {
    contained(
        place,
        mode,
        "fork-loop-kill",
        WANDER,
        End::Signal(Signal::SIGKILL),
    );
}
on_every_engine!(
    a_fork_loop_is_gone_after_sigkill_to_lockrun,
    cgroup = Mode::Cgroup,
    subreaper = Mode::Subreaper
);

/// Issue #43: a job that runs past `--max-time` is stopped as on a loss,
/// its daemon with it, before the lock is given up.
fn a_daemon_past_max_time_is_gone_before_the_rival(place: &Place, mode: Mode) {
    contained(place, mode, "max-time", DAEMONIZE, End::MaxTime);
}
on_every_engine!(
    a_daemon_past_max_time_is_gone_before_the_rival,
    cgroup = Mode::Cgroup,
    subreaper = Mode::Subreaper
);

/// Issue #45: the guard SIGKILLed alone used to leave its orphans to init,
/// and lockrun, seeing its guard gone, released the lock while the daemon
/// beat on (21 of 24 runs). lockrun is a subreaper too now, and kills what
/// the guard left before it lets go.
fn a_daemon_is_gone_after_sigkill_to_the_guard_alone(place: &Place, mode: Mode) {
    contained(place, mode, "guard-kill", DAEMONIZE, End::KillGuard);
}
on_every_engine!(
    a_daemon_is_gone_after_sigkill_to_the_guard_alone,
    cgroup = Mode::Cgroup,
    subreaper = Mode::Subreaper
);

/// SIGKILLs the guard that `lockrun` (pid `holder`) runs its command under.
fn kill_the_guard_of(holder: u32) {
    let guard = guard_of(holder);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(guard as i32), Signal::SIGKILL).unwrap();
}

/// The guard that `lockrun` (pid `holder`) runs its command under.
fn guard_of(holder: u32) -> u32 {
    children_of(holder)
        .into_iter()
        .find(|pid| {
            crate::procs::process_name(*pid).as_deref() == Some(lockrun::child::guard::PROCESS_NAME)
        })
        .unwrap_or_else(|| panic!("lockrun {holder} has no guard"))
}

/// Issue #45: `pkill -f lockrun` matched the guard (a forked guard had
/// lockrun's whole command line, an exec'd one named lockrun's binary), and
/// a guard killed with lockrun leaves the tree to run on. With a holder
/// running, `pgrep -f lockrun` lists lockrun itself but not its guard,
/// whose command line is its name alone.
#[test]
fn pkill_f_lockrun_does_not_match_the_guard() {
    let place = Place::local();
    let key = place.key("pgrep-f");
    let work = scratch();
    let mut cmd = place.lockrun(&[
        "elect",
        &key,
        "--shell",
        "--",
        r#"touch "$1/held"; exec sleep 60"#,
    ]);
    cmd.arg(work.path());
    let holder = Running::spawn(&mut cmd);
    wait_for_file(&work.path().join("held"));
    let guard = guard_of(holder.pid());
    let cmdline = std::fs::read(format!("/proc/{guard}/cmdline")).unwrap();
    let words: Vec<&[u8]> = cmdline
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .collect();
    assert_eq!(
        words,
        [lockrun::child::guard::PROCESS_NAME.as_bytes()],
        "the guard's command line: {:?}",
        String::from_utf8_lossy(&cmdline)
    );
    let out = std::process::Command::new("pgrep")
        .args(["-f", "lockrun"])
        .output()
        .expect("pgrep");
    let matched: Vec<u32> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|pid| pid.parse().ok())
        .collect();
    assert!(
        matched.contains(&holder.pid()),
        "pgrep -f lockrun: {matched:?}"
    );
    assert!(
        !matched.contains(&guard),
        "pgrep -f lockrun matches the guard {guard}: {matched:?}"
    );
    holder.signal(Signal::SIGTERM);
    let _ = holder.finish();
}

/// Issue #45: `pkill -9 lockrun` killed the guard too (its name contained
/// lockrun's), and the tree ran on in a cgroup nobody killed, beside the
/// next holder for 536-572 ms. The guard's name no longer matches; and
/// when both die all the same (SIGKILL to each, the guard first stopped
/// so that it cannot act on lockrun's death), the next holder on this
/// host kills the stale cgroup before its command starts.
#[test]
fn a_tree_whose_lockrun_and_guard_were_killed_is_gone_before_the_next_command() {
    let place = Place::local();
    let mode = Mode::Cgroup;
    if let Err(why) = writable_cgroup_v2() {
        eprintln!("not checked: {why}");
        return;
    }
    let key = place.key("both-killed");
    let work = scratch();
    let mut args = vec!["elect", &key];
    args.extend(mode.flags());
    args.extend(["--shell", "--", DAEMONIZE]);
    let mut cmd = place.lockrun(&args);
    cmd.arg(work.path());
    let holder = Running::spawn(&mut cmd);
    crate::places::wait_for_a_beat(work.path());
    let guard = guard_of(holder.pid());
    let name = crate::procs::process_name(guard).unwrap();
    assert!(
        !name.contains("lockrun"),
        "`pkill lockrun` matches the guard `{name}`"
    );
    let rival = Rival::wait_for(&place, &key, work.path());
    let beats = beat_count(work.path());
    wait_until_beats(work.path(), beats + 10);
    let pid = |pid: u32| nix::unistd::Pid::from_raw(pid as i32);
    nix::sys::signal::kill(pid(guard), Signal::SIGSTOP).unwrap();
    holder.signal(Signal::SIGKILL);
    nix::sys::signal::kill(pid(guard), Signal::SIGKILL).unwrap();
    let _ = holder.finish();
    let started = rival.started(&place);
    give_an_escaped_helper_time(work.path());
    let last = last_beat(work.path());
    assert!(
        last < started,
        "the killed holder's daemon beat {} ms after the rival's command started",
        (last - started) / 1_000_000
    );
}

/// The children of `parent`, from every thread's list in /proc.
fn children_of(parent: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{parent}/task")).unwrap();
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|text| {
            text.split_ascii_whitespace()
                .filter_map(|pid| pid.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// A daemon that ignores SIGTERM and beats until `$1/go` appears, started
/// by a command that notes when it exits, with status 3.
const DAEMONIZE_STUBBORN: &str = "(setsid sh -c 'trap \"\" TERM; while [ ! -e \"$0/go\" ]; do \
     date +%s%N >> \"$0/beat\"; sleep 0.01; done' \"$1\" </dev/null >/dev/null 2>&1 &); \
     while [ ! -s \"$1/beat\" ]; do sleep 0.01; done; date +%s%N > \"$1/exited\"; exit 3";

/// `--leftovers kill`: when COMMAND exits, what it left gets the kill
/// signal, then SIGKILL after --kill-timeout; lockrun exits with COMMAND's
/// status once they are gone, and a rival's command starts only after.
/// The leftover's last beat shows it lived at least half the timeout on:
/// a 10 ms beat may starve for a while on a loaded machine (at 300 ms
/// with 250 ms asked, one CI run under load saw 172).
fn leftovers_kill_ends_the_job_with_the_command(place: &Place, mode: Mode) {
    let key = place.key("leftovers-kill");
    let work = scratch();
    let mut args = vec!["elect", &key, "--leftovers", "kill", "--kill-timeout", "1s"];
    args.extend(mode.flags());
    args.extend(["--shell", "--", DAEMONIZE_STUBBORN]);
    let mut cmd = place.lockrun(&args);
    cmd.arg(work.path());
    let holder = Running::spawn(&mut cmd);
    crate::places::wait_for_a_beat(work.path());
    let rival = Rival::wait_for(place, &key, work.path());
    let output = holder.finish();
    let holder_ended = crate::support::now_ns();
    place.status(&output, 3, "the holder, with COMMAND's status");
    mode.check(&String::from_utf8_lossy(&output.stderr));
    let started = rival.started(place);
    std::fs::write(work.path().join("go"), "").unwrap();
    let read = |name: &str| -> u128 {
        let text = std::fs::read_to_string(work.path().join(name)).unwrap();
        text.trim().parse().unwrap()
    };
    let (exited, last) = (read("exited"), last_beat(work.path()));
    assert!(
        last < started,
        "the leftover beat {} ms after the rival's command started",
        (last - started) / 1_000_000
    );
    assert!(last < holder_ended, "the leftover outlived the holder");
    // It ignored SIGTERM, so only SIGKILL ended it, after the grace.
    assert!(
        last >= exited + 500_000_000,
        "the leftover was killed {} ms after COMMAND exited, before --kill-timeout 1s",
        (last.saturating_sub(exited)) / 1_000_000
    );
}
on_every_engine!(
    leftovers_kill_ends_the_job_with_the_command,
    cgroup = Mode::Cgroup,
    subreaper = Mode::Subreaper
);

/// An unknown `--leftovers` value is a usage error naming the values, and
/// nothing reaches the engine.
fn an_unknown_leftovers_value_is_a_usage_error(place: &Place) {
    {
        let key = place.key("k");
        for args in [
            vec!["elect", "--leftovers", "linger", &key, "--", "true"],
            vec![
                "semaphore",
                "-l",
                "2",
                "--leftovers",
                "",
                &key,
                "--",
                "true",
            ],
        ] {
            let output = run(&mut place.lockrun(&args));
            let stderr = String::from_utf8_lossy(&output.stderr);
            place.status(&output, 2, "a bad --leftovers");
            assert_eq!(stderr.lines().count(), 1, "{stderr}");
            assert!(
                stderr.contains("wait") && stderr.contains("kill"),
                "names the values: {stderr}"
            );
        }
        place.assert_nothing_written("a bad --leftovers");
    }
}
on_every_engine!(an_unknown_leftovers_value_is_a_usage_error);

/// How many beats the tree has written so far.
fn beat_count(work: &std::path::Path) -> usize {
    std::fs::read_to_string(work.join("beat"))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

/// Waits (within the test patience) until the tree has beaten `count` times.
fn wait_until_beats(work: &std::path::Path, count: usize) {
    let deadline = crate::procs::deadline() + crate::procs::PATIENCE;
    while beat_count(work) < count {
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon stopped beating"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// PostgreSQL 15's programs, where the build machine has them.
const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// A throwaway PostgreSQL cluster, made by `initdb` as an unprivileged user
/// (postgres refuses to run as root), listening on a Unix socket in its own
/// directory only.
struct Cluster {
    work: tempfile::TempDir,
    /// How to run a program as the cluster's owner: `setpriv` to `nobody`
    /// when we are root, nothing otherwise.
    as_owner: Vec<String>,
}

impl Cluster {
    /// None, having said why, where PostgreSQL 15 is not installed.
    fn init() -> Option<Cluster> {
        if !std::path::Path::new(PG_BIN).join("pg_ctl").exists() {
            eprintln!("not checked: no PostgreSQL 15 at {PG_BIN} (Debian: postgresql-15)");
            return None;
        }
        let work = scratch();
        let as_owner: Vec<String> = if nix::unistd::Uid::effective().is_root() {
            let nobody = nix::unistd::User::from_name("nobody")
                .unwrap()
                .expect("a `nobody` user");
            nix::unistd::chown(work.path(), Some(nobody.uid), Some(nobody.gid)).unwrap();
            let group = format!("--regid={}", nobody.gid);
            let user = format!("--reuid={}", nobody.uid);
            ["setpriv", &user, &group, "--clear-groups"]
                .map(String::from)
                .to_vec()
        } else {
            Vec::new()
        };
        let cluster = Cluster { work, as_owner };
        let mut initdb = cluster.command("initdb");
        initdb
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(cluster.data());
        let output = run(&mut initdb);
        assert!(
            output.status.success(),
            "initdb failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        Some(cluster)
    }

    fn path(&self) -> &std::path::Path {
        self.work.path()
    }

    fn data(&self) -> std::path::PathBuf {
        self.path().join("data")
    }

    /// `program` from PostgreSQL's directory, run as the cluster's owner.
    fn command(&self, program: &str) -> std::process::Command {
        let program = format!("{PG_BIN}/{program}");
        let mut words = self.as_owner.iter().chain(std::iter::once(&program));
        let mut cmd = std::process::Command::new(words.next().unwrap());
        cmd.args(words);
        cmd
    }

    /// `pg_ctl start`'s words, for lockrun to run.
    fn start_words(&self) -> Vec<String> {
        let mut words = self.as_owner.clone();
        words.push(format!("{PG_BIN}/pg_ctl"));
        words.extend(["-D".into(), self.data().display().to_string()]);
        words.extend(["-l".into(), self.path().join("log").display().to_string()]);
        words.push("-o".into());
        words.push(format!(
            "-k {} -p 5432 -c listen_addresses=''",
            self.path().display()
        ));
        words.push("start".into());
        words
    }

    /// The postmaster's pid once it is ready, from `postmaster.pid`, and its
    /// workers (its children, from /proc).
    fn running(&self) -> Vec<u32> {
        let pid_file = self.data().join("postmaster.pid");
        let deadline = crate::procs::deadline();
        let mut postmaster = None;
        let ready = crate::procs::wait_until(deadline, || {
            let text = std::fs::read_to_string(&pid_file).unwrap_or_default();
            postmaster = text
                .lines()
                .next()
                .and_then(|l| l.trim().parse::<u32>().ok());
            text.lines().any(|line| line.trim() == "ready")
        });
        assert!(ready, "postgres did not start:\n{}", self.log());
        let postmaster = postmaster.unwrap();
        let mut pids = vec![postmaster];
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let ppid = stat.rfind(')').and_then(|at| {
                stat[at + 1..]
                    .split_whitespace()
                    .nth(1)?
                    .parse::<u32>()
                    .ok()
            });
            if ppid == Some(postmaster) {
                pids.push(pid);
            }
        }
        assert!(pids.len() > 2, "postgres has workers: {pids:?}");
        pids
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path().join("log")).unwrap_or_default()
    }
}

impl Drop for Cluster {
    /// A failing test leaves no postgres running.
    fn drop(&mut self) {
        if self.data().join("postmaster.pid").exists() {
            let mut stop = self.command("pg_ctl");
            stop.args(["stop", "-m", "immediate", "-D"])
                .arg(self.data());
            let _ = run(&mut stop);
        }
    }
}

/// `lockrun elect KEY -- pg_ctl start`: pg_ctl exits once the server is up,
/// and the job, and the lock, last as long as postgres runs. Ended as `end`
/// says, the postmaster and all its workers are gone before a rival's
/// command starts: the rival's command itself looks for them.
fn postgres_is_the_job(place: &Place, mode: Mode, end: End) {
    let Some(cluster) = Cluster::init() else {
        return;
    };
    let key = place.key("postgres");
    let mut args = vec!["elect", &key];
    args.extend(mode.flags());
    args.push("--");
    let words = cluster.start_words();
    args.extend(words.iter().map(String::as_str));
    let holder = Running::spawn(&mut place.lockrun(&args));
    let pids = cluster.running();
    // The rival's command notes which of them it finds alive, then its
    // start. A zombie (dead, its exit status not yet collected by whoever
    // it was reparented to) runs nothing and holds nothing: `kill -0`
    // finds it all the same, so its state is read instead.
    let look = "W=$1; shift; for p in \"$@\"; do \
                s=$(sed -n 's/^State:[[:space:]]*\\(.\\).*/\\1/p' /proc/$p/status 2>/dev/null); \
                [ -n \"$s\" ] && [ \"$s\" != Z ] && echo \"$p\" >> \"$W/alive\"; \
                done; date +%s%N > \"$W/rival\"";
    let work = scratch();
    let mut cmd = place.lockrun(&["elect", &key, "--shell", "--", look]);
    cmd.arg(work.path()).args(pids.iter().map(u32::to_string));
    let rival = Running::spawn(&mut cmd);
    // pg_ctl exited long ago; the job must still hold the lock. We give the
    // rival time to (wrongly) start, measured in postgres's own progress:
    // a checkpoint forced through the socket would do, but a plain wait
    // for the log to settle is enough here, since no start may happen.
    let quiet = crate::procs::wait_until(
        std::time::Instant::now() + std::time::Duration::from_secs(1),
        || work.path().join("rival").exists(),
    );
    assert!(!quiet, "the rival started while postgres ran");
    match end {
        End::Release => {
            let output = run(&mut place.lockrun(&["release", &key]));
            place.status(&output, 0, "release");
        }
        End::Signal(signal) => holder.signal(signal),
        End::KillGuard => kill_the_guard_of(holder.pid()),
        End::ByItself | End::MaxTime => unreachable!("postgres runs until stopped"),
    }
    let output = holder.finish();
    place.status(&rival.finish(), 0, "the rival");
    mode.check(&String::from_utf8_lossy(&output.stderr));
    let alive = std::fs::read_to_string(work.path().join("alive")).unwrap_or_default();
    assert!(
        alive.trim().is_empty(),
        "postgres processes ran when the rival's command started: {}\nof {pids:?}\n{}",
        alive.trim(),
        cluster.log()
    );
    let left: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|pid| crate::procs::pid_alive(*pid))
        .collect();
    assert!(left.is_empty(), "postgres processes left: {left:?}");
}

#[test]
fn a_database_server_is_gone_after_release_on_local() {
    postgres_is_the_job(&Place::local(), Mode::Cgroup, End::Release);
}

#[test]
fn a_database_server_is_gone_after_release_on_local_subreaper() {
    postgres_is_the_job(&Place::local(), Mode::Subreaper, End::Release);
}

#[test]
fn a_database_server_is_gone_after_sigkill_to_the_guard_on_local_subreaper() {
    postgres_is_the_job(&Place::local(), Mode::Subreaper, End::KillGuard);
}

#[test]
fn a_database_server_is_gone_after_sigkill_to_the_guard_on_etcd() {
    postgres_is_the_job(
        &Place::etcd("postgres-guard-kill"),
        Mode::Cgroup,
        End::KillGuard,
    );
}

#[test]
fn a_database_server_is_gone_after_sigkill_to_the_guard_on_etcd_subreaper() {
    postgres_is_the_job(
        &Place::etcd("postgres-guard-kill"),
        Mode::Subreaper,
        End::KillGuard,
    );
}

#[test]
fn a_database_server_is_gone_after_sigkill_to_the_guard_on_local() {
    postgres_is_the_job(&Place::local(), Mode::Cgroup, End::KillGuard);
}

#[test]
fn a_database_server_is_gone_after_sigterm_on_local() {
    postgres_is_the_job(&Place::local(), Mode::Cgroup, End::Signal(Signal::SIGTERM));
}

#[test]
fn a_database_server_is_gone_after_sigterm_on_etcd() {
    postgres_is_the_job(
        &Place::etcd("postgres"),
        Mode::Cgroup,
        End::Signal(Signal::SIGTERM),
    );
}

#[test]
fn a_database_server_is_gone_after_sigterm_on_etcd_subreaper() {
    postgres_is_the_job(
        &Place::etcd("postgres"),
        Mode::Subreaper,
        End::Signal(Signal::SIGTERM),
    );
}

/// A systemd service's or scope's cgroup is systemd's unless delegated to
/// it (`Delegate=yes`, which systemd marks with the `trusted.delegate`
/// attribute): there lockrun, root or not, runs the job in subreaper mode
/// and says why; marked delegated, it uses a cgroup below the unit's.
#[test]
fn a_systemd_units_cgroup_is_used_only_when_delegated() {
    let parent = match writable_cgroup_v2() {
        Ok(parent) => parent,
        Err(why) => {
            eprintln!("not checked: {why}");
            return;
        }
    };
    for delegated in [false, true] {
        let unit = parent.join(format!(
            "lockrun-test-{}-{}.service",
            std::process::id(),
            u8::from(delegated)
        ));
        std::fs::create_dir(&unit).unwrap();
        if delegated {
            let set = std::process::Command::new("python3")
                .args([
                    "-c",
                    "import os, sys; os.setxattr(sys.argv[1], 'trusted.delegate', b'1')",
                ])
                .arg(&unit)
                .status()
                .expect("python3 runs");
            assert!(set.success(), "cannot mark `{}` delegated", unit.display());
        }
        let place = Place::local();
        let key = place.key("unit");
        let inner = place.lockrun(&["elect", &key, "-v", "--", "true"]);
        // lockrun starts inside the unit's cgroup, as systemd starts a
        // service's main process.
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "echo $$ > \"$0\" && exec \"$@\""])
            .arg(unit.join("cgroup.procs"))
            .arg(inner.get_program())
            .args(inner.get_args());
        for (name, value) in inner.get_envs() {
            match value {
                Some(value) => cmd.env(name, value),
                None => cmd.env_remove(name),
            };
        }
        let output = crate::support::run(&mut cmd);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{stderr}");
        let mode = stderr
            .lines()
            .find_map(|line| line.split_once("containment: ").map(|(_, mode)| mode))
            .unwrap_or_else(|| panic!("lockrun did not say its containment:\n{stderr}"));
        if delegated {
            let expected = format!("cgroup {}/lockrun-", unit.display());
            assert!(mode.starts_with(&expected), "{mode}");
        } else {
            assert!(mode.starts_with("subreaper ("), "{mode}");
            assert!(mode.contains("Delegate=yes"), "{mode}");
        }
        // Empty once lockrun is gone, and its job's cgroup removed.
        let removed = crate::procs::wait_until(crate::procs::deadline(), || {
            std::fs::remove_dir(&unit).is_ok()
        });
        assert!(removed, "`{}` kept a process or a cgroup", unit.display());
    }
}

/// In cgroup mode the command starts straight into its cgroup
/// (`clone3(CLONE_INTO_CGROUP)`): the parked guard makes the cgroup but
/// stays where it is, since every move between cgroups waits for an RCU
/// grace period in the kernel (5–12 ms per move, twice per run before).
/// Where the kernel has no clone3 (or hides it) the guard moves in while
/// parked instead; this host has it when it has cgroup v2 and
/// `cgroup.kill` (Linux 5.14), which cgroup mode needs anyway.
#[test]
fn the_command_starts_in_its_cgroup_and_the_guard_never_moves() {
    let parent = match writable_cgroup_v2() {
        Ok(parent) => parent,
        Err(why) => {
            eprintln!("not checked: {why}");
            return;
        }
    };
    let place = Place::local();
    let key = place.key("into-cgroup");
    let work = scratch();
    let mut cmd = place.lockrun(&[
        "elect",
        &key,
        "--shell",
        "--",
        r#"touch "$1/held"; while [ ! -e "$1/go" ]; do sleep 0.01; done"#,
    ]);
    cmd.arg(work.path());
    let holder = Running::spawn(&mut cmd);
    wait_for_file(&work.path().join("held"));
    let mark = work.path().join("cgroup");
    let mut cmd = place.lockrun(&[
        "elect",
        &key,
        "-v",
        "--containment",
        "auto",
        "--shell",
        "--",
        r#"cat /proc/self/cgroup > "$1.new" && mv "$1.new" "$1""#,
    ]);
    cmd.arg(&mark);
    let waiter = Running::spawn(&mut cmd);
    // The waiter's one child is its guard, parked (reading the go message
    // from its socket) while the lock is held, its cgroup made.
    let mut guard: Option<u32> = None;
    let parked = crate::procs::wait_until(crate::procs::deadline(), || {
        let children =
            std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", waiter.pid()))
                .unwrap_or_default();
        guard = children.split_whitespace().find_map(|pid| pid.parse().ok());
        guard.is_some_and(|pid| {
            // Parked on its socket, or, on the local backend, armed and
            // waiting in flock(2) for the lock itself.
            let waiting = std::fs::read_to_string(format!("/proc/{pid}/wchan"))
                .is_ok_and(|wchan| wchan.contains("unix_stream_read") || wchan.contains("lock"));
            waiting && parent.join(format!("lockrun-{pid}")).exists()
        })
    });
    assert!(
        parked,
        "the waiting lockrun has no parked guard with a cgroup ({guard:?})"
    );
    let guard = guard.unwrap();
    let cgroup_of = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .unwrap_or_default()
            .lines()
            .find_map(|line| line.strip_prefix("0::").map(str::to_owned))
            .unwrap_or_default()
    };
    let waiters = cgroup_of(waiter.pid());
    assert_eq!(
        cgroup_of(guard),
        waiters,
        "the parked guard moved into the job's cgroup"
    );
    std::fs::write(work.path().join("go"), "").unwrap();
    place.status(&holder.finish(), 0, "the holder");
    let output = waiter.finish();
    place.status(&output, 0, "the waiter");
    let dir = Mode::Cgroup
        .check(&String::from_utf8_lossy(&output.stderr))
        .expect("cgroup mode");
    assert!(
        dir.ends_with(format!("lockrun-{guard}")),
        "{}",
        dir.display()
    );
    let command = std::fs::read_to_string(&mark).unwrap();
    let expected = format!("0::{}/lockrun-{guard}", waiters.trim_end_matches('/'));
    assert!(
        command.lines().any(|line| line == expected),
        "the command ran in `{command}`, not `{expected}`"
    );
}

/// A hook script that starts a helper in a session of its own, deaf to
/// SIGTERM, beating into `WORK/beat` until `WORK/go` appears, and returns
/// once the helper has beaten; then `then`.
fn hook_with_helper(work: &std::path::Path, then: &str) -> String {
    let work = work.display();
    format!(
        "(setsid sh -c 'trap \"\" TERM; while [ ! -e \"$0/go\" ]; do date +%s%N >> \"$0/beat\"; \
         sleep 0.01; done' '{work}' </dev/null >/dev/null 2>&1 &); \
         while [ ! -s '{work}/beat' ]; do sleep 0.01; done; {then}"
    )
}

/// Gives a helper that escaped its hook time to beat again (a helper that
/// beats every 10 ms does within 300 ms, unless it is gone), then stops it.
fn give_an_escaped_helper_time(work: &std::path::Path) {
    let beats = beat_count(work);
    crate::procs::wait_until(
        std::time::Instant::now() + std::time::Duration::from_millis(300),
        || beat_count(work) > beats + 2,
    );
    std::fs::write(work.join("go"), "").unwrap();
}

/// Issue #45: what `--on-acquire` started (`helper &`, a `setsid` helper)
/// ran on beside the next holder, and after lockrun. A hook is contained as
/// COMMAND is now: nothing it started beats once the lock is given up.
fn an_acquire_hooks_helper_is_gone_before_the_rival(place: &Place, mode: Mode) {
    let key = place.key("hook-acquire");
    let work = scratch();
    let hook = hook_with_helper(work.path(), "true");
    let mut args = vec!["elect", &key, "--on-acquire", &hook];
    args.extend(mode.flags());
    args.extend([
        "--shell",
        "--",
        "touch \"$1/ready\"; while [ ! -e \"$1/done\" ]; do sleep 0.01; done",
    ]);
    let mut cmd = place.lockrun(&args);
    cmd.arg(work.path());
    let holder = Running::spawn(&mut cmd);
    wait_for_file(&work.path().join("ready"));
    let rival = Rival::wait_for(place, &key, work.path());
    std::fs::write(work.path().join("done"), "").unwrap();
    let output = holder.finish();
    let holder_ended = crate::support::now_ns();
    place.status(&output, 0, "the holder");
    let started = rival.started(place);
    mode.check(&String::from_utf8_lossy(&output.stderr));
    give_an_escaped_helper_time(work.path());
    let last = last_beat(work.path());
    assert!(
        last < started && last < holder_ended,
        "the hook's helper beat {} ms after the rival's command started",
        (last.saturating_sub(started)) / 1_000_000
    );
}
on_every_engine!(
    an_acquire_hooks_helper_is_gone_before_the_rival,
    cgroup = Mode::Cgroup,
    subreaper = Mode::Subreaper
);

/// The same for `--on-release`, which runs after the release: what it
/// started is gone by the time lockrun exits; and for a hook cut at
/// `--hook-timeout`, whose `setsid` helper used to survive the kill.
fn a_release_hooks_helper_is_gone_when_lockrun_exits(place: &Place, mode: Mode) {
    for (flag, then, status) in [
        ("--on-release", "true", 0),
        ("--on-acquire", "sleep 300", 125),
    ] {
        let key = place.key("hook-release");
        let work = scratch();
        let hook = hook_with_helper(work.path(), then);
        let mut args = vec!["elect", &key, flag, &hook, "--hook-timeout", "2s"];
        args.extend(mode.flags());
        args.extend(["--", "true"]);
        let output = run(&mut place.lockrun(&args));
        let holder_ended = crate::support::now_ns();
        place.status(&output, status, flag);
        if status == 0 {
            // COMMAND ran, and said its containment, which its hooks share.
            mode.check(&String::from_utf8_lossy(&output.stderr));
        }
        give_an_escaped_helper_time(work.path());
        let last = last_beat(work.path());
        assert!(
            last < holder_ended,
            "{flag}'s helper beat {} ms after lockrun exited",
            (last - holder_ended) / 1_000_000
        );
    }
}
on_every_engine!(
    a_release_hooks_helper_is_gone_when_lockrun_exits,
    cgroup = Mode::Cgroup,
    subreaper = Mode::Subreaper
);

/// Issue #45: a hook that wrote 200 MB without a newline grew lockrun to
/// 524 MB resident. Its output is read in bounded pieces now, the long
/// line cut and said: lockrun's peak stays within 8 MB of a hold whose hook
/// writes nothing, measured in the same run (the binary's own pages, which
/// a debug build of every backend makes 17-21 MB here, are not the hook's).
#[test]
fn a_hook_writing_200_mb_without_a_newline_keeps_lockrun_small() {
    let place = Place::local();
    // One hold whose --on-acquire is `hook`: lockrun's peak resident set
    // (kB) while its command runs, and its output.
    let hold = |name: &str, hook: &str| -> (u64, std::process::Output) {
        let work = scratch();
        let mut cmd = place.lockrun(&[
            "elect",
            "-v",
            &place.key(name),
            "--on-acquire",
            hook,
            "--hook-timeout",
            "5m",
            "--shell",
            "--",
            "touch \"$1/ready\"; while [ ! -e \"$1/done\" ]; do sleep 0.01; done",
        ]);
        cmd.arg(work.path());
        let holder = Running::spawn(&mut cmd);
        wait_for_file(&work.path().join("ready"));
        let status = std::fs::read_to_string(format!("/proc/{}/status", holder.pid())).unwrap();
        std::fs::write(work.path().join("done"), "").unwrap();
        let output = holder.finish();
        place.status(&output, 0, name);
        let peak = status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no VmHWM in {status}"));
        (peak, output)
    };
    let (quiet_kb, _) = hold("hook-quiet", "true");
    let (peak_kb, output) = hold("hook-flood", "head -c 200000000 /dev/zero | tr '\\0' x");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        peak_kb < quiet_kb + 8 * 1024,
        "lockrun peaked at {} MB resident, {} MB with a quiet hook",
        peak_kb / 1024,
        quiet_kb / 1024
    );
    assert!(
        stderr.contains("[line cut at 4096 bytes]"),
        "the cut was not said: {}",
        &stderr[..stderr.len().min(500)]
    );
}
