//! A TCP relay between one lockrun and its engine (Consul, etcd, PostgreSQL, ZooKeeper) that a
//! test can freeze: a network partition for that lockrun alone (its requests
//! hang, nothing answers), while other clients keep talking to the engine
//! directly. Because it sits outside the engine, partition tests run against
//! a real one.

#![allow(dead_code)] // Not every test module uses every helper.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;

#[derive(Default)]
struct State {
    frozen: bool,
    closed: bool,
    /// Freeze when a request holding these bytes goes upstream.
    freeze_at: Option<Vec<u8>>,
    /// Pass on a request holding these bytes, then freeze: its answer is
    /// lost.
    freeze_after: Option<Vec<u8>>,
    /// How many reads from the engine were held back while frozen.
    held_answers: usize,
    /// How many connections the client has opened.
    connections: usize,
    /// What was held back while frozen is delivered at the thaw, as TCP's
    /// retransmissions deliver it once a partition heals, instead of the
    /// connection being cut.
    deliver_late: bool,
}

pub struct Link {
    addr: SocketAddr,
    state: Arc<(Mutex<State>, Condvar)>,
}

impl Link {
    /// Starts relaying connections to `upstream` ("host:port").
    pub fn new(upstream: &str) -> Link {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let upstream = upstream.to_string();
        let shared = state.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(client) = stream else { continue };
                {
                    let mut state = shared.0.lock().unwrap();
                    if state.closed {
                        break;
                    }
                    state.connections += 1;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                relay(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    shared.clone(),
                    true,
                );
                relay(server, client, shared.clone(), false);
            }
        });
        Link { addr, state }
    }

    /// The address to give lockrun as CONSUL_HTTP_ADDR.
    pub fn http_addr(&self) -> String {
        self.addr.to_string()
    }

    /// From now on nothing crosses the link in either direction; at the
    /// thaw, a connection that had data held back is cut.
    pub fn freeze(&self) {
        let mut state = self.state.0.lock().unwrap();
        state.frozen = true;
        state.deliver_late = false;
    }

    /// As [`Link::freeze`], but at the thaw what was held back is delivered
    /// and the connections go on: a partition that heals before TCP gives
    /// up, which a long-lived session (PostgreSQL's) survives.
    pub fn partition(&self) {
        let mut state = self.state.0.lock().unwrap();
        state.frozen = true;
        state.deliver_late = true;
    }

    /// Relays until a request holding `marker` (a path, say) comes, then
    /// freezes with that request held back: an engine that falls silent
    /// between two steps of a run.
    pub fn freeze_at(&self, marker: &str) {
        self.state.0.lock().unwrap().freeze_at = Some(marker.as_bytes().to_vec());
    }

    /// Relays until a request holding `marker` comes, passes it on, then
    /// freezes: the engine acts on it, and its answer is held back and
    /// dropped (the connection cut) at [`Link::thaw`].
    pub fn freeze_after(&self, marker: &str) {
        self.state.0.lock().unwrap().freeze_after = Some(marker.as_bytes().to_vec());
    }

    /// How many reads from the engine were held back while frozen.
    pub fn held_answers(&self) -> usize {
        self.state.0.lock().unwrap().held_answers
    }

    /// How many connections the client has opened through the link.
    pub fn connections(&self) -> usize {
        self.state.0.lock().unwrap().connections
    }

    pub fn thaw(&self) {
        self.state.0.lock().unwrap().frozen = false;
        self.state.1.notify_all();
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let mut state = self.state.0.lock().unwrap();
        state.closed = true;
        state.frozen = false;
        self.state.1.notify_all();
        drop(state);
        // Wake the accept loop so it sees `closed`.
        let _ = TcpStream::connect(self.addr);
    }
}

fn relay(
    mut from: TcpStream,
    mut to: TcpStream,
    state: Arc<(Mutex<State>, Condvar)>,
    upstream: bool,
) {
    thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // Data that arrives while frozen is held back, never delivered
            // late: a partition loses packets rather than queueing them.
            let (lock, wake) = &*state;
            let mut guard = lock.lock().unwrap();
            let marked = guard
                .freeze_at
                .as_ref()
                .is_some_and(|m| buf[..n].windows(m.len()).any(|w| w == m.as_slice()));
            if upstream && marked {
                guard.freeze_at = None;
                guard.frozen = true;
            }
            let passed = guard
                .freeze_after
                .as_ref()
                .is_some_and(|m| buf[..n].windows(m.len()).any(|w| w == m.as_slice()));
            if upstream && passed && !guard.frozen {
                // Frozen before it goes, so that its answer is held.
                guard.freeze_after = None;
                guard.frozen = true;
                drop(guard);
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
                continue;
            }
            let dropped = guard.frozen;
            if dropped && !upstream {
                guard.held_answers += 1;
            }
            while guard.frozen && !guard.closed {
                guard = wake.wait(guard).unwrap();
            }
            if guard.closed {
                break;
            }
            let late = guard.deliver_late;
            drop(guard);
            if dropped && !late {
                // The connection saw a partition: cut it, as a real client
                // would after its timeout, instead of replaying old bytes.
                break;
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    });
}
