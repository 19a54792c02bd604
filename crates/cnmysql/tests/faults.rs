//! The randomized fault suite on the local platform, against real mariadbd:
//! a seeded random sequence of faults (the primary's manager killed, a
//! switchover, the primary frozen past its lease, a replica killed, a
//! replica fenced and unfenced), each from a healthy cluster, under a
//! writer through rw, a writer that keeps its connection to whichever
//! instance it reached, and a watcher of every instance's `@@read_only`.
//! After every fault the cluster must be healthy again within a bound; at
//! the end no acknowledged row may be missing and no two instances may ever
//! have been writable. The Kubernetes run of the same suite is
//! `crates/kubetest/tests/faults.rs`.
//!
//! `CNMYSQL_FAULT_SEED` replays a run, `CNMYSQL_FAULTS` sets its length.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cnmysql_workload::faults::{self, Fault, Target};
use common::writer::{start as start_writer, verify_on};
use common::*;
use mysql_async::prelude::*;
use nix::sys::signal::Signal;

fn durable(name: &str, durability: &str) -> String {
    format!(
        "{}    semiSync:\n      enabled: true\n      timeoutMillis: 1000\n      dataDurability: {durability}\n  minSyncReplicas: 1\n  maxSyncReplicas: 2\n  failoverDelay: 0\n",
        manifest(name, 3)
    )
}

/// Healthy: every instance ready, one primary, no change under way.
fn healthy(c: &LocalCluster) -> bool {
    let st = c.status();
    st["phase"] == "Cluster in healthy state"
        && st["readyInstances"].as_u64() == Some(3)
        && st["currentPrimary"] == st["targetPrimary"]
        && c.routes().get("rw").is_some_and(|b| b.len() == 1)
}

fn pick_replica(c: &LocalCluster, primary: &str, r: u64) -> String {
    let replicas: Vec<String> = (1..=3)
        .map(|i| c.instance_name(i))
        .filter(|n| n != primary)
        .collect();
    replicas[(r % replicas.len() as u64) as usize].clone()
}

fn kill_manager(c: &LocalCluster, instance: &str) {
    let manager = c.manager_pid(instance);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(manager), Signal::SIGKILL).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn randomized_faults_leave_one_writable_primary_and_lose_no_acknowledged_row() {
    suite("flt", "required").await;
}

/// `preferred`: the same bounds, every instance healthy again after each
/// fault and holding the same rows; acknowledged rows lost are counted (a
/// failover that cannot wait for a replica may lose them, by design).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn randomized_faults_with_preferred_durability() {
    suite("pfl", "preferred").await;
}

/// Every instance holds the same rows: each first applies everything the
/// primary has (a replica that rejoined late may still be applying; how
/// long that took is printed), then the writer's table checksums the same.
async fn same_rows_everywhere(c: &LocalCluster, primary: &str) {
    let mut p = c.admin(primary).await;
    let want: Option<(String, i64)> = p.query_first("CHECKSUM TABLE app.w").await.unwrap();
    let want = want.expect("a checksum").1;
    let history: String = p
        .query_first(sql("SELECT @@gtid_binlog_pos", "SELECT @@gtid_executed"))
        .await
        .unwrap()
        .expect("the primary's history");
    for n in (1..=3).map(|i| c.instance_name(i)).filter(|n| n != primary) {
        let began = Instant::now();
        let applied = cnmysql_envtest::until(
            &format!("{n} to apply everything {primary} has ({history})"),
            Duration::from_secs(120),
            || applied_all(c, &n, &history),
        )
        .await;
        if let Err(e) = applied {
            panic!("{e}\n{}", rows_diagnosis(c, primary).await);
        }
        eprintln!(
            "{n} applied {primary}'s history {:.1}s after the faults",
            began.elapsed().as_secs_f64()
        );
        let mut a = c.admin(&n).await;
        let got: Option<(String, i64)> = a.query_first("CHECKSUM TABLE app.w").await.unwrap();
        if got.map(|g| g.1) != Some(want) {
            panic!(
                "{n} holds {primary}'s whole history but app.w checksums differently\n{}",
                rows_diagnosis(c, primary).await
            );
        }
    }
}

/// Whether `n` has applied every transaction of `history` (waits up to a
/// second on the server).
async fn applied_all(c: &LocalCluster, n: &str, history: &str) -> Option<()> {
    let mut a = c.admin(n).await;
    let waited: Option<i64> = a
        .exec_first(
            sql(
                "SELECT MASTER_GTID_WAIT(?, 1)",
                "SELECT WAIT_FOR_EXECUTED_GTID_SET(?, 1)",
            ),
            (history,),
        )
        .await
        .ok()?;
    (waited? == 0).then_some(())
}

/// What a person debugging a row mismatch asks first: each instance's
/// history, replication threads, and the ids it has that the primary has
/// not (and the other way round).
async fn rows_diagnosis(c: &LocalCluster, primary: &str) -> String {
    let ids = |n: String| async move {
        let mut a = c.admin(&n).await;
        a.query::<u64, _>("SELECT id FROM app.w")
            .await
            .unwrap_or_default()
            .into_iter()
            .collect::<std::collections::BTreeSet<u64>>()
    };
    let theirs = ids(primary.to_string()).await;
    let mut out = String::new();
    for i in 1..=3 {
        let n = c.instance_name(i);
        let mine = ids(n.clone()).await;
        let extra: Vec<_> = mine.difference(&theirs).take(10).collect();
        let missing: Vec<_> = theirs.difference(&mine).take(10).collect();
        let mut a = c.admin(&n).await;
        let history: Vec<(String, String)> = a
            .query("SHOW GLOBAL VARIABLES WHERE Variable_name LIKE 'gtid%pos' OR Variable_name = 'gtid_executed'")
            .await
            .unwrap_or_default();
        let threads: Vec<mysql_async::Row> = a
            .query(sql("SHOW SLAVE STATUS", "SHOW REPLICA STATUS"))
            .await
            .unwrap_or_default();
        let threads: Vec<String> = threads
            .iter()
            .flat_map(|r| {
                [
                    "Master_Host",
                    "Source_Host",
                    "Slave_IO_Running",
                    "Replica_IO_Running",
                    "Slave_SQL_Running",
                    "Replica_SQL_Running",
                    "Last_Error",
                    "Last_IO_Error",
                    "Last_SQL_Error",
                ]
                .iter()
                .filter_map(|k| {
                    r.get_opt::<String, _>(*k)
                        .and_then(Result::ok)
                        .map(|v| format!("{k}={v}"))
                })
                .collect::<Vec<_>>()
            })
            .collect();
        out.push_str(&format!(
            "{n}: {} rows, extra {extra:?}, missing {missing:?}, {history:?}, {threads:?}\n",
            mine.len()
        ));
    }
    out
}

async fn suite(name: &'static str, durability: &str) {
    let seed = faults::seed();
    let plan = faults::plan(seed, faults::count(6), faults::LOCAL);
    eprintln!(
        "fault suite (local, {durability}): seed {seed} (replay with CNMYSQL_FAULT_SEED={seed}): {:?}",
        plan.iter().map(|f| f.0.name()).collect::<Vec<_>>()
    );
    let c = LocalCluster::start(name, &durable(name, durability));
    let password = c.app_password();
    let targets: Vec<Target> = (1..=3)
        .map(|i| {
            let name = c.instance_name(i);
            Target {
                port: c.instance_port(&name),
                host: "127.0.0.1".into(),
                name,
            }
        })
        .collect();
    let w = start_writer(&c).await;
    w.wait_for_more(50, Duration::from_secs(20)).await;
    // The sticky writer's idea of the primary: the status, as a pool's
    // reconnect logic would read it.
    let primary_target: Arc<Mutex<Option<Target>>> = Default::default();
    let follow = {
        let (t, targets, state) = (primary_target.clone(), targets.clone(), c.state_arg());
        tokio::spawn(async move {
            loop {
                let st: Option<serde_json::Value> =
                    std::fs::read_to_string(std::path::Path::new(&state).join("status.json"))
                        .ok()
                        .and_then(|s| serde_json::from_str(&s).ok());
                if let Some(p) = st.as_ref().and_then(|s| s["currentPrimary"].as_str()) {
                    *t.lock().unwrap() = targets.iter().find(|x| x.name == p).cloned();
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let mut run = faults::Run::start(
        seed,
        w,
        Arc::new(Mutex::new(targets.clone())),
        primary_target.clone(),
        password.clone(),
    );
    for (i, (fault, r)) in plan.iter().enumerate() {
        let primary = c.current_primary();
        let replica = pick_replica(&c, &primary, *r);
        let before: std::collections::BTreeMap<String, i32> = (1..=3)
            .map(|i| {
                let n = c.instance_name(i);
                let pid = c.manager_pid(&n);
                (n, pid)
            })
            .collect();
        let t0 = Instant::now();
        let what = format!(
            "fault {} of {} ({}), seed {seed}",
            i + 1,
            plan.len(),
            fault.name()
        );
        inject(&c, name, fault, &primary, &replica, &what, &mut run).await;
        until_started_again(&c, fault, &primary, &replica, &before, &what).await;
        until_healthy(&c, name, &what).await;
        // Writes flow again.
        run.rw.wait_for_more(10, Duration::from_secs(20)).await;
        let _ = run.fault_done(*fault, &what, (&primary, &c.current_primary()), t0);
    }

    follow.abort();
    if std::env::var_os("CNMYSQL_WATCH_DEBUG").is_some() {
        print_logs(&c);
    }
    judge(&c, run, durability, seed).await;
    c.destroy();
}

/// Carry `fault` out on the cluster.
async fn inject(
    c: &LocalCluster,
    name: &str,
    fault: &Fault,
    primary: &String,
    replica: &String,
    what: &str,
    run: &mut faults::Run,
) {
    match fault {
        Fault::PrimaryKilled => {
            // The control plane stops the server its manager left; the
            // moment it is proven gone bounds what it answered.
            let server = std::fs::read_to_string(c.instance_dir(primary).join("run/mysqld.pid"))
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok());
            kill_manager(c, primary);
            if let Some(pid) = server {
                wait_for(
                    &format!("{what}: {primary}'s mysqld gone"),
                    Duration::from_secs(15),
                    || async { faults::process_gone(pid).then_some(()) },
                )
                .await;
                run.died.push((primary.clone(), Instant::now()));
            }
        }
        Fault::ReplicaKilled => kill_manager(c, replica),
        Fault::Switchover => {
            let out = c.local(&["promote", name, replica]);
            let said = String::from_utf8_lossy(&out.stderr).to_string();
            // A target behind is refused at once, naming one that is
            // caught up: the suite then does what a user would.
            match cnmysql_workload::lagging_refusal::lagging_refusal(&said) {
                _ if out.status.success() => {}
                Some(Some(instead)) => {
                    eprintln!("{what}: {replica} lags; switching over to {instead}");
                    let out = c.local(&["promote", name, &instead]);
                    assert!(
                        out.status.success()
                            || cnmysql_workload::lagging_refusal::lagging_refusal(
                                &String::from_utf8_lossy(&out.stderr)
                            )
                            .is_some(),
                        "{what}: promote {instead}: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
                Some(None) => eprintln!("{what}: no replica caught up; no switchover"),
                None => panic!("{what}: promote {replica}: {said}"),
            }
        }
        Fault::PrimaryFrozen => {
            c.signal_instance(primary, Signal::SIGSTOP);
            tokio::time::sleep(faults::FREEZE).await;
            run.resumed.push((primary.clone(), Instant::now()));
            c.signal_instance(primary, Signal::SIGCONT);
        }
        Fault::FenceReplica => {
            let out = c.local(&["fence", "on", name, replica]);
            assert!(
                out.status.success(),
                "{what}: fence on: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            wait_for(
                &format!("{what}: {replica} fenced"),
                Duration::from_secs(30),
                || async {
                    let st = c.status();
                    (st["fencedInstances"]
                        .as_array()
                        .is_some_and(|a| a.iter().any(|n| n == replica.as_str()))
                        && c.routes().get("ro").is_some_and(|b| !b.contains(replica)))
                    .then_some(())
                },
            )
            .await;
            let out = c.local(&["fence", "off", name, replica]);
            assert!(
                out.status.success(),
                "{what}: fence off: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        other => unreachable!("{other:?} has no local form"),
    }
}

/// The fault has taken effect before health is judged: a killed manager
/// was started again (the status may still show the moment before it).
async fn until_started_again(
    c: &LocalCluster,
    fault: &Fault,
    primary: &String,
    replica: &String,
    before: &std::collections::BTreeMap<String, i32>,
    what: &str,
) {
    if let Fault::PrimaryKilled | Fault::ReplicaKilled = fault {
        let victim = if *fault == Fault::PrimaryKilled {
            primary
        } else {
            replica
        };
        wait_for(
            &format!("{what}: {victim} started again"),
            faults::RECOVERY_BOUND,
            || async {
                let m = std::fs::read_to_string(c.instance_dir(victim).join("manager.pid")).ok()?;
                let pid = m.trim().parse::<i32>().ok()?;
                (pid != before[victim] && std::path::Path::new(&format!("/proc/{pid}")).exists())
                    .then_some(())
            },
        )
        .await;
    }
}

/// Wait until the cluster is healthy again, within the recovery bound;
/// an instance kept out for a person is re-initialised, once, as a person
/// would.
async fn until_healthy(c: &LocalCluster, name: &str, what: &str) {
    let ended = Instant::now();
    let deadline = ended + faults::RECOVERY_BOUND;
    let mut asked = std::collections::BTreeSet::new();
    while !healthy(c) {
        // Kept out for a person (it may hold acknowledged writes): do
        // what a person does, once.
        let reasons = c.status()["divergedReasons"].clone();
        for (inst, why) in reasons.as_object().into_iter().flatten() {
            if why.as_str().is_some_and(|w| w.contains("reinit")) && asked.insert(inst.clone()) {
                eprintln!("{what}: {inst} kept out ({why}); cnmysql local reinit");
                let out = c.local(&["reinit", name, inst, "--no-wait"]);
                assert!(
                    out.status.success(),
                    "{what}: reinit {inst}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        if Instant::now() > deadline {
            panic!(
                "{what}: not healthy {:?} after the fault ended\nstatus: {}\n{}",
                faults::RECOVERY_BOUND,
                c.status(),
                c.log_tails()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// CNMYSQL_WATCH_DEBUG: the control plane's and managers' logs, and every
/// writable answer of the watcher, for a failing seed.
fn print_logs(c: &LocalCluster) {
    let control = std::fs::read_to_string(std::path::Path::new(&c.state_arg()).join("control.log"))
        .unwrap_or_default();
    eprintln!("{control}");
    for i in 1..=3 {
        let m = std::fs::read_to_string(c.instance_dir(&c.instance_name(i)).join("manager.log"))
            .unwrap_or_default();
        for l in m.lines().filter(|l| !l.contains("\"source\":\"mysqld\"")) {
            eprintln!("[{}] {l}", c.instance_name(i));
        }
    }
}

/// Every acknowledged row everywhere (under `required`), the same rows on
/// every instance, one writable instance.
async fn judge(c: &LocalCluster, run: faults::Run, durability: &str, seed: u64) {
    let acked = run.finish(&format!("local/{durability}")).await;
    let primary = c.current_primary();
    same_rows_everywhere(c, &primary).await;
    if durability == "required" {
        for i in 1..=3 {
            verify_on(c, &c.instance_name(i), &acked).await;
        }
    } else {
        // `preferred` may lose an acknowledged write when failover cannot
        // wait for a replica: counted, not forbidden.
        let mut a = c.admin(&primary).await;
        let ids: Vec<u64> = a.query("SELECT id FROM app.w").await.unwrap();
        let have: std::collections::BTreeSet<u64> = ids.into_iter().collect();
        let missing = acked.iter().filter(|id| !have.contains(id)).count();
        eprintln!(
            "seed {seed}: {missing} of {} acknowledged rows missing ({durability})",
            acked.len()
        );
    }
    let saved = c.status()["savedTransactions"].clone();
    if !saved.is_null() {
        eprintln!("seed {seed}: diverged instances saved and re-cloned: {saved}");
    }
    assert_eq!(c.writable_instances().await, vec![primary]);
}
