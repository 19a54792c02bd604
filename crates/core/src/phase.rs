//! The cluster's phase and its Ready / Progressing / Degraded conditions,
//! derived from a snapshot.

use cnmysql_api::Phase;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use crate::status::{InstancePhase, Snapshot};

#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub phase: Phase,
    pub reason: String,
    pub ready_instances: i32,
    /// (type, status, reason, message)
    pub conditions: Vec<(&'static str, bool, String, String)>,
}

pub fn summarize(s: &Snapshot) -> Summary {
    let declared = s.spec.instances.max(0) as usize;
    // Fenced instances are out of service on purpose: not waited for.
    let fenced: Vec<&str> = s
        .status
        .fenced_instances
        .iter()
        .map(String::as_str)
        .collect();
    let want = declared.saturating_sub(fenced.len());
    let lagging = crate::lagging::instances(s);
    let ready = s
        .instances
        .iter()
        .filter(|i| i.ready() && !s.is_fenced(&i.name) && !lagging.contains(&i.name))
        .count();
    let cloning: Vec<&str> = s
        .instances
        .iter()
        .filter(|i| {
            i.status.as_ref().is_some_and(|st| {
                matches!(st.phase, InstancePhase::Cloning | InstancePhase::Preparing)
            })
        })
        .map(|i| i.name.as_str())
        .collect();
    let primary_ready = s
        .status
        .current_primary
        .as_deref()
        .and_then(|p| s.get(p))
        .is_some_and(|o| o.ready());
    let unreachable: Vec<&str> = s
        .instances
        .iter()
        .filter(|i| !i.reachable())
        .map(|i| i.name.as_str())
        .collect();

    let (phase, reason) = if let Some(why) = crate::hibernation::reason(s) {
        let asked = crate::hibernation::asked(&s.declared.asked.cluster);
        let phase = if asked {
            Phase::Hibernated
        } else {
            Phase::Degraded
        };
        (phase, why)
    } else if let Some(p) = crate::failover::changing_phase(s) {
        (
            p,
            format!(
                "moving the primary from {} to {}",
                s.status.current_primary.as_deref().unwrap_or("?"),
                s.status.target_primary.as_deref().unwrap_or("?")
            ),
        )
    } else if s.status.current_primary.is_none()
        || (!primary_ready && s.status.current_primary_timestamp.is_none())
    {
        (
            Phase::SettingUpPrimary,
            format!(
                "initialising {}",
                s.status
                    .target_primary
                    .as_deref()
                    .unwrap_or("the first instance")
            ),
        )
    } else if let Some(why) = crate::disk_guard::writes_refused(s) {
        (Phase::Degraded, format!("writes refused: {why}"))
    } else if !cloning.is_empty() {
        (
            Phase::CreatingReplica,
            format!("cloning {}", cloning.join(", ")),
        )
    } else if let Some(r) = &s.status.reinitializing {
        (
            Phase::Degraded,
            format!(
                "{r} is re-initialising: saving what only it holds, then re-cloning from the primary"
            ),
        )
    } else if !s.status.diverged_instances.is_empty() {
        (
            Phase::Degraded,
            format!(
                "diverged instances kept out of service: {}",
                s.status
                    .diverged_instances
                    .iter()
                    .map(|d| match s.status.diverged_reasons.get(d) {
                        Some(why) => format!("{d} ({why})"),
                        None => d.clone(),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    } else if !primary_ready {
        let p = s.status.current_primary.as_deref().unwrap_or("?");
        let why = match s.get(p).and_then(|o| o.status.as_ref()) {
            None => format!("the primary {p} does not answer"),
            Some(st) if st.phase == InstancePhase::Starting => {
                format!("the primary {p} is starting")
            }
            Some(st) => format!("the primary {p} is not ready ({:?})", st.phase),
        };
        (Phase::Degraded, why)
    } else if ready < want {
        not_all_ready(s, ready, want, &lagging)
    } else {
        let fenced_note = if fenced.is_empty() {
            String::new()
        } else {
            format!("; fenced: {}", fenced.join(", "))
        };
        (
            Phase::Healthy,
            format!("{ready} of {declared} instances ready{fenced_note}"),
        )
    };
    let reason = if crate::pause::paused(&s.declared.asked.cluster) {
        format!("{}; {reason}", crate::pause::reason())
    } else {
        reason
    };
    let mut conditions = conditions(
        s,
        (ready, want),
        primary_ready,
        phase,
        &reason,
        &unreachable,
        &cloning,
    );
    if let Some((on, why, msg)) = crate::archiving::condition(s) {
        conditions.push((crate::archiving::CONDITION, on, why, msg));
    }
    Summary {
        phase,
        reason,
        ready_instances: ready as i32,
        conditions,
    }
}

/// Why fewer instances than wanted are ready: replicas being created, or
/// instances starting, catching up or away.
fn not_all_ready(s: &Snapshot, ready: usize, want: usize, lagging: &[String]) -> (Phase, String) {
    let not_ready: Vec<(&str, Option<InstancePhase>)> = s
        .instances
        .iter()
        .filter(|i| !i.ready() && !s.is_fenced(&i.name))
        .map(|i| (i.name.as_str(), i.status.as_ref().map(|st| st.phase)))
        .collect();
    let names = |f: &dyn Fn(Option<InstancePhase>) -> bool| {
        not_ready
            .iter()
            .filter(|(_, p)| f(*p))
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
    };
    // Only an instance still without data is a replica being created;
    // one that has data is starting or rejoining (after a switchover,
    // a restart, a resume).
    let new = names(&|p| matches!(p, Some(InstancePhase::Initializing)));
    if !new.is_empty() {
        (
            Phase::CreatingReplica,
            format!("waiting for {}", new.join(", ")),
        )
    } else {
        let mut parts = Vec::new();
        let starting =
            names(&|p| matches!(p, Some(InstancePhase::Starting | InstancePhase::Restarting)));
        let rejoining = names(&|p| matches!(p, Some(InstancePhase::Running)));
        let away = names(&|p| {
            !matches!(
                p,
                Some(InstancePhase::Starting | InstancePhase::Restarting | InstancePhase::Running)
            )
        });
        if !starting.is_empty() {
            parts.push(format!("{} starting", starting.join(", ")));
        }
        if !rejoining.is_empty() {
            parts.push(format!(
                "{} catching up with the primary",
                rejoining.join(", ")
            ));
        }
        if !away.is_empty() {
            parts.push(format!("{} not ready", away.join(", ")));
        }
        parts.extend(crate::lagging::describe(s, lagging));
        (
            Phase::Degraded,
            format!("{ready} of {want} instances ready: {}", parts.join("; ")),
        )
    }
}

/// The Ready, Progressing and Degraded conditions.
fn conditions(
    s: &Snapshot,
    (ready, want): (usize, usize),
    primary_ready: bool,
    phase: Phase,
    reason: &str,
    unreachable: &[&str],
    cloning: &[&str],
) -> Vec<(&'static str, bool, String, String)> {
    let all_ready = ready >= want && primary_ready;
    let degraded = !s.status.diverged_instances.is_empty()
        || (!unreachable.is_empty()
            && s.status.current_primary_timestamp.is_some()
            && cloning.is_empty());
    vec![
        (
            "Ready",
            all_ready,
            if all_ready {
                "AllInstancesReady"
            } else {
                "InstancesNotReady"
            }
            .to_string(),
            format!("{ready} of {want} instances ready"),
        ),
        (
            "Progressing",
            matches!(
                phase,
                Phase::SettingUpPrimary
                    | Phase::CreatingReplica
                    | Phase::Switchover
                    | Phase::FailingOver
                    | Phase::Upgrading
            ),
            phase_reason_word(phase).to_string(),
            reason.to_string(),
        ),
        (
            "Degraded",
            degraded,
            if degraded {
                "InstancesUnavailable"
            } else {
                "AsExpected"
            }
            .to_string(),
            if unreachable.is_empty() {
                "all instances reachable".to_string()
            } else {
                format!("unreachable: {}", unreachable.join(", "))
            },
        ),
    ]
}

fn phase_reason_word(p: Phase) -> &'static str {
    match p {
        Phase::SettingUpPrimary => "SettingUpPrimary",
        Phase::CreatingReplica => "CreatingReplica",
        Phase::Healthy => "Healthy",
        Phase::Switchover => "Switchover",
        Phase::FailingOver => "FailingOver",
        Phase::Upgrading => "Upgrading",
        Phase::WaitingForUser => "WaitingForUser",
        Phase::Degraded => "Degraded",
        Phase::Stopped => "Stopped",
        Phase::Hibernated => "Hibernated",
    }
}

/// Set a condition, keeping its transition time when the status is unchanged.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now_ms: i64,
    generation: Option<i64>,
) {
    let status_s = if status { "True" } else { "False" }.to_string();
    let now = Time(Timestamp::from_millisecond(now_ms).unwrap_or(Timestamp::UNIX_EPOCH));
    if let Some(c) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if c.status != status_s {
            c.last_transition_time = now;
        }
        c.status = status_s;
        c.reason = reason.to_string();
        c.message = message.to_string();
        c.observed_generation = generation;
    } else {
        conditions.push(Condition {
            type_: type_.to_string(),
            status: status_s,
            reason: reason.to_string(),
            message: message.to_string(),
            last_transition_time: now,
            observed_generation: generation,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_instance_is_not_waited_for() {
        use crate::status::{InstanceStatus, Observed, Role, Snapshot};
        let obs = |name: &str, ready: bool, role: Role| Observed {
            name: name.into(),
            ordinal: 1,
            status: Some(InstanceStatus {
                ready,
                role,
                ..Default::default()
            }),
            outdated: None,
        };
        let mut s = Snapshot {
            cluster: "db".into(),
            spec: serde_json::from_value(serde_json::json!({"instances": 2})).unwrap(),
            status: cnmysql_api::ClusterStatus {
                current_primary: Some("db-1".into()),
                target_primary: Some("db-1".into()),
                current_primary_timestamp: Some("2026-01-01T00:00:00Z".into()),
                ..Default::default()
            },
            instances: vec![
                obs("db-1", true, Role::Primary),
                obs("db-2", false, Role::Replica),
            ],
            now_ms: 0,
            declared: Default::default(),
        };
        assert_eq!(summarize(&s).phase, Phase::CreatingReplica);
        s.status.fenced_instances = vec!["db-2".into()];
        let sum = summarize(&s);
        assert_eq!(sum.phase, Phase::Healthy);
        assert!(sum.reason.contains("fenced: db-2"), "{}", sum.reason);
    }

    #[test]
    fn instances_with_data_are_starting_or_catching_up_not_being_created() {
        use crate::status::{InstanceStatus, Observed, Role, Snapshot};
        let obs = |name: &str, ready: bool, role: Role, phase: InstancePhase| Observed {
            name: name.into(),
            ordinal: 1,
            status: Some(InstanceStatus {
                ready,
                role,
                phase,
                ..Default::default()
            }),
            outdated: None,
        };
        let mut s = Snapshot {
            cluster: "db".into(),
            spec: serde_json::from_value(serde_json::json!({"instances": 2})).unwrap(),
            status: cnmysql_api::ClusterStatus {
                current_primary: Some("db-2".into()),
                target_primary: Some("db-2".into()),
                current_primary_timestamp: Some("2026-01-01T00:00:00Z".into()),
                ..Default::default()
            },
            // Right after a switchover: the old primary rejoins.
            instances: vec![
                obs("db-1", false, Role::Replica, InstancePhase::Running),
                obs("db-2", true, Role::Primary, InstancePhase::Running),
            ],
            now_ms: 0,
            declared: Default::default(),
        };
        let sum = summarize(&s);
        assert_eq!(sum.phase, Phase::Degraded);
        assert_eq!(
            sum.reason,
            "1 of 2 instances ready: db-1 catching up with the primary"
        );
        // A resume: the primary is starting on its data.
        s.instances[1] = obs("db-2", false, Role::Primary, InstancePhase::Starting);
        assert_eq!(summarize(&s).reason, "the primary db-2 is starting");
    }

    #[test]
    fn transition_time_moves_only_on_change() {
        let mut c = Vec::new();
        set_condition(&mut c, "Ready", false, "X", "m", 1_000, None);
        set_condition(&mut c, "Ready", false, "Y", "m2", 2_000, None);
        assert_eq!(c[0].last_transition_time.0.as_millisecond(), 1_000);
        assert_eq!(c[0].reason, "Y");
        set_condition(&mut c, "Ready", true, "Z", "m3", 3_000, None);
        assert_eq!(c[0].last_transition_time.0.as_millisecond(), 3_000);
        assert_eq!(c.len(), 1);
    }
}
