//! Planned switchover: a request to make a named healthy replica primary.
//! Like CloudNativePG, the request is a status transition (targetPrimary);
//! this module validates it and watches it complete or time out.

use cnmysql_gtid::Relation;

use cnmysql_api::{ClusterSpec, ClusterStatus};

use crate::status::{Role, Snapshot};

/// Check what can be checked of a switchover request from the Cluster alone
/// (its spec and status), before any instance is asked: the plugin runs this
/// on the client side, and [`validate`] starts with it.
pub fn validate_request(
    cluster: &str,
    spec: &ClusterSpec,
    status: &ClusterStatus,
    target: &str,
) -> Result<(), String> {
    crate::status::check_member(cluster, spec, target)?;
    let current = status
        .current_primary
        .as_deref()
        .ok_or("the cluster has no primary yet")?;
    if status.target_primary.as_deref() != Some(current) {
        return Err(format!(
            "a primary change to {} is already in progress",
            status.target_primary.as_deref().unwrap_or("?")
        ));
    }
    if target == current {
        return Err(format!("{target} is already the primary"));
    }
    if status.fenced_instances.iter().any(|n| n == target) {
        return Err(format!("{target} is fenced; unfence it first"));
    }
    if status.diverged_instances.iter().any(|n| n == target) {
        return Err(format!("{target} has diverged from the primary"));
    }
    Ok(())
}

/// Check that `target` may become primary now.
pub fn validate(s: &Snapshot, target: &str) -> Result<(), String> {
    validate_request(&s.cluster, &s.spec, &s.status, target)?;
    let current = s.status.current_primary.as_deref().unwrap_or_default();
    let o = s
        .get(target)
        .ok_or_else(|| format!("{target} is not an instance of cluster {}", s.cluster))?;
    let st = o
        .status
        .as_ref()
        .ok_or_else(|| format!("{target} is unreachable"))?;
    if !st.ready {
        return Err(format!(
            "{target} is not ready ({:?}{})",
            st.phase,
            if st.message.is_empty() {
                String::new()
            } else {
                format!(": {}", st.message)
            }
        ));
    }
    if st.role != Role::Replica {
        return Err(format!("{target} is not a replica"));
    }
    match &st.replication {
        Some(r) if r.healthy() => {}
        Some(r) => {
            return Err(format!(
                "{target} replication is not healthy (IO {}, SQL running {}, {} {})",
                r.io_state, r.sql_running, r.last_io_error, r.last_sql_error
            ));
        }
        None => return Err(format!("{target} has no replication configured")),
    }
    let flavor = s.spec.mysql.flavor;
    let mine = crate::status::parse_history(flavor, &st.gtid_executed)
        .map_err(|e| format!("{target}: {e}"))?;
    // A planned switchover needs the old primary: it hands over its last
    // transactions. A primary that is down is failover's business.
    let p = s
        .get(current)
        .and_then(|o| o.status.as_ref())
        .filter(|p| p.mysqld_running)
        .ok_or_else(|| format!("the primary {current} is not reachable; a switchover needs it (failover handles a failed primary)"))?;
    let primary = crate::status::parse_history(flavor, &p.gtid_executed)
        .map_err(|e| format!("{current}: {e}"))?;
    if mine.relation(&primary) == Relation::Diverged {
        return Err(format!(
            "the GTID history of {target} has diverged from the primary's"
        ));
    }
    Ok(())
}

/// The largest replication lag (whole seconds, as the server reports it) at
/// which a primary hands over to its switchover target: 0, less than a
/// second. Writes stop when the primary turns read-only and resume when the
/// target has applied the rest and opened writes, so the target's lag is
/// the outage: a target further behind (just recreated, or applying a
/// backlog) is waited for while the primary keeps serving, for up to
/// `maxSwitchoverDelay`, after which the switchover is given up with the
/// primary never having stopped.
pub const HAND_OVER_MAX_LAG_SECS: u64 = 0;

/// Whether the primary may turn read-only for a switchover to `target`,
/// given what `target` reports (`None`: it does not answer). `Err` says
/// what is waited for.
pub fn ready_to_hand_over(
    target: &str,
    st: Option<&crate::status::InstanceStatus>,
) -> Result<(), String> {
    let st = st.ok_or_else(|| format!("{target} does not answer"))?;
    if !st.mysqld_running {
        return Err(format!("mysqld of {target} is not running"));
    }
    let r = st
        .replication
        .as_ref()
        .ok_or_else(|| format!("{target} is not replicating"))?;
    if !r.healthy() {
        return Err(format!(
            "replication of {target} is not healthy (IO {}, SQL running {})",
            r.io_state, r.sql_running
        ));
    }
    match r.seconds_behind {
        Some(lag) if lag <= HAND_OVER_MAX_LAG_SECS => Ok(()),
        Some(lag) => Err(format!("{target} is {lag} s behind")),
        None => Err(format!("the lag of {target} is unknown")),
    }
}

/// How a switchover in progress stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// No switchover in progress.
    Idle,
    Waiting,
    /// The target did not take over within maxSwitchoverDelay: give the role
    /// back to the old primary and report it blocked.
    Abort {
        reason: String,
    },
}

pub fn progress(s: &Snapshot) -> Progress {
    let (Some(current), Some(target)) = (
        s.status.current_primary.as_deref(),
        s.status.target_primary.as_deref(),
    ) else {
        return Progress::Idle;
    };
    if current == target || s.status.phase == Some(cnmysql_api::Phase::FailingOver) {
        return Progress::Idle;
    }
    let requested = s
        .status
        .target_primary_timestamp
        .as_deref()
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .map(|t| t.as_millisecond())
        .unwrap_or(s.now_ms);
    let limit = s.spec.max_switchover_delay.max(0).saturating_mul(1000);
    if s.now_ms > requested.saturating_add(limit) {
        Progress::Abort {
            reason: format!(
                "switchover to {target} blocked: it did not catch up with {current} within maxSwitchoverDelay ({}s); {current} stays primary",
                s.spec.max_switchover_delay
            ),
        }
    } else {
        Progress::Waiting
    }
}

#[cfg(test)]
mod hand_over_tests {
    use super::*;
    use crate::testutil::replica;

    #[test]
    fn a_primary_hands_over_only_to_a_target_that_caught_up() {
        let mut o = replica("db-2", "0-1-100");
        let st = o.status.as_mut().unwrap();
        st.replication.as_mut().unwrap().io_state = "Yes".into();
        st.replication.as_mut().unwrap().seconds_behind = Some(0);
        assert_eq!(ready_to_hand_over("db-2", Some(st)), Ok(()));
        // Issue 18: a target 52 s behind took the primary's writes away
        // for 52 s. It is waited for with the primary still writable.
        st.replication.as_mut().unwrap().seconds_behind = Some(52);
        assert_eq!(
            ready_to_hand_over("db-2", Some(st)),
            Err("db-2 is 52 s behind".into())
        );
        st.replication.as_mut().unwrap().seconds_behind = None;
        assert!(ready_to_hand_over("db-2", Some(st)).is_err());
        st.replication.as_mut().unwrap().seconds_behind = Some(0);
        st.replication.as_mut().unwrap().sql_running = false;
        assert!(ready_to_hand_over("db-2", Some(st)).is_err());
        assert!(ready_to_hand_over("db-2", None).is_err());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{primary, replica, snapshot as snap};

    fn healthy() -> Snapshot {
        let mut s = snap(vec![
            primary("db-1", "0-1-100"),
            replica("db-2", "0-1-100"),
            replica("db-3", "0-1-90"),
        ]);
        for o in &mut s.instances[1..] {
            let r = o.status.as_mut().unwrap().replication.as_mut().unwrap();
            r.io_state = "Yes".into();
        }
        s
    }

    #[test]
    fn a_healthy_caught_up_replica_may_take_over() {
        assert_eq!(validate(&healthy(), "db-2"), Ok(()));
        // Lagging is fine: the target catches up within maxSwitchoverDelay.
        assert_eq!(validate(&healthy(), "db-3"), Ok(()));
    }

    #[test]
    fn requests_are_checked_against_the_cluster_alone() {
        let s = healthy();
        let check = |t: &str, st: &ClusterStatus| validate_request("db", &s.spec, st, t);
        assert!(
            check("db-4", &s.status)
                .unwrap_err()
                .contains("not an instance")
        );
        assert!(
            check("other-2", &s.status)
                .unwrap_err()
                .contains("db-1 to db-3")
        );
        assert!(
            check("db-1", &s.status)
                .unwrap_err()
                .contains("already the primary")
        );
        let mut st = s.status.clone();
        st.fenced_instances = vec!["db-2".into()];
        assert!(check("db-2", &st).unwrap_err().contains("unfence it first"));
        let mut st = s.status.clone();
        st.diverged_instances = vec!["db-2".into()];
        assert!(check("db-2", &st).unwrap_err().contains("diverged"));
        let mut st = s.status.clone();
        st.target_primary = Some("db-3".into());
        assert!(
            check("db-2", &st)
                .unwrap_err()
                .contains("already in progress")
        );
        let mut st = s.status.clone();
        st.current_primary = None;
        assert!(check("db-2", &st).unwrap_err().contains("no primary yet"));
        assert_eq!(check("db-2", &s.status), Ok(()));
    }

    #[test]
    fn the_target_must_be_a_ready_healthy_replica() {
        let mut s = healthy();
        s.instances[1].status = None;
        assert!(validate(&s, "db-2").unwrap_err().contains("unreachable"));

        let mut s = healthy();
        s.instances[1].status.as_mut().unwrap().ready = false;
        assert!(validate(&s, "db-2").unwrap_err().contains("not ready"));

        let mut s = healthy();
        s.instances[1].status.as_mut().unwrap().role = Role::Primary;
        assert!(validate(&s, "db-2").unwrap_err().contains("not a replica"));

        let mut s = healthy();
        let r = s.instances[1].status.as_mut().unwrap();
        r.replication.as_mut().unwrap().sql_running = false;
        assert!(validate(&s, "db-2").unwrap_err().contains("not healthy"));

        let mut s = healthy();
        s.instances[1].status.as_mut().unwrap().replication = None;
        assert!(validate(&s, "db-2").unwrap_err().contains("no replication"));
    }

    #[test]
    fn a_diverged_history_or_missing_primary_refuses() {
        let mut s = healthy();
        s.instances[0].status.as_mut().unwrap().gtid_executed = "0-1-102".into();
        s.instances[1].status.as_mut().unwrap().gtid_executed = "0-2-101".into();
        assert!(validate(&s, "db-2").unwrap_err().contains("diverged"));

        let mut s = healthy();
        s.instances[0].status = None;
        assert!(validate(&s, "db-2").unwrap_err().contains("not reachable"));
    }
}
