//! The controllers a leading operator runs, per watched namespace (or one
//! for all): Clusters (with the watch caches the topology tasks read),
//! Backups, and declared databases, users and grants.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::runtime::controller::Controller;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Resource};

use cnmysql_api::Cluster;

use crate::context::Context;
use crate::{backups, catalog, cluster_changes, labels, reconcile, sql_objects};

/// Run every controller of every namespace in `namespaces` (empty: all)
/// until `stop` resolves.
pub async fn run(
    client: &Client,
    namespaces: &[String],
    ctx: &Arc<Context>,
    stop: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) {
    let namespaces: Vec<Option<String>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().cloned().map(Some).collect()
    };
    let controllers = namespaces.into_iter().flat_map(|ns| {
        [
            tokio::spawn(control(
                client.clone(),
                ns.clone(),
                ctx.clone(),
                stop.clone(),
            )),
            tokio::spawn(backups::control(
                client.clone(),
                ns.clone(),
                ctx.clone(),
                stop.clone(),
            )),
            tokio::spawn(sql_objects::control(
                client.clone(),
                ns,
                ctx.clone(),
                stop.clone(),
            )),
        ]
    });
    futures::future::join_all(controllers).await;
}

pub(crate) fn api<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope>,
    <K as Resource>::DynamicType: Default,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// A watch cache of `api`'s objects matching `config`, kept up to date by a
/// task of its own.
fn cache<K>(
    api: Api<K>,
    config: watcher::Config,
    what: &'static str,
    touched: impl Fn(&K) + Send + 'static,
) -> reflector::Store<K>
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (store, writer) = reflector::store();
    let events = reflector::reflector(writer, watcher(api, config))
        .default_backoff()
        .touched_objects();
    tokio::spawn(async move {
        futures::pin_mut!(events);
        while let Some(r) = events.next().await {
            match r {
                Ok(object) => touched(&object),
                Err(e) => tracing::warn!(error = %e, "watching {what}"),
            }
        }
    });
    store
}

/// One controller over the Clusters of one namespace (or all). Owned
/// objects are watched only when they carry the cluster label.
async fn control(
    client: Client,
    ns: Option<String>,
    ctx: Arc<Context>,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = ns.as_deref();
    let owned = watcher::Config::default().labels(labels::CLUSTER);
    // The Pods and Secrets again, in caches the topology tasks read (the
    // controller keeps its own watches private).
    // A change of one of a Cluster's Pods wakes its topology task at once
    // (a Pod deleted on notice hands over without waiting for a poll).
    let waking = ctx.clone();
    let wake = move |p: &Pod| {
        if let (Some(ns), Some(c)) = (
            p.metadata.namespace.as_deref(),
            kube::ResourceExt::labels(p).get(labels::CLUSTER),
        ) {
            waking.memory.waker(ns, c).notify_one();
        }
    };
    ctx.pods
        .lock()
        .unwrap()
        .push(cache(api::<Pod>(&client, ns), owned.clone(), "Pods", wake));
    ctx.secrets.lock().unwrap().push(cache(
        api::<Secret>(&client, ns),
        owned.clone(),
        "Secrets",
        |_| {},
    ));
    // The Clusters' own watch, filtered: progress figures alone (GTID
    // histories, lag) start no reconcile (`cluster_changes.rs`).
    let (store, writer) = reflector::store();
    let clusters = reflector::reflector(
        writer,
        watcher(api::<Cluster>(&client, ns), watcher::Config::default()),
    )
    .applied_objects()
    .predicate_filter(cluster_changes::relevant, Default::default());
    let controller = Controller::for_stream(clusters, store.clone());
    ctx.clusters.lock().unwrap().push(store.clone());
    let by_namespace = store.clone();
    let by_cluster = store;
    controller
        // A catalog that changes re-resolves the Clusters that name it.
        .watches(
            api::<cnmysql_api::ImageCatalog>(&client, ns),
            watcher::Config::default(),
            move |c| {
                let all = by_namespace.state();
                catalog::referring(
                    all.iter().map(|c| c.as_ref()),
                    cnmysql_api::CatalogKind::ImageCatalog,
                    kube::ResourceExt::namespace(&c).as_deref(),
                    &kube::ResourceExt::name_any(&c),
                )
            },
        )
        .watches(
            Api::<cnmysql_api::ClusterImageCatalog>::all(client.clone()),
            watcher::Config::default(),
            move |c| {
                let all = by_cluster.state();
                catalog::referring(
                    all.iter().map(|c| c.as_ref()),
                    cnmysql_api::CatalogKind::ClusterImageCatalog,
                    None,
                    &kube::ResourceExt::name_any(&c),
                )
            },
        )
        .owns(api::<Pod>(&client, ns), owned.clone())
        .owns(api::<PersistentVolumeClaim>(&client, ns), owned.clone())
        .owns(api::<Service>(&client, ns), owned.clone())
        .owns(api::<Secret>(&client, ns), owned.clone())
        .owns(api::<ServiceAccount>(&client, ns), owned.clone())
        .owns(api::<Role>(&client, ns), owned.clone())
        .owns(api::<RoleBinding>(&client, ns), owned.clone())
        .owns(api::<PodDisruptionBudget>(&client, ns), owned)
        .graceful_shutdown_on(stop)
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|r| async move {
            match r {
                Ok((obj, _)) => {
                    tracing::debug!(cluster = %obj.name, namespace = ?obj.namespace, "reconciled")
                }
                Err(e) => tracing::debug!(error = %e, "reconcile not done"),
            }
        })
        .await;
}
