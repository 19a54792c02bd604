//! One PersistentVolumeClaim `<cluster>-<ordinal>` per instance, from
//! `spec.storage`. A claim outlives its Pod: failover, fencing and Pod
//! recreation never delete it, and a diverged instance's claim is kept for a
//! human. It carries the Cluster as owner, so deleting the Cluster deletes
//! it (keep data with a `Retain` reclaim policy on the StorageClass).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, VolumeResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;

use cnmysql_api::Cluster;

use crate::labels::instance_labels;

/// Size of a claim when the Cluster names none.
pub const DEFAULT_SIZE: &str = "1Gi";

/// The binary logs' claim of an instance is `<instance>-binlog`.
pub const BINLOG_SUFFIX: &str = "-binlog";

/// The instance a claim belongs to (its data claim or its binlog claim).
pub fn claim_instance(claim: &str) -> &str {
    claim.strip_suffix(BINLOG_SUFFIX).unwrap_or(claim)
}

/// The claim of an instance's binary logs, when the Cluster gives them a
/// volume of their own (`spec.storage.binlogs`): its size and class, the
/// data claims' class by default.
pub fn binlog_claim(cluster: &Cluster, instance: &str) -> Option<PersistentVolumeClaim> {
    let b = cluster.spec.storage.binlogs.as_ref()?;
    let data = claim(cluster, instance).spec.unwrap_or_default();
    let size = b.size.clone().unwrap_or_else(|| DEFAULT_SIZE.to_string());
    let spec = k8s_openapi::api::core::v1::PersistentVolumeClaimSpec {
        access_modes: data.access_modes,
        storage_class_name: b.storage_class.clone().or(data.storage_class_name),
        resources: Some(VolumeResourceRequirements {
            requests: Some(BTreeMap::from([("storage".to_string(), Quantity(size))])),
            ..Default::default()
        }),
        ..Default::default()
    };
    Some(PersistentVolumeClaim {
        metadata: super::meta(
            cluster,
            format!("{instance}{BINLOG_SUFFIX}"),
            instance_labels(&cluster.name_any(), instance),
        ),
        spec: Some(spec),
        status: None,
    })
}

pub fn claim(cluster: &Cluster, instance: &str) -> PersistentVolumeClaim {
    let storage = &cluster.spec.storage;
    let mut spec = storage.pvc_template.clone().unwrap_or_default();
    if spec.access_modes.as_ref().is_none_or(Vec::is_empty) {
        spec.access_modes = Some(vec!["ReadWriteOnce".into()]);
    }
    if spec.storage_class_name.is_none() {
        spec.storage_class_name = storage.storage_class.clone();
    }
    let resources = spec
        .resources
        .get_or_insert_with(VolumeResourceRequirements::default);
    let requests = resources.requests.get_or_insert_with(BTreeMap::new);
    requests.entry("storage".into()).or_insert_with(|| {
        Quantity(
            storage
                .size
                .clone()
                .unwrap_or_else(|| DEFAULT_SIZE.to_string()),
        )
    });
    PersistentVolumeClaim {
        metadata: super::meta(
            cluster,
            instance.to_string(),
            instance_labels(&cluster.name_any(), instance),
        ),
        spec: Some(spec),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::testutil::cluster;

    #[test]
    fn size_class_and_template_combine() {
        let c = cluster("instances: 2\nstorage:\n  size: 20Gi\n  storageClass: fast\n");
        let pvc = claim(&c, "db-2");
        assert_eq!(pvc.metadata.name.as_deref(), Some("db-2"));
        let spec = pvc.spec.unwrap();
        assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(
            spec.resources.unwrap().requests.unwrap()["storage"],
            Quantity("20Gi".into())
        );
        assert_eq!(spec.access_modes.unwrap(), vec!["ReadWriteOnce"]);

        let c = cluster(
            "storage:\n  size: 5Gi\n  pvcTemplate:\n    accessModes: [ReadWriteOncePod]\n    resources:\n      requests:\n        storage: 8Gi\n",
        );
        let spec = claim(&c, "db-1").spec.unwrap();
        assert_eq!(spec.access_modes.unwrap(), vec!["ReadWriteOncePod"]);
        // The template's request wins over size.
        assert_eq!(
            spec.resources.unwrap().requests.unwrap()["storage"],
            Quantity("8Gi".into())
        );
    }

    #[test]
    fn binary_logs_get_a_claim_and_a_mount_of_their_own_when_asked() {
        let c = cluster("instances: 2\nstorage:\n  storageClass: fast\n");
        assert!(binlog_claim(&c, "db-1").is_none());
        let c =
            cluster("instances: 2\nstorage:\n  storageClass: fast\n  binlogs:\n    size: 3Gi\n");
        let pvc = binlog_claim(&c, "db-1").unwrap();
        assert_eq!(pvc.metadata.name.as_deref(), Some("db-1-binlog"));
        assert_eq!(claim_instance("db-1-binlog"), "db-1");
        let spec = pvc.spec.unwrap();
        assert_eq!(
            spec.storage_class_name.as_deref(),
            Some("fast"),
            "the data claims' class"
        );
        assert_eq!(
            spec.resources.unwrap().requests.unwrap()["storage"],
            Quantity("3Gi".into())
        );
        let env = crate::objects::Environment {
            operator_image: "ghcr.io/cnmysql/cnmysql:test".into(),
        };
        let pod = crate::objects::pod::pod(&c, "db-1", &env);
        let ps = pod.spec.unwrap();
        let vol = ps
            .volumes
            .unwrap()
            .into_iter()
            .find(|v| v.name == "binlog")
            .unwrap();
        assert_eq!(
            vol.persistent_volume_claim.unwrap().claim_name,
            "db-1-binlog"
        );
        let main = &ps.containers[0];
        assert!(
            main.volume_mounts
                .as_ref()
                .unwrap()
                .iter()
                .any(|m| m.name == "binlog")
        );
        assert!(
            main.env
                .as_ref()
                .unwrap()
                .iter()
                .any(|e| e.name == "CNMYSQL_BINLOGS")
        );
    }
}
