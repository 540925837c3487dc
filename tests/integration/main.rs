//! lockrun's one integration test binary: every area is a module here so the
//! suite links once. Each test gets its own Consul (the emulator) or, with
//! `LOCKRUN_TEST_CONSUL_ADDR=host:port`, a unique key prefix on a real agent.

// Picks the Consul under test and offers a small synchronous HTTP client.
mod consul;
// Facts from CONSUL_API.md, checked over HTTP against the Consul under test.
mod conformance;
// Replays the recorded Consul 1.10 transcript against the emulator.
mod transcript;
// The emulator's fault injection (emulator only).
mod emulator_faults;
