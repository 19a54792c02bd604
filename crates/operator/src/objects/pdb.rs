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
    let n = cluster.spec.instances;
    if n > 1 {
        out.push(budget(
            cluster,
            format!("{c}-primary"),
            ROLE_PRIMARY,
            PodDisruptionBudgetSpec {
                min_available: Some(IntOrString::Int(1)),
                ..Default::default()
            },
        ));
    }
    // All replicas but one stay: a plain number counted against the Pods
    // the budget selects. (`maxUnavailable` would be counted against the
    // owner's declared size, all N instances, which the replicas alone can
    // never reach: no eviction would ever be allowed.) With a single
    // replica there is nothing to keep, and no budget.
    if n > 2 {
        out.push(budget(
            cluster,
            c.clone(),
            ROLE_REPLICA,
            PodDisruptionBudgetSpec {
                min_available: Some(IntOrString::Int(n - 2)),
                ..Default::default()
            },
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(instances: i32) -> Cluster {
        crate::objects::testutil::cluster(&format!("instances: {instances}"))
    }

    fn min_available(b: &PodDisruptionBudget) -> Option<IntOrString> {
        b.spec.as_ref().unwrap().min_available.clone()
    }

    /// What the disruption controller computes for a budget with a plain
    /// `minAvailable`: the healthy Pods it selects less that number.
    fn allowed(b: &PodDisruptionBudget, healthy: i32) -> i32 {
        let spec = b.spec.as_ref().unwrap();
        assert!(
            spec.max_unavailable.is_none(),
            "counted against the owner's scale"
        );
        match spec.min_available {
            Some(IntOrString::Int(m)) => (healthy - m).max(0),
            _ => panic!("a plain minAvailable"),
        }
    }

    #[test]
    fn one_replica_of_several_may_be_evicted_never_the_primary() {
        let b = budgets(&cluster(3));
        assert_eq!(b.len(), 2);
        assert_eq!(min_available(&b[0]), Some(IntOrString::Int(1)));
        assert_eq!(allowed(&b[0], 1), 0, "the primary stays");
        assert_eq!(allowed(&b[1], 2), 1, "one of two healthy replicas may go");
        assert_eq!(
            allowed(&b[1], 1),
            0,
            "not the last one while another is away"
        );
        let five = budgets(&cluster(5));
        assert_eq!(allowed(&five[1], 4), 1);
    }

    #[test]
    fn small_clusters_get_only_the_budgets_that_can_be_met() {
        assert!(budgets(&cluster(1)).is_empty());
        let two = budgets(&cluster(2));
        assert_eq!(two.len(), 1, "no budget over a single replica");
    }
}
