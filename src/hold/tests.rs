//! One round against an engine and a child that exist only in memory, on
//! paused time: what each phase does when a signal, a loss or an operator
//! interrupts it, and that every path lets go of what it took. The engines
//! themselves are tested for real in the integration suite; here the seam's
//! contract is all that matters.

use std::cell::{Cell, RefCell};
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::time::Duration;

use tokio::time::Instant;

use super::launch::{Launch, Parked, Supervised};
use super::{release_requests, Outcome, Round, Run, Service};
use crate::backend::timing::Budget;
use crate::backend::{Acquisition, Claim, Engine, EngineError, Lease, Lost, Opening, Renewal};
use crate::backend::{Target, Wait};
use crate::child::{ChildExit, GuardDeadlines, Verdict};
use crate::config::{ChildConfig, HoldConfig};
use crate::error::Failure;
use crate::exit::Exit;
use crate::signals::{Signal, SignalSender, Signals};

/// Where in a round the test interrupts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Opening,
    Waiting,
    Running,
    Releasing,
}

/// What happened, in order, with the (paused) time since the start.
#[derive(Default)]
struct Log {
    events: RefCell<Vec<(Duration, String)>>,
    start: Cell<Option<Instant>>,
}

impl Log {
    fn note(&self, what: &str) {
        let start = *self.start.get().get_or_insert_with(Instant::now);
        self.start.set(Some(start));
        self.events
            .borrow_mut()
            .push((start.elapsed(), what.to_string()));
    }

    fn names(&self) -> Vec<String> {
        self.events
            .borrow()
            .iter()
            .map(|(_, e)| e.clone())
            .collect()
    }

    fn at(&self, what: &str) -> Duration {
        self.events
            .borrow()
            .iter()
            .find(|(_, e)| e == what)
            .unwrap_or_else(|| panic!("no `{what}` in {:?}", self.names()))
            .0
    }
}

/// The test's script: when the lock comes, whether the lease holds, when
/// the claim is lost, when the child exits, and which phase a signal
/// interrupts.
struct Script {
    log: Rc<Log>,
    signal: Option<(Phase, SignalSender)>,
    /// When `acquire` grants the lock; `None`: never.
    granted_after: Option<Duration>,
    /// Whether renewals are answered that the lease is gone.
    lease_gone: bool,
    /// When, after acquisition, the engine's watch says the claim is lost.
    claim_lost_after: Option<Duration>,
    /// When the child exits by itself (status 0); `None`: not before it is
    /// asked to.
    child_exits_after: Option<Duration>,
    release_takes: Duration,
    /// `--max-time`.
    max_time: Option<Duration>,
    /// Whether the child lives on after SIGTERM (until SIGKILL).
    child_ignores_term: bool,
    /// Which of the guard's steps fails: parking it, or starting COMMAND.
    guard_fails: Option<Phase>,
    /// Leases opened, claims acquired and children started so far: the
    /// script's losses and `child_exits_after` concern the first of each;
    /// later children exit after a second.
    leases: Cell<u32>,
    claims: Cell<u32>,
    children: Cell<u32>,
    /// What the guard was told about the lock (see `Verdict`), and whether
    /// the claim was readied for it to let go.
    verdicts: RefCell<Vec<&'static str>>,
    handed_over: Cell<bool>,
}

impl Script {
    fn new(log: &Rc<Log>) -> Script {
        Script {
            log: log.clone(),
            signal: None,
            granted_after: Some(Duration::from_secs(1)),
            lease_gone: false,
            claim_lost_after: None,
            child_exits_after: Some(Duration::from_secs(1)),
            release_takes: Duration::from_millis(100),
            max_time: None,
            child_ignores_term: false,
            guard_fails: None,
            leases: Cell::new(0),
            claims: Cell::new(0),
            children: Cell::new(0),
            verdicts: RefCell::default(),
            handed_over: Cell::new(false),
        }
    }

    /// Counts one more of `what`, and says whether it is the first.
    fn first(what: &Cell<u32>) -> bool {
        what.set(what.get() + 1);
        what.get() == 1
    }

    fn interrupt(&self, phase: Phase) {
        if let Some((at, sender)) = &self.signal {
            if *at == phase {
                self.log.note("TERM sent");
                sender.send(Signal::Term);
            }
        }
    }
}

#[derive(Debug)]
struct FakeError;

impl std::fmt::Display for FakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the fake engine failed")
    }
}

impl std::error::Error for FakeError {}

impl EngineError for FakeError {
    fn is_transient(&self) -> bool {
        false
    }
}

impl From<FakeError> for Failure {
    fn from(e: FakeError) -> Failure {
        Failure::Engine(e.to_string())
    }
}

struct FakeEngine(Rc<Script>);

struct FakeLease {
    script: Rc<Script>,
    opened: Instant,
    first: bool,
}

struct FakeClaim {
    script: Rc<Script>,
    acquired: Instant,
    first: bool,
}

impl Lease for FakeLease {
    fn confirmed_at(&self) -> Instant {
        self.opened
    }

    async fn renew(&self, _timeout: Duration) -> Renewal {
        if self.script.lease_gone && self.first {
            Renewal::Gone("the fake lease expired".into())
        } else {
            Renewal::Confirmed { ttl: None }
        }
    }

    async fn close(self) {
        self.script.log.note("lease closed");
    }
}

impl Engine for FakeEngine {
    type Lease = FakeLease;
    type Claim = FakeClaim;
    type Error = FakeError;

    async fn open_lease(&self, _opening: Opening<'_>) -> Result<FakeLease, FakeError> {
        self.0.interrupt(Phase::Opening);
        if self
            .0
            .signal
            .as_ref()
            .is_some_and(|(p, _)| *p == Phase::Opening)
        {
            // An engine that does not answer: only the signal ends this.
            std::future::pending::<()>().await;
        }
        self.0.log.note("lease opened");
        Ok(FakeLease {
            script: self.0.clone(),
            opened: Instant::now(),
            first: Script::first(&self.0.leases),
        })
    }

    async fn acquire(
        &self,
        _lease: &FakeLease,
        _target: &Target,
        _value: &str,
        _wait: Wait,
    ) -> Result<Acquisition<FakeClaim>, FakeError> {
        self.0.interrupt(Phase::Waiting);
        match self.0.granted_after {
            Some(after) => tokio::time::sleep(after).await,
            None => std::future::pending().await,
        }
        self.0.log.note("acquired");
        Ok(Acquisition::Held(FakeClaim {
            script: self.0.clone(),
            acquired: Instant::now(),
            first: Script::first(&self.0.claims),
        }))
    }
}

impl Claim for FakeClaim {
    type Error = FakeError;

    fn fence(&self) -> u64 {
        7
    }

    fn env(&self) -> Vec<(OsString, OsString)> {
        Vec::new()
    }

    fn holder_id(&self) -> Option<String> {
        None
    }

    /// A descriptor as the local engine's, for the guard to be offered it.
    fn take_hold_fd(&mut self) -> Option<OwnedFd> {
        std::fs::File::open("/dev/null").ok().map(OwnedFd::from)
    }

    async fn record_child(&mut self, _pgid: u32) -> Result<(), FakeError> {
        Ok(())
    }

    fn hand_over(&mut self, offer: impl FnOnce([std::path::PathBuf; 2]) -> bool) {
        let told = offer(["scratch".into(), "facts".into()]);
        self.script.handed_over.set(told);
    }

    fn describe(&self) -> String {
        "fake".into()
    }

    async fn watch(&mut self) -> Lost {
        match self.script.claim_lost_after.filter(|_| self.first) {
            Some(after) => tokio::time::sleep_until(self.acquired + after).await,
            None => std::future::pending().await,
        }
        self.script.log.note("claim lost");
        Lost::Watch("the fake key changed hands".into())
    }

    async fn release(self) -> Result<(), FakeError> {
        self.script.log.note("releasing");
        self.script.interrupt(Phase::Releasing);
        tokio::time::sleep(self.script.release_takes).await;
        self.script.log.note("released");
        Ok(())
    }
}

struct FakeGuards(Rc<Script>);

struct FakeParked(Rc<Script>);

impl Drop for FakeParked {
    fn drop(&mut self) {
        self.0.log.note("guard dropped");
    }
}

struct FakeChild {
    script: Rc<Script>,
    exits_at: Option<Instant>,
    exit: Option<ChildExit>,
}

impl Launch for FakeGuards {
    type Parked = FakeParked;
    type Child = FakeChild;

    fn park(&mut self) -> Result<FakeParked, Failure> {
        if self.0.guard_fails == Some(Phase::Opening) {
            return Err(Failure::Internal(
                "cannot start the child (no guard)".into(),
            ));
        }
        self.0.log.note("guard parked");
        Ok(FakeParked(self.0.clone()))
    }
}

impl Parked for FakeParked {
    type Child = FakeChild;

    fn pid(&self) -> u32 {
        4242
    }

    fn start(
        self,
        _env: Vec<(OsString, OsString)>,
        _hold: Option<OwnedFd>,
        _verdict: bool,
    ) -> std::io::Result<FakeChild> {
        let script = self.0.clone();
        std::mem::forget(self);
        if script.guard_fails == Some(Phase::Running) {
            return Err(std::io::Error::from_raw_os_error(libc::EAGAIN));
        }
        script.log.note("child started");
        script.interrupt(Phase::Running);
        let exits_after = match Script::first(&script.children) {
            true => script.child_exits_after,
            false => Some(Duration::from_secs(1)),
        };
        Ok(FakeChild {
            exits_at: exits_after.map(|after| Instant::now() + after),
            script,
            exit: None,
        })
    }
}

impl Supervised for FakeChild {
    fn hand_over(&mut self, verdict: Verdict) -> bool {
        self.script.verdicts.borrow_mut().push(match verdict {
            Verdict::LetGo { .. } => "let go",
            Verdict::Keep => "keep",
        });
        true
    }

    fn deadlines(&mut self, _signal: Signal, _grace: Duration) -> Option<GuardDeadlines> {
        None
    }

    /// A child that ends of the signal it is sent, as a shell reports it.
    fn signal(&mut self, signal: Signal) {
        self.script.log.note(&format!("child got {signal}"));
        if self.script.child_ignores_term && signal == Signal::Term {
            return;
        }
        self.exit
            .get_or_insert(ChildExit::Code(128 + signal.number()));
    }

    async fn wait(&mut self) -> ChildExit {
        if let Some(exit) = self.exit {
            return exit;
        }
        match self.exits_at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
        self.script.log.note("child exited");
        *self.exit.get_or_insert(ChildExit::Code(0))
    }

    async fn kill(&mut self) -> ChildExit {
        self.signal(Signal::Kill);
        self.wait().await
    }
}

fn config(budget: Option<Budget>) -> HoldConfig {
    HoldConfig {
        budget,
        waiting: Wait::Forever,
        conflict_exit_code: 75,
        value: "test".into(),
        child: ChildConfig {
            argv: vec!["true".into()],
            shell: false,
            kill_signal: Signal::Term,
            kill_timeout: Duration::from_secs(5),
            max_time: None,
            leftovers: crate::child::LeftoversMode::Wait,
            containment: crate::child::ContainmentMode::Auto,
        },
    }
}

/// Plays one round of `script` and returns how it ended.
async fn play(script: Script, budget: Option<Budget>, min_hold: Option<Duration>) -> Outcome {
    play_with(script, budget, min_hold, None)
        .await
        .expect("the fake engine does not fail")
}

async fn play_with(
    mut script: Script,
    budget: Option<Budget>,
    min_hold: Option<Duration>,
    interrupt: Option<Phase>,
) -> Result<Outcome, Failure> {
    let (sender, signals) = Signals::channel();
    if let Some(phase) = interrupt {
        script.signal = Some((phase, sender));
    }
    script.log.note("start");
    play_shared(Rc::new(script), signals, budget, min_hold).await
}

/// [`play_with`] on a script the caller keeps, to look at afterwards.
async fn play_shared(
    script: Rc<Script>,
    mut signals: Signals,
    budget: Option<Budget>,
    min_hold: Option<Duration>,
) -> Result<Outcome, Failure> {
    let engine = FakeEngine(script.clone());
    let mut config = config(budget);
    config.child.max_time = script.max_time;
    let service = Service {
        notify: None,
        min_hold,
        ops: crate::ops::Ops::none(),
    };
    let target = Target::Lock {
        key: "k".into(),
        shared: false,
    };
    let (ready_sent, first_contact) = (Cell::new(false), Cell::new(true));
    let mut released = release_requests().expect("a handler for the release signal");
    let mut guards = FakeGuards(script.clone());
    let round = Round {
        engine: &engine,
        target: &target,
        config: &config,
        service: &service,
        campaign: false,
        patience: Wait::Forever,
        ready_sent: &ready_sent,
        first_contact: &first_contact,
        signals: &mut signals,
        released: &mut released,
        guards: &mut guards,
    };
    round.play().await
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_round_runs_the_child_and_lets_go() {
    let log = Rc::new(Log::default());
    let outcome = play(Script::new(&log), None, None).await;
    assert_eq!(outcome, Outcome::Done(Exit::Child(0)));
    assert_eq!(
        log.names(),
        names(&[
            "start",
            "lease opened",
            "guard parked",
            "acquired",
            "child started",
            "child exited",
            "releasing",
            "released",
            "lease closed",
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn a_signal_while_opening_the_lease_leaves_nothing_to_clean_up() {
    let log = Rc::new(Log::default());
    let outcome = play_with(Script::new(&log), None, None, Some(Phase::Opening))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Done(Exit::Interrupted(Signal::Term)));
    assert_eq!(log.names(), names(&["start", "TERM sent"]));
}

#[tokio::test(start_paused = true)]
async fn a_signal_while_waiting_ends_the_guard_and_the_lease() {
    let log = Rc::new(Log::default());
    let mut script = Script::new(&log);
    script.granted_after = None;
    let outcome = play_with(script, None, None, Some(Phase::Waiting))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Done(Exit::Interrupted(Signal::Term)));
    assert_eq!(
        log.names(),
        names(&[
            "start",
            "lease opened",
            "guard parked",
            "TERM sent",
            "guard dropped",
            "lease closed",
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn a_signal_while_running_goes_to_the_child_and_ends_the_run_by_it() {
    let log = Rc::new(Log::default());
    let mut script = Script::new(&log);
    script.child_exits_after = None;
    let outcome = play_with(script, None, None, Some(Phase::Running))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Done(Exit::Interrupted(Signal::Term)));
    assert_eq!(
        log.names(),
        names(&[
            "start",
            "lease opened",
            "guard parked",
            "acquired",
            "child started",
            "TERM sent",
            "child got SIGTERM",
            "releasing",
            "released",
            "lease closed",
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn a_signal_during_min_hold_releases_at_once() {
    let log = Rc::new(Log::default());
    let (sender, mut signals) = Signals::channel();
    // The signal comes 2 s into the 10 s --min-hold: fed by a task of its
    // own, since nothing in the round marks the moment.
    let outcome = {
        let mut script = Script::new(&log);
        script.signal = None;
        let script = Rc::new(script);
        let engine = FakeEngine(script.clone());
        let config = config(None);
        let service = Service {
            notify: None,
            min_hold: Some(Duration::from_secs(10)),
            ops: crate::ops::Ops::none(),
        };
        let target = Target::Lock {
            key: "k".into(),
            shared: false,
        };
        let (ready_sent, first_contact) = (Cell::new(false), Cell::new(true));
        let mut released = release_requests().expect("a handler for the release signal");
        let mut guards = FakeGuards(script.clone());
        log.note("start");
        let round = Round {
            engine: &engine,
            target: &target,
            config: &config,
            service: &service,
            campaign: false,
            patience: Wait::Forever,
            ready_sent: &ready_sent,
            first_contact: &first_contact,
            signals: &mut signals,
            released: &mut released,
            guards: &mut guards,
        };
        let poke = async {
            // Acquired at 1 s, the child exits at 2 s: min-hold until 11 s.
            tokio::time::sleep(Duration::from_secs(4)).await;
            log.note("TERM sent");
            sender.send(Signal::Term);
            std::future::pending::<()>().await
        };
        tokio::select! {
            outcome = round.play() => outcome.expect("the fake engine does not fail"),
            _ = poke => unreachable!(),
        }
    };
    assert_eq!(outcome, Outcome::Done(Exit::Child(0)));
    assert_eq!(log.at("child exited"), Duration::from_secs(2));
    assert_eq!(log.at("releasing"), Duration::from_secs(4));
    assert_eq!(
        log.names()[log.names().len() - 3..],
        names(&["releasing", "released", "lease closed"])
    );
}

/// A stop that reaches the run while the child runs ends the run with the
/// child: the hold does not then wait for a second one. The signal was spent
/// on the child (here, which ends of it), so Ctrl-C at the moment a quick
/// command ended left lockrun keeping the lock for the whole --min-hold.
#[tokio::test(start_paused = true)]
async fn a_stop_while_the_child_runs_skips_min_hold() {
    let log = Rc::new(Log::default());
    let mut script = Script::new(&log);
    script.child_exits_after = None;
    let outcome = play_with(
        script,
        None,
        Some(Duration::from_secs(3600)),
        Some(Phase::Running),
    )
    .await
    .expect("the fake engine does not fail");
    assert_eq!(outcome, Outcome::Done(Exit::Interrupted(Signal::Term)));
    assert!(
        log.names().contains(&"child got SIGTERM".to_string()),
        "{:?}",
        log.names()
    );
    assert!(
        log.at("releasing") < Duration::from_secs(10),
        "released at {:?}",
        log.at("releasing")
    );
}

/// `--max-time`: the job is stopped as on a loss, with the whole grace
/// period, and the lock given up only after the child is gone; min-hold
/// does not keep it.
#[tokio::test(start_paused = true)]
async fn a_job_past_max_time_is_stopped_then_released() {
    for (ignores_term, stopped_at) in [(false, 11), (true, 16)] {
        let log = Rc::new(Log::default());
        let mut script = Script::new(&log);
        script.child_exits_after = None;
        script.max_time = Some(Duration::from_secs(10));
        script.child_ignores_term = ignores_term;
        let outcome = play(script, None, Some(Duration::from_secs(3600))).await;
        assert_eq!(outcome, Outcome::TimeUp);
        let names = log.names();
        assert!(
            names.contains(&"child got SIGTERM".to_string()),
            "{names:?}"
        );
        // Acquired at 1 s, the child started then: TERM at 11 s, and
        // SIGKILL after the 5 s grace where TERM did not end it.
        assert_eq!(log.at("child got SIGTERM"), Duration::from_secs(11));
        if ignores_term {
            assert_eq!(log.at("child got SIGKILL"), Duration::from_secs(16));
        }
        assert_eq!(log.at("releasing"), Duration::from_secs(stopped_at));
    }
}

#[tokio::test(start_paused = true)]
async fn a_loss_during_min_hold_ends_it_and_costs_nothing() {
    let log = Rc::new(Log::default());
    let mut script = Script::new(&log);
    script.claim_lost_after = Some(Duration::from_secs(3));
    let outcome = play(script, None, Some(Duration::from_secs(10))).await;
    // The child had finished: its status stands, the loss is no failure.
    assert_eq!(outcome, Outcome::Done(Exit::Child(0)));
    assert_eq!(log.at("child exited"), Duration::from_secs(2));
    assert_eq!(log.at("claim lost"), Duration::from_secs(4));
    assert_eq!(log.at("releasing"), Duration::from_secs(4));
}

#[tokio::test(start_paused = true)]
async fn min_hold_keeps_the_lock_from_acquisition() {
    let log = Rc::new(Log::default());
    let outcome = play(Script::new(&log), None, Some(Duration::from_secs(10))).await;
    assert_eq!(outcome, Outcome::Done(Exit::Child(0)));
    assert_eq!(log.at("acquired"), Duration::from_secs(1));
    assert_eq!(log.at("releasing"), Duration::from_secs(11));
}

/// The guard may let go of the lock itself only where we release right
/// after the child anyway: never with `--min-hold`, which keeps it.
#[tokio::test(start_paused = true)]
async fn the_guard_may_let_go_only_without_min_hold() {
    for (min_hold, told, handed_over) in [
        (None, "let go", true),
        (Some(Duration::from_secs(10)), "keep", false),
    ] {
        let log = Rc::new(Log::default());
        let script = Rc::new(Script::new(&log));
        let (_sender, signals) = Signals::channel();
        let outcome = play_shared(script.clone(), signals, None, min_hold).await;
        assert_eq!(outcome.unwrap(), Outcome::Done(Exit::Child(0)));
        assert_eq!(*script.verdicts.borrow(), [told], "{min_hold:?}");
        assert_eq!(script.handed_over.get(), handed_over, "{min_hold:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_lost_while_waiting_starts_the_round_over() {
    let log = Rc::new(Log::default());
    let mut script = Script::new(&log);
    script.granted_after = None;
    script.lease_gone = true;
    let budget = Budget {
        ttl: Duration::from_secs(15),
        rival_delay: Duration::from_secs(15),
        kill_timeout: Duration::from_secs(5),
        ends_early: false,
        rate_error: crate::clock::Ppm::DEFAULT,
    };
    let outcome = play(script, Some(budget), None).await;
    assert_eq!(outcome, Outcome::Retry);
    assert_eq!(
        log.names(),
        names(&[
            "start",
            "lease opened",
            "guard parked",
            "guard dropped",
            "lease closed",
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn a_loss_while_running_stops_the_child_and_lets_go() {
    let log = Rc::new(Log::default());
    let mut script = Script::new(&log);
    script.child_exits_after = None;
    script.claim_lost_after = Some(Duration::from_secs(3));
    let outcome = play(script, None, None).await;
    assert_eq!(outcome, Outcome::Lost);
    let events = log.names();
    let stopped = events.iter().position(|e| e.starts_with("child got"));
    let released = events.iter().position(|e| e == "releasing");
    assert!(
        stopped.is_some() && stopped < released,
        "the child is stopped before the release: {events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_signal_during_clean_up_does_not_cut_the_release_short() {
    let log = Rc::new(Log::default());
    let mut script = Script::new(&log);
    script.release_takes = Duration::from_secs(2);
    let outcome = play_with(script, None, None, Some(Phase::Releasing))
        .await
        .unwrap();
    // The child had exited by itself: its status, not the signal's.
    assert_eq!(outcome, Outcome::Done(Exit::Child(0)));
    assert_eq!(
        log.names()[log.names().len() - 4..],
        names(&["releasing", "TERM sent", "released", "lease closed"])
    );
    assert_eq!(
        log.at("released") - log.at("releasing"),
        Duration::from_secs(2)
    );
}

#[tokio::test(start_paused = true)]
async fn a_busy_lock_ends_the_round_with_the_conflict_status() {
    struct Busy(Rc<Script>);
    // Reuses the fake lease; only acquisition differs.
    impl Engine for Busy {
        type Lease = FakeLease;
        type Claim = FakeClaim;
        type Error = FakeError;
        async fn open_lease(&self, o: Opening<'_>) -> Result<FakeLease, FakeError> {
            FakeEngine(self.0.clone()).open_lease(o).await
        }
        async fn acquire(
            &self,
            _: &FakeLease,
            _: &Target,
            _: &str,
            _: Wait,
        ) -> Result<Acquisition<FakeClaim>, FakeError> {
            Ok(Acquisition::Busy {
                holder: Some("someone".into()),
            })
        }
    }
    let log = Rc::new(Log::default());
    let script = Rc::new(Script::new(&log));
    let (_sender, mut signals) = Signals::channel();
    let engine = Busy(script.clone());
    let config = config(None);
    let service = Service {
        notify: None,
        min_hold: None,
        ops: crate::ops::Ops::none(),
    };
    let target = Target::Lock {
        key: "k".into(),
        shared: false,
    };
    let (ready_sent, first_contact) = (Cell::new(false), Cell::new(true));
    let mut released = release_requests().expect("a handler for the release signal");
    let mut guards = FakeGuards(script.clone());
    let outcome = Round {
        engine: &engine,
        target: &target,
        config: &config,
        service: &service,
        campaign: false,
        patience: Wait::Once,
        ready_sent: &ready_sent,
        first_contact: &first_contact,
        signals: &mut signals,
        released: &mut released,
        guards: &mut guards,
    }
    .play()
    .await
    .expect("busy is no failure");
    assert_eq!(outcome, Outcome::Done(Exit::NotAcquired(75)));
    assert_eq!(
        log.names(),
        names(&[
            "lease opened",
            "guard parked",
            "guard dropped",
            "lease closed"
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn a_guard_that_cannot_start_closes_the_lease_and_fails() {
    let log = Rc::new(Log::default());
    let mut script = Script::new(&log);
    script.guard_fails = Some(Phase::Opening);
    let failure = play_with(script, None, None, None)
        .await
        .expect_err("no guard, no run");
    assert_eq!(failure.to_string(), "cannot start the child (no guard)");
    assert_eq!(
        log.names(),
        names(&["start", "lease opened", "lease closed"])
    );
}

#[tokio::test(start_paused = true)]
async fn a_command_that_cannot_start_releases_the_lock_and_fails() {
    let log = Rc::new(Log::default());
    let mut script = Script::new(&log);
    script.guard_fails = Some(Phase::Running);
    let failure = play_with(script, None, None, None)
        .await
        .expect_err("no child, no run");
    assert!(
        failure.to_string().starts_with("cannot start the child"),
        "{failure}"
    );
    assert_eq!(
        log.names(),
        names(&[
            "start",
            "lease opened",
            "guard parked",
            "acquired",
            "releasing",
            "released",
            "lease closed",
        ])
    );
}

/// Plays a whole run of `script`, round after round.
async fn run(script: Script, budget: Option<Budget>, campaign: bool) -> Result<Exit, Failure> {
    let (_sender, signals) = Signals::channel();
    script.log.note("start");
    let script = Rc::new(script);
    let engine = FakeEngine(script.clone());
    let config = config(budget);
    let service = Service {
        notify: None,
        min_hold: None,
        ops: crate::ops::Ops::none(),
    };
    let target = Target::Lock {
        key: "k".into(),
        shared: false,
    };
    Run {
        engine: &engine,
        target: &target,
        config: &config,
        service: &service,
        campaign,
        signals,
        released: release_requests().expect("a handler for the release signal"),
        guards: FakeGuards(script.clone()),
    }
    .rounds()
    .await
}

fn count(log: &Log, what: &str) -> usize {
    log.names().iter().filter(|e| *e == what).count()
}

#[tokio::test(start_paused = true)]
async fn a_lease_lost_while_waiting_is_replaced_and_the_wait_goes_on() {
    let log = Rc::new(Log::default());
    let mut script = Script::new(&log);
    script.lease_gone = true;
    script.granted_after = Some(Duration::from_secs(30));
    let budget = Budget {
        ttl: Duration::from_secs(15),
        rival_delay: Duration::from_secs(15),
        kill_timeout: Duration::from_secs(5),
        ends_early: false,
        rate_error: crate::clock::Ppm::DEFAULT,
    };
    let exit = run(script, Some(budget), false).await.unwrap();
    assert_eq!(exit, Exit::Child(0));
    assert_eq!(count(&log, "lease opened"), 2, "{:?}", log.names());
    assert_eq!(count(&log, "lease closed"), 2, "{:?}", log.names());
    assert_eq!(count(&log, "acquired"), 1, "{:?}", log.names());
}

#[tokio::test(start_paused = true)]
async fn a_loss_ends_a_one_off_run_and_a_campaigner_campaigns_again() {
    for (campaign, expected) in [(false, Exit::Lost), (true, Exit::Child(0))] {
        let log = Rc::new(Log::default());
        let mut script = Script::new(&log);
        script.child_exits_after = None;
        script.claim_lost_after = Some(Duration::from_secs(3));
        let exit = run(script, None, campaign).await.unwrap();
        assert_eq!(exit, expected, "campaign {campaign}");
        let rounds = if campaign { 2 } else { 1 };
        assert_eq!(count(&log, "acquired"), rounds, "{:?}", log.names());
        assert_eq!(count(&log, "released"), rounds, "{:?}", log.names());
        assert_eq!(count(&log, "lease closed"), rounds, "{:?}", log.names());
    }
}
