//! Whether an instance whose processes are gone (a manager that exited, a
//! Pod deleted, evicted or lost with its node) is started again, or held
//! down for the failover decision. One rule for every platform: the
//! topology step records the hold-down from the absence the platform
//! reports, and [`crate::running`] asks [`may_start`]
//! for the step's answer of which instances run (a platform starts a
//! manager or creates a Pod only when that answer lets it).
//!
//! A steady primary that vanished is not started again on the spot where,
//! recovering as the primary, it would race the failover; with
//! `failoverDelay: 0` the cluster fails over instead. With a delay the user
//! asked to give the primary time to come back, so it is started again in
//! place (failover fences it if it is not healthy when the delay is over).
//! Whatever holds an instance down, the topology step can let it come back
//! ([`crate::action::Action::Restart`]: the failover is done, or it is
//! blocked and nothing else can take over), and once it has, nothing holds it
//! down again until it has been seen running: two rules that disagree would
//! hold it down and let it go forever while the cluster has no primary.

use cnmysql_api::{ClusterSpec, ClusterStatus};

use crate::memory::Memory;

/// Whether a platform may start `instance`, whose processes are gone (a
/// manager that exited, a missing Pod), now: not while it is held down,
/// nor while [`keep_down`] says the step will hold it down. The step
/// records the hold-down from the absence the platform reports; this only
/// reads.
pub(crate) fn may_start(
    memory: &Memory,
    spec: &ClusterSpec,
    status: &ClusterStatus,
    instance: &str,
) -> bool {
    !memory.held_down.contains(instance) && !keep_down(spec, status, instance, memory)
}

/// True when `instance`, whose processes are gone, must not be started now.
pub(crate) fn keep_down(
    spec: &ClusterSpec,
    status: &ClusterStatus,
    instance: &str,
    memory: &Memory,
) -> bool {
    // Waking from hibernation is a start, not a failure.
    if memory.released.contains(instance) || status.hibernated {
        return false;
    }
    let steady_primary = status.current_primary.as_deref() == Some(instance)
        && status.target_primary == status.current_primary;
    let restarted_on_purpose = memory
        .restarting_primary
        .as_ref()
        .is_some_and(|(p, _)| p == instance);
    steady_primary && spec.instances > 1 && spec.failover_delay == 0 && !restarted_on_purpose
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(instances: i32, delay: i64) -> ClusterSpec {
        let mut s = crate::testutil::snapshot(Vec::new()).spec;
        s.instances = instances;
        s.failover_delay = delay;
        s
    }

    fn status(current: &str, target: &str) -> ClusterStatus {
        ClusterStatus {
            current_primary: Some(current.into()),
            target_primary: Some(target.into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_vanished_steady_primary_is_held_down_for_failover() {
        let m = Memory::default();
        assert!(keep_down(&spec(3, 0), &status("db-1", "db-1"), "db-1", &m));
        // Replicas, a primary handing over, a single instance: started again.
        assert!(!keep_down(&spec(3, 0), &status("db-1", "db-1"), "db-2", &m));
        assert!(!keep_down(&spec(3, 0), &status("db-1", "db-2"), "db-1", &m));
        assert!(!keep_down(&spec(1, 0), &status("db-1", "db-1"), "db-1", &m));
    }

    #[test]
    fn with_a_failover_delay_the_primary_comes_back_in_place() {
        let m = Memory::default();
        assert!(!keep_down(
            &spec(3, 30),
            &status("db-1", "db-1"),
            "db-1",
            &m
        ));
    }

    #[test]
    fn a_primary_restarted_by_the_rollout_is_not_held_down() {
        let m = Memory {
            restarting_primary: Some(("db-1".into(), 0)),
            ..Default::default()
        };
        assert!(!keep_down(&spec(3, 0), &status("db-1", "db-1"), "db-1", &m));
    }

    #[test]
    fn an_instance_the_step_let_come_back_is_not_held_down_again() {
        // Issue 18: failover blocked, the step restarts the old primary, and
        // the Pod rule held it down again, 1 279 times in five minutes.
        let mut m = Memory::default();
        m.released.insert("db-1".into());
        assert!(!keep_down(&spec(3, 0), &status("db-1", "db-1"), "db-1", &m));
    }

    #[test]
    fn a_primary_waking_from_hibernation_is_started_not_held_down() {
        let mut st = status("db-1", "db-1");
        assert!(keep_down(&spec(3, 0), &st, "db-1", &Memory::default()));
        st.hibernated = true;
        assert!(!keep_down(&spec(3, 0), &st, "db-1", &Memory::default()));
    }
}
