//! Semi-sync durability: a stopping primary's waiting commit, preferred falling back, the acknowledgement count.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_primary_whose_commit_waits_for_an_acknowledgement_stops_at_once_without_acknowledging_it()
 {
    // Issue 18: a primary told to stop while a commit waited for a
    // semi-sync acknowledgement that would never come stayed writable until
    // its grace period ran out (its read-only request waited behind the
    // commit). Now the request has 500 ms, then mysqld is killed: the
    // manager stops at once and the waiting client gets an error.
    let c = LocalCluster::start("stk", &durable("stk", 2));
    let mut app = semi_sync_primary_with_table(&c, "stk-1", "stuck").await;
    // The only replica stops acknowledging: the next commit waits.
    c.signal_instance("stk-2", Signal::SIGSTOP);
    let waiting =
        tokio::spawn(async move { app.query_drop("INSERT INTO stuck.t VALUES (1)").await });
    wait_for("the commit to wait for an acknowledgement", Duration::from_secs(10), || async {
        let mut a = c.admin("stk-1").await;
        let n: Option<i64> = a
            .query_first(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE LIKE 'Waiting for semi-sync ACK%'",
            )
            .await
            .ok()
            .flatten();
        (n == Some(1)).then_some(())
    })
    .await;
    let (manager, _) = c.instance_pids("stk-1");
    let asked = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(manager), Signal::SIGTERM).unwrap();
    wait_for("the manager to stop", Duration::from_secs(10), || async {
        (!std::path::Path::new(&format!("/proc/{manager}")).exists()
            || std::fs::read_to_string(format!("/proc/{manager}/stat"))
                .is_ok_and(|s| s.contains(") Z ")))
        .then_some(())
    })
    .await;
    let took = asked.elapsed();
    let answer = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiting client is answered")
        .unwrap();
    assert!(
        answer.is_err(),
        "a commit no replica acknowledged was acknowledged"
    );
    eprintln!("stopped {took:?} after SIGTERM with a commit waiting; the client got {answer:?}");
    c.signal_instance("stk-2", Signal::SIGCONT);
    assert!(
        took < Duration::from_secs(5),
        "the manager took {took:?} to stop"
    );
    c.destroy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preferred_durability_falls_back_when_no_replica_acknowledges() {
    // With `preferred` the server never falls back by itself (a primary
    // frozen with a commit waiting would acknowledge it the moment it ran
    // again, deposed or not). Semi-sync is switched off instead — by the
    // control plane once no replica is healthy, or by the manager, holding
    // the lease, once a commit has waited timeoutMillis — which releases the
    // waiting commit.
    let m = format!(
        "{}    semiSync:\n      enabled: true\n      timeoutMillis: 1000\n      dataDurability: preferred\n  minSyncReplicas: 1\n  maxSyncReplicas: 1\n  failoverDelay: 0\n",
        manifest("pfb", 2)
    );
    let c = LocalCluster::start("pfb", &m);
    let mut app = semi_sync_primary_with_table(&c, "pfb-1", "fb").await;
    c.signal_instance("pfb-2", Signal::SIGSTOP);
    let began = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        app.query_drop("INSERT INTO fb.t VALUES (1)"),
    )
    .await
    .expect("the commit is released once semi-sync falls back");
    let took = began.elapsed();
    c.signal_instance("pfb-2", Signal::SIGCONT);
    r.unwrap();
    eprintln!("commit released after {took:?}");
    // The server's own timeout is never what released it.
    let st = c.status_json();
    assert_eq!(
        instances_by_name(&st)["pfb-1"]["semiSync"]["timeoutMillis"],
        4294967295u64,
        "{st}"
    );
    c.destroy();
}

/// The acknowledgement count the primary's server really uses, read from
/// the server: `rpl_semi_sync_source_wait_for_replica_count` (MySQL; MariaDB
/// has no such variable and always waits for one).
async fn ack_count(c: &LocalCluster, primary: &str) -> (bool, u64) {
    let mut a = c.admin(primary).await;
    let row: (String, u64, String) = a
        .query_first(sql(
            "SELECT @@rpl_semi_sync_master_enabled, 1, @@rpl_semi_sync_master_wait_no_slave",
            "SELECT @@rpl_semi_sync_source_enabled, @@rpl_semi_sync_source_wait_for_replica_count, @@rpl_semi_sync_source_wait_no_replica",
        ))
        .await
        .unwrap()
        .unwrap();
    let on = |v: &str| v == "1" || v.eq_ignore_ascii_case("ON");
    // With no replica connected a commit still waits (never two writable).
    assert!(on(&row.2), "{primary} commits without a replica connected");
    (on(&row.0), row.1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acknowledgement_count_follows_data_durability_as_replicas_stop_and_start() {
    // minSyncReplicas 2 of 2 replicas. `required` pins the count at 2 even
    // with a replica stopped; `preferred` lowers it to the healthy replicas
    // (never below one) and raises it again once the replica is back.
    for durability in ["required", "preferred"] {
        let name = format!("ack{}", &durability[..3]);
        let m = format!(
            "{}    semiSync:\n      enabled: true\n      timeoutMillis: 1000\n      dataDurability: {durability}\n  minSyncReplicas: 2\n  maxSyncReplicas: 2\n  failoverDelay: 0\n",
            manifest(&name, 3)
        );
        let c = LocalCluster::start(&name, &m);
        let primary = format!("{name}-1");
        let full = sql_count(2);
        wait_for(
            "the full acknowledgement count",
            Duration::from_secs(20),
            || async { (ack_count(&c, &primary).await == (true, full)).then_some(()) },
        )
        .await;
        let stopped = format!("{name}-3");
        c.signal_instance(&stopped, Signal::SIGSTOP);
        let expected = if durability == "required" {
            full
        } else {
            sql_count(1)
        };
        // The control plane sees the replica unhealthy within a few polls.
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seen = ack_count(&c, &primary).await;
        while seen != (true, expected) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
            seen = ack_count(&c, &primary).await;
        }
        assert_eq!(
            seen,
            (true, expected),
            "{durability}: with {stopped} stopped"
        );
        if durability == "required" {
            // And it stays pinned.
            tokio::time::sleep(Duration::from_secs(3)).await;
            assert_eq!(ack_count(&c, &primary).await, (true, full));
        }
        eprintln!("{durability}: count {} with {stopped} stopped", seen.1);
        c.signal_instance(&stopped, Signal::SIGCONT);
        wait_for(
            "the count raised again",
            Duration::from_secs(30),
            || async { (ack_count(&c, &primary).await == (true, full)).then_some(()) },
        )
        .await;
        c.destroy();
    }
}

/// A MySQL acknowledgement count; MariaDB always waits for one.
fn sql_count(n: u64) -> u64 {
    match flavor() {
        Flavor::Mysql => n,
        Flavor::Mariadb => 1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_whose_commits_wait_behind_a_binary_log_rotation_answers_and_keeps_its_lease() {
    // Kubernetes fault suite, all Pods deleted: the restarted primary took
    // writes before any replica was back, its archiver's FLUSH BINARY LOGS
    // waited behind those commits (a rotation waits for every commit still
    // waiting for an acknowledgement), and so did every `SHOW BINARY LOGS`
    // after it — the one in the manager's look at its server among them.
    // Its status hung, the replicas waited on that status before following
    // it, its own loop renewed no lease, and after 10 s it fenced itself:
    // 17 s without writes. Its status and loop now ask the server nothing
    // that waits behind a rotation.
    let c = LocalCluster::start("rot", &durable("rot", 2));
    let mut app = semi_sync_primary_with_table(&c, "rot-1", "rot").await;
    let (_, mysqld) = c.instance_pids("rot-1");
    // The only replica stops acknowledging: the next commit waits, and a
    // rotation waits behind it.
    c.signal_instance("rot-2", Signal::SIGSTOP);
    let waiting = tokio::spawn(async move { app.query_drop("INSERT INTO rot.t VALUES (1)").await });
    let waits = |state: &'static str| {
        let c = &c;
        move || async move {
            let mut a = c.admin("rot-1").await;
            let n: Option<i64> = a
                .query_first(format!(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE {state}"
                ))
                .await
                .ok()
                .flatten();
            (n == Some(1)).then_some(())
        }
    };
    wait_for(
        "the commit to wait for an acknowledgement",
        Duration::from_secs(10),
        waits("STATE LIKE 'Waiting for semi-sync ACK%'"),
    )
    .await;
    let mut rotating = c.admin("rot-1").await;
    let rotation = tokio::spawn(async move { rotating.query_drop("FLUSH BINARY LOGS").await });
    wait_for(
        "the rotation to be under way",
        Duration::from_secs(10),
        waits("INFO = 'FLUSH BINARY LOGS'"),
    )
    .await;
    // Past the 10 s after which a primary that renews nothing fences
    // itself: its status answers every time, in less than its peers wait.
    let until = Instant::now() + Duration::from_secs(12);
    let mut answers = 0;
    while Instant::now() < until {
        let st = c
            .manager_status("rot-1", Duration::from_millis(1500))
            .await
            .unwrap_or_else(|e| {
                panic!("rot-1's status with commits waiting behind a rotation: {e}")
            });
        assert_eq!(st["mysqldRunning"], true, "{st}");
        assert_eq!(st["readOnly"], false, "{st}");
        assert!(
            st["server"]["binlog_bytes"].as_u64().unwrap_or(0) > 0,
            "the binary logs' size is still reported: {st}"
        );
        answers += 1;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        c.instance_pids("rot-1").1,
        mysqld,
        "the primary's server was killed"
    );
    c.signal_instance("rot-2", Signal::SIGCONT);
    for (what, done) in [("the waiting commit", waiting), ("the rotation", rotation)] {
        tokio::time::timeout(Duration::from_secs(20), done)
            .await
            .unwrap_or_else(|_| panic!("{what} did not complete once the replica acknowledged"))
            .unwrap()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    eprintln!("{answers} status answers while the rotation waited");
    c.destroy();
}

/// Once `primary`'s semi-sync source side is on: the application's
/// connection to it, with an empty table `db.t (i INT PRIMARY KEY)`.
async fn semi_sync_primary_with_table(
    c: &LocalCluster,
    primary: &str,
    db: &str,
) -> mysql_async::Conn {
    wait_semi_sync_source(c, primary).await;
    let mut app = c.app(c.instance_port(primary)).await.unwrap();
    app.query_drop(format!("CREATE DATABASE IF NOT EXISTS {db}"))
        .await
        .unwrap();
    app.query_drop(format!("CREATE TABLE {db}.t (i INT PRIMARY KEY)"))
        .await
        .unwrap();
    app
}
