//! `cnmysql-bench operator`: the operator against a real API server (etcd
//! and kube-apiserver from `KUBEBUILDER_ASSETS`), installed from
//! `deploy/operator.yaml` and running with its own ServiceAccount's token:
//!
//! - time from `kubectl apply` of a 3-instance Cluster until all its objects
//!   exist (Secrets, claims, Pods, Services, RBAC, disruption budgets);
//! - API requests per minute the operator makes for one idle Cluster, from
//!   the API server's audit log (the Cluster's namespace only; the leader
//!   Lease is reported apart);
//! - the operator's resident memory with 1 and with 10 Clusters.
//!
//! There is no node: the Pods stay unscheduled, so no instance manager runs
//! and the operator's polls find no Pod IP. The instance managers' own
//! requests (the primary's Lease renewals) are not part of these figures.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use cnmysql_envtest::{ControlPlane, Options, free_port, wait_for};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

use crate::{rss_kib, stats};

const NAMESPACE: &str = "bench";
const OPERATOR_USER: &str = "system:serviceaccount:cnmysql-system:cnmysql-operator";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn kubectl(cp: &ControlPlane, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
    cp.kubectl(args, stdin)
}

/// Objects of `cluster` that exist, by kind.
async fn objects(client: &kube::Client, cluster: &str) -> Value {
    async fn count<K>(client: &kube::Client, cluster: &str) -> usize
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(client.clone(), NAMESPACE);
        let lp = ListParams::default().labels(&format!("cnmysql.io/cluster={cluster}"));
        api.list(&lp).await.map(|l| l.items.len()).unwrap_or(0)
    }
    json!({
        "Secret": count::<Secret>(client, cluster).await,
        "PersistentVolumeClaim": count::<PersistentVolumeClaim>(client, cluster).await,
        "Pod": count::<Pod>(client, cluster).await,
        "Service": count::<Service>(client, cluster).await,
        "ServiceAccount": count::<ServiceAccount>(client, cluster).await,
        "Role": count::<Role>(client, cluster).await,
        "RoleBinding": count::<RoleBinding>(client, cluster).await,
        "PodDisruptionBudget": count::<PodDisruptionBudget>(client, cluster).await,
    })
}

/// Every object a 3-instance Cluster owns with default settings.
fn complete() -> Value {
    json!({
        "Secret": 8, "PersistentVolumeClaim": 3, "Pod": 3, "Service": 3,
        "ServiceAccount": 1, "Role": 1, "RoleBinding": 1, "PodDisruptionBudget": 2,
    })
}

fn manifest(name: &str) -> String {
    format!(
        "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: {name}\n  namespace: {NAMESPACE}\nspec:\n  instances: 3\n"
    )
}

/// Seconds from the start of `kubectl apply` until every object exists.
async fn apply_until_complete(
    cp: &ControlPlane,
    client: &kube::Client,
    name: &str,
) -> anyhow::Result<f64> {
    let start = Instant::now();
    kubectl(cp, &["apply", "-f", "-"], Some(&manifest(name)))?;
    let deadline = start + Duration::from_secs(60);
    loop {
        let have = objects(client, name).await;
        if have == complete() {
            return Ok(start.elapsed().as_secs_f64());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "Cluster {name}: after 60 s only {have}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The operator's requests during `window`, split into those for the
/// Clusters' namespace and those for its leader Lease.
async fn requests_during(cp: &ControlPlane, window: Duration) -> (Vec<String>, usize) {
    let before = cp.requests_by(OPERATOR_USER).len();
    tokio::time::sleep(window).await;
    let all = cp.requests_by(OPERATOR_USER);
    let new = &all[before.min(all.len())..];
    let cluster: Vec<String> = new
        .iter()
        .filter(|r| r.namespace == NAMESPACE || r.resource == "clusters")
        .map(|r| {
            format!(
                "{} {}{}",
                r.verb,
                r.resource,
                if r.subresource.is_empty() {
                    String::new()
                } else {
                    format!("/{}", r.subresource)
                }
            )
        })
        .collect();
    let leader = new
        .iter()
        .filter(|r| r.resource == "leases" && r.namespace == "cnmysql-system")
        .count();
    (cluster, leader)
}

fn tally(requests: &[String]) -> Value {
    let mut m = std::collections::BTreeMap::<&str, u64>::new();
    for r in requests {
        *m.entry(r.as_str()).or_default() += 1;
    }
    json!(m)
}

pub fn operator(runs: usize, cnmysql: &Path) -> anyhow::Result<Value> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let cp = ControlPlane::start(Options {
            controllers: vec!["garbagecollector".into()],
            audit: true,
            ..Default::default()
        })
        .await?;
        let client = cp.client().await?;
        // Installed as documented, running as its own ServiceAccount.
        cnmysql_envtest::install_crd(&client, &repo().join("deploy/crd.yaml")).await?;
        let operator_yaml = repo().join("deploy/operator.yaml");
        kubectl(
            &cp,
            &[
                "apply",
                "--server-side",
                "-f",
                operator_yaml.to_str().expect("a UTF-8 path"),
            ],
            None,
        )?;
        let token = kubectl(
            &cp,
            &["create", "token", "cnmysql-operator", "-n", "cnmysql-system"],
            None,
        )?;
        let kubeconfig = cp.kubeconfig_with_token("operator", token.trim())?;
        let ns: Api<Namespace> = Api::all(client.clone());
        ns.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?,
        )
        .await?;
        let port = free_port();
        let log = cp.dir().join("operator.log");
        let mut child = tokio::process::Command::new(cnmysql)
            .arg("operator")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--http-bind", &format!("127.0.0.1:{port}")])
            .args(["--identity", "bench"])
            .env_remove("KUBECONFIG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().expect("running");
        let ready = || async {
            let r = http_status(port, "/readyz").await;
            (r == Some(200)).then_some(())
        };
        wait_for("the operator to lead and be ready", Duration::from_secs(60), ready).await;

        // One Cluster: apply until complete, then idle.
        let mut apply = vec![apply_until_complete(&cp, &client, "c1").await?];
        eprintln!("apply -> all objects of c1: {:.3}s", apply[0]);
        // Past the topology warm-up: what an idle Cluster costs.
        tokio::time::sleep(Duration::from_secs(20)).await;
        let rss_one = rss_kib(pid).unwrap_or(0.0) / 1024.0;
        let (one, leader) = requests_during(&cp, Duration::from_secs(60)).await;
        eprintln!(
            "idle, 1 Cluster: {} requests/min for it, {leader} for the leader Lease; {rss_one:.1} MiB",
            one.len()
        );
        // Nine more, each timed.
        for i in 2..=10 {
            let t = apply_until_complete(&cp, &client, &format!("c{i}")).await?;
            eprintln!("apply -> all objects of c{i}: {t:.3}s");
            apply.push(t);
        }
        // More apply samples than 10 if asked, on Clusters removed again.
        for i in 11..=runs.max(10) {
            let name = format!("c{i}");
            apply.push(apply_until_complete(&cp, &client, &name).await?);
            kubectl(&cp, &["delete", "cluster", &name, "-n", NAMESPACE, "--wait=false"], None)?;
        }
        tokio::time::sleep(Duration::from_secs(20)).await;
        let mut rss_ten = Vec::new();
        for _ in 0..5 {
            rss_ten.push(rss_kib(pid).unwrap_or(0.0) / 1024.0);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let (ten, _) = requests_during(&cp, Duration::from_secs(60)).await;
        eprintln!("idle, 10 Clusters: {} requests/min for them", ten.len());
        let _ = child.kill().await;
        if std::env::var_os("CNMYSQL_BENCH_KEEP").is_some() {
            eprintln!("operator log: {}", log.display());
        }
        anyhow::Ok(json!({
            "apply_to_all_objects_seconds": stats(apply),
            "idle_requests_per_minute_one_cluster": one.len(),
            "idle_requests_per_minute_per_cluster_of_ten": ten.len() as f64 / 10.0,
            "idle_requests_one_cluster_by_kind": tally(&one),
            "leader_lease_requests_per_minute": leader,
            "operator_rss_mib_one_cluster": rss_one,
            "operator_rss_mib_ten_clusters": stats(rss_ten),
        }))
    })
}

/// The HTTP status of a GET on the operator's plain-HTTP port.
async fn http_status(port: u16, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).await.ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}
