//! The checks of the server upgrade's steps: whether each named step is
//! true now (an instance on the target, system tables current, every
//! instance healthy), and how a step's condition in `status.upgradeHistory`
//! records what its check found.

use cnmysql_api::{Flavor, UpgradeCondition};

use crate::status::Snapshot;
use crate::time::timestamp;
use crate::upgrade::version::{Version, matches};

/// `lastProbeTime` is rewritten at most this often while nothing else of a
/// step changes (each write is a status update).
pub const PROBE_RECORD_MS: i64 = 60_000;

/// Step names, in order.
pub const VALIDATION: &str = "Validation";
pub const PRE_HEALTH_CHECK: &str = "PreHealthCheck";
pub const UPGRADE_REPLICA: &str = "UpgradeReplica";
pub const SWITCHOVER: &str = "Switchover";
pub const UPGRADE_FORMER_PRIMARY: &str = "UpgradeFormerPrimary";
pub const POST_UPGRADE: &str = "PostUpgrade";
pub const POST_HEALTH_CHECK: &str = "PostHealthCheck";

/// Whether the primary is settled and every instance in service is
/// reachable, ready and caught up (the rollout's health gate); why not
/// otherwise.
pub fn healthy(s: &Snapshot) -> Result<(), String> {
    let primary = crate::upgrade::gates::settled_primary(s)?;
    crate::upgrade::gates::instances_healthy(s, primary, None)
}

/// Where a step stands now.
pub(super) enum Probe {
    Done(String),
    NotYet(String),
}

/// Whether `name` runs the target version, from the target definition,
/// ready (and caught up, for a replica).
pub(super) fn on_target(s: &Snapshot, name: &str, version: &str) -> Result<(), String> {
    let Some(o) = s.get(name) else {
        return Err(format!("{name} is not observed"));
    };
    if let Some(change) = &o.outdated {
        return Err(format!("{name} is to be recreated ({change})"));
    }
    let Some(st) = &o.status else {
        return Err(format!("waiting for {name} to be reachable"));
    };
    if !matches(&st.server_version, version) {
        return Err(format!(
            "waiting for {name} to run {version} (it runs {})",
            if st.server_version.is_empty() {
                "an unknown version"
            } else {
                &st.server_version
            }
        ));
    }
    // Forced: an instance that runs the version has taken its step, ready
    // or not (it may be the broken one the new version is to fix).
    if s.declared.force_rollout {
        return Ok(());
    }
    if !st.ready {
        return Err(format!("waiting for {name} to be ready on {version}"));
    }
    if s.status.current_primary.as_deref() != Some(name)
        && st
            .lag_seconds
            .is_some_and(|l| l > crate::upgrade::gates::MAX_LAG_SECONDS)
    {
        return Err(format!("waiting for {name} to catch up"));
    }
    Ok(())
}

/// Whether `name`'s system tables are at the version it runs: MariaDB's
/// `mariadb-upgrade` works per major.minor (it has nothing to do within
/// one), MySQL upgrades itself to the exact version.
pub fn system_tables_current(s: &Snapshot, name: &str) -> bool {
    let flavor = s.spec.mysql.flavor;
    s.get(name)
        .and_then(|o| o.status.as_ref())
        .is_some_and(|st| {
            match (
                Version::parse(&st.system_tables_version),
                Version::parse(&st.server_version),
            ) {
                (Some(t), Some(v)) if flavor == Flavor::Mariadb => t.series() >= v.series(),
                (Some(t), Some(v)) => t.compare(&v).is_ge(),
                _ => false,
            }
        })
}

pub(super) fn in_service(s: &Snapshot, name: &str) -> bool {
    !s.is_fenced(name) && !s.is_diverged(name)
}

pub(super) fn probe(s: &Snapshot, c: &UpgradeCondition, version: &str) -> Probe {
    let who = c.instance.clone().unwrap_or_default();
    match c.type_.as_str() {
        UPGRADE_REPLICA | UPGRADE_FORMER_PRIMARY => {
            if s.get(&who).is_none() {
                return Probe::Done(format!("{who} is no longer an instance"));
            }
            if !in_service(s, &who) {
                return Probe::Done(format!(
                    "{who} is out of service (fenced or diverged): it is brought to {version} when it returns"
                ));
            }
            match on_target(s, &who, version) {
                Ok(()) => Probe::Done(format!("{who} runs {version}")),
                Err(e) => Probe::NotYet(e),
            }
        }
        SWITCHOVER => {
            let current = s.status.current_primary.as_deref();
            if current != Some(who.as_str()) && current == s.status.target_primary.as_deref() {
                Probe::Done(format!(
                    "{who} handed the primary role to {}",
                    current.unwrap_or_default()
                ))
            } else if on_target(s, &who, version).is_ok() {
                Probe::Done(format!("{who} was restarted in place as the primary"))
            } else {
                Probe::NotYet(format!(
                    "waiting for {who} to hand the primary role to an upgraded replica"
                ))
            }
        }
        POST_UPGRADE => {
            let behind: Vec<&str> = s
                .instances
                .iter()
                .filter(|o| in_service(s, &o.name) && !system_tables_current(s, &o.name))
                .map(|o| o.name.as_str())
                .collect();
            if behind.is_empty() {
                Probe::Done(format!("system tables at {version} on every instance"))
            } else {
                Probe::NotYet(format!(
                    "upgrading the system tables on {}",
                    behind.join(", ")
                ))
            }
        }
        POST_HEALTH_CHECK => {
            if let Err(e) = healthy(s) {
                return Probe::NotYet(e);
            }
            for o in s.instances.iter().filter(|o| in_service(s, &o.name)) {
                if let Err(e) = on_target(s, &o.name, version) {
                    return Probe::NotYet(e);
                }
            }
            Probe::Done(format!("every instance is ready on {version}"))
        }
        _ => Probe::Done(String::new()),
    }
}

pub(super) fn condition(type_: &str, instance: Option<&str>) -> UpgradeCondition {
    UpgradeCondition {
        type_: type_.to_string(),
        instance: instance.map(str::to_string),
        status: "Unknown".into(),
        reason: String::new(),
        message: String::new(),
        start_time: None,
        complete_time: None,
        last_probe_time: None,
        last_transition_time: None,
    }
}

/// Record what a step's probe found at `at` (`now_ms`): times move only
/// when something changed (or lastProbeTime, every [`PROBE_RECORD_MS`]).
pub(super) fn record(
    c: &mut UpgradeCondition,
    status: &str,
    reason: &str,
    message: &str,
    now_ms: i64,
) {
    let at = timestamp(now_ms);
    if c.start_time.is_none() {
        c.start_time = Some(at.clone());
    }
    let changed = c.status != status || c.reason != reason || c.message != message;
    if c.status != status {
        c.last_transition_time = Some(at.clone());
        if status == "True" || status == "False" {
            c.complete_time = Some(at.clone());
        }
    }
    let stale_probe = c
        .last_probe_time
        .as_deref()
        .and_then(crate::time::parse_ms)
        .is_none_or(|t| now_ms - t >= PROBE_RECORD_MS);
    if changed || stale_probe {
        c.last_probe_time = Some(at);
    }
    c.status = status.into();
    c.reason = reason.into();
    c.message = message.into();
}

pub(super) fn since_ms(t: &Option<String>) -> Option<i64> {
    t.as_deref().and_then(crate::time::parse_ms)
}
