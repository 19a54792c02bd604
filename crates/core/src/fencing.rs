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

/// How a fencing request ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fencing {
    pub instance: String,
    pub on: bool,
    /// False when the instance already was in the asked state.
    pub changed: bool,
    /// The instance is the current primary: fencing it stops all writes.
    pub primary: bool,
}

/// Fence (`on`) or unfence `instance` in `status`, and say how it went.
pub fn request(status: &mut ClusterStatus, instance: &str, on: bool) -> Fencing {
    Fencing {
        instance: instance.to_string(),
        on,
        primary: status.current_primary.as_deref() == Some(instance),
        changed: set_fenced(status, instance, on),
    }
}

impl Fencing {
    /// The Event every platform records for a change: (warning, reason,
    /// message).
    pub fn event(&self) -> (bool, &'static str, String) {
        let i = &self.instance;
        if self.on {
            let extra = if self.primary {
                "; it is the primary, so the cluster accepts no writes until it is unfenced"
            } else {
                ""
            };
            (
                true,
                "Fenced",
                format!("{i} fenced: out of every route and read-only{extra}"),
            )
        } else {
            (
                false,
                "Unfenced",
                format!("{i} unfenced: back in routing and role reconciliation"),
            )
        }
    }

    /// What the person who asked is told, line by line (the last one a
    /// warning when the primary was fenced).
    pub fn report(&self) -> Vec<String> {
        let i = &self.instance;
        let what = if self.on { "fenced" } else { "unfenced" };
        let mut lines = vec![if self.changed {
            format!("{i} {what}")
        } else {
            format!("{i} was already {what}")
        }];
        if self.on && self.primary {
            lines.push(format!(
                "warning: {i} is the primary: the cluster accepts no writes until it is unfenced (`fence off`), and no failover replaces it"
            ));
        }
        lines
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

    #[test]
    fn fencing_the_primary_warns() {
        let mut s = ClusterStatus {
            current_primary: Some("db-1".into()),
            ..Default::default()
        };
        let f = request(&mut s, "db-1", true);
        assert!(f.changed && f.primary);
        let lines = f.report();
        assert!(
            lines[1].starts_with("warning: db-1 is the primary"),
            "{lines:?}"
        );
        assert!(f.event().2.contains("accepts no writes"));
        let f = request(&mut s, "db-2", true);
        assert_eq!(f.report(), ["db-2 fenced"]);
        let f = request(&mut s, "db-2", true);
        assert_eq!(f.report(), ["db-2 was already fenced"]);
    }
}
