//! The etcd backend's flags.

use std::path::PathBuf;

use clap::Args;

/// Where etcd is; flags override etcdctl's environment variables. The user
/// and password come from ETCDCTL_USER (and ETCDCTL_PASSWORD) only, never
/// from a command line that every user of the host can read.
#[derive(Debug, Args)]
#[command(next_help_heading = "etcd connection")]
pub struct EtcdArgs {
    /// etcd: endpoints, comma-separated host:port or http(s)://host:port.
    ///
    /// Else ETCDCTL_ENDPOINTS, else 127.0.0.1:2379; the next is tried when
    /// one is down.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new(), global = true, value_name = "ADDRS")]
    pub endpoints: Option<String>,
    /// etcd: CA certificate file (else ETCDCTL_CACERT).
    #[arg(long, global = true, hide_short_help = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub cacert: Option<PathBuf>,
    /// etcd: client certificate file (else ETCDCTL_CERT).
    #[arg(long, global = true, hide_short_help = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub cert: Option<PathBuf>,
    /// etcd: the client certificate's key file (else ETCDCTL_KEY).
    #[arg(long, global = true, hide_short_help = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub cert_key: Option<PathBuf>,
}
