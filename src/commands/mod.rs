//! The doorway: parse, validate, run one subcommand on a current-thread
//! runtime, and turn the outcome into an exit status and at most one line.

mod elect;
mod hold;
mod install;
mod leader;
mod release;
mod semaphore;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::Parser;

use crate::backend::consul::Client;
use crate::cli::{Cli, Command};
use crate::config::{self, ProcessEnv};
use crate::error::Failure;
use crate::exit::Exit;
use crate::logging;

pub fn main(args: Vec<OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(&args) {
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
    match run(cli) {
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

fn run(cli: Cli) -> Result<Exit, Failure> {
    let env = ProcessEnv;
    // Everything the user typed is checked before the runtime, the client
    // or any request exists.
    let job = match cli.command {
        Command::Elect(args) => Job::Elect(elect::prepare(args, &env)?),
        Command::Semaphore(args) => Job::Semaphore(semaphore::prepare(args, &env)?),
        Command::Leader(args) => Job::Leader(leader::prepare(args)?),
        Command::Release(args) => Job::Release(release::prepare(args)?),
        // Installing needs no Consul, so no Consul setting can stand in its way.
        Command::Completions(args) => return install::completions(&args),
        Command::Man(args) => return install::man(&args),
    };
    let consul = config::consul(&cli.consul, &env)?;
    let client = Client::new(&consul).map_err(|e| Failure::Config(format!("{e:#}")))?;
    // One thread: every child is forked from the main thread, which lives as
    // long as lockrun does, so the parent-death signal is reliable.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Internal(format!("cannot start the runtime ({e})")))?;
    if matches!(job, Job::Leader(_) | Job::Release(_)) {
        // These handle no signal: an early one ends them as it always would.
        crate::signals::release_held();
    }
    let namespace = consul.namespace.is_some();
    runtime.block_on(async move {
        // Namespaces on an agent without them: said before anything is
        // written (an older agent would ignore `?ns=` and work elsewhere).
        if namespace && client.lacks_namespaces().await {
            return Err(Failure::Config(
                crate::backend::consul::error::NO_NAMESPACES.into(),
            ));
        }
        match job {
            Job::Elect(job) => elect::run(&client, job).await,
            Job::Semaphore(job) => semaphore::run(&client, job).await,
            Job::Leader(job) => leader::run(&client, job).await,
            Job::Release(job) => release::run(&client, job).await,
        }
    })
}

/// Writes to stdout, false once nobody reads it. A reader that went away
/// (`lockrun leader K | head -0`) is not our failure: like ripgrep we stop
/// writing, quietly, and the status stays what the work earned.
fn write_stdout(bytes: &[u8]) -> bool {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(bytes)
        .and_then(|()| stdout.flush())
        .is_ok()
}

enum Job {
    Elect(elect::Job),
    Semaphore(semaphore::Job),
    Leader(leader::Job),
    Release(release::Job),
}
