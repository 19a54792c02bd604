//! Storage for the claims the operator makes: a default StorageClass whose
//! claims this program provisions as local PersistentVolumes (a file
//! system of the claim's size under the node's directory, pinned to the
//! node: `volume_fs.rs`), the way a node-local provisioner does on a real
//! cluster. Released volumes are deleted with their data. The class allows
//! expansion, and this program plays the resizer and the node plugin a CSI
//! driver brings: a bound claim asking for more than its volume holds has
//! its file system grown online, then the volume's and the claim's
//! capacity say the new size.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    LocalVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference,
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};

/// The default StorageClass of the node.
pub const CLASS: &str = "cnmysql-local";
/// Its provisioner's name.
pub const PROVISIONER: &str = "cnmysql.io/realnode-local";
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";

/// Create the default StorageClass (binding waits for the first Pod, so
/// the volume is made on the node the Pod was scheduled to).
pub async fn install_class(client: &kube::Client) -> anyhow::Result<()> {
    let api: Api<StorageClass> = Api::all(client.clone());
    let class = StorageClass {
        metadata: ObjectMeta {
            name: Some(CLASS.into()),
            annotations: Some(BTreeMap::from([(
                "storageclass.kubernetes.io/is-default-class".into(),
                "true".into(),
            )])),
            ..Default::default()
        },
        provisioner: PROVISIONER.into(),
        allow_volume_expansion: Some(true),
        volume_binding_mode: Some("WaitForFirstConsumer".into()),
        reclaim_policy: Some("Delete".into()),
        ..Default::default()
    };
    match api.create(&PostParams::default(), &class).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Provision and delete volumes for `node` until `stop` turns true.
pub async fn run(
    client: kube::Client,
    dir: PathBuf,
    node: String,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        if let Err(e) = pass(&client, &dir, &node).await {
            tracing::warn!(error = %e, "storage provisioner pass failed");
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = stop.changed() => return,
        }
    }
}

async fn pass(client: &kube::Client, dir: &Path, node: &str) -> anyhow::Result<()> {
    let claims: Api<PersistentVolumeClaim> = Api::all(client.clone());
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    for pvc in claims.list(&ListParams::default()).await? {
        let wanted = pvc.spec.as_ref().is_some_and(|s| {
            s.storage_class_name.as_deref() == Some(CLASS) && s.volume_name.is_none()
        }) && pvc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SELECTED_NODE))
            .is_some_and(|n| n == node)
            && pvc.metadata.deletion_timestamp.is_none();
        if wanted {
            let pv = volume_for(&pvc, dir, node)?;
            match volumes.create(&PostParams::default(), &pv).await {
                Ok(_) => tracing::info!(claim = ?pvc.metadata.name, "volume provisioned"),
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    for pvc in claims.list(&ListParams::default()).await? {
        resize(&claims, &volumes, &pvc, dir).await?;
    }
    for pv in volumes.list(&ListParams::default()).await? {
        let ours = pv
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PROVISIONED_BY))
            .is_some_and(|p| p == PROVISIONER);
        let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
        if ours && matches!(phase, Some("Released") | Some("Failed")) {
            // Each node's provisioner deletes its own volumes.
            let Some(path) = pv
                .spec
                .as_ref()
                .and_then(|s| s.local.as_ref())
                .map(|l| PathBuf::from(&l.path))
                .filter(|p| p.parent() == Some(&dir.join("volumes")))
            else {
                continue;
            };
            crate::volume_fs::remove(&path);
            let name = pv.metadata.name.clone().unwrap_or_default();
            let _ = volumes.delete(&name, &DeleteParams::default()).await;
        }
    }
    Ok(())
}

/// A bound claim of the class asking for more than its capacity: the
/// volume and then the claim's status take the new size.
async fn resize(
    claims: &Api<PersistentVolumeClaim>,
    volumes: &Api<PersistentVolume>,
    pvc: &PersistentVolumeClaim,
    dir: &Path,
) -> anyhow::Result<()> {
    use kube::api::{Patch, PatchParams};
    let Some(spec) = pvc
        .spec
        .as_ref()
        .filter(|s| s.storage_class_name.as_deref() == Some(CLASS))
    else {
        return Ok(());
    };
    let (Some(volume), Some(asked)) = (
        spec.volume_name.as_ref(),
        spec.resources
            .as_ref()
            .and_then(|r| r.requests.as_ref()?.get("storage")),
    ) else {
        return Ok(());
    };
    let has = pvc
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref()?.get("storage"));
    let bytes = |q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
        cnmysql_api::validation::quantity_bytes(&q.0)
    };
    if has.and_then(bytes) >= bytes(asked) {
        return Ok(());
    }
    // Each node's provisioner grows its own volumes.
    let Some(path) = volumes
        .get_opt(volume)
        .await?
        .and_then(|pv| pv.spec?.local.map(|l| PathBuf::from(l.path)))
        .filter(|p| p.parent() == Some(&dir.join("volumes")))
    else {
        return Ok(());
    };
    crate::volume_fs::grow(&path, bytes(asked).unwrap_or(0) as u64)?;
    let capacity = serde_json::json!({"storage": asked});
    volumes
        .patch(
            volume,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"capacity": capacity}})),
        )
        .await?;
    let ns = pvc.metadata.namespace.clone().unwrap_or_default();
    let name = pvc.metadata.name.clone().unwrap_or_default();
    let in_ns: Api<PersistentVolumeClaim> = Api::namespaced(claims.clone().into_client(), &ns);
    in_ns
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"capacity": capacity}})),
        )
        .await?;
    tracing::info!(claim = name, size = asked.0, "volume expanded");
    Ok(())
}

fn volume_for(
    pvc: &PersistentVolumeClaim,
    dir: &Path,
    node: &str,
) -> anyhow::Result<PersistentVolume> {
    let uid = pvc.metadata.uid.clone().unwrap_or_default();
    let name = format!("pvc-{uid}");
    let path = dir.join("volumes").join(&name);
    let spec = pvc.spec.clone().unwrap_or_default();
    let size = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .cloned()
        .unwrap_or(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
            "1Gi".into(),
        ));
    let bytes = cnmysql_api::validation::quantity_bytes(&size.0).unwrap_or(1 << 30);
    crate::volume_fs::make(&path, bytes as u64)?;
    Ok(PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name),
            annotations: Some(BTreeMap::from([(
                PROVISIONED_BY.into(),
                PROVISIONER.into(),
            )])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([("storage".into(), size)])),
            access_modes: spec.access_modes.clone(),
            persistent_volume_reclaim_policy: Some("Delete".into()),
            storage_class_name: Some(CLASS.into()),
            volume_mode: spec.volume_mode.clone(),
            local: Some(LocalVolumeSource {
                path: path.display().to_string(),
                fs_type: None,
            }),
            claim_ref: Some(ObjectReference {
                namespace: pvc.metadata.namespace.clone(),
                name: pvc.metadata.name.clone(),
                uid: pvc.metadata.uid.clone(),
                ..Default::default()
            }),
            node_affinity: Some(VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: "kubernetes.io/hostname".into(),
                            operator: "In".into(),
                            values: Some(vec![node.into()]),
                        }]),
                        match_fields: None,
                    }],
                }),
            }),
            ..Default::default()
        }),
        status: None,
    })
}
