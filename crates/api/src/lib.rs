//! The `Cluster` API of cloudnative-mysql (`mysql.cnmysql.io/v1`).

pub mod backup;
pub mod backup_resources;
pub mod binlogs;
mod bootstrap;
mod cluster;
mod field_error;
mod flavor;
pub mod import;
mod instance_upgrade;
pub mod names;
pub mod own_secrets;
mod quantity;
mod reinit;
pub mod replica;
mod schema_check;
pub mod sql_objects;
pub mod sql_privileges;
mod status;
pub mod storage;
mod upgrade;
pub mod validation;

pub use binlogs::BinlogsStatus;
pub use cluster::{
    AdditionalService, AffinitySpec, AntiAffinityType, Cluster, ClusterSpec, DataDurability,
    ManagedServices, ManagedSpec, MysqlSpec, OPERATOR_OWNED_PARAMETERS, PrimaryUpdateMethod,
    PrimaryUpdateStrategy, SecretsSpec, SemiSyncSpec, ServiceRole, ServiceTemplate,
    ServiceTemplateMeta, ServiceTemplateSpec, ServiceType, ServiceUpdateStrategy, SessionAffinity,
    TrafficPolicy,
};
pub use flavor::Flavor;
pub use instance_upgrade::{
    InstanceUpdateStrategy, InstanceUpgrade, InstanceUpgrades, OrchestratedUpgrade,
};
pub use reinit::{DivergedInstances, SavedTransactions};
pub use status::{
    ClusterStatus, InstanceState, Phase, VOLUME_GROWTH_KEPT, VolumeGrowthStep, VolumeUsage,
};
pub use storage::{AutoGrowSpec, BinlogStorageSpec, StorageSpec};
pub use upgrade::{
    CatalogDocument, CatalogImage, CatalogKind, ClusterImageCatalog, ClusterImageCatalogSpec,
    ImageCatalog, ImageCatalogRef, ImageCatalogSpec, MaintenanceWindow, UpgradeCondition,
    UpgradePhase, UpgradeRecord, Weekday,
};
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
