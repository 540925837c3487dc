//! The doorway: parse, validate, run one subcommand on a current-thread
//! runtime, and turn the outcome into an exit status and at most one line.

mod check;
mod elect;
mod explain;
mod holders;
mod install;
mod leader;
mod put;
mod release;
mod semaphore;
mod status;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{ArgMatches, FromArgMatches};

use crate::backend::consul::inspect::{Outside, Reading};
use crate::backend::consul::{Client, Consul};
use crate::backend::etcd::config::{EtcdConfig, EtcdFlags};
use crate::backend::etcd::Etcd;
use crate::backend::local::Local;
use crate::backend::Engine;
use crate::cli::{BackendArgs, BackendName, Cli, Command};
use crate::config::{self, ProcessEnv};
use crate::error::Failure;
use crate::exit::Exit;
use crate::logging;

pub fn main(args: Vec<OsString>) -> ExitCode {
    let set_empty = |name: &str| std::env::var_os(name).is_some_and(|v| v.is_empty());
    // An empty variable that says where the locks are is a usage error for
    // every run, but not for `--help` or `--version`: a user reading the
    // help to find out what the variable takes must get it.
    let empty = config::empty_variable(set_empty);
    let refuse_empty = |line: String| {
        logging::fatal(None, &line);
        ExitCode::from(Exit::Usage)
    };
    let mut command = crate::cli::command();
    for (name, id) in config::EMPTY_IS_UNSET {
        if set_empty(name) {
            command = command.mut_arg(*id, |arg| arg.env(None::<&str>));
        }
    }
    let matches = match command.try_get_matches_from(&args) {
        Ok(matches) => matches,
        Err(e) => match (empty, e.kind()) {
            (Some(line), kind)
                if !matches!(kind, ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) =>
            {
                return refuse_empty(line)
            }
            _ => return clap_error(&args, e),
        },
    };
    if let Some(line) = empty {
        return refuse_empty(line);
    }
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => return clap_error(&args, e),
    };
    let daemon = match &cli.command {
        Command::Elect(args) => args.campaign || args.service.notify.is_some(),
        Command::Semaphore(args) => args.service.notify.is_some(),
        _ => false,
    };
    let logging = logging::init(
        cli.output.verbose,
        cli.output.quiet,
        cli.output.log_format,
        daemon,
    );
    match run(cli, &matches) {
        Ok(exit) => {
            logging::finish();
            exit.end()
        }
        Err(failure) => {
            logging::fatal(Some(logging), &failure.to_string());
            failure.exit().into()
        }
    }
}

/// Help and version go to stdout with status 0; a usage error becomes one
/// line on stderr with status 2.
fn clap_error(args: &[OsString], e: clap::Error) -> ExitCode {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            if let Some(message) = crate::usage::mistaken_help(args) {
                logging::fatal(None, &message);
                return Exit::Usage.into();
            }
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            Exit::Usage.into()
        }
        _ => {
            let mut line = crate::usage::explain(args, &e);
            // A generic "unexpected argument" for a short flag may be a key
            // that starts with `-`: say why that cannot work.
            if line.starts_with("unknown flag `-") && !line.starts_with("unknown flag `--") {
                line.push_str(hyphen_hint(&e));
            }
            logging::fatal(None, &line);
            Exit::Usage.into()
        }
    }
}

/// A KEY that starts with `-` reads as a flag, and after `--` everything
/// is COMMAND; we say so, rather than leave "unexpected argument '-c'" to
/// puzzle over. A typo of a long flag keeps clap's suggestion alone.
fn hyphen_hint(e: &clap::Error) -> &'static str {
    use clap::error::{ContextKind, ContextValue};
    let unknown = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) if e.kind() == ErrorKind::UnknownArgument => arg,
        _ => return "",
    };
    if unknown.starts_with('-') && !unknown.starts_with("--") {
        "; if it is meant as KEY, lockrun cannot take a key starting with `-` (flags come before KEY, COMMAND after `--`)"
    } else {
        ""
    }
}

/// Flags that only some backends understand, by clap id.
const OWNED: &[(&str, &[BackendName])] = &[
    ("http_addr", &[BackendName::Consul]),
    ("token_file", &[BackendName::Consul]),
    ("ca_file", &[BackendName::Consul]),
    ("ca_path", &[BackendName::Consul]),
    ("client_cert", &[BackendName::Consul]),
    ("client_key", &[BackendName::Consul]),
    ("tls_server_name", &[BackendName::Consul]),
    ("datacenter", &[BackendName::Consul]),
    ("namespace", &[BackendName::Consul]),
    (
        "ttl",
        &[
            BackendName::Consul,
            BackendName::Etcd,
            BackendName::Postgres,
        ],
    ),
    ("lock_delay", &[BackendName::Consul]),
    (
        "clock_rate_error",
        &[
            BackendName::Consul,
            BackendName::Etcd,
            BackendName::Postgres,
        ],
    ),
    ("behavior", &[BackendName::Consul]),
    ("session_name", &[BackendName::Consul]),
    ("node_checks", &[BackendName::Consul]),
    ("service_checks", &[BackendName::Consul]),
    ("no_checks", &[BackendName::Consul]),
    ("session", &[BackendName::Consul]),
    ("destroy_session", &[BackendName::Consul]),
    ("endpoints", &[BackendName::Etcd]),
    ("cacert", &[BackendName::Etcd]),
    ("cert", &[BackendName::Etcd]),
    ("cert_key", &[BackendName::Etcd]),
    ("dsn", &[BackendName::Postgres]),
    ("lock_dir", &[BackendName::Local]),
    ("allow_network_fs", &[BackendName::Local]),
];

/// A flag typed for another backend is refused, not ignored: the user
/// meant something by it (SPEC §6). Environment variables are left alone,
/// since a shell may export both backends' settings.
fn foreign_flags(matches: &ArgMatches, backend: BackendName) -> Result<(), Failure> {
    // `explain` nests `elect` and `semaphore` one level deeper.
    let mut levels = vec![matches];
    while let Some((_, sub)) = levels[levels.len() - 1].subcommand() {
        levels.push(sub);
    }
    for level in levels {
        for (id, owners) in OWNED {
            if owners.contains(&backend) {
                continue;
            }
            let typed = level
                .try_get_raw(id)
                .ok()
                .flatten()
                .is_some_and(|_| level.value_source(id) == Some(ValueSource::CommandLine));
            if typed {
                let flag = format!("--{}", id.replace('_', "-"));
                let owner = owners[0].name();
                let names: Vec<&str> = owners.iter().map(|b| b.name()).collect();
                let owned_by = match names.split_last() {
                    Some((last, rest)) if !rest.is_empty() => {
                        format!("{} and {last}", rest.join(", "))
                    }
                    _ => names.join(""),
                };
                let plural = if owners.len() > 1 { "s" } else { "" };
                return Err(Failure::Usage(format!(
                    "{flag} belongs to the {owned_by} backend{plural}, and this run uses --backend {}; drop {flag}, or pass --backend {owner}",
                    backend.name(),
                )));
            }
        }
    }
    Ok(())
}

/// The local engine's lock directory: the flag or `LOCKRUN_LOCK_DIR`,
/// else the default for this user.
fn lock_dir(args: &BackendArgs) -> std::path::PathBuf {
    args.lock_dir
        .clone()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or_else(crate::backend::local::dir::default_dir_here)
}

fn run(cli: Cli, matches: &ArgMatches) -> Result<Exit, Failure> {
    let env = ProcessEnv;
    // A sequencer names the backend it was made on.
    let backend = match &cli.command {
        Command::Check(args) => match check::Sequencer::decode(&args.sequencer) {
            Ok(seq) => check::backend_of(&seq)?,
            Err(why) => return Err(Failure::Usage(why)),
        },
        Command::Put(args) => match check::Sequencer::decode(&args.sequencer) {
            Ok(seq) => check::backend_of(&seq)?,
            Err(why) => return Err(Failure::Usage(why)),
        },
        _ => cli.backend.backend,
    };
    foreign_flags(matches, backend)?;
    // Everything the user typed is checked before the runtime, the client
    // or any request exists.
    let mut job = match cli.command {
        Command::Elect(args) => Job::Elect(elect::prepare(args, backend, &env)?),
        Command::Semaphore(args) => Job::Semaphore(semaphore::prepare(args, backend, &env)?),
        Command::Leader(args) => Job::Leader(leader::prepare(args, backend)?),
        Command::Release(args) => Job::Release(release::prepare(args, backend)?),
        // Installing needs no engine, so no engine setting can stand in its way.
        Command::Completions(args) => return install::completions(&args),
        Command::Man(args) => return install::man(&args),
        // Explaining contacts no engine: it validates and computes only.
        Command::Explain(args) => return explain::run(args, backend, &env),
        // Asking a running lockrun needs no engine either.
        Command::Status(args) => return status::run(&args),
        Command::Check(args) => Job::Check(check::prepare(&args.sequencer)?),
        Command::Put(args) => Job::Put(put::prepare(args)?),
    };
    if matches!(
        job,
        Job::Leader(_) | Job::Release(_) | Job::Check(_) | Job::Put(_)
    ) {
        // These handle no signal: an early one ends them as it always would.
        crate::signals::release_held();
    }
    match backend {
        BackendName::Consul => run_consul(&cli.consul, &env, job),
        BackendName::Etcd => {
            let etcd = etcd_engine(&cli.etcd, &job)?;
            job.fork_guard(Etcd::CLAIM_LENDS_FD);
            runtime()?.block_on(async {
                match job {
                    Job::Elect(job) => elect::run(&etcd, job).await,
                    Job::Semaphore(job) => semaphore::run(&etcd, job).await,
                    Job::Leader(job) => holders::leader(&etcd, "etcd", job).await,
                    Job::Release(job) => holders::release(&etcd, job).await,
                    Job::Check(job) => check::run(&etcd, job).await,
                    Job::Put(job) => put::etcd(&etcd, job).await,
                }
            })
        }
        BackendName::Postgres => {
            let engine = crate::backend::postgres::engine(cli.postgres.dsn.as_deref(), job.ttl())?;
            job.fork_guard(crate::backend::postgres::Postgres::CLAIM_LENDS_FD);
            runtime()?.block_on(async {
                match job {
                    Job::Elect(job) => elect::run(&engine, job).await,
                    Job::Semaphore(job) => semaphore::run(&engine, job).await,
                    Job::Leader(job) => holders::leader(&engine, "postgres", job).await,
                    Job::Release(job) => holders::release(&engine, job).await,
                    Job::Check(job) => check::run(&engine, job).await,
                    Job::Put(_) => unreachable!("refused by put::prepare"),
                }
            })
        }
        BackendName::Local => {
            let dir = lock_dir(&cli.backend);
            let local = || Local::open(dir.clone(), cli.backend.allow_network_fs);
            job.fork_guard(Local::CLAIM_LENDS_FD);
            runtime()?.block_on(async {
                match job {
                    Job::Elect(job) => elect::run(&local()?, job).await,
                    Job::Semaphore(job) => semaphore::run(&local()?, job).await,
                    // Looking creates nothing, and may look at a directory
                    // that is not ours (root's, from a user's shell).
                    Job::Leader(job) => {
                        holders::leader(&Local::for_reading(dir.clone()), "local", job).await
                    }
                    Job::Release(job) => {
                        holders::release(&Local::for_reading(dir.clone()), job).await
                    }
                    Job::Check(job) => check::run(&Local::for_reading(dir.clone()), job).await,
                    Job::Put(_) => unreachable!("refused by put::prepare"),
                }
            })
        }
    }
}

/// The etcd engine from flags and etcdctl's variables, checked (files
/// included) before any request.
fn etcd_engine(args: &crate::cli::EtcdArgs, job: &Job) -> Result<Etcd, Failure> {
    let flags = EtcdFlags {
        endpoints: args.endpoints.clone(),
        cacert: args.cacert.clone(),
        cert: args.cert.clone(),
        key: args.cert_key.clone(),
        user: None,
    };
    let config = EtcdConfig::resolve(&flags, |name| {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    })
    .map_err(Failure::Config)?;
    let ttl = match job {
        Job::Elect(job) => job.ttl,
        Job::Semaphore(job) => job.ttl,
        // Looking and releasing open no lease.
        Job::Leader(_) | Job::Release(_) | Job::Check(_) | Job::Put(_) => {
            crate::backend::etcd::DEFAULT_TTL
        }
    };
    Etcd::new(&config, ttl).map_err(Failure::Config)
}

/// One thread: every child is forked from the main thread, which lives as
/// long as lockrun does, so the parent-death signal is reliable.
fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Internal(format!("cannot start the runtime ({e})")))
}

fn run_consul(
    args: &crate::cli::ConsulArgs,
    env: &ProcessEnv,
    mut job: Job,
) -> Result<Exit, Failure> {
    let consul = config::consul(args, env)?;
    let client = Client::new(&consul).map_err(|e| Failure::Config(format!("{e:#}")))?;
    let namespace = consul.namespace.is_some();
    job.fork_guard(Consul::CLAIM_LENDS_FD);
    runtime()?.block_on(async move {
        // Namespaces on an agent without them: said before anything is
        // written (an older agent would ignore `?ns=` and work elsewhere).
        if namespace && client.lacks_namespaces().await {
            return Err(Failure::Config(
                crate::backend::consul::error::NO_NAMESPACES.into(),
            ));
        }
        match job {
            Job::Elect(mut job) => {
                let session = job.session.take().expect("a Consul job has a session");
                elect::run(&Consul::new(client, session), job).await
            }
            Job::Semaphore(mut job) => {
                let session = job.session.take().expect("a Consul job has a session");
                semaphore::run(&Consul::new(client, session), job).await
            }
            Job::Leader(job) => {
                let reading = match (job.args.watch, job.wait) {
                    (true, _) => Reading::Watching,
                    (false, Some(wait)) => Reading::Waiting(wait),
                    (false, None) => Reading::Once,
                };
                let outside = Outside::leader(client, reading, job.args.json);
                holders::leader(&outside, "consul", job).await
            }
            Job::Release(job) => {
                let outside =
                    Outside::release(client, job.args.session.clone(), job.args.destroy_session);
                holders::release(&outside, job).await
            }
            Job::Put(job) => put::consul(&client, job).await,
            Job::Check(job) => {
                // With the session in its facts, to compare.
                let outside = Outside::leader(client, Reading::Once, true);
                check::run(&outside, job).await
            }
        }
    })
}

enum Job {
    Elect(elect::Job),
    Semaphore(semaphore::Job),
    Leader(leader::Job),
    Release(release::Job),
    Check(check::Job),
    Put(put::Job),
}

impl Job {
    /// Everything the user typed is valid and the engine's client is built:
    /// the guard of a job that runs a command can be forked now, while
    /// lockrun is small and has one thread, before the runtime starts.
    fn fork_guard(&mut self, lends: bool) {
        match self {
            Job::Elect(job) => job.fork_guard(lends),
            Job::Semaphore(job) => job.fork_guard(lends),
            Job::Leader(_) | Job::Release(_) | Job::Check(_) | Job::Put(_) => {}
        }
    }

    /// The TTL a holding job asked for; `None` for looking and releasing,
    /// which hold nothing.
    fn ttl(&self) -> Option<std::time::Duration> {
        match self {
            Job::Elect(job) => Some(job.ttl),
            Job::Semaphore(job) => Some(job.ttl),
            Job::Leader(_) | Job::Release(_) | Job::Check(_) | Job::Put(_) => None,
        }
    }
}
