//! `lockrun leader KEY`: who holds it, for shell scripts and humans.

use crate::backend::consul::path;
use crate::backend::Wait;
use crate::cli::{BackendName, LeaderArgs};
use crate::error::Failure;

pub struct Job {
    pub args: LeaderArgs,
    /// How long `--wait` waits for a holder (`--timeout`, from now); `None`
    /// without `--wait`.
    pub wait: Option<Wait>,
}

impl Job {
    /// KEY without a trailing slash, which a semaphore prefix may carry.
    pub fn key(&self) -> &str {
        self.args.key.strip_suffix('/').unwrap_or(&self.args.key)
    }
}

pub fn prepare(args: LeaderArgs, backend: BackendName) -> Result<Job, Failure> {
    let wait = args.wait.then(|| match args.timeout {
        Some(timeout) => Wait::Until(tokio::time::Instant::now() + timeout),
        None => Wait::Forever,
    });
    let job = Job { args, wait };
    match backend {
        BackendName::Consul => path::check_key(job.key()).map_err(Failure::Usage)?,
        BackendName::Local => crate::backend::local::dir::check_key(job.key())
            .map_err(|e| Failure::Usage(e.to_string()))?,
        BackendName::Etcd => crate::backend::etcd::check_key(job.key()).map_err(Failure::Usage)?,
        BackendName::Postgres => {
            crate::backend::postgres::check_key(job.key()).map_err(Failure::Usage)?
        }
    }
    Ok(job)
}
