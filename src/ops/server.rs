//! The status endpoint: a few lines of HTTP/1.x, one request per
//! connection. Three GET routes that answer from a snapshot need no more;
//! what matters is that a slow or hostile client costs nothing but its own
//! connection: every read and write has a deadline, at most
//! [`MAX_CONNECTIONS`] are served at once, and all of it runs on its own
//! task, which the hold loop never waits for.
//!
//! A probe sends its request at once; a slow client (one that connects and
//! sends nothing, or a byte a second) holds its connection until the
//! request deadline. When every place is taken, a new connection is served
//! and the connection that has waited longest for its request is closed:
//! slow clients then only push each other out, and a probe, answered as
//! soon as it is read, is never the oldest. Closing new connections instead
//! (as we did) let 32 silent sockets turn away a third of the probes.

use std::fmt::Write as _;
use std::io;
use std::net::ToSocketAddrs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::task::{AbortHandle, JoinHandle};

use super::{Beacon, Snapshot, RENEWAL_BUCKETS};

/// Connections served at once; beyond that, the one that has waited
/// longest for its request is closed.
pub const MAX_CONNECTIONS: usize = 32;
/// How long a client has to send its whole request head, and to take the
/// answer. A probe sends its request with the connection.
const READ_TIMEOUT: Duration = Duration::from_secs(1);
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest request head we read.
const MAX_REQUEST: usize = 8192;

/// A unix socket path we created, removed when we are done with it.
#[derive(Debug)]
pub struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A listening socket, bound before anything is written to an engine.
#[derive(Debug)]
pub enum Bound {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener, SocketFile),
}

impl Bound {
    /// Binds ADDR: a unix socket path when it contains `/`, else HOST:PORT.
    pub fn bind(addr: &str) -> Result<Bound, String> {
        if addr.trim().is_empty() {
            return Err(
                "--status-addr is empty; give HOST:PORT (e.g. 127.0.0.1:8300) or a unix socket path"
                    .into(),
            );
        }
        if addr.contains('/') {
            return bind_unix(Path::new(addr));
        }
        let mut resolved = addr.to_socket_addrs().map_err(|e| {
            format!("--status-addr `{addr}` is not HOST:PORT or a socket path ({e}); use e.g. 127.0.0.1:8300, or a path containing `/`")
        })?;
        let Some(first) = resolved.next() else {
            return Err(format!(
                "--status-addr `{addr}` resolves to no address; use e.g. 127.0.0.1:8300"
            ));
        };
        let listener = std::net::TcpListener::bind(first).map_err(|e| match e.kind() {
            io::ErrorKind::AddrInUse => {
                format!("--status-addr `{addr}` is in use by another process; pick another port")
            }
            _ => format!(
                "cannot listen on --status-addr `{addr}` ({}); pick another address",
                crate::host::io_reason(&e)
            ),
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("cannot listen on --status-addr `{addr}` ({e})"))?;
        Ok(Bound::Tcp(listener))
    }

    /// What `LOCKRUN_STATUS` says: the address bound (the port chosen,
    /// for `:0`), or the socket's path.
    pub fn endpoint(&self) -> String {
        match self {
            Bound::Tcp(l) => l.local_addr().map(|a| a.to_string()).unwrap_or_default(),
            Bound::Unix(_, file) => file.0.display().to_string(),
        }
    }
}

/// Whether `uid` is ours to trust with the socket: ours, or root's.
fn trusted(uid: u32) -> bool {
    uid == 0 || uid == nix::unistd::geteuid().as_raw()
}

fn bind_unix(path: &Path) -> Result<Bound, String> {
    use std::os::unix::fs::MetadataExt;
    let shown = path.display();
    // Another user who may write the socket's directory could put their
    // own socket in its place and answer /leader for us: the directory is
    // ours or root's, and shared only with the sticky bit (as /tmp).
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    // Nor may another user's link on the way re-point it at their
    // directory once we have looked.
    let absolute = std::path::absolute(parent).unwrap_or_else(|_| parent.to_path_buf());
    for step in absolute.ancestors() {
        if let Ok(meta) = std::fs::symlink_metadata(step) {
            if meta.file_type().is_symlink() && !trusted(meta.uid()) {
                return Err(format!(
                    "--status-addr `{shown}`: `{}` on its path is another user's link, which they could re-point; use a directory of your own (e.g. $RUNTIME_DIRECTORY)",
                    step.display()
                ));
            }
        }
    }
    let dir = std::fs::metadata(parent).map_err(|e| {
        format!(
            "cannot use --status-addr `{shown}`: its directory `{}` ({}); pick another path",
            parent.display(),
            crate::host::io_reason(&e)
        )
    })?;
    let shared = dir.mode() & 0o022 != 0 && dir.mode() & 0o1000 == 0;
    if !trusted(dir.uid()) || shared {
        return Err(format!(
            "--status-addr `{shown}`: its directory `{}` is another user's or writable by others, who could replace the socket; use a directory of your own (e.g. $RUNTIME_DIRECTORY)",
            parent.display()
        ));
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            return Err(format!(
                "--status-addr `{shown}` exists and is not a socket; remove it or pick another path"
            ));
        }
        if !trusted(meta.uid()) {
            return Err(format!(
                "--status-addr `{shown}` is another user's socket; pick another path"
            ));
        }
        // A socket someone answers on is in use; one nobody answers on was
        // left by a lockrun that died, and is ours to replace.
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(format!(
                "--status-addr `{shown}` is in use by another process; pick another path"
            ));
        }
        let _ = std::fs::remove_file(path);
    }
    let listener = std::os::unix::net::UnixListener::bind(path).map_err(|e| match e.kind() {
        io::ErrorKind::AddrInUse => {
            format!("--status-addr `{shown}` is in use by another process; pick another path")
        }
        _ => format!(
            "cannot listen on --status-addr `{shown}` ({}); pick another path",
            crate::host::io_reason(&e)
        ),
    })?;
    let file = SocketFile(path.to_path_buf());
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("cannot listen on --status-addr `{shown}` ({e})"))?;
    Ok(Bound::Unix(listener, file))
}

/// The server's task; ends (and removes a socket file) when dropped.
pub struct Serving {
    task: JoinHandle<()>,
    _file: Option<SocketFile>,
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Serving {
    /// Spawns the accept loop; must be called on the runtime.
    pub fn start(bound: Bound, beacon: Beacon) -> Serving {
        let slots = Arc::new(Slots::default());
        match bound {
            Bound::Tcp(listener) => {
                let task = match tokio::net::TcpListener::from_std(listener) {
                    Ok(listener) => tokio::spawn(async move {
                        loop {
                            let Ok((conn, _)) = listener.accept().await else {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                continue;
                            };
                            admit(conn, &slots, &beacon);
                            // The connection is read once before the next is
                            // accepted, so that a burst of new ones cannot
                            // push it out before it was looked at.
                            tokio::task::yield_now().await;
                        }
                    }),
                    Err(e) => {
                        tracing::warn!("cannot serve the status endpoint ({e})");
                        tokio::spawn(async {})
                    }
                };
                Serving { task, _file: None }
            }
            Bound::Unix(listener, file) => {
                let task = match tokio::net::UnixListener::from_std(listener) {
                    Ok(listener) => tokio::spawn(async move {
                        loop {
                            let Ok((conn, _)) = listener.accept().await else {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                continue;
                            };
                            admit(conn, &slots, &beacon);
                            // The connection is read once before the next is
                            // accepted, so that a burst of new ones cannot
                            // push it out before it was looked at.
                            tokio::task::yield_now().await;
                        }
                    }),
                    Err(e) => {
                        tracing::warn!("cannot serve the status endpoint ({e})");
                        tokio::spawn(async {})
                    }
                };
                Serving {
                    task,
                    _file: Some(file),
                }
            }
        }
    }
}

/// The connections being served, in the order they came, each with
/// whether it is still waiting for its request.
#[derive(Default)]
struct Slots {
    next: Mutex<u64>,
    live: Mutex<VecDeque<(u64, AbortHandle, bool)>>,
}

impl Slots {
    /// Makes room for one more: closes the connection that has waited
    /// longest for its request when all places are taken. Whether there is
    /// room (not when every place is answering, which takes at most the
    /// write deadline).
    fn make_room(&self) -> bool {
        let mut live = self.live.lock().expect("no panic holds the lock");
        if live.len() < MAX_CONNECTIONS {
            return true;
        }
        match live.iter().position(|(_, _, reading)| *reading) {
            Some(oldest) => {
                let (_, task, _) = live.remove(oldest).expect("found above");
                task.abort();
                true
            }
            None => false,
        }
    }

    fn add(&self, task: AbortHandle) -> u64 {
        let id = {
            let mut next = self.next.lock().expect("no panic holds the lock");
            *next += 1;
            *next
        };
        let mut live = self.live.lock().expect("no panic holds the lock");
        live.push_back((id, task, true));
        id
    }

    /// The connection's request is read: it is answered, not pushed out.
    fn answering(&self, id: u64) {
        let mut live = self.live.lock().expect("no panic holds the lock");
        if let Some(entry) = live.iter_mut().find(|(i, _, _)| *i == id) {
            entry.2 = false;
        }
    }

    fn remove(&self, id: u64) {
        let mut live = self.live.lock().expect("no panic holds the lock");
        live.retain(|(i, _, _)| *i != id);
    }
}

/// Serves one connection on its own task, closing the one that has waited
/// longest for its request if all places are taken; closes the new one
/// only when every place is answering.
fn admit<S>(conn: S, slots: &Arc<Slots>, beacon: &Beacon)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if !slots.make_room() {
        return;
    }
    let beacon = beacon.clone();
    let (id_tx, id_rx) = tokio::sync::oneshot::channel();
    let own = slots.clone();
    let task = tokio::spawn(async move {
        let Ok(id) = id_rx.await else { return };
        handle(conn, &beacon, || own.answering(id)).await;
        own.remove(id);
    });
    let id = slots.add(task.abort_handle());
    let _ = id_tx.send(id);
}

async fn handle<S: AsyncRead + AsyncWrite + Unpin>(
    mut conn: S,
    beacon: &Beacon,
    answering: impl FnOnce(),
) {
    let mut head = Vec::with_capacity(512);
    let read = async {
        loop {
            match conn.read_buf(&mut head).await {
                Ok(0) | Err(_) => return false,
                Ok(_) => {
                    if head.windows(4).any(|w| w == b"\r\n\r\n")
                        || head.windows(2).any(|w| w == b"\n\n")
                    {
                        return true;
                    }
                    if head.len() >= MAX_REQUEST {
                        return false;
                    }
                }
            }
        }
    };
    if !matches!(tokio::time::timeout(READ_TIMEOUT, read).await, Ok(true)) {
        return;
    }
    answering();
    let line = String::from_utf8_lossy(&head);
    let mut words = line.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let response = answer(method, path, beacon);
    let _ = tokio::time::timeout(WRITE_TIMEOUT, async {
        conn.write_all(&response).await?;
        conn.shutdown().await
    })
    .await;
}

fn answer(method: &str, path: &str, beacon: &Beacon) -> Vec<u8> {
    if method != "GET" && method != "HEAD" {
        return response(405, "text/plain", "only GET is served\n".into(), method);
    }
    let snapshot = beacon.snapshot();
    let (status, kind, body) = match path {
        "/leader" if snapshot.leading() => (200, "text/plain", "leader\n".to_string()),
        "/leader" => (503, "text/plain", "not leader\n".to_string()),
        "/status" => (200, "application/json", status_json(beacon, &snapshot)),
        "/metrics" => (
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics(beacon, &snapshot),
        ),
        _ => (
            404,
            "text/plain",
            "not found; try /status, /leader or /metrics\n".to_string(),
        ),
    };
    response(status, kind, body, method)
}

fn response(status: u16, kind: &str, body: String, method: &str) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Service Unavailable",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if method != "HEAD" {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

/// `GET /status`.
pub fn status_json(beacon: &Beacon, s: &Snapshot) -> String {
    let since = s
        .since
        .map(|t| humantime::format_rfc3339_millis(t).to_string());
    let left = s.deadline.map(|d| d.left().as_millis() as u64);
    let value = serde_json::json!({
        "key": &*beacon.key,
        "backend": beacon.backend,
        "state": s.phase.name(),
        "leader": s.leading(),
        "fence": s.fence,
        "since": since,
        "lease_left_ms": left,
        "margin_ms": s.deadline.map(|d| d.margin.as_millis() as u64),
        "jeopardy": s.jeopardy,
        "holder": s.holder,
        "value": s.value,
    });
    let mut text = value.to_string();
    text.push('\n');
    text
}

fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `GET /metrics`, in the Prometheus text format (0.0.4).
pub fn metrics(beacon: &Beacon, s: &Snapshot) -> String {
    let mut out = String::new();
    let mut push = |name: &str, kind: &str, help: &str, samples: &str| {
        let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{samples}");
    };
    push(
        "lockrun_info",
        "gauge",
        "The lock this lockrun holds or waits for (always 1).",
        &format!(
            "lockrun_info{{key=\"{}\",backend=\"{}\"}} 1\n",
            label(&beacon.key),
            beacon.backend
        ),
    );
    push(
        "lockrun_held",
        "gauge",
        "1 while the lock is held and COMMAND runs, else 0.",
        &format!("lockrun_held {}\n", u8::from(s.phase == super::Phase::Held)),
    );
    push(
        "lockrun_leader",
        "gauge",
        "1 while GET /leader answers 200: held with at least the safety margin left.",
        &format!("lockrun_leader {}\n", u8::from(s.leading())),
    );
    push(
        "lockrun_acquisitions_total",
        "counter",
        "Times the lock was acquired.",
        &format!("lockrun_acquisitions_total {}\n", s.acquisitions),
    );
    let mut losses = String::new();
    for reason in [
        "lease_ran_out",
        "session_gone",
        "taken_or_deleted",
        "released",
        "clock_slewed",
    ] {
        let _ = writeln!(
            losses,
            "lockrun_losses_total{{reason=\"{reason}\"}} {}",
            s.losses.get(reason).copied().unwrap_or(0)
        );
    }
    push(
        "lockrun_losses_total",
        "counter",
        "Times the lock was lost while held, by reason.",
        &losses,
    );
    push(
        "lockrun_max_time_stops_total",
        "counter",
        "Times COMMAND was stopped because it ran --max-time.",
        &format!("lockrun_max_time_stops_total {}\n", s.time_ups),
    );
    push(
        "lockrun_renewals_total",
        "counter",
        "Lease renewals confirmed.",
        &format!("lockrun_renewals_total {}\n", s.renewals),
    );
    push(
        "lockrun_renewal_failures_total",
        "counter",
        "Lease renewals that failed or got no answer.",
        &format!("lockrun_renewal_failures_total {}\n", s.renewal_failures),
    );
    let mut histogram = String::new();
    for (bound, count) in RENEWAL_BUCKETS.iter().zip(s.renewal_buckets) {
        let _ = writeln!(
            histogram,
            "lockrun_renewal_duration_seconds_bucket{{le=\"{bound}\"}} {count}"
        );
    }
    let _ = write!(
        histogram,
        "lockrun_renewal_duration_seconds_bucket{{le=\"+Inf\"}} {0}\nlockrun_renewal_duration_seconds_sum {1}\nlockrun_renewal_duration_seconds_count {0}\n",
        s.renewals, s.renewal_seconds
    );
    push(
        "lockrun_renewal_duration_seconds",
        "histogram",
        "How long confirmed renewals took.",
        &histogram,
    );
    push(
        "lockrun_lease_left_seconds",
        "gauge",
        "Time left before COMMAND's stop begins unless the lease is renewed (absent without a lease).",
        &s.deadline
            .map(|d| format!("lockrun_lease_left_seconds {}\n", d.left().as_secs_f64()))
            .unwrap_or_default(),
    );
    push(
        "lockrun_wait_seconds",
        "gauge",
        "How long the current wait for the lock has lasted, or the last one lasted.",
        &s.wait()
            .map(|w| format!("lockrun_wait_seconds {}\n", w.as_secs_f64()))
            .unwrap_or_default(),
    );
    out
}
