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

/// The instance `rw` routes to by the status alone ([`rw_instance`]),
/// unless the status keeps it out of every route (fenced, diverged).
pub fn rw_following_status(status: &cnmysql_api::ClusterStatus) -> Option<&str> {
    rw_instance(status).filter(|p| !out_of_service(status, p))
}

/// Routes by the status, for a platform that says which instances are
/// ready to serve (`ready`, in order; Kubernetes: the Pod is Ready, by the
/// kubelet's probes, and not being deleted). `rw` goes to the primary the
/// status accepts ([`rw_following_status`]) whatever its last answer: it
/// keeps `rw` (and the head of `r`) while its server restarts in place and
/// while it hands over after its Pod was deleted on notice, until the
/// status names another. `ro` is every other ready instance the status
/// keeps in service, `r` the `rw` primary and those. A platform whose
/// proxy applies changes at most once a second (kube-proxy) then sees a
/// change of primary as one change of every route, made when the status
/// records it, and a client connecting to a primary whose server is not
/// back yet is refused by it rather than dropped.
pub fn routes_following_status(status: &cnmysql_api::ClusterStatus, ready: &[String]) -> Routes {
    let rw = rw_following_status(status).map(String::from);
    let ro: Vec<String> = ready
        .iter()
        .filter(|n| !primary_may_serve(status, n) && !out_of_service(status, n))
        .cloned()
        .collect();
    let mut r: Vec<String> = rw.iter().cloned().collect();
    r.extend(ro.iter().filter(|n| Some(*n) != rw.as_ref()).cloned());
    Routes { rw, ro, r }
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

    /// The accepted primary keeps rw and the head of r whether or not it
    /// is ready (restarting in place, deleted on notice) until the status
    /// moves rw; the other ready instances in service are ro; fenced,
    /// diverged or lagging, an instance is in no route.
    #[test]
    fn routes_following_status_keep_the_primary_until_the_status_moves() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut st = ClusterStatus {
            current_primary: Some("db-1".into()),
            target_primary: Some("db-1".into()),
            ..Default::default()
        };
        let r = routes_following_status(&st, &names(&["db-2", "db-3"]));
        assert_eq!(r.rw.as_deref(), Some("db-1"), "not ready, still rw");
        assert_eq!(r.ro, ["db-2", "db-3"]);
        assert_eq!(r.r, ["db-1", "db-2", "db-3"]);
        // Handing over to db-2: db-1 serves until db-2 is recorded.
        st.target_primary = Some("db-2".into());
        st.phase = Some(cnmysql_api::Phase::Switchover);
        let ready = names(&["db-2", "db-3"]);
        assert_eq!(
            routes_following_status(&st, &ready).rw.as_deref(),
            Some("db-1")
        );
        // db-2 recorded: every route moves in the same answer.
        st.current_primary = Some("db-2".into());
        st.phase = None;
        let r = routes_following_status(&st, &ready);
        assert_eq!(r.rw.as_deref(), Some("db-2"));
        assert_eq!(r.ro, ["db-3"]);
        assert_eq!(r.r, ["db-2", "db-3"]);
        // A failover names no serving primary.
        st.phase = Some(cnmysql_api::Phase::FailingOver);
        st.target_primary = Some("db-3".into());
        assert_eq!(routes_following_status(&st, &ready).rw, None);
        // Fenced, diverged, lagging: in no route.
        st.phase = None;
        st.target_primary = Some("db-2".into());
        st.fenced_instances = vec!["db-2".into()];
        st.lagging_instances = vec!["db-3".into()];
        assert_eq!(routes_following_status(&st, &ready), Routes::default());
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
