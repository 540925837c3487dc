//! systemd's notify protocol (`sd_notify(3)`): readiness, a status line an
//! operator reads in `systemctl status`, and watchdog pings that stop when
//! the lease is no longer confirmed.
//!
//! One datagram per message to `$NOTIFY_SOCKET`, a path or (with a leading
//! `@`) an abstract socket. Sends never block: a service manager that does
//! not read must not stall the loop that keeps the lease.

use std::ffi::OsString;
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// The variables the protocol passes down. With `--notify` lockrun speaks
/// for the unit, so COMMAND does not inherit them: two voices would confuse
/// systemd, and COMMAND's READY could come before the lock is ours.
pub const VARIABLES: [&str; 3] = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"];

/// When the unit counts as started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Ready {
    /// At once: a standby is a healthy, started service.
    Start,
    /// Only once the lock or slot is held: a standby stays "activating".
    Held,
}

/// The socket systemd gave us, if any.
pub struct Notifier {
    socket: UnixDatagram,
    address: SocketAddr,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET` and the watchdog variables. `None` when lockrun
    /// does not run under a notify-aware manager, as `sd_notify` does
    /// nothing then; an address we cannot use is an error.
    pub fn from_env(
        get: impl Fn(&str) -> Option<OsString>,
        pid: u32,
    ) -> Result<Option<Notifier>, String> {
        let Some(path) = get("NOTIFY_SOCKET") else {
            return Ok(None);
        };
        let address = address(&path).map_err(|e| {
            format!(
                "cannot use NOTIFY_SOCKET `{}` ({e})",
                path.to_string_lossy()
            )
        })?;
        let socket = UnixDatagram::unbound()
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .map_err(|e| format!("cannot open a socket for NOTIFY_SOCKET ({e})"))?;
        Ok(Some(Notifier {
            socket,
            address,
            watchdog: watchdog(&get, pid),
        }))
    }

    /// How often systemd expects a ping, if the unit sets `WatchdogSec=`.
    pub fn watchdog(&self) -> Option<Duration> {
        self.watchdog
    }

    /// Sends one message (`READY=1`, `STATUS=...`); failures are logged, not
    /// fatal: the lock matters more than the report.
    pub fn send(&self, message: &str) {
        if let Err(e) = self.socket.send_to_addr(message.as_bytes(), &self.address) {
            tracing::debug!("could not notify the service manager ({e})");
        }
    }

    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    pub fn status(&self, status: &str) {
        self.send(&format!("STATUS={}", one_line(status)));
    }

    pub fn stopping(&self, status: &str) {
        self.send(&format!("STOPPING=1\nSTATUS={}", one_line(status)));
    }

    /// Asks for `by` more time to start: a standby that waits for the lock
    /// is not a unit that failed to start.
    pub fn extend_start(&self, by: Duration) {
        self.send(&format!("EXTEND_TIMEOUT_USEC={}", by.as_micros()));
    }

    pub fn ping(&self) {
        self.send("WATCHDOG=1");
    }
}

fn address(path: &std::ffi::OsStr) -> io::Result<SocketAddr> {
    use std::os::unix::ffi::OsStrExt;
    match path.as_bytes() {
        [b'@', name @ ..] => SocketAddr::from_abstract_name(name),
        bytes @ [b'/', ..] => {
            SocketAddr::from_pathname(std::path::Path::new(std::ffi::OsStr::from_bytes(bytes)))
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "neither a path nor an abstract name",
        )),
    }
}

/// `WATCHDOG_USEC`, when `WATCHDOG_PID` is unset or names us (the variables
/// may have leaked from a parent that was the one being watched).
fn watchdog(get: &impl Fn(&str) -> Option<OsString>, pid: u32) -> Option<Duration> {
    let usec: u64 = get("WATCHDOG_USEC")?.to_str()?.parse().ok()?;
    if let Some(watched) = get("WATCHDOG_PID") {
        if watched.to_str()?.parse::<u32>().ok()? != pid {
            return None;
        }
    }
    (usec > 0).then(|| Duration::from_micros(usec))
}

/// A status is one line: a newline would start a new assignment.
fn one_line(status: &str) -> String {
    status.replace(['\n', '\r'], " ")
}

/// Pings systemd's watchdog every half period; never returns. The hold
/// loop polls it in the same `select!` as the lease, so the pings stop the
/// moment the lease is lost (or lockrun stalls): systemd sees an unhealthy
/// service exactly when it is one. Without a watchdog it only waits.
pub async fn watchdog_loop(notifier: Option<&Notifier>) -> std::convert::Infallible {
    let Some((notifier, period)) = notifier.and_then(|n| Some((n, n.watchdog()?))) else {
        return std::future::pending().await;
    };
    loop {
        notifier.ping();
        tokio::time::sleep(period / 2).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn no_socket_means_no_notifier() {
        assert!(Notifier::from_env(env(&[]), 1).unwrap().is_none());
    }

    #[test]
    fn a_relative_socket_is_refused() {
        let err = Notifier::from_env(env(&[("NOTIFY_SOCKET", "run/notify")]), 1)
            .err()
            .unwrap();
        assert!(err.contains("NOTIFY_SOCKET `run/notify`"), "{err}");
    }

    #[test]
    fn the_watchdog_is_ours_only_when_the_pid_matches() {
        let vars = [
            ("NOTIFY_SOCKET", "@lockrun-test"),
            ("WATCHDOG_USEC", "4000000"),
            ("WATCHDOG_PID", "42"),
        ];
        let ours = Notifier::from_env(env(&vars), 42).unwrap().unwrap();
        assert_eq!(ours.watchdog(), Some(Duration::from_secs(4)));
        let theirs = Notifier::from_env(env(&vars), 43).unwrap().unwrap();
        assert_eq!(theirs.watchdog(), None);
        let unset = [("NOTIFY_SOCKET", "@x"), ("WATCHDOG_USEC", "1000")];
        let any = Notifier::from_env(env(&unset), 7).unwrap().unwrap();
        assert_eq!(any.watchdog(), Some(Duration::from_millis(1)));
    }

    #[test]
    fn messages_reach_a_path_and_an_abstract_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        let name = format!("@lockrun-notify-test-{}", std::process::id());
        let abstract_listener =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(&name[1..]).unwrap()).unwrap();
        for (socket, listener) in [
            (path.to_str().unwrap(), &listener),
            (name.as_str(), &abstract_listener),
        ] {
            let notifier = Notifier::from_env(env(&[("NOTIFY_SOCKET", socket)]), 1)
                .unwrap()
                .unwrap();
            notifier.ready("leading `a/b`\nsince now");
            let mut buf = [0u8; 256];
            let n = listener.recv(&mut buf).unwrap();
            assert_eq!(
                std::str::from_utf8(&buf[..n]).unwrap(),
                "READY=1\nSTATUS=leading `a/b` since now"
            );
        }
    }
}
