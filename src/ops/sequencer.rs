//! `LOCKRUN_SEQUENCER`: one opaque token naming a holder (backend, key,
//! fence, and the engine's identity of the holder: a Consul session, an
//! etcd contender key (its lease), a local holder's pid), which
//! `lockrun check` and `lockrun put --sequencer` test against the engine.

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// The variable COMMAND finds its sequencer in.
pub const VARIABLE: &str = "LOCKRUN_SEQUENCER";

const PREFIX: &str = "lockrun-seq-1.";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sequencer {
    pub backend: String,
    pub key: String,
    pub fence: u64,
    /// Consul: the session holding the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// etcd: our contender key, which lives as long as our lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    /// local: the holding lockrun's pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

impl Sequencer {
    /// From what COMMAND is told about its claim.
    pub fn from_env(
        backend: &str,
        fence: u64,
        env: &[(std::ffi::OsString, std::ffi::OsString)],
    ) -> Option<Sequencer> {
        let var = |name: &str| {
            env.iter()
                .find(|(k, _)| k == name)
                .and_then(|(_, v)| v.to_str())
                .map(str::to_string)
        };
        Some(Sequencer {
            backend: backend.to_string(),
            key: var("LOCKRUN_KEY")?,
            fence,
            session: var("LOCKRUN_SESSION"),
            entry: var("ETCD_LOCK_KEY"),
            pid: (backend == "local").then(std::process::id),
        })
    }

    pub fn encode(&self) -> String {
        let json = serde_json::to_vec(self).expect("a sequencer serialises");
        format!(
            "{PREFIX}{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
        )
    }

    pub fn decode(token: &str) -> Result<Sequencer, String> {
        let bad = |why: &str| {
            format!("`{}` is not a sequencer ({why}); pass LOCKRUN_SEQUENCER as lockrun gave it to COMMAND", shorten(token))
        };
        if token.trim().is_empty() {
            return Err(
                "the sequencer is empty; pass LOCKRUN_SEQUENCER as lockrun gave it to COMMAND"
                    .into(),
            );
        }
        let body = token
            .trim()
            .strip_prefix(PREFIX)
            .ok_or_else(|| bad("no `lockrun-seq-1.` prefix"))?;
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| bad("not base64url"))?;
        serde_json::from_slice(&json).map_err(|_| bad("not a sequencer's JSON"))
    }
}

fn shorten(token: &str) -> String {
    if token.chars().count() > 40 {
        format!("{}…", token.chars().take(40).collect::<String>())
    } else {
        token.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequencer_survives_its_encoding() {
        let seq = Sequencer {
            backend: "consul".into(),
            key: "service/db/leader".into(),
            fence: 42,
            session: Some("3f2a".into()),
            entry: None,
            pid: None,
        };
        assert_eq!(Sequencer::decode(&seq.encode()).unwrap(), seq);
        assert!(Sequencer::decode("nope")
            .unwrap_err()
            .contains("not a sequencer"));
        assert!(Sequencer::decode("").unwrap_err().contains("empty"));
    }
}
