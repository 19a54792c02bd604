//! The `ScheduledBackup` controller: when its schedule says a backup is due
//! (`cnmysql_backup::schedule::plan`, the same decision the local
//! scheduler acts on), it makes a `Backup` named for the time it was due,
//! owned by the schedule; the `Backup` controller takes it.

use std::sync::Arc;
use std::time::Duration;

use cnmysql_api::backup_resources::{
    Backup, BackupRequestSpec, ScheduledBackup, ScheduledBackupStatus,
};
use cnmysql_backup::schedule::{self, Plan};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::context::Context;

async fn write(
    api: &Api<ScheduledBackup>,
    name: &str,
    st: &ScheduledBackupStatus,
) -> kube::Result<()> {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": st })),
    )
    .await
    .map(|_| ())
}

/// Make the ScheduledBackup's next Backup when it is due.
pub(crate) async fn reconcile(
    sb: Arc<ScheduledBackup>,
    ctx: Arc<Context>,
) -> Result<Action, kube::Error> {
    let ns = sb.namespace().unwrap_or_default();
    let name = sb.name_any();
    let api: Api<ScheduledBackup> = Api::namespaced(ctx.client.clone(), &ns);
    let mut st: ScheduledBackupStatus = sb.status.clone().unwrap_or_default();
    let now = jiff::Timestamp::now();
    let created = sb
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(now);
    let last: Option<jiff::Timestamp> = st.last_schedule_time.parse().ok();
    let s = &sb.spec;
    let plan = schedule::plan(&s.schedule, s.immediate, s.suspend, created, last, now);
    let before = st.clone();
    let (at, next) = match plan {
        Err(why) => {
            st.error = why;
            return settle(&api, &name, &before, &st, Action::await_change()).await;
        }
        Ok(Plan::Suspended) => {
            st.next_schedule_time.clear();
            return settle(&api, &name, &before, &st, Action::await_change()).await;
        }
        Ok(Plan::Wait(at)) => {
            st.next_schedule_time = at.to_string();
            st.error.clear();
            let wait = (at - now).get_seconds().max(1) as u64;
            let again = Action::requeue(Duration::from_secs(wait));
            return settle(&api, &name, &before, &st, again).await;
        }
        Ok(Plan::Due { at, next }) => (at, next),
    };
    let backup_name = format!("{name}-{}", at.strftime("%Y%m%d%H%M%S"));
    create_backup(&ctx, &sb, &backup_name).await?;
    st.last_schedule_time = at.to_string();
    st.last_backup_name = backup_name;
    st.error.clear();
    st.next_schedule_time = next.map(|t| t.to_string()).unwrap_or_default();
    write(&api, &name, &st).await?;
    Ok(Action::requeue(Duration::from_secs(1)))
}

/// Write the status when it changed; then `then`.
async fn settle(
    api: &Api<ScheduledBackup>,
    name: &str,
    before: &ScheduledBackupStatus,
    st: &ScheduledBackupStatus,
    then: Action,
) -> Result<Action, kube::Error> {
    if st != before {
        write(api, name, st).await?;
    }
    Ok(then)
}

/// The Backup for one due time (made once: a second attempt finds it).
async fn create_backup(
    ctx: &Context,
    sb: &ScheduledBackup,
    backup_name: &str,
) -> Result<(), kube::Error> {
    let ns = sb.namespace().unwrap_or_default();
    let backups: Api<Backup> = Api::namespaced(ctx.client.clone(), &ns);
    let mut b = Backup::new(
        backup_name,
        BackupRequestSpec {
            cluster: sb.spec.cluster.clone(),
            target: sb.spec.target,
        },
    );
    b.metadata = ObjectMeta {
        name: Some(backup_name.to_string()),
        namespace: Some(ns),
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
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}
