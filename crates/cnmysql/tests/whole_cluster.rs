//! Every instance dying at once (issue 46): power lost to a machine that
//! holds the whole cluster, an OOM storm. All managers and servers get
//! SIGKILL together under a writer with `dataDurability: required`; the
//! cluster must come back without a person: every instance ready within
//! 90 s, one primary holding every acknowledged row, never two writable
//! on the way.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::writer::{start as start_writer, verify_on};
use common::*;
use nix::sys::signal::Signal;

const DURABLE: &str = "    semiSync:\n      enabled: true\n      timeoutMillis: 1000\n      dataDurability: required\n  minSyncReplicas: 1\n  maxSyncReplicas: 1\n  failoverDelay: 0\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_instance_killed_at_once_comes_back_with_nothing_lost_and_never_two_writable() {
    let c = Arc::new(LocalCluster::start(
        "all",
        &format!("{}{DURABLE}", manifest("all", 3)),
    ));
    let w = start_writer(&c).await;
    w.wait_for_more(200, Duration::from_secs(20)).await;

    // An outside watcher: every 200 ms, how many instances are writable.
    let stop = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (c, stop, most) = (c.clone(), stop.clone(), most.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let n = c.writable_instances().await.len();
                most.fetch_max(n, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };

    let names: Vec<String> = (1..=3).map(|n| format!("all-{n}")).collect();
    let before: Vec<(i32, i32)> = names.iter().map(|n| c.instance_pids(n)).collect();
    let at_kill = c.status()["gtidExecutedByInstance"].clone();
    let killed = Instant::now();
    for n in &names {
        c.signal_instance(n, Signal::SIGKILL);
    }
    // The status is only believed once every instance runs new processes.
    wait_for(
        "every instance's manager and server started again",
        Duration::from_secs(60),
        || async {
            names
                .iter()
                .zip(&before)
                .all(|(n, (m, d))| {
                    let d2 = std::fs::read_to_string(c.instance_dir(n).join("run/mysqld.pid"));
                    c.manager_pid(n) != *m
                        && d2.is_ok_and(|t| t.trim().parse::<i32>().is_ok_and(|p| p != *d))
                })
                .then_some(())
        },
    )
    .await;
    // Only a status that shows transactions written after the kill counts
    // (one written before it still says all is well).
    let written = || {
        let now = c.status()["gtidExecutedByInstance"].clone();
        now.as_object()
            .is_some_and(|m| m.iter().all(|(n, g)| at_kill.get(n) != Some(g)))
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let st = c.status();
        if written()
            && st["readyInstances"] == 3
            && st["currentPrimary"].as_str().is_some_and(|p| !p.is_empty())
            && st["divergedInstances"].is_null()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not all three ready with a primary 90 s after the kill (every instance's history moved on since: {}):\n{}\n{}",
            written(),
            serde_json::to_string_pretty(&st).unwrap(),
            c.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ready = killed.elapsed();
    w.wait_for_more(100, Duration::from_secs(30)).await;
    let o = w.stop().await;
    stop.store(true, Ordering::Relaxed);
    watcher.await.unwrap();

    let primary = c.current_primary();
    let first = o.first_ack_after(killed).expect("writes resumed");
    eprintln!(
        "whole cluster killed: all ready after {ready:?}, first write {:?} after the kill, primary {primary}, {} acknowledged",
        first - killed,
        o.acked.len()
    );
    assert_eq!(
        most.load(Ordering::Relaxed),
        1,
        "two instances were writable at once"
    );
    assert_eq!(c.writable_instances().await, vec![primary.clone()]);
    for n in 1..=3 {
        verify_on(&c, &format!("all-{n}"), &o.acked).await;
    }
    Arc::try_unwrap(c).ok().expect("one owner").destroy();
}

/// The loss the Kubernetes fault suite found (seed 7316166684586105572):
/// a replica acknowledges a write once it is in its relay log, and a
/// restart empties that log. Here the only acknowledging replica holds the
/// writes unapplied (its applier stopped, as a slow one would be), the
/// primary freezes and that replica restarts. Promoting either replica
/// would lose acknowledged rows: the failover must wait, say why, and the
/// primary, once back, must still hold them and hand them on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_restarted_while_the_primary_is_away_is_not_promoted_without_what_it_acknowledged()
 {
    use mysql_async::prelude::*;
    use nix::sys::signal::kill;
    use nix::unistd::Pid;
    let c = LocalCluster::start("ack", &format!("{}{DURABLE}", manifest("ack", 3)));
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("CREATE TABLE app.acked (id INT PRIMARY KEY)")
        .await
        .unwrap();
    let primary = c.current_primary();
    let replicas: Vec<String> = (1..=3)
        .map(|n| format!("ack-{n}"))
        .filter(|n| n != &primary)
        .collect();
    let (holder, other) = (&replicas[0], &replicas[1]);
    wait_for("replicas to catch up", Duration::from_secs(20), || async {
        let g = c.status()["gtidExecutedByInstance"].clone();
        replicas.iter().all(|r| g[r] == g[&primary]).then_some(())
    })
    .await;
    // Nothing may restart replication behind the test's back: both
    // replicas' managers are frozen. `other` receives nothing; `holder`
    // receives (and so acknowledges) but applies nothing.
    let stopped = |n: &str| Pid::from_raw(c.instance_pids(n).0);
    let frozen_other = stopped(other);
    kill(stopped(holder), Signal::SIGSTOP).unwrap();
    kill(frozen_other, Signal::SIGSTOP).unwrap();
    wait_stopped(stopped(holder).as_raw());
    wait_stopped(frozen_other.as_raw());
    c.admin(other)
        .await
        .query_drop(stop_io_thread())
        .await
        .unwrap();
    c.admin(holder)
        .await
        .query_drop(sql("STOP SLAVE SQL_THREAD", "STOP REPLICA SQL_THREAD"))
        .await
        .unwrap();
    for id in 1..=5 {
        rw.query_drop(format!("INSERT INTO app.acked VALUES ({id})"))
            .await
            .unwrap();
    }
    drop(rw);
    // The primary goes away (frozen: its lease runs out) and the only
    // replica that holds the writes restarts, emptying its relay log.
    c.signal_instance(&primary, Signal::SIGSTOP);
    let before = c.instance_pids(holder).1;
    c.signal_instance(holder, Signal::SIGKILL);
    kill(frozen_other, Signal::SIGCONT).unwrap();
    let e = wait_for(
        "the failover blocked for the restarted replica",
        Duration::from_secs(60),
        || async {
            c.events().into_iter().find(|e| {
                e["reason"] == "FailoverBlocked"
                    && e["message"]
                        .as_str()
                        .is_some_and(|m| m.contains(&format!("{holder} restarted")))
            })
        },
    )
    .await;
    assert_ne!(c.instance_pids(holder).1, before, "{holder} restarted: {e}");
    assert_eq!(
        c.current_primary(),
        primary,
        "promoted past the writes: {e}"
    );
    // Back: the primary keeps its role and every instance gets the rows.
    c.signal_instance(&primary, Signal::SIGCONT);
    wait_for("all three ready again", Duration::from_secs(60), || async {
        let st = c.status();
        (st["readyInstances"] == 3 && st["currentPrimary"] == primary.as_str()).then_some(())
    })
    .await;
    for n in 1..=3 {
        let name = format!("ack-{n}");
        let rows = wait_for(
            &format!("the five acknowledged rows on {name}"),
            Duration::from_secs(60),
            || async {
                let mut a = c.admin(&name).await;
                let n: Option<i64> = a
                    .query_first("SELECT COUNT(*) FROM app.acked")
                    .await
                    .ok()
                    .flatten();
                (n == Some(5)).then_some(n)
            },
        )
        .await;
        assert_eq!(rows, Some(5));
    }
    assert_eq!(c.writable_instances().await, vec![primary]);
    c.destroy();
}
