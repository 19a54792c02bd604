//! Builders shared by the unit tests of the core.

use cnmysql_api::ClusterStatus;

use crate::status::{InstancePhase, InstanceStatus, Observed, ReplicationStatus, Role, Snapshot};

/// Cluster `db` of three instances whose primary is `db-1`, at time 0.
pub fn snapshot(instances: Vec<Observed>) -> Snapshot {
    Snapshot {
        cluster: "db".into(),
        spec: serde_json::from_str(r#"{"instances": 3}"#).unwrap(),
        status: ClusterStatus {
            current_primary: Some("db-1".into()),
            target_primary: Some("db-1".into()),
            ..Default::default()
        },
        instances,
        now_ms: 0,
        declared: Default::default(),
    }
}

/// A ready, healthy replica `<cluster>-<n>` that has executed `gtid`.
pub fn replica(name: &str, gtid: &str) -> Observed {
    let ordinal = name.rsplit('-').next().unwrap();
    Observed {
        name: name.into(),
        ordinal: ordinal.parse().unwrap(),
        status: Some(InstanceStatus {
            instance: name.into(),
            phase: InstancePhase::Running,
            role: Role::Replica,
            mysqld_running: true,
            ready: true,
            read_only: true,
            gtid_executed: gtid.into(),
            source_id: ordinal.into(),
            replication: Some(ReplicationStatus {
                io_state: "Connecting".into(),
                sql_running: true,
                ..Default::default()
            }),
            ..Default::default()
        }),
        outdated: None,
    }
}

/// A ready, writable primary.
pub fn primary(name: &str, gtid: &str) -> Observed {
    let mut o = replica(name, gtid);
    let st = o.status.as_mut().unwrap();
    st.role = Role::Primary;
    st.read_only = false;
    st.replication = None;
    o
}

/// db-1 primary, db-2 and db-3 replicas, all at `0-1-10`.
pub fn three() -> Vec<Observed> {
    vec![
        primary("db-1", "0-1-10"),
        replica("db-2", "0-1-10"),
        replica("db-3", "0-1-10"),
    ]
}

/// What a platform observes of `s` with `absent` instances gone and
/// nothing else special.
pub fn observe<'a>(s: &'a Snapshot, absent: &'a [String]) -> crate::reconcile::Observation<'a> {
    crate::reconcile::Observation {
        snapshot: s,
        lease: None,
        absent,
        fence_early: false,
        primary_restarted_at_ms: None,
        primary_down_in_place: false,
        leaving: &[],
        cordoned: &[],
        backing_off: &[],
    }
}
