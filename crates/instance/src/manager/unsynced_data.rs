//! A replica's data directory after the machine restarted while its logs
//! were not synced at every commit (`cnmysql_core::replica_durability`):
//! never started, replaced by a clone of the running primary; and the
//! record of running unsynced removed once a clean stop synced both logs.

use super::*;

impl<C: ClusterState> Manager<C> {
    /// Whether the recorded primary (another instance) answers with its
    /// server running: the source a clone is taken from.
    pub(super) async fn primary_running(&self, status: &cnmysql_api::ClusterStatus) -> bool {
        let Some(p) = status.current_primary.as_deref() else {
            return false;
        };
        p != self.cfg.instance && self.peers.status(p).await.is_some_and(|s| s.mysqld_running)
    }

    /// Remove the unsynced data (the next pass clones `primary`), with a
    /// warning event.
    pub(super) async fn remove_unsynced_data(&self, primary: &str) -> anyhow::Result<()> {
        let me = self.cfg.instance.clone();
        tracing::warn!(
            primary,
            "the machine restarted while this replica did not sync its logs at every commit; \
             replacing its data with a clone of the primary"
        );
        self.set_phase(
            InstancePhase::Cloning,
            format!("replacing data left unsynced by a machine restart with a clone of {primary}"),
        );
        let event = replica_durability::replaced_event(&me, primary);
        self.cluster.change(|_| ((), Some(event.clone()))).await?;
        let data = self.cfg.data_dir.clone();
        tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&data)).await??;
        Ok(())
    }

    /// After mysqld stopped: when it stopped cleanly (which wrote both
    /// logs out), the binary logs synced and the record removed, so that
    /// a planned restart of the machine costs no clone.
    pub(super) async fn synced_after_clean_stop(&self) {
        if !self.supervisor.stopped_cleanly() {
            return;
        }
        let cfg = self.cfg.clone();
        let done = tokio::task::spawn_blocking(move || {
            if !cfg.data_dir.join(replica_durability::MARK).exists() {
                return Ok(());
            }
            crate::binlog_files::sync_all(&cfg)?;
            unsynced_mark::clear(&cfg.data_dir)
        })
        .await;
        if let Ok(Err(e)) | Err(e) = done.map_err(anyhow::Error::from) {
            tracing::warn!(error = %e, "cannot sync the logs after a clean stop; the record stays");
        }
    }
}
