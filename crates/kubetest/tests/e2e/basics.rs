//! A cluster comes up, routes, switches over and is deleted with everything it owns.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn a_cluster_comes_up_routes_rw_and_ro_and_is_deleted_with_everything_it_owns() {
    let e = env("preferred").await;
    let rw = e.k.wait_service(NS, "db-rw").await.unwrap();
    let ro = e.k.wait_service(NS, "db-ro").await.unwrap();
    let mut c = e.admin(rw).await;
    let ro_flag: u8 = c.query_first("SELECT @@read_only").await.unwrap().unwrap();
    assert_eq!(ro_flag, 0, "rw reaches a writable primary");
    // The application account owns the `app` database, and only that.
    c.query_drop("CREATE TABLE app.x (i INT PRIMARY KEY)")
        .await
        .unwrap();
    c.query_drop("INSERT INTO app.x VALUES (42)").await.unwrap();
    let refused = c.query_drop("CREATE DATABASE t").await;
    assert!(refused.is_err(), "app may not make databases: {refused:?}");
    let got = until("the row through ro", Duration::from_secs(20), || async {
        let mut r = e.admin(ro).await;
        let ro_flag: u8 = r.query_first("SELECT @@read_only").await.ok()??;
        assert_eq!(ro_flag, 1, "ro reaches a read-only replica");
        r.query_first::<i32, _>("SELECT i FROM app.x").await.ok()?
    })
    .await
    .unwrap();
    assert_eq!(got, 42);
    let status = e.plugin(&["cnmsql", "-n", NS, "status", "db"]);
    assert!(status.contains("primary"), "{status}");
    assert_eq!(status.matches("replica").count(), 2, "{status}");
    // The servers' figures reach the operator's /metrics (through the API
    // server's proxy to its Pod): the primary's insert, the replicas'
    // appliers.
    let page = until(
        "the servers' figures on the operator's /metrics",
        Duration::from_secs(30),
        || async {
            let page = operator_metrics(&e).await?;
            page.lines()
                .any(|l| {
                    l.starts_with("cnmysql_instance_server_commands_total{")
                        && l.contains("command=\"insert\"")
                        && !l.ends_with(" 0.0")
                })
                .then_some(page)
        },
    )
    .await
    .unwrap();
    let running = page
        .lines()
        .filter(|l| {
            l.starts_with("cnmysql_instance_replication_sql_running{") && l.ends_with(" 1.0")
        })
        .count();
    assert_eq!(running, 2, "{page}");
    // The managers' logs, through the kubelet: the last two lines of each
    // instance, as JSON lines naming it (piped).
    let logs = e.plugin(&["cnmsql", "-n", NS, "logs", "db", "--tail", "2"]);
    let named: Vec<String> = logs
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|err| panic!("{err}: {l}"));
            v["instance"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    assert_eq!(
        named,
        ["db-1", "db-1", "db-2", "db-2", "db-3", "db-3"],
        "{logs}"
    );
    // A SQL session as the administrator, in the instance's container: the
    // primary, then a replica.
    for (how, read_only) in [(None, "0"), (Some("--replica"), "1")] {
        let mut args = vec!["cnmsql", "-n", NS, "mysql", "db"];
        args.extend(how);
        args.extend(["--", "-N", "-e", "SELECT @@read_only"]);
        assert_eq!(e.plugin(&args).trim(), read_only, "{how:?}");
    }
    // A report with the logs, as a user hands it on.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("diag.tar.gz");
    let said = e.plugin(&[
        "cnmsql",
        "-n",
        NS,
        "report",
        "db",
        "--logs",
        "--tail",
        "5",
        "-f",
        out.to_str().unwrap(),
    ]);
    assert_eq!(said.trim(), out.to_str().unwrap());
    let listing = std::process::Command::new("tar")
        .arg("tzf")
        .arg(&out)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout).to_string();
    for f in [
        "diag/cluster.yaml",
        "diag/pods.yaml",
        "diag/endpointslices.yaml",
        "diag/events.yaml",
        "diag/logs/db-1.jsonl",
        "diag/logs/db-3.jsonl",
    ] {
        assert!(listing.lines().any(|l| l == f), "{f} in\n{listing}");
    }

    // Deleting the Cluster removes its Pods and everything it owns.
    e.clusters
        .delete("db", &DeleteParams::default())
        .await
        .unwrap();
    until(
        "the Pods and Services to be gone",
        Duration::from_secs(60),
        || async {
            let pods = e.pods.list(&ListParams::default()).await.ok()?;
            let svcs: Api<k8s_openapi::api::core::v1::Service> =
                Api::namespaced(e.k.client.clone(), NS);
            let svcs = svcs.list(&ListParams::default()).await.ok()?;
            let secrets: Api<Secret> = Api::namespaced(e.k.client.clone(), NS);
            let secrets = secrets.list(&ListParams::default()).await.ok()?;
            (pods.items.is_empty() && svcs.items.is_empty() && secrets.items.is_empty())
                .then_some(())
        },
    )
    .await
    .unwrap();
}

/// The operator's metrics page, through the API server's proxy to its Pod.
pub(crate) async fn operator_metrics(e: &Env) -> Option<String> {
    let pods: Api<Pod> = Api::namespaced(e.k.client.clone(), "cnmysql-system");
    let lp = ListParams::default().labels("app.kubernetes.io/name=cnmysql-operator");
    let pod = pods.list(&lp).await.ok()?.items.into_iter().next()?;
    let name = pod.metadata.name?;
    let req = http::Request::get(format!(
        "/api/v1/namespaces/cnmysql-system/pods/{name}:8080/proxy/metrics"
    ))
    .body(Vec::new())
    .ok()?;
    e.k.client.request_text(req).await.ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn switchover_with_the_plugin_under_writes_loses_no_acknowledged_row() {
    let e = env("required").await;
    let old = e.status().await.current_primary.unwrap();
    let target = if old == "db-2" { "db-3" } else { "db-2" };
    let w = e.writer().await;
    w.wait_for_more(50, Duration::from_secs(30)).await;
    e.plugin(&["cnmsql", "-n", NS, "promote", "db", target]);
    let now = e.healthy(3, Duration::from_secs(60)).await;
    assert_eq!(now, target);
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let o = w.stop().await;
    eprintln!(
        "switchover: longest write gap {:?}, {} rows acknowledged",
        o.longest_gap,
        o.acked.len()
    );
    e.verify(&o.acked).await;
}
