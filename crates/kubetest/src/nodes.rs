//! What only the nodes can do for a test: where a Service answers, faults
//! on a Pod, a container's PID, where a claim's data is.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use cnmysql_envtest::ControlPlane;

use super::{KubeCluster, repo, until};

impl KubeCluster {
    pub(super) fn node_log_tail(&self) -> String {
        format!("kubelet:\n{}", self.node.log_tail("kubelet"))
    }

    /// An address of this machine the Pods reach (a server a test starts
    /// for them listens there): the host's end of the first node's link.
    pub fn host_address(&self) -> std::net::IpAddr {
        self.node.first().net.host_ip.into()
    }

    /// Where a Service answers from this machine: its ClusterIP (routed to
    /// the first node, served by kube-proxy).
    pub fn service(&self, namespace: &str, name: &str) -> Option<SocketAddr> {
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
        format!("{ip}:{port}").parse().ok()
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
        let n = &self.node;
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
        let n = &self.node;
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

    /// Restart the node a Pod runs on, its disks kept (see
    /// [`cnmysql_realnode::worker::Worker::restart`]): everything on it
    /// dies at once, the operator too when it runs there. The instant
    /// it was all dead.
    pub async fn restart_node_of(
        &mut self,
        namespace: &str,
        pod: &str,
    ) -> anyhow::Result<std::time::Instant> {
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(self.client.clone(), namespace);
        let node = node_of(&pods.get(pod).await?)?;
        let assets = cnmysql_envtest::assets()?;
        self.node.node_mut(&node)?.restart(&self.cp, &assets).await
    }

    /// The nodes' names, the first (whose link carries the control
    /// plane's address) first.
    pub fn node_names(&self) -> Vec<String> {
        self.node.nodes().iter().map(|w| w.name.clone()).collect()
    }

    /// Put a fault on a whole node: `freeze` (every Pod and the node's own
    /// processes stopped), `cut` (its link down), `heal` (both undone).
    pub fn node_fault(&self, node: &str, kind: &str) -> anyhow::Result<()> {
        let w = self.node.node(node)?;
        match kind {
            "freeze" => w.freeze(true),
            "cut" => w.cut_off(true),
            "heal" => {
                w.freeze(false)?;
                w.cut_off(false)
            }
            other => bail!("unknown node fault {other}"),
        }
    }

    /// Where a claim's data is on this machine.
    pub async fn claim_path(&self, namespace: &str, claim: &str) -> anyhow::Result<PathBuf> {
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
) -> anyhow::Result<(Box<cnmysql_realnode::RealNode>, ControlPlane)> {
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
    Ok((Box::new(node), cp))
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
