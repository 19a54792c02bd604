//! A replica cluster with no network path to its source: it follows the
//! source's binlog archive in the object store (`spec.replica.source.
//! objectStore`), against real servers of the flavour under test. West is
//! recovered from east's backup, then applies what east archives as it is
//! archived, its own replica following it; east is demoted (its archive
//! ends with its last transaction), and west, promoted with east's final
//! position as the token, opens writes holding every acknowledged row.
//! North follows the same archive and, once east is destroyed, is
//! promoted without a token: it applies everything archived first.

mod common;

use std::time::{Duration, Instant};

use common::follow::*;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cluster_follows_the_binlog_archive_and_is_promoted_without_loss() {
    let secrets = tempfile::tempdir().unwrap();
    // The only test of this binary: the local platform reads it when it
    // writes the instances' configuration.
    unsafe { std::env::set_var("CNMYSQL_SECRETS_DIR", secrets.path()) };
    let store_dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", store_dir.path().display());
    let backup = format!("  backup:\n    objectStore:\n      destinationPath: {store}\n");
    let east = LocalCluster::start("east", &cluster("east", 0, &backup));
    create_source_account(&east).await;
    let w = writer::start(&east).await;
    w.wait_for_more(100, Duration::from_secs(30)).await;
    let out = east.local(&["backup"]);
    assert!(
        out.status.success(),
        "backup: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // West: recovered from east's backup, then following east's archive.
    let recovery = format!(
        "  bootstrap:\n    recovery:\n      source:\n        objectStore:\n          destinationPath: {store}\n          serverName: east\n"
    );
    let west_manifest = |enabled, token| {
        cluster(
            "west",
            100,
            &format!(
                "{recovery}{}",
                follows_archive(&store, "east", enabled, token)
            ),
        )
    };
    let west = LocalCluster::start("west", &west_manifest(true, None));
    // North, one instance, follows the same archive: promoted at the end
    // without a token, as after the loss of its source.
    let north_manifest = |enabled| {
        sized(
            "north",
            1,
            200,
            &format!(
                "{recovery}{}",
                follows_archive(&store, "east", enabled, None)
            ),
        )
    };
    let north = LocalCluster::start("north", &north_manifest(true));
    wait_showing(
        "west to read east's binlog archive",
        Duration::from_secs(120),
        &[&west],
        || async { (replica_status(&west)["receiving"] == true).then_some(()) },
    )
    .await;
    let st = replica_status(&west);
    assert_eq!(st["source"], format!("{store}/east"), "{st}");
    assert!(!writable(&west).await, "a replica cluster takes no writes");
    // What east acknowledges reaches both of west's instances through the
    // archive (about a second behind) while writes go on, across binary
    // log files east rotates to meanwhile.
    for _ in 0..3 {
        w.wait_for_more(100, Duration::from_secs(60)).await;
        use mysql_async::prelude::*;
        let mut a = east.admin(&east.current_primary()).await;
        a.query_drop("FLUSH BINARY LOGS").await.unwrap();
    }
    w.wait_for_more(100, Duration::from_secs(60)).await;
    let so_far = w.acked_ids();
    let began = Instant::now();
    for n in ["west-1", "west-2"] {
        holds(&west, n, &so_far).await;
    }
    eprintln!(
        "following the archive: {} acknowledged rows on both of west's instances {:.1}s later; status lag {}s",
        so_far.len(),
        began.elapsed().as_secs_f64(),
        replica_status(&west)["lagSeconds"]
    );

    // East demoted (it follows west over the network from now on); its
    // archive ends with its last transaction, the token.
    source_secret(secrets.path(), "east", &west);
    let demoted_at = Instant::now();
    apply(
        &east,
        &cluster(
            "east",
            0,
            &format!("{backup}{}", follows(&west, true, None)),
        ),
    );
    let token = final_position(&east).await;
    let out = w.stop().await;

    // West promoted at exactly that position, read from the archive.
    apply(&west, &west_manifest(false, Some(&token)));
    takes_writes(&west, &[&east], Duration::from_secs(240)).await;
    let downtime = demoted_at.elapsed();
    for n in ["west-1", "west-2"] {
        holds(&west, n, &out.acked).await;
    }
    let primary = west.current_primary();
    eprintln!(
        "switchover through the archive: {} acknowledged rows, 0 lost; writes stopped for {:.1}s (demotion to promotion)",
        out.acked.len(),
        downtime.as_secs_f64()
    );
    // The archive is no longer followed: no channel, no applier.
    assert_eq!(
        west.status()["instanceStates"][&primary]["archiveReplica"],
        serde_json::Value::Null
    );
    west.destroy();

    // East lost: north promoted with no token applies everything east
    // archived (east's archive ended with its last transaction: RPO 0).
    east.destroy();
    let lost_at = Instant::now();
    apply(&north, &north_manifest(false));
    takes_writes(&north, &[], Duration::from_secs(180)).await;
    let have = ids(&north, "north-1").await;
    let missing = out.acked.iter().filter(|i| !have.contains(i)).count();
    eprintln!(
        "promotion after the source was lost: writable {:.1}s after; RPO {missing} of {} acknowledged rows",
        lost_at.elapsed().as_secs_f64(),
        out.acked.len()
    );
    assert_eq!(missing, 0, "every row east archived is on north");
    north.destroy();
}
