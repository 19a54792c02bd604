//! The operator fails over when the primary's Pod dies, and the old
//! primary rejoins as a replica.

use std::time::Duration;

use crate::common::kube::*;
use cnmysql_api::Cluster;
use cnmysql_envtest::wait_for;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use mysql_async::prelude::*;

use kube::ResourceExt;

use crate::kubelet::*;

#[tokio::test]
#[ignore = "needs a real API server: set KUBEBUILDER_ASSETS (etcd, kube-apiserver, kube-controller-manager) and run scripts/test-kube"]
async fn the_operator_fails_over_when_the_primary_dies_and_the_old_primary_rejoins() {
    let (cp, client) = control_plane().await;
    let (op, kubeconfig) = a_cluster_of_two(&cp, &client).await;
    let block = format!(
        "127.{}.{}",
        100 + std::process::id() % 150,
        rand_byte().wrapping_add(1)
    );
    let root = tempfile::tempdir().unwrap();
    let ip1 = format!("{block}.1");
    let ip2 = format!("{block}.2");
    let mut p1 = run_pod(&cp, &client, root.path(), "db-1", &ip1, &kubeconfig).await;
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "prod");
    wait_for("db-1 primary", Duration::from_secs(90), || async {
        let st = clusters.get("db").await.ok()?.status?;
        (st.current_primary.as_deref() == Some("db-1")).then_some(())
    })
    .await;
    let mut p2 = run_pod(&cp, &client, root.path(), "db-2", &ip2, &kubeconfig).await;
    let mut c = wait_for("db-1 accepting writes", Duration::from_secs(60), || async {
        app_conn(&client, &ip1).await.ok()
    })
    .await;
    c.query_drop("CREATE TABLE app.t (id INT PRIMARY KEY, v TEXT)")
        .await
        .unwrap();
    c.query_drop("INSERT INTO app.t VALUES (1, 'before')")
        .await
        .unwrap();
    drop(c);
    wait_for("row 1 on db-2", Duration::from_secs(120), || async {
        row_on(&client, &ip2, 1).await
    })
    .await;
    the_operator_reports_both_instances(&client, &op).await;

    // The primary's processes die (its container crashed for good).
    let killed = std::time::Instant::now();
    if let Some(pid) = p1.child.id() {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = p1.child.wait().await;
    wait_for("db-2 promoted", Duration::from_secs(60), || async {
        let st = clusters.get("db").await.ok()?.status?;
        (st.current_primary.as_deref() == Some("db-2")).then_some(())
    })
    .await;
    eprintln!(
        "kill -9 of the primary's Pod processes -> db-2 current primary: {:?}",
        killed.elapsed()
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "prod");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "prod");
    let lease = wait_for(
        "db-2 holding the Lease",
        Duration::from_secs(30),
        || async {
            let l = leases.get_opt("db-primary").await.ok()??;
            (l.spec.as_ref()?.holder_identity.as_deref() == Some("db-2")).then_some(l)
        },
    )
    .await;
    assert!(lease.spec.is_some());
    let mut c = app_conn(&client, &ip2).await.unwrap();
    c.query_drop("INSERT INTO app.t VALUES (2, 'after')")
        .await
        .unwrap();
    drop(c);

    // The fenced-out former primary's Pod is recreated (claim kept) once
    // the failover completed; started again it rejoins as a replica.
    let recreated = wait_for("db-1's Pod recreated", Duration::from_secs(60), || async {
        let p = pods.get("db-1").await.ok()?;
        (p.status.as_ref().and_then(|s| s.pod_ip.clone()).is_none()).then_some(p)
    })
    .await;
    assert_eq!(
        recreated
            .labels()
            .get("cnmysql.io/instanceRole")
            .map(String::as_str),
        Some("replica")
    );
    p1 = run_pod(&cp, &client, root.path(), "db-1", &ip1, &kubeconfig).await;
    let v = wait_for(
        "row 2 on the rejoined db-1",
        Duration::from_secs(120),
        || async { row_on(&client, &ip1, 2).await },
    )
    .await;
    assert_eq!(v, "after");
    assert_eq!(op.metric(&series("db-2")).await, 1.0);
    let page = op.get("/metrics").await.map(|(_, b)| b).unwrap_or_default();
    assert!(
        page.lines().any(|l| l.starts_with(
            "cnmysql_events_total{namespace=\"prod\",cluster=\"db\",reason=\"FailoverCompleted\""
        ) && l.ends_with(" 1")),
        "{page}"
    );
    let st = wait_for(
        "db-1 reported as a replica",
        Duration::from_secs(30),
        || async {
            let st = clusters.get("db").await.ok()?.status?;
            (st.instance_states.get("db-1")?.role == "replica").then_some(st)
        },
    )
    .await;
    assert!(st.diverged_instances.is_empty(), "{st:?}");
    the_failover_events_were_published(&client).await;
    p2.stop().await;
    p1.stop().await;
    op.stop().await;
}

/// The operator reports the instances: both ready, healthy, instance by
/// instance, live (what the plugin's status shows), and as Prometheus
/// series labelled with namespace and cluster.
async fn the_operator_reports_both_instances(client: &kube::Client, op: &Operator) {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "prod");
    wait_for("a healthy cluster", Duration::from_secs(60), || async {
        let st = clusters.get("db").await.ok()?.status?;
        (st.ready_instances == 2 && st.phase == Some(cnmysql_api::Phase::Healthy)).then_some(())
    })
    .await;
    // ... instance by instance, live (what the plugin's status shows) ...
    let st = clusters.get("db").await.unwrap().status.unwrap();
    assert_eq!(st.instance_states["db-1"].role, "primary", "{st:?}");
    assert_eq!(st.instance_states["db-2"].role, "replica", "{st:?}");
    assert!(st.instance_states["db-2"].ready && st.instance_states["db-2"].read_only);
    // ... and as Prometheus series, labelled with namespace and cluster.
    assert_eq!(op.metric(&series("db-1")).await, 1.0);
    assert_eq!(op.metric(&series("db-2")).await, 0.0);
}

/// A failover says what it did as Events.
async fn the_failover_events_were_published(client: &kube::Client) {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "prod");
    let reasons: Vec<String> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for want in [
        "PrimaryFailing",
        "FailingOver",
        "Promoted",
        "FailoverCompleted",
    ] {
        assert!(
            reasons.iter().any(|r| r == want),
            "no {want} event in {reasons:?}"
        );
    }
}

/// The Prometheus series of `instance`'s role.
fn series(i: &str) -> String {
    format!("cnmysql_instance_primary{{namespace=\"prod\",cluster=\"db\",instance=\"{i}\"}}")
}
