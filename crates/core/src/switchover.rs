//! Planned switchover: a request to make a named healthy replica primary.
//! Like CloudNativePG, the request is a status transition (targetPrimary);
//! this module validates it and watches it complete or time out.

use cnmysql_gtid::Relation;

use crate::status::{Role, Snapshot};

/// Check that `target` may become primary now.
pub fn validate(s: &Snapshot, target: &str) -> Result<(), String> {
    let current = s
        .status
        .current_primary
        .as_deref()
        .ok_or("the cluster has no primary yet")?;
    if s.status.target_primary.as_deref() != Some(current) {
        return Err(format!(
            "a primary change to {} is already in progress",
            s.status.target_primary.as_deref().unwrap_or("?")
        ));
    }
    if target == current {
        return Err(format!("{target} is already the primary"));
    }
    let o = s
        .get(target)
        .ok_or_else(|| format!("{target} is not an instance of cluster {}", s.cluster))?;
    if s.is_fenced(target) {
        return Err(format!("{target} is fenced; unfence it first"));
    }
    if s.is_diverged(target) {
        return Err(format!("{target} has diverged from the primary"));
    }
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
