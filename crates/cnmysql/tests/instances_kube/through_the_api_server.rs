//! Two instance managers through a real API server: the first claims the
//! primary and its Lease, the second clones it and replicates over TLS to
//! its Pod IP; a planned switchover and fencing with the plugin; a clean
//! stop gives the Lease back.

use std::time::Duration;

use crate::common::kube::*;
use cnmysql_api::Cluster;
use cnmysql_envtest::{ControlPlane, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use mysql_async::prelude::*;

use kube::ResourceExt;

use crate::kubelet::*;

#[tokio::test]
#[ignore = "needs a real API server: set KUBEBUILDER_ASSETS (etcd, kube-apiserver, kube-controller-manager) and run scripts/test-kube"]
async fn instance_managers_run_a_cluster_through_the_api_server() {
    let (cp, client) = control_plane().await;
    let (op, kubeconfig) = a_cluster_of_two(&cp, &client).await;

    // A loopback block of its own, so parallel runs do not meet.
    let block = format!("127.{}.{}", 100 + std::process::id() % 150, rand_byte());
    let root = tempfile::tempdir().unwrap();
    let mut p1 = run_pod(
        &cp,
        &client,
        root.path(),
        "db-1",
        &format!("{block}.1"),
        &kubeconfig,
    )
    .await;

    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "prod");
    wait_for(
        "db-1 to claim the primary",
        Duration::from_secs(90),
        || async {
            let st = clusters.get("db").await.ok()?.status?;
            (st.current_primary.as_deref() == Some("db-1")).then_some(())
        },
    )
    .await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "prod");
    let lease = wait_for("the primary Lease", Duration::from_secs(30), || async {
        leases.get_opt("db-primary").await.ok().flatten()
    })
    .await;
    assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("db-1"));

    let mut p2 = run_pod(
        &cp,
        &client,
        root.path(),
        "db-2",
        &format!("{block}.2"),
        &kubeconfig,
    )
    .await;
    for p in [&p1, &p2] {
        let ip = p.ip.clone();
        let name = p.name.clone();
        wait_for(
            &format!("{name} ready on its probe port"),
            Duration::from_secs(120),
            || {
                let ip = ip.clone();
                async move { (http_status(&ip, 8001, "/readyz").await == Some(200)).then_some(()) }
            },
        )
        .await;
    }

    writes_reach_the_replica_over_its_pod_ip(&client, &p1, &p2).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "prod");
    wait_for("db-1 labelled primary", Duration::from_secs(30), || async {
        let p = pods.get("db-1").await.ok()?;
        (p.labels()
            .get("cnmysql.io/instanceRole")
            .map(String::as_str)
            == Some("primary"))
        .then_some(())
    })
    .await;

    a_planned_switchover_with_the_plugin(&cp, &client, &p1, &p2).await;
    fencing_with_the_plugin_takes_db_1_out_of_every_route(&cp, &client).await;

    // A clean stop of the primary gives the Lease back.
    p1.stop().await;
    p2.stop().await;
    wait_for("the Lease released", Duration::from_secs(30), || async {
        leases
            .get_opt("db-primary")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(!p1.log().contains("PRIVATE KEY"), "a key reached the log");
    if std::env::var_os("CNMYSQL_SHOW_LOGS").is_some() {
        eprintln!("{}\n{}", p1.log(), p2.log());
    }
    op.stop().await;
}

/// Writes on the primary reach the replica, over TLS to its Pod IP.
async fn writes_reach_the_replica_over_its_pod_ip(
    client: &kube::Client,
    p1: &RunningPod,
    p2: &RunningPod,
) {
    let mut primary = app_conn(client, &p1.ip)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", p1.log()));
    primary
        .query_drop("CREATE TABLE IF NOT EXISTS app.t (id INT PRIMARY KEY, v TEXT)")
        .await
        .unwrap();
    primary
        .query_drop("INSERT INTO app.t VALUES (1, 'through the Pod IP')")
        .await
        .unwrap();
    let v: String = wait_for("the row on the replica", Duration::from_secs(60), || {
        row_on(client, &p2.ip, 1)
    })
    .await;
    assert_eq!(v, "through the Pod IP");
    let mut replica = app_conn(client, &p2.ip).await.unwrap();
    let ssl: Option<(String, String)> = replica
        .query_first("SHOW STATUS LIKE 'Slave_running'")
        .await
        .unwrap();
    assert_eq!(ssl.unwrap().1, "ON");
    drop(primary);
    drop(replica);
}

/// A planned switchover with the plugin: db-2 takes over, db-1 follows.
async fn a_planned_switchover_with_the_plugin(
    cp: &ControlPlane,
    client: &kube::Client,
    p1: &RunningPod,
    p2: &RunningPod,
) {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "prod");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "prod");
    plugin(cp, &["promote", "db", "db-2", "--timeout", "60"]);
    let st = clusters.get("db").await.unwrap().status.unwrap();
    assert_eq!(st.current_primary.as_deref(), Some("db-2"));
    wait_for(
        "db-1 read-only, following db-2",
        Duration::from_secs(60),
        || async {
            let mut c = app_conn(client, &p1.ip).await.ok()?;
            let ro: Option<(String, String)> = c
                .query_first("SHOW VARIABLES LIKE 'read_only'")
                .await
                .ok()?;
            (ro?.1 == "ON").then_some(())
        },
    )
    .await;
    wait_for(
        "db-2 labelled primary, db-1 replica",
        Duration::from_secs(30),
        || async {
            let l2 = pods
                .get("db-2")
                .await
                .ok()?
                .labels()
                .get("cnmysql.io/instanceRole")
                .cloned();
            let l1 = pods
                .get("db-1")
                .await
                .ok()?
                .labels()
                .get("cnmysql.io/instanceRole")
                .cloned();
            (l2.as_deref() == Some("primary") && l1.as_deref() == Some("replica")).then_some(())
        },
    )
    .await;
    let mut c = app_conn(client, &p2.ip).await.unwrap();
    c.query_drop("INSERT INTO app.t VALUES (3, 'after the switchover')")
        .await
        .unwrap();
    drop(c);
    let v = wait_for("row 3 on db-1", Duration::from_secs(60), || async {
        row_on(client, &p1.ip, 3).await
    })
    .await;
    assert_eq!(v, "after the switchover");
}

/// Fencing with the plugin: out of every route, read-only; then back.
async fn fencing_with_the_plugin_takes_db_1_out_of_every_route(
    cp: &ControlPlane,
    client: &kube::Client,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "prod");
    plugin(cp, &["fence", "on", "db", "db-1"]);
    routable_becomes(&pods, "db-1", "false").await;
    plugin(cp, &["fence", "off", "db", "db-1"]);
    routable_becomes(&pods, "db-1", "true").await;
}

/// `kubectl cnmsql` as a user runs it, against this control plane; it
/// must succeed.
fn plugin(cp: &ControlPlane, args: &[&str]) {
    let kc = cp.kubeconfig.to_str().unwrap().to_string();
    let mut all = vec!["plugin", "run", "--", "--kubeconfig", &kc, "-n", "prod"];
    all.extend(args);
    let out = crate::common::cnmysql(&all);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Wait until `pod`'s routable label says `value`.
async fn routable_becomes(pods: &Api<Pod>, pod: &str, value: &str) {
    wait_for(
        &format!("{pod} routable={value}"),
        Duration::from_secs(30),
        || async {
            let p = pods.get(pod).await.ok()?;
            (p.labels().get("cnmysql.io/routable").map(String::as_str) == Some(value)).then_some(())
        },
    )
    .await;
}
