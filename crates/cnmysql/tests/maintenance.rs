//! Maintenance on the local platform, against real servers: pausing the
//! control plane, and hibernating a cluster.

mod common;

use std::time::Duration;

use common::*;
use mysql_async::prelude::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_cluster_refuses_a_switchover_and_says_why_until_it_is_resumed() {
    let c = LocalCluster::start("pause", &manifest("pause", 2));
    // The plugin's verb sets the reconcile pause annotation.
    let out = c.plugin("kubectl-cnmsql", &["maintenance", "on", "pause"]);
    assert!(
        out.status.success()
            && String::from_utf8_lossy(&out.stderr)
                .contains("reconciliation paused for maintenance"),
        "{out:?}"
    );
    let reason = || c.status()["phaseReason"].as_str().unwrap_or("").to_string();
    wait_for(
        "the status to say paused",
        Duration::from_secs(30),
        || async { reason().starts_with("reconciliation paused").then_some(()) },
    )
    .await;
    // Nothing would watch a switchover through: refused, saying why.
    let out = c.local(&["promote", "pause-2"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ReconcilePaused") && err.contains("remove the annotation"),
        "{err}"
    );
    assert_eq!(c.current_primary(), "pause-1");
    // Resumed (`cnmysql local maintenance`, the plugin's verb under
    // `cnmysql local`): the same request goes through.
    ok(
        &c.local(&["maintenance", "off", "pause"]),
        "local maintenance off",
    );
    wait_for("the pause to end", Duration::from_secs(30), || async {
        (!reason().contains("paused")).then_some(())
    })
    .await;
    ok(&c.local(&["promote", "pause-2"]), "promote");
    assert_eq!(c.current_primary(), "pause-2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hibernation_stops_every_instance_keeps_the_data_and_brings_back_the_same_primary() {
    let c = LocalCluster::start("hib", &manifest("hib", 3));
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("CREATE DATABASE hib").await.unwrap();
    rw.query_drop("CREATE TABLE hib.t (i INT PRIMARY KEY)")
        .await
        .unwrap();
    rw.query_drop("INSERT INTO hib.t VALUES (1), (2), (3)")
        .await
        .unwrap();
    drop(rw);
    let primary = c.current_primary();
    // `cnmysql local hibernate`, the plugin's verb under `cnmysql local`.
    ok(&c.local(&["hibernate", "on", "hib"]), "local hibernate on");
    let pids: Vec<i32> = ["hib-1", "hib-2", "hib-3"]
        .iter()
        .flat_map(|i| {
            let (m, s) = c.instance_pids(i);
            [m, s]
        })
        .collect();
    wait_for(
        "every instance stopped, the status hibernated",
        Duration::from_secs(60),
        || async {
            let st = c.status();
            let gone = pids
                .iter()
                .all(|p| !std::path::Path::new(&format!("/proc/{p}")).exists());
            (gone && st["phase"] == "Hibernated" && st["hibernated"] == true).then_some(())
        },
    )
    .await;
    assert!(c.has_event("Hibernating").is_some());
    // Stays down: nothing fails over or restarts it meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(c.status()["phase"] == "Hibernated");
    assert_eq!(c.current_primary(), primary);

    // Woken with the plugin, as on Kubernetes.
    ok(
        &c.plugin("kubectl-cnmsql", &["hibernate", "off", "hib"]),
        "hibernate off",
    );
    wait_for(
        "the cluster back, whole",
        Duration::from_secs(90),
        || async {
            let st = c.status();
            (st["hibernated"].is_null() && st["readyInstances"] == 3).then_some(())
        },
    )
    .await;
    assert_eq!(c.current_primary(), primary, "the same primary comes back");
    assert!(c.has_event("WokeFromHibernation").is_some());
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    let n: i64 = rw
        .query_first("SELECT COUNT(*) FROM hib.t")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 3);
    c.destroy();
}

/// Binary logs on a volume of their own (`spec.storage.binlogs`; locally a
/// directory beside the data): the server writes them there, a switchover
/// and a re-clone keep one history (the re-cloned replica's old logs go
/// with its old data), and the setting cannot be dropped later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_logs_in_a_directory_of_their_own_follow_the_data_through_a_reclone() {
    let text = format!(
        "{}  storage:\n    binlogs:\n      size: 2Gi\n",
        manifest("blog", 3)
    );
    let c = LocalCluster::start("blog", &text);
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("CREATE DATABASE blog").await.unwrap();
    rw.query_drop("CREATE TABLE blog.t (i INT PRIMARY KEY)")
        .await
        .unwrap();
    rw.query_drop("INSERT INTO blog.t VALUES (1), (2)")
        .await
        .unwrap();
    for n in ["blog-1", "blog-2", "blog-3"] {
        let dir = c.instance_dir(n);
        let base: Option<String> = c
            .admin(n)
            .await
            .query_first("SELECT @@log_bin_basename")
            .await
            .unwrap();
        assert_eq!(
            base.unwrap(),
            dir.join("binlog/mysql-bin").display().to_string()
        );
        assert!(dir.join("binlog/mysql-bin.index").is_file(), "{n}");
        assert!(!dir.join("data/mysql-bin.index").exists(), "{n}");
    }
    // A replica re-cloned: its old logs go, the new copy's history stays one.
    let primary = c.current_primary();
    let replica = if primary == "blog-2" {
        "blog-3"
    } else {
        "blog-2"
    };
    let old_first = c.instance_dir(replica).join("binlog/mysql-bin.000001");
    let old_inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&old_first).unwrap());
    ok(&c.local(&["reinit", "blog", replica]), "reinit");
    let new_inode = std::fs::metadata(&old_first)
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .ok();
    assert_ne!(
        new_inode,
        Some(old_inode),
        "the old binary logs went with the old data"
    );
    rw.query_drop("INSERT INTO blog.t VALUES (3)")
        .await
        .unwrap();
    drop(rw);
    // The re-cloned replica can take over: a switchover to it.
    ok(&c.local(&["promote", "blog", replica]), "promote");
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("INSERT INTO blog.t VALUES (4)")
        .await
        .unwrap();
    for n in ["blog-1", "blog-2", "blog-3"] {
        wait_for(
            &format!("every row on {n}"),
            Duration::from_secs(30),
            || async {
                let mut a = c.admin(n).await;
                let ids: Vec<i64> = a.query("SELECT i FROM blog.t ORDER BY i").await.ok()?;
                (ids == [1, 2, 3, 4]).then_some(())
            },
        )
        .await;
    }
    let st = c.status();
    assert!(st["divergedInstances"].is_null(), "{st:#}");
    // Dropping the setting is refused, naming it: on the running cluster,
    // and when it is started again.
    let without = c.dir.path().join("without-binlogs.yaml");
    std::fs::write(&without, manifest("blog", 3)).unwrap();
    let out = c.local(&["apply", "-f", without.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("spec.storage cannot change"), "{err}");
    c.down();
    let out = local_up(
        &without,
        std::path::Path::new(&c.state_arg()),
        "0",
        &["--detach"],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.storage.binlogs") && err.contains("put it back"),
        "{err}"
    );
    c.destroy();
}
