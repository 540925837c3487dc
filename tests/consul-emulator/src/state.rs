//! The emulated state store: the KV table with its tombstones, the sessions
//! table, lock-delays and the raft index. Pure and synchronous; every
//! transition takes the clock as an argument so tests can drive time.
//!
//! The rules follow Consul's state store (`kvs.go`, `session.go`) rather
//! than its documentation, because lockrun depends on the quirks: a plain
//! PUT zeroes `LockIndex` but keeps `Session`, a release writes the request's
//! body, a failed CAS delete of a missing key answers `true`, a list's index
//! counts deletions under its prefix.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Consul's `MaxLockDelay`: longer lock-delays are stored but applied capped.
pub const MAX_LOCK_DELAY_NS: i64 = 60_000_000_000;
/// Consul's `SessionTTLMax`.
pub const SESSION_TTL_MAX_NS: i64 = 24 * 3600 * 1_000_000_000;
/// The leader reaps a TTL session this many TTLs after its last renewal.
pub const SESSION_TTL_MULTIPLIER: u32 = 2;
/// The only check our one node has.
pub const SERF_CHECK: &str = "serfHealth";

/// A fresh dev agent has used a few raft entries on itself (configuration,
/// node registration, autopilot) before any client writes; starting above
/// zero keeps our indexes looking like that without pretending to be exact.
const FIRST_RAFT_INDEX: u64 = 12;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    /// Empty stands for Go's nil slice, which the API shows as `null`: an
    /// empty body always reaches the store as nil.
    pub value: Vec<u8>,
    pub flags: u64,
    /// Empty when unlocked, as in Go.
    pub session: String,
    pub lock_index: u64,
    pub create_index: u64,
    pub modify_index: u64,
}

impl Entry {
    /// Consul's `DirEntry.Equal`: the indexes do not count.
    fn same_content(&self, other: &Entry) -> bool {
        self.lock_index == other.lock_index
            && self.key == other.key
            && self.flags == other.flags
            && self.value == other.value
            && self.session == other.session
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behavior {
    Release,
    Delete,
}

impl Behavior {
    pub fn as_str(self) -> &'static str {
        match self {
            Behavior::Release => "release",
            Behavior::Delete => "delete",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceCheck {
    pub id: String,
    pub namespace: String,
}

#[derive(Clone, Debug)]
pub struct Session {
    pub id: String,
    pub name: String,
    pub node: String,
    /// As given, unclamped (a 61 s lock-delay reads back as 61 s).
    pub lock_delay_ns: i64,
    pub behavior: Behavior,
    /// As given; `""` when the session has no TTL.
    pub ttl: String,
    pub node_checks: Option<Vec<String>>,
    pub service_checks: Option<Vec<ServiceCheck>>,
    /// The deprecated `Checks` list, kept only when a client set it to
    /// something other than the default (the HTTP handler's fix-up).
    pub checks: Vec<String>,
    pub create_index: u64,
    pub modify_index: u64,
    ttl_ns: i64,
    /// When the leader's timer invalidates the session, if it has a TTL.
    expires_at: Option<Instant>,
}

/// What a session-create request asks for, already validated by the RPC
/// layer (behavior, TTL bounds).
#[derive(Clone, Debug)]
pub struct NewSession {
    pub id: String,
    pub name: String,
    pub node: String,
    pub lock_delay_ns: i64,
    pub behavior: Behavior,
    pub ttl: String,
    pub ttl_ns: i64,
    pub node_checks: Option<Vec<String>>,
    pub service_checks: Option<Vec<ServiceCheck>>,
    pub checks: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvOp {
    Set,
    Cas(u64),
    Lock(String),
    Unlock(String),
}

#[derive(Clone, Debug)]
pub struct KvWrite {
    pub key: String,
    pub value: Vec<u8>,
    pub flags: u64,
    pub op: KvOp,
}

/// The KV verbs of `/v1/txn` we emulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnVerb {
    Set,
    Cas,
    Lock,
    Unlock,
    Get,
    Delete,
    DeleteCas,
    CheckSession,
}

/// One KV op of a transaction, as the handler decoded it.
#[derive(Clone, Debug)]
pub struct TxnOp {
    pub verb: TxnVerb,
    pub key: String,
    pub value: Vec<u8>,
    pub flags: u64,
    /// The `Index` of `cas` and `delete-cas`.
    pub index: u64,
    pub session: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteOp {
    Delete,
    Cas(u64),
    Tree,
}

/// go-memdb's `UUIDFieldIndex` parsing, which is what turns a session ID
/// into a lookup key. It checks only length, hyphen count and hex, so its
/// error texts are the ones a malformed `?acquire=` earns.
pub fn uuid_index_bytes(s: &str) -> Result<Vec<u8>, String> {
    if s.len() != 36 {
        return Err("UUID must be 36 characters".to_string());
    }
    let hyphens = s.matches('-').count();
    if hyphens > 4 {
        return Err(format!(
            "UUID should have maximum of 4 \"-\"; got {hyphens}"
        ));
    }
    let hex: Vec<u8> = s.bytes().filter(|&b| b != b'-').collect();
    if hex.len() % 2 != 0 {
        return Err("Input (without hyphens) must be even length".to_string());
    }
    let mut out = Vec::with_capacity(hex.len() / 2);
    for pair in hex.chunks(2) {
        let mut byte = 0u8;
        for &c in pair {
            let nibble = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                _ => {
                    let shown = char::from(c);
                    return Err(format!(
                        "Invalid UUID: encoding/hex: invalid byte: U+{:04X} {}",
                        c,
                        crate::duration::go_quote(&shown.to_string()).replace('"', "'")
                    ));
                }
            };
            byte = byte << 4 | nibble;
        }
        out.push(byte);
    }
    Ok(out)
}

fn lookup_error(e: String) -> String {
    format!("failed session lookup: index error: {e}")
}

#[derive(Clone, Debug)]
pub struct State {
    node_name: String,
    raft_index: u64,
    kv: BTreeMap<String, Entry>,
    /// Consul's graveyard: deleted keys (or deleted-tree prefixes) and the
    /// index of the deletion, so a list's index moves when a key under its
    /// prefix goes away. Consul reaps these after a while; tests are short.
    tombstones: BTreeMap<String, u64>,
    /// Max index of the kvs and tombstones tables.
    kv_index: u64,
    /// Keyed by the session ID's UUID bytes, as memdb indexes it.
    sessions: BTreeMap<Vec<u8>, Session>,
    sessions_index: u64,
    /// Key → end of its lock-delay. Lives in the leader's memory, not in
    /// raft: lost on restart, like the rest of a dev agent.
    lock_delays: HashMap<String, Instant>,
    /// The node's health checks: ID → passing. `serfHealth` always exists.
    checks: BTreeMap<String, bool>,
    /// Agent services (what `--register-service` registers): ID → its
    /// check's ID, which goes with it.
    services: BTreeMap<String, Option<String>>,
}

impl State {
    pub fn new(node_name: &str) -> State {
        State {
            node_name: node_name.to_string(),
            raft_index: FIRST_RAFT_INDEX,
            kv: BTreeMap::new(),
            tombstones: BTreeMap::new(),
            kv_index: 0,
            sessions: BTreeMap::new(),
            sessions_index: 0,
            lock_delays: HashMap::new(),
            checks: BTreeMap::from([(SERF_CHECK.to_string(), true)]),
            services: BTreeMap::new(),
        }
    }

    /// The node's checks and whether each passes, for `/v1/health/node`.
    pub fn node_checks(&self) -> Vec<(String, bool)> {
        self.checks
            .iter()
            .map(|(id, ok)| (id.clone(), *ok))
            .collect()
    }

    /// An agent check registered, or its status updated, as the agent
    /// syncs it to the catalog. Turning critical invalidates every session
    /// bound to it.
    pub fn check_set(&mut self, id: &str, passing: bool, now: Instant) {
        self.next_index();
        self.checks.insert(id.to_string(), passing);
        if !passing {
            self.fail_check(id, now);
        }
    }

    /// A deregistered check takes the sessions bound to it along.
    pub fn check_deregister(&mut self, id: &str, now: Instant) {
        self.fail_check(id, now);
        if id != SERF_CHECK {
            self.checks.remove(id);
        }
    }

    /// A service registered with the agent, with its check if it has one.
    pub fn service_set(&mut self, id: &str, check: Option<(&str, bool)>, now: Instant) {
        self.services
            .insert(id.to_string(), check.map(|(c, _)| c.to_string()));
        match check {
            Some((check, passing)) => self.check_set(check, passing, now),
            None => {
                self.next_index();
            }
        }
    }

    /// A service deregistered takes its check along; `false` if unknown.
    pub fn service_deregister(&mut self, id: &str, now: Instant) -> bool {
        match self.services.remove(id) {
            Some(Some(check)) => {
                self.check_deregister(&check, now);
                true
            }
            Some(None) => true,
            None => false,
        }
    }

    /// Every raft apply consumes an index, whether or not it changes a table.
    fn next_index(&mut self) -> u64 {
        self.raft_index += 1;
        self.raft_index
    }

    pub fn raft_index(&self) -> u64 {
        self.raft_index
    }

    #[cfg(test)]
    pub fn kv_table_index(&self) -> u64 {
        self.kv_index
    }

    #[cfg(test)]
    pub fn sessions_table_index(&self) -> u64 {
        self.sessions_index
    }

    // ---- KV reads ----

    /// The entry and the index a GET reports: the entry's ModifyIndex, or
    /// the table's when the key is missing.
    pub fn kv_get(&self, key: &str) -> (u64, Option<&Entry>) {
        match self.kv.get(key) {
            Some(e) => (e.modify_index, Some(e)),
            None => (self.kv_index, None),
        }
    }

    fn under(&self, prefix: &str) -> Vec<&Entry> {
        self.kv
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, e)| e)
            .collect()
    }

    /// Consul's rule for a prefix read's index: the highest ModifyIndex
    /// under the prefix or tombstone under it, else the table index; an
    /// empty prefix always uses the table index.
    fn prefix_index(&self, prefix: &str, entries_max: u64) -> u64 {
        if prefix.is_empty() {
            return self.kv_index;
        }
        let graveyard = self
            .tombstones
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, &i)| i)
            .max()
            .unwrap_or(0);
        match entries_max.max(graveyard) {
            0 => self.kv_index,
            i => i,
        }
    }

    pub fn kv_list(&self, prefix: &str) -> (u64, Vec<&Entry>) {
        let entries = self.under(prefix);
        let max = entries.iter().map(|e| e.modify_index).max().unwrap_or(0);
        (self.prefix_index(prefix, max), entries)
    }

    /// `?keys`: names under the prefix, folded after the first `separator`
    /// past the prefix.
    pub fn kv_keys(&self, prefix: &str, separator: &str) -> (u64, Vec<String>) {
        let mut keys: Vec<String> = Vec::new();
        let mut max = 0;
        for e in self.under(prefix) {
            max = max.max(e.modify_index);
            if separator.is_empty() {
                keys.push(e.key.clone());
                continue;
            }
            let after = &e.key[prefix.len()..];
            match after.find(separator) {
                Some(at) => {
                    let folded = &e.key[..prefix.len() + at + separator.len()];
                    if keys.last().map(String::as_str) != Some(folded) {
                        keys.push(folded.to_string());
                    }
                }
                None => keys.push(e.key.clone()),
            }
        }
        (self.prefix_index(prefix, max), keys)
    }

    /// Checked by the leader before an acquire reaches raft; a key in its
    /// lock-delay refuses every acquire with a plain `false`.
    pub fn lock_delay_active(&self, key: &str, now: Instant) -> bool {
        self.lock_delays.get(key).is_some_and(|&until| until > now)
    }

    // ---- KV writes ----

    /// `kvsSetTxn`: keeps the holder unless told otherwise, and does not
    /// touch the indexes when nothing changed.
    fn kv_set(&mut self, idx: u64, mut entry: Entry, update_session: bool) {
        let existing = self.kv.get(&entry.key);
        entry.create_index = existing.map_or(idx, |e| e.create_index);
        if !update_session {
            entry.session = existing.map(|e| e.session.clone()).unwrap_or_default();
        }
        if let Some(e) = existing {
            if e.same_content(&entry) {
                return;
            }
        }
        entry.modify_index = idx;
        self.kv.insert(entry.key.clone(), entry);
        self.kv_index = idx;
    }

    fn kv_delete_key(&mut self, idx: u64, key: &str) -> bool {
        if self.kv.remove(key).is_none() {
            return false;
        }
        self.tombstones.insert(key.to_string(), idx);
        self.kv_index = idx;
        true
    }

    /// One KV write through raft. `Err` carries the FSM's error text (the
    /// caller prefixes `raft apply failed: `).
    pub fn kv_apply(&mut self, w: KvWrite) -> Result<bool, String> {
        let idx = self.next_index();
        self.kv_apply_at(idx, w)
    }

    fn kv_apply_at(&mut self, idx: u64, w: KvWrite) -> Result<bool, String> {
        let mut entry = Entry {
            key: w.key,
            value: w.value,
            flags: w.flags,
            session: String::new(),
            lock_index: 0,
            create_index: 0,
            modify_index: 0,
        };
        match w.op {
            KvOp::Set => {
                self.kv_set(idx, entry, false);
                Ok(true)
            }
            KvOp::Cas(cas) => {
                let current = self.kv.get(&entry.key).map(|e| e.modify_index);
                let allowed = match current {
                    None => cas == 0,
                    Some(modify) => cas != 0 && cas == modify,
                };
                if allowed {
                    self.kv_set(idx, entry, false);
                }
                Ok(allowed)
            }
            KvOp::Lock(session) => {
                if session.is_empty() {
                    return Err("missing session".to_string());
                }
                let sid = uuid_index_bytes(&session).map_err(lookup_error)?;
                if !self.sessions.contains_key(&sid) {
                    return Err(format!(
                        "invalid session {}",
                        crate::duration::go_quote(&session)
                    ));
                }
                entry.lock_index = 1;
                if let Some(e) = self.kv.get(&entry.key) {
                    if e.session == session {
                        entry.lock_index = e.lock_index;
                    } else if !e.session.is_empty() {
                        return Ok(false);
                    } else {
                        entry.lock_index = e.lock_index + 1;
                    }
                }
                entry.session = session;
                self.kv_set(idx, entry, true);
                Ok(true)
            }
            KvOp::Unlock(session) => {
                if session.is_empty() {
                    return Err("missing session".to_string());
                }
                let Some(e) = self.kv.get(&entry.key) else {
                    return Ok(false);
                };
                if e.session != session {
                    return Ok(false);
                }
                entry.lock_index = e.lock_index;
                self.kv_set(idx, entry, true);
                Ok(true)
            }
        }
    }

    pub fn kv_delete(&mut self, key: &str, op: DeleteOp) -> bool {
        let idx = self.next_index();
        self.kv_delete_at(idx, key, op)
    }

    fn kv_delete_at(&mut self, idx: u64, key: &str, op: DeleteOp) -> bool {
        match op {
            DeleteOp::Delete => {
                self.kv_delete_key(idx, key);
                true
            }
            DeleteOp::Cas(cas) => match self.kv.get(key).map(|e| e.modify_index) {
                // Consul answers `entry == nil` when the CAS does not match:
                // deleting a key that is already gone "succeeds".
                None => true,
                Some(modify) if modify != cas => false,
                Some(_) => {
                    self.kv_delete_key(idx, key);
                    true
                }
            },
            DeleteOp::Tree => {
                let doomed: Vec<String> = self.under(key).iter().map(|e| e.key.clone()).collect();
                if !doomed.is_empty() {
                    for k in &doomed {
                        self.kv.remove(k);
                    }
                    // One tombstone for the whole subtree, at the prefix.
                    self.tombstones.insert(key.to_string(), idx);
                    self.kv_index = idx;
                }
                true
            }
        }
    }

    /// `txnKVS` over every op at one raft index: all apply or none does.
    /// A result is the entry after its op, its value blanked except for
    /// `get`; deletes have none. `Err` is the failing op's index and the
    /// FSM's text; the raft index is spent all the same, as a failed apply
    /// is still a log entry.
    pub fn kv_txn(&mut self, ops: Vec<TxnOp>) -> Result<Vec<Entry>, (usize, String)> {
        let before = self.clone();
        let idx = self.next_index();
        let mut results = Vec::new();
        for (i, op) in ops.into_iter().enumerate() {
            match self.txn_op(idx, op) {
                Ok(Some(entry)) => results.push(entry),
                Ok(None) => {}
                Err(e) => {
                    *self = before;
                    self.raft_index = idx;
                    return Err((i, e));
                }
            }
        }
        Ok(results)
    }

    /// A transaction of `get`s only, which Consul serves without raft.
    pub fn kv_txn_read(&self, ops: &[TxnOp]) -> Result<Vec<Entry>, (usize, String)> {
        ops.iter()
            .enumerate()
            .map(|(i, op)| {
                self.kv.get(&op.key).cloned().ok_or_else(|| {
                    let quoted = crate::duration::go_quote(&op.key);
                    (i, format!("key {quoted} doesn't exist"))
                })
            })
            .collect()
    }

    fn txn_op(&mut self, idx: u64, op: TxnOp) -> Result<Option<Entry>, String> {
        let key = op.key.clone();
        let quoted = crate::duration::go_quote(&key);
        let kv_write = |kv_op: KvOp| KvWrite {
            key: op.key.clone(),
            value: op.value.clone(),
            flags: op.flags,
            op: kv_op,
        };
        match op.verb {
            TxnVerb::Set => {
                self.kv_apply_at(idx, kv_write(KvOp::Set))?;
            }
            TxnVerb::Cas => {
                if !self.kv_apply_at(idx, kv_write(KvOp::Cas(op.index)))? {
                    return Err(format!("failed to set key {quoted}, index is stale"));
                }
            }
            TxnVerb::Lock => {
                if !self.kv_apply_at(idx, kv_write(KvOp::Lock(op.session.clone())))? {
                    return Err(format!("failed to lock key {quoted}, lock is already held"));
                }
            }
            TxnVerb::Unlock => {
                if !self.kv_apply_at(idx, kv_write(KvOp::Unlock(op.session.clone())))? {
                    return Err(format!(
                        "failed to unlock key {quoted}, lock isn't held, or is held by another session"
                    ));
                }
            }
            TxnVerb::Get => {
                return match self.kv.get(&key) {
                    Some(e) => Ok(Some(e.clone())),
                    None => Err(format!("key {quoted} doesn't exist")),
                }
            }
            TxnVerb::Delete => {
                self.kv_delete_at(idx, &key, DeleteOp::Delete);
                return Ok(None);
            }
            TxnVerb::CheckSession => {
                // Consul's kvsCheckSessionTxn: the entry, without its value.
                return match self.kv.get(&key) {
                    None => Err(format!(
                        "failed to check session, key {quoted} doesn't exist"
                    )),
                    Some(e) if e.session != op.session => Err(format!(
                        "failed session check for key {quoted}, current session {} != {}",
                        crate::duration::go_quote(&e.session),
                        crate::duration::go_quote(&op.session)
                    )),
                    Some(e) => Ok(Some(Entry {
                        value: Vec::new(),
                        ..e.clone()
                    })),
                };
            }
            TxnVerb::DeleteCas => {
                if !self.kv_delete_at(idx, &key, DeleteOp::Cas(op.index)) {
                    return Err(format!("failed to delete key {quoted}, index is stale"));
                }
                return Ok(None);
            }
        }
        Ok(self.kv.get(&key).map(|e| Entry {
            value: Vec::new(),
            ..e.clone()
        }))
    }

    // ---- Sessions ----

    pub fn session_get(&self, id: &str) -> Result<(u64, Option<&Session>), String> {
        let sid = uuid_index_bytes(id).map_err(lookup_error)?;
        Ok((self.sessions_index, self.sessions.get(&sid)))
    }

    pub fn session_list(&self) -> (u64, Vec<&Session>) {
        (self.sessions_index, self.sessions.values().collect())
    }

    pub fn node_sessions(&self, node: &str) -> (u64, Vec<&Session>) {
        let list = self
            .sessions
            .values()
            .filter(|s| s.node.eq_ignore_ascii_case(node))
            .collect();
        (self.sessions_index, list)
    }

    pub fn session_ids(&self) -> Vec<String> {
        self.sessions.values().map(|s| s.id.clone()).collect()
    }

    /// `sessionCreateTxn`: the node and every check must exist. `Err` is
    /// the FSM's text (the caller prefixes `apply failed: `).
    pub fn session_create(&mut self, new: NewSession, now: Instant) -> Result<(), String> {
        let idx = self.next_index();
        if !new.node.eq_ignore_ascii_case(&self.node_name) {
            return Err("Missing node registration".to_string());
        }
        let mut check_ids: Vec<&str> = Vec::new();
        for c in new.checks.iter().chain(new.node_checks.iter().flatten()) {
            if !check_ids.contains(&c.as_str()) {
                check_ids.push(c);
            }
        }
        check_ids.extend(new.service_checks.iter().flatten().map(|c| c.id.as_str()));
        for id in &check_ids {
            match self.checks.get(*id) {
                None => return Err(format!("Missing check '{id}' registration")),
                Some(false) => return Err(format!("Check '{id}' is in critical state")),
                Some(true) => {}
            }
        }
        let sid = uuid_index_bytes(&new.id).map_err(lookup_error)?;
        let session = Session {
            id: new.id,
            name: new.name,
            node: new.node,
            lock_delay_ns: new.lock_delay_ns,
            behavior: new.behavior,
            ttl: new.ttl,
            node_checks: new.node_checks,
            service_checks: new.service_checks,
            checks: new.checks,
            create_index: idx,
            modify_index: idx,
            ttl_ns: new.ttl_ns,
            expires_at: None,
        };
        self.sessions.insert(sid.clone(), session);
        self.sessions_index = idx;
        self.arm_timer(&sid, now);
        Ok(())
    }

    fn arm_timer(&mut self, sid: &[u8], now: Instant) {
        if let Some(s) = self.sessions.get_mut(sid) {
            s.expires_at = (s.ttl_ns > 0)
                .then(|| now + Duration::from_nanos(s.ttl_ns as u64) * SESSION_TTL_MULTIPLIER);
        }
    }

    /// `Session.Renew`: no raft write, only the leader's timer starts over.
    /// `Ok(None)` for an unknown session.
    pub fn session_renew(&mut self, id: &str, now: Instant) -> Result<Option<Session>, String> {
        let sid = uuid_index_bytes(id).map_err(lookup_error)?;
        self.arm_timer(&sid, now);
        Ok(self.sessions.get(&sid).cloned())
    }

    /// A bound check turned critical: `checkSessionsTxn` invalidates every
    /// session that names it, in one raft write.
    pub fn fail_check(&mut self, check: &str, now: Instant) {
        let bound: Vec<Vec<u8>> = self
            .sessions
            .iter()
            .filter(|(_, s)| {
                s.checks
                    .iter()
                    .chain(s.node_checks.iter().flatten())
                    .any(|c| c == check)
                    || s.service_checks.iter().flatten().any(|c| c.id == check)
            })
            .map(|(sid, _)| sid.clone())
            .collect();
        if bound.is_empty() {
            return;
        }
        let idx = self.next_index();
        for sid in bound {
            self.delete_session(idx, &sid, now);
        }
    }

    /// Destroy, TTL expiry and check failure all end here: every key the
    /// session holds is released (or deleted) and gets the lock-delay,
    /// measured from `now`.
    pub fn session_destroy(&mut self, id: &str, now: Instant) -> Result<(), String> {
        let sid = uuid_index_bytes(id).map_err(lookup_error)?;
        let idx = self.next_index();
        self.delete_session(idx, &sid, now);
        Ok(())
    }

    fn delete_session(&mut self, idx: u64, sid: &[u8], now: Instant) {
        let Some(session) = self.sessions.remove(sid) else {
            return;
        };
        self.sessions_index = idx;
        let delay = session.lock_delay_ns.min(MAX_LOCK_DELAY_NS);
        // The kvs table's session index is a UUID index too: a key acquired
        // with a differently spelled but equal ID is found as well.
        let held: Vec<String> = self
            .kv
            .values()
            .filter(|e| !e.session.is_empty())
            .filter(|e| uuid_index_bytes(&e.session).is_ok_and(|b| b == sid))
            .map(|e| e.key.clone())
            .collect();
        for key in held {
            match session.behavior {
                Behavior::Release => {
                    if let Some(mut e) = self.kv.get(&key).cloned() {
                        e.session.clear();
                        self.kv_set(idx, e, true);
                    }
                }
                Behavior::Delete => {
                    self.kv_delete_key(idx, &key);
                }
            }
            if delay > 0 {
                self.lock_delays
                    .insert(key, now + Duration::from_nanos(delay as u64));
            }
        }
    }

    /// The leader's session timers: invalidates every session whose timer
    /// has run out and returns their IDs.
    pub fn expire_sessions(&mut self, now: Instant) -> Vec<String> {
        let due: Vec<Vec<u8>> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.expires_at.is_some_and(|t| t <= now))
            .map(|(k, _)| k.clone())
            .collect();
        let mut ids = Vec::new();
        for sid in due {
            if let Some(s) = self.sessions.get(&sid) {
                ids.push(s.id.clone());
            }
            let idx = self.next_index();
            self.delete_session(idx, &sid, now);
        }
        ids
    }

    pub fn next_expiry(&self) -> Option<Instant> {
        self.sessions.values().filter_map(|s| s.expires_at).min()
    }

    /// A new leader re-arms every TTL session's timer for a full 2×TTL.
    pub fn rearm_timers(&mut self, now: Instant) {
        let sids: Vec<Vec<u8>> = self.sessions.keys().cloned().collect();
        for sid in sids {
            self.arm_timer(&sid, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: &str = "11111111-1111-1111-1111-111111111111";
    const S2: &str = "22222222-2222-2222-2222-222222222222";

    fn session(id: &str, lock_delay_s: i64, behavior: Behavior, ttl_s: i64) -> NewSession {
        NewSession {
            id: id.to_string(),
            name: String::new(),
            node: "node".to_string(),
            lock_delay_ns: lock_delay_s * 1_000_000_000,
            behavior,
            ttl: if ttl_s > 0 {
                format!("{ttl_s}s")
            } else {
                String::new()
            },
            ttl_ns: ttl_s * 1_000_000_000,
            node_checks: Some(vec![SERF_CHECK.to_string()]),
            service_checks: None,
            checks: Vec::new(),
        }
    }

    fn with_sessions(now: Instant) -> State {
        let mut st = State::new("node");
        st.session_create(session(S1, 3, Behavior::Release, 0), now)
            .unwrap();
        st.session_create(session(S2, 0, Behavior::Release, 0), now)
            .unwrap();
        st
    }

    fn put(st: &mut State, key: &str, value: &str, flags: u64, op: KvOp) -> Result<bool, String> {
        st.kv_apply(KvWrite {
            key: key.to_string(),
            value: value.as_bytes().to_vec(),
            flags,
            op,
        })
    }

    fn get(st: &State, key: &str) -> Entry {
        st.kv_get(key).1.cloned().expect("key present")
    }

    #[test]
    fn acquire_counts_lock_index_and_rewrites_flags() {
        let now = Instant::now();
        let mut st = with_sessions(now);
        assert_eq!(put(&mut st, "k", "v1", 7, KvOp::Lock(S1.into())), Ok(true));
        let e = get(&st, "k");
        assert_eq!((e.lock_index, e.flags, e.session.as_str()), (1, 7, S1));

        assert_eq!(put(&mut st, "k", "v2", 7, KvOp::Lock(S2.into())), Ok(false));
        // The holder again, no flags: value replaced, flags 0, LockIndex kept.
        assert_eq!(put(&mut st, "k", "v1b", 0, KvOp::Lock(S1.into())), Ok(true));
        let e = get(&st, "k");
        assert_eq!(
            (e.lock_index, e.flags, e.value.as_slice()),
            (1, 0, &b"v1b"[..])
        );
    }

    #[test]
    fn acquire_errors_are_the_fsm_texts() {
        let mut st = with_sessions(Instant::now());
        let zero = "00000000-0000-0000-0000-000000000000";
        assert_eq!(
            put(&mut st, "k", "", 0, KvOp::Lock(zero.into())),
            Err(format!("invalid session \"{zero}\""))
        );
        assert_eq!(
            put(&mut st, "k", "", 0, KvOp::Lock("nope".into())),
            Err("failed session lookup: index error: UUID must be 36 characters".into())
        );
        assert_eq!(
            put(&mut st, "k", "", 0, KvOp::Lock(String::new())),
            Err("missing session".into())
        );
        assert!(st.kv_get("k").1.is_none());
    }

    fn txn_op(verb: TxnVerb, key: &str, session: &str) -> TxnOp {
        TxnOp {
            verb,
            key: key.to_string(),
            value: b"v".to_vec(),
            flags: 7,
            index: 0,
            session: session.to_string(),
        }
    }

    #[test]
    fn a_txn_applies_at_one_index_or_rolls_back_and_spends_it() {
        let mut st = with_sessions(Instant::now());
        let results = st
            .kv_txn(vec![
                txn_op(TxnVerb::Lock, "a", S1),
                txn_op(TxnVerb::Set, "b", ""),
                txn_op(TxnVerb::Get, "a", ""),
                txn_op(TxnVerb::Delete, "gone", ""),
            ])
            .unwrap();
        let idx = st.raft_index();
        // Writes answer without the value; `get` with it; delete not at all.
        assert_eq!(results.len(), 3);
        assert!(results[0].value.is_empty() && results[1].value.is_empty());
        assert_eq!(results[2].value, b"v");
        assert!(results.iter().all(|e| e.modify_index == idx));
        assert_eq!((results[0].lock_index, results[0].flags), (1, 7));
        let before = st.kv_get("b").1.cloned();
        let failed = st.kv_txn(vec![
            txn_op(TxnVerb::Set, "b", ""),
            txn_op(TxnVerb::Lock, "a", S2),
        ]);
        assert_eq!(
            failed,
            Err((1, "failed to lock key \"a\", lock is already held".into()))
        );
        assert_eq!(st.kv_get("b").1.cloned(), before);
        assert_eq!(st.raft_index(), idx + 1, "a failed apply is a log entry");
        assert_eq!(
            st.kv_txn(vec![txn_op(TxnVerb::Get, "nope", "")]),
            Err((0, "key \"nope\" doesn't exist".into()))
        );
    }

    #[test]
    fn plain_put_keeps_the_holder_and_zeroes_lock_index() {
        let mut st = with_sessions(Instant::now());
        put(&mut st, "k", "v", 0, KvOp::Lock(S1.into())).unwrap();
        assert_eq!(put(&mut st, "k", "hijack", 0, KvOp::Set), Ok(true));
        let e = get(&st, "k");
        assert_eq!((e.session.as_str(), e.lock_index), (S1, 0));
    }

    #[test]
    fn release_writes_its_body_and_keeps_lock_index() {
        let mut st = with_sessions(Instant::now());
        put(&mut st, "k", "v", 5, KvOp::Lock(S1.into())).unwrap();
        assert_eq!(put(&mut st, "k", "", 0, KvOp::Unlock(S2.into())), Ok(false));
        let before = get(&st, "k").modify_index;
        assert_eq!(put(&mut st, "k", "", 0, KvOp::Unlock(S1.into())), Ok(true));
        let e = get(&st, "k");
        assert_eq!((e.session.as_str(), e.lock_index, e.flags), ("", 1, 0));
        assert!(e.value.is_empty());
        assert!(e.modify_index > before);
        assert_eq!(
            put(&mut st, "missing", "", 0, KvOp::Unlock(S1.into())),
            Ok(false)
        );
        // No lock-delay after a voluntary release.
        assert!(!st.lock_delay_active("k", Instant::now()));
    }

    #[test]
    fn unchanged_writes_keep_modify_index() {
        let mut st = State::new("node");
        put(&mut st, "k", "v", 0, KvOp::Set).unwrap();
        let first = get(&st, "k").modify_index;
        put(&mut st, "k", "v", 0, KvOp::Set).unwrap();
        assert_eq!(get(&st, "k").modify_index, first);
        put(&mut st, "k", "v", 1, KvOp::Set).unwrap();
        assert!(get(&st, "k").modify_index > first);
    }

    #[test]
    fn cas_rules() {
        let mut st = State::new("node");
        assert_eq!(put(&mut st, "k", "a", 0, KvOp::Cas(5)), Ok(false));
        assert_eq!(put(&mut st, "k", "a", 0, KvOp::Cas(0)), Ok(true));
        assert_eq!(put(&mut st, "k", "b", 0, KvOp::Cas(0)), Ok(false));
        let m = get(&st, "k").modify_index;
        assert_eq!(put(&mut st, "k", "b", 0, KvOp::Cas(m + 1)), Ok(false));
        assert_eq!(put(&mut st, "k", "b", 0, KvOp::Cas(m)), Ok(true));

        let m = get(&st, "k").modify_index;
        assert!(!st.kv_delete("k", DeleteOp::Cas(0)));
        assert!(!st.kv_delete("k", DeleteOp::Cas(m + 1)));
        assert!(st.kv_delete("k", DeleteOp::Cas(m)));
        // Gone already: Consul answers true.
        assert!(st.kv_delete("k", DeleteOp::Cas(m)));
    }

    #[test]
    fn invalidation_releases_and_arms_lock_delay() {
        let now = Instant::now();
        let mut st = with_sessions(now);
        put(&mut st, "k", "v", 9, KvOp::Lock(S1.into())).unwrap();
        let before = get(&st, "k").modify_index;
        st.session_destroy(S1, now).unwrap();
        let e = get(&st, "k");
        assert_eq!((e.session.as_str(), e.lock_index, e.flags), ("", 1, 9));
        assert_eq!(e.value, b"v");
        assert!(e.modify_index > before);
        assert!(st.lock_delay_active("k", now + Duration::from_millis(2900)));
        assert!(!st.lock_delay_active("k", now + Duration::from_secs(3)));
        assert_eq!(st.kv_table_index(), e.modify_index);
        assert_eq!(st.sessions_table_index(), e.modify_index);
    }

    #[test]
    fn a_critical_check_invalidates_only_the_sessions_bound_to_it() {
        let now = Instant::now();
        let mut st = State::new("node");
        st.check_set("c", true, now);
        let mut bound = session(S1, 3, Behavior::Release, 0);
        bound.node_checks = Some(vec!["c".to_string()]);
        st.session_create(bound, now).unwrap();
        let mut free = session(S2, 3, Behavior::Release, 0);
        free.node_checks = Some(Vec::new());
        st.session_create(free, now).unwrap();
        put(&mut st, "k", "v", 0, KvOp::Lock(S1.into())).unwrap();
        st.check_set("c", false, now);
        assert_eq!(st.session_ids(), vec![S2.to_string()]);
        assert_eq!(get(&st, "k").session, "");
        assert!(st.lock_delay_active("k", now + Duration::from_millis(2900)));
        // A critical check cannot be bound to; an unknown one neither.
        let mut again = session(S1, 0, Behavior::Release, 0);
        again.node_checks = Some(vec!["c".to_string()]);
        let err = st.session_create(again, now).unwrap_err();
        assert_eq!(err, "Check 'c' is in critical state");
        let mut unknown = session(S1, 0, Behavior::Release, 0);
        unknown.node_checks = Some(vec!["nope".to_string()]);
        let err = st.session_create(unknown, now).unwrap_err();
        assert_eq!(err, "Missing check 'nope' registration");
    }

    #[test]
    fn lock_delay_is_capped_at_sixty_seconds() {
        let now = Instant::now();
        let mut st = State::new("node");
        st.session_create(session(S1, 61, Behavior::Release, 0), now)
            .unwrap();
        put(&mut st, "k", "v", 0, KvOp::Lock(S1.into())).unwrap();
        st.session_destroy(S1, now).unwrap();
        assert!(st.lock_delay_active("k", now + Duration::from_millis(59_900)));
        assert!(!st.lock_delay_active("k", now + Duration::from_secs(60)));
    }

    #[test]
    fn behavior_delete_removes_held_keys_and_leaves_tombstones() {
        let now = Instant::now();
        let mut st = State::new("node");
        st.session_create(session(S1, 0, Behavior::Delete, 0), now)
            .unwrap();
        put(&mut st, "p/a", "", 0, KvOp::Set).unwrap();
        put(&mut st, "p/b", "", 0, KvOp::Lock(S1.into())).unwrap();
        put(&mut st, "p/c", "", 0, KvOp::Set).unwrap();
        let (before, _) = st.kv_list("p/");
        st.session_destroy(S1, now).unwrap();
        assert!(st.kv_get("p/b").1.is_none());
        let (after, left) = st.kv_list("p/");
        assert_eq!(left.len(), 2);
        assert!(after > before, "the deletion moves the prefix index");
        assert!(
            !st.lock_delay_active("p/b", now),
            "lock-delay 0 arms nothing"
        );
    }

    #[test]
    fn index_rules() {
        let mut st = State::new("node");
        assert_eq!(st.kv_get("x").0, 0, "fresh table (the HTTP layer shows 1)");
        put(&mut st, "a/1", "", 0, KvOp::Set).unwrap();
        let a1 = get(&st, "a/1").modify_index;
        put(&mut st, "b/1", "", 0, KvOp::Set).unwrap();
        let b1 = get(&st, "b/1").modify_index;
        assert_eq!(st.kv_get("a/1").0, a1, "single key: its own ModifyIndex");
        assert_eq!(st.kv_get("nope").0, b1, "missing key: the table index");
        assert_eq!(st.kv_list("a/").0, a1, "prefix: highest under it");
        assert_eq!(st.kv_list("").0, b1, "empty prefix: table index");
        assert_eq!(st.kv_list("c/").0, b1, "nothing there: table index");
        st.kv_delete("a/1", DeleteOp::Delete);
        let (idx, entries) = st.kv_list("a/");
        assert!(entries.is_empty());
        assert_eq!(idx, st.kv_table_index(), "the tombstone counts");
        assert!(idx > a1);
        put(&mut st, "a/2", "", 0, KvOp::Set).unwrap();
        put(&mut st, "a/3", "", 0, KvOp::Set).unwrap();
        let top = st.kv_list("a/").0;
        st.kv_delete("a/2", DeleteOp::Delete);
        assert!(
            st.kv_list("a/").0 > top,
            "deleting a key under the prefix moves its index"
        );
    }

    #[test]
    fn tree_delete_and_keys_separator() {
        let mut st = State::new("node");
        for k in ["t/a", "t/b/1", "t/b/2", "t/c", "u"] {
            put(&mut st, k, "", 0, KvOp::Set).unwrap();
        }
        assert_eq!(st.kv_keys("t/", "/").1, vec!["t/a", "t/b/", "t/c"]);
        assert_eq!(st.kv_keys("t/", "").1.len(), 4);
        assert_eq!(st.kv_keys("", "/").1, vec!["t/", "u"]);
        let before = st.kv_table_index();
        assert!(st.kv_delete("t/", DeleteOp::Tree));
        assert!(st.kv_list("t/").1.is_empty());
        assert!(st.kv_table_index() > before);
        let after = st.kv_table_index();
        assert!(st.kv_delete("nothing/", DeleteOp::Tree));
        assert_eq!(
            st.kv_table_index(),
            after,
            "a no-op delete changes no table"
        );
    }

    #[test]
    fn ttl_expiry_at_twice_the_ttl_and_renewal() {
        let t0 = Instant::now();
        let mut st = State::new("node");
        st.session_create(session(S1, 0, Behavior::Release, 10), t0)
            .unwrap();
        assert_eq!(st.next_expiry(), Some(t0 + Duration::from_secs(20)));
        assert!(st.expire_sessions(t0 + Duration::from_secs(19)).is_empty());
        let renewed = st.session_renew(S1, t0 + Duration::from_secs(15)).unwrap();
        assert!(renewed.is_some());
        assert!(st.expire_sessions(t0 + Duration::from_secs(34)).is_empty());
        assert_eq!(
            st.expire_sessions(t0 + Duration::from_secs(35)),
            vec![S1.to_string()]
        );
        assert!(st.session_renew(S1, t0).unwrap().is_none());
    }

    #[test]
    fn session_create_checks_node_and_checks() {
        let now = Instant::now();
        let mut st = State::new("node");
        let mut s = session(S1, 0, Behavior::Release, 0);
        s.node_checks = Some(vec!["no-such-check".into()]);
        assert_eq!(
            st.session_create(s, now),
            Err("Missing check 'no-such-check' registration".into())
        );
        let mut s = session(S1, 0, Behavior::Release, 0);
        s.node = "elsewhere".into();
        assert_eq!(
            st.session_create(s, now),
            Err("Missing node registration".into())
        );
        assert!(st.session_list().1.is_empty());
    }

    #[test]
    fn uuid_parsing_follows_memdb() {
        assert_eq!(
            uuid_index_bytes("nope"),
            Err("UUID must be 36 characters".into())
        );
        assert_eq!(uuid_index_bytes(S1).unwrap().len(), 16);
        assert_eq!(
            uuid_index_bytes(&S1.to_uppercase().replace('1', "A")),
            uuid_index_bytes(&S1.replace('1', "a"))
        );
        assert!(uuid_index_bytes("gggggggg-1111-1111-1111-111111111111")
            .unwrap_err()
            .starts_with("Invalid UUID: encoding/hex: invalid byte: U+0067 'g'"));
    }
}
