//! Annotation-driven upgrades on Kubernetes: what the Cluster's and the
//! Pods' `cnmysql.io/upgrade-*` annotations ask (read for the core's
//! snapshot), and the annotations the core sets (its mirrors of
//! `status.instanceUpgrades` and `status.orchestratedUpgrade`, and the
//! marks of the orchestrated upgrade), written with a merge patch.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use cnmysql_api::Cluster;
use cnmysql_core::upgrade::annotations::Asked;

use crate::context::Context;

/// What the annotations ask. A Pod that is missing or being deleted is
/// left out: its instance's annotations are unknown, not absent.
pub async fn asked(ctx: &Context, cluster: &Cluster, pods: &BTreeMap<String, Pod>) -> Asked {
    let mut asked = Asked {
        cluster: cluster.annotations().clone(),
        instances: pods
            .iter()
            .filter(|(_, p)| p.metadata.deletion_timestamp.is_none())
            .map(|(n, p)| (n.clone(), p.annotations().clone()))
            .collect(),
        servers: BTreeMap::new(),
    };
    crate::catalog::resolve_servers(ctx, cluster, &mut asked).await;
    asked
}

/// Set (Some) or remove (None) annotations on `instance`'s Pod, or on the
/// Cluster (`instance` None).
pub async fn annotate(
    ctx: &Context,
    cluster: &Cluster,
    instance: Option<&str>,
    set: &BTreeMap<String, Option<String>>,
) -> anyhow::Result<()> {
    let ns = cluster.namespace().unwrap_or_default();
    let patch = serde_json::json!({ "metadata": { "annotations": set } });
    let params = PatchParams::default();
    match instance {
        Some(i) => {
            Api::<Pod>::namespaced(ctx.client.clone(), &ns)
                .patch(i, &params, &Patch::Merge(&patch))
                .await?;
        }
        None => {
            Api::<Cluster>::namespaced(ctx.client.clone(), &ns)
                .patch(&cluster.name_any(), &params, &Patch::Merge(&patch))
                .await?;
        }
    }
    Ok(())
}
