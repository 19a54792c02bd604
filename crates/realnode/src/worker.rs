//! One node: its network namespace ([`crate::net`]), containerd, kubelet,
//! kube-proxy and local-volume provisioner, all under its own directory.
//! Several under one control plane make a multi-node cluster whose Pods
//! reach each other through the host.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::bail;
use cnmysql_envtest::ControlPlane;

use crate::{containerd, faults, kubelet, net, storage};

pub struct Worker {
    pub name: String,
    pub net: net::Net,
    containerd: Option<containerd::Containerd>,
    kubelet: Option<Child>,
    proxy: Option<Child>,
    dir: PathBuf,
}

impl Worker {
    /// Take an address slot and make the node's network; `routed`: Pods of
    /// other nodes reach this node's through the host.
    pub fn new(name: &str, dir: &Path, routed: bool) -> anyhow::Result<Worker> {
        std::fs::create_dir_all(dir)?;
        let net = net::Net::create(dir)?;
        if routed && let Err(e) = net.route_between_nodes() {
            net.tear_down();
            return Err(e);
        }
        Ok(Worker {
            name: name.to_string(),
            net,
            containerd: None,
            kubelet: None,
            proxy: None,
            dir: dir.to_path_buf(),
        })
    }

    /// Start containerd (and import `archives`), the kubelet and
    /// kube-proxy, and the provisioner of this node's volumes; return once
    /// the node is Ready and kube-proxy wrote its rules.
    pub async fn bring_up(
        &mut self,
        cp: &ControlPlane,
        assets: &Path,
        archives: &[(PathBuf, String)],
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> anyhow::Result<()> {
        self.start_runtime(cp, assets, archives).await?;
        let client = cp.client().await?;
        self.proxy = Some(kubelet::start_proxy(
            &self.dir,
            &self.net,
            &self.name,
            &cp.kubeconfig_of("system:kube-proxy"),
            assets,
        )?);
        tokio::spawn(storage::run(
            client,
            self.dir.clone(),
            self.name.clone(),
            stop,
        ));
        let ns = format!("--net={}", self.net.netns_path().display());
        self.until("kube-proxy's rules", Duration::from_secs(60), || {
            let ns = ns.clone();
            async move {
                crate::cmd::run(
                    "nsenter",
                    &[&ns, "--", "nft", "list", "table", "ip", "kube-proxy"],
                )
                .ok()
                .map(|_| ())
            }
        })
        .await
    }

    /// A restart of the node with its disks kept, as after a power cut:
    /// the kubelet and containerd killed, every container with them, the
    /// Pods' mounts gone; then containerd (its images and state kept) and
    /// the kubelet started again. Returns once the node is Ready again
    /// (the kubelet then starts the Pods bound to it anew), with the
    /// instant everything on it was dead.
    pub async fn restart(&mut self, cp: &ControlPlane, assets: &Path) -> anyhow::Result<Instant> {
        use nix::sys::signal::{Signal, kill};
        if let Some(mut c) = self.kubelet.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        crate::cgroups::kill_cgroup_tree(&kubelet::cgroup_root(&self.net));
        if let Some(c) = self.containerd.take() {
            let sock = c.socket.display().to_string();
            if let Some(mut child) = c.child {
                let _ = child.kill();
                let _ = child.wait();
            }
            for pid in faults::pids_matching(&format!("-address {sock}")) {
                let _ = kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        let dead = Instant::now();
        for sub in ["kubelet", "containerd"] {
            crate::unmount_under(&self.dir.join(sub));
        }
        self.start_runtime(cp, assets, &[]).await?;
        Ok(dead)
    }

    /// Start containerd (importing `archives`) and the kubelet; return
    /// once the node is Ready.
    async fn start_runtime(
        &mut self,
        cp: &ControlPlane,
        assets: &Path,
        archives: &[(PathBuf, String)],
    ) -> anyhow::Result<()> {
        let c = containerd::Containerd::start(&self.dir, &self.net)?;
        for (archive, name) in archives {
            c.import(archive, name)?;
        }
        let socket = c.socket.clone();
        self.containerd = Some(c);
        self.kubelet = Some(kubelet::start(
            &self.dir,
            &self.net,
            &self.name,
            &cp.kubeconfig_of(&format!("system:node:{}", self.name)),
            &cp.dir().join("ca.crt"),
            &socket,
            assets,
        )?);
        self.wait_ready(cp).await
    }

    /// The whole node hung (`true`) or running again: every Pod's
    /// processes in the freezer, the kubelet, containerd and kube-proxy
    /// stopped (SIGSTOP), as a machine that stalls.
    pub fn freeze(&self, frozen: bool) -> anyhow::Result<()> {
        use nix::sys::signal::{Signal, kill};
        let signal = if frozen {
            Signal::SIGSTOP
        } else {
            Signal::SIGCONT
        };
        let mut pids: Vec<i32> = [&self.kubelet, &self.proxy]
            .into_iter()
            .flatten()
            .map(|c| c.id() as i32)
            .collect();
        if let Some(c) = &self.containerd {
            pids.extend(c.child.as_ref().map(|c| c.id() as i32));
        }
        // Stopped before the Pods freeze, resumed after they thaw: the
        // kubelet never sees a Pod of its own stalled.
        if frozen {
            for p in &pids {
                let _ = kill(nix::unistd::Pid::from_raw(*p), signal);
            }
        }
        for h in crate::cgroups::hierarchies() {
            let root = h.join(kubelet::cgroup_root(&self.net).trim_start_matches('/'));
            let (file, value) = if root.join("cgroup.freeze").exists() {
                ("cgroup.freeze", if frozen { "1" } else { "0" })
            } else if root.join("freezer.state").exists() {
                ("freezer.state", if frozen { "FROZEN" } else { "THAWED" })
            } else {
                continue;
            };
            std::fs::write(root.join(file), value)?;
        }
        if !frozen {
            for p in &pids {
                let _ = kill(nix::unistd::Pid::from_raw(*p), signal);
            }
        }
        Ok(())
    }

    /// The node's link to the host, the other nodes and the control plane
    /// down (`true`) or up again: a node cut off the network.
    pub fn cut_off(&self, cut: bool) -> anyhow::Result<()> {
        self.net.set_link(!cut)
    }

    /// Wait until the API server says this node is Ready.
    async fn wait_ready(&mut self, cp: &ControlPlane) -> anyhow::Result<()> {
        let client = cp.client().await?;
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client);
        let name = self.name.clone();
        self.until("the node to be Ready", Duration::from_secs(120), || {
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
                    "{name} of node {} exited ({st}) while waiting for {what}:\n{}",
                    self.name,
                    self.log_tail(name)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "timed out after {timeout:?} waiting for {what} on node {}; kubelet:\n{}",
                    self.name,
                    self.log_tail("kubelet")
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The last lines of a process's log (`kubelet`, `kube-proxy`,
    /// `containerd`).
    pub fn log_tail(&self, name: &str) -> String {
        let text =
            std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(25)..].join("\n")
    }

    pub fn containerd(&self) -> &containerd::Containerd {
        self.containerd
            .as_ref()
            .expect("containerd runs while the node is up")
    }

    /// Stop everything of this node and undo its changes to the host.
    pub fn tear_down(&mut self) {
        // The kubelet first, so nothing is started again.
        if let Some(c) = self.kubelet.take() {
            crate::stop_child(c);
        }
        crate::cgroups::kill_cgroup_tree(&kubelet::cgroup_root(&self.net));
        if let Some(c) = self.proxy.take() {
            crate::stop_child(c);
        }
        if let Some(c) = self.containerd.take() {
            let sock = c.socket.display().to_string();
            if let Some(child) = c.child {
                crate::stop_child(child);
            }
            for pid in faults::pids_matching(&format!("-address {sock}")) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        crate::unmount_under(&self.dir);
        crate::cgroups::remove_cgroup_tree(&kubelet::cgroup_root(&self.net));
        self.net.tear_down();
    }
}
