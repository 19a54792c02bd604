use super::*;
use crate::testutil::replica;

fn snap(
    instances: Vec<Observed>,
    failing_since: Option<&str>,
    now_ms: i64,
    delay: i64,
) -> Snapshot {
    let mut s = crate::testutil::snapshot(instances);
    s.spec.failover_delay = delay;
    s.status.primary_failing_since = failing_since.map(str::to_string);
    s.status
        .gtid_executed_by_instance
        .insert("db-1".to_string(), "0-1-100".to_string());
    s.now_ms = now_ms;
    s
}

fn dead_primary() -> Observed {
    Observed {
        name: "db-1".into(),
        ordinal: 1,
        status: None,
        outdated: None,
    }
}

const T0: &str = "2026-01-01T00:00:00Z";
fn t0_ms() -> i64 {
    T0.parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap()
        .as_millisecond()
}

#[test]
fn failure_is_recorded_then_delay_respected() {
    let s = snap(
        vec![dead_primary(), replica("db-2", "0-1-100")],
        None,
        t0_ms(),
        10,
    );
    assert!(matches!(decide(&s, None, true), Decision::Failing { .. }));
    let s = snap(
        vec![dead_primary(), replica("db-2", "0-1-100")],
        Some(T0),
        t0_ms() + 9_999,
        10,
    );
    assert!(matches!(decide(&s, None, true), Decision::Failing { .. }));
    let s = snap(
        vec![dead_primary(), replica("db-2", "0-1-100")],
        Some(T0),
        t0_ms() + 10_000,
        10,
    );
    assert_eq!(
        decide(&s, None, true),
        Decision::Promote {
            old: "db-1".into(),
            candidate: "db-2".into()
        }
    );
}

#[test]
fn the_most_advanced_candidate_wins() {
    let s = snap(
        vec![
            dead_primary(),
            replica("db-2", "0-1-90"),
            replica("db-3", "0-1-100"),
        ],
        Some(T0),
        t0_ms(),
        0,
    );
    assert_eq!(
        decide(&s, None, true),
        Decision::Promote {
            old: "db-1".into(),
            candidate: "db-3".into()
        }
    );
}

#[test]
fn an_errant_transaction_blocks() {
    let s = snap(
        vec![dead_primary(), replica("db-2", "0-1-100,0-2-101")],
        Some(T0),
        t0_ms(),
        0,
    );
    match decide(&s, None, true) {
        Decision::Blocked { reason } => assert!(reason.contains("errant"), "{reason}"),
        d => panic!("{d:?}"),
    }
    // Newer writes of the old primary itself are not errant.
    let s = snap(
        vec![dead_primary(), replica("db-2", "0-1-105")],
        Some(T0),
        t0_ms(),
        0,
    );
    assert!(matches!(decide(&s, None, true), Decision::Promote { .. }));
}

#[test]
fn in_a_replica_cluster_the_sources_transactions_are_not_errant() {
    let upstream = |s: &mut Snapshot| {
        s.status.replica = Some(cnmysql_api::replica::ReplicaStatus {
            enabled: true,
            source: "east:3306".into(),
            ..Default::default()
        })
    };
    // Newer transactions of the source (server 7, no instance of this
    // cluster) that the dead designated primary had not shown yet.
    let mut s = snap(
        vec![dead_primary(), replica("db-2", "0-1-100,0-7-140")],
        Some(T0),
        t0_ms(),
        0,
    );
    assert!(
        matches!(decide(&s, None, true), Decision::Blocked { .. }),
        "a normal cluster blocks"
    );
    upstream(&mut s);
    assert!(matches!(decide(&s, None, true), Decision::Promote { .. }));
    // One of its own read-only instances writing is still errant.
    let mut s = snap(
        vec![dead_primary(), replica("db-2", "0-1-100,0-2-101")],
        Some(T0),
        t0_ms(),
        0,
    );
    upstream(&mut s);
    match decide(&s, None, true) {
        Decision::Blocked { reason } => assert!(reason.contains("errant"), "{reason}"),
        d => panic!("{d:?}"),
    }
}

/// MySQL: once the old primary is gone, its server_uuid comes from the
/// status. Without it, its own newer writes on a replica looked errant
/// and every kill -9 of a MySQL primary blocked failover.
#[test]
fn a_gone_mysql_primary_s_own_newer_writes_are_not_errant() {
    const OLD: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    const OTHER: &str = "4e11fa47-71ca-11e1-9e33-c80aa9429562";
    let mysql = |gtid: &str, recorded: bool| {
        let mut s = snap(
            vec![dead_primary(), replica("db-2", gtid)],
            Some(T0),
            t0_ms(),
            0,
        );
        s.spec.mysql.flavor = cnmysql_api::Flavor::Mysql;
        s.status
            .gtid_executed_by_instance
            .insert("db-1".into(), format!("{OLD}:1-100"));
        if recorded {
            s.status
                .source_id_by_instance
                .insert("db-1".into(), OLD.into());
        }
        s
    };
    assert!(matches!(
        decide(&mysql(&format!("{OLD}:1-105"), true), None, true),
        Decision::Promote { .. }
    ));
    match decide(&mysql(&format!("{OLD}:1-105"), false), None, true) {
        Decision::Blocked { reason } => assert!(reason.contains("errant"), "{reason}"),
        d => panic!("{d:?}"),
    }
    match decide(&mysql(&format!("{OLD}:1-100,{OTHER}:1"), true), None, true) {
        Decision::Blocked { reason } => assert!(reason.contains(OTHER), "{reason}"),
        d => panic!("{d:?}"),
    }
}

#[test]
fn divergent_candidates_block() {
    let s = snap(
        vec![
            dead_primary(),
            replica("db-2", "0-1-100,7-2-1"),
            replica("db-3", "0-1-100,0-3-101"),
        ],
        Some(T0),
        t0_ms(),
        0,
    );
    match decide(&s, None, true) {
        Decision::Blocked { reason } => assert!(reason.contains("diverged"), "{reason}"),
        d => panic!("{d:?}"),
    }
}

#[test]
fn unhealthy_fenced_or_broken_replicas_are_not_candidates() {
    let mut broken = replica("db-2", "0-1-100");
    broken
        .status
        .as_mut()
        .unwrap()
        .replication
        .as_mut()
        .unwrap()
        .last_sql_errno = 1062;
    let s = snap(vec![dead_primary(), broken], Some(T0), t0_ms(), 0);
    assert!(matches!(decide(&s, None, true), Decision::Blocked { .. }));
    let mut s = snap(
        vec![dead_primary(), replica("db-2", "0-1-100")],
        Some(T0),
        t0_ms(),
        0,
    );
    s.status.fenced_instances = vec!["db-2".into()];
    assert!(matches!(decide(&s, None, true), Decision::Blocked { .. }));
}

#[test]
fn a_held_lease_is_waited_out_unless_the_holder_is_gone() {
    let s = snap(
        vec![dead_primary(), replica("db-2", "0-1-100")],
        Some(T0),
        t0_ms(),
        0,
    );
    let lease = Lease::default().acquire("db-1", t0_ms() - 1_000).unwrap();
    assert_eq!(
        decide(&s, Some(&lease), false),
        Decision::WaitForLease {
            until_ms: lease.expires_at_ms()
        }
    );
    assert!(matches!(
        decide(&s, Some(&lease), true),
        Decision::Promote { .. }
    ));
    let mut later = s.clone();
    later.now_ms = lease.expires_at_ms();
    assert!(matches!(
        decide(&later, Some(&lease), false),
        Decision::Promote { .. }
    ));
}

#[test]
fn required_durability_blocks_while_a_replica_is_out_of_sight() {
    let mut s = snap(
        vec![
            dead_primary(),
            replica("db-2", "0-1-100"),
            Observed {
                name: "db-3".into(),
                ordinal: 3,
                status: None,
                outdated: None,
            },
        ],
        Some(T0),
        t0_ms(),
        0,
    );
    s.spec.min_sync_replicas = 1;
    s.spec.max_sync_replicas = 1;
    s.spec.mysql.semi_sync.enabled = true;
    s.spec.mysql.semi_sync.data_durability = cnmysql_api::DataDurability::Required;
    match decide(&s, None, true) {
        Decision::Blocked { reason } => assert!(reason.contains("db-3"), "{reason}"),
        d => panic!("{d:?}"),
    }
    s.instances[2] = replica("db-3", "0-1-100");
    assert!(matches!(decide(&s, None, true), Decision::Promote { .. }));
}

#[test]
fn required_durability_blocks_while_a_restarted_replica_has_not_fetched_again() {
    let refilling = |name: &str, yes: bool| {
        let mut r = replica(name, "0-1-100");
        r.status.as_mut().unwrap().relay_refilling = yes;
        r
    };
    // Every instance killed at once: both replicas' servers started
    // again, the primary is not back.
    let mut s = snap(
        vec![
            dead_primary(),
            refilling("db-2", true),
            refilling("db-3", true),
        ],
        Some(T0),
        t0_ms() + 60_000,
        0,
    );
    s.spec.min_sync_replicas = 1;
    s.spec.mysql.semi_sync.enabled = true;
    s.spec.mysql.semi_sync.data_durability = cnmysql_api::DataDurability::Required;
    match decide(&s, None, true) {
        Decision::Blocked { reason } => assert!(
            reason.contains("db-2, db-3 restarted and has not fetched again from db-1"),
            "{reason}"
        ),
        d => panic!("{d:?}"),
    }
    // One of two: the other may lack what that one acknowledged.
    s.instances[2] = refilling("db-3", false);
    assert!(matches!(decide(&s, None, true), Decision::Blocked { .. }));
    // Unless the restarted one read its source's position after the
    // restart: what it may have lost is in that position, and a
    // candidate holding it holds what it acknowledged.
    let read_after = |target: &str| {
        let mut r = refilling("db-2", true);
        r.status.as_mut().unwrap().relay_refill_target = Some(target.into());
        r
    };
    s.instances[1] = read_after("0-1-100");
    assert!(
        matches!(decide(&s, None, true), Decision::Promote { .. }),
        "{:?}",
        decide(&s, None, true)
    );
    // A source that held more than any candidate did: blocked, naming it.
    s.instances[1] = read_after("0-1-105");
    match decide(&s, None, true) {
        Decision::Blocked { reason } => assert!(
            reason
                .contains("lacks transactions that db-2 may have acknowledged before its restart")
                && reason.contains("0-1-105"),
            "{reason}"
        ),
        d => panic!("{d:?}"),
    }
    // Both fetched again all their source held after their restart
    // (or never restarted): they hold what they acknowledged.
    s.instances[1] = refilling("db-2", false);
    assert!(matches!(decide(&s, None, true), Decision::Promote { .. }));
    // Under preferred nothing acknowledged is promised.
    s.instances[1] = refilling("db-2", true);
    s.spec.mysql.semi_sync.data_durability = cnmysql_api::DataDurability::Preferred;
    assert!(matches!(decide(&s, None, true), Decision::Promote { .. }));
}

#[test]
fn a_healthy_primary_needs_nothing() {
    let mut p = replica("db-1", "0-1-100");
    p.status.as_mut().unwrap().role = Role::Primary;
    let s = snap(
        vec![p.clone(), replica("db-2", "0-1-100")],
        None,
        t0_ms(),
        0,
    );
    assert_eq!(decide(&s, None, false), Decision::Nothing);
    let mut s = snap(vec![p, replica("db-2", "0-1-100")], Some(T0), t0_ms(), 0);
    assert_eq!(decide(&s, None, false), Decision::Recovered);
    // Once a failover began (the replicas stopped receiving from it),
    // the old primary answering again does not take it back.
    s.status.failover_from = Some("db-1".into());
    assert_eq!(
        decide(&s, None, false),
        Decision::Promote {
            old: "db-1".into(),
            candidate: "db-2".into()
        }
    );
}
