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
}
