//! Which changes of a Cluster start a reconcile (`controllers.rs`).
//!
//! The topology task writes what it observes into the status at every
//! poll that sees something new, and under writes that is every poll: each
//! instance's GTID history and replica lag move with every commit, its
//! binary logs' size every few seconds (measured: the status changed
//! about once a second under 16 writers, 58 times a minute). A
//! reconcile applies every object the Cluster owns (a dozen requests), and
//! none of it reads those figures; re-running it for each was most of the
//! API server's work for a Cluster under load (issue 46). So the figures
//! that only describe progress are left out of what counts as a change;
//! everything else a user or the topology task writes (spec, labels,
//! annotations, the primary, readiness, phases, conditions) still starts
//! one at once, and every reconcile still comes back at its resync.

use std::hash::{Hash, Hasher};

use cnmysql_api::Cluster;

/// A hash of what a reconcile reads: equal for two versions of a Cluster
/// that differ only in progress figures (the predicate of the Cluster
/// watch).
pub(crate) fn relevant(cluster: &Cluster) -> Option<u64> {
    let mut c = cluster.clone();
    c.metadata.resource_version = None;
    c.metadata.managed_fields = None;
    if let Some(st) = c.status.as_mut() {
        st.gtid_executed_by_instance.clear();
        for s in st.instance_states.values_mut() {
            s.lag_seconds = None;
            s.binlogs = None;
        }
    }
    let bytes = serde_json::to_vec(&c).ok()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    Some(h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::testutil;
    use cnmysql_api::{ClusterStatus, InstanceState};

    fn cluster() -> Cluster {
        let mut c = testutil::cluster("instances: 3\n");
        let mut st = ClusterStatus {
            current_primary: Some("db-1".into()),
            ..Default::default()
        };
        st.gtid_executed_by_instance
            .insert("db-2".into(), "0-1-100".into());
        st.instance_states.insert(
            "db-2".into(),
            InstanceState {
                role: "replica".into(),
                lag_seconds: Some(0),
                ready: true,
                ..Default::default()
            },
        );
        c.status = Some(st);
        c.metadata.resource_version = Some("1".into());
        c
    }

    #[test]
    fn progress_under_writes_starts_no_reconcile() {
        let before = cluster();
        let mut after = before.clone();
        let st = after.status.as_mut().unwrap();
        st.gtid_executed_by_instance
            .insert("db-2".into(), "0-1-250".into());
        let db2 = st.instance_states.get_mut("db-2").unwrap();
        db2.lag_seconds = Some(3);
        db2.binlogs = Some(Default::default());
        after.metadata.resource_version = Some("2".into());
        assert_eq!(relevant(&before), relevant(&after));
    }

    #[test]
    fn a_new_primary_readiness_spec_or_annotation_starts_one() {
        let before = cluster();
        let changes: [fn(&mut Cluster); 4] = [
            |c| c.status.as_mut().unwrap().current_primary = Some("db-2".into()),
            |c| {
                let s = c.status.as_mut().unwrap();
                s.instance_states.get_mut("db-2").unwrap().ready = false;
            },
            |c| c.spec.instances += 1,
            |c| {
                c.metadata
                    .annotations
                    .get_or_insert_default()
                    .insert("cnmysql.io/hibernation".into(), "on".into());
            },
        ];
        for change in changes {
            let mut after = before.clone();
            change(&mut after);
            assert_ne!(relevant(&before), relevant(&after));
        }
    }
}
