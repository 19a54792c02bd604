//! Names and labels of everything the operator creates for a Cluster.
//! The Services select nothing: the operator writes their endpoints
//! (`objects/endpoints.rs`); the role labels are for people, selectors
//! and budgets.

use std::collections::BTreeMap;

/// The cluster a Pod, claim or Service belongs to.
pub const CLUSTER: &str = cnmysql_api::names::CLUSTER_LABEL;
/// The instance a Pod or claim is (`<cluster>-<ordinal>`).
pub const INSTANCE: &str = "cnmysql.io/instanceName";
/// `primary` or `replica`, set only once the role change is safe.
pub const ROLE: &str = "cnmysql.io/instanceRole";
/// `true` while the instance may receive client traffic; fencing,
/// divergence and lag set it to `false` (and take it out of every route).
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

/// Secret names.
pub use cnmysql_api::names::{
    app_secret, ca_secret, instance_tls_secret, operator_tls_secret, replication_secret,
    root_secret,
};
/// The primary Lease.
pub fn lease(cluster: &str) -> String {
    format!("{cluster}-primary")
}
