//! Writing the objects a Cluster is made of: server-side apply of what the
//! operator fully owns, creation of what is created once and never
//! rewritten (claims, Pods, Secrets), removal of Services no longer
//! declared, generation of the Secrets.

use k8s_openapi::api::core::v1::{Secret, Service};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use cnmysql_api::Cluster;

use crate::context::Context;
use crate::labels::{CLUSTER, FIELD_MANAGER};
use crate::objects::secrets;

/// A namespaced API object the operator writes whole.
pub trait Namespaced:
    Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + Serialize
    + DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> Namespaced for K where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug
{
}

/// Server-side apply of an object the operator fully owns, returning it
/// as the API server stored it. An apply that changes nothing is not
/// written by the API server (the resourceVersion stays), so an unchanged
/// Cluster costs requests but no writes.
pub async fn apply<K: Namespaced>(
    ctx: &Context,
    ns: &str,
    obj: &K,
    pp: &PatchParams,
) -> anyhow::Result<K> {
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    let mut body = serde_json::to_value(obj).expect("objects serialise");
    body["apiVersion"] = json!(K::api_version(&Default::default()));
    body["kind"] = json!(K::kind(&Default::default()));
    Ok(api.patch(&obj.name_any(), pp, &Patch::Apply(&body)).await?)
}

/// Apply a Service, then take away any selector it has: the operator
/// writes every Service's endpoints (`routing.rs`), and a selector set by
/// someone else (an apply cannot remove a field another manager owns)
/// would have the EndpointSlice controller route by it beside them.
pub async fn apply_service(
    ctx: &Context,
    ns: &str,
    svc: &Service,
    pp: &PatchParams,
) -> anyhow::Result<()> {
    let stored = apply(ctx, ns, svc, pp).await?;
    let selects = stored
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .is_some_and(|s| !s.is_empty());
    if selects {
        tracing::warn!(service = %svc.name_any(), "removing a selector someone set on a Service whose endpoints the operator writes");
        let api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
        let drop = json!({"spec": {"selector": null}});
        api.patch(
            &svc.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&drop),
        )
        .await?;
    }
    Ok(())
}

/// Create an object if it does not exist; an existing one is left as it is.
pub async fn create_missing<K: Namespaced>(
    ctx: &Context,
    ns: &str,
    obj: &K,
) -> anyhow::Result<bool> {
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api.create(&pp, obj).await {
        Ok(_) => {
            tracing::info!(kind = %K::kind(&Default::default()), name = %obj.name_any(), namespace = ns, "created");
            Ok(true)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Delete an object; one already gone is not an error.
pub async fn delete_if_present<K: Namespaced>(api: &Api<K>, name: &str) -> anyhow::Result<()> {
    match api.delete(name, &Default::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Services the Cluster no longer declares (a disabled default, a removed
/// additional Service) are deleted.
pub async fn remove_stale_services(
    cluster: &Cluster,
    ctx: &Context,
    ns: &str,
    want: &[Service],
) -> anyhow::Result<()> {
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    let have = api
        .list(&ListParams::default().labels(&format!("{CLUSTER}={}", cluster.name_any())))
        .await?;
    let uid = cluster.uid();
    for s in have.items {
        let owned = s
            .owner_references()
            .iter()
            .any(|o| Some(&o.uid) == uid.as_ref() && o.controller == Some(true));
        if owned && !want.iter().any(|w| w.name_any() == s.name_any()) {
            tracing::info!(service = %s.name_any(), "deleting a Service the Cluster no longer declares");
            delete_if_present(&api, &s.name_any()).await?;
        }
    }
    Ok(())
}

/// Generate the Secrets that do not exist yet (the CA first, since the
/// certificates are issued from it), then keep the certificates as
/// [`crate::certificates`] says. Returns in how many seconds a certificate
/// is next due.
pub async fn ensure_secrets(cluster: &Cluster, ctx: &Context, ns: &str) -> anyhow::Result<i64> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let have: Vec<Secret> = api
        .list(&ListParams::default().labels(&format!("{CLUSTER}={}", cluster.name_any())))
        .await?
        .items;
    let needed = secrets::needed(cluster);
    let missing = |name: &String| !have.iter().any(|s| &s.name_any() == name);
    let is_certificate = |w: &secrets::Needed| matches!(w, secrets::Needed::Certificate { .. });
    for (name, what) in needed
        .iter()
        .filter(|(n, w)| missing(n) && !is_certificate(w))
    {
        let secret = secrets::generate(cluster, name, what, None)?;
        create_missing(ctx, ns, &secret).await?;
    }
    let ca = load_ca(&api, cluster).await?;
    check_server_tls(&api, cluster).await?;
    for (name, what) in needed
        .iter()
        .filter(|(n, w)| missing(n) && is_certificate(w))
    {
        let secret = secrets::generate(cluster, name, what, Some(&ca))?;
        create_missing(ctx, ns, &secret).await?;
    }
    crate::certificates::ensure(cluster, ctx, &api, &have, &ca).await
}

/// The user's server certificate, when the Cluster names one, must exist
/// and be usable before Pods wait on it.
async fn check_server_tls(api: &Api<Secret>, cluster: &Cluster) -> anyhow::Result<()> {
    let Some(name) = &cluster.spec.secrets.server_tls_secret else {
        return Ok(());
    };
    let s = api.get_opt(name).await?.ok_or_else(|| {
        anyhow::anyhow!(
            "the Secret {name} does not exist (spec.secrets.serverTlsSecret names it): create it with tls.crt, tls.key and ca.crt"
        )
    })?;
    match secrets::server_tls_problem(&s) {
        Some(why) => Err(anyhow::anyhow!(why)),
        None => Ok(()),
    }
}

async fn load_ca(api: &Api<Secret>, cluster: &Cluster) -> anyhow::Result<cnmysql_tls::Ca> {
    let ca_name = secrets::ca_secret_name(cluster);
    let s = api.get_opt(&ca_name).await?.ok_or_else(|| {
        anyhow::anyhow!(
            "the CA Secret {ca_name} does not exist (spec.secrets.caSecret names it): create it with ca.crt and ca.key, or tls.crt and tls.key"
        )
    })?;
    secrets::ca_from(&s).map_err(anyhow::Error::msg)
}
