//! Clusters that follow one another (replica clusters, imports): the
//! source account, its Secret, the manifests' parts and the checks.

use std::path::Path;
use std::time::Duration;

use mysql_async::prelude::*;
use serde_json::Value;

use super::*;

pub const PASSWORD: &str = "downstream-Secret-1";

/// The account the followers use on a source, made there by its admin
/// (binary-logged: it reaches the follower too, which needs it once it is
/// the source).
pub async fn create_source_account(c: &LocalCluster) {
    let mut a = c.admin(&c.current_primary()).await;
    for q in [
        format!(
            "CREATE USER IF NOT EXISTS 'downstream'@'%' IDENTIFIED BY '{PASSWORD}' REQUIRE SSL"
        ),
        "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'downstream'@'%'".to_string(),
    ] {
        a.query_drop(q).await.unwrap();
    }
}

/// The Secret `<follower>-replica-source` in the secrets directory: the
/// account and the CA of `source`.
pub fn source_secret(secrets: &Path, follower: &str, source: &LocalCluster) {
    account_secret(secrets, &format!("{follower}-replica-source"), source);
}

/// The Secret `secret` in the secrets directory: the account and the CA
/// of `source`.
pub fn account_secret(secrets: &Path, secret: &str, source: &LocalCluster) {
    let d = secrets.join(secret);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("username"), "downstream").unwrap();
    std::fs::write(d.join("password"), PASSWORD).unwrap();
    let ca = Path::new(&source.state_arg()).join("pki/ca.crt");
    std::fs::copy(&ca, d.join("ca.crt")).unwrap_or_else(|e| panic!("{}: {e}", ca.display()));
}

pub fn cluster(name: &str, base: u32, replica: &str) -> String {
    sized(name, 2, base, replica)
}

pub fn sized(name: &str, instances: u32, base: u32, rest: &str) -> String {
    format!(
        "{}    serverIdBase: {base}\n  failoverDelay: 0\n{rest}",
        manifest(name, instances)
    )
}

/// Every row of `acked` reaches `instance` (a replica cluster may trail a
/// MySQL primary writing flat out by tens of seconds on a slow machine).
pub async fn holds(c: &LocalCluster, instance: &str, acked: &[u64]) {
    wait_for(
        &format!("all {} acknowledged rows on {instance}", acked.len()),
        Duration::from_secs(180),
        || async {
            let have = ids(c, instance).await;
            acked.iter().all(|i| have.contains(i)).then_some(())
        },
    )
    .await;
}

/// Rows of the write checker's table on `instance`.
pub async fn ids(c: &LocalCluster, instance: &str) -> std::collections::BTreeSet<u64> {
    let mut a = c.admin(instance).await;
    let ids: Vec<u64> = a.query("SELECT id FROM app.w").await.unwrap_or_default();
    ids.into_iter().collect()
}

pub fn follows(source: &LocalCluster, enabled: bool, token: Option<&str>) -> String {
    let mut out = format!(
        "  replica:\n    enabled: {enabled}\n    source:\n      host: 127.0.0.1\n      port: {}\n",
        source.service_port("rw")
    );
    if let Some(t) = token {
        out.push_str(&format!("    promotionToken: \"{t}\"\n"));
    }
    out
}

pub fn apply(c: &LocalCluster, manifest_text: &str) {
    let m = c.state().join("cluster.yaml");
    std::fs::write(&m, manifest_text).unwrap();
    let out = c.local(&["apply", "-f", &m.display().to_string()]);
    assert!(
        out.status.success(),
        "apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn replica_status(c: &LocalCluster) -> Value {
    c.status()["replica"].clone()
}

/// The primary answers a write through rw.
pub async fn writable(c: &LocalCluster) -> bool {
    match c.app(c.service_port("rw")).await {
        Ok(mut conn) => conn
            .query_drop(
                "CREATE TABLE IF NOT EXISTS app.probe (i INT PRIMARY KEY); REPLACE INTO app.probe VALUES (1)",
            )
            .await
            .is_ok(),
        Err(_) => false,
    }
}

/// The port and read_only of the server rw reaches, if it reaches one.
pub async fn rw_server(c: &LocalCluster) -> Option<(u16, bool)> {
    let mut conn = c.app(c.service_port("rw")).await.ok()?;
    conn.query_first("SELECT @@port, @@read_only").await.ok()?
}

pub async fn executed(c: &LocalCluster, instance: &str) -> String {
    let q = match flavor() {
        Flavor::Mysql => "SELECT @@gtid_executed",
        Flavor::Mariadb => "SELECT @@gtid_binlog_pos",
    };
    let v: Option<String> = c.admin(instance).await.query_first(q).await.unwrap();
    v.unwrap_or_default().replace('\n', "")
}

/// `wait_for`, whose failure shows each cluster's status (the phase, the
/// replica block, every instance's message): on a slow CI machine the
/// log tails alone may not reach the step that stalled.
pub async fn wait_showing<T, F, Fut>(
    what: &str,
    timeout: std::time::Duration,
    clusters: &[&LocalCluster],
    f: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    match cnmysql_envtest::until(what, timeout, f).await {
        Ok(v) => v,
        Err(e) => {
            let shown: Vec<String> = clusters
                .iter()
                .map(|c| format!("[{}] status: {:#}", c.name, c.status()))
                .collect();
            panic!("{e}\n{}", shown.join("\n"))
        }
    }
}

/// `spec.replica` following the binlog archive `server` keeps in `store`.
pub fn follows_archive(store: &str, server: &str, enabled: bool, token: Option<&str>) -> String {
    let mut out = format!(
        "  replica:\n    enabled: {enabled}\n    source:\n      objectStore:\n        destinationPath: {store}\n        serverName: {server}\n"
    );
    if let Some(t) = token {
        out.push_str(&format!("    promotionToken: \"{t}\"\n"));
    }
    out
}

/// The demoted cluster `c`'s final GTID position, once its primary is
/// read-only and its status shows what it executed: the promotion token.
pub async fn final_position(c: &LocalCluster) -> String {
    let primary = c.current_primary();
    wait_for(
        &format!("{}'s status to show its final GTID position", c.name),
        Duration::from_secs(120),
        || async {
            let ro = c.status()["instanceStates"][&primary]["readOnly"] == true;
            let pos = replica_status(c)["gtidPosition"].as_str()?.to_string();
            (ro && pos == executed(c, &primary).await).then_some(pos)
        },
    )
    .await
}

/// `c` takes writes through rw (its status and `others`' shown if not).
pub async fn takes_writes(c: &LocalCluster, others: &[&LocalCluster], timeout: Duration) {
    let mut shown = vec![c];
    shown.extend_from_slice(others);
    wait_showing(
        &format!("{} to take writes", c.name),
        timeout,
        &shown,
        || async { writable(c).await.then_some(()) },
    )
    .await;
}
