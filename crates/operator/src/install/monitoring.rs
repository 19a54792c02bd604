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

/// The PodMonitor's spec: the operator's Pods, port `http`, `/metrics`.
/// Its series carry their own `namespace` and `instance` labels (the
/// Cluster's, the instance's), which the alert rules join on: the scrape
/// keeps them (`honorLabels`) rather than the target's.
fn pod_monitor_spec() -> serde_json::Value {
    json!({
        "selector": { "matchLabels": { "app.kubernetes.io/name": NAME } },
        "podMetricsEndpoints": [{
            "port": "http",
            "path": "/metrics",
            "interval": "30s",
            "honorLabels": true,
        }],
    })
}

/// The label name Prometheus's Kubernetes discovery gives a Pod label.
fn meta_label(key: &str) -> String {
    let name: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("__meta_kubernetes_pod_label_{name}")
}

/// A plain Prometheus's scrape job that does what the PodMonitor asks
/// (made from its spec): Pods of the operator's namespace carrying its
/// selector's labels, the port it names, its path and interval, the
/// series' own labels kept. `kubeconfig`: how Prometheus reaches the API
/// server when it runs outside the cluster.
pub fn scrape_config(o: &Options, kubeconfig: Option<&str>) -> serde_json::Value {
    let spec = pod_monitor_spec();
    let endpoint = &spec["podMetricsEndpoints"][0];
    let mut relabel: Vec<serde_json::Value> = spec["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels")
        .iter()
        .map(|(k, v)| json!({ "source_labels": [meta_label(k)], "regex": v, "action": "keep" }))
        .collect();
    relabel.push(json!({
        "source_labels": ["__meta_kubernetes_pod_container_port_name"],
        "regex": endpoint["port"],
        "action": "keep",
    }));
    relabel.push(json!({
        "source_labels": ["__meta_kubernetes_pod_name"],
        "target_label": "pod",
    }));
    let mut sd = json!({ "role": "pod", "namespaces": { "names": [o.namespace] } });
    if let Some(k) = kubeconfig {
        sd["kubeconfig_file"] = k.into();
    }
    json!({
        "job_name": format!("podMonitor/{}/{NAME}/0", o.namespace),
        "honor_labels": endpoint["honorLabels"],
        "metrics_path": endpoint["path"],
        "scrape_interval": endpoint["interval"],
        "kubernetes_sd_configs": [sd],
        "relabel_configs": relabel,
    })
}

pub(super) fn monitoring(o: &Options) -> Vec<Doc> {
    let pod_monitor = custom("PodMonitor", object_meta(o, NAME, &[]), pod_monitor_spec());
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

/// [`scrape_config`] as Prometheus's configuration file writes it, under
/// `scrape_configs:`.
pub fn scrape_config_yaml(o: &Options, kubeconfig: Option<&str>) -> String {
    serde_saphyr::to_string(&json!({ "scrape_configs": [scrape_config(o, kubeconfig)] }))
        .expect("YAML")
}
