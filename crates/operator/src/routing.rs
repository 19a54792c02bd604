//! The rw Services, applied by the topology task right after the status
//! it writes and before the Pods are relabelled: they select the primary
//! by name (`labels::service_selector`), so a change of primary moves rw
//! in one write. kube-proxy applies Service changes at most once a second;
//! two relabels (the new primary in, then the old one out) used to leave
//! rw on both for up to that second, and a client on the old, read-only
//! one without writes (bench, real node: switchover gaps of 1.9 and 2.0 s
//! where the promotion took 0.9 s).
//!
//! The topology task is the only writer of these Services: the Cluster
//! reconcile, which may hold an older status, applies the others and
//! clears what was applied ([`forget`]) so that a Service someone changed
//! or deleted is applied again at the next pass.

use kube::api::PatchParams;

use cnmysql_api::Cluster;

use crate::context::Context;
use crate::labels::FIELD_MANAGER;
use crate::objects::services::rw_services;

/// Apply `cluster`'s rw Services as its status says, unless they are what
/// was applied last; nothing while reconciliation is paused.
pub async fn converge(ctx: &Context, cluster: &Cluster) -> anyhow::Result<()> {
    if cnmysql_core::pause::paused(&cluster.metadata.annotations.clone().unwrap_or_default()) {
        return Ok(());
    }
    let want = rw_services(cluster);
    if ctx.memory.routes_applied(cluster, &want) {
        return Ok(());
    }
    let ns = cluster.metadata.namespace.clone().unwrap_or_default();
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for s in &want {
        crate::apply::apply(ctx, &ns, s, &pp).await?;
    }
    ctx.memory.set_routes(cluster, want);
    Ok(())
}

/// Apply the rw Services again at the next pass.
pub fn forget(ctx: &Context, cluster: &Cluster) {
    ctx.memory.set_routes(cluster, Vec::new());
}
