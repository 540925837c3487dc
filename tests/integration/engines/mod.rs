//! Each engine's own part of the suite, one folder per backend: its
//! fixture (`support`, where it has one), the tests of what only it has,
//! and its faults. Every test path here names its engine, so
//! `cargo test --test integration ENGINE` runs that engine's part (with the
//! shared scenarios' `conformance::..::on_ENGINE`).

pub mod consul;
pub mod etcd;
pub mod local;
pub mod postgres;
pub mod zookeeper;
