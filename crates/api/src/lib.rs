//! The `Cluster` API of cloudnative-mysql (`mysql.cnmysql.io/v1`).

pub mod cluster;
pub mod names;
pub mod validation;

pub use cluster::*;
pub use validation::{FieldError, InvalidCluster, parse_cluster, validate};

use kube::CustomResourceExt;

/// The CustomResourceDefinition, as YAML, exactly as committed under `deploy/`.
pub fn crd_yaml() -> String {
    let crd = Cluster::crd();
    let mut out =
        String::from("# Generated from crates/api/src/cluster.rs by `cnmysql crd`; do not edit.\n");
    out.push_str(&serde_saphyr::to_string(&crd).expect("the CRD serialises"));
    out
}
