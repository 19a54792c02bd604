//! A replica too far behind serves no reads until it catches up.

use super::divergence::ids_once_it_holds;
use super::*;

/// A replica more than `maxReplicaLagSeconds` behind leaves ro and the
/// ready count, and comes back once it has caught up; it is never out of
/// the cluster (its replication runs all along).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_too_far_behind_serves_no_reads_until_it_catches_up() {
    let c = LocalCluster::start(
        "lag",
        &manifest_with("lag", 3, "  maxReplicaLagSeconds: 2\n"),
    );
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("CREATE DATABASE lagdb").await.unwrap();
    rw.query_drop("CREATE TABLE lagdb.t (id INT PRIMARY KEY)")
        .await
        .unwrap();
    rw.query_drop("INSERT INTO lagdb.t VALUES (0)")
        .await
        .unwrap();
    let behind = if c.current_primary() == "lag-2" {
        "lag-3"
    } else {
        "lag-2"
    };
    ids_once_it_holds(&c, behind, "lagdb.t", 0).await;
    // Its applier waits for the table while the primary goes on writing.
    let mut lock = c.admin(behind).await;
    lock.query_drop("LOCK TABLES lagdb.t READ").await.unwrap();
    drop(rw);
    // Stopped by a flag and awaited, not aborted: an abort could land
    // between an insert's commit and its count (CI: 16 rows held, 15
    // counted).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let mut rw = c.app(c.service_port("rw")).await.unwrap();
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut written = 0i64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                written += 1;
                rw.query_drop(format!("INSERT INTO lagdb.t VALUES ({written})"))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            written
        })
    };
    let out = wait_for(
        &format!("{behind} out of ro and the ready count"),
        Duration::from_secs(30),
        || async {
            let st = c.status();
            let ro = c.routes().get("ro").cloned().unwrap_or_default();
            (st["laggingInstances"] == serde_json::json!([behind])
                && st["readyInstances"] == 2
                && !ro.contains(&behind.to_string()))
            .then_some(st)
        },
    )
    .await;
    let reason = out["phaseReason"].as_str().unwrap_or_default().to_string();
    assert!(
        reason.contains(behind) && reason.contains("maxReplicaLagSeconds"),
        "{reason}"
    );
    // MySQL also tells how old the transaction its applier holds is, in
    // milliseconds (what a hand-over's readiness reads beside the whole
    // seconds); MariaDB does not.
    let applying = wait_for(
        &format!("{behind}'s applying lag past 2 s"),
        Duration::from_secs(10),
        || async {
            let r = &c.instance_status(behind)["replication"];
            let ms = r["applyingLagMillis"].as_u64();
            match flavor() {
                Flavor::Mysql => ms.filter(|ms| *ms >= 2000).map(Some),
                Flavor::Mariadb => r.is_object().then_some(ms),
            }
        },
    )
    .await;
    if flavor() == Flavor::Mariadb {
        assert_eq!(applying, None, "MariaDB tells no applying lag");
    }
    lock.query_drop("UNLOCK TABLES").await.unwrap();
    drop(lock);
    wait_for(
        &format!("{behind} back in ro once caught up"),
        Duration::from_secs(30),
        || async {
            let st = c.status();
            let ro = c.routes().get("ro").cloned().unwrap_or_default();
            (st["laggingInstances"].is_null()
                && st["readyInstances"] == 3
                && ro.contains(&behind.to_string()))
            .then_some(())
        },
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let n = writer.await.unwrap();
    assert_eq!(
        ids_once_it_holds(&c, behind, "lagdb.t", n).await.len() as i64,
        n + 1
    );
    c.destroy();
}
