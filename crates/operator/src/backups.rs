//! The `Backup` controller, and the Kubernetes platform of the engine's
//! backup workflow (`cnmysql_engine::backup`, the same as locally): the
//! store opened with the Secrets the Cluster's `spec.backup` names
//! (`backup_store.rs`), the managers at their Pod IPs, the Cluster's status
//! and Events, and the Backup's own status (running, progress, how it
//! went). A Backup is taken once. `ScheduledBackup`s make Backups
//! (`scheduled_backups.rs`).

use std::sync::Arc;
use std::time::Duration;

use cnmysql_api::Cluster;
use cnmysql_api::backup_resources::{Backup, BackupObjectStatus, ScheduledBackup};
use cnmysql_api::names::CONTROL_PORT;
use cnmysql_backup::destination::Destination;
use cnmysql_control::base_backup::Source;
use cnmysql_control::client::ControlClient;
use cnmysql_core::event::Event;
use cnmysql_core::status::CloneProgress;
use cnmysql_core::status_change::StatusChange;
use cnmysql_engine::backup::{BackupPlatform, Outcome, Request};
use cnmysql_k8s::events::Kind;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::{Controller, watcher};
use serde_json::json;

use crate::context::Context;
use crate::events::publish;

/// Where `instance`'s control API answers: its Pod's IP, when it has one.
pub(crate) async fn instance_address(
    ctx: &Context,
    cluster: &Cluster,
    instance: &str,
) -> Result<Option<(String, u16)>, String> {
    let ns = cluster.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pod = pods
        .get_opt(instance)
        .await
        .map_err(|e| format!("Pod {instance}: {e}"))?;
    let ip = pod
        .and_then(|p| p.status?.pod_ip)
        .filter(|ip| !ip.is_empty());
    Ok(ip.map(|ip| (ip, CONTROL_PORT)))
}

async fn set_status(api: &Api<Backup>, name: &str, st: &BackupObjectStatus) -> kube::Result<()> {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": st })),
    )
    .await
    .map(|_| ())
}

/// Kubernetes as the platform of one Backup.
struct KubeBackups<'a> {
    ctx: &'a Context,
    cluster: &'a Cluster,
    api: &'a Api<Backup>,
    name: &'a str,
    /// The Backup's status once it began.
    running: Option<BackupObjectStatus>,
}

impl BackupPlatform for KubeBackups<'_> {
    async fn destination(&mut self) -> Result<Destination, String> {
        crate::backup_store::destination(self.ctx, self.cluster).await
    }

    async fn client(&mut self) -> Result<ControlClient, String> {
        let c = crate::topology::control_client(self.ctx, self.cluster)
            .await
            .map_err(|e| e.to_string())?;
        Ok(c.with_connect_timeout(Duration::from_secs(10)))
    }

    async fn address(&mut self, instance: &str) -> Result<Option<(String, u16)>, String> {
        instance_address(self.ctx, self.cluster, instance).await
    }

    async fn change_status(&mut self, change: &StatusChange) -> anyhow::Result<bool> {
        crate::topology::change_status(self.ctx, self.cluster, change).await
    }

    async fn record(&mut self, e: &Event) {
        let kind = if e.warning {
            Kind::Warning
        } else {
            Kind::Normal
        };
        tracing::info!(cluster = %self.cluster.name_any(), backup = %self.name, reason = e.reason, "{}", e.message);
        publish(self.ctx, self.cluster, kind, "Backup", e.reason, &e.message).await;
    }

    async fn started(
        &mut self,
        id: &str,
        dest: &Destination,
        first: &Source,
    ) -> Result<(), String> {
        let mut store = self
            .cluster
            .spec
            .backup
            .as_ref()
            .map(|b| b.object_store.clone())
            .unwrap_or_default();
        store.server_name = Some(store.server_name.unwrap_or_else(|| self.cluster.name_any()));
        let running = BackupObjectStatus {
            phase: "running".into(),
            backup_id: id.to_string(),
            destination_path: dest.path.clone(),
            object_store: Some(store),
            instance: first.instance.clone(),
            started_at: jiff::Timestamp::now().to_string(),
            message: format!("taking it on {}: {}", first.instance, first.why),
            ..Default::default()
        };
        set_status(self.api, self.name, &running)
            .await
            .map_err(|e| e.to_string())?;
        self.running = Some(running);
        Ok(())
    }

    async fn progress(&self, p: CloneProgress) {
        let st = json!({ "status": {
            "instance": p.source,
            "rawBytes": p.bytes,
            "progress": p.describe(),
        }});
        let patched = self
            .api
            .patch_status(self.name, &PatchParams::default(), &Patch::Merge(&st))
            .await;
        if let Err(e) = patched {
            tracing::debug!(backup = self.name, error = %e, "progress not recorded");
        }
    }
}

/// The Backup's status once the workflow ended.
fn final_status(running: BackupObjectStatus, o: &Outcome) -> BackupObjectStatus {
    let rec = &o.taken.manifest.record;
    BackupObjectStatus {
        phase: rec.phase.clone(),
        instance: rec.instance.clone(),
        message: o.taken.message.clone(),
        progress: format!(
            "{}: {} read in {}",
            rec.phase,
            cnmysql_core::status::human_bytes(rec.raw_bytes as f64),
            cnmysql_core::status::human_duration(o.elapsed.as_secs_f64())
        ),
        stopped_at: rec.stopped_at.clone(),
        gtid: rec.gtid.clone(),
        raw_bytes: rec.raw_bytes,
        stored_bytes: rec.stored_bytes,
        error: rec.error.clone(),
        ..running
    }
}

/// Whether a Backup was taken (or failed) already: it is never taken again.
fn finished(b: &Backup) -> bool {
    b.status
        .as_ref()
        .is_some_and(|s| s.phase == "completed" || s.phase == "failed")
}

/// Take one Backup, once.
async fn reconcile_backup(cached: Arc<Backup>, ctx: Arc<Context>) -> Result<Action, kube::Error> {
    if finished(&cached) {
        return Ok(Action::await_change());
    }
    let ns = cached.namespace().unwrap_or_default();
    let name = cached.name_any();
    let api: Api<Backup> = Api::namespaced(ctx.client.clone(), &ns);
    // The cache may still hold the object as it was before this
    // controller's own last write: the reconcile its "running" status
    // queued runs once the take that completed it is done, and would take
    // the Backup a second time. Decided on a fresh read.
    let Some(b) = api.get_opt(&name).await?.filter(|b| !finished(b)) else {
        return Ok(Action::await_change());
    };
    let clusters: Api<Cluster> = Api::namespaced(ctx.client.clone(), &ns);
    let fail = |why: String| BackupObjectStatus {
        phase: "failed".into(),
        error: why,
        stopped_at: jiff::Timestamp::now().to_string(),
        ..b.status.clone().unwrap_or_default()
    };
    let Some(cluster) = clusters.get_opt(&b.spec.cluster.name).await? else {
        let st = fail(format!(
            "spec.cluster.name: Cluster {} does not exist in {ns}",
            b.spec.cluster.name
        ));
        set_status(&api, &name, &st).await?;
        return Ok(Action::await_change());
    };
    let status = cluster.status.clone().unwrap_or_default();
    let request = Request {
        cluster: &cluster,
        status: &status,
        target: b.spec.target,
        name: Some(&name),
        every: Duration::from_secs(10),
    };
    let mut platform = KubeBackups {
        ctx: &ctx,
        cluster: &cluster,
        api: &api,
        name: &name,
        running: None,
    };
    // The workflow records the Event either way.
    let st = match cnmysql_engine::backup::take(&mut platform, &request).await {
        Ok(o) => final_status(platform.running.take().unwrap_or_default(), &o),
        Err(why) => fail(why),
    };
    set_status(&api, &name, &st).await?;
    Ok(Action::await_change())
}

fn error_policy<K>(_: Arc<K>, e: &kube::Error, _: Arc<Context>) -> Action {
    tracing::warn!(error = %e, "backup reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

/// Run the Backup and ScheduledBackup controllers until `stop`.
pub async fn control(
    client: kube::Client,
    ns: Option<String>,
    ctx: Arc<Context>,
    stop: impl std::future::Future<Output = ()> + Send + Sync + Clone + 'static,
) {
    let backups: Api<Backup> = match &ns {
        Some(n) => Api::namespaced(client.clone(), n),
        None => Api::all(client.clone()),
    };
    let scheduled: Api<ScheduledBackup> = match &ns {
        Some(n) => Api::namespaced(client.clone(), n),
        None => Api::all(client.clone()),
    };
    let one = Controller::new(backups, watcher::Config::default())
        .graceful_shutdown_on(stop.clone())
        .run(reconcile_backup, error_policy, ctx.clone())
        .for_each(|_| async {});
    let two = Controller::new(scheduled, watcher::Config::default())
        .graceful_shutdown_on(stop)
        .run(crate::scheduled_backups::reconcile, error_policy, ctx)
        .for_each(|_| async {});
    futures::join!(one, two);
}
