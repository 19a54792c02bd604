//! Instance-manager upgrades on the local platform, against real servers
//! (the flavour under test, see common::flavor):
//! `cnmysql local upgrade` run from a different executable replaces the
//! control plane without stopping any instance, then the managers are
//! rolled — in place (re-exec, mysqld adopted) or by recreating them (the
//! primary last, after a switchover) — and the supervised strategy waits for
//! a human. Also: `restart-inplace`, a wrong hash, a failed exec, fencing.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cnmysql_control::client::ControlClient;
use common::writer::{start as start_writer, verify_on};
use common::*;
use mysql_async::prelude::*;

const DURABLE: &str = "    semiSync:\n      enabled: true\n      timeoutMillis: 1000\n      dataDurability: required\n  minSyncReplicas: 1\n  maxSyncReplicas: 1\n  failoverDelay: 0\n";

fn manifest_with(name: &str, extra: &str) -> String {
    format!("{}{DURABLE}{extra}", manifest(name, 3))
}

/// A different build of `cnmysql`: the same program with bytes appended
/// (the loader ignores them; the SHA-256 differs).
fn new_executable(dir: &Path) -> (PathBuf, String) {
    use sha2::Digest;
    let path = dir.join("cnmysql-next");
    let mut bytes = std::fs::read(BIN).unwrap();
    bytes.extend_from_slice(b"\ncnmysql upgrade test build\n");
    std::fs::write(&path, &bytes).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    (path, hex::encode(sha2::Sha256::digest(&bytes)))
}

/// `<exe> local <args> --state-dir <state>`.
fn local_with(exe: &Path, c: &LocalCluster, args: &[&str]) -> std::process::Output {
    std::process::Command::new(exe)
        .arg("local")
        .args(args)
        .args(["--state-dir", &c.state_arg()])
        .output()
        .unwrap()
}

fn hashes(c: &LocalCluster) -> BTreeMap<String, String> {
    c.instances()
        .into_iter()
        .map(|(n, v)| (n, v["executableHash"].as_str().unwrap_or("").to_string()))
        .collect()
}

fn control_client(c: &LocalCluster) -> (ControlClient, BTreeMap<String, u16>) {
    let dir = cnmysql_local::state::StateDir::new(PathBuf::from(c.state_arg()));
    let client = ControlClient::new(dir.operator_material().unwrap().client_config().unwrap());
    let ports = c.ports()["instances"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(n, p)| (n.clone(), p["control"].as_u64().unwrap() as u16))
        .collect();
    (client, ports)
}

async fn wait_healthy(c: &LocalCluster, timeout: Duration) {
    wait_for("the cluster to be healthy", timeout, || async {
        (c.status()["phase"] == "Cluster in healthy state").then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_place_upgrade_keeps_every_mysqld_running_and_loses_no_write() {
    let c = LocalCluster::start(
        "inp",
        &manifest_with("inp", "  inPlaceInstanceManagerUpdates: true\n"),
    );
    let tmp = tempfile::tempdir().unwrap();
    let (next, next_hash) = new_executable(tmp.path());
    let old_hash = c.status()["operatorExecutableHash"]
        .as_str()
        .unwrap()
        .to_string();
    a_bad_executable_changes_nothing(&c, &old_hash).await;

    // restart-inplace: the same binary re-executed; mysqld keeps its PID.
    let before = c.instances()["inp-2"].clone();
    let out = c.local(&["restart-inplace", "inp", "inp-2"]);
    let said = ok(&out, "restart-inplace");
    assert!(said.contains("restarted in place"), "{said}");
    let after = c.instances()["inp-2"].clone();
    assert_eq!(after["mysqldPid"], before["mysqldPid"]);
    assert_eq!(after["managerPid"], before["managerPid"]);
    assert_ne!(after["managerStartedAt"], before["managerStartedAt"]);

    // Fence inp-3: the rollout skips it.
    ok(&c.local(&["fence", "on", "inp", "inp-3"]), "fence");

    // Writes through rw, whose endpoint lives in the control plane that
    // the upgrade re-executes first: the connection is handed across the
    // exec, so not one write may fail.
    let w =
        cnmysql_workload::writer::WriteChecker::start(c.service_port("rw"), c.app_password()).await;
    w.wait_for_more(50, Duration::from_secs(20)).await;
    let before = c.instances();
    let log = c.instance_dir("inp-2").join("manager.log");
    let out = local_with(&next, &c, &["upgrade", "--wait-timeout", "180"]);
    let said = ok(&out, "local upgrade");
    assert!(said.contains("instances kept running"), "{said}");
    assert_eq!(c.status()["operatorExecutableHash"], next_hash.as_str());
    let now = hashes(&c);
    assert_eq!(now["inp-1"], next_hash);
    assert_eq!(now["inp-2"], next_hash);
    assert_eq!(now["inp-3"], old_hash, "a fenced instance is skipped");

    // Unfenced, it is upgraded too.
    ok(&c.local(&["fence", "off", "inp", "inp-3"]), "unfence");
    wait_for(
        "inp-3 to run the new manager",
        Duration::from_secs(60),
        || async { (hashes(&c)["inp-3"] == next_hash).then_some(()) },
    )
    .await;
    wait_healthy(&c, Duration::from_secs(60)).await;
    w.wait_for_more(50, Duration::from_secs(20)).await;
    let after = c.instances();
    for n in ["inp-1", "inp-2", "inp-3"] {
        assert_eq!(
            after[n]["mysqldPid"], before[n]["mysqldPid"],
            "{n}: mysqld kept"
        );
        assert_eq!(
            after[n]["managerPid"], before[n]["managerPid"],
            "{n}: same process"
        );
        assert!(
            after[n]["uptimeSeconds"].as_u64() >= before[n]["uptimeSeconds"].as_u64(),
            "{n}: uptime keeps climbing"
        );
    }

    mysqld_logs_reach_the_new_manager(&c, &log).await;

    let out = w.stop().await;
    assert_eq!(
        out.errors,
        0,
        "no write failed during the in-place upgrade: {}",
        out.failures_report()
    );
    for n in ["inp-1", "inp-2", "inp-3"] {
        verify_on(&c, n, &out.acked).await;
    }
    assert!(c.has_event("UpgradeCompleted").is_some());
    c.destroy();
}

/// A wrong hash is refused and nothing on disk changes; an executable the
/// kernel cannot run passes the hash check but its exec fails, and the old
/// manager goes on supervising with its binary put back.
async fn a_bad_executable_changes_nothing(c: &LocalCluster, old_hash: &str) {
    let (client, control) = control_client(c);

    // A wrong hash is refused with 400 and nothing on disk changes.
    let exe = c.instance_dir("inp-2").join("bin/cnmysql");
    let before_bytes = std::fs::read(&exe).unwrap();
    let (code, text) = client
        .post(
            "127.0.0.1",
            control["inp-2"],
            "/instance/manager/upgrade",
            &[("X-CNMSQL-Manager-Hash", "0".repeat(64))],
            bytes::Bytes::from_static(b"not the executable"),
        )
        .await
        .unwrap();
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("hash mismatch"), "{text}");
    assert!(std::fs::read(&exe).unwrap() == before_bytes);

    // An executable the kernel cannot run passes the hash check, but the
    // exec fails: the old manager goes on supervising, its binary is put back.
    let (m_before, d_before) = c.instance_pids("inp-2");
    let junk = b"#!/nonexistent/interpreter\n".to_vec();
    let junk_hash = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&junk))
    };
    let (code, text) = client
        .post(
            "127.0.0.1",
            control["inp-2"],
            "/instance/manager/upgrade",
            &[("X-CNMSQL-Manager-Hash", junk_hash)],
            junk.into(),
        )
        .await
        .unwrap();
    assert_eq!(code, 200, "{text}");
    wait_for(
        "the failed exec to be reported and the binary put back",
        Duration::from_secs(10),
        || async {
            let log = std::fs::read_to_string(c.instance_dir("inp-2").join("manager.log")).ok()?;
            (log.contains("re-exec failed") && std::fs::read(&exe).ok()? == before_bytes)
                .then_some(())
        },
    )
    .await;
    assert_eq!(c.instance_pids("inp-2"), (m_before, d_before));
    assert_eq!(hashes(c)["inp-2"], old_hash);
}

/// mysqld's log still reaches the (new) manager's log: a replica's IO
/// thread restart logs lines after the swap.
async fn mysqld_logs_reach_the_new_manager(c: &LocalCluster, log: &std::path::Path) {
    let offset = std::fs::metadata(log).unwrap().len() as usize;
    let mut a = c.admin("inp-2").await;
    a.query_drop(stop_io_thread()).await.unwrap();
    a.query_drop(start_io_thread()).await.unwrap();
    wait_for(
        "mysqld log lines in the upgraded manager's log",
        Duration::from_secs(20),
        || async {
            let text = std::fs::read_to_string(log).ok()?;
            text[offset..]
                .lines()
                .any(|l| {
                    l.contains("\"source\":\"mysqld\"")
                        && l.contains(sql("Slave I/O thread", "Replica receiver thread"))
                })
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_upgrade_recreates_replicas_then_switches_over_and_loses_nothing() {
    let c = LocalCluster::start("rol", &manifest_with("rol", ""));
    let tmp = tempfile::tempdir().unwrap();
    let (next, next_hash) = new_executable(tmp.path());
    let primary = c.current_primary();
    let before = c.instances();
    let w = start_writer(&c).await;
    w.wait_for_more(50, Duration::from_secs(20)).await;
    let out = local_with(&next, &c, &["upgrade", "--wait-timeout", "300"]);
    ok(&out, "local upgrade");
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let out = w.stop().await;
    for (n, h) in hashes(&c) {
        assert_eq!(h, next_hash, "{n} runs the new manager");
    }
    // Recreated: every mysqld was restarted.
    let after = c.instances();
    for n in ["rol-1", "rol-2", "rol-3"] {
        assert_ne!(
            after[n]["mysqldPid"], before[n]["mysqldPid"],
            "{n} recreated"
        );
    }
    // Replicas in ascending ordinal, then a switchover, then the old primary.
    let steps: Vec<String> = c
        .event_steps(&["UpgradingInstanceManager", "SwitchoverForUpgrade"])
        .into_iter()
        .map(|(step, _)| step)
        .collect();
    let mut replicas: Vec<String> = ["rol-1", "rol-2", "rol-3"]
        .iter()
        .filter(|n| **n != primary)
        .map(|n| format!("UpgradingInstanceManager {n}"))
        .collect();
    replicas.sort();
    assert_eq!(steps.len(), 4, "{steps:?}");
    assert_eq!(steps[..2], replicas[..], "{steps:?}");
    assert!(steps[2].starts_with("SwitchoverForUpgrade"), "{steps:?}");
    assert_eq!(
        steps[3],
        format!("UpgradingInstanceManager {primary}"),
        "{steps:?}"
    );
    assert_ne!(c.current_primary(), primary);
    for n in ["rol-1", "rol-2", "rol-3"] {
        verify_on(&c, n, &out.acked).await;
    }
    eprintln!(
        "rolling upgrade: longest rw write gap {:.3}s, {} writes, {} errors",
        out.longest_gap.as_secs_f64(),
        out.acked.len(),
        out.errors
    );
    c.destroy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervised_rollout_waits_for_a_switchover_then_resumes() {
    let c = LocalCluster::start(
        "sup",
        &manifest_with("sup", "  primaryUpdateStrategy: supervised\n"),
    );
    let tmp = tempfile::tempdir().unwrap();
    let (next, next_hash) = new_executable(tmp.path());
    let before = c.instances();
    let old: Vec<String> = hashes(&c).into_values().collect();
    ok(
        &local_with(&next, &c, &["upgrade", "--no-wait"]),
        "local upgrade",
    );
    wait_for("WaitingForUser", Duration::from_secs(30), || async {
        (c.status()["phase"] == "WaitingForUser").then_some(())
    })
    .await;
    let reason = c.status()["phaseReason"].as_str().unwrap().to_string();
    assert!(
        reason.contains("supervised") && reason.contains("switch over"),
        "{reason}"
    );
    assert!(c.has_event("UpgradeWaitingForUser").is_some());
    // Nothing was touched, and a later look still finds nothing touched.
    for _ in 0..3 {
        let now = c.instances();
        for n in ["sup-1", "sup-2", "sup-3"] {
            assert_eq!(now[n]["mysqldPid"], before[n]["mysqldPid"], "{n} untouched");
        }
        assert_eq!(hashes(&c).into_values().collect::<Vec<_>>(), old);
        assert_eq!(c.status()["phase"], "WaitingForUser");
    }
    // A human switches over: consent for this rollout, which resumes on
    // its own and finishes.
    let primary = c.current_primary();
    let target = if primary == "sup-2" { "sup-3" } else { "sup-2" };
    ok(&c.local(&["promote", "sup", target]), "promote");
    wait_for(
        "every instance on the new manager",
        Duration::from_secs(240),
        || async {
            (hashes(&c).values().all(|h| *h == next_hash)
                && c.status()["phase"] == "Cluster in healthy state")
                .then_some(())
        },
    )
    .await;
    c.destroy();
}
