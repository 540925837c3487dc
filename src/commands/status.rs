//! `lockrun status [--for DURATION]`: asks a running lockrun's status
//! endpoint whether its lock is held with enough time left.

use std::io::{Read, Write};
use std::time::Duration;

use crate::duration::fmt_duration;
use crate::error::Failure;
use crate::exit::Exit;
use crate::ops::{StatusArgs, STATUS_VARIABLE};

/// How long we wait for the endpoint; it answers from memory.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

pub fn run(args: &StatusArgs) -> Result<Exit, Failure> {
    let addr = match &args.status_addr {
        Some(addr) if addr.trim().is_empty() => {
            return Err(Failure::Usage(
                "--status-addr is empty; give HOST:PORT or a unix socket path, or leave it out inside COMMAND".into(),
            ))
        }
        Some(addr) => addr.clone(),
        None => match std::env::var(STATUS_VARIABLE) {
            Ok(addr) if !addr.trim().is_empty() => addr,
            Ok(_) => {
                return Err(Failure::Usage(format!(
                    "{STATUS_VARIABLE} is empty; run this inside a COMMAND of lockrun started with --status-addr, or pass --status-addr"
                )))
            }
            Err(_) => {
                return Err(Failure::Config(format!(
                    "cannot tell: {STATUS_VARIABLE} is not set (lockrun sets it in COMMAND's environment with --status-addr); pass --status-addr"
                )))
            }
        },
    };
    let body = ask(&addr, "/status").map_err(|why| {
        Failure::Config(format!("cannot tell: the status endpoint `{addr}` {why}"))
    })?;
    let status: serde_json::Value = serde_json::from_str(&body).map_err(|e| {
        Failure::Config(format!(
            "cannot tell: the status endpoint `{addr}` did not answer JSON ({e})"
        ))
    })?;
    let state = status["state"].as_str().unwrap_or("unknown");
    let key = status["key"].as_str().unwrap_or("?");
    let leading = status["leader"].as_bool().unwrap_or(false);
    let left = status["lease_left_ms"].as_u64().map(Duration::from_millis);
    let margin = status["margin_ms"]
        .as_u64()
        .map(Duration::from_millis)
        .unwrap_or_default();
    if !leading {
        tracing::info!("`{key}` is not held with the safety margin left (state {state})");
        return Ok(Exit::NotHeld);
    }
    if let (Some(want), Some(left)) = (args.for_, left) {
        let spare = left.saturating_sub(margin);
        if spare < want {
            tracing::info!(
                "`{key}` is held, but only {} is left before COMMAND would be stopped (and the margin kept), not --for {}",
                fmt_duration(spare),
                fmt_duration(want)
            );
            return Ok(Exit::NotHeld);
        }
    }
    Ok(Exit::Success)
}

/// One GET; the body of a 200 answer, or what went wrong.
fn ask(addr: &str, path: &str) -> Result<String, String> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: lockrun\r\nConnection: close\r\n\r\n");
    let mut answer = Vec::new();
    if addr.contains('/') {
        let mut stream = std::os::unix::net::UnixStream::connect(addr)
            .map_err(|e| format!("cannot be reached ({e})"))?;
        stream.set_read_timeout(Some(ASK_TIMEOUT)).ok();
        stream.set_write_timeout(Some(ASK_TIMEOUT)).ok();
        stream
            .write_all(request.as_bytes())
            .and_then(|()| stream.read_to_end(&mut answer))
            .map_err(|e| format!("did not answer ({e})"))?;
    } else {
        use std::net::ToSocketAddrs;
        let target = addr
            .to_socket_addrs()
            .map_err(|e| format!("is not HOST:PORT ({e})"))?
            .next()
            .ok_or("resolves to no address")?;
        let mut stream = std::net::TcpStream::connect_timeout(&target, ASK_TIMEOUT)
            .map_err(|e| format!("cannot be reached ({e})"))?;
        stream.set_read_timeout(Some(ASK_TIMEOUT)).ok();
        stream.set_write_timeout(Some(ASK_TIMEOUT)).ok();
        stream
            .write_all(request.as_bytes())
            .and_then(|()| stream.read_to_end(&mut answer))
            .map_err(|e| format!("did not answer ({e})"))?;
    }
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or("answered something that is not HTTP")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        let line = head.lines().next().unwrap_or("");
        return Err(format!("answered `{line}`"));
    }
    Ok(body.to_string())
}
