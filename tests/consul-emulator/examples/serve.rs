//! Runs an emulator for poking at by hand:
//! `cargo run -p consul-emulator --example serve [TTL_MIN_SECS]`, then
//! `curl -i http://ADDR/v1/kv/x`. It serves until stdin closes (Ctrl-D).

use std::io::Read;
use std::time::Duration;

fn main() {
    let ttl_min = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let consul = consul_emulator::Emulator::builder()
        .session_ttl_min(Duration::from_secs(ttl_min))
        .start();
    println!("{}", consul.http_addr());
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}
