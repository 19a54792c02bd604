//! A Pod's volumes as host directories: emptyDir under the Pod's own
//! directory, one directory per PersistentVolumeClaim that outlives the Pod
//! (bound through a PersistentVolume the node creates for it), and
//! Secrets, ConfigMaps, the downward API and ServiceAccount tokens written
//! as files — read through the API server, as a kubelet reads them.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, ObjectReference, PersistentVolume,
    PersistentVolumeClaim, PersistentVolumeSpec, Pod, Secret, ServiceAccount, Volume,
};
use kube::api::{Api, ObjectMeta, PostParams};

use crate::env::field_value;

/// Where each of a Pod's volumes is on the host.
pub type Mounted = BTreeMap<String, PathBuf>;

/// Who owns the files of a Pod's volumes.
#[derive(Clone, Copy, Debug)]
pub struct Owner {
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

impl Owner {
    fn chown(&self, p: &Path) -> anyhow::Result<()> {
        if self.uid.is_none() && self.gid.is_none() {
            return Ok(());
        }
        nix::unistd::chown(
            p,
            self.uid.map(nix::unistd::Uid::from_raw),
            self.gid.map(nix::unistd::Gid::from_raw),
        )
        .with_context(|| format!("chown {}", p.display()))
    }

    fn chown_tree(&self, p: &Path) -> anyhow::Result<()> {
        self.chown(p)?;
        if p.is_dir() && !p.is_symlink() {
            for e in std::fs::read_dir(p)? {
                self.chown_tree(&e?.path())?;
            }
        }
        Ok(())
    }
}

/// The node-wide directory of a claim's data.
pub fn claim_dir(state: &Path, namespace: &str, claim: &str) -> PathBuf {
    state.join("claims").join(namespace).join(claim)
}

/// Prepare every volume of `pod`; `dir` is the Pod's own directory.
pub async fn prepare(
    client: &kube::Client,
    state: &Path,
    dir: &Path,
    pod: &Pod,
    pod_ip: &str,
    owner: Owner,
) -> anyhow::Result<Mounted> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let spec = pod.spec.as_ref().context("the Pod has no spec")?;
    let mut out = Mounted::new();
    for v in spec.volumes.iter().flatten() {
        let path = volume(client, state, dir, pod, pod_ip, &ns, v, owner)
            .await
            .with_context(|| format!("volume {:?}", v.name))?;
        out.insert(v.name.clone(), path);
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
async fn volume(
    client: &kube::Client,
    state: &Path,
    dir: &Path,
    pod: &Pod,
    pod_ip: &str,
    ns: &str,
    v: &Volume,
    owner: Owner,
) -> anyhow::Result<PathBuf> {
    let files = dir.join("volumes").join(&v.name);
    if v.empty_dir.is_some() {
        // As a kubelet makes it: owned by root, group the Pod's fsGroup,
        // mode 2777 (so a container user can write in it but not chmod it).
        std::fs::create_dir_all(&files)?;
        Owner {
            uid: Some(0),
            gid: owner.gid,
        }
        .chown(&files)?;
        std::fs::set_permissions(&files, std::fs::Permissions::from_mode(0o2777))?;
        return Ok(files);
    }
    if let Some(h) = &v.host_path {
        return Ok(PathBuf::from(&h.path));
    }
    if let Some(c) = &v.persistent_volume_claim {
        let claim_path = claim_dir(state, ns, &c.claim_name);
        bind_claim(client, ns, &c.claim_name, &claim_path).await?;
        std::fs::create_dir_all(&claim_path)?;
        owner.chown_tree(&claim_path)?;
        return Ok(claim_path);
    }
    // The remaining kinds are files written afresh.
    let _ = std::fs::remove_dir_all(&files);
    std::fs::create_dir_all(&files)?;
    if let Some(s) = &v.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        let data = secret_data(client, ns, &name, s.optional.unwrap_or(false)).await?;
        write_items(&files, &data, s.items.as_deref(), s.default_mode, owner)?;
    } else if let Some(c) = &v.config_map {
        let data = config_map_data(client, ns, &c.name, c.optional.unwrap_or(false)).await?;
        write_items(&files, &data, c.items.as_deref(), c.default_mode, owner)?;
    } else if let Some(d) = &v.downward_api {
        write_downward(
            &files,
            pod,
            pod_ip,
            d.items.as_deref(),
            d.default_mode,
            owner,
        )?;
    } else if let Some(p) = &v.projected {
        for src in p.sources.iter().flatten() {
            if let Some(s) = &src.secret {
                let data = secret_data(client, ns, &s.name, s.optional.unwrap_or(false)).await?;
                write_items(&files, &data, s.items.as_deref(), p.default_mode, owner)?;
            }
            if let Some(c) = &src.config_map {
                let data =
                    config_map_data(client, ns, &c.name, c.optional.unwrap_or(false)).await?;
                write_items(&files, &data, c.items.as_deref(), p.default_mode, owner)?;
            }
            if let Some(d) = &src.downward_api {
                write_downward(
                    &files,
                    pod,
                    pod_ip,
                    d.items.as_deref(),
                    p.default_mode,
                    owner,
                )?;
            }
            if let Some(t) = &src.service_account_token {
                let token = service_account_token(
                    client,
                    pod,
                    t.audience.clone(),
                    t.expiration_seconds.unwrap_or(3607),
                )
                .await?;
                write_file(
                    &files.join(&t.path),
                    token.as_bytes(),
                    p.default_mode,
                    owner,
                )?;
            }
        }
    } else {
        bail!("this kind of volume is not supported by the process node");
    }
    owner.chown(&files)?;
    Ok(files)
}

async fn secret_data(
    client: &kube::Client,
    ns: &str,
    name: &str,
    optional: bool,
) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    match Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await?
    {
        Some(s) => {
            let mut out: BTreeMap<String, Vec<u8>> = s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            for (k, v) in s.string_data.unwrap_or_default() {
                out.insert(k, v.into_bytes());
            }
            Ok(out)
        }
        None if optional => Ok(BTreeMap::new()),
        None => bail!("Secret {ns}/{name} does not exist (yet)"),
    }
}

async fn config_map_data(
    client: &kube::Client,
    ns: &str,
    name: &str,
    optional: bool,
) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    match Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await?
    {
        Some(c) => {
            let mut out: BTreeMap<String, Vec<u8>> = c
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes()))
                .collect();
            for (k, v) in c.binary_data.unwrap_or_default() {
                out.insert(k, v.0);
            }
            Ok(out)
        }
        None if optional => Ok(BTreeMap::new()),
        None => bail!("ConfigMap {ns}/{name} does not exist (yet)"),
    }
}

fn write_file(path: &Path, data: &[u8], mode: Option<i32>, owner: Owner) -> anyhow::Result<()> {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p)?;
        owner.chown(p)?;
    }
    std::fs::write(path, data).with_context(|| format!("writing {}", path.display()))?;
    std::fs::set_permissions(
        path,
        std::fs::Permissions::from_mode(mode.unwrap_or(0o644) as u32),
    )?;
    owner.chown(path)
}

fn write_items(
    dir: &Path,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: Option<i32>,
    owner: Owner,
) -> anyhow::Result<()> {
    match items {
        Some(items) => {
            for it in items {
                let Some(v) = data.get(&it.key) else {
                    bail!("key {:?} is missing", it.key);
                };
                write_file(&dir.join(&it.path), v, it.mode.or(default_mode), owner)?;
            }
        }
        None => {
            for (k, v) in data {
                write_file(&dir.join(k), v, default_mode, owner)?;
            }
        }
    }
    Ok(())
}

fn write_downward(
    dir: &Path,
    pod: &Pod,
    pod_ip: &str,
    items: Option<&[DownwardAPIVolumeFile]>,
    default_mode: Option<i32>,
    owner: Owner,
) -> anyhow::Result<()> {
    for it in items.unwrap_or_default() {
        let value = match &it.field_ref {
            Some(f) => field_value(pod, pod_ip, &f.field_path)?,
            None => String::new(),
        };
        write_file(
            &dir.join(&it.path),
            value.as_bytes(),
            it.mode.or(default_mode),
            owner,
        )?;
    }
    Ok(())
}

/// A token for the Pod's ServiceAccount, bound to the Pod (a TokenRequest,
/// as the kubelet makes it).
async fn service_account_token(
    client: &kube::Client,
    pod: &Pod,
    audience: Option<String>,
    expiration_seconds: i64,
) -> anyhow::Result<String> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let req = TokenRequest {
        metadata: ObjectMeta::default(),
        spec: TokenRequestSpec {
            audiences: audience.into_iter().collect(),
            expiration_seconds: Some(expiration_seconds),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        },
        status: None,
    };
    let out = Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .create_token_request(&sa, &PostParams::default(), &req)
        .await
        .with_context(|| format!("a token for ServiceAccount {ns}/{sa}"))?;
    out.status
        .map(|s| s.token)
        .context("the TokenRequest has no token")
}

/// Make sure the claim has a volume: a PersistentVolume pre-bound to it
/// (the PV controller completes the binding), whose data is `path`.
async fn bind_claim(
    client: &kube::Client,
    ns: &str,
    claim: &str,
    path: &Path,
) -> anyhow::Result<()> {
    let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .get_opt(claim)
        .await?
        .with_context(|| format!("PersistentVolumeClaim {ns}/{claim} does not exist (yet)"))?;
    let spec = pvc.spec.clone().unwrap_or_default();
    if spec.volume_name.as_deref().is_some_and(|v| !v.is_empty()) {
        return Ok(());
    }
    let pv_name = format!("procnode-{ns}-{claim}");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    if pvs.get_opt(&pv_name).await?.is_some() {
        return Ok(());
    }
    let capacity = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.clone())
        .and_then(|r| r.get("storage").cloned())
        .map(|q| BTreeMap::from([("storage".to_string(), q)]));
    let pv = PersistentVolume {
        metadata: ObjectMeta {
            name: Some(pv_name),
            labels: Some(BTreeMap::from([(
                "cnmysql.io/procnode".to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity,
            access_modes: spec.access_modes.clone(),
            storage_class_name: spec.storage_class_name.clone(),
            volume_mode: spec.volume_mode.clone(),
            persistent_volume_reclaim_policy: Some("Retain".into()),
            host_path: Some(k8s_openapi::api::core::v1::HostPathVolumeSource {
                path: path.display().to_string(),
                type_: None,
            }),
            claim_ref: Some(ObjectReference {
                namespace: Some(ns.into()),
                name: Some(claim.into()),
                uid: pvc.metadata.uid.clone(),
                kind: Some("PersistentVolumeClaim".into()),
                api_version: Some("v1".into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    };
    match pvs.create(&PostParams::default(), &pv).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}
