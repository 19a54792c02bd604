//! Fencing: take an instance out of service without deleting it. It leaves
//! every route, is held read-only, and is never a failover candidate.

use cnmysql_api::ClusterStatus;

/// Add or remove `instance` from `fencedInstances`; false when nothing changed.
pub fn set_fenced(status: &mut ClusterStatus, instance: &str, on: bool) -> bool {
    let present = status.fenced_instances.iter().any(|n| n == instance);
    match (on, present) {
        (true, false) => {
            status.fenced_instances.push(instance.to_string());
            status.fenced_instances.sort();
            true
        }
        (false, true) => {
            status.fenced_instances.retain(|n| n != instance);
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fencing_is_idempotent() {
        let mut s = ClusterStatus::default();
        assert!(set_fenced(&mut s, "db-2", true));
        assert!(!set_fenced(&mut s, "db-2", true));
        assert_eq!(s.fenced_instances, ["db-2"]);
        assert!(set_fenced(&mut s, "db-2", false));
        assert!(!set_fenced(&mut s, "db-2", false));
        assert!(s.fenced_instances.is_empty());
    }
}
