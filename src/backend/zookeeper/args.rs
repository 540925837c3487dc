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
}
