//! What a node leaves when its owner is killed before it can tear down
//! (a test run stopped with SIGKILL): processes in the node's network
//! namespace and cgroups, mounts under its directory, the veth, the
//! namespace. The next node to take the slot removes them first.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

/// Remove what slot `slot`'s previous owner left; `dir` is that owner's
/// directory (empty when none was recorded).
pub fn remove(slot: u8, dir: &str) {
    let netns = Path::new("/run/netns").join(format!("cnmysql-rn-{slot}"));
    if let Ok(ns) = std::fs::metadata(&netns) {
        kill_in_netns(ns.ino());
    }
    let root = format!("/cnmysql-realnode-{slot}");
    crate::cgroups::kill_cgroup_tree(&root);
    if !dir.is_empty() && Path::new(dir).is_absolute() {
        crate::unmount_under(Path::new(dir));
    }
    crate::cgroups::remove_cgroup_tree(&root);
    let _ = crate::cmd::run("ip", &["link", "del", &format!("cnr{slot}-h")]);
    let _ = crate::cmd::run("ip", &["netns", "del", &format!("cnmysql-rn-{slot}")]);
    if !dir.is_empty() && dir.contains("cnmysql-realnode-") {
        // A temporary directory of a test run; kept ones are the user's.
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// SIGKILL every process whose network namespace is the one with inode
/// `ino` (the kubelet, containerd, kube-proxy and the Pods of a node).
fn kill_in_netns(ino: u64) {
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if std::fs::metadata(e.path().join("ns/net")).is_ok_and(|m| m.ino() == ino) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}
