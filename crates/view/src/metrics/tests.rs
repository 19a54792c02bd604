use super::*;
use cnmysql_core::status::SemiSyncStatus;
use cnmysql_core::testutil::{primary, replica, snapshot};

/// The `cnmysql_…` names in a text.
fn named(text: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("cnmysql_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

#[test]
fn the_alert_rules_and_the_dashboard_name_only_exported_metrics() {
    let exported: std::collections::BTreeSet<String> = metric_names().into_iter().collect();
    assert!(exported.contains("cnmysql_instance_up"), "{exported:?}");
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
    for file in ["prometheus-rules.yaml", "dashboard.json"] {
        let text = std::fs::read_to_string(deploy.join(file)).unwrap();
        let names = named(&text);
        assert!(names.len() > 5, "{file} names {names:?}");
        let unknown: Vec<_> = names.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "deploy/{file} names metrics nobody exports: {unknown:?}"
        );
    }
    // Every query of the dashboard parses as JSON with a non-empty expr.
    let d: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(deploy.join("dashboard.json")).unwrap())
            .unwrap();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            assert!(!t["expr"].as_str().unwrap().is_empty(), "{}", p["title"]);
        }
    }
}

fn line<'a>(page: &'a str, prefix: &str) -> &'a str {
    page.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix} in\n{page}"))
}

#[test]
fn roles_health_and_events_are_series() {
    let mut p = primary("db-1", "0-1-10");
    p.status.as_mut().unwrap().semi_sync = Some(SemiSyncStatus {
        source_enabled: true,
        source_active: true,
        clients: 1,
        ..Default::default()
    });
    let mut r = replica("db-2", "0-1-10");
    r.status.as_mut().unwrap().lag_seconds = Some(3);
    let dead = cnmysql_core::status::Observed {
        name: "db-3".into(),
        ordinal: 3,
        status: None,
        outdated: None,
    };
    let mut s = snapshot(vec![p, r, dead]);
    s.status.fenced_instances = vec!["db-2".into()];
    s.status.phase = Some(cnmysql_api::Phase::Degraded);
    let mut events = EventCounts::new();
    events.insert(("SwitchoverCompleted".into(), "Normal".into()), 2);
    let page = encode_cluster(&s, &events);

    assert_eq!(
        line(&page, "cnmysql_instance_primary{instance=\"db-1\"}"),
        "cnmysql_instance_primary{instance=\"db-1\"} 1.0"
    );
    assert_eq!(
        line(&page, "cnmysql_instance_primary{instance=\"db-2\"}"),
        "cnmysql_instance_primary{instance=\"db-2\"} 0.0"
    );
    assert!(line(&page, "cnmysql_instance_up{instance=\"db-3\"}").ends_with(" 0.0"));
    assert!(line(&page, "cnmysql_instance_fenced{instance=\"db-2\"}").ends_with(" 1.0"));
    assert!(
        line(
            &page,
            "cnmysql_instance_replication_lag_seconds{instance=\"db-2\"}"
        )
        .ends_with(" 3.0")
    );
    assert!(
        line(
            &page,
            "cnmysql_instance_semi_sync_waiting{instance=\"db-1\"}"
        )
        .ends_with(" 1.0")
    );
    assert!(line(&page, "cnmysql_cluster_ready_instances{cluster=\"db\"}").ends_with(" 2.0"));
    assert!(line(&page, "cnmysql_cluster_phase{").contains("phase=\"Degraded\""));
    assert_eq!(
        line(&page, "cnmysql_events_total{"),
        "cnmysql_events_total{reason=\"SwitchoverCompleted\",type=\"Normal\"} 2"
    );
    // An unreachable instance has no role to report.
    assert!(!page.contains("cnmysql_instance_primary{instance=\"db-3\"}"));
    assert!(page.ends_with("# EOF\n"));
}

#[test]
fn stale_managers_and_mysqld_uptime_are_series() {
    let mut p = primary("db-1", "0-1-10");
    let mut r = replica("db-2", "0-1-10");
    for (o, hash, up) in [(&mut p, "new", 600), (&mut r, "old", 7200)] {
        let st = o.status.as_mut().unwrap();
        st.executable_hash = hash.into();
        st.uptime_seconds = Some(up);
    }
    p.status.as_mut().unwrap().certificate_expires_at = Some("2028-01-01T00:00:00Z".into());
    p.status.as_mut().unwrap().last_transaction_at = Some("2026-11-26T10:00:00Z".into());
    let gone = cnmysql_core::status::Observed {
        name: "db-3".into(),
        ordinal: 3,
        status: None,
        outdated: None,
    };
    let mut s = snapshot(vec![p, r, gone]);
    s.declared.operator_certificate_expires_at = Some(1_900_000_000);
    assert!(
        line(
            &encode_cluster(&s, &EventCounts::new()),
            "cnmysql_cluster_operator_certificate_expiry_timestamp_seconds{"
        )
        .ends_with(" 1900000000.0")
    );
    // No operator hash yet: nobody is called stale.
    let page = encode_cluster(&s, &EventCounts::new());
    assert!(!page.contains("cnmysql_instance_manager_current{"));
    assert!(line(&page, "cnmysql_cluster_stale_instances{").ends_with(" 0.0"));

    s.status.operator_executable_hash = Some("new".into());
    // The unreachable one is judged by the hash it last reported.
    s.status
        .executable_hash_by_instance
        .insert("db-3".into(), "old".into());
    let page = encode_cluster(&s, &EventCounts::new());
    let current = |i: &str| {
        line(
            &page,
            &format!("cnmysql_instance_manager_current{{instance=\"{i}\"}}"),
        )
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string()
    };
    assert_eq!(current("db-1"), "1.0");
    assert_eq!(current("db-2"), "0.0");
    assert_eq!(current("db-3"), "0.0");
    assert!(line(&page, "cnmysql_cluster_stale_instances{cluster=\"db\"}").ends_with(" 2.0"));
    assert!(
        line(
            &page,
            "cnmysql_instance_mysqld_uptime_seconds{instance=\"db-2\"}"
        )
        .ends_with(" 7200.0")
    );
    // For the certificate-expiry alert.
    assert!(
        line(
            &page,
            "cnmysql_instance_certificate_expiry_timestamp_seconds{instance=\"db-1\"}"
        )
        .ends_with(" 1830297600.0")
    );
    // The primary's last committed write, as its manager saw it.
    assert!(
        line(
            &page,
            "cnmysql_instance_last_transaction_timestamp_seconds{instance=\"db-1\"}"
        )
        .ends_with(" 1795687200.0")
    );
    // The rollout's progress, for the stuck-rollout alert.
    assert!(line(&page, "cnmysql_cluster_updated_instances{cluster=\"db\"}").ends_with(" 1.0"));
    assert!(!page.contains("cnmysql_cluster_rollout_last_step_timestamp_seconds{"));
    s.status.last_rollout_step_time = Some("2026-11-24T12:00:00Z".into());
    s.status.upgrade_history.push(cnmysql_api::UpgradeRecord {
        version: "10.11.19".into(),
        image: "mariadb:10.11.19".into(),
        from_version: None,
        phase: cnmysql_api::UpgradePhase::Upgrading,
        start_time: None,
        complete_time: None,
        conditions: vec![],
    });
    s.instances[0].status.as_mut().unwrap().server_version = "10.11.19".into();
    let page = encode_cluster(&s, &EventCounts::new());
    assert!(
        line(
            &page,
            "cnmysql_cluster_rollout_last_step_timestamp_seconds{cluster=\"db\"}"
        )
        .ends_with(" 1795521600.0"),
        "{page}"
    );
    assert!(page.contains(
        "cnmysql_cluster_server_upgrade_phase{cluster=\"db\",version=\"10.11.19\",phase=\"Upgrading\"} 1.0"
    ));
    assert!(page.contains(
        "cnmysql_instance_server_version_info{instance=\"db-1\",version=\"10.11.19\"} 1.0"
    ));
    assert!(page.contains("cnmysql_cluster_rollout_target_info{cluster=\"db\",image=\"\",version=\"\",manager=\"new\"} 1.0"), "{page}");
    s.status.instance_upgrades.insert(
        "db-2".into(),
        cnmysql_api::InstanceUpgrade {
            upgrade_to: "version=11.8".into(),
            status: "failed".into(),
            attempts: 3,
            ..Default::default()
        },
    );
    let page = encode_cluster(&s, &EventCounts::new());
    assert!(page.contains(
        "cnmysql_instance_annotated_upgrade_status{instance=\"db-2\",status=\"failed\",upgrade_to=\"version=11.8\"} 1.0"
    ), "{page}");
    assert!(
        page.contains("cnmysql_instance_annotated_upgrade_attempts{instance=\"db-2\"} 3.0"),
        "{page}"
    );
}

#[test]
fn several_clusters_share_one_page_told_apart_by_their_labels() {
    let a = snapshot(vec![primary("db-1", "0-1-10")]);
    let b = snapshot(vec![primary("db-1", "0-1-3"), replica("db-2", "0-1-3")]);
    let mut events = EventCounts::new();
    events.insert(("FailoverCompleted".into(), "Warning".into()), 1);
    let labels = |ns: &str| {
        vec![
            ("namespace".to_string(), ns.to_string()),
            ("cluster".to_string(), "db".to_string()),
        ]
    };
    let page = encode_clusters(&[
        Labelled {
            labels: labels("prod"),
            snapshot: &a,
            events: &EventCounts::new(),
        },
        Labelled {
            labels: labels("staging"),
            snapshot: &b,
            events: &events,
        },
    ]);
    // Each family is declared once.
    assert_eq!(page.matches("# TYPE cnmysql_instance_up gauge").count(), 1);
    assert_eq!(page.matches("# EOF").count(), 1);
    assert!(
        line(
            &page,
            "cnmysql_instance_up{namespace=\"staging\",cluster=\"db\",instance=\"db-2\"}"
        )
        .ends_with(" 1.0")
    );
    assert!(
        line(
            &page,
            "cnmysql_cluster_ready_instances{namespace=\"prod\",cluster=\"db\"}"
        )
        .ends_with(" 1.0")
    );
    assert!(
        line(
            &page,
            "cnmysql_cluster_ready_instances{namespace=\"staging\",cluster=\"db\"}"
        )
        .ends_with(" 2.0")
    );
    assert_eq!(
        line(&page, "cnmysql_events_total{"),
        "cnmysql_events_total{namespace=\"staging\",cluster=\"db\",reason=\"FailoverCompleted\",type=\"Warning\"} 1"
    );
}
