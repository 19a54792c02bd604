//! For a Prometheus Operator and Grafana: a PodMonitor of the operator's
//! `/metrics` (every Cluster's and instance's series, labelled namespace,
//! cluster, instance), the alert rules as a PrometheusRule, and the
//! dashboard as a ConfigMap Grafana's sidecar picks up.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;

use super::Options;
use super::objects::{Doc, NAME, labels, meta, yaml};

/// The alert rules, as Prometheus reads a rule file.
pub const RULES: &str = include_str!("../../../../deploy/prometheus-rules.yaml");
/// The Grafana dashboard.
pub const DASHBOARD: &str = include_str!("../../../../deploy/dashboard.json");
/// The label Grafana's dashboard sidecar looks for by default.
pub const GRAFANA_DASHBOARD_LABEL: &str = "grafana_dashboard";

fn object_meta(o: &Options, name: &str, extra: &[(&str, &str)]) -> serde_json::Value {
    let mut all: BTreeMap<String, String> = labels();
    all.extend(o.monitoring_labels.clone());
    all.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    json!({ "name": name, "namespace": o.namespace, "labels": all })
}

fn custom(kind: &str, metadata: serde_json::Value, spec: serde_json::Value) -> Doc {
    yaml(
        "monitoring.coreos.com/v1",
        kind,
        &json!({ "metadata": metadata, "spec": spec }),
    )
}

pub(super) fn monitoring(o: &Options) -> Vec<Doc> {
    let pod_monitor = custom(
        "PodMonitor",
        object_meta(o, NAME, &[]),
        json!({
            "selector": { "matchLabels": { "app.kubernetes.io/name": NAME } },
            "podMetricsEndpoints": [{ "port": "http", "path": "/metrics", "interval": "30s" }],
        }),
    );
    let rules: serde_json::Value = serde_saphyr::from_str(RULES).expect("the committed rules");
    let rule = custom("PrometheusRule", object_meta(o, "cnmysql", &[]), rules);
    let mut dashboard = ConfigMap {
        metadata: meta("cnmysql-dashboard", Some(&o.namespace)),
        data: Some([("cnmysql.json".to_string(), DASHBOARD.to_string())].into()),
        ..Default::default()
    };
    let labels = dashboard.metadata.labels.get_or_insert_default();
    labels.extend(o.monitoring_labels.clone());
    labels.insert(GRAFANA_DASHBOARD_LABEL.into(), "1".into());
    vec![pod_monitor, rule, yaml("v1", "ConfigMap", &dashboard)]
}
