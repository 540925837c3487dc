//! Riding out an engine's blips within the user's patience: one loop for
//! every backend whose requests may be sent again.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::{EngineError, Wait};

/// How long a one-off run ([`Wait::Once`]) rides out a blip by default.
pub const ONCE_GRACE: Duration = Duration::from_millis(500);

/// Runs `step`, a request that may be sent again, again after a failure
/// that may pass ([`EngineError::is_transient`]): for as long as `wait`
/// allows, and for a one-off run for as long as `once` says for the error
/// at hand, counted from the first attempt. Pauses start at `first_pause`
/// and double up to a second.
pub async fn riding_out<T, E, F, Fut>(
    wait: Wait,
    what: &str,
    first_pause: Duration,
    once: impl Fn(&E) -> Duration,
    mut step: F,
) -> Result<T, E>
where
    E: EngineError,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let started = Instant::now();
    let mut pause = first_pause;
    loop {
        let e = match step().await {
            Ok(done) => return Ok(done),
            Err(e) if e.is_transient() => e,
            Err(e) => return Err(e),
        };
        let until = match wait {
            Wait::Forever => None,
            Wait::Until(at) => Some(at),
            Wait::Once => Some(started + once(&e)),
        };
        if until.is_some_and(|at| Instant::now() + pause >= at) {
            return Err(e);
        }
        tracing::info!("{what}: {e}; retrying in {pause:?}");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}
