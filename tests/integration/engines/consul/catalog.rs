//! `--register-service`, against real Consul agents: the holder is in the
//! catalog (and Consul's DNS) only while it holds, gone before the next
//! holder's COMMAND starts, on the Consul backend and on others with a
//! Consul agent beside them; a frozen lockrun drops out through its TTL
//! check; bad inputs register nothing.

use std::net::UdpSocket;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::engines::consul::real::{self as real_consul, Agent};
use crate::engines::etcd::support::etcd;
use crate::engines::postgres::support::postgres;
use crate::engines::zookeeper::support::zk;
use crate::link::Link;
use crate::procs::{self, wait_until};
use crate::support::{bare, now_ns, run, scratch, Running};

/// What one look at the agent showed: when it was sent and answered (ns),
/// the catalog's ServiceIDs, the ports Consul's DNS answered (SRV, passing
/// instances only), and the health checks (ServiceID, status) with when
/// their own request was sent (a lost DNS datagram costs a look a second
/// before it).
#[derive(Debug, Clone)]
struct Look {
    sent: u128,
    answered: u128,
    checks_sent: u128,
    ids: Vec<String>,
    dns_ports: Vec<u16>,
    checks: Vec<(String, String)>,
}

impl Look {
    fn statuses(&self) -> Vec<&str> {
        self.checks.iter().map(|(_, s)| s.as_str()).collect()
    }

    /// Whether `suffix` (`-PID`) names a listed service, or one whose
    /// check passes.
    fn lists(&self, suffix: &str) -> bool {
        self.ids.iter().any(|id| id.ends_with(suffix))
    }

    fn passing(&self, suffix: &str) -> bool {
        self.checks
            .iter()
            .any(|(id, status)| id.ends_with(suffix) && status == "passing")
    }
}

/// Looks at service `name` on `agent` as fast as it answers, on its own
/// thread, until dropped.
struct Watcher {
    looks: Arc<Mutex<Vec<Look>>>,
    stop: Arc<AtomicBool>,
}

impl Watcher {
    fn start(agent: &Agent, name: &str) -> Watcher {
        Watcher::looking(agent, name, true)
    }

    /// Looks at the catalog and the checks alone: no DNS question, whose
    /// lost datagram would leave a second between two looks.
    fn without_dns(agent: &Agent, name: &str) -> Watcher {
        Watcher::looking(agent, name, false)
    }

    fn looking(agent: &Agent, name: &str, ask_dns: bool) -> Watcher {
        let looks = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (looks.clone(), stop.clone());
        let api = agent.api().with_timeout(Duration::from_secs(2));
        let dns = agent.dns_addr();
        let name = name.to_string();
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let sent = now_ns();
                let ids = api
                    .try_request("GET", &format!("/v1/catalog/service/{name}"), None, &[])
                    .ok()
                    .filter(|r| r.status == 200)
                    .and_then(|r| r.json().as_array().cloned())
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|e| e["ServiceID"].as_str().map(String::from))
                    .collect();
                let dns_ports = if ask_dns {
                    srv_ports(&dns, &format!("{name}.service.consul"))
                } else {
                    Vec::new()
                };
                let checks_sent = now_ns();
                let checks = api
                    .try_request("GET", &format!("/v1/health/checks/{name}"), None, &[])
                    .ok()
                    .filter(|r| r.status == 200)
                    .and_then(|r| r.json().as_array().cloned())
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|c| {
                        let id = c["ServiceID"].as_str()?.to_string();
                        Some((id, c["Status"].as_str()?.to_string()))
                    })
                    .collect();
                let answered = now_ns();
                l.lock().unwrap().push(Look {
                    sent,
                    answered,
                    checks_sent,
                    ids,
                    dns_ports,
                    checks,
                });
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Watcher { looks, stop }
    }

    fn looks(&self) -> Vec<Look> {
        self.looks.lock().unwrap().clone()
    }

    /// How long after `since` (ns) a check of the service was last seen
    /// passing: the send time of the last such health request. Measured
    /// from the request, not from when the look ended, so that a slow DNS
    /// answer or a slow look does not count against the agent.
    fn passing_for(&self, since: u128) -> Duration {
        let last = self
            .looks()
            .into_iter()
            .filter(|l| l.checks_sent > since && l.statuses().contains(&"passing"))
            .map(|l| l.checks_sent)
            .max()
            .unwrap_or(since);
        Duration::from_nanos((last - since) as u64)
    }

    fn wait_for(&self, what: &str, seen: impl Fn(&Look) -> bool) -> Look {
        let mut found = None;
        let ok = wait_until(procs::deadline(), || {
            found = self.looks().into_iter().find(|l| seen(l));
            found.is_some()
        });
        assert!(ok, "never saw {what}: last {:?}", self.looks().last());
        found.unwrap()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The ports of the SRV records Consul's DNS at `server` answers for
/// `name`; empty on no answer. A query of our own over UDP: Consul's DNS
/// answers only instances whose checks pass.
fn srv_ports(server: &str, name: &str) -> Vec<u16> {
    let Ok(socket) = UdpSocket::bind("127.0.0.1:0") else {
        return Vec::new();
    };
    let _ = socket.set_read_timeout(Some(Duration::from_secs(1)));
    let id = (now_ns() & 0xffff) as u16;
    let mut query = id.to_be_bytes().to_vec();
    query.extend_from_slice(&[1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        query.push(label.len() as u8);
        query.extend_from_slice(label.as_bytes());
    }
    query.extend_from_slice(&[0, 0, 33, 0, 1]);
    if socket.send_to(&query, server).is_err() {
        return Vec::new();
    }
    let mut answer = [0u8; 4096];
    let Ok(n) = socket.recv(&mut answer) else {
        return Vec::new();
    };
    let answer = &answer[..n];
    if n < 12 || answer[..2] != id.to_be_bytes() {
        return Vec::new();
    }
    let count = |i: usize| u16::from_be_bytes([answer[i], answer[i + 1]]) as usize;
    let (questions, answers) = (count(4), count(6));
    // A name: labels ending in a zero byte or a compression pointer.
    let skip_name = |mut at: usize| -> Option<usize> {
        loop {
            let len = *answer.get(at)? as usize;
            if len == 0 {
                return Some(at + 1);
            }
            if len & 0xc0 == 0xc0 {
                return Some(at + 2);
            }
            at += 1 + len;
        }
    };
    let mut at = 12;
    for _ in 0..questions {
        let Some(next) = skip_name(at) else {
            return Vec::new();
        };
        at = next + 4;
    }
    let mut ports = Vec::new();
    for _ in 0..answers {
        let Some(next) = skip_name(at) else { break };
        if next + 10 > n {
            break;
        }
        let kind = count(next);
        let len = count(next + 8);
        let data = next + 10;
        if kind == 33 && data + 6 <= n {
            ports.push(count(data + 4) as u16);
        }
        at = data + len;
    }
    ports
}

/// A child that stamps its start and end (ns) in `work`, as `tag`, and
/// runs `secs` in between.
fn stamping(work: &Path, tag: &str, secs: &str) -> Vec<String> {
    let dir = work.display();
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "date +%s%N > {dir}/{tag}.start.tmp && mv {dir}/{tag}.start.tmp {dir}/{tag}.start; sleep {secs}; date +%s%N > {dir}/{tag}.end"
        ),
    ]
}

fn stamp(work: &Path, file: &str) -> u128 {
    let text = std::fs::read_to_string(work.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{file}: {e}: {text:?}"))
}

/// A lockrun contending for `key` on `backend`, registering `service` at
/// `port` with `agent`.
fn contender(
    backend: &Backend,
    agent: &Agent,
    key: &str,
    service: &str,
    port: u16,
    child: &[String],
) -> Command {
    let spec = format!("{service}:{port}");
    let mut cmd = backend.lockrun(agent);
    cmd.args(["elect", "--kill-timeout", "1s"]);
    cmd.args(backend.agent_flag(agent));
    if matches!(backend, Backend::Consul) {
        cmd.args(["--lock-delay", "0s"]);
    }
    cmd.args([
        "--register-service",
        &spec,
        "--service-tag",
        "primary",
        key,
        "--",
    ]);
    cmd.args(child);
    cmd
}

enum Backend {
    Consul,
    Local(tempfile::TempDir),
    Etcd,
    Postgres,
    Zookeeper,
}

impl Backend {
    fn name(&self) -> &'static str {
        match self {
            Backend::Consul => "consul",
            Backend::Local(_) => "local",
            Backend::Etcd => "etcd",
            Backend::Postgres => "postgres",
            Backend::Zookeeper => "zookeeper",
        }
    }

    /// `lockrun` on this backend, with `agent` as the catalog's agent:
    /// the Consul backend's own agent (CONSUL_HTTP_ADDR), else
    /// --service-agent.
    fn lockrun(&self, agent: &Agent) -> Command {
        match self {
            Backend::Consul => {
                let mut cmd = bare(["--backend", "consul"]);
                cmd.env("CONSUL_HTTP_ADDR", agent.http_addr());
                cmd
            }
            Backend::Local(dir) => {
                let mut cmd = bare(["--backend", "local", "--lock-dir"]);
                cmd.arg(dir.path());
                cmd
            }
            Backend::Etcd => bare(["--backend", "etcd", "--endpoints", &etcd().endpoint]),
            Backend::Postgres => bare(["--backend", "postgres", "--dsn", &postgres().url()]),
            Backend::Zookeeper => bare(["--backend", "zookeeper", "--zk-hosts", &zk().addr]),
        }
    }

    /// `--service-agent` where the backend is not Consul's: a flag of
    /// `elect`, after it (with the test server's tick on ZooKeeper).
    fn agent_flag(&self, agent: &Agent) -> Vec<String> {
        let mut flags = match self {
            Backend::Consul => Vec::new(),
            _ => vec!["--service-agent".into(), agent.http_addr()],
        };
        if let Backend::Zookeeper = self {
            flags.extend([
                "--zk-tick-time".into(),
                crate::engines::zookeeper::support::TICK.into(),
            ]);
        }
        flags
    }
}

/// Two holders, one after the other, each registering the same service
/// (at ports 1001 and 1002): the first is in the catalog and DNS while it
/// runs, and no look sent after the second's COMMAND started sees it.
fn handover(agent: &Agent, backend: Backend) {
    let work = scratch();
    let service = format!("db-{}-{}", backend.name(), (now_ns() % 1_000_000) as u32);
    let key = format!("lockrun-test/catalog/{service}");
    let watcher = Watcher::start(agent, &service);
    let spawned = now_ns();
    let first = Running::spawn(&mut contender(
        &backend,
        agent,
        &key,
        &service,
        1001,
        &stamping(work.path(), "a", "0.8"),
    ));
    let first_id = format!("-{}", first.pid());
    let seen = watcher.wait_for("the first holder in the catalog and DNS", |l| {
        l.ids.iter().any(|id| id.ends_with(&first_id)) && l.dns_ports.contains(&1001)
    });
    let second = Running::spawn(&mut contender(
        &backend,
        agent,
        &key,
        &service,
        1002,
        // Long enough for a look or two, each a catalog read, a DNS
        // question and a health read, however slow the machine.
        &stamping(work.path(), "b", "1"),
    ));
    let second_id = format!("-{}", second.pid());
    let (a, b) = (first.finish(), second.finish());
    for (out, who) in [(&a, "first"), (&b, "second")] {
        assert_eq!(
            out.status.code(),
            Some(0),
            "the {who} holder on {}:\n{}",
            backend.name(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let b_start = stamp(work.path(), "b.start");
    let after = now_ns();
    wait_until(procs::deadline(), || {
        watcher.looks().last().is_some_and(|l| l.sent > after)
    });
    let looks = watcher.looks();
    drop(watcher);
    let log = String::from_utf8_lossy(&a.stderr).to_string();
    // Registered as the guard is given the go: a look may find it a few
    // ms before COMMAND's shell writes its first stamp, never before the
    // lockrun was started.
    assert!(seen.sent > spawned);
    // What a client could have read once the second holder's COMMAND ran.
    let late: Vec<&Look> = looks
        .iter()
        .filter(|l| {
            l.sent > b_start
                && (l.ids.iter().any(|id| id.ends_with(&first_id)) || l.dns_ports.contains(&1001))
        })
        .collect();
    assert!(
        late.is_empty(),
        "{} on Consul {}: the first holder was still listed after the second's COMMAND started ({} ns before the first such look was sent): {:?}\n{log}",
        backend.name(),
        agent.version,
        late[0].sent - b_start,
        &late[..late.len().min(3)]
    );
    assert!(
        looks
            .iter()
            .any(|l| l.ids.iter().any(|id| id.ends_with(&second_id)) && l.dns_ports == [1002]),
        "{} on Consul {}: the second holder never appeared alone in {} looks",
        backend.name(),
        agent.version,
        looks.len()
    );
    let last = looks.last().unwrap();
    assert!(
        last.ids.is_empty() && last.dns_ports.is_empty(),
        "still listed once both ended: {last:?}"
    );
    let last_a = looks
        .iter()
        .filter(|l| l.ids.iter().any(|id| id.ends_with(&first_id)))
        .map(|l| l.answered)
        .max()
        .unwrap();
    eprintln!(
        "{} on Consul {}: the first holder's last listing answered {} ms before the second's COMMAND started ({} looks)",
        backend.name(),
        agent.version,
        (b_start as i128 - last_a as i128) / 1_000_000,
        looks.len()
    );
}

/// On the Consul backend and on the local one with a Consul agent beside
/// it, on both Consul versions: listed only while held, gone before the
/// next holder's COMMAND starts.
#[test]
fn listed_only_while_held_and_gone_before_the_next_holder_starts() {
    if real_consul::binaries_dir().is_none() {
        eprintln!("no Consul binaries: skipped");
        return;
    }
    for version in real_consul::VERSIONS {
        let agent = Agent::dev(version);
        handover(&agent, Backend::Consul);
        handover(&agent, Backend::Local(scratch()));
    }
}

/// With the lock in etcd, PostgreSQL or ZooKeeper and the catalog on a
/// Consul agent beside it: listed only while held, gone before the next
/// holder's COMMAND starts.
#[test]
fn on_the_other_engines_too() {
    if real_consul::binaries_dir().is_none() {
        eprintln!("no Consul binaries: skipped");
        return;
    }
    let agent = Agent::dev(real_consul::VERSIONS[0]);
    for backend in [Backend::Etcd, Backend::Postgres, Backend::Zookeeper] {
        handover(&agent, backend);
    }
}

/// A holder of a lock in etcd, registered as service `NAME-N` with
/// `agent` (`--ttl 3s --kill-timeout 300ms`), running `child`, once the
/// agent lists it passing: the check's TTL `explain` states, the watcher
/// of the service, the holder.
fn registered_on_etcd(agent: &Agent, name: &str, child: &[&str]) -> (Duration, Watcher, Running) {
    let service = format!("{name}-{}", (now_ns() % 1_000_000) as u32);
    let key = format!(
        "{}/{service}",
        crate::engines::etcd::support::unique("catalog")
    );
    let flags = ["elect", "--ttl", "3s", "--kill-timeout", "300ms"];
    let mut explain = Backend::Etcd.lockrun(agent);
    explain.args(["explain", "--json"]).args(flags);
    explain.args(Backend::Etcd.agent_flag(agent));
    explain.args(["--register-service", &service, &key]);
    let out = run(&mut explain);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let ttl = Duration::from_millis(json["service_check_ttl_ms"].as_u64().expect("a TTL"));
    let watcher = Watcher::start(agent, &service);
    let mut cmd = Backend::Etcd.lockrun(agent);
    cmd.args(flags);
    cmd.args(Backend::Etcd.agent_flag(agent));
    cmd.args(["--register-service", &service, &key, "--"])
        .args(child);
    let holder = Running::spawn(&mut cmd);
    watcher.wait_for("the holder listed and passing", |l| {
        l.ids.len() == 1 && l.statuses() == ["passing"] && !l.dns_ports.is_empty()
    });
    (ttl, watcher, holder)
}

/// A service of the test's own beside the holder's, on the same agent,
/// with a TTL check as long as the holder's: passed at the moment the
/// holder is stopped or killed, it measures how late the agent's own TTL
/// timer fires (late by seconds at a load near 28 on 2 cores), so that
/// the holder's check is held to the agent's timer and not to the wall
/// clock.
struct Control {
    api: crate::engines::consul::support::Api,
    id: String,
    watcher: Watcher,
}

impl Control {
    fn register(agent: &Agent, ttl: Duration) -> Control {
        let id = format!("control-{}", (now_ns() % 1_000_000) as u32);
        let api = agent.api();
        let body = serde_json::json!({
            "ID": id,
            "Name": id,
            "Check": {"TTL": format!("{}ms", ttl.as_millis()), "Status": "passing"},
        });
        let resp = api.put("/v1/agent/service/register", body.to_string());
        assert_eq!(resp.status, 200, "registering the control service");
        let watcher = Watcher::without_dns(agent, &id);
        watcher.wait_for("the control passing", |l| l.statuses() == ["passing"]);
        Control { api, id, watcher }
    }

    /// Passes the control's check now.
    fn pass(&self) {
        let resp = self
            .api
            .put(&format!("/v1/agent/check/pass/service:{}", self.id), "");
        assert_eq!(resp.status, 200, "passing the control's check");
    }

    /// How long after `since` the agent kept the control passing: the
    /// TTL plus how late its timer fired.
    fn passing_for(&self, since: u128) -> Duration {
        self.watcher.wait_for("the control critical", |l| {
            l.sent > since && l.statuses() == ["critical"]
        });
        self.watcher.passing_for(since)
    }
}

/// A SIGSTOPped holder on etcd stops passing its check: Consul marks it
/// critical within the check's TTL (which `explain` states), and its DNS
/// answer goes; the check went critical before the guard began COMMAND's
/// stop (its TERM timestamp).
#[test]
fn a_stopped_holder_drops_out_through_its_check() {
    if real_consul::binaries_dir().is_none() {
        eprintln!("no Consul binaries: skipped");
        return;
    }
    let agent = Agent::dev(real_consul::VERSIONS[real_consul::VERSIONS.len() - 1]);
    let work = scratch();
    let dir = work.path().display();
    let child = format!(
        "trap 'date +%s%N > {dir}/term; exit 0' TERM; date +%s%N > {dir}/start; while :; do sleep 0.05; done"
    );
    let (ttl, watcher, holder) = registered_on_etcd(&agent, "frozen", &["sh", "-c", &child]);
    let control = Control::register(&agent, ttl);
    let stopped = now_ns();
    holder.signal(Signal::SIGSTOP);
    control.pass();
    let critical = watcher.wait_for("the check critical", |l| {
        l.sent > stopped && l.statuses() == ["critical"]
    });
    let within = watcher.passing_for(stopped);
    let agents = control.passing_for(stopped);
    let dns_gone = watcher.wait_for("the DNS answer gone", |l| {
        l.sent > stopped && l.dns_ports.is_empty()
    });
    assert!(
        dns_gone.answered <= critical.answered + 200_000_000,
        "DNS still answered after the check went critical"
    );
    let term_seen = wait_until(procs::deadline(), || work.path().join("term").exists());
    holder.signal(Signal::SIGCONT);
    let out = holder.finish();
    let thawed = now_ns();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(term_seen, "the guard never stopped COMMAND\n{log}");
    let term = stamp(work.path(), "term");
    // The last look before it went critical was sent before the stop began.
    let first_critical = watcher
        .looks()
        .into_iter()
        .find(|l| l.sent > stopped && l.statuses() == ["critical"])
        .unwrap();
    eprintln!(
        "SIGSTOP: last seen passing {} ms after the stop (TTL {} ms; the agent's control {} ms); first critical look sent {} ms before COMMAND's stop began",
        within.as_millis(),
        ttl.as_millis(),
        agents.as_millis(),
        (term as i128 - first_critical.sent as i128) / 1_000_000
    );
    // Held to the agent's own timer, measured beside it: the holder's last
    // pass came before the stop, the control's after it. The slack is the
    // two watchers' look intervals.
    let slack = Duration::from_millis(500);
    assert!(
        within <= agents + slack,
        "still passing {within:?} after the stop; a check of TTL {ttl:?} passed then went critical after {agents:?}\n{log}"
    );
    let late = agents.saturating_sub(ttl);
    assert!(
        first_critical.sent < term + (slack + late).as_nanos(),
        "the check was still passing {:?} after COMMAND's stop began\n{log}",
        slack + late
    );
    // On its way out, the thawed lockrun took the service out.
    watcher.wait_for("the service deregistered", |l| {
        l.sent > thawed && l.ids.is_empty()
    });
    assert_eq!(out.status.code(), Some(124), "the thawed holder\n{log}");
}

/// A SIGKILLed holder on etcd never deregisters: its check goes critical
/// within the check's TTL all the same (the agent's own timer), and its
/// DNS answer goes with it.
#[test]
fn a_killed_holder_drops_out_through_its_check() {
    if real_consul::binaries_dir().is_none() {
        eprintln!("no Consul binaries: skipped");
        return;
    }
    let agent = Agent::dev(real_consul::VERSIONS[real_consul::VERSIONS.len() - 1]);
    let (ttl, watcher, holder) = registered_on_etcd(&agent, "killed", &["sleep", "60"]);
    let control = Control::register(&agent, ttl);
    let killed = now_ns();
    holder.signal(Signal::SIGKILL);
    control.pass();
    let out = holder.finish();
    watcher.wait_for("the check critical", |l| {
        l.sent > killed && l.statuses() == ["critical"]
    });
    let dns_gone = watcher.wait_for("the DNS answer gone", |l| {
        l.sent > killed && l.dns_ports.is_empty()
    });
    let within = watcher.passing_for(killed);
    let agents = control.passing_for(killed);
    eprintln!(
        "SIGKILL: last seen passing {} ms after the kill (TTL {} ms; the agent's control {} ms), DNS gone within {} ms",
        within.as_millis(),
        ttl.as_millis(),
        agents.as_millis(),
        (dns_gone.answered - killed) / 1_000_000
    );
    // Held to the agent's timer, as for the stopped holder.
    assert!(
        within <= agents + Duration::from_millis(500),
        "still passing {within:?} after the kill; a check of TTL {ttl:?} passed then went critical after {agents:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An agent that never takes the first holder's deregistration (a relay
/// freezes at it): the first holder keeps the lock until its check has
/// gone critical, so that no look sent once the second holder's COMMAND
/// started finds the first passing or in DNS. Released at once, or after
/// the failed request alone, it was still passing there.
#[test]
fn a_missed_deregistration_keeps_the_lock_until_the_check_is_critical() {
    if real_consul::binaries_dir().is_none() {
        eprintln!("no Consul binaries: skipped");
        return;
    }
    let agent = Agent::dev(real_consul::VERSIONS[real_consul::VERSIONS.len() - 1]);
    let backend = Backend::Local(scratch());
    let work = scratch();
    let service = format!("missed-{}", (now_ns() % 1_000_000) as u32);
    let key = "catalog/missed";
    let link = Link::new(&agent.http_addr());
    link.freeze_at("/v1/agent/service/deregister");
    let watcher = Watcher::start(&agent, &service);
    let mut cmd = backend.lockrun(&agent);
    cmd.args(["-v", "elect", "--kill-timeout", "1s"]);
    cmd.args(["--service-agent", &link.http_addr()]);
    cmd.args(["--register-service", &format!("{service}:1001"), key, "--"]);
    cmd.args(stamping(work.path(), "a", "0.3"));
    let first = Running::spawn(&mut cmd);
    let first_id = format!("-{}", first.pid());
    watcher.wait_for("the first holder passing and in DNS", |l| {
        l.passing(&first_id) && l.dns_ports.contains(&1001)
    });
    let second = Running::spawn(&mut contender(
        &backend,
        &agent,
        key,
        &service,
        1002,
        &stamping(work.path(), "b", "0.1"),
    ));
    let (a, b) = (first.finish(), second.finish());
    let log = String::from_utf8_lossy(&a.stderr).to_string();
    assert_eq!(a.status.code(), Some(0), "{log}");
    assert_eq!(
        b.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&b.stderr)
    );
    assert!(log.contains("could not deregister"), "{log}");
    let (a_end, b_start) = (stamp(work.path(), "a.end"), stamp(work.path(), "b.start"));
    let looks = watcher.looks();
    drop(watcher);
    let late: Vec<&Look> = looks
        .iter()
        .filter(|l| l.sent > b_start && (l.passing(&first_id) || l.dns_ports.contains(&1001)))
        .collect();
    assert!(
        late.is_empty(),
        "the first holder was still passing after the second's COMMAND started: {:?}\n{log}",
        &late[..late.len().min(3)]
    );
    assert!(
        looks.iter().any(|l| l.sent > b_start && l.lists(&first_id)),
        "the frozen relay let the deregistration through"
    );
    eprintln!(
        "missed deregistration: the second holder's COMMAND started {} ms after the first's ended",
        (b_start - a_end) / 1_000_000
    );
}

/// On `semaphore`, each slot's holder is listed under the same name, with
/// an ID of its own: NAME resolves to every current holder.
#[test]
fn semaphore_holders_are_listed_side_by_side() {
    if real_consul::binaries_dir().is_none() {
        eprintln!("no Consul binaries: skipped");
        return;
    }
    let agent = Agent::dev(real_consul::VERSIONS[real_consul::VERSIONS.len() - 1]);
    let work = scratch();
    let service = format!("workers-{}", (now_ns() % 1_000_000) as u32);
    let watcher = Watcher::start(&agent, &service);
    let holders: Vec<Running> = [("a", 2001), ("b", 2002)]
        .into_iter()
        .map(|(tag, port)| {
            let mut cmd = Backend::Consul.lockrun(&agent);
            cmd.args(["semaphore", "--limit", "2", "--kill-timeout", "1s"]);
            cmd.args(["--register-service", &format!("{service}:{port}")]);
            cmd.args([&format!("lockrun-test/catalog/{service}"), "--"]);
            let dir = work.path().display();
            cmd.args([
                "sh",
                "-c",
                &format!("touch {dir}/{tag}; while [ ! -e {dir}/go ]; do sleep 0.05; done"),
            ]);
            Running::spawn(&mut cmd)
        })
        .collect();
    let both = watcher.wait_for("both holders listed and in DNS", |l| {
        let mut ports = l.dns_ports.clone();
        ports.sort();
        l.ids.len() == 2 && ports == [2001, 2002]
    });
    assert_ne!(both.ids[0], both.ids[1]);
    std::fs::write(work.path().join("go"), "").unwrap();
    for holder in holders {
        let out = holder.finish();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let after = now_ns();
    watcher.wait_for("both gone", |l| l.sent > after && l.ids.is_empty());
}

/// A COMMAND that exits at once can end the hold while the registration
/// is on its way: nothing is left in the catalog after any of the runs.
/// (The deregistration waits for that request, which runs to its end on a
/// task of its own; without that wait these runs passed too, 15 of 15: the
/// race is narrow, and this test only guards the ordinary path.)
#[test]
fn an_instant_command_leaves_nothing_registered() {
    if real_consul::binaries_dir().is_none() {
        eprintln!("no Consul binaries: skipped");
        return;
    }
    let agent = Agent::dev(real_consul::VERSIONS[real_consul::VERSIONS.len() - 1]);
    let backend = Backend::Local(scratch());
    let service = format!("instant-{}", (now_ns() % 1_000_000) as u32);
    for _ in 0..5 {
        let mut cmd = backend.lockrun(&agent);
        cmd.args(["elect"]).args(backend.agent_flag(&agent));
        cmd.args([
            "--register-service",
            &service,
            "catalog/instant",
            "--",
            "true",
        ]);
        let out = run(&mut cmd);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let listed = agent
            .api()
            .try_request("GET", &format!("/v1/catalog/service/{service}"), None, &[])
            .expect("the catalog answers")
            .json();
        assert_eq!(
            listed.as_array().map(Vec::len),
            Some(0),
            "left behind: {listed}"
        );
    }
}

/// Bad inputs: one line, the documented status, nothing written: no lock
/// file, no service.
#[test]
fn bad_inputs_register_nothing() {
    let dir = scratch();
    let run_local = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = bare(["--backend", "local", "--lock-dir"]);
        cmd.arg(dir.path()).args(["elect"]).args(args);
        cmd.args(["k", "--", "true"]);
        for (k, v) in env {
            cmd.env(k, v);
        }
        run(&mut cmd)
    };
    // A FIFO where a TLS file should be: refused at once, never waited on.
    let elsewhere = scratch();
    let fifo = elsewhere.path().join("ca.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let fifo = fifo.to_str().unwrap().to_owned();
    // A port nothing listens on: bound and dropped.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    for (args, env, code, says) in [
        (vec!["--register-service", ""], vec![], 2, "empty"),
        (vec!["--register-service", ":80"], vec![], 2, "empty"),
        (vec!["--register-service", "db:0"], vec![], 2, "1 to 65535"),
        (vec!["--register-service", "db:x"], vec![], 2, "1 to 65535"),
        (vec!["--register-service", "db.x"], vec![], 2, "DNS label"),
        (
            vec!["--register-service", "db", "--service-tag", ""],
            vec![],
            2,
            "empty",
        ),
        (
            vec!["--register-service", "db", "--service-tag", "a.b"],
            vec![],
            2,
            "DNS label",
        ),
        (
            vec!["--register-service", "db", "--service-agent", ""],
            vec![],
            2,
            "empty",
        ),
        (
            vec!["--register-service", "db"],
            vec![("CONSUL_HTTP_ADDR", "")],
            2,
            "empty",
        ),
        (
            vec!["--register-service", "db", "--service-agent", "unix:///x"],
            vec![],
            2,
            "http",
        ),
        (vec!["--service-tag", "a"], vec![], 2, "--register-service"),
        (
            vec!["--register-service", "db"],
            vec![("CONSUL_CACERT", fifo.as_str())],
            125,
            "not a regular file",
        ),
        (
            vec!["--register-service", "db"],
            vec![("CONSUL_HTTP_TOKEN_FILE", fifo.as_str())],
            125,
            "not a regular file",
        ),
        (
            vec!["--register-service", "db"],
            vec![("CONSUL_CLIENT_CERT", fifo.as_str())],
            125,
            "CONSUL_CLIENT_KEY go together",
        ),
        (
            vec!["--register-service", "db", "--service-agent", &closed],
            vec![],
            125,
            "cannot be reached",
        ),
    ] {
        let out = run_local(&args, &env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?} {env:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        if code == 125 {
            assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        }
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "{args:?} wrote {left:?}");
    }
}
