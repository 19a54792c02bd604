//! The plugin's `logs`: the instance managers' output (the `mysql`
//! container of each instance Pod: the manager's JSON log, with the
//! server's own lines in it), one instance or all of the Cluster's,
//! interleaved as they arrive when following.

use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, LogParams};

use cnmysql_api::names::CLUSTER_LABEL;

use crate::cluster_handle::ClusterHandle;

/// What to read.
#[derive(Clone, Debug, Default)]
pub struct LogRequest {
    /// One instance; all of the Cluster's when None.
    pub instance: Option<String>,
    pub follow: bool,
    /// The last lines of each.
    pub tail: Option<i64>,
}

/// The Pods to read, by name: the one asked for, or every instance Pod of
/// the Cluster. An error names what is missing.
async fn pods(h: &ClusterHandle, instance: Option<&str>) -> anyhow::Result<Vec<String>> {
    let api: Api<Pod> = Api::namespaced(h.client().clone(), h.namespace());
    let lp = ListParams::default().labels(&format!("{CLUSTER_LABEL}={}", h.name()));
    let mut names: Vec<String> = api
        .list(&lp)
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    match instance {
        Some(i) if names.iter().any(|n| n == i) => Ok(vec![i.to_string()]),
        Some(i) => anyhow::bail!(
            "{i} has no Pod in {} (the Cluster's Pods: {})",
            h.namespace(),
            names.join(", ")
        ),
        None if names.is_empty() => {
            anyhow::bail!("Cluster {} has no Pods in {}", h.name(), h.namespace())
        }
        None => Ok(names),
    }
}

/// Each line as (instance, line), to `out`, until the logs end (when
/// following, until every stream ends or the caller stops).
pub async fn logs(
    h: &ClusterHandle,
    req: &LogRequest,
    mut out: impl FnMut(&str, &str),
) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::namespaced(h.client().clone(), h.namespace());
    let lp = LogParams {
        container: Some("mysql".into()),
        follow: req.follow,
        tail_lines: req.tail,
        ..Default::default()
    };
    let mut streams = Vec::new();
    for pod in pods(h, req.instance.as_deref()).await? {
        let lines = api.log_stream(&pod, &lp).await?.lines();
        let named = lines.map_ok(move |l| (pod.clone(), l));
        streams.push(named.boxed());
    }
    // Following: interleaved as lines arrive; otherwise one instance after
    // the other.
    let mut all = if req.follow {
        futures::stream::select_all(streams).boxed()
    } else {
        futures::stream::iter(streams).flatten().boxed()
    };
    while let Some(next) = all.next().await {
        let (pod, line) = next?;
        out(&pod, &line);
    }
    Ok(())
}
