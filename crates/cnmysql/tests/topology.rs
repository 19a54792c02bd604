//! Safe topology changes on the local platform, against real servers (the
//! flavour under test, see common::flavor):
//! switchover, failover, blocked failover, rejoin, divergence, fencing, the
//! primary lease and failoverDelay. Every test that changes the primary
//! checks that no acknowledged write is lost and that one instance at most
//! is writable.

mod common;

use std::time::{Duration, Instant};

use common::writer::{start as start_writer, verify_on};
use common::*;
use mysql_async::prelude::*;
use nix::sys::signal::Signal;

fn manifest_with(name: &str, instances: u32, extra: &str) -> String {
    format!("{}{extra}", manifest(name, instances))
}

const REQUIRED: &str = "  minSyncReplicas: 1\n  maxSyncReplicas: 1\n  failoverDelay: 0\n";
const SEMI_REQUIRED: &str = "    semiSync:\n      enabled: true\n      timeoutMillis: 1000\n      dataDurability: required\n";

/// The manifest helper ends inside `spec.mysql`; add semi-sync there and
/// top-level fields after.
fn durable(name: &str, instances: u32) -> String {
    format!("{}{SEMI_REQUIRED}{REQUIRED}", manifest(name, instances))
}

async fn wait_primary(c: &LocalCluster, name: &str, timeout: Duration) {
    wait_for(
        &format!("{name} to be the primary with rw routed to it"),
        timeout,
        || async {
            (c.current_primary() == name
                && c.routes()
                    .get("rw")
                    .is_some_and(|b| b == &vec![name.to_string()]))
            .then_some(())
        },
    )
    .await;
}

async fn wait_ready(c: &LocalCluster, n: u64, timeout: Duration) {
    wait_for(&format!("{n} ready instances"), timeout, || async {
        (c.status()["readyInstances"].as_u64() == Some(n)).then_some(())
    })
    .await;
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_after_kill9_with_required_durability_loses_nothing() {
    let c = LocalCluster::start("fo", &durable("fo", 3));
    wait_for(
        "semi-sync on the primary",
        Duration::from_secs(20),
        || async {
            let st = c.status_json();
            let p = instances_by_name(&st)["fo-1"].clone();
            (p["semiSync"]["sourceEnabled"] == true).then_some(())
        },
    )
    .await;
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
async fn fencing_a_replica_and_the_primary_then_unfencing() {
    let c = LocalCluster::start("fence", &manifest("fence", 3));
    // As the spec shows it: the plugin, here on the local platform.
    let out = c.plugin(
        "kubectl-cloudnative_mysql",
        &["fence", "on", "fence", "fence-2"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for(
        "fence-2 out of every route",
        Duration::from_secs(10),
        || async {
            let r = c.routes();
            (!r.values().any(|b| b.contains(&"fence-2".to_string()))
                && r.get("ro")
                    .is_some_and(|b| b == &vec!["fence-3".to_string()]))
            .then_some(())
        },
    )
    .await;
    assert_eq!(
        c.status()["fencedInstances"],
        serde_json::json!(["fence-2"])
    );

    // Fencing the primary stops writes for the whole cluster, without
    // failover, and whoever asked is warned.
    let out = c.local(&["fence", "on", "fence", "fence-1"]);
    assert!(out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("warning: fence-1 is the primary"),
        "no warning: {said}"
    );
    wait_for(
        "no rw backend and a read-only primary",
        Duration::from_secs(10),
        || async {
            let r = c.routes();
            (r.get("rw").is_some_and(|b| b.is_empty()) && c.writable_instances().await.is_empty())
                .then_some(())
        },
    )
    .await;
    // Like a Service without endpoints: the connection is refused, not
    // accepted and dropped mid-handshake.
    let rw_port = c.service_port("rw");
    wait_for(
        "rw to refuse connections",
        Duration::from_secs(5),
        || async {
            match std::net::TcpStream::connect(("127.0.0.1", rw_port)) {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Some(()),
                _ => None,
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        c.current_primary(),
        "fence-1",
        "fencing the primary must not trigger failover"
    );

    for i in ["fence-1", "fence-2"] {
        assert!(c.local(&["fence", "off", "fence", i]).status.success());
    }
    wait_primary(&c, "fence-1", Duration::from_secs(10)).await;
    wait_ready(&c, 3, Duration::from_secs(20)).await;
    let mut rw = c.app(c.service_port("rw")).await.unwrap();
    rw.query_drop("CREATE DATABASE after_unfence")
        .await
        .unwrap();
    drop(rw);
    assert!(c.has_event("Fenced").is_some() && c.has_event("Unfenced").is_some());
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_instance_restarts_but_one_with_a_peer_does_not() {
    // DESIGN §4: liveness fails only when the cluster state has been
    // unreachable for 30 s and no peer answers either.
    let alone = LocalCluster::start("iso", &manifest("iso", 1));
    let paired = LocalCluster::start("pair", &manifest("pair", 2));
    // The same outage of the cluster state for both: the status file turns
    // into a directory, so every read and write of it fails.
    let saved: Vec<(std::path::PathBuf, String)> = [&alone, &paired]
        .iter()
        .map(|c| {
            let p = std::path::Path::new(&c.state_arg()).join("status.json");
            let text = std::fs::read_to_string(&p).unwrap();
            std::fs::remove_file(&p).unwrap();
            std::fs::create_dir(&p).unwrap();
            (p, text)
        })
        .collect();
    let broken = Instant::now();
    wait_for(
        "the lone instance to be restarted as isolated",
        Duration::from_secs(60),
        || async { alone.has_event("IsolationRestart") },
    )
    .await;
    let after = broken.elapsed();
    // Counted from the instance's last good read, up to one 250 ms
    // reconcile before the break.
    assert!(
        after >= Duration::from_millis(29_500),
        "restarted {after:?} into the outage, before the 30 s threshold"
    );
    assert!(alone.has_event("StatusUnreadable").is_some());

    // Same outage, but each instance can reach its peer: no restart, and
    // nobody reports itself isolated.
    assert!(paired.has_event("IsolationRestart").is_none());
    let report = paired.status_json();
    assert!(
        report["statusError"].is_string(),
        "status shows the outage: {report}"
    );
    for i in report["instances"].as_array().unwrap() {
        assert_eq!(i["reachable"], true, "{i}");
        assert_eq!(i["isolated"], false, "{i}");
    }

    // The outage ends: the lone instance serves writes again.
    for (p, text) in &saved {
        std::fs::remove_dir(p).unwrap();
        std::fs::write(p, text).unwrap();
    }
    wait_for("writes on iso again", Duration::from_secs(60), || async {
        let mut rw = alone.app(alone.service_port("rw")).await.ok()?;
        rw.query_drop("CREATE DATABASE IF NOT EXISTS after_isolation")
            .await
            .ok()
    })
    .await;
    assert_eq!(paired.current_primary(), "pair-1");
    alone.destroy();
    paired.destroy();
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
async fn ids_once_it_holds(c: &LocalCluster, instance: &str, table: &str, id: i64) -> Vec<i64> {
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
async fn a_stopping_primary_whose_commit_waits_for_an_acknowledgement_stops_at_once_without_acknowledging_it()
 {
    // Issue 18: a primary told to stop while a commit waited for a
    // semi-sync acknowledgement that would never come stayed writable until
    // its grace period ran out (its read-only request waited behind the
    // commit). Now the request has 500 ms, then mysqld is killed: the
    // manager stops at once and the waiting client gets an error.
    let c = LocalCluster::start("stk", &durable("stk", 2));
    wait_for(
        "semi-sync on the primary",
        Duration::from_secs(20),
        || async {
            let st = c.status_json();
            (instances_by_name(&st)["stk-1"]["semiSync"]["sourceEnabled"] == true).then_some(())
        },
    )
    .await;
    let mut app = c.app(c.instance_port("stk-1")).await.unwrap();
    app.query_drop("CREATE DATABASE IF NOT EXISTS stuck")
        .await
        .unwrap();
    app.query_drop("CREATE TABLE stuck.t (i INT PRIMARY KEY)")
        .await
        .unwrap();
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
    wait_for(
        "semi-sync on the primary",
        Duration::from_secs(20),
        || async {
            let st = c.status_json();
            (instances_by_name(&st)["pfb-1"]["semiSync"]["sourceEnabled"] == true).then_some(())
        },
    )
    .await;
    let mut app = c.app(c.instance_port("pfb-1")).await.unwrap();
    app.query_drop("CREATE DATABASE IF NOT EXISTS fb")
        .await
        .unwrap();
    app.query_drop("CREATE TABLE fb.t (i INT PRIMARY KEY)")
        .await
        .unwrap();
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
    let written = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
    let writer = {
        let mut rw = c.app(c.service_port("rw")).await.unwrap();
        let written = written.clone();
        tokio::spawn(async move {
            for id in 1.. {
                rw.query_drop(format!("INSERT INTO lagdb.t VALUES ({id})"))
                    .await
                    .unwrap();
                written.store(id, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
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
    writer.abort();
    let n = written.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        ids_once_it_holds(&c, behind, "lagdb.t", n).await.len() as i64,
        n + 1
    );
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
fn relay_log_bytes(c: &LocalCluster, instance: &str) -> u64 {
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
