//! Server version upgrades on the local platform, with real servers from
//! the server images (MariaDB 10.11.18, 10.11.19, 11.8): a patch and a
//! major upgrade under the write checker with `dataDurability: required`,
//! downgrades refused with nothing touched, an upgrade scheduled with
//! `upgradeAt`, a maintenance window that holds every rollout, and the
//! force annotation moving an upgrade past a broken replica.
//!
//! They run servers from images, which needs root (a private mount
//! namespace) and the images themselves: `scripts/test` builds them and
//! runs these tests when it runs as root.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::writer::{start as start_writer, verify_on};
use common::*;
use mysql_async::prelude::*;
use serde_json::Value;

/// A cluster of `instances` on `image`; `extra`: lines for `spec.mysql`
/// (indented four spaces) and for `spec` (two), in any order.
fn manifest(name: &str, instances: u32, image: &str, extra: &str) -> String {
    let mysql_extra: String = extra
        .lines()
        .filter(|l| l.starts_with("    "))
        .map(|l| format!("{l}\n"))
        .collect();
    let spec_extra: String = extra
        .lines()
        .filter(|l| !l.starts_with("    "))
        .map(|l| format!("{l}\n"))
        .collect();
    let semi = if instances > 1 {
        "    semiSync:\n      enabled: true\n      timeoutMillis: 1000\n      dataDurability: required\n  minSyncReplicas: 1\n  maxSyncReplicas: 1\n"
    } else {
        ""
    };
    format!(
        "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: {name}\nspec:\n  instances: {instances}\n  mysql:\n    image: {image}\n{mysql_extra}    parameters:\n      innodb_buffer_pool_size: 32M\n{semi}{spec_extra}"
    )
}

/// `cnmysql local apply` of `text`; its output.
fn apply(c: &LocalCluster, text: &str) -> String {
    let path = c.state().join("applied.yaml");
    std::fs::write(&path, text).unwrap();
    let out = c.local(&["apply", "-f", path.to_str().unwrap()]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "local apply failed: {said}");
    said
}

/// The upgrade record for `version`, once `accept` takes it.
async fn record(
    c: &LocalCluster,
    version: &str,
    timeout: Duration,
    accept: impl Fn(&Value) -> bool,
) -> Value {
    wait_for(
        &format!("the upgrade record of {version}"),
        timeout,
        || async {
            c.status()["upgradeHistory"]
                .as_array()
                .into_iter()
                .flatten()
                .rev()
                .find(|r| {
                    r["version"]
                        .as_str()
                        .is_some_and(|v| v.starts_with(version))
                })
                .filter(|r| accept(r))
                .cloned()
        },
    )
    .await
}

fn phase(r: &Value) -> &str {
    r["phase"].as_str().unwrap_or("")
}

/// The steps of a record as `type instance: status`.
fn steps(r: &Value) -> Vec<String> {
    r["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let who = c["instance"]
                .as_str()
                .map(|i| format!(" {i}"))
                .unwrap_or_default();
            format!(
                "{}{who}: {}",
                c["type"].as_str().unwrap(),
                c["status"].as_str().unwrap()
            )
        })
        .collect()
}

fn mysqld_pids(c: &LocalCluster) -> BTreeMap<String, Value> {
    c.instances()
        .into_iter()
        .map(|(n, v)| (n, v["mysqldPid"].clone()))
        .collect()
}

/// Upgrade a running 3-instance cluster under the write checker, then
/// check what a user would: every step true in order, every instance on
/// the new version, replicas first then a switchover, no acknowledged
/// write lost. Returns the longest rw write gap.
async fn upgrade_under_writes(
    c: &LocalCluster,
    name: &str,
    to_image: &str,
    version: &str,
) -> Duration {
    let primary = c.current_primary();
    let w = start_writer(c).await;
    w.wait_for_more(50, Duration::from_secs(20)).await;
    let said = apply(c, &manifest(name, 3, to_image, ""));
    assert!(said.contains(&format!("→ {to_image}")), "{said}");
    let r = record(c, version, Duration::from_secs(300), |r| {
        phase(r) == "Upgraded" || phase(r) == "Failed"
    })
    .await;
    assert_eq!(phase(&r), "Upgraded", "{r:#}");
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let out = w.stop().await;
    let replicas: Vec<String> = (1..=3)
        .map(|i| format!("{name}-{i}"))
        .filter(|n| *n != primary)
        .collect();
    assert_eq!(
        steps(&r),
        [
            "Validation: True".to_string(),
            "PreHealthCheck: True".into(),
            format!("UpgradeReplica {}: True", replicas[0]),
            format!("UpgradeReplica {}: True", replicas[1]),
            format!("Switchover {primary}: True"),
            format!("UpgradeFormerPrimary {primary}: True"),
            "PostUpgrade: True".into(),
            "PostHealthCheck: True".into(),
        ],
        "{r:#}"
    );
    for c in r["conditions"].as_array().unwrap() {
        for t in [
            "startTime",
            "completeTime",
            "lastProbeTime",
            "lastTransitionTime",
        ] {
            assert!(c[t].is_string(), "{t} recorded: {c:#}");
        }
    }
    assert_ne!(
        c.current_primary(),
        primary,
        "the primary was switched over"
    );
    // Replicas in ascending ordinal, then the switchover, then the former
    // primary: as the rollout's events say.
    let order: Vec<String> = c
        .event_steps(&["UpdatingInstance", "SwitchoverForUpgrade"])
        .into_iter()
        .filter(|(_, message)| message.contains(to_image))
        .map(|(step, _)| step)
        .collect();
    assert_eq!(order.len(), 4, "{order:?}");
    assert_eq!(order[0], format!("UpdatingInstance {}", replicas[0]));
    assert_eq!(order[1], format!("UpdatingInstance {}", replicas[1]));
    assert!(order[2].starts_with("SwitchoverForUpgrade"), "{order:?}");
    assert_eq!(order[3], format!("UpdatingInstance {primary}"));
    for (n, st) in c.instances() {
        assert!(
            st["serverVersion"].as_str().unwrap().starts_with(version),
            "{n}: {st:#}"
        );
        assert!(
            st["dataVersion"].as_str().unwrap().starts_with(version),
            "{n}: {st:#}"
        );
    }
    let status = c.status();
    assert_eq!(status["image"], to_image);
    assert!(
        status["serverVersion"]
            .as_str()
            .unwrap()
            .starts_with(version)
    );
    for n in ["1", "2", "3"] {
        verify_on(c, &format!("{name}-{n}"), &out.acked).await;
    }
    eprintln!(
        "server upgrade to {version}: longest rw write gap {:.3}s, {} acknowledged writes, {} errors",
        out.longest_gap.as_secs_f64(),
        out.acked.len(),
        out.errors
    );
    out.longest_gap
}

/// A downgrade is refused: Degraded, an event, nothing restarted.
async fn downgrade_is_refused(c: &LocalCluster, name: &str, to_image: &str, running: &str) {
    let before = mysqld_pids(c);
    let image_before = c.status()["image"].clone();
    apply(c, &manifest(name, 3, to_image, ""));
    let tag = to_image.rsplit(':').next().unwrap();
    let r = record(c, tag, Duration::from_secs(30), |r| phase(r) == "Failed").await;
    let v = &r["conditions"][0];
    assert_eq!(v["reason"], "DowngradeRefused", "{r:#}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("which has run on the data"),
        "{r:#}"
    );
    // The record and the phase are two status writes of one pass: wait
    // for the second rather than read between them.
    let status = wait_for(
        "the cluster to report Degraded",
        Duration::from_secs(10),
        || async {
            let st = c.status();
            (st["phase"] == "Degraded").then_some(st)
        },
    )
    .await;
    let degraded = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Degraded")
        .unwrap()
        .clone();
    assert_eq!(degraded["status"], "True");
    assert_eq!(degraded["reason"], "DowngradeRefused");
    assert!(c.has_event("ServerUpgradeRefused").is_some());
    // Nothing touched: give the rollout the passes it would have taken.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < deadline {
        assert_eq!(mysqld_pids(c), before, "no server was restarted");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for (n, st) in c.instances() {
        assert!(
            st["serverVersion"].as_str().unwrap().starts_with(running),
            "{n} still runs {running}"
        );
    }
    assert_eq!(
        c.status()["image"],
        image_before,
        "the cluster still runs its image"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the server images mariadb:10.11.18, mariadb:10.11.19, mariadb:11.8: run scripts/test as root (it builds them)"]
async fn a_patch_upgrade_moves_replicas_then_the_primary_loses_nothing_and_a_downgrade_is_refused()
{
    // Started from an image catalog in the manifest, by registry names the
    // store knows by name:tag (as on Kubernetes).
    let catalog = "apiVersion: mysql.cnmysql.io/v1\nkind: ClusterImageCatalog\nmetadata:\n  name: mariadb\nspec:\n  flavor: mariadb\n  images:\n  - version: \"10.11.18\"\n    image: docker.io/library/mariadb:10.11.18\n---\n";
    let first = manifest("sup1", 3, "mariadb:10.11.18", "").replace(
        "    image: mariadb:10.11.18\n",
        "    version: \"10.11.18\"\n    imageCatalogRef:\n      kind: ClusterImageCatalog\n      name: mariadb\n",
    );
    let c = LocalCluster::start("sup1", &format!("{catalog}{first}"));
    assert_eq!(c.status()["serverVersion"], "10.11.18");
    assert_eq!(c.status()["image"], "docker.io/library/mariadb:10.11.18");
    for _ in 0..6 {
        assert!(
            c.has_event("UpdatingInstance").is_none(),
            "nothing to roll out after a start"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    upgrade_under_writes(&c, "sup1", "mariadb:10.11.19", "10.11.19").await;
    downgrade_is_refused(&c, "sup1", "mariadb:10.11.18", "10.11.19").await;
    // The last line of defence: an instance pointed at the older server by
    // hand refuses to start it on its newer data, and the rollout puts it
    // back on the cluster's image.
    let name = "sup1-3";
    apply(&c, &manifest("sup1", 3, "mariadb:10.11.19", ""));
    wait_for("the refusal cleared", Duration::from_secs(30), || async {
        (c.status()["phase"] == "Cluster in healthy state").then_some(())
    })
    .await;
    c.down();
    let cfg_path = c.instance_dir(name).join("config.json");
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    let old_root = cfg["programs"]["image"]["root"]
        .as_str()
        .unwrap()
        .replace("10.11.19", "10.11.18");
    cfg["programs"]["image"]["reference"] = "mariadb:10.11.18".into();
    cfg["programs"]["image"]["root"] = old_root.into();
    cfg["programs"]["image"]["serverVersion"] = "10.11.18".into();
    std::fs::write(&cfg_path, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
    c.up(&manifest("sup1", 3, "mariadb:10.11.19", ""));
    wait_for(
        &format!("{name} back on 10.11.19"),
        Duration::from_secs(120),
        || async {
            let st = c.instances().remove(name)?;
            (st["ready"] == true && st["serverVersion"] == "10.11.19").then_some(())
        },
    )
    .await;
    let log = std::fs::read_to_string(c.instance_dir(name).join("manager.log")).unwrap();
    assert!(
        log.contains("refusing to start 10.11.18 on data that 10.11.19 has run on"),
        "the manager refused the older server"
    );
    c.destroy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root and the server images mariadb:10.11.18, mariadb:10.11.19, mariadb:11.8: run scripts/test as root (it builds them)"]
async fn a_major_upgrade_runs_mariadb_upgrade_on_every_instance_and_a_downgrade_is_refused() {
    let c = LocalCluster::start("sup2", &manifest("sup2", 3, "mariadb:10.11.19", ""));
    upgrade_under_writes(&c, "sup2", "mariadb:11.8", "11.8").await;
    // System tables at the new version everywhere: what mariadb-upgrade
    // recorded, and the server's own view of a system table it changed.
    for (n, st) in c.instances() {
        assert!(
            st["systemTablesVersion"]
                .as_str()
                .unwrap()
                .starts_with("11.8"),
            "{n}: {st:#}"
        );
        let info =
            std::fs::read_to_string(c.instance_dir(&n).join("data/mariadb_upgrade_info")).unwrap();
        assert!(info.starts_with("11.8"), "{n}: {info}");
        let mut a = c.admin(&n).await;
        let v: Option<String> = a.query_first("SELECT VERSION()").await.unwrap();
        assert!(v.unwrap().starts_with("11.8"));
    }
    let asked: Vec<String> = c
        .events()
        .iter()
        .filter(|e| e["reason"] == "SystemTablesUpgraded")
        .map(|e| e["instance"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert_eq!(asked[0], c.current_primary(), "the primary first");
    downgrade_is_refused(&c, "sup2", "mariadb:10.11.19", "11.8").await;
    c.destroy();
}

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
    let window = format!(
        "  maintenanceWindow:\n    start: \"{}\"\n    duration: 1h\n",
        &opens[11..16]
    );
    let before = mysqld_pids(&c);
    let mut held = manifest("sup3", 2, "mariadb:10.11.19", "").replace(
        "innodb_buffer_pool_size: 32M",
        "innodb_buffer_pool_size: 33M",
    );
    held.push_str(&window);
    apply(&c, &held);
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
    let open = format!(
        "  maintenanceWindow:\n    start: \"{}\"\n    duration: 1h\n",
        &open_now[11..16]
    );
    let mut moving = manifest("sup3", 2, "mariadb:10.11.19", "").replace(
        "innodb_buffer_pool_size: 32M",
        "innodb_buffer_pool_size: 33M",
    );
    moving.push_str(&open);
    apply(&c, &moving);
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
