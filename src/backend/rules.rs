//! Rules every backend's hold rules share: a default grace period that
//! shrinks to fit, and the budget of a lease with no delay after it.

use std::time::Duration;

use super::priority::Priority;
use super::{HoldRequest, HoldRules};
use crate::backend::timing::Budget;
use crate::duration::flag_duration;
use crate::error::Failure;

/// The longest TTL any backend takes.
pub const TTL_MAX: Duration = Duration::from_secs(24 * 3600);

/// The user chose the TTL (or lock-delay), not the grace period: a default
/// `--kill-timeout` that does not fit shrinks to what they leave room for,
/// and says so under `-v`. One the user typed is left for `check` to refuse.
pub fn fit_default_grace(budget: &mut Budget, typed: bool, settings: &str) {
    if !typed && budget.check().is_err() {
        if let Some(max) = budget.max_kill_timeout() {
            tracing::info!(
                "--kill-timeout defaults to {} to fit {settings}",
                flag_duration(max)
            );
            budget.kill_timeout = max;
        }
    }
}

/// A lease with no delay after it: a TTL in whole seconds, and a budget in
/// which a rival takes the lock as soon as the lease runs out. etcd's lease
/// is one; PostgreSQL's is the same shape: the server gives up on a silent
/// connection (its TCP keepalive and `tcp_user_timeout`, whole seconds) the
/// TTL after the last data it received from us, and frees the lock at once.
/// `what` names the TTL and `expires` says when a rival comes, for the
/// messages. The plan carries the TTL, checked here only, to the backend's
/// client ([`super::Backend::prepare`]) and the priority to its engine.
pub fn plain_lease<H>(
    request: &HoldRequest<'_, H>,
    what: &str,
    expires: &str,
) -> Result<HoldRules<LeasePlan>, Failure> {
    let ttl = request.ttl;
    if ttl < Duration::from_secs(1) || ttl.subsec_nanos() != 0 || ttl > TTL_MAX {
        return Err(Failure::Usage(format!(
            "--ttl {} is not {what}; use whole seconds from 1s to 24h, e.g. --ttl 15s",
            flag_duration(ttl)
        )));
    }
    let mut budget = Budget {
        ttl,
        rival_delay: Duration::ZERO,
        kill_timeout: request
            .kill_timeout
            .unwrap_or(request.kind.default_kill_timeout),
        ends_early: false,
        rate_error: request.rate_error,
    };
    fit_default_grace(
        &mut budget,
        request.kill_timeout.is_some(),
        &format!("--ttl {}", flag_duration(ttl)),
    );
    budget.check().map_err(|message| {
        let Some(max) = budget.max_kill_timeout() else {
            // The clock-rate bound leaves nothing, whatever the grace.
            return Failure::Usage(message);
        };
        Failure::Usage(format!(
            "--kill-timeout {} is too long for --ttl {}: {expires}, so the child must be dead by then; use --kill-timeout {} or less, or a longer --ttl",
            flag_duration(budget.kill_timeout),
            flag_duration(ttl),
            flag_duration(max),
        ))
    })?;
    let budget = crate::backend::timing::fit_this_host(budget).map_err(Failure::Config)?;
    Ok(HoldRules {
        budget: Some(budget),
        kill_timeout: budget.kill_timeout,
        plan: LeasePlan {
            ttl,
            priority: request.kind.priority,
        },
    })
}

/// The hold settings of a lease with no delay after it
/// ([`plain_lease`]): the TTL the client asks for, and how its waits rank.
#[derive(Debug, Clone, Copy)]
pub struct LeasePlan {
    pub ttl: Duration,
    pub priority: Priority,
}
