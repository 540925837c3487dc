//! `--register-service NAME[:PORT]`: the holder registered in a Consul
//! agent's service catalog while it holds, so that
//! `NAME.service.consul` resolves to it and nothing else.
//!
//! It lives here, as an operations feature, and not under
//! `backend/consul/`, because it works beside every backend: the lock may
//! be in etcd, PostgreSQL, ZooKeeper or a local file while service discovery is
//! Consul's. It reaches the agent through [`crate::backend::consul::Agent`]:
//! the consul CLI's variables (the address, TLS and the token) are read by
//! the Consul backend's own code, one place, so that an agent on https with
//! a private CA is reached here as `consul services register` reaches it.
//! A build without the Consul backend refuses the flag.
//!
//! Routing is a convenience and the lock the safety tool: a registration
//! that fails while holding is logged and tried again, never a reason to
//! stop COMMAND. What the catalog promises is one way: the service's TTL
//! check is passed only right after a renewal of the lease was confirmed,
//! with a TTL that makes it go critical no later than COMMAND's stop would
//! begin, so that a lockrun that is frozen or dead, or cut off from its
//! engine, drops out of DNS by itself; and lockrun deregisters it before it
//! gives the lock up.

use std::convert::Infallible;
use std::time::Duration;

use clap::Args;

use super::Beacon;
use crate::backend::timing::Budget;
use crate::backend::Env;
use crate::duration::fmt_duration;
use crate::error::Failure;
use crate::logging::EVENT;

/// The check's TTL on an engine whose lock does not run out (local): there
/// is no deadline to derive it from, so a frozen lockrun drops out this
/// long after its last pass.
const NO_LEASE_TTL: Duration = Duration::from_secs(10);

/// How often the check is passed on such an engine.
pub const NO_LEASE_PASS_EVERY: Duration = Duration::from_secs(3);

/// How long one request to the agent may take where no deadline bounds
/// it: the check at start, deregistration, passes on a lease-less engine.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// The least time a registration or pass is sent with: less, and it would
/// fail before it could arrive.
const MIN_WITHIN: Duration = Duration::from_millis(50);

/// How soon a failed registration or pass is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Consul's smallest `DeregisterCriticalServiceAfter`: a registration whose
/// check stays critical is removed this long after (Consul's reaper runs
/// every 30 s, so up to half a minute later).
const REAP_AFTER: &str = "1m";

/// The agent when neither `--service-agent` nor `CONSUL_HTTP_ADDR` names one.
const DEFAULT_AGENT: &str = "127.0.0.1:8500";

/// Registering the holder in a service catalog.
#[derive(Debug, Args, Default)]
#[command(next_help_heading = "Service catalog")]
pub struct CatalogArgs {
    /// Register the holder in the Consul agent's catalog as service NAME
    /// (at PORT) while it holds.
    ///
    /// Registered when COMMAND starts, with a TTL check passed only after a
    /// confirmed renewal, and deregistered before the lock is given up; a
    /// frozen or dead lockrun's check goes critical before its COMMAND
    /// would have been stopped. Routing only: fence writes
    /// (LOCKRUN_SEQUENCER), as DNS answers lag.
    #[arg(long, hide_short_help = true, value_name = "NAME[:PORT]")]
    pub register_service: Option<String>,
    /// A tag of the registered service (repeatable), e.g. `primary`.
    #[arg(
        long,
        hide_short_help = true,
        value_name = "TAG",
        requires = "register_service"
    )]
    pub service_tag: Vec<String>,
    /// The Consul agent to register with, HOST:PORT or http(s)://HOST:PORT
    /// [default: CONSUL_HTTP_ADDR, else 127.0.0.1:8500].
    #[arg(
        long,
        hide_short_help = true,
        value_name = "ADDR",
        requires = "register_service"
    )]
    pub service_agent: Option<String>,
}

/// A checked `--register-service`: what is registered, where, under which
/// id.
#[derive(Debug)]
pub struct Catalog {
    name: String,
    port: Option<u16>,
    tags: Vec<String>,
    /// Distinct for each holder on an agent: several holders of one
    /// semaphore, or a holder and the next one, may share an agent.
    id: String,
    check_id: String,
    /// The agent as the user named it, for messages.
    agent: String,
    /// Until when the agent may still count the check as passing: the
    /// TTL from the answer to the last registration or pass (the agent
    /// took it before it answered), or from the end of the bound of one
    /// that failed.
    passing_until: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// Taken by each request to the agent, in turn, for as long as it is
    /// on its way (it runs on a task of its own, so that a hold that ends
    /// meanwhile does not cut it off): a deregistration is sent only once
    /// a registration or pass before it was answered or timed out, and
    /// cannot be undone by one arriving after it.
    #[cfg_attr(not(feature = "consul"), allow(dead_code))]
    gate: std::sync::Arc<tokio::sync::Mutex<()>>,
    #[cfg(feature = "consul")]
    client: crate::backend::consul::Agent,
}

impl Catalog {
    /// Checks the flags and the agent's variables; `None` without
    /// `--register-service`. Nothing is sent yet (see [`Catalog::reach`]).
    pub fn prepare(args: &CatalogArgs, env: &dyn Env) -> Result<Option<Catalog>, Failure> {
        let Some(spec) = &args.register_service else {
            return Ok(None);
        };
        let (name, port) = parse_service(spec).map_err(Failure::Usage)?;
        let mut tags = Vec::new();
        for tag in &args.service_tag {
            check_tag(tag).map_err(Failure::Usage)?;
            if !tags.contains(tag) {
                tags.push(tag.clone());
            }
        }
        let agent = match &args.service_agent {
            Some(addr) => agent_url(addr, "--service-agent")?,
            None => match env.var("CONSUL_HTTP_ADDR") {
                Some(addr) => agent_url(&addr, "CONSUL_HTTP_ADDR")?,
                None => format!("http://{DEFAULT_AGENT}"),
            },
        };
        if env
            .var("CONSUL_HTTP_TOKEN")
            .is_some_and(|t| t.trim().is_empty())
        {
            return Err(Failure::Usage(
                "CONSUL_HTTP_TOKEN is empty; give the agent's token, or unset it for the anonymous one".into(),
            ));
        }
        // The agent's client: its TLS files and token are read and checked
        // here, before anything is sent; a build without the Consul
        // backend refuses the flag.
        #[cfg_attr(not(feature = "consul"), allow(unused_variables))]
        let client = client(&agent, env)?;
        let host = crate::host::hostname();
        let id = format!("lockrun-{name}-{host}-{}", std::process::id());
        Ok(Some(Catalog {
            check_id: format!("{id}-ttl"),
            id,
            name,
            port,
            tags,
            #[cfg(feature = "consul")]
            agent: client.shown().to_string(),
            #[cfg(not(feature = "consul"))]
            agent,
            passing_until: std::sync::Mutex::new(None),
            gate: Default::default(),
            #[cfg(feature = "consul")]
            client,
        }))
    }

    /// The service's name, as `NAME.service.consul` resolves it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The check's TTL: after a confirmed renewal the countdown's deadline
    /// is `stop_after` away and the next renewal is due `renew_every`
    /// later, so a TTL between the two stays passing from renewal to
    /// renewal and goes critical before the stop whenever they stop coming.
    pub fn ttl(budget: Option<&Budget>) -> Duration {
        match budget {
            Some(budget) => {
                let (stop, renew) = (budget.stop_after(), budget.renew_every());
                renew + (stop.saturating_sub(renew)) / 2
            }
            None => NO_LEASE_TTL,
        }
    }

    /// Asks the agent whether it answers (and takes our token), before any
    /// lock is taken: an agent that is down at start is a setup error.
    pub async fn reach(&self) -> Result<(), Failure> {
        let agent = &self.agent;
        match self.send("GET", &["agent", "self"], None, REQUEST_TIMEOUT).await {
            Ok(_) => Ok(()),
            // The TLS problem names what to set.
            Err(why) if why.contains("over TLS") => Err(Failure::Config(format!(
                "--register-service: the Consul agent at {agent} {why}"
            ))),
            Err(why) => Err(Failure::Config(format!(
                "--register-service: the Consul agent at {agent} {why}; start it, or name one with --service-agent or CONSUL_HTTP_ADDR"
            ))),
        }
    }

    /// Registers the service with a passing TTL check. `within` bounds the
    /// request: the check goes critical `ttl` after the agent takes it.
    pub async fn register(
        &self,
        ttl: Duration,
        within: Duration,
        meta: &[(&str, String)],
    ) -> Result<(), String> {
        let mut body = serde_json::json!({
            "ID": self.id,
            "Name": self.name,
            "Tags": self.tags,
            "Meta": meta.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
            "Check": {
                "CheckID": self.check_id,
                "Name": "lockrun holds the lock",
                "TTL": format!("{}ms", ttl.as_millis()),
                "Status": "passing",
                "DeregisterCriticalServiceAfter": REAP_AFTER,
            },
        });
        if let Some(port) = self.port {
            body["Port"] = port.into();
        }
        self.send("PUT", &["agent", "service", "register"], Some(body), within)
            .await
            .map(drop)
    }

    /// Passes the TTL check.
    pub async fn pass(&self, within: Duration) -> Result<(), String> {
        let path = ["agent", "check", "pass", &self.check_id];
        self.send("PUT", &path, None, within).await.map(drop)
    }

    /// Removes the service and its check; one that is not there is gone.
    pub async fn deregister(&self) -> Result<(), String> {
        let path = ["agent", "service", "deregister", &self.id];
        match self.send("PUT", &path, None, REQUEST_TIMEOUT).await {
            Ok(_) => Ok(()),
            Err(why) if why.contains("404") => Ok(()),
            Err(why) => Err(why),
        }
    }

    /// Keeps the holder registered while the hold lasts; never returns.
    /// It registers at once, then passes the check each time the beacon
    /// publishes a confirmed renewal (every few seconds on an engine whose
    /// lock cannot run out), each request bounded so that the agent takes
    /// it while the TTL still ends before the countdown's deadline; a
    /// request that cannot be so bounded is not sent. A failure is logged
    /// and tried again: the lock, not the catalog, is what keeps COMMAND
    /// safe.
    pub async fn keep(&self, beacon: &Beacon, budget: Option<&Budget>) -> Infallible {
        let ttl = Catalog::ttl(budget);
        let mut published = beacon.subscribe();
        let mut registered = false;
        let mut failing = false;
        loop {
            let (renewals, deadline, fence) = {
                let s = published.borrow_and_update();
                (s.renewals, s.deadline, s.fence)
            };
            let within = match (budget, deadline) {
                (None, _) => REQUEST_TIMEOUT,
                (Some(_), Some(deadline)) => deadline.left().saturating_sub(ttl),
                (Some(_), None) => Duration::ZERO,
            };
            // Before it is sent, the most the attempt may extend the check
            // by (it may reach the agent until its bound runs out): the
            // hold can end while it is on its way, and a withdrawal that
            // fails must then wait for it too.
            let sent = tokio::time::Instant::now();
            let before = self.passing_until.lock().ok().and_then(|u| *u);
            if within >= MIN_WITHIN {
                self.extend_passing(before, sent + within + ttl);
            }
            let attempt = if within < MIN_WITHIN {
                Err(format!(
                    "no time is left to tell it before the check's TTL ({}) would reach past the deadline; waiting for a renewal",
                    fmt_duration(ttl)
                ))
            } else if registered {
                self.pass(within).await
            } else {
                let mut meta = vec![("lockrun_backend", beacon.backend.to_string())];
                if let Some(fence) = fence {
                    meta.push(("lockrun_fence", fence.to_string()));
                }
                self.register(ttl, within, &meta).await
            };
            // Answered: the agent took it before now.
            if attempt.is_ok() {
                self.extend_passing(before, tokio::time::Instant::now() + ttl);
            }
            match attempt {
                Ok(()) if !registered => {
                    registered = true;
                    failing = false;
                    tracing::info!(
                        target: EVENT,
                        service = self.name.as_str(),
                        id = self.id.as_str(),
                        "registered service `{}` with the agent at {} (TTL check {})",
                        self.name,
                        self.agent,
                        fmt_duration(ttl)
                    );
                }
                Ok(()) => {
                    if failing {
                        tracing::info!("service `{}`: the check is passing again", self.name);
                    }
                    failing = false;
                }
                Err(why) => {
                    if !failing {
                        let what = if registered {
                            "pass the check of"
                        } else {
                            "register"
                        };
                        tracing::warn!(
                            "could not {what} service `{}` at {}: {why}; trying again (COMMAND runs on: the lock, not the catalog, keeps it safe)",
                            self.name,
                            self.agent
                        );
                    }
                    failing = true;
                }
            }
            // The next attempt: the next confirmed renewal, or sooner to
            // retry a failure; on a lease-less engine, on a timer.
            let pause = match (failing, budget) {
                (true, _) => Some(RETRY_AFTER),
                (false, None) => Some(NO_LEASE_PASS_EVERY),
                (false, Some(_)) => None,
            };
            let timer = async {
                match pause {
                    Some(pause) => tokio::time::sleep(pause).await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(timer);
            loop {
                tokio::select! {
                    () = &mut timer => break,
                    changed = published.changed() => {
                        if changed.is_err() {
                            return std::future::pending().await;
                        }
                        if published.borrow().renewals != renewals {
                            break;
                        }
                    }
                }
            }
        }
    }

    /// Sets until when the check may pass: the later of `before` (what was
    /// known before the current attempt) and `bound`.
    fn extend_passing(&self, before: Option<tokio::time::Instant>, bound: tokio::time::Instant) {
        if let Ok(mut until) = self.passing_until.lock() {
            *until = Some(before.map_or(bound, |b| b.max(bound)));
        }
    }

    /// Takes the holder out of the catalog, logging the outcome. When the
    /// agent does not take the deregistration, it waits until the check's
    /// TTL has run out since the last pass the agent took: the lock is
    /// then given up only once no passing instance of this holder is
    /// left for DNS to answer with (a wait of at most the TTL).
    pub async fn withdraw(&self) {
        let why = match self.deregister().await {
            Ok(()) => {
                tracing::info!(
                    target: EVENT,
                    service = self.name.as_str(),
                    "deregistered service `{}`",
                    self.name
                );
                return;
            }
            Err(why) => why,
        };
        let until = self.passing_until.lock().ok().and_then(|u| *u);
        let left = until.map(|u| u.saturating_duration_since(tokio::time::Instant::now()));
        match left.filter(|l| !l.is_zero()) {
            Some(left) => {
                tracing::warn!(
                    "could not deregister service `{}` at {}: {why}; keeping the lock {} more, until its check has gone critical, so that no client is sent here once the next holder runs (Consul removes it {REAP_AFTER} after)",
                    self.name,
                    self.agent,
                    fmt_duration(left)
                );
                tokio::time::sleep(left).await;
            }
            None => tracing::warn!(
                "could not deregister service `{}` at {}: {why}; its check is critical already, and Consul removes it {REAP_AFTER} after",
                self.name,
                self.agent
            ),
        }
    }

    /// One request to `/v1/` and `path`'s segments, each encoded as one.
    #[cfg(feature = "consul")]
    async fn send(
        &self,
        method: &str,
        path: &[&str],
        body: Option<serde_json::Value>,
        within: Duration,
    ) -> Result<String, String> {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut request = self.client.request(method, path).timeout(within);
        if let Some(body) = body {
            request = request.json(&body);
        }
        // In turn, and to its end even if the hold that sent it ends.
        let gate = self.gate.clone().lock_owned().await;
        let agent = self.client.clone();
        let exchange = async move {
            let _gate = gate;
            exchange(&agent, request, within).await
        };
        tokio::spawn(exchange)
            .await
            .unwrap_or_else(|e| Err(format!("request failed ({e})")))
    }

    #[cfg(not(feature = "consul"))]
    async fn send(
        &self,
        _method: &str,
        _path: &[&str],
        _body: Option<serde_json::Value>,
        _within: Duration,
    ) -> Result<String, String> {
        unreachable!("prepare refuses --register-service in a build without an HTTP client")
    }
}

/// One request and its answer, within `within`.
#[cfg(feature = "consul")]
async fn exchange(
    agent: &crate::backend::consul::Agent,
    request: reqwest::RequestBuilder,
    within: Duration,
) -> Result<String, String> {
    let answer = request.send().await.map_err(|e| {
        if e.is_timeout() {
            format!("did not answer within {}", fmt_duration(within))
        } else {
            agent.failure(&e)
        }
    })?;
    let status = answer.status();
    let text = answer.text().await.unwrap_or_default();
    if status.is_success() {
        Ok(text)
    } else {
        let text = text.trim();
        Err(format!(
            "answered {} ({})",
            status.as_u16(),
            text.lines().next().unwrap_or("")
        ))
    }
}

#[cfg(feature = "consul")]
fn client(agent: &str, env: &dyn Env) -> Result<crate::backend::consul::Agent, Failure> {
    crate::backend::consul::Agent::from_env(agent, env).map_err(|failure| match failure {
        Failure::Usage(why) => Failure::Usage(format!("--register-service: {why}")),
        Failure::Config(why) => Failure::Config(format!("--register-service: {why}")),
        other => other,
    })
}

#[cfg(not(feature = "consul"))]
fn client(_agent: &str, _env: &dyn Env) -> Result<(), Failure> {
    Err(Failure::Usage(
        "--register-service: this lockrun was built without the Consul backend (Cargo feature `consul`), whose client it speaks to the agent with; use a default build".into(),
    ))
}

/// A DNS label: what `NAME.service.consul` and `TAG.NAME.service.consul`
/// can resolve.
fn check_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

/// `NAME[:PORT]`.
fn parse_service(spec: &str) -> Result<(String, Option<u16>), String> {
    let (name, port) = match spec.split_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (spec, None),
    };
    if name.is_empty() {
        return Err(format!(
            "--register-service {spec:?}: the service name is empty; give one, e.g. --register-service db:5432"
        ));
    }
    if !check_label(name) {
        return Err(format!(
            "--register-service {spec:?}: a service name is a DNS label (letters, digits and inner '-', at most 63), so that {name}.service.consul can resolve; e.g. db-primary"
        ));
    }
    let port = match port {
        None => None,
        Some(port) => match port.parse::<u16>() {
            Ok(p) if p > 0 => Some(p),
            _ => {
                return Err(format!(
                    "--register-service {spec:?}: the port must be a number from 1 to 65535 (or leave out :PORT)"
                ))
            }
        },
    };
    Ok((name.to_string(), port))
}

fn check_tag(tag: &str) -> Result<(), String> {
    if tag.is_empty() {
        return Err(
            "--service-tag is empty; give a tag, e.g. --service-tag primary, or leave it out"
                .into(),
        );
    }
    if !check_label(tag) {
        return Err(format!(
            "--service-tag {tag:?}: a tag is a DNS label (letters, digits and inner '-', at most 63), so that {tag}.NAME.service.consul can resolve"
        ));
    }
    Ok(())
}

/// `HOST:PORT` or `http(s)://HOST:PORT` into the agent's base URL.
fn agent_url(addr: &str, from: &str) -> Result<String, Failure> {
    let addr = addr.trim();
    if addr.is_empty() {
        return Err(Failure::Usage(format!(
            "{from} is empty; give the Consul agent as HOST:PORT, e.g. 127.0.0.1:8500"
        )));
    }
    let (scheme, rest) = match addr.split_once("://") {
        Some((scheme @ ("http" | "https"), rest)) => (scheme, rest),
        Some(_) => {
            return Err(Failure::Usage(format!(
                "{from} {addr:?}: --register-service speaks to the agent over http:// or https:// only; give HOST:PORT"
            )))
        }
        None => ("http", addr),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty()
        || rest.starts_with(':')
        || rest.ends_with(':')
        || rest.contains(['/', '?', '#', '@'])
        || rest.contains(char::is_whitespace)
    {
        return Err(Failure::Usage(format!(
            "{from} {addr:?} is not HOST:PORT; e.g. 127.0.0.1:8500"
        )));
    }
    Ok(format!("{scheme}://{rest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_names_ports_and_tags_are_checked() {
        assert_eq!(parse_service("db").unwrap(), ("db".into(), None));
        assert_eq!(
            parse_service("db-primary:5432").unwrap(),
            ("db-primary".into(), Some(5432))
        );
        for bad in [
            "", ":5432", "db:", "db:0", "db:65536", "db:x", "d_b", "-db", "a.b",
        ] {
            assert!(parse_service(bad).is_err(), "{bad:?} accepted");
        }
        assert!(check_tag("primary").is_ok());
        for bad in ["", "a.b", "a b", "-x"] {
            assert!(check_tag(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn agent_addresses() {
        assert_eq!(
            agent_url("127.0.0.1:8500", "x").unwrap(),
            "http://127.0.0.1:8500"
        );
        assert_eq!(agent_url("https://a:8501/", "x").unwrap(), "https://a:8501");
        for bad in [
            "",
            " ",
            "unix:///run/consul.sock",
            "http://",
            "a:1/v1",
            ":8500",
            "a:",
        ] {
            assert!(agent_url(bad, "x").is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_ttl_lies_between_renewals_and_the_stop() {
        use crate::clock::Ppm;
        let budget = Budget {
            ttl: Duration::from_secs(5),
            rival_delay: Duration::ZERO,
            kill_timeout: Duration::from_millis(700),
            ends_early: false,
            rate_error: Ppm::DEFAULT,
        };
        let ttl = Catalog::ttl(Some(&budget));
        assert!(ttl > budget.renew_every(), "{ttl:?}");
        assert!(ttl < budget.stop_after(), "{ttl:?}");
        assert_eq!(Catalog::ttl(None), NO_LEASE_TTL);
    }
}
