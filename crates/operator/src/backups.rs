//! The `Backup` and `ScheduledBackup` resources on Kubernetes. A Backup is
//! taken once: the store is opened with the Secrets its Cluster's
//! `spec.backup` names, the manager of the instance its target chooses
//! (`cnmysql_core::backup_source`) streams the backup
//! (`cnmysql_instance::base_backup::take`, the same as locally), the
//! Backup's status and the Cluster's `status.backup` record it, and
//! retention runs. A ScheduledBackup makes Backups on its cron schedule.

use std::sync::Arc;
use std::time::Duration;

use cnmysql_api::Cluster;
use cnmysql_api::backup::ObjectStore;
use cnmysql_api::backup_resources::{
    Backup, BackupObjectStatus, BackupRequestSpec, ScheduledBackup, ScheduledBackupStatus,
};
use cnmysql_api::names::CONTROL_PORT;
use cnmysql_backup::destination::{Destination, Secrets};
use cnmysql_core::status_change::StatusChange;
use cnmysql_k8s::events::Kind;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::{Controller, watcher};
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::context::Context;
use crate::events::publish;

/// The store a Cluster's `spec.backup` names, opened with its Secrets.
pub async fn destination(ctx: &Context, cluster: &Cluster) -> Result<Destination, String> {
    let name = cluster.name_any();
    let spec = cluster.spec.backup.as_ref().ok_or_else(|| {
        format!(
            "Cluster {name} has no spec.backup: name an object store in spec.backup.objectStore"
        )
    })?;
    open(
        ctx,
        &cluster.namespace().unwrap_or_default(),
        &spec.object_store,
        &name,
    )
    .await
}

/// Open a store, reading the Secret keys it names from `ns`.
pub async fn open(
    ctx: &Context,
    ns: &str,
    store: &ObjectStore,
    folder: &str,
) -> Result<Destination, String> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let mut secrets = Secrets::default();
    for r in store.secret_refs() {
        match api.get_opt(&r.name).await {
            Ok(Some(s)) => {
                if let Some(v) = s
                    .data
                    .as_ref()
                    .and_then(|d| d.get(&r.key))
                    .and_then(|b| String::from_utf8(b.0.clone()).ok())
                {
                    secrets.insert(r.clone(), v);
                }
            }
            Ok(None) => {}
            Err(e) => return Err(format!("Secret {} cannot be read: {e}", r.name)),
        }
    }
    let dest = cnmysql_backup::destination::open(store, &secrets)?;
    Ok(dest.under(store.server_name.as_deref().unwrap_or(folder)))
}

/// The store and base backup of the completed Backup `name` in `ns`, for
/// a Cluster that recovers from it (`spec.bootstrap.recovery.source.backup`).
/// An error, naming the field and the fix, when it cannot be used yet or
/// at all.
pub async fn resolve(
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<cnmysql_api::backup::RecoverySource, (bool, String)> {
    let field = "spec.bootstrap.recovery.source.backup.name";
    let api: Api<Backup> = Api::namespaced(ctx.client.clone(), ns);
    let b = api
        .get_opt(name)
        .await
        .map_err(|e| (true, format!("{field}: Backup {name} cannot be read: {e}")))?
        .ok_or_else(|| (false, format!("{field}: there is no Backup {name} in {ns}; name one `kubectl get backups -n {ns}` lists")))?;
    let st = b.status.unwrap_or_default();
    match st.phase.as_str() {
        "completed" => {}
        "failed" => {
            return Err((
                false,
                format!(
                    "{field}: Backup {name} failed ({}); name a completed one",
                    st.error
                ),
            ));
        }
        _ => {
            return Err((
                true,
                format!(
                    "{field}: Backup {name} has not completed yet (phase {:?}); recovery waits for it",
                    st.phase
                ),
            ));
        }
    }
    let store = st.object_store.ok_or_else(|| {
        (false, format!("{field}: Backup {name} does not record its store; name the store in source.objectStore and its id ({}) in source.backupId", st.backup_id))
    })?;
    Ok(cnmysql_api::backup::RecoverySource {
        object_store: Some(store),
        backup_id: Some(st.backup_id),
        backup: None,
    })
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

/// Take one Backup, once.
async fn reconcile_backup(b: Arc<Backup>, ctx: Arc<Context>) -> Result<Action, kube::Error> {
    let done = b
        .status
        .as_ref()
        .is_some_and(|s| s.phase == "completed" || s.phase == "failed");
    if done {
        return Ok(Action::await_change());
    }
    let ns = b.namespace().unwrap_or_default();
    let name = b.name_any();
    let api: Api<Backup> = Api::namespaced(ctx.client.clone(), &ns);
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
    let outcome = take(&ctx, &cluster, &b.spec, &api, &name).await;
    let st = match outcome {
        Ok(st) => st,
        Err(why) => fail(why),
    };
    set_status(&api, &name, &st).await?;
    let (kind, reason, note) = if st.phase == "completed" {
        (
            Kind::Normal,
            "BackupCompleted",
            format!(
                "backup {name} ({}) of {}: {} bytes stored as {}, consistent with {}",
                st.backup_id, st.instance, st.raw_bytes, st.stored_bytes, st.gtid
            ),
        )
    } else {
        (
            Kind::Warning,
            "BackupFailed",
            format!("backup {name} failed: {}", st.error),
        )
    };
    tracing::info!(cluster = %cluster.name_any(), backup = %name, reason, "{note}");
    publish(&ctx, &cluster, kind, "Backup", reason, &note).await;
    Ok(Action::await_change())
}

async fn take(
    ctx: &Context,
    cluster: &Cluster,
    spec: &BackupRequestSpec,
    api: &Api<Backup>,
    name: &str,
) -> Result<BackupObjectStatus, String> {
    let dest = destination(ctx, cluster).await?;
    let flavor = cluster.spec.mysql.flavor;
    let chosen = cnmysql_core::backup_source::sources(
        spec.target,
        flavor,
        &cluster.status.clone().unwrap_or_default(),
    )?;
    let ns = cluster.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let mut sources = Vec::new();
    for s in chosen {
        let ip = match pods.get_opt(&s.instance).await {
            Ok(p) => p
                .and_then(|p| p.status)
                .and_then(|s| s.pod_ip)
                .filter(|ip| !ip.is_empty()),
            Err(e) => return Err(format!("Pod {}: {e}", s.instance)),
        };
        if let Some(ip) = ip {
            sources.push(cnmysql_instance::base_backup::Source {
                instance: s.instance,
                host: ip,
                port: CONTROL_PORT,
                why: s.why,
            });
        }
    }
    let first = sources
        .first()
        .cloned()
        .ok_or_else(|| "no instance of the Cluster has a Pod IP to back up from".to_string())?;
    let client = crate::topology::control_client(ctx, cluster)
        .await
        .map_err(|e| e.to_string())?
        .with_connect_timeout(Duration::from_secs(10));
    let id = cnmysql_backup::base_backup::new_id(jiff::Timestamp::now());
    let mut store = cluster
        .spec
        .backup
        .as_ref()
        .map(|b| b.object_store.clone())
        .unwrap_or_default();
    store.server_name = Some(store.server_name.unwrap_or_else(|| cluster.name_any()));
    let running = BackupObjectStatus {
        phase: "running".into(),
        backup_id: id.clone(),
        destination_path: dest.path.clone(),
        object_store: Some(store),
        instance: first.instance.clone(),
        started_at: jiff::Timestamp::now().to_string(),
        message: format!("taking it on {}: {}", first.instance, first.why),
        ..Default::default()
    };
    set_status(api, name, &running)
        .await
        .map_err(|e| e.to_string())?;
    let began = std::time::Instant::now();
    let taken = cnmysql_instance::base_backup::take(
        &client,
        flavor,
        &sources,
        &id,
        &dest,
        Duration::from_secs(10),
        |p| async move {
            let st = json!({ "status": {
                "instance": p.source,
                "rawBytes": p.bytes,
                "progress": p.describe(),
            }});
            if let Err(e) = api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&st))
                .await
            {
                tracing::debug!(backup = name, error = %e, "progress not recorded");
            }
        },
    )
    .await;
    let m = &taken.manifest;
    let _ = crate::topology::change_status(
        ctx,
        cluster,
        &StatusChange::BackupTaken(Box::new(m.record.clone())),
    )
    .await;
    if m.completed()
        && let Some(policy) = cluster
            .spec
            .backup
            .as_ref()
            .and_then(|b| b.retention_policy.clone())
    {
        match cnmysql_backup::retention::apply(
            &dest,
            cluster.spec.mysql.flavor,
            &policy,
            jiff::Timestamp::now().as_microsecond(),
        )
        .await
        {
            Ok((pruned, first)) if !pruned.is_empty() => {
                let _ = crate::topology::change_status(
                    ctx,
                    cluster,
                    &StatusChange::FirstRecoverabilityPoint(first),
                )
                .await;
                publish(
                    ctx,
                    cluster,
                    Kind::Normal,
                    "Backup",
                    "BackupsPruned",
                    &pruned.describe(&policy),
                )
                .await;
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "retention not applied"),
        }
    }
    Ok(BackupObjectStatus {
        phase: m.record.phase.clone(),
        instance: m.record.instance.clone(),
        message: taken.message.clone(),
        progress: format!(
            "{}: {} read in {}",
            m.record.phase,
            cnmysql_core::status::human_bytes(m.record.raw_bytes as f64),
            cnmysql_core::status::human_duration(began.elapsed().as_secs_f64())
        ),
        stopped_at: m.record.stopped_at.clone(),
        gtid: m.record.gtid.clone(),
        raw_bytes: m.record.raw_bytes,
        stored_bytes: m.record.stored_bytes,
        error: m.record.error.clone(),
        ..running
    })
}

use cnmysql_backup::schedule::next_time;

/// Make the ScheduledBackup's next Backup when it is due.
async fn reconcile_scheduled(
    sb: Arc<ScheduledBackup>,
    ctx: Arc<Context>,
) -> Result<Action, kube::Error> {
    let ns = sb.namespace().unwrap_or_default();
    let name = sb.name_any();
    let api: Api<ScheduledBackup> = Api::namespaced(ctx.client.clone(), &ns);
    let mut st: ScheduledBackupStatus = sb.status.clone().unwrap_or_default();
    let now = jiff::Timestamp::now();
    let write = |st: ScheduledBackupStatus| {
        let api = api.clone();
        let name = name.clone();
        async move {
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "status": st })),
            )
            .await
            .map(|_| ())
        }
    };
    if sb.spec.suspend {
        if !st.next_schedule_time.is_empty() {
            st.next_schedule_time.clear();
            write(st).await?;
        }
        return Ok(Action::await_change());
    }
    let created = sb
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(now);
    let last: Option<jiff::Timestamp> = st.last_schedule_time.parse().ok();
    let due = cnmysql_backup::schedule::due(
        &sb.spec.schedule,
        sb.spec.immediate,
        false,
        created,
        last,
        now,
    );
    let due = match due {
        Ok(d) => d.unwrap_or(now),
        Err(why) => {
            if st.error != why {
                st.error = why;
                write(st).await?;
            }
            return Ok(Action::await_change());
        }
    };
    if due > now {
        let next = due.to_string();
        if st.next_schedule_time != next || !st.error.is_empty() {
            st.next_schedule_time = next;
            st.error.clear();
            write(st).await?;
        }
        let wait = (due - now).get_seconds().max(1) as u64;
        return Ok(Action::requeue(Duration::from_secs(wait)));
    }
    // Due: one Backup, named for the time it was due.
    let backup_name = format!("{name}-{}", due.strftime("%Y%m%d%H%M%S"));
    let backups: Api<Backup> = Api::namespaced(ctx.client.clone(), &ns);
    let mut b = Backup::new(
        &backup_name,
        BackupRequestSpec {
            cluster: sb.spec.cluster.clone(),
            target: sb.spec.target,
        },
    );
    b.metadata = ObjectMeta {
        name: Some(backup_name.clone()),
        namespace: Some(ns.clone()),
        owner_references: sb.controller_owner_ref(&()).map(|o| vec![o]),
        labels: Some(
            [(
                crate::labels::CLUSTER.to_string(),
                sb.spec.cluster.name.clone(),
            )]
            .into(),
        ),
        ..Default::default()
    };
    match backups.create(&PostParams::default(), &b).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e),
    }
    st.last_schedule_time = due.to_string();
    st.last_backup_name = backup_name;
    st.error.clear();
    st.next_schedule_time = next_time(&sb.spec.schedule, due)
        .map(|t| t.to_string())
        .unwrap_or_default();
    write(st).await?;
    Ok(Action::requeue(Duration::from_secs(1)))
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
        .run(reconcile_scheduled, error_policy, ctx)
        .for_each(|_| async {});
    futures::join!(one, two);
}
