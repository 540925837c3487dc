//! The sockets of our connections, opened by us rather than by
//! tokio-postgres, for two reasons. The guard keeps a copy of the
//! connection's descriptor (see `PgClaim::take_hold_fd`), so that when
//! lockrun is SIGKILLed the server sees the connection end, and frees the
//! advisory lock, only once the guard has killed the command's tree and
//! exited. And each address of a host name that resolves to several gets a
//! deadline of its own, as libpq gives it.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_postgres::config::Host;

/// Where one connection attempt goes.
#[derive(Debug, Clone)]
pub enum Addr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// One address of a place, how we name it, and the name TLS checks the
/// server's certificate by.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: Addr,
    pub place: String,
    pub domain: String,
}

/// The addresses `config` (one host, as `places` makes it) names, each
/// to be tried with its own deadline, as libpq does: a Unix socket's path,
/// `hostaddr`, or every address the host name resolves to.
pub async fn targets(config: &tokio_postgres::Config, place: &str) -> io::Result<Vec<Target>> {
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let host = config.get_hosts().first();
    let hostaddr = config.get_hostaddrs().first();
    let one = |addr, domain: String| {
        Ok(vec![Target {
            addr,
            place: place.to_string(),
            domain,
        }])
    };
    match (host, hostaddr) {
        (Some(Host::Unix(dir)), _) => one(
            Addr::Unix(dir.join(format!(".s.PGSQL.{port}"))),
            String::new(),
        ),
        (host, Some(ip)) => {
            let domain = match host {
                Some(Host::Tcp(name)) => name.clone(),
                _ => ip.to_string(),
            };
            one(Addr::Tcp(SocketAddr::new(*ip, port)), domain)
        }
        (Some(Host::Tcp(name)), None) => {
            let mut found: Vec<SocketAddr> = Vec::new();
            for addr in tokio::net::lookup_host((name.as_str(), port)).await? {
                if !found.contains(&addr) {
                    found.push(addr);
                }
            }
            if found.is_empty() {
                return Err(io::Error::other(format!("`{name}` resolves to no address")));
            }
            let many = found.len() > 1;
            Ok(found
                .into_iter()
                .map(|addr| Target {
                    place: if many {
                        format!("{name} ({}):{port}", addr.ip())
                    } else {
                        place.to_string()
                    },
                    addr: Addr::Tcp(addr),
                    domain: name.clone(),
                })
                .collect())
        }
        (None, None) => Err(io::Error::other("no host nor hostaddr")),
    }
}

/// TCP settings of a lockrun connection.
pub struct Tuning {
    /// Idle time before the first keepalive probe.
    pub keepalive_idle: Duration,
    /// How long sent data may stay unacknowledged (`TCP_USER_TIMEOUT`).
    pub user_timeout: Duration,
}

/// Opens the socket to `addr`, with `tuning` on TCP.
pub async fn open(addr: &Addr, tuning: &Tuning) -> io::Result<Stream> {
    match addr {
        Addr::Tcp(addr) => {
            let stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            use nix::sys::socket::{setsockopt, sockopt};
            let secs = |d: Duration| u32::try_from(d.as_secs().max(1)).unwrap_or(u32::MAX);
            setsockopt(&stream, sockopt::KeepAlive, &true).map_err(io::Error::from)?;
            setsockopt(&stream, sockopt::TcpKeepIdle, &secs(tuning.keepalive_idle))
                .map_err(io::Error::from)?;
            let millis = u32::try_from(tuning.user_timeout.as_millis()).unwrap_or(u32::MAX);
            setsockopt(&stream, sockopt::TcpUserTimeout, &millis).map_err(io::Error::from)?;
            Ok(Stream::Tcp(stream))
        }
        Addr::Unix(path) => Ok(Stream::Unix(UnixStream::connect(path).await?)),
    }
}

/// A close-on-exec copy of `stream`'s descriptor, which keeps the socket
/// open while it lives: a connection's lives as long as its `Conn`.
pub fn copy(stream: &Stream) -> io::Result<OwnedFd> {
    stream.as_fd().try_clone_to_owned()
}

/// A connection's socket.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl AsFd for Stream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
