//! The objects a Cluster should have, built as pure functions of the Cluster
//! (and, for role labels, its status): no API calls in here. The reconciler
//! applies what these return.

pub mod definition;
pub mod endpoints;
pub mod image;
pub mod pdb;
pub mod pod;
pub mod rbac;
pub mod secrets;
pub mod services;
pub mod storage;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use cnmysql_api::Cluster;
use cnmysql_api::names::instance_name;

/// What the platform tells the builders that is not in the Cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Environment {
    /// The operator's own image: the bootstrap-controller init container
    /// copies the manager from it.
    pub operator_image: String,
}

/// Every object of one Cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Desired {
    pub service_account: ServiceAccount,
    pub role: Role,
    pub role_binding: RoleBinding,
    pub claims: Vec<PersistentVolumeClaim>,
    pub pods: Vec<Pod>,
    pub services: Vec<Service>,
    pub budgets: Vec<PodDisruptionBudget>,
}

/// Build everything the Cluster should have.
pub fn desired(cluster: &Cluster, env: &Environment) -> Desired {
    let names = instances(cluster);
    let (service_account, role, role_binding) = rbac::objects(cluster);
    Desired {
        service_account,
        role,
        role_binding,
        claims: names
            .iter()
            .flat_map(|n| {
                std::iter::once(storage::claim(cluster, n)).chain(storage::binlog_claim(cluster, n))
            })
            .collect(),
        pods: names.iter().map(|n| pod::pod(cluster, n, env)).collect(),
        services: services::services(cluster),
        budgets: pdb::budgets(cluster),
    }
}

/// `<cluster>-1 .. <cluster>-N`.
pub fn instances(cluster: &Cluster) -> Vec<String> {
    let name = cluster.name_any();
    (1..=cluster.spec.instances.max(0) as u32)
        .map(|i| instance_name(&name, i))
        .collect()
}

/// The controller owner reference to the Cluster: deleting the Cluster
/// deletes what carries it (garbage collection).
pub fn owner(cluster: &Cluster) -> OwnerReference {
    cluster
        .controller_owner_ref(&())
        .expect("a Cluster read from the API server has a name and uid")
}

/// Metadata of an owned object.
pub fn meta(
    cluster: &Cluster,
    name: String,
    labels: std::collections::BTreeMap<String, String>,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: cluster.namespace(),
        labels: Some(labels),
        owner_references: Some(vec![owner(cluster)]),
        ..Default::default()
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use cnmysql_api::Cluster;

    /// A Cluster as the API server would return it (name, namespace, uid).
    pub fn cluster(yaml_spec: &str) -> Cluster {
        let text = format!(
            "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: db\n  namespace: prod\n  uid: 5f1d0c3e-0000-4000-8000-000000000001\nspec:\n{}",
            yaml_spec
                .lines()
                .map(|l| format!("  {l}\n"))
                .collect::<String>()
        );
        cnmysql_api::parse_cluster(&text).expect("valid test cluster")
    }
}
