//! containerd with runc and the CNI plugins from Debian, inside the node's
//! network namespace, every file under the node's directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::net::Net;

/// The sandbox image every Pod starts with (built by [`crate::images`]).
pub const PAUSE_IMAGE: &str = "localhost/cnmysql-realnode/pause:1";

pub struct Containerd {
    pub socket: PathBuf,
    /// The process, when this program started it (not when attached).
    pub child: Option<Child>,
}

fn config(dir: &Path, net: &Net) -> String {
    let d = dir.display();
    // restrict_oom_score_adj: these machines drop CAP_SYS_RESOURCE from
    // every bounding set, so runc cannot lower a sandbox's oom_score_adj.
    // netns_mounts_under_state_dir: Pod network namespaces under our state
    // directory, so that tearing down finds them all.
    format!(
        r#"version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"

[grpc]
  address = "{d}/containerd/containerd.sock"

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{d}/containerd/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "{PAUSE_IMAGE}"
    stream_server_address = "127.0.0.1"
    disable_apparmor = true
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "{d}/cni/net.d"
"#
    ) + &format!("# node slot {}\n", net.slot)
}

fn cni(dir: &Path, net: &Net) -> String {
    // hairpinMode lets a Pod reach itself through a ClusterIP; it cannot go
    // with promiscMode.
    serde_json::json!({
        "cniVersion": "0.4.0",
        "name": "cnmysql-realnode",
        "plugins": [
            {
                "type": "bridge",
                "bridge": net.bridge,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "dataDir": dir.join("cni/ipam"),
                    "ranges": [[{"subnet": net.pod_cidr, "gateway": net.pod_gateway.to_string()}]],
                    "routes": [{"dst": "0.0.0.0/0"}]
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "loopback"}
        ]
    })
    .to_string()
}

impl Containerd {
    pub fn start(dir: &Path, net: &Net) -> anyhow::Result<Containerd> {
        for bin in ["containerd", "ctr", "runc"] {
            if which(bin).is_none() {
                bail!(
                    "{bin} is not installed: apt-get install containerd runc containernetworking-plugins (scripts/setup --kube does it)"
                );
            }
        }
        if !Path::new("/usr/lib/cni/bridge").is_file() {
            bail!("/usr/lib/cni/bridge is missing: apt-get install containernetworking-plugins");
        }
        std::fs::create_dir_all(dir.join("containerd"))?;
        std::fs::create_dir_all(dir.join("cni/net.d"))?;
        std::fs::write(dir.join("containerd/config.toml"), config(dir, net))?;
        std::fs::write(dir.join("cni/net.d/10-cnmysql.conflist"), cni(dir, net))?;
        let socket = dir.join("containerd/containerd.sock");
        let log = std::fs::File::create(dir.join("containerd.log"))?;
        let mut cmd = net.command("containerd");
        cnmysql_envtest::die_with_parent(&mut cmd);
        let child = cmd
            .arg("--config")
            .arg(dir.join("containerd/config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting containerd")?;
        let c = Containerd {
            socket,
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while c.ctr(&["version"]).is_err() {
            if Instant::now() > deadline {
                bail!(
                    "containerd did not answer within 30 s; see {}",
                    dir.join("containerd.log").display()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(c)
    }

    /// The containerd of a running node whose directory is `dir`.
    pub fn attach(dir: &Path) -> anyhow::Result<Containerd> {
        let socket = dir.join("containerd/containerd.sock");
        if !socket.exists() {
            bail!(
                "no node runs from {} ({} is missing)",
                dir.display(),
                socket.display()
            );
        }
        Ok(Containerd {
            socket,
            child: None,
        })
    }

    /// Run `ctr` against this containerd, in the Kubernetes namespace.
    pub fn ctr(&self, args: &[&str]) -> anyhow::Result<String> {
        ctr_at(&self.socket, args)
    }

    /// Import an OCI archive under `name` (`repo:tag`).
    pub fn import(&self, archive: &Path, name: &str) -> anyhow::Result<()> {
        let base = name.rsplit_once(':').map(|(r, _)| r).unwrap_or(name);
        let path = archive.display().to_string();
        self.ctr(&["images", "import", "--base-name", base, &path])
            .with_context(|| format!("importing {name} from {path}"))?;
        let listed = self.ctr(&["images", "ls", "-q"])?;
        if !listed.lines().any(|l| l == name) {
            bail!("importing {path} did not make the image {name} (containerd has: {listed})");
        }
        Ok(())
    }
}

fn ctr_at(socket: &Path, args: &[&str]) -> anyhow::Result<String> {
    let sock = socket.display().to_string();
    let mut all = vec!["-a", sock.as_str(), "-n", "k8s.io"];
    all.extend_from_slice(args);
    crate::cmd::run("ctr", &all)
}

pub fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}
