//! `PUT /v1/txn`: several KV operations applied at one Raft index, or none.
//! A lock written this way answers with the entry's indexes in the same
//! round trip, and a refusal says why (held, lock-delay, stale index), so
//! acquiring needs neither a read-back nor a second read after a refusal
//! (CONSUL_API.md Part A2).

use base64::Engine;
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::kv::WirePair;
use super::{decode, Client, ConsulError, KvPair, Op, SessionId, REQUEST_TIMEOUT};

/// One KV operation of a transaction.
#[derive(Debug, Clone)]
pub enum TxnOp<'a> {
    /// Takes the key for `session`, as `?acquire=` does.
    Lock {
        key: &'a str,
        value: &'a [u8],
        flags: u64,
        session: &'a SessionId,
    },
    /// Lets go of the key `session` holds, as `?release=` does (refused
    /// unless `session` holds it), writing `value` and `flags`.
    Unlock {
        key: &'a str,
        value: &'a [u8],
        flags: u64,
        session: &'a SessionId,
    },
    /// Writes only if the key's ModifyIndex is still `index` (0: only if it
    /// does not exist).
    Cas {
        key: &'a str,
        value: &'a [u8],
        flags: u64,
        index: u64,
    },
    /// Deletes the key (a missing key is no refusal).
    Delete { key: &'a str },
    /// Deletes the key only if its ModifyIndex is still `index`; a missing
    /// key is no refusal when `index` is 0 (nor, in Consul, otherwise).
    DeleteCas { key: &'a str, index: u64 },
    /// Refuses the transaction unless `session` holds the key.
    CheckSession { key: &'a str, session: &'a str },
    /// Writes the key, whatever it holds.
    Set { key: &'a str, value: &'a [u8] },
}

impl TxnOp<'_> {
    fn key(&self) -> &str {
        match self {
            TxnOp::Lock { key, .. }
            | TxnOp::Unlock { key, .. }
            | TxnOp::Cas { key, .. }
            | TxnOp::Delete { key }
            | TxnOp::DeleteCas { key, .. }
            | TxnOp::CheckSession { key, .. }
            | TxnOp::Set { key, .. } => key,
        }
    }

    fn to_json(&self) -> Value {
        let b64 = |v: &[u8]| base64::engine::general_purpose::STANDARD.encode(v);
        match self {
            TxnOp::Lock {
                key,
                value,
                flags,
                session,
            } => json!({"KV": {
                "Verb": "lock",
                "Key": key,
                "Value": b64(value),
                "Flags": flags,
                "Session": session.as_str(),
            }}),
            TxnOp::Unlock {
                key,
                value,
                flags,
                session,
            } => json!({"KV": {
                "Verb": "unlock",
                "Key": key,
                "Value": b64(value),
                "Flags": flags,
                "Session": session.as_str(),
            }}),
            TxnOp::Cas {
                key,
                value,
                flags,
                index,
            } => json!({"KV": {
                "Verb": "cas",
                "Key": key,
                "Value": b64(value),
                "Flags": flags,
                "Index": index,
            }}),
            TxnOp::Delete { key } => json!({"KV": {"Verb": "delete", "Key": key}}),
            TxnOp::DeleteCas { key, index } => {
                json!({"KV": {"Verb": "delete-cas", "Key": key, "Index": index}})
            }
            TxnOp::CheckSession { key, session } => {
                json!({"KV": {"Verb": "check-session", "Key": key, "Session": session}})
            }
            TxnOp::Set { key, value } => {
                json!({"KV": {"Verb": "set", "Key": key, "Value": b64(value)}})
            }
        }
    }
}

/// Why Consul refused a transaction: which op, and its own words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub op_index: usize,
    pub what: String,
}

impl Refusal {
    /// Another session holds the key.
    pub fn is_held(&self) -> bool {
        self.what.contains("lock is already held")
    }

    /// The key is free but a lock-delay keeps it from being taken.
    pub fn is_lock_delay(&self) -> bool {
        self.what.contains("lock delay")
    }

    /// A check-and-set found the entry changed (or present, for index 0).
    pub fn is_stale(&self) -> bool {
        self.what.contains("index is stale")
    }

    /// The session is unknown to Consul: expired, destroyed, or never was.
    pub fn is_invalid_session(&self) -> bool {
        self.what.contains("invalid session")
    }

    /// The refusal as the error the same write outside a transaction gives,
    /// when it is one: an unknown session (a 500 there, which the lease
    /// judges) or a token without the right (a 403). `None` for the
    /// refusals a lock expects: held, lock-delay, stale.
    pub fn error(&self, key: &str) -> Option<ConsulError> {
        let op = Op::KvWrite(key.to_string());
        if self.is_invalid_session() {
            Some(ConsulError::Server {
                op,
                status: 409,
                body: self.what.clone(),
            })
        } else if self.what.contains("Permission denied") {
            Some(ConsulError::Forbidden {
                op,
                body: self.what.clone(),
            })
        } else {
            None
        }
    }
}

/// How a transaction ended.
#[derive(Debug)]
pub enum Txn {
    /// Every op applied; one entry per op that answers one (a delete does
    /// not), values omitted as Consul does.
    Applied(Vec<KvPair>),
    /// Nothing applied.
    Refused(Vec<Refusal>),
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireAnswer {
    #[serde(default)]
    results: Option<Vec<WireResult>>,
    #[serde(default)]
    errors: Option<Vec<WireError>>,
}

#[derive(Deserialize)]
struct WireResult {
    #[serde(rename = "KV")]
    kv: Option<WirePair>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireError {
    op_index: usize,
    what: String,
}

impl Client {
    /// Applies `ops` as one transaction. A refusal (409) is an answer, not
    /// an error; so is a refusal for an unknown session, which the caller
    /// classifies.
    pub async fn txn(&self, ops: &[TxnOp<'_>]) -> Result<Txn, ConsulError> {
        let op = Op::KvWrite(ops.first().map(TxnOp::key).unwrap_or_default().to_string());
        let url = self.url(&["txn"], "");
        let body = Value::Array(ops.iter().map(TxnOp::to_json).collect()).to_string();
        let answer = self
            .send(
                Method::PUT,
                url,
                Some(body.into_bytes()),
                REQUEST_TIMEOUT,
                &op,
                &[StatusCode::CONFLICT],
            )
            .await?;
        let wire: WireAnswer = decode(&op, &answer.body)?;
        if answer.status == StatusCode::CONFLICT {
            let refusals = wire
                .errors
                .unwrap_or_default()
                .into_iter()
                .map(|e| Refusal {
                    op_index: e.op_index,
                    what: e.what,
                })
                .collect::<Vec<_>>();
            if refusals.is_empty() {
                return Err(ConsulError::Decode {
                    op,
                    cause: "a refused transaction named no error".into(),
                });
            }
            return Ok(Txn::Refused(refusals));
        }
        let pairs = wire
            .results
            .unwrap_or_default()
            .into_iter()
            .filter_map(|r| r.kv)
            .map(|p| p.decode(&op))
            .collect::<Result<Vec<_>, _>>()?;
        let answering = ops
            .iter()
            .filter(|op| !matches!(op, TxnOp::Delete { .. } | TxnOp::DeleteCas { .. }))
            .count();
        if pairs.len() != answering {
            return Err(ConsulError::Decode {
                op,
                cause: format!(
                    "a transaction of {} operations answered {} results",
                    answering,
                    pairs.len()
                ),
            });
        }
        Ok(Txn::Applied(pairs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_told_apart_by_their_stable_phrases() {
        let r = |what: &str| Refusal {
            op_index: 0,
            what: what.into(),
        };
        assert!(r("failed to lock key \"k\", lock is already held").is_held());
        assert!(r("failed to lock key \"k\" due to lock delay").is_lock_delay());
        assert!(!r("failed to lock key \"k\" due to lock delay").is_held());
        assert!(r("failed to set key \"k\", index is stale").is_stale());
        assert!(r("invalid session \"0000\"").is_invalid_session());
    }

    #[test]
    fn refusals_that_are_errors_read_as_the_plain_write_s_errors() {
        let r = |what: &str| Refusal {
            op_index: 0,
            what: what.into(),
        };
        let denied = r("Permission denied").error("k").expect("an error");
        assert!(matches!(denied, ConsulError::Forbidden { .. }));
        assert!(denied.to_string().contains("key:write on `k`"), "{denied}");
        let gone = r("invalid session \"0000\"").error("k").expect("an error");
        assert!(gone.is_transient(), "the lease judges a vanished session");
        assert!(r("failed to lock key \"k\", lock is already held")
            .error("k")
            .is_none());
    }

    #[test]
    fn ops_are_sent_in_consul_s_shape() {
        let session = SessionId::new("8f246b77-f3e1-ff88-5b48-8ec93abf3e05");
        let lock = TxnOp::Lock {
            key: "a/b",
            value: b"v",
            flags: u64::MAX,
            session: &session,
        };
        assert_eq!(
            lock.to_json().to_string(),
            r#"{"KV":{"Flags":18446744073709551615,"Key":"a/b","Session":"8f246b77-f3e1-ff88-5b48-8ec93abf3e05","Value":"dg==","Verb":"lock"}}"#
        );
        let cas = TxnOp::Cas {
            key: "k",
            value: b"",
            flags: 1,
            index: 0,
        };
        assert_eq!(
            cas.to_json().to_string(),
            r#"{"KV":{"Flags":1,"Index":0,"Key":"k","Value":"","Verb":"cas"}}"#
        );
    }
}
