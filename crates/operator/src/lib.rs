//! `cnmysql operator`: a kube-rs controller on `Cluster`
//! (`mysql.cnmysql.io/v1`) that owns each Cluster's Pods, claims, Services,
//! Secrets, RBAC and disruption budgets. Decisions stay in `cnmysql-core`;
//! the objects are built by pure functions in [`objects`]; [`reconcile`]
//! reads, validates, builds, applies and reports.
//!
//! Several replicas may run: only the holder of the Lease
//! `cnmysql-operator` (in the operator's namespace) reconciles. `/metrics`,
//! `/healthz` and `/readyz` are served on one plain-HTTP port.

// Their order along the pipeline, each importing only earlier ones, is in
// docs/architecture.md (rustfmt sorts the declarations).
pub mod apply;
pub mod backup_store;
pub mod backups;
pub mod catalog;
pub mod certificates;
pub mod context;
pub mod deploy;
pub mod error;
pub mod events;
pub mod http;
pub mod instance_upgrade;
pub mod labels;
pub mod memory;
pub mod metrics;
pub mod nodes;
pub mod objects;
pub mod pods;
pub mod reconcile;
pub mod restart;
pub mod scheduled_backups;
pub mod sql_objects;
pub mod storage_growth;
pub mod topology;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
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
use crate::metrics::Metrics;
use crate::objects::Environment;

/// Name of the operator's leader-election Lease.
pub const LEADER_LEASE: &str = "cnmysql-operator";

#[derive(Clone, Debug)]
pub struct Options {
    pub connect: cnmysql_k8s::client::ConnectOptions,
    /// Namespaces to watch; empty for all.
    pub namespaces: Vec<String>,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    pub http_bind: SocketAddr,
    /// Run only while holding the leader Lease.
    pub leader_elect: bool,
    /// Namespace of the leader Lease.
    pub leader_election_namespace: String,
    /// This replica's identity in the Lease (its Pod name).
    pub identity: String,
    /// The operator's image, for the bootstrap-controller init containers.
    pub operator_image: String,
}

fn api<K>(client: &Client, ns: Option<&str>) -> Api<K>
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
    let controller = Controller::new(api::<Cluster>(&client, ns), watcher::Config::default());
    let store = controller.store();
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

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// The image of the container this operator runs in, read from its own
/// Pod: after `kubectl set image` on the Deployment it is the new image even
/// though `CNMYSQL_OPERATOR_IMAGE` still names the old one (instance Pods
/// copy their manager from it, so it must be the image of this executable).
/// None outside a Pod, or when the Pod cannot be read.
async fn own_image(client: &Client, opts: &Options) -> Option<String> {
    use k8s_openapi::api::core::v1::Pod;
    std::env::var_os("POD_NAME")?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &opts.leader_election_namespace);
    let pod = match pods.get(&opts.identity).await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(pod = %opts.identity, error = %e, "cannot read the operator's own Pod; using CNMYSQL_OPERATOR_IMAGE");
            return None;
        }
    };
    let containers = pod.spec?.containers;
    let image = containers
        .iter()
        .find(|c| c.name == "operator")
        .or(containers.first())?
        .image
        .clone()?;
    if image != opts.operator_image {
        tracing::info!(pod_image = %image, env_image = %opts.operator_image, "the operator's Pod runs another image than CNMYSQL_OPERATOR_IMAGE names; instance Pods follow the Pod");
    }
    Some(image)
}

pub async fn run(opts: Options) -> anyhow::Result<()> {
    let (client, _) = cnmysql_k8s::client::connect(&opts.connect).await?;
    let metrics = Metrics::default();
    let ready = Arc::new(AtomicBool::new(false));
    let listener = tokio::net::TcpListener::bind(opts.http_bind)
        .await
        .with_context(|| format!("--http-bind {}: cannot listen", opts.http_bind))?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics, /healthz and /readyz");
    tokio::spawn(http::serve(listener, metrics.clone(), ready.clone()));

    // Refuse to start without the CRD: say how to install it.
    let probe: Api<Cluster> = match opts.namespaces.first() {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    probe
        .list(&kube::api::ListParams::default().limit(1))
        .await
        .context("cannot list Clusters: is the CRD installed (kubectl apply --server-side -f deploy/crd.yaml) and may this account list them?")?;

    let operator_hash = cnmysql_control::executable_hash();
    tracing::info!(hash = %operator_hash, "operator executable");
    let operator_image = own_image(&client, &opts)
        .await
        .unwrap_or_else(|| opts.operator_image.clone());
    tracing::info!(image = %operator_image, "instance Pods take their manager from this image");
    let ctx = Arc::new(Context {
        memory: Default::default(),
        clusters: Default::default(),
        pods: Default::default(),
        secrets: Default::default(),
        nodes: Default::default(),
        stop: tokio::sync::watch::channel(false).0,
        client: client.clone(),
        env: Environment { operator_image },
        operator_hash,
        metrics: metrics.clone(),
    });

    let shutdown = futures::future::FutureExt::shared(Box::pin(shutdown_signal()));
    let (leading_tx, leading_rx) = tokio::sync::watch::channel(!opts.leader_elect);
    let mut lease_task = None;
    let mut forward = None;
    if opts.leader_elect {
        let lm = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), LEADER_LEASE)
            .with_namespace(&opts.leader_election_namespace)
            .with_identity(&opts.identity)
            .with_duration(15)
            .with_grace(5)
            .with_field_manager(labels::FIELD_MANAGER)
            .build()
            .await
            .context("leader election")?;
        let (mut rx, task) = lm.watch().await;
        lease_task = Some(task);
        forward = Some(tokio::spawn(async move {
            loop {
                let leading = *rx.borrow_and_update();
                let _ = leading_tx.send(leading);
                if rx.changed().await.is_err() {
                    let _ = leading_tx.send(false);
                    return;
                }
            }
        }));
        tracing::info!(lease = LEADER_LEASE, namespace = %opts.leader_election_namespace, identity = %opts.identity, "waiting to lead");
    }
    ready.store(true, Ordering::SeqCst);

    let mut leading = leading_rx.clone();
    tokio::select! {
        _ = shutdown.clone() => { return Ok(()); }
        r = leading.wait_for(|l| *l) => { r.context("leader election stopped")?; }
    }
    metrics.leader.set(1);
    tracing::info!("leading: reconciling Clusters");

    // Stop when asked, or when the lease is lost: another replica may be
    // leading already, so this one must stop writing at once.
    let mut lost = leading_rx.clone();
    let lost_lead = async move {
        let _ = lost.wait_for(|l| !*l).await;
    };
    let lost_lead = futures::future::FutureExt::shared(Box::pin(lost_lead));
    let stop = {
        let shutdown = shutdown.clone();
        let lost_lead = lost_lead.clone();
        async move {
            tokio::select! {
                _ = shutdown => {}
                _ = lost_lead => {}
            }
        }
    };
    let stop = futures::future::FutureExt::shared(Box::pin(stop));
    let namespaces: Vec<Option<String>> = if opts.namespaces.is_empty() {
        vec![None]
    } else {
        opts.namespaces.iter().cloned().map(Some).collect()
    };
    nodes::watch(&client, &ctx);
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
    ctx.stop.send_replace(true);
    metrics.leader.set(0);
    drop(leading_rx);
    if let Some(f) = forward {
        // Dropping the lease channel ends the lease manager's task.
        f.abort();
        let _ = f.await;
    }
    if let Some(task) = lease_task {
        // Give the lease up so a standby takes over at once.
        if let Ok(Ok(lm)) = tokio::time::timeout(Duration::from_secs(5), task).await
            && let Ok(lm) = lm
        {
            let _ = lm.release().await;
        }
    }
    if futures::FutureExt::now_or_never(lost_lead).is_some()
        && futures::FutureExt::now_or_never(shutdown).is_none()
    {
        anyhow::bail!(
            "lost the leader lease {LEADER_LEASE}; exiting so a fresh start rejoins the election"
        );
    }
    tracing::info!("stopped");
    Ok(())
}
