//! The zookeeper backend's registration: its flags, its part of the man
//! page, and how a job gets its engine.

use super::args::{ZkHoldArgs, ZookeeperArgs};
use super::config::{ZkConfig, ZkFlags};
use super::{Zookeeper, DEFAULT_TTL};
use crate::backend::{
    Backend, BackendName, HoldRequest, HoldRules, Look, Peer, Prose, Registration,
};
use crate::backend::priority::Priority;
use crate::backend::{Env, PromiseText, Topic};
use crate::error::Failure;

/// What the hold rules hand on: the session timeout asked for at connect
/// (`--ttl`), the ensemble's tick, and how our waits rank.
#[derive(Debug, Clone, Copy)]
pub struct ZkPlan {
    pub ttl: std::time::Duration,
    pub tick: std::time::Duration,
    pub priority: Priority,
}

const REGISTRATION: Registration = Registration {
    peer: Peer {
        tool: "Curator's `InterProcessMutex` (or `InterProcessSemaphoreV2`), go-zookeeper's lock, or kazoo's `Lock` with `extra_lock_patterns=[\"-lock-\"]`",
        page: "zkCli.sh(1) (ZooKeeper; Curator's and kazoo's lock recipes)",
    },
    name: BackendName::Zookeeper,
    flags: crate::backend::registry::flags_of::<ZookeeperBackend>,
    lease: true,
    empty_is_an_error: &[("ZOOKEEPER_HOSTS", "host:port[,host:port...][/chroot]")],
    // ZOOKEEPER_AUTH we read through `Env::var`, which treats empty as
    // unset.
    empty_is_unset: &[],
    environment: ENVIRONMENT,
    child_environment: &[Prose::Item(
        "zookeeper",
        "`ZOOKEEPER_LOCK_NODE`, lockrun's contender node (/*KEY*/_c_*uuid*-lock-*seq*, or a \
         semaphore's lease node). `LOCKRUN_LOCK_INDEX` is the node's czxid, the ensemble's \
         transaction number of its creation: it increases across holders and across a \
         directory that was deleted and made again, where the sequence number starts over.",
    )],
    safety: &[Prose::Item(
        "zookeeper",
        "A rival may acquire when the session expires, the negotiated session timeout \
         after the leader's last touch of it; no lock-delay exists. lockrun renews with a \
         `sync` and counts from the send time of the last one answered, less half a tick \
         (`--zk-tick-time`) and a twelfth of the timeout, which a follower may take to \
         report the session to the leader. A lost connection is jeopardy: the client moves to \
         another server while the countdown runs. An expired session, lockrun's node \
         deleted (`lockrun release`) or failed authentication lets a rival hold at once, \
         so COMMAND gets SIGKILL at once.",
    )],
    examples: &[(
        "elect",
        "lockrun --backend zookeeper elect jobs/migrate -- ./job  # excludes Curator's InterProcessMutex on /jobs/migrate",
    )],
    notes: NOTES,
    habits: None,
};

/// Its words in the shared help (see [`Topic`]).
const NOTES: &[(Topic, &str)] = &[
    (Topic::Where, "in ZooKeeper (--backend zookeeper)"),
    (
        Topic::Excludes,
        "Curator's `InterProcessMutex` on /KEY with --backend zookeeper",
    ),
    (Topic::ListPeers, "Curator's and kazoo's locks"),
    (
        Topic::Release,
        "On ZooKeeper its child gets SIGKILL at once: the release deletes the holder's node.",
    ),
    (Topic::Holder, "a ZooKeeper holder's node"),
    (
        Topic::Ttl,
        "On ZooKeeper it is the session timeout asked for, in whole seconds.",
    ),
    (
        Topic::Replace,
        "On ZooKeeper a holder on another host is never released: it is waited for until it \
         answers or its session expires (the server deletes its node), within which its own \
         stop window ends its tree; a stopped holder on this host is waited for until its \
         lockrun exits; so give --timeout (which bounds this wait and the lock's together), \
         or end the wait with a signal.",
    ),
    (Topic::SharedMode, "Curator's read-write lock"),
];

const ENVIRONMENT: &[Prose] = &[Prose::P(
    "On ZooKeeper (`--backend zookeeper`) lockrun reads `ZOOKEEPER_HOSTS` for the \
     connect string (host:port[,host:port...][/chroot]) and `ZOOKEEPER_AUTH` for digest \
     credentials (user:password), which have no flag but `--zk-auth-file`.",
)];

/// ZooKeeper, its settings checked.
pub struct ZookeeperBackend(Zookeeper);

impl Backend for ZookeeperBackend {
    type Args = ZookeeperArgs;
    type HoldArgs = ZkHoldArgs;
    type ReleaseArgs = crate::backend::NoFlags;
    type Engine = Zookeeper;
    type Inspect = Zookeeper;
    /// The ensemble's tick (`--zk-tick-time`), and how a writer ranks
    /// among the waiters (`elect --priority`).
    type Plan = ZkPlan;

    const NAME: &'static str = "zookeeper";
    const PRIORITY: bool = true;
    const REGISTRATION: Registration = REGISTRATION;

    fn check_key(key: &str) -> Result<(), Failure> {
        super::check_key(key).map_err(Failure::Usage)
    }

    fn promise(_lock: bool, _ends_early: bool) -> PromiseText {
        PromiseText {
            rival: "when the session expires: the negotiated timeout after the leader's last touch of it, which trails our request by up to half a tick (--zk-tick-time) and a twelfth of the timeout when a follower passes it on",
            release: "`lockrun release` deletes the holder's node: a rival may hold the lock at once, so the holder sends SIGKILL at once (no grace period)",
            lost_state: "an expired session, our node deleted, or failed authentication: a rival may hold at once, so the command gets SIGKILL at once",
            engine: &[
                "ZooKeeper expires a session no earlier than the negotiated timeout after the leader's last touch of it, on the leader's monotonic clock",
                "the ensemble's tickTime is at most --zk-tick-time: a follower reports a client's requests to the leader every half tick",
            ],
        }
    }


    /// A session timeout in whole seconds, and a budget in which a rival
    /// may take the lock as soon as the session expires, which can come
    /// [`super::touch_gap`] before the timeout has passed since our send
    /// (a follower passes our requests on to the leader late).
    fn hold_rules(
        request: &HoldRequest<'_, Self::HoldArgs>,
        _env: &dyn Env,
    ) -> Result<HoldRules<Self::Plan>, Failure> {
        super::check_key(request.key).map_err(Failure::Usage)?;
        let tick = request.flags.zk_tick_time;
        let rules = super::hold_rules(request, tick)?;
        Ok(HoldRules {
            budget: rules.budget,
            kill_timeout: rules.kill_timeout,
            plan: ZkPlan {
                ttl: request.ttl,
                tick,
                priority: request.kind.priority,
            },
        })
    }

    fn prepare(
        args: &Self::Args,
        plan: Option<&ZkPlan>,
        env: &dyn Env,
    ) -> Result<Self, Failure> {
        let flags = ZkFlags {
            hosts: args.zk_hosts.clone(),
            auth_file: args.zk_auth_file.clone(),
            ca_file: args.zk_ca_file.clone(),
            client_cert: args.zk_client_cert.clone(),
            client_key: args.zk_client_key.clone(),
        };
        let config = ZkConfig::resolve(&flags, |name| env.var(name)).map_err(Failure::Config)?;
        // The session timeout asked for at connect: the plan's, checked by
        // the hold rules; looking and releasing hold nothing.
        let ttl = plan.map_or(DEFAULT_TTL, |plan| plan.ttl);
        Ok(ZookeeperBackend(Zookeeper::new(config, ttl)))
    }

    fn engine(&self, ZkPlan { tick, priority, .. }: ZkPlan) -> Result<Zookeeper, Failure> {
        Ok(self.0.clone().with_tick(tick).ranked(priority))
    }

    fn inspect(&self, _look: &Look<'_, Self::ReleaseArgs>) -> Zookeeper {
        self.0.clone()
    }

    const FENCED_PUT: bool = true;

    /// `multi(check(holder), setData(key))`: applies only while the
    /// holder's node exists. A key inside the lock's own directory is
    /// refused: a node there could count as a contender.
    async fn fenced_put(
        &self,
        lock: &str,
        holder: &str,
        key: &str,
        value: &[u8],
    ) -> Result<bool, Failure> {
        let own = format!("{lock}/");
        if key.starts_with(&own) {
            return Err(Failure::Usage(format!(
                "`{key}` lies inside lock `{lock}`'s own directory, among its contenders; write the data outside `{own}`"
            )));
        }
        Ok(self.0.fenced_put(holder, key, value).await?)
    }
}
