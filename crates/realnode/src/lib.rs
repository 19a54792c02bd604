//! A real single-node Kubernetes on this machine, for development and
//! tests: etcd, kube-apiserver, kube-controller-manager and kube-scheduler
//! (from `KUBEBUILDER_ASSETS`) on the host, and containerd, runc, the CNI
//! bridge, the kubelet and kube-proxy (nftables) in the node's own network
//! namespace ([`net`]). Images are made here from the release binary and
//! the server image store ([`images`]); claims get local volumes
//! ([`storage`]). Everything it starts is stopped, and everything it
//! changed on the host undone, when it is dropped.
//!
//! Needs root, `KUBEBUILDER_ASSETS` with the six Kubernetes binaries, and
//! Debian's containerd, runc, containernetworking-plugins, umoci, nftables
//! and conntrack (`scripts/setup --kube` installs them).

mod cgroups;
mod cmd;
pub mod containerd;
pub mod faults;
pub mod images;
mod kubelet;
mod leftovers;
mod net;
mod storage;
mod volume_fs;
pub mod worker;

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::bail;
use cnmysql_envtest::ControlPlane;

/// What an ignored real-node test says about why it is ignored.
pub const IGNORE_REASON: &str = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube";

/// Options for [`RealNode::start`].
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The first node's name (default `realnode`); the others are
    /// `NAME-2`, `NAME-3`, ...
    pub name: Option<String>,
    /// How many nodes (default 1): each its own network namespace,
    /// containerd, kubelet, kube-proxy and local volumes, under one
    /// control plane.
    pub nodes: usize,
    /// Images to import into every node besides the sandbox image.
    pub images: Vec<images::Image>,
    /// Keep every file in this directory instead of a temporary one.
    pub dir: Option<PathBuf>,
}

/// Running nodes and their control plane.
pub struct RealNode {
    /// The first node's name.
    pub name: String,
    workers: Vec<worker::Worker>,
    stop: tokio::sync::watch::Sender<bool>,
    dir: PathBuf,
    temp: bool,
    /// Dropped after the nodes are torn down (or taken by [`RealNode::split`]).
    cp: Option<ControlPlane>,
}

/// The binaries the node needs from `KUBEBUILDER_ASSETS`.
const BINARIES: [&str; 6] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
];

/// Whether this machine can run a node now (for tests that skip with a
/// reason otherwise).
pub fn unavailable() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("a real node needs root".into());
    }
    let Some(dir) = std::env::var_os("KUBEBUILDER_ASSETS").map(PathBuf::from) else {
        return Some("KUBEBUILDER_ASSETS is not set".into());
    };
    BINARIES
        .iter()
        .find(|b| !dir.join(b).is_file())
        .map(|b| format!("KUBEBUILDER_ASSETS={}: {b} is missing there", dir.display()))
}

/// The directory of node `i` (0-based) under the first node's directory.
pub fn node_dir(dir: &Path, i: usize) -> PathBuf {
    if i == 0 {
        dir.to_path_buf()
    } else {
        dir.join(format!("node-{}", i + 1))
    }
}

impl RealNode {
    pub async fn start(opts: Options) -> anyhow::Result<RealNode> {
        if let Some(why) = unavailable() {
            bail!("{why}");
        }
        let assets = cnmysql_envtest::assets()?;
        let first = opts.name.clone().unwrap_or_else(|| "realnode".into());
        let names: Vec<String> = (0..opts.nodes.max(1))
            .map(|i| match i {
                0 => first.clone(),
                i => format!("{first}-{}", i + 1),
            })
            .collect();
        let (dir, temp) = match &opts.dir {
            Some(d) => {
                std::fs::create_dir_all(d)?;
                (std::fs::canonicalize(d)?, false)
            }
            None => {
                let t = std::env::temp_dir().join(format!(
                    "cnmysql-realnode-{}-{}",
                    std::process::id(),
                    Instant::now().elapsed().as_nanos() ^ rand_seed()
                ));
                std::fs::create_dir_all(&t)?;
                (t, true)
            }
        };
        let mut workers = Vec::new();
        for (i, name) in names.iter().enumerate() {
            match worker::Worker::new(name, &node_dir(&dir, i), names.len() > 1) {
                Ok(w) => workers.push(w),
                Err(e) => {
                    workers.iter_mut().for_each(worker::Worker::tear_down);
                    return Err(e);
                }
            }
        }
        let mut users: Vec<(String, String)> = names
            .iter()
            .map(|n| (format!("system:node:{n}"), "system:nodes".into()))
            .collect();
        users.push(("system:kube-proxy".into(), "system:node-proxier".into()));
        let cp = ControlPlane::start(cnmysql_envtest::Options {
            controllers: vec!["*".into()],
            dir: Some(dir.join("cp")),
            address: Some(workers[0].net.host_ip),
            service_cidr: Some(workers[0].net.service_cidr.clone()),
            users,
            nodes: true,
            scheduler: true,
            ..Default::default()
        })
        .await;
        let cp = match cp {
            Ok(cp) => cp,
            Err(e) => {
                workers.iter_mut().for_each(worker::Worker::tear_down);
                return Err(e);
            }
        };
        let (stop, _) = tokio::sync::watch::channel(false);
        let mut node = RealNode {
            name: first,
            workers,
            stop,
            dir,
            temp,
            cp: Some(cp),
        };
        node.bring_up(&assets, &opts.images).await?;
        Ok(node)
    }

    async fn bring_up(&mut self, assets: &Path, extra: &[images::Image]) -> anyhow::Result<()> {
        let t0 = Instant::now();
        let mut all = vec![images::pause()?];
        all.extend(extra.iter().cloned());
        let mut archives = Vec::new();
        for i in &all {
            match i.archive() {
                Ok(a) => archives.push((a, i.name.clone())),
                // A store image gone while the node started (a test's
                // temporary image, removed by its test): not this node's.
                Err(e) if i.vanished() => {
                    tracing::warn!(image = %i.name, error = %e, "image gone from the store; skipped")
                }
                Err(e) => return Err(e),
            }
        }
        tracing::info!(elapsed = ?t0.elapsed(), "images ready");
        let cp = self.cp.take().expect("the control plane runs");
        let client = cp.client().await;
        let mut result = client.map(|_| ());
        for w in &mut self.workers {
            if result.is_err() {
                break;
            }
            result = w
                .bring_up(&cp, assets, &archives, self.stop.subscribe())
                .await;
        }
        self.cp = Some(cp);
        result?;
        let client = self.cp().client().await?;
        storage::install_class(&client).await?;
        // Pods are refused until the controller manager made the default
        // ServiceAccount.
        let sa: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
            kube::Api::namespaced(client, "default");
        cnmysql_envtest::until(
            "the default ServiceAccount",
            Duration::from_secs(60),
            || {
                let sa = sa.clone();
                async move { sa.get_opt("default").await.ok().flatten().map(|_| ()) }
            },
        )
        .await?;
        tracing::info!(elapsed = ?t0.elapsed(), nodes = self.workers.len(), "nodes ready");
        Ok(())
    }

    /// The first node.
    pub fn first(&self) -> &worker::Worker {
        &self.workers[0]
    }

    /// Every node, the first first.
    pub fn nodes(&self) -> &[worker::Worker] {
        &self.workers
    }

    /// The node named `name`.
    pub fn node(&self, name: &str) -> anyhow::Result<&worker::Worker> {
        self.workers
            .iter()
            .find(|w| w.name == name)
            .ok_or_else(|| anyhow::anyhow!("no node {name} here"))
    }

    /// The node named `name`, to restart it.
    pub fn node_mut(&mut self, name: &str) -> anyhow::Result<&mut worker::Worker> {
        self.workers
            .iter_mut()
            .find(|w| w.name == name)
            .ok_or_else(|| anyhow::anyhow!("no node {name} here"))
    }

    /// The last lines of a process's log on the first node (`kubelet`,
    /// `kube-proxy`, `containerd`).
    pub fn log_tail(&self, name: &str) -> String {
        self.first().log_tail(name)
    }

    /// The first node's directory (logs, containerd, the kubelet, volumes);
    /// the others' are [`node_dir`] under it.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The administrator's kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        &self.cp().kubeconfig
    }

    /// The control plane.
    pub fn cp(&self) -> &ControlPlane {
        self.cp
            .as_ref()
            .expect("the control plane runs while the node is up")
    }

    /// Take the control plane out, for an owner that keeps both: it must
    /// drop the node first (its Pods' objects and its kubelet need the API
    /// server while they stop).
    pub fn split(mut self) -> (RealNode, ControlPlane) {
        let cp = self.cp.take().expect("the control plane is still here");
        (self, cp)
    }

    /// The first node's containerd.
    pub fn containerd(&self) -> &containerd::Containerd {
        self.first().containerd()
    }

    /// Stop everything and undo every change to the host.
    fn tear_down(&mut self) {
        let _ = self.stop.send(true);
        self.workers
            .iter_mut()
            .rev()
            .for_each(worker::Worker::tear_down);
        if self.temp && std::env::var_os("CNMYSQL_REALNODE_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        self.tear_down();
    }
}

fn rand_seed() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}

/// SIGTERM, then SIGKILL after 10 s if it has not exited.
pub fn stop_child(c: Child) {
    stop_child_within(c, Duration::from_secs(10));
}

/// SIGTERM, then SIGKILL after `grace` if it has not exited.
pub fn stop_child_within(mut c: Child, grace: Duration) {
    use nix::sys::signal::{Signal, kill};
    let _ = kill(nix::unistd::Pid::from_raw(c.id() as i32), Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = c.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = c.kill();
    let _ = c.wait();
}

/// Lazily unmount every mount under `dir`, deepest first.
pub(crate) fn unmount_under(dir: &Path) {
    let prefix = format!("{}/", dir.display());
    let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(1).map(str::to_string))
        .map(|m| m.replace("\\040", " "))
        .filter(|m| m.starts_with(&prefix))
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in mounts {
        let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
    }
}
