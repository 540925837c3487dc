//! The command line, defined once: `--help`, the man pages and the shell
//! completions are all rendered from these types.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

pub use crate::backend::BackendArgs;
pub use crate::backend::BackendName;
pub use crate::child::{ContainmentMode, LeftoversMode};
use crate::logging::LogFormat;
use crate::notify::Ready;
use crate::signals::{Signal, SignalParser};

const AFTER_HELP: &str = "\
Examples:
  lockrun elect service/db/leader -- ./db-primary
  lockrun semaphore --limit 3 jobs/reindex -- ./reindex.sh
  lockrun semaphore --limit 1 --no-wait jobs/backup -- ./backup.sh
  leader=$(lockrun leader service/db/leader); status=$?   # 1: no leader, 125: cannot tell
  lockrun release service/db/leader

Exit status: the child's own; 0 held / released; 1 no holder / nothing
released; 2 usage; 75 not acquired; 123 --max-time reached, child stopped; 124
lock lost, child stopped; 125 lockrun failed; 126/127 COMMAND not executable /
not found; 128+N signal N while waiting. See lockrun(1).";

/// Run a command only while holding a lock or semaphore slot.
///
/// (The long help, naming the backends of this build, is made from their
/// registrations by [`command`].)
#[derive(Debug, Parser)]
#[command(name = "lockrun", version = env!("LOCKRUN_VERSION"), after_help = AFTER_HELP, max_term_width = 100, args_override_self = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub backend: BackendArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run COMMAND while holding the leader lock on KEY.
    ///
    /// (The long help, with the engines' tools KEY excludes, is made from
    /// the registrations by [`command`].)
    #[command(after_help = "\
Examples:
  lockrun elect service/db/leader -- ./db-primary
  lockrun elect --campaign --value \"$(hostname):5432\" service/db/leader -- ./db-primary
  lockrun elect --timeout 30s --shell jobs/migrate -- './migrate.sh && ./notify.sh'
  lockrun elect --register-service db:5432 --service-tag primary service/db/leader -- ./db-primary")]
    Elect(ElectArgs),
    /// Run COMMAND while holding one of N slots of the semaphore PREFIX.
    ///
    /// (The long help is made from the registrations by [`command`].)
    #[command(after_help = "\
Examples:
  lockrun semaphore --limit 3 jobs/reindex -- ./reindex.sh
  lockrun semaphore --limit 1 --no-wait jobs/backup -- ./backup.sh")]
    Semaphore(SemaphoreArgs),
    /// Print who holds the lock on KEY (or the semaphore PREFIX).
    ///
    /// (The long help is made from the registrations by [`command`].)
    #[command(after_help = "\
Examples:
  leader=$(lockrun leader service/db/leader); status=$?   # 1: no leader, 125: cannot tell
  lockrun leader --json service/db/leader
  lockrun leader --wait --timeout 1m service/db/leader
  lockrun leader --watch service/db/leader
  lockrun leader jobs/reindex             # a semaphore: one holder per line

Exit status: 0 held, 1 not held, 125 error.")]
    Leader(LeaderArgs),
    /// Print every held lock and semaphore under PREFIX, with its holders.
    ///
    /// (The long help, with the peer tools it lists, is made from the
    /// registrations by [`command`].)
    #[command(after_help = "\
Examples:
  lockrun list
  lockrun list jobs
  lockrun list --json jobs | jq -r 'select(.held) | .key'

Exit status: 0 something is held, 1 nothing is, 125 cannot tell (an error, or a
view the engine filtered).")]
    List(ListArgs),
    /// Force-release the lock on KEY (or semaphore slots), from any host.
    ///
    /// (The long help, and the exit status's words of each backend, are made
    /// from the registrations by [`command`].)
    #[command(after_help = "\
Examples:
  lockrun release service/db/leader
  lockrun release --all jobs/reindex      # free every slot of a semaphore

Exit status: 0 released, 1 nothing was held, 125 error.")]
    Release(ReleaseArgs),
    /// Print the timing promise that elect or semaphore would keep with these flags.
    ///
    /// Takes the flags of `elect` or `semaphore` (COMMAND is not needed) and
    /// prints, for them and the backend: how often the lease is renewed, the
    /// last moment COMMAND can still run after the last confirmed renewal
    /// (SIGKILL included), the earliest moment a rival can acquire, the margin
    /// between them, the clock-rate error that margin tolerates, and what the
    /// promise assumes. It validates the flags as `elect` and `semaphore` do
    /// (usage errors exit 2) and contacts no engine. A run's own line may
    /// follow `explain` whole: its COMMAND is checked as the run would
    /// check it (127 or 126 if it cannot run) and named, never started.
    #[command(after_help = "\
Examples:
  lockrun explain elect service/db/leader
  lockrun explain semaphore --limit 3 jobs/reindex
  lockrun explain elect --kill-timeout 2s service/db/leader -- ./db-primary

Exit status: 0 explained, 2 usage, 126 and 127 as for a run when COMMAND cannot run.")]
    Explain(ExplainArgs),
    /// Print the completion script for SHELL on stdout.
    ///
    /// The script completes subcommands, flags, signal names and, after `--`,
    /// the wrapped command. Write it where your shell looks for completions.
    #[command(after_help = "\
Examples:
  lockrun completions bash > ~/.local/share/bash-completion/completions/lockrun
  lockrun completions zsh > ~/.zfunc/_lockrun  # with fpath+=(~/.zfunc) before compinit
  lockrun completions fish > ~/.config/fish/completions/lockrun.fish")]
    Completions(CompletionsArgs),
    /// Write the man pages into DIR: lockrun(1) and one page per subcommand.
    ///
    /// Writes lockrun.1 and every lockrun-SUBCOMMAND.1 it refers to, replacing
    /// files of the same name; DIR is created if missing. Point DIR at a man1
    /// directory on man's search path.
    #[command(after_help = "\
Examples:
  lockrun man --dir ~/.local/share/man/man1
  sudo lockrun man --dir /usr/local/share/man/man1")]
    Man(ManArgs),
    /// Print a systemd unit that runs this lockrun: the binary's own path.
    ///
    /// Prints, on stdout, a Type=notify service unit whose ExecStart= is this
    /// very binary with the `elect` or `semaphore` command line given after
    /// `--`, checked as lockrun would run it. It adds --notify=start (a
    /// standby is a started unit: plain --notify would block `systemctl
    /// enable --now` and boot) and, for elect, --campaign, unless given.
    /// Every word reaches lockrun as typed: `$` and `%` are escaped for
    /// systemd.
    #[command(after_help = "\
Examples:
  lockrun unit -- elect --value \"$(hostname):5432\" service/db/leader -- /usr/local/bin/db-primary \\
    | sudo tee /etc/systemd/system/db-primary.service
  lockrun unit --description 'reindex, two hosts at a time' -- semaphore --limit 2 jobs/reindex -- ./reindex.sh")]
    Unit(UnitArgs),
    /// Exit 0 while this lockrun's lock is held with enough time left (for COMMAND).
    ///
    /// Asks the status endpoint of a running `lockrun elect` or `semaphore`
    /// (LOCKRUN_STATUS in COMMAND's environment, or --status-addr) whether
    /// the lock is held with at least the safety margin, and --for, left
    /// before COMMAND would be stopped: a script asks before each side
    /// effect it cannot take back.
    #[command(after_help = "\
Examples:
  lockrun status && ./apply-migration      # inside COMMAND
  lockrun status --for 10s || exit 0       # at least 10 s of lease left
  lockrun status --status-addr 127.0.0.1:8300

Exit status: 0 held with that much left, 1 not held or not enough left, 2 usage,
125 cannot tell (no endpoint, no answer).")]
    Status(crate::ops::StatusArgs),
    /// Exit 0 only while the holder a sequencer names still holds its lock.
    ///
    /// (The long help, with each engine's name for a holder, is made from
    /// the registrations by [`command`].)
    #[command(after_help = "\
Examples:
  lockrun check \"$LOCKRUN_SEQUENCER\" && apply-write

Exit status: 0 still held by that holder with that fence, 1 not held or held
by another, 2 usage (not a sequencer), 125 cannot tell (engine unreachable).")]
    Check(crate::ops::CheckArgs),
    /// Write KEY=VALUE into the engine only while a sequencer's holder holds its lock.
    ///
    /// (The long help, which names the backends that have it, is made from
    /// their registrations by [`command`].)
    #[command(after_help = "\
Examples:
  lockrun put --sequencer \"$LOCKRUN_SEQUENCER\" service/db/config \"$(cat config.json)\"

Exit status: 0 written, 1 refused (the holder lost the lock), 2 usage, 125 error.")]
    Put(crate::ops::PutArgs),
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(subcommand)]
    pub what: ExplainWhat,
}

/// The run to explain: the very flags of `elect` and `semaphore`, so that the
/// two cannot drift apart.
#[derive(Debug, Subcommand)]
pub enum ExplainWhat {
    /// Explain `lockrun elect` with these flags.
    Elect(ElectArgs),
    /// Explain `lockrun semaphore` with these flags.
    Semaphore(SemaphoreArgs),
}

/// The command line as parsed and documented: [`Cli`], with COMMAND optional
/// under `explain`, which runs nothing, the help of every flag and
/// subcommand that differs by engine made of its shared words and the
/// registrations' (`help_with_notes`), and every backend's own examples
/// under the subcommands they show.
pub fn command() -> clap::Command {
    // `mut_subcommand` moves the subcommand last: `put` first, then
    // `explain`, keeps the order `--help` lists them in.
    let command = parsing_command()
        .mut_subcommand("put", |put| put.long_about(put_about()))
        .mut_subcommand("explain", |explain| explain);
    let command = help_with_notes(command);
    // `mut_subcommands` keeps their order, which `mut_subcommand` does not.
    command.mut_subcommands(|sub| {
        let lines: Vec<&str> = crate::backend::BACKENDS
            .iter()
            .flat_map(|b| b.examples)
            .filter(|(name, _)| *name == sub.get_name())
            .map(|(_, line)| *line)
            .collect();
        if lines.is_empty() {
            return sub;
        }
        let text = sub.get_after_help().map(ToString::to_string);
        let text = text.unwrap_or_else(|| "Examples:".into());
        // The lines join the Examples paragraph, before an Exit status one.
        let (mut examples, rest) = match text.split_once("\n\n") {
            Some((examples, rest)) => (examples.to_string(), Some(rest.to_string())),
            None => (text, None),
        };
        for line in lines {
            examples.push_str(&format!("\n  {line}"));
        }
        if let Some(rest) = rest {
            examples.push_str(&format!("\n\n{rest}"));
        }
        sub.after_help(examples)
    })
}

/// `--backend`'s values: every name parses (a backend left out of this
/// build then says so), but only this build's are offered, in `--help`,
/// lockrun(1) and the completions.
#[derive(Clone)]
struct BuiltBackends;

impl clap::builder::TypedValueParser for BuiltBackends {
    type Value = BackendName;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<BackendName, clap::Error> {
        clap::builder::EnumValueParser::<BackendName>::new().parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        use clap::ValueEnum;
        Some(Box::new(BackendName::value_variants().iter().filter_map(
            |name| {
                let built = crate::backend::BACKENDS.iter().any(|b| b.name == *name);
                name.to_possible_value().map(|p| p.hide(!built))
            },
        )))
    }
}

/// Items as a sentence lists them: `a`, `a and b`, `a, b, and c` (the last
/// comma, since an item may hold an `and` of its own).
fn listed(items: &[&str], conjunction: &str) -> String {
    match items.split_last() {
        Some((last, rest)) if rest.len() > 1 => {
            format!("{}, {conjunction} {last}", rest.join(", "))
        }
        Some((last, [first])) => format!("{first} {conjunction} {last}"),
        _ => items.concat(),
    }
}

/// Words joined into one paragraph, the empty ones left out.
fn paragraph(parts: &[&str]) -> String {
    parts
        .iter()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `text` cut into lines of at most `width` columns, as the hand-wrapped
/// after-help paragraphs are.
fn wrap(text: &str, width: usize) -> String {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(line) if line.len() + 1 + word.len() <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines.join("\n")
}

/// The help of the flags and subcommands whose words differ by engine: the
/// shared sentences here, with the notes of the backends in this build
/// ([`crate::backend::Registration::notes`]) put in, so that no backend is
/// named outside its folder and a backend left out is not named at all.
fn help_with_notes(command: clap::Command) -> clap::Command {
    use crate::backend::{Topic, BACKENDS};
    let said = |topic: Topic| topic.notes().join(" ");
    // A backend without a lease refuses the lease flags.
    let no_lease: Vec<String> = BACKENDS
        .iter()
        .filter(|b| !b.lease)
        .map(|b| format!("The {} backend has no lease, and refuses it.", b.name))
        .collect();
    let no_lease = no_lease.join(" ");

    let about = format!(
        "Run a command only while holding a lock or semaphore slot.\n\n\
         lockrun takes a leader lock (or one of N semaphore slots) {}, runs COMMAND while it \
         holds it, and stops COMMAND the moment holding it can no longer be guaranteed: the \
         child never runs at a moment when another holder could have acquired the lock.",
        listed(&Topic::Where.notes(), "or")
    );
    let excludes = Topic::Excludes.notes();
    let excludes = if excludes.is_empty() {
        String::new()
    } else {
        format!("KEY excludes {}.", listed(&excludes, "and"))
    };
    let elect = format!(
        "Run COMMAND while holding the leader lock on KEY.\n\n{}",
        paragraph(&[
            "lockrun takes the lock on KEY (waiting, without polling, while another holder has \
             it), runs COMMAND and keeps the lock while it runs (renewing its lease, where the \
             engine has one). When COMMAND exits, lockrun releases the lock and exits with \
             COMMAND's status; when the lock is lost, it stops COMMAND and exits 124, or \
             campaigns again with --campaign.",
            &excludes,
        ])
    );
    let semaphore = format!(
        "Run COMMAND while holding one of N slots of the semaphore PREFIX.\n\n{}",
        paragraph(&[
            "The same lifecycle as elect, holding one of N slots.",
            &said(Topic::Semaphore),
            "Every contender must use the same --limit. LOCKRUN_LOCK_INDEX orders admissions \
             across the semaphore, not each slot: a slot admitted later has a greater number \
             (above that of every slot that ended before), but N holders at once may start \
             their commands in any order.",
        ])
    );
    let leader = format!(
        "Print who holds the lock on KEY (or the semaphore PREFIX).\n\n{}",
        paragraph(&[
            "Prints the holder's value on stdout and exits 0, or exits 1 if nobody holds it. \
             For a semaphore prefix, prints one live holder per line.",
            &said(Topic::Leader),
        ])
    );
    let peers = Topic::ListPeers.notes();
    let peers = if peers.is_empty() {
        String::new()
    } else {
        format!(
            "Peer tools' holders are listed too ({}).",
            listed(&peers, "and")
        )
    };
    let list = format!(
        "Print every held lock and semaphore under PREFIX, with its holders.\n\n{}",
        paragraph(&[
            "One row per holder: the key (or semaphore prefix), its kind, the holder as \
             `leader` names it, its fence, host, pid and since, where the engine knows them. \
             Without PREFIX, every lock lockrun can see.",
            &peers,
            &said(Topic::List),
        ])
    );
    let release = format!(
        "Force-release the lock on KEY (or semaphore slots), from any host.\n\n{}",
        paragraph(&[
            "Works from any host. Prints whose lock it was; the holder's lockrun notices and \
             stops its child with its full --kill-timeout.",
            &said(Topic::Release),
            "A release leaves no delay before a rival may take the lock, so a rival may start \
             while that child is still stopping: the one overlap lockrun accepts, because an \
             operator asked for it.",
        ])
    );
    let holders = Topic::Holder.notes();
    let holders = if holders.is_empty() {
        String::new()
    } else {
        format!(" ({})", listed(&holders, "or"))
    };
    let check = format!(
        "Exit 0 only while the holder a sequencer names still holds its lock.\n\n\
         COMMAND of `lockrun elect` finds a sequencer in LOCKRUN_SEQUENCER: one opaque token \
         naming the backend, the key, the fence (LOCKRUN_LOCK_INDEX) and the holder by the \
         engine's own name for it{holders}. A service COMMAND writes to can run `lockrun \
         check` (with the engine's usual flags and variables) to refuse a leader that is no \
         longer one. The backend is the sequencer's."
    );

    let ttl = format!(
        "How long the engine keeps a silent holder's lock.\n\n{}",
        paragraph(&[
            &said(Topic::Ttl),
            "Shorter notices a dead host sooner.",
            &no_lease
        ])
    );
    let clock_rate_error = format!(
        "The largest combined clock-rate error the stop window allows for.\n\n{}",
        paragraph(&[
            "Between this host and the engine's, in ppm or %, on every backend with a lease.",
            &no_lease,
            "The default is two hosts slewing opposite ways at chrony's maximum, 2 x 83,333 \
             ppm. This host's share is half: when the kernel slows our clock more (adjtimex), \
             the window narrows, or the command is stopped (exit 124) when none is left.",
        ])
    );
    let kill_timeout = format!(
        "Grace period after the kill signal before SIGKILL.\n\n{}",
        paragraph(&[
            "[default: 5s for elect, 2s for semaphore, less if --ttl or a backend's own timing \
             flags leave less room]. It must fit in the safety budget (lockrun says by how much \
             if it does not).",
            &said(Topic::KillTimeout),
        ])
    );
    let replace = format!(
        "Take the lock from its holder (a semaphore's oldest slot), never overlapping.\n\n{}",
        paragraph(&[
            "Leaves the holder a note naming this run (host, pid, --value). A lockrun holder \
             reads it as the ask to let go: it stops its command's whole tree and only then \
             frees the lock, so every other contender finds the lock held until the tree is \
             gone. Once the lock is free, this run acquires it and says whom it replaced and how \
             (answered, or its lease lapsed); the holder exits 124 (with --campaign too: it does not campaign again), its line \
             naming this run. Any other holder (a peer tool's, or one the engine gives no way \
             to ask) is one line and 125, and is left holding. Before it asks, it puts a \
             waiter's record above every --priority, so that lockrun's writers already waiting \
             let it take the lock first; a peer tool's waiters cannot be made to wait, and \
             one may get the lock first. A holder once asked stops even if this run gives up \
             (--timeout runs out, a signal): the ask cannot be taken back. When --timeout runs \
             out before the holder's command is seen to end, the run says so and exits as \
             --timeout does (75, or --conflict-exit-code), without trying the lock again.",
            &said(Topic::Replace),
        ])
    );
    let modes = Topic::SharedMode.notes();
    let modes = if modes.is_empty() {
        String::new()
    } else {
        format!(
            "Each backend takes its engine's own shared mode, so that the engine's own tools \
             share the lock ({}).",
            listed(&modes, "and")
        )
    };
    let shared = format!(
        "Take the lock shared, as `flock -s`: readers run together, a writer alone.\n\n{}",
        paragraph(&[
            "Without it the lock is exclusive (-x, as `flock -x`). Once a lockrun writer \
             waits, readers that come after it wait behind it.",
            &modes,
            &said(Topic::Shared),
        ])
    );
    let fences = Topic::Fence.notes();
    let fences = if fences.is_empty() {
        String::new()
    } else {
        format!(" ({})", fences.join("; "))
    };
    let details = Topic::Details.notes();
    let details = if details.is_empty() {
        String::new()
    } else {
        format!(" ({})", listed(&details, "and"))
    };
    let leader_json = format!(
        "Print one JSON object, the same schema on every backend: {{\"key\", \"backend\", \
         \"kind\": \"lock\"|\"semaphore\", \"held\", \"limit\" (null for a lock), \"holders\": \
         [...]}}; with --watch, one per line. A holder is {{\"value\", \"fence\", \"since\", \
         \"since_unix\", \"host\", \"pid\", \"details\"}}, null where the engine does not know; \
         \"fence\" is the holder's LOCKRUN_LOCK_INDEX where it can be read back{fences}, else \
         null; \"details\" holds the engine's own facts{details}. \"waiters\" lists lockrun's \
         writers waiting for a lock, highest --priority first, each {{\"priority\", \"value\", \
         \"pid\"}}; null for a semaphore."
    );
    let list_json = paragraph(&[
        "Print one JSON object per lock or semaphore, a line each, in the schema of `leader \
         --json`.",
        &said(Topic::ListJson),
    ]);
    let release_status = said(Topic::ReleaseStatus);

    // The flags of `elect` and `semaphore`, also under `explain`
    // (`mut_args` keeps their order, which `mut_arg` does not).
    let holding = |sub: clap::Command| {
        sub.mut_args(|a| match a.get_id().as_str() {
            "ttl" => a.long_help(ttl.clone()),
            "clock_rate_error" => a.long_help(clock_rate_error.clone()),
            "kill_timeout" => a.long_help(kill_timeout.clone()),
            "replace" => a.long_help(replace.clone()),
            "shared" => a.long_help(shared.clone()),
            _ => a,
        })
    };
    // A `--json` whose one paragraph is its help in `-h` as in `--help`.
    let json = |sub: clap::Command, text: &str| {
        sub.mut_args(|a| match a.get_id().as_str() {
            "json" => a.help(text.to_string()).long_help(None::<&str>),
            _ => a,
        })
    };
    command
        .long_about(about)
        .mut_subcommands(|sub| match sub.get_name() {
            "elect" => holding(sub.long_about(elect.clone())),
            "semaphore" => holding(sub.long_about(semaphore.clone())),
            "explain" => sub.mut_subcommands(&holding),
            "leader" => json(sub.long_about(leader.clone()), &leader_json),
            "list" => json(sub.long_about(list.clone()), &list_json),
            "release" => {
                let status = sub.get_after_help().map(ToString::to_string);
                let sub = sub.long_about(release.clone());
                match status {
                    Some(text) if !release_status.is_empty() => {
                        let (examples, status) = text.split_once("\n\n").unwrap_or(("", &text));
                        let status = wrap(&format!("{status} {release_status}"), 80);
                        sub.after_help(format!("{examples}\n\n{status}"))
                    }
                    _ => sub,
                }
            }
            "check" => sub.long_about(check.clone()),
            _ => sub,
        })
}

/// What parses the command line, without the words that only help and
/// errors show ([`command`] adds them): the same arguments, values and
/// rules, so that a line it accepts means what it means to [`command`].
/// Built on every run, where the whole help cost a run's start-up the
/// copying of every help text (`perf`: a fifth of lockrun's page faults
/// before its first step).
pub fn parsing_command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command()
        .mut_args(offered_backends)
        .mut_subcommand("explain", |explain| {
            ["elect", "semaphore"]
                .into_iter()
                .fold(explain, |explain, name| {
                    explain
                        .mut_subcommand(name, |sub| sub.mut_arg("command", |a| a.required(false)))
                })
        })
}

/// What parses the line of a run, or of a question scripts ask often:
/// [`Cli`]'s top level with the one subcommand the line can match, the
/// first word of `args` that names one, where it is `elect`, `semaphore`,
/// `leader`, `list`, `release`, `status`, `check` or `put`. Parsing copies
/// each of the top level's global flags into every subcommand there is,
/// which for all fourteen was half of a run's parse (`perf`: 0.45–0.68 ms
/// of its start-up, against 0.19–0.26 ms for one). Both top levels are the
/// same, so a line accepted here has its subcommand at the first word the
/// top level does not take as a flag or a flag's value, as it would in
/// [`parsing_command`], which parses again a line that names none of them
/// or that this command refuses (as when the word found was a flag's value
/// and the subcommand another). The top level and each subcommand here are
/// built from the same derives as [`parsing_command`]'s, less what only
/// help shows; a unit test holds every field of theirs that parsing reads
/// to [`parsing_command`]'s.
pub fn parsing_command_for(args: &[OsString]) -> Option<clap::Command> {
    let named = own_words(args)
        .filter_map(|w| w.to_str())
        .find(|w| Command::has_subcommand(w))?;
    use clap::Command as C;
    let sub = match named {
        "elect" => ElectArgs::augment_args(C::new("elect")),
        "semaphore" => SemaphoreArgs::augment_args(C::new("semaphore")),
        "leader" => LeaderArgs::augment_args(C::new("leader")),
        "list" => ListArgs::augment_args(C::new("list")),
        "release" => ReleaseArgs::augment_args(C::new("release")),
        "status" => crate::ops::StatusArgs::augment_args(C::new("status")),
        "check" => crate::ops::CheckArgs::augment_args(C::new("check")),
        "put" => crate::ops::PutArgs::augment_args(C::new("put")),
        _ => return None,
    };
    Some(lean_top().subcommand(sub))
}

/// lockrun's own words on a command line: those after the program's name,
/// up to `--` (what follows is COMMAND's).
fn own_words(args: &[OsString]) -> impl Iterator<Item = &OsString> {
    args.iter().skip(1).take_while(|w| *w != "--")
}

/// [`Cli`]'s top level as its derive makes it, without its subcommands:
/// its settings, groups and flags.
fn lean_top() -> clap::Command {
    let top = clap::Command::new("lockrun")
        .version(env!("LOCKRUN_VERSION"))
        .max_term_width(100)
        .args_override_self(true)
        .subcommand_required(true)
        .arg_required_else_help(true)
        .group(clap::ArgGroup::new("Cli").multiple(true));
    OutputArgs::augment_args(BackendArgs::augment_args(top)).mut_args(offered_backends)
}

/// `--backend` with this build's values offered ([`BuiltBackends`]); any
/// other argument as it is.
fn offered_backends(arg: clap::Arg) -> clap::Arg {
    match arg.get_id().as_str() {
        "backend" => arg.value_parser(BuiltBackends),
        _ => arg,
    }
}

/// `put`'s long help, naming the backends of this build that have a fenced
/// write ([`crate::backend::Backend::FENCED_PUT`]) and those that do not.
fn put_about() -> String {
    use clap::ValueEnum;
    struct Fenced;
    impl crate::backend::registry::Runner for Fenced {
        type Output = Option<bool>;
        fn run<B: crate::backend::Backend>(
            self,
            _: crate::backend::registry::Pick<B>,
        ) -> Option<bool> {
            Some(B::FENCED_PUT)
        }
        fn unavailable(self, _: BackendName) -> Option<bool> {
            None
        }
    }
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for name in BackendName::value_variants() {
        match crate::backend::with_backend(*name, Fenced) {
            Some(true) => with.push(*name),
            Some(false) => without.push(*name),
            None => {}
        }
    }
    let mut about = String::from(
        "Write KEY=VALUE into the engine only while a sequencer's holder holds its lock.\n\n\
         A fenced write: one step on the engine that sets KEY only while the holder's own \
         record there still exists (the session holding the lock key, its contender key or \
         node). Once the holder has lost the lock the write is refused and nothing is written. \
         A KEY inside a lock's own records, which would break or wedge that lock, is refused \
         (2, nothing written).",
    );
    for sentence in crate::backend::Topic::Put.notes() {
        about.push(' ');
        about.push_str(sentence);
    }
    if !with.is_empty() {
        about.push_str(&format!(" On {}", BackendName::listed(&with, "and")));
        if !without.is_empty() {
            about.push_str(&format!("; not on {}", BackendName::listed(&without, "or")));
        }
        about.push('.');
    }
    about
}

/// `-h` for the backend a run names: the other backends' flags (and the
/// lease's, on a backend without one) are left to `--help`, which keeps
/// every flag, and the short help ends saying so. The man pages and
/// completions are rendered from [`command`] itself, with every flag.
pub fn short_help_for(command: clap::Command, backend: BackendName) -> clap::Command {
    let own = crate::backend::BACKENDS.iter().find(|b| b.name == backend);
    let ids_of = |flags: fn(clap::Command) -> clap::Command| -> Vec<clap::Id> {
        flags(clap::Command::new("flags"))
            .get_arguments()
            .map(|a| a.get_id().clone())
            .collect()
    };
    let kept: Vec<clap::Id> = own.map(|b| ids_of(b.flags)).unwrap_or_default();
    let mut hidden: Vec<clap::Id> = crate::backend::BACKENDS
        .iter()
        .filter(|b| b.name != backend)
        .flat_map(|b| ids_of(b.flags))
        .filter(|id| !kept.contains(id))
        .collect();
    if !own.is_some_and(|b| b.lease) {
        hidden.extend(["ttl", "clock_rate_error"].map(clap::Id::from));
    }
    let others: Vec<BackendName> = crate::backend::BACKENDS
        .iter()
        .map(|b| b.name)
        .filter(|n| *n != backend)
        .collect();
    // Other backends' example lines leave the short help with their flags.
    let foreign: Vec<&str> = crate::backend::BACKENDS
        .iter()
        .filter(|b| b.name != backend)
        .flat_map(|b| b.examples.iter().map(|(_, line)| *line))
        .collect();
    let note = format!(
        "Flags of --backend {backend}; `--backend {} -h`: theirs; --help: all.",
        others
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("|")
    );
    fn apply(
        command: clap::Command,
        hidden: &[clap::Id],
        foreign: &[&str],
        note: &str,
    ) -> clap::Command {
        let long = command
            .get_after_long_help()
            .or(command.get_after_help())
            .cloned();
        // An example of a flag that -h does not show is left to --help.
        let unshown: Vec<String> = command
            .get_arguments()
            .filter(|a| a.is_hide_short_help_set())
            .filter_map(|a| a.get_long().map(|l| format!("--{l} ")))
            .collect();
        let short = match command.get_after_help() {
            Some(text) => {
                let text = text.to_string();
                let own: Vec<&str> = text
                    .lines()
                    .filter(|l| !foreign.contains(&l.trim()))
                    .filter(|l| !unshown.iter().any(|flag| l.contains(flag.as_str())))
                    .collect();
                format!("{}\n\n{note}", own.join("\n"))
            }
            None => note.to_string(),
        };
        let command = command
            .mut_args(|a| {
                if hidden.contains(a.get_id()) {
                    a.hide_short_help(true)
                } else {
                    a
                }
            })
            .after_help(short);
        let command = match long {
            Some(long) => command.after_long_help(long),
            None => command.after_long_help(""),
        };
        command.mut_subcommands(|s| apply(s, hidden, foreign, note))
    }
    apply(command, &hidden, &foreign, &note)
}

/// The backend a command line names (`--backend X`, `--backend=X`, else
/// LOCKRUN_BACKEND, else the default), read before clap parses it so that
/// `-h` can show that backend's flags. Anything unreadable is left for
/// clap to refuse: the default is shown meanwhile.
pub fn backend_named(args: &[OsString], variable: Option<OsString>) -> BackendName {
    use clap::ValueEnum;
    let named = |value: &std::ffi::OsStr| {
        value
            .to_str()
            .and_then(|v| BackendName::from_str(v, false).ok())
    };
    let mut words = own_words(args);
    while let Some(word) = words.next() {
        if word == "--backend" {
            return words
                .next()
                .and_then(|v| named(v))
                .unwrap_or(BackendName::Consul);
        }
        if let Some(value) = word.to_str().and_then(|w| w.strip_prefix("--backend=")) {
            return named(value.as_ref()).unwrap_or(BackendName::Consul);
        }
    }
    variable
        .as_deref()
        .and_then(named)
        .unwrap_or(BackendName::Consul)
}

/// The line refusing a backend name nobody registered, when the line asks
/// for help: clap would print the default backend's help for
/// `--backend xyz elect -h` (and for LOCKRUN_BACKEND=xyz) as if the name
/// were good. A run line keeps clap's own refusal.
pub fn unknown_backend(args: &[OsString], variable: Option<OsString>) -> Option<String> {
    use clap::ValueEnum;
    let ours: Vec<&OsString> = own_words(args).collect();
    let asks_help = ours
        .iter()
        .any(|w| *w == "-h" || *w == "--help" || *w == "help");
    if !asks_help {
        return None;
    }
    let mut words = ours.iter();
    let mut named = None;
    while let Some(word) = words.next() {
        if *word == "--backend" {
            named = Some(("--backend", words.next().map(|v| v.to_string_lossy())));
            break;
        }
        if let Some(value) = word.to_str().and_then(|w| w.strip_prefix("--backend=")) {
            named = Some(("--backend", Some(value.into())));
            break;
        }
    }
    let (source, value) = match named {
        Some((source, value)) => (source, value?.into_owned()),
        None => ("LOCKRUN_BACKEND", variable?.to_string_lossy().into_owned()),
    };
    // An empty one is refused as every empty setting is, elsewhere.
    if value.is_empty() || BackendName::from_str(&value, false).is_ok() {
        return None;
    }
    let names: Vec<String> = BackendName::value_variants()
        .iter()
        .filter_map(|b| b.to_possible_value().map(|p| p.get_name().to_string()))
        .collect();
    Some(format!(
        "{source} `{value}` is no backend; use one of {}",
        names.join(", ")
    ))
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct UnitArgs {
    /// The unit's Description= [default: COMMAND and the lock it runs under].
    #[arg(long, value_name = "TEXT")]
    pub description: Option<String>,
    /// The lockrun command line the unit runs: `elect` or `semaphore`, its
    /// flags, KEY or PREFIX, `--` and COMMAND.
    #[arg(last = true, required = true, value_name = "LOCKRUN-ARGS")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Directory to write the pages into, e.g. /usr/local/share/man/man1.
    #[arg(long, value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Output")]
pub struct OutputArgs {
    /// More detail on stderr: -v lifecycle events, -vv HTTP requests.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,
    /// Nothing on stderr but fatal errors.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Format of lockrun's own messages on stderr.
    #[arg(long, global = true, hide_short_help = true, value_enum, default_value_t = LogFormat::Text, value_name = "FORMAT")]
    pub log_format: LogFormat,
}

/// The session that holds the lock.
#[derive(Debug, Args)]
#[command(next_help_heading = "Session")]
pub struct SessionArgs {
    /// How long the engine keeps a silent holder's lock.
    ///
    /// (The long help, with what it is on each engine, is made from the
    /// registrations by [`command`].)
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, default_value = "15s", value_name = "DURATION")]
    pub ttl: Duration,
    #[command(flatten)]
    pub backend: crate::backend::HoldFlags,
    /// The largest combined clock-rate error the stop window allows for.
    ///
    /// (The long help, naming the backends without a lease, is made from
    /// the registrations by [`command`].)
    #[arg(long, hide_short_help = true, value_parser = crate::clock::rate::parse_bound, default_value = "166666ppm", value_name = "RATE")]
    pub clock_rate_error: crate::clock::Ppm,
}

/// How long to wait for the lock.
#[derive(Debug, Args)]
#[command(next_help_heading = "Waiting")]
pub struct WaitArgs {
    /// Give up after DURATION without the lock (exit 75).
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION", conflicts_with = "no_wait")]
    pub timeout: Option<Duration>,
    /// Try once; if the lock is taken, exit 75 at once.
    ///
    /// A network blip is retried for up to 500ms.
    #[arg(short = 'n', long)]
    pub no_wait: bool,
    /// Exit status when the lock was not acquired, as flock -E.
    ///
    /// 0 makes a conflict count as success, for cron jobs another host
    /// already ran.
    #[arg(short = 'E', long, default_value_t = 75, value_name = "STATUS",
          value_parser = clap::value_parser!(u8).range(0..=255))]
    pub conflict_exit_code: u8,
    /// Take the lock from its holder (a semaphore's oldest slot), never overlapping.
    ///
    /// (The long help, with how each engine's holder is asked, is made from
    /// the registrations by [`command`].)
    #[arg(long, hide_short_help = true)]
    pub replace: bool,
}

/// The command to run and how to stop it.
#[derive(Debug, Args)]
#[command(next_help_heading = "Command")]
pub struct ChildArgs {
    /// Run COMMAND with /bin/sh -c; further arguments become $1, $2, ...
    #[arg(long)]
    pub shell: bool,
    /// Signal that asks the child to stop when the lock is lost.
    #[arg(long, hide_short_help = true, default_value = "TERM", value_name = "SIGNAL", value_parser = SignalParser)]
    pub kill_signal: Signal,
    /// Grace period after the kill signal before SIGKILL.
    ///
    /// (The long help, with what each engine grants after a loss, is made
    /// from the registrations by [`command`].)
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub kill_timeout: Option<Duration>,
    /// Stop the job once it has run DURATION (exit 123).
    ///
    /// Counted from COMMAND's start on the boot-time clock, so a suspend
    /// counts. The job is stopped as on a loss (--kill-signal, then SIGKILL
    /// to the whole tree after --kill-timeout), the release hook runs, and
    /// the lock is given up once the tree is gone; with --campaign, lockrun
    /// campaigns again.
    #[arg(long, value_parser = parse_max_time, allow_hyphen_values = true, value_name = "DURATION")]
    pub max_time: Option<Duration>,
    /// What becomes of the processes COMMAND leaves running when it exits
    /// (a daemon it started, a background job): `wait` keeps the job, and
    /// the lock, until the last of them is gone; `kill` gives them
    /// --kill-signal, then SIGKILL after --kill-timeout. The exit status is
    /// COMMAND's either way.
    #[arg(long, hide_short_help = true, value_enum, default_value_t = LeftoversMode::Wait, value_name = "WHAT")]
    pub leftovers: LeftoversMode,
    /// How COMMAND's process tree is kept together. `auto`: in a cgroup v2
    /// of its own where lockrun may create one (as root, or under systemd
    /// delegation: a `Delegate=yes` unit, `systemd-run --scope -p
    /// Delegate=yes`; a service's cgroup not delegated stays systemd's),
    /// stopped at once by `cgroup.kill`; elsewhere, and after any
    /// failure, as `subreaper`: the guard, a child subreaper, finds the
    /// tree's processes in /proc and kills them in passes until none is
    /// left. `-v` says which mode a run got.
    #[arg(long, hide_short_help = true, value_enum, default_value_t = ContainmentMode::Auto, value_name = "MODE")]
    pub containment: ContainmentMode,
    /// Value stored in the lock entry [default: this host's name].
    ///
    /// Printable characters only: `leader` prints one holder a line.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new(), value_name = "VALUE")]
    pub value: Option<String>,
    /// The command and its arguments.
    #[arg(required = true, last = true, value_name = "COMMAND", value_hint = clap::ValueHint::CommandWithArguments)]
    pub command: Vec<OsString>,
}

/// Running under systemd or cron.
#[derive(Debug, Args)]
#[command(next_help_heading = "Service")]
pub struct ServiceArgs {
    /// Speak systemd's notify protocol (Type=notify).
    ///
    /// READY=1 once the lock is held (`--notify` or `--notify=held`) or at start (`--notify=start`),
    /// STATUS= lines, WATCHDOG=1 while the lease is confirmed, STOPPING=1.
    /// COMMAND then does not inherit NOTIFY_SOCKET or WATCHDOG_*. Without
    /// --timeout or --no-wait it retries an engine that is down at start,
    /// as --campaign does (a unit may start before its agent).
    #[arg(long, value_enum, value_name = "WHEN", num_args = 0..=1, require_equals = true,
          default_missing_value = "held")]
    pub notify: Option<Ready>,
    /// Keep the lock at least DURATION after taking it.
    ///
    /// The lock is kept even when COMMAND finishes sooner, so that hosts
    /// whose cron fires later in the same period find it held: with `-n -E
    /// 0`, a job runs once per period. lockrun itself runs on, holding the
    /// lock, until DURATION is up, so a cron job lasts at least that long.
    /// A stop (INT, TERM, QUIT) ends the hold, whether it comes during it
    /// or reached COMMAND.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub min_hold: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The lock key, e.g. service/db/leader.
    #[arg(value_name = "KEY")]
    pub key: String,
    /// Take the lock shared, as `flock -s`: readers run together, a writer alone.
    ///
    /// (The long help, with each engine's shared mode, is made from the
    /// registrations by [`command`].)
    #[arg(short = 's', long, conflicts_with = "exclusive")]
    pub shared: bool,
    /// Take the lock exclusive: the default, spelled as `flock -x`.
    #[arg(short = 'x', long, hide_short_help = true)]
    pub exclusive: bool,
    /// After a loss, stop the child and campaign again instead of exiting 124.
    ///
    /// For long-running daemons; not with --no-wait.
    #[arg(long)]
    pub campaign: bool,
    /// Prefer this waiter: a free lock goes to the highest N waiting (0 to 1000, default 0).
    ///
    /// A lockrun waiter stays out of the lock's wait while a lockrun waiter
    /// with a higher priority waits, and enters it once none does; equal
    /// priorities wait as before. Peer tools' waiters count as 0 and defer
    /// to nobody. A lone waiter takes a free lock at once; one that defers
    /// takes it once the lock has sat free for --priority-grace with the
    /// higher waiter still not in it. `leader --json` lists the waiters
    /// with their priorities. Not with -s (exit 2).
    #[arg(long, hide_short_help = true, value_name = "N", allow_hyphen_values = true, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub priority: Option<u32>,
    /// How long a deferring waiter leaves a free lock to a higher one [default: 3s].
    #[arg(long, hide_short_help = true, value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub priority_grace: Option<Duration>,
    #[command(flatten)]
    pub session: SessionArgs,
    #[command(flatten)]
    pub wait: WaitArgs,
    #[command(flatten)]
    pub child: ChildArgs,
    #[command(flatten)]
    pub service: ServiceArgs,
    #[command(flatten)]
    pub ops: crate::ops::OpsArgs,
}

impl ElectArgs {
    /// `--priority` and `--priority-grace`, as a waiter's rank.
    pub fn priority(&self) -> Result<crate::backend::priority::Priority, crate::error::Failure> {
        use crate::backend::priority::{Priority, DEFAULT_GRACE};
        if self.priority_grace == Some(Duration::ZERO) {
            return Err(crate::error::Failure::Usage(
                "--priority-grace 0s would never leave a free lock to a higher waiter; give a duration such as 3s, or drop it".into(),
            ));
        }
        Ok(Priority {
            level: self.priority.unwrap_or(0),
            grace: self.priority_grace.unwrap_or(DEFAULT_GRACE),
            asked: self.priority.is_some() || self.priority_grace.is_some(),
        })
    }
}

#[derive(Debug, Args)]
pub struct SemaphoreArgs {
    /// The semaphore prefix, e.g. jobs/reindex.
    #[arg(value_name = "PREFIX")]
    pub prefix: String,
    /// Number of slots; every contender on PREFIX must agree.
    #[arg(short, long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub limit: u64,
    #[command(flatten)]
    pub session: SessionArgs,
    #[command(flatten)]
    pub wait: WaitArgs,
    #[command(flatten)]
    pub child: ChildArgs,
    #[command(flatten)]
    pub service: ServiceArgs,
    #[command(flatten)]
    pub ops: crate::ops::OpsArgs,
}

#[derive(Debug, Args)]
pub struct LeaderArgs {
    /// The lock key, or a semaphore prefix.
    #[arg(value_name = "KEY")]
    pub key: String,
    /// Print one JSON object, the same schema on every backend.
    ///
    /// (The help, with where each engine's fence comes from, is made from
    /// the registrations by [`command`].)
    #[arg(long)]
    pub json: bool,
    /// Wait until there is a holder.
    #[arg(long, conflicts_with = "watch")]
    pub wait: bool,
    /// With --wait: give up after DURATION (exit 1).
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION", requires = "wait")]
    pub timeout: Option<Duration>,
    /// Print a line at every change of holder until interrupted.
    #[arg(long)]
    pub watch: bool,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only keys and prefixes at or under PREFIX (`jobs` lists `jobs` and
    /// `jobs/...`).
    #[arg(value_name = "PREFIX")]
    pub prefix: Option<String>,
    /// Print one JSON object per lock or semaphore, a line each, in the
    /// schema of `leader --json`.
    ///
    /// (The help, with each engine's own rows, is made from the
    /// registrations by [`command`].)
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The lock key, or a semaphore prefix.
    #[arg(value_name = "KEY")]
    pub key: String,
    #[command(flatten)]
    pub backend: crate::backend::ReleaseFlags,
    /// Semaphore: free every slot.
    #[arg(long)]
    pub all: bool,
}

pub use crate::duration::{parse_duration, DURATION_MAX};

/// `--max-time`: a duration above zero (zero would stop every job at once).
fn parse_max_time(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        d if d.is_zero() => Err(format!(
            "`{text}` would stop the job as it starts; give the longest the job may run, e.g. 3h"
        )),
        d => Ok(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_definition_is_consistent() {
        Cli::command().debug_assert();
        command().debug_assert();
    }

    /// Every rule `command` and its subcommands parse by, a line each:
    /// each argument's, each group's, the command's settings and version.
    fn rules(command: &clap::Command, path: &str, out: &mut Vec<String>) {
        for a in command.get_arguments() {
            let values: Vec<String> = a
                .get_possible_values()
                .iter()
                .map(|v| v.get_name().to_string())
                .collect();
            out.push(format!(
                "{path} {} {:?} {:?} {} {} {:?} {:?} {:?} {:?} {values:?} {:?}",
                a.get_id(),
                a.get_long(),
                a.get_short(),
                a.is_required_set(),
                a.is_global_set(),
                a.get_num_args(),
                a.get_action(),
                a.get_env(),
                a.get_default_values(),
                a.get_value_parser().type_id(),
            ));
        }
        for group in command.get_groups() {
            let mut args: Vec<String> = group.get_args().map(ToString::to_string).collect();
            args.sort();
            out.push(format!(
                "{path} group {} {args:?} {} {}",
                group.get_id(),
                group.clone().is_multiple(),
                group.is_required_set(),
            ));
        }
        out.push(format!(
            "{path} settings {:?}",
            [
                command.is_no_binary_name_set(),
                command.is_dont_delimit_trailing_values_set(),
                command.is_disable_version_flag_set(),
                command.is_propagate_version_set(),
                command.is_disable_help_flag_set(),
                command.is_disable_help_subcommand_set(),
                command.is_arg_required_else_help_set(),
                command.is_allow_negative_numbers_set(),
                command.is_trailing_var_arg_set(),
                command.is_allow_missing_positional_set(),
                command.is_subcommand_required_set(),
                command.is_allow_external_subcommands_set(),
                command.is_args_conflicts_with_subcommands_set(),
                command.is_args_override_self(),
                command.is_subcommand_precedence_over_arg_set(),
                command.is_subcommand_negates_reqs_set(),
                command.is_multicall_set(),
            ]
        ));
        out.push(format!(
            "{path} version {:?}",
            command.get_version().map(ToString::to_string)
        ));
        for sub in command.get_subcommands() {
            rules(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    /// What a run parses with, and what help and errors come from, take
    /// the same arguments, by the same rules, in every subcommand.
    #[test]
    fn the_lean_command_parses_as_the_whole_one() {
        let (mut lean, mut whole) = (Vec::new(), Vec::new());
        rules(&parsing_command(), "lockrun", &mut lean);
        rules(&command(), "lockrun", &mut whole);
        assert_eq!(lean, whole);
        for line in [
            &["lockrun", "elect", "k", "--", "true"][..],
            &["lockrun", "--backend", "local", "elect", "k", "--", "true"],
            &["lockrun", "--backend", "nope", "elect", "k", "--", "true"],
            &["lockrun", "explain", "elect", "k"],
            &["lockrun", "elect", "k"],
            &["lockrun", "semaphore", "--limit", "2", "p", "--", "true"],
        ] {
            assert_eq!(
                parsing_command().try_get_matches_from(line).is_ok(),
                command().try_get_matches_from(line).is_ok(),
                "{line:?}"
            );
        }
    }

    /// `command`'s Debug, one entry per field of its own (a field's nested
    /// lines with it), without the fields only help and completion read
    /// (texts, display order, the width) and without `skip`.
    fn parse_fields(command: &clap::Command, skip: &[&str]) -> Vec<(String, String)> {
        const DISPLAY: [&str; 10] = [
            "about",
            "long_about",
            "after_help",
            "after_long_help",
            "before_help",
            "before_long_help",
            "max_w",
            "term_w",
            "current_disp_ord",
            "current_help_heading",
        ];
        let text = format!("{command:#?}");
        let mut fields: Vec<(String, String)> = Vec::new();
        let mut order_value = false;
        for line in text.lines().skip(1) {
            // Display order is where a flag was added, not how it parses.
            let dropped = std::mem::replace(&mut order_value, line.ends_with("disp_ord: Some("));
            if dropped {
                continue;
            }
            let own = line
                .strip_prefix("    ")
                .filter(|rest| !rest.starts_with(' '));
            match own.and_then(|rest| rest.split_once(':')) {
                Some((name, _)) => fields.push((name.to_string(), format!("{line}\n"))),
                None => {
                    if let Some((_, text)) = fields.last_mut() {
                        text.push_str(line);
                        text.push('\n');
                    }
                }
            }
        }
        fields.retain(|(name, _)| {
            !DISPLAY.contains(&name.as_str()) && !skip.contains(&name.as_str())
        });
        fields
    }

    /// Every field parsing reads, clap's whole definition as its Debug
    /// shows it, of each lean command's top level and subcommand is
    /// [`parsing_command`]'s: a rule added to `Cli`, to a variant of
    /// `Command` or in `parsing_command` that a lean command lacked would
    /// let it take a line the whole command refuses.
    #[test]
    fn each_lean_command_parses_by_every_rule_of_the_whole_one() {
        let whole = parsing_command();
        for name in [
            "elect",
            "semaphore",
            "leader",
            "list",
            "release",
            "status",
            "check",
            "put",
        ] {
            let lean =
                parsing_command_for(&["lockrun".into(), name.into()]).expect("a lean command");
            assert_eq!(
                parse_fields(&lean, &["subcommands"]),
                parse_fields(&whole, &["subcommands"]),
                "{name}: the top level"
            );
            assert_eq!(
                parse_fields(lean.find_subcommand(name).unwrap(), &[]),
                parse_fields(whole.find_subcommand(name).unwrap(), &[]),
                "{name}"
            );
        }
    }

    /// A line a subcommand's own lean command accepts parses to what the
    /// whole command makes of it, whatever words look like subcommands.
    #[test]
    fn a_line_the_lean_command_takes_means_what_it_means_to_the_whole_one() {
        // Each line, and whether the lean command takes it: one whose first
        // word naming a subcommand is a flag's value, or that asks for help,
        // the version or a refusal, is parsed again by the whole command.
        for (line, lean_takes) in [
            ("lockrun elect k -- true", true),
            (
                "lockrun --backend local --lock-dir /d elect k -- true",
                true,
            ),
            (
                "lockrun --backend=local elect -q --backend etcd k -- true",
                true,
            ),
            (
                "lockrun --lock-dir elect semaphore --limit 2 p -- true",
                false,
            ),
            ("lockrun --lock-dir semaphore elect k -- true", false),
            ("lockrun elect semaphore -- elect", true),
            ("lockrun semaphore --limit 2 elect -- semaphore", true),
            ("lockrun -v elect --timeout 1s -v k -- true", true),
            ("lockrun explain elect k", false),
            ("lockrun leader elect", true),
            ("lockrun --backend etcd leader --json elect", true),
            ("lockrun list --json", true),
            ("lockrun release k", true),
            ("lockrun status --for 10s", true),
            ("lockrun check seq", true),
            ("lockrun put --sequencer s k v", true),
            ("lockrun elect k", false),
            ("lockrun elect --version", false),
            ("lockrun --version elect k -- true", false),
            ("lockrun elect --help", false),
            ("lockrun help elect", false),
            ("lockrun elect --limit 2 k -- true", false),
        ] {
            let line: Vec<&str> = line.split(' ').collect();
            let args: Vec<OsString> = line.iter().map(OsString::from).collect();
            let lean = parsing_command_for(&args).map(|lean| lean.try_get_matches_from(&line));
            let Some(Ok(lean)) = lean else {
                assert!(!lean_takes, "{line:?}: the lean command refused it");
                continue;
            };
            assert!(lean_takes, "{line:?}: the lean command took it");
            let whole = command().try_get_matches_from(&line).unwrap_or_else(|e| {
                panic!("{line:?}: the lean command took it, the whole one: {e}")
            });
            let parsed = |m: &clap::ArgMatches| {
                format!(
                    "{:?}",
                    <Cli as clap::FromArgMatches>::from_arg_matches(m).unwrap()
                )
            };
            assert_eq!(parsed(&lean), parsed(&whole), "{line:?}");
        }
    }

    /// Every text of the command line as documented: each command's about,
    /// long about and after-help, each flag's help and long help.
    fn texts(command: &clap::Command) -> Vec<String> {
        let mut found: Vec<String> = [
            command.get_about(),
            command.get_long_about(),
            command.get_after_help(),
        ]
        .into_iter()
        .flatten()
        .map(ToString::to_string)
        .collect();
        for arg in command.get_arguments() {
            found.extend(
                [arg.get_help(), arg.get_long_help()]
                    .into_iter()
                    .flatten()
                    .map(ToString::to_string),
            );
        }
        for sub in command.get_subcommands() {
            found.extend(texts(sub));
        }
        found
    }

    /// Each note a backend registers is put in the help (a topic the shared
    /// text forgot would leave it out), and no placeholder of the derived
    /// definitions is left for one of them.
    #[test]
    fn every_backend_note_is_in_the_help() {
        // Whitespace as one space: an after-help paragraph is wrapped.
        let flat = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
        let texts: Vec<String> = texts(&command()).iter().map(|t| flat(t)).collect();
        for backend in crate::backend::BACKENDS {
            for (topic, note) in backend.notes {
                assert!(
                    texts.iter().any(|t| t.contains(&flat(note))),
                    "{}'s {topic:?} note is in no help: {note}",
                    backend.name
                );
            }
        }
        for text in &texts {
            assert!(!text.contains("made from"), "a placeholder is left: {text}");
        }
    }

    #[test]
    fn flags_after_the_separator_belong_to_the_child() {
        let cli =
            Cli::try_parse_from(["lockrun", "elect", "k", "--", "ls", "--timeout", "-v"]).unwrap();
        let Command::Elect(elect) = cli.command else {
            panic!()
        };
        assert_eq!(elect.child.command, ["ls", "--timeout", "-v"]);
        assert_eq!(elect.wait.timeout, None);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("fast").is_err());
        assert_eq!(parse_duration("365d").unwrap(), DURATION_MAX);
        for text in ["366d", "18446744073709551615s", "500000000000y", "-5s"] {
            assert!(parse_duration(text).is_err(), "{text}");
        }
    }
}
