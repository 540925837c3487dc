//! The one registration point: which engines exist, the flags each brings
//! to the command line, and the single `match` that turns a
//! `--backend` name into a backend a generic job runs on.
//!
//! A new backend is its folder, a variant of [`BackendName`], a line in
//! [`BACKENDS`] and its args flattened in [`BackendArgs`], [`HoldFlags`]
//! or [`ReleaseFlags`] (where it has any), and an arm in [`with_backend`].

use clap::Args;

#[cfg(feature = "consul")]
use super::consul;
#[cfg(feature = "etcd")]
use super::etcd;
use super::local;
#[cfg(feature = "postgres")]
use super::postgres;
use super::{Backend, BackendName, Registration};

/// Which engine, and each engine's own settings (global flags).
#[derive(Debug, Args)]
#[command(next_help_heading = "Backend")]
pub struct BackendArgs {
    /// Where the locks live: consul, etcd, postgres, or local (this host
    /// only, no server). Never chosen for you: without it (or LOCKRUN_BACKEND) it is
    /// consul.
    #[arg(long, global = true, value_enum, env = "LOCKRUN_BACKEND", default_value_t = BackendName::Consul, value_name = "BACKEND")]
    pub backend: BackendName,
    #[command(flatten)]
    pub local: local::args::LocalArgs,
    #[cfg(feature = "consul")]
    #[command(flatten)]
    pub consul: consul::args::ConsulArgs,
    #[cfg(feature = "etcd")]
    #[command(flatten)]
    pub etcd: etcd::args::EtcdArgs,
    #[cfg(feature = "postgres")]
    #[command(flatten)]
    pub postgres: postgres::args::PostgresArgs,
}

/// The engines' own flags of `elect` and `semaphore`, shown among the
/// session flags.
#[derive(Debug, Args)]
pub struct HoldFlags {
    #[cfg(feature = "consul")]
    #[command(flatten)]
    pub consul: consul::args::ConsulSessionArgs,
}

/// The engines' own flags of `release`.
#[derive(Debug, Args)]
pub struct ReleaseFlags {
    #[cfg(feature = "consul")]
    #[command(flatten)]
    pub consul: consul::args::ConsulReleaseArgs,
}

/// Every backend, in the order the man page describes them.
pub const BACKENDS: &[Registration] = &[
    #[cfg(feature = "consul")]
    consul::backend::REGISTRATION,
    #[cfg(feature = "etcd")]
    etcd::backend::REGISTRATION,
    #[cfg(feature = "postgres")]
    postgres::backend::REGISTRATION,
    local::backend::REGISTRATION,
];

/// The registration of `name`.
pub fn registration(name: BackendName) -> &'static Registration {
    BACKENDS
        .iter()
        .find(|r| r.name == name)
        .expect("every backend is registered")
}

/// The clap ids of the flags `augment` defines.
pub fn flag_ids(augment: fn(clap::Command) -> clap::Command) -> Vec<String> {
    augment(clap::Command::new("flags"))
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect()
}

/// Where backend `B`'s own flags are among everyone's.
pub struct Pick<B: Backend> {
    pub args: fn(&BackendArgs) -> &B::Args,
    pub hold: fn(&HoldFlags) -> &B::HoldArgs,
    pub release: fn(&ReleaseFlags) -> &B::ReleaseArgs,
}

/// What runs a job on whichever backend was chosen: generic over the
/// backend, so that each job is written once.
pub trait Runner {
    type Output;
    fn run<B: Backend>(self, pick: Pick<B>) -> Self::Output;
    /// The backend was left out of this build (a Cargo feature).
    fn unavailable(self, name: BackendName) -> Self::Output;
}

/// The one `match` on the backend.
pub fn with_backend<R: Runner>(name: BackendName, runner: R) -> R::Output {
    match name {
        #[cfg(not(feature = "consul"))]
        BackendName::Consul => runner.unavailable(name),
        #[cfg(not(feature = "etcd"))]
        BackendName::Etcd => runner.unavailable(name),
        #[cfg(not(feature = "postgres"))]
        BackendName::Postgres => runner.unavailable(name),
        #[cfg(feature = "consul")]
        BackendName::Consul => runner.run(Pick::<consul::backend::ConsulBackend> {
            args: |a| &a.consul,
            hold: |h| &h.consul,
            release: |r| &r.consul,
        }),
        #[cfg(feature = "etcd")]
        BackendName::Etcd => runner.run(Pick::<etcd::backend::EtcdBackend> {
            args: |a| &a.etcd,
            hold: |_| &(),
            release: |_| &(),
        }),
        BackendName::Local => runner.run(Pick::<local::backend::LocalBackend> {
            args: |a| &a.local,
            hold: |_| &(),
            release: |_| &(),
        }),
        #[cfg(feature = "postgres")]
        BackendName::Postgres => runner.run(Pick::<postgres::backend::PostgresBackend> {
            args: |a| &a.postgres,
            hold: |_| &(),
            release: |_| &(),
        }),
    }
}
