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
//! reconcile, which may hold an older status, applies the others. It asks
//! for them again ([`ask_again`]), so that a Service someone changed or
//! deleted is applied again at the next pass, and wakes the task when the
//! status it sees would move rw ([`wake_if_moved`]): an instance manager records its own
//! promotion (`currentPrimary`), and rw then follows within the next pass,
//! not after the task's next period (200 ms while the primary changes).

use kube::ResourceExt;
use kube::api::PatchParams;

use cnmysql_api::Cluster;

use crate::context::Context;
use crate::labels::FIELD_MANAGER;
use crate::objects::services::rw_services;

/// Apply `cluster`'s rw Services as its status says, unless they are what
/// was applied last or follow a newer copy of the Cluster (a pass that
/// wrote no status reads the watch cache, which can lag the task's own
/// last write: rw must not go back to the former primary for a pass);
/// nothing while reconciliation is paused.
pub async fn converge(ctx: &Context, cluster: &Cluster) -> anyhow::Result<()> {
    if cnmysql_core::pause::paused(cluster.annotations()) {
        return Ok(());
    }
    let want = rw_services(cluster);
    if ctx.memory.routes_applied(cluster, &want, true) || ctx.memory.routes_newer_than(cluster) {
        return Ok(());
    }
    let ns = cluster.namespace().unwrap_or_default();
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for s in &want {
        crate::apply::apply(ctx, &ns, s, &pp).await?;
    }
    ctx.memory.set_routes(cluster, want);
    Ok(())
}

/// Wake the topology task when the status `cluster` carries would move rw
/// from where it was last applied.
pub fn wake_if_moved(ctx: &Context, cluster: &Cluster) {
    if ctx
        .memory
        .routes_applied(cluster, &rw_services(cluster), false)
        || ctx.memory.routes_newer_than(cluster)
    {
        return;
    }
    let ns = cluster.namespace().unwrap_or_default();
    ctx.memory.waker(&ns, &cluster.name_any()).notify_one();
}

/// Have the rw Services applied again at the next pass (a reconcile
/// repairs what someone changed).
pub fn ask_again(ctx: &Context, cluster: &Cluster) {
    ctx.memory.routes_stale(cluster);
}

#[cfg(test)]
mod tests {
    use crate::memory::Memories;
    use crate::objects::services::rw_services;
    use crate::objects::testutil::cluster;

    /// What was applied is not applied again; a reconcile's request is;
    /// a status that names another primary is a move (the task is woken)
    /// whether or not a reconcile asked.
    #[test]
    fn applied_routes_are_remembered_until_asked_again_or_moved() {
        let m = Memories::default();
        let mut c = cluster("instances: 3\n");
        c.status = Some(cnmysql_api::ClusterStatus {
            current_primary: Some("db-1".into()),
            target_primary: Some("db-1".into()),
            ..Default::default()
        });
        let rw = rw_services(&c);
        assert!(!m.routes_applied(&c, &rw, true), "never applied");
        m.set_routes(&c, rw.clone());
        assert!(m.routes_applied(&c, &rw, true));
        m.routes_stale(&c);
        assert!(!m.routes_applied(&c, &rw, true), "asked again");
        assert!(m.routes_applied(&c, &rw, false), "but not moved");
        let st = c.status.as_mut().unwrap();
        st.current_primary = Some("db-2".into());
        st.target_primary = Some("db-2".into());
        assert!(!m.routes_applied(&c, &rw_services(&c), false), "moved");
    }

    /// The task wrote a failover's status (the Cluster at resourceVersion
    /// 200) and moved rw to db-2; its next pass wrote nothing and read the
    /// watch cache, still at 150 with db-1 primary: rw stays where it is
    /// until the cache holds the write or something newer.
    #[test]
    fn a_copy_older_than_the_status_rw_follows_does_not_move_it_back() {
        let m = Memories::default();
        let at = |rv: &str, primary: &str| {
            let mut c = cluster("instances: 3\n");
            c.metadata.resource_version = Some(rv.into());
            c.status = Some(cnmysql_api::ClusterStatus {
                current_primary: Some(primary.into()),
                target_primary: Some(primary.into()),
                ..Default::default()
            });
            c
        };
        let written = at("200", "db-2");
        m.set_routes(&written, rw_services(&written));
        assert!(m.routes_newer_than(&at("150", "db-1")), "the cache lags");
        assert!(!m.routes_newer_than(&at("200", "db-2")), "caught up");
        assert!(
            !m.routes_newer_than(&at("201", "db-3")),
            "a newer status moves rw"
        );
        let mut odd = at("150", "db-1");
        odd.metadata.resource_version = Some("v150".into());
        assert!(!m.routes_newer_than(&odd), "not comparable: as before");
    }
}
