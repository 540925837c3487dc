//! Consul: the emulator or a real agent (`support`), real agents and their
//! versions, and the tests that run on Consul alone. `versions` re-runs
//! every test whose path names Consul against real 1.6.2 and 1.15.10
//! agents, but for those that need the emulator itself (`emulator_faults`,
//! `blips`, `transcript`) or start agents of their own (`real`, `catalog`).

// Picks the Consul under test and offers a small synchronous HTTP client.
pub mod support;
// Real Consul agents and clusters from the project's binaries.
pub mod real;
// Facts from CONSUL_API.md, checked over HTTP against the Consul under test.
mod api_facts;
// Replays the recorded Consul 1.10 transcript against the emulator.
mod transcript;
// The emulator's fault injection (emulator only).
mod emulator_faults;
// One blip at any step of a run costs time, not the run (emulator only).
mod blips;
// A Consul token that sees part of a semaphore cannot say there is no holder.
mod partial_views;
// `--register-service`: the holder in a real Consul agent's catalog and DNS.
mod catalog;
// `lockrun elect` end to end.
mod elect;
// lockrun's waiters queue for a leader key.
mod queue;
// `lockrun semaphore` end to end.
mod semaphore;
// `lockrun leader` and `lockrun release`.
mod leader;
// Ctrl-Z, `fg`, `bg` and `kill %1` at an interactive bash on a pty.
mod job_control;
// Under systemd: the watchdog and a frozen lease, the unit, the journal.
mod service;
// The safety model under faults: partitions, restarts, kills, churn.
mod safety;
// lockrun over TLS: CA file and directory, server name, client certificates.
pub mod tls;
