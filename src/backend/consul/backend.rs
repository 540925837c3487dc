//! The Consul backend's registration: its flags, its part of the man
//! page, and how a job gets its engine.

use crate::backend::priority::Priority;
use super::args::ConsulArgs;
use super::engine::Consul;
use super::inspect::{Outside, Reading};
use super::txn::{Txn, TxnOp};
use super::kv::Read;
use super::{config, Client, SessionSpec};
use crate::backend::{
    Backend, BackendName, HoldRequest, HoldRules, Look, Peer, Prose, Registration,
};
use crate::backend::{Env, Habit, HabitAnswer, PromiseText, Topic};
use crate::error::Failure;

const REGISTRATION: Registration = Registration {
    peer: Peer {
        tool: "`consul lock`",
        page: "consul(1) (`consul lock`, which lockrun interoperates with)",
    },
    name: BackendName::Consul,
    flags: crate::backend::registry::flags_of::<ConsulBackend>,
    lease: true,
    empty_is_an_error: &[
        (
            "CONSUL_HTTP_ADDR",
            "host:port, http://host:port or https://host:port",
        ),
        ("CONSUL_NAMESPACE", "a namespace"),
        ("CONSUL_PARTITION", "an admin partition"),
    ],
    // The rest of the consul CLI's variables (`CONSUL_HTTP_TOKEN`,
    // `CONSUL_HTTP_TOKEN_FILE`, `CONSUL_HTTP_SSL`, `CONSUL_HTTP_SSL_VERIFY`)
    // we read through `Env::var`, which treats empty as unset too.
    empty_is_unset: &[
        ("CONSUL_CACERT", "ca_file"),
        ("CONSUL_CAPATH", "ca_path"),
        ("CONSUL_CLIENT_CERT", "client_cert"),
        ("CONSUL_CLIENT_KEY", "client_key"),
        ("CONSUL_TLS_SERVER_NAME", "tls_server_name"),
    ],
    environment: ENVIRONMENT,
    child_environment: CHILD_ENVIRONMENT,
    safety: SAFETY,
    examples: &[
        (
            "elect",
            "lockrun elect P/.lock -- ./job          # excludes `consul lock P ./job`",
        ),
        (
            "semaphore",
            "lockrun semaphore --limit 2 P -- ./job  # shares slots with `consul lock -n 2 P ./job`",
        ),
        (
            "release",
            "lockrun release --session 3f2a... --destroy-session service/db/leader",
        ),
        (
            "check",
            "CONSUL_HTTP_ADDR=10.0.0.5:8500 lockrun check \"$seq\"",
        ),
    ],
    notes: NOTES,
    habits: Some(habit),
};

/// A flag of `consul lock` typed on lockrun's line, answered with
/// lockrun's equivalent (its [`Registration::habits`]).
fn habit(habit: &Habit<'_>) -> Option<HabitAnswer> {
    let answer = |what: String| Some(HabitAnswer { what, help: None });
    if habit.name == "token" {
        // We never echo what follows: it is a secret.
        return answer(format!(
            "lockrun has no `{}`: a token on the command line is visible to \
             every user through ps; put it in a file and pass `--token-file FILE`, \
             or set CONSUL_HTTP_TOKEN_FILE (or CONSUL_HTTP_TOKEN)",
            habit.flag
        ));
    }
    if habit.double {
        return None;
    }
    if habit.name == "n" {
        // `-n` is our --no-wait; followed by a number it is `consul lock -n N`.
        let n = habit.next.filter(|n| n.parse::<u64>().is_ok())?;
        return Some(match habit.sub {
            Some("semaphore") => HabitAnswer {
                what: format!(
                    "`-n` is `--no-wait` here; for {n} slots, as `consul lock -n {n}` \
                     means, use `--limit {n}`"
                ),
                help: None,
            },
            _ => HabitAnswer {
                what: format!(
                    "`-n` is `--no-wait` here; for {n} slots, as `consul lock -n {n}` \
                     means, use `lockrun semaphore --limit {n} PREFIX -- COMMAND`"
                ),
                help: Some("semaphore"),
            },
        });
    }
    let with_value = |to: &str| match habit.next.filter(|v| !v.starts_with('-')) {
        Some(v) => format!("`{to} {}`", crate::usage::quote(v)),
        None => format!("`{to}`"),
    };
    let name = habit.name;
    answer(match name {
        "child-exit-code" => "lockrun always exits with the child's status, so \
                              `-child-exit-code` is not needed; drop it"
            .to_string(),
        "verbose" => "`-verbose` is `-v` (or `--verbose`) in lockrun".to_string(),
        "timeout" | "try" => format!("`-{name}` is {} in lockrun", with_value("--timeout")),
        "name" => format!("`-name` is {} in lockrun", with_value("--session-name")),
        "shell" => "`-shell` is `--shell` in lockrun, and it is off by default: \
                    COMMAND runs directly unless you ask for a shell"
            .to_string(),
        "pass-stdin" => "lockrun's child always inherits stdin, so `-pass-stdin` \
                         is not needed; drop it"
            .to_string(),
        "monitor-retry" => "lockrun has no `-monitor-retry`: it keeps renewing within \
                            the session's --ttl and stops the child when it no longer \
                            can; drop it"
            .to_string(),
        _ => return None,
    })
}

/// Its words in the shared help (see [`Topic`]).
const NOTES: &[(Topic, &str)] = &[
    (Topic::Where, "in HashiCorp Consul"),
    (Topic::Excludes, "`consul lock` on the same key"),
    (
        Topic::Semaphore,
        "On Consul the format is that of `consul lock -n N PREFIX`, so both share slots.",
    ),
    (
        Topic::Leader,
        "A holder that stores no value (`consul lock`, the Go API) is shown by its session as \
         `NAME (node NODE)`.",
    ),
    (Topic::Fence, "a Consul lock's ModifyIndex, not its LockIndex"),
    (Topic::Details, "Consul's entry and session"),
    (Topic::ListPeers, "`consul lock`"),
    (
        Topic::Release,
        "On Consul it notices within a blocking-query round trip.",
    ),
    (Topic::Holder, "a Consul session"),
    (Topic::Ttl, "On Consul it is the session TTL (10s to 24h)."),
    (
        Topic::KillTimeout,
        "When Consul reports the lock lost, only what the lock-delay leaves is granted (none \
         for a semaphore).",
    ),
    (
        Topic::Replace,
        "On Consul a holder that does not answer (stopped, cut off) is released once its \
         lease would have lapsed (its TTL, and the lock-delay), within which its own stop \
         window ends its tree. There it goes ahead of no waiter: the holder hands the lock \
         to the head of lockrun's queue as it lets go, so a waiter queued before it may get \
         the lock first.",
    ),
    (
        Topic::Shared,
        "Consul, which has none, uses a layout of lockrun's own that `consul lock KEY` refuses \
         to run beside.",
    ),
];

const CHILD_ENVIRONMENT: &[Prose] = &[Prose::Item(
    "consul",
    "`LOCKRUN_SESSION`, the ID of the session that holds the lock or slot, and \
     `CONSUL_LOCK_HELD=true`, as under `consul lock`. `LOCKRUN_LOCK_INDEX` is the key's \
     ModifyIndex when lockrun acquired it (for a semaphore, that of *PREFIX*/.lock when \
     the slot was taken), which no earlier holder's can reach, `consul lock` included; \
     Consul's LockIndex would not do, since it restarts at 1 whenever the key is deleted. \
     It does not survive a cluster that loses its state, whose indexes start again.",
)];

const SAFETY: &[Prose] = &[
    Prose::Item(
        "consul",
        "A rival may acquire a lock TTL + `--lock-delay` after the last renewal Consul \
         processed, and a semaphore slot the TTL after it. With the defaults (TTL 15s, \
         lock-delay 15s, `--kill-timeout` 5s) SIGKILL has landed by 20s, a rival comes at \
         30s: a 10s margin, which tolerates a combined clock-rate error of 32%. The session \
         is read back after it is created: checks, TTL or lock-delay other than those asked \
         for end the run (status 125).",
    ),
    Prose::Item(
        "consul: health checks",
        "Sessions have no health checks unless `--node-checks` or `--service-checks` asks \
         for some (lockrun sends the old `Checks` field too, which Consul before 1.7 \
         honours). A check can turn critical right after a renewal and Consul then \
         invalidates the session at once, so with checks SIGKILL must land within \
         `--lock-delay` of the last confirmed renewal: lockrun renews more often and stops \
         COMMAND earlier. Failover is faster (the lock-delay instead of TTL + lock-delay).",
    ),
    Prose::Item(
        "consul: semaphores",
        "A slot is an entry in a record that no session holds, so a lock-delay does not keep \
         rivals out of it: once the holder's session is gone, a waiter prunes it at once. For \
         `semaphore` the budget therefore counts no lock-delay, the default `--kill-timeout` \
         is 2s, and health checks are refused.",
    ),
    Prose::Item(
        "consul: verdicts",
        "A renewal answered 404, the key showing another session or none, or the session \
         destroyed by an operator end the hold at once: COMMAND is stopped and lockrun exits \
         124, or campaigns again with `--campaign`. Only the lock-delay, already running, \
         keeps a rival out then, so COMMAND's grace period is cut to what it leaves (the \
         lock-delay less its clock-rate and timer margin), and a semaphore's COMMAND is \
         SIGKILLed at once. A renewal answered 500 \"No cluster leader\" is no verdict: it \
         is retried.",
    ),
    Prose::Item(
        "consul: release",
        "`lockrun release` frees the lock at once and arms no lock-delay. The old holder's \
         lockrun notices within a blocking-query round trip and, its session being alive, \
         gives COMMAND its full `--kill-timeout`: COMMAND may still run for that long while \
         a new holder starts, the one overlap lockrun accepts, since an operator asked for \
         it.",
    ),
];

const ENVIRONMENT: &[Prose] = &[
    Prose::P(
        "On Consul (`--backend consul`, the default) lockrun reads the consul CLI's \
         variables; a flag given on the command line wins over its variable. An empty \
         `CONSUL_HTTP_ADDR`, `CONSUL_NAMESPACE` or `CONSUL_PARTITION` is refused (status 2), \
         since it would name another lock space; the others count as unset when empty.",
    ),
    Prose::Item(
        "`CONSUL_HTTP_ADDR`",
        "The agent's address: `host:port`, `http://host:port` or `https://host:port` \
         [default: 127.0.0.1:8500]. Flag: `--http-addr`. Several, comma-separated, are \
         tried in turn: a refused connection goes to the next at once, and after one that \
         hangs, breaks or cannot reach a server, the next request goes to the next agent. \
         The consul CLI takes one address in this variable, so give a list with \
         `--http-addr` and keep the variable to one address if the CLI shares it.",
    ),
    Prose::Item(
        "`CONSUL_HTTP_TOKEN`",
        "The ACL token. lockrun never shows it: not in errors, logs, `-vv` output or the \
         arguments of processes it starts.",
    ),
    Prose::Item(
        "`CONSUL_HTTP_TOKEN_FILE`",
        "A file holding the ACL token; wins over `CONSUL_HTTP_TOKEN`. Flag: `--token-file`, \
         which wins over both.",
    ),
    Prose::Item(
        "`CONSUL_CACERT`, `CONSUL_CAPATH`",
        "A CA certificate file, or a directory of them, to verify Consul's certificate. \
         Flags: `--ca-file`, `--ca-path`.",
    ),
    Prose::Item(
        "`CONSUL_CLIENT_CERT`, `CONSUL_CLIENT_KEY`",
        "A client certificate and its key, for agents with verify_incoming; give both. \
         Flags: `--client-cert`, `--client-key`.",
    ),
    Prose::Item(
        "`CONSUL_TLS_SERVER_NAME`",
        "The name to verify Consul's certificate against (SNI). Flag: `--tls-server-name`.",
    ),
    Prose::Item(
        "`CONSUL_HTTP_SSL`",
        "`true` to speak HTTPS to an address given as `host:port`.",
    ),
    Prose::Item(
        "`CONSUL_HTTP_SSL_VERIFY`",
        "`false` to accept any certificate from Consul. For tests only.",
    ),
    Prose::Item(
        "`CONSUL_NAMESPACE`",
        "The Enterprise namespace. Flag: `--namespace`.",
    ),
    Prose::Item("`CONSUL_PARTITION`", "The Enterprise admin partition."),
    Prose::Item(
        "`LOCKRUN_SESSION_TTL_MIN`",
        "The shortest `--ttl` lockrun accepts [default: 10s, Consul's own minimum]. Lower it \
         only to match servers whose session_ttl_min is lowered.",
    ),
];

/// Consul, its client built and its settings checked.
pub struct ConsulBackend {
    client: Client,
    /// Whether a namespace was asked for, which the agent must support.
    namespace: bool,
}

impl Backend for ConsulBackend {
    type Args = ConsulArgs;
    type HoldArgs = super::args::ConsulSessionArgs;
    type ReleaseArgs = super::args::ConsulReleaseArgs;
    type Engine = Consul;
    type Inspect = Outside;
    type Plan = (SessionSpec, Priority);

    const NAME: &'static str = "consul";
    const PRIORITY: bool = true;
    const REGISTRATION: Registration = REGISTRATION;

    fn check_key(key: &str) -> Result<(), Failure> {
        super::path::check_key(key).map_err(Failure::Usage)
    }

    fn promise(lock: bool, ends_early: bool) -> PromiseText {
        PromiseText {
            rival: match (lock, ends_early) {
                (true, true) => "the lock-delay after a health check ends the session, which may be right after a renewal",
                (true, false) => "TTL + lock-delay after the last renewal Consul processed",
                (false, _) => "when the session expires: the TTL after the last renewal Consul processed (no lock-delay protects a slot)",
            },
            release: if lock {
                "`lockrun release` arms no lock-delay: a rival may start at once while the holder's command gets its full --kill-timeout (the one overlap lockrun accepts, since an operator asked for it)"
            } else {
                "`lockrun release` frees the slot at once: a rival may start while the holder's command gets its full --kill-timeout (the one overlap lockrun accepts)"
            },
            lost_state: if lock {
                "a session Consul invalidates or destroys keeps the lock-delay: the command gets what the lock-delay leaves of --kill-timeout, then SIGKILL; a Consul that loses its state (a new cluster) arms nothing, and only the local lease stops the command"
            } else {
                "a session Consul ends frees the slot at once, so the command gets SIGKILL at once"
            },
            engine: &["Consul's servers are linearizable (raft) and never invalidate a session earlier than its TTL after the renewal they processed"],
        }
    }

    fn hold_rules(
        request: &HoldRequest<'_, Self::HoldArgs>,
        env: &dyn Env,
    ) -> Result<HoldRules<(SessionSpec, Priority)>, Failure> {
        let rules = config::hold(request, env)?;
        Ok(HoldRules {
            budget: rules.budget,
            kill_timeout: rules.kill_timeout,
            plan: (rules.plan, request.kind.priority),
        })
    }

    fn release_rules(flags: &Self::ReleaseArgs) -> Result<(), Failure> {
        if let Some(id) = &flags.session {
            if id.len() != 36 || !id.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
                return Err(Failure::Usage(format!(
                    "--session `{id}` is not a session ID; Consul session IDs are UUIDs like 8b0cfa3c-2c84-4c0f-9a5e-4c3ee0b0b1a2"
                )));
            }
        }
        Ok(())
    }

    fn prepare(
        args: &Self::Args,
        // The session's TTL rides in the plan to the engine, which asks
        // for the session; the client needs none of it.
        _plan: Option<&Self::Plan>,
        env: &dyn Env,
    ) -> Result<Self, Failure> {
        let consul = config::connection(args, env)?;
        let client = Client::new(&consul).map_err(|e| Failure::Config(format!("{e:#}")))?;
        Ok(ConsulBackend {
            client,
            namespace: consul.namespace.is_some(),
        })
    }

    async fn ready(&self) -> Result<(), Failure> {
        // Namespaces on an agent without them: said before anything is
        // written (an older agent would ignore `?ns=` and work elsewhere).
        if self.namespace && self.client.lacks_namespaces().await {
            return Err(Failure::Config(super::error::NO_NAMESPACES.into()));
        }
        Ok(())
    }

    fn engine(&self, (spec, rank): (SessionSpec, Priority)) -> Result<Consul, Failure> {
        Ok(Consul::new(self.client.clone(), spec).ranked(rank))
    }

    fn inspect(&self, look: &Look<'_, Self::ReleaseArgs>) -> Outside {
        match look {
            Look::Leader { wait, watch, json } => {
                let reading = match (watch, wait) {
                    (true, _) => Reading::Watching,
                    (false, Some(wait)) => Reading::Waiting(*wait),
                    (false, None) => Reading::Once,
                };
                Outside::leader(self.client.clone(), reading, *json)
            }
            Look::Release { flags } => Outside::release(
                self.client.clone(),
                flags.session.clone(),
                flags.destroy_session,
            ),
        }
    }

    const FENCED_PUT: bool = true;

    /// One transaction: a check that `holder`'s session still holds
    /// `lock`, then the write, as a check-and-set on the entry as it was
    /// read. A key that is a lock's or a semaphore's own record is refused:
    /// one by its name (a `.lock` record, lockrun's queues), one held by a
    /// session (a lock, a contender's entry, a place in a queue: a plain
    /// write keeps the session and replaces what its holder wrote), and a
    /// contender's place beside a semaphore's `.lock`.
    async fn fenced_put(
        &self,
        lock: &str,
        holder: &str,
        key: &str,
        value: &[u8],
    ) -> Result<bool, Failure> {
        if let Some(why) = super::lock::own_record(key) {
            return Err(Failure::Usage(why));
        }
        for _ in 0..FENCED_PUT_TRIES {
            let (entry, _) = self.client.kv_get(key, Read::consistent()).await?;
            if let Some(session) = entry.as_ref().and_then(|e| e.holder()) {
                return Err(Failure::Usage(format!(
                    "`{key}` is held by session {session}: it is a lock's or a contender's own entry, and a write would replace what its holder wrote; write the data under a key nobody locks"
                )));
            }
            if let Some((prefix, _)) = key.rsplit_once('/') {
                let record = format!("{prefix}/.lock");
                if self.client.kv_get(&record, Read::consistent()).await?.0.is_some() {
                    return Err(Failure::Usage(format!(
                        "`{key}` lies beside `{record}`, among semaphore `{prefix}`'s contenders; write the data outside `{prefix}/`"
                    )));
                }
            }
            let ops = [
                TxnOp::CheckSession {
                    key: lock,
                    session: holder,
                },
                // Written only if nobody took the entry since we read it.
                TxnOp::Cas {
                    key,
                    value,
                    flags: entry.as_ref().map_or(0, |e| e.flags),
                    index: entry.as_ref().map_or(0, |e| e.modify_index),
                },
            ];
            match self.client.txn(&ops).await? {
                Txn::Applied(_) => return Ok(true),
                Txn::Refused(refusals) if refusals.iter().any(|r| r.op_index == 0) => {
                    return Ok(false)
                }
                Txn::Refused(refusals) if refusals.iter().all(|r| r.is_stale()) => {}
                Txn::Refused(refusals) => {
                    return Err(Failure::Engine(format!(
                        "Consul refused to write `{key}`: {}",
                        refusals
                            .iter()
                            .map(|r| r.what.clone())
                            .collect::<Vec<_>>()
                            .join("; ")
                    )))
                }
            }
        }
        Err(Failure::Engine(format!(
            "`{key}` was not written: it kept changing while lockrun checked that it is no lock's entry; try again"
        )))
    }
}

/// How many times `put --sequencer` reads its key again when it changed
/// between the look and the write.
const FENCED_PUT_TRIES: u32 = 5;
