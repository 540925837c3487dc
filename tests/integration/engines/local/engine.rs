//! The `local` backend's engine, driven through the backend seam: flock
//! locks in a lock directory, `flock(1)` interop both ways, waits that are
//! cancellable, holder facts checked against the kernel, fencing numbers,
//! semaphores and force-release through a pidfd.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockrun::backend::local::facts::{self, Facts};
use lockrun::backend::local::tree::{Dir, KeyFiles};
use lockrun::backend::local::{Kind, Local, LocalClaim, LocalError};
use lockrun::backend::{
    self, Acquisition, Changes, Claim, Engine, Inspect, Lease, Renewal, Target, Wait, Which,
};

use crate::procs::deadline;
use crate::support::{max_overlap, wait_for_file};

const FLOCK: &str = "/usr/bin/flock";

fn engine(dir: &Path) -> Local {
    Local::open(dir.join("locks"), false).expect("open the lock directory")
}

/// The files of `key`, at the top of the lock directory in `dir`.
fn key_files(dir: &Path, key: &str) -> KeyFiles {
    KeyFiles {
        dir: Arc::new(Dir::top(&dir.join("locks")).unwrap()),
        lock: key.to_owned(),
    }
}

fn lock(key: &str) -> Target {
    Target::Lock {
        key: key.into(),
        shared: false,
    }
}

fn slots(prefix: &str, limit: u32) -> Target {
    Target::Slot {
        prefix: prefix.into(),
        limit,
    }
}

/// A generous `--timeout`: the test never waits it out when all is well.
fn patient() -> Wait {
    Wait::Until(tokio::time::Instant::from_std(deadline()))
}

async fn take(local: &Local, target: &Target, value: &str, wait: Wait) -> LocalClaim {
    match local
        .acquire(&backend::local::NoLease, target, value, wait)
        .await
    {
        Ok(Acquisition::Held(claim)) => claim,
        Ok(Acquisition::Busy { holder }) => panic!("{target:?} busy (holder {holder:?})"),
        Err(e) => panic!("{target:?}: {e}"),
    }
}

async fn try_take(local: &Local, target: &Target, wait: Wait) -> Option<LocalClaim> {
    match local
        .acquire(&backend::local::NoLease, target, "v", wait)
        .await
    {
        Ok(Acquisition::Held(claim)) => Some(claim),
        Ok(Acquisition::Busy { .. }) => None,
        Err(e) => panic!("{target:?}: {e}"),
    }
}

/// `flock FILE sh -c 'touch READY; read _'`: holds the lock until we close
/// its stdin.
fn flock_holder(file: &Path, ready: &Path) -> Child {
    let child = Command::new(FLOCK)
        .arg(file)
        .args([
            "sh",
            "-c",
            "touch \"$0\"; read _ || :",
            ready.to_str().unwrap(),
        ])
        .stdin(Stdio::piped())
        .spawn()
        .expect("run flock(1)");
    wait_for_file(ready);
    child
}

fn end(mut child: Child) {
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
}

/// `flock -n FILE true`: whether flock(1) got the lock at once.
fn flock_now(file: &Path) -> bool {
    let status = Command::new(FLOCK)
        .args(["-n", "-E", "75"])
        .arg(file)
        .arg("true")
        .status()
        .unwrap();
    match status.code() {
        Some(0) => true,
        Some(75) => false,
        other => panic!("flock -n: {other:?}"),
    }
}

/// The `/proc/locks` lines about `file`: granted locks, and with `->`
/// requests still waiting.
fn proc_locks_on(file: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(file) else {
        return Vec::new();
    };
    let ino = format!(":{} ", meta.ino());
    facts::read_proc_locks()
        .unwrap()
        .0
        .lines()
        .filter(|l| l.contains(" FLOCK ") && l.contains(&ino))
        .map(str::to_owned)
        .collect()
}

/// Whether someone is blocked in flock(2) on `file`.
fn someone_waits_on(file: &Path) -> bool {
    proc_locks_on(file).iter().any(|l| l.contains("->"))
}

/// Whether `file` is locked.
fn is_locked(file: &Path) -> bool {
    proc_locks_on(file).iter().any(|l| !l.contains("->"))
}

/// A condition wait that lets other tasks on this runtime run.
async fn until(what: &str, mut condition: impl FnMut() -> bool) {
    let end = deadline();
    while !condition() {
        assert!(Instant::now() < end, "{what} did not happen in time");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// `contenders` tasks each take `target` `rounds` times, hold it for a
/// moment and let go; the spans (by the holders' own clock) and fences.
async fn churn(
    dir: &Path,
    target: Target,
    contenders: usize,
    rounds: usize,
) -> Vec<(Instant, Instant, u64, Option<u32>)> {
    let spans = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for n in 0..contenders {
        let (local, target, spans) = (engine(dir), target.clone(), spans.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let claim = take(&local, &target, &format!("c{n}"), patient()).await;
                let start = Instant::now();
                // Long enough for rivals to pile up behind us.
                tokio::time::sleep(Duration::from_millis(2)).await;
                let end = Instant::now();
                let (fence, slot) = (claim.fence(), claim.slot());
                claim.release().await.unwrap();
                spans.lock().unwrap().push((start, end, fence, slot));
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut spans = spans.lock().unwrap().clone();
    spans.sort_by_key(|s| s.0);
    spans
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_contenders_never_overlap_and_fences_increase() {
    let tmp = tempfile::tempdir().unwrap();
    let spans = churn(tmp.path(), lock("jobs/nightly"), 8, 5).await;
    assert_eq!(spans.len(), 40);
    let intervals: Vec<_> = spans.iter().map(|s| (s.0, s.1)).collect();
    assert_eq!(max_overlap(intervals), 1, "two holders at once: {spans:?}");
    let fences: Vec<u64> = spans.iter().map(|s| s.2).collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
}

#[tokio::test]
async fn the_lock_file_is_where_flock_finds_it_and_the_lease_never_runs_out() {
    let tmp = tempfile::tempdir().unwrap();
    let local = engine(tmp.path());
    let report = |_: &str| {};
    let opening = lockrun::backend::Opening {
        wait: Wait::Once,
        daemon: false,
        first: true,
        report: &report,
    };
    let lease = local.open_lease(opening).await.unwrap();
    assert!(matches!(
        lease.renew(Duration::from_secs(1)).await,
        Renewal::Confirmed { ttl: None }
    ));
    let claim = take(&local, &lock("a/b"), "v", Wait::Once).await;
    assert_eq!(claim.path(), tmp.path().join("locks/a/b"));
    // Only we can open (and so lock) what we create; only we can change
    // the directories, so nobody can replace a lock file.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(claim.path()), 0o600);
    assert_eq!(mode(&tmp.path().join("locks/a")) & 0o022, 0);
    let env = claim.env();
    assert!(
        env.contains(&("LOCKRUN_KEY".into(), "a/b".into())),
        "{env:?}"
    );
    let index = (
        "LOCKRUN_LOCK_INDEX".into(),
        claim.fence().to_string().into(),
    );
    assert!(env.contains(&index), "{env:?}");
    claim.release().await.unwrap();
}

#[tokio::test]
async fn flock_cli_holder_excludes_us_until_it_lets_go() {
    let tmp = tempfile::tempdir().unwrap();
    let local = engine(tmp.path());
    let file = tmp.path().join("locks/k");
    let holder = flock_holder(&file, &tmp.path().join("ready"));

    assert!(try_take(&local, &lock("k"), Wait::Once).await.is_none());
    let begun = tokio::time::Instant::now();
    let until = Wait::Until(begun + Duration::from_millis(300));
    assert!(try_take(&local, &lock("k"), until).await.is_none());
    assert!(begun.elapsed() >= Duration::from_millis(300));

    // leader sees a holder with no value: the lock is really held.
    let holders = local.holders(&lock("k")).await.unwrap();
    assert_eq!(holders.len(), 1, "{holders:?} {:?}", proc_locks_on(&file));
    assert_eq!(holders[0].value, None);
    assert_eq!(holders[0].pid, Some(holder.id()));

    let waiting = {
        let local = local.clone();
        tokio::spawn(async move { take(&local, &lock("k"), "late", patient()).await })
    };
    end(holder);
    let claim = waiting.await.unwrap();
    let holders = local.holders(&lock("k")).await.unwrap();
    assert_eq!(holders[0].value.as_deref(), Some("late"));
    assert_eq!(holders[0].pid, Some(std::process::id()));
    claim.release().await.unwrap();
}

#[tokio::test]
async fn our_lock_excludes_flock_cli_both_ways_and_its_duplicate_keeps_it() {
    let tmp = tempfile::tempdir().unwrap();
    let local = engine(tmp.path());
    let file = tmp.path().join("locks/k");
    let mut claim = take(&local, &lock("k"), "v", Wait::Once).await;
    assert!(!flock_now(&file));
    // The guard's duplicate shares the open file description: the lock
    // stays held after we let go, until the duplicate closes too.
    let dup = claim.take_hold_fd().expect("a descriptor for the guard");
    assert!(claim.take_hold_fd().is_none());
    claim.release().await.unwrap();
    assert!(!flock_now(&file));
    drop(dup);
    // Free once the kernel drops it (a child forked elsewhere in this test
    // process may hold a copy of the descriptor until it execs).
    until("the lock ending", || !is_locked(&file)).await;
    assert!(flock_now(&file));
}

#[tokio::test]
async fn a_cancelled_wait_leaves_nothing_held_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let local = engine(tmp.path());
    let first = take(&local, &lock("k"), "first", Wait::Once).await;
    let waiter = {
        let local = local.clone();
        tokio::spawn(async move { take(&local, &lock("k"), "cancelled", Wait::Forever).await })
    };
    // Cancelled while it really waits in flock.
    let file = tmp.path().join("locks/k");
    until("the waiter blocking", || someone_waits_on(&file)).await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    let fence = first.fence();
    first.release().await.unwrap();
    let facts_path = tmp.path().join("locks/k.lockrun");
    let released = Facts::read(&facts_path).unwrap();
    assert_eq!((released.fence, &released.holder), (fence, &None));

    // The abandoned thread is granted the lock and drops it at once...
    until("the late grant coming and going", || {
        !someone_waits_on(&file) && !is_locked(&file)
    })
    .await;
    // ...having written nothing,
    assert_eq!(Facts::read(&facts_path).unwrap(), released);
    // and a patient rival gets the lock as the next holder.
    let next = take(&local, &lock("k"), "next", patient()).await;
    assert!(next.fence() > fence);
    let holders = local.holders(&lock("k")).await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].value.as_deref(), Some("next"));
    next.release().await.unwrap();
}

#[tokio::test]
async fn stale_holder_facts_with_no_live_holder_read_as_no_holder() {
    let tmp = tempfile::tempdir().unwrap();
    let local = engine(tmp.path());
    let claim = take(&local, &lock("k"), "gone", Wait::Once).await;
    assert_eq!(local.holders(&lock("k")).await.unwrap().len(), 1);
    // Dropped without release, as a killed lockrun would: the facts still
    // name a holder, the kernel says nobody holds the lock.
    drop(claim);
    // A child forked elsewhere in this test process may hold a copy of the
    // descriptor until it execs; the lock ends when the kernel says so.
    let file = tmp.path().join("locks/k");
    until("the lock ending", || !is_locked(&file)).await;
    let facts = std::fs::read_to_string(tmp.path().join("locks/k.lockrun")).unwrap();
    assert!(facts.contains("\"gone\""), "{facts}");
    assert_eq!(local.holders(&lock("k")).await.unwrap(), vec![]);
    // A reader that creates nothing sees the same; a missing directory has
    // no holders.
    let reader = Local::for_reading(tmp.path().join("locks"));
    assert_eq!(reader.holders(&lock("k")).await.unwrap(), vec![]);
    let nowhere = Local::for_reading(tmp.path().join("nowhere"));
    assert_eq!(nowhere.holders(&lock("k")).await.unwrap(), vec![]);
    assert_eq!(nowhere.holders(&slots("p", 2)).await.unwrap(), vec![]);
    assert!(!tmp.path().join("nowhere").exists());
    let e = nowhere
        .acquire(&backend::local::NoLease, &lock("k"), "v", Wait::Once)
        .await
        .unwrap_err();
    assert_eq!(e.kind, Kind::Dir);
    assert!(!tmp.path().join("nowhere").exists());
    assert_eq!(local.holders(&lock("never/used")).await.unwrap(), vec![]);
}

#[tokio::test]
async fn the_fencing_number_survives_releases_and_flock_cli_holders() {
    let tmp = tempfile::tempdir().unwrap();
    let local = engine(tmp.path());
    // A count far above the clock's seed: from here each holder adds one,
    // so an exact number shows the count was kept.
    let mut last = 1 << 62;
    let planted = Facts {
        fence: last,
        ..Facts::default()
    };
    planted.write(&key_files(tmp.path(), "f")).unwrap();
    for round in 0..3 {
        let claim = take(&local, &lock("f"), "v", Wait::Once).await;
        assert_eq!(claim.fence(), last + 1, "round {round}");
        last = claim.fence();
        claim.release().await.unwrap();
        end(flock_holder(
            &tmp.path().join("locks/f"),
            &tmp.path().join(format!("ready{round}")),
        ));
    }
    // Another engine on the same directory continues the same count.
    let claim = take(&engine(tmp.path()), &lock("f"), "v", Wait::Once).await;
    assert_eq!(claim.fence(), last + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_semaphore_holds_at_most_n_with_3n_contenders() {
    let tmp = tempfile::tempdir().unwrap();
    let n = 3;
    let spans = churn(tmp.path(), slots("pool", n), 3 * n as usize, 3).await;
    assert_eq!(spans.len(), 27);
    let intervals: Vec<_> = spans.iter().map(|s| (s.0, s.1)).collect();
    let max = max_overlap(intervals);
    assert!(max <= n as usize, "{max} holders at once (limit {n})");
    // Each slot's fences strictly increase in the order it was held.
    for slot in 0..n {
        let fences: Vec<u64> = spans
            .iter()
            .filter(|s| s.3 == Some(slot))
            .map(|s| s.2)
            .collect();
        assert!(
            fences.windows(2).all(|w| w[0] < w[1]),
            "slot {slot}: {fences:?}"
        );
    }
}

#[tokio::test]
async fn a_full_semaphore_says_so_and_frees_a_slot_for_a_waiter() {
    let tmp = tempfile::tempdir().unwrap();
    let local = engine(tmp.path());
    let a = take(&local, &slots("p", 2), "a", Wait::Once).await;
    let b = take(&local, &slots("p", 2), "b", Wait::Once).await;
    assert_ne!(a.slot(), b.slot());
    assert!(try_take(&local, &slots("p", 2), Wait::Once).await.is_none());
    let mut holders = local.holders(&slots("p", 2)).await.unwrap();
    holders.sort_by_key(|h| h.slot);
    let values: Vec<_> = holders.iter().map(|h| h.value.as_deref()).collect();
    assert_eq!(values, [Some("a"), Some("b")]);

    let waiter = {
        let local = local.clone();
        tokio::spawn(async move { take(&local, &slots("p", 2), "c", patient()).await })
    };
    // The waiter heads the queue once it holds `.queue`.
    let queue = tmp.path().join("locks/p/.queue");
    until("the waiter queueing", || is_locked(&queue)).await;
    let freed = a.slot();
    a.release().await.unwrap();
    let c = waiter.await.unwrap();
    assert_eq!(c.slot(), freed);
    b.release().await.unwrap();
    c.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_waiters_queue_one_at_a_time_and_a_cancelled_head_steps_aside() {
    let tmp = tempfile::tempdir().unwrap();
    let local = engine(tmp.path());
    let held = take(&local, &slots("q", 1), "held", Wait::Once).await;
    let waiter = |value: &'static str| {
        let local = local.clone();
        tokio::spawn(async move {
            let claim = take(&local, &slots("q", 1), value, patient()).await;
            let fence = claim.fence();
            claim.release().await.unwrap();
            fence
        })
    };
    let queue = tmp.path().join("locks/q/.queue");
    let head = waiter("head");
    until("a waiter heading the queue", || is_locked(&queue)).await;
    let others: Vec<_> = ["w1", "w2", "w3"].into_iter().map(waiter).collect();
    // No stampede: one waiter looks for a slot, the others sleep in flock.
    until("three waiters behind the head", || {
        proc_locks_on(&queue)
            .iter()
            .filter(|l| l.contains("->"))
            .count()
            == 3
    })
    .await;
    assert_eq!(
        proc_locks_on(&queue)
            .iter()
            .filter(|l| !l.contains("->"))
            .count(),
        1
    );
    // The head gives up; another waiter takes its place and gets the slot.
    head.abort();
    assert!(head.await.unwrap_err().is_cancelled());
    until("a new head", || {
        proc_locks_on(&queue)
            .iter()
            .filter(|l| l.contains("->"))
            .count()
            == 2
    })
    .await;
    held.release().await.unwrap();
    let mut fences = vec![];
    for w in others {
        fences.push(w.await.unwrap());
    }
    fences.sort();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
}

#[tokio::test]
async fn a_limit_mismatch_names_both_limits_until_the_holders_are_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let local = engine(tmp.path());
    let held = take(&local, &slots("p", 2), "a", Wait::Once).await;
    let e: LocalError = local
        .acquire(&backend::local::NoLease, &slots("p", 3), "b", Wait::Once)
        .await
        .unwrap_err();
    assert_eq!(e.kind, Kind::LimitMismatch);
    let text = e.to_string();
    assert!(
        text.contains("limit 2") && text.contains("--limit 3"),
        "{text}"
    );
    let slot = tmp
        .path()
        .join(format!("locks/p/slot-{}", held.slot().unwrap()));
    held.release().await.unwrap();
    until("the slot ending", || !is_locked(&slot)).await;
    // With nobody holding a slot, the new limit replaces the old one.
    let c = take(&local, &slots("p", 3), "c", Wait::Once).await;
    let e = local
        .acquire(&backend::local::NoLease, &slots("p", 2), "d", Wait::Once)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("limit 3"), "{e}");
    c.release().await.unwrap();
}

#[tokio::test]
async fn force_release_signals_the_holder_through_a_pidfd() {
    let tmp = tempfile::tempdir().unwrap();
    let local = engine(tmp.path());
    // This test process is the holder: it catches the release signal.
    let kind = tokio::signal::unix::SignalKind::from_raw(backend::release_signal());
    let mut released = tokio::signal::unix::signal(kind).unwrap();
    let claim = take(&local, &lock("k"), "me", Wait::Once).await;

    let asked = local
        .force_release(&lock("k"), &Which::Value("someone else".into()))
        .await
        .unwrap()
        .asked;
    assert_eq!(asked, vec![]);
    let asked = local
        .force_release(&lock("k"), &Which::All)
        .await
        .unwrap()
        .asked;
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].value.as_deref(), Some("me"));
    tokio::time::timeout(Duration::from_secs(30), released.recv())
        .await
        .expect("the release signal arrives");
    claim.release().await.unwrap();

    // A holder whose start time differs is another process that reused the
    // pid: it is not signalled.
    let mut claim = take(&local, &lock("k"), "me", patient()).await;
    let facts_path = tmp.path().join("locks/k.lockrun");
    let mut facts = Facts::read(&facts_path).unwrap();
    facts.holder.as_mut().unwrap().pid_start += 1;
    facts.write(&key_files(tmp.path(), "k")).unwrap();
    let outcome = local.force_release(&lock("k"), &Which::All).await.unwrap();
    assert!(outcome.asked.is_empty());
    let e = &outcome.refused[0];
    assert_eq!(e.kind, Kind::Refused);
    assert!(e.to_string().contains("has exited"), "{e}");
    drop(claim.take_hold_fd());
    claim.release().await.unwrap();

    // A flock(1) holder is not lockrun: refused, with what to do instead.
    let holder = flock_holder(&tmp.path().join("locks/k"), &tmp.path().join("ready"));
    let outcome = local.force_release(&lock("k"), &Which::All).await.unwrap();
    assert!(outcome.asked.is_empty());
    let e = &outcome.refused[0];
    assert_eq!(e.kind, Kind::Refused);
    assert!(e.to_string().contains("not lockrun"), "{e}");
    end(holder);

    // One test, so that no other test's signal can stand in for ours.
    slots_by_holder(&local, &mut released).await;
}

/// Semaphore slots are released by holder: only the chosen one is asked.
async fn slots_by_holder(local: &Local, released: &mut tokio::signal::unix::Signal) {
    let a = take(local, &slots("p", 3), "a", Wait::Once).await;
    let b = take(local, &slots("p", 3), "b", Wait::Once).await;
    let asked = local
        .force_release(&slots("p", 3), &Which::Value("b".into()))
        .await
        .unwrap()
        .asked;
    assert_eq!(asked.len(), 1);
    assert_eq!(
        (asked[0].value.as_deref(), asked[0].slot),
        (Some("b"), b.slot())
    );
    tokio::time::timeout(Duration::from_secs(30), released.recv())
        .await
        .expect("the release signal arrives");
    a.release().await.unwrap();
    b.release().await.unwrap();
}

#[tokio::test]
async fn leader_changes_wake_on_holders_without_polling() {
    let tmp = tempfile::tempdir().unwrap();
    let local = engine(tmp.path());
    let mut changes = local.changes(&lock("w/k")).await.unwrap();
    assert_eq!(changes.next().await.unwrap(), vec![]);
    let waiting = {
        let local = local.clone();
        tokio::spawn(async move { backend::wait_for_holder(&local, &lock("w/k")).await })
    };
    let claim = take(&local, &lock("w/k"), "leader", Wait::Once).await;
    let within = Duration::from_secs(30);
    let seen = tokio::time::timeout(within, async {
        loop {
            let now = changes.next().await.unwrap();
            if now.iter().any(|h| h.value.is_some()) {
                return now;
            }
        }
    })
    .await
    .expect("a change is seen");
    assert_eq!(seen[0].value.as_deref(), Some("leader"));
    let waited = tokio::time::timeout(within, waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(waited.len(), 1);
    claim.release().await.unwrap();
    // Until the kernel drops the lock (a child forked elsewhere in this test
    // process may pin it a moment), a holder with no value may show.
    let gone = tokio::time::timeout(within, async {
        loop {
            let now = changes.next().await.unwrap();
            assert!(now.iter().all(|h| h.value.is_none()), "{now:?}");
            if now.is_empty() {
                return now;
            }
        }
    })
    .await
    .expect("the release is seen");
    assert_eq!(gone, vec![]);
}

/// CPU time this thread has used, in clock ticks (fields 14 and 15 of
/// `/proc/thread-self/stat`).
fn thread_cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    let fields: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|f| f.parse().unwrap())
        .collect();
    fields.iter().sum()
}

#[tokio::test]
async fn an_idle_watch_uses_no_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let local = engine(tmp.path());
    let claim = take(&local, &lock("idle"), "v", Wait::Once).await;
    let mut changes = local.changes(&lock("idle")).await.unwrap();
    assert_eq!(changes.next().await.unwrap().len(), 1);
    // A second of nothing changing: a polling loop would burn most of it
    // (on this thread: the test runs on a current-thread runtime).
    let before = thread_cpu_ticks();
    let idle = tokio::time::timeout(Duration::from_secs(1), changes.next()).await;
    assert!(idle.is_err(), "nothing changed, yet: {idle:?}");
    let used = thread_cpu_ticks() - before;
    assert!(used <= 5, "{used} ticks of CPU in one idle second");
    claim.release().await.unwrap();
}

#[tokio::test]
async fn a_removed_lock_file_ends_the_claim() {
    let tmp = tempfile::tempdir().unwrap();
    let local = engine(tmp.path());
    let mut claim = take(&local, &lock("k"), "v", Wait::Once).await;
    std::fs::remove_file(claim.path()).unwrap();
    let why = tokio::time::timeout(Duration::from_secs(30), claim.watch())
        .await
        .expect("the watch notices");
    assert!(why.is_verdict(), "{why:?}");
    assert!(why.to_string().contains("removed or replaced"), "{why}");
}

#[tokio::test]
async fn bad_keys_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let local = engine(tmp.path());
    for key in ["", "a//b", "../x", "a/./b"] {
        let e = local
            .acquire(&backend::local::NoLease, &lock(key), "v", Wait::Once)
            .await
            .unwrap_err();
        assert_eq!(e.kind, Kind::Usage, "{key:?}: {e}");
    }
    let listed: Vec<_> = std::fs::read_dir(tmp.path().join("locks"))
        .unwrap()
        .collect();
    assert!(listed.is_empty(), "{listed:?}");
}

/// One holder lets go, how long until a blocked waiter holds the lock
/// (fencing number written and synced), 20 times.
async fn handover(dir: &Path) -> Vec<Duration> {
    let local = engine(dir);
    let mut times = Vec::new();
    for _ in 0..20 {
        let first = take(&local, &lock("h"), "a", patient()).await;
        let waiter = {
            let local = local.clone();
            tokio::spawn(async move {
                let claim = take(&local, &lock("h"), "b", patient()).await;
                (Instant::now(), claim)
            })
        };
        // A handover, not an uncontended acquire: the waiter is in flock.
        let file = dir.join("locks/h");
        until("the waiter blocking", || someone_waits_on(&file)).await;
        let released = Instant::now();
        first.release().await.unwrap();
        let (acquired, claim) = waiter.await.unwrap();
        times.push(acquired - released);
        claim.release().await.unwrap();
    }
    times.sort();
    times
}

/// Handover speed of the engine, beside `flock(1)` processes measured in
/// the same run (a holder's child exits, the next one's child starts and
/// writes a timestamp: fork and exec included, which the engine's figure
/// leaves to the hold loop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handover_speed() {
    let tmp = tempfile::tempdir().unwrap();
    let ours = handover(tmp.path()).await;
    // /run, root's default, is a tmpfs like /dev/shm: no disk under fsync.
    let tmpfs = match Path::new("/dev/shm").is_dir() {
        true => Some(handover(tempfile::tempdir_in("/dev/shm").unwrap().path()).await),
        false => None,
    };

    let file = tmp.path().join("locks/h-flock");
    let mut theirs = Vec::new();
    for i in 0..20 {
        let mut holder = flock_holder(&file, &tmp.path().join(format!("r{i}")));
        let stamp = tmp.path().join(format!("s{i}"));
        let mut next = Command::new(FLOCK)
            .arg(&file)
            .args(["sh", "-c", "date +%s%N > \"$0\"", stamp.to_str().unwrap()])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        until("flock(1) blocking", || someone_waits_on(&file)).await;
        let ended = std::time::SystemTime::now();
        holder.stdin.take().unwrap().write_all(b"\n").unwrap();
        holder.wait().unwrap();
        assert!(next.wait().unwrap().success());
        let ns: u128 = std::fs::read_to_string(&stamp)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let ended = ended
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        theirs.push(Duration::from_nanos(ns.saturating_sub(ended) as u64));
    }
    theirs.sort();
    eprintln!(
        "local handover: test directory median {:?} (p90 {:?}); tmpfs {:?}; flock(1) process chain median {:?} (p90 {:?})",
        ours[10],
        ours[18],
        tmpfs.map(|t| (t[10], t[18])),
        theirs[10],
        theirs[18]
    );
    assert!(ours[10] < Duration::from_secs(1), "{ours:?}");
}
