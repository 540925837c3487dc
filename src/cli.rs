//! The command line, defined once: `--help`, the man pages and the shell
//! completions are all rendered from these types.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::backend::consul::Behavior;
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
released; 2 usage; 75 not acquired; 124 lock lost, child stopped; 125 lockrun
failed; 126/127 COMMAND not executable / not found; 128+N signal N while
waiting. See lockrun(1).";

/// Run a command only while holding a lock or semaphore slot.
///
/// lockrun takes a leader lock (or one of N semaphore slots) in HashiCorp
/// Consul, in etcd (--backend etcd), in PostgreSQL (--backend postgres), or on
/// this host with flock(2) (--backend local), runs COMMAND while it holds it, and stops COMMAND the moment holding
/// it can no longer be guaranteed: the child never runs at a moment when
/// another holder could have acquired the lock.
#[derive(Debug, Parser)]
#[command(name = "lockrun", version = env!("LOCKRUN_VERSION"), after_help = AFTER_HELP, max_term_width = 100, args_override_self = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub backend: BackendArgs,
    #[command(flatten)]
    pub consul: ConsulArgs,
    #[command(flatten)]
    pub etcd: EtcdArgs,
    #[command(flatten)]
    pub postgres: PostgresArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run COMMAND while holding the leader lock on KEY.
    ///
    /// lockrun takes the lock on KEY (waiting, without polling, while another
    /// holder has it), runs COMMAND and keeps the lock while it runs (renewing
    /// its Consul session or etcd lease). When COMMAND exits, lockrun releases
    /// the lock and exits with COMMAND's status; when the lock is lost, it
    /// stops COMMAND and exits 124, or campaigns again with --campaign. KEY
    /// excludes `consul lock` on the same key, `etcdctl lock KEY` with
    /// --backend etcd, and `flock DIR/KEY` with --backend local.
    #[command(after_help = "\
Examples:
  lockrun elect service/db/leader -- ./db-primary
  lockrun elect --campaign --value \"$(hostname):5432\" service/db/leader -- ./db-primary
  lockrun elect --timeout 30s --shell jobs/migrate -- './migrate.sh && ./notify.sh'
  lockrun elect P/.lock -- ./job          # excludes `consul lock P ./job`")]
    Elect(ElectArgs),
    /// Run COMMAND while holding one of N slots of the semaphore PREFIX.
    ///
    /// The same lifecycle as elect, holding one of N slots. On Consul the format
    /// is that of `consul lock -n N PREFIX`, so both share slots; every
    /// contender must use the same --limit. LOCKRUN_LOCK_INDEX orders
    /// admissions across the semaphore, not each slot: a slot admitted later
    /// has a greater number (above that of every slot that ended before),
    /// but N holders at once may start their commands in any order.
    #[command(after_help = "\
Examples:
  lockrun semaphore --limit 3 jobs/reindex -- ./reindex.sh
  lockrun semaphore --limit 1 --no-wait jobs/backup -- ./backup.sh
  lockrun semaphore --limit 2 P -- ./job  # shares slots with `consul lock -n 2 P ./job`")]
    Semaphore(SemaphoreArgs),
    /// Print who holds the lock on KEY (or the semaphore PREFIX).
    ///
    /// Prints the holder's value on stdout and exits 0, or exits 1 if nobody
    /// holds it. For a semaphore prefix, prints one live holder per line. A
    /// holder that stores no value (`consul lock`, the Go API) is shown by its
    /// session as `NAME (node NODE)`.
    #[command(after_help = "\
Examples:
  leader=$(lockrun leader service/db/leader); status=$?   # 1: no leader, 125: cannot tell
  lockrun leader --json service/db/leader
  lockrun leader --wait --timeout 1m service/db/leader
  lockrun leader --watch service/db/leader
  lockrun leader jobs/reindex             # a semaphore: one holder per line

Exit status: 0 held, 1 not held, 125 error.")]
    Leader(LeaderArgs),
    /// Force-release the lock on KEY (or semaphore slots), from any host.
    ///
    /// Works from any host. Prints whose lock it was; the holder's lockrun
    /// notices within a blocking-query round trip and stops its child with
    /// its full --kill-timeout (on etcd at once: the release revokes the
    /// holder's lease). A release arms no lock-delay, so a rival may start
    /// while that child is still stopping: the one overlap lockrun accepts,
    /// because an operator asked for it.
    #[command(after_help = "\
Examples:
  lockrun release service/db/leader
  lockrun release --session 3f2a... --destroy-session service/db/leader
  lockrun release --all jobs/reindex      # free every slot of a semaphore

Exit status: 0 released, 1 nothing was held, 125 error. On local, every lockrun
holder that can be asked is, and printed; a holder that cannot (a flock(1))
is then named on stderr, and the status is 125.")]
    Release(ReleaseArgs),
    /// Print the timing promise that elect or semaphore would keep with these flags.
    ///
    /// Takes the flags of `elect` or `semaphore` (COMMAND is not needed) and
    /// prints, for them and the backend: how often the lease is renewed, the
    /// last moment COMMAND can still run after the last confirmed renewal
    /// (SIGKILL included), the earliest moment a rival can acquire, the margin
    /// between them, the clock-rate error that margin tolerates, and what the
    /// promise assumes. It validates the flags as `elect` and `semaphore` do
    /// (usage errors exit 2) and contacts no engine.
    #[command(after_help = "\
Examples:
  lockrun explain elect service/db/leader
  lockrun explain --json --backend etcd elect --ttl 5s --kill-timeout 200ms jobs/migrate
  lockrun explain semaphore --limit 3 jobs/reindex

Exit status: 0 explained, 2 usage.")]
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
    /// COMMAND of `lockrun elect` finds a sequencer in LOCKRUN_SEQUENCER:
    /// one opaque token naming the backend, the key, the fence
    /// (LOCKRUN_LOCK_INDEX) and the holder (a Consul session, an etcd
    /// lease's key, a local holder's pid). A service COMMAND writes to can
    /// run `lockrun check` (with the engine's usual flags and variables) to
    /// refuse a leader that is no longer one. The backend is the
    /// sequencer's.
    #[command(after_help = "\
Examples:
  lockrun check \"$LOCKRUN_SEQUENCER\" && apply-write
  CONSUL_HTTP_ADDR=10.0.0.5:8500 lockrun check \"$seq\"

Exit status: 0 still held by that holder with that fence, 1 not held or held
by another, 2 usage (not a sequencer), 125 cannot tell (engine unreachable).")]
    Check(crate::ops::CheckArgs),
    /// Write KEY=VALUE into the engine only while a sequencer's holder holds its lock.
    ///
    /// A fenced write: on Consul one transaction that checks the holder's
    /// session still holds the lock key, then sets KEY; on etcd one that
    /// compares the holder's contender key still exists (its lease lives),
    /// then puts KEY. Once the holder has lost the lock the write is refused
    /// and nothing is written. Not supported on local and postgres.
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
/// under `explain`, which runs nothing.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command().mut_subcommand("explain", |explain| {
        ["elect", "semaphore"]
            .into_iter()
            .fold(explain, |explain, name| {
                explain.mut_subcommand(name, |sub| sub.mut_arg("command", |a| a.required(false)))
            })
    })
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Directory to write the pages into, e.g. /usr/local/share/man/man1.
    #[arg(long, value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    pub dir: PathBuf,
}

/// The engines lockrun can keep its locks in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendName {
    /// HashiCorp Consul (sessions and KV, as `consul lock`).
    Consul,
    /// etcd v3 (a lease and etcd's own mutex layout, as `etcdctl lock`).
    Etcd,
    /// This host only: `flock(2)` on a file per lock, as `flock(1)`; no server.
    Local,
    /// PostgreSQL (a session-level advisory lock, as `pg_advisory_lock`).
    Postgres,
}

impl BackendName {
    pub fn name(self) -> &'static str {
        match self {
            BackendName::Consul => "consul",
            BackendName::Etcd => "etcd",
            BackendName::Local => "local",
            BackendName::Postgres => "postgres",
        }
    }
}

/// Which engine, and the local engine's settings.
#[derive(Debug, Args)]
#[command(next_help_heading = "Backend")]
pub struct BackendArgs {
    /// Where the locks live: consul, etcd, postgres, or local (this host
    /// only, no server). Never chosen for you: without it (or LOCKRUN_BACKEND) it is
    /// consul.
    #[arg(long, global = true, value_enum, env = "LOCKRUN_BACKEND", default_value_t = BackendName::Consul, value_name = "BACKEND")]
    pub backend: BackendName,
    /// local: the lock directory; KEY is the file DIR/KEY, which `flock DIR/KEY`
    /// shares [default: /run/lockrun for root, $XDG_RUNTIME_DIR/lockrun or
    /// /tmp/lockrun-UID otherwise].
    #[arg(long, global = true, env = "LOCKRUN_LOCK_DIR", hide_env_values = true, value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    pub lock_dir: Option<PathBuf>,
    /// local: accept a lock directory on NFS or CIFS, whose flock(2) may not
    /// exclude other hosts or may break on a reconnect.
    #[arg(long, global = true)]
    pub allow_network_fs: bool,
}

/// Where etcd is; flags override etcdctl's environment variables. The user
/// and password come from ETCDCTL_USER (and ETCDCTL_PASSWORD) only, never
/// from a command line that every user of the host can read.
#[derive(Debug, Args)]
#[command(next_help_heading = "etcd connection")]
pub struct EtcdArgs {
    /// etcd: endpoints, comma-separated host:port or http(s)://host:port
    /// (else ETCDCTL_ENDPOINTS, else 127.0.0.1:2379); the next is tried when
    /// one is down.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new(), global = true, value_name = "ADDRS")]
    pub endpoints: Option<String>,
    /// etcd: CA certificate file (else ETCDCTL_CACERT).
    #[arg(long, global = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub cacert: Option<PathBuf>,
    /// etcd: client certificate file (else ETCDCTL_CERT).
    #[arg(long, global = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub cert: Option<PathBuf>,
    /// etcd: the client certificate's key file (else ETCDCTL_KEY).
    #[arg(long, global = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub cert_key: Option<PathBuf>,
}

/// Where PostgreSQL is; the flag overrides libpq's environment variables
/// (PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD, PGPASSFILE, PGSSLMODE,
/// PGSSLROOTCERT, PGSSLCERT, PGSSLKEY). A password belongs in ~/.pgpass or
/// PGPASSWORD, not on a command line every user can read.
#[derive(Debug, Args)]
#[command(next_help_heading = "PostgreSQL connection")]
pub struct PostgresArgs {
    /// postgres: a postgres:// URL or libpq `key=value` words, e.g.
    /// postgres://app@db.example:5432/app (else PGHOST, PGPORT, PGUSER,
    /// PGDATABASE; else the local socket). TLS as libpq: sslmode=disable,
    /// prefer (the default), require, verify-ca or verify-full, with
    /// sslrootcert, sslcert and sslkey.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new(), global = true, value_name = "DSN")]
    pub dsn: Option<String>,
}

/// Where Consul is and how to authenticate; flags override the consul CLI's
/// environment variables.
#[derive(Debug, Args)]
#[command(next_help_heading = "Consul connection")]
pub struct ConsulArgs {
    /// Consul agent address: host:port, http://host:port or https://host:port;
    /// several, comma-separated, to renew through the next when one hangs or dies.
    #[arg(
        long,
        global = true,
        env = "CONSUL_HTTP_ADDR",
        value_name = "ADDR",
        hide_env_values = true
    )]
    pub http_addr: Option<String>,
    /// Read the ACL token from FILE (else CONSUL_HTTP_TOKEN_FILE, CONSUL_HTTP_TOKEN).
    #[arg(long, global = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub token_file: Option<PathBuf>,
    /// CA certificate file to verify Consul's TLS certificate.
    #[arg(long, global = true, env = "CONSUL_CACERT", hide_env_values = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub ca_file: Option<PathBuf>,
    /// Directory of CA certificates.
    #[arg(long, global = true, env = "CONSUL_CAPATH", hide_env_values = true, value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    pub ca_path: Option<PathBuf>,
    /// Client certificate for Consul's verify_incoming.
    #[arg(long, global = true, env = "CONSUL_CLIENT_CERT", hide_env_values = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub client_cert: Option<PathBuf>,
    /// Client key for Consul's verify_incoming.
    #[arg(long, global = true, env = "CONSUL_CLIENT_KEY", hide_env_values = true, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub client_key: Option<PathBuf>,
    /// Server name to verify Consul's certificate against (SNI).
    #[arg(
        long,
        global = true,
        env = "CONSUL_TLS_SERVER_NAME",
        hide_env_values = true,
        value_parser = clap::builder::NonEmptyStringValueParser::new(),
        value_name = "NAME"
    )]
    pub tls_server_name: Option<String>,
    /// Datacenter to use (default: the agent's).
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new(), global = true, value_name = "DC")]
    pub datacenter: Option<String>,
    /// Enterprise namespace.
    #[arg(
        long,
        global = true,
        env = "CONSUL_NAMESPACE",
        hide_env_values = true,
        value_parser = clap::builder::NonEmptyStringValueParser::new(),
        value_name = "NS"
    )]
    pub namespace: Option<String>,
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
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, value_name = "FORMAT")]
    pub log_format: LogFormat,
}

/// The session that holds the lock.
#[derive(Debug, Args)]
#[command(next_help_heading = "Session")]
pub struct SessionArgs {
    /// Session (Consul) or lease (etcd) TTL: Consul allows 10s to 24h, etcd
    /// whole seconds. Shorter notices a dead host sooner.
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, default_value = "15s", value_name = "DURATION")]
    pub ttl: Duration,
    /// How long Consul keeps the lock from a new holder after the session is
    /// invalidated (0s to 60s). It is the child's grace window on a partition.
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, default_value = "15s", value_name = "DURATION")]
    pub lock_delay: Duration,
    /// What Consul does with held keys when the session is invalidated
    /// [default: release for elect, delete for semaphore].
    #[arg(long, value_enum, value_name = "BEHAVIOR")]
    pub behavior: Option<Behavior>,
    /// Session name shown in Consul [default: lockrun on HOST for KEY].
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new(), value_name = "NAME")]
    pub session_name: Option<String>,
    /// Node health checks the session is bound to (comma-separated) [default: none].
    /// A failing check ends the session at once, so the child must then be
    /// dead within the lock-delay: renewals come more often and the grace
    /// period must fit in the lock-delay. Not for semaphores.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "CHECKS",
        conflicts_with = "no_checks"
    )]
    pub node_checks: Option<Vec<String>>,
    /// Service health checks the session is bound to (comma-separated;
    /// Consul 1.7 or later). As --node-checks.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "CHECKS",
        conflicts_with = "no_checks"
    )]
    pub service_checks: Vec<String>,
    /// Bind the session to no health check, so that only the TTL ends it
    /// (the default; sent to Consul explicitly, old and new fields alike).
    #[arg(long)]
    pub no_checks: bool,
    /// The largest combined clock-rate error between this host and the
    /// engine's that the stop window allows for, in ppm or % (consul and
    /// etcd; the local backend has no lease, and refuses it). The default
    /// is two hosts slewing opposite ways at chrony's maximum, 2 x 83,333
    /// ppm. This host's share is half: when the kernel slows our clock
    /// more (adjtimex), the window narrows, or the command is stopped
    /// (exit 124) when none is left.
    #[arg(long, value_parser = crate::clock::rate::parse_bound, default_value = "166666ppm", value_name = "RATE")]
    pub clock_rate_error: crate::clock::Ppm,
}

/// How long to wait for the lock.
#[derive(Debug, Args)]
#[command(next_help_heading = "Waiting")]
pub struct WaitArgs {
    /// Give up after DURATION without the lock (exit 75).
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION", conflicts_with = "no_wait")]
    pub timeout: Option<Duration>,
    /// Try once; if the lock is taken, exit 75 at once (a network blip is
    /// retried for up to 500ms).
    #[arg(short = 'n', long)]
    pub no_wait: bool,
    /// Exit status when the lock was not acquired (like flock -E); 0 makes a
    /// conflict count as success, for cron jobs another host already ran.
    #[arg(short = 'E', long, default_value_t = 75, value_name = "STATUS",
          value_parser = clap::value_parser!(u8).range(0..=255))]
    pub conflict_exit_code: u8,
}

/// The command to run and how to stop it.
#[derive(Debug, Args)]
#[command(next_help_heading = "Command")]
pub struct ChildArgs {
    /// Run COMMAND with /bin/sh -c; further arguments become $1, $2, ...
    #[arg(long)]
    pub shell: bool,
    /// Signal that asks the child to stop when the lock is lost.
    #[arg(long, default_value = "TERM", value_name = "SIGNAL", value_parser = SignalParser)]
    pub kill_signal: Signal,
    /// Grace period after the kill signal before SIGKILL [default: 5s for
    /// elect, 2s for semaphore, less if --ttl or --lock-delay leave less
    /// room]. It must fit in the safety budget (lockrun says by how much if
    /// it does not). When Consul reports the lock lost, only what the
    /// lock-delay leaves is granted (none for a semaphore).
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true, value_name = "DURATION")]
    pub kill_timeout: Option<Duration>,
    /// What becomes of the processes COMMAND leaves running when it exits
    /// (a daemon it started, a background job): `wait` keeps the job, and
    /// the lock, until the last of them is gone; `kill` gives them
    /// --kill-signal, then SIGKILL after --kill-timeout. The exit status is
    /// COMMAND's either way.
    #[arg(long, value_enum, default_value_t = Leftovers::Wait, value_name = "WHAT")]
    pub leftovers: Leftovers,
    /// How COMMAND's process tree is kept together. `auto`: in a cgroup v2
    /// of its own where lockrun may create one (as root, or under systemd
    /// delegation: a `Delegate=yes` unit, `systemd-run --scope -p
    /// Delegate=yes`; a service's cgroup not delegated stays systemd's),
    /// stopped at once by `cgroup.kill`; elsewhere, and after any
    /// failure, as `subreaper`: the guard, a child subreaper, finds the
    /// tree's processes in /proc and kills them in passes until none is
    /// left. `-v` says which mode a run got.
    #[arg(long, value_enum, default_value_t = ContainmentMode::Auto, value_name = "MODE")]
    pub containment: ContainmentMode,
    /// Value stored in the lock entry [default: this host's name].
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new(), value_name = "VALUE")]
    pub value: Option<String>,
    /// The command and its arguments.
    #[arg(required = true, last = true, value_name = "COMMAND", value_hint = clap::ValueHint::CommandWithArguments)]
    pub command: Vec<OsString>,
}

/// `--leftovers`: what becomes of what COMMAND leaves running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Leftovers {
    /// The job lasts until the last process of COMMAND's tree is gone.
    Wait,
    /// What COMMAND left is stopped when COMMAND exits.
    Kill,
}

/// `--containment`: how COMMAND's tree is kept together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ContainmentMode {
    /// A cgroup of its own where possible, else the subreaper.
    Auto,
    /// The guard as a child subreaper alone, never a cgroup.
    Subreaper,
}

/// Running under systemd or cron.
#[derive(Debug, Args)]
#[command(next_help_heading = "Service")]
pub struct ServiceArgs {
    /// Speak systemd's notify protocol (Type=notify): READY=1 once the lock is
    /// held (`--notify` or `--notify=held`) or at start (`--notify=start`),
    /// STATUS= lines, WATCHDOG=1 while the lease is confirmed, STOPPING=1.
    /// COMMAND then does not inherit NOTIFY_SOCKET or WATCHDOG_*. Without
    /// --timeout or --no-wait it retries an engine that is down at start,
    /// as --campaign does (a unit may start before its agent).
    #[arg(long, value_enum, value_name = "WHEN", num_args = 0..=1, require_equals = true,
          default_missing_value = "held")]
    pub notify: Option<Ready>,
    /// Keep the lock at least DURATION after taking it, even when COMMAND
    /// finishes sooner, so that hosts whose cron fires later in the same
    /// period find it held: with `-n -E 0`, a job runs once per period.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub min_hold: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct ElectArgs {
    /// The lock key, e.g. service/db/leader.
    #[arg(value_name = "KEY")]
    pub key: String,
    /// After losing the lock, stop the child and campaign again instead of
    /// exiting 124 (for long-running daemons).
    #[arg(long)]
    pub campaign: bool,
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
    /// Print one JSON object, the same schema on every backend: {"key",
    /// "backend", "kind": "lock"|"semaphore", "held", "limit" (null for a
    /// lock), "holders": [...]}; with --watch, one per line. A holder is
    /// {"value", "fence", "since", "since_unix", "host", "pid", "details"},
    /// null where the engine does not know; "fence" is the holder's
    /// LOCKRUN_LOCK_INDEX where it can be read back (a Consul lock's
    /// ModifyIndex, not its LockIndex; an etcd slot; local), else null;
    /// "details" holds the engine's own facts (Consul's entry and session).
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
pub struct ReleaseArgs {
    /// The lock key, or a semaphore prefix.
    #[arg(value_name = "KEY")]
    pub key: String,
    /// Only if this session holds it (for a semaphore: free this holder's slot).
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new(), value_name = "ID")]
    pub session: Option<String>,
    /// Also destroy the holder's session (its other locks go too, after their lock-delay).
    #[arg(long)]
    pub destroy_session: bool,
    /// Semaphore: free every slot.
    #[arg(long, conflicts_with = "session")]
    pub all: bool,
}

/// The longest duration any flag takes. Far beyond any useful timeout, and
/// far enough from the clock's limits that adding it to "now" or to a
/// budget can never overflow.
pub const DURATION_MAX: Duration = Duration::from_secs(365 * 24 * 3600);

/// Durations in humantime form: `500ms`, `15s`, `2m`, `1h 30m`; a bare `0`
/// means zero. Bounded to [`DURATION_MAX`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.starts_with('-') {
        return Err(format!(
            "`{text}` is negative; durations run from 0s to 365d, e.g. 15s"
        ));
    }
    let parsed = humantime::parse_duration(text).map_err(|e| match e {
        humantime::DurationError::NumberOverflow => {
            format!("`{text}` is too long; use a duration from 0s to 365d")
        }
        e => format!("`{text}` is not a duration ({e}); use a form like 500ms, 15s or 2m"),
    })?;
    if parsed > DURATION_MAX {
        return Err(format!(
            "`{text}` is too long; use a duration from 0s to 365d"
        ));
    }
    Ok(parsed)
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
