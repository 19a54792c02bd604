//! Server version upgrades: which image the Cluster asks for and which
//! version it holds, whether moving the data there is allowed, when it may
//! start, and the ordered steps that carry it out, recorded one entry per
//! target version in `status.upgradeHistory`.
//!
//! The cluster runs `status.image`; instances are made from it, and from
//! the target only once the upgrade to it has started (the record is
//! `Upgrading`): so nothing is touched while an upgrade is refused,
//! scheduled for later, outside the maintenance window or waiting for a
//! healthy cluster, and an instance recreated meanwhile comes back on the
//! version it ran. Once started, the rollout (`rollout.rs`) moves the
//! instances — replicas in ascending ordinal, a switchover, the former
//! primary — and [`advance`] only watches each step come true, in order:
//!
//! 1. `Validation`: the version is known and is not lower than any that has
//!    run on the data, nor a jump the flavour does not support.
//! 2. `PreHealthCheck`: every instance in service ready and caught up, no
//!    switchover or failover under way (skipped by the force annotation).
//! 3. `UpgradeReplica` per replica, `Switchover`, `UpgradeFormerPrimary`.
//! 4. `PostUpgrade`: system tables at the new version on every instance
//!    (MariaDB: `mariadb-upgrade`, run by the manager when asked; MySQL: the
//!    server's own upgrade at start, checked).
//! 5. `PostHealthCheck`: every instance ready, caught up, on the version.
//!
//! A step not true within [`STEP_DEADLINE_MS`] fails the upgrade: the
//! rollout stops where it is and the cluster keeps serving; setting
//! `spec.mysql.upgradeAt` to a later time tries again from that step.

use std::collections::BTreeMap;

use cnmysql_api::{ClusterStatus, UpgradePhase, UpgradeRecord};

use crate::event::Event;
use crate::status::Snapshot;
use crate::time::timestamp;
use crate::upgrade::server_checks::{
    POST_HEALTH_CHECK, POST_UPGRADE, PRE_HEALTH_CHECK, Probe, SWITCHOVER, UPGRADE_FORMER_PRIMARY,
    UPGRADE_REPLICA, VALIDATION, condition, healthy, in_service, probe, record, since_ms,
    system_tables_current,
};
use crate::upgrade::version::{Version, check_path};

/// A step still not true this long after it began fails the upgrade.
pub const STEP_DEADLINE_MS: i64 = 30 * 60_000;

/// The annotation that lets a rollout go on past the health gate.
pub const FORCE_ANNOTATION: &str = "cnmysql.io/force-rolling-update";

/// The upgrade part of the status.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UpgradeStatus {
    pub image: Option<String>,
    pub server_version: Option<String>,
    pub target_image: Option<String>,
    pub target_version: Option<String>,
    pub data_versions: BTreeMap<String, String>,
    pub history: Vec<UpgradeRecord>,
}

impl UpgradeStatus {
    pub fn of(st: &ClusterStatus) -> UpgradeStatus {
        UpgradeStatus {
            image: st.image.clone(),
            server_version: st.server_version.clone(),
            target_image: st.target_image.clone(),
            target_version: st.target_server_version.clone(),
            data_versions: st.data_version_by_instance.clone(),
            history: st.upgrade_history.clone(),
        }
    }

    /// Write it into `st`; false when nothing changed.
    pub fn apply(&self, st: &mut ClusterStatus) -> bool {
        if UpgradeStatus::of(st) == *self {
            return false;
        }
        st.image = self.image.clone();
        st.server_version = self.server_version.clone();
        st.target_image = self.target_image.clone();
        st.target_server_version = self.target_version.clone();
        st.data_version_by_instance = self.data_versions.clone();
        st.upgrade_history = self.history.clone();
        true
    }

    /// The latest record, if it is about the current target.
    pub fn current(&self) -> Option<&UpgradeRecord> {
        self.history.last().filter(|r| {
            Some(&r.image) == self.target_image.as_ref() && self.image != self.target_image
        })
    }
}

/// What [`advance`] found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Advance {
    /// The upgrade part of the status as it should now read.
    pub status: UpgradeStatus,
    /// Events to record once that status is written.
    pub events: Vec<Event>,
    /// PostUpgrade: the instance whose system tables are to be upgraded now.
    pub system_tables: Option<String>,
    /// Why rollouts are held (an upgrade failed part way).
    pub hold: Option<String>,
    /// For the phase: what the upgrade waits for or does now.
    pub reason: Option<String>,
    /// The upgrade was refused or failed: the Degraded condition's reason
    /// and message.
    pub degraded: Option<(String, String)>,
}

fn event(warning: bool, reason: &'static str, message: String) -> Event {
    Event {
        warning,
        reason,
        instance: None,
        message,
    }
}

/// One pass of the server upgrade: the upgrade part of the status as it
/// should now read, what to record, and what to do.
pub fn advance(s: &Snapshot) -> Advance {
    let mut u = UpgradeStatus::of(&s.status);
    let mut out = Advance::default();
    for o in &s.instances {
        if let Some(st) = o.status.as_ref().filter(|st| !st.data_version.is_empty()) {
            u.data_versions
                .insert(o.name.clone(), st.data_version.clone());
        }
    }
    u.data_versions
        .retain(|n, _| s.instances.iter().any(|o| &o.name == n));
    let oldest = u
        .data_versions
        .values()
        .filter_map(|v| Version::parse(v))
        .min_by(|a, b| a.compare(b));
    let newest = u
        .data_versions
        .values()
        .filter_map(|v| Version::parse(v))
        .max_by(|a, b| a.compare(b));
    if let Some(v) = &oldest {
        u.server_version = Some(v.to_string());
    }
    let d = &s.declared;
    u.target_image = d.image.clone();
    u.target_version = d.version.clone();
    if let Some(e) = &d.error {
        out.degraded = Some(("ImageUnresolved".into(), e.clone()));
        out.reason = Some(e.clone());
        out.status = u;
        return out;
    }
    let Some(target) = d.image.clone() else {
        out.status = u;
        return out;
    };
    // A cluster that has run nothing else takes the target as it is.
    if u.image.is_none() {
        u.image = Some(target);
        out.status = u;
        return out;
    }
    if u.image.as_deref() == Some(target.as_str()) {
        out.status = u;
        return out;
    }
    let now = s.now_ms;
    let at = timestamp(now);
    let needs_new = u
        .history
        .last()
        .is_none_or(|r| r.image != target || r.phase == UpgradePhase::Upgraded);
    if needs_new {
        u.history.push(UpgradeRecord {
            version: d.version.clone().unwrap_or_else(|| "unknown".into()),
            image: target.clone(),
            from_version: u.server_version.clone(),
            phase: UpgradePhase::New,
            start_time: None,
            complete_time: None,
            conditions: vec![
                condition(VALIDATION, None),
                condition(PRE_HEALTH_CHECK, None),
            ],
        });
        out.events.push(event(
            false,
            "ServerUpgradeDeclared",
            format!(
                "server upgrade to {} declared ({} → {target})",
                d.version.as_deref().unwrap_or("an unknown version"),
                u.image.as_deref().unwrap_or_default()
            ),
        ));
    }
    let rec = u.history.last_mut().expect("a record");
    let version = rec.version.clone();

    // 1. Validation, every pass until the upgrade starts.
    if rec.start_time.is_none() {
        before_start(s, rec, newest.as_ref(), &target, &mut out);
        out.status = u;
        return out;
    }
    // A failed upgrade stays failed until spec.mysql.upgradeAt is set
    // after the failure.
    if rec.phase == UpgradePhase::Failed && stays_failed(s, rec, &mut out) {
        out.status = u;
        return out;
    }
    // 2. The steps, in order: the first not true is the one under way.
    if step_under_way(s, rec, &mut out) {
        out.status = u;
        return out;
    }
    rec.phase = UpgradePhase::Upgraded;
    rec.complete_time = Some(at);
    let from = rec.from_version.clone().unwrap_or_default();
    u.image = Some(target.clone());
    u.server_version = Some(version.clone());
    out.events.push(event(
        false,
        "ServerUpgradeCompleted",
        format!("every instance runs {version} ({target}); upgraded from {from}"),
    ));
    out.status = u;
    out
}

/// Before the upgrade starts: validate the target, then start it unless
/// it is scheduled later, waits for an orchestration, the maintenance
/// window or a healthy cluster (the force annotation skips the last).
fn before_start(
    s: &Snapshot,
    rec: &mut UpgradeRecord,
    newest: Option<&Version>,
    target: &str,
    out: &mut Advance,
) {
    let now = s.now_ms;
    let at = timestamp(now);
    let flavor = s.spec.mysql.flavor;
    let before = rec.phase;
    let version = rec.version.clone();
    let d = &s.declared;
    let verdict = match (Version::parse(&version), &newest) {
        (None, _) => Err((
            "UnknownVersion",
            format!(
                "the server version of {target} is not known: set spec.mysql.version to the version it holds, or use an image catalog (spec.mysql.imageCatalogRef)"
            ),
        )),
        (Some(to), Some(from)) => check_path(flavor, from, &to).map_err(|e| {
            let why = if to.compare(from).is_lt() { "DowngradeRefused" } else { "UnsupportedUpgrade" };
            let m = &s.spec.mysql;
            let field = if m.version.is_some() {
                "spec.mysql.version"
            } else if m.image.is_some() {
                "spec.mysql.image"
            } else {
                "the flavour's default image"
            };
            (why, format!("{field} asks for {to}: {e}. Set it back to {from} or to a supported newer version"))
        }),
        (Some(_), None) => Ok(()),
    };
    let c = &mut rec.conditions[0];
    match verdict {
        Err((why, message)) => {
            record(c, "False", why, &message, now);
            rec.phase = UpgradePhase::Failed;
            if rec.complete_time.is_none() {
                rec.complete_time = Some(at.clone());
            }
            if before != UpgradePhase::Failed {
                out.events.push(event(
                    true,
                    "ServerUpgradeRefused",
                    format!("server upgrade to {version} refused; nothing was touched: {message}"),
                ));
            }
            out.degraded = Some((why.into(), message.clone()));
            out.reason = Some(format!("Server upgrade to {version} refused: {message}"));
            return;
        }
        Ok(()) => {
            let from = newest
                .as_ref()
                .map(|v| v.to_string())
                .unwrap_or_else(|| "a new cluster".into());
            record(
                c,
                "True",
                "Validated",
                &format!("{from} → {version} is supported"),
                now,
            );
            rec.complete_time = None;
        }
    }
    let wait = start_wait(s, &version, d.force_rollout);
    let pre = &mut rec.conditions[1];
    if let Some((why, message)) = wait {
        let was = pre.reason.clone();
        record(pre, "Unknown", why, &message, now);
        rec.phase = UpgradePhase::Pending;
        if was != why {
            out.events
                .push(event(false, "ServerUpgradePending", message.clone()));
        }
        out.reason = Some(format!("Server upgrade pending: {message}"));
        return;
    }
    let message = if healthy(s).is_ok() {
        "every instance is ready and caught up".to_string()
    } else {
        format!("{FORCE_ANNOTATION} is set: going on without the health gate")
    };
    record(
        pre,
        "True",
        if healthy(s).is_ok() {
            "Healthy"
        } else {
            "Forced"
        },
        &message,
        now,
    );
    // Lay the steps out from the topology as it stands.
    let primary = s.status.current_primary.clone().unwrap_or_default();
    let mut replicas: Vec<_> = s
        .instances
        .iter()
        .filter(|o| o.name != primary && in_service(s, &o.name))
        .collect();
    replicas.sort_by_key(|o| o.ordinal);
    rec.conditions.truncate(2);
    for r in replicas {
        rec.conditions
            .push(condition(UPGRADE_REPLICA, Some(&r.name)));
    }
    if s.spec.instances > 1 {
        rec.conditions.push(condition(SWITCHOVER, Some(&primary)));
    }
    rec.conditions
        .push(condition(UPGRADE_FORMER_PRIMARY, Some(&primary)));
    rec.conditions.push(condition(POST_UPGRADE, None));
    rec.conditions.push(condition(POST_HEALTH_CHECK, None));
    rec.phase = UpgradePhase::Upgrading;
    rec.start_time = Some(at.clone());
    rec.complete_time = None;
    out.events.push(event(
        false,
        "ServerUpgradeStarted",
        format!(
            "server upgrade to {version} started: {}",
            rec.conditions[2..]
                .iter()
                .map(|c| match &c.instance {
                    Some(i) => format!("{} {i}", c.type_),
                    None => c.type_.clone(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ));
    out.reason = Some(format!("Server upgrade to {version} started"));
}

/// Why a validated upgrade may not start now: scheduled later
/// (`spec.mysql.upgradeAt`), an orchestration under way, outside the
/// maintenance window, or an unhealthy cluster (unless forced).
fn start_wait(s: &Snapshot, version: &str, force: bool) -> Option<(&'static str, String)> {
    let now = s.now_ms;
    let scheduled = s
        .spec
        .mysql
        .upgrade_at
        .as_deref()
        .and_then(crate::time::parse_ms)
        .filter(|t| *t > now);
    if let Some(t) = scheduled {
        Some((
            "Scheduled",
            format!(
                "the upgrade to {version} starts at {} (spec.mysql.upgradeAt)",
                timestamp(t)
            ),
        ))
    } else if let Some(o) = crate::upgrade::gates::orchestration_under_way(s) {
        Some((
            "OrchestratedUpgrade",
            format!(
                "the upgrade to {version} waits for the upgrade the Cluster's {} annotation asks ({}) to end",
                crate::upgrade::annotations::UPGRADE_TO,
                o.upgrade_to
            ),
        ))
    } else if let Err(e) = crate::upgrade::window::check(s.spec.maintenance_window.as_ref(), now) {
        Some((
            "MaintenanceWindow",
            format!("the upgrade to {version} waits: {e}"),
        ))
    } else {
        match healthy(s) {
            Ok(()) => None,
            Err(_) if force => None,
            Err(e) => Some((
                "Unhealthy",
                format!("the upgrade to {version} waits for a healthy cluster: {e}"),
            )),
        }
    }
}

/// A failed upgrade: held (true) until `spec.mysql.upgradeAt` is set to a
/// time after the failure, then the failed step is tried again.
fn stays_failed(s: &Snapshot, rec: &mut UpgradeRecord, out: &mut Advance) -> bool {
    let now = s.now_ms;
    let at = timestamp(now);
    let version = rec.version.clone();
    let failed_at = since_ms(&rec.complete_time).unwrap_or(now);
    let retry = s
        .spec
        .mysql
        .upgrade_at
        .as_deref()
        .and_then(crate::time::parse_ms)
        .is_some_and(|t| t > failed_at && t <= now);
    let failed = rec.conditions.iter().find(|c| c.status == "False").cloned();
    if !retry {
        let message = format!(
            "the server upgrade to {version} failed at {}: {}; the rollout is stopped. Fix the cause, then set spec.mysql.upgradeAt to a time after {} to go on",
            failed
                .as_ref()
                .map(|c| c.type_.as_str())
                .unwrap_or("a step"),
            failed
                .as_ref()
                .map(|c| c.message.as_str())
                .unwrap_or_default(),
            rec.complete_time.as_deref().unwrap_or_default()
        );
        out.hold = Some(message.clone());
        out.degraded = Some(("ServerUpgradeFailed".into(), message.clone()));
        out.reason = Some(message);
        return true;
    }
    for c in rec.conditions.iter_mut().filter(|c| c.status == "False") {
        c.status = "Unknown".into();
        c.start_time = Some(at.clone());
        c.complete_time = None;
        c.reason = "Retrying".into();
    }
    rec.phase = UpgradePhase::Upgrading;
    rec.complete_time = None;
    out.events.push(event(
        false,
        "ServerUpgradeRetrying",
        format!("server upgrade to {version}: trying the failed step again (spec.mysql.upgradeAt)"),
    ));
    false
}

/// Probe the steps in order; true while one is under way (or failed),
/// false once every step is done.
fn step_under_way(s: &Snapshot, rec: &mut UpgradeRecord, out: &mut Advance) -> bool {
    let now = s.now_ms;
    let at = timestamp(now);
    let version = rec.version.clone();
    for i in 2..rec.conditions.len() {
        if rec.conditions[i].status == "True" {
            continue;
        }
        let c = &mut rec.conditions[i];
        match probe(s, c, &version) {
            Probe::Done(message) => {
                record(c, "True", "Done", &message, now);
                out.events.push(event(
                    false,
                    "ServerUpgradeStep",
                    format!(
                        "server upgrade to {version}: {}{} done: {message}",
                        c.type_,
                        c.instance
                            .as_deref()
                            .map(|i| format!(" {i}"))
                            .unwrap_or_default()
                    ),
                ));
            }
            Probe::NotYet(message) => {
                let started = since_ms(&c.start_time).unwrap_or(now);
                if now - started > STEP_DEADLINE_MS {
                    let message = format!(
                        "not done within {} min: {message}",
                        STEP_DEADLINE_MS / 60_000
                    );
                    record(c, "False", "TimedOut", &message, now);
                    rec.phase = UpgradePhase::Failed;
                    rec.complete_time = Some(at.clone());
                    out.events.push(event(
                        true,
                        "ServerUpgradeFailed",
                        format!(
                            "server upgrade to {version} failed at {}: {message}",
                            c.type_
                        ),
                    ));
                    out.degraded = Some(("ServerUpgradeFailed".into(), message.clone()));
                    out.hold = Some(message.clone());
                    out.reason = Some(format!("Server upgrade to {version} failed: {message}"));
                    return true;
                }
                record(c, "Unknown", "InProgress", &message, now);
                if c.type_ == POST_UPGRADE {
                    // The primary first, then the replicas in order.
                    let primary = s.status.current_primary.clone();
                    let mut order: Vec<&str> = primary.iter().map(String::as_str).collect();
                    order.extend(
                        s.instances
                            .iter()
                            .map(|o| o.name.as_str())
                            .filter(|n| Some(*n) != primary.as_deref()),
                    );
                    out.system_tables = order
                        .into_iter()
                        .find(|n| {
                            in_service(s, n)
                                && !system_tables_current(s, n)
                                && s.get(n).is_some_and(|o| o.ready())
                        })
                        .map(str::to_string);
                }
                let step = match &c.instance {
                    Some(n) => format!("{} {n}", c.type_),
                    None => c.type_.clone(),
                };
                out.reason = Some(format!(
                    "Upgrading the server to {version}: {step}: {message}"
                ));
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests;
