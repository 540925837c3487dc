//! What a round needs from the child layer, as traits the hold loop owns: a
//! guard parked before the wait, started once the claim is ours, then
//! supervised. The real ones are `child::Prepared` and `child::Child`; the
//! round's unit tests stand in for them, since a real guard is lockrun
//! itself re-executed, which a test binary cannot be.

use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use crate::child::{self, ChildExit, GuardDeadlines, Verdict};
use crate::error::Failure;
use crate::signals::Signal;

/// Where a round's guards come from.
pub trait Launch {
    type Parked: Parked<Child = Self::Child>;
    type Child: Supervised;

    /// A guard, parked: it runs nothing until [`Parked::start`], and
    /// dropping it ends it.
    fn park(&mut self) -> Result<Self::Parked, Failure>;
}

/// A guard waiting for the go.
pub trait Parked {
    type Child: Supervised;

    /// The guard's pid, which is its process group's id.
    fn pid(&self) -> u32;

    /// Runs COMMAND with `env`; the guard keeps `hold`, the claim's
    /// descriptor, while the group lives, and with `verdict` waits at its
    /// end to be told whether it may let go of it
    /// ([`Supervised::hand_over`], which must follow).
    fn start(
        self,
        env: Vec<(OsString, OsString)>,
        hold: Option<OwnedFd>,
        verdict: bool,
    ) -> io::Result<Self::Child>;
}

/// A running child, as [`super::supervise`] stops it.
pub trait Supervised {
    /// Tells a guard lent the claim's descriptor whether it may let go of
    /// it once the tree is gone, before [`Supervised::deadlines`]; whether
    /// it was told.
    fn hand_over(&mut self, verdict: Verdict) -> bool;
    /// The channel that hands the guard its stop deadlines, once.
    fn deadlines(&mut self, signal: Signal, grace: Duration) -> Option<GuardDeadlines>;
    fn signal(&mut self, signal: Signal);
    /// Resolves when the child's whole group is gone.
    fn wait(&mut self) -> impl Future<Output = ChildExit>;
    fn kill(&mut self) -> impl Future<Output = ChildExit>;
}

impl Parked for child::Prepared {
    type Child = child::Child;

    fn pid(&self) -> u32 {
        child::Prepared::pid(self)
    }

    fn start(
        self,
        env: Vec<(OsString, OsString)>,
        hold: Option<OwnedFd>,
        verdict: bool,
    ) -> io::Result<child::Child> {
        match hold {
            Some(hold) if verdict => self.start_handing_over(env, hold),
            Some(hold) => self.start_lending(env, hold),
            None => child::Prepared::start(self, env),
        }
    }
}

impl Supervised for child::Child {
    fn hand_over(&mut self, verdict: Verdict) -> bool {
        child::Child::hand_over(self, verdict)
    }

    fn deadlines(&mut self, signal: Signal, grace: Duration) -> Option<GuardDeadlines> {
        child::Child::deadlines(self, signal, grace)
    }

    fn signal(&mut self, signal: Signal) {
        child::Child::signal(self, signal)
    }

    async fn wait(&mut self) -> ChildExit {
        child::Child::wait(self).await
    }

    async fn kill(&mut self) -> ChildExit {
        child::Child::kill(self).await
    }
}
