//! A real PostgreSQL for the postgres tests: one throwaway cluster per test
//! binary run, made by `initdb` in a temp dir on first use, listening on a
//! free loopback port and on a unix socket in that dir, trust auth, and
//! shared (each test uses keys of its own).
//!
//! PostgreSQL refuses to run as root, and the suite runs as root on CI: the
//! cluster runs as `nobody`. As for etcd, the server runs under a small `sh`
//! that waits on a pipe we hold: when this process exits, however it exits,
//! the pipe closes, and the shell stops the server and removes its dir. A
//! missing server fails the tests loudly with the install hint.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use crate::procs::{free_port, PATIENCE};

pub const INSTALL_HINT: &str =
    "the postgres tests need PostgreSQL 15 or later's server binaries (initdb, postgres, psql): apt-get install postgresql";

/// The folder of `initdb` and `postgres`: the newest under
/// /usr/lib/postgresql.
pub fn bin_dir() -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .filter(|bin| bin.join("initdb").exists() && bin.join("postgres").exists())
                .collect()
        })
        .unwrap_or_default();
    found.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    found.pop().unwrap_or_else(|| panic!("{INSTALL_HINT}"))
}

/// The shared cluster.
pub struct TestPostgres {
    pub port: u16,
    /// The directory of the unix socket (`host=` in a DSN).
    pub socket_dir: PathBuf,
    _keeper: Mutex<ChildStdin>,
    log: PathBuf,
    data: PathBuf,
}

impl TestPostgres {
    /// `postgres://` URL over TCP on loopback.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Restarts the server (a fast shutdown, which ends every session,
    /// then a start on the same port), returning once it accepts
    /// connections again.
    pub fn restart(&self) {
        self.restart_with("fast");
    }

    /// Restarts the server with shutdown mode `mode` (`fast`, or
    /// `immediate`: no clean shutdown, recovery at the start).
    pub fn restart_with(&self, mode: &str) {
        let output = as_nobody(&bin_dir().join("pg_ctl"))
            .args(["-m", mode, "-w", "-t", "60", "-D"])
            .arg(&self.data)
            .arg("-l")
            .arg(self.log.with_extension("restarted.log"))
            .arg("restart")
            .output()
            .expect("pg_ctl");
        assert!(
            output.status.success(),
            "pg_ctl restart: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The server's last log lines, for a failing test's message.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

static POSTGRES: OnceLock<TestPostgres> = OnceLock::new();

/// The shared cluster, started on first use.
pub fn postgres() -> &'static TestPostgres {
    POSTGRES.get_or_init(private)
}

/// A cluster of a test's own, stopped (fast shutdown: every session ends)
/// when dropped.
pub fn private() -> TestPostgres {
    // A port may be taken between our probe and the server's bind.
    private_with(&[])
}

/// A cluster of a test's own with server settings of its own (`-c`
/// words), stopped when dropped.
pub fn private_with(settings: &[String]) -> TestPostgres {
    let mut last = String::new();
    for _ in 0..3 {
        match start(None, settings) {
            Ok(pg) => return pg,
            Err(e) => last = e,
        }
    }
    panic!("cannot start a test PostgreSQL: {last}");
}

fn as_nobody(program: &Path) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
        .arg(program);
    cmd
}

/// A hot standby of `primary` (pg_basebackup -R), stopped when dropped.
pub fn standby_of(primary: &TestPostgres) -> TestPostgres {
    start(Some(primary.port), &[]).unwrap_or_else(|e| panic!("cannot start a standby: {e}"))
}

/// A new cluster, or with `primary` a standby streaming from that port.
fn start(primary: Option<u16>, settings: &[String]) -> Result<TestPostgres, String> {
    let bin = bin_dir();
    // Kept: the keeper shell removes it when the server ends.
    let dir = tempfile::Builder::new()
        .prefix("lockrun-pg-")
        .tempdir()
        .map_err(|e| e.to_string())?
        .keep();
    let data = dir.join("data");
    let log = dir.join("server.log");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())?;
    let chown = Command::new("chown")
        .args(["nobody:nogroup"])
        .arg(&dir)
        .status()
        .map_err(|e| e.to_string())?;
    if !chown.success() {
        return Err("chown of the cluster dir failed".into());
    }
    let init = match primary {
        None => as_nobody(&bin.join("initdb"))
            .args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
                "-D",
            ])
            .arg(&data)
            .output(),
        Some(port) => as_nobody(&bin.join("pg_basebackup"))
            .args(["-h", "127.0.0.1", "-U", "postgres", "-R", "--no-sync", "-p"])
            .arg(port.to_string())
            .arg("-D")
            .arg(&data)
            .output(),
    }
    .map_err(|e| format!("{INSTALL_HINT} ({e})"))?;
    if !init.status.success() {
        return Err(format!(
            "initdb or pg_basebackup failed: {}",
            String::from_utf8_lossy(&init.stderr)
        ));
    }
    let port = free_port();
    let script = format!(
        "setpriv --reuid=nobody --regid=nogroup --clear-groups -- '{server}' -D '{data}' -p {port} \
         -k '{dir}' -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200 \
         -c logging_collector=off {settings} >'{log}' 2>&1 & pid=$!; \
         cat >/dev/null; kill -INT $pid; wait $pid; \
         setpriv --reuid=nobody --regid=nogroup --clear-groups -- '{pg_ctl}' -D '{data}' -m fast -w stop >/dev/null 2>&1; \
         rm -rf '{dir}'",
        pg_ctl = bin.join("pg_ctl").display(),
        server = bin.join("postgres").display(),
        data = data.display(),
        dir = dir.display(),
        log = log.display(),
        settings = settings
            .iter()
            .map(|s| format!("-c '{s}'"))
            .collect::<Vec<_>>()
            .join(" "),
    );
    let mut keeper = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let stdin = keeper.stdin.take().expect("piped");
    let pg = TestPostgres {
        port,
        socket_dir: dir.clone(),
        _keeper: Mutex::new(stdin),
        log,
        data: data.clone(),
    };
    let deadline = Instant::now() + PATIENCE;
    loop {
        let ready = Command::new(bin.join("pg_isready"))
            .args(["-q", "-h", "127.0.0.1", "-U", "postgres", "-p"])
            .arg(port.to_string())
            .status()
            .map_err(|e| e.to_string())?;
        if ready.success() {
            return Ok(pg);
        }
        if Instant::now() > deadline || keeper.try_wait().ok().flatten().is_some() {
            return Err(format!("the server did not start:\n{}", pg.log_tail()));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A PgBouncer of the test's own in front of the shared cluster, run as
/// nobody (it refuses root), stopped when dropped.
pub struct Bouncer {
    pub port: u16,
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Bouncer {
    /// PgBouncer with `pool_mode` and `extra` lines in its `[pgbouncer]`
    /// section; the users it knows are postgres and those in [`ROLES`].
    pub fn start(pool_mode: &str, extra: &str) -> Bouncer {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("lockrun-pgbouncer-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let port = crate::procs::free_port();
        let d = dir.path().display();
        let users: String = std::iter::once("postgres")
            .chain(ROLES.iter().copied())
            .map(|u| format!("\"{u}\" \"\"\n"))
            .collect();
        std::fs::write(dir.path().join("users.txt"), users).unwrap();
        std::fs::write(
            dir.path().join("pgbouncer.ini"),
            format!(
                "[databases]\npostgres = host=127.0.0.1 port={pg} dbname=postgres\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
                 unix_socket_dir =\nauth_type = trust\nauth_file = {d}/users.txt\n\
                 pool_mode = {pool_mode}\nlogfile = {d}/log\npidfile = {d}/pid\n{extra}\n",
                pg = postgres().port,
            ),
        )
        .unwrap();
        let child = std::process::Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
            .arg("pgbouncer")
            .arg(dir.path().join("pgbouncer.ini"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("pgbouncer (apt-get install pgbouncer)");
        assert!(
            crate::procs::wait_until(crate::procs::deadline(), || std::net::TcpStream::connect((
                "127.0.0.1",
                port
            ))
            .is_ok()),
            "pgbouncer did not listen: {}",
            std::fs::read_to_string(dir.path().join("log")).unwrap_or_default()
        );
        Bouncer {
            port,
            child,
            _dir: dir,
        }
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Bouncer {
    /// A URL through the pooler as `user`.
    pub fn url(&self, user: &str) -> String {
        format!("postgres://{user}@127.0.0.1:{}/postgres", self.port)
    }
}

/// Roles a test may make in the shared cluster and reach through a
/// [`Bouncer`].
pub const ROLES: &[&str] = &["lockrun_timed"];

/// A key unique to this test run.
pub fn unique(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "t{}-{}/{name}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// `psql` on the shared cluster, quiet, unaligned, stopping at the first
/// error.
pub fn psql() -> Command {
    let mut cmd = Command::new(bin_dir().join("psql"));
    cmd.args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d"])
        .arg(postgres().url())
        .env_remove("PGHOST")
        .env_remove("PGPORT")
        .env_remove("PGUSER")
        .env_remove("PGDATABASE")
        .env_remove("PGPASSWORD");
    cmd
}

/// One psql command's output, trimmed; panics on failure.
pub fn psql_ok(sql: &str) -> String {
    let out = psql().args(["-c", sql]).output().expect("psql");
    assert!(
        out.status.success(),
        "psql -c {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
