//! Backups and point-in-time recovery, end to end on the local platform
//! with real servers (MariaDB, and MySQL in its pass) and a `file://` store (issue 23): a base
//! backup, writes, a switchover while the primary's binary logs are
//! archived continuously, then new Clusters recovered from the store — to a
//! time between the writes (exactly the rows committed by then), and to the
//! latest state (every row; the replica cloned from the recovered primary
//! has them too). A piece taken out of the archive refuses the recovery,
//! naming the gap, with nothing made.

mod common;

use std::time::Duration;

use common::*;
use mysql_async::prelude::*;

fn with_backup(name: &str, instances: u32, store: &str) -> String {
    format!(
        "{}  backup:\n    objectStore:\n      destinationPath: {store}\n",
        manifest(name, instances)
    )
}

fn recovering(name: &str, instances: u32, store: &str, target: &str) -> String {
    format!(
        "{}  bootstrap:\n    recovery:\n      source:\n        objectStore:\n          destinationPath: {store}\n          serverName: src\n{target}",
        manifest(name, instances)
    )
}

async fn insert(c: &LocalCluster, from: u32, to: u32) {
    let mut a = c.admin(&c.current_primary()).await;
    for i in from..=to {
        a.exec_drop("INSERT INTO shop.orders VALUES (?, NOW(6))", (i,))
            .await
            .unwrap();
    }
}

async fn rows(c: &LocalCluster, instance: &str) -> (u64, u64) {
    let mut a = c.admin(instance).await;
    a.query_first("SELECT COUNT(*), COALESCE(MAX(id), 0) FROM shop.orders")
        .await
        .unwrap()
        .unwrap()
}

/// The archive's reach, as the primary reports it.
fn complete_until(c: &LocalCluster) -> Option<jiff::Timestamp> {
    c.instance_status(&c.current_primary())["archive"]["completeUntil"]
        .as_str()
        .and_then(|t| t.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_to_a_time_and_to_the_latest_state_across_a_switchover() {
    let store_dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", store_dir.path().display());
    let c = LocalCluster::start("src", &with_backup("src", 2, &store));
    let h = write_history_across_a_switchover(&c).await;
    the_status_carries_the_archive(&c, &h.new).await;
    recoveries_reach_their_targets(&store, &h).await;
    a_damaged_archive_is_refused(store_dir.path()).await;
    retention_keeps_what_recovery_needs(&c, &store).await;
}

/// What the source cluster wrote: the time after row 100, the GTID
/// position after row 150 and the primary after the switchover.
struct History {
    t1: jiff::Timestamp,
    gtid150: String,
    new: String,
}

/// A backup, rows 1–200 with a quiet second after row 100, a transaction
/// larger than a piece, and a switchover after row 150; the archive holds
/// it all.
async fn write_history_across_a_switchover(c: &LocalCluster) -> History {
    {
        let mut a = c.admin(&c.current_primary()).await;
        a.query_drop("CREATE DATABASE shop").await.unwrap();
        a.query_drop("CREATE TABLE shop.orders (id INT PRIMARY KEY, at DATETIME(6))")
            .await
            .unwrap();
    }
    insert(c, 1, 50).await;
    let out = c.local(&["backup"]);
    assert!(
        out.status.success(),
        "backup failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = c.local(&["backups", "-o", "json"]);
    let backups: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(backups[0]["phase"], "completed", "{backups}");
    // The default target, prefer-replica: the primary is not disturbed.
    assert_eq!(backups[0]["instance"], "src-2", "{backups}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("most caught-up ready replica"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    insert(c, 51, 100).await;
    // One transaction larger than a piece (16 MiB of binary log).
    {
        let mut a = c.admin(&c.current_primary()).await;
        a.query_drop(sql(
            "SET SESSION max_recursive_iterations = 100000",
            "SET SESSION cte_max_recursion_depth = 100000",
        ))
        .await
        .unwrap();
        a.query_drop("CREATE TABLE shop.big (id INT PRIMARY KEY, body VARCHAR(1100))")
            .await
            .unwrap();
        a.query_drop(
            "INSERT INTO shop.big WITH RECURSIVE s (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 20000) SELECT n, REPEAT(SHA2(n, 256), 16) FROM s",
        )
        .await
        .unwrap();
    }
    // A quiet second on each side of the target: MariaDB records commit
    // times in whole seconds.
    let last_write = jiff::Timestamp::now().as_second();
    let next_second = |after: i64| async move {
        wait_for(
            "the clock to pass a second",
            Duration::from_secs(5),
            || async { (jiff::Timestamp::now().as_second() > after).then_some(()) },
        )
        .await
    };
    next_second(last_write).await;
    let t1 = jiff::Timestamp::now();
    next_second(t1.as_second()).await;
    insert(c, 101, 150).await;
    // The GTID position (MariaDB) or set (MySQL) the 150th row ends.
    let gtid150: String = c
        .admin(&c.current_primary())
        .await
        .query_first(sql("SELECT @@gtid_binlog_pos", "SELECT @@gtid_executed"))
        .await
        .unwrap()
        .unwrap();
    let gtid150 = gtid150.replace('\n', "");
    let old = c.current_primary();
    let new = if old == "src-1" { "src-2" } else { "src-1" };
    let out = c.local(&["promote", new]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for("the switchover", Duration::from_secs(60), || async {
        (c.current_primary() == new).then_some(())
    })
    .await;
    wait_for(
        "the new primary to archive",
        Duration::from_secs(60),
        || async {
            c.instance_status(new)["archive"]["run"]
                .as_str()
                .map(|_| ())
        },
    )
    .await;
    insert(c, 151, 200).await;
    let written = jiff::Timestamp::now();
    wait_for(
        "the archive to reach the last write",
        Duration::from_secs(30),
        || async { complete_until(c).filter(|t| *t > written) },
    )
    .await;
    History {
        t1,
        gtid150,
        new: new.to_string(),
    }
}

/// The Cluster's status says what the primary archives.
async fn the_status_carries_the_archive(c: &LocalCluster, new: &str) {
    wait_for(
        "the status to carry the archive",
        Duration::from_secs(30),
        || async {
            let st = c.status();
            let run = st["backup"]["archive"]["run"].as_str()?.to_string();
            let on = st["conditions"]
                .as_array()?
                .iter()
                .any(|x| x["type"] == "ContinuousArchiving" && x["status"] == "True");
            (on && run.ends_with(new)).then_some(())
        },
    )
    .await;
    assert!(c.status()["backup"]["lastSuccessfulBackup"]["gtid"].is_string());
}

/// To a time, to a GTID position and to the latest state: exactly the rows
/// written until then.
async fn recoveries_reach_their_targets(store: &str, h: &History) {
    let (t1, gtid150) = (h.t1, &h.gtid150);
    // To a time between the writes: exactly the first 100 rows.
    let r1 = LocalCluster::start(
        "pitr",
        &recovering(
            "pitr",
            1,
            store,
            &format!("      recoveryTarget:\n        targetTime: \"{t1}\"\n"),
        ),
    );
    let p = r1.current_primary();
    assert_eq!(rows(&r1, &p).await, (100, 100));
    let rec = &r1.instance_status(&p)["recovered"];
    let last: jiff::Timestamp = rec["lastCommitTime"].as_str().unwrap().parse().unwrap();
    assert!(last <= t1, "{rec}");
    // Replayed by the server's applier, which took a measured time.
    assert!(rec["replayed"].as_u64().unwrap() > 0, "{rec}");
    assert!(rec["replayMillis"].as_u64().is_some(), "{rec}");
    wait_for(
        "the recovery in the Cluster's status",
        Duration::from_secs(30),
        || async {
            r1.status()["backup"]["recovered"]["backupId"]
                .as_str()
                .map(|_| ())
        },
    )
    .await;
    r1.down();

    // To a GTID position: exactly the rows up to it.
    let rg = LocalCluster::start(
        "bygtid",
        &recovering(
            "bygtid",
            1,
            store,
            &format!("      recoveryTarget:\n        targetGTID: \"{gtid150}\"\n"),
        ),
    );
    assert_eq!(rows(&rg, &rg.current_primary()).await, (150, 150));
    rg.down();

    // To the latest state: every row, on the replica cloned from it too.
    let r2 = LocalCluster::start("latest", &recovering("latest", 2, store, ""));
    let p = r2.current_primary();
    assert_eq!(rows(&r2, &p).await, (200, 200));
    let big: u64 = r2
        .admin(&p)
        .await
        .query_first("SELECT COUNT(*) FROM shop.big")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(big, 20000, "the transaction larger than a piece");
    let replica = if p == "latest-1" {
        "latest-2"
    } else {
        "latest-1"
    };
    wait_for(
        "the replica to hold every row",
        Duration::from_secs(60),
        || async { (rows(&r2, replica).await == (200, 200)).then_some(()) },
    )
    .await;
    // The recovered cluster takes writes.
    insert(&r2, 201, 201).await;
    r2.down();
}

/// A piece of the archive changed or gone: recovery refused, the piece
/// named, nothing half-made.
async fn a_damaged_archive_is_refused(store_dir: &std::path::Path) {
    // A piece of the first run gone from the middle of its file.
    let damaged = tempfile::tempdir().unwrap();
    let copy = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", store_dir.display()))
        .arg(damaged.path())
        .status()
        .unwrap();
    assert!(copy.success());
    let mut runs: Vec<_> = std::fs::read_dir(damaged.path().join("src/binlogs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    runs.sort();
    let mut pieces: Vec<std::path::PathBuf> = Vec::new();
    for f in std::fs::read_dir(&runs[0]).unwrap() {
        let f = f.unwrap().path();
        if f.is_dir() {
            pieces.extend(std::fs::read_dir(&f).unwrap().map(|e| e.unwrap().path()));
        }
    }
    pieces.sort();
    assert!(pieces.len() >= 3, "{pieces:?}");
    // One byte of a piece changed: refused, the piece named.
    let hit = &pieces[pieces.len() / 2];
    let mut bytes = std::fs::read(hit).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x20;
    std::fs::write(hit, &bytes).unwrap();
    let store2 = format!("file://{}", damaged.path().display());
    let (r5, out) = LocalCluster::try_start("bad", &recovering("bad", 1, &store2, ""), 15);
    assert!(
        !out.status.success(),
        "a recovery over a damaged piece must not come up"
    );
    let msg = r5.instance_status("bad-1")["message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let name = hit.file_name().unwrap().to_string_lossy().to_string();
    assert!(
        msg.contains("recovery refused, nothing was made")
            && msg.contains("is damaged")
            && msg.contains(&name),
        "{msg}"
    );
    drop(r5);
    // The piece gone instead: a gap, named.
    let gone = hit;
    std::fs::remove_file(gone).unwrap();
    let (r3, out) = LocalCluster::try_start("gap", &recovering("gap", 1, &store2, ""), 20);
    assert!(
        !out.status.success(),
        "a recovery over a gap must not come up"
    );
    let msg = r3.instance_status("gap-1")["message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        msg.contains("recovery refused, nothing was made") && msg.contains("missing"),
        "{msg}"
    );
    assert!(
        !r3.instance_dir("gap-1")
            .join("data")
            .join("ibdata1")
            .exists(),
        "nothing half-made"
    );
}

/// Retention: a second backup, then a policy of an hour applied two hours
/// on. The first backup goes, with the run the second one no longer needs;
/// the newest run stays, and recovery still reaches every row.
async fn retention_keeps_what_recovery_needs(c: &LocalCluster, store: &str) {
    let out = c.local(&["backup", "--backup-target", "primary"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!(" of {}:", c.current_primary())),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let dir = cnmysql_local::state::StateDir::new(std::path::PathBuf::from(c.state_arg()));
    let cluster = dir.load_cluster().unwrap();
    let dest = cnmysql_local::backup_destination(&cluster).unwrap();
    let before = cnmysql_backup::base_backup::list(&dest).await.unwrap();
    let heads = cnmysql_backup::retention::heads(&dest).await.unwrap();
    assert_eq!((before.len(), heads.len()), (2, 2));
    let later = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(2);
    let pruned = cnmysql_local::apply_retention(&dir, &cluster, &dest, "1h", later)
        .await
        .unwrap();
    assert_eq!(pruned.backups, [before[0].record.id.clone()]);
    assert_eq!(pruned.runs, [heads[0].0.clone()]);
    let after = cnmysql_backup::base_backup::list(&dest).await.unwrap();
    assert_eq!(after, before[1..]);
    assert_eq!(
        cnmysql_backup::retention::heads(&dest).await.unwrap().len(),
        1
    );
    let r4 = LocalCluster::start("kept", &recovering("kept", 1, store, ""));
    assert_eq!(rows(&r4, &r4.current_primary()).await, (200, 200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_backup_in_the_manifest_is_taken_at_once_and_on_its_schedule() {
    let store_dir = tempfile::tempdir().unwrap();
    let store = format!("file://{}", store_dir.path().display());
    // Every 20 seconds (six fields: seconds first), and one at once.
    let manifest = format!(
        "{}---\napiVersion: mysql.cnmysql.io/v1\nkind: ScheduledBackup\nmetadata:\n  name: often\nspec:\n  cluster: {{name: sched}}\n  schedule: \"*/20 * * * * *\"\n  immediate: true\n",
        with_backup("sched", 1, &store)
    );
    let c = LocalCluster::start("sched", &manifest);
    let ids = wait_for("two scheduled backups", Duration::from_secs(90), || async {
        let out = c.local(&["backups", "-o", "json"]);
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let done: Vec<String> = list
            .as_array()?
            .iter()
            .filter(|b| b["phase"] == "completed")
            .filter_map(|b| b["id"].as_str().map(str::to_string))
            .collect();
        (done.len() >= 2).then_some(done)
    })
    .await;
    assert_ne!(ids[0], ids[1]);
    assert!(c.has_event("BackupCompleted").is_some());
    let schedules: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(std::path::Path::new(&c.state_arg()).join("schedules.json"))
            .unwrap(),
    )
    .unwrap();
    assert!(
        schedules["often"]["lastScheduleTime"].is_string(),
        "{schedules}"
    );
}
