//! The Consul backend's rules: its connection settings from flags and the
//! consul CLI's variables, and a session's settings, checked before the
//! first request.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::args::ConsulArgs;
use super::{Behavior, ConsulConfig, SessionSpec, Token};
use crate::backend::rules::fit_default_grace;
use crate::backend::timing::Budget;
use crate::backend::{Env, Kind};
use crate::backend::{HoldRequest, HoldRules};
use crate::duration::{flag_duration, fmt_duration};
use crate::error::Failure;
use crate::host::{hostname, io_reason};

/// Consul's `session_ttl_min` default; servers can lower it, and so can
/// `LOCKRUN_SESSION_TTL_MIN` for lockrun (our test suite does).
pub(super) const TTL_MIN: Duration = Duration::from_secs(10);
const TTL_MAX: Duration = Duration::from_secs(24 * 3600);
const LOCK_DELAY_MAX: Duration = Duration::from_secs(60);

/// Connection settings from flags and `CONSUL_*`.
pub fn connection(args: &ConsulArgs, env: &dyn Env) -> Result<ConsulConfig, Failure> {
    let use_tls = match env.var("CONSUL_HTTP_SSL") {
        Some(v) => parse_bool("CONSUL_HTTP_SSL", &v)?,
        None => false,
    };
    let verify_tls = match env.var("CONSUL_HTTP_SSL_VERIFY") {
        Some(v) => parse_bool("CONSUL_HTTP_SSL_VERIFY", &v)?,
        None => true,
    };
    // An empty CONSUL_HTTP_ADDR is refused before parsing (see
    // `empty_variable`), so an empty value here came from the flag.
    if args.http_addr.as_deref() == Some("") {
        return Err(Failure::Usage(
            "--http-addr is empty; give host:port, http://host:port or https://host:port".into(),
        ));
    }
    let addr = args
        .http_addr
        .clone()
        .unwrap_or_else(|| "127.0.0.1:8500".to_string());
    // Several agents, comma-separated as etcd's endpoints: renewals and
    // other requests move to the next when one hangs or dies.
    let mut bases = Vec::new();
    for one in addr.split(',') {
        if one.trim().is_empty() {
            return Err(Failure::Config(format!(
                "the Consul address list `{addr}` has an empty entry; give host:port,host:port"
            )));
        }
        bases.push(
            super::connect::parse_addr(one, use_tls)
                .map_err(|e| Failure::Config(format!("{e:#}")))?,
        );
    }
    let base = bases.remove(0);
    if !bases.is_empty()
        && args
            .tls_server_name
            .as_deref()
            .is_some_and(|n| !n.is_empty())
    {
        return Err(Failure::Config(
            "a TLS server name pins one agent's address; give one Consul address with CONSUL_TLS_SERVER_NAME or --tls-server-name".into(),
        ));
    }
    let token = token(args.token_file.as_deref(), env)?;
    let non_empty = |p: &Option<PathBuf>| p.clone().filter(|p| !p.as_os_str().is_empty());
    for (name, path) in [
        ("CA certificate", non_empty(&args.ca_file)),
        ("client certificate", non_empty(&args.client_cert)),
        ("client key", non_empty(&args.client_key)),
    ] {
        if let Some(path) = path {
            readable_file(name, &path)?;
        }
    }
    let datacenter = args.datacenter.clone().filter(|d| !d.is_empty());
    if let Some(dc) = &datacenter {
        if !dc
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        {
            return Err(Failure::Usage(format!(
                "--datacenter `{dc}` is not a datacenter name; use letters, digits, `-` and `_`"
            )));
        }
    }
    Ok(ConsulConfig {
        base,
        more: bases,
        token,
        ca_file: non_empty(&args.ca_file),
        ca_path: non_empty(&args.ca_path),
        client_cert: non_empty(&args.client_cert),
        client_key: non_empty(&args.client_key),
        tls_server_name: args
            .tls_server_name
            .as_deref()
            .filter(|n| !n.is_empty())
            .map(super::connect::server_name),
        verify_tls,
        datacenter,
        namespace: args.namespace.clone().filter(|n| !n.is_empty()),
        partition: env.var("CONSUL_PARTITION"),
    })
}

/// The token: `--token-file`, else `CONSUL_HTTP_TOKEN_FILE`, else
/// `CONSUL_HTTP_TOKEN` (the consul CLI's precedence).
fn token(flag_file: Option<&Path>, env: &dyn Env) -> Result<Option<Token>, Failure> {
    let (file, source) = match flag_file {
        Some(file) => (Some(file.to_path_buf()), "--token-file"),
        None => (
            env.var("CONSUL_HTTP_TOKEN_FILE").map(PathBuf::from),
            "CONSUL_HTTP_TOKEN_FILE",
        ),
    };
    if let Some(file) = file {
        let text = crate::host::read_small(&file, 64 << 10)
            .and_then(|bytes| {
                String::from_utf8(bytes).map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text")
                })
            })
            .map_err(|e| {
            Failure::Config(format!(
                "cannot read the token file `{}` ({}); check the path and its permissions",
                file.display(),
                io_reason(&e)
            ))
        })?;
        // The consul CLI trims the file, so an editor's final newline is
        // not part of the token.
        let secret = text.trim();
        if secret.is_empty() {
            return Err(Failure::Config(format!(
                "the token file `{}` is empty; write the ACL token into it",
                file.display()
            )));
        }
        let shown = format!("{source} `{}`", file.display());
        return sendable_token(secret, &shown).map(Some);
    }
    env.var("CONSUL_HTTP_TOKEN")
        .map(|t| sendable_token(t.trim(), "CONSUL_HTTP_TOKEN"))
        .transpose()
}

/// A token travels in an HTTP header, which carries visible ASCII, spaces
/// and tabs only. Anything else cannot be sent as it is, and sending
/// something else instead (the agent's anonymous token, say) would act
/// with rights the user never gave; so we refuse, naming the source and
/// never the token.
fn sendable_token(secret: &str, source: &str) -> Result<Token, Failure> {
    if secret
        .bytes()
        .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
    {
        return Ok(Token::new(secret.to_string()));
    }
    Err(Failure::Config(format!(
        "the token from {source} contains a character an HTTP header cannot carry (a line break, control character or non-ASCII); write the token on one line"
    )))
}

fn readable_file(what: &str, path: &Path) -> Result<(), Failure> {
    crate::host::read_small(path, crate::host::SMALL_FILE_MAX)
        .map(drop)
        .map_err(|e| {
        Failure::Config(format!(
            "cannot read the {what} `{}` ({})",
            path.display(),
            io_reason(&e)
        ))
    })
}

fn parse_bool(name: &str, value: &str) -> Result<bool, Failure> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "t" | "true" => Ok(true),
        "0" | "f" | "false" => Ok(false),
        other => Err(Failure::Config(format!(
            "{name}=`{other}` is not a boolean; use true or false"
        ))),
    }
}

fn ttl_min(env: &dyn Env) -> Result<Duration, Failure> {
    match env.var("LOCKRUN_SESSION_TTL_MIN") {
        None => Ok(TTL_MIN),
        Some(text) => crate::duration::parse_duration(&text)
            .map_err(|e| Failure::Config(format!("LOCKRUN_SESSION_TTL_MIN: {e}"))),
    }
}

/// The session of a hold: its TTL, lock-delay and checks into a budget.
pub fn hold(
    request: &HoldRequest<'_, super::args::ConsulSessionArgs>,
    env: &dyn Env,
) -> Result<HoldRules<SessionSpec>, Failure> {
    let Kind {
        name: key_kind,
        lock,
        default_kill_timeout,
        ..
    } = request.kind;
    // A lock-delay guards keys the dead session held. A semaphore slot is
    // a line in a record nobody holds: once the session is gone a rival
    // prunes it at once, so there the delay buys the child no time.
    let lock_delay_protects = lock;
    // Go's Semaphore uses `delete`, so a dead contender's entry vanishes.
    let default_behavior = if lock {
        Behavior::Release
    } else {
        Behavior::Delete
    };
    let key = request.key;
    let own = request.flags;
    super::path::check_key(key).map_err(Failure::Usage)?;
    let min = ttl_min(env)?;
    if request.ttl < min || request.ttl > TTL_MAX {
        return Err(Failure::Usage(format!(
            "--ttl {} is outside what Consul allows ({} to 24h); use for example --ttl 15s",
            fmt_duration(request.ttl),
            fmt_duration(min)
        )));
    }
    if own.lock_delay > LOCK_DELAY_MAX {
        return Err(Failure::Usage(format!(
            "--lock-delay {} is longer than Consul applies (60s at most); use --lock-delay 60s or less",
            fmt_duration(own.lock_delay)
        )));
    }
    // No checks unless asked for: a check lets Consul end the session at any
    // moment, which leaves the child only the lock-delay (docs/consul.md, "Timing
    // and safety on Consul").
    let node_checks = if own.no_checks {
        Vec::new()
    } else {
        own.node_checks.clone().unwrap_or_default()
    };
    if node_checks.iter().any(|c| c.trim().is_empty()) {
        return Err(Failure::Usage(
            "--node-checks has an empty check name".into(),
        ));
    }
    if own.service_checks.iter().any(|c| c.trim().is_empty()) {
        return Err(Failure::Usage(
            "--service-checks has an empty check name".into(),
        ));
    }
    let checks = !node_checks.is_empty() || !own.service_checks.is_empty();
    if checks && !lock_delay_protects {
        let flag = if node_checks.is_empty() {
            "--service-checks"
        } else {
            "--node-checks"
        };
        return Err(Failure::Usage(format!(
            "{flag} cannot be used with a semaphore: a failing check frees the slot for a rival at once, with no lock-delay to stop the child in; leave the checks out (or pass --no-checks) and let the TTL end the session"
        )));
    }
    let mut budget = Budget {
        ttl: request.ttl,
        rival_delay: if lock_delay_protects {
            own.lock_delay
        } else {
            Duration::ZERO
        },
        kill_timeout: request.kill_timeout.unwrap_or(default_kill_timeout),
        ends_early: checks,
        rate_error: request.rate_error,
    };
    let settings = format!(
        "--ttl {} and --lock-delay {}",
        flag_duration(request.ttl),
        flag_duration(own.lock_delay)
    );
    fit_default_grace(&mut budget, request.kill_timeout.is_some(), &settings);
    budget.check().map_err(|message| {
        // Only a grace period that is too long has a semaphore's own line;
        // a clock-rate bound that leaves nothing says so itself.
        if lock_delay_protects || budget.max_kill_timeout().is_none() {
            Failure::Usage(message)
        } else {
            Failure::Usage(format!(
                "--kill-timeout {} is too long for --ttl {}: a rival takes a semaphore slot as soon as the session expires, so the child must be dead by then; use --kill-timeout {} or less, or a longer --ttl",
                flag_duration(budget.kill_timeout),
                flag_duration(request.ttl),
                flag_duration(budget.max_kill_timeout().unwrap_or_default()),
            ))
        }
    })?;
    let budget = crate::backend::timing::fit_this_host(budget).map_err(Failure::Config)?;
    let host = hostname();
    let spec = SessionSpec {
        name: own
            .session_name
            .clone()
            .unwrap_or_else(|| super::inspect::session_name(&host, std::process::id(), key_kind, key)),
        ttl: request.ttl,
        lock_delay: own.lock_delay,
        behavior: own.behavior.unwrap_or(default_behavior),
        node_checks,
        service_checks: own.service_checks.clone(),
    };
    Ok(HoldRules {
        budget: Some(budget),
        kill_timeout: budget.kill_timeout,
        plan: spec,
    })
}
