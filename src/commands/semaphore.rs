//! `lockrun semaphore --limit N PREFIX -- COMMAND`: run COMMAND in one of N
//! slots.

use crate::backend::consul::SessionSpec;
use crate::backend::{Engine, Target};
use crate::cli::{BackendName, SemaphoreArgs};
use crate::config::{self, Env, HoldConfig};
use crate::error::Failure;
use crate::exit::Exit;
use crate::hold;

pub struct Job {
    prefix: String,
    limit: u32,
    config: HoldConfig,
    /// The session to ask Consul for, on that backend.
    pub session: Option<SessionSpec>,
    /// The lease TTL, on etcd.
    pub ttl: std::time::Duration,
    service: hold::Service,
    /// The first round's guard, forked before the runtime started.
    guard: Option<crate::child::Forked>,
}

impl Job {
    /// Forks the guard now, before the runtime starts (see
    /// [`hold::fork_guard`]).
    pub fn fork_guard(&mut self, lends: bool) {
        self.guard = hold::fork_guard(&self.config, &self.service, lends);
    }
}

pub fn prepare(args: SemaphoreArgs, backend: BackendName, env: &dyn Env) -> Result<Job, Failure> {
    // `consul lock` strips a leading slash; we refuse it like any bad key,
    // but a trailing slash on a prefix is harmless and common.
    let prefix = args
        .prefix
        .strip_suffix('/')
        .unwrap_or(&args.prefix)
        .to_string();
    let (config, session) = config::hold(
        config::SEMAPHORE,
        backend,
        &prefix,
        &args.session,
        &args.wait,
        &args.child,
        env,
    )?;
    // Last: a bad --status-addr is refused like any flag, but binding it is
    // the one check that holds something.
    let ops = crate::ops::Ops::prepare(&args.ops, backend.name(), &prefix)?;
    let service = hold::Service::new(&args.service)?.with_ops(ops);
    Ok(Job {
        prefix,
        // --limit is bounded to 10 000 by the command line.
        limit: u32::try_from(args.limit).expect("--limit is at most 10000"),
        config,
        session,
        ttl: args.session.ttl,
        service,
        guard: None,
    })
}

pub async fn run<E: Engine>(engine: &E, job: Job) -> Result<Exit, Failure> {
    let target = Target::Slot {
        prefix: job.prefix,
        limit: job.limit,
    };
    hold::run(engine, &target, &job.config, &job.service, false, job.guard).await
}
