//! ZooKeeper: a real server the suite starts (ensembles for faults), beside
//! Curator and kazoo (their rival programs are in `rivals/`).

// A real ZooKeeper for the zookeeper tests: one shared server, ensembles for faults.
pub mod support;
// `--backend zookeeper` end to end beside Curator and kazoo, and its faults.
pub mod cli;
// `--backend zookeeper` over TLS: a secure client port, client certificates.
mod tls;
