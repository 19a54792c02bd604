//! Upgrades asked by annotation on the local platform, against real
//! servers (the flavour under test, see common::flavor), with
//! `instanceUpdateStrategy: manual` and `dataDurability: required`:
//! a canary replica given a new instance manager from a file (a file whose
//! hash does not match first: failed with the time, retried once fixed),
//! the rest untouched; and the whole cluster walked through by the
//! orchestrator, the primary last, with writes running all along.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::writer::verify_on;
use common::*;
use serde_json::Value;

const MANUAL: &str = "    semiSync:\n      enabled: true\n      timeoutMillis: 1000\n      dataDurability: required\n  minSyncReplicas: 1\n  maxSyncReplicas: 1\n  failoverDelay: 0\n  instanceUpdateStrategy: manual\n";

/// A different build of `cnmysql` (bytes appended; another SHA-256) at
/// `path`.
fn build_at(path: &Path) -> String {
    use sha2::Digest;
    let mut bytes = std::fs::read(BIN).unwrap();
    bytes.extend_from_slice(b"\ncnmysql annotated upgrade test build\n");
    std::fs::write(path, &bytes).unwrap();
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    hex::encode(sha2::Sha256::digest(&bytes))
}

fn record(c: &LocalCluster, instance: &str) -> Value {
    c.status()["instanceUpgrades"][instance].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_from_a_file_fails_on_a_wrong_hash_is_retried_once_fixed_and_moves_nothing_else() {
    let c = LocalCluster::start("can", &format!("{}{MANUAL}", manifest("can", 3)));
    let tmp = tempfile::tempdir().unwrap();
    let file: PathBuf = tmp.path().join("cnmysql-canary");
    // The hash of the build we want; the file holds another one for now.
    let want = build_at(&file);
    std::fs::copy(BIN, &file).unwrap();
    let before = c.instances();
    let old = before["can-1"]["executableHash"]
        .as_str()
        .unwrap()
        .to_string();
    let w =
        cnmysql_workload::writer::WriteChecker::start(c.service_port("rw"), c.app_password()).await;
    w.wait_for_more(50, Duration::from_secs(20)).await;

    // Bad input is refused with the way to write it, and nothing is kept.
    let out = c.local(&[
        "annotate",
        "can",
        "can-2",
        "cnmysql.io/upgrade-to=manager=latest",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("write it as"));

    let value = format!("manager=file://{}#sha256={want}", file.display());
    let asked = format!("cnmysql.io/upgrade-to={value}");
    ok(&c.local(&["annotate", "can", "can-2", &asked]), "annotate");
    let failed = wait_for(
        "the attempt to fail on the hash",
        Duration::from_secs(60),
        || async {
            let r = record(&c, "can-2");
            (r["status"] == "failed").then_some(r)
        },
    )
    .await;
    assert!(
        failed["message"].as_str().unwrap().contains("SHA-256"),
        "{failed}"
    );
    assert!(failed["lastFailedAttemptAt"].is_string());
    // The record is mirrored onto the instance by a second write.
    let shown = wait_for(
        "the failure on the instance",
        Duration::from_secs(30),
        || async {
            let shown = c.instances()["can-2"]["annotations"].clone();
            (shown["cnmysql.io/upgrade-status"] == "failed").then_some(shown)
        },
    )
    .await;
    assert_eq!(
        shown["cnmysql.io/upgrade-last-failed-attempt-at"],
        failed["lastFailedAttemptAt"]
    );
    assert!(c.has_event("InstanceUpgradeFailed").is_some());
    assert_eq!(
        c.instances()["can-2"]["executableHash"],
        old.as_str(),
        "nothing replaced"
    );

    // The cause is fixed (the right file put there): the next attempt,
    // after the back-off, takes.
    build_at(&file);
    let done = wait_for(
        "the retried attempt to be done",
        Duration::from_secs(90),
        || async {
            let r = record(&c, "can-2");
            (r["status"] == "done").then_some(r)
        },
    )
    .await;
    assert_eq!(done["release"], want.as_str());
    assert!(done["attempts"].as_u64().unwrap() >= 2, "{done}");
    let now = c.instances();
    assert_eq!(now["can-2"]["executableHash"], want.as_str());
    assert_eq!(
        now["can-2"]["annotations"]["cnmysql.io/upgrade-release"],
        want.as_str()
    );
    assert_eq!(
        now["can-2"]["mysqldPid"], before["can-2"]["mysqldPid"],
        "mysqld kept running"
    );
    for n in ["can-1", "can-3"] {
        assert_eq!(now[n]["executableHash"], old.as_str(), "{n} untouched");
        assert_eq!(now[n]["mysqldPid"], before[n]["mysqldPid"], "{n} untouched");
    }
    // The status table shows it.
    let table = ok(&c.local(&["status", "can"]), "status");
    assert!(
        table.contains("ANNOTATED UPGRADES") && table.contains(&value),
        "{table}"
    );

    w.wait_for_more(50, Duration::from_secs(20)).await;
    let out = w.stop().await;
    assert_eq!(
        out.errors,
        0,
        "no write failed during the manager swap: {}",
        out.failures_report()
    );
    for n in ["can-1", "can-2", "can-3"] {
        verify_on(&c, n, &out.acked).await;
    }
    c.destroy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_annotation_walks_every_instance_the_primary_last_and_loses_no_write() {
    let c = LocalCluster::start("orc", &format!("{}{MANUAL}", manifest("orc", 3)));
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("cnmysql-next");
    let want = build_at(&file);
    let primary = c.current_primary();
    let before = c.instances();
    let w =
        cnmysql_workload::writer::WriteChecker::start(c.service_port("rw"), c.app_password()).await;
    w.wait_for_more(50, Duration::from_secs(20)).await;
    let asked = format!("cnmysql.io/upgrade-to=manager=file://{}", file.display());
    ok(
        &c.local(&["annotate", "orc", &asked]),
        "annotate the cluster",
    );
    let o = c.orchestrated_done(Duration::from_secs(180)).await;
    assert_eq!(o["release"], want.as_str(), "{o}");
    let now = c.instances();
    for n in ["orc-1", "orc-2", "orc-3"] {
        assert_eq!(now[n]["executableHash"], want.as_str(), "{n}");
        assert_eq!(now[n]["mysqldPid"], before[n]["mysqldPid"], "{n}: in place");
        assert_eq!(
            now[n]["annotations"]["cnmysql.io/upgrade-status"], "done",
            "{n}"
        );
    }
    // Mirrored onto the Cluster by a second write.
    wait_for(
        "the Cluster's annotation to say done",
        Duration::from_secs(30),
        || async {
            (c.status_json()["annotations"]["cnmysql.io/upgrade-status"] == "done").then_some(())
        },
    )
    .await;
    // One at a time: replicas in ascending ordinal, the primary last.
    let order: Vec<String> = c
        .event_steps(&["InstanceUpgradeStarted"])
        .into_iter()
        .map(|(step, _)| {
            step.trim_start_matches("InstanceUpgradeStarted ")
                .to_string()
        })
        .collect();
    let mut replicas: Vec<String> = ["orc-1", "orc-2", "orc-3"]
        .iter()
        .map(|s| s.to_string())
        .filter(|n| *n != primary)
        .collect();
    replicas.sort();
    replicas.push(primary.clone());
    assert_eq!(order, replicas);
    assert_eq!(
        c.current_primary(),
        primary,
        "a manager swap needs no switchover"
    );
    w.wait_for_more(50, Duration::from_secs(20)).await;
    let out = w.stop().await;
    assert_eq!(out.errors, 0, "no write failed: {}", out.failures_report());
    for n in ["orc-1", "orc-2", "orc-3"] {
        verify_on(&c, n, &out.acked).await;
    }
    c.destroy();
}
