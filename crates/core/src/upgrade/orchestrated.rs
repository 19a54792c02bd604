//! The whole-cluster upgrade asked by `cnmysql.io/upgrade-to` on the
//! Cluster: its instances are marked with the same annotation one at a
//! time, in rollout order (replicas in ascending ordinal, the primary
//! last), each once the one before reports `done` and the cluster is
//! healthy. The first `failed` stops it (the instance itself goes on
//! retrying while its annotation stays); fenced and diverged instances are
//! skipped and named. It never runs beside a declared server upgrade or an
//! automatic rollout: the one that comes second waits, with the reason,
//! until the first ends.
//!
//! The record is `status.orchestratedUpgrade`, mirrored on the Cluster as
//! `cnmysql.io/upgrade-status` and `cnmysql.io/upgrade-release`.

use std::collections::BTreeMap;

use cnmysql_api::{OrchestratedUpgrade, UpgradePhase};

use crate::event::Event;
use crate::status::Snapshot;
use crate::time::timestamp;
use crate::upgrade::annotations::{
    LAST_FAILED_ATTEMPT_AT, Status, UPGRADE_RELEASE, UPGRADE_STATUS, UPGRADE_TO, parse,
};

/// What the orchestrator does now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Orchestration {
    /// The record from now on, when it changes (`Some(None)`: removed).
    pub record: Option<Option<OrchestratedUpgrade>>,
    /// Mark this instance with `upgrade-to` = this value.
    pub mark: Option<(String, String)>,
    /// The Cluster's annotations to set (Some) or remove (None).
    pub annotate: BTreeMap<String, Option<String>>,
    pub event: Option<Event>,
}

/// Why the orchestration may not run now. `rollout_busy`: the automatic
/// rollout moves instances (say, to a new operator executable).
fn conflict(s: &Snapshot, rollout_busy: Option<&str>) -> Option<String> {
    if let Some(r) = s
        .status
        .upgrade_history
        .last()
        .filter(|r| matches!(r.phase, UpgradePhase::Pending | UpgradePhase::Upgrading))
    {
        return Some(format!(
            "the declared server upgrade to {} is {}; this one starts by itself once it ends",
            r.version,
            r.phase.as_str()
        ));
    }
    rollout_busy.map(|b| format!("{b}; this one starts by itself once it ends"))
}

/// The orchestrator's pass. `rollout_busy`: what the automatic rollout is
/// doing, when it moves instances.
pub fn pass(s: &Snapshot, rollout_busy: Option<&str>) -> Orchestration {
    let mut out = Orchestration::default();
    let asked = &s.declared.asked;
    let rec = s.status.orchestrated_upgrade.as_ref();
    let at = timestamp(s.now_ms);
    let Some(value) = asked
        .cluster
        .get(UPGRADE_TO)
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
    else {
        if let Some(r) = rec.filter(|r| r.status != Status::Done.as_str()) {
            out.record = Some(None);
            out.event = Some(Event::new(
                true,
                "OrchestratedUpgradeCancelled",
                None,
                format!(
                    "{UPGRADE_TO} was removed from the Cluster: the upgrade to {} marks no more instances (those marked keep their annotation)",
                    r.upgrade_to
                ),
            ));
            out.annotate = mirror(&asked.cluster, None);
        }
        return out;
    };
    let base = rec
        .filter(|r| r.upgrade_to == value)
        .cloned()
        .unwrap_or_else(|| OrchestratedUpgrade {
            upgrade_to: value.to_string(),
            start_time: Some(at.clone()),
            ..Default::default()
        });
    let mut next = base.clone();
    if let Err(why) = parse(value) {
        set(&mut next, Status::Failed, None, why);
    } else if let Some(why) =
        conflict(s, rollout_busy).filter(|_| base.status != Status::InProgress.as_str())
    {
        set(&mut next, Status::Failed, None, format!("refused: {why}"));
    } else {
        walk(s, value, &base, &mut next, &mut out.mark);
    }
    if next.status != Status::Done.as_str() {
        next.complete_time = None;
    }
    if Some(&next) != rec {
        let changed = rec.is_none_or(|r| {
            r.upgrade_to != next.upgrade_to
                || r.status != next.status
                || r.instance != next.instance
        });
        if changed {
            let warning = next.status == Status::Failed.as_str();
            let reason = match next.status.as_str() {
                "done" => "OrchestratedUpgradeDone",
                "failed" => "OrchestratedUpgradeFailed",
                _ => "OrchestratedUpgrade",
            };
            let mut message = format!("{UPGRADE_TO}={value}: {}", next.message);
            if !next.skipped.is_empty() && next.status != Status::Done.as_str() {
                message.push_str(&format!(" (skipped: {})", next.skipped.join(", ")));
            }
            out.event = Some(Event::new(
                warning,
                reason,
                next.instance.as_deref(),
                message,
            ));
        }
        out.record = Some(Some(next.clone()));
    }
    out.annotate = mirror(&asked.cluster, Some(&next));
    if next.status == Status::Failed.as_str() && rec.is_some_and(|r| r.status == next.status) {
        // Keep the time of the first failure.
        out.annotate.remove(LAST_FAILED_ATTEMPT_AT);
    } else if next.status == Status::Failed.as_str() {
        out.annotate
            .insert(LAST_FAILED_ATTEMPT_AT.into(), Some(at.clone()));
    }
    out
}

fn set(next: &mut OrchestratedUpgrade, status: Status, instance: Option<&str>, message: String) {
    next.status = status.as_str().into();
    next.instance = instance.map(str::to_string);
    next.message = message;
}

/// The instances in order (the primary last), each to be done before the
/// next is marked: what the orchestration does now, in `next`; the
/// instance to mark in `mark`.
fn walk(
    s: &Snapshot,
    value: &str,
    base: &OrchestratedUpgrade,
    next: &mut OrchestratedUpgrade,
    mark: &mut Option<(String, String)>,
) {
    let asked = &s.declared.asked;
    let primary = s.status.current_primary.clone().unwrap_or_default();
    let mut order: Vec<_> = s
        .instances
        .iter()
        .filter(|o| !s.is_fenced(&o.name) && !s.is_diverged(&o.name))
        .collect();
    order.sort_by_key(|o| (o.name == primary, o.ordinal));
    next.skipped = s
        .instances
        .iter()
        .filter(|o| s.is_fenced(&o.name) || s.is_diverged(&o.name))
        .map(|o| o.name.clone())
        .collect();
    let total = order.len();
    let mut finished = None;
    let mut all_done = true;
    for (done, o) in order.iter().enumerate() {
        let n = &o.name;
        let r = s
            .status
            .instance_upgrades
            .get(n)
            .filter(|r| r.upgrade_to == value);
        let marked = asked
            .instances
            .get(n)
            .and_then(|a| a.get(UPGRADE_TO))
            .is_some_and(|v| v.trim() == value);
        match r.map(|r| Status::parse(&r.status)) {
            Some(Some(Status::Done)) => {
                finished = r.and_then(|r| r.release.clone());
                continue;
            }
            Some(Some(Status::Failed)) => {
                let why = r.map(|r| r.message.clone()).unwrap_or_default();
                set(
                    next,
                    Status::Failed,
                    Some(n),
                    format!(
                        "{n} failed: {why} (it is retried while its annotation stays; the rest wait)"
                    ),
                );
            }
            Some(Some(Status::InProgress)) => set(
                next,
                Status::InProgress,
                Some(n),
                format!("upgrading {n} ({done} of {total} done)"),
            ),
            _ if marked => set(
                next,
                Status::InProgress,
                Some(n),
                format!("{n} is marked ({done} of {total} done)"),
            ),
            _ => {
                let gate = crate::upgrade::gates::settled_primary(s)
                    .and_then(|p| crate::upgrade::gates::instances_healthy(s, p, None));
                match gate {
                    Ok(()) => {
                        *mark = Some((n.clone(), value.to_string()));
                        set(
                            next,
                            Status::InProgress,
                            Some(n),
                            format!("marking {n} ({done} of {total} done)"),
                        );
                    }
                    Err(e) => set(
                        next,
                        Status::InProgress,
                        None,
                        format!("{e} before marking {n} ({done} of {total} done)"),
                    ),
                }
            }
        }
        all_done = false;
        break;
    }
    if all_done {
        // Every instance in service runs it.
        let release = finished.unwrap_or_default();
        if base.status != Status::Done.as_str() {
            next.complete_time = Some(timestamp(s.now_ms));
        }
        next.status = Status::Done.as_str().into();
        next.instance = None;
        next.release = Some(release);
        next.message = if next.skipped.is_empty() {
            format!("every instance runs it ({total})")
        } else {
            format!(
                "every instance in service runs it ({total}); skipped: {}",
                next.skipped.join(", ")
            )
        };
    }
}

/// The Cluster's annotations that differ from `record`.
fn mirror(
    have: &BTreeMap<String, String>,
    record: Option<&OrchestratedUpgrade>,
) -> BTreeMap<String, Option<String>> {
    let mut want = BTreeMap::new();
    want.insert(UPGRADE_STATUS.to_string(), record.map(|r| r.status.clone()));
    want.insert(
        UPGRADE_RELEASE.to_string(),
        record.and_then(|r| r.release.clone()),
    );
    if record.is_none_or(|r| r.status != Status::Failed.as_str()) {
        want.insert(LAST_FAILED_ATTEMPT_AT.to_string(), None);
    }
    crate::upgrade::annotated::differing(have, want)
}
