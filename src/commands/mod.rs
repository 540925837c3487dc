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

use crate::cli::{Cli, Command};
use crate::config::{self, ProcessEnv};
use crate::consul::Client;
use crate::error::Failure;
use crate::exit::Exit;
use crate::logging;

pub fn main(args: Vec<OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => return clap_error(&args, e),
    };
    let logging = logging::init(cli.output.verbose, cli.output.quiet, cli.output.log_format);
    match run(cli) {
        Ok(exit) => exit.into(),
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
            logging::fatal(None, &crate::usage::explain(args, &e));
            Exit::Usage.into()
        }
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
    runtime.block_on(async move {
        match job {
            Job::Elect(job) => elect::run(&client, job).await,
            Job::Semaphore(job) => semaphore::run(&client, job).await,
            Job::Leader(job) => leader::run(&client, job).await,
            Job::Release(job) => release::run(&client, job).await,
        }
    })
}

enum Job {
    Elect(elect::Job),
    Semaphore(semaphore::Job),
    Leader(leader::Job),
    Release(release::Job),
}
