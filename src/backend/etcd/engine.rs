//! The etcd engine (`Engine`): the lease, a place in the queue, the claim
//! and its renewal.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::client::{Client, Kv, Range, Watch};
use super::lock::{self, Entered, Pause, SlotWait, CLEANUP_TIMEOUT};
use super::{waiters, EtcdConfig, EtcdError};

use crate::backend::priority::{Priority, Verdict};
use crate::backend::retry::ONCE_GRACE;
use crate::backend::{
    Acquisition, Claim, Engine, Holder, Inspect, Lease, Lost, Opening, Renewal, ReplaceNote, Target,
    Wait,
};

/// How long a one-off run's first contact goes round endpoints that take
/// the connection and stay silent before saying so: a hung member costs
/// one call's deadline before the next is tried, but a leader election
/// silences every member at once, and on a loaded host it outlasted three
/// 1.5 s tries (`--ttl 6s`) while a quorum was there all along.
const FIRST_CONTACT_SILENCE: Duration = Duration::from_secs(10);

/// Runs `step`, a request that may be sent again (entering the queue,
/// leaving it), again after a failure that may pass: for as long as `wait`
/// allows, and for a one-off run ([`Wait::Once`]) for [`ONCE_GRACE`], or,
/// while the endpoints stay silent, for [`FIRST_CONTACT_SILENCE`], as at
/// its first contact: a leader election silences every member at once,
/// and may begin between a run's lease and its place in the queue. A call
/// that timed out has moved on to the next endpoint already.
async fn riding_out<T, F, Fut>(wait: Wait, what: &str, step: F) -> Result<T, EtcdError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, EtcdError>>,
{
    let once = |e: &EtcdError| match e {
        EtcdError::Timeout { .. } => FIRST_CONTACT_SILENCE,
        _ => ONCE_GRACE,
    };
    crate::backend::retry::riding_out(wait, what, Duration::from_millis(100), once, step).await
}

/// The TTL lockrun asks for unless told otherwise: etcdctl lock's default.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// Why KEY is refused on etcd, before any request: every subcommand asks
/// this. etcd itself takes any bytes, but a key follows lockrun's one rule
/// on every backend ([`crate::key::check`]): one it refuses on Consul it
/// refuses here, before anything is written.
pub fn check_key(key: &str) -> Result<(), String> {
    crate::key::check(key)
}

/// The etcd engine: a client and the TTL of the leases it grants.
#[derive(Debug, Clone)]
pub struct Etcd {
    pub(super) client: Client,
    pub(super) ttl: Duration,
    /// How our waits for a lock rank among other lockrun writers'.
    priority: Priority,
}

impl Etcd {
    /// Checks `config` (certificate files included) without any request.
    /// `ttl` is one the backend's hold rules checked (whole seconds), or
    /// the default.
    pub fn new(config: &EtcdConfig, ttl: Duration) -> Result<Etcd, String> {
        let mut client = Client::new(config)?;
        // A quarter of the TTL: a member that hangs costs one such wait,
        // and the retry on the next endpoint still comes well before the
        // lease runs out.
        client.set_call_timeout(ttl / 4);
        Ok(Etcd {
            client,
            ttl,
            priority: Priority::NONE,
        })
    }

    /// The same engine, waiting for a lock with `priority`.
    pub fn ranked(self, priority: Priority) -> Etcd {
        Etcd { priority, ..self }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The key's prefix with the separator etcd's mutex adds.
    pub(super) fn prefix(target: &Target) -> Result<Vec<u8>, EtcdError> {
        let name = target.name();
        check_key(name).map_err(EtcdError::Usage)?;
        let mut prefix = name.as_bytes().to_vec();
        prefix.push(b'/');
        Ok(prefix)
    }

    async fn acquire_lock(
        &self,
        lease: &EtcdLease,
        target: &Target,
        value: &str,
        wait: Wait,
    ) -> Result<Acquisition<EtcdClaim>, EtcdError> {
        let prefix = Self::prefix(target)?;
        if let Target::Lock { shared: true, .. } = target {
            return self.acquire_shared(lease, target, &prefix, value, wait).await;
        }
        let key = lock::contender_key(&lock::writers_of(&prefix), lease.id);
        let me = riding_out(wait, "entering the queue", || {
            lock::enter(&self.client, &prefix, key.clone(), lease.id, value.as_bytes())
        })
        .await?;
        if let Some(e) = lock::a_semaphore_already(target.name(), &me) {
            let _ = lock::leave(&self.client, &me.key).await;
            return Err(e);
        }
        let first = me.first.as_ref().map(|kv| kv.create_revision);
        if first == Some(me.create_revision) {
            let revision = me.revision;
            return Ok(Acquisition::Held(
                self.claim(lease, target, me, revision, None),
            ));
        }
        if wait == Wait::Once {
            return self.busy(target, &me, None).await;
        }
        let name = target.name();
        let ranked = self.wait_ranked(lease, name, &prefix, me, value, wait).await;
        // Off the handover's path, best effort: the record goes with the
        // lease anyway. Until it goes, a rival that sees it defers to a
        // waiter that holds: the lock is not free.
        let (client, name_owned, id) = (self.client.clone(), name.to_owned(), lease.id);
        tokio::spawn(async move {
            let _ = waiters::withdraw(&client, &name_owned, id).await;
        });
        match ranked? {
            Some((me, revision)) => Ok(Acquisition::Held(
                self.claim(lease, target, me, revision, None),
            )),
            None => {
                let holder = self
                    .holders(target)
                    .await
                    .ok()
                    .and_then(|hs| hs.into_iter().find_map(|h| h.value));
                Ok(Acquisition::Busy { holder })
            }
        }
    }

    /// A writer's wait, ranked by `--priority` (see [`waiters`]): in the
    /// queue (`me`, entered) while no lockrun writer of a higher priority
    /// waits; out of it, watching the records and the queue, while one
    /// does (or until the lock has sat free for the grace with that
    /// waiter not in it). `None` when patience ran out, with our key gone.
    async fn wait_ranked(
        &self,
        lease: &EtcdLease,
        name: &str,
        prefix: &[u8],
        me: Entered,
        value: &str,
        wait: Wait,
    ) -> Result<Option<(Entered, i64)>, EtcdError> {
        enum Outcome {
            Held(i64),
            Higher,
            Over,
        }
        let deadline = wait.deadline();
        let sleep_until = |at: Option<Instant>| async move {
            match at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let mut deferral = self.priority.deferral();
        let mut queued = Some(me);
        // The first look puts our record too.
        let mut publish = Some((self.priority.level, value));
        loop {
            let look = match riding_out(wait, "looking at the waiters", || {
                waiters::look(&self.client, name, prefix, lease.id, publish)
            })
            .await
            {
                Ok(look) => look,
                // A role that may not keep or read the records (etcd's
                // RBAC) waits as before, in the queue, unranked.
                Err(e @ EtcdError::Denied { .. }) => {
                    tracing::warn!("waiting for `{name}` without priorities: {e}");
                    let me = match queued.take() {
                        Some(me) => me,
                        None => {
                            riding_out(wait, "entering the queue", || {
                                lock::enter(&self.client, prefix, lock::contender_key(&lock::writers_of(prefix), lease.id), lease.id, value.as_bytes())
                            })
                            .await?
                        }
                    };
                    if me.first.as_ref().map(|kv| kv.create_revision) == Some(me.create_revision) {
                        let revision = me.revision;
                        return Ok(Some((me, revision)));
                    }
                    let waited =
                        lock::until(deadline, lock::wait_predecessors(&self.client, prefix, &me))
                            .await;
                    return match waited {
                        Some(revision) => Ok(Some((me, revision?))),
                        None => {
                            riding_out(Wait::Once, "leaving the queue", || {
                                lock::leave(&self.client, &me.key)
                            })
                            .await?;
                            Ok(None)
                        }
                    };
                }
                Err(e) => return Err(e),
            };
            publish = None;
            let verdict = deferral.decide(
                Instant::now(),
                look.others.iter().map(|s| s.level),
                look.free,
            );
            tracing::debug!(?verdict, waiting = ?look.others, free = look.free, "ranked among the waiters");
            match verdict {
                Verdict::Defer { until } => {
                    if let Some(me) = queued.take() {
                        riding_out(wait, "leaving the queue", || {
                            lock::leave(&self.client, &me.key)
                        })
                        .await?;
                    }
                    let from = look.revision + 1;
                    let mut records = waiters::watch_records(&self.client, name, from).await?;
                    let mut queue = waiters::watch_queue(&self.client, prefix, from).await?;
                    let wake = [until, deadline].into_iter().flatten().min();
                    tokio::select! {
                        _ = records.next() => {}
                        _ = queue.next() => {}
                        () = sleep_until(wake) => {}
                    }
                    if deadline.is_some_and(|at| Instant::now() >= at) {
                        return Ok(None);
                    }
                }
                Verdict::Go => {
                    let me = match queued.take() {
                        Some(me) => me,
                        None => {
                            riding_out(wait, "entering the queue", || {
                                lock::enter(&self.client, prefix, lock::contender_key(&lock::writers_of(prefix), lease.id), lease.id, value.as_bytes())
                            })
                            .await?
                        }
                    };
                    if me.first.as_ref().map(|kv| kv.create_revision) == Some(me.create_revision) {
                        let revision = me.revision;
                        return Ok(Some((me, revision)));
                    }
                    // Watching the records opens as the wait starts, not
                    // before it: a handover need not wait for it.
                    let from = me.revision + 1;
                    let higher = async {
                        let mut records = waiters::watch_records(&self.client, name, from).await?;
                        loop {
                            let batch = records.next().await?;
                            if batch.canceled
                                || waiters::brings_higher(name, &batch.events, self.priority.level)
                            {
                                return Ok::<(), EtcdError>(());
                            }
                        }
                    };
                    let outcome = tokio::select! {
                        biased;
                        revision = lock::wait_predecessors(&self.client, prefix, &me) => Outcome::Held(revision?),
                        seen = higher => match seen {
                            Ok(()) => Outcome::Higher,
                            Err(e) if e.is_transient() => Outcome::Higher,
                            // May not watch the records: wait unranked.
                            Err(EtcdError::Denied { .. }) => {
                                match lock::until(deadline, lock::wait_predecessors(&self.client, prefix, &me)).await {
                                    Some(revision) => Outcome::Held(revision?),
                                    None => Outcome::Over,
                                }
                            }
                            Err(e) => return Err(e),
                        },
                        () = sleep_until(deadline) => Outcome::Over,
                    };
                    match outcome {
                        Outcome::Held(revision) => return Ok(Some((me, revision))),
                        // Looked at again: a higher waiter makes us leave.
                        Outcome::Higher => queued = Some(me),
                        Outcome::Over => {
                            riding_out(Wait::Once, "leaving the queue", || {
                                lock::leave(&self.client, &me.key)
                            })
                            .await?;
                            return Ok(None);
                        }
                    }
                }
            }
        }
    }

    /// A reader: `KEY/read/<lease id in hex>` with our lease, in the
    /// layout of etcd's reader-writer recipe, held once no writer's key
    /// under `KEY/` is older (see [`lock::wait_writers`]). Writers (`elect`
    /// without `-s`, whose key is `KEY/write/<lease id in hex>`, the
    /// recipe's, and etcd's mutex) wait for every older key under `KEY/`,
    /// readers' included, so a reader that comes after a waiting writer
    /// waits behind it. The fence is the revision at which we found no
    /// writer ahead, as a writer's is the one at which it was first.
    async fn acquire_shared(
        &self,
        lease: &EtcdLease,
        target: &Target,
        prefix: &[u8],
        value: &str,
        wait: Wait,
    ) -> Result<Acquisition<EtcdClaim>, EtcdError> {
        let key = lock::contender_key(&lock::readers_of(prefix), lease.id);
        let me = riding_out(wait, "entering the queue", || {
            lock::enter(&self.client, prefix, key.clone(), lease.id, value.as_bytes())
        })
        .await?;
        let once = wait == Wait::Once;
        let waited = lock::until(
            wait.deadline(),
            lock::wait_writers(&self.client, prefix, &me, once),
        )
        .await;
        match waited {
            Some(Ok(Some(revision))) => Ok(Acquisition::Held(
                self.claim(lease, target, me, revision, None),
            )),
            Some(Ok(None)) | None => self.busy(target, &me, None).await,
            Some(Err(e)) => Err(e),
        }
    }

    async fn acquire_slot(
        &self,
        lease: &EtcdLease,
        target: &Target,
        limit: u32,
        value: &str,
        wait: Wait,
    ) -> Result<Acquisition<EtcdClaim>, EtcdError> {
        if limit == 0 {
            return Err(EtcdError::Usage(
                "a semaphore needs a limit of at least 1".into(),
            ));
        }
        let prefix = Self::prefix(target)?;
        let stored = lock::slot_value(value, limit);
        let key = lock::contender_key(&prefix, lease.id);
        let me = riding_out(wait, "entering the queue", || {
            lock::enter(&self.client, &prefix, key.clone(), lease.id, &stored)
        })
        .await?;
        let once = wait == Wait::Once;
        let name = target.name();
        let waited = lock::until(
            wait.deadline(),
            lock::wait_slot(&self.client, name, &prefix, &me, limit, once),
        )
        .await;
        match waited {
            Some(Ok(SlotWait::Held { rank, revision })) => Ok(Acquisition::Held(self.claim(
                lease,
                target,
                me,
                revision,
                Some(rank),
            ))),
            Some(Ok(SlotWait::Busy(holder))) => self.busy(target, &me, holder).await,
            None => self.busy(target, &me, None).await,
            Some(Err(e)) => {
                // A mismatch or a foreign key: we must not wait in that queue.
                if !e.is_transient() {
                    let _ = lock::leave(&self.client, &me.key).await;
                }
                Err(e)
            }
        }
    }

    /// Gives up waiting: our key goes, so the lease can try again. The
    /// holder named is the one now, for the message.
    async fn busy(
        &self,
        target: &Target,
        me: &Entered,
        holder: Option<String>,
    ) -> Result<Acquisition<EtcdClaim>, EtcdError> {
        // Within the time a one-off run has for its setup: its answer is
        // "taken", and the lease's end takes the key if this fails.
        riding_out(Wait::Once, "leaving the queue", || {
            lock::leave(&self.client, &me.key)
        })
        .await?;
        let holder = match holder {
            Some(holder) => Some(holder),
            None => self
                .holders(target)
                .await
                .ok()
                .and_then(|hs| hs.into_iter().find_map(|h| h.value)),
        };
        Ok(Acquisition::Busy { holder })
    }

    /// Our claim, held as of `revision`, the revision of the answer that
    /// showed it ours.
    ///
    /// A lock's fencing number is that revision, as `etcdctl lock`'s
    /// `ETCD_LOCK_REV` is: our key's CreateRevision would not do, for a
    /// contender that queued while an `etcdctl lock` waited ahead of it
    /// created its key before that holder took the lock, at a revision
    /// below the one etcdctl handed its child. The revision we read at
    /// follows the deletion of every key ahead of ours, and so every
    /// earlier holder's own reading. A slot's number stays its key's
    /// CreateRevision: contenders get slots in that order (etcdctl has no
    /// semaphore), and two that get theirs in one revision still differ.
    fn claim(
        &self,
        lease: &EtcdLease,
        target: &Target,
        me: Entered,
        revision: i64,
        slot: Option<u32>,
    ) -> EtcdClaim {
        let fence = match slot {
            None => revision,
            Some(_) => me.create_revision,
        };
        EtcdClaim {
            client: self.client.clone(),
            name: target.name().to_owned(),
            key: me.key,
            create_revision: me.create_revision,
            fence,
            lease: lease.id,
            seen: revision,
            watch: None,
            slot,
        }
    }

    /// The holders of `target` with their keys, and the revision read.
    pub(super) async fn holders_at(&self, target: &Target) -> Result<(Vec<(Holder, Kv)>, i64), EtcdError> {
        let prefix = Self::prefix(target)?;
        let mut holders = Vec::new();
        let revision = match target {
            Target::Lock { .. } => {
                let answer = self
                    .client
                    .range(&Range::prefix(&prefix).first_created())
                    .await?;
                // The oldest key holds; if it is a reader's, so does every
                // reader's up to the first writer's.
                let held = match answer.kvs.first() {
                    Some(first) if lock::is_reader(&prefix, &first.key) => answer
                        .kvs
                        .iter()
                        .take_while(|kv| lock::is_reader(&prefix, &kv.key))
                        .count(),
                    Some(_) => 1,
                    None => 0,
                };
                for kv in answer.kvs.into_iter().take(held) {
                    let holder = Holder {
                        // `etcdctl lock` stores nothing: no value to show.
                        value: Some(kv.value_str()).filter(|v| !v.is_empty()),
                        // The revision the holder took the lock at, its
                        // number (see `claim`), is in a lockrun holder's
                        // facts; etcdctl keeps it nowhere.
                        fence: None,
                        entry: Some(kv.key_str()),
                        holder_id: Some(kv.key_str()),
                        ..Holder::default()
                    };
                    let holder = self.with_facts(holder, &kv).await?;
                    holders.push((holder, kv));
                }
                answer.revision
            }
            Target::Slot { limit, .. } => {
                let answer = self
                    .client
                    .range(&Range::prefix(&prefix).first_created())
                    .await?;
                for (rank, kv) in answer.kvs.into_iter().take(*limit as usize).enumerate() {
                    let value = lock::parse_slot_value(&kv.value)
                        .map_or_else(|| kv.value_str(), |(v, _)| v);
                    let holder = Holder {
                        value: Some(value),
                        fence: u64::try_from(kv.create_revision).ok(),
                        slot: u32::try_from(rank).ok(),
                        entry: Some(kv.key_str()),
                        holder_id: Some(kv.key_str()),
                        ..Holder::default()
                    };
                    let holder = self.with_facts(holder, &kv).await?;
                    holders.push((holder, kv));
                }
                answer.revision
            }
        };
        Ok((holders, revision))
    }

    /// `holder` with the facts a lockrun holder recorded beside its key
    /// `kv` ([`lock::facts_key`]), where there are any.
    async fn with_facts(&self, holder: Holder, kv: &Kv) -> Result<Holder, EtcdError> {
        Ok(match lock::facts_of(&self.client, kv).await? {
            Some(facts) => Holder {
                // A lockrun with no `--value`: named by its entry, as it
                // was before its facts came, not as a process not lockrun.
                label: holder
                    .value
                    .is_none()
                    .then(|| format!("{} (no value)", kv.key_str()).into_bytes()),
                fence: Some(facts.fence),
                host: Some(facts.host),
                pid: Some(facts.pid),
                child_pgid: facts.child_pgid,
                ..holder
            },
            None => holder,
        })
    }
}

/// An etcd lease: its id and the TTL etcd last told us.
#[derive(Debug)]
pub struct EtcdLease {
    client: Client,
    id: i64,
    /// Whole seconds; raised when a keepalive answers a longer TTL.
    ttl_secs: AtomicU64,
    granted_at: Instant,
}

impl EtcdLease {
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The TTL etcd granted or last reported.
    pub fn ttl(&self) -> Duration {
        Duration::from_secs(self.ttl_secs.load(Ordering::Relaxed))
    }

    /// When we sent the grant request: the lease counts from no earlier.
    pub fn granted_at(&self) -> Instant {
        self.granted_at
    }

    /// One keepalive, as the engine's error: the TTL it answered.
    pub async fn keepalive(&self, timeout: Duration) -> Result<Duration, EtcdError> {
        let ttl = self.client.keepalive(self.id, timeout).await?;
        self.ttl_secs.fetch_max(ttl.as_secs(), Ordering::Relaxed);
        Ok(ttl)
    }
}

impl Lease for EtcdLease {
    fn confirmed_at(&self) -> Instant {
        self.granted_at
    }

    async fn renew(&self, timeout: Duration) -> Renewal {
        match self.keepalive(timeout).await {
            Ok(ttl) => Renewal::Confirmed { ttl: Some(ttl) },
            Err(e) if e.is_verdict() => Renewal::Gone(e.to_string()),
            Err(e) => Renewal::Failed(e.to_string()),
        }
    }

    async fn close(self) {
        if let Err(e) = self.client.revoke(self.id, CLEANUP_TIMEOUT).await {
            if !e.is_verdict() {
                tracing::warn!("cannot revoke lease {:x}: {e}", self.id);
            }
        }
    }
}

impl Engine for Etcd {
    type Lease = EtcdLease;
    type Claim = EtcdClaim;
    type Error = EtcdError;

    /// Grants the lease, retrying blips within the patience (for ever for
    /// a daemon); a one-off run whose first try at every endpoint fails, in
    /// any way but etcd saying it is in trouble, says so at once, since that
    /// is a wrong setting far more often than a blip.
    async fn open_lease(&self, opening: Opening<'_>) -> Result<EtcdLease, EtcdError> {
        let until = match (opening.daemon, opening.wait) {
            (true, _) | (false, Wait::Forever) => None,
            (false, Wait::Once) => Some(Instant::now() + ONCE_GRACE),
            (false, Wait::Until(at)) => Some(at),
        };
        let mut pause = Duration::from_millis(100);
        // A one-off run's first contact: a refusal or a wrong setting is
        // said at once; silent endpoints are tried in turn (a call that
        // times out goes on to the next endpoint at the next try) for
        // [`FIRST_CONTACT_SILENCE`].
        let mut first_contact = opening
            .first
            .then(|| Instant::now() + FIRST_CONTACT_SILENCE);
        loop {
            let granted_at = Instant::now();
            match self.client.grant(self.ttl).await {
                Ok(granted) => {
                    return Ok(EtcdLease {
                        client: self.client.clone(),
                        id: granted.id,
                        ttl_secs: AtomicU64::new(granted.ttl.as_secs()),
                        granted_at,
                    })
                }
                // At the first contact a one-off run says at once what
                // is wrong, unless etcd itself says it will pass, or
                // another endpoint is left to try.
                Err(e) if first_contact.is_some() && !opening.daemon && !e.may_pass_soon() => {
                    // A refused connection was tried at every endpoint.
                    let silent = matches!(e, EtcdError::Timeout { .. });
                    if !silent || first_contact.is_some_and(|at| Instant::now() >= at) {
                        return Err(e);
                    }
                }
                Err(e) if e.is_transient() => {
                    first_contact = None;
                    (opening.report)(&format!("engine unreachable, retrying: {e}"));
                    if until.is_some_and(|at| Instant::now() + pause >= at) {
                        return Err(e);
                    }
                    tracing::info!("granting a lease: {e}; retrying in {pause:?}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// See the module doc for what dropping this future leaves behind.
    async fn acquire(
        &self,
        lease: &EtcdLease,
        target: &Target,
        value: &str,
        wait: Wait,
    ) -> Result<Acquisition<EtcdClaim>, EtcdError> {
        match target {
            Target::Lock { .. } => self.acquire_lock(lease, target, value, wait).await,
            Target::Slot { limit, .. } => {
                self.acquire_slot(lease, target, *limit, value, wait).await
            }
        }
    }

    /// One write for both: revoking the lease deletes our key with it, as
    /// etcd deletes every key attached to a lease. A delete and then a
    /// revoke were two, and the waiter the delete woke read its queue
    /// (linearizably) behind the revoke: handover medians were 0.6–0.8 ms
    /// longer on average. If the revoke fails, the key is deleted as before.
    async fn release_and_close(claim: EtcdClaim, lease: EtcdLease) -> Result<(), EtcdError> {
        match lease.client.revoke(lease.id, CLEANUP_TIMEOUT).await {
            // Expired: its keys went with it.
            Ok(()) | Err(EtcdError::LeaseNotFound { .. }) => Ok(()),
            Err(e) => {
                tracing::warn!("cannot revoke lease {:x}: {e}; deleting our key", lease.id);
                claim.release().await
            }
        }
    }
}

/// A lock or slot we hold: our contender key.
#[derive(Debug)]
pub struct EtcdClaim {
    client: Client,
    name: String,
    key: Vec<u8>,
    create_revision: i64,
    /// The fencing number (see `Etcd::claim`).
    fence: i64,
    lease: i64,
    /// The revision up to which we know our key is unchanged.
    seen: i64,
    watch: Option<Watch>,
    slot: Option<u32>,
}

impl EtcdClaim {
    /// Our contender key.
    pub fn key(&self) -> String {
        String::from_utf8_lossy(&self.key).into_owned()
    }

    /// Our rank when we got the slot, for a semaphore.
    pub fn slot(&self) -> Option<u32> {
        self.slot
    }

    /// Watches our key from the last revision we know it at, until it is
    /// deleted or no longer ours. Resumable: a dropped call loses nothing.
    async fn lost(&mut self) -> String {
        let mut pause = Pause::default();
        loop {
            match self.watch_once().await {
                Ok(Some(why)) => return why,
                Ok(None) => pause = Pause::default(),
                Err(e) if e.is_transient() => {
                    self.watch = None;
                    pause.after(&e).await;
                }
                Err(e) => return format!("cannot watch our key `{}`: {e}", self.key()),
            }
        }
    }

    /// `Some(reason)` once the key is lost; `None` when the watch must be
    /// reopened.
    async fn watch_once(&mut self) -> Result<Option<String>, EtcdError> {
        if self.watch.is_none() {
            self.watch = Some(
                self.client
                    .watch(&self.key, None, self.seen + 1, false)
                    .await?,
            );
        }
        let watch = self.watch.as_mut().expect("opened above");
        let batch = watch.next().await?;
        if batch.canceled {
            // Compacted past what we saw: read the key itself.
            self.watch = None;
            let answer = self.client.range(&Range::key(&self.key)).await?;
            return Ok(match answer.kvs.first() {
                Some(kv)
                    if kv.create_revision == self.create_revision && kv.lease == self.lease =>
                {
                    self.seen = answer.revision;
                    None
                }
                _ => Some(self.gone_reason()),
            });
        }
        for event in &batch.events {
            if event.deleted {
                return Ok(Some(self.gone_reason()));
            }
            if event.kv.lease != self.lease {
                return Ok(Some(format!(
                    "our key `{}` was overwritten without our lease",
                    self.key()
                )));
            }
        }
        self.seen = self.seen.max(batch.revision);
        Ok(None)
    }

    fn gone_reason(&self) -> String {
        format!(
            "our key `{}` was deleted (lease {:x} revoked or expired, or the key removed)",
            self.key(),
            self.lease
        )
    }
}

impl Claim for EtcdClaim {
    type Error = EtcdError;

    fn fence(&self) -> u64 {
        u64::try_from(self.fence).expect("revisions are positive")
    }

    fn env(&self) -> Vec<(OsString, OsString)> {
        let rev = self.fence.to_string();
        vec![
            ("LOCKRUN_KEY".into(), self.name.clone().into()),
            ("LOCKRUN_LOCK_INDEX".into(), rev.clone().into()),
            ("ETCD_LOCK_KEY".into(), self.key().into()),
            ("ETCD_LOCK_REV".into(), rev.into()),
        ]
    }

    /// Our contender key: no other lease can create it, and it lives
    /// exactly as long as ours.
    fn holder_id(&self) -> Option<String> {
        Some(self.key())
    }

    fn take_hold_fd(&mut self) -> Option<OwnedFd> {
        None
    }

    /// The note, seen by a watch on its key from the revision of a read
    /// that found none (where polling took up to
    /// [`crate::backend::ASK_POLL`] more); a failed read or watch is tried
    /// again after the poll's pause.
    fn asked(&self) -> Option<crate::backend::Asked> {
        use crate::backend::{ASK_POLL, ASK_READ};
        let key = self.key();
        let client = self.client.clone();
        Some(Box::pin(async move {
            let note = lock::note_key(&key);
            loop {
                let read = tokio::time::timeout(ASK_READ, client.range(&Range::key(&note))).await;
                let Ok(Ok(answer)) = read else {
                    tokio::time::sleep(ASK_POLL).await;
                    continue;
                };
                if let Some(asked) = answer
                    .kvs
                    .first()
                    .and_then(|kv| ReplaceNote::decode_for(&kv.value, &key))
                {
                    return asked;
                }
                // Any change to the note's key from then on: read again.
                let watched = tokio::time::timeout(
                    ASK_READ,
                    client.watch(&note, None, answer.revision + 1, false),
                )
                .await;
                let Ok(Ok(mut watch)) = watched else {
                    tokio::time::sleep(ASK_POLL).await;
                    continue;
                };
                loop {
                    match watch.next().await {
                        Ok(batch) if batch.canceled => break,
                        Ok(batch) if batch.events.is_empty() => continue,
                        Ok(_) => break,
                        Err(_) => {
                            tokio::time::sleep(ASK_POLL).await;
                            break;
                        }
                    }
                }
            }
        }))
    }

    async fn replaced_by(&self) -> Option<ReplaceNote> {
        let key = self.key();
        let answer = self
            .client
            .range(&Range::key(&lock::note_key(&key)))
            .await
            .ok()?;
        let note = ReplaceNote::decode_for(&answer.kvs.first()?.value, &key)?;
        // Our tree is gone: a replacer on another host waits for this.
        let _ = self
            .client
            .delete(&lock::note_key(&key), CLEANUP_TIMEOUT)
            .await;
        Some(note)
    }

    /// Our key's value is the `--value` alone, which `etcdctl elect -l`
    /// shows; the facts `leader` gives (fence, host, pid, the child's
    /// group) go beside it ([`lock::facts_key`]), once the child runs: off
    /// the handover's path, so `leader` may show them a round trip after
    /// the command starts.
    async fn record_child(&mut self, pgid: u32) -> Result<(), EtcdError> {
        let facts = lock::Facts {
            key: self.key(),
            create_revision: self.create_revision,
            fence: self.fence(),
            host: crate::host::hostname(),
            pid: std::process::id(),
            child_pgid: Some(pgid),
        };
        lock::record(&self.client, &self.name, self.lease, &facts).await
    }

    fn describe(&self) -> String {
        format!("key `{}`", self.key())
    }

    /// etcd has no lock-delay: once our key is gone a rival may hold the
    /// lock already, so every loss is a verdict.
    async fn watch(&mut self) -> Lost {
        Lost::Watch(self.lost().await)
    }

    async fn release(self) -> Result<(), EtcdError> {
        lock::leave(&self.client, &self.key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// How long `riding_out` keeps trying a step that always fails with
    /// `error`, on tokio's paused clock, and how often it tried.
    async fn ridden(wait: Wait, error: fn() -> EtcdError) -> (Duration, u32) {
        let started = Instant::now();
        let tries = Cell::new(0);
        let outcome: Result<(), EtcdError> = riding_out(wait, "a step", || {
            tries.set(tries.get() + 1);
            async move { Err(error()) }
        })
        .await;
        assert!(outcome.is_err());
        (started.elapsed(), tries.get())
    }

    fn silent() -> EtcdError {
        EtcdError::Timeout {
            endpoint: "http://127.0.0.1:2379".into(),
            after: Duration::from_secs(1),
        }
    }

    fn broken() -> EtcdError {
        EtcdError::Broken {
            endpoint: "http://127.0.0.1:2379".into(),
            cause: "reset".into(),
        }
    }

    fn refused() -> EtcdError {
        EtcdError::Usage("not worth a second try".into())
    }

    #[tokio::test(start_paused = true)]
    async fn a_one_off_run_rides_out_silence_as_at_its_first_contact() {
        let (took, tries) = ridden(Wait::Once, silent).await;
        assert!(took <= FIRST_CONTACT_SILENCE, "{took:?}");
        assert!(took >= FIRST_CONTACT_SILENCE - Duration::from_secs(1), "{took:?}");
        assert!(tries > 2, "{tries}");
        // A blip that is not silence gets the one-off grace only.
        let (took, _) = ridden(Wait::Once, broken).await;
        assert!(took < ONCE_GRACE, "{took:?}");
        // And what no retry mends, none.
        assert_eq!(ridden(Wait::Forever, refused).await, (Duration::ZERO, 1));
        // A run with a deadline keeps to it, silence or not.
        let at = Instant::now() + Duration::from_secs(3);
        let (took, _) = ridden(Wait::Until(at), silent).await;
        assert!(took <= Duration::from_secs(3), "{took:?}");
    }
}
