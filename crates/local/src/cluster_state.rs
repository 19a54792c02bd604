//! The local stand-in for the Cluster status: `status.json` in the state
//! directory, changed only under its lock.

use cnmysql_api::ClusterStatus;
use cnmysql_instance::ClusterState;

use crate::state::StateDir;

pub struct FileClusterState {
    dir: StateDir,
}

impl FileClusterState {
    pub fn new(dir: StateDir) -> Self {
        FileClusterState { dir }
    }
}

impl ClusterState for FileClusterState {
    async fn get(&self) -> anyhow::Result<ClusterStatus> {
        self.dir.read_status()
    }

    async fn set_current_primary(&self, instance: &str) -> anyhow::Result<()> {
        self.dir.update_status(|s| {
            if s.current_primary.as_deref() != Some(instance) {
                s.current_primary = Some(instance.to_string());
                s.current_primary_timestamp = Some(jiff::Timestamp::now().to_string());
            }
        })?;
        Ok(())
    }
}
