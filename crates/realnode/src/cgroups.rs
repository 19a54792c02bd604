//! The cgroups of a node's Pods, in every hierarchy: found, killed (thawed
//! first) and removed, for tearing a node down and for the faults.

use std::path::{Path, PathBuf};

/// Every cgroup v1 hierarchy mounted under /sys/fs/cgroup (or the single
/// v2 one).
pub fn hierarchies() -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        return vec![root.to_path_buf()];
    }
    std::fs::read_dir(root)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir() && !p.is_symlink())
                .collect()
        })
        .unwrap_or_default()
}

/// Every cgroup directory under `root` in every hierarchy, deepest first.
pub fn tree(root: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for h in hierarchies() {
        collect(&h.join(root.trim_start_matches('/')), &mut out);
    }
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    if !dir.is_dir() {
        return;
    }
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect(&e.path(), out);
            }
        }
    }
    out.push(dir.to_path_buf());
}

/// SIGKILL every process in the cgroups under `root` (thawed first, or a
/// frozen process would never die).
pub fn kill_cgroup_tree(root: &str) {
    for dir in tree(root) {
        let _ = std::fs::write(dir.join("freezer.state"), "THAWED");
        let _ = std::fs::write(dir.join("cgroup.freeze"), "0");
    }
    for _ in 0..20 {
        let mut left = 0;
        for dir in tree(root) {
            for pid in pids_in(&dir) {
                left += 1;
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        if left == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Remove the (empty) cgroups under `root`, deepest first.
pub fn remove_cgroup_tree(root: &str) {
    for dir in tree(root) {
        let _ = std::fs::remove_dir(&dir);
    }
}

fn pids_in(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}
