//! Replica clusters on the local platform, against real servers (the
//! flavour under test): a second Cluster, recovered from the first's
//! backup, follows the first through its rw endpoint over TLS (and a third
//! from the start of the first's history), fails over inside itself and
//! follows on; a controlled switchover between the two (the first
//! demoted, the second promoted at the first's exact GTID position) loses
//! no acknowledged write, and the first then follows the second; last, the
//! new source is destroyed and the follower promoted without a token, its
//! RPO counted in acknowledged rows.

mod common;

use cnmysql_workload::writer::WriteChecker;
use std::time::{Duration, Instant};

use common::follow::*;
use common::*;
use mysql_async::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cluster_follows_switches_over_without_loss_and_is_promoted_after_its_source_is_lost()
 {
    let secrets = tempfile::tempdir().unwrap();
    // The only test of this binary: the local platform reads it when it
    // writes the instances' configuration.
    unsafe { std::env::set_var("CNMYSQL_SECRETS_DIR", secrets.path()) };

    let store_dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", store_dir.path().display());
    let backup = format!("  backup:\n    objectStore:\n      destinationPath: {store}\n");
    let east = LocalCluster::start("east", &cluster("east", 0, &backup));
    create_source_account(&east).await;
    source_secret(secrets.path(), "west", &east);
    source_secret(secrets.path(), "north", &east);
    let w1 = writer::start(&east).await;
    w1.wait_for_more(100, Duration::from_secs(30)).await;
    let out = east.local(&["backup"]);
    assert!(
        out.status.success(),
        "backup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    w1.wait_for_more(100, Duration::from_secs(30)).await;

    a_cluster_follows_from_an_empty_start(&east, &w1).await;

    // West is recovered from east's backup and archive, then follows east.
    let recovery = format!(
        "  bootstrap:\n    recovery:\n      source:\n        objectStore:\n          destinationPath: {store}\n          serverName: east\n"
    );
    let west_manifest = |enabled, token| {
        cluster(
            "west",
            100,
            &format!("{recovery}{}", follows(&east, enabled, token)),
        )
    };
    let west = LocalCluster::start("west", &west_manifest(true, None));
    assert!(
        west.status()["backup"]["recovered"]["backupId"].is_string(),
        "west was recovered: {}",
        west.status()
    );
    wait_for(
        "west's designated primary to receive from east",
        Duration::from_secs(120),
        || async { (replica_status(&west)["receiving"] == true).then_some(()) },
    )
    .await;
    let st = replica_status(&west);
    assert_eq!(st["enabled"], true, "{st}");
    assert_eq!(
        st["source"],
        format!("127.0.0.1:{}", east.service_port("rw")),
        "{st}"
    );
    w1.wait_for_more(100, Duration::from_secs(30)).await;
    assert!(!writable(&west).await, "a replica cluster takes no writes");
    // Its rw reaches the designated primary, read-only: what follows west
    // (east, once demoted) keeps its connection through a promotion.
    let designated = west.current_primary();
    if flavor() == Flavor::Mysql {
        // Another cluster's history is applied as the restricted applier
        // account, never as the server (docs/security.md).
        let mut a = west.admin(&designated).await;
        let checks: Option<Option<String>> = a
            .query_first("SELECT Privilege_checks_username FROM mysql.slave_relay_log_info WHERE Channel_name = ''")
            .await
            .unwrap();
        assert_eq!(checks, Some(Some("cnmysql_applier".to_string())));
    }
    assert_eq!(
        rw_server(&west).await,
        Some((west.instance_port(&designated), true)),
        "west's rw routes to its designated primary {designated}"
    );

    a_failover_inside_the_replica_cluster(&west, &designated, &w1).await;

    // Controlled switchover: east demoted, to follow west ...
    source_secret(secrets.path(), "east", &west);
    let east_manifest = |enabled, token| {
        cluster(
            "east",
            0,
            &format!("{backup}{}", follows(&west, enabled, token)),
        )
    };
    let demoted_at = Instant::now();
    apply(&east, &east_manifest(true, None));
    let token = final_position(&east).await;
    let out1 = w1.stop().await;
    // ... west promoted at exactly that position.
    apply(&west, &west_manifest(false, Some(&token)));
    takes_writes(&west, &[&east], Duration::from_secs(240)).await;
    let downtime = demoted_at.elapsed();
    let w2 = writer::start(&west).await;
    w2.wait_for_more(100, Duration::from_secs(30)).await;
    for n in ["west-1", "west-2"] {
        holds(&west, n, &out1.acked).await;
    }
    // East now follows west and holds what west acknowledges.
    wait_showing(
        "east to follow west",
        Duration::from_secs(240),
        &[&east, &west],
        || async {
            let r = replica_status(&east);
            (r["receiving"] == true
                && r["source"] == format!("127.0.0.1:{}", west.service_port("rw")))
            .then_some(())
        },
    )
    .await;
    w2.wait_for_more(100, Duration::from_secs(30)).await;
    let out2 = w2.stop().await;
    for n in ["east-1", "east-2"] {
        holds(&east, n, &out1.acked).await;
        holds(&east, n, &out2.acked).await;
    }
    eprintln!(
        "switchover between clusters: {} + {} acknowledged rows, 0 lost; writes stopped for {:.1}s (demotion to promotion)",
        out1.acked.len(),
        out2.acked.len(),
        downtime.as_secs_f64()
    );

    let promote_east = east_manifest(false, None);
    east_is_promoted_after_west_is_lost(&east, west, &promote_east, &[&out1, &out2]).await;
    east.destroy();
}

/// North follows east from an empty start (east has all its binary logs).
async fn a_cluster_follows_from_an_empty_start(east: &LocalCluster, w1: &WriteChecker) {
    let north = LocalCluster::start("north", &sized("north", 1, 200, &follows(east, true, None)));
    let seen = w1.acked_ids();
    wait_for(
        "north to hold east's rows",
        Duration::from_secs(180),
        || async {
            let have = ids(&north, "north-1").await;
            seen.iter().all(|i| have.contains(i)).then_some(())
        },
    )
    .await;
    north.destroy();
}

/// Its designated primary killed: a failover inside west, and the new
/// designated primary follows east in turn; the old one rejoins.
async fn a_failover_inside_the_replica_cluster(
    west: &LocalCluster,
    designated: &str,
    w1: &WriteChecker,
) {
    west.signal_instance(designated, nix::sys::signal::Signal::SIGKILL);
    let successor = wait_for(
        "a new designated primary in west",
        Duration::from_secs(60),
        || async {
            let p = west.current_primary();
            (p != designated && !p.is_empty()).then_some(p)
        },
    )
    .await;
    wait_for(
        "the new designated primary to receive from east, and west whole again",
        Duration::from_secs(240),
        || async {
            let st = west.status();
            (st["replica"]["receiving"] == true && st["readyInstances"] == 2).then_some(())
        },
    )
    .await;
    w1.wait_for_more(100, Duration::from_secs(30)).await;
    let so_far = w1.acked_ids();
    for n in [successor.as_str(), designated] {
        holds(west, n, &so_far).await;
    }
    assert!(!writable(west).await, "still no writes after its failover");
}

/// West is lost with writes running; east is promoted without a token:
/// every row acknowledged before the loss of west's own writes (`earlier`)
/// is on east, and what west acknowledged last is counted.
async fn east_is_promoted_after_west_is_lost(
    east: &LocalCluster,
    west: LocalCluster,
    promote_east: &str,
    earlier: &[&cnmysql_workload::writer::Outcome],
) {
    let w3 = writer::start(&west).await;
    w3.wait_for_more(200, Duration::from_secs(30)).await;
    west.destroy();
    let lost_at = Instant::now();
    let out3 = w3.stop().await;
    apply(east, promote_east);
    takes_writes(east, &[], Duration::from_secs(180)).await;
    let promoted_in = lost_at.elapsed();
    let primary = east.current_primary();
    let mut a = east.admin(&primary).await;
    let ids: Vec<u64> = a.query("SELECT id FROM app.w").await.unwrap();
    let have: std::collections::BTreeSet<u64> = ids.into_iter().collect();
    let missing = out3.acked.iter().filter(|i| !have.contains(i)).count();
    eprintln!(
        "promotion after the source was lost: writable {:.1}s after; RPO {missing} of {} acknowledged rows",
        promoted_in.as_secs_f64(),
        out3.acked.len()
    );
    for i in earlier.iter().flat_map(|o| o.acked.iter()) {
        assert!(have.contains(i), "row {i}, acknowledged before, is on east");
    }
    assert_eq!(replica_status(east)["enabled"], false);
}
