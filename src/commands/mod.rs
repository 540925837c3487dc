//! The doorway: parse, validate, run one subcommand on a current-thread
//! runtime, and turn the outcome into an exit status and at most one line.

mod check;
mod elect;
mod explain;
mod holders;
mod install;
mod leader;
mod list;
mod put;
mod release;
mod semaphore;
mod status;
mod sys;
mod unit;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{ArgMatches, FromArgMatches};

use crate::backend::registry::{Pick, Runner};
use crate::backend::{with_backend, BackendArgs};
use crate::backend::{Backend, BackendName, Engine, Look};
use crate::cli::{Cli, Command};
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
    let unset_empty = |mut command: clap::Command| {
        let unset = crate::backend::BACKENDS
            .iter()
            .flat_map(|b| b.empty_is_unset.iter());
        for (name, id) in unset {
            // A build without the backend has no such flag to unset.
            let defined = command.get_arguments().any(|arg| arg.get_id() == *id);
            if defined && set_empty(name) {
                command = command.mut_arg(*id, |arg| arg.env(None::<&str>));
            }
        }
        command
    };
    if let Some(line) = crate::cli::unknown_backend(&args, std::env::var_os("LOCKRUN_BACKEND")) {
        logging::fatal(None, &line);
        return ExitCode::from(Exit::Usage);
    }
    // A line its subcommand's own lean command accepts (a run's, or a
    // question's such as `leader`) is parsed; else the lean whole command's
    // parse decides, and help, the version and every refusal come from the
    // whole command, parsed again.
    let parsed = crate::cli::parsing_command_for(&args)
        .and_then(|lean| unset_empty(lean).try_get_matches_from(&args).ok())
        .map_or_else(
            || unset_empty(crate::cli::parsing_command()).try_get_matches_from(&args),
            Ok,
        )
        .or_else(|_| {
            let backend = crate::cli::backend_named(&args, std::env::var_os("LOCKRUN_BACKEND"));
            crate::cli::short_help_for(unset_empty(crate::cli::command()), backend)
                .try_get_matches_from(&args)
        });
    let matches = match parsed {
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

/// The flags only some backends understand, by clap id, with their
/// owners: each backend's own, from its definitions, and the lease flags
/// of `elect` and `semaphore` (those that are no backend's own), which
/// every backend with a lease understands.
fn owned_flags() -> Vec<(String, Vec<BackendName>)> {
    use crate::backend::registry::flag_ids;
    use crate::backend::BACKENDS;
    let mut owned: Vec<(String, Vec<BackendName>)> = Vec::new();
    for backend in BACKENDS {
        for id in flag_ids(backend.flags) {
            match owned.iter_mut().find(|(known, _)| *known == id) {
                Some((_, owners)) => owners.push(backend.name),
                None => owned.push((id, vec![backend.name])),
            }
        }
    }
    let leased: Vec<BackendName> = BACKENDS
        .iter()
        .filter(|b| b.lease)
        .map(|b| b.name)
        .collect();
    for id in flag_ids(<crate::cli::SessionArgs as clap::Args>::augment_args) {
        if !owned.iter().any(|(known, _)| *known == id) {
            owned.push((id, leased.clone()));
        }
    }
    owned
}

/// The matches of the command line and of each subcommand under it
/// (`explain` nests `elect` and `semaphore` one level deeper).
fn levels(matches: &ArgMatches) -> Vec<&ArgMatches> {
    let mut levels = vec![matches];
    while let Some((_, sub)) = levels[levels.len() - 1].subcommand() {
        levels.push(sub);
    }
    levels
}

/// Whether flag `id` was typed on the command line at `level` (not taken
/// from a variable or a default).
fn typed(level: &ArgMatches, id: &str) -> bool {
    level
        .try_get_raw(id)
        .ok()
        .flatten()
        .is_some_and(|_| level.value_source(id) == Some(ValueSource::CommandLine))
}

/// A flag typed for another backend is refused, not ignored: the user
/// meant something by it (SPEC §6). Environment variables are left alone,
/// since a shell may export both backends' settings.
fn foreign_flags(matches: &ArgMatches, backend: BackendName) -> Result<(), Failure> {
    let levels = levels(matches);
    let owned = owned_flags();
    for level in levels {
        for (id, owners) in &owned {
            if owners.contains(&backend) {
                continue;
            }
            if typed(level, id) {
                let flag = format!("--{}", id.replace('_', "-"));
                let Some(owner) = owners.first() else {
                    // The lease flags, in a build with no leasing backend.
                    return Err(Failure::Usage(format!(
                        "{flag} belongs to backends this lockrun was built without, and this run uses --backend {}; drop {flag}",
                        backend,
                    )));
                };
                let owned_by = BackendName::listed(owners, "and");
                let plural = if owners.len() > 1 { "s" } else { "" };
                return Err(Failure::Usage(format!(
                    "{flag} belongs to the {owned_by} backend{plural}, and this run uses --backend {}; drop {flag}, or pass --backend {owner}",
                    backend,
                )));
            }
        }
    }
    Ok(())
}

/// What `unit` carries from its own command line into the unit's: the
/// backend, when it was chosen by `--backend` or `LOCKRUN_BACKEND` (the
/// unit's environment has neither). A backend's own flag typed there
/// would be lost, so it is refused with where to put it.
fn outer_backend(matches: &ArgMatches, backend: BackendName) -> Result<Vec<String>, Failure> {
    let levels = levels(matches);
    for level in &levels {
        for (id, _) in owned_flags() {
            if typed(level, &id) {
                let flag = format!("--{}", id.replace('_', "-"));
                return Err(Failure::Usage(format!(
                    "{flag} before the `--` would not reach the unit; give it after `--`, in the command line the unit runs"
                )));
            }
        }
    }
    let chosen = matches!(
        matches.value_source("backend"),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    );
    Ok(if chosen {
        vec!["--backend".into(), backend.to_string()]
    } else {
        Vec::new()
    })
}

fn run(cli: Cli, matches: &ArgMatches) -> Result<Exit, Failure> {
    // A sequencer names the backend it was made on.
    let backend = match &cli.command {
        Command::Check(args) => {
            check::backend_of(&check::Sequencer::decode(&args.sequencer).map_err(Failure::Usage)?)?
        }
        Command::Put(args) => {
            check::backend_of(&check::Sequencer::decode(&args.sequencer).map_err(Failure::Usage)?)?
        }
        _ => cli.backend.backend,
    };
    foreign_flags(matches, backend)?;
    match cli.command {
        // Installing needs no engine, so no engine setting can stand in its way.
        Command::Completions(args) => install::completions(&args),
        Command::Man(args) => install::man(&args),
        Command::Unit(args) => unit::run(&args, &outer_backend(matches, backend)?),
        // Asking a running lockrun needs no engine either.
        Command::Status(args) => status::run(&args),
        command => with_backend(
            backend,
            Run {
                command,
                args: cli.backend,
            },
        ),
    }
}

/// A subcommand to run on the chosen backend.
struct Run {
    command: Command,
    args: BackendArgs,
}

impl Runner for Run {
    type Output = Result<Exit, Failure>;

    fn unavailable(self, name: BackendName) -> Result<Exit, Failure> {
        Err(Failure::Usage(format!(
            "this lockrun was built without the {0} backend (Cargo feature `{0}`); use a build with it, or --backend local",
            name
        )))
    }

    /// The one job runner: every subcommand on every backend.
    fn run<B: Backend>(self, pick: Pick<B>) -> Result<Exit, Failure> {
        let env = ProcessEnv;
        let Run { command, args } = self;
        // Everything the user typed is checked before the runtime, the client
        // or any request exists.
        let mut job = match command {
            Command::Elect(a) => {
                let (job, plan) = elect::prepare(&pick, a, &env)?;
                Job::Elect(job, plan)
            }
            Command::Semaphore(a) => {
                let (job, plan) = semaphore::prepare(&pick, a, &env)?;
                Job::Semaphore(job, plan)
            }
            Command::Leader(a) => Job::Leader(leader::prepare::<B>(a)?),
            Command::Release(a) => Job::Release(release::prepare(&pick, a)?),
            Command::List(a) => Job::List(list::prepare::<B>(a)?),
            Command::Check(a) => Job::Check(check::prepare::<B>(&a.sequencer)?),
            Command::Put(a) => Job::Put(put::prepare::<B>(a)?),
            // Explaining contacts no engine: it validates and computes only.
            Command::Explain(a) => return explain::run(&pick, a, &env),
            Command::Completions(_) | Command::Man(_) | Command::Unit(_) | Command::Status(_) => {
                unreachable!("installing and asking a running lockrun run on no backend")
            }
        };
        if matches!(
            job,
            Job::Leader(_) | Job::List(_) | Job::Release(_) | Job::Check(_) | Job::Put(_)
        ) {
            // These handle no signal: an early one ends them as it always would.
            crate::signals::release_held();
        }
        let backend = B::prepare((pick.args)(&args), job.plan(), &env)?;
        job.fork_guard(<B::Engine as Engine>::CLAIM_LENDS_FD);
        runtime()?.block_on(async move {
            backend.ready().await?;
            match job {
                Job::Elect(mut job, plan) => {
                    job.reach().await?;
                    let began = tokio::time::Instant::now();
                    // Kept until the hold ends: our place ahead of the
                    // waiters, while we take the lock.
                    let ahead = match replace_first(&backend, job.replacing()).await? {
                        Ok(ahead) => ahead,
                        Err(ran_out) => return Ok(ran_out),
                    };
                    job.spend(began.elapsed());
                    let exit = match backend.engine(plan) {
                        Ok(engine) => elect::run(&engine, job).await,
                        Err(e) => Err(e),
                    };
                    if let Some(ahead) = ahead {
                        ahead.remove().await;
                    }
                    exit
                }
                Job::Semaphore(mut job, plan) => {
                    job.reach().await?;
                    let began = tokio::time::Instant::now();
                    // Kept until the hold ends: our place ahead of the
                    // waiters, while we take the lock.
                    let ahead = match replace_first(&backend, job.replacing()).await? {
                        Ok(ahead) => ahead,
                        Err(ran_out) => return Ok(ran_out),
                    };
                    job.spend(began.elapsed());
                    let exit = match backend.engine(plan) {
                        Ok(engine) => semaphore::run(&engine, job).await,
                        Err(e) => Err(e),
                    };
                    if let Some(ahead) = ahead {
                        ahead.remove().await;
                    }
                    exit
                }
                Job::Leader(job) => {
                    let look = Look::Leader {
                        wait: job.wait,
                        watch: job.args.watch,
                        json: job.args.json,
                    };
                    holders::leader(&backend.inspect(&look), B::NAME, job).await
                }
                Job::List(job) => {
                    let look = Look::Leader {
                        wait: None,
                        watch: false,
                        json: job.json,
                    };
                    holders::list(&backend.inspect(&look), B::NAME, job).await
                }
                Job::Release(job) => {
                    let look = Look::Release {
                        flags: (pick.release)(&job.args.backend),
                    };
                    holders::release(&backend.inspect(&look), job).await
                }
                Job::Check(job) => {
                    // Read once; the holder's name comes with every look, so
                    // check needs none of the facts `--json` reads besides.
                    let look = Look::Leader {
                        wait: None,
                        watch: false,
                        json: false,
                    };
                    check::run(&backend.inspect(&look), job).await
                }
                Job::Put(job) => put::run(&backend, job).await,
            }
        })
    }
}

/// `--replace`: takes the target from its holder before acquiring, and
/// says whom it replaced; returns our record ahead of lockrun's waiters
/// ([`crate::backend::Inspect::go_ahead`]), for the caller to keep while
/// it takes the lock, or, when --timeout ran out first, the exit of a lock
/// not had in time, with no try of the lock after it.
async fn replace_first<B: Backend>(
    backend: &B,
    replacing: Option<holders::Replacing>,
) -> Result<Result<Option<crate::backend::Ahead>, Exit>, Failure> {
    let Some(replacing) = replacing else {
        return Ok(Ok(None));
    };
    // With the facts `--json` shows: a Consul holder's host and pid are in
    // its session's name.
    let look = Look::Leader {
        wait: None,
        watch: false,
        json: true,
    };
    let inspect = backend.inspect(&look);
    let replace = holders::replace(&inspect, replacing);
    tokio::pin!(replace);
    // The forwarded signals are held back, pending, until the hold handles
    // them: looked for while we wait on the holder, so that a TERM or an
    // INT ends a --replace that waits (without --timeout, as long as a
    // stopped holder on this host lives) instead of pending for ever. The
    // hold then answers the signal as it answers one while waiting for the
    // lock; the holder, asked already, may still stop.
    let mut look_again = tokio::time::interval(std::time::Duration::from_millis(50));
    loop {
        tokio::select! {
            replaced = &mut replace => {
                return Ok(match replaced? {
                    None => Ok(None),
                    Some(holders::Replaced::Took(line, ahead)) => {
                        logging::say(&line);
                        Ok(ahead)
                    }
                    Some(holders::Replaced::RanOut(line, exit)) => {
                        logging::say(&line);
                        Err(exit)
                    }
                });
            }
            _ = look_again.tick() => {
                if crate::signals::forwarded_pending() {
                    logging::say("--replace: a signal came while we waited for the holder to stop; giving up the replacement");
                    return Ok(Ok(None));
                }
            }
        }
    }
}

/// One thread: every child is forked from the main thread, which lives as
/// long as lockrun does, so the parent-death signal is reliable.
fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Internal(format!("cannot start the runtime ({e})")))
}

enum Job<P> {
    Elect(elect::Job, P),
    Semaphore(semaphore::Job, P),
    Leader(leader::Job),
    List(list::Job),
    Release(release::Job),
    Check(check::Job),
    Put(put::Job),
}

impl<P> Job<P> {
    /// Everything the user typed is valid and the engine's client is built:
    /// the guard of a job that runs a command can be forked now, while
    /// lockrun is small and has one thread, before the runtime starts.
    fn fork_guard(&mut self, lends: bool) {
        match self {
            Job::Elect(job, _) => job.fork_guard(lends),
            Job::Semaphore(job, _) => job.fork_guard(lends),
            Job::Leader(_) | Job::List(_) | Job::Release(_) | Job::Check(_) | Job::Put(_) => {}
        }
    }

    /// What the backend's hold rules made of a holding job (its TTL and
    /// every other hold setting); `None` for looking and releasing, which
    /// hold nothing.
    fn plan(&self) -> Option<&P> {
        match self {
            Job::Elect(_, plan) | Job::Semaphore(_, plan) => Some(plan),
            Job::Leader(_) | Job::List(_) | Job::Release(_) | Job::Check(_) | Job::Put(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::registry::{flag_ids, registration};
    use crate::backend::BACKENDS;

    /// Ownership is read from the registrations, not kept in a table (each
    /// backend's flags are its folder's `args.rs`): every flag a backend
    /// defines is owned by it and by every other backend that defines it,
    /// and by no one else; the lease flags by exactly the backends with a
    /// lease; and no flag every backend shares is owned at all.
    #[test]
    fn flag_ownership_comes_from_the_backends_definitions() {
        let owned = owned_flags();
        let owners_of = |id: &str| -> Vec<BackendName> {
            owned
                .iter()
                .find(|(known, _)| known == id)
                .map(|(_, owners)| owners.clone())
                .unwrap_or_default()
        };
        let defines = |b: &crate::backend::Registration, id: &str| {
            flag_ids(b.flags).iter().any(|own| own == id)
        };
        for backend in BACKENDS {
            for id in flag_ids(backend.flags) {
                let want: Vec<BackendName> = BACKENDS
                    .iter()
                    .filter(|b| defines(b, &id))
                    .map(|b| b.name)
                    .collect();
                assert_eq!(owners_of(&id), want, "--{id}");
            }
        }
        let leased: Vec<BackendName> = BACKENDS
            .iter()
            .filter(|b| b.lease)
            .map(|b| b.name)
            .collect();
        for id in ["ttl", "clock_rate_error"] {
            assert!(
                !BACKENDS.iter().any(|b| defines(b, id)),
                "--{id} is a lease flag, no backend's own"
            );
            assert_eq!(owners_of(id), leased, "--{id}");
        }
        // The flags of `elect` that are not the session's: every backend's.
        let session = flag_ids(<crate::cli::SessionArgs as clap::Args>::augment_args);
        for id in flag_ids(<crate::cli::ElectArgs as clap::Args>::augment_args) {
            if session.contains(&id) || BACKENDS.iter().any(|b| defines(b, &id)) {
                continue;
            }
            assert_eq!(owners_of(&id), Vec::new(), "--{id} is every backend's");
        }
    }

    #[test]
    fn every_backend_is_registered_once_and_its_flags_are_on_the_command_line() {
        use clap::ValueEnum;
        let mut cli = crate::cli::command();
        cli.build();
        let mut all: Vec<String> = cli
            .get_arguments()
            .map(|a| a.get_id().to_string())
            .collect();
        for sub in cli.get_subcommands() {
            all.extend(sub.get_arguments().map(|a| a.get_id().to_string()));
        }
        // A name this build lacks has no registration (the registry's own
        // test checks that it runs nothing either).
        for name in BackendName::value_variants() {
            let registered = BACKENDS.iter().filter(|b| b.name == *name).count();
            assert!(registered <= 1, "{name:?} is registered {registered} times");
            if registered == 0 {
                continue;
            }
            for id in flag_ids(registration(*name).flags) {
                assert!(
                    all.contains(&id),
                    "{name:?}'s --{id} is not on the command line"
                );
            }
        }
    }
}
