//! The local backend's registration: its flags, its part of the man page,
//! and how a job gets its engine.

use std::path::PathBuf;

use super::args::LocalArgs;
use super::Local;
use crate::backend::{
    Backend, BackendName, HoldRequest, HoldRules, Look, Peer, Prose, Registration,
};
use crate::backend::priority::Priority;
use crate::backend::{Env, PromiseText, Topic};
use crate::error::Failure;

const REGISTRATION: Registration = Registration {
    peer: Peer {
        tool: "`flock`",
        page: "flock(1)",
    },
    name: BackendName::Local,
    flags: crate::backend::registry::flags_of::<LocalBackend>,
    // A file lock lasts as long as its descriptor: nothing runs out.
    lease: false,
    empty_is_an_error: &[("LOCKRUN_LOCK_DIR", "a directory")],
    empty_is_unset: &[],
    environment: &[],
    child_environment: &[Prose::Item(
        "local",
        "`LOCKRUN_LOCK_FILE`, the path of the file whose flock(2) lockrun holds (*DIR*/*KEY*, \
         or *DIR*/*PREFIX*/slot-*I* for a semaphore slot). `LOCKRUN_LOCK_INDEX` is a counter kept beside the lock file, \
         never below the microseconds since the epoch, so that it still grows after a \
         reboot empties the lock directory (unless the clock went back past the last \
         holder's acquisition).",
    )],
    safety: &[Prose::Item(
        "local",
        "flock(2) holds until the job's whole tree has ended: no rival on this host can lock \
         while any process of it lives, whatever the clocks do, even if lockrun dies. The \
         guard lets go the moment the tree is gone (with `--min-hold` or `--status-addr`, \
         lockrun does, after it). A lock file replaced under us \
         lets a rival lock the new one at once, so COMMAND is killed at once. `lockrun \
         release` signals the holding lockrun, and the lock stays locked until its guard \
         has stopped the job: no overlap.",
    )],
    examples: &[(
        "elect",
        "lockrun --backend local elect jobs/nightly -- ./job  # excludes `flock DIR/jobs/nightly ./job`",
    )],
    notes: NOTES,
    habits: None,
};

/// Its words in the shared help (see [`Topic`]).
const NOTES: &[(Topic, &str)] = &[
    (Topic::Where, "on this host with flock(2) (--backend local)"),
    (Topic::Excludes, "`flock DIR/KEY` with --backend local"),
    (Topic::Fence, "local"),
    (Topic::ListPeers, "`flock(1)`"),
    (
        Topic::ReleaseStatus,
        "On local, every lockrun holder that can be asked is, and printed; a holder that \
         cannot (a flock(1)) is then named on stderr, and the status is 125.",
    ),
    (Topic::Holder, "a local holder's pid"),
    (
        Topic::Replace,
        "On local the release signal asks, and the lock file stays held until the tree is \
         gone.",
    ),
    (Topic::SharedMode, "`flock -s`"),
];

/// The lock directory, and whether it may be on a network file system.
pub struct LocalBackend {
    dir: PathBuf,
    allow_network_fs: bool,
}

impl Backend for LocalBackend {
    type Args = LocalArgs;
    type HoldArgs = crate::backend::NoFlags;
    type ReleaseArgs = crate::backend::NoFlags;
    type Engine = Local;
    type Inspect = Local;
    type Plan = Priority;

    const NAME: &'static str = "local";
    const PRIORITY: bool = true;
    const REGISTRATION: Registration = REGISTRATION;

    fn check_key(key: &str) -> Result<(), Failure> {
        super::dir::check_key(key).map_err(|e| Failure::Usage(e.to_string()))
    }

    fn promise(_lock: bool, _ends_early: bool) -> PromiseText {
        PromiseText {
            rival: "never while any process of the command's tree lives: lockrun's guard holds the lock until the tree is gone",
            release: "`lockrun release` signals the holder; the lock file stays locked until its guard has stopped the command, so no rival overlaps",
            lost_state: "the lock file replaced or removed: a rival may lock the new file at once, so the command is killed at once",
            engine: &[
                "flock(2) on a local file system: lockrun's guard holds the lock until the command's whole tree is gone, even if lockrun dies, and a rival on this host cannot take it before",
                "no other host shares the lock (a network file system is refused without --allow-network-fs)",
            ],
        }
    }

    fn hold_rules(
        request: &HoldRequest<'_, Self::HoldArgs>,
        _env: &dyn Env,
    ) -> Result<HoldRules<Priority>, Failure> {
        Self::check_key(request.key)?;
        // No lease can run out under the child, so any grace period is safe.
        Ok(HoldRules {
            budget: None,
            kill_timeout: request
                .kill_timeout
                .unwrap_or(request.kind.default_kill_timeout),
            plan: request.kind.priority,
        })
    }

    /// The lock directory: the flag or `LOCKRUN_LOCK_DIR`, else the
    /// default for this user.
    fn prepare(
        args: &Self::Args,
        _plan: Option<&Priority>,
        _env: &dyn Env,
    ) -> Result<Self, Failure> {
        let dir = args
            .lock_dir
            .clone()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or_else(super::dir::default_dir_here);
        // A relative directory is found from the working directory, which
        // the kernel keeps as the directory itself: a deploy that re-points
        // `current` (a unit's WorkingDirectory=) sends the next run to
        // another lock, and the holder, still inside the old one, never
        // sees its path change.
        if dir.is_relative() {
            return Err(Failure::Usage(format!(
                "the lock directory `{}` is relative, so two runs from different working directories would not exclude each other; give an absolute path (--lock-dir or LOCKRUN_LOCK_DIR)",
                dir.display()
            )));
        }
        Ok(LocalBackend {
            dir,
            allow_network_fs: args.allow_network_fs,
        })
    }

    /// Says which lock directory (with `-v`): the default depends on who
    /// runs and on `XDG_RUNTIME_DIR`, and root's and a user's differ.
    fn engine(&self, priority: Priority) -> Result<Local, Failure> {
        tracing::info!("lock directory `{}`", self.dir.display());
        Ok(Local::open(self.dir.clone(), self.allow_network_fs)?.ranked(priority))
    }

    /// Looking creates nothing, and may look at a directory that is not
    /// ours (root's, from a user's shell).
    fn inspect(&self, _look: &Look<'_, Self::ReleaseArgs>) -> Local {
        tracing::info!("lock directory `{}`", self.dir.display());
        Local::for_reading(self.dir.clone())
    }
}
