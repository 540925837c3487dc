//! PostgreSQL: a throwaway cluster the suite starts, beside psql.

// A throwaway PostgreSQL for the postgres tests, shared by the test binary.
pub mod support;
// `--backend postgres` end to end beside psql.
mod cli;
// `--backend postgres` over TLS: libpq's sslmodes against a server with ssl=on.
mod tls;
// Faults under `--backend postgres`: restart, a stopped holder, a partition.
mod faults;
// PostgreSQL behind poolers and relays, unreachable, restarted, in a host list.
mod hostile;
