//! Consul seen from outside, for `leader` and `release`: a lock's holder
//! from its key, a semaphore's from its `.lock` record, each shown by value
//! or by session; and the operator's lever. Consul lets any client release
//! a lock on behalf of its holder, as long as it names the holder's
//! session; we read it from the key, and send the value and flags back so
//! the entry keeps them. The holder's lockrun sees the change on its watch
//! and stops its child.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use base64::Engine;
use serde_json::json;

use super::blocking::QueryIndex;
use super::kv::Read;
use super::lock::semaphore::{self, Record, View};
use super::lock::shared;
use super::lock::{AcquireError, Retry, Waiter, SEMAPHORE_FLAG};
use super::{Client, KvPair, SessionId};
use crate::backend::{Changes, Holder, Inspect, Released, ReplaceNote, Target, Wait, Which};

/// How `leader` reads: once, waiting for a holder (`--wait`, within
/// `--timeout`), or watching (`--watch`).
#[derive(Debug, Clone, Copy)]
pub enum Reading {
    Once,
    Waiting(Wait),
    Watching,
}

/// Consul's outside view: a client and what the command asked for.
#[derive(Debug)]
pub struct Outside {
    client: Client,
    reading: Reading,
    /// How long `--wait` waits.
    patience: Wait,
    /// Whether every holder's session is looked up (`--json` shows its
    /// facts); otherwise only a holder without a value costs a request,
    /// for its label.
    facts: bool,
    consistent: bool,
    /// `release --session`: the one holder to free.
    session: Option<String>,
    /// `release --destroy-session`.
    destroy: bool,
    /// The listing `target_of` read, which answers the `holders` or
    /// `force_release` that follows it: one read per look, as a script
    /// calling `leader` in a loop expects.
    listed: RefCell<Option<(String, Vec<KvPair>)>>,
    /// The session TTL `--replace`'s place ahead of the waiters rides on
    /// ([`Inspect::go_ahead`]): the job's.
    ttl: Duration,
}

impl Outside {
    /// For `leader`; `json` for `--json`.
    pub fn leader(client: Client, reading: Reading, json: bool) -> Outside {
        let patience = match reading {
            Reading::Waiting(wait) => wait,
            Reading::Watching => Wait::Forever,
            Reading::Once => Wait::Once,
        };
        Outside {
            client,
            reading,
            patience,
            facts: json,
            consistent: false,
            session: None,
            destroy: false,
            listed: RefCell::new(None),
            ttl: super::config::TTL_MIN,
        }
    }

    /// For `release`: `session` for `--session`, `destroy` for
    /// `--destroy-session`. Its reads are consistent: what it releases must
    /// be what holds now.
    pub fn release(client: Client, session: Option<String>, destroy: bool) -> Outside {
        Outside {
            client,
            reading: Reading::Once,
            patience: Wait::Once,
            facts: false,
            consistent: true,
            session,
            destroy,
            listed: RefCell::new(None),
            ttl: super::config::TTL_MIN,
        }
    }

    /// The job's session TTL, for `--replace`'s place ahead of the
    /// waiters.
    pub fn with_ttl(self, ttl: Duration) -> Outside {
        Outside { ttl, ..self }
    }

    /// Every read is whole: a listing the token's rights filtered cannot
    /// say there is no holder.
    fn read(&self) -> Read {
        let read = if self.consistent {
            Read::consistent()
        } else {
            Read::now()
        };
        Read {
            whole: true,
            ..read
        }
    }

    /// Fails, as forbidden, when a holder may hide behind the token's
    /// rights where Consul does not say it filtered (before 1.11): a
    /// semaphore's record naming holders whose entries did not show, or
    /// session-held entries under `key/` with no record in sight, whose
    /// `.lock` may be the one hidden. A plain read of the missing entry
    /// answers 403 when it is hidden, 404 when it is gone.
    async fn hidden(&self, key: &str, pairs: &[KvPair]) -> Result<(), AcquireError> {
        let record_key = semaphore::record_key(key);
        let shown = |k: &str| pairs.iter().any(|p| p.key == k);
        match pairs.iter().find(|p| p.key == record_key) {
            Some(record) if record.flags == SEMAPHORE_FLAG => {
                let Ok(record) = Record::decode(record.value_bytes()) else {
                    return Ok(());
                };
                for id in &record.holders {
                    let entry = format!("{key}/{id}");
                    if !shown(&entry) {
                        self.client.kv_readable(&entry).await?;
                    }
                }
            }
            Some(_) => {}
            None => {
                let prefix = format!("{key}/");
                let contenders = pairs.iter().any(|p| {
                    p.holder().is_some()
                        && p.key
                            .strip_prefix(&prefix)
                            .is_some_and(|rest| !rest.contains('/'))
                });
                let lock_held = pairs.iter().any(|p| p.key == key && p.holder().is_some());
                if contenders && !lock_held {
                    self.client.kv_readable(&record_key).await?;
                }
            }
        }
        Ok(())
    }

    /// The listing of `key` as a string prefix: the one `target_of` just
    /// read, or a new one.
    async fn listing(&self, key: &str) -> Result<Vec<KvPair>, AcquireError> {
        if let Some((listed, pairs)) = self.listed.borrow_mut().take() {
            if listed == key {
                return Ok(pairs);
            }
        }
        Ok(self.client.kv_list(key, self.read()).await?.0)
    }

    /// The holders of one listing, with their sessions' facts as far as
    /// they are shown.
    async fn holders_of(&self, state: &State) -> Result<Vec<Holder>, AcquireError> {
        let mut holders = Vec::new();
        for pair in &state.holders {
            holders.push(self.holder(pair, state.semaphore).await?);
        }
        Ok(holders)
    }

    /// A held entry as a [`Holder`]. A holder that stores no value (as
    /// `consul lock` and the Go API's do) is shown by its session's name
    /// and node, so that a held lock never prints as an empty line.
    ///
    /// `fence` is what the holder's child got as LOCKRUN_LOCK_INDEX: for a
    /// lock, the key's ModifyIndex at acquisition, which is its ModifyIndex
    /// now unless the key was written while held (a plain `consul kv put`);
    /// not LockIndex, which counts acquisitions of the key. A slot's number
    /// was the record's ModifyIndex when the slot was taken, which every
    /// later change of holders overwrites: unknown (null).
    async fn holder(&self, pair: &KvPair, semaphore: bool) -> Result<Holder, AcquireError> {
        let id = pair.holder().unwrap_or_default();
        let bytes = pair.value_bytes();
        let session = if self.facts || bytes.is_empty() {
            self.client.session_info(id).await?
        } else {
            None
        };
        let text = pair
            .value
            .as_ref()
            .and_then(|v| std::str::from_utf8(v).ok());
        let label = if bytes.is_empty() {
            Some(
                match &session {
                    Some(session) => format!("{} (node {})", session.name, session.node),
                    // The session ended between the two reads.
                    None => format!("session {id}"),
                }
                .into_bytes(),
            )
        } else if text.is_none() {
            Some(bytes.to_vec())
        } else {
            None
        };
        let details = self.facts.then(|| {
            json!({
                "key": pair.key,
                "value_base64": pair.value.as_ref().map(|v| base64::engine::general_purpose::STANDARD.encode(v)),
                "flags": pair.flags,
                "session": pair.holder(),
                "session_name": session.as_ref().map(|s| s.name.clone()),
                "node": session.as_ref().map(|s| s.node.clone()),
                "ttl": session.as_ref().map(|s| s.ttl.clone()),
                "lock_index": pair.lock_index,
                "create_index": pair.create_index,
                "modify_index": pair.modify_index,
            })
        });
        // A lockrun's own session name says its host and pid, which
        // `--replace` on that host needs to see it end.
        let lockrun = session.as_ref().and_then(|s| lockrun_of(&s.name));
        Ok(Holder {
            value: text.map(str::to_string),
            host: match &lockrun {
                Some((host, _)) => Some(host.clone()),
                None => session.as_ref().map(|s| s.node.clone()),
            },
            pid: lockrun.map(|(_, pid)| pid),
            child_pgid: None,
            since: None,
            fence: (!semaphore).then_some(pair.modify_index),
            slot: None,
            entry: Some(pair.key.clone()),
            holder_id: pair.holder().map(str::to_string),
            label,
            details,
        })
    }

    async fn release_lock(
        &self,
        key: &str,
        only: Option<&str>,
    ) -> Result<Released<AcquireError>, AcquireError> {
        let pairs = self.listing(key).await?;
        let Some(pair) = pairs
            .into_iter()
            .find(|p| p.key == key && p.holder().is_some())
        else {
            return Ok(nothing(None));
        };
        let holder = pair.holder().unwrap_or_default().to_string();
        if let Some(only) = only {
            if only != holder {
                return Ok(nothing(Some(format!(
                    "nothing released: `{key}` is held by session {holder}, not {only}"
                ))));
            }
        }
        let info = self.client.session_info(&holder).await?;
        // Send the value and flags back: a bare release would wipe them.
        let released = self
            .client
            .kv_release(key, &holder, pair.value_bytes(), pair.flags)
            .await?;
        if !released {
            return Ok(nothing(Some(format!(
                "nothing released: `{key}` changed hands while we released it; run again"
            ))));
        }
        let asked = ReleasedHolder {
            entry: key.to_string(),
            session: holder,
            node_and_name: info.map(|s| (s.node, s.name)),
            value: pair.value_bytes().to_vec(),
        };
        Ok(self.destroying(vec![asked]).await)
    }

    /// Releases the readers' entries (or the one `--session` or `--replace`
    /// names), each sent back with its value and flags, as for a lock: each
    /// reader's lockrun sees its entry free with its session alive, and
    /// stops its child with its full grace; a writer then prunes them.
    async fn release_readers(
        &self,
        key: &str,
        only: Option<&str>,
    ) -> Result<Released<AcquireError>, AcquireError> {
        let pairs = self.listing(key).await?;
        let state = State::of(key, &pairs)?;
        let mut asked = Vec::new();
        for pair in &state.holders {
            let holder = pair.holder().unwrap_or_default().to_string();
            if only.is_some_and(|only| only != holder) {
                continue;
            }
            if self
                .client
                .kv_release(&pair.key, &holder, pair.value_bytes(), pair.flags)
                .await?
            {
                asked.push(ReleasedHolder {
                    entry: pair.key.clone(),
                    session: holder,
                    node_and_name: None,
                    value: pair.value_bytes().to_vec(),
                });
            }
        }
        if asked.is_empty() {
            return Ok(nothing(Some(format!(
                "nothing to release: no matching reader of `{key}`"
            ))));
        }
        Ok(self.destroying(asked).await)
    }

    async fn release_slots(
        &self,
        key: &str,
        only: Option<&str>,
    ) -> Result<Released<AcquireError>, AcquireError> {
        for _ in 0..16 {
            let (pairs, _) = semaphore::list(&self.client, key, self.read()).await?;
            self.hidden(key, &pairs).await?;
            let view = View::read(key, pairs).map_err(AcquireError::Conflict)?;
            let Some((record, modify)) = &view.record else {
                break;
            };
            let freed: BTreeSet<String> = match only {
                Some(id) => record
                    .holders
                    .iter()
                    .filter(|h| *h == id)
                    .cloned()
                    .collect(),
                None => record.holders.clone(),
            };
            if freed.is_empty() {
                break;
            }
            let updated = Record {
                limit: record.limit,
                holders: record.holders.difference(&freed).cloned().collect(),
            };
            if !self
                .client
                .kv_cas(
                    &semaphore::record_key(key),
                    &updated.encode(),
                    SEMAPHORE_FLAG,
                    *modify,
                )
                .await?
            {
                continue;
            }
            let asked = freed
                .into_iter()
                .map(|id| {
                    let value = view
                        .contenders
                        .iter()
                        .find(|p| p.key == format!("{key}/{id}"))
                        .map(|p| p.value_bytes().to_vec())
                        .unwrap_or_default();
                    ReleasedHolder {
                        entry: format!("{key}/{id}"),
                        session: id,
                        node_and_name: None,
                        value,
                    }
                })
                .collect();
            return Ok(self.destroying(asked).await);
        }
        Ok(nothing(Some(format!(
            "nothing to release: no matching holder of `{key}`"
        ))))
    }

    /// The holders released, their sessions destroyed if asked: a session
    /// that cannot be destroyed is a failure of its own, its holder no
    /// longer counted among those released.
    async fn destroying(&self, released: Vec<ReleasedHolder>) -> Released<AcquireError> {
        let mut asked = Vec::new();
        let mut refused = Vec::new();
        for holder in released {
            if self.destroy {
                let id = SessionId::new(holder.session.clone());
                if let Err(e) = self.client.session_destroy(&id).await {
                    refused.push(e.into());
                    continue;
                }
            }
            asked.push(holder.into_holder());
        }
        Released {
            asked,
            refused,
            nothing: None,
        }
    }
}

/// How long one blocking read for a note's removal waits.
const NOTE_WAIT: Duration = Duration::from_secs(10);

/// The name lockrun gives its session unless told another
/// (`--session-name`): `lockrun on HOST pid PID for key KEY`.
pub fn session_name(host: &str, pid: u32, kind: &str, key: &str) -> String {
    format!("lockrun on {host} pid {pid} for {kind} {key}")
}

/// The host and pid in a session name lockrun gave ([`session_name`]).
fn lockrun_of(name: &str) -> Option<(String, u32)> {
    let rest = name.strip_prefix("lockrun on ")?;
    let (host, rest) = rest.split_once(" pid ")?;
    let (pid, _) = rest.split_once(" for ")?;
    let pid = pid.parse().ok()?;
    (!host.is_empty() && !host.contains(' ')).then(|| (host.to_string(), pid))
}

/// Where `--replace` leaves its note for the holder whose session is
/// `session` ([`crate::backend::ReplaceNote`]): beside the lock, as a key
/// no session holds, under the lock's name so that a token allowed the
/// lock is allowed the note.
pub fn note_key(name: &str, session: &str) -> String {
    format!("{name}.lockrun-replaced/{session}")
}

fn nothing(why: Option<String>) -> Released<AcquireError> {
    Released {
        asked: Vec::new(),
        refused: Vec::new(),
        nothing: why,
    }
}

/// A holder `release` let go of, as its line shows it.
struct ReleasedHolder {
    /// The held entry: the lock's key, or the slot holder's contender key.
    entry: String,
    session: String,
    /// The session's node and name, for a lock's holder whose session
    /// was still there.
    node_and_name: Option<(String, String)>,
    value: Vec<u8>,
}

impl ReleasedHolder {
    fn into_holder(self) -> Holder {
        Holder {
            value: String::from_utf8(self.value).ok(),
            host: self.node_and_name.as_ref().map(|(node, _)| node.clone()),
            pid: None,
            child_pgid: None,
            since: None,
            fence: None,
            slot: None,
            entry: Some(self.entry),
            holder_id: Some(self.session.clone()),
            label: None,
            // What the line `release` prints needs: the session, and its
            // node and name when it was looked up.
            details: Some(match self.node_and_name {
                Some((node, name)) => {
                    json!({ "session": self.session, "node": node, "session_name": name })
                }
                None => json!({ "session": self.session }),
            }),
        }
    }
}

impl Inspect for Outside {
    type Error = AcquireError;
    type Changes = OutsideChanges;

    async fn target_of(&self, key: &str) -> Result<Target, AcquireError> {
        // A `--wait` or `--watch` rides out a blip within its patience from
        // the first read on, as its later reads do: a script may start it
        // while the agent is still coming up. A one-off look answers at once.
        let (mut retry, step) = match self.reading {
            Reading::Once => (None, String::new()),
            Reading::Waiting(_) => (Some(Retry::new(self.patience)), format!("reading `{key}`")),
            Reading::Watching => (Some(Retry::new(self.patience)), format!("watching `{key}`")),
        };
        let pairs = loop {
            match (self.client.kv_list(key, self.read()).await, retry.as_mut()) {
                (Ok((pairs, _)), _) => break pairs,
                (Err(e), Some(retry)) => retry.pause(&step, e).await?,
                (Err(e), None) => return Err(e.into()),
            }
        };
        self.hidden(key, &pairs).await?;
        let state = State::of(key, &pairs)?;
        *self.listed.borrow_mut() = Some((key.to_string(), pairs));
        Ok(match state.limit {
            Some(limit) if state.semaphore => Target::Slot {
                prefix: key.to_string(),
                limit: u32::try_from(limit).unwrap_or(u32::MAX),
            },
            _ => Target::Lock {
                key: key.to_string(),
                shared: state.shared,
            },
        })
    }

    /// One listing of the prefix: every key a session holds (a lock, a
    /// semaphore's contender, `consul lock`'s `KEY/.lock`) and every
    /// semaphore record's prefix. A listing Consul filtered by ACL is an
    /// error (read whole), never a shorter list.
    async fn names_under(&self, prefix: &str) -> Result<Vec<String>, AcquireError> {
        let (pairs, _) = self.client.kv_list(prefix, self.read()).await?;
        let record = semaphore::record_key("");
        let mut names = Vec::new();
        for p in &pairs {
            // A waiter's entry in a lock's queue names no lock: `leader`
            // and `list` show it as a waiter of its lock.
            if p.key.split('/').any(|s| s.ends_with(".lockrun-queue")) {
                continue;
            }
            // A writer's hold on `KEY/.lock` (so that `consul lock KEY`
            // waits) is part of its lock `KEY`, listed as that.
            if shared::held_by_writer(p) && p.key.ends_with(&record) {
                continue;
            }
            let semaphore =
                p.flags == SEMAPHORE_FLAG && p.key.ends_with(&record) && p.key.len() > record.len();
            if semaphore {
                names.push(p.key[..p.key.len() - record.len()].to_string());
            } else if let Some((lock, _)) = p
                .key
                .rsplit_once(&format!("{record}/"))
                .filter(|_| p.flags == shared::SHARED_FLAG && p.holder().is_some())
            {
                // A reader's entry `KEY/.lock/<session>`: the lock is KEY.
                names.push(lock.to_string());
            } else if p.holder().is_some() {
                names.push(p.key.clone());
                // A held entry may be a slot of a semaphore whose record
                // this token cannot read (Consul before 1.11 filters it
                // silently): its parent's look asks, and says so.
                if !p.key.ends_with(&record) {
                    if let Some((parent, _)) = p.key.rsplit_once('/') {
                        names.push(parent.to_string());
                    }
                }
            }
        }
        Ok(names)
    }

    /// An entry in the lock's queue at `--replace`'s level, on a session
    /// of its own ([`queue::GoAhead`](super::lock::queue::GoAhead)).
    async fn go_ahead(
        &self,
        target: &Target,
        value: &str,
    ) -> Result<Option<crate::backend::Ahead>, AcquireError> {
        let Target::Lock { key, shared: false } = target else {
            return Ok(None);
        };
        let ahead = super::lock::queue::GoAhead::put(&self.client, key, self.ttl, value).await?;
        Ok(Some(Box::new(ahead)))
    }

    /// lockrun's writers queued for a leader lock, from their entries in
    /// its queue (see [`queue`](super::lock::queue)), highest priority
    /// first, then first come; `consul lock`'s waiters keep none and are
    /// not shown.
    async fn waiters(
        &self,
        target: &Target,
    ) -> Result<Option<Vec<crate::backend::Waiter>>, AcquireError> {
        use super::lock::queue;
        let Target::Lock { key, shared: false } = target else {
            return Ok(None);
        };
        let (mut pairs, _) = self.client.kv_list(&queue::of_key(key), self.read()).await?;
        pairs.retain(|p| p.holder().is_some());
        pairs.sort_by_key(|p| (std::cmp::Reverse(queue::level_of(p)), p.create_index));
        Ok(Some(
            pairs
                .iter()
                .map(|p| crate::backend::Waiter {
                    priority: queue::level_of(p),
                    value: queue::value_of(p),
                    pid: None,
                })
                .collect(),
        ))
    }

    async fn holders(&self, target: &Target) -> Result<Vec<Holder>, AcquireError> {
        let key = target.name();
        let pairs = self.listing(key).await?;
        self.holders_of(&State::of(key, &pairs)?).await
    }

    async fn changes(&self, target: &Target) -> Result<OutsideChanges, AcquireError> {
        self.listed.borrow_mut().take();
        let waiter = match self.reading {
            Reading::Waiting(_) => Waiter::acquiring(self.patience),
            Reading::Once | Reading::Watching => Waiter::watching(QueryIndex::NONE),
        };
        Ok(OutsideChanges {
            outside: Outside {
                client: self.client.clone(),
                reading: self.reading,
                patience: self.patience,
                facts: self.facts,
                consistent: self.consistent,
                session: None,
                destroy: false,
                listed: RefCell::new(None),
                ttl: self.ttl,
            },
            key: target.name().to_string(),
            waiter,
            last: None,
        })
    }

    async fn force_release(
        &self,
        target: &Target,
        which: &Which,
    ) -> Result<Released<AcquireError>, AcquireError> {
        // `--replace` names one holder by its session, as `--session` does.
        let only = match which {
            Which::Holder(h) => match &h.holder_id {
                Some(id) => Some(id.as_str()),
                None => {
                    return Err(AcquireError::Conflict(format!(
                        "cannot tell which session holds `{}`; run again",
                        target.name()
                    )))
                }
            },
            _ => self.session.as_deref(),
        };
        match target {
            Target::Lock { key, shared: true } => self.release_readers(key, only).await,
            Target::Lock { key, .. } => self.release_lock(key, only).await,
            Target::Slot { prefix, .. } => self.release_slots(prefix, only).await,
        }
    }

    fn asks_by_note(&self) -> bool {
        true
    }

    /// A key beside the lock that no session holds, written only if there
    /// is none: `lockrun list` and `leader` read held entries alone.
    async fn leave_note(
        &self,
        target: &Target,
        holder: &Holder,
        note: &ReplaceNote,
    ) -> Result<bool, AcquireError> {
        let Some(session) = &holder.holder_id else {
            return Ok(false);
        };
        let key = note_key(target.name(), session);
        Ok(self.client.kv_cas(&key, &note.encode(), 0, 0).await?)
    }

    /// The session's TTL and lock-delay: its lockrun stops its command
    /// within them of its last renewal, which came before the release.
    async fn lapse_bound(&self, holder: &Holder) -> Result<Option<Duration>, AcquireError> {
        let Some(id) = &holder.holder_id else {
            return Ok(None);
        };
        let Some(info) = self.client.session_info(id).await? else {
            return Ok(None);
        };
        let Ok(ttl) = humantime::parse_duration(&info.ttl) else {
            return Ok(None);
        };
        Ok(Some(ttl + Duration::from_nanos(info.lock_delay)))
    }

    async fn note_taken(&self, target: &Target, holder: &Holder, until: Instant) -> bool {
        let Some(session) = &holder.holder_id else {
            tokio::time::sleep_until(until).await;
            return false;
        };
        let key = note_key(target.name(), session);
        let taken = async {
            let mut index = QueryIndex::NONE;
            loop {
                let read = Read {
                    index,
                    wait: (index != QueryIndex::NONE).then_some(NOTE_WAIT),
                    ..Read::now()
                };
                let (pair, returned) = self.client.kv_get(&key, read).await?;
                if pair.is_none() {
                    return Ok::<bool, AcquireError>(true);
                }
                index = index.after(returned);
            }
        };
        match tokio::time::timeout_at(until, taken).await {
            Ok(Ok(true)) => true,
            _ => {
                tokio::time::sleep_until(until).await;
                false
            }
        }
    }

    async fn clear_note(&self, target: &Target, holder: &Holder) {
        if let Some(session) = &holder.holder_id {
            let key = note_key(target.name(), session);
            if let Err(e) = self.client.kv_delete(&key, None).await {
                tracing::warn!("could not remove --replace's note `{key}`: {e}");
            }
        }
    }

    fn refuse_every_slot(&self, prefix: &str) -> Option<String> {
        self.session.is_none().then(|| format!(
            "`{prefix}` is a semaphore; name the holder to free with --session ID, or free every slot with --all"
        ))
    }

    fn asked_line(&self, target: &Target, holder: &Holder) -> String {
        let key = target.name();
        let details = holder.details.as_ref();
        let fact = |name: &str| details.and_then(|d| d[name].as_str());
        let session = fact("session").unwrap_or_default();
        let mut line = match target {
            Target::Lock { .. } => format!("released `{key}` held by session {session}"),
            Target::Slot { .. } => format!("released a slot of `{key}` held by session {session}"),
        };
        if let (Some(node), Some(name)) = (fact("node"), fact("session_name")) {
            line.push_str(&format!(" (node {node}, name \"{name}\")"));
        }
        if let Some(value) = holder.value.as_deref().filter(|v| !v.is_empty()) {
            line.push_str(&format!(", value {value}"));
        }
        if self.destroy {
            line.push_str("; session destroyed");
        }
        line
    }
}

/// What a key holds right now: a lock's holder, or a semaphore's holders.
struct State {
    semaphore: bool,
    /// Readers hold it (`elect -s`): their entries are the holders.
    shared: bool,
    /// A semaphore's slot count, as its record says.
    limit: Option<u64>,
    /// The entries held by a session: one at most for a lock.
    holders: Vec<KvPair>,
}

impl State {
    /// One listing of KEY as a string prefix answers both questions: the
    /// key itself, and whether it is a semaphore prefix (`KEY/.lock` with
    /// the semaphore flag).
    fn of(key: &str, pairs: &[KvPair]) -> Result<State, AcquireError> {
        if let Some(lock) = pairs.iter().find(|p| p.key == key && p.holder().is_some()) {
            return Ok(State {
                semaphore: false,
                shared: false,
                limit: None,
                holders: vec![lock.clone()],
            });
        }
        let record_key = semaphore::record_key(key);
        let readers = format!("{record_key}/");
        let shared = pairs
            .iter()
            .any(|p| p.key == record_key && p.flags == shared::SHARED_FLAG);
        let holding: Vec<KvPair> = pairs
            .iter()
            .filter(|p| p.key.starts_with(&readers) && p.holder().is_some())
            .cloned()
            .collect();
        if shared || !holding.is_empty() {
            // A lock taken shared: every reader whose entry its session
            // holds (a reader the record names but whose session ended is
            // no holder; a writer prunes it).
            return Ok(State {
                semaphore: false,
                shared: true,
                limit: None,
                holders: holding,
            });
        }
        let under: Vec<KvPair> = pairs
            .iter()
            .filter(|p| p.key.starts_with(&format!("{key}/")))
            .cloned()
            .collect();
        let is_semaphore = under
            .iter()
            .any(|p| p.key == record_key && p.flags == SEMAPHORE_FLAG);
        if !is_semaphore {
            // Not "no holder" while `consul lock KEY` holds `KEY/.lock`,
            // which `lockrun elect KEY` refuses to run beside.
            let dot = under.iter().find(|p| p.key == record_key);
            if let Some(why) = super::lock::leader::consul_lock_holder(key, dot) {
                return Err(AcquireError::Conflict(format!(
                    "`{key}` itself has no holder, but {why}; ask `lockrun leader {}`",
                    record_key
                )));
            }
            return Ok(State {
                semaphore: false,
                shared: false,
                limit: None,
                holders: Vec::new(),
            });
        }
        let view = View::read(key, under).map_err(AcquireError::Conflict)?;
        let live = view.live_holders();
        let limit = view.record.as_ref().map(|(record, _)| record.limit);
        // Oldest first, by when each contender's entry was made: the order
        // they came in, which `--replace` takes the first of.
        let mut holders: Vec<KvPair> = view
            .contenders
            .into_iter()
            .filter(|p| p.holder().is_some_and(|h| live.contains(h)))
            .collect();
        holders.sort_by_key(|p| p.create_index);
        Ok(State {
            semaphore: true,
            shared: false,
            limit,
            holders,
        })
    }

    /// What identifies the holder(s), to tell a change of holder from any
    /// other write.
    fn identity(&self) -> Vec<(String, Vec<u8>)> {
        self.holders
            .iter()
            .map(|p| {
                (
                    p.holder().unwrap_or_default().to_string(),
                    p.value_bytes().to_vec(),
                )
            })
            .collect()
    }
}

/// The holders of a key each time its holders change, from blocking reads
/// of its listing.
#[derive(Debug)]
pub struct OutsideChanges {
    outside: Outside,
    key: String,
    waiter: Waiter,
    last: Option<Vec<(String, Vec<u8>)>>,
}

impl Changes for OutsideChanges {
    type Error = AcquireError;

    async fn next(&mut self) -> Result<Vec<Holder>, AcquireError> {
        let key = &self.key;
        let what = match self.outside.reading {
            Reading::Waiting(_) => format!("reading `{key}`"),
            Reading::Once | Reading::Watching => format!("watching `{key}`"),
        };
        loop {
            let Some(read) = self.waiter.next_read().await else {
                // `--timeout` ran out: the caller's own deadline ends the
                // wait, with no holder.
                return std::future::pending().await;
            };
            let read = Read {
                whole: true,
                ..read
            };
            let result = self.outside.client.kv_list(key, read).await;
            let Some(pairs) = self.waiter.answer(&what, result).await? else {
                continue;
            };
            self.waiter.block();
            self.outside.hidden(key, &pairs).await?;
            let state = State::of(key, &pairs)?;
            let identity = state.identity();
            if self.last.as_ref() == Some(&identity) {
                continue;
            }
            self.last = Some(identity);
            return self.outside.holders_of(&state).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lockrun_session_name_gives_back_its_host_and_pid() {
        let name = session_name("db-1", 4242, "key", "service/db/leader");
        assert_eq!(name, "lockrun on db-1 pid 4242 for key service/db/leader");
        assert_eq!(lockrun_of(&name), Some(("db-1".to_string(), 4242)));
        // A name of the user's own, `consul lock`'s, or lockrun's before
        // it named its pid: nothing to wait on.
        for other in [
            "test holder",
            "Consul lock for 'sleep 15' at 'jobs/x'",
            "lockrun on db-1 for key service/db/leader",
            "lockrun on db 1 pid 7 for key k",
            "lockrun on db-1 pid x for key k",
        ] {
            assert_eq!(lockrun_of(other), None, "{other}");
        }
    }
}
