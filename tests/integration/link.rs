//! A TCP relay between one lockrun and Consul that a test can freeze: a
//! network partition for that lockrun alone (its requests hang, nothing
//! answers), while other clients keep talking to Consul directly. Because it
//! sits outside Consul, partition tests run against a real agent too.

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
                if shared.0.lock().unwrap().closed {
                    break;
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

    /// From now on nothing crosses the link in either direction.
    pub fn freeze(&self) {
        self.state.0.lock().unwrap().frozen = true;
    }

    /// Relays until a request holding `marker` (a path, say) comes, then
    /// freezes with that request held back: an engine that falls silent
    /// between two steps of a run.
    pub fn freeze_at(&self, marker: &str) {
        self.state.0.lock().unwrap().freeze_at = Some(marker.as_bytes().to_vec());
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
            let dropped = guard.frozen;
            while guard.frozen && !guard.closed {
                guard = wake.wait(guard).unwrap();
            }
            if guard.closed {
                break;
            }
            drop(guard);
            if dropped {
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
