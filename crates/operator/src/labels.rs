//! Names, labels and selectors of everything the operator creates for a
//! Cluster. Services select Pods by these labels, so they are the routing.

use std::collections::BTreeMap;

use cnmysql_api::ServiceRole;

/// The cluster a Pod, claim or Service belongs to.
pub const CLUSTER: &str = cnmysql_api::names::CLUSTER_LABEL;
/// The instance a Pod or claim is (`<cluster>-<ordinal>`).
pub const INSTANCE: &str = "cnmysql.io/instanceName";
/// `primary` or `replica`, set only once the role change is safe.
pub const ROLE: &str = "cnmysql.io/instanceRole";
/// `true` while the instance may receive client traffic; fencing and
/// divergence set it to `false`, which takes it out of every Service.
pub const ROUTABLE: &str = "cnmysql.io/routable";
/// The field manager of every server-side apply by the operator.
pub const FIELD_MANAGER: &str = "cnmysql-operator";

pub const ROLE_PRIMARY: &str = "primary";
pub const ROLE_REPLICA: &str = "replica";

/// Labels every object of a cluster carries.
pub fn cluster_labels(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (CLUSTER.to_string(), cluster.to_string()),
        ("app.kubernetes.io/name".into(), "cnmysql".into()),
        ("app.kubernetes.io/instance".into(), cluster.to_string()),
        (
            "app.kubernetes.io/managed-by".into(),
            "cnmysql-operator".into(),
        ),
    ])
}

/// Labels of one instance's objects.
pub fn instance_labels(cluster: &str, instance: &str) -> BTreeMap<String, String> {
    let mut l = cluster_labels(cluster);
    l.insert(INSTANCE.into(), instance.into());
    l
}

/// The Pod selector of a Service routing to `role`. `rw` selects the
/// instance the status lets serve (`primary`: `cnmysql_core::services::
/// rw_instance`) by name, not by the role label: a change of primary then
/// changes one object, and kube-proxy (which applies changes at most once
/// a second) moves rw in one step instead of two, the second a second
/// later. With no such instance it selects nothing.
pub fn service_selector(
    cluster: &str,
    role: ServiceRole,
    primary: Option<&str>,
) -> BTreeMap<String, String> {
    let mut s = BTreeMap::from([
        (CLUSTER.to_string(), cluster.to_string()),
        (ROUTABLE.to_string(), "true".to_string()),
    ]);
    match role {
        ServiceRole::Rw => {
            s.insert(INSTANCE.into(), primary.unwrap_or_default().into());
        }
        ServiceRole::Ro => {
            s.insert(ROLE.into(), ROLE_REPLICA.into());
        }
        ServiceRole::R => {}
    }
    s
}

/// Secret names.
pub use cnmysql_api::names::{
    app_secret, ca_secret, instance_tls_secret, operator_tls_secret, replication_secret,
    root_secret,
};
/// The primary Lease.
pub fn lease(cluster: &str) -> String {
    format!("{cluster}-primary")
}
