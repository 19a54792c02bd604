//! In-place restarts of instance managers that a user asked for on
//! Kubernetes (`kubectl cnmsql restart-inplace`). The plugin cannot reach a
//! Pod's control port with the operator's certificate, so it annotates the
//! Pod ([`RESTART_INPLACE_ANNOTATION`], value: a request id); the operator
//! sends `POST /instance/manager/restart-inplace` to the Pod IP, waits for
//! the new image to answer ready, and answers on the Pod ([`RESTARTED_INPLACE_ANNOTATION`] = the request id, and
//! [`RESTART_INPLACE_ERROR_ANNOTATION`] when it failed), with an Event on
//! the Cluster. Each request is carried out once; a new one needs a new id.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use cnmysql_api::Cluster;
use cnmysql_api::names::{
    CONTROL_PORT, RESTART_INPLACE_ANNOTATION, RESTART_INPLACE_ERROR_ANNOTATION,
    RESTARTED_INPLACE_ANNOTATION,
};
use cnmysql_control::client::ControlClient;
use cnmysql_k8s::events::Kind;

use crate::context::Context;

/// How long the operator waits for a restarted manager to answer ready
/// (the topology step of this Cluster waits with it).
const RESTART_LIMIT: std::time::Duration = std::time::Duration::from_secs(15);
use crate::error::{At, Error};
use crate::events::publish;

/// The request a Pod carries that has not been answered yet.
pub fn pending(pod: &Pod) -> Option<&str> {
    let a = pod.metadata.annotations.as_ref()?;
    let asked = a.get(RESTART_INPLACE_ANNOTATION)?;
    (a.get(RESTARTED_INPLACE_ANNOTATION) != Some(asked) && !asked.is_empty())
        .then_some(asked.as_str())
}

/// Carry out every pending request among the Cluster's Pods.
pub async fn carry_out(
    ctx: &Context,
    cluster: &Cluster,
    pods: &BTreeMap<String, Pod>,
    client: &ControlClient,
) -> Result<(), Error> {
    let ns = cluster.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    for (name, pod) in pods {
        let Some(request) = pending(pod) else {
            continue;
        };
        let outcome = if pod.metadata.deletion_timestamp.is_some() {
            Err("its Pod is being deleted".to_string())
        } else {
            match pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()) {
                Some(ip) if !ip.is_empty() => cnmysql_control::upgrade::restart_in_place_and_wait(
                    &client.expecting(name),
                    ip,
                    CONTROL_PORT,
                    RESTART_LIMIT,
                )
                .await
                .map(|r| r.describe(name))
                .map_err(|e| e.to_string()),
                _ => Err("its Pod has no IP yet".to_string()),
            }
        };
        let (kind, reason, note) = match &outcome {
            Ok(done) => (Kind::Normal, "RestartedInPlace", done.clone()),
            Err(why) => (
                Kind::Warning,
                "RestartInPlaceFailed",
                format!("{name}: in-place restart refused or failed: {why}"),
            ),
        };
        tracing::info!(cluster = %cluster.name_any(), instance = %name, reason, "{note}");
        // The Event first: whoever waits for the answer below (the plugin)
        // finds it once answered.
        publish(ctx, cluster, kind, "RestartInPlace", reason, &note).await;
        let error = outcome.as_ref().err().cloned();
        let patch = json!({"metadata": {"annotations": {
            RESTARTED_INPLACE_ANNOTATION: request,
            RESTART_INPLACE_ERROR_ANNOTATION: error,
        }}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .at(Error::Restart)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(annotations: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        p.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        p
    }

    #[test]
    fn a_request_is_pending_until_answered_with_its_own_id() {
        assert_eq!(pending(&pod(&[])), None);
        assert_eq!(
            pending(&pod(&[(RESTART_INPLACE_ANNOTATION, "t1")])),
            Some("t1")
        );
        assert_eq!(
            pending(&pod(&[
                (RESTART_INPLACE_ANNOTATION, "t1"),
                (RESTARTED_INPLACE_ANNOTATION, "t1")
            ])),
            None
        );
        // A new request after an answered one.
        assert_eq!(
            pending(&pod(&[
                (RESTART_INPLACE_ANNOTATION, "t2"),
                (RESTARTED_INPLACE_ANNOTATION, "t1")
            ])),
            Some("t2")
        );
        assert_eq!(pending(&pod(&[(RESTART_INPLACE_ANNOTATION, "")])), None);
    }
}
