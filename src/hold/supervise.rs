//! The hold-and-run loop that `elect` and `semaphore` share: run the child
//! while the lock is ours, and stop it when it is not. It knows nothing of
//! the engine; the lock's loss arrives as one future.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::launch::Supervised;
use crate::backend::Lost;
use crate::child::ChildExit;
use crate::signals::{Signal, Signals};

/// How the child is asked to stop.
#[derive(Debug, Clone, Copy)]
pub struct StopPolicy {
    pub signal: Signal,
    pub grace: Duration,
    /// The grace period when the engine reports the lock lost: what the
    /// lock-delay leaves, zero without one.
    pub loss_grace: Duration,
}

/// How a hold ended. The child is gone in every case.
#[derive(Debug)]
pub enum Ending {
    /// The child exited: by itself, or after `forwarded`, the last signal
    /// we passed on to it.
    Exited {
        exit: ChildExit,
        forwarded: Option<Signal>,
    },
    /// The lock was lost and we stopped the child.
    Lost(Lost, ChildExit),
    /// The job ran its `--max-time` and we stopped the child.
    TimeUp(ChildExit),
}

/// Why we are stopping the child, once we are.
enum Stopping {
    Lost(Lost),
    TimeUp,
}

enum Event {
    Exited(ChildExit),
    Lost(Lost),
    TimeUp,
    Signal(Signal),
    Warn(Signal),
    GraceOver,
}

/// Signals that ask the child to stop: after forwarding one we give the child
/// the grace period, then SIGKILL. Others (HUP, USR1, USR2) are forwarded
/// and the child decides; daemons reload on them.
pub(super) fn is_shutdown(signal: Signal) -> bool {
    matches!(signal, Signal::Int | Signal::Term | Signal::Quit)
}

/// Runs the child until it exits, stopping it when `lost` says the lock
/// is gone or `time_up` that the job has run its `--max-time`, and passing
/// it the `warnings` (`--warn-signal`) until then.
pub async fn supervise(
    child: &mut impl Supervised,
    signals: &mut Signals,
    lost: impl Future<Output = Lost>,
    time_up: impl Future<Output = ()>,
    warnings: &mut tokio::sync::mpsc::UnboundedReceiver<Signal>,
    policy: StopPolicy,
) -> Ending {
    tokio::pin!(lost);
    tokio::pin!(time_up);
    let mut grace_ends: Option<Instant> = None;
    let mut forwarded = None;
    // Once the lock is lost the child is being stopped; we keep listening
    // for its exit and for signals, so that an INT or TERM from the user
    // still means "now" during the stop ladder.
    let mut gone: Option<Stopping> = None;
    let ending = |gone: Option<Stopping>, exit, forwarded| match gone {
        Some(Stopping::Lost(why)) => Ending::Lost(why, exit),
        Some(Stopping::TimeUp) => Ending::TimeUp(exit),
        None => Ending::Exited { exit, forwarded },
    };
    loop {
        let event = tokio::select! {
            // Order matters when several are ready in one turn: a child that
            // has already exited by itself reports its own status.
            biased;
            exit = child.wait() => Event::Exited(exit),
            why = &mut lost, if !matches!(gone, Some(Stopping::Lost(_))) => Event::Lost(why),
            () = &mut time_up, if gone.is_none() => Event::TimeUp,
            signal = signals.recv() => Event::Signal(signal),
            Some(signal) = warnings.recv(), if gone.is_none() => Event::Warn(signal),
            _ = sleep_until(grace_ends) => Event::GraceOver,
        };
        match event {
            Event::Exited(exit) => return ending(gone, exit, forwarded),
            Event::Lost(why) => {
                let grace = if why.is_verdict() {
                    policy.loss_grace.min(policy.grace)
                } else {
                    policy.grace
                };
                tracing::warn!(
                    "lock lost: {why}; stopping the child ({} grace)",
                    crate::duration::fmt_duration(grace)
                );
                if grace.is_zero() || policy.signal == Signal::Kill {
                    return Ending::Lost(why, child.kill().await);
                }
                child.signal(policy.signal);
                // A grace period already running (the user asked the child
                // to stop, or its time was up) is not extended by the loss.
                let ends = Instant::now() + grace;
                grace_ends = Some(grace_ends.map_or(ends, |at| at.min(ends)));
                gone = Some(Stopping::Lost(why));
            }
            Event::TimeUp => {
                tracing::warn!(
                    target: crate::logging::EVENT,
                    "the job ran its --max-time; stopping the child ({} grace)",
                    crate::duration::fmt_duration(policy.grace)
                );
                gone = Some(Stopping::TimeUp);
                if policy.grace.is_zero() || policy.signal == Signal::Kill {
                    return Ending::TimeUp(child.kill().await);
                }
                child.signal(policy.signal);
                let ends = Instant::now() + policy.grace;
                grace_ends = Some(grace_ends.map_or(ends, |at| at.min(ends)));
            }
            Event::Signal(signal) => {
                tracing::info!("forwarding {signal} to the child");
                child.signal(signal);
                forwarded = Some(signal);
                if is_shutdown(signal) {
                    if grace_ends.is_some() {
                        // A second request to stop means now.
                        return ending(gone, child.kill().await, forwarded);
                    }
                    grace_ends = Some(Instant::now() + policy.grace);
                }
            }
            Event::Warn(signal) => {
                tracing::info!("sending {signal} to the child (--warn-before)");
                child.signal(signal);
            }
            Event::GraceOver => {
                tracing::warn!(
                    "the child outlived --kill-timeout {}; sending SIGKILL",
                    crate::duration::fmt_duration(policy.grace)
                );
                return ending(gone, child.kill().await, forwarded);
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
