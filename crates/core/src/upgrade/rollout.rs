//! Rollout: which instance is brought up to date next, and how.
//!
//! An instance is stale when its manager reports another hash than
//! `status.operatorExecutableHash`, or when its platform reports it
//! outdated (`Observed::outdated`: on Kubernetes, its Pod was made from
//! another definition than the Cluster now declares, say another server
//! image). An outdated instance can only be recreated; a manager-only one
//! may be upgraded in place. One instance moves at a time, and only
//! while every other instance in service is ready and caught up (the health
//! gate): stale replicas in ascending ordinal, the primary last. Fenced and
//! diverged instances are out of service: skipped, their hash ignored until
//! they return.
//!
//! - In place (`inPlaceInstanceManagerUpdates`): the new executable is
//!   streamed to the manager, which re-execs and adopts its running mysqld;
//!   the primary is treated like any replica.
//! - Rolling (default): the instance is recreated (its Pod deleted, locally
//!   its processes stopped and started from the new executable). A stale
//!   primary of a multi-instance cluster is first switched over to a
//!   healthy replica (`primaryUpdateMethod: switchover`), or restarted in
//!   place when none exists or with `primaryUpdateMethod: restart`; a single
//!   instance always restarts in place. `primaryUpdateStrategy: supervised`
//!   stops the whole rollout while the primary is stale, until a human
//!   switches over.
//!
//! Annotation-driven upgrades (`annotated.rs`) go through here too:
//! an instance with an attempt under way has its own target (the manager
//! hash it was asked to run, in place from the operator or a file; the
//! server image it was pinned to) and always moves; under
//! `instanceUpdateStrategy: manual`, or while the Cluster's orchestrated
//! upgrade runs, no other instance moves by itself ([`Next::Held`]).
//!
//! [`next`] is pure; `reconcile.rs` turns its answer into actions, events
//! and the phase.

use cnmysql_api::{PrimaryUpdateMethod, PrimaryUpdateStrategy};

use crate::status::Snapshot;
pub use crate::upgrade::annotations::Source;
use crate::upgrade::gates::{InFlight, instances_healthy, settled_primary, switchover_target};

/// An instance given a step is not given another for this long unless it
/// reports the target hash: an upgrade that did not take (an exec that
/// failed, a recreated instance that never came back) is retried after it.
pub const STEP_RETRY_MS: i64 = 60_000;

/// What the rollout does now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Every instance in service runs the target (or there is no target).
    Current,
    /// Stale instances remain, but nothing may move now.
    Wait { reason: String, stale: Vec<String> },
    /// Give `instance` a new executable in place (streamed from the
    /// control plane, or a file on the instance's filesystem); it
    /// re-execs, mysqld keeps running.
    InPlace {
        instance: String,
        source: Source,
        stale: Vec<String>,
    },
    /// Stale instances remain, and none of them may move by itself
    /// (`instanceUpdateStrategy: manual`, or the Cluster's orchestrated
    /// upgrade runs): each waits for a `cnmysql.io/upgrade-to` annotation.
    Held { reason: String, stale: Vec<String> },
    /// Recreate `instance` from the new executable and the Cluster's
    /// current definition. `primary`: it is the primary, restarted in place
    /// (failover must not treat its absence as a failure while it comes
    /// back).
    Recreate {
        instance: String,
        primary: bool,
        stale: Vec<String>,
        /// Why the primary is restarted rather than switched over.
        note: Option<String>,
        /// What of its definition changes (None: only its manager).
        change: Option<String>,
    },
    /// Switch the stale primary over to `to` first.
    Switchover {
        from: String,
        to: String,
        stale: Vec<String>,
        /// What of the primary's definition changes (None: only its
        /// manager).
        change: Option<String>,
    },
    /// `primaryUpdateStrategy: supervised`: nothing moves until a human
    /// switches the primary over.
    WaitingForUser { primary: String, message: String },
}

impl Next {
    /// The stale instances this answer counts (empty when current).
    pub fn stale(&self) -> &[String] {
        match self {
            Next::Current | Next::WaitingForUser { .. } => &[],
            Next::Held { stale, .. }
            | Next::Wait { stale, .. }
            | Next::InPlace { stale, .. }
            | Next::Recreate { stale, .. }
            | Next::Switchover { stale, .. } => stale,
        }
    }

    /// The phase reason while the rollout runs.
    pub fn reason(&self) -> Option<String> {
        let of = |stale: &[String]| format!("{} remaining", stale.len());
        match self {
            Next::Current | Next::Held { .. } => None,
            Next::Wait { reason, stale } => Some(format!("{reason} ({})", of(stale))),
            Next::InPlace {
                instance, stale, ..
            }
            | Next::Recreate {
                instance,
                stale,
                change: None,
                ..
            } => Some(format!(
                "Upgrading instance manager on {instance} ({})",
                of(stale)
            )),
            Next::Recreate {
                instance,
                stale,
                change: Some(change),
                ..
            } => Some(format!("Updating {instance}: {change} ({})", of(stale))),
            Next::Switchover {
                from,
                to,
                stale,
                change,
            } => Some(format!(
                "{} on {from}: switching over to {to} first ({})",
                match change {
                    None => "Upgrading instance manager".to_string(),
                    Some(c) => format!("Updating {c}"),
                },
                of(stale)
            )),
            Next::WaitingForUser { message, .. } => Some(message.clone()),
        }
    }
}

/// The hash of the executable an instance's manager runs: its answer, or
/// for an unreachable instance its last report.
pub fn manager_hash<'a>(s: &'a Snapshot, name: &str) -> Option<&'a str> {
    s.get(name)
        .and_then(|o| o.status.as_ref())
        .map(|st| st.executable_hash.as_str())
        .or_else(|| {
            s.status
                .executable_hash_by_instance
                .get(name)
                .map(String::as_str)
        })
}

/// Whether an instance's manager runs its target executable: the one an
/// annotation pins for it, else the operator's (None when either hash is
/// unknown).
pub fn is_current(s: &Snapshot, name: &str) -> Option<bool> {
    // A file asked for without its hash: its target is known once the
    // manager has hashed it, on the attempt.
    if crate::upgrade::annotated::in_place_source(s, name).is_some()
        && crate::upgrade::annotated::pinned_hash(s, name).is_none()
    {
        return Some(false);
    }
    let target = crate::upgrade::annotated::pinned_hash(s, name)
        .or(s.status.operator_executable_hash.as_deref())?;
    Some(manager_hash(s, name)? == target)
}

/// Whether the rollout may move `name` now: an annotation-driven attempt
/// under way always; otherwise only under `instanceUpdateStrategy:
/// automatic`, while no orchestrated upgrade runs, and not while an
/// annotation pins it (a failed attempt waiting for its retry, or a
/// manager it was asked to run).
pub fn movable(s: &Snapshot, name: &str) -> bool {
    use crate::upgrade::annotated as iu;
    use crate::upgrade::annotations::Status;
    if iu::in_progress(s, name) {
        return true;
    }
    let pinned = iu::record(s, name).is_some_and(|r| {
        Status::parse(&r.status) == Some(Status::Failed) || iu::pinned_hash(s, name).is_some()
    });
    !pinned && automatic(s)
}

/// Whether instances move by themselves now.
fn automatic(s: &Snapshot) -> bool {
    s.spec.instance_update_strategy == cnmysql_api::InstanceUpdateStrategy::Automatic
        && crate::upgrade::gates::orchestration_under_way(s).is_none()
}

/// What of `name`'s definition its platform reports changed, if anything.
pub fn outdated<'a>(s: &'a Snapshot, name: &str) -> Option<&'a str> {
    s.get(name).and_then(|o| o.outdated.as_deref())
}

/// Whether `name` still needs a rollout step: another manager than the
/// target, or an outdated definition.
pub fn is_stale(s: &Snapshot, name: &str) -> bool {
    outdated(s, name).is_some() || is_current(s, name) == Some(false)
}

/// The next rollout step for this snapshot. `in_flight`: instances given a
/// step within [`STEP_RETRY_MS`] (their step is not repeated meanwhile).
/// `consent`: under the supervised strategy, a human switched the primary
/// over while this rollout waited: it goes on to the end.
pub fn next(s: &Snapshot, in_flight: &InFlight, consent: bool) -> Next {
    let stale = match stale_to_move(s) {
        Ok(stale) => stale,
        Err(next) => return next,
    };
    let title = if stale.iter().any(|n| outdated(s, n).is_some()) {
        "Updating instances"
    } else {
        "Upgrading instance managers"
    };
    let wait = |reason: String| Next::Wait {
        reason: format!("{title}: {reason}"),
        stale: stale.clone(),
    };
    // A server upgrade that failed part way stops every rollout where it is.
    if let Some(hold) = crate::upgrade::server::advance(s).hold {
        return wait(hold);
    }
    // Instances are restarted only inside the maintenance window.
    if let Err(e) = crate::upgrade::window::check(s.spec.maintenance_window.as_ref(), s.now_ms) {
        return wait(e);
    }
    let current = match settled_primary(s) {
        Ok(p) => p,
        Err(e) => return wait(e),
    };
    let primary_stale = stale.iter().any(|n| n == current);
    // In place only applies to a new manager: a changed definition means
    // a new Pod.
    let primary_change = outdated(s, current).map(str::to_string);
    // Supervised: not even a stale replica moves while the primary is stale.
    if primary_stale
        && !in_place(s, current)
        && !consent
        && s.spec.instances > 1
        && s.spec.primary_update_strategy == PrimaryUpdateStrategy::Supervised
    {
        let what = match &primary_change {
            Some(c) => format!("is outdated ({c})"),
            None => "runs an old instance manager".to_string(),
        };
        return Next::WaitingForUser {
            primary: current.to_string(),
            message: format!(
                "the primary {current} {what} and primaryUpdateStrategy is supervised: switch over to an up-to-date replica to continue the rollout"
            ),
        };
    }
    // A step in flight is not repeated until it has had time to finish.
    let recent = |n: &str| {
        in_flight
            .get(n)
            .is_some_and(|t| s.now_ms - t < STEP_RETRY_MS)
    };
    // An outdated replica that is down anyway (say the new image does not
    // start, and the Cluster has since been corrected) is recreated even
    // though it is not ready: that takes nothing else down, and waiting for
    // it would wait forever.
    let down = stale.iter().find(|n| {
        *n != current && outdated(s, n).is_some() && !s.get(n).is_some_and(|o| o.ready())
    });
    // The health gate: every (other) instance in service is reachable,
    // ready and caught up before another one is touched — unless the
    // force annotation says to go on (one instance at a time still).
    if !s.declared.force_rollout
        && let Err(e) = instances_healthy(s, current, down.map(String::as_str))
    {
        return wait(e);
    }
    if let Some(n) = down.filter(|n| !recent(n)) {
        return Next::Recreate {
            instance: n.clone(),
            primary: false,
            change: outdated(s, n).map(str::to_string),
            stale,
            note: None,
        };
    }
    if let Some(n) = stale.iter().find(|n| recent(n)) {
        return wait(match outdated(s, n) {
            Some(c) => format!("waiting for {n} to come back updated ({c})"),
            None => format!("waiting for {n} to report the new manager"),
        });
    }
    // Replicas first, in ascending ordinal.
    if let Some(replica) = stale.iter().find(|n| *n != current) {
        return if in_place(s, replica) {
            Next::InPlace {
                instance: replica.clone(),
                source: source(s, replica),
                stale,
            }
        } else {
            Next::Recreate {
                instance: replica.clone(),
                primary: false,
                change: outdated(s, replica).map(str::to_string),
                stale,
                note: None,
            }
        };
    }
    primary_step(s, current, stale, primary_change)
}

/// The stale instances that may move now, in ascending ordinal; or, when
/// none may, what the rollout says (current, or held and why).
fn stale_to_move(s: &Snapshot) -> Result<Vec<String>, Next> {
    let out_of_service = |n: &str| s.is_fenced(n) || s.is_diverged(n);
    let mut members: Vec<_> = s
        .instances
        .iter()
        .filter(|o| !out_of_service(&o.name))
        .collect();
    members.sort_by_key(|o| o.ordinal);
    let stale: Vec<String> = members
        .iter()
        .filter(|o| is_stale(s, &o.name))
        .map(|o| o.name.clone())
        .collect();
    if stale.is_empty() {
        return Err(Next::Current);
    }
    // Only the movable move; a down instance no annotation holds is
    // repaired whatever the strategy.
    let repair = |n: &str| {
        outdated(s, n).is_some()
            && crate::upgrade::annotated::record(s, n).is_none()
            && !s.get(n).is_some_and(|o| o.ready())
    };
    let all_stale = stale.clone();
    let stale: Vec<String> = stale
        .into_iter()
        .filter(|n| movable(s, n) || repair(n))
        .collect();
    if stale.is_empty() {
        let why = if s.spec.instance_update_strategy == cnmysql_api::InstanceUpdateStrategy::Manual
        {
            "instanceUpdateStrategy is manual"
        } else if crate::upgrade::gates::orchestration_under_way(s).is_some() {
            "the Cluster's orchestrated upgrade runs"
        } else {
            "their upgrade annotations hold them"
        };
        return Err(Next::Held {
            reason: format!(
                "{} out of date ({}); {why}: each moves when {} asks",
                all_stale.len(),
                all_stale.join(", "),
                crate::upgrade::annotations::UPGRADE_TO
            ),
            stale: all_stale,
        });
    }
    Ok(stale)
}

/// Whether `n` is upgraded in place: asked so by annotation, or a new
/// manager where the spec says so (a changed definition needs a new Pod).
fn in_place(s: &Snapshot, n: &str) -> bool {
    crate::upgrade::annotated::in_place_source(s, n).is_some()
        || (s.spec.in_place_instance_manager_updates && outdated(s, n).is_none())
}

/// Where an in-place upgrade of `n` takes its executable from.
fn source(s: &Snapshot, n: &str) -> Source {
    crate::upgrade::annotated::in_place_source(s, n).unwrap_or(Source::Operator)
}

/// The primary's step, once only it is stale: in place, restarted, or a
/// switchover first.
fn primary_step(
    s: &Snapshot,
    current: &str,
    stale: Vec<String>,
    primary_change: Option<String>,
) -> Next {
    // Only the primary is left.
    let primary = current.to_string();
    if in_place(s, current) {
        return Next::InPlace {
            source: source(s, current),
            instance: primary,
            stale,
        };
    }
    let restart = |note: Option<String>| Next::Recreate {
        instance: current.to_string(),
        primary: true,
        stale: stale.clone(),
        note,
        change: primary_change.clone(),
    };
    if s.spec.instances <= 1 {
        return restart(Some("a single instance is restarted in place".into()));
    }
    if s.spec.primary_update_method == PrimaryUpdateMethod::Restart {
        return restart(Some("primaryUpdateMethod is restart".into()));
    }
    match switchover_target(s, current, &[]) {
        Some(to) => Next::Switchover {
            from: primary,
            to,
            stale,
            change: primary_change.clone(),
        },
        None => restart(Some(
            "no healthy replica to switch over to: restarting the primary in place".into(),
        )),
    }
}

#[cfg(test)]
mod tests;
