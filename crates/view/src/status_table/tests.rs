use super::*;
use cnmysql_core::testutil::{primary, replica};

fn status() -> ClusterStatus {
    let mut st = ClusterStatus {
        current_primary: Some("db-1".into()),
        target_primary: Some("db-2".into()),
        fenced_instances: vec!["db-3".into()],
        ready_instances: 2,
        ..Default::default()
    };
    st.instance_states.insert(
        "db-1".into(),
        cnmysql_api::InstanceState {
            role: "primary".into(),
            phase: "running".into(),
            ready: true,
            read_only: false,
            semi_sync: "waits 1 of 2".into(),
            ..Default::default()
        },
    );
    st.instance_states.insert(
        "db-2".into(),
        cnmysql_api::InstanceState {
            role: "replica".into(),
            phase: "running".into(),
            ready: true,
            read_only: true,
            lag_seconds: Some(3),
            semi_sync: "acks".into(),
            ..Default::default()
        },
    );
    st.gtid_executed_by_instance
        .insert("db-1".into(), "0-1-100".into());
    st
}

/// Kubernetes' plugin cannot ask the instances: what the status holds
/// is all it shows, lag and semi-sync included.
#[test]
fn a_replica_cluster_shows_its_source_lag_and_position() {
    let mut st = status();
    st.replica = Some(cnmysql_api::replica::ReplicaStatus {
        enabled: true,
        source: "east-rw.east:3306".into(),
        gtid_position: Some("0-1-42".into()),
        lag_seconds: Some(3),
        receiving: true,
        ..Default::default()
    });
    let text = View::from_status("db", 3, &st).render(false);
    assert!(
        text.contains("Replica:   follows east-rw.east:3306, receiving, 3s behind; at 0-1-42"),
        "{text}"
    );
    st.replica.as_mut().unwrap().enabled = false;
    let text = View::from_status("db", 3, &st).render(false);
    assert!(text.contains("Replica:   promoted"), "{text}");
}

#[test]
fn each_volume_shows_how_full_it_is() {
    let mut st = status();
    st.instance_states.get_mut("db-1").unwrap().volumes = vec![
        cnmysql_api::VolumeUsage {
            volume: "data".into(),
            size_bytes: 2_000_000_000,
            used_bytes: 1_640_000_000,
            available_bytes: 360_000_000,
        },
        cnmysql_api::VolumeUsage {
            volume: "binlogs".into(),
            size_bytes: 500_000_000,
            used_bytes: 500_000_000,
            available_bytes: 0,
        },
    ];
    let t = View::from_status("db", 3, &st).render(false);
    let row = |i: &str| t.lines().find(|l| l.starts_with(i)).unwrap().to_string();
    assert!(
        row("db-1").ends_with("data 82% of 2.00 GB, binlogs 100% of 500 MB"),
        "{t}"
    );
    assert!(row("db-2").ends_with(" -"), "{t}");
}

#[test]
fn the_status_alone_shows_lag_and_semi_sync() {
    let t = View::from_status("db", 3, &status()).render(false);
    let row = |i: &str| t.lines().find(|l| l.starts_with(i)).unwrap().to_string();
    assert!(row("db-1").contains("waits 1 of 2"), "{t}");
    assert!(row("db-2").contains("acks"), "{t}");
    assert!(row("db-2").contains('3'), "{t}");
}

#[test]
fn both_platforms_show_the_same_columns_and_marks() {
    let from_status = View::from_status("db", 3, &status()).render(false);
    let mut live = View::from_status("db", 3, &status());
    live.refine("db-1", primary("db-1", "0-1-100").status.as_ref());
    live.refine("db-2", replica("db-2", "0-1-100").status.as_ref());
    live.refine("db-3", None);
    let live = live.render(false);
    let header = "INSTANCE  ROLE";
    for t in [&from_status, &live] {
        let h = t.lines().find(|l| l.starts_with("INSTANCE")).unwrap();
        assert!(h.starts_with(header), "{t}");
        let tail: Vec<&str> = h.split_whitespace().rev().take(4).collect();
        assert_eq!(tail, ["USED", "STORAGE", "MANAGER", "VERSION"], "{t}");
        assert!(t.contains("Primary:   current db-1  target db-2"), "{t}");
    }
    let row = |t: &str, i: &str| t.lines().find(|l| l.starts_with(i)).unwrap().to_string();
    // From the status: what was reported, and `-` for the unknown.
    assert!(row(&from_status, "db-1").contains("primary"));
    assert!(row(&from_status, "db-1").contains("0-1-100"));
    assert!(row(&from_status, "db-2").contains("replica (target)"));
    assert!(row(&from_status, "db-3").contains("- (fenced)"));
    // Refined by what the instances answer.
    assert!(row(&live, "db-2").contains("replica (target)"), "{live}");
    assert!(row(&live, "db-3").contains("unreachable"), "{live}");
    assert!(!from_status.contains('\x1b'), "no colours when piped");
}

#[test]
fn the_server_version_its_target_and_each_upgrade_step_are_shown() {
    let mut st = status();
    st.image = Some("mariadb:10.11.18".into());
    st.server_version = Some("10.11.18".into());
    st.target_image = Some("mariadb:10.11.19".into());
    st.target_server_version = Some("10.11.19".into());
    st.data_version_by_instance
        .insert("db-1".into(), "10.11.18".into());
    st.upgrade_history.push(cnmysql_api::UpgradeRecord {
        version: "10.11.19".into(),
        image: "mariadb:10.11.19".into(),
        from_version: Some("10.11.18".into()),
        phase: cnmysql_api::UpgradePhase::Pending,
        start_time: None,
        complete_time: None,
        conditions: vec![cnmysql_api::UpgradeCondition {
            type_: "PreHealthCheck".into(),
            instance: None,
            status: "Unknown".into(),
            reason: "Scheduled".into(),
            message: "starts at 2026-12-01T02:00:00Z".into(),
            start_time: None,
            complete_time: None,
            last_probe_time: None,
            last_transition_time: None,
        }],
    });
    let t = View::from_status("db", 3, &st).render(false);
    assert!(
        t.contains("Server:    10.11.18 (mariadb:10.11.18)  target 10.11.19 (mariadb:10.11.19)"),
        "{t}"
    );
    assert!(t.contains("10.11.18 → 10.11.19  Pending"), "{t}");
    assert!(
        t.contains("PreHealthCheck") && t.contains("Scheduled"),
        "{t}"
    );
    let row = t.lines().find(|l| l.starts_with("db-1")).unwrap();
    assert!(row.contains("10.11.18"), "{t}");
}
