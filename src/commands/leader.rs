//! `lockrun leader KEY`: who holds it, for shell scripts and humans.

use crate::backend::{Backend, Wait};
use crate::cli::LeaderArgs;
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

pub fn prepare<B: Backend>(args: LeaderArgs) -> Result<Job, Failure> {
    let wait = args.wait.then(|| match args.timeout {
        Some(timeout) => Wait::Until(tokio::time::Instant::now() + timeout),
        None => Wait::Forever,
    });
    let job = Job { args, wait };
    B::check_key(job.key())?;
    Ok(job)
}
