//! `leader` and `release` on an engine seen through [`Inspect`]: the live
//! holders, their changes, and asking them to let go.

use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use crate::backend::{Ahead, Changes, Holder, Inspect, ReplaceNote, Target, Waiter, Which};
use crate::error::Failure;
use crate::exit::Exit;

use super::{leader, release};
use crate::exit::write_stdout;

fn seconds(at: Option<SystemTime>) -> Option<u64> {
    at.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(|d| d.as_secs())
}

/// The fields every backend shows, and the engine's own under `details`.
/// `fence` is the holder's LOCKRUN_LOCK_INDEX where the engine keeps it:
/// local's facts, an etcd slot's CreateRevision, a Consul lock's
/// ModifyIndex; an etcd lock holder's is the revision at which it found the
/// lock its own, which a lockrun holder records beside its key once its
/// command runs (null for `etcdctl lock`, and until then), and a Consul
/// slot's was overwritten by the next change of holders (null).
fn holder_json<I: Inspect>(inspect: &I, holder: &Holder) -> Value {
    json!({
        "value": holder.value,
        "fence": holder.fence,
        "since": holder.since.map(|t| humantime::format_rfc3339_seconds(t).to_string()),
        "since_unix": seconds(holder.since),
        "host": holder.host,
        "pid": holder.pid,
        "details": inspect.details(holder),
    })
}

/// The lockrun waiters the engine shows, with their priorities (`elect
/// --priority`); null where its waiters are not visible.
fn waiters_json(waiters: Option<&[Waiter]>) -> Value {
    match waiters {
        Some(waiters) => waiters
            .iter()
            .map(|w| json!({"priority": w.priority, "value": w.value, "pid": w.pid}))
            .collect(),
        None => Value::Null,
    }
}

/// The one JSON shape of `--json` and `--json --watch`, as a line.
fn json_line<I: Inspect>(
    inspect: &I,
    backend: &str,
    target: &Target,
    holders: &[Holder],
    waiters: Option<&[Waiter]>,
) -> Vec<u8> {
    let (kind, limit) = match target {
        Target::Lock { shared: false, .. } => ("lock", None),
        Target::Lock { shared: true, .. } => ("shared", None),
        Target::Slot { limit, .. } => ("semaphore", Some(*limit)),
    };
    let value = json!({
        "key": target.name(),
        "backend": backend,
        "kind": kind,
        "held": !holders.is_empty(),
        "limit": limit,
        "holders": holders.iter().map(|h| holder_json(inspect, h)).collect::<Vec<_>>(),
        "waiters": waiters_json(waiters),
    });
    let mut line = serde_json::to_vec(&value).expect("JSON serialises");
    line.push(b'\n');
    line
}

fn print<I: Inspect>(
    inspect: &I,
    backend: &str,
    target: &Target,
    holders: &[Holder],
    json: Option<Option<&[Waiter]>>,
) -> Exit {
    let out = if let Some(waiters) = json {
        json_line(inspect, backend, target, holders, waiters)
    } else {
        holders
            .iter()
            .flat_map(|h| {
                let mut line = h.label();
                line.push(b'\n');
                line
            })
            .collect()
    };
    write_stdout(&out);
    if holders.is_empty() {
        crate::logging::note(&format!("nobody holds `{}`", target.name()));
        Exit::NotHeld
    } else {
        Exit::Success
    }
}

/// What `key` names, asked again when holders appear where there were none:
/// a prefix nobody used yet reads as a lock, and its first holder may show
/// it to be a semaphore (or the other way round).
async fn target_again<I: Inspect>(
    inspect: &I,
    key: &str,
    target: &Target,
) -> Result<Option<Target>, Failure> {
    let now = inspect.target_of(key).await.map_err(Into::into)?;
    Ok((now != *target).then_some(now))
}

/// `backend` names the engine in `--json` (`consul`, `etcd`, `local`).
pub async fn leader<I: Inspect>(
    inspect: &I,
    backend: &str,
    job: leader::Job,
) -> Result<Exit, Failure> {
    let mut target = inspect.target_of(job.key()).await.map_err(Into::into)?;
    let json = job.args.json;
    if job.args.watch {
        let mut changes = inspect.changes(&target).await.map_err(Into::into)?;
        let mut had_none = true;
        // An engine may report a change that the line does not show (a
        // local holder's facts growing its child's group): one line per
        // change of what is printed, never the same line twice.
        let mut last: Option<Vec<u8>> = None;
        loop {
            let mut holders = changes.next().await.map_err(Into::into)?;
            if had_none && !holders.is_empty() {
                if let Some(now) = target_again(inspect, job.key(), &target).await? {
                    target = now;
                    changes = inspect.changes(&target).await.map_err(Into::into)?;
                    holders = changes.next().await.map_err(Into::into)?;
                }
            }
            had_none = holders.is_empty();
            let line = if json {
                let waiters = inspect.waiters(&target).await.map_err(Into::into)?;
                json_line(inspect, backend, &target, &holders, waiters.as_deref())
            } else {
                // One line per change: the holders' labels joined by spaces,
                // or an empty line for "no holder".
                let labels: Vec<Vec<u8>> = holders.iter().map(Holder::label).collect();
                let mut line = labels.join(&b' ');
                line.push(b'\n');
                line
            };
            if last.as_ref() == Some(&line) {
                continue;
            }
            if !write_stdout(&line) {
                return Ok(Exit::Success);
            }
            last = Some(line);
        }
    }
    let holders = match job.wait {
        Some(wait) => {
            let waited = crate::backend::wait_for_holder(inspect, &target);
            let holders = match wait.deadline() {
                Some(at) => match tokio::time::timeout_at(at, waited).await {
                    Ok(holders) => holders.map_err(Into::into)?,
                    Err(_) => Vec::new(),
                },
                None => waited.await.map_err(Into::into)?,
            };
            if holders.is_empty() {
                holders
            } else if let Some(now) = target_again(inspect, job.key(), &target).await? {
                target = now;
                inspect.holders(&target).await.map_err(Into::into)?
            } else {
                holders
            }
        }
        None => inspect.holders(&target).await.map_err(Into::into)?,
    };
    let waiters = match json {
        true => Some(inspect.waiters(&target).await.map_err(Into::into)?),
        false => None,
    };
    Ok(print(
        inspect,
        backend,
        &target,
        &holders,
        waiters.as_ref().map(Option::as_deref),
    ))
}

pub async fn release<I: Inspect>(inspect: &I, job: release::Job) -> Result<Exit, Failure> {
    let target = inspect.target_of(&job.key).await.map_err(Into::into)?;
    if let Target::Slot { prefix, .. } = &target {
        if !job.args.all {
            if let Some(why) = inspect.refuse_every_slot(prefix) {
                return Err(Failure::Usage(why));
            }
        }
    }
    let released = inspect
        .force_release(&target, &Which::All)
        .await
        .map_err(Into::into)?;
    let (asked, mut refused) = (released.asked, released.refused);
    if asked.is_empty() && refused.is_empty() {
        match released.nothing {
            Some(why) => tracing::error!("{why}"),
            None => tracing::error!("nothing to release: `{}` is not held", job.key),
        }
        return Ok(Exit::NotHeld);
    }
    let mut out = String::new();
    for holder in &asked {
        out.push_str(&inspect.asked_line(&target, holder));
        out.push('\n');
    }
    write_stdout(out.as_bytes());
    // The holders we could not ask come after those we asked, one line
    // each; any of them makes the run a failure (125): the lock, or a slot
    // of it, is still held.
    let Some(last) = refused.pop() else {
        return Ok(Exit::Success);
    };
    for e in refused {
        let failure: Failure = e.into();
        tracing::error!("{failure}");
    }
    Err(last.into())
}

/// One lock or semaphore `list` shows: by name, or (PostgreSQL) by the
/// engine's id of a lock whose name it does not keep.
enum Listed {
    /// A lock or semaphore, its holders, and its waiters where the engine
    /// shows them.
    Named(Target, Vec<Holder>, Option<Vec<Waiter>>),
    Unnamed(String, Vec<Holder>),
}

/// `lockrun list [PREFIX]`: every held lock and semaphore under the prefix,
/// a table of holders, or one `leader --json` line per lock.
pub async fn list<I: Inspect>(
    inspect: &I,
    backend: &str,
    job: super::list::Job,
) -> Result<Exit, Failure> {
    let mut names = inspect.names_under(&job.prefix).await.map_err(Into::into)?;
    names.retain(|n| super::list::is_under(n, &job.prefix));
    names.sort();
    names.dedup();
    let mut listed = Vec::new();
    let mut semaphores: Vec<String> = Vec::new();
    for name in names {
        // A semaphore's own entries are its slots, not locks of their own.
        if semaphores.iter().any(|s| super::list::is_under(&name, s)) {
            continue;
        }
        let target = inspect.target_of(&name).await.map_err(Into::into)?;
        if let Target::Slot { prefix, .. } = &target {
            semaphores.push(prefix.clone());
        }
        let holders = inspect.holders(&target).await.map_err(Into::into)?;
        if !holders.is_empty() {
            let waiters = inspect.waiters(&target).await.map_err(Into::into)?;
            listed.push(Listed::Named(target, holders, waiters));
        }
    }
    // Slots listed before their semaphore was known are left out too.
    listed.retain(|l| match l {
        Listed::Named(Target::Lock { key, .. }, _, _) => !semaphores
            .iter()
            .any(|s| key != s && super::list::is_under(key, s)),
        _ => true,
    });
    if job.prefix.is_empty() {
        for (id, holders) in inspect.unnamed().await.map_err(Into::into)? {
            listed.push(Listed::Unnamed(id, holders));
        }
    }
    let out = if job.json {
        let mut out = Vec::new();
        for l in &listed {
            match l {
                Listed::Named(target, holders, waiters) => out.extend(json_line(
                    inspect,
                    backend,
                    target,
                    holders,
                    waiters.as_deref(),
                )),
                Listed::Unnamed(id, holders) => {
                    let value = json!({
                        "key": null,
                        "id": id,
                        "backend": backend,
                        "kind": "lock",
                        "held": true,
                        "limit": null,
                        "holders": holders.iter().map(|h| holder_json(inspect, h)).collect::<Vec<_>>(),
                        "waiters": Value::Null,
                    });
                    out.extend(serde_json::to_vec(&value).expect("JSON serialises"));
                    out.push(b'\n');
                }
            }
        }
        out
    } else {
        table(&listed)
    };
    write_stdout(&out);
    if listed.is_empty() {
        let under = if job.prefix.is_empty() {
            String::new()
        } else {
            format!(" under `{}`", job.prefix)
        };
        crate::logging::note(&format!("nothing is held{under}"));
        Ok(Exit::NotHeld)
    } else {
        Ok(Exit::Success)
    }
}

/// The holders as a table: a header, then a row per holder, columns
/// padded to their widest cell; `-` where the engine does not know.
fn table(listed: &[Listed]) -> Vec<u8> {
    let mut rows: Vec<[String; 8]> = vec![[
        "KEY", "KIND", "SLOT", "HOLDER", "FENCE", "HOST", "PID", "SINCE",
    ]
    .map(String::from)];
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for l in listed {
        let (key, kind, holders, waiters) = match l {
            Listed::Named(target, holders, waiters) => {
                let kind = match target {
                    Target::Lock { shared: false, .. } => "lock".to_string(),
                    Target::Lock { shared: true, .. } => "shared".to_string(),
                    Target::Slot { limit, .. } => format!("semaphore/{limit}"),
                };
                (target.name().to_string(), kind, holders, waiters.as_deref())
            }
            Listed::Unnamed(id, holders) => {
                (format!("(id {id})"), "lock".to_string(), holders, None)
            }
        };
        for h in holders {
            rows.push([
                key.clone(),
                kind.clone(),
                or_dash(h.slot.map(|s| s.to_string())),
                crate::backend::shown(&String::from_utf8_lossy(&h.label())),
                or_dash(h.fence.map(|f| f.to_string())),
                or_dash(h.host.clone()),
                or_dash(h.pid.map(|p| p.to_string())),
                or_dash(
                    h.since
                        .map(|t| humantime::format_rfc3339_seconds(t).to_string()),
                ),
            ]);
        }
        // lockrun's writers waiting, highest priority first: their kind
        // says so, with the priority (`elect --priority`).
        for w in waiters.unwrap_or_default() {
            rows.push([
                key.clone(),
                format!("waiting/{}", w.priority),
                "-".into(),
                or_dash(w.value.as_deref().map(crate::backend::shown)),
                "-".into(),
                "-".into(),
                or_dash(w.pid.map(|p| p.to_string())),
                "-".into(),
            ]);
        }
    }
    if rows.len() == 1 {
        return Vec::new();
    }
    let mut widths = [0usize; 8];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  "));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.into_bytes()
}

/// What `--replace` takes, by when, as whom, and how far this host's clock
/// may run fast of the engine's (`--clock-rate-error`).
pub struct Replacing {
    pub target: Target,
    pub deadline: Option<tokio::time::Instant>,
    pub value: String,
    pub rate: crate::clock::Ppm,
    /// The status of a lock not had in time (75, or --conflict-exit-code):
    /// what a replacement whose --timeout runs out exits with.
    pub conflict_exit_code: u8,
}

/// How a replacement ended, when it did not fail.
pub enum Replaced {
    /// The holder is gone: the line that says whom we replaced, and our
    /// record ahead of lockrun's waiters, kept while we take the lock.
    Took(String, Option<Ahead>),
    /// --timeout ran out before the holder's command was seen to end: the
    /// line that says so, and the exit of a lock not had in time. No try
    /// follows: the holder may let go a moment later, and COMMAND must not
    /// run after a line that says we gave up.
    RanOut(String, Exit),
}

/// Beyond the lapse bound, for the holder's kill to be delivered and its
/// tree reaped, and our timer to fire late on a loaded host.
const LAPSE_MARGIN: Duration = Duration::from_secs(1);

/// How `--replace` knows the holder's command is gone.
enum End {
    /// A lockrun on this host: its exit, through a pidfd, or the time its
    /// lease would have taken to lapse, where the engine shows it (a
    /// stopped lockrun never exits, but its guard ends its tree in time).
    Exit(u32, ProcessExit, Option<Duration>),
    /// A lockrun on another host: its word (it removes our note once its
    /// tree is gone), or the time its lease would have taken to lapse.
    Lapse(String, Duration),
    /// A lockrun on another host, on an engine that ends a silent
    /// holder's claim itself ([`Inspect::ends_silent_claims`]): its word,
    /// or the claim's end in the engine; never released.
    Claim(String),
}

/// `--replace`: takes the target from its holder (a semaphore's oldest) in
/// one step that never overlaps. Where a lockrun holder reads the note we
/// leave it while it holds ([`Inspect::asks_by_note`]: every engine with a
/// server), the note is the ask: the holder stops its command's tree and
/// only then lets go, so the engine shows the lock held, to every waiter
/// and to a second `--replace`, until the tree is gone; we release it
/// ourselves, as below, only if it has not said so once its lease would
/// have lapsed (stopped, or an older lockrun; see [`answered`]). A release
/// frees the lock at once on every engine with a server, while the
/// holder's command may still run, so after one we acquire only once it
/// is gone: for a lockrun on this host, once that lockrun has exited
/// (which it does once its command's whole tree is gone); for one on
/// another host, once it says its tree is gone (it
/// removes the note we left it) or, failing that, once its lease would
/// have lapsed, within which its lockrun stops its command (where the
/// engine shows that bound: etcd, Consul); where it does not but ends a
/// silent holder's claim itself (ZooKeeper, PostgreSQL), a holder on
/// another host is never released: we wait for its word or its claim's
/// end. Before the release we leave the
/// holder a note naming us (host, pid, `--value`), which its loss line
/// shows, and remove it at the end. Before anything is asked, a lock's
/// replacer puts a waiter's record above every priority
/// ([`Inspect::go_ahead`]), so that lockrun's writers already waiting step
/// aside and the replacer takes the lock first. Returns the line that says
/// whom it replaced, with that record, which the caller keeps until its
/// hold ends; `None` when nobody held it. Anything else (a peer tool's
/// holder, a holder whose end cannot be seen or waited out) is one line and
/// 125 before anything is asked or written.
pub async fn replace<I: Inspect>(
    inspect: &I,
    replacing: Replacing,
) -> Result<Option<Replaced>, Failure> {
    let Replacing {
        target,
        deadline,
        value,
        rate,
        conflict_exit_code,
    } = replacing;
    let key = target.name();
    let now = inspect.target_of(key).await.map_err(Into::into)?;
    if std::mem::discriminant(&now) != std::mem::discriminant(&target) {
        // The acquisition says what is wrong, as without --replace.
        return Ok(None);
    }
    let holders = inspect.holders(&now).await.map_err(Into::into)?;
    let Some(victim) = holders
        .iter()
        // The oldest: a slot admitted later has a greater fence; where the
        // engine keeps none (a Consul slot), its holders come oldest first,
        // and the first of equals is taken.
        .min_by_key(|h| {
            (
                h.fence.is_none(),
                h.fence,
                h.since.is_none(),
                h.since,
                h.slot,
            )
        })
        .cloned()
    else {
        return Ok(None);
    };
    let what = match victim.slot {
        Some(slot) => format!("slot {slot} of `{key}`"),
        None => format!("`{key}`"),
    };
    let label = String::from_utf8_lossy(&victim.label()).into_owned();
    let here = crate::host::hostname();
    let end = match (&victim.value, victim.pid, victim.host.as_deref()) {
        (Some(_), Some(pid), Some(host)) if host == here => match ProcessExit::open(pid)? {
            Some(exited) => {
                // Only a bound to wait for less; without one, its exit.
                let bound = inspect.lapse_bound(&victim).await.ok().flatten();
                End::Exit(pid, exited, bound)
            }
            // Gone already: its lock went with it, or goes with its guard.
            None => return Ok(None),
        },
        (Some(_), Some(_), Some(host)) if victim.holder_id.is_some() => {
            match inspect.lapse_bound(&victim).await.map_err(Into::into)? {
                Some(bound) => End::Lapse(host.to_string(), bound),
                None if inspect.asks_by_note() && inspect.ends_silent_claims() => {
                    End::Claim(host.to_string())
                }
                None => {
                    return Err(Failure::Conflict(format!(
                        "--replace cannot take {what}: its holder {label} runs on {host}, a release frees the lock at once while its command may still run there, and this engine does not show how long its lease would take to lapse; run --replace on {host}, or lockrun release it there"
                    )))
                }
            }
        }
        _ => {
            return Err(Failure::Conflict(format!(
                "--replace cannot take {what}: its holder {label} is not a lockrun whose end this lockrun can see (a peer tool's, a reader whose lockrun keeps no facts, or the engine keeps no pid); stop it, or lockrun release it and wait"
            )))
        }
    };
    // Before the ask: the writers queued now see it before the lock is
    // free. Dropped (removed) on every way out but success.
    // Only an order, never safety: one we cannot put is a warning.
    let ahead = match inspect.go_ahead(&now, &value).await {
        Ok(ahead) => ahead,
        Err(e) => {
            let failure: Failure = e.into();
            tracing::warn!("could not put our record ahead of the waiters, so one queued before us may get the lock first: {failure}");
            None
        }
    };
    let note = ReplaceNote {
        holder: victim.holder_id.clone().unwrap_or_default(),
        host: here,
        pid: std::process::id(),
        value,
    };
    // A holder left no note says "an operator's release" on its way out:
    // worth a warning, not worth keeping it holding.
    let noted = if victim.holder_id.is_some() {
        match inspect.leave_note(&now, &victim, &note).await {
            Ok(noted) => noted,
            Err(e) => match e.into() {
                // It would not take our note: say so, and leave it holding.
                refused @ Failure::Conflict(_) => return Err(refused),
                failure => {
                    tracing::warn!(
                        "could not leave the replaced holder a note naming us: {failure}"
                    );
                    false
                }
            },
        }
    } else {
        false
    };
    // Whether --timeout ran out: not a failure of ours, but the lock not
    // had in time, which ends the run with its status (75, or
    // --conflict-exit-code) and no try of the lock ([`Replaced::RanOut`]).
    let timed_out = std::cell::Cell::new(false);
    let ran_out = |whose: &str| {
        timed_out.set(true);
        Failure::Conflict(format!(
            "--replace asked the holder of {what} ({label}{whose}) to release, and --timeout ran out before its command was seen to end"
        ))
    };
    let asked = async {
        if inspect.asks_by_note() {
            let answer = answered(inspect, &now, &victim, &end, deadline, rate).await;
            match (answer, &end) {
                (Answer::Gone, End::Exit(pid, ..)) => {
                    return Ok(format!(
                        "replaced {label} (lockrun pid {pid}) as the holder of {what}"
                    ))
                }
                (Answer::Gone, End::Lapse(host, _) | End::Claim(host)) => {
                    return Ok(format!(
                        "replaced {label} on {host} as the holder of {what}: its lockrun said its command had stopped"
                    ))
                }
                (Answer::RanOut, End::Exit(pid, ..)) => {
                    return Err(ran_out(&format!(", lockrun pid {pid}")))
                }
                (Answer::RanOut, End::Lapse(host, _) | End::Claim(host)) => {
                    return Err(ran_out(&format!(" on {host}")))
                }
                // Its claim ended in the engine without its word: the
                // engine ends a silent holder's claim only once its lockrun
                // has stopped its command, as for any rival.
                (Answer::Silent, End::Claim(host)) => {
                    let how = if noted {
                        "its lockrun did not say its command had stopped, so we waited until the engine ended its claim (its lease lapsed)"
                    } else {
                        "we waited until the engine ended its claim (another --replace's note was there)"
                    };
                    return Ok(format!(
                        "replaced {label} on {host} as the holder of {what}: {how}"
                    ));
                }
                // It did not answer (stopped, or an older lockrun), or it
                // exited still listed: the release, and the wait, as below.
                (Answer::Silent, _) => {}
            }
        }
        let released = inspect
            .force_release(&now, &Which::Holder(Box::new(victim.clone())))
            .await
            .map_err(Into::into)?;
        if let Some(e) = released.refused.into_iter().next() {
            return Err(e.into());
        }
        match &end {
            End::Exit(pid, exited, bound) => {
                let wait = bound.map(|b| b.mul_f64(1.0 + rate.fraction()) + LAPSE_MARGIN);
                let lapse = wait.map(|w| tokio::time::Instant::now() + w);
                let until = match (deadline, lapse) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                let waited = exited.wait();
                let exited = match until {
                    Some(at) => tokio::time::timeout_at(at, waited).await.ok(),
                    None => Some(waited.await),
                };
                match (exited, lapse) {
                    (Some(exited), _) => {
                        exited?;
                        Ok(format!(
                            "replaced {label} (lockrun pid {pid}) as the holder of {what}"
                        ))
                    }
                    (None, Some(lapse)) if until == Some(lapse) => Ok(format!(
                        "replaced {label} (lockrun pid {pid}) as the holder of {what}: it did not exit, so we waited {} for its lease to lapse",
                        crate::duration::fmt_duration(wait.unwrap_or_default())
                    )),
                    (None, _) => Err(ran_out(&format!(", lockrun pid {pid}"))),
                }
            }
            End::Claim(_) => unreachable!("a claim the engine ends is never released"),
            End::Lapse(host, bound) => {
                // Counted from now, after the release: every renewal the
                // holder had confirmed was sent before it.
                let wait = bound.mul_f64(1.0 + rate.fraction()) + LAPSE_MARGIN;
                let lapse = tokio::time::Instant::now() + wait;
                let until = deadline.map_or(lapse, |at| at.min(lapse));
                // Only our own note's going says so: one we could not leave
                // (another replacer's is there) says nothing of the holder.
                let said = if noted {
                    inspect.note_taken(&now, &victim, until).await
                } else {
                    tokio::time::sleep_until(until).await;
                    false
                };
                if !said && until < lapse {
                    return Err(ran_out(&format!(" on {host}")));
                }
                let how = if said {
                    "its lockrun said its command had stopped".to_string()
                } else {
                    format!(
                        "its lockrun did not say its command had stopped, so we waited {} for its lease to lapse",
                        crate::duration::fmt_duration(wait)
                    )
                };
                Ok(format!(
                    "replaced {label} on {host} as the holder of {what}: {how}"
                ))
            }
        }
    }
    .await;
    if noted {
        inspect.clear_note(&now, &victim).await;
    }
    match asked {
        Ok(line) => Ok(Some(Replaced::Took(line, ahead))),
        Err(e) => {
            if let Some(ahead) = ahead {
                ahead.remove().await;
            }
            match e {
                Failure::Conflict(line) if timed_out.get() => Ok(Some(Replaced::RanOut(
                    line,
                    Exit::NotAcquired(conflict_exit_code),
                ))),
                e => Err(e),
            }
        }
    }
}

/// What a holder asked through the note ([`Inspect::asks_by_note`]) did.
enum Answer {
    /// It stopped its command and let go: its lockrun on this host has
    /// exited, or, on another host, it no longer holds and has removed the
    /// note, which it does once its tree is gone.
    Gone,
    /// It did not say so: it still holds once its lease would have lapsed
    /// (a stopped lockrun, an older one that reads no note), its lockrun
    /// exited still listed, or, on another host, its claim ended with the
    /// note still there (its lease lapsed in the engine). It is released
    /// then, and waited for as after any release; for [`End::Claim`] its
    /// claim has ended in the engine, and nothing remains to wait for.
    Silent,
    /// `--timeout` ran out first.
    RanOut,
}

/// How often `--replace` looks whether the holder it asked on another host
/// has let go.
const ANSWER_POLL: Duration = Duration::from_millis(200);

/// How long, once the holder on another host no longer holds, `--replace`
/// looks for the note's removal that says it stopped its command first.
const ANSWER_NOTE: Duration = Duration::from_secs(1);

/// Waits, with the lock still held in the engine, for the holder asked
/// through the note to stop its command and let go (see [`Answer`]):
/// at most until its lease would have lapsed, counted from the ask (where
/// the engine shows that), or `deadline`. A holder that renewed after the
/// ask may still hold then: it is released, and waited for again.
async fn answered<I: Inspect>(
    inspect: &I,
    target: &Target,
    victim: &Holder,
    end: &End,
    deadline: Option<tokio::time::Instant>,
    rate: crate::clock::Ppm,
) -> Answer {
    let bound = match end {
        End::Exit(_, _, bound) => *bound,
        End::Lapse(_, bound) => Some(*bound),
        End::Claim(_) => None,
    };
    let lapse = bound
        .map(|b| tokio::time::Instant::now() + b.mul_f64(1.0 + rate.fraction()) + LAPSE_MARGIN);
    let until = match (deadline, lapse) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let which = Which::Holder(Box::new(victim.clone()));
    let holds = || async {
        match inspect.holders(target).await {
            Ok(holders) => holders.iter().any(|h| which.picks(h)),
            // Not known: as if it still held.
            Err(_) => true,
        }
    };
    let watched = async {
        match end {
            // Its exit says its tree is gone; its claim's end alone does
            // not (a lease that lapsed in the engine).
            End::Exit(_, exited, _) => {
                let _ = exited.wait().await;
                if holds().await {
                    Answer::Silent
                } else {
                    Answer::Gone
                }
            }
            End::Lapse(..) | End::Claim(_) => loop {
                tokio::time::sleep(ANSWER_POLL).await;
                if !holds().await {
                    let within = tokio::time::Instant::now() + ANSWER_NOTE;
                    return if inspect.note_taken(target, victim, within).await {
                        Answer::Gone
                    } else {
                        Answer::Silent
                    };
                }
            },
        }
    };
    match until {
        None => watched.await,
        Some(at) => match tokio::time::timeout_at(at, watched).await {
            Ok(answer) => answer,
            Err(_) if lapse == until => Answer::Silent,
            Err(_) => Answer::RanOut,
        },
    }
}

/// A process whose exit we wait for through a pidfd, so a reused pid is
/// never mistaken for it.
struct ProcessExit {
    fd: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
}

impl ProcessExit {
    /// `None` when `pid` has exited already.
    fn open(pid: u32) -> Result<Option<ProcessExit>, Failure> {
        let fd = match super::sys::pidfd_open(pid) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(None),
            Err(e) => return Err(Failure::Internal(format!("cannot watch pid {pid} ({e})"))),
        };
        let fd = super::sys::register(fd)
            .map_err(|e| Failure::Internal(format!("cannot watch pid {pid} ({e})")))?;
        Ok(Some(ProcessExit { fd }))
    }

    /// Resolves once the process has exited.
    async fn wait(&self) -> Result<(), Failure> {
        self.fd
            .readable()
            .await
            .map(|_| ())
            .map_err(|e| Failure::Internal(format!("cannot watch a holder's exit ({e})")))
    }
}
