//! The clock-rate bound, measured: a holder whose clock libfaketime slows
//! (CLOCK_MONOTONIC, CLOCK_BOOTTIME, its timers and waits alike) is cut off
//! from a real etcd, so that it stops its command on its own slow clock
//! while etcd expires the lease on the real one; a rival lockrun on the
//! real clock then takes the lock. The command must be dead before the
//! rival's starts, by the commands' own timestamps.

use std::path::Path;

use crate::engines::etcd::support::etcd;
use crate::link::Link;
use crate::places::{last_beat, Place};
use crate::procs::{self, wait_until};
use crate::support::{self, now_ns, scratch, Running};

/// Debian's `libfaketime` package (CI installs it).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The slowest clock the default bound, 166,666 ppm combined, promises to
/// cover: lockrun's clock slower than the engine's by all of it. etcd here
/// runs on the real clock, so our host takes both hosts' halves: x0.8334 is
/// 5/6 of real time, rounded up to stay within the bound. Before the bound
/// (a TTL/10 margin) the same run overlapped: etcd's issue measured 430 ms
/// at x0.82 with `--ttl 5s`.
const AT_THE_BOUND: &str = "0.8334";

/// The TTL of both runs: long enough that etcd's lease expiry, which its
/// leader checks every 500 ms, cannot hide a margin that is missing.
const TTL: &str = "10s";

fn libfaketime() -> Option<&'static Path> {
    let path = Path::new(LIBFAKETIME);
    if path.exists() {
        Some(path)
    } else {
        eprintln!("skipped: {LIBFAKETIME} is missing (apt-get install libfaketime)");
        None
    }
}

/// What the heartbeat's child does first: drop libfaketime, so that its
/// `date` stamps (and everything it runs) read the real clock, and ignore
/// SIGTERM, so that only SIGKILL at the end of `--kill-timeout` stops it.
const REAL_CLOCK_AND_NO_TERM: &str = "unset LD_PRELOAD FAKETIME; trap '' TERM;";

#[test]
fn an_etcd_holder_slowed_by_the_whole_default_bound_is_killed_before_the_rival_starts() {
    let Some(faketime) = libfaketime() else {
        return;
    };
    let link = Link::new(etcd().endpoint.trim_start_matches("http://"));
    let place = Place::etcd_at("clock-rate", &link.http_addr());
    let key = place.key("k");
    let work = scratch();
    // `+0 x0.8334`: no offset, the rate alone (libfaketime wants the
    // offset); a `.` since lockrun sets no locale.
    let holder = {
        let mut cmd = place.lockrun(&["elect", "--ttl", TTL, &key]);
        cmd.env("LD_PRELOAD", faketime)
            .env("FAKETIME", format!("+0 x{AT_THE_BOUND}"));
        let body = support::script_with(
            REAL_CLOCK_AND_NO_TERM,
            "while :; do date +%s%N >> \"$1/beat\"; sleep 0.01; done",
        );
        cmd.args(["--shell", "--", &body]).arg(work.path());
        Running::spawn(&mut cmd)
    };
    // A whole stamp, not just the file `>>` creates before `date` writes.
    let beat_file = work.path().join("beat");
    assert!(
        wait_until(procs::deadline(), || std::fs::read_to_string(&beat_file)
            .is_ok_and(|t| t.contains('\n'))),
        "the holder's command never wrote a heartbeat"
    );
    // The child's stamps are the real clock's, not libfaketime's: a slowed
    // clock would already lag by a sixth of the time since lockrun began.
    let (beat, now) = (last_beat(work.path()), now_ns());
    assert!(
        beat.abs_diff(now) < 2_000_000_000,
        "the child's clock is not the real one: {beat} against {now}"
    );

    link.freeze();
    let started = work.path().join("rival");
    let rival = Running::spawn(
        support::bare(["--backend", "etcd", "--endpoints", &etcd().endpoint])
            .args(["elect", "--ttl", TTL, &key, "--shell", "--"])
            .arg(format!("date +%s%N > {}", started.display())),
    );
    let held = holder.finish();
    place.status(&held, 124, "the slowed, cut-off holder");
    place.status(&rival.finish(), 0, "the rival on the real clock");
    assert!(
        wait_until(procs::deadline(), || started.exists()),
        "the rival never ran"
    );
    let last = last_beat(work.path());
    let first = std::fs::read_to_string(&started)
        .unwrap()
        .trim()
        .parse::<u128>()
        .unwrap();
    let spare = first as i128 - last as i128;
    eprintln!(
        "clock x{AT_THE_BOUND}: the holder's command ended {} ms before the rival's began",
        spare / 1_000_000
    );
    assert!(
        spare > 0,
        "with lockrun's clock at x{AT_THE_BOUND}, its command ran {} ms into the rival's",
        -spare / 1_000_000
    );
    link.thaw();
}
