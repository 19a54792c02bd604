//! Semi-synchronous replication settings of the primary, adjusted in the
//! steady state (the self-healing of `dataDurability`).

use cnmysql_api::{ClusterSpec, DataDurability, Flavor};

use crate::status::Snapshot;

/// What the primary's semi-sync settings should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub enabled: bool,
    /// MySQL `rpl_semi_sync_source_wait_for_replica_count` (MariaDB: always 1).
    pub wait_for_count: u32,
    pub timeout_millis: u64,
}

/// `required` never falls back to asynchronous replication.
pub const NEVER_FALL_BACK_MS: u64 = 4_294_967_295;

pub fn desired(spec: &ClusterSpec, healthy_replicas: u32) -> Settings {
    let semi = &spec.mysql.semi_sync;
    if !semi.enabled {
        return Settings {
            enabled: false,
            wait_for_count: 1,
            timeout_millis: semi.timeout_millis.max(1) as u64,
        };
    }
    let min = spec.min_sync_replicas.max(1) as u32;
    match (spec.mysql.flavor, semi.data_durability) {
        (Flavor::Mysql, DataDurability::Preferred) => Settings {
            enabled: true,
            wait_for_count: healthy_replicas.clamp(1, min),
            timeout_millis: semi.timeout_millis.max(1) as u64,
        },
        (Flavor::Mysql, DataDurability::Required) => Settings {
            enabled: true,
            wait_for_count: min,
            timeout_millis: semi.timeout_millis.max(1) as u64,
        },
        // MariaDB waits for one acknowledgement and has no count. Preferred:
        // wait while a healthy replica can acknowledge, else replicate
        // asynchronously. Required: always wait, never fall back.
        (Flavor::Mariadb, DataDurability::Preferred) => Settings {
            enabled: healthy_replicas >= 1,
            wait_for_count: 1,
            timeout_millis: semi.timeout_millis.max(1) as u64,
        },
        (Flavor::Mariadb, DataDurability::Required) => Settings {
            enabled: true,
            wait_for_count: 1,
            timeout_millis: NEVER_FALL_BACK_MS,
        },
    }
}

/// Healthy replicas of the current primary in a snapshot.
pub fn healthy_replicas(s: &Snapshot) -> u32 {
    s.instances
        .iter()
        .filter(|o| Some(o.name.as_str()) != s.status.current_primary.as_deref())
        .filter(|o| !s.is_fenced(&o.name) && !s.is_diverged(&o.name))
        .filter(|o| {
            o.status
                .as_ref()
                .is_some_and(|st| st.replication.as_ref().is_some_and(|r| r.healthy()))
        })
        .count() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(flavor: &str, durability: &str, min: i32) -> ClusterSpec {
        serde_json::from_value(serde_json::json!({
            "instances": 4, "minSyncReplicas": min, "maxSyncReplicas": 3,
            "mysql": {"flavor": flavor, "semiSync": {"enabled": true, "timeoutMillis": 1000, "dataDurability": durability}}
        }))
        .unwrap()
    }

    #[test]
    fn mysql_preferred_lowers_then_restores_the_count() {
        let s = spec("mysql", "preferred", 2);
        assert_eq!(desired(&s, 3).wait_for_count, 2);
        assert_eq!(desired(&s, 1).wait_for_count, 1);
        assert_eq!(desired(&s, 0).wait_for_count, 1, "never below one");
    }

    #[test]
    fn mysql_required_pins_the_count() {
        let s = spec("mysql", "required", 2);
        assert_eq!(desired(&s, 0).wait_for_count, 2);
        assert_eq!(desired(&s, 3).wait_for_count, 2);
    }

    #[test]
    fn mariadb_durability() {
        let p = spec("mariadb", "preferred", 1);
        assert!(desired(&p, 1).enabled);
        assert!(!desired(&p, 0).enabled);
        assert_eq!(desired(&p, 1).timeout_millis, 1000);
        let r = spec("mariadb", "required", 1);
        assert!(desired(&r, 0).enabled);
        assert_eq!(desired(&r, 0).timeout_millis, NEVER_FALL_BACK_MS);
    }
}
