//! `lockrun check SEQUENCER`: whether the holder a sequencer names still
//! holds its lock with that fence, read from the engine now.

use clap::ValueEnum;

use crate::backend::{Backend, Holder, Inspect, Target};
use crate::cli::BackendName;
use crate::error::Failure;
use crate::exit::Exit;
pub use crate::sequencer::Sequencer;

pub struct Job {
    pub sequencer: Sequencer,
}

/// The backend the sequencer was made on.
pub fn backend_of(sequencer: &Sequencer) -> Result<BackendName, Failure> {
    // The name as lockrun wrote it, so case counts.
    BackendName::from_str(&sequencer.backend, false).map_err(|_| {
        Failure::Usage(format!(
            "the sequencer names backend `{}`, which this lockrun does not know",
            sequencer.backend
        ))
    })
}

/// Checks the sequencer before any contact: its backend, and its key by
/// that backend's rules, since a forged token can name any key.
pub fn prepare<B: Backend>(token: &str) -> Result<Job, Failure> {
    let sequencer = Sequencer::decode(token).map_err(Failure::Usage)?;
    backend_of(&sequencer)?;
    sequencer_key::<B>(&sequencer)?;
    Ok(Job { sequencer })
}

/// Whether the sequencer's key is one backend `B` could have made: lockrun
/// makes sequencers only for keys it held.
pub fn sequencer_key<B: Backend>(sequencer: &Sequencer) -> Result<(), Failure> {
    B::check_key(&sequencer.key).map_err(|e| match e {
        Failure::Usage(why) => Failure::Usage(format!(
            "the sequencer names a key no lockrun holds: {why}; pass LOCKRUN_SEQUENCER as lockrun gave it to COMMAND"
        )),
        other => other,
    })
}

/// Whether `holder` is the one `seq` names: the fence and the engine's
/// name of the holding claim must match where both sides know them, and
/// at least one must be known.
pub fn is_holder(seq: &Sequencer, holder: &Holder) -> Option<bool> {
    let fence = holder.fence.map(|fence| fence == seq.fence);
    let named = match (&holder.holder_id, &seq.holder) {
        (Some(theirs), Some(ours)) => Some(theirs == ours),
        _ => None,
    };
    match (fence, named) {
        (None, None) => None,
        (fence, named) => Some(fence.unwrap_or(true) && named.unwrap_or(true)),
    }
}

pub async fn run<I: Inspect>(inspect: &I, job: Job) -> Result<Exit, Failure> {
    let seq = &job.sequencer;
    let target = Target::Lock {
        key: seq.key.clone(),
        shared: false,
    };
    let holders = inspect.holders(&target).await.map_err(Into::into)?;
    let Some(holder) = holders.first() else {
        tracing::info!("`{}` is not held", seq.key);
        return Ok(Exit::NotHeld);
    };
    match is_holder(seq, holder) {
        Some(true) => Ok(Exit::Success),
        Some(false) => {
            tracing::info!(
                "`{}` is held by another holder (fence {})",
                seq.key,
                holder.fence.map_or("unknown".into(), |f| f.to_string())
            );
            Ok(Exit::NotHeld)
        }
        None => Err(Failure::Engine(format!(
            "cannot tell: the {} backend shows nothing that names `{}`'s holder",
            seq.backend, seq.key
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn made_on(backend: &str) -> Sequencer {
        Sequencer {
            backend: backend.into(),
            key: "k".into(),
            fence: 1,
            holder: None,
        }
    }

    fn seen(fence: Option<u64>, holder_id: Option<&str>) -> Holder {
        Holder {
            fence,
            holder_id: holder_id.map(str::to_string),
            ..Holder::default()
        }
    }

    /// What each backend's claim and inspect name the holder by (Consul: a
    /// session; etcd: a contender key; local: a lockrun's pid; postgres: a
    /// backend pid): a sequencer is its holder's only while both the fence
    /// and that name match, so a later holder on the same key, or one that
    /// shares the fence but not the name, is another.
    #[test]
    fn a_sequencer_is_refused_for_another_holder() {
        let cases = [
            ("consul", 57, "3f2a0c1e-session", "9b7d41aa-session"),
            (
                "etcd",
                812,
                "lockrun/k/694d8c3f1a2b",
                "lockrun/k/694d8c3f1a9e",
            ),
            ("local", 1_718_000_000_000_001, "4242", "4343"),
            ("postgres", 7731, "90210", "90211"),
        ];
        for (backend, fence, ours, theirs) in cases {
            let seq = Sequencer {
                fence,
                holder: Some(ours.into()),
                ..made_on(backend)
            };
            let verdict = |f, id| is_holder(&seq, &seen(f, id));
            assert_eq!(verdict(Some(fence), Some(ours)), Some(true), "{backend}");
            assert_eq!(
                verdict(Some(fence + 1), Some(theirs)),
                Some(false),
                "{backend}: a later holder"
            );
            assert_eq!(
                verdict(Some(fence), Some(theirs)),
                Some(false),
                "{backend}: another name"
            );
            assert_eq!(
                verdict(Some(fence + 1), Some(ours)),
                Some(false),
                "{backend}: another fence"
            );
            // A holder that is not lockrun (`flock(1)`, `etcdctl lock`)
            // shows no fence: its name alone decides.
            assert_eq!(
                verdict(None, Some(theirs)),
                Some(false),
                "{backend}: no fence"
            );
            assert_eq!(verdict(None, Some(ours)), Some(true), "{backend}: no fence");
            assert_eq!(verdict(None, None), None, "{backend}: nothing to compare");
        }
        // A sequencer that names no holder is checked by its fence alone.
        let seq = Sequencer {
            fence: 9,
            ..made_on("postgres")
        };
        assert_eq!(is_holder(&seq, &seen(Some(9), Some("1"))), Some(true));
        assert_eq!(is_holder(&seq, &seen(Some(10), Some("1"))), Some(false));
        assert_eq!(is_holder(&seq, &seen(None, Some("1"))), None);
    }

    /// Every backend, compiled in or not, is known by the name lockrun
    /// writes into its sequencers; any other name is refused.
    #[test]
    fn a_sequencer_names_its_backend_as_backend_takes_it() {
        for name in BackendName::value_variants() {
            assert_eq!(backend_of(&made_on(&name.to_string())).unwrap(), *name);
        }
        for other in ["Consul", "no-such-engine", ""] {
            let Err(Failure::Usage(line)) = backend_of(&made_on(other)) else {
                panic!("`{other}` was taken for a backend");
            };
            assert_eq!(
                line,
                format!("the sequencer names backend `{other}`, which this lockrun does not know")
            );
        }
    }
}
