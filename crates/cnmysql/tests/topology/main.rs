//! Safe topology changes on the local platform, against real servers (the
//! flavour under test, see common::flavor):
//! switchover, failover, blocked failover, rejoin, divergence, fencing, the
//! primary lease and failoverDelay. Every test that changes the primary
//! checks that no acknowledged write is lost and that one instance at most
//! is writable.

#[path = "../common/mod.rs"]
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

async fn wait_semi_sync_source(c: &LocalCluster, primary: &str) {
    wait_for(
        &format!("semi-sync on the primary {primary}"),
        Duration::from_secs(20),
        || async {
            let st = c.status_json();
            (instances_by_name(&st)[primary]["semiSync"]["sourceEnabled"] == true).then_some(())
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

mod detach;
mod divergence;
mod durability;
mod failover;
mod fencing;
mod lag;
mod switchover;
