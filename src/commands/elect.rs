//! `lockrun elect KEY -- COMMAND`: run COMMAND while leading.

use crate::backend::consul::SessionSpec;
use crate::backend::{Engine, Target};
use crate::cli::{BackendName, ElectArgs};
use crate::config::{self, Env, HoldConfig};
use crate::error::Failure;
use crate::exit::Exit;
use crate::hold;

pub struct Job {
    key: String,
    campaign: bool,
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

pub fn prepare(args: ElectArgs, backend: BackendName, env: &dyn Env) -> Result<Job, Failure> {
    let (config, session) = config::hold(
        config::LEADER,
        backend,
        &args.key,
        &args.session,
        &args.wait,
        &args.child,
        env,
    )?;
    // Last: a bad --status-addr is refused like any flag, but binding it is
    // the one check that holds something.
    let ops = crate::ops::Ops::prepare(&args.ops, backend.name(), &args.key)?;
    let service = hold::Service::new(&args.service)?.with_ops(ops);
    Ok(Job {
        key: args.key,
        campaign: args.campaign,
        config,
        session,
        ttl: args.session.ttl,
        service,
        guard: None,
    })
}

pub async fn run<E: Engine>(engine: &E, job: Job) -> Result<Exit, Failure> {
    let target = Target::Lock { key: job.key };
    hold::run(
        engine,
        &target,
        &job.config,
        &job.service,
        job.campaign,
        job.guard,
    )
    .await
}
