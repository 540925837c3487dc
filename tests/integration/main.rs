//! lockrun's one integration test binary: every area is a module here so the
//! suite links once. Each test gets its own Consul (the emulator) or, with
//! `LOCKRUN_TEST_CONSUL_ADDR=host:port`, a unique key prefix on a real agent;
//! `versions` re-runs the Consul part so against real 1.6.2 and 1.15.10
//! agents, and the etcd part against etcd 3.5.

// Each engine's own part: its fixture, what only it has, its faults.
mod engines;
// The same scenarios on every engine.
mod conformance;
// The Consul and etcd parts again, against each real engine version.
mod versions;
// The child layer: guard, process group, stop ladder, parent death, terminal.
mod child;
// Process helpers: liveness, condition waits, readiness files, cleanup guard.
mod procs;
// Man pages and completions match the clap definition; help examples parse.
mod docs;
mod explain;
// Runs the real binary: command builder, background runs, failure dumps.
mod support;
// Where a CLI test's locks live (each engine) and its lockrun there.
mod places;
// A TCP relay a test can freeze: a partition for one lockrun alone.
mod link;
// Every bad input: one line, the documented status, nothing written.
mod errors;
// elect --priority: preferred standbys.
mod priority;
// Answers true where production differs from the lab: ACLs, keys, empty settings.
mod answers;
// Faults in real etcd and Consul clusters: members and agents stopped or
// killed, leaders killed, quorum lost.
mod clusters;
// What operators wire around a holder: the status endpoint, hooks, `lockrun status`.
mod ops;
// Every shell example in the README and docs/, run on the engine it names.
mod doc_examples;
