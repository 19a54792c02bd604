//! The local stand-in for the Cluster status and the primary Lease:
//! `status.json` and `lease.json` in the state directory, each changed only
//! under its lock.

use cnmysql_api::ClusterStatus;
use cnmysql_control::ClusterState;
use cnmysql_core::event::Event;

use crate::state::StateDir;

pub struct FileClusterState {
    dir: StateDir,
    seen: std::sync::Mutex<Option<std::time::SystemTime>>,
}

impl FileClusterState {
    pub fn new(dir: StateDir) -> Self {
        FileClusterState {
            dir,
            seen: std::sync::Mutex::new(None),
        }
    }
}

/// Modification time of a file, if it exists.
pub fn mtime(path: &std::path::Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

impl ClusterState for FileClusterState {
    async fn get(&self) -> anyhow::Result<ClusterStatus> {
        self.dir.read_status()
    }

    async fn claim_primary(&self, instance: &str) -> anyhow::Result<bool> {
        let mut claimed = false;
        let mut changed = false;
        self.dir.update_status(|s| {
            if s.target_primary.as_deref() == Some(instance) {
                claimed = true;
                if s.current_primary.as_deref() != Some(instance) {
                    changed = true;
                    s.current_primary = Some(instance.to_string());
                    s.current_primary_timestamp = Some(jiff::Timestamp::now().to_string());
                    s.primary_failing_since = None;
                }
            }
        })?;
        if changed {
            self.dir.event(
                false,
                "Promoted",
                Some(instance),
                &format!("{instance} is now the primary"),
            );
        }
        Ok(claimed)
    }

    async fn change<T: Send>(
        &self,
        mut f: impl FnMut(&mut ClusterStatus) -> (T, Option<Event>) + Send,
    ) -> anyhow::Result<T> {
        let mut out = None;
        self.dir.update_status(|s| out = Some(f(s)))?;
        let (value, event) = out.expect("update_status runs its closure");
        if let Some(e) = event {
            self.dir
                .event(e.warning, e.reason, e.instance.as_deref(), &e.message);
        }
        Ok(value)
    }

    async fn acquire_lease(&self, instance: &str) -> anyhow::Result<()> {
        let now = now_ms();
        self.dir.update_lease(|l| l.acquire(instance, now))?;
        Ok(())
    }

    async fn changed(&self) {
        let path = self.dir.status_file();
        loop {
            let now = mtime(&path);
            {
                let mut seen = self.seen.lock().unwrap();
                if *seen != now {
                    *seen = now;
                    return;
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(15)).await;
        }
    }

    async fn release_lease(&self, instance: &str) -> anyhow::Result<()> {
        self.dir.update_lease(|l| Ok(l.release(instance)))?;
        Ok(())
    }
}

impl StateDir {
    /// Apply `change` to the status under its lock; true when it applied.
    pub fn change_status(
        &self,
        change: &cnmysql_core::status_change::StatusChange,
    ) -> anyhow::Result<bool> {
        let mut applied = false;
        self.update_status(|st| applied = change.apply(st))?;
        Ok(applied)
    }
}
