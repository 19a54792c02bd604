//! The object stores of Backups on Kubernetes: a Cluster's store opened
//! with the Secret keys its `spec.backup` names, and the completed Backup a
//! recovering Cluster names, resolved to its store and id.

use cnmysql_api::Cluster;
use cnmysql_api::backup::ObjectStore;
use cnmysql_api::backup_resources::Backup;
use cnmysql_backup::destination::{Destination, Secrets};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;

use crate::context::Context;

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
