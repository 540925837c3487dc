//! `/v1/kv/*`: reads (single key or prefix, optionally blocking), and the
//! writes a lock needs: acquire, release, check-and-set, delete.

use std::time::Duration;

use base64::Engine;
use reqwest::{Method, StatusCode};
use serde::Deserialize;

use super::blocking::{self, QueryIndex};
use super::{decode, Client, ConsulError, Op, SessionId, REQUEST_TIMEOUT};

/// One KV entry as Consul shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvPair {
    pub key: String,
    pub value: Option<Vec<u8>>,
    /// Decoded as u64: the semaphore's flag value is above i64::MAX.
    pub flags: u64,
    pub session: Option<String>,
    pub lock_index: u64,
    pub create_index: u64,
    pub modify_index: u64,
}

impl KvPair {
    /// The holder's session, if the entry is locked.
    pub fn holder(&self) -> Option<&str> {
        self.session.as_deref().filter(|s| !s.is_empty())
    }

    pub fn value_bytes(&self) -> &[u8] {
        self.value.as_deref().unwrap_or_default()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(super) struct WirePair {
    key: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    flags: u64,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    lock_index: u64,
    #[serde(default)]
    create_index: u64,
    #[serde(default)]
    modify_index: u64,
}

impl WirePair {
    pub(super) fn decode(self, op: &Op) -> Result<KvPair, ConsulError> {
        let value = match self.value {
            None => None,
            Some(text) => Some(
                base64::engine::general_purpose::STANDARD
                    .decode(text.as_bytes())
                    .map_err(|e| ConsulError::Decode {
                        op: op.clone(),
                        cause: format!("value of `{}` is not base64 ({e})", self.key),
                    })?,
            ),
        };
        Ok(KvPair {
            key: self.key,
            value,
            flags: self.flags,
            session: self.session,
            lock_index: self.lock_index,
            create_index: self.create_index,
            modify_index: self.modify_index,
        })
    }
}

/// How to read: at once, or blocking until the index moves past `index`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Read {
    pub index: QueryIndex,
    /// `None`: answer at once (no `index` is sent either).
    pub wait: Option<Duration>,
    /// `?consistent`: the leader checks with a quorum first (no stale reads).
    pub consistent: bool,
    /// A recursive read must show every entry: one the token's rights
    /// filtered (Consul says so since 1.11) is refused as forbidden, since
    /// the entries left out may be holders.
    pub whole: bool,
    /// An empty recursive read is taken as it comes, without the plain
    /// read that tells "nothing there" from "nothing we may see": for a
    /// reader to whom hidden entries cost only a step it would have saved
    /// (a hand-off not made).
    pub empty_is_enough: bool,
}

impl Read {
    pub fn now() -> Read {
        Read::default()
    }

    pub fn consistent() -> Read {
        Read {
            consistent: true,
            ..Read::default()
        }
    }
}

impl Client {
    /// Reads one key. `None` when it does not exist. Also answers the index
    /// for the next blocking read.
    pub async fn kv_get(
        &self,
        key: &str,
        read: Read,
    ) -> Result<(Option<KvPair>, u64), ConsulError> {
        let (pairs, index) = self.kv_read(key, read, false).await?;
        let pair = pairs.into_iter().find(|p| p.key == key);
        Ok((pair, index))
    }

    /// Reads every entry whose key starts with `prefix` (string prefix).
    pub async fn kv_list(
        &self,
        prefix: &str,
        read: Read,
    ) -> Result<(Vec<KvPair>, u64), ConsulError> {
        self.kv_read(prefix, read, true).await
    }

    async fn kv_read(
        &self,
        key: &str,
        read: Read,
        recurse: bool,
    ) -> Result<(Vec<KvPair>, u64), ConsulError> {
        let op = Op::KvRead(key.to_string());
        let mut url = self.url(&["kv"], key);
        let mut flags = Vec::new();
        if recurse {
            flags.push("recurse");
        }
        if read.consistent {
            flags.push("consistent");
        }
        let timeout = match read.wait {
            Some(wait) if read.index.get() > 0 => {
                url.query_pairs_mut()
                    .append_pair("index", &read.index.get().to_string())
                    .append_pair("wait", &blocking::wait_param(wait));
                blocking::request_timeout(wait)
            }
            _ => REQUEST_TIMEOUT,
        };
        append_flags(&mut url, &flags);
        let answer = self
            .send(
                Method::GET,
                url,
                None,
                timeout,
                &op,
                &[StatusCode::NOT_FOUND],
            )
            .await?;
        let index = answer.index.unwrap_or(0);
        let pairs = if answer.status == StatusCode::NOT_FOUND {
            Vec::new()
        } else {
            let wire: Vec<WirePair> = decode(&op, &answer.body)?;
            wire.into_iter()
                .map(|p| p.decode(&op))
                .collect::<Result<Vec<_>, _>>()?
        };
        if recurse && read.whole && answer.filtered {
            return Err(ConsulError::Forbidden {
                op,
                body: "X-Consul-Results-Filtered-By-ACLs: true".into(),
            });
        }
        if recurse && pairs.is_empty() && !read.empty_is_enough {
            self.check_readable(key, &op).await?;
        }
        Ok((pairs, index))
    }

    /// Whether the token may read `key` (a 403 is the error): for an entry
    /// a recursive read did not show, where Consul before 1.11 does not say
    /// whether it filtered it.
    pub async fn kv_readable(&self, key: &str) -> Result<(), ConsulError> {
        self.check_readable(key, &Op::KvRead(key.to_string())).await
    }

    /// Tells "nothing there" from "nothing we may see". Consul filters a
    /// recursive read by the token's rights and answers 404 when it filtered
    /// every entry, with no header saying so on 1.6 (1.15 has none on a 404
    /// either), while a plain read of the key itself checks key:read first
    /// and answers 403 whether or not the key exists. We ask that plain read
    /// only when the list came back empty: a holder is never hidden by it,
    /// and "no holder" is the answer scripts act on.
    async fn check_readable(&self, key: &str, op: &Op) -> Result<(), ConsulError> {
        let url = self.url(&["kv"], key);
        self.send(
            Method::GET,
            url,
            None,
            REQUEST_TIMEOUT,
            op,
            &[StatusCode::NOT_FOUND],
        )
        .await
        .map(|_| ())
    }

    /// `?acquire=`: true when the session now holds the key.
    pub async fn kv_acquire(
        &self,
        key: &str,
        session: &SessionId,
        value: &[u8],
        flags: u64,
    ) -> Result<bool, ConsulError> {
        self.kv_put(
            key,
            value,
            &[("acquire", session.as_str()), ("flags", &flags.to_string())],
        )
        .await
    }

    /// `?release=`: true when `session` held the key and no longer does. The
    /// body and flags become the entry's value and flags.
    pub async fn kv_release(
        &self,
        key: &str,
        session: &str,
        value: &[u8],
        flags: u64,
    ) -> Result<bool, ConsulError> {
        self.kv_put(
            key,
            value,
            &[("release", session), ("flags", &flags.to_string())],
        )
        .await
    }

    /// `?cas=`: writes only if the entry's ModifyIndex is still `index`
    /// (0: only if the key does not exist).
    pub async fn kv_cas(
        &self,
        key: &str,
        value: &[u8],
        flags: u64,
        index: u64,
    ) -> Result<bool, ConsulError> {
        self.kv_put(
            key,
            value,
            &[("cas", &index.to_string()), ("flags", &flags.to_string())],
        )
        .await
    }

    async fn kv_put(
        &self,
        key: &str,
        value: &[u8],
        params: &[(&str, &str)],
    ) -> Result<bool, ConsulError> {
        let op = Op::KvWrite(key.to_string());
        let mut url = self.url(&["kv"], key);
        {
            let mut query = url.query_pairs_mut();
            for (name, value) in params {
                query.append_pair(name, value);
            }
        }
        let answer = self
            .send(
                Method::PUT,
                url,
                Some(value.to_vec()),
                REQUEST_TIMEOUT,
                &op,
                &[],
            )
            .await?;
        decode(&op, &answer.body)
    }

    /// Deletes one key, only if its ModifyIndex is still `cas` when given.
    pub async fn kv_delete(&self, key: &str, cas: Option<u64>) -> Result<bool, ConsulError> {
        let op = Op::KvWrite(key.to_string());
        let mut url = self.url(&["kv"], key);
        if let Some(index) = cas {
            url.query_pairs_mut().append_pair("cas", &index.to_string());
        }
        let answer = self
            .send(Method::DELETE, url, None, REQUEST_TIMEOUT, &op, &[])
            .await?;
        decode(&op, &answer.body)
    }
}

/// Appends valueless parameters (`?recurse`), the form Consul documents.
fn append_flags(url: &mut reqwest::Url, flags: &[&str]) {
    if flags.is_empty() {
        return;
    }
    let joined = flags.join("&");
    let query = match url.query() {
        Some(q) if !q.is_empty() => format!("{q}&{joined}"),
        _ => joined,
    };
    url.set_query(Some(&query));
}
