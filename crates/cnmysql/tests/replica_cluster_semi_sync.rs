//! A replica cluster with semi-sync of its own never acknowledges its
//! source cluster's primary: its designated primary's semi-sync replica
//! side is off. Found 2026-11-29: it registered as one more semi-sync
//! replica of the source's primary, which under `dataDurability: required`
//! could then tell a client "committed" for a write only the other cluster
//! held, and a failover of the source could lose it.

mod common;

use std::time::Duration;

use common::follow::*;
use common::*;
use mysql_async::prelude::*;
use nix::sys::signal::Signal;

/// A 2-instance Cluster with `required` semi-sync and its own server ids.
fn durable(name: &str, base: u32, rest: &str) -> String {
    format!(
        "{}    semiSync:\n      enabled: true\n      dataDurability: required\n    serverIdBase: {base}\n  failoverDelay: 0\n  minSyncReplicas: 1\n  maxSyncReplicas: 1\n{rest}",
        manifest(name, 2)
    )
}

/// The semi-sync replicas the primary of `c` counts.
async fn semi_sync_clients(c: &LocalCluster) -> u64 {
    let mut a = c.admin(&c.current_primary()).await;
    let v: Option<(String, String)> = a
        .query_first(
            "SHOW GLOBAL STATUS WHERE Variable_name IN \
             ('Rpl_semi_sync_master_clients', 'Rpl_semi_sync_source_clients')",
        )
        .await
        .unwrap();
    v.and_then(|(_, n)| n.parse().ok()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_cluster_never_acknowledges_its_sources_commits() {
    let secrets = tempfile::tempdir().unwrap();
    // The only test of this binary: the local platform reads it when it
    // writes the instances' configuration.
    unsafe { std::env::set_var("CNMYSQL_SECRETS_DIR", secrets.path()) };
    let east = LocalCluster::start("east", &durable("east", 0, ""));
    create_source_account(&east).await;
    source_secret(secrets.path(), "north", &east);
    let north = LocalCluster::start("north", &durable("north", 200, &follows(&east, true, None)));
    wait_for(
        "north to receive from east",
        Duration::from_secs(120),
        || async { (north.status()["replica"]["receiving"] == true).then_some(()) },
    )
    .await;
    // Steady: east's primary counts its own replica alone.
    for _ in 0..5 {
        assert_eq!(semi_sync_clients(&east).await, 1, "north acknowledges east");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // With east's own replica stopped, a commit on east waits: north,
    // which receives it, does not acknowledge it.
    let east_primary = east.current_primary();
    let east_replica = (1..=2)
        .map(|i| east.instance_name(i))
        .find(|n| *n != east_primary)
        .unwrap();
    let mut a = east.admin(&east_primary).await;
    east.signal_instance(&east_replica, Signal::SIGSTOP);
    let waited = tokio::time::timeout(
        Duration::from_secs(3),
        a.query_drop("CREATE DATABASE IF NOT EXISTS north_must_not_ack"),
    )
    .await;
    east.signal_instance(&east_replica, Signal::SIGCONT);
    assert!(
        waited.is_err(),
        "a commit on east was acknowledged with its only replica stopped: {waited:?}"
    );
    north.destroy();
    east.destroy();
}
