//! The conformance suite: each scenario written once and run on every
//! engine of `places::engines!`, as tests named `SCENARIO::on_ENGINE` (or
//! `SCENARIO::MODE::on_ENGINE`).

// Locks and semaphores: exclusion, statuses, release, stop, list, --replace.
pub mod locks;
// The job is the command's whole tree: daemons, fork loops, hooks' helpers.
pub mod contain;
// Shared locks: readers together, a writer alone, with each engine's own tools.
mod shared_locks;
// A run's life: statuses, signals, a loss, leader and release, the endpoint.
mod lifecycle;
// lockrun and each engine's own tool exclude each other both ways.
mod interop;
// Signals: forwarded to the job, bounded by --kill-timeout, while waiting too.
mod signals;
// leader and release as scripts use them: --wait, --watch, -q.
mod leader;
// Under systemd and cron: --notify, --min-hold.
pub mod service;
