//! The `Cluster` API of cloudnative-mysql (`mysql.cnmysql.io/v1`).

pub mod backup;
pub mod backup_resources;
pub mod bootstrap;
pub mod cluster;
pub mod field_error;
pub mod flavor;
pub mod import;
pub mod instance_upgrade;
pub mod names;
pub mod own_secrets;
pub mod reinit;
pub mod replica;
mod schema_check;
pub mod sql_objects;
pub mod sql_privileges;
pub mod status;
pub mod upgrade;
pub mod validation;

pub use cluster::*;
pub use flavor::Flavor;
pub use instance_upgrade::*;
pub use reinit::*;
pub use status::*;
pub use upgrade::*;
pub use validation::{
    FieldError, InvalidCluster, Manifest, parse_cluster, parse_manifest, validate,
};

use kube::CustomResourceExt;

/// Every CustomResourceDefinition: Cluster, ImageCatalog,
/// ClusterImageCatalog, Backup, ScheduledBackup, Database, User, Grant.
pub fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    vec![
        Cluster::crd(),
        ImageCatalog::crd(),
        ClusterImageCatalog::crd(),
        backup_resources::Backup::crd(),
        backup_resources::ScheduledBackup::crd(),
        sql_objects::Database::crd(),
        sql_objects::User::crd(),
        sql_objects::Grant::crd(),
    ]
}

/// The CustomResourceDefinitions, as YAML, exactly as committed under `deploy/`.
pub fn crd_yaml() -> String {
    let mut out = String::from(
        "# Generated from crates/api/src/cluster.rs, status.rs, upgrade.rs, backup_resources.rs and sql_objects.rs by `cnmysql crd`; do not edit.\n",
    );
    for (i, crd) in crds().iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&serde_saphyr::to_string(crd).expect("the CRD serialises"));
    }
    out
}
