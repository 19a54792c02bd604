//! Builders shared by the unit tests of the core.

use crate::status::{InstancePhase, InstanceStatus, Observed, ReplicationStatus, Role};

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
