//! `lockrun release KEY`: the operator's lever.

use crate::backend::registry::Pick;
use crate::backend::Backend;
use crate::cli::ReleaseArgs;
use crate::error::Failure;

pub struct Job {
    pub key: String,
    pub args: ReleaseArgs,
}

pub fn prepare<B: Backend>(pick: &Pick<B>, args: ReleaseArgs) -> Result<Job, Failure> {
    let key = args.key.strip_suffix('/').unwrap_or(&args.key).to_string();
    B::check_key(&key)?;
    B::release_rules((pick.release)(&args.backend))?;
    // A tree left running by a killed lockrun and guard goes first.
    crate::child::kill_stale_jobs();
    Ok(Job { key, args })
}
