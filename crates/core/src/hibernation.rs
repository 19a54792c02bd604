//! Hibernation: `cnmysql.io/hibernation: on` on the Cluster stops every
//! instance and keeps its data (on Kubernetes: the Pods go, the claims
//! stay); removing it (or `off`) brings the same instances back, with the
//! same primary.
//!
//! The core records the hibernation in the status (`hibernated`) before the
//! platform stops anything, and takes no action at all while the cluster
//! is hibernated or waking: a primary whose Pod is gone is not a failure
//! then, and nothing is held down or failed over. Waking ends when every
//! declared instance is ready again; the status then forgets it.

use std::collections::BTreeMap;

use crate::status::Snapshot;

/// The annotation on the Cluster.
pub const ANNOTATION: &str = "cnmysql.io/hibernation";
/// Its value that hibernates.
pub const ON: &str = "on";

/// Whether the Cluster's annotations ask for hibernation.
pub fn asked(cluster_annotations: &BTreeMap<String, String>) -> bool {
    cluster_annotations.get(ANNOTATION).map(|v| v.trim()) == Some(ON)
}

/// What the step does about hibernation: None when the cluster is neither
/// hibernated nor asked to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Record it in the status; the platform stops the instances after.
    Record,
    /// Hibernated, or waking: nothing to do but wait.
    Hold,
    /// Every instance is back: clear the record.
    Woke,
}

pub fn next(s: &Snapshot) -> Option<Next> {
    let asked = asked(&s.declared.asked.cluster);
    match (asked, s.status.hibernated) {
        (false, false) => None,
        (true, false) => Some(Next::Record),
        (true, true) => Some(Next::Hold),
        (false, true) => {
            let declared = s.spec.instances.max(0) as usize;
            let ready = s.instances.iter().filter(|o| o.ready()).count();
            Some(if ready >= declared {
                Next::Woke
            } else {
                Next::Hold
            })
        }
    }
}

/// The phase's reason while hibernated, or waking.
pub fn reason(s: &Snapshot) -> Option<String> {
    if asked(&s.declared.asked.cluster) {
        return Some(format!(
            "hibernated ({ANNOTATION}={ON}): instances stopped, their data kept; remove the annotation to bring them back"
        ));
    }
    s.status.hibernated.then(|| {
        format!(
            "waking from hibernation: {} of {} instances ready",
            s.instances.iter().filter(|o| o.ready()).count(),
            s.spec.instances
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{snapshot, three};

    fn with(annotation: Option<&str>, hibernated: bool, ready: usize) -> Snapshot {
        let mut s = snapshot(three());
        if let Some(v) = annotation {
            s.declared.asked.cluster.insert(ANNOTATION.into(), v.into());
        }
        s.status.hibernated = hibernated;
        for o in s.instances.iter_mut().skip(ready) {
            o.status = None;
        }
        s
    }

    #[test]
    fn recorded_first_held_while_asked_and_while_waking_then_forgotten() {
        assert_eq!(next(&with(None, false, 3)), None);
        assert_eq!(next(&with(Some("off"), false, 3)), None);
        assert_eq!(next(&with(Some("on"), false, 3)), Some(Next::Record));
        assert_eq!(next(&with(Some(" on "), true, 0)), Some(Next::Hold));
        // Waking: held until every instance is ready.
        assert_eq!(next(&with(None, true, 2)), Some(Next::Hold));
        assert_eq!(next(&with(Some("off"), true, 3)), Some(Next::Woke));
        assert!(
            reason(&with(Some("on"), true, 0))
                .unwrap()
                .contains(ANNOTATION)
        );
        assert!(reason(&with(None, true, 1)).unwrap().contains("1 of 3"));
        assert_eq!(reason(&with(None, false, 3)), None);
    }
}
