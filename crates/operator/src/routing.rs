//! The routes: every Service's EndpointSlices (`objects/endpoints.rs`),
//! applied by the topology task before its poll (a Pod's new address or
//! readiness) and right after the status its pass writes, before the Pods
//! are relabelled, from that status and the Pods' readiness
//! (`cnmysql_core::services::routes_following_status`). A change
//! of primary moves `rw`, `ro` and `r` in one pass, and nothing moves them
//! before it: kube-proxy applies changes at most once a second, and a
//! change made early (a Pod turning terminating, a relabel) held the move
//! of `rw` that followed until that second was over.
//!
//! The topology task is the only writer of the slices. The Cluster
//! reconcile asks for them again ([`ask_again`]), so that a slice someone
//! changed or deleted is applied again at the next pass, and wakes the
//! task when the status it sees would move rw ([`wake_if_moved`]): an
//! instance manager records its own promotion (`currentPrimary`), and rw
//! then follows within the next pass, not after the task's next period
//! (200 ms while the primary changes). Whenever it applies, the task also
//! removes slices no Service of the Cluster has any more, and those the
//! EndpointSlice controller made while a Service had a selector (an older
//! operator's, or someone's edit the reconcile took back).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ListParams, PatchParams};
use kube::{Api, ResourceExt};

use cnmysql_api::Cluster;
use cnmysql_core::services::{Routes, rw_following_status};

use crate::context::Context;
use crate::labels::{CLUSTER, FIELD_MANAGER};
use crate::objects::endpoints::{self, CONTROLLER, MANAGED_BY, MANAGER};

/// Apply `cluster`'s slices for `routes`, unless they are what was
/// applied last or follow a newer copy of the Cluster (a pass that wrote
/// no status reads the watch cache, which can lag the task's own last
/// write: rw must not go back to the former primary for a pass); nothing
/// while reconciliation is paused.
pub async fn converge(
    ctx: &Context,
    cluster: &Cluster,
    routes: &Routes,
    pods: &BTreeMap<String, Pod>,
) -> anyhow::Result<()> {
    if cnmysql_core::pause::paused(cluster.annotations()) {
        return Ok(());
    }
    let want = endpoints::slices(cluster, routes, pods);
    if ctx.memory.routes_applied(cluster, &want, true) || ctx.memory.routes_newer_than(cluster) {
        return Ok(());
    }
    let ns = cluster.namespace().unwrap_or_default();
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for s in &want {
        crate::apply::apply(ctx, &ns, s, &pp).await?;
    }
    remove_others(ctx, cluster, &ns, &want).await?;
    ctx.memory.set_routes(cluster, want, routes.rw.clone());
    Ok(())
}

/// Delete the Cluster's slices that are not `want`: ours for a Service
/// that is gone (or an address family no longer used), and any the
/// EndpointSlice controller made (kube-proxy would route by them too).
async fn remove_others(
    ctx: &Context,
    cluster: &Cluster,
    ns: &str,
    want: &[EndpointSlice],
) -> anyhow::Result<()> {
    let api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), ns);
    let have = api
        .list(&ListParams::default().labels(&format!("{CLUSTER}={}", cluster.name_any())))
        .await?;
    for s in have.items {
        let by = s.labels().get(MANAGED_BY).map(String::as_str);
        let ours_unwanted =
            by == Some(MANAGER) && !want.iter().any(|w| w.name_any() == s.name_any());
        if !(ours_unwanted || by == Some(CONTROLLER)) {
            continue;
        }
        tracing::info!(slice = %s.name_any(), managed_by = ?by, "deleting an EndpointSlice the Cluster's routes do not have");
        crate::apply::delete_if_present(&api, &s.name_any()).await?;
    }
    Ok(())
}

/// Wake the topology task when the status `cluster` carries would move rw
/// from where it was last applied.
pub fn wake_if_moved(ctx: &Context, cluster: &Cluster) {
    let status = cluster.status.clone().unwrap_or_default();
    if ctx.memory.routed_to(cluster, rw_following_status(&status))
        || ctx.memory.routes_newer_than(cluster)
    {
        return;
    }
    let ns = cluster.namespace().unwrap_or_default();
    ctx.memory.waker(&ns, &cluster.name_any()).notify_one();
}

/// Have the routes applied again at the next pass (a reconcile repairs
/// what someone changed).
pub fn ask_again(ctx: &Context, cluster: &Cluster) {
    ctx.memory.routes_stale(cluster);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use cnmysql_core::services::Routes;

    use crate::memory::Memories;
    use crate::objects::endpoints::slices;
    use crate::objects::testutil::cluster;

    fn routes(rw: &str) -> Routes {
        Routes {
            rw: Some(rw.into()),
            ro: Vec::new(),
            r: vec![rw.into()],
        }
    }

    /// What was applied is not applied again; a reconcile's request is;
    /// a status that names another primary is a move (the task is woken)
    /// whether or not a reconcile asked.
    #[test]
    fn applied_routes_are_remembered_until_asked_again_or_moved() {
        let m = Memories::default();
        let c = cluster("instances: 3\n");
        let want = slices(&c, &routes("db-1"), &BTreeMap::new());
        assert!(!m.routes_applied(&c, &want, true), "never applied");
        assert!(!m.routed_to(&c, Some("db-1")), "never applied");
        m.set_routes(&c, want.clone(), Some("db-1".into()));
        assert!(m.routes_applied(&c, &want, true));
        m.routes_stale(&c);
        assert!(!m.routes_applied(&c, &want, true), "asked again");
        assert!(m.routes_applied(&c, &want, false), "but not moved");
        assert!(m.routed_to(&c, Some("db-1")));
        assert!(!m.routed_to(&c, Some("db-2")), "moved");
        assert!(!m.routed_to(&c, None), "moved: a failover routes nowhere");
    }

    /// The task wrote a failover's status (the Cluster at resourceVersion
    /// 200) and moved rw to db-2; its next pass wrote nothing and read the
    /// watch cache, still at 150 with db-1 primary: rw stays where it is
    /// until the cache holds the write or something newer.
    #[test]
    fn a_copy_older_than_the_status_rw_follows_does_not_move_it_back() {
        let m = Memories::default();
        let at = |rv: &str| {
            let mut c = cluster("instances: 3\n");
            c.metadata.resource_version = Some(rv.into());
            c
        };
        let written = at("200");
        m.set_routes(
            &written,
            slices(&written, &routes("db-2"), &BTreeMap::new()),
            Some("db-2".into()),
        );
        assert!(m.routes_newer_than(&at("150")), "the cache lags");
        assert!(!m.routes_newer_than(&at("200")), "caught up");
        assert!(!m.routes_newer_than(&at("201")), "a newer status moves rw");
        let mut odd = at("150");
        odd.metadata.resource_version = Some("v150".into());
        assert!(!m.routes_newer_than(&odd), "not comparable: as before");
    }
}
