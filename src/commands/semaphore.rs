//! `lockrun semaphore --limit N PREFIX -- COMMAND`: run COMMAND in one of N
//! slots.

use crate::backend::registry::Pick;
use crate::backend::{Backend, Engine, Target};
use crate::cli::SemaphoreArgs;
use crate::config::{self, Env, HoldConfig};
use crate::error::Failure;
use crate::exit::Exit;
use crate::hold;

pub struct Job {
    prefix: String,
    limit: u32,
    config: HoldConfig,
    service: hold::Service,
    /// The first round's guard, forked before the runtime started.
    guard: Option<crate::child::Forked>,
    /// `--replace`: take it from its holder first.
    replace: bool,
    /// `--clock-rate-error`, for `--replace`'s wait on another host's holder.
    rate: crate::clock::Ppm,
}

impl Job {
    /// Forks the guard now, before the runtime starts (see
    /// [`hold::fork_guard`]).
    pub fn fork_guard(&mut self, lends: bool) {
        self.guard = hold::fork_guard(&self.config, &self.service, lends);
    }

    /// Checks, before the lock is sought, what the hold will need beside
    /// the engine (the agent of `--register-service`).
    pub async fn reach(&self) -> Result<(), Failure> {
        self.service.reach().await
    }

    /// `--timeout` bounds `--replace`'s wait and the lock's together: what
    /// the first took, the second has not.
    pub fn spend(&mut self, spent: std::time::Duration) {
        self.config.waiting = self.config.waiting.less(spent);
    }

    /// What `--replace` takes from its holder first, by when (the deadline
    /// of `--timeout`), and our `--value`, which the replaced holder's loss
    /// line shows; `None` without `--replace`.
    pub fn replacing(&self) -> Option<super::holders::Replacing> {
        self.replace.then(|| super::holders::Replacing {
            target: Target::Slot {
                prefix: self.prefix.clone(),
                limit: self.limit,
            },
            deadline: self.config.deadline().deadline(),
            value: self.config.value.clone(),
            rate: self.rate,
            conflict_exit_code: self.config.conflict_exit_code,
        })
    }
}

/// The job, and the plan backend `B`'s rules made for its engine.
pub fn prepare<B: Backend>(
    pick: &Pick<B>,
    args: SemaphoreArgs,
    env: &dyn Env,
) -> Result<(Job, B::Plan), Failure> {
    // `consul lock` strips a leading slash; we refuse it like any bad key,
    // but a trailing slash on a prefix is harmless and common.
    let prefix = args
        .prefix
        .strip_suffix('/')
        .unwrap_or(&args.prefix)
        .to_string();
    let (config, plan) = config::hold(
        pick,
        config::SEMAPHORE,
        &prefix,
        &args.session,
        &args.wait,
        &args.child,
        env,
    )?;
    if let Some(warning) = crate::ops::Warning::from_args(&args.ops)? {
        warning.check(config.budget.as_ref())?;
    }
    // Last: a bad --status-addr is refused like any flag, but binding it is
    // the one check that holds something.
    let ops = crate::ops::Ops::prepare(&args.ops, B::NAME, &prefix, env)?;
    let service = hold::Service::new(&args.service)?.with_ops(ops);
    let job = Job {
        prefix,
        // --limit is bounded to 10 000 by the command line.
        limit: u32::try_from(args.limit).expect("--limit is at most 10000"),
        config,
        service,
        guard: None,
        replace: args.wait.replace,
        rate: args.session.clock_rate_error,
    };
    Ok((job, plan))
}

pub async fn run<E: Engine>(engine: &E, job: Job) -> Result<Exit, Failure> {
    let target = Target::Slot {
        prefix: job.prefix,
        limit: job.limit,
    };
    hold::run(engine, &target, &job.config, &job.service, false, job.guard).await
}
