//! Running the real `lockrun` binary as users do: a command builder with a
//! scrubbed environment pointed at the Consul under test, background runs
//! that are killed if a test fails, and failure messages that show the
//! command, its status and output, and the emulator's request log.

#![allow(dead_code)] // Not every test module uses every helper.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::engines::consul::support::{Api, TestConsul};
use crate::procs::{self, wait_until};

/// The `lockrun` binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lockrun"))
}

/// Variables of the consul CLI, etcdctl and lockrun that must not leak from the developer's
/// shell into a test.
const SCRUBBED: &[&str] = &[
    "CONSUL_HTTP_ADDR",
    "CONSUL_HTTP_TOKEN",
    "CONSUL_HTTP_TOKEN_FILE",
    "CONSUL_HTTP_AUTH",
    "CONSUL_HTTP_SSL",
    "CONSUL_HTTP_SSL_VERIFY",
    "CONSUL_CACERT",
    "CONSUL_CAPATH",
    "CONSUL_CLIENT_CERT",
    "CONSUL_CLIENT_KEY",
    "CONSUL_TLS_SERVER_NAME",
    "CONSUL_NAMESPACE",
    "CONSUL_PARTITION",
    "LOCKRUN_SESSION_TTL_MIN",
    "RUST_LOG",
    "LOCKRUN_BACKEND",
    "LOCKRUN_LOCK_DIR",
    "ETCDCTL_ENDPOINTS",
    "ETCDCTL_USER",
    "ETCDCTL_PASSWORD",
    "ETCDCTL_CACERT",
    "ETCDCTL_CERT",
    "ETCDCTL_KEY",
    "PGHOST",
    "PGPORT",
    "PGSSLROOTCERT",
    "PGSSLCERT",
    "PGSSLKEY",
    "PGUSER",
    "PGDATABASE",
    "PGPASSWORD",
    "PGPASSFILE",
    "PGSSLMODE",
    "PGCONNECT_TIMEOUT",
    "PGTARGETSESSIONATTRS",
    "PGSERVICE",
];

/// `lockrun` with `args`, talking to `consul`.
pub fn lockrun<I, S>(consul: &TestConsul, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = bare(args);
    cmd.env("CONSUL_HTTP_ADDR", consul.http_addr());
    cmd.env(
        "LOCKRUN_SESSION_TTL_MIN",
        format!("{}ms", consul.ttl_min().as_millis()),
    );
    cmd
}

/// `elect KEY` with quick-handover settings valid on a real agent too
/// (`--lock-delay 0s --kill-timeout 1s`), `extra` options, then `child`.
pub fn elect(consul: &TestConsul, key: &str, extra: &[&str], child: &[&str]) -> Command {
    let mut args = vec!["elect", "--lock-delay", "0s", "--kill-timeout", "1s"];
    args.extend_from_slice(extra);
    args.push(key);
    args.push("--");
    args.extend_from_slice(child);
    lockrun(consul, args)
}

/// `lockrun` with `args` and no Consul settings at all.
pub fn bare<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(bin());
    for name in SCRUBBED {
        cmd.env_remove(name);
    }
    cmd.args(args);
    cmd.stdin(Stdio::null());
    cmd
}

/// Describes a finished run for a failure message.
pub fn describe(cmd: &Command, output: &Output, consul: Option<&TestConsul>) -> String {
    let mut text = format!(
        "command: {:?}\nstatus: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        cmd,
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if let Some(consul) = consul {
        let log = consul.request_log_dump();
        if !log.is_empty() {
            text.push_str("\n--- emulator request log ---\n");
            text.push_str(&log);
        }
    }
    text
}

/// Runs `cmd` to completion (within the test patience) and returns its output.
pub fn run(cmd: &mut Command) -> Output {
    let running = Running::spawn(cmd);
    running.finish()
}

/// Runs `cmd` and asserts its exit code, printing everything on mismatch.
pub fn run_expect(cmd: &mut Command, code: i32, consul: Option<&TestConsul>) -> Output {
    let output = run(cmd);
    assert_eq!(
        output.status.code(),
        Some(code),
        "unexpected exit status\n{}",
        describe(cmd, &output, consul)
    );
    output
}

/// A lockrun running in the background. Killed (SIGKILL) if dropped while
/// still running, so a failing test leaves nothing behind.
pub struct Running {
    child: Option<Child>,
    pub description: String,
}

impl Running {
    pub fn spawn(cmd: &mut Command) -> Running {
        Running::spawn_with_stderr(cmd, Stdio::piped())
    }

    /// Like [`Running::spawn`], with stderr going to `stderr`.
    pub fn spawn_with_stderr(cmd: &mut Command, stderr: Stdio) -> Running {
        cmd.stdout(Stdio::piped()).stderr(stderr);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        Running {
            child: Some(child),
            description: format!("{cmd:?}"),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn signal(&self, signal: Signal) {
        let _ = kill(Pid::from_raw(self.pid() as i32), signal);
    }

    /// Whether it has exited (without reaping it).
    pub fn exited(&mut self) -> bool {
        matches!(
            self.child.as_mut().expect("running").try_wait(),
            Ok(Some(_))
        )
    }

    /// Waits (within the test patience) for exit and collects the output.
    pub fn finish(mut self) -> Output {
        let deadline = procs::deadline() + procs::PATIENCE;
        let mut child = self.child.take().expect("running");
        let exited = wait_until(deadline, || matches!(child.try_wait(), Ok(Some(_))));
        if !exited {
            let _ = child.kill();
        }
        let output = child.wait_with_output().expect("collect output");
        assert!(
            exited,
            "{} did not exit in time\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.description,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            // A test is failing: show what this lockrun said.
            if let (true, Ok(output)) = (std::thread::panicking(), child.wait_with_output()) {
                eprintln!(
                    "--- {} (killed by the failing test) ---\n{}{}",
                    self.description,
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                );
            }
        }
    }
}

/// Asserts a finished run's status, with diagnostics.
pub fn assert_status(output: &Output, code: i32, what: &str, consul: &TestConsul) {
    assert_exit(output, code, what, || {
        format!("\n--- emulator log ---\n{}", consul.request_log_dump())
    });
}

/// Asserts a finished run's status, showing its output and, on failure
/// only, what `engine_log` returns.
pub fn assert_exit(output: &Output, code: i32, what: &str, engine_log: impl FnOnce() -> String) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "{what}: unexpected exit status {}\n--- stdout ---\n{}\n--- stderr ---\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        engine_log()
    );
}

/// Asserts a finished run died of `signal` (not merely exited 128+N): what a
/// service manager tells apart and a shell does not.
pub fn assert_killed_by(output: &Output, signal: Signal, what: &str, consul: &TestConsul) {
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        output.status.signal(),
        Some(signal as i32),
        "{what}: expected death by {signal}, got {}\n--- stderr ---\n{}\n--- emulator log ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        consul.request_log_dump()
    );
}

/// A scratch directory for one test's files.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("lockrun-test-")
        .tempdir()
        .expect("create a temp dir")
}

/// A child script for `--shell`: `$1` is the test directory. It writes its
/// pid to `pid`, touches `ready`, then runs `body`.
pub fn script(body: &str) -> String {
    script_with("", body)
}

/// Like [`script`], with `setup` (traps, say) done before `ready` appears,
/// so a test that signals the child on `ready` cannot beat its traps.
pub fn script_with(setup: &str, body: &str) -> String {
    format!("{setup} echo $$ > \"$1/pid\"; touch \"$1/ready\"; {body}")
}

/// Waits until `path` exists.
pub fn wait_for_file(path: &Path) {
    assert!(
        wait_until(procs::deadline(), || path.exists()),
        "{} did not appear in time",
        path.display()
    );
}

/// `flock(1)` holding `file`, a holder lockrun cannot ask, until it is
/// ended or dropped. It runs its shell without a fork (`-F`), so that the
/// process holding the lock is the one we spawned; dropping it lets the
/// shell end, so that a failing test does not wait on its pipes.
pub struct FlockHolder {
    running: Option<Running>,
    go: PathBuf,
}

impl FlockHolder {
    /// Starts it in `work` (its own scratch folder) and waits until it
    /// holds.
    pub fn start(file: &Path, work: &Path) -> FlockHolder {
        let ready = work.join("ready");
        let running = Running::spawn(
            Command::new("flock")
                .arg("-F")
                .arg(file)
                .arg("sh")
                .arg("-c")
                .arg(format!(
                    "touch {}; while [ ! -e {}/go ]; do sleep 0.05; done",
                    ready.display(),
                    work.display()
                ))
                .stdin(Stdio::null()),
        );
        wait_for_file(&ready);
        FlockHolder {
            running: Some(running),
            go: work.join("go"),
        }
    }

    /// The pid that holds the lock (flock -F runs its command in place).
    pub fn pid(&self) -> u32 {
        self.running.as_ref().expect("running").pid()
    }

    /// Lets go of the lock and waits until flock(1) has exited.
    pub fn end(mut self) {
        let _ = std::fs::write(&self.go, "");
        let mut running = self.running.take().expect("ended once");
        assert!(
            wait_until(procs::deadline(), || running.exited()),
            "flock(1) did not end"
        );
    }
}

impl Drop for FlockHolder {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.go, "");
    }
}

/// `?acquire=` with an empty body, as a Go API client would.
pub fn kv_acquire(api: &Api, key: &str, session: &str, flags: u64) -> bool {
    let path = format!("/v1/kv/{}?acquire={session}&flags={flags}", encode_key(key));
    api.put(&path, b"").trimmed() == "true"
}

/// `?release=` with an empty body, as a Go API client would.
pub fn kv_release(api: &Api, key: &str, session: &str, flags: u64) -> bool {
    let path = format!("/v1/kv/{}?release={session}&flags={flags}", encode_key(key));
    api.put(&path, b"").trimmed() == "true"
}

/// Percent-encodes each segment of a key for a URL path.
pub fn encode_key(key: &str) -> String {
    key.split('/')
        .map(|segment| {
            segment
                .bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                        (b as char).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// How many sessions lockrun created for `key` (its session names end
/// with the key), so tests can see contenders come and go.
pub fn sessions_named_like(api: &Api, key: &str) -> usize {
    api.session_list()
        .iter()
        .filter(|s| s["Name"].as_str().is_some_and(|n| n.ends_with(key)))
        .count()
}

/// A lockrun holding its lock until the test lets it go: its `--shell` child
/// touches `ready`, then waits for a `go` file.
pub struct Holder {
    running: Running,
    dir: tempfile::TempDir,
}

impl Holder {
    /// Starts `cmd`, which receives the child's arguments to put after `--`
    /// (so it must pass `--shell`), and waits until the child runs.
    pub fn spawn(cmd: impl FnOnce(&[&str]) -> Command) -> Holder {
        let dir = scratch();
        let body = script("while [ ! -e \"$1/go\" ]; do sleep 0.05; done");
        let arg = dir.path().display().to_string();
        let running = Running::spawn(&mut cmd(&[&body, &arg]));
        wait_for_file(&dir.path().join("ready"));
        Holder { running, dir }
    }

    /// The child's directory (its `pid` file is there).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Lets the child end and checks that lockrun then exits 0.
    pub fn finish(self, consul: &TestConsul) {
        std::fs::write(self.dir.path().join("go"), "").unwrap();
        assert_status(&self.running.finish(), 0, "the holder", consul);
    }
}

/// Wall-clock nanoseconds, as `date +%s%N` prints them in a child's log.
pub fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The most `(start, end)` spans that overlap at any moment; an end at the
/// same instant as a start does not overlap it (ends sort first).
pub fn max_overlap<T: Ord + Copy>(spans: impl IntoIterator<Item = (T, T)>) -> usize {
    let mut events: Vec<(T, i32)> = Vec::new();
    for (start, end) in spans {
        events.push((start, 1));
        events.push((end, -1));
    }
    events.sort();
    let (mut now, mut max) = (0i32, 0i32);
    for (_, delta) in events {
        now += delta;
        max = max.max(now);
    }
    max as usize
}

/// How lockrun names the owners of a lease flag (`--ttl`): every backend
/// whose registration has a lease, as its refusal of the flag elsewhere
/// lists them ("--ttl belongs to the consul, etcd and postgres backends").
pub fn lease_flag_owners(flag: &str) -> String {
    let owners: Vec<lockrun::backend::BackendName> = lockrun::backend::BACKENDS
        .iter()
        .filter(|b| b.lease)
        .map(|b| b.name)
        .collect();
    format!(
        "{flag} belongs to the {} backends",
        lockrun::backend::BackendName::listed(&owners, "and")
    )
}

/// The child of every [`Contender`]: its pid, then its fence and, where the
/// engine names one, its node (ZooKeeper's `ZOOKEEPER_LOCK_NODE`), then a
/// timestamp every 10 ms until the test writes `go`. Rivals of other
/// clients (Curator, kazoo) write the same files.
pub const CONTENDER_BODY: &str =
    "echo $$ > \"$1/pid\"; echo \"$LOCKRUN_LOCK_INDEX ${ZOOKEEPER_LOCK_NODE-}\" >> \"$1/fence\"; \
    while [ ! -e \"$1/go\" ]; do date +%s%N >> \"$1/beat\"; sleep 0.01; done; \
    date +%s%N >> \"$1/beat\"";

/// A run holding (or waiting for) a lock, whose child writes its pid, fence
/// and heartbeat into a folder of its own ([`CONTENDER_BODY`]): a lockrun,
/// or another client of the engine that writes the same files.
pub struct Contender {
    running: Option<Running>,
    dir: tempfile::TempDir,
}

impl Contender {
    /// `cmd` (a lockrun command line up to its KEY) with
    /// [`CONTENDER_BODY`] as its `--shell` child.
    pub fn lockrun(mut cmd: Command) -> Contender {
        let dir = scratch();
        cmd.args(["--shell", "--", CONTENDER_BODY]).arg(dir.path());
        Contender::start(cmd, dir)
    }

    /// As [`Contender::lockrun`], its stderr (its log) written to a file,
    /// which [`Contender::log`] reads while it runs.
    pub fn lockrun_logged(mut cmd: Command) -> Contender {
        let dir = scratch();
        let log = std::fs::File::create(dir.path().join("log")).unwrap();
        cmd.args(["--shell", "--", CONTENDER_BODY])
            .arg(dir.path())
            .stdin(Stdio::null());
        Contender {
            running: Some(Running::spawn_with_stderr(&mut cmd, log.into())),
            dir,
        }
    }

    /// As [`Contender::lockrun`], once its child runs.
    pub fn holding(cmd: Command) -> Contender {
        let c = Contender::lockrun(cmd);
        c.wait_started("the holder");
        c
    }

    /// Another client, given the folder its child's files go in.
    pub fn other(make: impl FnOnce(&Path) -> Command) -> Contender {
        let dir = scratch();
        let cmd = make(dir.path());
        Contender::start(cmd, dir)
    }

    fn start(mut cmd: Command, dir: tempfile::TempDir) -> Contender {
        cmd.stdin(Stdio::null());
        Contender {
            running: Some(Running::spawn(&mut cmd)),
            dir,
        }
    }

    pub fn started(&self) -> bool {
        self.dir.path().join("beat").exists()
    }

    pub fn wait_started(&self, what: &str) {
        self.wait_started_within(procs::PATIENCE, what);
    }

    pub fn wait_started_within(&self, patience: std::time::Duration, what: &str) {
        assert!(
            wait_until(std::time::Instant::now() + patience, || self.started()),
            "{what} never held"
        );
    }

    /// Whether it has exited (without reaping it).
    pub fn exited(&mut self) -> bool {
        self.running.as_mut().expect("running").exited()
    }

    /// `LOCKRUN_LOCK_INDEX` of its first hold.
    pub fn fence(&self) -> u64 {
        self.fences().first().expect("a fence").0
    }

    /// Its child's timestamps, in ns.
    pub fn beats(&self) -> Vec<u128> {
        std::fs::read_to_string(self.dir.path().join("beat"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Its child's first and last timestamps.
    pub fn span(&self) -> (u128, u128) {
        let b = self.beats();
        (b[0], *b.last().unwrap())
    }

    pub fn child_pid(&self) -> u32 {
        let text = std::fs::read_to_string(self.dir.path().join("pid")).unwrap();
        text.trim().parse().unwrap()
    }

    /// `LOCKRUN_LOCK_INDEX` of each hold, and the node where the engine
    /// names one (else empty).
    pub fn fences(&self) -> Vec<(u64, String)> {
        std::fs::read_to_string(self.dir.path().join("fence"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (f, node) = l.split_once(' ').unwrap_or((l, ""));
                Some((f.trim().parse().ok()?, node.trim().to_owned()))
            })
            .collect()
    }

    /// Its log so far, for a [`Contender::lockrun_logged`].
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    /// Lets its child finish.
    pub fn go(&self) {
        std::fs::write(self.dir.path().join("go"), "").unwrap();
    }

    pub fn finish(&mut self) -> Output {
        self.running.take().expect("running").finish()
    }

    pub fn signal(&self, signal: Signal) {
        self.running.as_ref().expect("running").signal(signal);
    }
}

/// A dropped contender's child is let go first: killed, another client
/// (flock(1), psql, `consul lock`) leaves its child beating with the
/// output pipe open, and a failing test would wait for that pipe forever.
impl Drop for Contender {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.path().join("go"), "");
    }
}

/// A command on a pseudo-terminal of its own (stdin, stdout and stderr the
/// slave side), with everything it writes recorded by a thread of ours.
pub struct Pty {
    pub master: std::fs::File,
    /// What the terminal showed so far, and a signal at each change.
    pub transcript: std::sync::Arc<(std::sync::Mutex<Vec<u8>>, std::sync::Condvar)>,
}

impl Pty {
    /// Spawns `command` (`setsid ...`, to make the pty its controlling
    /// terminal) on a new pty.
    pub fn spawn(mut command: Command) -> (Pty, std::process::Child) {
        use std::io::Read;
        let pty = nix::pty::openpty(None, None).expect("open a pseudo-terminal");
        let slave = std::fs::File::from(pty.slave);
        command
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
        // Our copies of the slave side must go, so that the reader sees the
        // end once the command is gone.
        drop(command);
        let master = std::fs::File::from(pty.master);
        let transcript =
            std::sync::Arc::new((std::sync::Mutex::new(Vec::new()), std::sync::Condvar::new()));
        let mut reader = master.try_clone().unwrap();
        let sink = std::sync::Arc::clone(&transcript);
        std::thread::spawn(move || {
            let mut buffer = [0; 4096];
            while let Ok(n @ 1..) = reader.read(&mut buffer) {
                let (text, changed) = &*sink;
                text.lock().unwrap().extend_from_slice(&buffer[..n]);
                changed.notify_all();
            }
        });
        (Pty { master, transcript }, child)
    }

    /// What the terminal showed so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.transcript.0.lock().unwrap()).into_owned()
    }

    /// Types `bytes`, as they are: `\x03` is Ctrl-C.
    pub fn send(&self, bytes: &[u8]) {
        std::io::Write::write_all(&mut &self.master, bytes).unwrap();
    }
}

/// Every file under `dir`.
pub fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found
}
