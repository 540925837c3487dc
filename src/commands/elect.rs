//! `lockrun elect KEY -- COMMAND`: run COMMAND while leading.

use crate::cli::ElectArgs;
use crate::config::{self, Env, HoldConfig};
use crate::consul::Client;
use crate::error::Failure;
use crate::exit::Exit;

use super::hold::{self, Target};

pub struct Job {
    key: String,
    campaign: bool,
    config: HoldConfig,
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
    Ok(Job {
        key: args.key,
        campaign: args.campaign,
        config,
    })
}

pub async fn run(client: &Client, job: Job) -> Result<Exit, Failure> {
    hold::run(
        client,
        Target::Leader { key: &job.key },
        &job.config,
        job.campaign,
    )
    .await
}
