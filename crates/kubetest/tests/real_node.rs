//! What a real kubelet does that our former stand-in node did not show (issue 31):
//! the documented Clusters start unchanged under a container runtime with
//! kubelet-made volumes; evictions follow the disruption budgets; a
//! primary Pod deleted on notice hands over by switchover; a killed
//! primary container comes back in place. Each failed on the code before.
//!
//! Run with `scripts/test-kube real_node` (root, KUBEBUILDER_ASSETS with
//! the six Kubernetes binaries, `scripts/setup --kube`).

use std::time::{Duration, Instant};

use cnmysql_core::lease;
use cnmysql_kubetest::{KubeCluster, until};
use cnmysql_workload::writer::WriteChecker;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use mysql_async::prelude::*;

fn cnmysql_exe() -> std::path::PathBuf {
    cnmysql_kubetest::cnmysql_exe()
}

async fn cluster() -> KubeCluster {
    KubeCluster::start(&cnmysql_exe()).await.unwrap()
}

/// `kubectl apply -n NS -f FILE` into a new namespace, the file as the
/// repository has it (it names no namespace).
async fn apply_example(k: &KubeCluster, ns: &str, file: &str) {
    let text = std::fs::read_to_string(cnmysql_kubetest::repo().join(file)).unwrap();
    k.apply_in_new_namespace(ns, &text).await.unwrap();
}

/// A write and a read through the rw Service's ClusterIP, from the host.
async fn write_through_rw(k: &KubeCluster, ns: &str, name: &str) {
    let rw = k.wait_service(ns, &format!("{name}-rw")).await.unwrap();
    let pw = k.app_password(ns, name).await.unwrap();
    let host = rw.ip().to_string();
    // Right after a change of primary rw may still lead to the former one
    // (read-only) for a moment: wait for a writable one.
    let mut c = until(
        "a writable primary through rw",
        Duration::from_secs(30),
        || async {
            let mut c = cnmysql_kubetest::connect(&host, rw.port(), &pw).await?;
            let ro: u8 = c.query_first("SELECT @@read_only").await.ok()??;
            (ro == 0).then_some(c)
        },
    )
    .await
    .unwrap();
    c.query_drop("CREATE TABLE IF NOT EXISTS app.x (i INT PRIMARY KEY)")
        .await
        .unwrap();
    c.query_drop("REPLACE INTO app.x VALUES (42)")
        .await
        .unwrap();
    let got: Option<i32> = c.query_first("SELECT i FROM app.x").await.unwrap();
    assert_eq!(got, Some(42));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
async fn the_documented_clusters_start_unchanged_on_a_real_kubelet() {
    let k = cluster().await;
    apply_example(&k, "maria", "examples/cluster.yaml").await;
    apply_example(&k, "my", "examples/cluster-mysql.yaml").await;
    let t0 = Instant::now();
    k.wait_healthy("maria", "cluster-example", 3, Duration::from_secs(240))
        .await
        .unwrap();
    eprintln!(
        "examples/cluster.yaml: 3 of 3 ready after {:?}",
        t0.elapsed()
    );
    k.wait_healthy("my", "mysql-example", 3, Duration::from_secs(300))
        .await
        .unwrap();
    eprintln!(
        "examples/cluster-mysql.yaml: 3 of 3 ready after {:?}",
        t0.elapsed()
    );
    write_through_rw(&k, "maria", "cluster-example").await;
    write_through_rw(&k, "my", "mysql-example").await;
    // The run directory is the kubelet's emptyDir, left as it made it.
    let mode =
        k.cp.kubectl(
            &[
                "-n",
                "maria",
                "exec",
                "cluster-example-1",
                "-c",
                "mysql",
                "--",
                "stat",
                "-c",
                "%U %a",
                "/run/cnmysql",
            ],
            None,
        )
        .unwrap();
    eprintln!("/run/cnmysql: {}", mode.trim());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
async fn a_replica_may_be_evicted_but_not_a_second_one_nor_the_primary() {
    let k = cluster().await;
    apply_example(&k, "ev", "examples/cluster.yaml").await;
    let primary = k
        .wait_healthy("ev", "cluster-example", 3, Duration::from_secs(240))
        .await
        .unwrap();
    // The owner of the Pods answers the scale subresource, as kubectl
    // scale and the disruption controller expect of it.
    let scale =
        k.cp.kubectl(
            &[
                "get",
                "--raw",
                "/apis/mysql.cnmysql.io/v1/namespaces/ev/clusters/cluster-example/scale",
            ],
            None,
        )
        .unwrap();
    let scale: serde_json::Value = serde_json::from_str(&scale).unwrap();
    assert_eq!(scale["spec"]["replicas"], 3, "{scale}");
    assert_eq!(scale["status"]["replicas"], 3, "{scale}");
    assert_eq!(
        scale["status"]["selector"],
        "cnmysql.io/cluster=cluster-example"
    );
    let replicas: Vec<String> = (1..=3)
        .map(|n| format!("cluster-example-{n}"))
        .filter(|n| *n != primary)
        .collect();
    // As kubectl drain asks: a policy/v1 Eviction posted to the Pod.
    let evict = |name: &str| {
        let body = format!(
            r#"{{"apiVersion":"policy/v1","kind":"Eviction","metadata":{{"name":"{name}","namespace":"ev"}}}}"#
        );
        k.cp.kubectl(
            &[
                "create",
                "--raw",
                &format!("/api/v1/namespaces/ev/pods/{name}/eviction"),
                "-f",
                "-",
            ],
            Some(&body),
        )
    };
    let refused = |r: &anyhow::Result<String>| matches!(r, Err(e) if e.to_string().contains("disruption budget"));
    // The disruption controller computes a budget from the Pods' role
    // labels a moment after they change (every Pod starts as a replica
    // until the primary is known): wait until it counts the two replicas.
    let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(k.client.clone(), "ev");
    until(
        "the replicas' budget computed",
        Duration::from_secs(60),
        || async {
            let st = pdbs.get("cluster-example").await.ok()?.status?;
            (st.expected_pods == 2 && st.disruptions_allowed == 1).then_some(())
        },
    )
    .await
    .unwrap();
    let first = evict(&replicas[0]);
    assert!(first.is_ok(), "one replica may be evicted: {first:?}");
    let second = evict(&replicas[1]);
    assert!(
        refused(&second),
        "a second replica while the first is away: {second:?}"
    );
    let of_primary = evict(&primary);
    assert!(refused(&of_primary), "the primary: {of_primary:?}");
    // The evicted replica comes back (a new Pod on its claim) and the
    // cluster is whole again.
    k.wait_healthy("ev", "cluster-example", 3, Duration::from_secs(120))
        .await
        .unwrap();
}

/// The first write acknowledged after `t`, measured by the checker.
async fn outage(w: WriteChecker, t: Instant) -> (Duration, Vec<u64>) {
    w.wait_for_more(30, Duration::from_secs(90)).await;
    let out = w.stop().await;
    (out.outage_after(t), out.acked)
}

async fn writer(k: &KubeCluster, ns: &str, name: &str) -> WriteChecker {
    write_through_rw(k, ns, name).await;
    let rw = k.wait_service(ns, &format!("{name}-rw")).await.unwrap();
    let w = WriteChecker::start_at(rw, k.app_password(ns, name).await.unwrap()).await;
    w.wait_for_more(50, Duration::from_secs(30)).await;
    w
}

/// A healthy 3-instance Cluster `db` with `dataDurability: required` in a
/// new namespace `ns`; its primary.
async fn durable_cluster(k: &KubeCluster, ns: &str) -> String {
    let manifest = cnmysql_kubetest::cluster_manifest(ns, "db", "required");
    k.apply_in_new_namespace(ns, &manifest).await.unwrap();
    k.wait_healthy(ns, "db", 3, Duration::from_secs(240))
        .await
        .unwrap()
}

fn all(name: &str) -> Vec<String> {
    (1..=3).map(|n| format!("{name}-{n}")).collect()
}

/// Wait until Cluster `db` of `ns` is healthy with 3 instances, then
/// check that each holds every acknowledged row; its primary.
async fn healthy_with(k: &KubeCluster, ns: &str, acked: &[u64], timeout: Duration) -> String {
    let primary = k.wait_healthy(ns, "db", 3, timeout).await.unwrap();
    let missing = k.rows_missing(ns, "db", &all("db"), acked).await.unwrap();
    assert_eq!(missing, 0, "acknowledged rows lost");
    primary
}

/// The reasons of the Cluster's events so far.
async fn reasons(k: &KubeCluster, ns: &str) -> Vec<String> {
    let ev: Api<Event> = Api::namespaced(k.client.clone(), ns);
    ev.list(&ListParams::default())
        .await
        .map(|l| l.items.into_iter().filter_map(|e| e.reason).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
async fn a_primary_pod_deleted_on_notice_hands_over_by_switchover_and_loses_nothing() {
    let k = cluster().await;
    let old = durable_cluster(&k, "ho").await;
    let w = writer(&k, "ho", "db").await;
    let pods: Api<Pod> = Api::namespaced(k.client.clone(), "ho");
    let t = Instant::now();
    pods.delete(&old, &DeleteParams::default()).await.unwrap();
    let new = until("another primary", Duration::from_secs(60), || async {
        let p = k.cluster_status("ho", "db").await.ok()?.current_primary?;
        (p != old).then_some(p)
    })
    .await
    .unwrap();
    let (took, acked) = outage(w, t).await;
    eprintln!("{old} deleted on notice: {new} primary, writes back after {took:?}");
    let r = reasons(&k, "ho").await;
    assert!(
        r.iter().any(|r| r == "SwitchoverForLeavingPrimary"),
        "{r:?}"
    );
    assert!(
        !r.iter()
            .any(|r| r == "FailingOver" || r == "PrimaryFailing"),
        "{r:?}"
    );
    healthy_with(&k, "ho", &acked, Duration::from_secs(180)).await;
}

/// Kill the container PID 1 of `primary`; the first write acknowledged
/// after it, and the primary once healthy again.
async fn kill_primary(k: &KubeCluster, ns: &str, primary: &str) -> (Duration, String) {
    let w = writer(k, ns, "db").await;
    let pid = k.pid(ns, primary, "mysql").await.unwrap();
    let t = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let (took, acked) = outage(w, t).await;
    let now = healthy_with(k, ns, &acked, Duration::from_secs(180)).await;
    (took, now)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
async fn a_killed_primary_container_is_restarted_in_place_and_a_crash_loop_is_failed_over() {
    let k = cluster().await;
    let mut primary = durable_cluster(&k, "kill").await;
    let pods: Api<Pod> = Api::namespaced(k.client.clone(), "kill");
    for round in 1..=3 {
        // A container that has not crashed before: the kubelet starts it
        // again at once, and the operator waits for it in place (the
        // kubelet reports the death up to a second after the operator's
        // poll first finds nothing listening).
        let (took, now) = kill_primary(&k, "kill", &primary).await;
        eprintln!(
            "round {round}: PID 1 of {primary} killed, writes back after {took:?}, primary {now}"
        );
        assert_eq!(now, primary, "restarted in place, not failed over");
        // Killed again: the kubelet holds it back (CrashLoopBackOff, 10 s)
        // and the operator fails over rather than wait that out.
        let (took, now) = kill_primary(&k, "kill", &primary).await;
        eprintln!("round {round}: killed again, writes back after {took:?}, primary {now}");
        assert!(
            took < Duration::from_secs(10),
            "waited out the kubelet's back-off: {took:?}"
        );
        // A fresh container for the next round: the primary's Pod deleted
        // on notice (it hands over), made again by the operator.
        let leaving = now.clone();
        pods.delete(&leaving, &DeleteParams::default())
            .await
            .unwrap();
        primary = until("another primary", Duration::from_secs(60), || async {
            let p = k.cluster_status("kill", "db").await.ok()?.current_primary?;
            (p != leaving).then_some(p)
        })
        .await
        .unwrap();
        k.wait_healthy("kill", "db", 3, Duration::from_secs(180))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
async fn a_replica_reinitialised_with_the_plugin_keeps_its_pod_and_claim_and_serves_again() {
    let k = cluster().await;
    let primary = durable_cluster(&k, "ri").await;
    let w = writer(&k, "ri", "db").await;
    let replica = if primary == "db-2" { "db-3" } else { "db-2" };
    let pods: Api<Pod> = Api::namespaced(k.client.clone(), "ri");
    let uid = pods.get(replica).await.unwrap().metadata.uid;
    // Something only the old data directory holds.
    let marker = k
        .claim_path("ri", replica)
        .await
        .unwrap()
        .join("data")
        .join("left-by-a-person");
    std::fs::write(&marker, "x").unwrap();
    // Never the primary.
    let refused = k.plugin(
        &cnmysql_exe(),
        &["cnmsql", "-n", "ri", "reinit", "db", &primary],
    );
    let e = refused.expect_err("reinit of the primary is refused");
    assert!(e.to_string().contains("is the primary"), "{e}");
    let t = Instant::now();
    k.plugin(
        &cnmysql_exe(),
        &["cnmsql", "-n", "ri", "reinit", "db", replica],
    )
    .unwrap();
    eprintln!(
        "{replica} re-initialised through the plugin in {:?}",
        t.elapsed()
    );
    assert!(!marker.exists(), "its data directory was replaced");
    assert_eq!(
        pods.get(replica).await.unwrap().metadata.uid,
        uid,
        "the same Pod (and claim): only the data was replaced"
    );
    let r = reasons(&k, "ri").await;
    for reason in ["ReinitRequested", "Reinitializing", "Reinitialized"] {
        assert!(r.iter().any(|x| x == reason), "{reason} in {r:?}");
    }
    let (_, acked) = outage(w, t).await;
    healthy_with(&k, "ri", &acked, Duration::from_secs(120)).await;
    k.same_rows("ri", "db", &primary, &all("db")).await.unwrap();
}

/// The node a Pod runs on.
async fn node_of(k: &KubeCluster, ns: &str, pod: &str) -> Option<String> {
    let pods: Api<Pod> = Api::namespaced(k.client.clone(), ns);
    pods.get(pod).await.ok()?.spec?.node_name
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
async fn kubectl_drain_of_the_primarys_node_completes_after_a_handover_and_loses_nothing() {
    let k = KubeCluster::start_nodes(&cnmysql_exe(), &[], 3)
        .await
        .unwrap();
    let old = durable_cluster(&k, "dr").await;
    let mut placed = Vec::new();
    for pod in all("db") {
        placed.push(node_of(&k, "dr", &pod).await.unwrap());
    }
    let node = node_of(&k, "dr", &old).await.unwrap();
    eprintln!("instances on {placed:?}; draining {node}, the primary's");
    let w = writer(&k, "dr", "db").await;
    let t = Instant::now();
    // As an administrator does it: cordon, then evict everything, waiting
    // out the disruption budgets.
    let kubectl = k.cp.kubeconfig.clone();
    let drained = {
        let node = node.clone();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&kubectl)
                .args([
                    "drain",
                    &node,
                    "--ignore-daemonsets",
                    "--delete-emptydir-data",
                    "--timeout=240s",
                ])
                .env_remove("KUBECONFIG")
                .output()
                .unwrap()
        })
        .await
        .unwrap()
    };
    let took = t.elapsed();
    assert!(
        drained.status.success(),
        "kubectl drain {node}: {}{}",
        String::from_utf8_lossy(&drained.stdout),
        String::from_utf8_lossy(&drained.stderr)
    );
    let status = k.cluster_status("dr", "db").await.unwrap();
    let new = status.current_primary.clone().unwrap();
    eprintln!("drain of {node} completed in {took:?}; primary {new}");
    assert_ne!(new, old, "the primary handed over before its eviction");
    assert_ne!(
        node_of(&k, "dr", &new).await.as_deref(),
        Some(node.as_str())
    );
    let r = reasons(&k, "dr").await;
    assert!(r.iter().any(|r| r == "SwitchoverFromCordonedNode"), "{r:?}");
    assert!(
        !r.iter()
            .any(|r| r == "FailingOver" || r == "PrimaryFailing"),
        "{r:?}"
    );
    // Writes go on meanwhile: the instance evicted waits for its node (its
    // volume is local there) and comes back once it is uncordoned.
    k.cp.kubectl(&["uncordon", &node], None).unwrap();
    w.wait_for_more(30, Duration::from_secs(90)).await;
    let out = w.stop().await;
    eprintln!(
        "longest stretch without an acknowledged write: {:?}",
        out.longest_gap
    );
    healthy_with(&k, "dr", &out.acked, Duration::from_secs(240)).await;
}

/// Three nodes, the instances spread by anti-affinity, the primary moved
/// off the first node (its link carries the control plane's address).
async fn spread_cluster(k: &KubeCluster, ns: &str) -> String {
    let mut primary = durable_cluster(k, ns).await;
    let first = k.node_names()[0].clone();
    let mut placed = Vec::new();
    for pod in all("db") {
        placed.push(node_of(k, ns, &pod).await.unwrap());
    }
    eprintln!("instances on {placed:?}");
    let distinct: std::collections::BTreeSet<&String> = placed.iter().collect();
    assert_eq!(distinct.len(), 3, "anti-affinity spreads the instances");
    if node_of(k, ns, &primary).await.as_deref() == Some(first.as_str()) {
        let target = all("db").into_iter().find(|p| *p != primary).unwrap();
        k.plugin(
            &cnmysql_exe(),
            &["cnmsql", "-n", ns, "promote", "db", &target],
        )
        .unwrap();
        primary = k
            .wait_healthy(ns, "db", 3, Duration::from_secs(120))
            .await
            .unwrap();
    }
    primary
}

/// The primary's whole node lost under a writer (`freeze`: every process
/// on it stopped; `cut`: its link down) for 25 s, `dataDurability:
/// required`: another primary named before the old lease could expire
/// (passed on, not waited out), writes back within the lease's TTL + 2 s
/// whatever the writer's own timeouts, and the lost instance back once
/// its node returns, nothing acknowledged lost.
async fn lose_the_primarys_node(kind: &str) {
    let k = KubeCluster::start_nodes(&cnmysql_exe(), &[], 3)
        .await
        .unwrap();
    let ns = "nl";
    let old = spread_cluster(&k, ns).await;
    let node = node_of(&k, ns, &old).await.unwrap();
    let w = writer(&k, ns, "db").await;
    let t = Instant::now();
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    k.node_fault(&node, kind).unwrap();
    let new = until("another primary", Duration::from_secs(90), || async {
        let p = k.cluster_status(ns, "db").await.ok()?.current_primary?;
        (p != old).then_some(p)
    })
    .await
    .unwrap();
    let promoted = t.elapsed();
    w.wait_for_more(30, Duration::from_secs(60)).await;
    let lost_for = Duration::from_secs(25).saturating_sub(t.elapsed());
    tokio::time::sleep(lost_for).await;
    k.node_fault(&node, "heal").unwrap();
    let (took, acked) = outage(w, t).await;
    eprintln!(
        "node {node} {kind}: {old} → {new} on {:?}, named primary {promoted:?} and first write acknowledged {took:?} after the fault",
        node_of(&k, ns, &new).await
    );
    // Under `required` the lease is passed on, not waited out: renewed at
    // most 5 s before the fault, it could not expire within 10 s.
    assert!(
        reasons(&k, ns).await.iter().any(|r| r == "LeasePassed"),
        "the lease was waited out ({promoted:?})\n{}",
        k.diagnose(ns, "db")
    );
    assert!(
        promoted < Duration::from_millis((lease::TTL_MS - lease::RENEW_EVERY_MS) as u64),
        "{new} named primary {promoted:?} after the fault: the lease could have expired by then"
    );
    let bound = Duration::from_millis(lease::TTL_MS as u64 + 2_000);
    assert!(
        took <= bound,
        "writes stopped for {took:?}, over {bound:?} (fault at {wall:.3} s since the epoch)\n{}",
        k.diagnose(ns, "db")
    );
    healthy_with(&k, ns, &acked, Duration::from_secs(240)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
async fn a_frozen_node_of_three_is_failed_over_before_its_lease_expires_and_rejoins() {
    lose_the_primarys_node("freeze").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
async fn a_node_of_three_cut_off_is_failed_over_before_its_lease_expires_and_rejoins() {
    lose_the_primarys_node("cut").await;
}

/// `kubectl drain` of every node in turn, as a rolling node upgrade does,
/// under a writer: each drain completes, writes keep flowing (the primary
/// hands over before its eviction, no failover), every instance comes back
/// once its node is uncordoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
async fn kubectl_drain_of_each_node_in_turn_keeps_writes_flowing() {
    let k = KubeCluster::start_nodes(&cnmysql_exe(), &[], 3)
        .await
        .unwrap();
    let ns = "dn";
    spread_cluster(&k, ns).await;
    let w = writer(&k, ns, "db").await;
    for node in k.node_names() {
        let t = Instant::now();
        let out = k.cp.kubectl(
            &[
                "drain",
                &node,
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                "--timeout=240s",
            ],
            None,
        );
        assert!(out.is_ok(), "kubectl drain {node}: {out:?}");
        eprintln!("drain of {node} completed in {:?}", t.elapsed());
        k.cp.kubectl(&["uncordon", &node], None).unwrap();
        k.wait_healthy(ns, "db", 3, Duration::from_secs(240))
            .await
            .unwrap();
    }
    w.wait_for_more(30, Duration::from_secs(90)).await;
    let out = w.stop().await;
    eprintln!(
        "three drains: longest stretch without an acknowledged write {:?}",
        out.longest_gap
    );
    let r = reasons(&k, ns).await;
    assert!(
        !r.iter().any(|r| r == "FailingOver"),
        "a drain caused a failover: {r:?}"
    );
    assert!(
        out.longest_gap < Duration::from_secs(5),
        "writes stopped for {:?}",
        out.longest_gap
    );
    healthy_with(&k, ns, &out.acked, Duration::from_secs(240)).await;
}
