//! ACLs with `default_policy = "deny"`, reduced to the policies our tests
//! need. Only the outcomes are copied: `ACL not found` (403) for a token the
//! agent does not know, `Permission denied` (403) for a missing right, and
//! silent filtering on list reads.

use crate::http::{Answer, Request};
use std::collections::HashMap;

/// What a token may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AclPolicy {
    /// Everything (a management token).
    Full,
    /// `key_prefix "" { policy = "write" }` and nothing else: KV reads and
    /// writes work, sessions cannot be created (`Permission denied`).
    KvWriteOnly,
    /// Everything but the keys under one prefix: `key_prefix "P" { policy =
    /// "deny" }` beside a management-like policy. Reads and writes of those
    /// keys are denied, and lists leave them out.
    DenyKeysUnder(&'static str),
}

/// The rights a request carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Authz {
    /// ACLs are off.
    All,
    /// The resolved policy; `None` is the anonymous token, which the default
    /// deny policy leaves with nothing.
    Token(Option<AclPolicy>),
}

pub const PERMISSION_DENIED: &str = "Permission denied";
pub const ACL_NOT_FOUND: &str = "ACL not found";

impl Authz {
    fn full(self) -> bool {
        matches!(
            self,
            Authz::All | Authz::Token(Some(AclPolicy::Full | AclPolicy::DenyKeysUnder(_)))
        )
    }

    pub fn key_read(self, key: &str) -> bool {
        self.key_write(key)
    }

    pub fn key_write(self, key: &str) -> bool {
        match self {
            Authz::Token(Some(AclPolicy::DenyKeysUnder(denied))) => !key.starts_with(denied),
            Authz::Token(Some(AclPolicy::KvWriteOnly)) => true,
            other => other.full(),
        }
    }

    /// A recursive delete needs write on every key under `prefix`, so a deny
    /// rule anywhere below it refuses the whole delete.
    pub fn key_write_prefix(self, prefix: &str) -> bool {
        match self {
            Authz::Token(Some(AclPolicy::DenyKeysUnder(denied))) => {
                !prefix.starts_with(denied) && !denied.starts_with(prefix)
            }
            other => other.key_write(prefix),
        }
    }

    pub fn session_read(self) -> bool {
        self.full()
    }

    pub fn session_write(self) -> bool {
        self.full()
    }

    pub fn agent_read(self) -> bool {
        self.full()
    }
}

/// Consul's token lookup order: `?token=`, then `X-Consul-Token`, then
/// `Authorization: Bearer`.
fn token(req: &Request) -> String {
    if let Some(t) = req.query.get("token").filter(|t| !t.is_empty()) {
        return t.to_string();
    }
    let header = |name: &str| {
        req.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    if let Some(t) = header("x-consul-token") {
        return t;
    }
    header("authorization")
        .and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| rest.trim().to_string())
        })
        .unwrap_or_default()
}

/// Resolves the request's token, as every server RPC does first.
pub fn resolve(
    tokens: Option<&HashMap<String, AclPolicy>>,
    req: &Request,
) -> Result<Authz, Answer> {
    let Some(tokens) = tokens else {
        return Ok(Authz::All);
    };
    let secret = token(req);
    if secret.is_empty() || secret == "anonymous" {
        return Ok(Authz::Token(None));
    }
    match tokens.get(&secret) {
        Some(&policy) => Ok(Authz::Token(Some(policy))),
        None => Err(Answer::text(403, ACL_NOT_FOUND)),
    }
}

pub fn denied() -> Answer {
    Answer::text(403, PERMISSION_DENIED)
}
