//! Flags and the consul CLI's environment variables, validated into a
//! [`Config`] before the first request: nothing reaches Consul with a bad
//! input. Flags beat environment variables, which beat defaults.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::backend::consul::{self, Behavior, ConsulConfig, SessionSpec, Token};
use crate::backend::Wait;
use crate::cli::{self, ChildArgs, ConsulArgs, SessionArgs, WaitArgs};
use crate::error::Failure;
use crate::lease::{flag_duration, fmt_duration, Budget};
use crate::signals::Signal;

/// Consul's `session_ttl_min` default; servers can lower it, and so can
/// `LOCKRUN_SESSION_TTL_MIN` for lockrun (our test suite does).
const TTL_MIN: Duration = Duration::from_secs(10);
const TTL_MAX: Duration = Duration::from_secs(24 * 3600);
const LOCK_DELAY_MAX: Duration = Duration::from_secs(60);

/// An environment to read variables from (the process's, or a test's).
pub trait Env {
    fn var(&self, name: &str) -> Option<String>;

    /// PATH exactly as the child inherits it: unset and empty differ.
    fn path(&self) -> Option<OsString> {
        self.var("PATH").map(OsString::from)
    }
}

pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }

    fn path(&self) -> Option<OsString> {
        std::env::var_os("PATH")
    }
}

/// The validated options of `elect` and `semaphore`, for the hold loop.
#[derive(Debug, Clone)]
pub struct HoldConfig {
    /// The countdown's arithmetic; `None` on an engine whose lease cannot
    /// run out (`local`).
    pub budget: Option<Budget>,
    pub waiting: Waiting,
    pub conflict_exit_code: u8,
    pub value: String,
    pub child: ChildConfig,
}

impl HoldConfig {
    /// `--timeout` as a deadline from now.
    pub fn deadline(&self) -> Wait {
        match self.waiting {
            Waiting::Once => Wait::Once,
            Waiting::Forever => Wait::Forever,
            Waiting::For(d) => Wait::Until(tokio::time::Instant::now() + d),
        }
    }

    /// The grace period when the engine reports the lock lost: what the
    /// budget leaves (the lock-delay on Consul), none without a budget —
    /// the lock file was replaced, and nothing keeps a rival out.
    pub fn loss_grace(&self) -> Duration {
        self.budget.map_or(Duration::ZERO, |b| b.loss_grace())
    }
}

/// How long `--no-wait` and `--timeout` let us wait, before the clock starts.
#[derive(Debug, Clone, Copy)]
pub enum Waiting {
    Once,
    For(Duration),
    Forever,
}

/// Which engine keeps the locks.
pub use crate::cli::BackendName;

#[derive(Debug, Clone)]
pub struct ChildConfig {
    pub argv: Vec<OsString>,
    pub shell: bool,
    pub kill_signal: Signal,
    pub kill_timeout: Duration,
    pub leftovers: crate::cli::Leftovers,
    pub containment: crate::cli::ContainmentMode,
}

/// Variables that say where the locks are. Empty, each would silently pick
/// another lock space (the agent on 127.0.0.1:8500, the default namespace,
/// the default lock directory), and a lock taken there excludes nobody; so
/// an empty one is a usage error, whichever backend is in use. The second
/// field is what to set instead.
pub const EMPTY_IS_AN_ERROR: &[(&str, &str)] = &[
    ("LOCKRUN_BACKEND", "consul, etcd, local or postgres"),
    ("LOCKRUN_LOCK_DIR", "a directory"),
    (
        "CONSUL_HTTP_ADDR",
        "host:port, http://host:port or https://host:port",
    ),
    ("CONSUL_NAMESPACE", "a namespace"),
    ("CONSUL_PARTITION", "an admin partition"),
    ("ETCDCTL_ENDPOINTS", "host:port[,host:port...]"),
];

/// Credentials and TLS settings clap reads for us, with their argument ids.
/// Empty, they count as unset, as the consul CLI reads them: at worst the
/// request is refused (403, a TLS failure) and the user sees why; it never
/// reaches another lock. The rest of that kind (`CONSUL_HTTP_TOKEN`,
/// `CONSUL_HTTP_TOKEN_FILE`, `CONSUL_HTTP_SSL`, `CONSUL_HTTP_SSL_VERIFY`,
/// `ETCDCTL_*` but ETCDCTL_ENDPOINTS) we read through [`Env::var`], which
/// treats empty as unset too.
pub const EMPTY_IS_UNSET: &[(&str, &str)] = &[
    ("CONSUL_CACERT", "ca_file"),
    ("CONSUL_CAPATH", "ca_path"),
    ("CONSUL_CLIENT_CERT", "client_cert"),
    ("CONSUL_CLIENT_KEY", "client_key"),
    ("CONSUL_TLS_SERVER_NAME", "tls_server_name"),
];

/// The one line for the first variable of [`EMPTY_IS_AN_ERROR`] that is set
/// but empty.
pub fn empty_variable(is_set_empty: impl Fn(&str) -> bool) -> Option<String> {
    EMPTY_IS_AN_ERROR
        .iter()
        .find(|(name, _)| is_set_empty(name))
        .map(|(name, what)| {
            format!("{name} is set but empty; set it to {what}, or unset it for the default")
        })
}

/// Connection settings from flags and `CONSUL_*`.
pub fn consul(args: &ConsulArgs, env: &dyn Env) -> Result<ConsulConfig, Failure> {
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
            consul::connect::parse_addr(one, use_tls)
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
            .map(consul::connect::server_name),
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
        let text = std::fs::read_to_string(&file).map_err(|e| {
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
    std::fs::File::open(path).map(drop).map_err(|e| {
        Failure::Config(format!(
            "cannot read the {what} `{}` ({})",
            path.display(),
            io_reason(&e)
        ))
    })
}

pub fn io_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text).to_string();
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().collect::<String>() + chars.as_str(),
        None => text,
    }
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
        Some(text) => cli::parse_duration(&text)
            .map_err(|e| Failure::Config(format!("LOCKRUN_SESSION_TTL_MIN: {e}"))),
    }
}

/// What differs between a leader lock and a semaphore slot.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    /// "key" or "semaphore", for the session's name.
    pub name: &'static str,
    pub default_behavior: Behavior,
    /// Whether a lock-delay keeps rivals out after the session is gone.
    pub lock_delay_protects: bool,
    pub default_kill_timeout: Duration,
}

pub const LEADER: Kind = Kind {
    name: "key",
    default_behavior: Behavior::Release,
    lock_delay_protects: true,
    default_kill_timeout: Duration::from_secs(5),
};

pub const SEMAPHORE: Kind = Kind {
    name: "semaphore",
    // Go's Semaphore uses `delete`, so a dead contender's entry vanishes.
    default_behavior: Behavior::Delete,
    // A lock-delay guards keys the dead session held. A semaphore slot is
    // a line in a record nobody holds: once the session is gone a rival
    // prunes it at once, so there the delay buys the child no time.
    lock_delay_protects: false,
    default_kill_timeout: Duration::from_secs(2),
};

/// Options shared by `elect` and `semaphore`; on Consul, the session too.
pub fn hold(
    kind: Kind,
    backend: BackendName,
    key: &str,
    session: &SessionArgs,
    wait: &WaitArgs,
    child: &ChildArgs,
    env: &dyn Env,
) -> Result<(HoldConfig, Option<SessionSpec>), Failure> {
    if backend == BackendName::Local {
        crate::backend::local::dir::check_key(key).map_err(|e| Failure::Usage(e.to_string()))?;
        // No lease can run out under the child, so any grace period is safe.
        let kill_timeout = child.kill_timeout.unwrap_or(kind.default_kill_timeout);
        let value = child.value.clone().unwrap_or_else(hostname);
        return assemble(None, kill_timeout, value, wait, child, env).map(|c| (c, None));
    }
    if matches!(backend, BackendName::Etcd | BackendName::Postgres) {
        return etcd_hold(backend, kind, key, session, wait, child, env).map(|c| (c, None));
    }
    let Kind {
        name: key_kind,
        default_behavior,
        lock_delay_protects,
        default_kill_timeout,
    } = kind;
    consul::path::check_key(key).map_err(Failure::Usage)?;
    let min = ttl_min(env)?;
    if session.ttl < min || session.ttl > TTL_MAX {
        return Err(Failure::Usage(format!(
            "--ttl {} is outside what Consul allows ({} to 24h); use for example --ttl 15s",
            fmt_duration(session.ttl),
            fmt_duration(min)
        )));
    }
    if session.lock_delay > LOCK_DELAY_MAX {
        return Err(Failure::Usage(format!(
            "--lock-delay {} is longer than Consul applies (60s at most); use --lock-delay 60s or less",
            fmt_duration(session.lock_delay)
        )));
    }
    // No checks unless asked for: a check lets Consul end the session at any
    // moment, which leaves the child only the lock-delay (docs/consul.md, "Timing
    // and safety on Consul").
    let node_checks = if session.no_checks {
        Vec::new()
    } else {
        session.node_checks.clone().unwrap_or_default()
    };
    if node_checks.iter().any(|c| c.trim().is_empty()) {
        return Err(Failure::Usage(
            "--node-checks has an empty check name".into(),
        ));
    }
    if session.service_checks.iter().any(|c| c.trim().is_empty()) {
        return Err(Failure::Usage(
            "--service-checks has an empty check name".into(),
        ));
    }
    let checks = !node_checks.is_empty() || !session.service_checks.is_empty();
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
        ttl: session.ttl,
        lock_delay: if lock_delay_protects {
            session.lock_delay
        } else {
            Duration::ZERO
        },
        kill_timeout: child.kill_timeout.unwrap_or(default_kill_timeout),
        checks,
        rate_error: session.clock_rate_error,
    };
    let settings = format!(
        "--ttl {} and --lock-delay {}",
        flag_duration(session.ttl),
        flag_duration(session.lock_delay)
    );
    fit_default_grace(&mut budget, child, &settings);
    budget.check().map_err(|message| {
        // Only a grace period that is too long has a semaphore's own line;
        // a clock-rate bound that leaves nothing says so itself.
        if lock_delay_protects || budget.max_kill_timeout().is_none() {
            Failure::Usage(message)
        } else {
            Failure::Usage(format!(
                "--kill-timeout {} is too long for --ttl {}: a rival takes a semaphore slot as soon as the session expires, so the child must be dead by then; use --kill-timeout {} or less, or a longer --ttl",
                flag_duration(budget.kill_timeout),
                flag_duration(session.ttl),
                flag_duration(budget.max_kill_timeout().unwrap_or_default()),
            ))
        }
    })?;
    let budget = crate::lease::fit_this_host(budget).map_err(Failure::Config)?;
    let host = hostname();
    let value = child.value.clone().unwrap_or_else(|| host.clone());
    let spec = SessionSpec {
        name: session
            .session_name
            .clone()
            .unwrap_or_else(|| format!("lockrun on {host} for {key_kind} {key}")),
        ttl: session.ttl,
        lock_delay: session.lock_delay,
        behavior: session.behavior.unwrap_or(default_behavior),
        node_checks,
        service_checks: session.service_checks.clone(),
    };
    let config = assemble(Some(budget), budget.kill_timeout, value, wait, child, env)?;
    Ok((config, Some(spec)))
}

/// The user chose the TTL (or lock-delay), not the grace period: a default
/// `--kill-timeout` that does not fit shrinks to what they leave room for,
/// and says so under `-v`. One the user typed is left for `check` to refuse.
fn fit_default_grace(budget: &mut Budget, child: &ChildArgs, settings: &str) {
    if child.kill_timeout.is_none() && budget.check().is_err() {
        if let Some(max) = budget.max_kill_timeout() {
            tracing::info!(
                "--kill-timeout defaults to {} to fit {settings}",
                flag_duration(max)
            );
            budget.kill_timeout = max;
        }
    }
}

/// The hold loop's options, once the engine's own are checked; COMMAND is
/// looked up last, so a typo costs no request.
fn assemble(
    budget: Option<Budget>,
    kill_timeout: Duration,
    value: String,
    wait: &WaitArgs,
    child: &ChildArgs,
    env: &dyn Env,
) -> Result<HoldConfig, Failure> {
    let child_config = ChildConfig {
        argv: child.command.clone(),
        shell: child.shell,
        kill_signal: child.kill_signal,
        kill_timeout,
        leftovers: child.leftovers,
        containment: child.containment,
    };
    check_command(&child_config, env)?;
    Ok(HoldConfig {
        budget,
        waiting: match (wait.no_wait, wait.timeout) {
            (true, _) => Waiting::Once,
            (false, Some(timeout)) => Waiting::For(timeout),
            (false, None) => Waiting::Forever,
        },
        conflict_exit_code: wait.conflict_exit_code,
        value,
        child: child_config,
    })
}

/// etcd: a lease TTL in whole seconds, and a budget with no lock-delay: a
/// rival takes the lock as soon as the lease expires. PostgreSQL's is the
/// same shape: the server gives up on a silent connection (its TCP
/// keepalive and `tcp_user_timeout`, whole seconds) the TTL after the last
/// data it received from us, and frees the lock at once.
fn etcd_hold(
    backend: BackendName,
    kind: Kind,
    key: &str,
    session: &SessionArgs,
    wait: &WaitArgs,
    child: &ChildArgs,
    env: &dyn Env,
) -> Result<HoldConfig, Failure> {
    crate::key::check(key).map_err(Failure::Usage)?;
    let ttl = session.ttl;
    let (what, expires) = match backend {
        BackendName::Postgres => (
            "a postgres TTL",
            "on postgres a rival takes the lock as soon as the server gives up on our connection",
        ),
        _ => (
            "an etcd lease TTL",
            "on etcd a rival takes the lock as soon as the lease expires",
        ),
    };
    if ttl < Duration::from_secs(1) || ttl.subsec_nanos() != 0 || ttl > TTL_MAX {
        return Err(Failure::Usage(format!(
            "--ttl {} is not {what}; use whole seconds from 1s to 24h, e.g. --ttl 15s",
            flag_duration(ttl)
        )));
    }
    let mut budget = Budget {
        ttl,
        lock_delay: Duration::ZERO,
        kill_timeout: child.kill_timeout.unwrap_or(kind.default_kill_timeout),
        checks: false,
        rate_error: session.clock_rate_error,
    };
    fit_default_grace(&mut budget, child, &format!("--ttl {}", flag_duration(ttl)));
    budget.check().map_err(|message| {
        let Some(max) = budget.max_kill_timeout() else {
            // The clock-rate bound leaves nothing, whatever the grace.
            return Failure::Usage(message);
        };
        Failure::Usage(format!(
            "--kill-timeout {} is too long for --ttl {}: {expires}, so the child must be dead by then; use --kill-timeout {} or less, or a longer --ttl",
            flag_duration(budget.kill_timeout),
            flag_duration(ttl),
            flag_duration(max),
        ))
    })?;
    let budget = crate::lease::fit_this_host(budget).map_err(Failure::Config)?;
    let value = child.value.clone().unwrap_or_else(hostname);
    assemble(Some(budget), budget.kill_timeout, value, wait, child, env)
}

/// Finds COMMAND before anything is written to Consul, so a typo costs no
/// lock and gets the status `env`, `timeout` and shells use (127 or 126).
fn check_command(child: &ChildConfig, env: &dyn Env) -> Result<(), Failure> {
    let Some(program) = child.argv.first() else {
        return Err(Failure::Usage(
            "no COMMAND given; put it after `--`, e.g. `lockrun elect KEY -- ./job`".into(),
        ));
    };
    if program.is_empty() {
        return Err(Failure::Usage(
            "COMMAND is empty; put the program after `--`".into(),
        ));
    }
    if child.shell {
        return Ok(());
    }
    let shown = program.to_string_lossy();
    // The search execvp makes with the PATH the child inherits: glibc's
    // default when it is unset, and an empty entry (or an empty PATH) is
    // the working directory.
    let candidates: Vec<PathBuf> = if shown.contains('/') {
        vec![PathBuf::from(program)]
    } else {
        let path = env.path().unwrap_or_else(|| "/bin:/usr/bin".into());
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .collect()
    };
    let mut found_unexecutable = None;
    for candidate in candidates {
        match std::fs::metadata(&candidate) {
            Ok(meta) if meta.is_file() => {
                if is_executable(&candidate) {
                    return check_format(&shown, &candidate);
                }
                found_unexecutable.get_or_insert(candidate);
            }
            Ok(_) => {
                found_unexecutable.get_or_insert(candidate);
            }
            Err(_) => {}
        }
    }
    match found_unexecutable {
        Some(path) => Err(Failure::CommandNotExecutable(format!(
            "cannot run `{shown}`: `{}` is not an executable file; check its permissions (chmod +x)",
            path.display()
        ))),
        None => Err(Failure::CommandNotFound(format!(
            "cannot run `{shown}`: command not found; check the name and PATH"
        ))),
    }
}

/// What the kernel would say when executing `path`: a script whose `#!`
/// interpreter is missing fails as "not found" (127), and a file in no
/// executable format fails with ENOEXEC (126), which execvp would hide by
/// handing the file to /bin/sh. A file we cannot read, or a machine with
/// binfmt_misc handlers that may know the format, is left to exec.
fn check_format(shown: &str, path: &Path) -> Result<(), Failure> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let Ok(len) = std::fs::File::open(path).and_then(|mut f| f.read(&mut head)) else {
        return Ok(());
    };
    let head = &head[..len];
    if head.starts_with(b"\x7fELF") {
        return Ok(());
    }
    if let Some(line) = head.strip_prefix(b"#!") {
        let line = line.split(|&b| b == b'\n').next().unwrap_or_default();
        let interpreter = String::from_utf8_lossy(line);
        let Some(interpreter) = interpreter.split([' ', '\t']).find(|w| !w.is_empty()) else {
            return Err(Failure::CommandNotExecutable(format!(
                "cannot run `{shown}`: its `#!` line names no interpreter; write one, e.g. `#!/bin/sh`"
            )));
        };
        return match std::fs::metadata(interpreter) {
            Err(_) => Err(Failure::CommandNotFound(format!(
                "cannot run `{shown}`: its interpreter `{interpreter}` is missing; install it or fix the `#!` line"
            ))),
            Ok(meta) if !meta.is_file() || !is_executable(Path::new(interpreter)) => {
                Err(Failure::CommandNotExecutable(format!(
                    "cannot run `{shown}`: its interpreter `{interpreter}` is not an executable file; fix the `#!` line"
                )))
            }
            Ok(_) => Ok(()),
        };
    }
    if binfmt_misc_handlers() {
        return Ok(());
    }
    Err(Failure::CommandNotExecutable(format!(
        "cannot run `{shown}`: `{}` is not in an executable format; give a script a `#!` line, or use --shell",
        path.display()
    )))
}

/// Whether the kernel has extra binary formats registered (Java, Wine,
/// QEMU...), any of which might run a file we do not recognise.
fn binfmt_misc_handlers() -> bool {
    std::fs::read_dir("/proc/sys/fs/binfmt_misc").is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.file_name() != "register" && e.file_name() != "status")
    })
}

fn is_executable(path: &Path) -> bool {
    nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok()
}

pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".to_string())
}
