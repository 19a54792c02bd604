//! A whole Kubernetes cluster on this machine for tests and benchmarks: a
//! real control plane (from `KUBEBUILDER_ASSETS`), a process node, and the
//! operator installed from `deploy/operator.yaml` unchanged, running as a
//! Pod of its Deployment. Everything is stopped when it is dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use cnmysql_envtest::{ControlPlane, Options};

/// The controllers a small cluster needs.
pub const CONTROLLERS: &[&str] = &[
    "deployment",
    "replicaset",
    "endpoint",
    "endpointslice",
    "garbagecollector",
    "namespace",
    "serviceaccount",
    "root-ca-cert-publisher",
    "persistentvolume-binder",
    "disruption",
];

/// The repository's root (for `deploy/`).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub struct KubeCluster {
    pub cp: ControlPlane,
    pub client: kube::Client,
    state: tempfile::TempDir,
    node: Child,
}

/// Poll `f` every 100 ms until it returns Some, or fail naming `what`.
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl KubeCluster {
    /// Start the control plane and the node (`node_exe`, running `cnmysql`
    /// for the operator image), install the operator, and return once it
    /// is Ready.
    pub async fn start(node_exe: &Path, cnmysql: &Path) -> anyhow::Result<KubeCluster> {
        let cp = ControlPlane::start(Options {
            controllers: CONTROLLERS.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        })
        .await?;
        let client = cp.client().await?;
        let state = tempfile::Builder::new()
            .prefix("cnmysql-procnode-")
            .tempdir()?;
        let log = std::fs::File::create(state.path().join("node.log"))?;
        let node = Command::new(node_exe)
            .arg("run")
            .arg("--kubeconfig")
            .arg(&cp.kubeconfig)
            .arg("--state-dir")
            .arg(state.path())
            .arg("--image")
            .arg(format!(
                "ghcr.io/cloudnative-mysql/cnmysql=/usr/local/bin/cnmysql={}",
                cnmysql.display()
            ))
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", node_exe.display()))?;
        let kc = KubeCluster {
            cp,
            client,
            state,
            node,
        };
        until("the node to register", Duration::from_secs(30), || async {
            kc.state.path().join("node.ready").exists().then_some(())
        })
        .await
        .with_context(|| kc.node_log_tail())?;
        let manifest = repo().join("deploy/operator.yaml");
        kc.cp.kubectl(
            &[
                "apply",
                "--server-side",
                "-f",
                &manifest.display().to_string(),
            ],
            None,
        )?;
        kc.cp
            .kubectl(
                &[
                    "-n",
                    "cnmysql-system",
                    "rollout",
                    "status",
                    "deployment/cnmysql-operator",
                    "--timeout=90s",
                ],
                None,
            )
            .with_context(|| kc.node_log_tail())?;
        Ok(kc)
    }

    /// The node's state directory (Pods' logs are `pods/*/<container>.log`).
    pub fn state(&self) -> &Path {
        self.state.path()
    }

    fn node_log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.state.path().join("node.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Where a Service listens on this machine.
    pub fn service(&self, namespace: &str, name: &str) -> Option<SocketAddr> {
        let text = std::fs::read_to_string(self.state.path().join("services.json")).ok()?;
        let map: std::collections::BTreeMap<String, String> = serde_json::from_str(&text).ok()?;
        map.get(&format!("{namespace}/{name}"))?.parse().ok()
    }

    /// Wait until a Service has a listener.
    pub async fn wait_service(&self, namespace: &str, name: &str) -> anyhow::Result<SocketAddr> {
        until(
            &format!("Service {namespace}/{name} to be served"),
            Duration::from_secs(30),
            || async { self.service(namespace, name) },
        )
        .await
    }

    /// Put a fault on a Pod (`cut`, `isolate`, `freeze`, `heal`).
    pub async fn fault(&self, kind: &str, namespace: &str, pod: &str) -> anyhow::Result<()> {
        crate::request(
            self.state.path(),
            &format!("fault {kind} {namespace}/{pod}"),
        )
        .await?;
        Ok(())
    }

    /// The host PID of a container's PID 1.
    pub async fn pid(&self, namespace: &str, pod: &str, container: &str) -> anyhow::Result<i32> {
        Ok(crate::request(
            self.state.path(),
            &format!("pid {namespace}/{pod} {container}"),
        )
        .await?
        .parse()?)
    }
}

impl Drop for KubeCluster {
    fn drop(&mut self) {
        if std::env::var_os("CNMYSQL_ENVTEST_KEEP").is_some() {
            let kept = std::mem::replace(
                &mut self.state,
                tempfile::Builder::new().tempdir().expect("tempdir"),
            )
            .keep();
            eprintln!("process node: keeping {}", kept.display());
        }
        // The node kills its Pods' processes when it stops.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.node.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.node.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.node.kill();
        let _ = self.node.wait();
    }
}
