//! The record, in the data directory, that this instance as primary may
//! have acknowledged commits no replica had. Written (durably, before the
//! server may do it) by convergence when it opens writes with semi-sync
//! off and by the semi-sync fallback; cleared by convergence once the
//! primary it follows holds its whole history; read by re-initialisation,
//! which does not let such an instance heal itself.

use crate::config::InstanceConfig;

const ACKED_ALONE: &str = "cnmysql-acked-alone";

/// Why commits may have been acknowledged without a replica, if they may.
pub(super) fn read(cfg: &InstanceConfig) -> Option<String> {
    std::fs::read_to_string(cfg.data_dir.join(ACKED_ALONE))
        .ok()
        .map(|s| s.trim().to_string())
}

/// Record, durably and before the server may do it, that commits may now
/// be acknowledged without a replica.
pub(super) fn record(cfg: &InstanceConfig, why: &str) -> anyhow::Result<()> {
    if read(cfg).is_some() {
        return Ok(());
    }
    let path = cfg.data_dir.join(ACKED_ALONE);
    let text = format!("{why} at {}", jiff::Timestamp::now());
    let f = std::fs::File::create(&path)?;
    std::io::Write::write_all(&mut &f, text.as_bytes())?;
    f.sync_all()?;
    std::fs::File::open(&cfg.data_dir)?.sync_all()?;
    tracing::warn!(
        why,
        "commits may be acknowledged without a replica: recorded"
    );
    Ok(())
}

/// Its whole history is now held by the primary it follows: nothing it
/// acknowledged alone can be lost any more.
pub(super) fn clear(cfg: &InstanceConfig) {
    if std::fs::remove_file(cfg.data_dir.join(ACKED_ALONE)).is_ok() {
        tracing::info!("following a primary that holds all of this instance's history");
    }
}
