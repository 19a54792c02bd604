//! Server version upgrades on the local platform, with real servers from
//! the server images (MariaDB 10.11.18, 10.11.19, 11.8): a patch and a
//! major upgrade under the write checker with `dataDurability: required`,
//! downgrades refused with nothing touched, an upgrade scheduled with
//! `upgradeAt`, a maintenance window that holds every rollout, and the
//! force annotation moving an upgrade past a broken replica.
//!
//! They run servers from images, which needs root (a private mount
//! namespace) and the images themselves: `scripts/test` builds them and
//! runs these tests when it runs as root.

mod annotations;
#[path = "../common/mod.rs"]
mod common;
mod scheduling;
mod versions;

use std::collections::BTreeMap;
use std::time::Duration;

use common::writer::{start as start_writer, verify_on};
use common::*;
use mysql_async::prelude::*;
use serde_json::Value;

/// A cluster of `instances` on `image`; `extra`: lines for `spec.mysql`
/// (indented four spaces) and for `spec` (two), in any order.
fn manifest(name: &str, instances: u32, image: &str, extra: &str) -> String {
    let mysql_extra: String = extra
        .lines()
        .filter(|l| l.starts_with("    "))
        .map(|l| format!("{l}\n"))
        .collect();
    let spec_extra: String = extra
        .lines()
        .filter(|l| !l.starts_with("    "))
        .map(|l| format!("{l}\n"))
        .collect();
    let semi = if instances > 1 {
        "    semiSync:\n      enabled: true\n      timeoutMillis: 1000\n      dataDurability: required\n  minSyncReplicas: 1\n  maxSyncReplicas: 1\n"
    } else {
        ""
    };
    format!(
        "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: {name}\nspec:\n  instances: {instances}\n  mysql:\n    image: {image}\n{mysql_extra}    parameters:\n      innodb_buffer_pool_size: 32M\n{semi}{spec_extra}"
    )
}

/// `cnmysql local apply` of `text`; its output.
fn apply(c: &LocalCluster, text: &str) -> String {
    let path = c.state().join("applied.yaml");
    std::fs::write(&path, text).unwrap();
    let out = c.local(&["apply", "-f", path.to_str().unwrap()]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "local apply failed: {said}");
    said
}

/// The upgrade record for `version`, once `accept` takes it.
async fn record(
    c: &LocalCluster,
    version: &str,
    timeout: Duration,
    accept: impl Fn(&Value) -> bool,
) -> Value {
    wait_for(
        &format!("the upgrade record of {version}"),
        timeout,
        || async {
            c.status()["upgradeHistory"]
                .as_array()
                .into_iter()
                .flatten()
                .rev()
                .find(|r| {
                    r["version"]
                        .as_str()
                        .is_some_and(|v| v.starts_with(version))
                })
                .filter(|r| accept(r))
                .cloned()
        },
    )
    .await
}

fn phase(r: &Value) -> &str {
    r["phase"].as_str().unwrap_or("")
}

/// The steps of a record as `type instance: status`.
fn steps(r: &Value) -> Vec<String> {
    r["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let who = c["instance"]
                .as_str()
                .map(|i| format!(" {i}"))
                .unwrap_or_default();
            format!(
                "{}{who}: {}",
                c["type"].as_str().unwrap(),
                c["status"].as_str().unwrap()
            )
        })
        .collect()
}

fn mysqld_pids(c: &LocalCluster) -> BTreeMap<String, Value> {
    c.instances()
        .into_iter()
        .map(|(n, v)| (n, v["mysqldPid"].clone()))
        .collect()
}

/// Upgrade a running 3-instance cluster under the write checker, then
/// check what a user would: every step true in order, every instance on
/// the new version, replicas first then a switchover, no acknowledged
/// write lost. Returns the longest rw write gap.
async fn upgrade_under_writes(
    c: &LocalCluster,
    name: &str,
    to_image: &str,
    version: &str,
) -> Duration {
    let primary = c.current_primary();
    let w = start_writer(c).await;
    w.wait_for_more(50, Duration::from_secs(20)).await;
    let said = apply(c, &manifest(name, 3, to_image, ""));
    assert!(said.contains(&format!("→ {to_image}")), "{said}");
    let r = record(c, version, Duration::from_secs(300), |r| {
        phase(r) == "Upgraded" || phase(r) == "Failed"
    })
    .await;
    assert_eq!(phase(&r), "Upgraded", "{r:#}");
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let out = w.stop().await;
    let replicas: Vec<String> = (1..=3)
        .map(|i| format!("{name}-{i}"))
        .filter(|n| *n != primary)
        .collect();
    assert_eq!(
        steps(&r),
        [
            "Validation: True".to_string(),
            "PreHealthCheck: True".into(),
            format!("UpgradeReplica {}: True", replicas[0]),
            format!("UpgradeReplica {}: True", replicas[1]),
            format!("Switchover {primary}: True"),
            format!("UpgradeFormerPrimary {primary}: True"),
            "PostUpgrade: True".into(),
            "PostHealthCheck: True".into(),
        ],
        "{r:#}"
    );
    for c in r["conditions"].as_array().unwrap() {
        for t in [
            "startTime",
            "completeTime",
            "lastProbeTime",
            "lastTransitionTime",
        ] {
            assert!(c[t].is_string(), "{t} recorded: {c:#}");
        }
    }
    assert_ne!(
        c.current_primary(),
        primary,
        "the primary was switched over"
    );
    // Replicas in ascending ordinal, then the switchover, then the former
    // primary: as the rollout's events say.
    let order: Vec<String> = c
        .event_steps(&["UpdatingInstance", "SwitchoverForUpgrade"])
        .into_iter()
        .filter(|(_, message)| message.contains(to_image))
        .map(|(step, _)| step)
        .collect();
    assert_eq!(order.len(), 4, "{order:?}");
    assert_eq!(order[0], format!("UpdatingInstance {}", replicas[0]));
    assert_eq!(order[1], format!("UpdatingInstance {}", replicas[1]));
    assert!(order[2].starts_with("SwitchoverForUpgrade"), "{order:?}");
    assert_eq!(order[3], format!("UpdatingInstance {primary}"));
    for (n, st) in c.instances() {
        assert!(
            st["serverVersion"].as_str().unwrap().starts_with(version),
            "{n}: {st:#}"
        );
        assert!(
            st["dataVersion"].as_str().unwrap().starts_with(version),
            "{n}: {st:#}"
        );
    }
    let status = c.status();
    assert_eq!(status["image"], to_image);
    assert!(
        status["serverVersion"]
            .as_str()
            .unwrap()
            .starts_with(version)
    );
    for n in ["1", "2", "3"] {
        verify_on(c, &format!("{name}-{n}"), &out.acked).await;
    }
    eprintln!(
        "server upgrade to {version}: longest rw write gap {:.3}s, {} acknowledged writes, {} errors",
        out.longest_gap.as_secs_f64(),
        out.acked.len(),
        out.errors
    );
    out.longest_gap
}

/// A downgrade is refused: Degraded, an event, nothing restarted.
async fn downgrade_is_refused(c: &LocalCluster, name: &str, to_image: &str, running: &str) {
    let before = mysqld_pids(c);
    let image_before = c.status()["image"].clone();
    apply(c, &manifest(name, 3, to_image, ""));
    let tag = to_image.rsplit(':').next().unwrap();
    let r = record(c, tag, Duration::from_secs(30), |r| phase(r) == "Failed").await;
    let v = &r["conditions"][0];
    assert_eq!(v["reason"], "DowngradeRefused", "{r:#}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("which has run on the data"),
        "{r:#}"
    );
    // The record and the phase are two status writes of one pass: wait
    // for the second rather than read between them.
    let status = wait_for(
        "the cluster to report Degraded",
        Duration::from_secs(10),
        || async {
            let st = c.status();
            (st["phase"] == "Degraded").then_some(st)
        },
    )
    .await;
    let degraded = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Degraded")
        .unwrap()
        .clone();
    assert_eq!(degraded["status"], "True");
    assert_eq!(degraded["reason"], "DowngradeRefused");
    assert!(c.has_event("ServerUpgradeRefused").is_some());
    // Nothing touched: give the rollout the passes it would have taken.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < deadline {
        assert_eq!(mysqld_pids(c), before, "no server was restarted");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for (n, st) in c.instances() {
        assert!(
            st["serverVersion"].as_str().unwrap().starts_with(running),
            "{n} still runs {running}"
        );
    }
    assert_eq!(
        c.status()["image"],
        image_before,
        "the cluster still runs its image"
    );
}
