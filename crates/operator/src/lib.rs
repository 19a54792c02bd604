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
mod apply;
mod backup_store;
mod backups;
mod catalog;
mod certificates;
mod claims;
mod cluster_changes;
pub mod context;
mod controllers;
mod error;
mod events;
mod http;
pub mod install;
pub mod instance_upgrade;
mod labels;
mod leadership;
mod memory;
pub mod metrics;
mod nodes;
pub mod objects;
pub mod pods;
mod reconcile;
mod resource_version;
mod restart;
mod routing;
mod scheduled_backups;
mod sql_objects;
mod startup;
mod storage_growth;
pub mod topology;

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use crate::leadership::Leadership;
use crate::metrics::Metrics;

pub use leadership::LEADER_LEASE;

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

/// Serve, wait to lead, run the controllers until asked to stop or the
/// lead is lost, then leave the election.
pub async fn run(opts: Options) -> anyhow::Result<()> {
    let (client, _) = cnmysql_k8s::client::connect(&opts.connect).await?;
    let metrics = Metrics::default();
    let ready = startup::serve_http(&opts, &metrics).await?;
    startup::require_crd(&client, &opts).await?;
    let ctx = startup::context(&client, &opts, &metrics).await;
    let shutdown = leadership::shutdown_signal();
    let leadership = Leadership::join(&client, &opts).await?;
    ready.store(true, Ordering::SeqCst);
    if !leadership.lead(shutdown.clone()).await? {
        return Ok(());
    }
    metrics.leader.set(1);
    tracing::info!("leading: reconciling Clusters");
    nodes::watch(&client, &ctx);
    let (shutdown_or_lost, lost) = (shutdown.clone(), leadership.lost());
    let stop = async move {
        tokio::select! {
            _ = shutdown_or_lost => {}
            _ = lost => {}
        }
    };
    controllers::run(
        &client,
        &opts.namespaces,
        &ctx,
        futures::FutureExt::shared(Box::pin(stop)),
    )
    .await;
    ctx.stop.send_replace(true);
    metrics.leader.set(0);
    leadership.leave(shutdown).await?;
    tracing::info!("stopped");
    Ok(())
}
