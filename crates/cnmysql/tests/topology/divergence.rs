//! Divergence and re-cloning: a diverged former primary, a primary killed mid-commit, reinit, no false divergence, purged binary logs.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diverged_former_primary_without_semi_sync_waits_for_reinit_which_saves_its_rows() {
    let c = LocalCluster::start("div", &manifest("div", 3));
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("CREATE DATABASE d").await.unwrap();
    rw.query_drop("CREATE TABLE d.t (id INT PRIMARY KEY)")
        .await
        .unwrap();
    wait_for("replicas to catch up", Duration::from_secs(10), || async {
        let g = c.status()["gtidExecutedByInstance"].clone();
        (g["div-2"] == g["div-1"] && g["div-3"] == g["div-1"]).then_some(())
    })
    .await;
    // Cut the replicas off: freeze their managers (so nothing restarts
    // replication) and stop their IO threads. Writes on the primary are then
    // acknowledged (asynchronous replication) but exist only there, until the
    // primary is killed.
    let managers: Vec<i32> = ["div-2", "div-3"]
        .iter()
        .map(|n| c.instance_pids(n).0)
        .collect();
    for pid in &managers {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), Signal::SIGSTOP).unwrap();
        wait_stopped(*pid);
    }
    for n in ["div-2", "div-3"] {
        let mut a = c.admin(n).await;
        a.query_drop(stop_io_thread()).await.unwrap();
    }
    rw.query_drop("INSERT INTO d.t VALUES (1), (2)")
        .await
        .unwrap();
    drop(rw);
    c.signal_instance("div-1", Signal::SIGKILL);
    for pid in &managers {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid), Signal::SIGCONT).unwrap();
    }
    wait_for("a new primary", Duration::from_secs(30), || async {
        let p = c.current_primary();
        (p != "div-1").then_some(())
    })
    .await;
    let e = wait_for("div-1 found diverged", Duration::from_secs(60), || async {
        c.has_event("Diverged")
    })
    .await;
    assert_eq!(e["instance"], "div-1");
    let st = c.status();
    assert_eq!(st["divergedInstances"], serde_json::json!(["div-1"]));
    // Kept read-only and out of every route, its data left in place.
    wait_for("div-1 read-only", Duration::from_secs(20), || async {
        let w = c.writable_instances().await;
        (w.len() == 1 && w[0] != "div-1").then_some(())
    })
    .await;
    for (svc, backends) in c.routes() {
        assert!(
            !backends.contains(&"div-1".to_string()),
            "div-1 is routed by {svc}"
        );
    }
    let mut a = c.admin("div-1").await;
    let n: i64 = a
        .query_first("SELECT COUNT(*) FROM d.t")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 2, "the diverged instance keeps its data for a human");
    drop(a);
    // Semi-sync was off: those rows were acknowledged with no replica
    // holding them, so it does not heal by itself, and says why (its
    // manager replaces the reason the divergence was found with once it
    // has judged whether it may heal).
    let judged = wait_for(
        "div-1's reason to say why it waits",
        Duration::from_secs(30),
        || async {
            let why = c.status()["divergedReasons"]["div-1"].as_str()?.to_string();
            (why.contains("semi-sync") && why.contains("reinit")).then_some(why)
        },
    )
    .await;
    assert!(!judged.is_empty());
    // A person decides. Never the primary.
    let primary = c.current_primary();
    let out = c.local(&["reinit", "div", &primary]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is the primary") && err.contains("switch over"),
        "{err}"
    );
    // The diverged one: its rows are saved, then it is a fresh replica.
    let out = c.local(&["reinit", "div", "div-1"]);
    assert!(
        out.status.success(),
        "reinit: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("re-initialised and ready"), "{said}");
    let saved = c.status()["savedTransactions"][0].clone();
    let file = std::fs::read_to_string(saved["file"].as_str().unwrap()).unwrap();
    for row in ["###   @1=1", "###   @1=2"] {
        assert!(file.contains(row), "{row} saved in {saved}:\n{file}");
    }
    assert!(c.has_event("DivergedTransactionsSaved").is_some());
    let mut a = c.admin("div-1").await;
    let n: i64 = a
        .query_first("SELECT COUNT(*) FROM d.t")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 0, "div-1 holds the primary's data now");
    drop(a);
    assert_eq!(c.status()["divergedInstances"], serde_json::Value::Null);
    c.destroy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_mid_commit_rolls_back_the_unacknowledged_write_and_rejoins() {
    let c = LocalCluster::start("mid", &durable("mid", 3));
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("CREATE DATABASE mid").await.unwrap();
    rw.query_drop("CREATE TABLE mid.t (id INT PRIMARY KEY)")
        .await
        .unwrap();
    rw.query_drop("INSERT INTO mid.t VALUES (1)").await.unwrap();
    // No replica may acknowledge the next commit: their managers are
    // frozen (so they do not restart replication) and their IO threads
    // stopped.
    for r in ["mid-2", "mid-3"] {
        wait_for(
            "the first row on the replica",
            Duration::from_secs(20),
            || async {
                let mut a = c.admin(r).await;
                let n: Option<i64> = a.query_first("SELECT COUNT(*) FROM mid.t").await.ok()?;
                (n == Some(1)).then_some(())
            },
        )
        .await;
        let (manager, _) = c.instance_pids(r);
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(manager), Signal::SIGSTOP).unwrap();
        wait_stopped(manager);
        c.admin(r).await.query_drop(stop_io_thread()).await.unwrap();
    }
    let before = binlog_end(&mut c.admin("mid-1").await).await.unwrap();
    // This commit is written to the primary's binary log, then waits for an
    // acknowledgement that never comes: its client never hears back.
    let pending = tokio::spawn(async move { rw.query_drop("INSERT INTO mid.t VALUES (2)").await });
    wait_for(
        "the write in the primary's binary log",
        Duration::from_secs(10),
        || async {
            let now = binlog_end(&mut c.admin("mid-1").await).await?;
            (now != before).then_some(())
        },
    )
    .await;
    c.signal_instance("mid-1", Signal::SIGKILL);
    for r in ["mid-2", "mid-3"] {
        let (manager, _) = c.instance_pids(r);
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(manager), Signal::SIGCONT).unwrap();
    }
    let pending = pending.await.unwrap();
    assert!(
        pending.is_err(),
        "the unacknowledged write was answered: {pending:?}"
    );
    wait_for("a new primary", Duration::from_secs(30), || async {
        let p = c.current_primary();
        (p != "mid-1" && !p.is_empty()).then_some(())
    })
    .await;
    if flavor() == Flavor::Mysql {
        // MySQL's crash recovery commits what its binary log holds: the
        // former primary now has a transaction no other instance has. Under
        // required durability nobody was told it committed, so it saves it
        // and re-clones itself, with no one asking.
        heals_by_saving_and_recloning(&c, "mid-1", "mid.t", 2).await;
    } else {
        // The former primary recovers as a replica: the write nobody
        // acknowledged is rolled back and cut from its binary log, so it
        // follows the new primary instead of being kept out as diverged.
        rejoins_as_a_replica(&c).await;
    }
    let serving = ["mid-1", "mid-2", "mid-3"];
    // Every instance that serves has what rw acknowledges after the fault,
    // and never the unacknowledged row.
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("INSERT INTO mid.t VALUES (3)").await.unwrap();
    for i in serving {
        let rows = ids_once_it_holds(&c, i, "mid.t", 3).await;
        assert_eq!(
            rows,
            [1, 3],
            "{i}: the unacknowledged row must not be served"
        );
    }
    assert_eq!(c.writable_instances().await, vec![c.current_primary()]);
    c.destroy();
}

/// The ids of `table` on `instance` once they include `id` (it applied
/// the write that added it).
pub(crate) async fn ids_once_it_holds(
    c: &LocalCluster,
    instance: &str,
    table: &str,
    id: i64,
) -> Vec<i64> {
    wait_for(
        &format!("row {id} of {table} on {instance}"),
        Duration::from_secs(20),
        || async {
            let mut a = c.admin(instance).await;
            let rows: Vec<i64> = a
                .query(format!("SELECT id FROM {table} ORDER BY id"))
                .await
                .ok()?;
            rows.contains(&id).then_some(rows)
        },
    )
    .await
}

/// A diverged instance saves the transaction only it held (the row `id` of
/// `table`) to a file on its volume, named in the status and an event,
/// then re-clones itself and is a ready replica again.
async fn heals_by_saving_and_recloning(c: &LocalCluster, instance: &str, table: &str, id: i64) {
    let e = wait_for(
        &format!("{instance} to save what only it held"),
        Duration::from_secs(60),
        || async { c.has_event("DivergedTransactionsSaved") },
    )
    .await;
    assert_eq!(e["instance"], instance);
    let saved = c.status()["savedTransactions"][0].clone();
    assert_eq!(saved["instance"], instance, "{saved}");
    assert!(
        !saved["gtidSet"].as_str().unwrap_or("").is_empty(),
        "{saved}"
    );
    let file = std::fs::read_to_string(saved["file"].as_str().unwrap()).unwrap();
    let insert = format!(
        "### INSERT INTO `{}`.`{}`",
        table.split('.').next().unwrap(),
        table.split('.').nth(1).unwrap()
    );
    assert!(
        file.contains(&insert),
        "the saved file holds the insert:\n{file}"
    );
    assert!(
        file.contains(&format!("###   @1={id}")),
        "the saved file holds row {id}:\n{file}"
    );
    wait_for(
        &format!("{instance} re-cloned and a ready replica"),
        Duration::from_secs(90),
        || async {
            let st = c.status_json();
            let i = instances_by_name(&st)[instance].clone();
            let st = c.status();
            (st["divergedInstances"].is_null()
                && st["reinitializing"].is_null()
                && i["ready"] == true
                && i["role"] == "replica")
                .then_some(())
        },
    )
    .await;
    assert!(c.has_event("Reinitialized").is_some());
}

/// The killed primary comes back as a replica of the new one, not diverged,
/// and recovered as a replica (MariaDB rolls back what waited for an
/// acknowledgement).
async fn rejoins_as_a_replica(c: &LocalCluster) {
    wait_for(
        "mid-1 to rejoin as a replica",
        Duration::from_secs(60),
        || async {
            assert_eq!(
                c.status()["divergedInstances"],
                serde_json::Value::Null,
                "mid-1 was found diverged"
            );
            let st = c.status_json();
            let i = instances_by_name(&st)["mid-1"].clone();
            (i["ready"] == true && i["role"] == "replica").then_some(())
        },
    )
    .await;
    let log = std::fs::read_to_string(c.instance_dir("mid-1").join("manager.log")).unwrap();
    assert!(
        log.contains("--init-rpl-role=SLAVE"),
        "recovered as a replica"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reinit_of_a_healthy_replica_replaces_its_data_and_it_serves_again() {
    let c = LocalCluster::start("ri", &durable("ri", 3));
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("CREATE DATABASE ri").await.unwrap();
    rw.query_drop("CREATE TABLE ri.t (id INT PRIMARY KEY)")
        .await
        .unwrap();
    rw.query_drop("INSERT INTO ri.t VALUES (1), (2)")
        .await
        .unwrap();
    let replica = if c.current_primary() == "ri-2" {
        "ri-3"
    } else {
        "ri-2"
    };
    // Something only the old data directory has: gone once it is replaced.
    let marker = c
        .instance_dir(replica)
        .join("data")
        .join("left-by-a-person");
    std::fs::write(&marker, "x").unwrap();
    let out = c.local(&["reinit", "ri", replica]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "reinit: {said}");
    assert!(
        said.contains("requested") && said.contains("re-initialised and ready"),
        "{said}"
    );
    assert!(!marker.exists(), "the data directory was replaced");
    // Supervised as before: its server's PID file is where it was.
    let (_, mysqld) = c.instance_pids(replica);
    assert!(std::path::Path::new(&format!("/proc/{mysqld}")).exists());
    for reason in ["ReinitRequested", "Reinitializing", "Reinitialized"] {
        assert!(c.has_event(reason).is_some(), "event {reason}");
    }
    // It held nothing the primary lacks: nothing saved.
    assert!(c.status()["savedTransactions"].is_null());
    // It serves the primary's rows and follows new writes.
    rw.query_drop("INSERT INTO ri.t VALUES (3)").await.unwrap();
    let rows = ids_once_it_holds(&c, replica, "ri.t", 3).await;
    assert_eq!(rows, [1, 2, 3]);
    assert_eq!(c.writable_instances().await, vec![c.current_primary()]);
    c.destroy();
}

/// A replica re-cloned after a switchover holds the older primaries' writes
/// too, and says so: promoted later, it does not make the instance that
/// wrote them look as if it held something it lacks. (A MariaDB copy's
/// binary log starts empty; its binlog state once named only the copy's
/// position, the newest primary's entry, and the first primary was taken
/// for a diverged instance.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_recloned_after_a_switchover_can_be_promoted_without_false_divergence() {
    let c = LocalCluster::start("rc", &durable("rc", 3));
    let first = c.current_primary();
    let others: Vec<String> = ["rc-1", "rc-2", "rc-3"]
        .into_iter()
        .filter(|i| *i != first)
        .map(String::from)
        .collect();
    let (second, recloned) = (&others[0], &others[1]);
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("CREATE DATABASE rc").await.unwrap();
    rw.query_drop("CREATE TABLE rc.t (id INT PRIMARY KEY)")
        .await
        .unwrap();
    rw.query_drop("INSERT INTO rc.t VALUES (1)").await.unwrap();
    drop(rw);
    ok(&c.local(&["promote", "rc", second]), "promote the second");
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("INSERT INTO rc.t VALUES (2)").await.unwrap();
    drop(rw);
    ok(&c.local(&["reinit", "rc", recloned]), "reinit");
    if flavor() == Flavor::Mariadb {
        // The copy's history names the first primary's entry.
        let mut admin = c.admin(recloned).await;
        let state: String = admin
            .query_first("SELECT @@gtid_binlog_state")
            .await
            .unwrap()
            .unwrap();
        let first_id: String = c
            .admin(&first)
            .await
            .query_first("SELECT CAST(@@server_id AS CHAR)")
            .await
            .unwrap()
            .unwrap();
        assert!(
            state
                .split(',')
                .any(|g| g.split('-').nth(1) == Some(&first_id)),
            "{recloned}'s binlog state {state} lacks server {first_id}"
        );
    }
    ok(
        &c.local(&["promote", "rc", recloned]),
        "promote the re-cloned",
    );
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("INSERT INTO rc.t VALUES (3)").await.unwrap();
    drop(rw);
    // Every instance serves the three rows; none was found diverged.
    for i in ["rc-1", "rc-2", "rc-3"] {
        assert_eq!(ids_once_it_holds(&c, i, "rc.t", 3).await, [1, 2, 3], "{i}");
    }
    wait_ready(&c, 3, Duration::from_secs(30)).await;
    assert!(c.has_event("Diverged").is_none(), "{:?}", c.status());
    assert!(c.status()["divergedInstances"].is_null());
    assert!(c.has_event("DivergedTransactionsSaved").is_none());
    assert_eq!(c.writable_instances().await, vec![recloned.clone()]);
    c.destroy();
}

/// A transaction written on a replica behind the cluster's back, then its
/// replication stopped (as a person, or an error, stops it): the replica
/// does not try to start replication over and over against a source that
/// refuses it. It is found diverged, saves what only it held and re-clones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_written_behind_the_clusters_back_is_diverged_once_its_replication_stops() {
    let c = LocalCluster::start("wb", &durable("wb", 3));
    let primary = c.current_primary();
    let replica = ["wb-1", "wb-2", "wb-3"]
        .into_iter()
        .find(|i| *i != primary)
        .unwrap();
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("CREATE DATABASE wb").await.unwrap();
    rw.query_drop("CREATE TABLE wb.t (id INT PRIMARY KEY)")
        .await
        .unwrap();
    rw.query_drop("INSERT INTO wb.t VALUES (1)").await.unwrap();
    drop(rw);
    assert_eq!(ids_once_it_holds(&c, replica, "wb.t", 1).await, [1]);
    let mut a = c.admin(replica).await;
    write_as_admin(&mut a, "INSERT INTO wb.t VALUES (7)").await;
    a.query_drop(sql("STOP SLAVE", "STOP REPLICA"))
        .await
        .unwrap();
    drop(a);
    let e = wait_for(
        &format!("{replica} found diverged"),
        Duration::from_secs(30),
        || async { c.has_event("Diverged") },
    )
    .await;
    assert_eq!(e["instance"], replica);
    heals_by_saving_and_recloning(&c, replica, "wb.t", 7).await;
    wait_ready(&c, 3, Duration::from_secs(30)).await;
    c.destroy();
}

/// A replica that was away while the primary purged the binary logs with
/// the transactions it lacks cannot catch up by replication: it holds
/// nothing the primary lacks, so it asks for its own re-initialisation and
/// is back with every row, without a person.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_missing_binary_logs_were_purged_reclones_itself() {
    let c = LocalCluster::start("str", &durable("str", 3));
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("CREATE DATABASE str").await.unwrap();
    rw.query_drop("CREATE TABLE str.t (id INT PRIMARY KEY)")
        .await
        .unwrap();
    rw.query_drop("INSERT INTO str.t VALUES (1)").await.unwrap();
    let primary = c.current_primary();
    let away = if primary == "str-3" { "str-2" } else { "str-3" };
    assert_eq!(ids_once_it_holds(&c, away, "str.t", 1).await, [1]);
    // Away: its manager frozen (nothing restarts replication) and its
    // receiver stopped. The other replica acknowledges the writes.
    let (manager, _) = c.instance_pids(away);
    let pid = nix::unistd::Pid::from_raw(manager);
    nix::sys::signal::kill(pid, Signal::SIGSTOP).unwrap();
    wait_stopped(manager);
    c.admin(away)
        .await
        .query_drop(stop_io_thread())
        .await
        .unwrap();
    rw.query_drop("INSERT INTO str.t VALUES (2), (3)")
        .await
        .unwrap();
    // The primary keeps only a binary log started after those writes.
    wait_for(
        "the older binary logs purged",
        Duration::from_secs(20),
        || async {
            let mut p = c.admin(&primary).await;
            p.query_drop("FLUSH BINARY LOGS").await.ok()?;
            p.query_drop("PURGE BINARY LOGS BEFORE NOW() + INTERVAL 1 DAY")
                .await
                .ok()?;
            let logs: Vec<mysql_async::Row> = p.query("SHOW BINARY LOGS").await.ok()?;
            (logs.len() == 1).then_some(())
        },
    )
    .await;
    nix::sys::signal::kill(pid, Signal::SIGCONT).unwrap();
    let e = wait_for("its own request", Duration::from_secs(30), || async {
        c.events()
            .into_iter()
            .find(|e| e["reason"] == "ReinitRequested" && e["instance"] == away)
    })
    .await;
    assert!(
        e["message"].as_str().unwrap().contains("cannot catch up"),
        "{e}"
    );
    wait_for("re-cloned", Duration::from_secs(60), || async {
        c.has_event("Reinitialized")
    })
    .await;
    rw.query_drop("INSERT INTO str.t VALUES (4)").await.unwrap();
    assert_eq!(ids_once_it_holds(&c, away, "str.t", 4).await, [1, 2, 3, 4]);
    wait_ready(&c, 3, Duration::from_secs(30)).await;
    // It held nothing the primary lacks: nothing saved, no one diverged.
    let st = c.status();
    assert!(st["savedTransactions"].is_null(), "{st:#}");
    assert!(st["divergedInstances"].is_null(), "{st:#}");
    assert_eq!(c.writable_instances().await, vec![primary]);
    c.destroy();
}

/// Bytes of relay log an instance holds.
pub(crate) fn relay_log_bytes(c: &LocalCluster, instance: &str) -> u64 {
    let mut total = 0;
    let mut dirs = vec![c.instance_dir(instance)];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            match e.metadata() {
                Ok(m) if m.is_dir() => dirs.push(e.path()),
                Ok(m) if name.starts_with("relay-bin.0") => total += m.len(),
                _ => {}
            }
        }
    }
    total
}
