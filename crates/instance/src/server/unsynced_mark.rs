//! The record, in the data directory, that its server runs with its logs
//! not synced at every commit, and under which boot of the kernel
//! (`cnmysql_core::replica_durability`): written and synced before the
//! server is relaxed, removed once both logs are on disk again.

use std::io::Write;
use std::path::{Path, PathBuf};

use cnmysql_core::replica_durability::{self, MARK};

use crate::config::InstanceConfig;

/// The running kernel's boot id: another after every restart of the
/// machine, the same in every container on it.
pub fn boot_id() -> anyhow::Result<String> {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map_err(|e| anyhow::anyhow!("cannot read the kernel's boot id: {e}"))?;
    Ok(text.trim().to_string())
}

fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(MARK)
}

/// Record that the server in `data_dir` is about to run relaxed under
/// this boot: on disk (the file and its directory synced) before it is.
pub fn mark(data_dir: &Path) -> anyhow::Result<()> {
    let boot = boot_id()?;
    let file = path(data_dir);
    if std::fs::read_to_string(&file).is_ok_and(|t| t.trim() == boot) {
        return Ok(());
    }
    let tmp = data_dir.join(format!("{MARK}.tmp"));
    let mut f = std::fs::File::create(&tmp)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", tmp.display()))?;
    f.write_all(format!("{boot}\n").as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, &file)?;
    std::fs::File::open(data_dir)?.sync_all()?;
    Ok(())
}

/// Remove the record: the server's logs are on disk. Synced, so that a
/// crash right after cannot bring it back.
pub fn clear(data_dir: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(path(data_dir)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => anyhow::bail!("cannot remove {}: {e}", path(data_dir).display()),
    }
    std::fs::File::open(data_dir)?.sync_all()?;
    Ok(())
}

/// Whether the data directory of `cfg` was left relaxed by an earlier
/// boot of the machine (its data may claim transactions it lacks).
pub fn unsynced(cfg: &InstanceConfig) -> bool {
    let mark = std::fs::read_to_string(path(&cfg.data_dir)).ok();
    match boot_id() {
        Ok(boot) => replica_durability::unsynced(mark.as_deref(), &boot),
        // No boot id to compare with: a record means unknown, so unsynced.
        Err(_) => mark.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_of_this_boot_is_written_once_and_removed() {
        let d = tempfile::tempdir().unwrap();
        mark(d.path()).unwrap();
        let text = std::fs::read_to_string(d.path().join(MARK)).unwrap();
        assert_eq!(text.trim(), boot_id().unwrap());
        mark(d.path()).unwrap();
        assert!(!d.path().join(format!("{MARK}.tmp")).exists());
        clear(d.path()).unwrap();
        assert!(!d.path().join(MARK).exists());
        clear(d.path()).unwrap();
    }
}
