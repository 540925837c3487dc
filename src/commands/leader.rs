//! `lockrun leader KEY`: who holds it, for shell scripts and humans.

use crate::backend::consul::path;
use crate::cli::{BackendName, LeaderArgs};
use crate::error::Failure;

pub struct Job {
    pub args: LeaderArgs,
}

impl Job {
    /// KEY without a trailing slash, which a semaphore prefix may carry.
    pub fn key(&self) -> &str {
        self.args.key.strip_suffix('/').unwrap_or(&self.args.key)
    }
}

pub fn prepare(args: LeaderArgs, backend: BackendName) -> Result<Job, Failure> {
    let job = Job { args };
    match backend {
        BackendName::Consul => path::check_key(job.key()).map_err(Failure::Usage)?,
        BackendName::Local => crate::backend::local::dir::check_key(job.key())
            .map_err(|e| Failure::Usage(e.to_string()))?,
        BackendName::Etcd => crate::backend::etcd::check_key(job.key()).map_err(Failure::Usage)?,
    }
    Ok(job)
}
