//! Faults under `--backend postgres` against a real server: the server
//! restarted while held, the holder's lockrun stopped (SIGSTOP), and a
//! network partition made by a TCP proxy of the test's own that stops
//! relaying. Each measures overlap with the children's own timestamps and
//! checks that fences grow.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::Signal;

use crate::engines::postgres::support::{self as pg_support, unique};
use crate::procs::{self, pid_alive, wait_until};
use crate::support::{assert_exit, bare, max_overlap, Contender};

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn elect(url: &str, ttl: &str, key: &str, extra: &[&str]) -> Command {
    let mut cmd = bare(["--backend", "postgres", "--dsn", url, "elect", "--ttl", ttl]);
    cmd.args(extra).arg(key);
    cmd
}

/// Zero overlap between the two children, and the later one's fence
/// greater.
fn no_overlap_and_growing_fences(first: &Contender, second: &Contender, what: &str) {
    let (a, b) = (first.beats(), second.beats());
    let spans = [(a[0], *a.last().unwrap()), (b[0], *b.last().unwrap())];
    assert!(
        max_overlap(spans) <= 1,
        "{what}: two children ran at once: {spans:?}"
    );
    let (fa, fb) = (first.fences(), second.fences());
    assert!(
        fa.last() < fb.first(),
        "{what}: fences do not grow: {fa:?} then {fb:?}"
    );
}

/// The server restarted under a holder: it stops its child at once (the
/// restart ended its session, and so freed its lock); with --campaign it
/// leads again once the server is back, with a greater fence.
#[test]
fn a_restarted_server_stops_the_holder_and_campaign_leads_again() {
    let pg = pg_support::private();
    let url = pg.url();
    let holder = Contender::holding(elect(&url, "30s", &unique("restart"), &["--campaign"]));
    let first_pid = holder.child_pid();
    let restarted = Instant::now();
    pg.restart();
    assert!(
        wait_until(procs::deadline(), || !pid_alive(first_pid)),
        "the first child outlived the restart"
    );
    eprintln!(
        "the child was gone {:?} after the restart began",
        restarted.elapsed()
    );
    assert!(
        wait_until(procs::deadline(), || holder.fences().len() == 2),
        "--campaign did not lead again after the restart: {}",
        pg.log_tail()
    );
    let fences = holder.fences();
    assert!(fences[0] < fences[1], "fences do not grow: {fences:?}");
    let mut holder = holder;
    holder.go();
    assert_exit(&holder.finish(), 0, "the second run", String::new);
}

/// The holder's lockrun stopped: its connection stays open (the kernel
/// answers for it), so the server keeps its lock until the session has
/// been idle a TTL (idle_session_timeout); the guard stops the child
/// within the budget, before that. Let go on, lockrun says the lock was
/// lost (124). The rival runs once the server has ended the session,
/// never beside the child.
#[test]
fn a_stopped_holder_keeps_the_lock_until_it_is_gone() {
    let url = pg_support::postgres().url();
    let key = unique("stopped");
    let mut holder = Contender::holding(elect(&url, "2s", &key, &[]));
    let mut rival = Contender::lockrun(elect(&url, "2s", &key, &[]));
    let child = holder.child_pid();
    let stopped = Instant::now();
    holder.signal(Signal::SIGSTOP);
    assert!(
        wait_until(procs::deadline(), || !pid_alive(child)),
        "the stopped holder's child kept running"
    );
    let gone = stopped.elapsed();
    eprintln!("the stopped holder's child was gone {gone:?} after SIGSTOP (TTL 2s)");
    holder.signal(Signal::SIGCONT);
    assert_exit(&holder.finish(), 124, "the stopped holder", String::new);
    rival.wait_started("the rival");
    rival.go();
    assert_exit(&rival.finish(), 0, "the rival", String::new);
    no_overlap_and_growing_fences(&holder, &rival, "holder stopped");
}

/// A TCP relay that can stop relaying (a partition: bytes in flight are
/// held, sockets stay open) and cut every connection.
struct Proxy {
    port: u16,
    paused: Arc<AtomicBool>,
    sockets: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    fn start(to: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let paused = Arc::new(AtomicBool::new(false));
        let sockets: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (p, s) = (paused.clone(), sockets.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(("127.0.0.1", to)) else {
                    continue;
                };
                let mut all = s.lock().unwrap();
                all.push(client.try_clone().unwrap());
                all.push(server.try_clone().unwrap());
                for (from, into) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client.try_clone().unwrap()),
                ] {
                    let paused = p.clone();
                    std::thread::spawn(move || relay(from, into, &paused));
                }
            }
        });
        Proxy {
            port,
            paused,
            sockets,
        }
    }

    fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
    }

    /// Ends every relayed connection, both ways; what was held back is
    /// dropped.
    fn cut(&self) {
        for socket in self.sockets.lock().unwrap().iter() {
            let _ = socket.shutdown(Shutdown::Both);
        }
        self.paused.store(false, Ordering::SeqCst);
    }
}

/// Copies `from` into `into`; while paused, what it reads is held back.
fn relay(mut from: TcpStream, mut into: TcpStream, paused: &AtomicBool) {
    let mut buf = [0u8; 16384];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => {
                let _ = into.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => n,
        };
        // The partition: nothing crosses, however long it lasts. The
        // test cuts the sockets to end it.
        while paused.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
        if into.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

/// A partition between the holder and the server behind an L4 relay
/// that stops forwarding but keeps both TCP connections open (HAProxy in
/// TCP mode, a cloud balancer, an SSH tunnel): the holder's round trips go
/// unanswered, so it stops its child before its last confirmed round trip
/// plus the TTL; the server's side of the relay never goes silent, so no
/// keepalive gives up on it, and only idle_session_timeout (the TTL) ends
/// the session. The rival, on a path of its own, gets the lock one TTL
/// after the freeze (plus slack), the relay still frozen; at 0b78ffe it
/// waited for as long as the relay kept its connections.
#[test]
fn a_partitioned_holder_stops_within_its_budget() {
    let pg = pg_support::postgres();
    let proxy = Proxy::start(pg.port);
    let via_proxy = format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port);
    let key = unique("partition");
    let ttl = Duration::from_secs(3);
    let mut holder = Contender::holding(elect(&via_proxy, "3s", &key, &[]));
    let mut rival = Contender::lockrun(elect(&pg.url(), "3s", &key, &["--timeout", "60s"]));
    let partitioned = now_ns();
    let frozen = Instant::now();
    proxy.pause();
    assert_exit(&holder.finish(), 124, "the partitioned holder", String::new);
    let last = *holder.beats().last().unwrap();
    let stopped_after = Duration::from_nanos((last - partitioned) as u64);
    eprintln!("the partitioned holder's child last ran {stopped_after:?} after the partition (TTL {ttl:?})");
    assert!(
        stopped_after < ttl,
        "the child ran {stopped_after:?} into the partition, past the TTL {ttl:?} the server may free the lock after"
    );
    // The relay stays frozen: the server alone ends the silent session.
    assert!(
        wait_until(frozen + ttl + Duration::from_secs(10), || !rival
            .beats()
            .is_empty()),
        "the rival did not get the lock within the TTL and 10 s of slack after the freeze"
    );
    let rival_after = Duration::from_nanos((rival.beats()[0] - partitioned) as u64);
    eprintln!("the rival's child first ran {rival_after:?} after the freeze (TTL {ttl:?})");
    rival.go();
    assert_exit(&rival.finish(), 0, "the rival", String::new);
    proxy.cut();
    no_overlap_and_growing_fences(&holder, &rival, "partition");
}
