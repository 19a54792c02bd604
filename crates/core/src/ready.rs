//! What one step hands its platform (raft-rs's shape): the actions to
//! carry out, in order, and the instances to keep running once they are.
//! The platform converges to both and decides nothing itself; what an
//! action's outcome means goes back through [`crate::outcome::advance`].

use crate::action::Action;
use crate::memory::Memory;
use crate::reconcile::Observation;
use crate::running::Running;

/// One step's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Ready {
    pub actions: Vec<Action>,
    pub running: Running,
}

/// Step once over what the platform observed: the actions, and the
/// instances to keep running with the status as those actions leave it.
pub fn ready(o: &Observation<'_>, memory: &mut Memory) -> Ready {
    let actions = crate::reconcile::step(o, memory);
    let mut after = o.snapshot.status.clone();
    for a in &actions {
        if let Action::Status { change, .. } = a {
            change.apply(&mut after);
        }
    }
    Ready {
        running: crate::running::of(o.snapshot, &after, memory),
        actions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{observe, snapshot, three};

    #[test]
    fn a_hibernation_recorded_by_this_step_stops_every_instance_at_once() {
        let mut s = snapshot(three());
        s.declared
            .asked
            .cluster
            .insert(crate::hibernation::ANNOTATION.into(), "on".into());
        let r = ready(&observe(&s, &[]), &mut Memory::default());
        assert!(r.running.hibernated, "{r:?}");
    }

    #[test]
    fn a_vanished_primary_is_held_and_its_replicas_may_start() {
        let s = snapshot(three());
        let absent = ["db-1".to_string(), "db-3".to_string()];
        let mut m = Memory {
            first_step_ms: Some(0),
            ..Default::default()
        };
        let r = ready(&observe(&s, &absent), &mut m);
        assert!(!r.running.may_start("db-1") && r.running.may_start("db-3"));
        assert!(m.held_down.contains("db-1"));
    }
}
