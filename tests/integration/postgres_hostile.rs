//! `--backend postgres` against what production puts around a server:
//! PgBouncer in every pooling mode, ports that never answer or answer
//! another protocol, a host list that starts at a standby, a restart under
//! waiting runs, and an L4 relay that stops forwarding while keeping TCP
//! open. Overlap is measured with the commands' own timestamps.

use std::path::Path;

use crate::pg_support::{psql_ok, unique, Bouncer};
use crate::procs::{deadline, wait_until};
use crate::support::{bare, max_overlap, scratch, Running};

/// Each run's command: its start and end, a second apart.
const SPAN: &str = "date +%s%N > \"$1/start\"; sleep 1; date +%s%N > \"$1/end\"";

fn stamp(dir: &Path, name: &str) -> Option<u128> {
    std::fs::read_to_string(dir.join(name))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// A role whose own statement_timeout equals the TTL the pooled runs
/// use: the setting that once satisfied the pooler check.
fn timed_role() {
    psql_ok(
        "do $$ begin create role lockrun_timed login superuser; \
         exception when duplicate_object then null; end $$; \
         alter role lockrun_timed set statement_timeout = '10s'",
    );
}

/// Every PgBouncer pooling mode, with and without its startup settings
/// dropped, as a role with and without a statement_timeout equal to the
/// TTL: two runs started together either are refused with one line (125)
/// and never run their command, or hold one after the other.
#[test]
fn every_pgbouncer_pooling_is_refused_or_exclusive() {
    timed_role();
    let mut problems = Vec::new();
    for mode in ["session", "transaction", "statement"] {
        for ignore in ["", "ignore_startup_parameters = options"] {
            let bouncer = Bouncer::start(mode, ignore);
            for user in ["postgres", "lockrun_timed"] {
                let what = format!("{mode} pooling, `{ignore}`, as {user}");
                let key = unique("pooled");
                let url = bouncer.url(user);
                let start = || {
                    let dir = scratch();
                    let mut cmd = bare(["--backend", "postgres", "--dsn", &url]);
                    cmd.args(["elect", "--ttl", "10s", "--timeout", "20s", &key])
                        .args(["--shell", "--", SPAN])
                        .arg(dir.path());
                    (Running::spawn(&mut cmd), dir)
                };
                // The second comes once the first holds (or is refused):
                // then it meets the first's server connection idle in the
                // pool, where a plain try is re-entrant.
                let mut first = start();
                assert!(
                    wait_until(deadline(), || stamp(first.1.path(), "start").is_some()
                        || first.0.exited()),
                    "{what}: the first run neither ran nor ended"
                );
                let runs = [first, start()];
                let mut spans = Vec::new();
                let mut codes = Vec::new();
                for (running, dir) in runs {
                    let output = running.finish();
                    let err = String::from_utf8_lossy(&output.stderr);
                    let code = output.status.code();
                    codes.push(code);
                    match code {
                        Some(125) => {
                            if !err.contains("pooler") || err.trim().lines().count() != 1 {
                                problems
                                    .push(format!("{what}: not one line naming the pooler: {err}"));
                            }
                            if stamp(dir.path(), "start").is_some() {
                                problems.push(format!("{what}: a refused run ran its command"));
                            }
                        }
                        Some(0) => spans.push((
                            stamp(dir.path(), "start").expect("start"),
                            stamp(dir.path(), "end").expect("end"),
                        )),
                        _ => problems.push(format!("{what}: exit {code:?}: {err}")),
                    }
                }
                eprintln!("{what}: exits {codes:?}");
                if max_overlap(spans.iter().copied()) > 1 {
                    problems.push(format!("{what}: two runs held the lock at once: {spans:?}"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
