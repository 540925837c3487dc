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

    /// Arms the guard to wait for `lock` itself and start COMMAND on the
    /// grant (see [`crate::backend::GuardWait`]); promised a verdict with
    /// `verdict`. Unsupported unless the guard can.
    fn arm(
        &mut self,
        _env: &[(OsString, OsString)],
        _arming: &child::Arming,
        _lock: &OwnedFd,
        _verdict: bool,
    ) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this guard cannot be armed",
        ))
    }

    /// The armed guard's answer.
    fn report(&mut self) -> impl Future<Output = io::Result<child::Report>> {
        async { Err(io::Error::other("the guard is not armed")) }
    }

    /// Takes an armed guard's wait back: its answer.
    fn disarm(&mut self) -> impl Future<Output = io::Result<child::Report>> {
        async { Err(io::Error::other("the guard is not armed")) }
    }

    /// The guard whose armed wait was granted, running COMMAND already.
    fn into_started(self, _verdict: bool) -> io::Result<Self::Child>
    where
        Self: Sized,
    {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this guard cannot be armed",
        ))
    }
}

/// A parked guard lent to the engine's wait ([`crate::backend::GuardWait`]),
/// with what COMMAND gets beside the engine's variables: the sequencer, for
/// an exclusive lock (its backend and key; the fence is the grant's).
pub struct Arm<'a, P: Parked> {
    pub parked: &'a mut P,
    pub sequencer: Option<(String, String)>,
    pub verdict: bool,
    /// Whether the guard was armed, once: then the claim, if any, came
    /// with the child started.
    pub armed: bool,
}

impl<P: Parked> crate::backend::GuardWait for Arm<'_, P> {
    fn arm(
        &mut self,
        lock: &OwnedFd,
        env: Vec<(OsString, OsString)>,
        fence_vars: Vec<String>,
        holder: Option<String>,
        grant: String,
    ) -> io::Result<()> {
        let arming = child::Arming {
            grant,
            fence_vars,
            sequencer: self.sequencer.clone().map(|(backend, key)| {
                (crate::sequencer::VARIABLE.to_owned(), backend, key, holder)
            }),
        };
        self.parked.arm(&env, &arming, lock, self.verdict)?;
        self.armed = true;
        Ok(())
    }

    async fn report(&mut self) -> io::Result<child::Report> {
        self.parked.report().await
    }

    async fn disarm(&mut self) -> io::Result<child::Report> {
        self.parked.disarm().await
    }
}

/// A running child, as [`super::supervise`] stops it.
pub trait Supervised {
    /// Tells a guard lent the claim's descriptor whether it may let go of
    /// it once the tree is gone, before [`Supervised::deadlines`]; whether
    /// it was told.
    fn hand_over(&mut self, verdict: Verdict) -> bool;
    /// Hands the guard its first stop deadline as COMMAND starts (see
    /// [`child::Child::first_deadline`]).
    fn first_deadline(&mut self, _stop_at: Duration, _signal: Signal, _grace: Duration) {}
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

    fn arm(
        &mut self,
        env: &[(OsString, OsString)],
        arming: &child::Arming,
        lock: &OwnedFd,
        verdict: bool,
    ) -> io::Result<()> {
        child::Prepared::arm(self, env, arming, lock, verdict)
    }

    async fn report(&mut self) -> io::Result<child::Report> {
        child::Prepared::report(self).await
    }

    async fn disarm(&mut self) -> io::Result<child::Report> {
        child::Prepared::disarm(self).await
    }

    fn into_started(self, verdict: bool) -> io::Result<child::Child> {
        Ok(child::Prepared::into_started(self, verdict))
    }
}

impl Supervised for child::Child {
    fn hand_over(&mut self, verdict: Verdict) -> bool {
        child::Child::hand_over(self, verdict)
    }

    fn first_deadline(&mut self, stop_at: Duration, signal: Signal, grace: Duration) {
        child::Child::first_deadline(self, stop_at, signal, grace)
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
