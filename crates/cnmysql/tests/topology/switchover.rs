//! Switchover under continuous writes; a lagging target refused at once.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switchover_under_continuous_writes_loses_nothing() {
    // Semi-sync with required durability, and two switchovers in a row: a
    // demoted primary must stop waiting for acknowledgements itself, or its
    // applier stalls and the next switchover never completes.
    let c = LocalCluster::start("swo", &durable("swo", 3));
    let w = start_writer(&c).await;
    w.wait_for_more(50, Duration::from_secs(10)).await;
    // The second switchover goes through the kubectl plugin's local mode.
    for target in ["swo-2", "swo-1"] {
        let out = if target == "swo-2" {
            c.local(&["promote", "swo", target])
        } else {
            c.plugin("kubectl-cnmsql", &["promote", "swo", target])
        };
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(c.current_primary(), target);
        w.wait_for_more(50, Duration::from_secs(10)).await;
        wait_ready(&c, 3, Duration::from_secs(30)).await;
    }
    // The demoted swo-2 applies under the writer with its semi-sync
    // source side first neutral, then off once no replica registers with
    // it any more (`semisync::leaving_primary`): off in the end, without
    // its applier ever stalling (every row verified on it below).
    wait_for(
        "swo-2's semi-sync source side off",
        Duration::from_secs(45),
        || async {
            let mut a = c.admin("swo-2").await;
            let seen: Option<(u8, u64)> = a
                .query_first(sql(
                    "SELECT @@rpl_semi_sync_master_enabled, @@rpl_semi_sync_master_timeout",
                    "SELECT @@rpl_semi_sync_source_enabled, @@rpl_semi_sync_source_timeout",
                ))
                .await
                .unwrap();
            let clients: Option<(String, String)> = a
                .query_first(sql(
                    "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'",
                    "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_source_clients'",
                ))
                .await
                .unwrap();
            eprintln!("swo-2's source side (enabled, timeout): {seen:?}, {clients:?}");
            (seen.map(|s| s.0) == Some(0)).then_some(())
        },
    )
    .await;
    w.wait_for_more(50, Duration::from_secs(10)).await;
    let o = w.stop().await;
    assert!(c.has_event("SwitchoverCompleted").is_some());
    assert_eq!(c.writable_instances().await, vec!["swo-1".to_string()]);
    // What a dashboard sees: the primary, and two completed switchovers.
    let page = wait_for(
        "metrics after the switchovers",
        Duration::from_secs(10),
        || async {
            let page = c.metrics().await;
            page.contains("cnmysql_instance_primary{instance=\"swo-1\"} 1.0")
                .then_some(page)
        },
    )
    .await;
    assert!(
        page.contains("cnmysql_instance_primary{instance=\"swo-2\"} 0.0"),
        "{page}"
    );
    assert!(
        page.contains("cnmysql_events_total{reason=\"SwitchoverCompleted\",type=\"Normal\"} 2"),
        "{page}"
    );
    assert!(
        page.contains("cnmysql_instance_semi_sync_waiting{instance=\"swo-1\"} 1.0"),
        "{page}"
    );
    for i in ["swo-1", "swo-2", "swo-3"] {
        verify_on(&c, i, &o.acked).await;
    }
    // The primary syncs its binary log at every commit, the replicas do
    // not (replica_durability), swo-2 again since it was demoted.
    for (i, want) in [("swo-1", 1), ("swo-2", 0), ("swo-3", 0)] {
        let mut conn = c.admin(i).await;
        let v: Option<u32> = conn.query_first("SELECT @@sync_binlog").await.unwrap();
        assert_eq!(v, Some(want), "{i}");
    }
    eprintln!(
        "switchover: {} acknowledged, {} errors, longest gap {:?}",
        o.acked.len(),
        o.errors,
        o.longest_gap
    );

    // Refusals name the reason: not an instance, already primary.
    let out = c.local(&["promote", "swo", "swo-9"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an instance"));
    let out = c.local(&["promote", "swo", "swo-1"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("already the primary"));
    a_lagging_target_is_refused_at_once(&c).await;
    c.destroy();
}

/// swo-3 applies 20 s late (a delayed applier) under writes: a switchover
/// to it is refused at once, naming swo-2, which is caught up; nothing
/// changes.
async fn a_lagging_target_is_refused_at_once(c: &LocalCluster) {
    // One round trip: the manager restarts a stopped applier as soon as
    // it sees it, so the three statements go together (and again if the
    // manager came in between).
    let delay = |secs: u32| {
        format!(
            "{}; {}; {}",
            sql("STOP SLAVE", "STOP REPLICA"),
            match flavor() {
                Flavor::Mariadb => format!("CHANGE MASTER TO MASTER_DELAY = {secs}"),
                Flavor::Mysql => format!("CHANGE REPLICATION SOURCE TO SOURCE_DELAY = {secs}"),
            },
            sql("START SLAVE", "START REPLICA")
        )
    };
    let set_delay = |secs: u32| async move {
        wait_for(
            "the applier's delay set",
            Duration::from_secs(20),
            || async {
                let mut conn = c.admin("swo-3").await;
                conn.query_drop(delay(secs)).await.ok()
            },
        )
        .await;
    };
    set_delay(20).await;
    let w = start_writer(c).await;
    wait_for(
        "swo-3 to lag more than 2 s",
        Duration::from_secs(60),
        || async {
            let lag = c.status()["instanceStates"]["swo-3"]["lagSeconds"].as_u64();
            lag.filter(|l| *l > 2).map(|_| ())
        },
    )
    .await;
    let asked = Instant::now();
    let out = c.local(&["promote", "swo", "swo-3"]);
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("TargetLagging") && said.contains("swo-2 is caught up"),
        "{said}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(c.current_primary(), "swo-1");
    w.wait_for_more(50, Duration::from_secs(10)).await;
    let o = w.stop().await;
    assert_eq!(o.errors, 0, "{}", o.failures_report());
    set_delay(0).await;
}

/// A switchover given up after the primary turned read-only and closed
/// its acknowledgements (`hand_over_acks`): the target's manager is frozen
/// the moment the old primary is read-only, so it never promotes. After
/// `maxSwitchoverDelay` the old primary takes its role back and must wait
/// for the spec's count of acknowledgements again, not for ever: writes
/// resume, and every acknowledged row ends on every instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switchover_given_up_after_the_hand_over_began_gives_the_primary_its_acknowledgements_back()
 {
    if flavor() == Flavor::Mariadb {
        // Nothing is closed there, and its target promotes within
        // milliseconds of the old primary's read-only: quicker than a test
        // can stop it from outside.
        eprintln!("MySQL only: a MariaDB primary closes no acknowledgements");
        return;
    }
    let manifest = format!("{}  maxSwitchoverDelay: 3\n", durable("swg", 3));
    let c = LocalCluster::start("swg", &manifest);
    let w = start_writer(&c).await;
    w.wait_for_more(50, Duration::from_secs(10)).await;
    // The target may be quicker than the test: then it is primary, and the
    // next attempt switches from it.
    let mut given_up = None;
    for _ in 0..5 {
        let old = c.current_primary();
        let target = ["swg-2", "swg-3"]
            .into_iter()
            .find(|t| *t != old)
            .unwrap()
            .to_string();
        let promote = promote_in_background(&c, "swg", &target);
        wait_read_only(&c, &old).await;
        let manager = c.manager_pid(&target);
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(manager), Signal::SIGSTOP).unwrap();
        wait_stopped(manager);
        let out = tokio::task::block_in_place(|| promote.wait_with_output()).unwrap();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(manager), Signal::SIGCONT).unwrap();
        if !out.status.success() {
            given_up = Some((old, String::from_utf8_lossy(&out.stderr).to_string()));
            break;
        }
        wait_ready(&c, 3, Duration::from_secs(60)).await;
    }
    let (old, why) = given_up.expect("no switchover was given up in 5 attempts");
    eprintln!("switchover given up: {}", why.trim().replace('\n', " / "));
    assert_eq!(
        c.current_primary(),
        old,
        "the old primary took its role back"
    );
    w.wait_for_more(50, Duration::from_secs(20)).await;
    let count: Option<u32> = c
        .admin(&old)
        .await
        .query_first("SELECT @@rpl_semi_sync_source_wait_for_replica_count")
        .await
        .unwrap();
    assert_eq!(count, Some(1), "the spec's count (minSyncReplicas 1) again");
    wait_ready(&c, 3, Duration::from_secs(60)).await;
    let o = w.stop().await;
    for i in ["swg-1", "swg-2", "swg-3"] {
        verify_on(&c, i, &o.acked).await;
    }
    assert_eq!(c.writable_instances().await, vec![old]);
    c.destroy();
}

/// The target's receiver stops the moment the old primary turns read-only
/// (an error, or a person): it could never apply up to where the old
/// primary's binary log ended, so it starts receiving again and takes
/// over, rather than leaving the old primary read-only until the
/// switchover is given up (`maxSwitchoverDelay`, an hour by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_whose_receiver_stops_during_the_hand_over_starts_it_again_and_takes_over() {
    // Given up after 30 s rather than the default hour: a failure is
    // reported, not a hung suite.
    let manifest = format!("{}  maxSwitchoverDelay: 30\n", durable("swr", 3));
    let c = LocalCluster::start("swr", &manifest);
    let w = start_writer(&c).await;
    w.wait_for_more(50, Duration::from_secs(10)).await;
    let mut target_conn = c.admin("swr-2").await;
    let promote = promote_in_background(&c, "swr", "swr-2");
    wait_read_only(&c, "swr-1").await;
    target_conn.query_drop(stop_io_thread()).await.unwrap();
    let began = Instant::now();
    let out = tokio::task::block_in_place(|| promote.wait_with_output()).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "switchover completed {:?} after the target's receiver was stopped",
        began.elapsed()
    );
    assert_eq!(c.current_primary(), "swr-2");
    w.wait_for_more(50, Duration::from_secs(10)).await;
    wait_ready(&c, 3, Duration::from_secs(60)).await;
    let o = w.stop().await;
    for i in ["swr-1", "swr-2", "swr-3"] {
        verify_on(&c, i, &o.acked).await;
    }
    assert_eq!(c.writable_instances().await, vec!["swr-2".to_string()]);
    c.destroy();
}

/// Until `instance` answers read-only (a hand-over began), asked every 2 ms.
async fn wait_read_only(c: &LocalCluster, instance: &str) {
    let mut conn = c.admin(instance).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ro: Option<u8> = conn.query_first("SELECT @@read_only").await.unwrap();
        if ro == Some(1) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{instance} never turned read-only for the hand-over"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// `cnmysql local promote` started, not waited for.
fn promote_in_background(c: &LocalCluster, cluster: &str, target: &str) -> std::process::Child {
    std::process::Command::new(BIN)
        .args([
            "local",
            "promote",
            cluster,
            target,
            "--state-dir",
            &c.state_arg(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}
