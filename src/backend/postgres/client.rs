//! The connection to PostgreSQL: the hosts tried in turn as libpq does,
//! the per-session settings that bound how long the server keeps our
//! locks, and the checks that the server answering is the one they reached.

use std::os::fd::OwnedFd;
use std::time::Duration;

use tokio::sync::watch;
use tokio_postgres::{AsyncMessage, Client};

use super::engine::Postgres;
use super::engine::replace_channel;
use super::error::PgError;
use super::socket;

/// The application_name every lockrun connection carries.
pub const APPLICATION_NAME: &str = "lockrun";

/// The setting, a placeholder no server defines, our startup packet
/// carries a fresh random value in.
const NONCE_SETTING: &str = "lockrun.nonce";

/// 128 random bits, in hex: what [`NONCE_SETTING`] carries.
fn nonce() -> Result<String, PgError> {
    let mut bytes = [0u8; 16];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes)
        .map_err(|_| PgError::Server {
            what: "making a nonce".into(),
            message: "the system's random source failed".into(),
        })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// How long one host may take to connect: libpq's `connect_timeout`
/// (whole seconds, at least 2, as libpq reads it), 10 s when unset.
fn connect_timeout(config: &tokio_postgres::Config) -> Duration {
    match config.get_connect_timeout() {
        Some(given) => (*given).max(Duration::from_secs(2)),
        None => Duration::from_secs(10),
    }
}

/// Each host of `config` on its own, with its port and how we name it:
/// `host:port`, the socket's path, or `host (hostaddr):port`.
fn places(config: &tokio_postgres::Config) -> Vec<(tokio_postgres::Config, String)> {
    use tokio_postgres::config::Host;
    let hosts = config.get_hosts();
    let addrs = config.get_hostaddrs();
    let count = hosts.len().max(addrs.len());
    if count <= 1 {
        // Nothing to split; tokio-postgres says what is missing, if anything.
        let place = match (hosts.first(), addrs.first()) {
            (Some(Host::Unix(dir)), _) => format!(
                "{}/.s.PGSQL.{}",
                dir.display(),
                config.get_ports().first().unwrap_or(&5432)
            ),
            (Some(Host::Tcp(host)), None) => {
                format!("{host}:{}", config.get_ports().first().unwrap_or(&5432))
            }
            (Some(Host::Tcp(host)), Some(addr)) => {
                format!("{host} ({addr}):{}", config.get_ports().first().unwrap_or(&5432))
            }
            (None, Some(addr)) => format!("{addr}:{}", config.get_ports().first().unwrap_or(&5432)),
            (None, None) => "PostgreSQL".into(),
        };
        return vec![(config.clone(), place)];
    }
    (0..count)
        .map(|i| {
            let port = config
                .get_ports()
                .get(i)
                .or(config.get_ports().first())
                .copied()
                .unwrap_or(5432);
            let mut one = tokio_postgres::Config::new();
            if let Some(user) = config.get_user() {
                one.user(user);
            }
            if let Some(password) = config.get_password() {
                one.password(password);
            }
            if let Some(dbname) = config.get_dbname() {
                one.dbname(dbname);
            }
            one.ssl_mode(config.get_ssl_mode())
                .ssl_negotiation(config.get_ssl_negotiation())
                .channel_binding(config.get_channel_binding())
                .target_session_attrs(config.get_target_session_attrs())
                .port(port);
            let place = match (hosts.get(i), addrs.get(i)) {
                (Some(Host::Unix(dir)), _) => {
                    one.host_path(dir);
                    format!("{}/.s.PGSQL.{port}", dir.display())
                }
                (Some(Host::Tcp(host)), addr) => {
                    one.host(host);
                    match addr {
                        Some(addr) => {
                            one.hostaddr(*addr);
                            format!("{host} ({addr}):{port}")
                        }
                        None => format!("{host}:{port}"),
                    }
                }
                (None, Some(addr)) => {
                    one.hostaddr(*addr);
                    format!("{addr}:{port}")
                }
                (None, None) => unreachable!("count is the longer list"),
            };
            (one, place)
        })
        .collect()
}

/// The first row of a simple query's answer, each column as text (a
/// null as the empty text).
fn first_row(messages: Vec<tokio_postgres::SimpleQueryMessage>) -> Vec<String> {
    messages
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).unwrap_or_default().to_string())
                    .collect(),
            ),
            _ => None,
        })
        .unwrap_or_default()
}

impl Postgres {
    /// The per-session settings that make the server hold our locks as
    /// long as the budget assumes and no longer than it allows: a silent
    /// peer is given up on no earlier than the TTL after the last data
    /// received (`tcp_user_timeout`, and keepalive probes that start only
    /// after a TTL of silence), and a session that sends no statement for
    /// a TTL is ended (`idle_session_timeout`, PostgreSQL 14 and later):
    /// behind an L4 relay that stops forwarding but keeps both TCP
    /// connections open, the server's socket never goes silent, and only
    /// this frees our lock. Our round trips are single statements outside
    /// any transaction, so the idle clock restarts at each, no earlier
    /// than its send; inside a transaction (we open none) the same TTL
    /// applies.
    ///
    /// `nonce` goes in `lockrun.nonce`, which no server, role or database
    /// setting can know: reading it back proves that the server process
    /// answering is the one these options reached.
    fn session_options(&self, nonce: &str) -> String {
        let secs = self.ttl.as_secs();
        let interval = (secs / 3).max(1);
        format!(
            "-c idle_session_timeout={ms} -c idle_in_transaction_session_timeout={ms} \
             -c statement_timeout={ms} -c tcp_keepalives_idle={secs} \
             -c tcp_keepalives_interval={interval} -c tcp_keepalives_count=3 \
             -c tcp_user_timeout={ms} -c {NONCE_SETTING}={nonce}",
            ms = self.ttl.as_millis(),
        )
    }

    /// One connection of ours, its driver spawned; the receiver turns
    /// `Some(why)` when the connection ends.
    ///
    /// The hosts are tried in turn, as libpq does, each within libpq's
    /// `connect_timeout` (10 s when unset, as the other backends' first
    /// contact): the TCP connection, TLS, the startup, the password and
    /// our checks, so that a port that never answers, or answers in
    /// another protocol, costs that long and no longer. A host that cannot
    /// be reached, or is a hot standby, sends us to the next; any other
    /// refusal is the answer.
    pub(super) async fn connect(&self) -> Result<Conn, PgError> {
        let nonce = nonce()?;
        // The user's own `options` first: ours come later and so win.
        let options = match self.config.get_options() {
            Some(theirs) => format!("{theirs} {}", self.session_options(&nonce)),
            None => self.session_options(&nonce),
        };
        let within = connect_timeout(&self.config);
        let tuning = socket::Tuning {
            keepalive_idle: (self.ttl / 3).max(Duration::from_secs(1)),
            user_timeout: self.ttl,
        };
        let mut failed = Vec::new();
        let mut standbys = Vec::new();
        for (mut config, place) in places(&self.config) {
            config
                .application_name(APPLICATION_NAME)
                .options(options.clone());
            // Each address a host name resolves to is tried on its own,
            // with a deadline of its own, as libpq does.
            let targets = match tokio::time::timeout(within, socket::targets(&config, &place)).await
            {
                Ok(Ok(targets)) => targets,
                Ok(Err(e)) => {
                    failed.push(format!("{place}: {}", crate::backend::one_line(&e.to_string())));
                    continue;
                }
                Err(_) => {
                    failed.push(format!(
                        "{place}: its name did not resolve within {}",
                        humantime::format_duration(within)
                    ));
                    continue;
                }
            };
            for target in targets {
                let attempt = self.connect_to(&config, &target, &tuning, &nonce);
                match tokio::time::timeout(within, attempt).await {
                    Ok(Ok(conn)) => return Ok(conn),
                    Ok(Err(PgError::Standby)) => standbys.push(target.place),
                    Ok(Err(
                        PgError::Unreachable { cause }
                        | PgError::Closed { cause }
                        | PgError::Timeout { what: cause, .. },
                    )) => failed.push(format!("{}: {cause}", target.place)),
                    Ok(Err(e)) => return Err(e),
                    Err(_) => failed.push(format!(
                        "{}: no answer within {}",
                        target.place,
                        humantime::format_duration(within)
                    )),
                }
            }
        }
        if failed.is_empty() {
            return Err(PgError::Standby);
        }
        failed.extend(standbys.iter().map(|p| format!("{p}: a hot standby")));
        Err(PgError::Unreachable {
            cause: failed.join("; "),
        })
    }

    /// One connection to the one place `config` names, with our checks.
    async fn connect_to(
        &self,
        config: &tokio_postgres::Config,
        target: &socket::Target,
        tuning: &socket::Tuning,
        nonce: &str,
    ) -> Result<Conn, PgError> {
        use tokio_postgres::tls::MakeTlsConnect;
        let stream = socket::open(&target.addr, tuning)
            .await
            .map_err(|e| PgError::Unreachable {
                cause: crate::backend::one_line(&e.to_string()),
            })?;
        let socket = socket::copy(&stream).map_err(|e| PgError::Unreachable {
            cause: crate::backend::one_line(&e.to_string()),
        })?;
        let tls = self
            .tls
            .clone()
            .make_tls_connect(&target.domain)
            .map_err(|e| PgError::Tls {
                cause: crate::backend::one_line(&e.to_string()),
            })?;
        let (client, connection) = config
            .connect_raw(stream, tls)
            .await
            .map_err(|e| match PgError::from_client("the connection", e) {
                PgError::Denied { what, message } if message.contains("no password was given") => {
                    PgError::Denied {
                        what,
                        message: match &self.password_note {
                            Some(note) => format!("{message}; {note}"),
                            None => format!(
                                "{message}; set PGPASSWORD, or put a line in ~/.pgpass or the PGPASSFILE"
                            ),
                        },
                    }
                }
                e => e,
            })?;
        let (tx, rx) = watch::channel(None);
        let (notified, notices) = watch::channel(0u64);
        let (ask, asked) = watch::channel(None::<(i32, String)>);
        let mut connection = connection;
        tokio::spawn(async move {
            // We drive the connection by hand to see its notifications: a
            // release on a channel we LISTEN on.
            let why = loop {
                match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                    Some(Ok(AsyncMessage::Notification(n)))
                        if n.channel().starts_with("lockrun_replace_") =>
                    {
                        let _ = ask.send(Some((n.process_id(), n.payload().to_string())));
                    }
                    Some(Ok(AsyncMessage::Notification(_))) => {
                        notified.send_modify(|n| *n += 1);
                    }
                    Some(Ok(_)) => {}
                    // 57P01: pg_terminate_backend, as `lockrun release` and
                    // `--replace` end a holder here (no note reaches a
                    // terminated session), or a fast shutdown.
                    Some(Err(e)) if e.code() == Some(&tokio_postgres::error::SqlState::ADMIN_SHUTDOWN) => {
                        break "the server terminated our backend: pg_terminate_backend, as an operator's `lockrun release` or a --replace does, or a fast shutdown".to_string()
                    }
                    Some(Err(e)) => break crate::backend::one_line(&e.to_string()),
                    None => break "the server closed it".to_string(),
                }
            };
            let _ = tx.send(Some(why));
        });
        // Simple queries, which prepare nothing: a pooler that gives the
        // next transaction another server process would fail a prepared
        // statement's second half there, and say less than we do below.
        let first = first_row(
            client
                .simple_query(&format!(
                    "select pg_is_in_recovery(), pg_backend_pid(), \
                     current_setting('{NONCE_SETTING}', true), \
                     current_setting('transaction_read_only')"
                ))
                .await
                .map_err(|e| PgError::from_client("the first query", e))?,
        );
        if first.first().map(String::as_str) == Some("t") {
            return Err(PgError::Standby);
        }
        // What tokio-postgres checked for `target_session_attrs=read-write`
        // when it opened the socket itself; such a server goes the way of
        // an unreachable one, to the next host.
        if config.get_target_session_attrs() == tokio_postgres::config::TargetSessionAttrs::ReadWrite
            && first.get(3).map(String::as_str) == Some("on")
        {
            return Err(PgError::Unreachable {
                cause: "the server does not allow writes (transaction_read_only is on)".into(),
            });
        }
        let backend_pid = first
            .get(1)
            .and_then(|p| p.parse::<i32>().ok())
            .ok_or_else(|| PgError::Server {
                what: "the first query".into(),
                message: "no backend pid in its answer".into(),
            })?;
        // A pooler such as PgBouncer drops the startup `options` our
        // timeouts ride on when told to ignore them (else it refuses them,
        // which `PgError::from_client` names), and its transaction pooling
        // hands our session's advisory locks to whoever runs next on the
        // server connection. A setting the server already had (a role's
        // statement_timeout equal to our TTL) once passed this check; a
        // fresh nonce cannot come but from our own startup packet.
        if first.get(2).map(String::as_str) != Some(nonce) {
            return Err(PgError::Pooler {
                why: "the server did not apply the settings lockrun sends at connection (options)"
                    .into(),
            });
        }
        // A pooler that forwards startup settings (PgBouncer 1.20 can
        // track some) may still give each transaction another server
        // process: the same process and nonce once more, in a transaction
        // of its own.
        let again = first_row(
            client
                .simple_query(&format!(
                    "select pg_backend_pid(), current_setting('{NONCE_SETTING}', true); LISTEN {}",
                    replace_channel(backend_pid)
                ))
                .await
                .map_err(|e| PgError::from_client("the first query", e))?,
        );
        if again != [backend_pid.to_string(), nonce.to_string()] {
            return Err(PgError::Pooler {
                why: format!(
                    "our second statement did not reach server process {backend_pid}, which served the first"
                ),
            });
        }
        Ok(Conn {
            client,
            closed: rx,
            notices,
            asked,
            backend_pid,
            socket,
        })
    }
}

/// One connection and the news of its end.
pub(super) struct Conn {
    pub(super) client: Client,
    pub(super) closed: watch::Receiver<Option<String>>,
    /// Counts the notifications on channels we LISTEN on.
    pub(super) notices: watch::Receiver<u64>,
    /// The last payload on our [`replace_channel`], with the server
    /// process that sent it: a note, if it names us and its sender may end
    /// our session (see [`may_replace`](super::engine::may_replace)).
    pub(super) asked: watch::Receiver<Option<(i32, String)>>,
    pub(super) backend_pid: i32,
    /// A copy of the socket the driver owns, closed with the `Conn`, from
    /// which the guard gets its copy.
    pub(super) socket: OwnedFd,
}

impl Conn {
    /// Keeps this connection when it sends nothing for a TTL (our session
    /// options end an idle one, which a lease needs and a connection that
    /// only waits for news does not), within two seconds.
    pub(super) async fn keep_when_idle(&self, what: &str) -> Result<(), PgError> {
        const WITHIN: std::time::Duration = std::time::Duration::from_secs(2);
        let keep = self.client.batch_execute("set idle_session_timeout = 0");
        match tokio::time::timeout(WITHIN, keep).await {
            Ok(done) => done.map_err(|e| PgError::from_client(what, e)),
            Err(_) => Err(PgError::Timeout {
                what: what.to_string(),
                after: WITHIN,
            }),
        }
    }
}
