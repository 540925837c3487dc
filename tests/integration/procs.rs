//! Process helpers for tests: is a pid or a group alive, condition waits with
//! deadlines, readiness files, and a guard that kills what a failed test
//! left behind.
//!
//! "Alive" means "exists and is not a zombie". Orphans are reparented to pid
//! 1, and in a container pid 1 may never reap them, so a killed grandchild
//! can stay a zombie (and keep `kill(pid, 0)` succeeding) for good. A zombie
//! runs no code, which is all the tests care about.

#![allow(dead_code)] // Not every test module uses every helper.

use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// How long any one wait in a test may take. Generous, because the suite
/// must pass on a loaded two-core machine; a passing test never waits it out.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A deadline [`PATIENCE`] from now.
pub fn deadline() -> Instant {
    Instant::now() + PATIENCE
}

/// State and process group from /proc/PID/stat, if the process exists.
fn stat(pid: u32) -> Option<(char, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain anything.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

fn living(state: char) -> bool {
    !matches!(state, 'Z' | 'X' | 'x')
}

/// True if `pid` exists and is not a zombie.
pub fn pid_alive(pid: u32) -> bool {
    stat(pid).is_some_and(|(state, _)| living(state))
}

/// True if `pid` exists at all, zombie or not: false once it is reaped.
pub fn pid_exists(pid: u32) -> bool {
    stat(pid).is_some()
}

/// `pid`'s process name (`/proc/PID/comm`, as `ps -o comm` shows it), or
/// `None` if it is gone.
pub fn process_name(pid: u32) -> Option<String> {
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(name.trim_end().to_owned())
}

/// True if `pid` is asleep reading a pipe, from the kernel function it waits
/// in (`/proc/PID/wchan`: `pipe_read`, or `anon_pipe_read` on newer kernels).
pub fn reading_a_pipe(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/wchan")).is_ok_and(|wchan| wchan.contains("pipe"))
}

/// The open file descriptors of `pid`, each with what it points to (a path,
/// `pipe:[INODE]`...), in ascending order. Empty if `pid` is gone.
pub fn open_fds(pid: u32) -> Vec<(u32, String)> {
    let dir = format!("/proc/{pid}/fd");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut fds: Vec<(u32, String)> = entries
        .filter_map(|entry| {
            let fd = entry.ok()?.file_name().to_str()?.parse::<u32>().ok()?;
            let target = std::fs::read_link(format!("{dir}/{fd}")).ok()?;
            Some((fd, target.to_string_lossy().into_owned()))
        })
        .collect();
    fds.sort();
    fds
}

/// This process's descriptors that a child would inherit: those without
/// close-on-exec, from `/proc/self/fdinfo`.
pub fn inheritable_fds() -> Vec<u32> {
    const O_CLOEXEC: u32 = 0o2000000;
    let mut fds: Vec<u32> = open_fds(std::process::id())
        .into_iter()
        .map(|(fd, _)| fd)
        .filter(|fd| {
            let Ok(info) = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")) else {
                return false;
            };
            info.lines()
                .find_map(|line| line.strip_prefix("flags:"))
                .and_then(|flags| u32::from_str_radix(flags.trim(), 8).ok())
                .is_some_and(|flags| flags & O_CLOEXEC == 0)
        })
        .collect();
    fds.sort();
    fds
}

/// The living members of process group `pgid`.
pub fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| stat(*pid).is_some_and(|(state, pgrp)| pgrp == pgid && living(state)))
        .collect()
}

/// True if any member of process group `pgid` is alive.
pub fn group_alive(pgid: u32) -> bool {
    !group_members(pgid).is_empty()
}

/// Polls `condition` until it holds (true) or `deadline` passes (false).
pub fn wait_until(deadline: Instant, mut condition: impl FnMut() -> bool) -> bool {
    let mut pause = Duration::from_millis(1);
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Waits for `path` to hold one complete line, and returns it without the
/// newline. Writers use `echo`, so a line without its newline is still being
/// written.
pub fn read_line_file(path: &Path, deadline: Instant) -> String {
    let mut line = None;
    let found = wait_until(deadline, || {
        line = std::fs::read_to_string(path)
            .ok()
            .filter(|text| text.ends_with('\n'))
            .map(|text| text.trim_end().to_owned());
        line.is_some()
    });
    assert!(
        found,
        "no complete line in {} by the deadline",
        path.display()
    );
    line.unwrap()
}

/// Waits for `path` to hold a pid written by `echo $! > path`.
pub fn read_pid_file(path: &Path, deadline: Instant) -> u32 {
    let text = read_line_file(path, deadline);
    text.parse()
        .unwrap_or_else(|_| panic!("{} holds `{text}`, not a pid", path.display()))
}

/// Kills, when dropped, every registered process group that still has a
/// living member, so a failing test cannot leave `sleep 600`s behind.
#[derive(Default)]
pub struct KillGroupsOnDrop {
    groups: Vec<u32>,
}

impl KillGroupsOnDrop {
    pub fn new() -> KillGroupsOnDrop {
        KillGroupsOnDrop::default()
    }

    /// Registers `pgid`; returns it for convenience.
    pub fn watch(&mut self, pgid: u32) -> u32 {
        self.groups.push(pgid);
        pgid
    }
}

impl Drop for KillGroupsOnDrop {
    fn drop(&mut self) {
        for &pgid in &self.groups {
            // Only a group with living members: an empty group's id may
            // already be someone else's.
            if group_alive(pgid) {
                let _ = killpg(Pid::from_raw(pgid as i32), Signal::SIGKILL);
            }
        }
    }
}

/// A port free on loopback, for a server of a test's own (etcd, Consul) to
/// listen on, or for nobody to.
///
/// Not an ephemeral one: every outgoing connection takes its local port
/// from the kernel's ephemeral range (the suite makes thousands, to the
/// Consul emulator or a real agent), and one could take a port between our
/// probe and the server's bind, which then fails. Below that range only
/// listeners bind, so we count through it from a point of this run's own,
/// skipping any port that is taken.
pub fn free_port() -> u16 {
    const LOWEST: u32 = 10_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let span = ephemeral.saturating_sub(LOWEST);
    if span < 1_000 {
        // Too narrow a range below to count through: any port will do.
        return TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("an ephemeral port")
            .port();
    }
    let start = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let port = LOWEST + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        if TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
            return port as u16;
        }
    }
    panic!("no free port on loopback between {LOWEST} and {ephemeral}");
}
