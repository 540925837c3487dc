//! The one registration point: which engines exist, the flags each brings
//! to the command line, and the single `match` that turns a
//! `--backend` name into a backend a generic job runs on.
//!
//! A new backend is its folder, a variant of [`BackendName`], a line in
//! [`BACKENDS`] and its args flattened in [`BackendArgs`], [`HoldFlags`]
//! or [`ReleaseFlags`] (where it has any), and an arm in [`with_backend`].

use std::future::Future;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::{consul, etcd, local, postgres};
use super::{Engine, Inspect, Wait};
use super::{Env, Kind};
use crate::error::Failure;
use crate::lease::Budget;

/// The engines lockrun can keep its locks in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendName {
    /// HashiCorp Consul (sessions and KV, as `consul lock`).
    Consul,
    /// etcd v3 (a lease and etcd's own mutex layout, as `etcdctl lock`).
    Etcd,
    /// This host only: `flock(2)` on a file per lock, as `flock(1)`; no server.
    Local,
    /// PostgreSQL (a session-level advisory lock, as `pg_advisory_lock`).
    Postgres,
}

impl BackendName {
    pub fn name(self) -> &'static str {
        match self {
            BackendName::Consul => "consul",
            BackendName::Etcd => "etcd",
            BackendName::Local => "local",
            BackendName::Postgres => "postgres",
        }
    }
}

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
    #[command(flatten)]
    pub consul: consul::args::ConsulArgs,
    #[command(flatten)]
    pub etcd: etcd::args::EtcdArgs,
    #[command(flatten)]
    pub postgres: postgres::args::PostgresArgs,
}

/// The engines' own flags of `elect` and `semaphore`, shown among the
/// session flags.
#[derive(Debug, Args)]
pub struct HoldFlags {
    #[command(flatten)]
    pub consul: consul::args::ConsulSessionArgs,
}

/// The engines' own flags of `release`.
#[derive(Debug, Args)]
pub struct ReleaseFlags {
    #[command(flatten)]
    pub consul: consul::args::ConsulReleaseArgs,
}

/// A piece of a backend's man-page prose (see `crate::docs`).
pub enum Prose {
    /// A paragraph; `` `text` `` in backticks is set in bold.
    P(&'static str),
    /// A term and its description, as a tagged paragraph.
    Item(&'static str, &'static str),
}

/// What lockrun knows of a backend before choosing one: its flags, and
/// its part of the man page.
pub struct Registration {
    pub name: BackendName,
    /// Every flag it defines, global or a subcommand's: a flag typed for a
    /// backend that does not define it is refused.
    pub flags: fn(clap::Command) -> clap::Command,
    /// Whether its claims ride on a lease that runs out, so that the lease
    /// flags (`--ttl`, `--clock-rate-error`) mean something on it.
    pub lease: bool,
    /// Its variables, under ENVIRONMENT in lockrun(1).
    pub environment: &'static [Prose],
    /// Its timing promise, under SAFETY, "Per backend".
    pub safety: Prose,
}

/// Every backend, in the order the man page describes them.
pub const BACKENDS: &[Registration] = &[
    consul::backend::REGISTRATION,
    etcd::backend::REGISTRATION,
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

/// What `elect` or `semaphore` asks of a backend's hold rules.
pub struct HoldRequest<'a> {
    pub kind: Kind,
    /// The key, or the semaphore prefix.
    pub key: &'a str,
    pub ttl: Duration,
    pub rate_error: crate::clock::Ppm,
    /// `--kill-timeout` as typed; `None` for the default.
    pub kill_timeout: Option<Duration>,
    /// The engine's own flags.
    pub flags: &'a HoldFlags,
}

/// What a backend's hold rules make of a request.
pub struct HoldRules<P> {
    /// The countdown's arithmetic; `None` on an engine whose claim cannot
    /// run out (`local`).
    pub budget: Option<Budget>,
    /// The grace period COMMAND gets.
    pub kill_timeout: Duration,
    /// What the engine needs to acquire besides the target (Consul: the
    /// session to ask for).
    pub plan: P,
}

/// What `leader` or `release` asks of a backend's outside view.
pub enum Look<'a> {
    /// `leader`: once, until a holder shows (`--wait`), or every change
    /// (`--watch`).
    Leader {
        wait: Option<Wait>,
        watch: bool,
        json: bool,
    },
    Release {
        flags: &'a ReleaseFlags,
    },
}

/// A backend, from its rules to a running engine.
pub trait Backend: Sized {
    type Engine: Engine;
    type Inspect: Inspect;
    /// What its hold rules hand to its engine.
    type Plan;

    /// Its name, as `leader --json` shows it.
    const NAME: &'static str;

    /// Whether a KEY (or prefix) of `leader` and `release` is one it can
    /// name.
    fn check_key(key: &str) -> Result<(), Failure>;

    /// The rules of `elect` and `semaphore`: the key, the lease flags and
    /// its own, into a budget and a plan. Sends nothing.
    fn hold_rules(
        request: &HoldRequest<'_>,
        env: &dyn Env,
    ) -> Result<HoldRules<Self::Plan>, Failure>;

    /// The rules of `release`'s own flags.
    fn release_rules(_flags: &ReleaseFlags) -> Result<(), Failure> {
        Ok(())
    }

    /// Builds the client from its flags and the engine's environment,
    /// checked (files included) before any request; `ttl` is the holding
    /// job's, `None` for one that holds nothing.
    fn prepare(args: &BackendArgs, ttl: Option<Duration>, env: &dyn Env) -> Result<Self, Failure>;

    /// Checks that need the engine's answer, made before anything is
    /// written.
    fn ready(&self) -> impl Future<Output = Result<(), Failure>> {
        async { Ok(()) }
    }

    /// The engine that holds, with the plan its rules made.
    fn engine(&self, plan: Self::Plan) -> Result<Self::Engine, Failure>;

    /// The outside view, for `leader` and `release`.
    fn inspect(&self, look: &Look<'_>) -> Self::Inspect;
}

/// What runs a job on whichever backend was chosen: generic over the
/// backend, so that each job is written once.
pub trait Runner {
    type Output;
    fn run<B: Backend>(self) -> Self::Output;
}

/// The one `match` on the backend.
pub fn with_backend<R: Runner>(name: BackendName, runner: R) -> R::Output {
    match name {
        BackendName::Consul => runner.run::<consul::backend::ConsulBackend>(),
        BackendName::Etcd => runner.run::<etcd::backend::EtcdBackend>(),
        BackendName::Local => runner.run::<local::backend::LocalBackend>(),
        BackendName::Postgres => runner.run::<postgres::backend::PostgresBackend>(),
    }
}
