//! Where PostgreSQL is and how to talk to it: `--dsn` (a `postgres://` URL
//! or libpq's `key=value` words) over the libpq variables `PGHOST`,
//! `PGPORT`, `PGUSER`, `PGDATABASE`, `PGPASSWORD` and `PGSSLMODE`, as `psql`
//! reads them. Everything is checked here, before the first connection.
//! The password is never printed: `tokio_postgres::Config` redacts it, and
//! no message of ours names it.

use std::path::Path;
use std::str::FromStr;

use tokio_postgres::config::Host;

/// libpq's variables we read, in the order we check them.
pub const VARIABLES: &[&str] = &[
    "PGHOST",
    "PGPORT",
    "PGUSER",
    "PGDATABASE",
    "PGPASSWORD",
    "PGSSLMODE",
];

/// Debian's (and most distributions') socket directory, libpq's default
/// host when it exists.
const DEFAULT_SOCKET_DIR: &str = "/var/run/postgresql";

/// Why an `sslmode` is refused: we speak plain TCP and unix sockets only
/// for now, and a mode that demands TLS must not silently get none.
fn refuse_tls(mode: &str, source: &str) -> Result<(), String> {
    match mode {
        "disable" | "allow" | "prefer" => Ok(()),
        "require" | "verify-ca" | "verify-full" => Err(format!(
            "sslmode `{mode}` in {source} asks for TLS, which lockrun's postgres backend does not speak yet; connect over a unix socket or a trusted network with sslmode=disable"
        )),
        other => Err(format!(
            "sslmode `{other}` in {source} is not one of disable, allow, prefer, require, verify-ca, verify-full"
        )),
    }
}

/// The `sslmode` a DSN names, if any, in either form.
fn dsn_sslmode(dsn: &str) -> Option<String> {
    let rest = dsn.split("sslmode=").nth(1)?;
    let end = rest.find(['&', ' ', '#']).unwrap_or(rest.len());
    Some(rest[..end].trim_matches('\'').to_string())
}

/// The connection settings from `dsn` (the flag) over the environment
/// `env` looks up; the error is one line saying what to fix.
pub fn resolve(
    dsn: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<tokio_postgres::Config, String> {
    for name in VARIABLES {
        if env(name).is_some_and(|v| v.is_empty()) {
            return Err(format!("{name} is set but empty; unset it or give a value"));
        }
    }
    let mut config = match dsn {
        None => tokio_postgres::Config::new(),
        Some("") => {
            return Err("--dsn is empty; give a postgres:// URL or `host=... dbname=...`".into())
        }
        Some(dsn) => {
            if let Some(mode) = dsn_sslmode(dsn) {
                refuse_tls(&mode, "--dsn")?;
            }
            // The parser's message may quote the DSN, password and all: we
            // say only what kind of thing is wrong.
            tokio_postgres::Config::from_str(dsn).map_err(|e| {
                let why = e.to_string();
                let why = if why.contains("password") { "unreadable".to_string() } else { why };
                format!("--dsn is not a postgres:// URL nor libpq `key=value` words ({why}); e.g. --dsn postgres://user@db.example:5432/app")
            })?
        }
    };
    if let Some(mode) = env("PGSSLMODE") {
        refuse_tls(&mode, "PGSSLMODE")?;
    }
    if config.get_hosts().is_empty() {
        match env("PGHOST") {
            Some(hosts) => {
                for host in hosts.split(',') {
                    if host.is_empty() {
                        return Err(format!(
                            "PGHOST `{hosts}` holds an empty host; give host[,host...]"
                        ));
                    }
                    if host.starts_with('/') {
                        config.host_path(host);
                    } else {
                        config.host(host);
                    }
                }
            }
            None if Path::new(DEFAULT_SOCKET_DIR).is_dir() => {
                config.host_path(DEFAULT_SOCKET_DIR);
            }
            None => {
                config.host("localhost");
            }
        }
    }
    if config.get_ports().is_empty() {
        if let Some(port) = env("PGPORT") {
            let port: u16 = port.parse().ok().filter(|p| *p > 0).ok_or_else(|| {
                format!("PGPORT `{port}` is not a port; give a number from 1 to 65535")
            })?;
            config.port(port);
        }
    }
    if config.get_user().is_none() {
        let user = match env("PGUSER") {
            Some(user) => user,
            None => nix::unistd::User::from_uid(nix::unistd::geteuid())
                .ok()
                .flatten()
                .map(|u| u.name)
                .ok_or("no PostgreSQL user: set PGUSER or put the user in --dsn")?,
        };
        config.user(&user);
    }
    if config.get_dbname().is_none() {
        if let Some(db) = env("PGDATABASE") {
            config.dbname(&db);
        }
    }
    if config.get_password().is_none() {
        if let Some(password) = env("PGPASSWORD") {
            config.password(password);
        }
    }
    if config
        .get_hosts()
        .iter()
        .any(|h| matches!(h, Host::Tcp(name) if name.is_empty()))
    {
        return Err("the PostgreSQL host is empty; give one in --dsn or PGHOST".into());
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn the_flag_wins_over_the_environment() {
        let c = resolve(
            Some("postgres://ops@db:6543/app"),
            env(&[
                ("PGHOST", "other"),
                ("PGPORT", "1"),
                ("PGUSER", "x"),
                ("PGDATABASE", "y"),
            ]),
        )
        .unwrap();
        assert_eq!(c.get_hosts(), [Host::Tcp("db".into())]);
        assert_eq!(c.get_ports(), [6543]);
        assert_eq!(c.get_user(), Some("ops"));
        assert_eq!(c.get_dbname(), Some("app"));
        let c = resolve(
            None,
            env(&[
                ("PGHOST", "/tmp/s,db2"),
                ("PGPORT", "7"),
                ("PGUSER", "u"),
                ("PGPASSWORD", "s3cret"),
            ]),
        )
        .unwrap();
        assert_eq!(c.get_hosts().len(), 2);
        assert_eq!(c.get_ports(), [7]);
        assert_eq!(c.get_password(), Some(&b"s3cret"[..]));
        assert!(!format!("{c:?}").contains("s3cret"));
    }

    #[test]
    fn bad_settings_are_one_line_each_and_never_show_the_password() {
        let bad = |dsn: Option<&str>, pairs: &[(&str, &str)]| {
            let e = resolve(dsn, env(pairs)).unwrap_err();
            assert!(!e.contains('\n'), "{e}");
            assert!(!e.contains("s3cret"), "{e}");
            e
        };
        assert!(bad(None, &[("PGHOST", "")]).contains("PGHOST is set but empty"));
        assert!(bad(Some(""), &[]).contains("--dsn is empty"));
        assert!(bad(None, &[("PGPORT", "x")]).contains("not a port"));
        assert!(bad(Some("postgres://u:s3cret@h/db?sslmode=require"), &[]).contains("TLS"));
        assert!(bad(None, &[("PGSSLMODE", "verify-full")]).contains("TLS"));
        assert!(bad(None, &[("PGSSLMODE", "maybe")]).contains("not one of"));
        assert!(bad(Some("postgres://u:s3cret@h:notaport/db"), &[]).contains("--dsn"));
        assert!(bad(None, &[("PGHOST", "a,,b")]).contains("empty host"));
    }
}
