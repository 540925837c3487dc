//! What the emulator saw: a request log for failure messages and counters
//! for tests that assert how lockrun used the API.

use std::collections::{HashMap, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The kind of request, as the counters group them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    AgentSelf,
    StatusLeader,
    SessionCreate,
    SessionDestroy,
    SessionRenew,
    SessionInfo,
    SessionList,
    SessionNode,
    KvGet,
    KvPut,
    KvDelete,
    /// `PUT /v1/txn`.
    Txn,
    /// Anything else (unknown paths, wrong methods on unknown paths).
    Other,
    /// Every request.
    Total,
}

/// One request as the emulator received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedRequest {
    pub method: String,
    /// Path and query exactly as received (still percent-encoded).
    pub path: String,
    pub endpoint: Endpoint,
    /// When it arrived, from the emulator's start.
    pub at: Duration,
    /// The status sent, or `None` while unanswered, when it hung in a
    /// partition or when its connection was dropped.
    pub status: Option<u16>,
    /// Its connection was closed without an answer.
    pub dropped: bool,
    /// Time from arrival to the answer (or the drop).
    pub elapsed: Option<Duration>,
}

/// Oldest entries go once the log holds this many; long soak tests must not
/// grow it without bound.
const LOG_CAPACITY: usize = 100_000;

#[derive(Default)]
struct Inner {
    log: VecDeque<LoggedRequest>,
    /// Sequence number of `log[0]`.
    first_seq: u64,
    counts: HashMap<Endpoint, u64>,
    writes: u64,
}

pub struct Recorder {
    started: Instant,
    inner: Mutex<Inner>,
    changed: Condvar,
}

impl Recorder {
    pub fn new(started: Instant) -> Recorder {
        Recorder {
            started,
            inner: Mutex::new(Inner::default()),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Logs an arrival and returns its sequence number.
    pub fn arrive(&self, method: &str, path: &str, endpoint: Endpoint) -> u64 {
        let mut inner = self.lock();
        *inner.counts.entry(endpoint).or_default() += 1;
        *inner.counts.entry(Endpoint::Total).or_default() += 1;
        if inner.log.len() == LOG_CAPACITY {
            inner.log.pop_front();
            inner.first_seq += 1;
        }
        inner.log.push_back(LoggedRequest {
            method: method.to_string(),
            path: path.to_string(),
            endpoint,
            at: self.started.elapsed(),
            status: None,
            dropped: false,
            elapsed: None,
        });
        let seq = inner.first_seq + inner.log.len() as u64 - 1;
        drop(inner);
        self.changed.notify_all();
        seq
    }

    pub fn finish(&self, seq: u64, status: Option<u16>, dropped: bool) {
        let mut inner = self.lock();
        let now = self.started.elapsed();
        if let Some(i) = seq.checked_sub(inner.first_seq) {
            if let Some(entry) = inner.log.get_mut(i as usize) {
                entry.status = status;
                entry.dropped = dropped;
                entry.elapsed = Some(now.saturating_sub(entry.at));
            }
        }
        drop(inner);
        self.changed.notify_all();
    }

    pub fn count_write(&self) {
        self.lock().writes += 1;
    }

    pub fn log(&self) -> Vec<LoggedRequest> {
        self.lock().log.iter().cloned().collect()
    }

    pub fn count(&self, endpoint: Endpoint) -> u64 {
        self.lock().counts.get(&endpoint).copied().unwrap_or(0)
    }

    pub fn writes(&self) -> u64 {
        self.lock().writes
    }

    pub fn reset_counters(&self) {
        let mut inner = self.lock();
        inner.counts.clear();
        inner.writes = 0;
    }

    /// Waits until some logged request satisfies `pred`, or `timeout`.
    pub fn wait_for(
        &self,
        timeout: Duration,
        pred: impl Fn(&LoggedRequest) -> bool,
    ) -> Option<LoggedRequest> {
        let deadline = Instant::now() + timeout;
        let mut inner = self.lock();
        loop {
            if let Some(hit) = inner.log.iter().find(|r| pred(r)) {
                return Some(hit.clone());
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            inner = self
                .changed
                .wait_timeout(inner, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}
