//! Replicas too far behind to serve: a replica more than
//! `spec.maxReplicaLagSeconds` behind its source (the server's own figure)
//! is taken out of the ro and r routes and not counted ready, and comes
//! back once it is within half the limit (so one that hovers at the limit
//! does not flap in and out of the Services). A freshly cloned replica
//! replaying what was written during its copy is the usual case.
//!
//! A replica cluster's designated primary is never lagging by this rule:
//! its lag is the whole cluster's behind its source (`status.replica`,
//! the `CnmysqlReplicaClusterLagging` alert), and it is the freshest
//! instance the cluster has. Taken out of routes, it also left rw on
//! Kubernetes (Services select by the routable label): just demoted in a
//! switchover between clusters, it can show a large lag while it first
//! follows its new source, and that source, still reading its last
//! transactions through rw, then waited for it forever.
//!
//! Lagging does not change what a failover may choose: a lagging replica
//! can hold acknowledged writes (it acknowledges what it received, before
//! applying it), and a promoted one applies everything it received before
//! it opens writes (`failover.rs`).

use crate::status::{Role, Snapshot};

/// The lagging replicas, by name, from the snapshot and the status's last
/// word (`lagging_instances`, for the way back).
pub fn instances(s: &Snapshot) -> Vec<String> {
    let Ok(limit) = u64::try_from(s.spec.max_replica_lag_seconds) else {
        return Vec::new();
    };
    if limit == 0 {
        return Vec::new();
    }
    let designated = s
        .spec
        .replica
        .as_ref()
        .is_some_and(|r| r.enabled)
        .then_some(s.status.current_primary.as_deref())
        .flatten();
    s.instances
        .iter()
        .filter(|o| {
            if designated == Some(o.name.as_str()) {
                return false;
            }
            let Some(st) = &o.status else { return false };
            let Some(lag) = st.lag_seconds.filter(|_| st.role == Role::Replica) else {
                return false;
            };
            let was = s.status.lagging_instances.contains(&o.name);
            lag > limit || (was && lag * 2 > limit)
        })
        .map(|o| o.name.clone())
        .collect()
}

/// What the status says of them (a phase reason's part).
pub fn describe(s: &Snapshot, lagging: &[String]) -> Option<String> {
    if lagging.is_empty() {
        return None;
    }
    let each: Vec<String> = lagging
        .iter()
        .map(|n| {
            let lag = s
                .get(n)
                .and_then(|o| o.status.as_ref()?.lag_seconds)
                .map(|l| format!("{l} s"))
                .unwrap_or_else(|| "?".into());
            format!("{n} ({lag})")
        })
        .collect();
    Some(format!(
        "behind by more than spec.maxReplicaLagSeconds ({} s), not serving reads: {}",
        s.spec.max_replica_lag_seconds,
        each.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{snapshot, three};

    fn with_lag(lags: &[(&str, Option<u64>)], was: &[&str], limit: i64) -> Snapshot {
        let mut s = snapshot(three());
        s.spec.max_replica_lag_seconds = limit;
        for o in &mut s.instances {
            if let Some(r) = o.status.as_mut().and_then(|st| st.replication.as_mut()) {
                r.io_state = "Yes".into();
            }
        }
        for (n, lag) in lags {
            let o = s.instances.iter_mut().find(|o| o.name == *n).unwrap();
            o.status.as_mut().unwrap().lag_seconds = *lag;
        }
        s.status.lagging_instances = was.iter().map(|n| n.to_string()).collect();
        s
    }

    #[test]
    fn a_replica_past_the_limit_lags_until_it_is_within_half_of_it() {
        let s = with_lag(&[("db-2", Some(61)), ("db-3", Some(60))], &[], 60);
        assert_eq!(instances(&s), ["db-2"]);
        // On the way back: still out at 31 s, back at 30 s.
        let s = with_lag(&[("db-2", Some(31))], &["db-2"], 60);
        assert_eq!(instances(&s), ["db-2"]);
        let s = with_lag(&[("db-2", Some(30))], &["db-2"], 60);
        assert!(instances(&s).is_empty());
        // Unknown lag (applier stopped) is another rule's business.
        let s = with_lag(&[("db-2", None)], &["db-2"], 60);
        assert!(instances(&s).is_empty());
        // No limit.
        let s = with_lag(&[("db-2", Some(6000))], &[], 0);
        assert!(instances(&s).is_empty());
        let s = with_lag(&[("db-2", Some(61))], &[], 60);
        let said = describe(&s, &instances(&s)).unwrap();
        assert!(
            said.contains("db-2 (61 s)") && said.contains("maxReplicaLagSeconds"),
            "{said}"
        );
    }

    #[test]
    fn a_replica_clusters_designated_primary_is_never_lagging() {
        let mut s = with_lag(&[("db-1", Some(600)), ("db-2", Some(120))], &["db-1"], 60);
        s.spec.replica = Some(
            serde_json::from_str(r#"{"enabled": true, "source": {"host": "east-rw"}}"#).unwrap(),
        );
        let o = s.instances.iter_mut().find(|o| o.name == "db-1").unwrap();
        let st = o.status.as_mut().unwrap();
        st.role = crate::status::Role::Replica;
        st.read_only = true;
        assert_eq!(instances(&s), ["db-2"]);
        // The routable label Kubernetes' rw selects on keeps it.
        s.status.lagging_instances = instances(&s);
        assert!(!crate::services::out_of_service(&s.status, "db-1"));
    }

    #[test]
    fn a_lagging_replica_serves_no_reads_and_is_not_counted_ready() {
        let s = with_lag(&[("db-2", Some(120))], &[], 60);
        let routes = crate::services::desired_routes(&s);
        assert_eq!(routes.ro, ["db-3"]);
        assert_eq!(routes.r, ["db-1", "db-3"]);
        let summary = crate::phase::summarize(&s);
        assert_eq!(summary.ready_instances, 2);
        assert!(
            summary.reason.contains("db-2 (120 s)"),
            "{}",
            summary.reason
        );
    }
}
