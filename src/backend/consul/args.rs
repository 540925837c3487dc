//! The Consul backend's flags: where the agent is, and the session.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::Behavior;

/// Where Consul is and how to authenticate; flags override the consul CLI's
/// environment variables.
#[derive(Debug, Args)]
#[command(next_help_heading = "Consul connection")]
pub struct ConsulArgs {
    /// Consul agent: host:port, http://host:port or https://host:port.
    ///
    /// Several, comma-separated, to renew through the next when one hangs or
    /// dies.
    #[arg(
        long,
        global = true,
        env = "CONSUL_HTTP_ADDR",
        value_name = "ADDR",
        hide_env_values = true
    )]
    pub http_addr: Option<String>,
    /// Read the ACL token from FILE.
    ///
    /// Else CONSUL_HTTP_TOKEN_FILE, else CONSUL_HTTP_TOKEN.
    #[arg(long, global = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub token_file: Option<PathBuf>,
    /// CA certificate file to verify Consul's TLS certificate.
    #[arg(long, global = true, hide_short_help = true, env = "CONSUL_CACERT", hide_env_values = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub ca_file: Option<PathBuf>,
    /// Directory of CA certificates.
    #[arg(long, global = true, hide_short_help = true, env = "CONSUL_CAPATH", hide_env_values = true, value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    pub ca_path: Option<PathBuf>,
    /// Client certificate for Consul's verify_incoming.
    #[arg(long, global = true, hide_short_help = true, env = "CONSUL_CLIENT_CERT", hide_env_values = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub client_cert: Option<PathBuf>,
    /// Client key for Consul's verify_incoming.
    #[arg(long, global = true, hide_short_help = true, env = "CONSUL_CLIENT_KEY", hide_env_values = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub client_key: Option<PathBuf>,
    /// Server name to verify Consul's certificate against (SNI).
    #[arg(
        long,
        global = true,
        hide_short_help = true,
        env = "CONSUL_TLS_SERVER_NAME",
        hide_env_values = true,
        value_parser = clap::builder::NonEmptyStringValueParser::new(),
        value_name = "NAME"
    )]
    pub tls_server_name: Option<String>,
    /// Datacenter to use (default: the agent's).
    #[arg(long, hide_short_help = true, value_parser = clap::builder::NonEmptyStringValueParser::new(), global = true, value_name = "DC")]
    pub datacenter: Option<String>,
    /// Enterprise namespace.
    #[arg(
        long,
        global = true,
        hide_short_help = true,
        env = "CONSUL_NAMESPACE",
        hide_env_values = true,
        value_parser = clap::builder::NonEmptyStringValueParser::new(),
        value_name = "NS"
    )]
    pub namespace: Option<String>,
}

/// The session's own settings, among `elect`'s and `semaphore`'s session
/// flags.
#[derive(Debug, Args)]
pub struct ConsulSessionArgs {
    /// How long Consul keeps a lost lock from a new holder.
    ///
    /// After the session is invalidated (0s to 60s). It is the child's grace
    /// window on a partition.
    #[arg(long, value_parser = crate::duration::parse_duration, allow_hyphen_values = true, default_value = "15s", value_name = "DURATION")]
    pub lock_delay: Duration,
    /// What Consul does with held keys when the session is invalidated
    /// [default: release for elect, delete for semaphore].
    #[arg(long, hide_short_help = true, value_enum, value_name = "BEHAVIOR")]
    pub behavior: Option<Behavior>,
    /// Session name shown in Consul [default: lockrun on HOST pid PID for KEY].
    #[arg(long, hide_short_help = true, value_parser = clap::builder::NonEmptyStringValueParser::new(), value_name = "NAME")]
    pub session_name: Option<String>,
    /// Node health checks the session is bound to (comma-separated) [default: none].
    /// A failing check ends the session at once, so the child must then be
    /// dead within the lock-delay: renewals come more often and the grace
    /// period must fit in the lock-delay. Not for semaphores.
    #[arg(
        long,
        hide_short_help = true,
        value_delimiter = ',',
        value_name = "CHECKS",
        conflicts_with = "no_checks"
    )]
    pub node_checks: Option<Vec<String>>,
    /// Service health checks the session is bound to (comma-separated;
    /// Consul 1.7 or later). As --node-checks.
    #[arg(
        long,
        hide_short_help = true,
        value_delimiter = ',',
        value_name = "CHECKS",
        conflicts_with = "no_checks"
    )]
    pub service_checks: Vec<String>,
    /// Bind the session to no health check, so that only the TTL ends it
    /// (the default; sent to Consul explicitly, old and new fields alike).
    #[arg(long, hide_short_help = true)]
    pub no_checks: bool,
}

/// `release`'s Consul flags.
#[derive(Debug, Args)]
pub struct ConsulReleaseArgs {
    /// Only if this session holds it (for a semaphore: free this holder's slot).
    #[arg(long, conflicts_with = "all", value_parser = clap::builder::NonEmptyStringValueParser::new(), value_name = "ID")]
    pub session: Option<String>,
    /// Also destroy the holder's session (its other locks go too, after their lock-delay).
    #[arg(long)]
    pub destroy_session: bool,
}
