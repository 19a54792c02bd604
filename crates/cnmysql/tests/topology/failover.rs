//! Failover: a killed primary, a killed manager, an errant candidate, the lease (waited out, or passed on under `required`), failoverDelay, a frozen primary's half-sent transaction.

use super::divergence::relay_log_bytes;
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_after_kill9_with_required_durability_loses_nothing() {
    let c = LocalCluster::start("fo", &durable("fo", 3));
    wait_semi_sync_source(&c, "fo-1").await;
    // Visible in the status table: the primary waits for one
    // acknowledgement from its two replicas, which acknowledge.
    wait_for(
        "semi-sync in the status table",
        Duration::from_secs(20),
        || async {
            let out = c.local(&["status"]);
            let table = String::from_utf8_lossy(&out.stdout).to_string();
            let row = |i: &str| {
                table
                    .lines()
                    .find(|l| l.starts_with(i))
                    .unwrap_or("")
                    .to_string()
            };
            (row("fo-1").contains("waits 1 of 2")
                && row("fo-2").contains("acks")
                && row("fo-3").contains("acks"))
            .then_some(())
        },
    )
    .await;
    let w = start_writer(&c).await;
    w.wait_for_more(100, Duration::from_secs(10)).await;
    let killed = Instant::now();
    c.signal_instance("fo-1", Signal::SIGKILL);
    wait_for("a new primary", Duration::from_secs(30), || async {
        let p = c.current_primary();
        (p != "fo-1" && !p.is_empty()).then_some(())
    })
    .await;
    w.wait_for_more(50, Duration::from_secs(20)).await;
    let o = w.stop().await;
    let new = c.current_primary();
    let first = o.first_ack_after(killed).expect("writes resumed");
    eprintln!(
        "failover: {} acknowledged, first write {:?} after kill -9, new primary {new}",
        o.acked.len(),
        first - killed
    );
    assert!(c.has_event("FailingOver").is_some());
    assert_eq!(c.writable_instances().await, vec![new.clone()]);
    // The former primary comes back read-only and rejoins. MariaDB: as a
    // replica, since a transaction it was killed with before any replica
    // acknowledged it (so no client was told it committed) is rolled back
    // by its recovery as a replica. MySQL has no such recovery: it commits
    // that transaction, comes back diverged unless nothing was in flight,
    // saves it and re-clones itself (required durability: nothing it alone
    // holds was acknowledged).
    wait_for("fo-1 to rejoin", Duration::from_secs(90), || async {
        let diverged = c.status()["divergedInstances"] == serde_json::json!(["fo-1"]);
        assert!(
            flavor() == Flavor::Mysql || !diverged,
            "fo-1 was found diverged"
        );
        let st = c.status_json();
        let i = instances_by_name(&st)["fo-1"].clone();
        (!diverged && i["ready"] == true && i["role"] == "replica").then_some(())
    })
    .await;
    if c.has_event("DivergedTransactionsSaved").is_some() {
        eprintln!("fo-1 came back diverged, saved what only it held and re-cloned itself");
    }
    let survivors = ["fo-1", "fo-2", "fo-3"];
    for i in survivors {
        verify_on(&c, i, &o.acked).await;
    }
    assert_eq!(c.writable_instances().await, vec![new]);
    c.destroy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_whose_manager_alone_is_killed_fails_over_without_waiting_for_its_lease() {
    // As on Kubernetes, where the container dies with its PID 1: the
    // server goes with its manager, so its death is proven at once.
    let c = LocalCluster::start("orph", &durable("orph", 3));
    wait_ready(&c, 3, Duration::from_secs(60)).await;
    let w = start_writer(&c).await;
    w.wait_for_more(100, Duration::from_secs(10)).await;
    let (manager, mysqld) = c.instance_pids("orph-1");
    let killed = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(manager), Signal::SIGKILL).unwrap();
    wait_for(
        "the orphaned mysqld to be stopped",
        Duration::from_secs(10),
        || async {
            (!std::path::Path::new(&format!("/proc/{mysqld}")).exists()
                || std::fs::read_to_string(format!("/proc/{mysqld}/stat")).is_ok_and(|s| {
                    s.rsplit(')')
                        .next()
                        .is_some_and(|r| r.trim_start().starts_with('Z'))
                }))
            .then_some(())
        },
    )
    .await;
    wait_for("a new primary", Duration::from_secs(30), || async {
        let p = c.current_primary();
        (p != "orph-1" && !p.is_empty()).then_some(())
    })
    .await;
    w.wait_for_more(50, Duration::from_secs(20)).await;
    let o = w.stop().await;
    let first = o.first_ack_after(killed).expect("writes resumed");
    eprintln!("manager killed: first write {:?} after", first - killed);
    assert!(
        c.has_event("FailoverWaitingForLease").is_none(),
        "the failover waited for the lease of a primary whose server was already stopped"
    );
    let new = c.current_primary();
    assert_eq!(c.writable_instances().await, vec![new.clone()]);
    for i in ["orph-2", "orph-3"] {
        verify_on(&c, i, &o.acked).await;
    }
    c.destroy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_is_blocked_when_the_only_candidate_has_an_errant_transaction() {
    let c = LocalCluster::start("errant", &manifest("errant", 2));
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("CREATE TABLE app.first (i INT PRIMARY KEY)")
        .await
        .unwrap();
    drop(rw);
    // Let the control plane record the primary's history, then write on the
    // replica behind the cluster's back.
    wait_for(
        "the replica to catch up",
        Duration::from_secs(10),
        || async {
            let g = c.status()["gtidExecutedByInstance"].clone();
            (g["errant-2"] == g["errant-1"] && g["errant-1"] != serde_json::Value::Null)
                .then_some(())
        },
    )
    .await;
    let mut a = c.admin("errant-2").await;
    write_as_admin(&mut a, "CREATE DATABASE sneaky").await;
    drop(a);
    c.signal_instance("errant-1", Signal::SIGKILL);
    let e = wait_for("FailoverBlocked", Duration::from_secs(20), || async {
        c.has_event("FailoverBlocked")
    })
    .await;
    assert!(e["message"].as_str().unwrap().contains("errant"), "{e}");
    // Nothing was promoted; the old primary is restarted in place instead.
    assert_eq!(c.current_primary(), "errant-1");
    wait_primary(&c, "errant-1", Duration::from_secs(30)).await;
    assert_eq!(c.writable_instances().await, vec!["errant-1".to_string()]);
    c.destroy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promotion_waits_while_the_old_primary_holds_its_lease() {
    let c = LocalCluster::start("lease", &manifest("lease", 2));
    let lease: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(std::path::Path::new(&c.state_arg()).join("lease.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(lease["holderIdentity"], "lease-1");
    // A hung primary: its processes exist, so nobody can prove it stopped
    // writing; failover must wait for its lease to expire.
    c.signal_instance("lease-1", Signal::SIGSTOP);
    let hung = Instant::now();
    let e = wait_for(
        "FailoverWaitingForLease",
        Duration::from_secs(20),
        || async { c.has_event("FailoverWaitingForLease") },
    )
    .await;
    assert_eq!(e["instance"], "lease-1");
    wait_primary(&c, "lease-2", Duration::from_secs(40)).await;
    let promoted = hung.elapsed();
    let lease: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(std::path::Path::new(&c.state_arg()).join("lease.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(lease["holderIdentity"], "lease-2");
    // The lease was at most 5 s old when the primary hung and lasts 15 s.
    assert!(
        promoted >= Duration::from_secs(9),
        "promoted after {promoted:?}, before the lease could expire ({:?})",
        c.events()
    );
    // The hung processes were fenced (killed) by the failover; the former
    // primary was restarted to rejoin, so there is nothing to resume.
    c.destroy();
}

/// Under `dataDurability: required` a frozen primary acknowledges nothing
/// once its replicas stopped receiving from it, so its lease is passed to
/// the candidate instead of waited out (docs/topology.md, "Failing over
/// before the lease expires"). Every acknowledged write is on the new
/// primary; a write sent to the frozen one is never acknowledged, after
/// it thaws either; and it rejoins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_required_a_frozen_primary_is_replaced_before_its_lease_expires() {
    let c = LocalCluster::start("pass", &durable("pass", 3));
    wait_ready(&c, 3, Duration::from_secs(90)).await;
    let w = start_writer(&c).await;
    w.wait_for_more(100, Duration::from_secs(20)).await;
    let mut held = c.admin("pass-1").await;
    c.signal_instance("pass-1", Signal::SIGSTOP);
    let frozen = Instant::now();
    // Sent to the frozen server: it reads it only once it thaws.
    let late = tokio::spawn(async move {
        tokio::time::timeout(
            Duration::from_secs(90),
            held.query_drop("INSERT INTO app.w (id) VALUES (999999999)"),
        )
        .await
    });
    wait_for("a new primary", Duration::from_secs(30), || async {
        let p = c.current_primary();
        (p != "pass-1" && !p.is_empty()).then_some(())
    })
    .await;
    let promoted = frozen.elapsed();
    let passed = c.has_event("LeasePassed").expect("the lease was passed on");
    let new = c.current_primary();
    let lease: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(std::path::Path::new(&c.state_arg()).join("lease.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(lease["holderIdentity"], new.as_str(), "{passed}");
    w.wait_for_more(50, Duration::from_secs(20)).await;
    eprintln!("frozen primary → {new} promoted after {promoted:?}: {passed}");
    c.signal_instance("pass-1", Signal::SIGCONT);
    let o = w.stop().await;
    let first = o.first_ack_after(frozen).expect("writes resumed");
    eprintln!(
        "first acknowledged write {:?} after the freeze ({} acknowledged)",
        first - frozen,
        o.acked.len()
    );
    let late = late.await.unwrap();
    eprintln!("the write sent to the frozen primary: {late:?}");
    assert!(
        !matches!(late, Ok(Ok(()))),
        "a write sent to the frozen primary was acknowledged"
    );
    wait_ready(&c, 3, Duration::from_secs(150)).await;
    for i in ["pass-1", "pass-2", "pass-3"] {
        verify_on(&c, i, &o.acked).await;
    }
    // Where the late write is, if anywhere, with each history: what a
    // failure must show to be understood.
    let mut found = Vec::new();
    for i in ["pass-1", "pass-2", "pass-3"] {
        let mut a = c.admin(i).await;
        let late_rows: Option<u64> = a
            .query_first("SELECT COUNT(*) FROM app.w WHERE id = 999999999")
            .await
            .unwrap();
        let gtids: Option<String> = match a.query_first("SELECT @@gtid_executed").await {
            Ok(g) => g,
            Err(_) => a
                .query_first("SELECT @@gtid_current_pos")
                .await
                .unwrap_or(None),
        };
        eprintln!("{i}: late rows {late_rows:?}, gtid_executed {gtids:?}");
        found.push((i, late_rows));
    }
    assert_eq!(c.writable_instances().await, vec![new.clone()]);
    assert_eq!(c.current_primary(), new, "the primary changed again");
    for (i, late_rows) in found {
        assert_eq!(late_rows, Some(0), "the late write reached {i}");
    }
    c.destroy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_that_cannot_renew_its_lease_turns_read_only() {
    let c = LocalCluster::start("renew", &manifest("renew", 1));
    let lease = std::path::Path::new(&c.state_arg()).join("lease.json");
    // Make the lease store fail: the file becomes a directory.
    std::fs::remove_file(&lease).unwrap();
    std::fs::create_dir(&lease).unwrap();
    let broken = Instant::now();
    wait_for(
        "the primary to make itself read-only",
        Duration::from_secs(20),
        || async { c.writable_instances().await.is_empty().then_some(()) },
    )
    .await;
    let after = broken.elapsed();
    assert!(
        after <= Duration::from_secs(15),
        "read-only only after {after:?}: later than the lease TTL"
    );
    // The store is back: the primary takes its lease again and reopens writes.
    std::fs::remove_dir(&lease).unwrap();
    wait_for("writes again", Duration::from_secs(20), || async {
        let mut rw = c.app(c.service_port("rw")).await.ok()?;
        rw.query_drop("CREATE DATABASE IF NOT EXISTS back")
            .await
            .ok()
    })
    .await;
    c.destroy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_delay_is_respected() {
    let extra = "  failoverDelay: 4\n  enablePrimaryLease: false\n";
    let c = LocalCluster::start("delay", &manifest_with("delay", 2, extra));
    c.signal_instance("delay-1", Signal::SIGSTOP);
    let hung = Instant::now();
    let failing = wait_for("PrimaryFailing", Duration::from_secs(10), || async {
        c.has_event("PrimaryFailing")
    })
    .await;
    assert!(c.status()["primaryFailingSince"].is_string());
    wait_for("FailingOver", Duration::from_secs(20), || async {
        c.has_event("FailingOver")
    })
    .await;
    let elapsed = hung.elapsed();
    let t = |e: &serde_json::Value| {
        e["time"]
            .as_str()
            .unwrap()
            .parse::<jiff::Timestamp>()
            .unwrap()
    };
    let waited = t(&c.has_event("FailingOver").unwrap()) - t(&failing);
    assert!(
        waited.get_seconds() >= 4,
        "failover began {waited:?} after the failure was noticed"
    );
    assert!(elapsed < Duration::from_secs(15));
    wait_primary(&c, "delay-2", Duration::from_secs(20)).await;
    c.destroy();
}

/// A primary frozen while it sends a large transaction leaves its replicas
/// holding part of it. MySQL's multi-threaded applier, stopped then, waits
/// 60 s for the rest before giving up: the promoted replica would open
/// writes, and the other would follow it and acknowledge, only after that.
/// Neither waits: the part is rolled back at once, and is nowhere after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_does_not_wait_for_the_rest_of_a_transaction_the_frozen_primary_sent_in_part() {
    let c = LocalCluster::start("part", &durable("part", 3));
    wait_ready(&c, 3, Duration::from_secs(90)).await;
    let mut p = c.admin("part-1").await;
    p.query_drop(
        "CREATE DATABASE big; \
         CREATE TABLE big.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(200))",
    )
    .await
    .unwrap();
    let before = relay_log_bytes(&c, "part-2") + relay_log_bytes(&c, "part-3");
    // One statement of 400 000 rows: some 70 MB of binary log, sent to
    // the replicas only once it is written at commit.
    p.query_drop(sql(
        "SET SESSION max_recursive_iterations = 1000000",
        "SET SESSION cte_max_recursion_depth = 1000000",
    ))
    .await
    .unwrap();
    let big = tokio::spawn(async move {
        p.query_drop(
            "INSERT INTO big.t (v) WITH RECURSIVE s(n) AS \
             (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 400000) \
             SELECT REPEAT('x', 150) FROM s",
        )
        .await
    });
    wait_for(
        "the replicas to receive part of the transaction",
        Duration::from_secs(120),
        || async {
            assert!(
                !big.is_finished(),
                "the transaction ended: {:?}",
                "see below"
            );
            let now = relay_log_bytes(&c, "part-2") + relay_log_bytes(&c, "part-3");
            (now > before + 2_000_000).then_some(())
        },
    )
    .await;
    c.signal_instance("part-1", Signal::SIGSTOP);
    let frozen = Instant::now();
    wait_for("a new primary", Duration::from_secs(60), || async {
        let p = c.current_primary();
        (p != "part-1" && !p.is_empty()).then_some(())
    })
    .await;
    let new = c.current_primary();
    // A commit on the new primary needs the other replica's
    // acknowledgement (required durability): it follows the new primary.
    let committed = cnmysql_envtest::until(
        "a commit on the new primary",
        Duration::from_secs(120),
        || async {
            let mut a = c.admin(&new).await;
            a.query_drop("CREATE TABLE IF NOT EXISTS big.after (id INT PRIMARY KEY)")
                .await
                .ok()
        },
    )
    .await;
    let took = frozen.elapsed();
    eprintln!("freeze → first commit acknowledged by the new primary's replica: {took:?}");
    committed.unwrap();
    assert!(
        took < Duration::from_secs(45),
        "the failover waited {took:?}: an applier waited for the rest of a transaction"
    );
    let mut a = c.admin(&new).await;
    let rows: Option<u64> = a.query_first("SELECT COUNT(*) FROM big.t").await.unwrap();
    assert_eq!(rows, Some(0), "part of a transaction was applied");
    c.signal_instance("part-1", Signal::SIGCONT);
    let _ = big.await;
    wait_ready(&c, 3, Duration::from_secs(120)).await;
    let n: Option<u64> = a.query_first("SELECT COUNT(*) FROM big.t").await.unwrap();
    assert_eq!(
        n,
        Some(0),
        "the frozen primary's transaction was never acknowledged"
    );
    c.destroy();
}
