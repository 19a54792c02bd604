//! `kubectl cnmsql report`: what a person needs to understand a Cluster
//! (or to hand to someone who will), gathered in one go: the Cluster and
//! every object of it, the Events about them, the status as the plugin
//! shows it, and optionally the managers' logs. Secrets are named by the
//! objects that use them and never read.

use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Resource;
use kube::api::{Api, ListParams};
use serde::Serialize;

use cnmysql_api::backup_resources::{Backup, ScheduledBackup};
use cnmysql_api::names::CLUSTER_LABEL;

use crate::cluster_handle::ClusterHandle;
use crate::logs::{LogRequest, logs};

/// One file of the report: its path inside the bundle and its text.
pub type ReportFile = (String, String);

/// YAML of `v` without `metadata.managedFields` (noise to a reader).
fn yaml<T: Serialize>(v: &T) -> anyhow::Result<String> {
    let mut j = serde_json::to_value(v)?;
    strip_managed_fields(&mut j);
    Ok(serde_saphyr::to_string(&j)?)
}

fn strip_managed_fields(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            if let Some(meta) = m.get_mut("metadata").and_then(|x| x.as_object_mut()) {
                meta.remove("managedFields");
            }
            m.values_mut().for_each(strip_managed_fields);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(strip_managed_fields),
        _ => {}
    }
}

/// Every object a list selects.
fn any<K>(_: &K) -> bool {
    true
}

/// The objects of kind `K` that `lp` selects and `keep` accepts.
async fn listed<K>(
    h: &ClusterHandle,
    lp: &ListParams,
    keep: impl Fn(&K) -> bool,
) -> anyhow::Result<Vec<K>>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(h.client().clone(), h.namespace());
    Ok(api.list(lp).await?.items.into_iter().filter(keep).collect())
}

/// The report's files: `cluster.yaml`, `status.txt`, one YAML list per
/// kind of object, `events.yaml`, and with `log_tail` the last lines of
/// each instance's log under `logs/`.
pub async fn collect(h: &ClusterHandle, log_tail: Option<i64>) -> anyhow::Result<Vec<ReportFile>> {
    let cluster = h.get().await?;
    let mut files: Vec<ReportFile> = vec![
        ("cluster.yaml".into(), yaml(&cluster)?),
        (
            "status.txt".into(),
            crate::plugin::render_status(&cluster, false),
        ),
    ];
    let by_label = ListParams::default().labels(&format!("{CLUSTER_LABEL}={}", h.name()));
    let all = ListParams::default();
    let mut add = |path: &str, text: String| files.push((path.into(), text));
    add("pods.yaml", yaml(&listed::<Pod>(h, &by_label, any).await?)?);
    add(
        "persistentvolumeclaims.yaml",
        yaml(&listed::<PersistentVolumeClaim>(h, &by_label, any).await?)?,
    );
    add(
        "services.yaml",
        yaml(&listed::<Service>(h, &by_label, any).await?)?,
    );
    add(
        "poddisruptionbudgets.yaml",
        yaml(&listed::<PodDisruptionBudget>(h, &by_label, any).await?)?,
    );
    // EndpointSlices carry their Service's name, not the Cluster's label.
    let prefix = format!("{}-", h.name());
    let of_service = |s: &EndpointSlice| {
        s.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/service-name"))
            .is_some_and(|svc| svc.starts_with(&prefix))
    };
    add(
        "endpointslices.yaml",
        yaml(&listed(h, &all, of_service).await?)?,
    );
    let backups = listed(h, &all, |b: &Backup| b.spec.cluster.name == h.name()).await?;
    add("backups.yaml", yaml(&backups)?);
    let scheduled = listed(h, &all, |b: &ScheduledBackup| {
        b.spec.cluster.name == h.name()
    })
    .await?;
    add("scheduledbackups.yaml", yaml(&scheduled)?);
    add("events.yaml", yaml(&events(h).await?)?);
    if let Some(tail) = log_tail {
        files.extend(instance_logs(h, tail).await?);
    }
    Ok(files)
}

/// The namespace's Events about the Cluster and its instances' objects,
/// oldest first.
async fn events(h: &ClusterHandle) -> anyhow::Result<Vec<Event>> {
    let prefix = format!("{}-", h.name());
    let about = |e: &Event| {
        e.involved_object
            .name
            .as_deref()
            .is_some_and(|n| n == h.name() || n.starts_with(&prefix))
    };
    let mut ev = listed(h, &ListParams::default(), about).await?;
    ev.sort_by_key(|e| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or(e.event_time.as_ref().map(|t| t.0))
    });
    Ok(ev)
}

/// `logs/<instance>.jsonl`: the last `tail` lines of each instance's log.
async fn instance_logs(h: &ClusterHandle, tail: i64) -> anyhow::Result<Vec<ReportFile>> {
    let mut by_pod: std::collections::BTreeMap<String, String> = Default::default();
    let req = LogRequest {
        instance: None,
        follow: false,
        tail: Some(tail),
    };
    logs(h, &req, |pod, line| {
        let text = by_pod.entry(pod.to_string()).or_default();
        text.push_str(line);
        text.push('\n');
    })
    .await?;
    Ok(by_pod
        .into_iter()
        .map(|(pod, text)| (format!("logs/{pod}.jsonl"), text))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managed_fields_are_left_out_everywhere() {
        let mut v = serde_json::json!({
            "metadata": {"name": "a", "managedFields": [{"manager": "x"}]},
            "items": [{"metadata": {"name": "b", "managedFields": []}}]
        });
        strip_managed_fields(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"metadata": {"name": "a"}, "items": [{"metadata": {"name": "b"}}]})
        );
    }
}
