//! lockrun as the tree's second keeper, should its guard be killed alone.
//!
//! The guard is a child subreaper: while it lives, nothing of COMMAND's tree
//! can leave it. But the guard can be SIGKILLed by itself (an operator's
//! `kill -9`, the OOM killer's choice), and its orphans, a `setsid` daemon
//! among them, would then be re-parented to init, out of anyone's reach,
//! while lockrun, seeing its guard gone, released the lock. So lockrun is a
//! child subreaper too ([`adopt`]): a killed guard's orphans become
//! lockrun's children, which lockrun kills and reaps ([`sweep`]) before it
//! lets go of the lock, as the guard would have. In cgroup mode the cgroup
//! catches them as well; there we only reap them.
//!
//! lockrun's only children are its guards (COMMAND's, and each hook's), so
//! any other child is an orphan of a guard's tree: except a child it had
//! before it became a subreaper, which a shell that `exec`s lockrun after
//! `cmd &` leaves it, and which we never touch.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::time::{sleep, Instant};

use super::sys;

/// The children lockrun had when it became a subreaper: not ours to kill.
static BEFORE: OnceLock<HashSet<u32>> = OnceLock::new();

/// The guards that are lockrun's children now, parked or running.
static GUARDS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// The longest pause between two looks at the orphans while they die.
const MAX_PAUSE: Duration = Duration::from_millis(50);

/// Makes lockrun a child subreaper, once, noting the children it has
/// already. Call it before the first guard starts. Without it (a failed
/// prctl) a guard killed alone leaves its orphans to init, as before.
pub fn adopt() {
    BEFORE.get_or_init(|| {
        if let Err(err) = nix::sys::prctl::set_child_subreaper(true) {
            tracing::debug!("cannot become a child subreaper: {err}");
        }
        children().into_iter().collect()
    });
}

/// Whether lockrun adopts orphans: [`adopt`] was called.
fn adopting() -> bool {
    BEFORE.get().is_some()
}

/// Notes a new guard of ours, which is no orphan.
pub(super) fn guard_started(pid: u32) {
    if adopting() {
        lock().push(pid);
    }
}

/// Forgets a guard we reaped: its pid may come back as anyone's.
pub(super) fn guard_reaped(pid: u32) {
    if adopting() {
        lock().retain(|guard| *guard != pid);
    }
}

fn lock() -> std::sync::MutexGuard<'static, Vec<u32>> {
    GUARDS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Our children that are neither guards nor had before we adopted: what
/// a killed guard's tree left us, live or zombie.
fn orphans() -> Vec<u32> {
    let Some(before) = BEFORE.get() else {
        return Vec::new();
    };
    let guards = lock().clone();
    children()
        .into_iter()
        .filter(|pid| !before.contains(pid) && !guards.contains(pid))
        .collect()
}

/// Kills and reaps the orphans a killed guard left us, until none is left
/// or `limit` has passed; those still alive then. An orphan that dies
/// re-parents its own children to us before we can reap it, so a pass
/// that finds nobody means the whole tree is gone. Nothing to do, the
/// usual case, costs one read of our children's list per thread.
pub(super) async fn sweep(limit: Duration) -> Vec<u32> {
    let until = Instant::now() + limit;
    let mut pause = Duration::from_millis(1);
    loop {
        // Our unreaped children: their pids are ours, safe to signal.
        let alive: Vec<u32> = orphans()
            .into_iter()
            .filter(|pid| matches!(sys::try_reap(*pid), Ok(None)))
            .collect();
        if alive.is_empty() || Instant::now() >= until {
            return alive;
        }
        tracing::debug!("killing {alive:?}, left by a guard that was killed");
        for pid in &alive {
            let _ = kill(Pid::from_raw(*pid as i32), Signal::SIGKILL);
        }
        sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// Our children, from every thread's list in /proc (an orphan goes to
/// one of our threads); from a walk of /proc where the kernel keeps no
/// such list.
fn children() -> Vec<u32> {
    let listed = std::fs::read_dir("/proc/self/task").ok().and_then(|tasks| {
        let mut all = Vec::new();
        for task in tasks.flatten() {
            let text = std::fs::read_to_string(task.path().join("children")).ok()?;
            all.extend(
                text.split_ascii_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
        Some(all)
    });
    match listed {
        Some(all) => all,
        None => sys::children_by_walk(std::process::id()),
    }
}
