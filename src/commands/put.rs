//! `lockrun put --sequencer SEQ KEY VALUE`: one write into the engine,
//! applied only while the holder the sequencer names still holds its lock
//! (Consul: a transaction with a session check on the lock key; etcd: one
//! comparing that the holder's contender key still exists).

use crate::backend::consul::txn::{Txn, TxnOp};
use crate::backend::consul::Client;
use crate::backend::etcd::Etcd;
use crate::cli::BackendName;
use crate::error::Failure;
use crate::exit::Exit;
use crate::ops::sequencer::Sequencer;

use super::check::backend_of;

pub struct Job {
    pub sequencer: Sequencer,
    pub key: String,
    pub value: String,
}

pub fn prepare(args: crate::ops::PutArgs) -> Result<Job, Failure> {
    let sequencer = Sequencer::decode(&args.sequencer).map_err(Failure::Usage)?;
    if args.key.is_empty() {
        return Err(Failure::Usage("KEY is empty; name the key to write".into()));
    }
    match backend_of(&sequencer)? {
        BackendName::Consul => {
            crate::backend::consul::path::check_key(&args.key).map_err(Failure::Usage)?
        }
        BackendName::Etcd => crate::backend::etcd::check_key(&args.key).map_err(Failure::Usage)?,
        other => {
            return Err(Failure::Usage(format!(
                "put --sequencer is not supported on the {} backend (it keeps no data beside its locks); check the sequencer with `lockrun check` before writing elsewhere",
                other.name()
            )))
        }
    }
    if sequencer.session.is_none() && sequencer.entry.is_none() {
        return Err(Failure::Usage(
            "the sequencer names no holder a write can be fenced by (a semaphore slot?); use an `elect` holder's LOCKRUN_SEQUENCER".into(),
        ));
    }
    Ok(Job {
        sequencer,
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

pub async fn consul(client: &Client, job: Job) -> Result<Exit, Failure> {
    let session = job.sequencer.session.as_deref().unwrap_or_default();
    let ops = [
        TxnOp::CheckSession {
            key: &job.sequencer.key,
            session,
        },
        TxnOp::Set {
            key: &job.key,
            value: job.value.as_bytes(),
        },
    ];
    match client
        .txn(&ops)
        .await
        .map_err(|e| Failure::Engine(e.to_string()))?
    {
        Txn::Applied(_) => Ok(Exit::Success),
        Txn::Refused(refusals) if refusals.iter().all(|r| r.op_index == 0) => Ok(refused(&job)),
        Txn::Refused(refusals) => Err(Failure::Engine(format!(
            "Consul refused to write `{}`: {}",
            job.key,
            refusals
                .iter()
                .map(|r| r.what.clone())
                .collect::<Vec<_>>()
                .join("; ")
        ))),
    }
}

pub async fn etcd(etcd: &Etcd, job: Job) -> Result<Exit, Failure> {
    let entry = job.sequencer.entry.as_deref().unwrap_or_default();
    let written = etcd
        .fenced_put(entry, &job.key, job.value.as_bytes())
        .await
        .map_err(Failure::from)?;
    Ok(if written {
        Exit::Success
    } else {
        refused(&job)
    })
}
