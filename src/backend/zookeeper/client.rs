//! Sessions with ZooKeeper: connecting within a deadline that names the
//! servers, and the retry of requests that may be sent again.

use std::time::Duration;

use zookeeper_client as zk;

use super::config::ZkConfig;
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
    let limit = (timeout * 2).clamp(Duration::from_secs(2), CONNECT_MAX);
    let unreachable = |cause: String| ZkError::Unreachable {
        hosts: config.hosts(),
        cause,
    };
    match tokio::time::timeout(limit, connector.connect(&config.connect)).await {
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
        Ok(Err(e)) => Err(unreachable(e.to_string())),
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
