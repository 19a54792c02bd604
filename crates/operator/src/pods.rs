//! The instances' Pods: created when missing (unless held down), labelled
//! by role, removed highest first on scale-down (never the primary).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use cnmysql_api::Cluster;
use cnmysql_k8s::events::Kind;

use crate::apply::create_missing;
use crate::context::Context;
use crate::error::{At, Error};
use crate::events::publish;
use crate::labels::{CLUSTER, FIELD_MANAGER};
use crate::objects::pod;

/// Create each instance's Pod when missing and the controller lets it
/// start ([`cnmysql_core::hold_down::may_start`]: not a held-down instance, not a vanished
/// steady primary the topology step is about to hold down), and apply the
/// role labels of the existing ones.
///
/// A primary handing over (a switchover under way) is recreated at once:
/// it comes back read-only, handing over (`role::desired`), so the
/// switchover can finish instead of timing out into a failover. Holding
/// down lives in operator memory; a restarted operator derives it again
/// from the status.
pub async fn ensure_pods(cluster: &Cluster, ctx: &Context, want: &[Pod]) -> Result<(), Error> {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let status = cluster.status.clone().unwrap_or_default();
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let live: BTreeMap<String, Pod> = pods
        .list(&ListParams::default().labels(&format!("{CLUSTER}={name}")))
        .await
        .at(Error::Pods)?
        .items
        .into_iter()
        .map(|p| (p.name_any(), p))
        .collect();
    let memory = ctx.memory.core(cluster);
    // The Pod that becomes the primary is labelled before the one that
    // stops being it: rw gains its new endpoint in the first change
    // kube-proxy programs, instead of waiting out kube-proxy's minimum
    // interval between two syncs (1 s by default) after losing the old one.
    let mut want: Vec<&Pod> = want.iter().collect();
    want.sort_by_key(|p| {
        pod::role_labels(&status, &p.name_any())[crate::labels::ROLE] != crate::labels::ROLE_PRIMARY
    });
    for p in want {
        let mut p = p.clone();
        let instance = p.name_any();
        let roles = pod::role_labels(&status, &instance);
        match live.get(&instance) {
            // A fenced-out former primary stays down until failover is
            // done. A steady primary whose Pod is gone (deleted, evicted,
            // its node lost) has failed: its Pod is not recreated on the
            // spot, where it would come back as the primary; the topology
            // step holds it down and fails over, or, when nothing can take
            // over, lets it come back in place.
            None if !cnmysql_core::hold_down::may_start(
                &memory,
                &cluster.spec,
                &status,
                &instance,
            ) => {}
            None => {
                p.metadata.labels.get_or_insert_default().extend(roles);
                create_missing(ctx, &ns, &p).await.at(Error::Pods)?;
            }
            Some(have) => {
                let labels = have.metadata.labels.clone().unwrap_or_default();
                if roles.iter().any(|(k, v)| labels.get(k) != Some(v)) {
                    let patch = json!({
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": { "name": instance, "labels": roles },
                    });
                    pods.patch(&instance, &pp, &Patch::Apply(&patch))
                        .await
                        .at(Error::Pods)?;
                }
            }
        }
    }
    Ok(())
}

/// Delete every instance Pod of `cluster` not already going (hibernation);
/// their claims stay.
pub async fn stop_all(cluster: &Cluster, ctx: &Context) -> Result<(), Error> {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let live = pods
        .list(&ListParams::default().labels(&format!("{CLUSTER}={name}")))
        .await
        .at(Error::Pods)?;
    for p in live.items {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let pod = p.name_any();
        tracing::info!(
            pod,
            "hibernating: deleting the instance Pod, keeping its claim"
        );
        match pods.delete(&pod, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e).at(Error::Pods),
        }
    }
    Ok(())
}

/// Whether the Pods' role labels differ between two statuses of `cluster`.
pub fn roles_changed(
    cluster: &Cluster,
    before: &cnmysql_api::ClusterStatus,
    after: &cnmysql_api::ClusterStatus,
) -> bool {
    crate::objects::instances(cluster)
        .iter()
        .any(|i| pod::role_labels(before, i) != pod::role_labels(after, i))
}

/// Instances above `spec.instances` are removed, highest first — never the
/// primary: lowering `instances` below the primary's ordinal waits, with a
/// Warning, for a switchover to a lower ordinal. Their claims go too unless
/// `spec.storage.retainOnScaleDown`.
pub async fn scale_down(cluster: &Cluster, ctx: &Context) -> Result<(), Error> {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let declared = cluster.spec.instances.max(0) as u32;
    let extra = |n: &str| {
        let n = crate::objects::storage::claim_instance(n);
        cnmysql_api::names::ordinal_of(&name, n).is_some_and(|o| o > declared)
    };
    let selector = ListParams::default().labels(&format!("{CLUSTER}={name}"));
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let mut gone: Vec<String> = pods
        .list(&selector)
        .await
        .at(Error::Pods)?
        .items
        .iter()
        .map(|p| p.name_any())
        .filter(|n| extra(n))
        .collect();
    let claim_names: Vec<String> = claims
        .list(&selector)
        .await
        .at(Error::Pods)?
        .items
        .iter()
        .map(|c| c.name_any())
        .filter(|n| extra(n))
        .collect();
    if gone.is_empty() && (claim_names.is_empty() || cluster.spec.storage.retain_on_scale_down) {
        return Ok(());
    }
    let status = cluster.status.clone().unwrap_or_default();
    for p in [&status.current_primary, &status.target_primary]
        .into_iter()
        .flatten()
    {
        if extra(p) {
            let msg = format!(
                "spec.instances is {declared} but {p} is the primary: switch over to an instance up to {name}-{declared} first (kubectl cnmsql promote {name} {name}-1)"
            );
            publish(
                ctx,
                cluster,
                Kind::Warning,
                "ScaleDown",
                "ScaleDownBlocked",
                &msg,
            )
            .await;
            return Ok(());
        }
    }
    gone.sort_by_key(|n| std::cmp::Reverse(cnmysql_api::names::ordinal_of(&name, n)));
    for p in &gone {
        match pods.delete(p, &Default::default()).await {
            Ok(_) => {
                publish(
                    ctx,
                    cluster,
                    Kind::Normal,
                    "ScaleDown",
                    "InstanceRemoved",
                    &format!("{p} removed: spec.instances is {declared}"),
                )
                .await;
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(Error::Pods(e.into())),
        }
    }
    if !cluster.spec.storage.retain_on_scale_down {
        for c in &claim_names {
            match claims.delete(c, &Default::default()).await {
                Ok(_) => tracing::info!(claim = %c, "deleted the claim of a removed instance"),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(Error::Pods(e.into())),
            }
        }
    }
    Ok(())
}
