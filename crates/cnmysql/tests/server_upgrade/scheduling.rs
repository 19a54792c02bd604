//! An upgrade scheduled with `upgradeAt`; a maintenance window that holds every rollout.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the server images mariadb:10.11.18, mariadb:10.11.19, mariadb:11.8: run scripts/test as root (it builds them)"]
async fn a_scheduled_upgrade_waits_for_upgrade_at_and_a_maintenance_window_holds_every_rollout() {
    let c = LocalCluster::start("sup3", &manifest("sup3", 2, "mariadb:10.11.18", ""));
    let before = mysqld_pids(&c);
    let at_ms = jiff::Timestamp::now().as_millisecond() + 15_000;
    let at = jiff::Timestamp::from_millisecond(at_ms)
        .unwrap()
        .to_string();
    apply(
        &c,
        &manifest(
            "sup3",
            2,
            "mariadb:10.11.19",
            &format!("    upgradeAt: \"{at}\"\n"),
        ),
    );
    let r = record(&c, "10.11.19", Duration::from_secs(20), |r| {
        phase(r) == "Pending"
    })
    .await;
    assert_eq!(r["conditions"][1]["reason"], "Scheduled", "{r:#}");
    // The phase says when (the report follows the record within a pass).
    let starts = format!("starts at {}", &at[..19]);
    wait_for("the phase to say when", Duration::from_secs(10), || async {
        let reason = c.status()["phaseReason"].as_str()?.to_string();
        reason.contains(&starts).then_some(())
    })
    .await;
    assert!(c.has_event("ServerUpgradePending").is_some());
    // Nothing moves before upgradeAt.
    while jiff::Timestamp::now().as_millisecond() < at_ms - 1_000 {
        assert_eq!(
            mysqld_pids(&c),
            before,
            "nothing restarted before upgradeAt"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let r = record(&c, "10.11.19", Duration::from_secs(120), |r| {
        phase(r) == "Upgraded"
    })
    .await;
    let started: jiff::Timestamp = r["startTime"].as_str().unwrap().parse().unwrap();
    assert!(
        started.as_millisecond() >= at_ms,
        "started {started}, not before {at}"
    );

    // A maintenance window that is closed now holds a rollout of any kind:
    // here new server settings (every instance outdated).
    let now = jiff::Timestamp::now().as_millisecond();
    let opens = jiff::Timestamp::from_millisecond(now + 2 * 3_600_000)
        .unwrap()
        .to_string();
    // New settings (every instance recreated), in a daily window from
    // `start`.
    let in_window = |start: &str| {
        let settings = manifest("sup3", 2, "mariadb:10.11.19", "").replace(
            "innodb_buffer_pool_size: 32M",
            "innodb_buffer_pool_size: 33M",
        );
        format!("{settings}  maintenanceWindow:\n    start: \"{start}\"\n    duration: 1h\n")
    };
    let before = mysqld_pids(&c);
    apply(&c, &in_window(&opens[11..16]));
    wait_for(
        "the rollout held by the window",
        Duration::from_secs(20),
        || async {
            let r = c.status()["phaseReason"].as_str().unwrap_or("").to_string();
            r.contains("outside the maintenance window").then_some(())
        },
    )
    .await;
    for _ in 0..6 {
        assert_eq!(
            mysqld_pids(&c),
            before,
            "nothing restarted outside the window"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The window opens (every day from the current minute): it goes on.
    let open_now = jiff::Timestamp::now().to_string();
    apply(&c, &in_window(&open_now[11..16]));
    wait_for(
        "every instance recreated with the new settings",
        Duration::from_secs(120),
        || async {
            let now = mysqld_pids(&c);
            (now.iter().all(|(n, p)| before.get(n) != Some(p))
                && c.status()["phase"] == "Cluster in healthy state")
                .then_some(())
        },
    )
    .await;
    let mut a = c.admin(&c.current_primary()).await;
    let pool: Option<u64> = a
        .query_first("SELECT @@innodb_buffer_pool_size")
        .await
        .unwrap();
    assert!(pool.unwrap() >= 33 * 1024 * 1024);
    c.destroy();
}
