//! Backups of a local cluster: `cnmysql local backup` and the schedules
//! (`scheduled_backups.rs`) take them through the engine's one workflow
//! (`cnmysql_engine::backup`); this file is the local platform of it —
//! the store from the manifest, the managers at their control ports on
//! this host, the status file and the events log.

use cnmysql_api::backup_resources::BackupTarget;
use cnmysql_backup::destination::Destination;
use cnmysql_control::base_backup::Source;
use cnmysql_control::client::ControlClient;
use cnmysql_core::event::Event;
use cnmysql_core::status::CloneProgress;
use cnmysql_core::status_change::StatusChange;
pub use cnmysql_engine::backup::Outcome;
use cnmysql_engine::backup::{BackupPlatform, Request};

use crate::state::{Ports, StateDir};

/// The store a local Cluster's `spec.backup` names, opened.
pub fn backup_destination(cluster: &cnmysql_api::Cluster) -> anyhow::Result<Destination> {
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let backup = cluster.spec.backup.as_ref().ok_or_else(|| {
        anyhow::anyhow!(
            "cluster {name} has no spec.backup: add spec.backup.objectStore.destinationPath (for example file:///var/backups/{name}) to its manifest and apply it"
        )
    })?;
    cnmysql_backup::destination::open_for_cluster(
        &backup.object_store,
        Some(&crate::state::backup_secrets_dir()),
        &name,
    )
    .map_err(anyhow::Error::msg)
}

/// The local platform of the backup workflow.
struct LocalBackups<'a> {
    dir: &'a StateDir,
    cluster: &'a cnmysql_api::Cluster,
    ports: Option<Ports>,
    show: &'a (dyn Fn(&str) + Sync),
}

impl BackupPlatform for LocalBackups<'_> {
    async fn destination(&mut self) -> Result<Destination, String> {
        backup_destination(self.cluster).map_err(|e| format!("{e:#}"))
    }

    async fn client(&mut self) -> Result<ControlClient, String> {
        let material = self.dir.operator_material().map_err(|e| e.to_string())?;
        Ok(ControlClient::new(
            material.client_config().map_err(|e| e.to_string())?,
        ))
    }

    async fn address(&mut self, instance: &str) -> Result<Option<(String, u16)>, String> {
        if self.ports.is_none() {
            self.ports = Some(self.dir.load_ports().map_err(|e| format!("{e:#}"))?);
        }
        let ports = self.ports.as_ref().expect("loaded above");
        Ok(ports
            .instances
            .get(instance)
            .map(|p| (ports.host.clone(), p.control)))
    }

    async fn change_status(&mut self, change: &StatusChange) -> anyhow::Result<bool> {
        self.dir.change_status(change)
    }

    async fn record(&mut self, e: &Event) {
        self.dir
            .event(e.warning, e.reason, e.instance.as_deref(), &e.message);
    }

    async fn started(
        &mut self,
        id: &str,
        dest: &Destination,
        first: &Source,
    ) -> Result<(), String> {
        (self.show)(&format!(
            "backing up as {id} into {} (from {}: {})",
            dest.path, first.instance, first.why
        ));
        Ok(())
    }

    async fn progress(&self, p: CloneProgress) {
        (self.show)(&p.describe());
    }
}

/// `cnmysql local backup`: a base backup into the store, from the
/// instance `target` prefers; the status records it as the last
/// successful or failed backup, and retention runs after it.
pub async fn backup(
    dir: &StateDir,
    target: BackupTarget,
    show: impl Fn(&str) + Sync,
) -> anyhow::Result<Outcome> {
    let cluster = dir.load_cluster()?;
    let status = dir.read_status()?;
    let mut platform = LocalBackups {
        dir,
        cluster: &cluster,
        ports: None,
        show: &show,
    };
    let request = Request {
        cluster: &cluster,
        status: &status,
        target,
        name: None,
        every: std::time::Duration::from_secs(5),
    };
    let o = cnmysql_engine::backup::take(&mut platform, &request)
        .await
        .map_err(anyhow::Error::msg)?;
    if let Some(e) = &o.retention_error {
        show(&format!("retention not applied: {e}"));
    }
    let rec = &o.taken.manifest.record;
    anyhow::ensure!(
        o.completed(),
        "base backup {} of {} failed: {}",
        o.id,
        rec.instance,
        rec.error
    );
    Ok(o)
}

/// Apply `spec.backup.retentionPolicy` (here `policy`) as of `now` (see
/// `cnmysql_engine::backup::retain`).
pub async fn apply_retention(
    dir: &StateDir,
    cluster: &cnmysql_api::Cluster,
    dest: &Destination,
    policy: &str,
    now: jiff::Timestamp,
) -> anyhow::Result<cnmysql_backup::retention::Pruned> {
    let mut platform = LocalBackups {
        dir,
        cluster,
        ports: None,
        show: &|_| {},
    };
    let flavor = cluster.spec.mysql.flavor;
    cnmysql_engine::backup::retain(&mut platform, dest, flavor, policy, now).await
}
