//! The lock algorithms, compatible on the wire with Consul's Go API `Lock`
//! and `Semaphore` (so `consul lock` and lockrun exclude each other), and the
//! watches that notice when a held lock stops being ours.

pub mod leader;
pub mod queue;
pub mod semaphore;
pub mod shared;

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::consul::blocking::{QueryIndex, RateLimit};
use crate::backend::consul::kv::Read;
use crate::backend::consul::{ConsulError, SessionId};
use crate::backend::Wait;

/// `LockFlagValue` of Consul's Go API: marks a key as a leader lock.
pub const LOCK_FLAG: u64 = 0x2ddc_cbc0_58a5_0c18;
/// `SemaphoreFlagValue` of Consul's Go API (above i64::MAX).
pub const SEMAPHORE_FLAG: u64 = 0xe0f6_9a2b_aa41_4de0;

/// Why `key` names a lock's own record by its name alone, which `put
/// --sequencer` refuses: a `.lock` segment (a semaphore's record, or
/// `consul lock`'s key), or one of lockrun's queues (`KEY/.lockrun-queue/`,
/// `PREFIX.lockrun-queue/`), where an entry nobody holds would keep the
/// waiters behind it waiting.
pub fn own_record(key: &str) -> Option<String> {
    let segment = key
        .split('/')
        .find(|s| *s == ".lock" || s.ends_with(".lockrun-queue"))?;
    Some(format!(
        "`{key}` lies inside a lock's own records (`{segment}` is a lock's, not data's); write the data under a key with no `{segment}` in it"
    ))
}

/// How long each blocking read waits at most before asking again.
pub const WATCH_WAIT: Duration = Duration::from_secs(60);

/// A lock or slot we hold: what the child is told through its environment.
#[derive(Debug, Clone)]
pub struct Held {
    pub key: String,
    pub session: SessionId,
    /// The fencing number: the key's ModifyIndex at acquisition (for a
    /// semaphore, the record's), which grows with every new holder.
    pub lock_index: u64,
}

/// How long the next blocking read may wait within `patience`, or `None`
/// when waiting is over.
pub fn next_wait(patience: Wait) -> Option<Duration> {
    match patience {
        Wait::Once => None,
        Wait::Forever => Some(WATCH_WAIT),
        Wait::Until(at) => {
            let left = at.saturating_duration_since(Instant::now());
            (!left.is_zero()).then(|| left.min(WATCH_WAIT))
        }
    }
}

/// How acquisition ended without an error.
#[derive(Debug)]
pub enum Acquired<T> {
    Yes(T),
    /// `--no-wait` found it taken, or `--timeout` ran out.
    No {
        holder: Option<String>,
    },
}

/// Why acquisition failed.
#[derive(Debug)]
pub enum AcquireError {
    Consul(ConsulError),
    /// The key exists but was not written by a compatible lock.
    Conflict(String),
    /// The key is the wrong kind for the subcommand (a semaphore's entry
    /// under `elect`): the user named the wrong thing.
    Usage(String),
    /// Consul made a session other than the one we asked for.
    Session(String),
}

impl From<AcquireError> for crate::error::Failure {
    fn from(e: AcquireError) -> crate::error::Failure {
        use crate::error::Failure;
        match e {
            AcquireError::Consul(e) => Failure::Engine(e.to_string()),
            AcquireError::Conflict(m) => Failure::Conflict(m),
            AcquireError::Usage(m) => Failure::Usage(m),
            AcquireError::Session(m) => Failure::Config(m),
        }
    }
}

impl From<ConsulError> for AcquireError {
    fn from(e: ConsulError) -> AcquireError {
        AcquireError::Consul(e)
    }
}

impl std::fmt::Display for AcquireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AcquireError::Consul(e) => e.fmt(f),
            AcquireError::Conflict(why) | AcquireError::Session(why) | AcquireError::Usage(why) => {
                f.write_str(why)
            }
        }
    }
}

impl std::error::Error for AcquireError {}

/// Backoff while a lock-delay keeps a free key unacquirable: short at first,
/// since the delay may be nearly over, never more than a second.
#[derive(Debug)]
pub struct DelayBackoff(Duration);

impl DelayBackoff {
    pub fn new() -> DelayBackoff {
        DelayBackoff(Duration::from_millis(50))
    }

    pub async fn wait(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(Duration::from_secs(1));
    }
}

impl Default for DelayBackoff {
    fn default() -> Self {
        DelayBackoff::new()
    }
}

pub use crate::backend::retry::ONCE_GRACE;

/// Retries of transient failures within the patience the user gave: for
/// ever, until `--timeout`, or [`ONCE_GRACE`] for `--no-wait`.
#[derive(Debug)]
pub struct Retry {
    until: Option<Instant>,
    errors: u32,
}

impl Retry {
    pub fn new(patience: Wait) -> Retry {
        let until = match patience {
            Wait::Once => Some(Instant::now() + ONCE_GRACE),
            Wait::Until(at) => Some(at),
            Wait::Forever => None,
        };
        Retry { until, errors: 0 }
    }

    /// Pauses after `error` and returns `Ok` when it is worth another try;
    /// otherwise the error, named by `step`, for the user.
    pub async fn pause(&mut self, step: &str, error: ConsulError) -> Result<(), ConsulError> {
        if !error.is_transient() {
            return Err(error);
        }
        let pause = Duration::from_millis(100u64 << self.errors.min(4)).min(Duration::from_secs(1));
        if self
            .until
            .is_some_and(|until| Instant::now() + pause >= until)
        {
            return Err(ConsulError::GaveUp {
                step: step.to_string(),
                last: Box::new(error),
            });
        }
        self.errors += 1;
        tracing::info!(
            "{step}: {error}; retrying in {}",
            crate::duration::fmt_duration(pause)
        );
        tokio::time::sleep(pause).await;
        Ok(())
    }

    /// A success: the next failure starts the backoff afresh.
    pub fn succeeded(&mut self) {
        self.errors = 0;
    }
}

/// The loop state of a wait or a watch on Consul: the index to block on,
/// whether the next read should block, the rate limit, and the retry of
/// transient errors. One place, so acquiring and watching cannot disagree
/// on the blocking-query rules.
#[derive(Debug)]
pub struct Waiter {
    index: QueryIndex,
    block: bool,
    retry: Retry,
    rate: RateLimit,
    patience: Wait,
    consistent: bool,
}

impl Waiter {
    /// For acquisition: the first read answers at once. The burst is
    /// larger than a watch's: a semaphore waiter reads several times per
    /// round of releases (each release wakes it, each lost race sends it
    /// back), and a burst of 5 made it sit out 50 ms in the middle of one.
    pub fn acquiring(patience: Wait) -> Waiter {
        Waiter {
            index: QueryIndex::NONE,
            block: false,
            retry: Retry::new(patience),
            rate: RateLimit::new(20, 20),
            patience,
            consistent: false,
        }
    }

    /// For watching a held lock from `index`: every read blocks and is
    /// consistent, and transient errors are retried for ever (the lease, not
    /// the watch, decides when silence means loss).
    pub fn watching(index: QueryIndex) -> Waiter {
        Waiter {
            index,
            block: true,
            retry: Retry::new(Wait::Forever),
            rate: RateLimit::new(5, 20),
            patience: Wait::Forever,
            consistent: true,
        }
    }

    /// The next read, after the rate limit; `None` once patience ran out.
    pub async fn next_read(&mut self) -> Option<Read> {
        let read = if self.block && self.index != QueryIndex::NONE {
            Read {
                index: self.index,
                wait: Some(next_wait(self.patience)?),
                consistent: self.consistent,
                whole: false,
                empty_is_enough: false,
            }
        } else if self.block && matches!(self.patience, Wait::Once) {
            return None;
        } else {
            Read {
                consistent: self.consistent,
                ..Read::now()
            }
        };
        self.rate.acquire().await;
        Some(read)
    }

    /// Takes a read's result: the value, or `None` after pausing on a
    /// transient error (read again), or the error when it is a verdict or
    /// waiting is not allowed.
    pub async fn answer<T>(
        &mut self,
        what: &str,
        result: Result<(T, u64), ConsulError>,
    ) -> Result<Option<T>, ConsulError> {
        match result {
            Ok((value, returned)) => {
                self.retry.succeeded();
                self.index = self.index.after(returned);
                Ok(Some(value))
            }
            Err(e) => {
                self.retry.pause(what, e).await?;
                // The connection may have been cut mid-wait, or the agent
                // restarted with a lower index: read afresh.
                self.index = QueryIndex::NONE;
                Ok(None)
            }
        }
    }

    /// Takes a write's (or an extra read's) failure: `Ok` after pausing on a
    /// transient error, when the caller should start over with a fresh
    /// read, or the error itself.
    pub async fn retry(&mut self, what: &str, error: ConsulError) -> Result<(), ConsulError> {
        let result: Result<((), u64), ConsulError> = Err(error);
        self.answer(what, result).await.map(|_| self.block = false)
    }

    /// The next read blocks until the index moves.
    pub fn block(&mut self) {
        self.block = true;
    }

    /// The next read answers at once.
    pub fn read_now(&mut self) {
        self.block = false;
    }

    /// Starts over from an index read outside the loop.
    pub fn reset(&mut self, returned: u64) {
        self.index = QueryIndex::NONE.after(returned);
    }

    pub fn index(&self) -> QueryIndex {
        self.index
    }
}
