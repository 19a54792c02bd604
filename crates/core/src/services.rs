//! Which instances each Service (rw, ro, r, additional) routes to.
//!
//! Routing follows the observed topology: an instance serves rw only once it
//! reports itself a writable primary and is the accepted current primary;
//! fenced and diverged instances serve nothing, nor do replicas too far
//! behind (`lagging.rs`). In a replica cluster rw routes to the designated
//! primary, read-only: what follows the cluster (a cluster it was demoted
//! to follow, a cascaded replica cluster) keeps its connection, so the last
//! transactions before a demotion reach the cluster being promoted.

use cnmysql_api::ServiceRole;

use crate::status::{Role, Snapshot};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routes {
    /// The writable primary, if routing to it is safe right now.
    pub rw: Option<String>,
    /// Ready replicas.
    pub ro: Vec<String>,
    /// Every ready instance (the primary first).
    pub r: Vec<String>,
}

impl Routes {
    pub fn for_role(&self, role: ServiceRole) -> Vec<String> {
        match role {
            ServiceRole::Rw => self.rw.iter().cloned().collect(),
            ServiceRole::Ro => self.ro.clone(),
            ServiceRole::R => self.r.clone(),
        }
    }
}

/// Whether `instance` is the primary that may serve rw by the status alone
/// (the platform then also needs it observed ready and writable): the
/// current primary of a settled cluster, or the primary of a switchover,
/// which keeps serving while it waits for its target to catch up
/// (`switchover::ready_to_hand_over`). In a failover the old primary is
/// being fenced and never serves.
pub fn primary_may_serve(status: &cnmysql_api::ClusterStatus, instance: &str) -> bool {
    let Some(current) = status.current_primary.as_deref() else {
        return false;
    };
    current == instance
        && match status.target_primary.as_deref() {
            Some(t) if t == current => true,
            Some(_) => status.phase != Some(cnmysql_api::Phase::FailingOver),
            None => false,
        }
}

/// The instance `rw` routes to, by the status alone: the one
/// [`primary_may_serve`] (the Kubernetes platform's rw Services select it
/// by name, so that a change of primary is one write, not two relabels).
pub fn rw_instance(status: &cnmysql_api::ClusterStatus) -> Option<&str> {
    status
        .current_primary
        .as_deref()
        .filter(|p| primary_may_serve(status, p))
}

/// Whether the status keeps `instance` out of every route: fenced,
/// diverged or too far behind (`lagging.rs`).
pub fn out_of_service(status: &cnmysql_api::ClusterStatus, instance: &str) -> bool {
    let named = |list: &[String]| list.iter().any(|n| n == instance);
    named(&status.fenced_instances)
        || named(&status.diverged_instances)
        || named(&status.lagging_instances)
}

/// Whether `inst` serves rw: the writable primary the status accepts, or
/// in a replica cluster (`spec.replica.enabled`) its designated primary,
/// read-only.
fn serves_rw(s: &Snapshot, name: &str, st: &crate::status::InstanceStatus) -> bool {
    let replica_cluster = s.spec.replica.as_ref().is_some_and(|r| r.enabled);
    let writable_primary = st.role == Role::Primary && !st.read_only;
    (writable_primary || (replica_cluster && st.read_only)) && primary_may_serve(&s.status, name)
}

/// A replica cluster's designated primary whose server runs read-only but
/// which does not follow its source yet (so not ready): just demoted in a
/// switchover between clusters, its new source still reads its last
/// transactions through rw, and it can follow only once that source has
/// them. Dropping it from rw would leave the two waiting on each other.
fn designated_waiting(s: &Snapshot, name: &str, st: &crate::status::InstanceStatus) -> bool {
    let replica_cluster = s.spec.replica.as_ref().is_some_and(|r| r.enabled);
    replica_cluster && st.mysqld_running && st.read_only && primary_may_serve(&s.status, name)
}

pub fn desired_routes(s: &Snapshot) -> Routes {
    let mut routes = Routes::default();
    let lagging = crate::lagging::instances(s);
    for inst in &s.instances {
        let Some(st) = &inst.status else { continue };
        let serving = st.ready || designated_waiting(s, &inst.name, st);
        if !serving || s.is_fenced(&inst.name) || s.is_diverged(&inst.name) {
            continue;
        }
        let behind = lagging.contains(&inst.name);
        match st.role {
            // A designated primary is never lagging (`lagging.rs`): what
            // follows its cluster reads it through rw however far behind
            // its own source it is.
            _ if serves_rw(s, &inst.name, st) => {
                routes.rw = Some(inst.name.clone());
                routes.r.insert(0, inst.name.clone());
            }
            _ if behind => {}
            Role::Replica
                if st.read_only && st.replication.as_ref().is_some_and(|r| r.healthy()) =>
            {
                routes.ro.push(inst.name.clone());
                routes.r.push(inst.name.clone());
            }
            _ => {}
        }
    }
    routes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{InstanceStatus, Observed, ReplicationStatus};
    use cnmysql_api::{ClusterSpec, ClusterStatus};

    fn inst(name: &str, role: Role, read_only: bool, ready: bool) -> Observed {
        Observed {
            name: name.into(),
            ordinal: name.rsplit('-').next().unwrap().parse().unwrap(),
            status: Some(InstanceStatus {
                instance: name.into(),
                role,
                read_only,
                ready,
                replication: (role == Role::Replica).then(|| ReplicationStatus {
                    io_state: "Yes".into(),
                    sql_running: true,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            outdated: None,
        }
    }

    fn snap(instances: Vec<Observed>, current: &str, target: &str) -> Snapshot {
        Snapshot {
            cluster: "db".into(),
            spec: serde_json::from_str::<ClusterSpec>("{}").unwrap(),
            status: ClusterStatus {
                current_primary: Some(current.into()),
                target_primary: Some(target.into()),
                ..Default::default()
            },
            instances,
            now_ms: 0,
            declared: Default::default(),
        }
    }

    #[test]
    fn routes_follow_observed_roles() {
        let s = snap(
            vec![
                inst("db-1", Role::Primary, false, true),
                inst("db-2", Role::Replica, true, true),
                inst("db-3", Role::Replica, true, false),
            ],
            "db-1",
            "db-1",
        );
        let r = desired_routes(&s);
        assert_eq!(r.rw.as_deref(), Some("db-1"));
        assert_eq!(r.ro, ["db-2"]);
        assert_eq!(r.r, ["db-1", "db-2"]);
    }

    #[test]
    fn no_rw_while_primary_is_read_only_or_changing() {
        let s = snap(
            vec![inst("db-1", Role::Primary, true, true)],
            "db-1",
            "db-1",
        );
        assert_eq!(desired_routes(&s).rw, None);
        // Failing over: the old primary never keeps rw, writable or not.
        let mut s = snap(
            vec![inst("db-1", Role::Primary, false, true)],
            "db-1",
            "db-2",
        );
        s.status.phase = Some(cnmysql_api::Phase::FailingOver);
        assert_eq!(desired_routes(&s).rw, None);
        // Switching over: it serves until it turns read-only to hand over.
        s.status.phase = Some(cnmysql_api::Phase::Switchover);
        assert_eq!(desired_routes(&s).rw.as_deref(), Some("db-1"));
        let s = snap(
            vec![inst("db-1", Role::Primary, true, true)],
            "db-1",
            "db-2",
        );
        assert_eq!(desired_routes(&s).rw, None);
        // A writable server that is not the accepted primary never gets rw.
        let s = snap(
            vec![inst("db-2", Role::Primary, false, true)],
            "db-1",
            "db-1",
        );
        assert_eq!(desired_routes(&s).rw, None);
    }

    #[test]
    fn a_replica_clusters_designated_primary_serves_rw_read_only() {
        let mut s = snap(
            vec![
                inst("db-1", Role::Replica, true, true),
                inst("db-2", Role::Replica, true, true),
            ],
            "db-1",
            "db-1",
        );
        s.spec.replica = Some(
            serde_json::from_value(serde_json::json!({
                "enabled": true,
                "source": {"host": "east-rw", "port": 3306}
            }))
            .unwrap(),
        );
        let r = desired_routes(&s);
        assert_eq!(r.rw.as_deref(), Some("db-1"));
        assert_eq!(r.ro, ["db-2"]);
        assert_eq!(r.r, ["db-1", "db-2"]);
        // Far behind its source (a switchover between clusters drains
        // through it): still rw and r, on every platform (`lagging.rs`).
        s.spec.max_replica_lag_seconds = 60;
        s.instances[0].status.as_mut().unwrap().lag_seconds = Some(300);
        let r = desired_routes(&s);
        assert_eq!(r.rw.as_deref(), Some("db-1"));
        assert_eq!(r.r, ["db-1", "db-2"]);
        // Just demoted, not following its new source yet (not ready): its
        // followers keep reading it through rw.
        s.instances[0].status.as_mut().unwrap().lag_seconds = None;
        s.instances[0].status.as_mut().unwrap().ready = false;
        s.instances[0].status.as_mut().unwrap().mysqld_running = true;
        assert_eq!(desired_routes(&s).rw.as_deref(), Some("db-1"));
        s.instances[0].status.as_mut().unwrap().mysqld_running = false;
        assert_eq!(desired_routes(&s).rw, None);
        // Being promoted: no rw until it opens writes.
        s.spec.replica.as_mut().unwrap().enabled = false;
        assert_eq!(desired_routes(&s).rw, None);
    }

    #[test]
    fn fenced_and_diverged_are_dropped_everywhere() {
        let mut s = snap(
            vec![
                inst("db-1", Role::Primary, false, true),
                inst("db-2", Role::Replica, true, true),
            ],
            "db-1",
            "db-1",
        );
        s.status.fenced_instances = vec!["db-1".into()];
        s.status.diverged_instances = vec!["db-2".into()];
        assert_eq!(desired_routes(&s), Routes::default());
    }
}
