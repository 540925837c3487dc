//! Fault injection: what a request meets when the test has broken the
//! "network" or the "cluster".
//!
//! Faults are checked when a request arrives, again just before its answer
//! leaves (a partition that starts while we work swallows the answer, as a
//! real one would, even though the write was applied), and continuously
//! while a blocking query waits.

use crate::http::{Answer, Outcome};
use std::time::Duration;
use tokio::sync::watch;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Requests get no answer and are not applied; server-side time (TTL
    /// timers) runs on.
    pub partitioned: bool,
    /// Server RPCs fail with `No cluster leader`; TTL timers stop until a
    /// leader is back, which re-arms them all.
    pub no_leader: bool,
    /// The connection is closed without an answer.
    pub drop_connections: bool,
    /// Added before each request is handled.
    pub latency: Duration,
}

pub const NO_LEADER: &str = "No cluster leader";

impl Faults {
    /// The network faults, which hit every request whatever it is.
    pub fn network(&self) -> Option<Outcome> {
        if self.drop_connections {
            Some(Outcome::Drop)
        } else if self.partitioned {
            Some(Outcome::Hang)
        } else {
            None
        }
    }
}

/// Resolves once a fault appears that ends an in-flight blocking query:
/// a network fault, or a lost leader for a query that needs one. Consul's
/// blocking queries are served by the leader, so losing it ends them with
/// the same error a new request would get.
pub async fn interrupts(mut faults: watch::Receiver<Faults>, needs_leader: bool) -> Outcome {
    loop {
        {
            let f = faults.borrow_and_update();
            if let Some(outcome) = f.network() {
                return outcome;
            }
            if needs_leader && f.no_leader {
                return Outcome::Answer(Answer::text(500, NO_LEADER));
            }
        }
        if faults.changed().await.is_err() {
            // The emulator is shutting down; its runtime drops us soon.
            std::future::pending::<()>().await;
        }
    }
}

/// What a blip does to the one request it hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlipKind {
    /// The connection is closed without an answer (a reset); the request is
    /// not applied.
    Drop,
    /// 500 `No cluster leader`, as during an election; not applied.
    NoLeader,
}

/// A one-off fault: the `nth` request (from 1) whose method is `method` and
/// whose request target (path and query, as sent) contains `needle`.
#[derive(Clone, Debug)]
pub struct Blip {
    pub method: &'static str,
    pub needle: String,
    pub nth: u32,
    pub kind: BlipKind,
}

impl Blip {
    /// Counts a request against the blip; true when this one is hit.
    pub fn hits(&mut self, method: &str, target: &str) -> bool {
        if method != self.method || !target.contains(&self.needle) {
            return false;
        }
        self.nth = self.nth.saturating_sub(1);
        self.nth == 0
    }

    pub fn outcome(&self) -> Outcome {
        match self.kind {
            BlipKind::Drop => Outcome::Drop,
            BlipKind::NoLeader => Outcome::Answer(Answer::text(500, NO_LEADER)),
        }
    }
}
