//! Which instance a base backup is taken from: the instances to try, in
//! order, each with why it was chosen. A pure function of the Cluster's
//! status as last observed; both platforms ask it and then try the
//! instances in turn (one that refuses, say because it stopped being ready
//! since the last poll, gives way to the next).
//!
//! `primary`: the current primary alone. `prefer-replica` (the default):
//! the ready replicas first, the most caught up before the others (so the
//! backup is as recent as can be without touching the primary), then the
//! primary as the last resort. A replica that is fenced, diverged, not
//! ready, or not streaming from the primary is never chosen: its copy could
//! hold history the cluster does not, or be far behind.

use cnmysql_api::backup_resources::BackupTarget;
use cnmysql_api::{ClusterStatus, Flavor};

use crate::status::parse_history;

/// One instance to try, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub instance: String,
    pub why: String,
}

/// The instances to try for a backup with `target`, in order. An error
/// when there is nothing to back up from.
pub fn sources(
    target: BackupTarget,
    flavor: Flavor,
    status: &ClusterStatus,
) -> Result<Vec<Source>, String> {
    let primary = status
        .current_primary
        .clone()
        .ok_or_else(|| "the cluster has no primary to back up".to_string())?;
    if target == BackupTarget::Primary {
        return Ok(vec![Source {
            instance: primary,
            why: "target primary".into(),
        }]);
    }
    let history = |name: &str| {
        status
            .gtid_executed_by_instance
            .get(name)
            .and_then(|g| parse_history(flavor, g).ok())
    };
    let mut ready: Vec<(String, _)> = status
        .instance_states
        .iter()
        .filter(|(name, s)| {
            **name != primary
                && s.role == "replica"
                && s.ready
                && s.read_only
                && !status.fenced_instances.contains(name)
                && !status.diverged_instances.contains(name)
        })
        .map(|(name, _)| (name.clone(), history(name)))
        .collect();
    // Most caught up first: the replicas whose history holds the most of
    // the others'. Unknown histories go last; ties by name.
    let holds = |h: &Option<cnmysql_gtid::History>,
                 all: &[(String, Option<cnmysql_gtid::History>)]| {
        h.as_ref().map_or(0, |h| {
            all.iter()
                .filter(|(_, o)| o.as_ref().is_some_and(|o| h.contains(o)))
                .count()
                + 1
        })
    };
    let ranks: Vec<usize> = ready.iter().map(|(_, h)| holds(h, &ready)).collect();
    let mut order: Vec<usize> = (0..ready.len()).collect();
    order.sort_by(|&a, &b| ranks[b].cmp(&ranks[a]).then(ready[a].0.cmp(&ready[b].0)));
    let mut out: Vec<Source> = order
        .iter()
        .map(|&i| Source {
            instance: std::mem::take(&mut ready[i].0),
            why: "target prefer-replica: a ready replica".into(),
        })
        .collect();
    if let Some(first) = out.first_mut() {
        first.why = "target prefer-replica: the most caught-up ready replica".into();
    }
    let why = if out.is_empty() {
        "target prefer-replica, but no replica is ready: the primary".to_string()
    } else {
        "target prefer-replica: no replica could serve it, so the primary".to_string()
    };
    out.push(Source {
        instance: primary,
        why,
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cnmysql_api::InstanceState;

    fn state(role: &str, ready: bool) -> InstanceState {
        InstanceState {
            role: role.into(),
            phase: "running".into(),
            ready,
            read_only: role != "primary",
            ..Default::default()
        }
    }

    fn status() -> ClusterStatus {
        let mut st = ClusterStatus {
            current_primary: Some("c-1".into()),
            ..Default::default()
        };
        st.instance_states
            .insert("c-1".into(), state("primary", true));
        st.instance_states
            .insert("c-2".into(), state("replica", true));
        st.instance_states
            .insert("c-3".into(), state("replica", true));
        st.gtid_executed_by_instance
            .insert("c-1".into(), "0-1-30".into());
        st.gtid_executed_by_instance
            .insert("c-2".into(), "0-1-20".into());
        st.gtid_executed_by_instance
            .insert("c-3".into(), "0-1-29".into());
        st
    }

    fn names(v: &[Source]) -> Vec<&str> {
        v.iter().map(|s| s.instance.as_str()).collect()
    }

    #[test]
    fn the_most_caught_up_replica_comes_first_and_the_primary_last() {
        let v = sources(BackupTarget::PreferReplica, Flavor::Mariadb, &status()).unwrap();
        assert_eq!(names(&v), ["c-3", "c-2", "c-1"]);
        assert!(v[0].why.contains("most caught-up"), "{v:?}");
        assert!(v[2].why.contains("primary"), "{v:?}");
    }

    #[test]
    fn target_primary_takes_the_primary_alone() {
        let v = sources(BackupTarget::Primary, Flavor::Mariadb, &status()).unwrap();
        assert_eq!(names(&v), ["c-1"]);
    }

    #[test]
    fn fenced_diverged_unready_and_writable_replicas_are_never_chosen() {
        let mut st = status();
        st.instance_states
            .insert("c-4".into(), state("replica", false));
        st.instance_states
            .insert("c-5".into(), state("replica", true));
        st.instance_states.get_mut("c-5").expect("c-5").read_only = false;
        st.fenced_instances.push("c-3".into());
        st.diverged_instances.push("c-2".into());
        let v = sources(BackupTarget::PreferReplica, Flavor::Mariadb, &st).unwrap();
        assert_eq!(names(&v), ["c-1"]);
        assert!(v[0].why.contains("no replica is ready"), "{v:?}");
    }

    #[test]
    fn no_primary_no_backup() {
        let mut st = status();
        st.current_primary = None;
        let e = sources(BackupTarget::PreferReplica, Flavor::Mysql, &st).unwrap_err();
        assert!(e.contains("no primary"), "{e}");
    }
}
