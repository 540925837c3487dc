//! `lockrun release KEY`: the operator's lever.

use crate::backend::consul::path;
use crate::cli::{BackendName, ReleaseArgs};
use crate::error::Failure;

pub struct Job {
    pub key: String,
    pub args: ReleaseArgs,
}

pub fn prepare(args: ReleaseArgs, backend: BackendName) -> Result<Job, Failure> {
    let key = args.key.strip_suffix('/').unwrap_or(&args.key).to_string();
    match backend {
        BackendName::Local => {
            crate::backend::local::dir::check_key(&key)
                .map_err(|e| Failure::Usage(e.to_string()))?;
            return Ok(Job { key, args });
        }
        BackendName::Postgres => {
            crate::backend::postgres::check_key(&key).map_err(Failure::Usage)?;
            return Ok(Job { key, args });
        }
        BackendName::Etcd => {
            crate::backend::etcd::check_key(&key).map_err(Failure::Usage)?;
            return Ok(Job { key, args });
        }
        BackendName::Consul => {}
    }
    path::check_key(&key).map_err(Failure::Usage)?;
    if let Some(id) = &args.session {
        if id.len() != 36 || !id.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Err(Failure::Usage(format!(
                "--session `{id}` is not a session ID; Consul session IDs are UUIDs like 8b0cfa3c-2c84-4c0f-9a5e-4c3ee0b0b1a2"
            )));
        }
    }
    Ok(Job { key, args })
}
