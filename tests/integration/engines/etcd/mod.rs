//! etcd: the real etcd the suite starts (the `etcd` on PATH, or etcd 3.5 in
//! `versions`' re-run, which runs every test whose path names etcd).

// A real etcd for the etcd tests, shared by the test binary.
pub mod support;
// `--backend etcd` end to end beside etcdctl.
mod cli;
// The `etcd` backend's engine through the backend seam.
mod engine;
// The clock-rate bound, measured with libfaketime against a real etcd.
mod clock_rate;
