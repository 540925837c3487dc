//! The seam between lockrun and the engines that keep its locks.
//!
//! The hold loop (`crate::hold`), `leader` and `release` need four things
//! from an engine, and each is one trait here, implemented once per backend
//! (one folder each: `consul/`, `etcd/`, `local/`, `postgres/`):
//!
//! - [`Lease`](crate::backend::Lease): what keeps our claims alive. Consul renews a session on a
//!   TTL, etcd a lease; `local` has nothing to renew and never runs out,
//!   because the kernel drops a file lock only when the last descriptor of
//!   it closes. How long after the last confirmed renewal a rival could hold
//!   the lock (SPEC §6) is not asked of a lease: the backend's hold rules
//!   ([`Backend::hold_rules`]) work it out from the flags (`timing::Budget`),
//!   so that a setting that cannot keep the promise is refused before
//!   anything is written.
//! - [`Engine`](crate::backend::Engine): opens a lease and acquires a lock or a semaphore slot with
//!   some [`Wait`](crate::backend::Wait). Acquisition is cancelled by dropping its future: an
//!   engine must leave nothing held once its lease is closed, even if the
//!   lock was granted at that very moment.
//! - [`Claim`](crate::backend::Claim): a lock or slot we hold: its fencing number (SPEC §7), the
//!   engine's own name of its holder (a sequencer's other half), the
//!   child's extra environment, the descriptor the guard keeps while the
//!   child's group lives (engines whose claim lives in a process-owned
//!   descriptor), a watch that resolves when the claim is lost, and release.
//! - [`Inspect`](crate::backend::Inspect): the outside view for `leader` and `release`: the live
//!   holders, a stream of changes without polling loops, and asking a holder
//!   to let go.
//!
//! Around them, [`Backend`] is what a backend is before it runs: its key
//! rules, its hold rules (a budget and a plan for its engine), and how it
//! builds its client from its own flags, with its [`Registration`] (its
//! flags and man-page prose). Each backend is registered by one line of the
//! `registry::backends!` invocation below, which declares its module and
//! generates the flags of every backend and the one choice of `--backend`.
//! Nothing outside `backend/` names a backend.
//!
//! Errors stay per backend; each says whether it is worth retrying
//! ([`EngineError`]) and becomes a [`Failure`] with its exit status.
//!
//! We use generics and `async fn` in traits rather than `dyn`: one backend
//! is chosen per run, so the hold loop is monomorphised once per backend and
//! no future is boxed.

pub mod priority;
pub mod registry;
pub mod retry;
pub mod rules;
pub mod timing;
#[cfg(feature = "tls")]
pub mod tls;

use std::ffi::OsString;
use std::future::Future;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use clap::ValueEnum;

use crate::error::Failure;
use timing::Budget;
pub use timing::{Lost, Renewal};

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

/// What differs between a leader lock and a semaphore slot.
#[derive(Debug, Clone, Copy)]
pub struct Kind {
    /// "key" or "semaphore", for the session's name.
    pub name: &'static str,
    /// A leader lock, not a semaphore slot: the engine's guard after a
    /// loss (Consul's lock-delay) protects keys, never a slot in a record.
    pub lock: bool,
    /// A lock taken shared (`elect -s`): readers hold it together. A
    /// backend whose engine has no shared mode yet refuses it in its hold
    /// rules, before anything is sent.
    pub shared: bool,
    pub default_kill_timeout: Duration,
    /// How this waiter ranks among the waiters for a leader lock (`elect
    /// --priority`); [`priority::Priority::NONE`] for a semaphore.
    pub priority: priority::Priority,
}

pub const LEADER: Kind = Kind {
    name: "key",
    lock: true,
    shared: false,
    default_kill_timeout: Duration::from_secs(5),
    priority: priority::Priority::NONE,
};

pub const SEMAPHORE: Kind = Kind {
    name: "semaphore",
    lock: false,
    shared: false,
    default_kill_timeout: Duration::from_secs(2),
    priority: priority::Priority::NONE,
};

/// How far above SIGRTMIN the signal sits that `release` sends a holding
/// lockrun on engines with no server to revoke the claim (`local`): "an
/// operator released you: stop the child, exit 124". A real-time signal
/// nobody forwards or sends; systemd gives meanings to SIGRTMIN+0..+6 and
/// the guard's parent-death signal is SIGRTMIN+10. A real-time signal's
/// default action ends the process, so the hold loop must catch it before it
/// acquires (holder facts that name us exist from the moment we hold).
pub const RELEASE_SIGNAL_ABOVE_RTMIN: i32 = 11;

/// The release signal's number on this system.
pub fn release_signal() -> i32 {
    libc::SIGRTMIN() + RELEASE_SIGNAL_ABOVE_RTMIN
}

/// How long acquisition may wait: the one type for `--no-wait`,
/// `--timeout` and waiting for ever. `At` is a moment ([`Instant`]) once
/// the clock runs, and a [`Duration`] from the start before it does (a
/// validated `--timeout`, see [`Wait::from_now`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait<At = Instant> {
    /// One attempt (`--no-wait`).
    Once,
    /// Until this moment (`--timeout`).
    Until(At),
    Forever,
}

impl Wait<Duration> {
    /// The patience left once `spent` of it is used.
    pub fn less(self, spent: Duration) -> Wait<Duration> {
        match self {
            Wait::Until(timeout) => Wait::Until(timeout.saturating_sub(spent)),
            other => other,
        }
    }

    /// The patience as a deadline counted from now.
    pub fn from_now(self) -> Wait {
        match self {
            Wait::Once => Wait::Once,
            Wait::Forever => Wait::Forever,
            Wait::Until(timeout) => Wait::Until(Instant::now() + timeout),
        }
    }
}

impl Wait {
    /// The deadline, if any.
    pub fn deadline(self) -> Option<Instant> {
        match self {
            Wait::Until(at) => Some(at),
            Wait::Once | Wait::Forever => None,
        }
    }
}

/// An engine's failure: one line for the user, and whether it is worth
/// trying again within the user's patience.
pub trait EngineError: std::error::Error + Send + Sync + 'static + Into<Failure> {
    /// A blip (a reset connection, an election), not a verdict.
    fn is_transient(&self) -> bool;
}

/// How a lease is opened: within what patience, whether lockrun runs as a
/// daemon (which outlives an engine's restart), and where to report trouble
/// an operator should see (the notify STATUS line).
#[derive(Clone, Copy)]
pub struct Opening<'a> {
    pub wait: Wait,
    pub daemon: bool,
    /// The run's first contact with the engine: a one-off run then says at
    /// once what a setting explains. A lease opened again (ours ran out
    /// while we waited, as when the cluster lost its quorum) is not: the
    /// engine answered before, so its failures are waited out.
    pub first: bool,
    pub report: &'a (dyn Fn(&str) + Sync),
}

/// What a lease-holding backend keeps alive for us.
pub trait Lease {
    /// When the lease was last confirmed: the send time of the request that
    /// opened it, for the local countdown.
    fn confirmed_at(&self) -> Instant;
    /// One renewal, giving up after `timeout`.
    fn renew(&self, timeout: Duration) -> impl Future<Output = Renewal>;
    /// Ends the lease; best effort, bounded by the engine.
    fn close(self) -> impl Future<Output = ()>;
}

/// What to acquire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A lock on a key: exclusive (a leader lock, `flock -x`) or shared
    /// (`flock -s`: readers hold it together, never beside a writer).
    Lock { key: String, shared: bool },
    /// One of `limit` slots under a prefix.
    Slot { prefix: String, limit: u32 },
}

impl Target {
    /// The key or prefix, as `LOCKRUN_KEY` shows it.
    pub fn name(&self) -> &str {
        match self {
            Target::Lock { key, .. } => key,
            Target::Slot { prefix, .. } => prefix,
        }
    }
}

/// How an acquisition ended without an error.
#[derive(Debug)]
pub enum Acquisition<C> {
    Held(C),
    /// `--no-wait` found it taken, or `--timeout` ran out; the holder's
    /// value when known, for the message.
    Busy {
        holder: Option<String>,
    },
}

/// An engine that acquires locks and slots.
pub trait Engine {
    type Lease: Lease;
    type Claim: Claim<Error = Self::Error>;
    type Error: EngineError;

    /// Whether a claim lives in a descriptor the guard must keep
    /// ([`Claim::take_hold_fd`]): it is lent to the guard when the child
    /// starts.
    const CLAIM_LENDS_FD: bool = false;

    /// Opens the lease claims are tied to, retrying blips within
    /// `opening.wait` (for ever for a daemon). Dropping the future leaves
    /// nothing behind but what the engine's own expiry ends.
    fn open_lease(
        &self,
        opening: Opening<'_>,
    ) -> impl Future<Output = Result<Self::Lease, Self::Error>>;

    /// Acquires `target` for `value` (what `leader` prints). Dropping the
    /// future cancels the wait and leaves nothing held.
    fn acquire(
        &self,
        lease: &Self::Lease,
        target: &Target,
        value: &str,
        wait: Wait,
    ) -> impl Future<Output = Result<Acquisition<Self::Claim>, Self::Error>>;

    /// [`Engine::acquire`], where the engine can hand the wait to `guard`,
    /// which then starts the child itself the moment the lock is granted:
    /// `(Held, true)` when the guard runs the child already. The default
    /// waits as `acquire` does, and the guard is given its go later.
    fn acquire_in_guard<G: GuardWait>(
        &self,
        lease: &Self::Lease,
        target: &Target,
        value: &str,
        wait: Wait,
        guard: &mut G,
    ) -> impl Future<Output = Result<(Acquisition<Self::Claim>, bool), Self::Error>> {
        let _ = guard;
        async move { Ok((self.acquire(lease, target, value, wait).await?, false)) }
    }

    /// Lets `claim` go and ends `lease`, the one it was acquired under: the
    /// claim first, then the lease, unless the engine can end both in one
    /// write, so that the waiter it wakes finds no second write in flight.
    /// Returns the release's failure; the lease is ended either way.
    fn release_and_close(
        claim: Self::Claim,
        lease: Self::Lease,
    ) -> impl Future<Output = Result<(), Self::Error>> {
        async move {
            let released = claim.release().await;
            lease.close().await;
            released
        }
    }
}

/// A parked guard that can wait for a claim's descriptor itself and start
/// the child the moment the lock is granted (`flock(1)`'s way: nobody woken
/// between the grant and the start). See [`Engine::acquire_in_guard`].
pub trait GuardWait {
    /// Lends `lock` to the guard, which waits for its exclusive lock, runs
    /// [`grant_in_guard`] with `grant`, and starts the child with `env`,
    /// each of `fence_vars` set to the fencing number that step returns,
    /// and the sequencer, built from it and `holder`. An error when the
    /// guard cannot (a terminal, say): nothing was sent.
    fn arm(
        &mut self,
        lock: &OwnedFd,
        env: Vec<(OsString, OsString)>,
        fence_vars: Vec<String>,
        holder: Option<String>,
        grant: String,
    ) -> std::io::Result<()>;
    /// The armed guard's answer.
    fn report(&mut self) -> impl Future<Output = std::io::Result<crate::child::Report>>;
    /// Takes the wait back; the answer may be a grant that came first.
    fn disarm(&mut self) -> impl Future<Output = std::io::Result<crate::child::Report>>;
}

/// The engines' steps in an armed guard (see [`GuardWait`]), by the first
/// word of the grant text. Set as the guard's step at start-up.
pub fn grant_in_guard(grant: &str) -> Option<crate::child::OnGrant> {
    let (engine, rest) = grant.split_once(' ')?;
    match engine {
        "local" => local::grant_in_guard(rest),
        _ => None,
    }
}

/// A lock or slot we hold.
pub trait Claim {
    type Error: EngineError;

    /// The fencing number: strictly increasing per key (SPEC §7).
    fn fence(&self) -> u64;
    /// `LOCKRUN_*` variables for the child.
    fn env(&self) -> Vec<(OsString, OsString)>;
    /// The engine's own name of the holder of this claim, as its inspect
    /// reads it back into [`Holder::holder_id`], so that `lockrun check`
    /// can tell this claim from the next one on the same key.
    fn holder_id(&self) -> Option<String>;
    /// The descriptor whose life is the claim's, for the guard to keep until
    /// the child's whole group is dead; `None` on engines whose claim lives
    /// on a server, and after the first call.
    fn take_hold_fd(&mut self) -> Option<OwnedFd>;
    /// Adds the child's process group to the holder facts.
    fn record_child(&mut self, pgid: u32) -> impl Future<Output = Result<(), Self::Error>>;
    /// Offers a claim whose descriptor the guard keeps to be let go of by
    /// the guard, once the child's whole tree is gone, rather than by
    /// [`Claim::release`] after the guard's exit: `offer` tells the guard
    /// the two files whose names it swaps first (what is to be left beside
    /// the lock, written before, while it is surely ours) and says whether
    /// the guard was told. From then on `release` writes nothing, since the
    /// lock may be someone else's by the time it runs. The default offers
    /// nothing: the guard keeps the descriptor until it exits.
    fn hand_over(&mut self, _offer: impl FnOnce([PathBuf; 2]) -> bool) {}
    /// A short description for the log line that says we acquired it
    /// (`session 3f2a…`, `/run/lockrun/k`).
    fn describe(&self) -> String;
    /// Resolves, with the reason, once the claim is no longer ours.
    fn watch(&mut self) -> impl Future<Output = Lost>;
    /// Lets go.
    fn release(self) -> impl Future<Output = Result<(), Self::Error>>;
    /// The note `--replace` left for this claim ([`ReplaceNote`]), read
    /// once its loss has stopped the command, and removed where a replacer
    /// on another host waits for it to go ([`Inspect::note_taken`]): it
    /// says the command's tree is gone. `None` where the engine keeps none,
    /// or none names this claim.
    fn replaced_by(&self) -> impl Future<Output = Option<ReplaceNote>> {
        async { None }
    }
    /// How the holder learns, while its command runs, that `--replace`
    /// asks it to let go ([`Inspect::asks_by_note`]): a future, owning
    /// what it needs (a client, the note's name), that resolves once a
    /// note naming this claim is there, leaving it in place, and never
    /// otherwise (read errors are tried again). On the note the holder
    /// stops its command's tree as on a release and only then lets the
    /// lock go, so the engine shows the lock held until the tree is gone.
    /// `None` where the engine keeps no note or its release already waits
    /// for the tree (local: the guard keeps the lock until then).
    fn asked(&self) -> Option<Asked> {
        None
    }
}

/// What [`Claim::asked`] returns: the note, once there.
pub type Asked = Pin<Box<dyn Future<Output = ReplaceNote>>>;

/// How long a holder waits before it reads again whether `--replace` left
/// it a note, after a read, a watch or a blocking read failed.
pub const ASK_POLL: Duration = Duration::from_millis(500);

/// The longest one read of a note for [`Claim::asked`] may take.
pub const ASK_READ: Duration = Duration::from_secs(2);

/// A live holder as `leader` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holder {
    /// What lockrun's `--value` said; `None` for a holder that is not
    /// lockrun (`flock(1)`), or lockrun before it wrote its facts.
    pub value: Option<String>,
    pub host: Option<String>,
    /// The holding process, when the engine knows it.
    pub pid: Option<u32>,
    pub child_pgid: Option<u32>,
    pub since: Option<SystemTime>,
    /// The number the holder's child was handed, when the engine keeps it.
    pub fence: Option<u64>,
    /// The slot, for a semaphore.
    pub slot: Option<u32>,
    /// The holder's own entry in the engine, when it has one: how a holder
    /// that stored no value is told apart.
    pub entry: Option<String>,
    /// The engine's own name of the holding claim, as its claim gives it
    /// ([`Claim::holder_id`]): what a sequencer names besides the fence.
    pub holder_id: Option<String>,
    /// How `leader` names the holder, when the engine knows better than its
    /// value and the facts above (Consul: a session's name and node for a
    /// holder that stored no value, or a value that is not text, as is).
    pub label: Option<Vec<u8>>,
    /// The engine's own facts, shown under `details` by `leader --json`,
    /// when it gathered them with the holder (Consul's session); otherwise
    /// [`Inspect::details`] makes them from the fields above.
    pub details: Option<serde_json::Value>,
}

/// How a loss to `--replace` begins ([`ReplaceNote::taken_over`]): a
/// campaigner so replaced does not campaign again.
pub const TAKEN_OVER: &str = "taken over by --replace";

/// `--replace`'s word to the holder it is about to release: who takes
/// over. Left beside the lock before the release (never as a holder: no
/// session, lease or lock of its own) and read by that holder while it
/// holds, as the ask to let go ([`Claim::asked`]), or once it has
/// stopped its command on the loss, so that its loss line names the
/// replacer; removed by the replacer once the holder has exited. It names
/// the replaced claim ([`Claim::holder_id`]), so a note left by a replacer
/// that died is never read by a later holder.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReplaceNote {
    /// The replaced claim's [`Holder::holder_id`].
    pub holder: String,
    /// The replacer's host, pid and `--value` (what `leader` shows of it).
    pub host: String,
    pub pid: u32,
    pub value: String,
}

impl ReplaceNote {
    /// The note as stored.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a note serialises")
    }

    /// A stored note, if it is one and names `holder`.
    pub fn decode_for(bytes: &[u8], holder: &str) -> Option<ReplaceNote> {
        serde_json::from_slice::<ReplaceNote>(bytes)
            .ok()
            .filter(|n| n.holder == holder)
    }

    /// Why the replaced holder lost its lock, as its loss line says it.
    pub fn taken_over(&self) -> String {
        format!(
            "{TAKEN_OVER} from host {} pid {} ({})",
            shown(&self.host),
            self.pid,
            shown(&self.value)
        )
    }
}

/// Text read from the engine as a terminal may show it: whoever can write
/// beside a lock can write a note or record, so control characters (an
/// escape sequence, a carriage return, a forged second line) are escaped,
/// and the text is cut at 200 characters.
pub fn shown(text: &str) -> String {
    const MAX: usize = 200;
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == MAX {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A lockrun waiter as `leader --json` shows it (`elect --priority`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    pub priority: u32,
    /// What its `--value` said, when the engine keeps it.
    pub value: Option<String>,
    pub pid: Option<u32>,
}

/// Which holders `release` asks to let go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Which {
    /// Every holder (a lock has at most one).
    All,
    /// The holders whose value is this.
    Value(String),
    /// This holder, as `holders` read it (`--replace`): the one with its
    /// entry, slot, value and pid.
    Holder(Box<Holder>),
}

impl Which {
    /// Whether `holder` is one of the chosen.
    pub fn picks(&self, holder: &Holder) -> bool {
        match self {
            Which::All => true,
            Which::Value(v) => holder.value.as_deref() == Some(v.as_str()),
            Which::Holder(h) => {
                holder.entry == h.entry
                    && holder.slot == h.slot
                    && holder.value == h.value
                    && holder.pid == h.pid
            }
        }
    }
}

/// `--replace`'s record ahead of lockrun's waiters ([`Inspect::go_ahead`]).
pub type Ahead = Box<dyn GoneAhead>;

/// A record ahead of lockrun's waiters, removed by [`GoneAhead::remove`]
/// (or, dropped, as the engine ends what its owner leaves: a closed
/// descriptor, a closed session, a lapsed lease).
pub trait GoneAhead: Send {
    /// Removes the record, waiting (a little) for the engine's answer, so
    /// that it is gone before lockrun exits.
    fn remove(self: Box<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// The outside view of locks and slots.
pub trait Inspect {
    type Error: EngineError;
    type Changes: Changes<Error = Self::Error>;

    /// What `key` names: a lock, or a semaphore's prefix (with its limit).
    fn target_of(&self, key: &str) -> impl Future<Output = Result<Target, Self::Error>>;

    /// The live holders now, never trusting stale records.
    fn holders(&self, target: &Target) -> impl Future<Output = Result<Vec<Holder>, Self::Error>>;
    /// The holders now, then each time they may have changed.
    fn changes(&self, target: &Target) -> impl Future<Output = Result<Self::Changes, Self::Error>>;
    /// Asks the chosen holders to stop their child and exit 124: the
    /// holders it asked, and why it could not ask the others. One holder
    /// that cannot be asked (a `flock(1)`) does not keep the others
    /// holding; an error is a failure before any holder was asked.
    fn force_release(
        &self,
        target: &Target,
        which: &Which,
    ) -> impl Future<Output = Result<Released<Self::Error>, Self::Error>>;

    /// Leaves `note` beside `target` for `holder`, which `--replace` is
    /// about to release (see [`ReplaceNote`]): whether the engine kept it.
    /// An engine with no place for it keeps nothing, and its holder's loss
    /// line says "an operator's release or --replace".
    fn leave_note(
        &self,
        _target: &Target,
        _holder: &Holder,
        _note: &ReplaceNote,
    ) -> impl Future<Output = Result<bool, Self::Error>> {
        async { Ok(false) }
    }

    /// Whether a lockrun holder here answers the note itself
    /// ([`Claim::asked`]): `--replace` then leaves the note, waits
    /// for the holder to stop its tree and let go, and releases it only if
    /// it never does (within its lease's lapse), so the lock is never free
    /// in the engine while the old command may run. Otherwise the release
    /// comes first, and the wait after it.
    fn asks_by_note(&self) -> bool {
        false
    }

    /// Removes the note [`Inspect::leave_note`] left for `holder`, once it
    /// has exited; best effort.
    fn clear_note(&self, _target: &Target, _holder: &Holder) -> impl Future<Output = ()> {
        async {}
    }

    /// How long after a release of `holder` its command may still run, at
    /// most, on the engine's clock: the time a rival would have waited had
    /// its lease simply lapsed at that moment (its TTL, and on Consul the
    /// lock-delay besides), which its lockrun's stop window fits in. `None`
    /// where the engine does not show it (a ZooKeeper session's timeout,
    /// PostgreSQL's deadline on a silent connection are the holder's own
    /// settings): `--replace` then waits out a holder on another host only
    /// where the engine ends its claim itself
    /// ([`Inspect::ends_silent_claims`]), and refuses it elsewhere.
    fn lapse_bound(
        &self,
        _holder: &Holder,
    ) -> impl Future<Output = Result<Option<Duration>, Self::Error>> {
        async { Ok(None) }
    }

    /// Whether the engine itself ends the claim of a holder that went
    /// silent (stopped, cut off, an older lockrun that reads no note) only
    /// once that holder's lockrun has stopped its command, as it does for
    /// any rival, though it does not show when (a ZooKeeper session's
    /// expiry; PostgreSQL's idle_session_timeout and TCP timeouts, which a
    /// lockrun holder sets to its TTL): `--replace` then asks a holder on
    /// another host by the note and waits for its answer or for the claim
    /// to end, and never releases it, where [`Inspect::lapse_bound`] shows
    /// no bound to wait out after a release.
    fn ends_silent_claims(&self) -> bool {
        false
    }

    /// Waits until the note left for `holder` is gone, which its lockrun
    /// removes once its command's whole tree is ([`Claim::replaced_by`]),
    /// or until `until`: whether it went. By default the engine cannot
    /// tell, and the wait lasts until `until`.
    fn note_taken(
        &self,
        _target: &Target,
        _holder: &Holder,
        until: Instant,
    ) -> impl Future<Output = bool> {
        async move {
            tokio::time::sleep_until(until).await;
            false
        }
    }

    /// The keys and semaphore prefixes that may have holders at or under
    /// `prefix` (`lockrun list`; the empty prefix is everything): each a
    /// name `target_of` and `holders` then read, in any order, duplicates
    /// allowed. Names whose holders the engine hides (a partial view) are
    /// an error here or in `holders`, never left out.
    fn names_under(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>, Self::Error>>;

    /// Held locks whose name the engine does not keep, by the engine's own
    /// id (PostgreSQL: an advisory lock `psql` took by number), each with
    /// its holders; listed only when `lockrun list` is given no prefix,
    /// since none of them is known to be under one.
    fn unnamed(&self) -> impl Future<Output = Result<Vec<(String, Vec<Holder>)>, Self::Error>> {
        async { Ok(Vec::new()) }
    }

    /// `--replace` on an exclusive lock: a waiter's record at
    /// [`priority::REPLACE`] for `target`, put before the holder is asked
    /// and kept until the replacer's hold ends (dropping the value removes
    /// it), so that lockrun's writers queued before it step out of the
    /// engine's wait and let it in first. Bound to the replacer as any
    /// waiter's record is (a lock, a session, a lease): a replacer that dies
    /// leaves none that counts. `None` where the engine keeps no records.
    fn go_ahead(
        &self,
        _target: &Target,
        _value: &str,
    ) -> impl Future<Output = Result<Option<Ahead>, Self::Error>> {
        async { Ok(None) }
    }

    /// The waiters for `target` that the engine shows, highest priority
    /// first, for `leader --json` and `list --json`; `None` on an engine
    /// whose waiters are not visible.
    fn waiters(
        &self,
        _target: &Target,
    ) -> impl Future<Output = Result<Option<Vec<Waiter>>, Self::Error>> {
        async { Ok(None) }
    }

    /// The engine's own facts about `holder`, shown under `details` by
    /// `leader --json`: by default the holder's entry and slot.
    fn details(&self, holder: &Holder) -> serde_json::Value {
        holder.details.clone().unwrap_or_else(|| {
            serde_json::json!({
                "key": holder.entry,
                "slot": holder.slot,
            })
        })
    }

    /// Why `release` refuses to free every slot of a semaphore when `--all`
    /// was not given, or `None` when this engine was told which holder to
    /// free some other way (Consul's `--session`).
    fn refuse_every_slot(&self, prefix: &str) -> Option<String> {
        Some(format!(
            "`{prefix}` is a semaphore; free every slot with --all"
        ))
    }

    /// The line `release` prints for a holder it asked to let go: by
    /// default the holder's label and its lockrun's pid; an engine that
    /// released the claim itself says so (Consul).
    fn asked_line(&self, target: &Target, holder: &Holder) -> String {
        let what = match holder.slot {
            Some(slot) => format!("slot {slot} of `{}`", target.name()),
            None => format!("`{}`", target.name()),
        };
        let mut line = format!(
            "asked the holder of {what} to release it: {}",
            String::from_utf8_lossy(&holder.label())
        );
        if let Some(pid) = holder.pid {
            line.push_str(&format!(" (lockrun pid {pid})"));
        }
        line
    }
}

/// What a forced release did: the holders asked to let go, and one error
/// for each holder it could not ask.
#[derive(Debug)]
pub struct Released<E> {
    pub asked: Vec<Holder>,
    pub refused: Vec<E>,
    /// Why nothing was released, when no holder was asked or refused and
    /// the engine can say more than "not held" (Consul: held by another
    /// session than the one named, changed hands meanwhile).
    pub nothing: Option<String>,
}

impl Holder {
    /// How `leader` shows the holder: the engine's label, else its value,
    /// else, for a holder that stored none (`flock(1)`, `etcdctl lock`),
    /// its process or its entry, so that a held lock never prints as an
    /// empty line.
    pub fn label(&self) -> Vec<u8> {
        if let Some(label) = &self.label {
            return label.clone();
        }
        match (&self.value, self.pid, &self.entry) {
            (Some(value), _, _) => value.clone(),
            (None, Some(pid), _) => format!("pid {pid} (not lockrun)"),
            (None, None, Some(entry)) => format!("{entry} (no value)"),
            (None, None, None) => {
                "a process that has exited, through a descriptor it passed on".into()
            }
        }
        .into_bytes()
    }
}

/// A stream of holder lists: the first call answers at once, each later
/// call when the list differs from the previous answer.
pub trait Changes {
    type Error;
    fn next(&mut self) -> impl Future<Output = Result<Vec<Holder>, Self::Error>>;
}

/// An engine's answer body for an error message: its first line, cut at 200
/// characters, or "empty answer".
pub fn one_line(body: &str) -> String {
    let line = body.trim().lines().next().unwrap_or("").trim();
    if line.is_empty() {
        "empty answer".to_string()
    } else if line.chars().count() > 200 {
        let cut: String = line.chars().take(200).collect();
        format!("{cut}...")
    } else {
        line.to_string()
    }
}

/// Waits until `target` has a holder (`leader --wait`).
pub async fn wait_for_holder<I: Inspect>(
    inspect: &I,
    target: &Target,
) -> Result<Vec<Holder>, I::Error> {
    let mut changes = inspect.changes(target).await?;
    loop {
        let holders = changes.next().await?;
        if !holders.is_empty() {
            return Ok(holders);
        }
    }
}

// Every backend, one line each, in the order lockrun(1) describes them. The
// line declares the backend's module too, which must be expanded here to
// find `backend/NAME/` (see `registry`).
// The line's string is the help of its `--backend` value.
registry::backends! {
    #[cfg(feature = "consul")] consul / Consul => consul::backend::ConsulBackend,
        "HashiCorp Consul (sessions and KV, as `consul lock`)",
    #[cfg(feature = "etcd")] etcd / Etcd => etcd::backend::EtcdBackend,
        "etcd v3 (a lease and etcd's own mutex layout, as `etcdctl lock`)",
    #[cfg(feature = "postgres")] postgres / Postgres => postgres::backend::PostgresBackend,
        "PostgreSQL (a session-level advisory lock, as `pg_advisory_lock`)",
    #[cfg(feature = "zookeeper")] zookeeper / Zookeeper => zookeeper::backend::ZookeeperBackend,
        "Apache ZooKeeper (ephemeral sequential nodes in Curator's layout)",
    local / Local => local::backend::LocalBackend,
        "This host only: `flock(2)` on a file per lock, as `flock(1)`; no server",
}

/// The name `--backend` takes.
impl std::fmt::Display for BackendName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value = self.to_possible_value().expect("no backend is hidden");
        f.write_str(value.get_name())
    }
}

impl BackendName {
    /// `names` as a sentence lists them: `etcd`, `consul and etcd`,
    /// `consul, etcd or local`, with `conjunction` before the last.
    pub fn listed(names: &[BackendName], conjunction: &str) -> String {
        let names: Vec<String> = names.iter().map(ToString::to_string).collect();
        match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => {
                format!("{} {conjunction} {last}", rest.join(", "))
            }
            _ => names.concat(),
        }
    }
}

/// The flags of a backend that has none of a kind (its `HoldArgs` or
/// `ReleaseArgs`). Without a group of its own, it can be flattened once
/// per backend that uses it.
#[derive(Debug, clap::Args)]
#[group(skip)]
pub struct NoFlags {}

/// A piece of a backend's man-page prose (see `crate::docs`).
pub enum Prose {
    /// A paragraph; `` `text` `` in backticks is set in bold.
    P(&'static str),
    /// A term and its description, as a tagged paragraph.
    Item(&'static str, &'static str),
}

/// What lockrun knows of a backend before choosing one: its flags, and
/// its part of the man page.
pub struct Registration {
    pub name: BackendName,
    /// The engine's own tool that takes the same locks.
    pub peer: Peer,
    /// Every flag it defines, global or a subcommand's: a flag typed for a
    /// backend that does not define it is refused.
    pub flags: fn(clap::Command) -> clap::Command,
    /// Whether its claims ride on a lease that runs out, so that the lease
    /// flags (`--ttl`, `--clock-rate-error`) mean something on it.
    pub lease: bool,
    /// Its variables that say where the locks are, which are a usage
    /// error when set but empty (see `config::empty_variable`), each with
    /// what to set instead.
    pub empty_is_an_error: &'static [(&'static str, &'static str)],
    /// Variables clap reads for its flags that count as unset when empty,
    /// with their flags' ids: credentials and TLS settings, which at worst
    /// get a request refused, never sent to another lock.
    pub empty_is_unset: &'static [(&'static str, &'static str)],
    /// Its variables, under ENVIRONMENT in lockrun(1).
    pub environment: &'static [Prose],
    /// What COMMAND gets from it besides the variables every backend sets,
    /// and what `LOCKRUN_LOCK_INDEX` is on it: under ENVIRONMENT too.
    pub child_environment: &'static [Prose],
    /// Its timing promise and its own safety items, under SAFETY, "Per
    /// backend".
    pub safety: &'static [Prose],
    /// Example lines of its own, each under a subcommand's Examples: all
    /// in `--help` and the man pages, only its own in `--backend X -h`.
    pub examples: &'static [(&'static str, &'static str)],
    /// Its own words in the shared help of a flag or subcommand that
    /// differs by engine, each under the [`Topic`] it belongs to: `--help`
    /// and the man pages are the shared text with every backend's note
    /// put in (`crate::cli::command`), so that a backend brings its own.
    pub notes: &'static [(Topic, &'static str)],
    /// The flags its engine's own tool's users type out of habit (`consul
    /// lock -n 3`, `-token=...`), answered with lockrun's equivalent in a
    /// usage error (`crate::usage`): `None` for a backend with none.
    pub habits: Option<fn(&Habit<'_>) -> Option<HabitAnswer>>,
}

/// A word of lockrun's line that starts with a dash, as
/// [`Registration::habits`] sees it.
pub struct Habit<'a> {
    /// The flag's name, without its dashes and `=VALUE`.
    pub name: &'a str,
    /// The flag as typed, without `=VALUE` (a value may be a secret).
    pub flag: &'a str,
    /// Whether it was typed with two dashes.
    pub double: bool,
    /// Its value: after `=`, else the word after it.
    pub next: Option<&'a str>,
    /// The subcommand on the line.
    pub sub: Option<&'a str>,
}

/// What lockrun says of a [`Habit`]: what is wrong and what to type
/// instead, and the subcommand whose help to point at when it is not the
/// one on the line.
pub struct HabitAnswer {
    pub what: String,
    pub help: Option<&'static str>,
}

/// Where a backend's [`Registration::notes`] go in the shared help. A
/// *fragment* is one item of a list the shared sentence makes of every
/// backend's (in the order of `BACKENDS`); a *sentence* stands whole, after
/// the shared text of its paragraph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topic {
    /// Fragment: where lockrun(1) and `--help` say it takes its locks
    /// ("in etcd (--backend etcd)").
    Where,
    /// Fragment: the engine's own tool that `elect`'s KEY excludes ("`etcdctl
    /// lock KEY` with --backend etcd").
    Excludes,
    /// Sentence: how its semaphore's slots meet its engine's tools'.
    Semaphore,
    /// Sentence: a holder `leader` shows otherwise than by its value.
    Leader,
    /// Fragment: `leader --json`'s "fence": what it is read back from.
    Fence,
    /// Fragment: `leader --json`'s "details": the engine's own facts.
    Details,
    /// Fragment: the peer tools whose holders `list` shows.
    ListPeers,
    /// Sentence: what `list` shows otherwise on it.
    List,
    /// Sentence: how `list --json` shows what `list` shows otherwise.
    ListJson,
    /// Sentence: how soon a holder notices `release`.
    Release,
    /// Sentence: `release`'s exit status, where it differs on it.
    ReleaseStatus,
    /// Fragment: what a sequencer names its holder by (`check`).
    Holder,
    /// Sentence: the keys `put` refuses beyond a lock's own records.
    Put,
    /// Sentence: what `--ttl` is on its engine.
    Ttl,
    /// Sentence: what `--kill-timeout` grants on it after a loss.
    KillTimeout,
    /// Sentence: how `--replace` asks its holder, and what it waits for.
    Replace,
    /// Fragment: its engine's own shared mode that `--shared` takes.
    SharedMode,
    /// Sentence: `--shared` on an engine that has no shared mode.
    Shared,
}

impl Topic {
    /// Every backend's note on this topic, in the order of `BACKENDS`.
    pub fn notes(self) -> Vec<&'static str> {
        BACKENDS
            .iter()
            .flat_map(|b| b.notes)
            .filter(|(topic, _)| *topic == self)
            .map(|(_, text)| *text)
            .collect()
    }
}

/// The engine's own tool that lockrun interoperates with.
pub struct Peer {
    /// As `lockrun explain` names it among the contenders it assumes
    /// (`` `consul lock` ``).
    pub tool: &'static str,
    /// Its manual page under SEE ALSO in lockrun(1), with what of it
    /// lockrun interoperates with.
    pub page: &'static str,
}

/// What `elect` or `semaphore` asks of a backend's hold rules.
pub struct HoldRequest<'a, H> {
    pub kind: Kind,
    /// The key, or the semaphore prefix.
    pub key: &'a str,
    pub ttl: Duration,
    pub rate_error: crate::clock::Ppm,
    /// `--kill-timeout` as typed; `None` for the default.
    pub kill_timeout: Option<Duration>,
    /// The engine's own flags.
    pub flags: &'a H,
}

/// What a backend's hold rules make of a request.
pub struct HoldRules<P> {
    /// The countdown's arithmetic; `None` on an engine whose claim cannot
    /// run out (`local`).
    pub budget: Option<Budget>,
    /// The grace period COMMAND gets.
    pub kill_timeout: Duration,
    /// What the engine needs to acquire besides the target (Consul: the
    /// session to ask for).
    pub plan: P,
}

/// What `leader` or `release` asks of a backend's outside view.
pub enum Look<'a, R> {
    /// `leader`: once, until a holder shows (`--wait`), or every change
    /// (`--watch`).
    Leader {
        wait: Option<Wait>,
        watch: bool,
        json: bool,
    },
    Release {
        flags: &'a R,
    },
}

/// How a backend keeps its promise, in the words `lockrun explain` prints.
pub struct PromiseText {
    /// When a rival may acquire.
    pub rival: &'static str,
    /// What `lockrun release` does to the holder.
    pub release: &'static str,
    /// What happens when the engine loses or ends our claim.
    pub lost_state: &'static str,
    /// What the promise assumes of the engine.
    pub engine: &'static [&'static str],
}

/// A backend, from its rules to a running engine.
pub trait Backend: Sized {
    /// Its global flags.
    type Args: clap::Args;
    /// Its own flags of `elect` and `semaphore` ([`NoFlags`] if none).
    type HoldArgs: clap::Args;
    /// Its own flags of `release` ([`NoFlags`] if none).
    type ReleaseArgs: clap::Args;
    type Engine: Engine;
    type Inspect: Inspect;
    /// What its hold rules hand to its engine.
    type Plan;

    /// Its name, as `leader --json` shows it.
    const NAME: &'static str;

    /// Whether its waiters for a leader lock publish their priority and
    /// defer to higher ones (`elect --priority`, see [`priority`]); on a
    /// backend that does not, `--priority` is refused.
    const PRIORITY: bool = false;

    /// What lockrun knows of it before choosing a backend.
    const REGISTRATION: Registration;

    /// Whether a KEY (or prefix) of `leader` and `release` is one it can
    /// name.
    fn check_key(key: &str) -> Result<(), Failure>;

    /// Its timing promise in words, for `lockrun explain`: for a lock or a
    /// slot, on a lease the engine may end early or not.
    fn promise(lock: bool, ends_early: bool) -> PromiseText;

    /// The rules of `elect` and `semaphore`: the key, the lease flags and
    /// its own, into a budget and a plan. Sends nothing.
    fn hold_rules(
        request: &HoldRequest<'_, Self::HoldArgs>,
        env: &dyn Env,
    ) -> Result<HoldRules<Self::Plan>, Failure>;

    /// The rules of `release`'s own flags.
    fn release_rules(_flags: &Self::ReleaseArgs) -> Result<(), Failure> {
        Ok(())
    }

    /// Builds the client from its flags and the engine's environment,
    /// checked (files included) before any request. `plan` is what
    /// [`Backend::hold_rules`] made of a holding job's request, the one
    /// route by which its TTL and every other hold setting (checked there)
    /// reach the backend; `None` for a job that holds nothing.
    fn prepare(
        args: &Self::Args,
        plan: Option<&Self::Plan>,
        env: &dyn Env,
    ) -> Result<Self, Failure>;

    /// Checks that need the engine's answer, made before anything is
    /// written.
    fn ready(&self) -> impl Future<Output = Result<(), Failure>> {
        async { Ok(()) }
    }

    /// The engine that holds, with the plan its rules made.
    fn engine(&self, plan: Self::Plan) -> Result<Self::Engine, Failure>;

    /// The outside view, for `leader` and `release`.
    fn inspect(&self, look: &Look<'_, Self::ReleaseArgs>) -> Self::Inspect;

    /// Whether it keeps data beside its locks, which `lockrun put
    /// --sequencer` can write, fenced by a holder.
    const FENCED_PUT: bool = false;

    /// Writes `value` at `key` in one step that applies only while `holder`
    /// (the sequencer's holder, a [`Claim::holder_id`]) still holds `lock`:
    /// `Ok(true)` written, `Ok(false)` refused, the holder gone. Called only
    /// where [`Backend::FENCED_PUT`] is true.
    fn fenced_put(
        &self,
        _lock: &str,
        _holder: &str,
        _key: &str,
        _value: &[u8],
    ) -> impl Future<Output = Result<bool, Failure>> {
        async {
            Err(Failure::Internal(format!(
                "the {} backend has no fenced write",
                Self::NAME
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ReplaceNote;

    #[test]
    fn a_note_is_read_only_by_the_holder_it_names() {
        let note = ReplaceNote {
            holder: "jobs/x/694d7f1e2a3b4c5d".into(),
            host: "db-2".into(),
            pid: 77,
            value: "tonight".into(),
        };
        let bytes = note.encode();
        assert_eq!(
            ReplaceNote::decode_for(&bytes, "jobs/x/694d7f1e2a3b4c5d"),
            Some(note.clone())
        );
        assert_eq!(ReplaceNote::decode_for(&bytes, "jobs/x/1"), None);
        assert_eq!(ReplaceNote::decode_for(b"not a note", "jobs/x/1"), None);
        let forged = ReplaceNote {
            holder: "1".into(),
            host: "h\u{1b}[31m".into(),
            pid: 1,
            value: "ok\r\nlockrun: forged".into(),
        };
        let line = forged.taken_over();
        assert!(!line.chars().any(char::is_control), "{line}");
        assert!(line.contains(r"ok\r\nlockrun: forged"), "{line}");
        assert_eq!(super::shown(&"x".repeat(300)).chars().count(), 201);
        assert_eq!(
            note.taken_over(),
            "taken over by --replace from host db-2 pid 77 (tonight)"
        );
    }
}
