//! The `etcd` backend's engine, driven through the backend seam against a
//! real etcd (see `etcd_support`): mutual exclusion, interop with
//! `etcdctl lock` and `etcdctl elect` both ways, the lease and its
//! keepalives, losing a claim to `etcdctl lease revoke`, fencing numbers.

use std::time::Duration;

use lockrun::backend::etcd::client::Range;
use lockrun::backend::etcd::{Etcd, EtcdClaim, EtcdConfig, EtcdError, EtcdFlags, EtcdLease};
use lockrun::backend::{
    self, Acquisition, Changes, Claim, Engine, Inspect, Lease, Renewal, Target, Wait, Which,
};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use tokio::time::Instant;

use crate::engines::etcd::support::{
    closed_endpoint, cluster, engine, etcd, etcdctl_at, etcdctl_ok, eventually, private,
    private_tls, run_ok, unique, Etcdctl,
};
use crate::link::Link;
use crate::procs::deadline;
use crate::support::{max_overlap, now_ns};

/// etcd's minimum TTL with the default election timeout (1 s) is 2 s.
const TTL: Duration = Duration::from_secs(2);
/// The TTL of leases the tests hold without keepalives: long enough that no
/// step on a loaded machine (a member killed, an election, etcdctl started)
/// outlives it, so a lease never expires under a test that is not about
/// expiry. Expiry itself is tested through the hold loop (`etcd_cli`).
const HELD: Duration = Duration::from_secs(30);

fn lock(key: &str) -> Target {
    Target::Lock {
        key: key.into(),
        shared: false,
    }
}

fn patient() -> Wait {
    Wait::Until(Instant::from_std(deadline()))
}

fn quiet(_: &str) {}

/// Opening a lease as a one-off run does: no retries of a refused connection.
fn once() -> lockrun::backend::Opening<'static> {
    lockrun::backend::Opening {
        wait: Wait::Once,
        daemon: false,
        first: true,
        report: &quiet,
    }
}

async fn lease(etcd: &Etcd) -> EtcdLease {
    etcd.open_lease(once()).await.expect("a lease")
}

async fn take(etcd: &Etcd, lease: &EtcdLease, target: &Target, value: &str) -> EtcdClaim {
    match etcd.acquire(lease, target, value, patient()).await {
        Ok(Acquisition::Held(claim)) => claim,
        Ok(Acquisition::Busy { holder }) => panic!("{target:?} busy (holder {holder:?})"),
        Err(e) => panic!("{target:?}: {e}"),
    }
}

async fn try_take(etcd: &Etcd, lease: &EtcdLease, target: &Target) -> Option<EtcdClaim> {
    match etcd.acquire(lease, target, "v", Wait::Once).await {
        Ok(Acquisition::Held(claim)) => Some(claim),
        Ok(Acquisition::Busy { .. }) => None,
        Err(e) => panic!("{target:?}: {e}"),
    }
}

/// The contender keys under `key/`, oldest first.
async fn contenders(etcd: &Etcd, key: &str) -> Vec<String> {
    let answer = etcd
        .client()
        .range(&Range::prefix(format!("{key}/").as_bytes()).first_created())
        .await
        .expect("read the contenders");
    answer.kvs.iter().map(|kv| kv.key_str()).collect()
}

async fn wait_contenders(etcd: &Etcd, key: &str, n: usize) {
    eventually(&format!("{n} contenders under `{key}`"), async || {
        contenders(etcd, key).await.len() == n
    })
    .await;
}

fn env_of(claim: &EtcdClaim, name: &str) -> String {
    claim
        .env()
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_string().unwrap())
        .unwrap_or_else(|| panic!("no {name} in the claim's environment"))
}

/// `contenders` tasks, each with a lease of its own, take `target` `rounds`
/// times, hold it for a moment and let go: the spans (by the holders' own
/// clock) and the slots they held.
async fn churn(
    etcd: &Etcd,
    target: &Target,
    contenders: usize,
    rounds: usize,
) -> Vec<(u128, u128, Option<u32>)> {
    let mut tasks = Vec::new();
    for n in 0..contenders {
        let (etcd, target) = (etcd.clone(), target.clone());
        tasks.push(tokio::spawn(async move {
            let lease = lease(&etcd).await;
            let mut spans = Vec::new();
            for _ in 0..rounds {
                let claim = take(&etcd, &lease, &target, &format!("c{n}")).await;
                let start = now_ns();
                // Long enough for a rival that wrongly believed it held the
                // lock to show up inside our span.
                tokio::time::sleep(Duration::from_millis(5)).await;
                spans.push((start, now_ns(), claim.slot()));
                claim.release().await.expect("release");
            }
            lease.close().await;
            spans
        }));
    }
    let mut spans = Vec::new();
    for task in tasks {
        spans.extend(task.await.expect("a contender"));
    }
    spans
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_contenders_never_overlap() {
    let etcd = engine(HELD);
    let key = unique("eight");
    let spans = churn(&etcd, &lock(&key), 8, 3).await;
    assert_eq!(spans.len(), 24);
    assert_eq!(
        max_overlap(spans.iter().map(|s| (s.0, s.1))),
        1,
        "two contenders held the lock at once"
    );
    assert!(contenders(&etcd, &key).await.is_empty(), "keys left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_has_etcds_layout_and_facts() {
    let etcd = engine(HELD);
    let key = unique("layout");
    let lease = lease(&etcd).await;
    let claim = take(&etcd, &lease, &lock(&key), "me").await;
    // The writer's key of etcd's reader-writer recipe, which etcd's mutex
    // (`etcdctl lock`) waits for as for any older key under `KEY/`.
    let own = format!("{key}/write/{:x}", lease.id());
    assert_eq!(claim.key(), own);
    assert_eq!(env_of(&claim, "ETCD_LOCK_KEY"), own);
    assert_eq!(env_of(&claim, "LOCKRUN_KEY"), key);
    let answer = etcd
        .client()
        .range(&Range::key(own.as_bytes()))
        .await
        .unwrap();
    let kv = &answer.kvs[0];
    assert_eq!(kv.value_str(), "me");
    assert_eq!(kv.lease, lease.id());
    assert_eq!(claim.fence(), kv.create_revision as u64);
    assert_eq!(
        env_of(&claim, "ETCD_LOCK_REV"),
        kv.create_revision.to_string()
    );
    assert_eq!(
        env_of(&claim, "LOCKRUN_LOCK_INDEX"),
        kv.create_revision.to_string()
    );
    // `etcdctl elect -l` shows our value as the leader's.
    let observer = Etcdctl::spawn(&["elect", "-l", &key]);
    assert_eq!(observer.line(), own);
    assert_eq!(observer.line(), "me");
    drop(observer);
    claim.release().await.unwrap();
    assert!(contenders(&etcd, &key).await.is_empty());
    lease.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_lock_waits_for_the_engine() {
    let etcd = engine(HELD);
    let key = unique("etcdctl-waits");
    let lease = lease(&etcd).await;
    let claim = take(&etcd, &lease, &lock(&key), "lockrun").await;
    let rival = Etcdctl::spawn(&["lock", &key]);
    wait_contenders(&etcd, &key, 2).await;
    // etcdctl prints its key only once it holds the lock.
    assert_eq!(rival.printed(), None, "etcdctl lock got a held lock");
    let ours = claim.fence();
    claim.release().await.unwrap();
    let theirs = rival.line();
    assert!(theirs.starts_with(&format!("{key}/")), "{theirs}");
    let kvs = etcd
        .client()
        .range(&Range::key(theirs.as_bytes()))
        .await
        .unwrap()
        .kvs;
    assert!(kvs[0].create_revision as u64 > ours);
    // And while etcdctl holds it, we cannot.
    assert!(try_take(&etcd, &lease, &lock(&key)).await.is_none());
    rival.interrupt();
    lease.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_waits_for_etcdctl_lock_and_elect() {
    let etcd = engine(HELD);
    for holder in ["lock", "elect"] {
        let key = unique(&format!("waits-for-{holder}"));
        let rival = if holder == "lock" {
            Etcdctl::spawn(&["lock", &key])
        } else {
            Etcdctl::spawn(&["elect", &key, "them"])
        };
        let theirs = rival.line();
        let lease = lease(&etcd).await;
        match etcd.acquire(&lease, &lock(&key), "us", Wait::Once).await {
            Ok(Acquisition::Busy { holder: value }) => {
                let expected = if holder == "lock" { None } else { Some("them") };
                assert_eq!(value.as_deref(), expected);
            }
            other => panic!("acquired a lock etcdctl {holder} holds: {other:?}"),
        }
        // `--no-wait` left nothing behind.
        assert_eq!(contenders(&etcd, &key).await, std::slice::from_ref(&theirs));
        let waiter = {
            let (etcd, key) = (etcd.clone(), key.clone());
            tokio::spawn(async move {
                let lease = lease;
                let claim = take(&etcd, &lease, &lock(&key), "us").await;
                (claim, lease)
            })
        };
        wait_contenders(&etcd, &key, 2).await;
        assert!(
            !waiter.is_finished(),
            "acquired while etcdctl {holder} held"
        );
        rival.interrupt();
        let (claim, lease) = waiter.await.unwrap();
        assert_eq!(contenders(&etcd, &key).await, [claim.key()]);
        claim.release().await.unwrap();
        lease.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_elect_waits_for_the_engine() {
    let etcd = engine(HELD);
    let key = unique("elect-waits");
    let lease = lease(&etcd).await;
    let claim = take(&etcd, &lease, &lock(&key), "lockrun").await;
    let rival = Etcdctl::spawn(&["elect", &key, "them"]);
    wait_contenders(&etcd, &key, 2).await;
    assert_eq!(rival.printed(), None, "etcdctl elect won a held election");
    claim.release().await.unwrap();
    assert!(rival.line().starts_with(&format!("{key}/")));
    assert_eq!(rival.line(), "them");
    rival.interrupt();
    lease.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_reports_the_ttl_etcd_grants() {
    // Asked for 1 s, etcd grants its minimum, 2 s: the budget follows.
    let etcd = engine(Duration::from_secs(1));
    let lease = lease(&etcd).await;
    assert_eq!(lease.ttl(), TTL);
    match lease.renew(Duration::from_secs(5)).await {
        Renewal::Confirmed { ttl } => assert_eq!(ttl, Some(TTL)),
        other => panic!("keepalive not confirmed: {other:?}"),
    }
    etcdctl_ok(&["lease", "revoke", &format!("{:x}", lease.id())]);
    match lease.renew(Duration::from_secs(5)).await {
        Renewal::Gone(why) => assert!(why.contains("revoked or ran out"), "{why}"),
        other => panic!("a revoked lease renewed: {other:?}"),
    }
    lease.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_lease_is_a_lost_claim_at_once() {
    let etcd = engine(HELD);
    let key = unique("revoked");
    let lease = lease(&etcd).await;
    let mut claim = take(&etcd, &lease, &lock(&key), "us").await;
    let rival = Etcdctl::spawn(&["lock", &key]);
    wait_contenders(&etcd, &key, 2).await;
    let watching = tokio::spawn(async move {
        let why = claim.watch().await;
        (why, now_ns())
    });
    let revoked_at = now_ns();
    etcdctl_ok(&["lease", "revoke", &format!("{:x}", lease.id())]);
    let (why, lost_at) = watching.await.unwrap();
    assert!(why.is_verdict(), "{why:?}");
    assert!(why.to_string().contains("deleted"), "{why}");
    let _ = rival.line();
    let latency = Duration::from_nanos((lost_at - revoked_at) as u64);
    eprintln!("revoke to loss: {latency:?}");
    assert!(
        latency < Duration::from_secs(2),
        "loss seen after {latency:?}"
    );
    rival.interrupt();
    lease.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_numbers_strictly_increase_across_holders() {
    let etcd = engine(HELD);
    let key = unique("fence");
    let mut last = 0u64;
    for round in 0..3 {
        let lease = lease(&etcd).await;
        let claim = take(&etcd, &lease, &lock(&key), "us").await;
        assert!(
            claim.fence() > last,
            "round {round}: {} after {last}",
            claim.fence()
        );
        last = claim.fence();
        claim.release().await.unwrap();
        lease.close().await;
        // An etcdctl holder in between.
        let rival = Etcdctl::spawn(&["lock", &key]);
        let theirs = rival.line();
        let kvs = etcd
            .client()
            .range(&Range::key(theirs.as_bytes()))
            .await
            .unwrap()
            .kvs;
        assert!(kvs[0].create_revision as u64 > last);
        last = kvs[0].create_revision as u64;
        rival.interrupt();
    }
}

fn slots(prefix: &str, limit: u32) -> Target {
    Target::Slot {
        prefix: prefix.into(),
        limit,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_never_admits_more_than_its_limit() {
    let etcd = engine(HELD);
    let prefix = unique("bound");
    let spans = churn(&etcd, &slots(&prefix, 2), 6, 3).await;
    assert_eq!(spans.len(), 18);
    assert!(spans.iter().all(|s| s.2.unwrap() < 2), "slots: {spans:?}");
    let most = max_overlap(spans.iter().map(|s| (s.0, s.1)));
    assert!(most <= 2, "{most} contenders held one of 2 slots at once");
    assert!(
        contenders(&etcd, &prefix).await.is_empty(),
        "keys left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_the_slot_whichever_holder_leaves() {
    let etcd = engine(HELD);
    let prefix = unique("any-leaves");
    let target = slots(&prefix, 2);
    let (l1, l2, l3) = (lease(&etcd).await, lease(&etcd).await, lease(&etcd).await);
    let first = take(&etcd, &l1, &target, "first").await;
    let second = take(&etcd, &l2, &target, "second").await;
    assert_eq!((first.slot(), second.slot()), (Some(0), Some(1)));
    match etcd.acquire(&l3, &target, "third", Wait::Once).await {
        Ok(Acquisition::Busy { holder }) => assert_eq!(holder.as_deref(), Some("first")),
        other => panic!("a third slot out of 2: {other:?}"),
    }
    let waiter = {
        let (etcd, target) = (etcd.clone(), target.clone());
        tokio::spawn(async move {
            let claim = take(&etcd, &l3, &target, "third").await;
            (claim, l3)
        })
    };
    wait_contenders(&etcd, &prefix, 3).await;
    assert!(!waiter.is_finished(), "a third slot out of 2");
    // The younger holder leaves: the waiter must notice, though the oldest
    // key is still there.
    second.release().await.unwrap();
    let (third, l3) = waiter.await.unwrap();
    assert_eq!(third.slot(), Some(1));
    for (claim, lease) in [(first, l1), (third, l3)] {
        claim.release().await.unwrap();
        lease.close().await;
    }
    l2.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_limit_mismatch_names_both() {
    let etcd = engine(HELD);
    let prefix = unique("mismatch");
    let (l1, l2) = (lease(&etcd).await, lease(&etcd).await);
    let held = take(&etcd, &l1, &slots(&prefix, 2), "a").await;
    let e = etcd
        .acquire(&l2, &slots(&prefix, 3), "b", patient())
        .await
        .expect_err("a contender with another limit");
    let message = e.to_string();
    assert!(!e.is_transient());
    assert!(
        message.contains("limit 2") && message.contains("not 3"),
        "{message}"
    );
    assert!(message.contains(&held.key()), "{message}");
    // The refused contender left nothing behind.
    assert_eq!(contenders(&etcd, &prefix).await, [held.key()]);
    // Nor may anything else live under the prefix.
    etcdctl_ok(&["put", &format!("{prefix}/stray"), "x"]);
    let e = etcd
        .acquire(&l2, &slots(&prefix, 2), "b", patient())
        .await
        .expect_err("a foreign key under the prefix");
    assert!(e.to_string().contains("stray"), "{e}");
    held.release().await.unwrap();
    l1.close().await;
    l2.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_show_the_lock_holder_and_the_slot_holders() {
    let etcd = engine(HELD);
    let key = unique("holders");
    assert!(etcd.holders(&lock(&key)).await.unwrap().is_empty());
    let rival = Etcdctl::spawn(&["elect", &key, "them"]);
    let _ = rival.line();
    let holders = etcd.holders(&lock(&key)).await.unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].value.as_deref(), Some("them"));
    rival.interrupt();

    let prefix = unique("slot-holders");
    let target = slots(&prefix, 2);
    let leases = [lease(&etcd).await, lease(&etcd).await];
    let a = take(&etcd, &leases[0], &target, "a").await;
    let b = take(&etcd, &leases[1], &target, "b").await;
    let holders = etcd.holders(&target).await.unwrap();
    let shown: Vec<_> = holders
        .iter()
        .map(|h| (h.value.clone().unwrap(), h.slot.unwrap(), h.fence.unwrap()))
        .collect();
    assert_eq!(
        shown,
        [("a".into(), 0, a.fence()), ("b".into(), 1, b.fence())]
    );
    for lease in leases {
        lease.close().await;
    }
    assert!(etcd.holders(&target).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_follow_the_holder_without_polling() {
    let etcd = engine(HELD);
    let key = unique("changes");
    let target = lock(&key);
    let mut changes = etcd.changes(&target).await.unwrap();
    assert!(changes.next().await.unwrap().is_empty());
    let waiting = {
        let (etcd, target) = (etcd.clone(), target.clone());
        tokio::spawn(async move { backend::wait_for_holder(&etcd, &target).await })
    };
    let lease = lease(&etcd).await;
    let claim = take(&etcd, &lease, &target, "first").await;
    let held = waiting.await.unwrap().unwrap();
    assert_eq!(held[0].value.as_deref(), Some("first"));
    let now = changes.next().await.unwrap();
    assert_eq!(now[0].value.as_deref(), Some("first"));
    // A waiter joining changes nothing `leader` shows; the holder leaving does.
    let rival = Etcdctl::spawn(&["elect", &key, "second"]);
    wait_contenders(&etcd, &key, 2).await;
    claim.release().await.unwrap();
    let now = changes.next().await.unwrap();
    assert_eq!(now[0].value.as_deref(), Some("second"));
    // Interrupted before it knows it won, etcdctl exits without revoking its
    // lease (60 s): let it see its win first.
    assert!(rival.line().starts_with(&format!("{key}/")));
    rival.interrupt();
    assert!(changes.next().await.unwrap().is_empty());
    lease.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_revokes_the_chosen_holders_lease() {
    let etcd = engine(HELD);
    let key = unique("force");
    let lease1 = lease(&etcd).await;
    let mut claim = take(&etcd, &lease1, &lock(&key), "victim").await;
    let released = etcd
        .force_release(&lock(&key), &Which::All)
        .await
        .unwrap()
        .asked;
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].value.as_deref(), Some("victim"));
    let why = tokio::time::timeout(Duration::from_secs(10), claim.watch())
        .await
        .expect("the holder sees its loss");
    assert!(why.is_verdict(), "{why:?}");
    assert!(why.to_string().contains("deleted"), "{why}");
    assert!(matches!(
        lease1.renew(Duration::from_secs(5)).await,
        Renewal::Gone(_)
    ));

    let prefix = unique("force-slots");
    let target = slots(&prefix, 3);
    let leases = [lease(&etcd).await, lease(&etcd).await];
    let _a = take(&etcd, &leases[0], &target, "a").await;
    let mut b = take(&etcd, &leases[1], &target, "b").await;
    let released = etcd
        .force_release(&target, &Which::Value("b".into()))
        .await
        .unwrap()
        .asked;
    assert_eq!(released.len(), 1);
    tokio::time::timeout(Duration::from_secs(10), b.watch())
        .await
        .expect("b sees its loss");
    let left: Vec<_> = etcd
        .holders(&target)
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.value.unwrap())
        .collect();
    assert_eq!(left, ["a"]);
    for lease in leases {
        lease.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_acquisition_leaves_nothing_once_the_lease_closes() {
    let etcd = engine(HELD);
    let key = unique("dropped");
    let holder_lease = lease(&etcd).await;
    let claim = take(&etcd, &holder_lease, &lock(&key), "holder").await;
    let lease = lease(&etcd).await;
    let target = lock(&key);
    {
        let acquiring = etcd.acquire(&lease, &target, "w", Wait::Forever);
        tokio::pin!(acquiring);
        tokio::select! {
            _ = &mut acquiring => panic!("acquired a held lock"),
            () = wait_contenders(&etcd, &key, 2) => {}
        }
    }
    lease.close().await;
    assert_eq!(contenders(&etcd, &key).await, [claim.key()]);
    claim.release().await.unwrap();
    holder_lease.close().await;
    assert!(contenders(&etcd, &key).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_endpoint_is_tried_when_one_is_down() {
    let down = closed_endpoint();
    let up = crate::engines::etcd::support::etcd().endpoint.clone();
    let config = EtcdConfig::plain(&[&down, &up]).unwrap();
    let etcd = Etcd::new(&config, HELD).unwrap();
    let key = unique("endpoints");
    let lease = lease(&etcd).await;
    let claim = take(&etcd, &lease, &lock(&key), "v").await;
    claim.release().await.unwrap();
    lease.close().await;

    let other_down = closed_endpoint();
    let config = EtcdConfig::plain(&[&down, &other_down]).unwrap();
    let etcd = Etcd::new(&config, HELD).unwrap();
    let e = etcd.open_lease(once()).await.expect_err("no etcd there");
    assert!(e.is_transient(), "{e:?}");
    let message = e.to_string();
    assert!(!message.contains('\n'), "{message}");
    assert!(
        message.contains(&down) && message.contains(&other_down),
        "{message}"
    );
    assert!(message.contains("ETCDCTL_ENDPOINTS"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_authenticates_and_a_wrong_password_is_denied() {
    // Auth is cluster-wide, so this test has an etcd of its own; its simple
    // tokens last one second, so the engine must outlive one.
    let server = private(&["--auth-token", "simple", "--auth-token-ttl", "1"]);
    let ctl = |args: &[&str]| run_ok(etcdctl_at(&server.endpoint).args(args), args);
    ctl(&["user", "add", "root:s3cret", "--interactive=false"]);
    ctl(&["auth", "enable"]);
    let with_user = |user: &str| {
        let flags = EtcdFlags {
            endpoints: Some(server.endpoint.clone()),
            user: Some(user.into()),
            ..EtcdFlags::default()
        };
        // A lease that outlives the token we let expire.
        let ttl = Duration::from_secs(30);
        Etcd::new(&EtcdConfig::resolve(&flags, |_| None).unwrap(), ttl).unwrap()
    };
    let etcd = with_user("root:s3cret");
    let lease = lease(&etcd).await;
    let claim = take(&etcd, &lease, &lock("auth"), "v").await;
    assert_eq!(etcd.holders(&lock("auth")).await.unwrap().len(), 1);
    // Past the token's life (a TTL, so only time can pass it): the engine
    // authenticates again by itself.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    match lease.renew(Duration::from_secs(5)).await {
        Renewal::Confirmed { .. } => {}
        other => panic!("renewal after the token expired: {other:?}"),
    }
    claim.release().await.unwrap();
    lease.close().await;

    let wrong = with_user("root:wrong");
    let e = wrong
        .open_lease(once())
        .await
        .expect_err("a wrong password");
    let message = e.to_string();
    assert!(!e.is_transient(), "{e:?}");
    assert!(message.contains("permission denied"), "{message}");
    assert!(message.contains("ETCDCTL_USER"), "{message}");
    assert!(!message.contains("wrong"), "{message}");
}

/// A role confined to its keys (etcd's RBAC) may not keep the waiters'
/// records (`--priority`): its writers still wait, unranked, and take the
/// lock when it is let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_that_may_not_keep_waiting_records_still_waits() {
    let server = private(&[]);
    let ctl = |args: &[&str]| run_ok(etcdctl_at(&server.endpoint).args(args), args);
    ctl(&["user", "add", "root:s3cret", "--interactive=false"]);
    ctl(&["user", "add", "app:pw", "--interactive=false"]);
    ctl(&["role", "add", "app"]);
    ctl(&[
        "role",
        "grant-permission",
        "app",
        "--prefix=true",
        "readwrite",
        "jobs/",
    ]);
    ctl(&["user", "grant-role", "app", "app"]);
    ctl(&["auth", "enable"]);
    let flags = EtcdFlags {
        endpoints: Some(server.endpoint.clone()),
        user: Some("app:pw".into()),
        ..EtcdFlags::default()
    };
    let etcd = Etcd::new(&EtcdConfig::resolve(&flags, |_| None).unwrap(), HELD).unwrap();
    let target = lock("jobs/k");
    let holder_lease = lease(&etcd).await;
    let claim = take(&etcd, &holder_lease, &target, "h").await;
    let waiter_lease = lease(&etcd).await;
    let waiter = {
        let (etcd, target) = (etcd.clone(), target.clone());
        async move { take(&etcd, &waiter_lease, &target, "w").await }
    };
    let release = async {
        wait_contenders(&etcd, "jobs/k", 2).await;
        claim.release().await.unwrap();
    };
    let (got, ()) = tokio::time::timeout(Duration::from_secs(20), async {
        tokio::join!(waiter, release)
    })
    .await
    .expect("the waiter took the lock once it was let go");
    got.release().await.unwrap();
    holder_lease.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_link_fails_renewals_but_loses_nothing_until_etcd_says_so() {
    let link = Link::new(
        crate::engines::etcd::support::etcd()
            .endpoint
            .trim_start_matches("http://"),
    );
    let config = EtcdConfig::plain(&[&link.http_addr()]).unwrap();
    let etcd = Etcd::new(&config, Duration::from_secs(30)).unwrap();
    let key = unique("frozen");
    let lease = lease(&etcd).await;
    let mut claim = take(&etcd, &lease, &lock(&key), "v").await;
    link.freeze();
    let started = Instant::now();
    match lease.renew(Duration::from_millis(500)).await {
        Renewal::Failed(why) => assert!(why.contains("did not answer"), "{why}"),
        other => panic!("a renewal across a frozen link: {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    // The watch sees nothing while frozen: the lease, not the silence,
    // decides (the hold loop's budget).
    assert!(
        tokio::time::timeout(Duration::from_millis(300), claim.watch())
            .await
            .is_err(),
        "a frozen link reported a loss"
    );
    link.thaw();
    let renewed = lease.renew(Duration::from_secs(5)).await;
    assert!(
        matches!(renewed, Renewal::Confirmed { .. }),
        "the first renewal once the link thawed: {renewed:?}"
    );
    etcdctl_ok(&["lease", "revoke", &format!("{:x}", lease.id())]);
    let why = tokio::time::timeout(Duration::from_secs(10), claim.watch())
        .await
        .expect("the loss, once the link thaws");
    assert!(why.is_verdict(), "{why:?}");
    assert!(why.to_string().contains("deleted"), "{why}");
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// Figures for the closing note (`cargo test etcd_timings -- --nocapture`);
/// the bounds only catch an engine that waits on a timer somewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_timings() {
    let etcd = engine(HELD);
    let key = unique("timings");
    let mut uncontended = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        let lease = lease(&etcd).await;
        let claim = take(&etcd, &lease, &lock(&key), "v").await;
        claim.release().await.unwrap();
        lease.close().await;
        uncontended.push(started.elapsed());
    }
    let mut handover = Vec::new();
    let holder_lease = lease(&etcd).await;
    let waiter_lease = lease(&etcd).await;
    for round in 0..10 {
        let (from, to) = if round % 2 == 0 {
            (&holder_lease, &waiter_lease)
        } else {
            (&waiter_lease, &holder_lease)
        };
        let held = take(&etcd, from, &lock(&key), "a").await;
        let (etcd2, key2) = (etcd.clone(), key.clone());
        let to_id = to.id();
        let waiter = async move {
            let lease_ref = to;
            let claim = take(&etcd2, lease_ref, &lock(&key2), "b").await;
            (claim, Instant::now())
        };
        let release = async {
            wait_contenders(&etcd, &key, 2).await;
            let at = Instant::now();
            held.release().await.unwrap();
            at
        };
        let ((claim, got), released) = tokio::join!(waiter, release);
        assert!(claim.key().ends_with(&format!("{to_id:x}")));
        handover.push(got - released);
        claim.release().await.unwrap();
    }
    holder_lease.close().await;
    waiter_lease.close().await;
    let mut etcdctl = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        etcdctl_ok(&["lock", &key, "true"]);
        etcdctl.push(started.elapsed());
    }
    let mut loss = Vec::new();
    for _ in 0..10 {
        let lease = lease(&etcd).await;
        let mut claim = take(&etcd, &lease, &lock(&key), "v").await;
        // The watch is open before the revoke, as it is while a child runs.
        assert!(
            tokio::time::timeout(Duration::from_millis(20), claim.watch())
                .await
                .is_err()
        );
        let revoked = Instant::now();
        etcd.client()
            .revoke(lease.id(), Duration::from_secs(5))
            .await
            .unwrap();
        claim.watch().await;
        loss.push(revoked.elapsed());
    }
    let (u, h, e) = (median(uncontended), median(handover), median(etcdctl));
    let l = median(loss);
    eprintln!(
        "etcd timings (median): engine lease+acquire+release+revoke {u:?}; handover {h:?}; revoke sent to loss seen {l:?}; `etcdctl lock KEY true` {e:?}"
    );
    let second = Duration::from_secs(1);
    assert!(u < second && h < second && l < second, "{u:?} {h:?} {l:?}");
}

fn certificate(
    name: &str,
    sans: &[&str],
    usage: Option<&[ExtendedKeyUsagePurpose]>,
    issuer: Option<(&rcgen::Certificate, &KeyPair)>,
) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
    let mut params = CertificateParams::new(sans).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    let cert = match (usage, issuer) {
        (Some(usage), Some((ca, ca_key))) => {
            params.extended_key_usages = usage.to_vec();
            params.signed_by(&key, ca, ca_key).unwrap()
        }
        _ => {
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
            params.self_signed(&key).unwrap()
        }
    };
    (cert, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_client_certificate_from_etcdctls_names() {
    let dir = crate::support::scratch();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let (ca, ca_key) = certificate("lockrun test CA", &[], None, None);
    let (server, server_key) = certificate(
        "etcd",
        &["127.0.0.1", "localhost"],
        // etcd's own gateway dials etcd with the server certificate, so
        // with --client-cert-auth it must be good for clients too.
        Some(&[
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ]),
        Some((&ca, &ca_key)),
    );
    let (client, client_key) = certificate(
        "lockrun",
        &[],
        Some(&[ExtendedKeyUsagePurpose::ClientAuth]),
        Some((&ca, &ca_key)),
    );
    let ca_file = write("ca.pem", &ca.pem());
    let server_file = write("server.pem", &server.pem());
    let server_key_file = write("server.key", &server_key.serialize_pem());
    let client_file = write("client.pem", &client.pem());
    let client_key_file = write("client.key", &client_key.serialize_pem());
    let server = private_tls(&[
        "--cert-file",
        &server_file,
        "--key-file",
        &server_key_file,
        "--client-cert-auth",
        "--trusted-ca-file",
        &ca_file,
    ]);
    let host_port = server.endpoint.trim_start_matches("https://").to_owned();
    let env = |with_client: bool| {
        let mut vars = vec![
            ("ETCDCTL_ENDPOINTS", host_port.clone()),
            ("ETCDCTL_CACERT", ca_file.clone()),
        ];
        if with_client {
            vars.push(("ETCDCTL_CERT", client_file.clone()));
            vars.push(("ETCDCTL_KEY", client_key_file.clone()));
        }
        move |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.clone())
        }
    };
    let config = EtcdConfig::resolve(&EtcdFlags::default(), env(true)).unwrap();
    assert_eq!(config.endpoints[0].scheme(), "https");
    let etcd = Etcd::new(&config, HELD).unwrap();
    let lease = lease(&etcd).await;
    let claim = take(&etcd, &lease, &lock("tls"), "v").await;
    claim.release().await.unwrap();
    lease.close().await;

    // Without the client certificate the server refuses us: one line, no
    // retry can help at start-up.
    let config = EtcdConfig::resolve(&EtcdFlags::default(), env(false)).unwrap();
    let etcd = Etcd::new(&config, HELD).unwrap();
    let e = etcd
        .open_lease(once())
        .await
        .expect_err("no client certificate");
    // TLS 1.3 refuses the certificate after the handshake: its alert is
    // read, or our request's write fails first, and the line names the
    // certificate flags either way (CI saw the second once).
    let line = e.to_string();
    assert!(
        line.starts_with("TLS with etcd at") || line.starts_with("the connection to etcd at"),
        "{e}"
    );
    assert!(line.contains("ETCDCTL_CERT"), "{e}");
    assert!(!line.contains('\n'), "{e}");

    // Plain HTTP to a TLS port says so too.
    let plain = EtcdConfig::plain(&[&format!("http://{host_port}")]).unwrap();
    let e = Etcd::new(&plain, TTL)
        .unwrap()
        .open_lease(once())
        .await
        .expect_err("http to a TLS port");
    assert!(!e.to_string().contains('\n'), "{e}");
    // A server certificate from a CA we were not given.
    let untrusted = EtcdConfig::plain(&[&server.endpoint]).unwrap();
    let e = Etcd::new(&untrusted, TTL)
        .unwrap()
        .open_lease(once())
        .await
        .expect_err("an unknown CA");
    assert!(e.to_string().starts_with("TLS with etcd at"), "{e}");

    // A missing file is reported before any request.
    let flags = EtcdFlags {
        cacert: Some(dir.path().join("missing.pem")),
        ..EtcdFlags::default()
    };
    let config = EtcdConfig::resolve(&flags, env(true)).unwrap();
    let e = Etcd::new(&config, TTL).expect_err("a missing CA file");
    assert!(e.contains("missing.pem"), "{e}");
}

/// TLS spoken to etcd's plain port (an `https://` endpoint, or a CA file
/// that turns a bare one into https) is a TLS failure, not an unreachable
/// etcd: the fix is the scheme, not starting etcd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_a_plain_port_says_tls_failed() {
    let https = etcd().endpoint.replace("http://", "https://");
    let e = says_tls_failed(&https).await;
    assert!(e.to_string().starts_with("TLS with etcd at"), "{e}");
    assert!(!e.to_string().contains('\n'), "{e}");
}

/// Opens a lease at `endpoint`, which must fail as TLS failing, with a hint
/// at the scheme.
async fn says_tls_failed(endpoint: &str) -> EtcdError {
    let config = EtcdConfig::plain(&[endpoint]).unwrap();
    let e = Etcd::new(&config, TTL)
        .unwrap()
        .open_lease(once())
        .await
        .expect_err("TLS to a port without it");
    assert!(matches!(e, EtcdError::Tls { .. }), "{e:?}");
    assert!(e.to_string().contains("scheme"), "{e}");
    e
}

/// A port that resets our handshake, rather than ending it, is TLS spoken
/// to a port without it too: etcd's plain port does either, depending on
/// whether it closes before or after it has read the whole ClientHello.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_reset_says_tls_failed() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            // Closing with the ClientHello unread makes the kernel reset.
            let _ = stream.peek(&mut [0; 1]);
            drop(stream);
        }
    });
    says_tls_failed(&format!("https://127.0.0.1:{port}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_without_a_leader_is_transient_and_loses_nothing() {
    let mut members = cluster(2);
    let stopped = members.pop().unwrap();
    let survivor = members.pop().unwrap();
    let config = EtcdConfig::plain(&[&survivor.endpoint]).unwrap();
    let etcd = Etcd::new(&config, Duration::from_secs(30)).unwrap();
    let lease = lease(&etcd).await;
    let mut claim = take(&etcd, &lease, &lock("no-leader"), "v").await;
    drop(stopped);
    // Until the survivor notices the leader is gone, a keepalive may
    // still succeed; then every renewal fails without a verdict.
    let until = tokio::time::Instant::now() + Duration::from_secs(30);
    let why = loop {
        match lease.renew(Duration::from_secs(3)).await {
            Renewal::Confirmed { .. } => {
                assert!(
                    tokio::time::Instant::now() < until,
                    "the cluster kept a leader"
                );
            }
            Renewal::Failed(why) => break why,
            Renewal::Gone(why) => panic!("a leaderless cluster gave a verdict: {why}"),
        }
    };
    assert!(!why.contains('\n'), "{why}");
    eprintln!("renewal without a leader: {why}");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), claim.watch())
            .await
            .is_err(),
        "a leaderless cluster reported a loss"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_names_the_holder_and_leaves_nothing() {
    let etcd = engine(HELD);
    let key = unique("timeout");
    let holder_lease = lease(&etcd).await;
    let claim = take(&etcd, &holder_lease, &lock(&key), "holder").await;
    let lease = lease(&etcd).await;
    let wait = Wait::Until(Instant::now() + Duration::from_millis(300));
    match etcd.acquire(&lease, &lock(&key), "w", wait).await {
        Ok(Acquisition::Busy { holder }) => assert_eq!(holder.as_deref(), Some("holder")),
        other => panic!("a held lock within the timeout: {other:?}"),
    }
    assert_eq!(contenders(&etcd, &key).await, [claim.key()]);
    // The same lease may try again, and gets the lock once it is free.
    claim.release().await.unwrap();
    let mine = take(&etcd, &lease, &lock(&key), "w").await;
    mine.release().await.unwrap();
    lease.close().await;
    holder_lease.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holding_watch_resumes_on_another_member_without_missing_a_deletion() {
    let mut members = cluster(3);
    let endpoints: Vec<&str> = members.iter().map(|m| m.endpoint.as_str()).collect();
    let etcd = Etcd::new(&EtcdConfig::plain(&endpoints).unwrap(), HELD).unwrap();
    let lease = lease(&etcd).await;
    let mut claim = take(&etcd, &lease, &lock("resume"), "v").await;
    // Opens the watch on the first member, which sees nothing yet.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), claim.watch())
            .await
            .is_err(),
        "a loss before anything happened"
    );
    drop(members.remove(0));
    // The deletion happens while our watch is down; resuming from the
    // revision it had seen must still report it.
    let other = members[0].endpoint.clone();
    run_ok(
        etcdctl_at(&other).args(["lease", "revoke", &format!("{:x}", lease.id())]),
        &["lease", "revoke"],
    );
    let why = tokio::time::timeout(Duration::from_secs(20), claim.watch())
        .await
        .expect("the loss, from another member");
    assert!(why.is_verdict(), "{why:?}");
    assert!(why.to_string().contains("deleted"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_history_is_no_loss_but_a_deletion_still_is() {
    // Compaction would break other tests' etcdctl watches: an etcd of our own.
    let server = private(&[]);
    let ctl = |args: &[&str]| run_ok(etcdctl_at(&server.endpoint).args(args), args);
    let config = EtcdConfig::plain(&[&server.endpoint]).unwrap();
    let etcd = Etcd::new(&config, HELD).unwrap();
    let lease = lease(&etcd).await;
    let mut claim = take(&etcd, &lease, &lock("compacted"), "v").await;
    for n in 0..3 {
        ctl(&["put", "other", &n.to_string()]);
    }
    let revision = etcd
        .client()
        .range(&Range::key(b"other"))
        .await
        .unwrap()
        .revision;
    ctl(&["compact", &revision.to_string()]);
    // Our watch starts after the revision we acquired at, now compacted
    // away: etcd cancels it, and we find our key unchanged.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), claim.watch())
            .await
            .is_err(),
        "compaction reported as a loss"
    );
    ctl(&["lease", "revoke", &format!("{:x}", lease.id())]);
    let why = tokio::time::timeout(Duration::from_secs(10), claim.watch())
        .await
        .expect("the loss after compaction");
    assert!(why.is_verdict(), "{why:?}");
    assert!(why.to_string().contains("deleted"), "{why}");
}

/// Letting go of a lock or a slot is one write: revoking the lease deletes
/// our key with it. A delete and then a revoke were two, and the waiter the
/// delete woke read (linearizably) behind the revoke, on every handover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn letting_go_is_one_write_that_takes_the_key_and_the_lease() {
    // Counting etcd's raft entries needs an etcd nobody else writes to.
    let server = private(&[]);
    let raft_index = || {
        let args = ["endpoint", "status", "-w", "json"];
        let status = run_ok(etcdctl_at(&server.endpoint).args(args), &args);
        let status: serde_json::Value = serde_json::from_str(&status).unwrap();
        status[0]["Status"]["raftIndex"]
            .as_u64()
            .unwrap_or_else(|| panic!("no raftIndex in {status}"))
    };
    let config = EtcdConfig::plain(&[&server.endpoint]).unwrap();
    let etcd = Etcd::new(&config, HELD).unwrap();
    let targets = [
        lock("one-write/lock"),
        Target::Slot {
            prefix: "one-write/slots".into(),
            limit: 2,
        },
    ];
    for target in targets {
        let lease = lease(&etcd).await;
        let id = lease.id();
        let claim = take(&etcd, &lease, &target, "v").await;
        let before = raft_index();
        Etcd::release_and_close(claim, lease).await.unwrap();
        assert_eq!(raft_index() - before, 1, "{target:?}: writes to let go");
        let left = etcd
            .client()
            .range(&Range::prefix(b"one-write/"))
            .await
            .unwrap();
        assert!(left.kvs.is_empty(), "{target:?}: left {:?}", left.kvs);
        let ttl = etcd.client().time_to_live(id).await.unwrap();
        assert_eq!(ttl, None, "{target:?}: the lease outlived the release");
    }
}

/// Unary requests of `method` (`Txn`, `Range`, `Watch` streams...) etcd at
/// `endpoint` has started, from its Prometheus metrics.
fn started(endpoint: &str, method: &str) -> u64 {
    use std::io::{Read, Write};
    let addr = endpoint.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).expect("etcd's metrics");
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let label = format!("grpc_method=\"{method}\"");
    text.lines()
        .filter(|line| line.starts_with("grpc_server_started_total{") && line.contains(&label))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// A waiter next in line holds once its predecessor's deletion reaches its
/// watch, with no request after the wake-up: its watch covers its own key
/// too, so the deletion also tells it that it still exists (etcd's own
/// mutex reads the prefix and its key after the wake-up, two round trips
/// on every handover's path).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_in_line_holds_with_no_request_after_the_wake_up() {
    // Counting etcd's requests needs an etcd nobody else talks to.
    let server = private(&[]);
    let config = EtcdConfig::plain(&[&server.endpoint]).unwrap();
    let etcd = Etcd::new(&config, HELD).unwrap();
    let target = lock("next-in-line");
    let first = lease(&etcd).await;
    let holder = take(&etcd, &first, &target, "first").await;
    let watches = started(&server.endpoint, "Watch");
    let waiter = {
        let (etcd, target) = (etcd.clone(), target.clone());
        tokio::spawn(async move {
            let lease = lease(&etcd).await;
            let claim = take(&etcd, &lease, &target, "second").await;
            (claim, lease)
        })
    };
    // Parked once its watch is open.
    eventually("the waiter's watch", async || {
        started(&server.endpoint, "Watch") > watches
    })
    .await;
    let requests = || started(&server.endpoint, "Txn") + started(&server.endpoint, "Range");
    let before = requests();
    let fence = holder.fence();
    Etcd::release_and_close(holder, first).await.unwrap();
    let (claim, lease) = waiter.await.expect("the waiter");
    assert_eq!(
        requests() - before,
        0,
        "reads or transactions between the release and the waiter's hold"
    );
    assert!(claim.fence() > fence, "{} after {fence}", claim.fence());
    Etcd::release_and_close(claim, lease).await.unwrap();
}

/// A waiter whose own key is deleted while it waits never holds, though
/// the one contender ahead of it leaves: it hears of its key's deletion on
/// the same watch that reports its predecessor's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_key_is_deleted_never_holds() {
    let etcd = engine(HELD);
    let key = unique("deleted-waiter");
    let target = lock(&key);
    let first = lease(&etcd).await;
    let holder = take(&etcd, &first, &target, "first").await;
    let waiter = {
        let (etcd, target) = (etcd.clone(), target.clone());
        tokio::spawn(async move {
            let lease = lease(&etcd).await;
            let got = etcd.acquire(&lease, &target, "second", patient()).await;
            lease.close().await;
            got.map(|acquired| matches!(acquired, Acquisition::Held(_)))
        })
    };
    wait_contenders(&etcd, &key, 2).await;
    let mine = contenders(&etcd, &key).await.pop().unwrap();
    etcd.client()
        .delete(mine.as_bytes(), Duration::from_secs(5))
        .await
        .unwrap();
    Etcd::release_and_close(holder, first).await.unwrap();
    match waiter.await.expect("the waiter") {
        Err(EtcdError::KeyGone { .. }) => {}
        other => panic!("the waiter whose key was deleted: {other:?}"),
    }
}
