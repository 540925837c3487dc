//! `lockrun elect KEY -- COMMAND`: run COMMAND while leading.

use crate::backend::registry::Pick;
use crate::backend::{Backend, Engine, Target};
use crate::cli::ElectArgs;
use crate::config::{self, Env, HoldConfig};
use crate::error::Failure;
use crate::exit::Exit;
use crate::hold;

pub struct Job {
    key: String,
    shared: bool,
    campaign: bool,
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
            target: Target::Lock {
                key: self.key.clone(),
                shared: self.shared,
            },
            deadline: self.config.deadline().deadline(),
            value: self.config.value.clone(),
            rate: self.rate,
            conflict_exit_code: self.config.conflict_exit_code,
        })
    }
}

/// `--replace` on an exclusive lock waits at [`REPLACE`](crate::backend::priority::REPLACE),
/// the level of the record it put before asking the holder (see
/// [`super::holders::replace`]): it defers to nobody, and the writers
/// queued before it, which defer to that record, still do to it.
fn replacing_level(
    priority: crate::backend::priority::Priority,
    args: &ElectArgs,
) -> crate::backend::priority::Priority {
    if args.wait.replace && !args.shared {
        crate::backend::priority::Priority {
            level: crate::backend::priority::REPLACE,
            ..priority
        }
    } else {
        priority
    }
}

/// The job, and the plan backend `B`'s rules made for its engine.
pub fn prepare<B: Backend>(
    pick: &Pick<B>,
    args: ElectArgs,
    env: &dyn Env,
) -> Result<(Job, B::Plan), Failure> {
    // A campaigner is a daemon: it waits for the lock, and for an engine
    // that is down, for ever. One try is a one-off run's, which ends.
    if args.campaign && args.wait.no_wait {
        return Err(Failure::Usage(
            "--campaign waits for the lock for as long as it runs, and --no-wait tries once; drop --no-wait for a daemon, or --campaign for a one-off run".into(),
        ));
    }
    if args.campaign && args.wait.replace {
        return Err(Failure::Usage(
            "--campaign waits its turn as a daemon, and --replace takes the lock from its holder once; drop one of them".into(),
        ));
    }
    let (config, plan) = config::hold(
        pick,
        config::Kind {
            shared: args.shared,
            priority: replacing_level(args.priority()?, &args),
            ..config::LEADER
        },
        &args.key,
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
    let ops = crate::ops::Ops::prepare(&args.ops, B::NAME, &args.key, env)?;
    let service = hold::Service::new(&args.service)?.with_ops(ops);
    let job = Job {
        key: args.key,
        shared: args.shared,
        campaign: args.campaign,
        config,
        service,
        guard: None,
        replace: args.wait.replace,
        rate: args.session.clock_rate_error,
    };
    Ok((job, plan))
}

pub async fn run<E: Engine>(engine: &E, job: Job) -> Result<Exit, Failure> {
    let target = Target::Lock {
        key: job.key,
        shared: job.shared,
    };
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
