//! The instances' NetworkPolicy: clients (and replication) reach the
//! servers' port, the kubelet the probe port; the control port takes only
//! the operator and the instances themselves (a replica copies its data
//! from a peer's control API).

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::Options;
use super::objects::{Doc, labels, meta, yaml};
use cnmysql_api::names::{CONTROL_PORT, MYSQL_PORT, PROBE_PORT};

fn port(p: u16) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(IntOrString::Int(p.into())),
        protocol: Some("TCP".into()),
        end_port: None,
    }
}

/// The policy for the instances of one namespace (`None`: a policy with no
/// namespace, applied with `kubectl apply -n`), letting in the operator of
/// `o.namespace`.
pub(super) fn policy(o: &Options, namespace: Option<&str>) -> Doc {
    let instances = LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: crate::labels::INSTANCE.into(),
            operator: "Exists".into(),
            values: None,
        }]),
        match_labels: None,
    };
    let operator = NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector {
            match_labels: Some(
                [(
                    "kubernetes.io/metadata.name".to_string(),
                    o.namespace.clone(),
                )]
                .into(),
            ),
            match_expressions: None,
        }),
        pod_selector: Some(LabelSelector {
            match_labels: Some(labels()),
            match_expressions: None,
        }),
        ip_block: None,
    };
    let peers = NetworkPolicyPeer {
        pod_selector: Some(instances.clone()),
        ..Default::default()
    };
    let policy = NetworkPolicy {
        metadata: meta("cnmysql-instances", namespace),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(instances),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![
                NetworkPolicyIngressRule {
                    from: None,
                    ports: Some(vec![port(MYSQL_PORT), port(PROBE_PORT)]),
                },
                NetworkPolicyIngressRule {
                    from: Some(vec![operator, peers]),
                    ports: Some(vec![port(CONTROL_PORT)]),
                },
            ]),
            egress: None,
        }),
    };
    yaml("networking.k8s.io/v1", "NetworkPolicy", &policy)
}
