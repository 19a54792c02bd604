//! The server's binary log files as its index lists them, and syncing
//! them to disk (a replica's are not synced at every commit:
//! `cnmysql_core::replica_durability`).

use std::path::{Path, PathBuf};

use crate::config::InstanceConfig;

/// The binary log files, oldest first, from the index in `binlog_dir`
/// (names in it relative to the data directory, or absolute).
pub(crate) fn binlog_files(binlog_dir: &Path, data_dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let index = binlog_dir.join("mysql-bin.index");
    let text = std::fs::read_to_string(&index)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", index.display()))?;
    Ok(text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let p = Path::new(l.trim());
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                data_dir.join(p)
            }
        })
        .collect())
}

/// The size of `cfg`'s server's binary logs on disk, read from the files
/// its index lists, not asked of the server: `SHOW BINARY LOGS` waits
/// behind a binary log rotation (MariaDB and MySQL alike, measured), and a
/// rotation waits for every commit still waiting for a replica's
/// acknowledgement — on a primary just started, before any replica is
/// back, as long as that takes. A
/// status read that asked it then hung, the replicas waited on that status
/// before following, and nothing moved until the primary fenced itself
/// (Kubernetes fault suite, all Pods deleted: 17 s without writes). None
/// when the index cannot be read; a file purged meanwhile counts nothing.
pub(crate) fn total_bytes(cfg: &InstanceConfig) -> Option<u64> {
    let files = binlog_files(&cfg.binlog_dir(), &cfg.data_dir).ok()?;
    Some(
        files
            .iter()
            .filter_map(|f| std::fs::metadata(f).ok())
            .map(|m| m.len())
            .sum(),
    )
}

/// Every binary log file of `cfg`'s server, and the directory holding
/// them, synced to disk.
pub(crate) fn sync_all(cfg: &InstanceConfig) -> anyhow::Result<()> {
    let dir = cfg.binlog_dir();
    for f in binlog_files(&dir, &cfg.data_dir)? {
        // A file purged since the index was read is no longer needed.
        match std::fs::File::open(&f) {
            Ok(file) => file.sync_all()?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => anyhow::bail!("cannot sync {}: {e}", f.display()),
        }
    }
    std::fs::File::open(&dir)?.sync_all()?;
    Ok(())
}
