//! What the replica-cluster tests on a real node share: the Cluster
//! manifest, the source account's Secret, patches of `spec.replica`, and
//! the checks (ready, writable, the write checker).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use cnmysql_api::{Cluster, ClusterStatus};
use cnmysql_kubetest::{KubeCluster, until};
use cnmysql_workload::writer::WriteChecker;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};

pub fn manifest(ns: &str, name: &str, base: u32, replica: &str) -> String {
    format!(
        "apiVersion: mysql.cnmysql.io/v1
kind: Cluster
metadata:
  name: {name}
  namespace: {ns}
spec:
  instances: 2
  failoverDelay: 0
  mysql:
{flavor}    serverIdBase: {base}
    parameters:
      innodb_buffer_pool_size: 32M
{replica}",
        flavor = cnmysql_kubetest::flavor_lines()
    )
}

/// Following `<ns>-rw` at `address` (there is no cluster DNS on the
/// node): the certificate is checked for the Service's name.
pub fn follows(ns: &str, address: &str, enabled: bool) -> String {
    format!(
        "  replica:\n    enabled: {enabled}\n    source:\n      host: {address}\n      port: 3306\n      tlsServerName: {ns}-rw.{ns}.svc\n"
    )
}

pub async fn status(k: &KubeCluster, ns: &str) -> ClusterStatus {
    k.cluster_status(ns, ns).await.unwrap_or_default()
}

/// `<follower>-replica-source` in the follower's namespace, from the
/// source cluster's replication password and an instance certificate
/// its CA signed (the replication account requires one).
pub async fn copy_source_secret(k: &KubeCluster, source: &str, follower: &str) {
    let from: Api<Secret> = Api::namespaced(k.client.clone(), source);
    let key = |s: &Secret, k: &str| s.data.as_ref().and_then(|d| d.get(k)).cloned();
    let repl = from.get(&format!("{source}-replication")).await.unwrap();
    let tls = from.get(&format!("{source}-1-tls")).await.unwrap();
    let ca = match key(&tls, "ca.crt") {
        Some(ca) => ca,
        None => {
            let ca = from.get(&format!("{source}-ca")).await.unwrap();
            key(&ca, "ca.crt").or_else(|| key(&ca, "tls.crt")).unwrap()
        }
    };
    let data = BTreeMap::from([
        (
            "username".to_string(),
            ByteString(b"cnmysql_replication".to_vec()),
        ),
        ("password".to_string(), key(&repl, "password").unwrap()),
        ("ca.crt".to_string(), ca),
        ("tls.crt".to_string(), key(&tls, "tls.crt").unwrap()),
        ("tls.key".to_string(), key(&tls, "tls.key").unwrap()),
    ]);
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{follower}-replica-source")),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    let to: Api<Secret> = Api::namespaced(k.client.clone(), follower);
    to.create(&PostParams::default(), &secret).await.unwrap();
}

pub async fn patch_replica(k: &KubeCluster, ns: &str, replica: serde_json::Value) {
    let api: Api<Cluster> = k.clusters(ns);
    api.patch(
        ns,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replica": replica}})),
    )
    .await
    .unwrap();
}

/// Ready instances as the status counts them.
pub async fn ready(k: &KubeCluster, ns: &str, n: i32, what: &str) {
    until(what, Duration::from_secs(300), || async {
        (status(k, ns).await.ready_instances == n).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", k.diagnose(ns, ns)));
}

pub async fn writer(k: &KubeCluster, ns: &str) -> WriteChecker {
    let rw = k.wait_service(ns, &format!("{ns}-rw")).await.unwrap();
    WriteChecker::start_at(rw, k.app_password(ns, ns).await.unwrap()).await
}

/// The primary takes a write through rw.
pub async fn writable(k: &KubeCluster, ns: &str) -> bool {
    let Ok(rw) = k.wait_service(ns, &format!("{ns}-rw")).await else {
        return false;
    };
    let pw = k.app_password(ns, ns).await.unwrap_or_default();
    match cnmysql_kubetest::connect(&rw.ip().to_string(), rw.port(), &pw).await {
        Some(mut c) => {
            use mysql_async::prelude::*;
            c.query_drop(
                "CREATE TABLE IF NOT EXISTS app.probe (i INT PRIMARY KEY); REPLACE INTO app.probe VALUES (1)",
            )
                .await
                .is_ok()
        }
        None => false,
    }
}

pub fn instances(ns: &str) -> Vec<String> {
    vec![format!("{ns}-1"), format!("{ns}-2")]
}

pub async fn service_ip(k: &KubeCluster, ns: &str) -> SocketAddr {
    k.wait_service(ns, &format!("{ns}-rw")).await.unwrap()
}

/// The demoted cluster `ns`'s final GTID position, once its primary is
/// read-only: the promotion token.
pub async fn final_position(k: &KubeCluster, ns: &str) -> String {
    until(
        &format!("{ns}'s final GTID position"),
        Duration::from_secs(120),
        || async {
            let st = status(k, ns).await;
            let p = st.current_primary.clone()?;
            let ro = st.instance_states.get(&p)?.read_only;
            let r = st.replica.as_ref().filter(|r| r.enabled)?;
            ro.then(|| r.gtid_position.clone()).flatten()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", k.diagnose(ns, ns)))
}

/// Promote `ns` at `token` and wait until it takes writes.
pub async fn promote_at(k: &KubeCluster, ns: &str, token: &str, timeout: Duration) {
    patch_replica(
        k,
        ns,
        serde_json::json!({"enabled": false, "promotionToken": token}),
    )
    .await;
    until(&format!("{ns} takes writes"), timeout, || async {
        writable(k, ns).await.then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", k.diagnose(ns, ns)));
}
