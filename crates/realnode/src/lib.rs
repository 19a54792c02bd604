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

pub mod containerd;
pub mod faults;
pub mod images;
pub mod kubelet;
pub mod leftovers;
pub mod net;
pub mod storage;

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
    /// The node's name (default `realnode`).
    pub name: Option<String>,
    /// Images to import besides the sandbox image.
    pub images: Vec<images::Image>,
    /// Keep every file in this directory instead of a temporary one.
    pub dir: Option<PathBuf>,
}

/// A running node and its control plane.
pub struct RealNode {
    pub name: String,
    pub net: net::Net,
    containerd: Option<containerd::Containerd>,
    kubelet: Option<Child>,
    proxy: Option<Child>,
    stop: tokio::sync::watch::Sender<bool>,
    dir: PathBuf,
    temp: bool,
    /// Dropped after the node is torn down (or taken by [`RealNode::split`]).
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

impl RealNode {
    pub async fn start(opts: Options) -> anyhow::Result<RealNode> {
        if let Some(why) = unavailable() {
            bail!("{why}");
        }
        let assets = cnmysql_envtest::assets()?;
        let name = opts.name.clone().unwrap_or_else(|| "realnode".into());
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
        let net = net::Net::create(&dir)?;
        let cp = ControlPlane::start(cnmysql_envtest::Options {
            controllers: vec!["*".into()],
            dir: Some(dir.join("cp")),
            address: Some(net.host_ip),
            service_cidr: Some(net.service_cidr.clone()),
            users: vec![
                (format!("system:node:{name}"), "system:nodes".into()),
                ("system:kube-proxy".into(), "system:node-proxier".into()),
            ],
            nodes: true,
            scheduler: true,
            ..Default::default()
        })
        .await;
        let cp = match cp {
            Ok(cp) => cp,
            Err(e) => {
                net.tear_down();
                return Err(e);
            }
        };
        let (stop, _) = tokio::sync::watch::channel(false);
        let mut node = RealNode {
            name,
            net,
            containerd: None,
            kubelet: None,
            proxy: None,
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
        let archives = all
            .iter()
            .map(|i| i.archive().map(|a| (a, i.name.clone())))
            .collect::<anyhow::Result<Vec<_>>>()?;
        tracing::info!(elapsed = ?t0.elapsed(), "images ready");
        let c = containerd::Containerd::start(&self.dir, &self.net)?;
        for (archive, name) in &archives {
            c.import(archive, name)?;
        }
        let socket = c.socket.clone();
        self.containerd = Some(c);
        let node_user = format!("system:node:{}", self.name);
        self.kubelet = Some(kubelet::start(
            &self.dir,
            &self.net,
            &self.name,
            &self.cp().kubeconfig_of(&node_user),
            &self.cp().dir().join("ca.crt"),
            &socket,
            assets,
        )?);
        self.wait_node_ready(Duration::from_secs(120)).await?;
        self.proxy = Some(kubelet::start_proxy(
            &self.dir,
            &self.net,
            &self.name,
            &self.cp().kubeconfig_of("system:kube-proxy"),
            assets,
        )?);
        let client = self.cp().client().await?;
        storage::install_class(&client).await?;
        tokio::spawn(storage::run(
            client.clone(),
            self.dir.clone(),
            self.name.clone(),
            self.stop.subscribe(),
        ));
        // Pods are refused until the controller manager made the default
        // ServiceAccount; Services need kube-proxy's rules.
        let sa: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
            kube::Api::namespaced(client, "default");
        self.until(
            "the default ServiceAccount",
            Duration::from_secs(60),
            || {
                let sa = sa.clone();
                async move { sa.get_opt("default").await.ok().flatten().map(|_| ()) }
            },
        )
        .await?;
        let ns = format!("--net={}", self.net.netns_path().display());
        self.until("kube-proxy's rules", Duration::from_secs(60), || {
            let ns = ns.clone();
            async move {
                net::run(
                    "nsenter",
                    &[&ns, "--", "nft", "list", "table", "ip", "kube-proxy"],
                )
                .ok()
                .map(|_| ())
            }
        })
        .await?;
        tracing::info!(elapsed = ?t0.elapsed(), node = %self.name, "node ready");
        Ok(())
    }

    async fn wait_node_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> =
            kube::Api::all(self.cp().client().await?);
        let name = self.name.clone();
        self.until("the node to be Ready", timeout, || {
            let (nodes, name) = (nodes.clone(), name.clone());
            async move {
                let n = nodes.get_opt(&name).await.ok().flatten()?;
                n.status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
                    .then_some(())
            }
        })
        .await
    }

    /// Wait for `f`, failing with the last lines of the node's logs when a
    /// process of the node has exited or the deadline passed.
    async fn until<F, Fut>(&mut self, what: &str, timeout: Duration, mut f: F) -> anyhow::Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<()>>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            if f().await.is_some() {
                return Ok(());
            }
            let mut exited = None;
            for (name, child) in [
                ("kubelet", &mut self.kubelet),
                ("kube-proxy", &mut self.proxy),
            ] {
                if let Some(c) = child
                    && let Some(st) = c.try_wait()?
                {
                    exited = Some((name, st));
                }
            }
            if let Some((name, st)) = exited {
                bail!(
                    "{name} exited ({st}) while waiting for {what}:\n{}",
                    self.log_tail(name)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "timed out after {timeout:?} waiting for {what}; kubelet:\n{}",
                    self.log_tail("kubelet")
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The last lines of a node process's log (`kubelet`, `kube-proxy`,
    /// `containerd`).
    pub fn log_tail(&self, name: &str) -> String {
        let text =
            std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(25)..].join("\n")
    }

    /// The node's directory (logs, containerd, the kubelet, volumes).
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

    pub fn containerd(&self) -> &containerd::Containerd {
        self.containerd
            .as_ref()
            .expect("containerd runs while the node is up")
    }

    /// Stop everything and undo every change to the host.
    fn tear_down(&mut self) {
        let _ = self.stop.send(true);
        // The kubelet first, so nothing is started again.
        if let Some(c) = self.kubelet.take() {
            stop_child(c);
        }
        faults::kill_cgroup_tree(&kubelet::cgroup_root(&self.net));
        if let Some(c) = self.proxy.take() {
            stop_child(c);
        }
        if let Some(c) = self.containerd.take() {
            let sock = c.socket.display().to_string();
            if let Some(child) = c.child {
                stop_child(child);
            }
            for pid in faults::pids_matching(&format!("-address {sock}")) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        unmount_under(&self.dir);
        faults::remove_cgroup_tree(&kubelet::cgroup_root(&self.net));
        self.net.tear_down();
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
