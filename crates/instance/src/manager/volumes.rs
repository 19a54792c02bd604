//! How full the instance's volumes are, from the file systems themselves
//! (`statvfs`): the data directory's, and the binary logs' when they have
//! a directory of their own (`spec.storage.binlogs`). Measured on every
//! status, whether or not mysqld runs: a server stopped by a full disk is
//! when the figure matters most.

use std::path::Path;

use cnmysql_api::VolumeUsage;

use crate::config::InstanceConfig;

/// The instance's volumes; one that cannot be measured is left out (and
/// said once in the log by the caller's poll, not here).
pub(super) fn usage(cfg: &InstanceConfig) -> Vec<VolumeUsage> {
    let mut out: Vec<VolumeUsage> = measure("data", &cfg.data_dir).into_iter().collect();
    if let Some(dir) = &cfg.binlog_dir {
        out.extend(measure("binlogs", dir));
    }
    out
}

/// One file system's figures, in bytes.
fn measure(volume: &str, dir: &Path) -> Option<VolumeUsage> {
    let s = nix::sys::statvfs::statvfs(dir).ok()?;
    let block = s.fragment_size() as u64;
    let blocks = s.blocks() as u64;
    Some(VolumeUsage {
        volume: volume.to_string(),
        size_bytes: blocks.saturating_mul(block),
        used_bytes: blocks
            .saturating_sub(s.blocks_free() as u64)
            .saturating_mul(block),
        available_bytes: (s.blocks_available() as u64).saturating_mul(block),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_measured_and_a_missing_one_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let v = measure("data", dir.path()).unwrap();
        assert_eq!(v.volume, "data");
        assert!(v.size_bytes > 0 && v.used_bytes <= v.size_bytes, "{v:?}");
        assert!(v.available_bytes <= v.size_bytes - v.used_bytes, "{v:?}");
        assert!(measure("data", &dir.path().join("gone")).is_none());
    }
}
