//! The zookeeper backend's flags.

use std::path::PathBuf;

use clap::Args;

/// Where ZooKeeper is. The digest credentials come from a file or from
/// ZOOKEEPER_AUTH, never from a command line every user of the host can read.
#[derive(Debug, Args)]
#[command(next_help_heading = "ZooKeeper connection")]
pub struct ZookeeperArgs {
    /// ZooKeeper: connect string, comma-separated host:port, then an optional /chroot.
    ///
    /// Else ZOOKEEPER_HOSTS, else 127.0.0.1:2181; the client moves to the
    /// next server when one fails.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new(), global = true, value_name = "HOSTS")]
    pub zk_hosts: Option<String>,
    /// ZooKeeper: a file holding user:password for digest authentication
    /// (else ZOOKEEPER_AUTH holds user:password).
    #[arg(long, global = true, hide_short_help = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub zk_auth_file: Option<PathBuf>,
    /// ZooKeeper: TLS to every server (their secureClientPort), verified
    /// against the CA certificates in FILE (PEM).
    #[arg(long, global = true, hide_short_help = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub zk_ca_file: Option<PathBuf>,
    /// ZooKeeper: a client certificate (PEM) for servers that ask for one
    /// (ssl.clientAuth); needs --zk-ca-file and --zk-client-key.
    #[arg(long, global = true, hide_short_help = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub zk_client_cert: Option<PathBuf>,
    /// ZooKeeper: the client certificate's private key (PEM), with
    /// --zk-client-cert; not readable by others.
    #[arg(long, global = true, hide_short_help = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub zk_client_key: Option<PathBuf>,
}

/// The ensemble's tick, among `elect`'s and `semaphore`'s session flags:
/// no client can read it, and it sets how late a follower passes our
/// activity on to the leader.
#[derive(Debug, Args)]
pub struct ZkHoldArgs {
    /// ZooKeeper: the ensemble's tickTime (zoo.cfg), which no client can read.
    ///
    /// A follower passes a client's requests on to the leader only every
    /// half tick, so the session may expire that much sooner after a
    /// renewal; lockrun stops COMMAND that much earlier. A longer tick than
    /// the ensemble's is safe, a shorter one is not.
    #[arg(long, value_parser = crate::duration::parse_duration, default_value = "2s", hide_short_help = true, value_name = "DURATION")]
    pub zk_tick_time: std::time::Duration,
}
