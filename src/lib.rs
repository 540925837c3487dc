//! lockrun runs a command only while it holds a leader lock or a
//! semaphore slot (on Consul, or on one host with `flock(2)`), and stops it the moment that can no longer be guaranteed.
//!
//! This library exists so that `main.rs` stays a doorway and the tests can
//! reach the pieces; it is not a public API. A module whose own first lines
//! link to its items is summed up below in a plain comment: rustdoc would
//! read those links from here, where they do not resolve.
#![doc(hidden)]

// The seam between lockrun and its engines, and the engines behind it.
pub mod backend;
// The child process: a guard leading its own process group, the stop ladder.
pub mod child;
/// The command line: one clap definition feeds help, man pages and completions.
pub mod cli;
/// CLOCK_BOOTTIME, which keeps counting while the host is suspended.
pub mod clock;
/// One file per subcommand.
pub mod commands;
// The hold settings every backend shares, validated before any request.
pub mod config;
/// Man pages and completions rendered from the clap definition.
pub mod docs;
/// Durations as flags and variables take them.
pub mod duration;
/// What went wrong, as one line for the user, and which exit status it earns.
pub mod error;
// The exit-status table.
pub mod exit;
// The hold loop shared by `elect` and `semaphore` on every engine.
pub mod hold;
/// This host's name.
pub mod host;
// Job control for an interactive run: the front the shell sees, the worker.
pub mod job;
/// One rule for keys, on every backend.
pub mod key;
// The local countdown: renewal and the deadline that does not wait for the engine.
pub mod lease;
// stderr: the `lockrun:` error line and `-v` lifecycle events.
pub mod logging;
/// systemd's notify protocol: readiness, status, watchdog.
pub mod notify;
pub mod ops;
/// `LOCKRUN_SEQUENCER`, the token naming a holder that `check` and `put`
/// test (below `ops` and `child`, which both write it).
pub mod sequencer;
// Signals lockrun receives and forwards.
pub mod signals;
/// Usage errors: what went wrong and what to type instead.
pub mod usage;

use std::ffi::OsString;
use std::process::ExitCode;

/// The whole program: parse, validate, run, map the outcome to an exit status.
pub fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    // What an armed guard runs on its grant, forked or exec'd.
    child::set_grant_step(backend::grant_in_guard);
    if args.get(1).is_some_and(|a| a == "__guard") {
        return child::guard::main(args.into_iter().skip(2).collect());
    }
    signals::hold_until_handled();
    if let Some(front) = job::split(&args) {
        return front;
    }
    commands::main(args)
}
