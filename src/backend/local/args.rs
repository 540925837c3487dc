//! The local backend's flags, shown with `--backend` itself.

use std::path::PathBuf;

use clap::Args;

/// The lock directory and its file system.
#[derive(Debug, Args)]
#[command(next_help_heading = "Backend")]
pub struct LocalArgs {
    /// local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`.
    ///
    /// Beside it lockrun keeps DIR/KEY.lockrun (the holder `leader` shows,
    /// the fencing number) and DIR/KEY.lockrun-new, the scratch each record
    /// is written in before the two swap names; a semaphore PREFIX is the
    /// directory DIR/PREFIX (docs/local.md). [default: /run/lockrun for
    /// root, $XDG_RUNTIME_DIR/lockrun or /tmp/lockrun-UID otherwise].
    #[arg(long, global = true, env = "LOCKRUN_LOCK_DIR", hide_env_values = true, value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    pub lock_dir: Option<PathBuf>,
    /// local: accept a lock directory on NFS or CIFS, whose flock(2) may not
    /// exclude other hosts or may break on a reconnect.
    #[arg(long, global = true, hide_short_help = true)]
    pub allow_network_fs: bool,
}
