//! The liveness isolation check (DESIGN §4): restarting every instance during
//! a control-plane outage would take the database down, so an instance
//! declares itself isolated only when the cluster state (the Kubernetes API
//! server, the local status store) has been unreachable for 30 s **and** no
//! peer instance answers either. Safety against a partitioned primary comes
//! from lease self-fencing, not from this check.

use std::time::Duration;

pub const UNREACHABLE_FOR: Duration = Duration::from_secs(30);

pub fn isolated(cluster_state_unreachable_for: Duration, any_peer_reachable: bool) -> bool {
    cluster_state_unreachable_for >= UNREACHABLE_FOR && !any_peer_reachable
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_long_outage_with_no_peer_is_isolation() {
        assert!(!isolated(Duration::from_secs(29), false));
        assert!(isolated(Duration::from_secs(30), false));
        assert!(
            !isolated(Duration::from_secs(300), true),
            "a control-plane outage alone restarts nothing"
        );
    }
}
