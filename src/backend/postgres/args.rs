//! The PostgreSQL backend's flag.

use clap::Args;

/// Where PostgreSQL is; the flag overrides libpq's environment variables
/// (PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD, PGPASSFILE, PGSSLMODE,
/// PGSSLROOTCERT, PGSSLCERT, PGSSLKEY, PGCONNECT_TIMEOUT,
/// PGTARGETSESSIONATTRS). A password belongs in ~/.pgpass or
/// PGPASSWORD, not on a command line every user can read.
#[derive(Debug, Args)]
#[command(next_help_heading = "PostgreSQL connection")]
pub struct PostgresArgs {
    /// postgres: a postgres:// URL or libpq `key=value` words.
    ///
    /// E.g. postgres://app@db.example:5432/app (else PGHOST, PGPORT, PGUSER,
    /// PGDATABASE; else the local socket). TLS as libpq: sslmode=disable,
    /// prefer (the default), require, verify-ca or verify-full, with
    /// sslrootcert, sslcert and sslkey.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new(), global = true, value_name = "DSN")]
    pub dsn: Option<String>,
}
