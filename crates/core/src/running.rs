//! Which instances run: the step's answer to every platform, which makes
//! an instance's Pod (Kubernetes) or starts its manager process again
//! (locally) only when it says so, and stops them all when it says so.
//!
//! It is computed from the status as the step's own changes leave it, so a
//! platform that carries the step out and then converges to this answer
//! never acts on a rule older than the step: a hibernation the step has
//! just recorded stops the instances in the same pass, and a held-down
//! primary the step lets go is started in the same pass.

use std::collections::BTreeSet;

use cnmysql_api::ClusterStatus;

use crate::memory::Memory;
use crate::status::Snapshot;

/// The instances a platform keeps running.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Running {
    /// Hibernated: none runs, and a platform stops every one.
    pub hibernated: bool,
    /// Instances whose processes are gone and must not be started again
    /// now (`hold_down`): a vanished steady primary, a fenced-out one.
    pub held: BTreeSet<String>,
    /// The user paused the control plane: a platform that makes objects
    /// on the cluster's behalf (Pods) leaves them as they are; one that
    /// restarts a process in place (the kubelet, the local supervisor)
    /// goes on doing so, within `held`.
    pub paused: bool,
}

impl Running {
    /// Whether `instance`, whose processes are gone, may be started now.
    pub fn may_start(&self, instance: &str) -> bool {
        !self.hibernated && !self.held.contains(instance)
    }
}

/// The answer for the snapshot's instances, with `status` as the step left
/// it and the step's memory.
pub fn of(s: &Snapshot, status: &ClusterStatus, memory: &Memory) -> Running {
    let asked = &s.declared.asked.cluster;
    Running {
        hibernated: crate::hibernation::asked(asked) && status.hibernated,
        held: s
            .instances
            .iter()
            .map(|o| o.name.as_str())
            .filter(|n| !crate::hold_down::may_start(memory, &s.spec, status, n))
            .map(str::to_string)
            .collect(),
        paused: crate::pause::paused(asked),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{snapshot, three};

    #[test]
    fn a_steady_primary_is_held_and_the_replicas_are_not() {
        let s = snapshot(three());
        let r = of(&s, &s.status, &Memory::default());
        assert!(!r.may_start("db-1"));
        assert!(r.may_start("db-2") && r.may_start("db-3"));
        assert!(!r.hibernated && !r.paused);
    }

    #[test]
    fn hibernation_stops_every_instance_once_the_status_records_it() {
        let mut s = snapshot(three());
        s.declared
            .asked
            .cluster
            .insert(crate::hibernation::ANNOTATION.into(), "on".into());
        assert!(!of(&s, &s.status, &Memory::default()).hibernated);
        let mut after = s.status.clone();
        after.hibernated = true;
        let r = of(&s, &after, &Memory::default());
        assert!(r.hibernated && !r.may_start("db-2"));
        // Waking: the annotation is gone, the status still says hibernated.
        s.declared.asked.cluster.clear();
        let r = of(&s, &after, &Memory::default());
        assert!(!r.hibernated && r.may_start("db-1"));
    }

    #[test]
    fn memory_holds_down_what_the_step_held() {
        let s = snapshot(three());
        let mut m = Memory::default();
        m.held_down.insert("db-3".into());
        assert!(!of(&s, &s.status, &m).may_start("db-3"));
    }
}
