//! The manager as the backend of its control API (`crate::api`): status,
//! semi-sync, and the in-place re-exec of a new executable with mysqld kept
//! running.

use super::*;

impl<C: ClusterState> Backend for Manager<C> {
    async fn status(&self) -> InstanceStatus {
        self.observe().await
    }
    async fn cluster_status(&self) -> anyhow::Result<cnmysql_api::ClusterStatus> {
        self.cluster.get().await
    }
    fn config(&self) -> &InstanceConfig {
        &self.cfg
    }
    async fn apply_semi_sync(&self, s: &semisync::Settings) -> anyhow::Result<()> {
        if self.link.role() != Some(Desired::Primary) {
            anyhow::bail!("{} is not the primary", self.cfg.instance);
        }
        semi_sync::apply(&self.link, s).await
    }
    async fn reconcile_sql_objects(
        &self,
        objects: Vec<cnmysql_control::contract::SqlObject>,
    ) -> anyhow::Result<Vec<cnmysql_control::contract::SqlObjectResult>> {
        Manager::reconcile_sql_objects(self, objects).await
    }
    async fn upgrade_system_tables(&self) -> anyhow::Result<String> {
        let phase = self.phase.lock().unwrap().0;
        anyhow::ensure!(
            phase == InstancePhase::Running && self.pool().is_some(),
            "not now: the instance is {phase:?}; try again once it is running"
        );
        let admin = read_secret(&self.cfg.secrets.admin_password)?;
        let done = crate::server_version::upgrade_system_tables(&self.cfg, &admin).await?;
        tracing::info!(result = %done, "system tables upgraded");
        Ok(done)
    }
    fn executable_path(&self) -> &std::path::Path {
        &self.exe_path
    }
    fn may_reexec(&self) -> Result<(), String> {
        let (phase, message) = self.phase.lock().unwrap().clone();
        if self
            .reexec_pending
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Err("a re-exec is already under way".into());
        }
        match phase {
            InstancePhase::Running | InstancePhase::Restarting | InstancePhase::Failed => Ok(()),
            _ => Err(format!(
                "not now: the instance is {phase:?}{}; try again once it is running",
                if message.is_empty() {
                    String::new()
                } else {
                    format!(" ({message})")
                }
            )),
        }
    }
    fn reexec(
        self: Arc<Self>,
        exe: std::path::PathBuf,
        upgraded: bool,
        answered: tokio::sync::oneshot::Receiver<()>,
    ) {
        use std::sync::atomic::Ordering;
        if self.reexec_pending.swap(true, Ordering::SeqCst) {
            return;
        }
        tokio::spawn(async move {
            // The answer is written (or the caller left, or it took too
            // long); a moment more for the TLS layer to flush it.
            let _ = tokio::time::timeout(crate::upgrade::ANSWER_TIMEOUT, answered).await;
            tokio::time::sleep(crate::upgrade::FLUSH_GRACE).await;
            let mysqld = match self.supervisor.state() {
                ServerState::Running { pid } => Some(pid),
                _ => None,
            };
            let Some(fd) = *self.log_fd.lock().unwrap() else {
                tracing::error!("cannot re-exec: the log FIFO is not open");
                self.reexec_pending.store(false, Ordering::SeqCst);
                return;
            };
            // Requests already being served finish first; new ones wait in
            // the backlog for the next image.
            let open = self.gate.quiesce(crate::upgrade::QUIESCE_TIMEOUT).await;
            if open > 0 {
                tracing::warn!(open, "re-executing with control API connections still open");
            }
            let listeners = self.listen_fds.lock().unwrap().clone();
            let e = crate::upgrade::reexec(&exe, mysqld, fd, &listeners);
            self.gate.release();
            tracing::error!(error = %e, "re-exec failed; this manager goes on supervising mysqld");
            if upgraded {
                crate::upgrade::restore_previous(&exe);
            }
            self.reexec_pending.store(false, Ordering::SeqCst);
        });
    }
}
