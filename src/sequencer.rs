//! `LOCKRUN_SEQUENCER`: one opaque token naming a holder (backend, key,
//! fence, and the engine's own name of the holding claim, as the backend's
//! claim gives it), which `lockrun check` and `lockrun put --sequencer`
//! test against the engine.

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
    /// The engine's own name of the holding claim
    /// ([`Claim::holder_id`](crate::backend::Claim::holder_id)), when it
    /// has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
}

impl Sequencer {
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
            holder: Some("3f2a".into()),
        };
        assert_eq!(Sequencer::decode(&seq.encode()).unwrap(), seq);
        let nameless = Sequencer {
            holder: None,
            ..seq
        };
        assert_eq!(Sequencer::decode(&nameless.encode()).unwrap(), nameless);
        assert!(Sequencer::decode("nope")
            .unwrap_err()
            .contains("not a sequencer"));
        assert!(Sequencer::decode("").unwrap_err().contains("empty"));
    }
}
