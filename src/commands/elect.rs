//! `lockrun elect KEY -- COMMAND`: run COMMAND while leading.

use crate::backend::consul::Client;
use crate::cli::ElectArgs;
use crate::config::{self, Env, HoldConfig};
use crate::error::Failure;
use crate::exit::Exit;

use super::hold::{self, Target};

pub struct Job {
    key: String,
    campaign: bool,
    config: HoldConfig,
    service: hold::Service,
}

pub fn prepare(args: ElectArgs, env: &dyn Env) -> Result<Job, Failure> {
    let config = config::hold(
        config::LEADER,
        &args.key,
        &args.session,
        &args.wait,
        &args.child,
        env,
    )?;
    let service = hold::Service::new(&args.service)?;
    Ok(Job {
        key: args.key,
        campaign: args.campaign,
        config,
        service,
    })
}

pub async fn run(client: &Client, job: Job) -> Result<Exit, Failure> {
    hold::run(
        client,
        Target::Leader { key: &job.key },
        &job.config,
        &job.service,
        job.campaign,
    )
    .await
}
