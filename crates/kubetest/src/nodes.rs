//! The node a test cluster runs on: the real node (a kubelet, containerd
//! and kube-proxy, `crates/realnode`) or the process node, and what only
//! a node can do (where a Service answers, faults, PIDs, claims' data).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};
use cnmysql_envtest::{ControlPlane, Options};

use super::{CONTROLLERS, KubeCluster, repo, until};

/// The node the cluster's Pods run on.
pub(super) enum Node {
    /// A real kubelet, containerd and kube-proxy (`cnmysql-realnode`): the
    /// proof of Kubernetes work.
    Real(Box<cnmysql_realnode::RealNode>),
    /// The process node (`cnmysql-node`), with the machine-wide lock of
    /// process-node clusters (see [`one_at_a_time`]), released last.
    Process {
        /// Taken when the cluster is dropped.
        child: Option<Child>,
        _one_at_a_time: nix::fcntl::Flock<std::fs::File>,
    },
}

/// Which node tests run on: `CNMYSQL_KUBE_NODE=process` for the process
/// node, the real node otherwise.
pub fn real_node() -> bool {
    std::env::var("CNMYSQL_KUBE_NODE").as_deref() != Ok("process")
}

/// Take the machine-wide lock of process-node clusters: Pods that listen
/// on the wildcard address (the operator's metrics port) share the host's
/// ports, so two clusters' operators would collide. `holder` (what the
/// lock's file then says holds it) is how a refusal names the cluster to
/// stop: a state directory for `cnmysql-node up`, a test otherwise. With
/// `wait`, wait for it (saying so), else fail at once.
pub fn one_at_a_time(wait: bool, holder: &str) -> anyhow::Result<nix::fcntl::Flock<std::fs::File>> {
    use nix::fcntl::{Flock, FlockArg};
    use std::io::Write;
    std::fs::create_dir_all("/tmp/cnmysql-procnode")?;
    let path = "/tmp/cnmysql-procnode/cluster.lock";
    // Not truncated on opening: until we hold it, it names the holder.
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)?;
    let mut lock = match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        Ok(l) => l,
        Err((f, _)) if wait => {
            eprintln!(
                "waiting for another process-node cluster on this machine to stop ({}; {path})",
                held_by(path)
            );
            Flock::lock(f, FlockArg::LockExclusive)
                .map_err(|(_, e)| anyhow::anyhow!("locking {path}: {e}"))?
        }
        Err(_) => bail!(
            "another process-node cluster runs on this machine ({}; {path} is locked): stop it first",
            held_by(path)
        ),
    };
    lock.set_len(0)?;
    writeln!(&mut *lock, "{holder}")?;
    Ok(lock)
}

/// What the lock's file says of its holder, as advice.
fn held_by(path: &str) -> String {
    match std::fs::read_to_string(path) {
        Ok(h) if h.trim().starts_with('/') => {
            format!("scripts/kube-down --state-dir {} stops it", h.trim())
        }
        Ok(h) if !h.trim().is_empty() => format!("held by {}", h.trim()),
        _ => "scripts/kube-down stops it".to_string(),
    }
}

impl KubeCluster {
    pub(super) fn node_log_tail(&self) -> String {
        match &self.node {
            Node::Real(n) => format!("kubelet:\n{}", n.log_tail("kubelet")),
            Node::Process { .. } => {
                let text =
                    std::fs::read_to_string(self.state.path().join("node.log")).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                lines[lines.len().saturating_sub(20)..].join("\n")
            }
        }
    }

    /// Where a Service answers from this machine: its ClusterIP on the
    /// real node (routed to the node, served by kube-proxy), a local
    /// listener on the process node.
    pub fn service(&self, namespace: &str, name: &str) -> Option<SocketAddr> {
        if let Node::Real(_) = self.node {
            let svc = self
                .cp
                .kubectl(
                    &[
                        "-n",
                        namespace,
                        "get",
                        "service",
                        name,
                        "-o",
                        "jsonpath={.spec.clusterIP} {.spec.ports[0].port}",
                    ],
                    None,
                )
                .ok()?;
            let (ip, port) = svc.trim().split_once(' ')?;
            return format!("{ip}:{port}").parse().ok();
        }
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

    /// Put a fault on a Pod: `cut` (no traffic), `isolate` (no traffic
    /// but the kubelet's), `freeze` (every process stopped, as a stalled
    /// node), `heal` (undo).
    pub async fn fault(&self, kind: &str, namespace: &str, pod: &str) -> anyhow::Result<()> {
        let Node::Real(n) = &self.node else {
            crate::request(
                self.state.path(),
                &format!("fault {kind} {namespace}/{pod}"),
            )
            .await?;
            return Ok(());
        };
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(self.client.clone(), namespace);
        let p = pods.get(pod).await?;
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let net = &n.node(&node_of(&p)?)?.net;
        let ip = p.status.and_then(|s| s.pod_ip).unwrap_or_default();
        use cnmysql_realnode::faults;
        match kind {
            "cut" => faults::cut_pod(net, &ip, faults::Cut::All),
            "isolate" => faults::cut_pod(net, &ip, faults::Cut::ButTheNode),
            "freeze" => faults::freeze_pod(net, &uid, true),
            "heal" => {
                let _ = faults::freeze_pod(net, &uid, false);
                faults::cut_pod(net, &ip, faults::Cut::None)
            }
            other => bail!("unknown fault {other}"),
        }
    }

    /// The host PID of a container's PID 1.
    pub async fn pid(&self, namespace: &str, pod: &str, container: &str) -> anyhow::Result<i32> {
        let Node::Real(n) = &self.node else {
            return Ok(crate::request(
                self.state.path(),
                &format!("pid {namespace}/{pod} {container}"),
            )
            .await?
            .parse()?);
        };
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(self.client.clone(), namespace);
        let p = pods.get(pod).await?;
        let node = n.node(&node_of(&p)?)?;
        let id = p
            .status
            .and_then(|s| s.container_statuses)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.name == container)
            .and_then(|c| c.container_id)
            .with_context(|| format!("{namespace}/{pod} has no running container {container}"))?;
        cnmysql_realnode::faults::container_pid(node.containerd(), &id)
    }

    /// Where a claim's data is on this machine.
    pub async fn claim_path(&self, namespace: &str, claim: &str) -> anyhow::Result<PathBuf> {
        if let Node::Process { .. } = self.node {
            return Ok(crate::volumes::claim_dir(
                self.state.path(),
                namespace,
                claim,
            ));
        }
        use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
        let claims: kube::Api<PersistentVolumeClaim> =
            kube::Api::namespaced(self.client.clone(), namespace);
        let volume = claims
            .get(claim)
            .await?
            .spec
            .and_then(|s| s.volume_name)
            .with_context(|| format!("claim {namespace}/{claim} is not bound"))?;
        let pvs: kube::Api<PersistentVolume> = kube::Api::all(self.client.clone());
        pvs.get(&volume)
            .await?
            .spec
            .and_then(|s| s.local)
            .map(|l| PathBuf::from(l.path))
            .with_context(|| format!("volume {volume} is not a local volume"))
    }
}

/// The node a Pod was scheduled to.
fn node_of(p: &k8s_openapi::api::core::v1::Pod) -> anyhow::Result<String> {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .with_context(|| {
            format!(
                "Pod {} is not scheduled",
                p.metadata.name.as_deref().unwrap_or("?")
            )
        })
}

/// The real node with the operator's image made from `cnmysql` and every
/// server image the store holds; `extra_images` as `REPO=PATH=HOST_FILE`
/// (an executable image named `REPO:latest` unless REPO has a tag).
pub(super) async fn start_real(
    cnmysql: &Path,
    extra_images: &[String],
    nodes: usize,
) -> anyhow::Result<(Node, ControlPlane)> {
    use cnmysql_realnode::images;
    let operator = operator_image_name()?;
    let mut all = vec![images::operator(&operator, cnmysql)];
    all.extend(images::from_store(&images::store()));
    for spec in extra_images {
        let mut parts = spec.splitn(3, '=');
        let (Some(repo), Some(at), Some(file)) = (parts.next(), parts.next(), parts.next()) else {
            bail!("image {spec:?}: expected REPO=PATH=HOST_FILE");
        };
        let name = if repo
            .rsplit('/')
            .next()
            .is_some_and(|last| last.contains(':'))
        {
            repo.to_string()
        } else {
            format!(
                "{repo}:{}",
                operator
                    .rsplit_once(':')
                    .map(|(_, t)| t)
                    .unwrap_or("latest")
            )
        };
        let mut image = images::operator(&name, Path::new(file));
        image.source = images::Source::Executable {
            file: file.into(),
            at: at.into(),
        };
        image.entrypoint = vec![at.into()];
        all.push(image);
    }
    let node = cnmysql_realnode::RealNode::start(cnmysql_realnode::Options {
        images: all,
        nodes,
        ..Default::default()
    })
    .await?;
    let (node, cp) = node.split();
    Ok((Node::Real(Box::new(node)), cp))
}

/// The operator image `deploy/operator.yaml` names.
pub fn operator_image_name() -> anyhow::Result<String> {
    let text = std::fs::read_to_string(repo().join("deploy/operator.yaml"))?;
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("image: "))
        .find(|i| i.contains("/cnmysql:"))
        .map(str::to_string)
        .context("deploy/operator.yaml names no cnmysql image")
}

pub(super) async fn start_process(
    node_exe: &Path,
    cnmysql: &Path,
    extra_images: &[String],
    state: &Path,
) -> anyhow::Result<(Node, ControlPlane)> {
    let lock = tokio::task::spawn_blocking(|| {
        one_at_a_time(true, &format!("a test (pid {})", std::process::id()))
    })
    .await??;
    let cp = ControlPlane::start(Options {
        controllers: CONTROLLERS.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    })
    .await?;
    let log = std::fs::File::create(state.join("node.log"))?;
    let child = Command::new(node_exe)
        .arg("run")
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .arg("--state-dir")
        .arg(state)
        .arg("--image")
        .arg(format!(
            "ghcr.io/cloudnative-mysql/cnmysql=/usr/local/bin/cnmysql={}",
            cnmysql.display()
        ))
        // The process node maps repositories, whatever the tag.
        .args(extra_images.iter().flat_map(|i| {
            let (repo, rest) = i.split_once('=').unwrap_or((i.as_str(), ""));
            [
                "--image".to_string(),
                format!("{}={rest}", crate::images::repository(repo)),
            ]
        }))
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", node_exe.display()))?;
    Ok((
        Node::Process {
            child: Some(child),
            _one_at_a_time: lock,
        },
        cp,
    ))
}
