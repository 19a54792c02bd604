//! A real control plane for the binary's tests: the operator as a process,
//! kubectl, and helpers to read what the operator made.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use cnmysql_api::Cluster;
use cnmysql_envtest::{ControlPlane, Options, free_port};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::BIN;
pub const IMAGE: &str = "registry.example/cnmysql:test";

pub struct Operator {
    child: tokio::process::Child,
    http: String,
    log: std::path::PathBuf,
}

impl Operator {
    pub async fn start(cp: &ControlPlane, identity: &str) -> Operator {
        Operator::start_with(cp, identity, &cp.kubeconfig).await
    }

    /// Run with the credentials of `kubeconfig` (e.g. a ServiceAccount's).
    pub async fn start_with(cp: &ControlPlane, identity: &str, kubeconfig: &Path) -> Operator {
        Operator::start_with_args(cp, identity, kubeconfig, &[]).await
    }

    /// [`Operator::start_with`], with more arguments (`--namespaces`).
    pub async fn start_with_args(
        cp: &ControlPlane,
        identity: &str,
        kubeconfig: &Path,
        more: &[&str],
    ) -> Operator {
        let port = free_port();
        let log = cp.dir().join(format!("operator-{identity}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = tokio::process::Command::new(BIN)
            .args(["operator", "--kubeconfig"])
            .arg(kubeconfig)
            .args(
                (!more.contains(&"--leader-election-namespace"))
                    .then_some(["--leader-election-namespace", "default"])
                    .into_iter()
                    .flatten(),
            )
            .args([
                "--http-bind",
                &format!("127.0.0.1:{port}"),
                "--identity",
                identity,
                "--operator-image",
                IMAGE,
            ])
            .args(more)
            .env_remove("KUBECONFIG")
            .env("CNMYSQL_LOG", "info,cnmysql_operator=debug")
            .stdout(Stdio::null())
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Operator {
            child,
            http: format!("127.0.0.1:{port}"),
            log,
        }
    }

    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(&self.http).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).await.ok()?;
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
        Some((code, body))
    }

    pub async fn metric(&self, name: &str) -> f64 {
        let Some((_, body)) = self.get("/metrics").await else {
            return -1.0;
        };
        body.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let _ = tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await;
        let _ = self.child.kill().await;
    }
}

pub fn kubectl(cp: &ControlPlane, args: &[&str]) -> std::process::Output {
    std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("kubectl is installed")
}

pub async fn control_plane() -> (ControlPlane, kube::Client) {
    let cp = ControlPlane::start(Options {
        controllers: vec![
            "garbagecollector".into(),
            "namespace".into(),
            "pvc-protection".into(),
        ],
        ..Default::default()
    })
    .await
    .unwrap();
    let client = cp.client().await.unwrap();
    // The documented install command, with the real kubectl.
    let crd = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crd.yaml");
    let out = kubectl(
        &cp,
        &["apply", "--server-side", "-f", crd.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    cnmysql_envtest::install_crd(&client, &crd).await.unwrap();
    let ns: Api<Namespace> = Api::all(client.clone());
    ns.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "prod"}})).unwrap(),
    )
    .await
    .unwrap();
    (cp, client)
}

pub fn cluster_manifest(name: &str, extra: &str) -> serde_json::Value {
    let text = format!(
        "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: {name}\n  namespace: prod\nspec:\n  instances: 3\n  minSyncReplicas: 1\n  maxSyncReplicas: 1\n  mysql:\n    semiSync:\n      enabled: true\n{extra}"
    );
    serde_saphyr::from_str(&text).unwrap()
}

pub async fn apply_cluster(client: &kube::Client, manifest: &serde_json::Value) -> Cluster {
    let api: Api<Cluster> = Api::namespaced(client.clone(), "prod");
    let name = manifest["metadata"]["name"].as_str().unwrap();
    api.patch(
        name,
        &PatchParams::apply("test-user"),
        &Patch::Apply(manifest),
    )
    .await
    .unwrap()
}

pub async fn names<K>(client: &kube::Client, cluster: &str) -> Vec<String>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    <K as Resource>::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), "prod");
    let mut n: Vec<String> = api
        .list(&ListParams::default().labels(&format!("cnmysql.io/cluster={cluster}")))
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| o.name_any())
        .collect();
    n.sort();
    n
}

/// resourceVersion of every object the operator made for `cluster`.
pub async fn versions(client: &kube::Client, cluster: &str) -> BTreeMap<String, String> {
    pub async fn of<K>(client: &kube::Client, cluster: &str, out: &mut BTreeMap<String, String>)
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        <K as Resource>::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(client.clone(), "prod");
        for o in api
            .list(&ListParams::default().labels(&format!("cnmysql.io/cluster={cluster}")))
            .await
            .unwrap()
            .items
        {
            out.insert(
                format!("{}/{}", K::kind(&Default::default()), o.name_any()),
                o.resource_version().unwrap_or_default(),
            );
        }
    }
    let mut out = BTreeMap::new();
    of::<Pod>(client, cluster, &mut out).await;
    of::<PersistentVolumeClaim>(client, cluster, &mut out).await;
    of::<Service>(client, cluster, &mut out).await;
    of::<Secret>(client, cluster, &mut out).await;
    of::<ServiceAccount>(client, cluster, &mut out).await;
    of::<Role>(client, cluster, &mut out).await;
    of::<RoleBinding>(client, cluster, &mut out).await;
    of::<PodDisruptionBudget>(client, cluster, &mut out).await;
    out
}
