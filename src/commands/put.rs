//! `lockrun put --sequencer SEQ KEY VALUE`: one write into the engine,
//! applied only while the holder the sequencer names still holds its lock
//! (each backend that keeps data beside its locks does it in one step; see
//! [`Backend::fenced_put`]).

use crate::backend::Backend;
use crate::error::Failure;
use crate::exit::Exit;
use crate::sequencer::Sequencer;

pub struct Job {
    pub sequencer: Sequencer,
    /// The sequencer's holder, which the write is fenced by.
    pub holder: String,
    pub key: String,
    pub value: String,
}

/// Checks everything before any contact: the sequencer, the key by backend
/// `B`'s rules, and that `B` can fence a write at all.
pub fn prepare<B: Backend>(args: crate::ops::PutArgs) -> Result<Job, Failure> {
    let sequencer = Sequencer::decode(&args.sequencer).map_err(Failure::Usage)?;
    crate::commands::check::sequencer_key::<B>(&sequencer)?;
    if args.key.is_empty() {
        return Err(Failure::Usage("KEY is empty; name the key to write".into()));
    }
    if !B::FENCED_PUT {
        return Err(Failure::Usage(format!(
            "put --sequencer is not supported on the {} backend (it keeps no data beside its locks); check the sequencer with `lockrun check` before writing elsewhere",
            B::NAME
        )));
    }
    B::check_key(&args.key)?;
    let Some(holder) = sequencer.holder.clone() else {
        return Err(Failure::Usage(
            "the sequencer names no holder a write can be fenced by (a semaphore slot?); use an `elect` holder's LOCKRUN_SEQUENCER".into(),
        ));
    };
    Ok(Job {
        sequencer,
        holder,
        key: args.key,
        value: args.value,
    })
}

fn refused(job: &Job) -> Exit {
    tracing::error!(
        "refused: `{}` was not written, since the holder the sequencer names no longer holds `{}`",
        job.key,
        job.sequencer.key
    );
    Exit::NotHeld
}

pub async fn run<B: Backend>(backend: &B, job: Job) -> Result<Exit, Failure> {
    let seq = &job.sequencer;
    let written = backend
        .fenced_put(&seq.key, &job.holder, &job.key, job.value.as_bytes())
        .await?;
    Ok(if written {
        Exit::Success
    } else {
        refused(&job)
    })
}
