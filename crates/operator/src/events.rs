//! The operator's Events on a Cluster, counted in its metrics.

use kube::ResourceExt;

use cnmysql_api::Cluster;
use cnmysql_k8s::events::{self, Kind};

use crate::context::Context;

/// Who reports the operator's Events.
pub const REPORTER: &str = "mysql.cnmysql.io/cnmysql-operator";

/// Record an Event; a failure to record one is logged, never fatal.
pub async fn publish(
    ctx: &Context,
    cluster: &Cluster,
    kind: Kind,
    action: &str,
    reason: &str,
    note: &str,
) {
    let type_ = match kind {
        Kind::Normal => "Normal",
        Kind::Warning => "Warning",
    };
    ctx.metrics.count_event(
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
        reason,
        type_,
    );
    if let Err(e) =
        events::publish(&ctx.client, cluster, REPORTER, kind, action, reason, note).await
    {
        tracing::warn!(error = %e, reason, "cannot record an event");
    }
}
