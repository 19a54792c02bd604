//! Binary logs are purged by the operator's rule alone, on the local
//! platform against real servers (the flavour under test, see
//! common::flavor): never what a replica or the archive lacks
//! (`cnmysql_core::binlog_retention`, docs/storage.md "Binary logs").

mod common;

use std::time::Duration;

use common::*;
use mysql_async::prelude::*;

async fn binlogs_kept_for(c: &LocalCluster, instance: &str, files: u64, who: &str) -> String {
    wait_for(
        &format!("{instance} to keep {files} binary logs for {who}"),
        Duration::from_secs(40),
        || async {
            let st = c.instance_status(instance);
            let kept = st["binlogs"]["keptFor"].as_str().unwrap_or_default();
            (st["binlogs"]["files"].as_u64() >= Some(files) && kept.contains(who))
                .then(|| kept.to_string())
        },
    )
    .await
}

/// The binary log files an instance's server lists.
async fn binlog_files(c: &LocalCluster, instance: &str) -> Vec<String> {
    let mut conn = c.admin(instance).await;
    let rows: Vec<mysql_async::Row> = conn.query("SHOW BINARY LOGS").await.unwrap();
    rows.into_iter().filter_map(|r| r.get(0)).collect()
}

/// Binary logs go once every replica holds what they contain, and not
/// before: a replica that stops answering keeps the primary's files until
/// it is back and has caught up. The status says why the oldest is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_logs_go_once_every_replica_holds_them() {
    let text = manifest("blog", 3).replace(
        "    parameters:",
        "    binlogRetentionSeconds: 0\n    parameters:",
    );
    let c = LocalCluster::start_as_made("blog", &text);
    let primary = c.current_primary();
    let mut p = c.admin(&primary).await;
    p.query_drop("CREATE TABLE app.t (id INT PRIMARY KEY)")
        .await
        .unwrap();
    let mut next = 0;
    let mut write_and_rotate = async |p: &mut mysql_async::Conn, files: usize| {
        for _ in 0..files {
            next += 1;
            p.query_drop(format!("INSERT INTO app.t VALUES ({next})"))
                .await
                .unwrap();
            p.query_drop("FLUSH BINARY LOGS").await.unwrap();
        }
    };
    write_and_rotate(&mut p, 3).await;
    // Every replica holds it all: the primary and the replicas (which log
    // what they apply) keep only the file being written.
    for name in ["blog-1", "blog-2", "blog-3"] {
        wait_for(
            &format!("{name} purged its binary logs"),
            Duration::from_secs(40),
            || async { (binlog_files(&c, name).await.len() == 1).then_some(()) },
        )
        .await;
    }
    let st = c.instance_status(&primary);
    assert_eq!(st["binlogs"]["files"], 1, "{st}");
    assert!(st["binlogs"]["purgedFiles"].as_u64().unwrap() >= 3, "{st}");

    // A replica that stops answering keeps the files it has not read.
    let away = if primary == "blog-3" {
        "blog-2"
    } else {
        "blog-3"
    };
    c.signal_instance(away, nix::sys::signal::Signal::SIGSTOP);
    write_and_rotate(&mut p, 3).await;
    let why = binlogs_kept_for(&c, &primary, 4, away).await;
    assert_eq!(why, format!("replica {away} lacks transactions in it"));
    assert!(binlog_files(&c, &primary).await.len() >= 4);

    // Back, it reads them, and they go.
    c.signal_instance(away, nix::sys::signal::Signal::SIGCONT);
    wait_for(
        "the primary to purge once the replica caught up",
        Duration::from_secs(60),
        || async { (binlog_files(&c, &primary).await.len() == 1).then_some(()) },
    )
    .await;
    let mut r = c.admin(away).await;
    let n: Option<i64> = r.query_first("SELECT COUNT(*) FROM app.t").await.unwrap();
    assert_eq!(n, Some(next), "the replica holds every row");
    // The Cluster's status carries it at its next poll.
    wait_for(
        "the cluster status to say so",
        Duration::from_secs(30),
        || async {
            let status = c.status_json();
            let kept = &status["status"]["instanceStates"][primary.as_str()]["binlogs"];
            (kept["keptFor"] == "the file being written").then_some(())
        },
    )
    .await;
    c.destroy();
}

/// The archive is a reader like a replica: while the store cannot be
/// written, the primary keeps every binary log the archive lacks, and
/// says so; once the store is back and the archive caught up, they go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_logs_the_archive_lacks_are_kept() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("store");
    std::fs::create_dir(&dir).unwrap();
    let store = format!("file://{}", dir.display());
    let text = format!(
        "{}  backup:\n    objectStore:\n      destinationPath: {store}\n",
        manifest("arch", 1)
    )
    .replace(
        "    parameters:",
        "    binlogRetentionSeconds: 0\n    parameters:",
    );
    let c = LocalCluster::start("arch", &text);
    let primary = c.current_primary();
    let rotate = async |c: &LocalCluster, from: u32, to: u32| {
        for i in from..=to {
            let mut a = c.admin(&primary).await;
            a.exec_drop("INSERT INTO app.t VALUES (?)", (i,))
                .await
                .unwrap();
            a.query_drop("FLUSH BINARY LOGS").await.unwrap();
        }
    };
    c.admin(&primary)
        .await
        .query_drop("CREATE TABLE app.t (id INT PRIMARY KEY)")
        .await
        .unwrap();
    rotate(&c, 1, 3).await;
    wait_for(
        "the archived files to go",
        Duration::from_secs(40),
        || async { (binlog_files(&c, &primary).await.len() == 1).then_some(()) },
    )
    .await;

    // The store breaks: a file where its folder was.
    let away = parent.path().join("store-away");
    std::fs::rename(&dir, &away).unwrap();
    std::fs::write(&dir, b"not a folder").unwrap();
    rotate(&c, 4, 6).await;
    let why = binlogs_kept_for(&c, &primary, 4, "archive").await;
    assert_eq!(why, "the binlog archive lacks transactions in it");
    let st = c.instance_status(&primary);
    assert!(
        !st["archive"]["error"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        "{st}"
    );

    // Back: the archive catches up, then the files go.
    std::fs::remove_file(&dir).unwrap();
    std::fs::rename(&away, &dir).unwrap();
    wait_for(
        "the files to go once archived",
        Duration::from_secs(60),
        || async { (binlog_files(&c, &primary).await.len() == 1).then_some(()) },
    )
    .await;
    let st = c.instance_status(&primary);
    assert_eq!(
        st["archive"]["error"].as_str().unwrap_or_default(),
        "",
        "{st}"
    );
    assert!(
        st["archive"]["lastTransaction"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{st}"
    );
    c.down();
}
