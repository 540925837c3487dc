//! lockrun's one integration test binary: every area is a module here so the
//! suite links once. Each test gets its own Consul (the emulator) or, with
//! `LOCKRUN_TEST_CONSUL_ADDR=host:port`, a unique key prefix on a real agent;
//! `versions` re-runs the Consul part so against real 1.6.2 and 1.15.10
//! agents, and the etcd part against etcd 3.5.

// Picks the Consul under test and offers a small synchronous HTTP client.
mod consul;
// Real Consul agents and clusters from the project's binaries.
mod real_consul;
// The Consul and etcd parts again, against each real engine version.
mod versions;
// Facts from CONSUL_API.md, checked over HTTP against the Consul under test.
mod conformance;
// Replays the recorded Consul 1.10 transcript against the emulator.
mod transcript;
// The emulator's fault injection (emulator only).
mod emulator_faults;
// The child layer: guard, process group, stop ladder, parent death, terminal.
mod child;
// Process helpers: liveness, condition waits, readiness files, cleanup guard.
mod procs;
// Man pages and completions match the clap definition; help examples parse.
mod docs;
mod explain;
// Runs the real binary: command builder, background runs, failure dumps.
mod support;
// Where a CLI test's locks live (Consul, etcd, PostgreSQL, local) and its lockrun there.
mod places;
// A TCP relay a test can freeze: a partition for one lockrun alone.
mod link;
// `lockrun elect` end to end.
mod elect;
// lockrun's waiters queue for a leader key.
mod queue;
// `lockrun semaphore` end to end.
mod semaphore;
// `lockrun leader` and `lockrun release`.
mod leader;
// Signals sent to lockrun while the child runs.
mod signals;
// Ctrl-Z, `fg`, `bg` and `kill %1` at an interactive bash on a pty.
mod job_control;
// Under systemd and cron: the notify protocol, --min-hold.
mod service;
// The safety model under faults: partitions, restarts, kills, churn.
mod safety;
// One blip at any step of a run costs time, not the run (emulator only).
mod blips;
// Every bad input: one line, the documented status, nothing written.
mod errors;
// lockrun over TLS: CA file and directory, server name, client certificates.
mod tls;
// `--backend local` end to end, beside real flock(1).
mod local_cli;
// elect --priority: preferred standbys.
mod priority;
// The local lock directory against another user's links, FIFOs and files.
mod hostile_local;
// The same scenarios on every backend.
mod backends;

mod contain;
// The clock-rate bound, measured with libfaketime against a real etcd.
mod clock_rate;
// `--backend etcd` end to end beside etcdctl.
mod etcd_cli;
// The `local` backend's engine through the backend seam.
mod local_engine;
// A real etcd for the etcd tests, shared by the test binary.
mod etcd_support;
// A throwaway PostgreSQL for the postgres tests, shared by the test binary.
mod pg_support;
// A real ZooKeeper for the zookeeper tests: one shared server, ensembles for faults.
mod zk_support;
// `--backend zookeeper` end to end beside Curator and kazoo, and its faults.
mod zk_cli;
// `--backend zookeeper` over TLS: a secure client port, client certificates.
mod zk_tls;
// `--backend postgres` end to end beside psql.
mod postgres_cli;
// `--backend postgres` over TLS: libpq's sslmodes against a server with ssl=on.
mod postgres_tls;
// Faults under `--backend postgres`: restart, a stopped holder, a partition.
mod postgres_faults;
// PostgreSQL behind poolers and relays, unreachable, restarted, in a host list.
mod postgres_hostile;
// The `etcd` backend's engine against a real etcd.
mod etcd_engine;
// Answers true where production differs from the lab: ACLs, keys, empty settings.
mod answers;
// A Consul token that sees part of a semaphore cannot say there is no holder.
mod partial_views;
// Faults in real etcd and Consul clusters: members and agents stopped or
// killed, leaders killed, quorum lost.
mod clusters;
// What operators wire around a holder: the status endpoint, hooks, `lockrun status`.
mod ops;
// `--register-service`: the holder in a real Consul agent's catalog and DNS.
mod catalog;
// Every shell example in the README and docs/, run on the engine it names.
mod doc_examples;
// Shared locks: readers together, a writer alone, with each engine's own tools.
mod shared;
