//! The force annotation past a broken replica; an annotated server canary on a broken image.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the server images mariadb:10.11.18, mariadb:10.11.19, mariadb:11.8: run scripts/test as root (it builds them)"]
async fn the_force_annotation_moves_an_upgrade_past_a_broken_replica() {
    let c = LocalCluster::start("sup4", &manifest("sup4", 3, "mariadb:10.11.18", ""));
    let primary = c.current_primary();
    let broken = (1..=3)
        .map(|i| format!("sup4-{i}"))
        .rfind(|n| *n != primary)
        .unwrap();
    // Break the replica: a row only it has, then the same key from the
    // primary stops its applier with a duplicate-key error.
    {
        let mut r = c.admin(&broken).await;
        r.query_drop("SET SESSION sql_log_bin = 0").await.unwrap();
        r.query_drop("SET GLOBAL read_only = OFF").await.unwrap();
        r.query_drop("CREATE DATABASE IF NOT EXISTS brk")
            .await
            .unwrap();
        r.query_drop("CREATE TABLE IF NOT EXISTS brk.t (id INT PRIMARY KEY)")
            .await
            .unwrap();
        r.query_drop("INSERT INTO brk.t VALUES (1)").await.unwrap();
        r.query_drop("SET GLOBAL read_only = ON").await.unwrap();
        let mut p = c.admin(&primary).await;
        p.query_drop("CREATE DATABASE IF NOT EXISTS brk")
            .await
            .unwrap();
        p.query_drop("CREATE TABLE IF NOT EXISTS brk.t (id INT PRIMARY KEY)")
            .await
            .unwrap();
        p.query_drop("INSERT INTO brk.t VALUES (1)").await.unwrap();
    }
    wait_for(
        &format!("{broken} broken"),
        Duration::from_secs(30),
        || async { (c.instances()[&broken]["ready"] == false).then_some(()) },
    )
    .await;
    apply(&c, &manifest("sup4", 3, "mariadb:10.11.19", ""));
    let r = record(&c, "10.11.19", Duration::from_secs(20), |r| {
        phase(r) == "Pending" && r["conditions"][1]["reason"] == "Unhealthy"
    })
    .await;
    assert!(
        r["conditions"][1]["message"]
            .as_str()
            .unwrap()
            .contains(&broken),
        "{r:#}"
    );
    let forced = manifest("sup4", 3, "mariadb:10.11.19", "").replace(
        "metadata:\n  name: sup4\n",
        "metadata:\n  name: sup4\n  annotations:\n    cnmysql.io/force-rolling-update: \"true\"\n",
    );
    apply(&c, &forced);
    // Every instance moves to the new version, the broken one included.
    wait_for(
        "every instance on 10.11.19",
        Duration::from_secs(180),
        || async {
            c.instances()
                .values()
                .all(|st| st["serverVersion"] == "10.11.19")
                .then_some(())
        },
    )
    .await;
    let r = record(&c, "10.11.19", Duration::from_secs(5), |_| true).await;
    assert_eq!(r["conditions"][1]["reason"], "Forced", "{r:#}");
    assert_eq!(
        phase(&r),
        "Upgrading",
        "waits for the broken replica's health: {r:#}"
    );
    // Repaired, the upgrade completes.
    {
        let mut r = c.admin(&broken).await;
        r.query_drop("STOP SLAVE").await.unwrap();
        r.query_drop("SET GLOBAL sql_slave_skip_counter = 1")
            .await
            .unwrap();
        r.query_drop("START SLAVE").await.unwrap();
    }
    let r = record(&c, "10.11.19", Duration::from_secs(120), |r| {
        phase(r) == "Upgraded"
    })
    .await;
    assert!(steps(&r).iter().all(|s| s.ends_with("True")), "{r:#}");
    c.destroy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the server images mariadb:10.11.18, mariadb:10.11.19, mariadb:11.8: run scripts/test as root (it builds them)"]
async fn an_annotated_server_canary_fails_on_a_broken_image_is_retried_once_fixed_then_the_cluster_follows()
 {
    let broken = cnmysql_workload::broken_image::BrokenImage::new(
        "10.11.19",
        &format!("broken-{}", std::process::id()),
    )
    .unwrap();
    let c = LocalCluster::start(
        "sua",
        &manifest(
            "sua",
            3,
            "mariadb:10.11.18",
            "  instanceUpdateStrategy: manual\n",
        ),
    );
    let primary = c.current_primary();
    let canary = (1..=3)
        .map(|i| format!("sua-{i}"))
        .find(|n| *n != primary)
        .unwrap();
    let w = start_writer(&c).await;
    w.wait_for_more(50, Duration::from_secs(20)).await;

    let pids = mysqld_pids(&c);
    c.annotate(&[
        "sua",
        &canary,
        &format!("cnmysql.io/upgrade-to=image={}", broken.reference),
    ]);
    // The image does not start: failed with the time and the server's own
    // words (locally it is tried before anything stops, when the image's
    // template data directory is made; elsewhere the step's 90 s run out).
    let failed = wait_for(
        "the attempt on the broken image to fail",
        Duration::from_secs(180),
        || async {
            let r = c.status()["instanceUpgrades"][&canary].clone();
            (r["status"] == "failed" && r["attempts"] == 1).then_some(r)
        },
    )
    .await;
    let why = failed["message"].as_str().unwrap();
    assert!(
        why.contains("this server image is broken") || why.contains("did not reach its target"),
        "{failed}"
    );
    assert!(failed["lastFailedAttemptAt"].is_string());
    for (n, p) in &pids {
        if *n != canary {
            assert_eq!(mysqld_pids(&c)[n], *p, "{n} untouched");
        }
    }
    // Fixed: the next attempt takes, the canary runs 10.11.19, the rest
    // stay on 10.11.18.
    broken.repair().unwrap();
    let done = wait_for(
        "the retried attempt to be done",
        Duration::from_secs(180),
        || async {
            let r = c.status()["instanceUpgrades"][&canary].clone();
            (r["status"] == "done").then_some(r)
        },
    )
    .await;
    assert_eq!(
        done["release"].as_str().map(|r| r.starts_with("10.11.19")),
        Some(true),
        "{done}"
    );
    let now = c.instances();
    for n in ["sua-1", "sua-2", "sua-3"] {
        let want = if *n == canary { "10.11.19" } else { "10.11.18" };
        assert_eq!(now[n]["serverVersion"], want, "{n}");
    }
    assert_eq!(c.current_primary(), primary);
    // Back to 10.11.18: refused as a downgrade, nothing touched.
    let pid = mysqld_pids(&c)[&canary].clone();
    c.annotate(&[
        "sua",
        &canary,
        "--overwrite",
        "cnmysql.io/upgrade-to=image=mariadb:10.11.18",
    ]);
    let refused = wait_for(
        "the downgrade to be refused",
        Duration::from_secs(30),
        || async {
            let r = c.status()["instanceUpgrades"][&canary].clone();
            (r["status"] == "failed" && r["upgradeTo"] == "image=mariadb:10.11.18").then_some(r)
        },
    )
    .await;
    assert!(
        refused["message"].as_str().unwrap().contains("downgrade"),
        "{refused}"
    );
    assert_eq!(mysqld_pids(&c)[&canary], pid);

    // The whole cluster by version, through the image the store knows:
    // the other replica, then the primary after a switchover.
    c.annotate(&["sua", "cnmysql.io/upgrade-to=image=mariadb:10.11.19"]);
    let o = c.orchestrated_done(Duration::from_secs(300)).await;
    assert_eq!(
        o["release"].as_str().map(|r| r.starts_with("10.11.19")),
        Some(true),
        "{o}"
    );
    for (n, st) in c.instances() {
        assert_eq!(st["serverVersion"], "10.11.19", "{n}");
    }
    assert_ne!(
        c.current_primary(),
        primary,
        "the primary was switched over first"
    );
    assert!(c.has_event("SwitchoverForUpgrade").is_some());
    assert!(c.has_event("FailoverCompleted").is_none());
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let out = w.stop().await;
    for n in ["sua-1", "sua-2", "sua-3"] {
        verify_on(&c, n, &out.acked).await;
    }
    c.destroy();
}
