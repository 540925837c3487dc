//! Runs an emulator for poking at by hand, or for running the suite in
//! real-agent mode against it:
//! `cargo run -p consul-emulator --example serve [TTL_MIN_SECS [VERSION]]`
//! (VERSION `1.10.12` by default, or `1.6.2`), then `curl -i
//! http://ADDR/v1/kv/x`. It serves until stdin closes (Ctrl-D).

use std::io::Read;
use std::time::Duration;

fn main() {
    let mut args = std::env::args().skip(1);
    let ttl_min = args.next().and_then(|s| s.parse().ok()).unwrap_or(10);
    let mut builder =
        consul_emulator::Emulator::builder().session_ttl_min(Duration::from_secs(ttl_min));
    if let Some(version) = args.next() {
        builder = builder.version(&version);
    }
    let consul = builder.start();
    println!("{}", consul.http_addr());
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}
