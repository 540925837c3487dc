//! `lockrun semaphore --limit N PREFIX -- COMMAND`: run COMMAND in one of N
//! slots.

use crate::backend::consul::Client;
use crate::cli::SemaphoreArgs;
use crate::config::{self, Env, HoldConfig};
use crate::error::Failure;
use crate::exit::Exit;

use super::hold::{self, Target};

pub struct Job {
    prefix: String,
    limit: u64,
    config: HoldConfig,
    service: hold::Service,
}

pub fn prepare(args: SemaphoreArgs, env: &dyn Env) -> Result<Job, Failure> {
    // `consul lock` strips a leading slash; we refuse it like any bad key,
    // but a trailing slash on a prefix is harmless and common.
    let prefix = args
        .prefix
        .strip_suffix('/')
        .unwrap_or(&args.prefix)
        .to_string();
    let config = config::hold(
        config::SEMAPHORE,
        &prefix,
        &args.session,
        &args.wait,
        &args.child,
        env,
    )?;
    let service = hold::Service::new(&args.service)?;
    Ok(Job {
        prefix,
        limit: args.limit,
        config,
        service,
    })
}

pub async fn run(client: &Client, job: Job) -> Result<Exit, Failure> {
    let target = Target::Semaphore {
        prefix: &job.prefix,
        limit: job.limit,
    };
    hold::run(client, target, &job.config, &job.service, false).await
}
