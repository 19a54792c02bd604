//! The write checker lives in `cnmysql-bench` (the benchmarks use it too);
//! here: starting it on a test cluster and verifying its rows.

use std::time::Duration;

use mysql_async::prelude::*;

pub use cnmysql_workload::writer::WriteChecker;

use super::{LocalCluster, wait_for};

/// Start writing through the cluster's `rw` endpoint.
pub async fn start(c: &LocalCluster) -> WriteChecker {
    WriteChecker::start(c.service_port("rw"), c.app_password()).await
}

/// Every acknowledged row is on `instance` (waiting for it to catch up).
pub async fn verify_on(c: &LocalCluster, instance: &str, acked: &[u64]) {
    let want = acked.len();
    let have: Vec<u64> = wait_for(
        &format!("all {want} acknowledged rows on {instance}"),
        Duration::from_secs(30),
        || async {
            let mut a = c.admin(instance).await;
            let ids: Vec<u64> = a.query("SELECT id FROM app.w").await.ok()?;
            let set: std::collections::BTreeSet<u64> = ids.iter().copied().collect();
            acked.iter().all(|id| set.contains(id)).then_some(ids)
        },
    )
    .await;
    assert!(have.len() >= want);
}
