//! The kubelet and kube-proxy, in the node's network namespace.
//!
//! The kubelet sets six kernel tunables at start (overcommit, panic on
//! oops, …) that belong to the whole machine. It runs in a private mount
//! namespace where those `/proc/sys` files are small files holding the
//! values it wants, so the machine is left alone; its root directory is a
//! shared mount so the volumes it mounts there reach containerd. Its Pods'
//! cgroups live under their own root (`cgroupRoot`), so that several nodes
//! never share one and tearing down finds every process.

use std::path::Path;
use std::process::{Child, Stdio};

use anyhow::Context as _;

use crate::cgroups::hierarchies;
use crate::cmd::run;
use crate::net::Net;

/// The tunables the kubelet insists on, as files bind-mounted over /proc/sys.
const TUNABLES: [(&str, &str); 6] = [
    ("vm/overcommit_memory", "1"),
    ("vm/panic_on_oom", "0"),
    ("kernel/panic", "10"),
    ("kernel/panic_on_oops", "1"),
    ("kernel/keys/root_maxkeys", "1000000"),
    ("kernel/keys/root_maxbytes", "25000000"),
];

/// The cgroup root of the node's Pods, relative to each hierarchy.
pub fn cgroup_root(net: &Net) -> String {
    format!("/cnmysql-realnode-{}", net.slot)
}

fn config(dir: &Path, net: &Net, ca: &Path, socket: &Path) -> String {
    let d = dir.display();
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: {root}
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
failSwapOn: false
containerRuntimeEndpoint: unix://{sock}
address: {node_ip}
port: 10250
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
podLogsDir: {d}/kubelet/pod-logs
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {ca}}}
authorization:
  mode: Webhook
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {{memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}}
maxPods: 110
registerNode: true
"#,
        root = cgroup_root(net),
        sock = socket.display(),
        node_ip = net.node_ip,
        ca = ca.display(),
    )
}

/// Start the kubelet as node `name`.
pub fn start(
    dir: &Path,
    net: &Net,
    name: &str,
    kubeconfig: &Path,
    ca: &Path,
    socket: &Path,
    assets: &Path,
) -> anyhow::Result<Child> {
    let k = dir.join("kubelet");
    let root = k.join("root");
    for sub in ["root", "pod-logs", "pki", "tunables"] {
        std::fs::create_dir_all(k.join(sub))?;
    }
    for h in hierarchies() {
        std::fs::create_dir_all(h.join(cgroup_root(net).trim_start_matches('/')))
            .with_context(|| format!("making the Pods' cgroup root in {}", h.display()))?;
    }
    let r = root.display().to_string();
    // The volumes' file systems are mounted while the kubelet runs
    // (`volume_fs.rs`): under a shared mount, they reach its namespace.
    let volumes = dir.join("volumes");
    std::fs::create_dir_all(&volumes)?;
    for shared in [&root, &volumes] {
        if !is_mountpoint(shared) {
            let s = shared.display().to_string();
            run("mount", &["--bind", &s, &s])?;
            run("mount", &["--make-shared", &s])?;
        }
    }
    std::fs::write(k.join("config.yaml"), config(dir, net, ca, socket))?;
    let mut script = String::from("set -e\n");
    for (path, value) in TUNABLES {
        let file = k.join("tunables").join(path.replace('/', "_"));
        std::fs::write(&file, format!("{value}\n"))?;
        script.push_str(&format!(
            "mount --bind {} /proc/sys/{path}\n",
            file.display()
        ));
    }
    script.push_str(&format!(
        "exec {} --config {} --kubeconfig {} --root-dir {r} --hostname-override {name} --node-ip {} --cert-dir {} -v 2\n",
        assets.join("kubelet").display(),
        k.join("config.yaml").display(),
        kubeconfig.display(),
        net.node_ip,
        k.join("pki").display(),
    ));
    std::fs::write(k.join("start.sh"), script)?;
    let log = std::fs::File::create(dir.join("kubelet.log"))?;
    let mut cmd = net.command("unshare");
    cnmysql_envtest::die_with_parent(&mut cmd);
    cmd.args(["-m", "--propagation", "unchanged", "sh"])
        .arg(k.join("start.sh"))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting the kubelet")
}

/// Start kube-proxy (nftables mode) for node `name`.
pub fn start_proxy(
    dir: &Path,
    net: &Net,
    name: &str,
    kubeconfig: &Path,
    assets: &Path,
) -> anyhow::Result<Child> {
    // oomScoreAdj 0: it cannot lower its own here. conntrack zeros: leave
    // the machine-wide conntrack settings alone. minSyncPeriod: kube-proxy's
    // default (1 s, the least time between two rule syncs) unless
    // CNMYSQL_KUBE_PROXY_MIN_SYNC names another (e.g. `100ms`), which is how
    // the bench tells the product's own failover time from kube-proxy's.
    let min_sync = std::env::var("CNMYSQL_KUBE_PROXY_MIN_SYNC").unwrap_or_else(|_| "1s".into());
    let cfg = format!(
        r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: {kc}}}
hostnameOverride: {name}
mode: nftables
nftables: {{minSyncPeriod: {min_sync}}}
clusterCIDR: 10.244.0.0/16
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: [{node}/32]
oomScoreAdj: 0
conntrack: {{maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}}
"#,
        kc = kubeconfig.display(),
        node = net.node_ip,
    );
    std::fs::write(dir.join("kube-proxy.yaml"), cfg)?;
    let log = std::fs::File::create(dir.join("kube-proxy.log"))?;
    let mut cmd = net.command(&assets.join("kube-proxy").display().to_string());
    cnmysql_envtest::die_with_parent(&mut cmd);
    cmd.arg("--config")
        .arg(dir.join("kube-proxy.yaml"))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting kube-proxy")
}

pub fn is_mountpoint(p: &Path) -> bool {
    let target = p.display().to_string();
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(target.as_str()))
}
