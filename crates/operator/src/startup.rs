//! What the operator checks and reads before it leads: its HTTP port, the
//! CRD, its own executable and image.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context as _;
use kube::{Api, Client};

use cnmysql_api::Cluster;

use crate::Options;
use crate::context::Context;
use crate::metrics::Metrics;
use crate::objects::Environment;

/// Serve `/metrics`, `/healthz` and `/readyz`; the flag `/readyz` reads.
pub async fn serve_http(opts: &Options, metrics: &Metrics) -> anyhow::Result<Arc<AtomicBool>> {
    let ready = Arc::new(AtomicBool::new(false));
    let listener = tokio::net::TcpListener::bind(opts.http_bind)
        .await
        .with_context(|| format!("--http-bind {}: cannot listen", opts.http_bind))?;
    tracing::info!(addr = %listener.local_addr()?, "serving /metrics, /healthz and /readyz");
    tokio::spawn(crate::http::serve(listener, metrics.clone(), ready.clone()));
    Ok(ready)
}

/// Refuse to start without the CRD: say how to install it.
pub async fn require_crd(client: &Client, opts: &Options) -> anyhow::Result<()> {
    let probe: Api<Cluster> = match opts.namespaces.first() {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    probe
        .list(&kube::api::ListParams::default().limit(1))
        .await
        .context("cannot list Clusters: is the CRD installed (kubectl apply --server-side -f deploy/crd.yaml) and may this account list them?")?;
    Ok(())
}

/// The shared context of every controller: this executable and the image
/// instance Pods take their manager from.
pub async fn context(client: &Client, opts: &Options, metrics: &Metrics) -> Arc<Context> {
    let operator_hash = cnmysql_control::executable_hash();
    tracing::info!(hash = %operator_hash, "operator executable");
    let operator_image = own_image(client, opts)
        .await
        .unwrap_or_else(|| opts.operator_image.clone());
    tracing::info!(image = %operator_image, "instance Pods take their manager from this image");
    Arc::new(Context::new(
        client.clone(),
        Environment { operator_image },
        operator_hash,
        metrics.clone(),
    ))
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
