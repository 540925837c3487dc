//! The rules of Consul's blocking queries, in one small tested place: what
//! index to send next, how long a long poll may take, and a rate limit so a
//! flapping key cannot turn a watch into a hot loop.

use std::time::Duration;
use tokio::time::Instant;

/// The `index` to send with the next blocking read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryIndex(u64);

impl QueryIndex {
    /// Ask for an immediate answer.
    pub const NONE: QueryIndex = QueryIndex(0);

    pub fn get(self) -> u64 {
        self.0
    }

    /// The index to send after an answer carrying `returned`. An index that
    /// went backwards (a snapshot restore, an agent restarted with no state)
    /// means start over with an immediate read; and 0 is never sent after a
    /// read, since Consul would answer at once forever (1 is always safe).
    pub fn after(self, returned: u64) -> QueryIndex {
        if returned < self.0 {
            QueryIndex(0)
        } else {
            QueryIndex(returned.max(1))
        }
    }
}

/// How long one request of a blocking read may take before we call it hung:
/// the server may add up to wait/16 of jitter, and we allow for slow links.
pub fn request_timeout(wait: Duration) -> Duration {
    wait + wait / 16 + Duration::from_secs(5)
}

/// `wait` as Consul's Go parser reads it, in whole milliseconds; below 1 ms
/// it would mean "the 5-minute default", so we send at least 1 ms.
pub fn wait_param(wait: Duration) -> String {
    format!("{}ms", wait.as_millis().max(1))
}

/// A token bucket: bursts pass, a sustained stream of answers is spaced out.
#[derive(Debug)]
pub struct RateLimit {
    tokens: f64,
    burst: f64,
    per_second: f64,
    last: Instant,
}

impl RateLimit {
    pub fn new(burst: u32, per_second: u32) -> RateLimit {
        RateLimit {
            tokens: f64::from(burst),
            burst: f64::from(burst),
            per_second: f64::from(per_second),
            last: Instant::now(),
        }
    }

    /// Waits, if needed, until one more request is allowed.
    pub async fn acquire(&mut self) {
        let now = Instant::now();
        let refill = now.duration_since(self.last).as_secs_f64() * self.per_second;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.last = now;
        if self.tokens < 1.0 {
            let missing = 1.0 - self.tokens;
            tokio::time::sleep(Duration::from_secs_f64(missing / self.per_second)).await;
            self.last = Instant::now();
            self.tokens = 0.0;
        } else {
            self.tokens -= 1.0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_resets_when_it_goes_backwards() {
        let i = QueryIndex::NONE.after(42);
        assert_eq!(i.get(), 42);
        assert_eq!(i.after(7), QueryIndex::NONE);
    }

    #[test]
    fn index_is_never_zero_after_a_read() {
        assert_eq!(QueryIndex::NONE.after(0).get(), 1);
    }

    #[test]
    fn long_poll_timeout_covers_jitter() {
        let t = request_timeout(Duration::from_secs(160));
        assert!(t > Duration::from_secs(170));
    }

    #[test]
    fn wait_is_whole_milliseconds_and_never_zero() {
        assert_eq!(wait_param(Duration::from_secs(15)), "15000ms");
        assert_eq!(wait_param(Duration::from_micros(10)), "1ms");
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limit_spaces_a_sustained_stream() {
        let mut limit = RateLimit::new(2, 10);
        let start = Instant::now();
        for _ in 0..12 {
            limit.acquire().await;
        }
        // Two pass at once, the other ten at 10 per second.
        assert!(start.elapsed() >= Duration::from_millis(990));
    }
}
