//! Sessions with ZooKeeper: connecting within a deadline that names the
//! servers, and the retry of requests that may be sent again.

use std::time::Duration;

use zookeeper_client as zk;

use super::config::{ZkConfig, ZkTls};
use super::error::ZkError;
use crate::backend::Wait;

pub use crate::backend::retry::ONCE_GRACE;

/// The longest one connection attempt may take before it is said to have
/// failed, whatever the session timeout.
const CONNECT_MAX: Duration = Duration::from_secs(10);

/// The ACL of every node lockrun creates: open, as Curator's and kazoo's
/// defaults are.
pub fn open_acl() -> zk::Acls<'static> {
    zk::Acls::anyone_all()
}

/// A new session with the servers of `config`, asking for `timeout`
/// (`eager`: fail at once when every server refused, as at a one-off run's
/// first contact). Bounded: a server that takes the connection and stays
/// silent costs at most the session timeout.
pub async fn connect(config: &ZkConfig, timeout: Duration, eager: bool) -> Result<zk::Client, ZkError> {
    // A server that stops answering (stopped, cut off) is given up after a
    // sixth of the session timeout, not the client's default 2/5: lockrun
    // stops the child well before the timeout runs out, and the move to
    // another server (which may first try another silent one) must fit
    // in what is left.
    let mut connector = zk::Client::connector()
        .with_session_timeout(timeout)
        .with_connection_timeout((timeout / 6).max(Duration::from_millis(200)))
        .with_readonly(false);
    if let Some(digest) = &config.digest {
        connector = connector.with_auth("digest", digest.0.as_bytes());
    }
    if eager {
        connector = connector.with_fail_eagerly();
    }
    if let Some(tls) = &config.tls {
        connector = connector.with_tls(tls_options(tls).map_err(ZkError::Usage)?);
    }
    let limit = (timeout * 2).clamp(Duration::from_secs(2), CONNECT_MAX);
    let unreachable = |cause: String| ZkError::Unreachable {
        hosts: config.hosts(),
        cause,
    };
    let connecting = async {
        match config.tls {
            // Every server of the connect string over TLS.
            Some(_) => connector.secure_connect(&config.connect).await,
            None => connector.connect(&config.connect).await,
        }
    };
    match tokio::time::timeout(limit, connecting).await {
        Err(_) => Err(unreachable(format!(
            "no session within {}",
            humantime::format_duration(limit)
        ))),
        Ok(Ok(client)) => Ok(client),
        Ok(Err(zk::Error::AuthFailed)) => Err(ZkError::Denied {
            what: format!("our credentials at {} (authentication failed)", config.hosts()),
        }),
        Ok(Err(zk::Error::NoNode)) => Err(ZkError::Usage(format!(
            "the chroot `{}` does not exist on {}; create it or fix --zk-hosts",
            config.chroot.as_deref().unwrap_or("/"),
            config.hosts()
        ))),
        // The client says only that no server took us: over TLS, a
        // handshake of our own with each server in turn (the first three,
        // each bounded) says why.
        Ok(Err(e)) => {
            if let Some(tls) = &config.tls {
                for server in config.servers.iter().take(3) {
                    if let Some(problem) = tls_probe(server, tls).await {
                        return Err(ZkError::Tls {
                            server: server.clone(),
                            problem,
                        });
                    }
                }
            }
            Err(unreachable(e.to_string()))
        }
    }
}

/// Why a TLS session with `server` fails, if it does: a handshake with
/// the same CA and client certificate, and a moment's read for the alert
/// a server that wants a client certificate sends after it (TLS 1.3).
/// `None` when it works or the server cannot be reached at all.
async fn tls_probe(server: &str, tls: &ZkTls) -> Option<String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use tokio::io::AsyncReadExt;

    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(tls.ca.as_bytes()).flatten() {
        roots.add(cert).ok()?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots);
    let config = match &tls.identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(cert.as_bytes())
                    .flatten()
                    .collect(),
                PrivateKeyDer::from_pem_slice(key.as_bytes()).ok()?,
            )
            .ok()?,
    };
    let (host, _) = server.rsplit_once(':')?;
    let name = ServerName::try_from(host.trim_matches(['[', ']']).to_owned()).ok()?;
    let tcp = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(server))
        .await
        .ok()?
        .ok()?;
    let probe = async {
        let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
        let mut stream = match connector.connect(name, tcp).await {
            Ok(stream) => stream,
            Err(e) => return Some(tls_problem(&e, host, tls.identity.is_some())),
        };
        // The server says nothing before our first request: only an alert
        // comes back now.
        let mut byte = [0u8; 1];
        match tokio::time::timeout(Duration::from_millis(500), stream.read(&mut byte)).await {
            Ok(Err(e)) => Some(tls_problem(&e, host, tls.identity.is_some())),
            _ => None,
        }
    };
    // A server that takes the connection and never finishes the
    // handshake is a problem of its own.
    tokio::time::timeout(Duration::from_secs(3), probe)
        .await
        .unwrap_or_else(|_| {
            Some("it took the connection but did not finish a TLS handshake within 3s; is this the servers' secureClientPort?".into())
        })
}

/// A failed TLS handshake in the operator's terms, with what to set;
/// `identity` when we offered a client certificate.
fn tls_problem(error: &std::io::Error, host: &str, identity: bool) -> String {
    use rustls::{AlertDescription, CertificateError, Error as Tls};
    let Some(tls) = crate::backend::tls::rustls_error(error) else {
        return format!(
            "the TLS handshake failed ({error}); is this the servers' secureClientPort?"
        );
    };
    match tls {
        Tls::InvalidCertificate(CertificateError::UnknownIssuer) => {
            "its certificate is not signed by the CA in --zk-ca-file".into()
        }
        Tls::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => format!("its certificate is not issued for `{host}`; name the servers in --zk-hosts as their certificates do"),
        Tls::InvalidCertificate(CertificateError::Expired | CertificateError::ExpiredContext { .. }) => {
            "its certificate has expired".into()
        }
        // Java's TLS says bad_certificate where we offered none.
        Tls::AlertReceived(
            AlertDescription::CertificateRequired
            | AlertDescription::BadCertificate
            | AlertDescription::HandshakeFailure,
        ) if !identity => {
            "the server requires a client certificate; give --zk-client-cert and --zk-client-key".into()
        }
        Tls::AlertReceived(
            AlertDescription::UnknownCA
            | AlertDescription::BadCertificate
            | AlertDescription::CertificateUnknown
            | AlertDescription::AccessDenied,
        ) => "the server refused our client certificate (--zk-client-cert)".into(),
        Tls::InvalidMessage(_) => {
            "the server does not speak TLS on this port; give its secureClientPort, or leave out --zk-ca-file"
                .into()
        }
        other => format!("TLS failed ({other})"),
    }
}

/// The client's TLS settings. Its TLS asks rustls for the process's
/// provider, which two are built in (ring, which lockrun's other TLS uses,
/// and aws-lc-rs, which the client's feature brings): ring is made the
/// process's provider first.
fn tls_options(tls: &ZkTls) -> Result<zk::TlsOptions, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let options = zk::TlsOptions::new()
        .with_pem_ca(&tls.ca)
        .map_err(|e| format!("--zk-ca-file: {e}"))?;
    match &tls.identity {
        None => Ok(options),
        Some((cert, key)) => options
            .with_pem_identity(cert, key)
            .map_err(|e| format!("--zk-client-cert/--zk-client-key: {e}")),
    }
}

/// Runs `step`, a request that may be sent again, again after a failure
/// that may pass: for as long as `wait` allows, and for a one-off run for
/// [`ONCE_GRACE`]. The client moves to another server by itself.
pub async fn riding_out<T, F, Fut>(wait: Wait, what: &str, step: F) -> Result<T, ZkError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ZkError>>,
{
    let once = |_: &ZkError| ONCE_GRACE;
    crate::backend::retry::riding_out(wait, what, Duration::from_millis(50), once, step).await
}

/// Ends a session: the client's last handle goes, which sends
/// closeSession, and we wait (a little) for the server's answer, so that
/// our ephemeral nodes are gone before lockrun exits.
pub async fn close(client: zk::Client) {
    let mut state = client.state_watcher();
    drop(client);
    let closed = async {
        loop {
            if state.state().is_terminated() {
                return;
            }
            state.changed().await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), closed).await;
}
