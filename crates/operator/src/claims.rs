//! The instances' claims, the Cluster reconcile's to write: once they
//! exist it records the Pods' groundwork for the topology task (the only
//! writer of Pods), and after a scale-down it deletes the claims of the
//! instances whose Pods are gone (unless `spec.storage.retainOnScaleDown`).

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::{Api, ResourceExt};

use cnmysql_api::Cluster;
use cnmysql_k8s::events::Kind;

use crate::context::Context;
use crate::error::Error;
use crate::events::publish;
use crate::memory::Ground;
use crate::objects;
use crate::pods::{extra, scale_down_blocked};

/// Record that every declared instance's claims exist: called once the
/// reconcile has made the missing ones (and the Secrets), it wakes the
/// topology task when that changed.
pub fn lay_ground(ctx: &Context, cluster: &Cluster) {
    let ground = Ground {
        instances: objects::instances(cluster).into_iter().collect(),
        image: cluster.status.as_ref().and_then(|s| s.target_image.clone()),
    };
    if ctx.memory.set_ground(cluster, ground) {
        ctx.memory
            .waker(
                &cluster.namespace().unwrap_or_default(),
                &cluster.name_any(),
            )
            .notify_one();
    }
}

/// Scale-down's part in the claims: a Warning while the primary is one of
/// the instances to remove; otherwise the claims of removed instances go
/// once their Pods have (the Pods' removal is the topology task's).
pub async fn remove_extra(
    cluster: &Cluster,
    ctx: &Context,
    ns: &str,
    held: &[PersistentVolumeClaim],
) -> Result<(), Error> {
    let pods = crate::pods::cached(ctx, cluster);
    let extra_pods = pods.keys().any(|p| extra(cluster, p));
    let extra_claims: Vec<String> = held
        .iter()
        .map(|c| c.name_any())
        .filter(|c| extra(cluster, c))
        .collect();
    if !extra_pods && extra_claims.is_empty() {
        return Ok(());
    }
    if let Some(why) = scale_down_blocked(cluster) {
        publish(
            ctx,
            cluster,
            Kind::Warning,
            "ScaleDown",
            "ScaleDownBlocked",
            &why,
        )
        .await;
        return Ok(());
    }
    if cluster.spec.storage.retain_on_scale_down {
        return Ok(());
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), ns);
    for c in extra_claims
        .iter()
        .filter(|c| !pods.contains_key(objects::storage::claim_instance(c)))
    {
        match claims.delete(c, &Default::default()).await {
            Ok(_) => tracing::info!(claim = %c, "deleted the claim of a removed instance"),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(Error::Pods(e.into())),
        }
    }
    Ok(())
}
