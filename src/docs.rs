//! Man pages and shell completions, rendered from the clap definition in
//! [`crate::cli`] so that `--help`, `man lockrun` and tab completion cannot
//! disagree about a flag.
//!
//! The rendered files are committed under `man/` and `completions/`, so that
//! packagers need no build step; the `docs` integration test fails when they
//! drift, and `LOCKRUN_BLESS=1 cargo test docs` rewrites them.
//!
//! clap_mangen renders the options; we render its sections one at a time and
//! put our own in between, as its docs suggest, because a man page also owes
//! the reader what `--help` has no room for: the exit-status table, the
//! environment, the signals and the safety model.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap_complete::Shell;
use clap_mangen::roff::{bold, italic, roman, Inline, Roff};
use clap_mangen::Man;

use crate::backend::Prose;
use crate::backend::BACKENDS;
use crate::exit::Exit;

/// The date on every page. A build-time date would make the committed pages
/// stale every day; bump this by hand when a page changes in substance.
pub const DATE: &str = "2026-11-25";

/// Where the committed man pages are, relative to the repository root.
pub const MAN_DIR: &str = "man";

/// Where the committed completion scripts are.
pub const COMPLETIONS_DIR: &str = "completions";

/// The shells we ship completions for, in file order.
pub const SHELLS: [Shell; 5] = [
    Shell::Bash,
    Shell::Zsh,
    Shell::Fish,
    Shell::Elvish,
    Shell::PowerShell,
];

/// `lockrun.1` and one page per subcommand: file name and roff source.
pub fn man_pages() -> Vec<(String, Vec<u8>)> {
    // The man pages list subcommands as pages, and `help` has none; the real
    // binary keeps its `help` subcommand (and the completions offer it).
    let mut cli = every_flag(crate::cli::command().disable_help_subcommand(true));
    // Subcommands are rendered from the built parent: building is what copies
    // the global flags (the backends' connection, output) into each subcommand.
    // Rendering a subcommand on its own would lose them.
    cli.build();
    let mut pages = vec![(format!("{}.1", cli.get_name()), main_page(&cli))];
    for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("{}-{}", cli.get_name(), sub.get_name());
        pages.push((format!("{name}.1"), subcommand_page(sub, &name)));
    }
    pages
}

/// A page lists every flag with its whole text: flags that `-h` leaves to
/// `--help` are shown there too (clap_mangen omits the text of a flag hidden
/// from the short help unless it has a long one).
fn every_flag(command: clap::Command) -> clap::Command {
    command
        .mut_args(|a| a.hide_short_help(false))
        .mut_subcommands(every_flag)
}

/// One completion script per shell: file name (as each shell expects it) and
/// contents.
pub fn completions() -> Vec<(String, Vec<u8>)> {
    SHELLS
        .iter()
        .map(|&shell| (completion_file(shell), completion(shell)))
        .collect()
}

/// The name `shell` expects the script to have, e.g. `_lockrun` for zsh.
pub fn completion_file(shell: Shell) -> String {
    clap_complete::Generator::file_name(&shell, crate::cli::command().get_name())
}

/// The completion script for `shell`.
pub fn completion(shell: Shell) -> Vec<u8> {
    let mut cli = crate::cli::command();
    let bin = cli.get_name().to_string();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cli, &bin, &mut script);
    if shell == Shell::Bash {
        script = bash_after_separator(script);
    }
    script
}

/// clap_complete's bash script knows nothing of `--`: after it, it offers
/// lockrun's flags again. What follows `--` is the wrapped command, so there
/// we complete it as sudo's completion does, with bash-completion's
/// `_command_offset` when it is loaded, else command names, then file names.
fn bash_after_separator(script: Vec<u8>) -> Vec<u8> {
    const START: &str = "    COMPREPLY=()\n";
    const AFTER_SEPARATOR: &str = r#"    # After `--` comes the wrapped command: complete it, not lockrun's flags.
    for (( i = 1; i < COMP_CWORD; i++ )); do
        if [[ "${COMP_WORDS[i]}" == "--" ]]; then
            if declare -F _command_offset >/dev/null; then
                _command_offset $(( i + 1 ))
            elif (( COMP_CWORD == i + 1 )); then
                COMPREPLY=( $(compgen -c -- "${COMP_WORDS[COMP_CWORD]}") )
            else
                COMPREPLY=( $(compgen -f -- "${COMP_WORDS[COMP_CWORD]}") )
            fi
            return 0
        fi
    done
"#;
    let script = String::from_utf8(script).expect("clap_complete writes UTF-8");
    let at = script
        .find(START)
        .expect("clap_complete's bash script clears COMPREPLY")
        + START.len();
    let mut out = String::with_capacity(script.len() + AFTER_SEPARATOR.len());
    out.push_str(&script[..at]);
    out.push_str(AFTER_SEPARATOR);
    out.push_str(&script[at..]);
    out.into_bytes()
}

/// Writes every man page into `dir`, creating it if needed; returns the
/// paths written.
pub fn write_man(dir: &Path) -> io::Result<Vec<PathBuf>> {
    fs::create_dir_all(dir)?;
    man_pages()
        .into_iter()
        .map(|(name, contents)| {
            let path = dir.join(name);
            fs::write(&path, contents)?;
            Ok(path)
        })
        .collect()
}

/// A page being assembled from clap_mangen's sections and ours.
struct Page {
    man: Man,
    roff: Vec<u8>,
}

impl Page {
    fn new(cmd: &clap::Command, title: &str) -> Page {
        let man = Man::new(cmd.clone())
            .title(title)
            .date(DATE)
            // A subcommand has no version of its own, so we say whose it is.
            .source(format!("lockrun {}", env!("CARGO_PKG_VERSION")))
            .manual("User Commands");
        Page {
            man,
            roff: Vec::new(),
        }
    }

    /// Appends one of clap_mangen's sections.
    fn clap(&mut self, section: fn(&Man, &mut dyn Write) -> io::Result<()>) -> &mut Page {
        let mut out = Vec::new();
        section(&self.man, &mut out).expect("writing to a Vec cannot fail");
        self.append(out)
    }

    /// Appends our own roff.
    fn ours(&mut self, roff: &Roff) -> &mut Page {
        self.append(roff.render().into_bytes())
    }

    /// Every roff render starts with the same preamble (the `Aq` string that
    /// keeps apostrophes straight); the page needs it once.
    fn append(&mut self, out: Vec<u8>) -> &mut Page {
        let preamble = Roff::new().render().into_bytes();
        match out.strip_prefix(preamble.as_slice()) {
            Some(body) if !self.roff.is_empty() => self.roff.extend_from_slice(body),
            _ => self.roff.extend_from_slice(&out),
        }
        self
    }

    /// The sections every page starts with. The synopsis shows the usage
    /// of `usages`.
    fn head(&mut self, usages: &[&clap::Command]) -> &mut Page {
        self.clap(Man::render_title)
            .clap(Man::render_name_section)
            .ours(&synopsis(usages))
            .clap(Man::render_description_section)
            .clap(Man::render_options_section)
    }
}

/// clap_mangen's synopsis lists every flag and drops the `--` that must
/// precede COMMAND, so we show clap's own usage lines instead, the ones
/// `--help` prints: `lockrun elect [OPTIONS] <KEY> -- <COMMAND>...`.
fn synopsis(cmds: &[&clap::Command]) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["SYNOPSIS"]);
    for (i, cmd) in cmds.iter().enumerate() {
        if i > 0 {
            roff.control("br", []);
        }
        let usage = (*cmd).clone().render_usage().to_string();
        let usage = usage.strip_prefix("Usage: ").unwrap_or(&usage);
        let bin = cmd.get_bin_name().unwrap_or_else(|| cmd.get_name());
        let rest = usage.strip_prefix(bin).unwrap_or(usage);
        let mut line = vec![bold(bin)];
        for word in rest.split(' ').filter(|w| !w.is_empty()) {
            line.push(roman(" "));
            line.push(if word.starts_with('<') {
                italic(word)
            } else if word.starts_with('-') {
                bold(word)
            } else {
                roman(word)
            });
        }
        roff.text(line);
    }
    roff
}

fn main_page(cli: &clap::Command) -> Vec<u8> {
    let subcommands: Vec<&clap::Command> =
        cli.get_subcommands().filter(|s| !s.is_hide_set()).collect();
    // What holds on every backend is ours; each backend writes its own
    // variables, what COMMAND gets from it, and its own safety items.
    let environment: Vec<Block> = BACKENDS
        .iter()
        .flat_map(|b| b.environment.iter().map(Block::from))
        .chain(CHILD_ENVIRONMENT.iter().map(Block::same))
        .chain(
            BACKENDS
                .iter()
                .flat_map(|b| b.child_environment.iter().map(Block::from)),
        )
        .collect();
    let safety: Vec<Block> = SAFETY
        .iter()
        .map(Block::same)
        .chain(
            BACKENDS
                .iter()
                .flat_map(|b| b.safety.iter().map(Block::from)),
        )
        .chain(SAFETY_AFTER.iter().map(Block::same))
        .collect();
    let mut page = Page::new(cli, cli.get_name());
    page.head(&subcommands)
        .clap(Man::render_subcommands_section)
        .ours(&exit_status())
        .ours(&sections(&[
            ("ENVIRONMENT", &environment),
            ("SIGNALS", SIGNALS),
            ("SAFETY", &safety),
            ("EXAMPLES", EXAMPLES),
            ("SEE ALSO", &[Block::P(&see_also())]),
        ]));
    page.roff
}

fn subcommand_page(sub: &clap::Command, name: &str) -> Vec<u8> {
    // The display name titles the page and names it in NAME; the synopsis
    // keeps the bin name, `lockrun elect`, which is what users type.
    let sub = sub.clone().display_name(name.to_string());
    let help = sub
        .get_after_help()
        .map(|h| h.to_string())
        .unwrap_or_default();
    let examples: Vec<Block> = example_lines(&help).into_iter().map(Block::Code).collect();
    let exit = match paragraph(&help, "Exit status:") {
        Some(own) => vec![
            Block::P(own.trim_start_matches("Exit status:").trim()),
            Block::P(SEE_EXIT_TABLE),
        ],
        None => vec![Block::P(HOLD_EXIT), Block::P(SEE_EXIT_TABLE)],
    };
    let mut page = Page::new(&sub, name);
    page.head(&[&sub]).ours(&sections(&[
        ("EXAMPLES", &examples),
        ("EXIT STATUS", &exit),
        ("SEE ALSO", SUBCOMMAND_SEE_ALSO),
    ]));
    page.roff
}

/// The command lines of an `after_help` text's "Examples:" paragraph: the
/// same lines `--help` shows.
fn example_lines(after_help: &str) -> Vec<&str> {
    after_help
        .lines()
        .skip_while(|line| line.trim() != "Examples:")
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .map(str::trim)
        .collect()
}

/// The paragraph of `text` that starts with `lead`, on one line.
fn paragraph<'a>(text: &'a str, lead: &str) -> Option<&'a str> {
    text.split("\n\n")
        .map(str::trim)
        .find(|p| p.starts_with(lead))
}

/// The table of [`Exit::TABLE`], so the page cannot drift from the code.
fn exit_status() -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["EXIT STATUS"]);
    roff.text(inline(
        "When COMMAND ran and exited by itself, lockrun exits with its status, so lockrun can \
         stand in for COMMAND in scripts. In full:",
    ));
    for (status, meaning) in Exit::TABLE {
        roff.control("TP", []);
        roff.text([bold(*status)]);
        roff.text(inline(meaning));
    }
    roff
}

/// A piece of hand-written prose.
enum Block<'a> {
    /// A paragraph; `` `text` `` in backticks is set in bold.
    P(&'a str),
    /// A term and its description, as a tagged paragraph.
    Item(&'a str, &'a str),
    /// A line of code (a command, a unit file line), indented and unfilled.
    Code(&'a str),
    /// A subsection heading.
    Sub(&'a str),
}

impl<'a> Block<'a> {
    fn same(block: &Block<'a>) -> Block<'a> {
        match *block {
            Block::P(text) => Block::P(text),
            Block::Item(term, text) => Block::Item(term, text),
            Block::Code(line) => Block::Code(line),
            Block::Sub(title) => Block::Sub(title),
        }
    }
}

impl From<&Prose> for Block<'static> {
    fn from(prose: &Prose) -> Block<'static> {
        match *prose {
            Prose::P(text) => Block::P(text),
            Prose::Item(term, text) => Block::Item(term, text),
        }
    }
}

fn sections(list: &[(&str, &[Block])]) -> Roff {
    let mut roff = Roff::new();
    for (title, blocks) in list {
        section(&mut roff, title, blocks);
    }
    roff
}

fn section(roff: &mut Roff, title: &str, blocks: &[Block]) {
    roff.control("SH", [title]);
    // `.PP` straight after a heading is redundant (and mandoc warns), as is
    // one between two lines of the same code block.
    let mut first = true;
    let mut in_code = false;
    for block in blocks {
        if in_code && !matches!(block, Block::Code(_)) {
            roff.control("fi", []).control("RE", []);
            in_code = false;
        }
        match block {
            Block::P(text) => {
                if !first {
                    roff.control("PP", []);
                }
                roff.text(inline(text));
            }
            Block::Item(term, text) => {
                roff.control("TP", []);
                roff.text(inline(term));
                roff.text(inline(text));
            }
            Block::Code(line) => {
                if !in_code {
                    if !first {
                        roff.control("PP", []);
                    }
                    roff.control("RS", ["4"]).control("nf", []);
                    in_code = true;
                }
                roff.text([roman(*line)]);
            }
            Block::Sub(title) => {
                roff.control("SS", [*title]);
                first = true;
                continue;
            }
        }
        first = false;
    }
    if in_code {
        roff.control("fi", []).control("RE", []);
    }
}

/// Text with `` `code` `` spans set in bold and `*word*` in italics.
fn inline(text: &str) -> Vec<Inline> {
    let mut parts = Vec::new();
    for (i, span) in text.split('`').enumerate() {
        if span.is_empty() {
            continue;
        }
        if i % 2 == 1 {
            parts.push(bold(span));
            continue;
        }
        for (j, span) in span.split('*').enumerate() {
            if span.is_empty() {
                continue;
            }
            parts.push(if j % 2 == 1 {
                italic(span)
            } else {
                roman(span)
            });
        }
    }
    parts
}

use Block::{Code, Item, Sub, P};

/// What COMMAND is given on every backend, after every backend's
/// variables; each backend's own follow.
const CHILD_ENVIRONMENT: &[Block] = &[
    Sub("What COMMAND is given"),
    P(
        "COMMAND inherits lockrun's environment (less `NOTIFY_SOCKET`, `WATCHDOG_USEC` and \
         `WATCHDOG_PID` under `--notify`), plus, on every backend:",
    ),
    Item("`LOCKRUN_KEY`", "The lock key, or the semaphore prefix."),
    Item(
        "`LOCKRUN_LOCK_INDEX`",
        "A fencing number that only grows: a lock's holder is given a greater one than every \
         earlier holder of the key, however their holds ended (a semaphore's orders its \
         admissions, see lockrun-semaphore(1)). A service that refuses numbers lower than \
         the highest it has seen therefore refuses every stale holder. What it is on each \
         backend is under that backend, below.",
    ),
    Item(
        "`LOCKRUN_SEQUENCER`",
        "`elect` only: one opaque token naming the backend, the key, the fence and the \
         holder, which a service COMMAND writes to can test with `lockrun check`, or write \
         under with `lockrun put --sequencer`.",
    ),
    Item(
        "`LOCKRUN_STATUS`",
        "With `--status-addr`: the address the status endpoint is served on, which \
         `lockrun status` asks.",
    ),
    P(
        "The hooks (`--on-acquire`, `--on-loss`, `--on-release`) are given the same, and \
         `LOCKRUN_HOOK` naming the event. Each backend adds its own:",
    ),
];

const SIGNALS: &[Block] = &[
    Item(
        "`SIGINT`, `SIGTERM`, `SIGQUIT`",
        "Forwarded to COMMAND's process group (and by the guard to the rest of COMMAND's \
         tree). lockrun then waits at most `--kill-timeout` for \
         it to exit before sending SIGKILL (a second such signal sends SIGKILL at once), \
         releases the lock and exits with COMMAND's status.",
    ),
    Item(
        "`SIGHUP`, `SIGUSR1`, `SIGUSR2`",
        "Forwarded as above; COMMAND decides what they mean (daemons often \
         reload), and lockrun keeps the lock.",
    ),
    P(
        "Any of these six received while lockrun is still waiting for the lock ends the wait: \
         lockrun withdraws its claim from the engine and ends by signal N itself, which a shell reports as 128+N and systemd as a clean stop. The same holds \
         while COMMAND runs: when COMMAND ends of a signal lockrun forwarded (or exits 128+N \
         for it, as a shell does), lockrun releases the lock and ends by that signal.",
    ),
    P(
        "When the lock is lost, lockrun sends `--kill-signal` (default TERM) to the job and \
         SIGKILL after `--kill-timeout`. When standard input is a terminal, COMMAND's group is \
         given the terminal's foreground, so an interactive COMMAND can read it and gets \
         Ctrl-C itself.",
    ),
    P(
        "Under systemd, prefer `KillMode=mixed`: systemd then signals lockrun alone, which stops \
         COMMAND and releases the lock in order, and kills whatever is left only after lockrun \
         has exited. Give `TimeoutStopSec=` more than `--kill-timeout`.",
    ),
];

const SAFETY: &[Block] = &[
    P(
        "Locks are advisory, and on every backend but local they ride on leases measured in \
         time. lockrun promises that *COMMAND never runs at a moment when another holder \
         could have acquired the lock*. It keeps that promise as follows.",
    ),
    Item(
        "The job",
        "COMMAND runs under a small guard process, a copy of lockrun named `lr-guard` \
         (`ps -o comm`, and its whole command line), which leads COMMAND's process group and is a child subreaper: a \
         process that leaves the group (setsid(2), setpgid(2)) is still below the guard, \
         and one orphaned (a daemon's double fork, `pg_ctl start`) is re-parented to it. The \
         job is COMMAND's whole process tree. Where lockrun may create a cgroup v2 under its \
         own (it may write there, and a systemd unit's cgroup has `Delegate=yes`) and the \
         kernel has `cgroup.kill` (Linux 5.14), the tree runs in a cgroup of its own and is \
         killed at once; elsewhere, or with `--containment subreaper`, by passes over the \
         tree until one finds nobody. `-v` says which. Stopping signals the whole tree. The job lasts until the last \
         process of the tree is gone (`--leftovers wait`), or until COMMAND exits \
         (`--leftovers kill`: what it left is stopped then); the lock is given up only once \
         the tree is empty. If lockrun dies, even by SIGKILL, the kernel tells the guard \
         (PR_SET_PDEATHSIG) and the guard kills the tree; on a backend with a lease, if \
         lockrun stalls, the guard stops the tree itself once the last deadline lockrun \
         handed it passes.",
    ),
    Item(
        "Local lease",
        "On a backend with a lease, lockrun renews it twice per stop window and keeps its \
         own lease: the send time of the last renewal the engine confirmed (or of the \
         lease's creation), plus the \
         engine's TTL, plus the delay after it during which the engine still keeps rivals \
         out, where it has one. lockrun starts stopping COMMAND early enough that SIGKILL \
         has landed before then, `--kill-timeout` and a margin included. Settings that \
         leave no room for that are refused (status 2), with the reason.",
    ),
    Item(
        "Transient errors",
        "A renewal or watch that fails without a verdict (a timeout, say, or an engine \
         between leaders) is retried with backoff for as long as the local lease lasts; it \
         is not a loss. What ends a hold at once on each backend is under it, below.",
    ),
    Item(
        "Clock rate",
        "lockrun counts its deadlines on this host's clock and the engine its TTL on its \
         own: the clocks need not agree on the time, but must run at nearly the same rate. \
         `--clock-rate-error` (default 166666ppm, 16.7%: two hosts slewing opposite ways at \
         chrony's default maximum of 83,333 ppm) is the combined error the stop window allows \
         for: SIGKILL lands by the earliest rival moment times (1 - the bound), less a \
         hundredth of it for late timers. A bound that leaves no stop window is refused \
         (status 2) with one that does. This host's share, half the bound, is checked: \
         lockrun reads how the kernel steers its clock with adjtimex(2) (frequency, tick, \
         the PLL's and adjtime's slews) at start (shown with `-v`) and after every renewal. \
         Beyond the share the margin grows by the excess and the stop window narrows; when \
         none is left COMMAND is stopped as on a loss (status 124), or lockrun ends with \
         status 125 if it does not hold the lock yet. local has no lease and refuses the \
         flag.",
    ),
    Sub("Per backend"),
    P(
        "`lockrun explain` prints these figures for any flags of `elect` or `semaphore`, \
         without contacting an engine. Times count from the send time of the last confirmed \
         renewal; the margin is what lies between SIGKILL and the earliest rival.",
    ),
];

/// After every backend's own items.
const SAFETY_AFTER: &[Block] = &[
    Item(
        "Assumptions",
        "The combined rate error of this host's clock and the engine's stays within \
         `--clock-rate-error` (this host's half is checked, the engine's host must keep the \
         other); the whole host (lockrun and its guard together: a frozen cgroup, \
         a paused VM) never stops for longer than the margin, against which use `--notify` \
         with `WatchdogSec=`, a hardware watchdog, or fencing; the engine is linearizable.",
    ),
    Sub("Limits"),
    Item(
        "Advisory",
        "Only processes that take the lock are excluded; anything else can still touch what \
         it protects.",
    ),
    Item(
        "Clocks",
        "The lease arithmetic assumes that lockrun's host and the engine's measure time at \
         rates within `--clock-rate-error` of each other; their clocks need not be \
         synchronised. A host frozen for longer \
         than the margin (a suspended VM) can resume COMMAND after the lease ran out.",
    ),
    Item(
        "Outside the job",
        "A process that is not COMMAND's descendant is not part of the job: one that \
         another service manager or a daemon starts at COMMAND's request (`systemctl \
         start`, a request over a socket) runs on when COMMAND is stopped. While the guard \
         lives, no process of the tree can leave it: an orphan is re-parented to the nearest \
         subreaper above it (the guard, or one inside the tree), never to init. In \
         subreaper mode a fork loop loses to the kill passes, but not at once. A setuid \
         process of the tree that changes its real user ID can no longer be signalled by \
         lockrun or the guard unless they run as root; in a cgroup, `cgroup.kill` still \
         ends it.",
    ),
    Item(
        "Operator release",
        "`lockrun release`, and the engine's own ways to end a hold (a destroyed session, a \
         revoked lease, a terminated backend), free the lock without waiting for the lease: \
         a rival may start while the old holder's COMMAND is being stopped, for as long as \
         each backend says above. On local, the lock stays held until the job has stopped.",
    ),
    P(
        "Where any overlap would do harm, fence: have COMMAND pass `LOCKRUN_LOCK_INDEX` (with \
         `LOCKRUN_KEY`) to the service it writes to, and have that service refuse a number \
         lower than the highest it has seen; or have the service run `lockrun check` on \
         `LOCKRUN_SEQUENCER`.",
    ),
];

const EXAMPLES: &[Block] = &[
    P(
        "A hot standby under systemd: on every host the same unit; one host runs the primary, \
         the others wait for the lock and take over when it is released or lost.",
    ),
    Code("[Service]"),
    Code("ExecStart=/usr/bin/lockrun elect --campaign service/db/leader -- /usr/bin/db-primary"),
    Code("KillMode=mixed"),
    Code("TimeoutStopSec=30"),
    Code("Restart=always"),
    P(
        "From cron, at most three hosts reindex at once, and the backup runs on one host only; \
         the others skip it with status 75 rather than queue up:",
    ),
    Code("lockrun semaphore --limit 3 jobs/reindex -- ./reindex.sh"),
    Code("lockrun semaphore --limit 1 --no-wait jobs/backup -- ./backup.sh"),
    P(
        "In a script, who leads? Status 1 means nobody holds the lock; 125 means lockrun \
         cannot tell (the engine down, permission denied): never read that as \"no leader\".",
    ),
    Code("status=0; leader=$(lockrun leader service/db/leader) || status=$?"),
    Code("case $status in 0) echo \"$leader\" ;; 1) echo \"no leader\" ;; *) exit 2 ;; esac"),
    P("An operator forces a new election; the holder's lockrun stops its child:"),
    Code("lockrun release service/db/leader"),
];

const HOLD_EXIT: &str =
    "COMMAND's own status when it ran and exited by itself; 75 (or `--conflict-exit-code`) \
     when the lock was not acquired; 123 when COMMAND ran its `--max-time` and lockrun \
     stopped it; 124 when the lock was lost and lockrun stopped COMMAND; 125 when lockrun \
     itself failed.";

const SEE_EXIT_TABLE: &str = "The full table is under EXIT STATUS in lockrun(1).";

const SUBCOMMAND_SEE_ALSO: &[Block] = &[P(
    "lockrun(1), for the exit status, the environment (and what COMMAND is given), the \
     signals and the safety model.",
)];

/// lockrun(1)'s SEE ALSO: its subcommands' pages, each backend's peer
/// tool, timeout(1).
fn see_also() -> String {
    let peers: Vec<&str> = BACKENDS.iter().map(|b| b.peer.page).collect();
    format!(
        "lockrun-elect(1), lockrun-semaphore(1), lockrun-leader(1), lockrun-list(1), lockrun-release(1), \
         lockrun-completions(1), lockrun-man(1), {}, timeout(1).",
        peers.join(", ")
    )
}
