//! What `leader`, `list`, `release`, `put` and `--replace` read and write
//! in the lock directory (`Inspect`).

use std::os::fd::AsFd;
use std::sync::Arc;

use crate::backend::{
    Holder, Inspect, Released, ReplaceNote, Target, Which,
};

use super::engine::Local;
use super::error::{Kind, LocalError};
use super::facts::HolderFacts;
use super::tree::{Dir, KeyFiles, Missing};
use super::{dir, facts, semaphore, sys, waiters, watch};

impl Local {
    /// The files of `holder`'s lock (its slot's, for a semaphore).
    fn files_of(&self, target: &Target, holder: &Holder) -> Result<Option<KeyFiles>, LocalError> {
        Ok(match target {
            Target::Lock { key, .. } => self.key_files(key, Missing::Absent)?,
            Target::Slot { prefix, .. } => semaphore::slot_files(self, prefix)?
                .into_iter()
                .find(|(_, slot)| *slot == holder.slot)
                .map(|(files, _)| files),
        })
    }
}

impl Inspect for Local {
    type Error = LocalError;
    type Changes = watch::LocalChanges;

    /// A file of ours beside the lock, `KEY.lockrun-by`, a name no key can
    /// have.
    async fn leave_note(
        &self,
        target: &Target,
        holder: &Holder,
        note: &ReplaceNote,
    ) -> Result<bool, LocalError> {
        use std::io::Write;
        let Some(files) = self.files_of(target, holder)? else {
            return Ok(false);
        };
        let name = files.note();
        let mut file = files.dir.own_file(&name, 0o644)?;
        let bytes = note.encode();
        file.write_all(&bytes)
            .and_then(|()| file.set_len(bytes.len() as u64))
            .map_err(|e| LocalError::io(format!("cannot write `{}`", files.dir.join(&name).display()), e))?;
        Ok(true)
    }

    async fn clear_note(&self, target: &Target, holder: &Holder) {
        if let Ok(Some(files)) = self.files_of(target, holder) {
            match files.dir.unlink(&files.note()) {
                Ok(()) | Err(nix::errno::Errno::ENOENT) => {}
                Err(e) => tracing::warn!(
                    "could not remove --replace's note `{}`: {e}",
                    files.dir.join(&files.note()).display()
                ),
            }
        }
    }

    /// A writer's record beside the lock at `--replace`'s level, as one
    /// that waits puts ([`waiters`]): locked by us, it counts while we live.
    async fn go_ahead(&self, target: &Target, value: &str) -> Result<Option<crate::backend::Ahead>, LocalError> {
        let Target::Lock { key, shared: false } = target else {
            return Ok(None);
        };
        let Some(files) = self.key_files(key, Missing::Absent)? else {
            return Ok(None);
        };
        let record = waiters::Record::publish(&files, crate::backend::priority::REPLACE, value)?;
        Ok(Some(Box::new(record)))
    }

    /// lockrun's writers waiting for a leader lock, from their records
    /// beside it (see [`waiters`]); `flock(1)`'s waiters are the kernel's
    /// and not shown. A semaphore's waiters keep no records.
    async fn waiters(&self, target: &Target) -> Result<Option<Vec<crate::backend::Waiter>>, LocalError> {
        let Target::Lock { key, .. } = target else {
            return Ok(None);
        };
        let Some(files) = self.key_files(key, Missing::Absent)? else {
            return Ok(Some(Vec::new()));
        };
        Ok(Some(
            waiters::waiting(&files)?
                .into_iter()
                .map(|(seen, value)| crate::backend::Waiter {
                    priority: seen.level,
                    value,
                    pid: Some(seen.pid),
                })
                .collect(),
        ))
    }

    /// A lock file has no entry of its own: the child's group is the fact
    /// worth showing.
    fn details(&self, holder: &Holder) -> serde_json::Value {
        serde_json::json!({
            "child_pgid": holder.child_pgid,
            "slot": holder.slot,
        })
    }

    /// What `key` names here: a semaphore's prefix (a directory with a
    /// `.limit`) or a lock.
    async fn target_of(&self, key: &str) -> Result<Target, LocalError> {
        dir::check_key(key)?;
        let limit = self.dir.join(key).join(".limit");
        // Anything in the way (a missing directory, a lock file where the
        // prefix would be) makes KEY a lock, whose own look says more.
        let text = match self.descend(key.split('/'), Missing::Absent) {
            Ok(Some(dir)) => semaphore::read_text(&dir, ".limit"),
            _ => Err(LocalError::io_msg(String::new())),
        };
        match text {
            Ok(text) => match text.trim().parse() {
                Ok(limit) => Ok(Target::Slot {
                    prefix: key.to_string(),
                    limit,
                }),
                Err(_) => Err(LocalError::io_msg(format!(
                    "`{}` does not hold a limit; remove it when nobody holds a slot",
                    limit.display()
                ))),
            },
            Err(_) => {
                // Shared while readers hold it (`leader` says kind "shared").
                let shared = match self.key_files(key, Missing::Absent) {
                    Ok(Some(files)) => facts::holders_of(&files.dir, &files.lock)
                        .ok()
                        .flatten()
                        .is_some_and(|(_, lockers)| lockers.iter().any(|(_, shared)| *shared)),
                    _ => false,
                };
                Ok(Target::Lock {
                    key: key.to_string(),
                    shared,
                })
            }
        }
    }

    /// Every lock file and semaphore directory (one with a `.limit`) at or
    /// under `prefix`, read through checked directories, never following a
    /// link; a directory the checks refuse is an error, not left out.
    async fn names_under(&self, prefix: &str) -> Result<Vec<String>, LocalError> {
        use nix::sys::stat::SFlag;
        let kind = |st: &nix::sys::stat::FileStat| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
        let mut out = Vec::new();
        let start = if prefix.is_empty() {
            self.descend(std::iter::empty(), Missing::Absent)?
        } else {
            let Some(files) = self.key_files(prefix, Missing::Absent)? else {
                return Ok(out);
            };
            let st = files.dir.stat(&files.lock).map_err(|e| {
                LocalError::io(format!("cannot inspect `{}`", files.lock_path().display()), e)
            })?;
            match st {
                Some(st) if kind(&st) == SFlag::S_IFREG => {
                    out.push(prefix.to_owned());
                    return Ok(out);
                }
                Some(st) if kind(&st) == SFlag::S_IFDIR => {
                    files.dir.descend([files.lock.as_str()], Missing::Absent)?
                }
                _ => None,
            }
        };
        if let Some(dir) = start {
            walk(&dir, prefix, &mut out, 0)?;
        }
        Ok(out)
    }

    async fn holders(&self, target: &Target) -> Result<Vec<Holder>, LocalError> {
        Ok(self
            .holders_with_facts(target)?
            .into_iter()
            .map(|(h, _)| h)
            .collect())
    }

    async fn changes(&self, target: &Target) -> Result<watch::LocalChanges, LocalError> {
        watch::LocalChanges::new(self.clone(), target.clone())
    }

    async fn force_release(
        &self,
        target: &Target,
        which: &Which,
    ) -> Result<Released<LocalError>, LocalError> {
        let chosen: Vec<_> = self
            .holders_with_facts(target)?
            .into_iter()
            .filter(|(h, _)| which.picks(h))
            .collect();
        // Every holder we can ask is asked, whatever the others are: a
        // flock(1) on one slot must not keep lockrun holders of the other
        // slots running, nor hide which of them were asked.
        let mut asked = Vec::new();
        let mut refused = Vec::new();
        for (holder, known) in chosen {
            let what = match holder.slot {
                Some(slot) => format!("slot {slot} of `{}`", target.name()),
                None => format!("`{}`", target.name()),
            };
            let Some(facts) = known else {
                refused.push(LocalError::new(
                    Kind::Refused,
                    match holder.pid {
                        Some(pid) => format!(
                            "{what} is held by pid {pid}, which is not lockrun (flock(1)?); stop that process instead"
                        ),
                        None => format!(
                            "{what} is held by a process that has exited, through a descriptor it passed on; stop the process group that inherited it"
                        ),
                    },
                ));
                continue;
            };
            match signal_holder(target, &facts) {
                Ok(()) => asked.push(holder),
                Err(e) => refused.push(e),
            }
        }
        Ok(Released {
            asked,
            refused,
            nothing: None,
        })
    }
}

/// How deep `list` descends below its prefix.
const LIST_DEPTH: usize = 32;

/// Adds the lock files and semaphores in `dir` (named `path`) and below.
fn walk(dir: &Arc<Dir>, path: &str, out: &mut Vec<String>, depth: usize) -> Result<(), LocalError> {
    use nix::sys::stat::SFlag;
    let inspect = |name: &str, e| LocalError::io(format!("cannot inspect `{}`", dir.join(name).display()), e);
    if !path.is_empty() && dir.stat(".limit").map_err(|e| inspect(".limit", e))?.is_some() {
        out.push(path.to_owned());
        return Ok(());
    }
    let mut names: Vec<String> = dir
        .names()?
        .into_iter()
        .filter_map(|n| n.into_string().ok())
        .collect();
    names.sort();
    for name in names {
        let full = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}/{name}")
        };
        // Holder facts, scratch files and names no key can have.
        if dir::check_key(&full).is_err() {
            continue;
        }
        let Some(st) = dir.stat(&name).map_err(|e| inspect(&name, e))? else {
            continue;
        };
        match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFREG => out.push(full),
            SFlag::S_IFDIR if depth < LIST_DEPTH => {
                if let Some(sub) = dir.descend([name.as_str()], Missing::Absent)? {
                    walk(&sub, &full, out, depth + 1)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Asks the lockrun described by `facts` to let go, through a pidfd so a
/// reused pid cannot receive it.
fn signal_holder(target: &Target, facts: &HolderFacts) -> Result<(), LocalError> {
    let gone = || {
        LocalError::new(
            Kind::Refused,
            format!(
                "the lockrun that holds `{}` (pid {}) has exited; its child's group{} keeps the lock until it ends",
                target.name(),
                facts.pid,
                facts.child_pgid.map(|g| format!(" {g}")).unwrap_or_default()
            ),
        )
    };
    let pidfd = match sys::pidfd_open(facts.pid) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Err(gone()),
        Err(e) => return Err(LocalError::io(format!("cannot reach pid {}", facts.pid), e)),
    };
    // Checked after opening the pidfd: from here on the pid cannot be reused
    // under us, so a matching start time means the pidfd is that lockrun.
    if !facts::process_is(facts.pid, facts.pid_start) {
        return Err(gone());
    }
    sys::pidfd_send_signal(pidfd.as_fd(), crate::backend::release_signal())
        .map_err(|e| LocalError::io(format!("cannot signal pid {}", facts.pid), e))
}

