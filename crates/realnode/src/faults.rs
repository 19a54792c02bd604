//! Faults as a real node suffers them: a Pod frozen (its cgroup in the freezer,
//! the way a stalled node behaves), a container's PID 1 killed, a Pod cut
//! off the network.

use std::path::PathBuf;

use anyhow::{Context as _, bail};

use crate::cgroups::tree;
use crate::net::Net;

/// Processes whose command line contains `needle`.
pub fn pids_matching(needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        if cmd.contains(needle) {
            out.push(pid);
        }
    }
    out
}

/// The freezer cgroups of a Pod (by its UID).
fn pod_freezers(root: &str, pod_uid: &str) -> Vec<PathBuf> {
    let name = format!("pod{pod_uid}");
    tree(root)
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy() == name))
        .filter(|p| p.join("freezer.state").exists() || p.join("cgroup.freeze").exists())
        .collect()
}

/// Freeze (or thaw) every process of a Pod.
pub fn freeze_pod(net: &Net, pod_uid: &str, frozen: bool) -> anyhow::Result<()> {
    let dirs = pod_freezers(&crate::kubelet::cgroup_root(net), pod_uid);
    if dirs.is_empty() {
        bail!("no freezer cgroup for Pod {pod_uid}");
    }
    for d in dirs {
        if d.join("freezer.state").exists() {
            std::fs::write(
                d.join("freezer.state"),
                if frozen { "FROZEN" } else { "THAWED" },
            )
        } else {
            std::fs::write(d.join("cgroup.freeze"), if frozen { "1" } else { "0" })
        }
        .with_context(|| format!("freezing {}", d.display()))?;
    }
    Ok(())
}

/// The host PID of a container's PID 1, from containerd (`ctr task ls`).
pub fn container_pid(c: &crate::containerd::Containerd, container_id: &str) -> anyhow::Result<i32> {
    let id = container_id.trim_start_matches("containerd://");
    let out = c.ctr(&["tasks", "ls"])?;
    out.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?, f.next()?.parse::<i32>().ok()?, f.next()?))
        })
        .find(|(task, _, status)| *task == id && *status == "RUNNING")
        .map(|(_, pid, _)| pid)
        .with_context(|| format!("container {id} has no running task"))
}

/// How much of a Pod's traffic [`cut_pod`] drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Every packet to and from it: off the other Pods, the host and the
    /// control plane, and the kubelet's probes fail.
    All,
    /// All but what passes between it and the node itself (the kubelet's
    /// probes): isolated from every peer and the API server, yet alive.
    ButTheNode,
    /// Nothing: the cut is healed.
    None,
}

/// Cut a Pod off the network inside the node (nftables rules in the
/// node's namespace), or heal it.
pub fn cut_pod(net: &Net, pod_ip: &str, cut: Cut) -> anyhow::Result<()> {
    if pod_ip.is_empty() {
        bail!("the Pod has no address");
    }
    let table = format!("cnmysql-cut-{}", pod_ip.replace('.', "-"));
    let _ = net.run_in("nft", &["delete", "table", "inet", &table]);
    let _ = net.run_in("nft", &["delete", "table", "bridge", &table]);
    let node_rules = match cut {
        Cut::None => return Ok(()),
        Cut::ButTheNode => String::new(),
        Cut::All => format!(
            "chain input {{ type filter hook input priority -200; ip saddr {pod_ip} drop; }}\n\
             chain output {{ type filter hook output priority -200; ip daddr {pod_ip} drop; }}\n"
        ),
    };
    // Routed traffic (to the host, the API server, ClusterIPs) in the inet
    // table; traffic between Pods of the bridge in the bridge table, which
    // sees it whether or not the kernel hands bridged packets to IP rules.
    let rules = format!(
        "table inet {table} {{\n\
         chain forward {{ type filter hook forward priority -200; ip saddr {pod_ip} drop; ip daddr {pod_ip} drop; }}\n\
         {node_rules}}}\n\
         table bridge {table} {{\n\
         chain forward {{ type filter hook forward priority -200; ip saddr {pod_ip} drop; ip daddr {pod_ip} drop; }}\n\
         }}\n"
    );
    let file = std::env::temp_dir().join(format!("{table}.nft"));
    std::fs::write(&file, rules)?;
    let applied = net.run_in("nft", &["-f", &file.display().to_string()]);
    let _ = std::fs::remove_file(&file);
    applied.map(|_| ())
}
