//! Semi-synchronous replication settings of the primary, adjusted in the
//! steady state (the self-healing of `dataDurability`).

use cnmysql_api::{ClusterSpec, DataDurability, Flavor};

use crate::status::{InstanceStatus, Role, Snapshot};

/// What the primary's semi-sync settings should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub enabled: bool,
    /// MySQL `rpl_semi_sync_source_wait_for_replica_count` (MariaDB: always 1).
    pub wait_for_count: u32,
    pub timeout_millis: u64,
}

/// The server itself never falls back to asynchronous replication: with
/// `required` nothing does, with `preferred` the primary's manager does
/// ([`fall_back`]).
pub const NEVER_FALL_BACK_MS: u64 = 4_294_967_295;

/// How long a commit may wait for an acknowledgement before the primary's
/// manager falls back to asynchronous replication (`preferred`), or `None`
/// (`required`, or semi-sync off).
///
/// The fallback is not left to the server's own timeout: a primary frozen
/// with a commit waiting would, the moment it runs again, see the timeout
/// passed and acknowledge that commit without any replica holding it —
/// after a failover has replaced it, a write the cluster never sees. The
/// manager falls back only while it provably holds the primary lease; a
/// deposed one fences itself instead (`self_fence.rs`), and the waiting
/// commit is rolled back, its client told nothing was committed.
pub fn fallback_after_ms(spec: &ClusterSpec) -> Option<u64> {
    let semi = &spec.mysql.semi_sync;
    (semi.enabled && semi.data_durability == DataDurability::Preferred)
        .then(|| semi.timeout_millis.max(1) as u64)
}

/// Whether the primary's manager switches semi-sync off now: `preferred`,
/// the lease provably its own, and a commit has waited `fallback_after_ms`.
pub fn fall_back(spec: &ClusterSpec, lease_proven: bool, longest_wait_ms: u64) -> bool {
    lease_proven && fallback_after_ms(spec).is_some_and(|after| longest_wait_ms >= after)
}

/// MySQL's `rpl_semi_sync_source_wait_for_replica_count` at its most: no
/// cluster has that many replicas, so with it no commit can be
/// acknowledged. A primary handing over sets it once it is read-only
/// ([`acks_closed`]); opening writes sets the count the spec asks again.
pub const ACKS_CLOSED_COUNT: u32 = 65_535;

/// Whether a server can acknowledge no commit any more: MySQL, semi-sync's
/// source side on and waiting for [`ACKS_CLOSED_COUNT`] replicas. Its
/// waiting commits wait for ever (until it is killed): whatever its binary
/// log holds from then on, no client is told it committed. MariaDB waits
/// for one acknowledgement and has no such count.
pub fn acks_closed(flavor: Flavor, s: &crate::status::SemiSyncStatus) -> bool {
    flavor == Flavor::Mysql && s.source_enabled && s.wait_for_count >= ACKS_CLOSED_COUNT
}

/// The settings a primary opens writes with, before the control plane has
/// counted its healthy replicas: as if every other instance were one (the
/// most a commit waits for; the control plane lowers the count under
/// `preferred` once it sees fewer).
pub fn at_promotion(spec: &ClusterSpec) -> Settings {
    let others = spec.instances.saturating_sub(1).max(0) as u32;
    desired(spec, others)
}

/// Semi-sync's source side off: a former primary must not wait for
/// acknowledgements of what it now only applies, and a `preferred` primary
/// falls back to asynchronous replication. `timeout_millis` is kept as the
/// server had it (a server rejects 0).
pub fn off(timeout_millis: u64) -> Settings {
    Settings {
        enabled: false,
        wait_for_count: 1,
        timeout_millis: timeout_millis.max(1),
    }
}

/// The source-side timeout of a former primary on its way to semi-sync
/// off ([`leaving_primary`]): a commit of its applier waits at most this
/// long, once, before the server replicates asynchronously.
pub const NEUTRAL_TIMEOUT_MS: u64 = 1;

/// How long a neutral source side has had no replica registered before it
/// is switched off: MySQL and MariaDB stop their acknowledgement receiver
/// when it is, and the receiver notices only at the end of its one-second
/// wait on the sockets of the replicas it last had (MySQL holds the lock
/// every new session takes meanwhile).
pub const QUIET_MS: u64 = 2_000;

/// How long a source side stays neutral at most: a server that keeps
/// replicas of its own (a replica cluster's designated primary) is
/// switched off all the same, its readers held up once, never its writers.
pub const NEUTRAL_AT_MOST_MS: u64 = 30_000;

/// What a former primary's manager does next with its semi-sync source
/// side, once the server is read-only, no longer the primary, and no
/// commit of a client waits for an acknowledgement (checked first:
/// `converge::leave_primary_side`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaveStep {
    /// Off already, or neutral and not yet quiet: nothing.
    Keep,
    /// Only the timeout lowered to [`NEUTRAL_TIMEOUT_MS`]: its applier no
    /// longer waits, and no other setting changes — the receiver keeps
    /// running, so no new session is held up while clients still find
    /// this server. Like switching off, a lowered timeout would release a
    /// waiting commit: hence only once none of a client's waits.
    Neutralise,
    /// Switched off, now that it holds nobody up.
    SwitchOff,
}

/// The next step of a former primary's source side ([`LeaveStep`]).
/// `neutral_for_ms` is how long the manager has seen it neutral (`None`:
/// not yet). Switching it off at once would hold every new connection to
/// a MySQL server up to a second — the clients kube-proxy still sends to
/// the old primary right after a switchover.
pub fn leaving_primary(
    s: &crate::status::SemiSyncStatus,
    neutral_for_ms: Option<u64>,
) -> LeaveStep {
    if !s.source_enabled {
        return LeaveStep::Keep;
    }
    if s.timeout_millis != NEUTRAL_TIMEOUT_MS {
        return LeaveStep::Neutralise;
    }
    match neutral_for_ms {
        Some(ms) if (s.clients == 0 && ms >= QUIET_MS) || ms >= NEUTRAL_AT_MOST_MS => {
            LeaveStep::SwitchOff
        }
        _ => LeaveStep::Keep,
    }
}

/// Whether a server in role `desired` acknowledges its source's commits
/// (the semi-sync replica side): only a replica inside its own cluster. A
/// replica cluster's designated primary follows another cluster's
/// primary, whose durability counts that cluster's own replicas alone:
/// acknowledging there would let that primary tell a client "committed"
/// for a write none of its own instances may hold, and keep a primary its
/// own failover has cut off from its replicas able to acknowledge.
pub fn replica_side(spec: &ClusterSpec, desired: &crate::role::Desired) -> bool {
    spec.mysql.semi_sync.enabled
        && !matches!(desired, crate::role::Desired::DesignatedPrimary { .. })
}

/// The settings the spec asks of a primary with `healthy_replicas`.
pub fn desired(spec: &ClusterSpec, healthy_replicas: u32) -> Settings {
    let semi = &spec.mysql.semi_sync;
    if !semi.enabled {
        return off(semi.timeout_millis.max(1) as u64);
    }
    let min = spec.min_sync_replicas.max(1) as u32;
    match (spec.mysql.flavor, semi.data_durability) {
        (Flavor::Mysql, DataDurability::Preferred) => Settings {
            enabled: true,
            wait_for_count: healthy_replicas.clamp(1, min),
            timeout_millis: NEVER_FALL_BACK_MS,
        },
        (Flavor::Mysql, DataDurability::Required) => Settings {
            enabled: true,
            wait_for_count: min,
            timeout_millis: NEVER_FALL_BACK_MS,
        },
        // MariaDB waits for one acknowledgement and has no count. Preferred:
        // wait while a healthy replica can acknowledge, else replicate
        // asynchronously. Required: always wait, never fall back.
        (Flavor::Mariadb, DataDurability::Preferred) => Settings {
            enabled: healthy_replicas >= 1,
            wait_for_count: 1,
            timeout_millis: NEVER_FALL_BACK_MS,
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

/// Semi-sync as a reader wants it: on a primary, how many acknowledgements
/// each commit waits for out of the replicas connected, or that it fell
/// back to asynchronous; on a replica, whether it acknowledges.
pub fn summary(s: &InstanceStatus) -> String {
    let Some(semi) = &s.semi_sync else {
        return "-".into();
    };
    match s.role {
        Role::Primary if s.flavor.is_some_and(|f| acks_closed(f, semi)) => {
            "closed (handing over)".into()
        }
        Role::Primary if semi.source_active => {
            format!("waits {} of {}", semi.wait_for_count.max(1), semi.clients)
        }
        Role::Primary if semi.source_enabled => "fell back to async".into(),
        Role::Replica if semi.replica_active => "acks".into(),
        Role::Replica if semi.replica_enabled => "enabled".into(),
        _ => "off".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Closed only on MySQL, with the source side on and the count at its
    /// most; a spec's count (at most the instances) never reads as closed.
    #[test]
    fn acknowledgements_are_closed_only_by_the_count_no_cluster_reaches() {
        let closed = crate::status::SemiSyncStatus {
            source_enabled: true,
            wait_for_count: ACKS_CLOSED_COUNT,
            ..Default::default()
        };
        assert!(acks_closed(Flavor::Mysql, &closed));
        assert!(!acks_closed(Flavor::Mariadb, &closed));
        let off = crate::status::SemiSyncStatus {
            source_enabled: false,
            ..closed.clone()
        };
        assert!(!acks_closed(Flavor::Mysql, &off));
        let spec = spec("mysql", "required", 2);
        let open = crate::status::SemiSyncStatus {
            wait_for_count: at_promotion(&spec).wait_for_count,
            ..closed.clone()
        };
        assert!(!acks_closed(Flavor::Mysql, &open));
        let handing_over = InstanceStatus {
            flavor: Some(Flavor::Mysql),
            role: Role::Primary,
            semi_sync: Some(crate::status::SemiSyncStatus {
                source_active: true,
                ..closed
            }),
            ..Default::default()
        };
        assert_eq!(summary(&handing_over), "closed (handing over)");
    }

    /// A former primary's source side is first made neutral (only its
    /// timeout), and switched off once no replica has been registered for
    /// a while, or after a long while in any case.
    #[test]
    fn a_former_primary_neutralises_its_source_side_then_switches_it_off_when_quiet() {
        let closed = crate::status::SemiSyncStatus {
            source_enabled: true,
            wait_for_count: ACKS_CLOSED_COUNT,
            timeout_millis: NEVER_FALL_BACK_MS,
            clients: 2,
            ..Default::default()
        };
        assert_eq!(leaving_primary(&closed, None), LeaveStep::Neutralise);
        assert_eq!(
            leaving_primary(&closed, Some(60_000)),
            LeaveStep::Neutralise
        );
        let neutral = crate::status::SemiSyncStatus {
            timeout_millis: NEUTRAL_TIMEOUT_MS,
            ..closed.clone()
        };
        assert_eq!(leaving_primary(&neutral, None), LeaveStep::Keep);
        assert_eq!(
            leaving_primary(&neutral, Some(QUIET_MS)),
            LeaveStep::Keep,
            "replicas registered"
        );
        assert_eq!(
            leaving_primary(&neutral, Some(NEUTRAL_AT_MOST_MS)),
            LeaveStep::SwitchOff
        );
        let quiet = crate::status::SemiSyncStatus {
            clients: 0,
            ..neutral
        };
        assert_eq!(leaving_primary(&quiet, Some(QUIET_MS - 1)), LeaveStep::Keep);
        assert_eq!(
            leaving_primary(&quiet, Some(QUIET_MS)),
            LeaveStep::SwitchOff
        );
        let off = crate::status::SemiSyncStatus {
            source_enabled: false,
            ..quiet
        };
        assert_eq!(
            leaving_primary(&off, Some(NEUTRAL_AT_MOST_MS)),
            LeaveStep::Keep
        );
        // A primary's timeout is never the neutral one: a server promoted
        // again (which sets every setting) is never taken for a former
        // primary on its way off.
        assert!(at_promotion(&spec("mysql", "required", 1)).timeout_millis != NEUTRAL_TIMEOUT_MS);
    }

    fn spec(flavor: &str, durability: &str, min: i32) -> ClusterSpec {
        serde_json::from_value(serde_json::json!({
            "instances": 4, "minSyncReplicas": min, "maxSyncReplicas": 3,
            "mysql": {"flavor": flavor, "semiSync": {"enabled": true, "timeoutMillis": 1000, "dataDurability": durability}}
        }))
        .unwrap()
    }

    #[test]
    fn a_new_primary_opens_writes_counting_every_other_instance() {
        // 4 instances: 3 others, at most minSyncReplicas (2) waited for.
        let s = spec("mysql", "preferred", 2);
        assert_eq!(at_promotion(&s), desired(&s, 3));
        assert_eq!(at_promotion(&s).wait_for_count, 2);
        let off = off(0);
        assert!(!off.enabled);
        assert_eq!(off.timeout_millis, 1, "a server rejects 0");
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
        // Nor does the server fall back to asynchronous on its own.
        assert_eq!(desired(&s, 0).timeout_millis, NEVER_FALL_BACK_MS);
    }

    #[test]
    fn mariadb_durability() {
        let p = spec("mariadb", "preferred", 1);
        assert!(desired(&p, 1).enabled);
        assert!(!desired(&p, 0).enabled);
        let r = spec("mariadb", "required", 1);
        assert!(desired(&r, 0).enabled);
        assert_eq!(desired(&r, 0).timeout_millis, NEVER_FALL_BACK_MS);
    }

    #[test]
    fn only_a_primary_holding_its_lease_falls_back_and_only_when_preferred() {
        // Issue 18: a primary frozen with a commit waiting acknowledged it
        // the moment it ran again (the server's own timeout had passed),
        // after a failover had replaced it.
        for flavor in ["mariadb", "mysql"] {
            let p = spec(flavor, "preferred", 1);
            assert_eq!(desired(&p, 1).timeout_millis, NEVER_FALL_BACK_MS);
            assert_eq!(fallback_after_ms(&p), Some(1000));
            assert!(fall_back(&p, true, 1000));
            assert!(!fall_back(&p, true, 999));
            assert!(
                !fall_back(&p, false, 60_000),
                "deposed: fence, never fall back"
            );
            let r = spec(flavor, "required", 1);
            assert_eq!(fallback_after_ms(&r), None);
            assert!(!fall_back(&r, true, 60_000));
        }
    }
    #[test]
    fn only_a_replica_inside_its_cluster_acknowledges_its_source() {
        use crate::role::Desired;
        let mut spec: ClusterSpec = serde_json::from_value(serde_json::json!({
            "instances": 2, "mysql": {"semiSync": {"enabled": true}}
        }))
        .unwrap();
        let replica = Desired::Replica {
            source: "db-1".into(),
        };
        let designated = Desired::DesignatedPrimary {
            source: "east-rw:3306".into(),
        };
        assert!(replica_side(&spec, &replica));
        assert!(
            !replica_side(&spec, &designated),
            "a designated primary never acknowledges another cluster's primary"
        );
        spec.mysql.semi_sync.enabled = false;
        assert!(!replica_side(&spec, &replica));
    }
}
