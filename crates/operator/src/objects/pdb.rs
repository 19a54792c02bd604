//! PodDisruptionBudgets: a drain may take at most one replica at a time, and
//! never the primary of a multi-instance cluster (switch over first; the
//! operator does so when it updates the primary). A single instance gets no
//! primary budget, which would block every node drain forever.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use cnmysql_api::Cluster;

use crate::labels::{CLUSTER, ROLE, ROLE_PRIMARY, ROLE_REPLICA, cluster_labels};

fn budget(
    cluster: &Cluster,
    name: String,
    role: &str,
    spec: PodDisruptionBudgetSpec,
) -> PodDisruptionBudget {
    let c = cluster.name_any();
    PodDisruptionBudget {
        metadata: super::meta(cluster, name, cluster_labels(&c)),
        spec: Some(PodDisruptionBudgetSpec {
            selector: Some(LabelSelector {
                match_labels: Some(
                    [
                        (CLUSTER.to_string(), c.clone()),
                        (ROLE.to_string(), role.to_string()),
                    ]
                    .into(),
                ),
                match_expressions: None,
            }),
            ..spec
        }),
        status: None,
    }
}

pub fn budgets(cluster: &Cluster) -> Vec<PodDisruptionBudget> {
    let c = cluster.name_any();
    let mut out = Vec::new();
    if cluster.spec.instances > 1 {
        out.push(budget(
            cluster,
            format!("{c}-primary"),
            ROLE_PRIMARY,
            PodDisruptionBudgetSpec {
                min_available: Some(IntOrString::Int(1)),
                ..Default::default()
            },
        ));
        out.push(budget(
            cluster,
            c.clone(),
            ROLE_REPLICA,
            PodDisruptionBudgetSpec {
                max_unavailable: Some(IntOrString::Int(1)),
                ..Default::default()
            },
        ));
    }
    out
}
