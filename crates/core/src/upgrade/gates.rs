//! What every kind of upgrade checks before it moves an instance: a settled
//! primary, every instance in service healthy and caught up, no
//! orchestration under way, the replica a primary hands over to, and the
//! steps given recently (not given again meanwhile).

use cnmysql_api::OrchestratedUpgrade;
use cnmysql_gtid::Relation;

use crate::status::Snapshot;
use crate::upgrade::annotations::Status;

/// A replica lagging more than this is not caught up: the rollout waits.
pub const MAX_LAG_SECONDS: u64 = 10;

/// The instances a rollout step was last given, and when (Unix ms).
pub type InFlight = std::collections::BTreeMap<String, i64>;

/// The orchestration under way, if one is.
pub fn orchestration_under_way(s: &Snapshot) -> Option<&OrchestratedUpgrade> {
    s.status
        .orchestrated_upgrade
        .as_ref()
        .filter(|o| o.status == Status::InProgress.as_str())
}

/// The primary, when it is settled: the current and target primary agree
/// and it is not failing; why not otherwise.
pub fn settled_primary(s: &Snapshot) -> Result<&str, String> {
    let (Some(current), Some(target)) = (
        s.status.current_primary.as_deref(),
        s.status.target_primary.as_deref(),
    ) else {
        return Err("the cluster has no primary yet".into());
    };
    if current != target {
        return Err(format!("the primary is moving to {target}"));
    }
    if s.status.primary_failing_since.is_some() {
        return Err(format!("the primary {current} is failing"));
    }
    Ok(current)
}

/// The health gate: every instance in service but `skip` is reachable and
/// ready, and every replica (not `primary`) is caught up; why not
/// otherwise. Fenced and diverged instances are out of service.
pub fn instances_healthy(s: &Snapshot, primary: &str, skip: Option<&str>) -> Result<(), String> {
    let mut members: Vec<_> = s
        .instances
        .iter()
        .filter(|o| !s.is_fenced(&o.name) && !s.is_diverged(&o.name))
        .filter(|o| Some(o.name.as_str()) != skip)
        .collect();
    members.sort_by_key(|o| o.ordinal);
    for o in members {
        let Some(st) = o.status.as_ref() else {
            return Err(format!("waiting for {} to be reachable", o.name));
        };
        if !st.ready {
            return Err(format!("waiting for {} to be ready", o.name));
        }
        if o.name != primary && st.lag_seconds.is_some_and(|l| l > MAX_LAG_SECONDS) {
            return Err(format!(
                "waiting for {} to catch up ({} s behind)",
                o.name,
                st.lag_seconds.unwrap_or_default()
            ));
        }
    }
    Ok(())
}

/// The replica a primary hands over to (a stale one, or one leaving): one
/// a switchover accepts, the most advanced, lowest ordinal first among
/// equals, none of `excluded`.
pub(crate) fn switchover_target(
    s: &Snapshot,
    current: &str,
    excluded: &[String],
) -> Option<String> {
    let flavor = s.spec.mysql.flavor;
    let mut ok: Vec<_> = s
        .instances
        .iter()
        .filter(|o| o.name != current && !excluded.contains(&o.name))
        .filter(|o| crate::switchover::eligible(s, &o.name).is_ok())
        .filter_map(|o| {
            let h = crate::status::parse_history(flavor, &o.status.as_ref()?.gtid_executed).ok()?;
            Some((o.ordinal, o.name.clone(), h))
        })
        .collect();
    ok.sort_by_key(|(ord, _, _)| *ord);
    let mut best: Option<(String, cnmysql_gtid::History)> = None;
    for (_, name, h) in ok {
        match &best {
            Some((_, b)) if h.relation(b) != Relation::Ahead => {}
            _ => best = Some((name, h)),
        }
    }
    best.map(|(n, _)| n)
}
