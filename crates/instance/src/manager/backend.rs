//! The manager as the backend of its control API (`crate::api`): status,
//! semi-sync, and the in-place re-exec of a new executable with mysqld kept
//! running.

use super::*;

/// The control API's side of the manager: what `/status` and the probes
/// read, and the requests it carries out. It owns the history last seen
/// (for `/status`) and reads everything else from the concerns that own
/// it: the link's watched values, the relay refill proof, archiving, the
/// archive follower, the certificates, the re-exec.
pub(super) struct ControlBackend<C: ClusterState> {
    pub cluster: Arc<C>,
    pub peers: Arc<super::peers::Peers<C>>,
    pub link: Link,
    pub certs: Arc<certificates::Certificates>,
    pub progress: ProgressCell,
    pub refill: Arc<relay_refill::RelayRefill<C>>,
    pub archiving: Arc<archiving::Archiving>,
    pub archive_follower: Arc<archive_replica::ArchiveFollower<C>>,
    pub binlogs: Arc<super::binlog_retention::BinlogRetention<C>>,
    pub reexec: Arc<reexec::Reexec>,
    pub exe_hash: String,
    pub started_at: String,
    /// The GTID history last observed, and when it was first seen so
    /// (none for the first observation: its age is unknown).
    pub history_seen: Mutex<Option<(String, Option<String>)>>,
}

impl<C: ClusterState> Backend for ControlBackend<C> {
    async fn status(&self) -> InstanceStatus {
        self.observe().await
    }
    async fn cluster_status(&self) -> anyhow::Result<cnmysql_api::ClusterStatus> {
        self.cluster.get().await
    }
    fn config(&self) -> &InstanceConfig {
        &self.link.cfg
    }
    async fn apply_semi_sync(&self, s: &semisync::Settings) -> anyhow::Result<()> {
        if self.link.role() != Some(Desired::Primary) {
            anyhow::bail!("{} is not the primary", self.link.cfg.instance);
        }
        semi_sync::apply(&self.link, s).await
    }
    async fn reconcile_sql_objects(
        &self,
        objects: Vec<cnmysql_control::contract::SqlObject>,
    ) -> anyhow::Result<Vec<cnmysql_control::contract::SqlObjectResult>> {
        sql_objects::reconcile(&self.link, objects).await
    }
    async fn upgrade_system_tables(&self) -> anyhow::Result<String> {
        let phase = self.link.phase().0;
        anyhow::ensure!(
            phase == InstancePhase::Running && self.link.pool().is_some(),
            "not now: the instance is {phase:?}; try again once it is running"
        );
        let admin = read_secret(&self.link.cfg.secrets.admin_password)?;
        let done = crate::server_version::upgrade_system_tables(&self.link.cfg, &admin).await?;
        tracing::info!(result = %done, "system tables upgraded");
        Ok(done)
    }
    fn executable_path(&self) -> &std::path::Path {
        &self.reexec.exe_path
    }
    fn may_reexec(&self) -> Result<(), String> {
        let (phase, message) = self.link.phase();
        if self.reexec.pending() {
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
        self.reexec
            .clone()
            .start(self.link.supervisor.clone(), exe, upgraded, answered);
    }
}
