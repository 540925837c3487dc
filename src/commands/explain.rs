//! `lockrun explain elect|semaphore ...`: the timing promise that a run with
//! these flags would keep, worked out by the same validation and the same
//! [`Budget`] the run uses, and printed without contacting any engine.

use std::ffi::OsString;
use std::time::Duration;

use serde_json::json;

use crate::backend::registry::Pick;
use crate::backend::timing::Budget;
use crate::backend::{Backend, PromiseText};
use crate::cli::{ChildArgs, ExplainArgs, ExplainWhat};
use crate::clock::{self, ClockState, Ppm};
use crate::config::{self, Env, Kind};
use crate::duration::fmt_duration;
use crate::error::Failure;
use crate::exit::Exit;

/// What `explain` prints: the flags' promise on one backend.
struct Promise {
    backend: &'static str,
    /// The engine's own tool, as the assumptions name it.
    peer: &'static str,
    /// The backend's own words for its promise.
    text: PromiseText,
    kind: Kind,
    key: String,
    budget: Option<Budget>,
    /// `--clock-rate-error` as given (the budget's may be widened for this
    /// host's clock).
    rate_bound: Ppm,
    /// How the kernel steers this host's clock now, where it says.
    clock: Option<ClockState>,
    kill_timeout: Duration,
    kill_signal: String,
    /// `--warn-before`, checked against the budget.
    warning: Option<crate::ops::Warning>,
    /// COMMAND when one was given: checked as a run would, never started.
    command: Option<Vec<String>>,
    /// `--register-service`'s name, checked as a run would; no agent is
    /// asked.
    service: Option<String>,
}

pub fn run<B: Backend>(pick: &Pick<B>, args: ExplainArgs, env: &dyn Env) -> Result<Exit, Failure> {
    let json = args.json;
    let promise = match args.what {
        ExplainWhat::Elect(mut a) => {
            let command = runnable(&mut a.child);
            let (config, _) = config::hold(
                pick,
                config::Kind {
                    shared: a.shared,
                    priority: a.priority()?,
                    ..config::LEADER
                },
                &a.key,
                &a.session,
                &a.wait,
                &a.child,
                env,
            )?;
            crate::hold::Service::new(&a.service)?;
            let warning = warning(&a.ops, &config)?;
            let service = service(&a.ops, env)?;
            let bound = a.session.clock_rate_error;
            promise::<B>(config::LEADER, a.key, bound, &config, warning, command)
                .with_service(service)
        }
        ExplainWhat::Semaphore(mut a) => {
            let command = runnable(&mut a.child);
            let prefix = a.prefix.strip_suffix('/').unwrap_or(&a.prefix).to_string();
            let (config, _) = config::hold(
                pick,
                config::SEMAPHORE,
                &prefix,
                &a.session,
                &a.wait,
                &a.child,
                env,
            )?;
            crate::hold::Service::new(&a.service)?;
            let warning = warning(&a.ops, &config)?;
            let service = service(&a.ops, env)?;
            let bound = a.session.clock_rate_error;
            promise::<B>(config::SEMAPHORE, prefix, bound, &config, warning, command)
                .with_service(service)
        }
    };
    let text = if json {
        promise.json().to_string()
    } else {
        promise.text()
    };
    crate::exit::write_stdout(format!("{text}\n").as_bytes());
    Ok(Exit::Success)
}

/// `--warn-before`, refused as `elect` and `semaphore` refuse it.
fn warning(
    ops: &crate::ops::OpsArgs,
    config: &config::HoldConfig,
) -> Result<Option<crate::ops::Warning>, Failure> {
    let warning = crate::ops::Warning::from_args(ops)?;
    if let Some(w) = &warning {
        w.check(config.budget.as_ref())?;
    }
    Ok(warning)
}

/// `--register-service`, refused as `elect` and `semaphore` refuse it.
fn service(ops: &crate::ops::OpsArgs, env: &dyn Env) -> Result<Option<String>, Failure> {
    let catalog = crate::ops::catalog::Catalog::prepare(&ops.catalog, env)?;
    Ok(catalog.map(|c| c.name().to_string()))
}

/// COMMAND is optional here: without one we validate as if a shell ran
/// `:`, which every check accepts, since no command is ever started. One
/// given (a run's line with `explain` put in front) is checked as the run
/// would check it, and named in the explanation: its words.
fn runnable(child: &mut ChildArgs) -> Option<Vec<String>> {
    if child.command.is_empty() {
        child.shell = true;
        child.command = vec![OsString::from(":")];
        return None;
    }
    Some(
        child
            .command
            .iter()
            .map(|w| w.to_string_lossy().escape_debug().to_string())
            .collect(),
    )
}

fn promise<B: Backend>(
    kind: Kind,
    key: String,
    rate_bound: Ppm,
    c: &config::HoldConfig,
    warning: Option<crate::ops::Warning>,
    command: Option<Vec<String>>,
) -> Promise {
    let ends_early = c.budget.is_some_and(|b| b.ends_early);
    Promise {
        backend: B::NAME,
        peer: B::REGISTRATION.peer.tool,
        text: B::promise(kind.lock, ends_early),
        kind,
        key,
        budget: c.budget,
        rate_bound,
        clock: c.budget.and_then(|_| clock::state()),
        kill_timeout: c.child.kill_timeout,
        kill_signal: c.child.kill_signal.name().to_string(),
        warning,
        command,
        service: None,
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

impl Promise {
    fn with_service(self, service: Option<String>) -> Promise {
        Promise { service, ..self }
    }

    /// What `--register-service` does, in words.
    fn catalog(&self) -> Option<String> {
        let name = self.service.as_ref()?;
        let ttl = crate::ops::catalog::Catalog::ttl(self.budget.as_ref());
        let when = match self.budget {
            Some(b) => format!(
                "its TTL check ({}) passed only after a confirmed renewal, and only while the pass reaches the agent in time for the check to go critical before the kill signal ({} after the send time of the last confirmed renewal)",
                fmt_duration(ttl),
                fmt_duration(b.stop_after())
            ),
            None => format!(
                "its TTL check ({}) passed every {} while lockrun runs",
                fmt_duration(ttl),
                fmt_duration(crate::ops::catalog::NO_LEASE_PASS_EVERY)
            ),
        };
        Some(format!(
            "service `{name}` registered as COMMAND is started, {when}; deregistered before the {} is given up. Routing only: DNS answers lag, and fencing is what keeps writes safe",
            self.what()
        ))
    }

    fn lock(&self) -> bool {
        self.kind.lock
    }

    fn what(&self) -> &'static str {
        if self.lock() {
            "lock"
        } else {
            "semaphore slot"
        }
    }

    /// When a rival may acquire, in words, per backend.
    fn rival_rule(&self) -> &'static str {
        self.text.rival
    }

    fn on_release(&self) -> &'static str {
        self.text.release
    }

    fn on_lost_state(&self) -> &'static str {
        self.text.lost_state
    }

    fn assumptions(&self) -> Vec<String> {
        let mut list = Vec::new();
        if let Some(b) = self.budget {
            list.push(format!(
                "the combined rate error of this host's clock and the engine's stays within --clock-rate-error {} (lockrun's clock slower than the engine's by at most that; the margin tolerates {:.1}%): this host's half is checked with adjtimex at start and at every renewal, and the engine's host must keep the other half",
                self.rate_bound,
                b.tolerated_rate_error() * 100.0
            ));
            list.push(format!(
                "the whole host (lockrun and its guard together: a frozen cgroup, a paused VM, SIGSTOP to both) never stops for longer than the margin, {}; against that, use --notify with WatchdogSec=, a hardware watchdog, or fencing",
                fmt_duration(b.slack())
            ));
        }
        list.extend(self.text.engine.iter().map(|line| line.to_string()));
        list.push(format!(
            "every contender uses lockrun or {} on the same KEY and backend",
            self.peer
        ));
        list
    }

    fn json(&self) -> serde_json::Value {
        let b = self.budget;
        let d = |f: fn(&Budget) -> Duration| b.map(|b| ms(f(&b)));
        json!({
            "backend": self.backend,
            "kind": if self.lock() { "lock" } else { "semaphore" },
            "key": self.key,
            "command": self.command,
            "ttl_ms": b.map(|b| ms(b.ttl)),
            "lock_delay_ms": b.map(|b| ms(b.rival_delay)),
            "checks": b.map(|b| b.ends_early),
            "kill_signal": self.kill_signal,
            "kill_timeout_ms": ms(self.kill_timeout),
            "renew_every_ms": d(Budget::renew_every),
            "kill_signal_after_ms": d(Budget::stop_after),
            "warning_after_ms": b
                .zip(self.warning)
                .map(|(b, w)| ms(b.stop_after().saturating_sub(w.before))),
            "killed_by_ms": d(Budget::killed_by),
            "rival_after_ms": d(Budget::rival_after),
            "margin_ms": d(Budget::slack),
            "tolerated_rate_error_ppm": b.map(|b| (b.tolerated_rate_error() * 1e6).round() as u64),
            "clock_rate_error_ppm": b.map(|_| self.rate_bound.0),
            "applied_rate_error_ppm": b.map(|b| b.rate_error.0),
            "rate_margin_ms": d(Budget::rate_margin),
            "scheduling_ms": d(Budget::scheduling),
            "clock": self.clock.map(|c| json!({
                "steering_ppm": c.steering_ppm(),
                "freq_ppm": c.freq_ppm,
                "tick_ppm": c.tick_ppm,
                "pll_ppm": c.pll_ppm,
                "adjtime_ppm": c.adjtime_ppm,
                "synchronised": !c.unsync,
                "slowing_ppm": c.slowing().0,
                "share_ppm": self.rate_bound.0 / 2,
            })),
            "loss_grace_ms": d(Budget::loss_grace),
            "rival_rule": self.rival_rule(),
            "on_release": self.on_release(),
            "on_lost_state": self.on_lost_state(),
            "assumptions": self.assumptions(),
            "service": self.service,
            "service_check_ttl_ms": self.service.as_ref().map(|_| ms(crate::ops::catalog::Catalog::ttl(self.budget.as_ref()))),
        })
    }

    fn text(&self) -> String {
        let mut out = format!(
            "lockrun {}: {} `{}` on the {} backend\n",
            if self.lock() { "elect" } else { "semaphore" },
            self.what(),
            self.key,
            self.backend
        );
        let line = |out: &mut String, label: &str, value: String| {
            out.push_str(&format!("  {label:<22}{value}\n"));
        };
        if let Some(words) = &self.command {
            line(
                &mut out,
                "command",
                format!("`{}`, found; explain runs nothing", words.join(" ")),
            );
        }
        match self.budget {
            Some(b) => {
                let t0 = "after the send time of the last confirmed renewal";
                line(
                    &mut out,
                    "renewal",
                    format!("every {}", fmt_duration(b.renew_every())),
                );
                if let Some(w) = self.warning {
                    let signal = w
                        .signal
                        .map_or(String::new(), |s| format!("SIG{} to the job, ", s.name()));
                    line(
                        &mut out,
                        "jeopardy",
                        format!(
                            "{signal}--on-jeopardy and /status {} {t0} (--warn-before {})",
                            fmt_duration(b.stop_after().saturating_sub(w.before)),
                            fmt_duration(w.before)
                        ),
                    );
                }
                line(
                    &mut out,
                    "kill signal",
                    format!(
                        "SIG{} {} {t0}",
                        self.kill_signal,
                        fmt_duration(b.stop_after())
                    ),
                );
                line(
                    &mut out,
                    "command gone by",
                    format!(
                        "{} {t0} (SIGKILL after --kill-timeout {})",
                        fmt_duration(b.killed_by()),
                        fmt_duration(b.kill_timeout)
                    ),
                );
                line(
                    &mut out,
                    "earliest rival",
                    format!(
                        "{} {t0}: {}",
                        fmt_duration(b.rival_after()),
                        self.rival_rule()
                    ),
                );
                line(
                    &mut out,
                    "margin",
                    format!(
                        "{} (needed: {} for clocks {} apart, {} for late timers), which tolerates a combined clock-rate error of {:.1}% ({} ppm)",
                        fmt_duration(b.slack()),
                        fmt_duration(b.rate_margin()),
                        b.rate_error.percent(),
                        fmt_duration(b.scheduling()),
                        b.tolerated_rate_error() * 100.0,
                        (b.tolerated_rate_error() * 1e6).round() as u64
                    ),
                );
                let widened = if b.rate_error == self.rate_bound {
                    String::new()
                } else {
                    format!(
                        "; widened to {} for this host's clock",
                        b.rate_error.percent()
                    )
                };
                line(
                    &mut out,
                    "clock-rate bound",
                    format!(
                        "{} combined (--clock-rate-error), {} ppm of it this host's share{widened}",
                        self.rate_bound,
                        self.rate_bound.0 / 2
                    ),
                );
                line(
                    &mut out,
                    "this host's clock",
                    match &self.clock {
                        Some(c) => format!("{}; slowed by {} ppm", c.describe(), c.slowing().0),
                        None => "unknown (adjtimex refused)".to_string(),
                    },
                );
                line(
                    &mut out,
                    "grace on a loss",
                    format!(
                        "{} before SIGKILL when the engine reports the {} lost",
                        fmt_duration(b.loss_grace()),
                        self.what()
                    ),
                );
            }
            None => {
                line(
                    &mut out,
                    "renewal",
                    "none: the lock lives as long as the guard".into(),
                );
                line(
                    &mut out,
                    "command gone by",
                    format!(
                        "SIG{} when asked to stop, SIGKILL {} later; the lock is kept until then",
                        self.kill_signal,
                        fmt_duration(self.kill_timeout)
                    ),
                );
                line(&mut out, "earliest rival", self.rival_rule().into());
            }
        }
        if let Some(catalog) = self.catalog() {
            line(&mut out, "service catalog", catalog);
        }
        line(&mut out, "on release", self.on_release().into());
        line(&mut out, "on lost state", self.on_lost_state().into());
        out.push_str("assumptions:\n");
        for a in self.assumptions() {
            out.push_str(&format!("  - {a}\n"));
        }
        out.pop();
        out
    }
}
