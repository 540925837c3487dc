//! Where PostgreSQL is and how to talk to it: `--dsn` (a `postgres://` URL
//! or libpq's `key=value` words) over the libpq variables `PGHOST`,
//! `PGPORT`, `PGUSER`, `PGDATABASE`, `PGPASSWORD`, `PGPASSFILE`,
//! `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`, `PGCONNECT_TIMEOUT`
//! and `PGTARGETSESSIONATTRS`, as `psql` reads
//! them, and then libpq's files (`~/.pgpass`, `~/.postgresql/root.crt`,
//! `postgresql.crt` and `postgresql.key`). Everything is checked here,
//! before the first connection. The password is never printed:
//! `tokio_postgres::Config` redacts it, and no message of ours names it.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use tokio_postgres::config::Host;

/// libpq's variables we read, in the order we check them.
pub const VARIABLES: &[&str] = &[
    "PGHOST",
    "PGPORT",
    "PGUSER",
    "PGDATABASE",
    "PGPASSWORD",
    "PGPASSFILE",
    "PGSSLMODE",
    "PGSSLROOTCERT",
    "PGSSLCERT",
    "PGSSLKEY",
    "PGCONNECT_TIMEOUT",
    "PGTARGETSESSIONATTRS",
];

/// Debian's (and most distributions') socket directory, libpq's default
/// host when it exists.
const DEFAULT_SOCKET_DIR: &str = "/var/run/postgresql";

/// The parameters we take out of a DSN ourselves: tokio-postgres knows
/// only three of libpq's `sslmode`s and none of its certificate files.
const TLS_PARAMS: &[&str] = &["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// libpq's `sslmode`s, with libpq's meanings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plain only.
    Disable,
    /// libpq tries plain first; we treat it as `prefer` (TLS when the
    /// server offers it, unverified), which encrypts at least as often.
    Allow,
    /// TLS when the server offers it, the certificate unchecked.
    Prefer,
    /// TLS or nothing; the certificate is checked against the root CAs
    /// only if a root file is given or `~/.postgresql/root.crt` exists.
    Require,
    /// TLS, the certificate signed by a root CA.
    VerifyCa,
    /// TLS, the certificate signed by a root CA and naming the host.
    VerifyFull,
}

impl SslMode {
    fn parse(mode: &str, source: &str) -> Result<SslMode, String> {
        Ok(match mode {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "" => return Err(format!("sslmode in {source} is empty; give one of disable, allow, prefer, require, verify-ca, verify-full")),
            other => return Err(format!(
                "sslmode `{other}` in {source} is not one of disable, allow, prefer, require, verify-ca, verify-full"
            )),
        })
    }

    /// Whether the server's certificate must be signed by a root CA.
    pub fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

/// Where the root CAs come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roots {
    /// The server's certificate is not checked.
    None,
    /// The CAs of a PEM file.
    File(PathBuf),
    /// The system's store (`sslrootcert=system`, as libpq 16).
    System,
}

/// How we speak TLS to the server, as resolved from the DSN, the
/// variables and libpq's default files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    pub roots: Roots,
    /// The client certificate and key, when both are given or found.
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// Everything a connection needs.
#[derive(Debug, Clone)]
pub struct Settings {
    pub config: tokio_postgres::Config,
    pub tls: TlsSettings,
    /// Why no password came from the password file, when one was there.
    pub password_note: Option<String>,
}

/// What [`split_dsn`] gives: the rest, ours, and every name given.
type SplitDsn = (String, Vec<(String, String)>, Vec<String>);

/// `--dsn` with our parameters taken out: the rest, for tokio-postgres,
/// ours, decoded, and the name of every parameter it gives (a variable
/// gives only what the DSN does not, as in libpq).
fn split_dsn(dsn: &str) -> Result<SplitDsn, String> {
    let mut ours = Vec::new();
    let mut given = Vec::new();
    if dsn.starts_with("postgres://") || dsn.starts_with("postgresql://") {
        let Some((base, query)) = dsn.split_once('?') else {
            return Ok((dsn.to_string(), ours, given));
        };
        let mut kept = Vec::new();
        for pair in query.split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = percent_decode(key)?;
            given.push(key.clone());
            if TLS_PARAMS.contains(&key.as_str()) {
                ours.push((key, percent_decode(value)?));
            } else {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return Ok((rest, ours, given));
    }
    // libpq's words: key = value, the value bare or in single quotes,
    // backslash escaping the next character in either.
    let mut kept = String::new();
    let mut chars = dsn.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            // The word may be part of a password: we do not quote it.
            return Err("--dsn is not a postgres:// URL nor libpq `key=value` words (a word has no `=`); e.g. --dsn postgres://user@db.example:5432/app".into());
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\\') => value.extend(chars.next()),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                    None => {
                        return Err(format!(
                            "--dsn has an unterminated quoted value for `{key}`; close it with '"
                        ))
                    }
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        given.push(key.clone());
        if TLS_PARAMS.contains(&key.as_str()) {
            ours.push((key, value));
        } else {
            let quoted = value.replace('\\', "\\\\").replace('\'', "\\'");
            kept.push_str(&format!("{key}='{quoted}' "));
        }
    }
    Ok((kept, ours, given))
}

fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("--dsn has a `%` not followed by two hex digits; write `%25` for a `%`")?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "--dsn decodes to something that is not UTF-8".to_string())
}

/// The user's home, as libpq finds it: `HOME`, else the password file.
fn home(env: &impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    env("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::geteuid())
                .ok()
                .flatten()
                .map(|u| u.dir)
        })
}

/// The TLS settings: the DSN's over the variables over libpq's files.
fn tls_settings(
    ours: &[(String, String)],
    env: &impl Fn(&str) -> Option<String>,
) -> Result<TlsSettings, String> {
    let param = |name: &str, var: &str| -> Option<(String, String)> {
        ours.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| (v.clone(), format!("--dsn ({name})")))
            .or_else(|| env(var).map(|v| (v, var.to_string())))
    };
    let mode = match param("sslmode", "PGSSLMODE") {
        Some((mode, source)) => SslMode::parse(&mode, &source)?,
        None => SslMode::Prefer,
    };
    for (name, value) in ours {
        if value.is_empty() {
            return Err(format!(
                "{name} in --dsn is empty; give a value or leave it out"
            ));
        }
    }
    let postgresql_dir = home(env).map(|h| h.join(".postgresql"));
    let roots = match param("sslrootcert", "PGSSLROOTCERT") {
        Some((system, _)) if system == "system" => Roots::System,
        Some((path, source)) => {
            let path = PathBuf::from(path);
            if path.is_file() {
                Roots::File(path)
            } else if mode.verifies() {
                return Err(format!(
                    "the root certificate file `{}` ({source}) does not exist; give the CA that signed the server's certificate, sslrootcert=system for the system's CAs, or an sslmode that does not verify",
                    path.display()
                ));
            } else {
                // libpq ignores a missing root file when it need not verify.
                Roots::None
            }
        }
        None => match postgresql_dir.as_ref().map(|d| d.join("root.crt")) {
            Some(path) if path.is_file() => Roots::File(path),
            path if mode.verifies() => {
                let path =
                    path.map_or("~/.postgresql/root.crt".into(), |p| p.display().to_string());
                return Err(format!(
                    "sslmode verify-ca and verify-full need the CA that signed the server's certificate, and `{path}` does not exist; give it in sslrootcert or PGSSLROOTCERT (or sslrootcert=system)"
                ));
            }
            _ => Roots::None,
        },
    };
    // As libpq: `prefer` and `allow` never check; `require` checks when it
    // has roots.
    let roots = match mode {
        SslMode::Disable | SslMode::Allow | SslMode::Prefer => Roots::None,
        _ => roots,
    };
    let cert = param("sslcert", "PGSSLCERT");
    let key = param("sslkey", "PGSSLKEY");
    let identity = match (cert, key) {
        (Some((cert, _)), Some((key, _))) => Some((PathBuf::from(cert), PathBuf::from(key))),
        (Some((cert, source)), None) => {
            let key = postgresql_dir.as_ref().map(|d| d.join("postgresql.key"));
            match key {
                Some(key) if key.is_file() => Some((PathBuf::from(cert), key)),
                _ => {
                    return Err(format!(
                    "a client certificate is given ({source}) but no key; give sslkey or PGSSLKEY"
                ))
                }
            }
        }
        (None, Some((key, source))) => {
            let cert = postgresql_dir.as_ref().map(|d| d.join("postgresql.crt"));
            match cert {
                Some(cert) if cert.is_file() => Some((cert, PathBuf::from(key))),
                _ => {
                    return Err(format!(
                        "a client key is given ({source}) but no certificate; give sslcert or PGSSLCERT"
                    ))
                }
            }
        }
        (None, None) => postgresql_dir.and_then(|d| {
            let (cert, key) = (d.join("postgresql.crt"), d.join("postgresql.key"));
            (cert.is_file() && key.is_file()).then_some((cert, key))
        }),
    };
    if let Some((_, key)) = &identity {
        check_key_permissions(key)?;
    }
    Ok(TlsSettings {
        mode,
        roots,
        identity,
    })
}

/// libpq refuses a private key others can read, if we own it (root's
/// may be 0640 for a group the server's certificates share).
fn check_key_permissions(key: &Path) -> Result<(), String> {
    let Ok(meta) = std::fs::metadata(key) else {
        return Ok(()); // Reading it says what is wrong.
    };
    let mode = meta.permissions().mode();
    let ours = meta.uid() == nix::unistd::geteuid().as_raw();
    let too_open = if meta.uid() == 0 {
        mode & 0o037 != 0
    } else {
        mode & 0o077 != 0
    };
    if ours && too_open {
        return Err(format!(
            "the client key `{}` can be read by others (mode {:o}); chmod 600 it, as libpq demands",
            key.display(),
            mode & 0o777
        ));
    }
    Ok(())
}

/// One field of a password file line, `\` escaping the next character;
/// `None` for a bare `*`, which matches anything.
fn pgpass_fields(line: &str) -> Vec<(String, bool)> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut escaped_any = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                field.extend(chars.next());
                escaped_any = true;
            }
            ':' => {
                let wildcard = field == "*" && !escaped_any;
                fields.push((std::mem::take(&mut field), wildcard));
                escaped_any = false;
            }
            c => field.push(c),
        }
    }
    let wildcard = field == "*" && !escaped_any;
    fields.push((field, wildcard));
    fields
}

/// The password for `host:port:db:user` in a libpq password file's text,
/// the first line that matches, as libpq reads it.
pub fn pgpass_lookup(text: &str, host: &str, port: &str, db: &str, user: &str) -> Option<String> {
    for line in text.lines() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let fields = pgpass_fields(line);
        // libpq takes everything after the fourth colon as the password,
        // colons and all (escaped or not).
        if fields.len() < 5 {
            continue;
        }
        let wanted = [host, port, db, user];
        if fields[..4]
            .iter()
            .zip(wanted)
            .all(|((field, wildcard), want)| *wildcard || field == want)
        {
            let password = fields[4..]
                .iter()
                .map(|(f, _)| f.as_str())
                .collect::<Vec<_>>()
                .join(":");
            return Some(password);
        }
    }
    None
}

/// The password from PGPASSFILE or `~/.pgpass`, as libpq: a file that is
/// not a plain file, or that others can read, is ignored (the latter with
/// libpq's warning, which `note` keeps for the error a missing password
/// causes: our warnings are shown only with -v).
fn pgpass_password(
    config: &tokio_postgres::Config,
    env: &impl Fn(&str) -> Option<String>,
    note: &mut Option<String>,
) -> Option<String> {
    let path = match env("PGPASSFILE") {
        Some(path) => PathBuf::from(path),
        None => home(env)?.join(".pgpass"),
    };
    let meta = std::fs::metadata(&path).ok()?;
    if !meta.is_file() {
        return None;
    }
    if meta.permissions().mode() & 0o077 != 0 {
        let warning = format!(
            "password file `{}` has group or world access, so it is ignored; chmod 600 it",
            path.display()
        );
        tracing::warn!("{warning}");
        *note = Some(warning);
        return None;
    }
    let text = String::from_utf8(crate::host::read_small(&path, crate::host::SMALL_FILE_MAX).ok()?).ok()?;
    let user = config.get_user().unwrap_or_default();
    let db = config.get_dbname().unwrap_or(user);
    let ports = config.get_ports();
    for (i, host) in config.get_hosts().iter().enumerate() {
        // The default socket directory is `localhost` to the password
        // file; another is its path.
        let host = match host {
            Host::Tcp(name) => name.clone(),
            Host::Unix(dir) if dir == Path::new(DEFAULT_SOCKET_DIR) => "localhost".to_string(),
            Host::Unix(dir) => dir.display().to_string(),
        };
        let port = ports
            .get(i)
            .or(ports.first())
            .copied()
            .unwrap_or(5432)
            .to_string();
        if let Some(password) = pgpass_lookup(&text, &host, &port, db, user) {
            return Some(password);
        }
    }
    None
}

/// The connection settings from `dsn` (the flag) over the environment
/// `env` looks up; the error is one line saying what to fix.
pub fn resolve(
    dsn: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Settings, String> {
    for name in VARIABLES {
        if env(name).is_some_and(|v| v.is_empty()) {
            return Err(format!("{name} is set but empty; unset it or give a value"));
        }
    }
    let (mut config, ours, given) = match dsn {
        None => (tokio_postgres::Config::new(), Vec::new(), Vec::new()),
        Some("") => {
            return Err("--dsn is empty; give a postgres:// URL or `host=... dbname=...`".into())
        }
        Some(dsn) => {
            let (rest, ours, given) = split_dsn(dsn)?;
            // The parser's message may quote the DSN, password and all: we
            // say only what kind of thing is wrong.
            let config = tokio_postgres::Config::from_str(&rest).map_err(|e| {
                let why = e.to_string();
                let why = if why.contains("password") { "unreadable".to_string() } else { why };
                format!("--dsn is not a postgres:// URL nor libpq `key=value` words ({why}); e.g. --dsn postgres://user@db.example:5432/app")
            })?;
            (config, ours, given)
        }
    };
    let in_dsn = |name: &str| given.iter().any(|k| k == name);
    if !in_dsn("connect_timeout") {
        if let Some(text) = env("PGCONNECT_TIMEOUT") {
            // libpq's reading: whole seconds; zero or less is "unset".
            let secs: i64 = text.parse().map_err(|_| {
                format!("PGCONNECT_TIMEOUT `{text}` is not a whole number of seconds; give e.g. 10, or unset it")
            })?;
            if secs > 0 {
                config.connect_timeout(std::time::Duration::from_secs(secs as u64));
            }
        }
    }
    if !in_dsn("target_session_attrs") {
        if let Some(text) = env("PGTARGETSESSIONATTRS") {
            match text.as_str() {
                // lockrun needs a primary whatever is asked: its check
                // moves past a standby to the next host.
                "read-write" => {
                    config.target_session_attrs(
                        tokio_postgres::config::TargetSessionAttrs::ReadWrite,
                    );
                }
                "any" | "primary" => {}
                "read-only" | "standby" | "prefer-standby" => {
                    return Err(format!("PGTARGETSESSIONATTRS={text} picks a standby, whose advisory locks exclude nobody on the primary; use read-write or unset it"));
                }
                _ => {
                    return Err(format!("PGTARGETSESSIONATTRS `{text}` is not one of libpq's any, read-write, read-only, primary, standby, prefer-standby; give read-write or unset it"));
                }
            }
        }
    }
    if config.get_target_session_attrs() == tokio_postgres::config::TargetSessionAttrs::ReadOnly {
        return Err("target_session_attrs=read-only in --dsn picks a standby, whose advisory locks exclude nobody on the primary; use read-write or leave it out".into());
    }
    let tls = tls_settings(&ours, &env)?;
    let mut password_note = None;
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
    if config.get_password().is_none() {
        if let Some(password) = pgpass_password(&config, &env, &mut password_note) {
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
    config.ssl_mode(match tls.mode {
        SslMode::Disable => tokio_postgres::config::SslMode::Disable,
        SslMode::Allow | SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        _ => tokio_postgres::config::SslMode::Require,
    });
    // libpq ignores sslmode on unix sockets, where the server never
    // speaks TLS.
    if config
        .get_hosts()
        .iter()
        .all(|h| matches!(h, Host::Unix(_)))
    {
        config.ssl_mode(tokio_postgres::config::SslMode::Disable);
    }
    Ok(Settings {
        config,
        tls,
        password_note,
    })
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
        .unwrap()
        .config;
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
        .unwrap()
        .config;
        assert_eq!(c.get_hosts().len(), 2);
        assert_eq!(c.get_ports(), [7]);
        assert_eq!(c.get_password(), Some(&b"s3cret"[..]));
        assert!(!format!("{c:?}").contains("s3cret"));
    }

    #[test]
    fn libpq_timeout_and_session_variables_count_under_the_dsn() {
        use std::time::Duration;
        let get = |dsn: Option<&str>, pairs: &[(&str, &str)]| {
            resolve(dsn, env(&[&[("PGHOST", "db")], pairs].concat())).unwrap()
        };
        let timeout = |s: Settings| s.config.get_connect_timeout().copied();
        assert_eq!(
            timeout(get(None, &[("PGCONNECT_TIMEOUT", "3")])),
            Some(Duration::from_secs(3))
        );
        // The DSN beats the variable, as in libpq; zero means unset.
        assert_eq!(
            timeout(get(Some("connect_timeout=5"), &[("PGCONNECT_TIMEOUT", "3")])),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            timeout(get(Some("postgres://u@h/d?connect_timeout=0"), &[("PGCONNECT_TIMEOUT", "3")])),
            None
        );
        assert_eq!(timeout(get(None, &[("PGCONNECT_TIMEOUT", "0")])), None);
        let attrs = |s: Settings| s.config.get_target_session_attrs();
        use tokio_postgres::config::TargetSessionAttrs;
        assert_eq!(
            attrs(get(None, &[("PGTARGETSESSIONATTRS", "read-write")])),
            TargetSessionAttrs::ReadWrite
        );
        assert_eq!(
            attrs(get(Some("target_session_attrs=any"), &[("PGTARGETSESSIONATTRS", "standby")])),
            TargetSessionAttrs::Any
        );
        get(None, &[("PGTARGETSESSIONATTRS", "primary")]);
        let bad = |pairs: &[(&str, &str)]| {
            let e = resolve(None, env(&[&[("PGHOST", "db")], pairs].concat())).unwrap_err();
            assert!(!e.contains('\n'), "{e}");
            e
        };
        assert!(bad(&[("PGCONNECT_TIMEOUT", "3s")]).contains("not a whole number"));
        assert!(bad(&[("PGCONNECT_TIMEOUT", "")]).contains("set but empty"));
        assert!(bad(&[("PGTARGETSESSIONATTRS", "")]).contains("set but empty"));
        assert!(bad(&[("PGTARGETSESSIONATTRS", "standby")]).contains("picks a standby"));
        assert!(bad(&[("PGTARGETSESSIONATTRS", "rw")]).contains("not one of"));
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
        assert!(bad(Some("postgres://u:s3cret@h/db?sslmode=maybe"), &[]).contains("not one of"));
        assert!(bad(None, &[("PGSSLMODE", "maybe")]).contains("not one of"));
        assert!(bad(Some("host=h sslmode="), &[]).contains("empty"));
        assert!(bad(Some("host=h password='s3cret"), &[]).contains("unterminated"));
        let nowhere = [("HOME", "/nonexistent"), ("PGSSLMODE", "verify-full")];
        assert!(bad(None, &nowhere).contains("root.crt"));
        assert!(bad(
            Some("host=h sslrootcert=/nonexistent/ca.pem sslmode=verify-ca"),
            &[]
        )
        .contains("does not exist"));
        assert!(bad(None, &[("HOME", "/nonexistent"), ("PGSSLCERT", "/x.crt")]).contains("no key"));
        assert!(bad(Some("postgres://u:s3cret@h:notaport/db"), &[]).contains("--dsn"));
        assert!(bad(None, &[("PGHOST", "a,,b")]).contains("empty host"));
    }

    fn tls(dsn: Option<&str>, pairs: &[(&str, &str)]) -> TlsSettings {
        let mut pairs = pairs.to_vec();
        pairs.push(("HOME", "/nonexistent"));
        resolve(dsn, env(&pairs)).unwrap().tls
    }

    #[test]
    fn sslmodes_come_from_the_dsn_over_the_environment_as_libpq() {
        assert_eq!(tls(None, &[]).mode, SslMode::Prefer);
        assert_eq!(
            tls(None, &[("PGSSLMODE", "require")]).mode,
            SslMode::Require
        );
        let t = tls(
            Some("postgres://u@h/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fhostname&application_name=x"),
            &[("PGSSLMODE", "disable")],
        );
        assert_eq!(t.mode, SslMode::VerifyFull);
        assert_eq!(t.roots, Roots::File("/etc/hostname".into()));
        let t = tls(Some("host=h sslmode = 'verify-ca' sslrootcert=system"), &[]);
        assert_eq!((t.mode, t.roots), (SslMode::VerifyCa, Roots::System));
        // prefer never checks; require checks only with roots, which a
        // missing file is not.
        assert_eq!(
            tls(None, &[("PGSSLROOTCERT", "/etc/hostname")]).roots,
            Roots::None
        );
        let t = tls(
            None,
            &[("PGSSLMODE", "require"), ("PGSSLROOTCERT", "/nonexistent")],
        );
        assert_eq!(t.roots, Roots::None);
        // Unix sockets never speak TLS.
        let c = resolve(Some("host=/tmp sslmode=require"), env(&[]))
            .unwrap()
            .config;
        assert_eq!(c.get_ssl_mode(), tokio_postgres::config::SslMode::Disable);
        let c = resolve(Some("host=db sslmode=require"), env(&[]))
            .unwrap()
            .config;
        assert_eq!(c.get_ssl_mode(), tokio_postgres::config::SslMode::Require);
    }

    #[test]
    fn the_dsn_keeps_what_is_not_ours_quotes_and_all() {
        let (rest, ours, _) =
            split_dsn(r"host=h password='it\'s a \\ pass' sslkey=/k application_name=x").unwrap();
        assert_eq!(ours, [("sslkey".to_string(), "/k".to_string())]);
        let c = tokio_postgres::Config::from_str(&rest).unwrap();
        assert_eq!(c.get_password(), Some(&br"it's a \ pass"[..]));
        assert_eq!(c.get_application_name(), Some("x"));
        let (rest, _, _) = split_dsn("postgres://u@h/db?sslmode=require").unwrap();
        assert_eq!(rest, "postgres://u@h/db");
    }

    #[test]
    fn the_password_file_is_read_as_libpq_reads_it() {
        let text = "# comment\n\
                    db:5432:app:ops:first\n\
                    *:*:*:ops:any\\:thing\n\
                    h\\:x:1:d:u:with:colons\n\
                    \\*:*:*:star:literal\n";
        let find = |h, p, d, u| pgpass_lookup(text, h, p, d, u);
        assert_eq!(find("db", "5432", "app", "ops").as_deref(), Some("first"));
        assert_eq!(find("other", "1", "x", "ops").as_deref(), Some("any:thing"));
        assert_eq!(find("h:x", "1", "d", "u").as_deref(), Some("with:colons"));
        assert_eq!(find("db", "5432", "app", "star"), None);
        assert_eq!(find("*", "5432", "app", "star").as_deref(), Some("literal"));
        assert_eq!(find("db", "5432", "app", "nobody"), None);
    }

    #[test]
    fn the_password_file_is_ignored_when_others_can_read_it() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pgpass");
        let mut file = std::fs::File::create(&path).unwrap();
        writeln!(file, "db:5432:*:ops:s3cret").unwrap();
        let pass = |mode: u32, dsn: &str| {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let file = path.to_str().unwrap().to_string();
            resolve(Some(dsn), env(&[("PGPASSFILE", file.as_str())]))
                .unwrap()
                .config
                .get_password()
                .map(|p| p.to_vec())
        };
        assert_eq!(pass(0o600, "host=db user=ops"), Some(b"s3cret".to_vec()));
        assert_eq!(pass(0o644, "host=db user=ops"), None);
        assert_eq!(
            pass(0o600, "host=db user=ops password=given"),
            Some(b"given".to_vec())
        );
        assert_eq!(pass(0o600, "host=db port=5433 user=ops"), None);
    }
}
