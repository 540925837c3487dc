//! `--backend zookeeper` end to end beside its engine's own clients and
//! under its faults: Curator (`InterProcessMutex`, compiled at test time
//! against Debian's jars) and kazoo (from PyPI, into target/test-engines by
//! .ci/deps) as rivals both ways; a default kazoo rival counted and warned
//! of; the holder's lockrun frozen; the holder's server stopped, the
//! ensemble's leader killed and its quorum lost in a 3-member ensemble;
//! fences across holders and across a deleted directory. Every overlap is
//! measured with the children's own timestamps.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::engines::zookeeper::support::{self as zk_support, TestZk};
use crate::link::Link;
use crate::procs::{self, pid_alive, wait_until};
use crate::support::{assert_exit, bare, max_overlap, run, Contender};

/// A lockrun contender on ZooKeeper at `hosts`.
fn zk_lockrun(hosts: &str, args: &[&str]) -> Contender {
    Contender::lockrun(zk_support::lockrun(hosts, args))
}

/// As [`zk_lockrun`], its log kept ([`Contender::log`]).
fn zk_lockrun_logged(hosts: &str, args: &[&str]) -> Contender {
    Contender::lockrun_logged(zk_support::lockrun(hosts, args))
}

/// Curator's `InterProcessMutex` on `path`, as a contender.
fn curator_rival(hosts: &str, path: &str) -> Contender {
    curator_with(hosts, path, &[])
}

/// `extra`: the semaphore's limit, for `InterProcessSemaphoreV2`.
fn curator_with(hosts: &str, path: &str, extra: &[&str]) -> Contender {
    Contender::other(|dir| {
        let mut cmd = Command::new("java");
        cmd.args(["-Xmx64m", "-XX:TieredStopAtLevel=1", "-cp"])
            .arg(curator_classpath())
            .args(["CuratorRival", hosts, path])
            .arg(dir)
            .args(extra);
        cmd
    })
}

/// kazoo's `Lock` on `path` (`mode`: `default` or `extra`, with
/// `extra_lock_patterns=["-lock-"]`), as a contender.
pub(crate) fn kazoo_rival(hosts: &str, path: &str, mode: &str) -> Contender {
    Contender::other(|dir| {
        let mut cmd = Command::new("python3");
        cmd.env("PYTHONPATH", kazoo_dir())
            .arg(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/integration/engines/zookeeper/rivals/kazoo_rival.py"),
            )
            .args([hosts, path])
            .arg(dir)
            .arg(mode);
        cmd
    })
}

/// Debian's Curator and ZooKeeper jars, and the folder of the compiled
/// rival (compiled once per source change, into target/).
fn curator_classpath() -> String {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let jars = [
        "curator-framework",
        "curator-client",
        "curator-recipes",
        "zookeeper",
        "zookeeper-jute",
        "guava",
        "slf4j-api",
        "slf4j-nop",
        "netty-handler",
        "netty-common",
        "netty-buffer",
        "netty-transport",
        "netty-codec",
        "netty-resolver",
        "netty-transport-native-epoll",
        "netty-transport-native-unix-common",
    ];
    let lib: Vec<String> = jars
        .iter()
        .map(|j| format!("/usr/share/java/{j}.jar"))
        .filter(|p| Path::new(p).exists())
        .collect();
    assert!(
        Path::new("/usr/share/java/curator-recipes.jar").exists(),
        "no Curator jars; apt-get install libcurator-recipes-java"
    );
    let lib = lib.join(":");
    let out = BUILT.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/integration/engines/zookeeper/rivals/CuratorRival.java");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("zk-curator-rival");
        let class = out.join("CuratorRival.class");
        let fresh = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
        if fresh(&class) < fresh(&src) {
            let built = Command::new("javac")
                .arg("-d")
                .arg(&out)
                .args(["-cp", &lib])
                .arg(&src)
                .output()
                .expect("javac runs (apt-get install default-jdk-headless)");
            assert!(
                built.status.success(),
                "javac CuratorRival: {}",
                String::from_utf8_lossy(&built.stderr)
            );
        }
        out
    });
    format!("{}:{lib}", out.display())
}

fn kazoo_dir() -> String {
    let dir = std::env::var("LOCKRUN_TEST_KAZOO_DIR").unwrap_or_default();
    assert!(
        Path::new(&dir).join("kazoo").exists(),
        "no kazoo in `{dir}`; .ci/deps installs it (pip install --target target/test-engines/kazoo kazoo==2.11.0)"
    );
    dir
}

/// Waits until `/DIR` has `n` contenders: they are all queued. A
/// contender is a child, or the children with one protection prefix
/// (`_c_<uuid>-`): a lockrun writer's `lock-` and `__WRIT__` nodes are one.
fn wait_queued(hosts: &str, dir: &str, n: usize) {
    let deadline = Instant::now() + procs::PATIENCE;
    loop {
        let now = zk_support::with_client(hosts, async |c| {
            c.list_children(&format!("/{dir}"))
                .await
                .map(|v| {
                    let mut owners: Vec<&str> = v
                        .iter()
                        .map(|c| match c.get(..40) {
                            Some(p) if p.starts_with("_c_") => p,
                            _ => c.as_str(),
                        })
                        .collect();
                    owners.sort();
                    owners.dedup();
                    owners.len()
                })
                .unwrap_or(0)
        });
        if now >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "/{dir} never had {n} contenders (has {now})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `first` holds, `second` queues behind it, `first` lets go, `second`
/// holds: never both, by their own timestamps.
fn one_after_the_other(
    hosts: &str,
    dir: &str,
    first: &mut Contender,
    second: &mut Contender,
    what: &str,
) -> (Output, Output) {
    first.wait_started(&format!("{what}: the first"));
    wait_queued(hosts, dir, 2);
    assert!(
        !second.started(),
        "{what}: the second held beside the first"
    );
    first.go();
    second.wait_started(&format!("{what}: the second"));
    second.go();
    let (a, b) = (first.finish(), second.finish());
    assert!(
        a.status.success(),
        "{what}: the first: {}",
        String::from_utf8_lossy(&a.stderr)
    );
    assert!(
        b.status.success(),
        "{what}: the second: {}",
        String::from_utf8_lossy(&b.stderr)
    );
    let spans = [first.span(), second.span()];
    assert_eq!(
        max_overlap(spans),
        1,
        "{what}: both held at once: {spans:?}"
    );
    (a, b)
}

/// Curator's `InterProcessReadWriteLock` and lockrun's `elect -s`
/// (issue #42): a Curator reader and a lockrun reader hold together; a
/// Curator writer and a lockrun reader exclude each other both ways, and a
/// lockrun writer waits for a Curator reader.
#[test]
fn zookeeper_curator_read_write_lock_and_lockrun_readers() {
    let hosts = zk_support::zk().addr.clone();
    let key = zk_support::unique("curator-rw");
    let path = format!("/{key}");
    let mut reader = curator_with(&hosts, &path, &["read"]);
    reader.wait_started("Curator's reader");
    let mut ours = zk_lockrun(&hosts, &["elect", "-s", "--ttl", "4s", &key]);
    ours.wait_started("lockrun's reader beside Curator's");
    let output = run(&mut bare([
        "--backend",
        "zookeeper",
        "--zk-hosts",
        &hosts,
        "leader",
        "--json",
        &key,
    ]));
    let shown: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(shown["kind"], "shared", "{shown}");
    assert_eq!(
        shown["holders"].as_array().map(Vec::len),
        Some(2),
        "{shown}"
    );
    ours.go();
    assert!(ours.finish().status.success());
    // A lockrun writer queues behind Curator's reader.
    let mut writer = zk_lockrun(&hosts, &["elect", "--ttl", "4s", &key]);
    one_after_the_other(
        &hosts,
        &key,
        &mut reader,
        &mut writer,
        "Curator's reader, lockrun's writer",
    );
    // Curator's writer and lockrun's reader, each way round.
    let mut curator = curator_with(&hosts, &path, &["write"]);
    curator.wait_started("Curator's writer");
    let mut ours = zk_lockrun(&hosts, &["elect", "-s", "--ttl", "4s", &key]);
    one_after_the_other(
        &hosts,
        &key,
        &mut curator,
        &mut ours,
        "Curator's writer first",
    );
    let mut ours = zk_lockrun(&hosts, &["elect", "-s", "--ttl", "4s", &key]);
    ours.wait_started("lockrun's reader");
    let mut curator = curator_with(&hosts, &path, &["write"]);
    one_after_the_other(
        &hosts,
        &key,
        &mut ours,
        &mut curator,
        "lockrun's reader first",
    );
}

#[test]
fn zookeeper_curator_and_lockrun_exclude_each_other() {
    let hosts = zk_support::zk().addr.clone();
    let key = zk_support::unique("curator");
    let mut curator = curator_rival(&hosts, &format!("/{key}"));
    curator.wait_started("Curator");
    let mut lockrun = zk_lockrun(&hosts, &["elect", "--ttl", "4s", &key]);
    one_after_the_other(&hosts, &key, &mut curator, &mut lockrun, "Curator first");
    let mut lockrun = zk_lockrun(&hosts, &["elect", "--ttl", "4s", &key]);
    lockrun.wait_started("lockrun");
    let mut curator = curator_rival(&hosts, &format!("/{key}"));
    one_after_the_other(&hosts, &key, &mut lockrun, &mut curator, "lockrun first");
}

#[test]
fn zookeeper_kazoo_with_lockruns_pattern_and_lockrun_exclude_each_other() {
    let hosts = zk_support::zk().addr.clone();
    let key = zk_support::unique("kazoo");
    let mut kazoo = kazoo_rival(&hosts, &format!("/{key}"), "extra");
    kazoo.wait_started("kazoo");
    let mut lockrun = zk_lockrun(&hosts, &["elect", "--ttl", "4s", &key]);
    one_after_the_other(&hosts, &key, &mut kazoo, &mut lockrun, "kazoo first");
    let mut lockrun = zk_lockrun(&hosts, &["elect", "--ttl", "4s", &key]);
    lockrun.wait_started("lockrun");
    let mut kazoo = kazoo_rival(&hosts, &format!("/{key}"), "extra");
    one_after_the_other(&hosts, &key, &mut lockrun, &mut kazoo, "lockrun first");
}

/// A default kazoo client (`__lock__` nodes, blind to Curator's) still
/// keeps lockrun out, and lockrun says what the kazoo side must change, once,
/// at the default verbosity of a one-off run (it bears on the promise for
/// Curator clients on the same lock).
#[test]
fn zookeeper_a_default_kazoo_rival_is_counted_and_warned_of() {
    let hosts = zk_support::zk().addr.clone();
    let key = zk_support::unique("kazoo-default");
    let mut kazoo = kazoo_rival(&hosts, &format!("/{key}"), "default");
    kazoo.wait_started("kazoo");
    let mut lockrun = zk_lockrun(&hosts, &["elect", "--ttl", "4s", &key]);
    let (_, out) = one_after_the_other(
        &hosts,
        &key,
        &mut kazoo,
        &mut lockrun,
        "default kazoo first",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("extra_lock_patterns=[\"-lock-\"]")
            && stderr.matches("a kazoo client").count() == 1,
        "lockrun warns once of the kazoo client: {stderr}"
    );
}

/// The holder's lockrun frozen (SIGSTOP): its session is touched no more,
/// and its guard kills the child before the server can expire the session
/// and let the waiting rival in.
#[test]
fn zookeeper_a_frozen_holder_is_stopped_before_a_rival_holds() {
    let hosts = zk_support::zk().addr.clone();
    let key = zk_support::unique("frozen");
    let mut holder = zk_lockrun(&hosts, &["elect", "--ttl", "2s", &key]);
    holder.wait_started("the holder");
    let mut rival = zk_lockrun(&hosts, &["elect", "--ttl", "2s", &key]);
    wait_queued(&hosts, &key, 2);
    let child = holder.child_pid();
    let stopped = Instant::now();
    holder.signal(Signal::SIGSTOP);
    assert!(
        wait_until(procs::deadline(), || !pid_alive(child)),
        "the frozen holder's child kept running"
    );
    eprintln!(
        "the frozen holder's child was gone {:?} after SIGSTOP (--ttl 2s)",
        stopped.elapsed()
    );
    rival.wait_started("the rival");
    holder.signal(Signal::SIGCONT);
    let out = holder.finish();
    assert_exit(&out, 124, "the frozen holder", String::new);
    rival.go();
    assert_exit(&rival.finish(), 0, "the rival", String::new);
    let spans = [holder.span(), rival.span()];
    assert_eq!(max_overlap(spans), 1, "both ran at once: {spans:?}");
    assert!(holder.fences()[0].0 < rival.fences()[0].0, "fences grow");
}

/// czxid, not the sequence number: the fence grows from holder to holder
/// and across the lock's directory deleted (as Curator's container reaper
/// does), where the node's sequence starts over at 0000000000.
#[test]
fn zookeeper_fences_grow_across_holders_and_a_deleted_directory() {
    let hosts = zk_support::zk().addr.clone();
    let key = zk_support::unique("fences");
    let mut seen = Vec::new();
    for round in 0..3 {
        if round == 2 {
            zk_support::with_client(&hosts, async |c| {
                c.delete(&format!("/{key}"), None)
                    .await
                    .expect("the empty directory deleted")
            });
        }
        let mut holder = zk_lockrun(&hosts, &["elect", "--ttl", "2s", &key]);
        holder.wait_started("a holder");
        holder.go();
        assert_exit(&holder.finish(), 0, "a holder", String::new);
        seen.extend(holder.fences());
    }
    let fences: Vec<u64> = seen.iter().map(|(f, _)| *f).collect();
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences grow: {seen:?}"
    );
    assert!(
        seen[2].1.ends_with("-lock-0000000000"),
        "the sequence restarted: {seen:?}"
    );
    // A writer's two nodes (`lock-`, `__WRIT__`) take two numbers.
    assert!(seen[1].1.ends_with("-lock-0000000002"), "{seen:?}");
}

/// The member `hosts` names that the holder's session is on, by `cons`.
fn member_serving(members: &[TestZk]) -> Option<usize> {
    members.iter().position(|m| {
        zk_support::four_letters(&m.addr, "cons")
            .is_some_and(|text| text.lines().any(|l| l.contains("sid=0x")))
    })
}

/// A 3-member ensemble under a holder (`--ttl 6s`), one fault after the
/// other: the member it is connected to stopped (the client moves on, the
/// hold is kept), the leader killed (a new one re-arms every session, the
/// hold is kept), then the quorum lost (the child is stopped, and only then
/// can the waiting rival hold). A `--no-wait` probe after each kept hold
/// finds the lock taken.
#[test]
fn zookeeper_ensemble_faults_keep_the_hold_where_they_can_and_never_overlap() {
    let members = zk_support::ensemble();
    let hosts = zk_support::hosts(&members);
    let key = zk_support::unique("ensemble");
    let mut holder = zk_lockrun(&hosts, &["-vv", "elect", "--ttl", "6s", &key]);
    holder.wait_started("the holder");
    // A one-off run says at once that it cannot reach an ensemble that has
    // just lost a member and is still taking clients back: the probe asks
    // again until one is taken (a lost hold shows as 0, never as that).
    let probe = |what: &str| {
        let until = Instant::now() + Duration::from_secs(20);
        let out = loop {
            let out = run(&mut zk_support::lockrun(
                &hosts,
                &["elect", "--no-wait", "--ttl", "6s", &key, "--", "true"],
            ));
            let unreachable = out.status.code() == Some(125)
                && String::from_utf8_lossy(&out.stderr).contains("cannot reach ZooKeeper");
            if !unreachable || Instant::now() > until {
                break out;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        assert_exit(&out, 75, what, String::new);
    };

    // 1. The holder's member stopped: the client moves to another.
    let on = member_serving(&members).expect("the holder's member");
    eprintln!("the holder is on member {on}, a {:?}", members[on].mode());
    members[on].signal(Signal::SIGSTOP);
    let beats = holder.beats().len();
    // Two session timeouts: the session would have been lost by now.
    std::thread::sleep(Duration::from_secs(12));
    assert!(
        holder.beats().len() > beats + 100,
        "the holder's child went on"
    );
    assert!(
        pid_alive(holder.child_pid()),
        "the hold was kept with its member stopped"
    );
    probe("the lock is held after the holder's member stopped");
    members[on].signal(Signal::SIGCONT);

    // 2. The leader killed: a new one is elected among the other two.
    let leader = (0..3)
        .find(|&i| members[i].mode().as_deref() == Some("leader"))
        .expect("a leader");
    eprintln!("killing the leader, member {leader}");
    members[leader].signal(Signal::SIGKILL);
    assert!(
        wait_until(procs::deadline(), || (0..3).any(
            |i| i != leader && members[i].mode().as_deref() == Some("leader")
        )),
        "no new leader"
    );
    assert!(
        pid_alive(holder.child_pid()),
        "the hold was kept through the election"
    );
    probe("the lock is held after the leader changed");

    // 3. The quorum lost: one of the two left stopped.
    let mut rival = zk_lockrun(&hosts, &["elect", "--ttl", "6s", &key]);
    wait_queued(&hosts, &key, 2);
    let other = (0..3).find(|&i| i != leader).unwrap();
    let child = holder.child_pid();
    let lost = Instant::now();
    members[other].signal(Signal::SIGSTOP);
    assert!(
        wait_until(procs::deadline(), || !pid_alive(child)),
        "the child ran on without a quorum"
    );
    eprintln!(
        "without a quorum the child was gone after {:?} (--ttl 6s)",
        lost.elapsed()
    );
    members[other].signal(Signal::SIGCONT);
    rival.wait_started("the rival after the quorum came back");
    rival.go();
    let out = holder.finish();
    assert_exit(&out, 124, "the holder without a quorum", String::new);
    assert_exit(&rival.finish(), 0, "the rival", String::new);
    let spans = [holder.span(), rival.span()];
    assert_eq!(max_overlap(spans), 1, "both ran at once: {spans:?}");
    assert!(holder.fences()[0].0 < rival.fences()[0].0, "fences grow");
}

/// The holder's follower cut off (SIGSTOP) right after it answered a
/// renewal's `sync`: the follower had noted the session's touch but not yet
/// reported it to the leader (it does so in its answer to the leader's next
/// ping, every half tick), so the leader counts the timeout from an older
/// touch, and a rival on another member holds up to half a tick and a
/// twelfth of the timeout sooner than the timeout after the renewal's send.
/// With `--clock-rate-error 0.1%` the margin is a few tens of ms: only
/// the budget's allowance for that gap (`--zk-tick-time`) stops the child
/// before the rival holds. The holder is connected to that follower alone,
/// so it cannot move on.
#[test]
fn zookeeper_a_follower_cut_off_after_a_renewal_stops_the_child_before_a_rival_holds() {
    let members = zk_support::ensemble();
    let leader = (0..3)
        .find(|&i| members[i].mode().as_deref() == Some("leader"))
        .expect("a leader");
    let follower = (0..3).find(|&i| i != leader).unwrap();
    let key = zk_support::unique("follower-gap");
    let args = [
        "-vv",
        "elect",
        "--ttl",
        "6s",
        "--clock-rate-error",
        "0.1%",
        "--kill-timeout",
        "0s",
        &key,
    ];
    let mut holder = zk_lockrun_logged(&members[follower].addr, &args);
    holder.wait_started("the holder");
    let mut rival = zk_lockrun(&members[leader].addr, &["elect", "--ttl", "6s", &key]);
    wait_queued(&members[leader].addr, &key, 2);
    // Right after the next renewal is answered (its log line), before the
    // follower's next report to the leader.
    let renewals = |h: &Contender| h.log().matches("lease renewed").count();
    let before = renewals(&holder);
    assert!(
        wait_until(procs::deadline(), || renewals(&holder) > before),
        "the holder never renewed: {}",
        holder.log()
    );
    members[follower].signal(Signal::SIGSTOP);
    let cut = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    rival.wait_started("the rival");
    members[follower].signal(Signal::SIGCONT);
    let out = holder.finish();
    assert_exit(&out, 124, "the holder cut off", String::new);
    rival.go();
    assert_exit(&rival.finish(), 0, "the rival", String::new);
    let (h, r) = (holder.span(), rival.span());
    let ms = |t: u128| (t as i128 - cut as i128) / 1_000_000;
    eprintln!(
        "--ttl 6s, tick 200ms: the holder's child last ran {} ms after the cut, the rival first ran {} ms after it",
        ms(h.1),
        ms(r.0)
    );
    assert_eq!(max_overlap([h, r]), 1, "both ran at once: {h:?} {r:?}");
}

/// A create whose answer is lost (ZOOKEEPER-1262): the relay passes the
/// create of lockrun's node on to the server, then holds everything back
/// until the client gives up the silent connection and opens another, and
/// drops the answer. The client fails the create with the reason it gave up
/// (not `ConnectionLoss`, which lockrun alone looked for: it exited 125)
/// and goes on with the same session; lockrun finds its node by its uuid and
/// holds with it, where creating a second one would queue it behind its own
/// first node for as long as the session lives.
#[test]
fn zookeeper_a_create_whose_answer_is_lost_holds_with_the_node_it_made() {
    let zk = zk_support::zk();
    let key = zk_support::unique("lost-create");
    // The directory first, so that the create the relay lets through is
    // the one that makes lockrun's node.
    zk_support::with_client(&zk.addr, async |c| {
        let options = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all());
        c.mkdir(&format!("/{key}"), &options).await.unwrap()
    });
    let link = Link::new(&zk.addr);
    link.freeze_after(&format!("{key}/_c_"));
    let mut holder = zk_lockrun_logged(&link.http_addr(), &["-vv", "elect", "--ttl", "4s", &key]);
    // The node is made, and the answer saying so is held in the relay.
    wait_queued(&zk.addr, &key, 1);
    let list = |hosts: &str, key: &str| {
        zk_support::with_client(hosts, async |c| {
            c.list_children(&format!("/{key}")).await.unwrap()
        })
    };
    let made = list(&zk.addr, &key);
    assert!(
        wait_until(procs::deadline(), || link.held_answers() > 0),
        "the create's answer never came back to the relay"
    );
    // The client gives up the silent server itself (a sixth of the
    // timeout) and tries again: only then does the relay let it through,
    // on a new connection, the old one cut with the answer in it.
    assert!(
        wait_until(procs::deadline(), || link.connections() > 1),
        "the client never gave up the silent connection: {}",
        holder.log()
    );
    link.thaw();
    assert!(
        wait_until(procs::deadline(), || holder.started()),
        "the holder whose create's answer was lost never held: {}",
        holder.log()
    );
    let mut now = list(&zk.addr, &key);
    let mut made = made;
    now.sort();
    made.sort();
    assert_eq!(
        now, made,
        "the nodes of ours the lost create made, and no others (a writer's `lock-` and `__WRIT__`)"
    );
    let node = &holder.fences()[0].1;
    let lock_node = made
        .iter()
        .find(|n| n.contains("-lock-"))
        .expect("a `lock-` node");
    assert!(
        node.ends_with(lock_node.as_str()),
        "{node} is the node the lost create made: {made:?}"
    );
    holder.go();
    assert_exit(&holder.finish(), 0, "the holder", String::new);
}

/// Curator's `InterProcessSemaphoreV2` and lockrun's semaphore share the
/// layout: two of each, limit 2, never more than two children at once.
#[test]
fn zookeeper_curator_semaphore_and_lockrun_share_the_limit() {
    let hosts = zk_support::zk().addr.clone();
    let key = zk_support::unique("curator-sem");
    let path = format!("/{key}");
    // lockrun first, so that the limit is stored before Curator comes.
    let first = zk_lockrun(&hosts, &["semaphore", "--limit", "2", "--ttl", "4s", &key]);
    first.wait_started("the first lockrun");
    let second = curator_with(&hosts, &path, &["2"]);
    second.wait_started("Curator");
    let mut waiting = vec![
        curator_with(&hosts, &path, &["2"]),
        zk_lockrun(&hosts, &["semaphore", "--limit", "2", "--ttl", "4s", &key]),
    ];
    // Both queue: the admission lock and the leases say so.
    wait_queued(&hosts, &format!("{key}/locks"), 1);
    assert!(
        waiting.iter().all(|c| !c.started()),
        "a third held beside two"
    );
    let mut all = vec![first, second];
    all.append(&mut waiting);
    for c in &all {
        c.go();
    }
    for c in &mut all {
        let out = c.finish();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let spans: Vec<_> = all.iter().map(Contender::span).collect();
    assert!(
        max_overlap(spans.iter().copied()) <= 2,
        "more than 2 at once: {spans:?}"
    );
}

/// A bad setting: the flags, the variables, the status, what the line says.
type BadCase<'a> = (Vec<String>, Vec<(&'a str, &'a str)>, i32, &'a str);

/// Every bad setting: one line, the documented status, and nothing
/// written; an unreachable server is named with its port, at once.
#[test]
fn zookeeper_bad_settings_are_one_line_and_write_nothing() {
    let hosts = zk_support::zk().addr.clone();
    let key = zk_support::unique("bad");
    let closed = format!("127.0.0.1:{}", crate::procs::free_port());
    let no_chroot = format!("{hosts}/{}", zk_support::unique("no-chroot"));
    // A password file others may read, and a FIFO (attack review).
    let files = crate::support::scratch();
    let open_auth = files.path().join("open-auth");
    std::fs::write(&open_auth, "u:p\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&open_auth, std::fs::Permissions::from_mode(0o644)).unwrap();
    let fifo = files.path().join("fifo-auth");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let auth = |path: &Path| {
        vec![
            "--zk-hosts".to_string(),
            hosts.clone(),
            "--zk-auth-file".into(),
            path.display().to_string(),
        ]
    };
    let cases: Vec<BadCase> = vec![
        (
            auth(&open_auth),
            vec![],
            125,
            "readable or writable by others",
        ),
        (auth(&fifo), vec![], 125, "not a regular file"),
        (
            vec!["--zk-hosts".into(), "127.0.0.1".into()],
            vec![],
            125,
            "without a port",
        ),
        (
            vec!["--zk-hosts".into(), format!("{hosts}/a/")],
            vec![],
            125,
            "not a ZooKeeper path",
        ),
        (
            vec![],
            vec![("ZOOKEEPER_HOSTS", "")],
            2,
            "ZOOKEEPER_HOSTS is set but empty",
        ),
        (
            vec!["--zk-hosts".into(), hosts.clone()],
            vec![("ZOOKEEPER_AUTH", "nopassword")],
            125,
            "user:password",
        ),
        (
            vec![
                "--zk-hosts".into(),
                hosts.clone(),
                "--zk-auth-file".into(),
                "/nonexistent".into(),
            ],
            vec![],
            125,
            "--zk-auth-file",
        ),
        (
            vec!["--zk-hosts".into(), closed.clone()],
            vec![],
            125,
            closed.as_str(),
        ),
        (vec!["--zk-hosts".into(), no_chroot], vec![], 125, "chroot"),
        (
            vec![
                "--zk-hosts".into(),
                hosts.clone(),
                "--ttl".into(),
                "40s".into(),
            ],
            vec![],
            2,
            "at most 30s",
        ),
        // The tick: none, empty, or one that leaves the grace no room.
        (
            vec![
                "--zk-hosts".into(),
                hosts.clone(),
                "--ttl".into(),
                "4s".into(),
                "--zk-tick-time".into(),
                "0s".into(),
            ],
            vec![],
            2,
            "not a tick",
        ),
        (
            vec![
                "--zk-hosts".into(),
                hosts.clone(),
                "--ttl".into(),
                "4s".into(),
                "--zk-tick-time".into(),
                "".into(),
            ],
            vec![],
            2,
            "--zk-tick-time",
        ),
        (
            vec![
                "--zk-hosts".into(),
                hosts.clone(),
                "--ttl".into(),
                "4s".into(),
                "--zk-tick-time".into(),
                "2s".into(),
                "--kill-timeout".into(),
                "3s".into(),
            ],
            vec![],
            2,
            "--ttl 4s and --zk-tick-time 2s",
        ),
    ];
    for (flags, env, code, says) in cases {
        let mut cmd = bare(["--backend", "zookeeper"]);
        let (global, ttl) = match flags.iter().position(|f| f == "--ttl") {
            Some(at) => (&flags[..at], &flags[at..]),
            None => (&flags[..], &[][..]),
        };
        cmd.args(global)
            .arg("elect")
            .args(ttl)
            .args([&key, "--", "true"]);
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let started = Instant::now();
        let out = run(&mut cmd);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{flags:?} {env:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{flags:?}: {stderr}");
        assert!(stderr.contains(says), "{flags:?} names `{says}`: {stderr}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{flags:?} took {:?}",
            started.elapsed()
        );
    }
    let key2 = zk_support::unique("bad-key");
    let out = run(
        bare(["--backend", "zookeeper", "--zk-hosts", &hosts]).args([
            "elect",
            "zookeeper/quota",
            "--",
            "true",
        ]),
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left = zk_support::tree(&hosts, key.split('/').next().unwrap());
    assert!(
        !left
            .iter()
            .any(|p| p.contains(&key) || p.contains("no-chroot") || p.contains(&key2)),
        "something was written: {left:?}"
    );
}

/// Curator's cooperative revocation: `__REVOKE__` written into the holder's
/// node (what `Revoker.attemptRevoke` does) stops the command with its
/// grace, as an operator's release on Consul does, and lockrun exits 124
/// having deleted its node.
#[test]
fn zookeeper_a_revoke_request_stops_the_holder_with_its_grace() {
    let hosts = zk_support::zk().addr.clone();
    let key = zk_support::unique("revoke");
    let mut holder = zk_lockrun(&hosts, &["elect", "--ttl", "4s", &key]);
    holder.wait_started("the holder");
    let node = holder.fences()[0].1.clone();
    zk_support::with_client(&hosts, async |c| {
        c.set_data(&node, b"__REVOKE__", None)
            .await
            .expect("written")
    });
    let out = holder.finish();
    assert_exit(&out, 124, "the revoked holder", String::new);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("__REVOKE__"), "{stderr}");
    assert!(
        stderr.contains("status 143"),
        "SIGTERM, not SIGKILL: {stderr}"
    );
    assert!(
        zk_support::tree(&hosts, &key).is_empty(),
        "its node is gone"
    );
}

/// `lockrun list` (#43) shows a Curator mutex holder under the prefix,
/// by its node for want of a value.
#[test]
fn list_shows_a_curator_holder() {
    let hosts = zk_support::zk().addr.clone();
    let prefix = zk_support::unique("list");
    let mut curator = curator_rival(&hosts, &format!("/{prefix}/c"));
    curator.wait_started("Curator");
    let mut cmd = bare(["--backend", "zookeeper", "--zk-hosts", &hosts]);
    let output = run(cmd.args(["list", "--json", &prefix]));
    assert_exit(&output, 0, "list while Curator holds", String::new);
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{output:?}");
    assert_eq!(lines[0]["key"], format!("{prefix}/c"), "{output:?}");
    assert_eq!(
        lines[0]["holders"][0]["value"],
        serde_json::Value::Null,
        "{output:?}"
    );
    // --replace cannot ask Curator: one line, 125, Curator keeps its node.
    let mut cmd = bare(["--backend", "zookeeper", "--zk-hosts", &hosts]);
    let key = format!("{prefix}/c");
    let output = run(cmd.args(["elect", "--replace", &key, "--", "true"]));
    assert_exit(&output, 125, "--replace of a Curator holder", String::new);
    assert_eq!(
        String::from_utf8_lossy(&output.stderr).lines().count(),
        1,
        "{output:?}"
    );
    let mut cmd = bare(["--backend", "zookeeper", "--zk-hosts", &hosts]);
    let output = run(cmd.args(["leader", &key]));
    assert_exit(
        &output,
        0,
        "leader after the refused --replace",
        String::new,
    );
    curator.go();
    assert!(curator.finish().status.success());
    let mut cmd = bare(["--backend", "zookeeper", "--zk-hosts", &hosts]);
    let output = run(cmd.args(["list", &prefix]));
    assert_exit(&output, 1, "list once Curator let go", String::new);
}

/// A lockrun writer is seen by both of Curator's recipes (issue #42): its
/// `__WRIT__` node keeps Curator's read lock and write lock waiting, its
/// `lock-` node Curator's mutex; before, Curator's read lock held beside a
/// lockrun writer (a `lock-` node alone).
#[test]
fn zookeeper_curator_read_lock_waits_for_a_lockrun_writer() {
    let hosts = zk_support::zk().addr.clone();
    let key = zk_support::unique("curator-rw-writer");
    let path = format!("/{key}");
    for (side, what) in [
        (Some("read"), "lockrun's writer, Curator's reader"),
        (Some("write"), "lockrun's writer, Curator's writer"),
        (None, "lockrun's writer, Curator's mutex"),
    ] {
        let mut writer = zk_lockrun(&hosts, &["elect", "--ttl", "4s", &key]);
        writer.wait_started(what);
        let mut curator = curator_with(&hosts, &path, side.as_slice());
        one_after_the_other(&hosts, &key, &mut writer, &mut curator, what);
    }
}
