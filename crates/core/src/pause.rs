//! Pausing the control plane for maintenance: `cnmysql.io/reconcile:
//! paused` on the Cluster stops every decision the control plane takes —
//! no failover, switchover, rollout, upgrade or fencing action, and on
//! Kubernetes no change to the Cluster's objects — until it is removed.
//! The instances keep running as they are, and each manager keeps its own
//! safety rules (a primary that cannot renew its lease still turns
//! read-only). A failover under way stops where it is.

use std::collections::BTreeMap;

/// The annotation on the Cluster.
pub const ANNOTATION: &str = "cnmysql.io/reconcile";
/// Its value that pauses.
pub const PAUSED: &str = "paused";

/// Whether the Cluster's annotations pause the control plane.
pub fn paused(cluster_annotations: &BTreeMap<String, String>) -> bool {
    cluster_annotations.get(ANNOTATION).map(|v| v.trim()) == Some(PAUSED)
}

/// What the status says while paused (the phase's reason).
pub fn reason() -> String {
    format!(
        "reconciliation paused ({ANNOTATION}={PAUSED}): no failover, switchover, rollout or change to the cluster's objects until the annotation is removed"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_paused_value_pauses() {
        let a = |v: &str| BTreeMap::from([(ANNOTATION.to_string(), v.to_string())]);
        assert!(paused(&a("paused")));
        assert!(paused(&a(" paused ")));
        assert!(!paused(&a("running")));
        assert!(!paused(&BTreeMap::new()));
        assert!(reason().contains(ANNOTATION));
    }
}
