//! `lockrun check SEQUENCER`: whether the holder a sequencer names still
//! holds its lock with that fence, read from the engine now.

use clap::ValueEnum;

use crate::backend::{Holder, Inspect, Target};
use crate::cli::BackendName;
use crate::error::Failure;
use crate::exit::Exit;
pub use crate::ops::sequencer::Sequencer;

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

pub fn prepare(token: &str) -> Result<Job, Failure> {
    let sequencer = Sequencer::decode(token).map_err(Failure::Usage)?;
    backend_of(&sequencer)?;
    Ok(Job { sequencer })
}

/// Whether `holder` is the one `seq` names: every identity both know
/// must match, and at least one must be known.
pub fn is_holder(seq: &Sequencer, holder: &Holder) -> Option<bool> {
    let mut compared = false;
    let mut same = true;
    if let Some(fence) = holder.fence {
        compared = true;
        same &= fence == seq.fence;
    }
    if let (Some(entry), Some(own)) = (&holder.entry, &seq.entry) {
        compared = true;
        same &= entry == own;
    }
    let session = holder
        .details
        .as_ref()
        .and_then(|d| d.get("session"))
        .and_then(|s| s.as_str());
    if let (Some(session), Some(own)) = (session, &seq.session) {
        compared = true;
        same &= session == own;
    }
    if let (Some(pid), Some(own)) = (holder.pid, seq.pid) {
        compared = true;
        same &= pid == own;
    }
    compared.then_some(same)
}

pub async fn run<I: Inspect>(inspect: &I, job: Job) -> Result<Exit, Failure> {
    let seq = &job.sequencer;
    let target = Target::Lock {
        key: seq.key.clone(),
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
            session: None,
            entry: None,
            pid: None,
        }
    }

    /// Every backend, compiled in or not, is known by the name lockrun
    /// writes into its sequencers; any other name is refused.
    #[test]
    fn a_sequencer_names_its_backend_as_backend_takes_it() {
        for name in BackendName::value_variants() {
            assert_eq!(backend_of(&made_on(&name.to_string())).unwrap(), *name);
        }
        for other in ["Consul", "zookeeper", ""] {
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
