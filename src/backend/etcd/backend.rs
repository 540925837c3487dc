//! The etcd backend's registration: its flags, its part of the man page,
//! and how a job gets its engine.

use super::args::EtcdArgs;
use super::config::{EtcdConfig, EtcdFlags};
use super::{Etcd, DEFAULT_TTL};
use crate::backend::{
    Backend, BackendName, HoldRequest, HoldRules, Look, Peer, Prose, Registration,
};
use crate::backend::{Env, PromiseText, Topic};
use crate::backend::rules::LeasePlan;
use crate::error::Failure;

const REGISTRATION: Registration = Registration {
    peer: Peer {
        tool: "`etcdctl lock`",
        page: "etcdctl(1) (`etcdctl lock`)",
    },
    name: BackendName::Etcd,
    flags: crate::backend::registry::flags_of::<EtcdBackend>,
    lease: true,
    empty_is_an_error: &[("ETCDCTL_ENDPOINTS", "host:port[,host:port...]")],
    // The other ETCDCTL_* we read through `Env::var`, which treats empty
    // as unset.
    empty_is_unset: &[],
    environment: ENVIRONMENT,
    child_environment: &[Prose::Item(
        "etcd",
        "`ETCD_LOCK_KEY`, lockrun's contender key (*KEY*/ and its lease ID in hex), and \
         `ETCD_LOCK_REV`, as under `etcdctl lock`. `LOCKRUN_LOCK_INDEX` is `ETCD_LOCK_REV`: \
         the revision at which lockrun found the lock its own, which follows the deletion \
         of every key ahead of its own (for a semaphore slot, its key's CreateRevision).",
    )],
    safety: &[Prose::Item(
        "etcd",
        "A rival may acquire when the lease expires, the TTL after the last keep-alive etcd \
         processed; no lock-delay exists. The margin is the clock-rate bound's share of the \
         TTL plus a hundredth: with the defaults (TTL 15s) 2.65s, so the default \
         `--kill-timeout` shrinks to 2.3s and SIGKILL has landed by 12.35s. A revoked lease (`lockrun release`, `etcdctl \
         lease revoke`) or a key gone from etcd lets a rival hold at once, so COMMAND gets \
         SIGKILL at once.",
    )],
    examples: &[
        (
            "elect",
            "lockrun --backend etcd elect jobs/migrate -- ./job  # excludes `etcdctl lock jobs/migrate ./job`",
        ),
        (
            "explain",
            "lockrun explain --json --backend etcd elect --ttl 5s --kill-timeout 200ms jobs/migrate",
        ),
    ],
    notes: NOTES,
    habits: None,
};

/// Its words in the shared help (see [`Topic`]).
const NOTES: &[(Topic, &str)] = &[
    (Topic::Where, "in etcd (--backend etcd)"),
    (Topic::Excludes, "`etcdctl lock KEY` with --backend etcd"),
    (Topic::Fence, "an etcd lockrun holder"),
    (Topic::ListPeers, "`etcdctl lock`"),
    (
        Topic::Release,
        "On etcd its child gets SIGKILL at once: the release revokes the holder's lease.",
    ),
    (Topic::Holder, "an etcd lease's key"),
    (
        Topic::Put,
        "On etcd that is any key under L/ where L is held now or has ever been held by a \
         lockrun (lockrun marks it), the sequencer's own lock included.",
    ),
    (Topic::Ttl, "On etcd it is the lease TTL, in whole seconds."),
    (
        Topic::Replace,
        "On etcd a holder that does not answer (stopped, cut off) is released once its lease \
         would have lapsed (its TTL), within which its own stop window ends its tree.",
    ),
    (Topic::SharedMode, "etcd's reader-writer recipe"),
];

const ENVIRONMENT: &[Prose] = &[
    Prose::P(
        "On etcd (`--backend etcd`) lockrun reads etcdctl's variables instead: \
         `ETCDCTL_ENDPOINTS`, `ETCDCTL_CACERT`, `ETCDCTL_CERT`, `ETCDCTL_KEY`, and \
         `ETCDCTL_USER` (with `ETCDCTL_PASSWORD`) for the user, which has no flag.",
    ),
    Prose::P(
        "lockrun talks to etcd's JSON gateway (`/v3/...`), not gRPC, and has the gateway's \
         limits: an etcd started with `--enable-grpc-gateway=false` cannot be reached at \
         all; the gateway cannot authenticate a client by its certificate's common name \
         (etcd's `--client-cert-auth` users), so name the user in `ETCDCTL_USER`; and etcd \
         3.6 changed the gateway's error bodies (lockrun reads the code and message, which \
         3.4 to 3.6 all give; it is tested on 3.4 and 3.5).",
    ),
];

/// etcd, its client built and its settings checked.
pub struct EtcdBackend(Etcd);

impl Backend for EtcdBackend {
    type Args = EtcdArgs;
    type HoldArgs = crate::backend::NoFlags;
    type ReleaseArgs = crate::backend::NoFlags;
    type Engine = Etcd;
    type Inspect = Etcd;
    type Plan = LeasePlan;

    const NAME: &'static str = "etcd";
    const PRIORITY: bool = true;
    const REGISTRATION: Registration = REGISTRATION;

    fn check_key(key: &str) -> Result<(), Failure> {
        super::check_key(key).map_err(Failure::Usage)
    }

    fn promise(_lock: bool, _ends_early: bool) -> PromiseText {
        PromiseText {
            rival: "when the lease expires: the TTL after the last renewal etcd processed",
            release: "`lockrun release` revokes the holder's lease: a rival may hold the lock at once, so the holder sends SIGKILL at once (no grace period)",
            lost_state: "a lease or key gone from etcd (revoked, compacted away, a restored snapshot): a rival may hold at once, so the command gets SIGKILL at once",
            engine: &["etcd is linearizable and its leader expires leases no earlier than the TTL after the keep-alive it processed"],
        }
    }

    /// A lease TTL in whole seconds, and a budget with no lock-delay: a
    /// rival takes the lock as soon as the lease expires.
    fn hold_rules(
        request: &HoldRequest<'_, Self::HoldArgs>,
        _env: &dyn Env,
    ) -> Result<HoldRules<LeasePlan>, Failure> {
        crate::key::check(request.key).map_err(Failure::Usage)?;
        crate::backend::rules::plain_lease(
            request,
            "an etcd lease TTL",
            "on etcd a rival takes the lock as soon as the lease expires",
        )
    }

    /// The client from flags and etcdctl's variables, checked (files
    /// included) before any request.
    fn prepare(
        args: &Self::Args,
        plan: Option<&LeasePlan>,
        env: &dyn Env,
    ) -> Result<Self, Failure> {
        let flags = EtcdFlags {
            endpoints: args.endpoints.clone(),
            cacert: args.cacert.clone(),
            cert: args.cert.clone(),
            key: args.cert_key.clone(),
            user: None,
        };
        let config = EtcdConfig::resolve(&flags, |name| env.var(name)).map_err(Failure::Config)?;
        // Looking and releasing open no lease.
        let ttl = plan.map_or(DEFAULT_TTL, |plan| plan.ttl);
        Etcd::new(&config, ttl)
            .map(EtcdBackend)
            .map_err(Failure::Config)
    }

    fn engine(&self, LeasePlan { priority, .. }: LeasePlan) -> Result<Etcd, Failure> {
        Ok(self.0.clone().ranked(priority))
    }

    fn inspect(&self, _look: &Look<'_, Self::ReleaseArgs>) -> Etcd {
        self.0.clone()
    }

    const FENCED_PUT: bool = true;

    /// One transaction that writes only while `holder`, the holder's
    /// contender key, still exists: it lives exactly as long as the lease.
    /// A key inside the sequencer's own lock is refused before any contact;
    /// one inside another lock's records, once etcd shows it (see
    /// [`Etcd::fenced_put`]).
    async fn fenced_put(
        &self,
        lock: &str,
        holder: &str,
        key: &str,
        value: &[u8],
    ) -> Result<bool, Failure> {
        let own = format!("{lock}/");
        if key.starts_with(&own) {
            return Err(Failure::Usage(super::inside_a_lock(key, &own)));
        }
        match self.0.fenced_put(holder, key, value).await? {
            Some(written) => Ok(written),
            None => Err(Failure::Engine(format!(
                "`{key}` was not written: keys kept appearing beside it while lockrun checked that no lock's records are there; try again"
            ))),
        }
    }
}
