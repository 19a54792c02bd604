//! What each local instance is made from (its definition): the server
//! image its programs come from (`host` for this machine's own server) and
//! the server settings. The Cluster's spec says what it should be; the
//! server upgrade (`core/src/upgrade/server.rs`) says which image instances are
//! made from now; an instance whose configuration says otherwise is
//! outdated, and the rollout recreates it with the new one.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cnmysql_api::{CatalogDocument, Cluster, Flavor};
use cnmysql_core::declared::Declared;
use cnmysql_core::upgrade::image;
use cnmysql_core::upgrade::server::FORCE_ANNOTATION;
use cnmysql_instance::config::{InstanceConfig, Programs};

/// The image name of this machine's own server programs.
pub const HOST_IMAGE: &str = "host";

/// Programs and templates per image, found once.
pub struct Images {
    flavor: Flavor,
    store: PathBuf,
    programs: BTreeMap<String, Programs>,
    templates: BTreeMap<String, PathBuf>,
    versions: BTreeMap<String, Option<String>>,
}

impl Images {
    pub fn new(flavor: Flavor) -> Images {
        Images {
            flavor,
            store: cnmysql_instance::server_image::default_store(),
            programs: BTreeMap::new(),
            templates: BTreeMap::new(),
            versions: BTreeMap::new(),
        }
    }

    /// The programs of `image` (`host`: this machine's), or why there are
    /// none, naming spec.mysql.image.
    pub fn programs(&mut self, image: &str) -> anyhow::Result<Programs> {
        if let Some(p) = self.programs.get(image) {
            return Ok(p.clone());
        }
        let mut spec: cnmysql_api::ClusterSpec =
            serde_json::from_str("{}").expect("the empty spec is valid");
        spec.mysql.flavor = self.flavor;
        spec.mysql.image = (image != HOST_IMAGE).then(|| image.to_string());
        let mut p = Programs::for_spec(&spec, &self.store).map_err(|e| anyhow::anyhow!(e))?;
        // Named as the Cluster names it (`docker.io/library/mariadb:11.8`
        // is the store's `mariadb:11.8`): what instances are compared by.
        if let Some(img) = p.image.as_mut() {
            img.reference = image.to_string();
        }
        self.programs.insert(image.to_string(), p.clone());
        Ok(p)
    }

    /// The version `image` holds, if its programs can be found.
    pub fn version(&mut self, image: &str) -> Option<String> {
        if let Some(v) = self.versions.get(image) {
            return v.clone();
        }
        let v = self.programs(image).ok()?.server_version();
        self.versions.insert(image.to_string(), v.clone());
        v
    }

    /// The initialised data directory template of `image`'s server.
    pub fn template(&mut self, image: &str) -> anyhow::Result<PathBuf> {
        if let Some(t) = self.templates.get(image) {
            return Ok(t.clone());
        }
        let programs = self.programs(image)?;
        let t = crate::template::ensure_template(self.flavor, &programs)?;
        self.templates.insert(image.to_string(), t.clone());
        Ok(t)
    }
}

/// Each instance's configuration as written, and how to write it again.
pub struct Definitions {
    pub dir: crate::state::StateDir,
    pub cluster: Cluster,
    pub catalogs: Vec<CatalogDocument>,
    pub ports: crate::state::Ports,
    pub images: Images,
    pub configs: BTreeMap<String, InstanceConfig>,
}

impl Definitions {
    pub fn new(
        dir: crate::state::StateDir,
        manifest: cnmysql_api::Manifest,
        ports: crate::state::Ports,
    ) -> Definitions {
        Definitions {
            images: Images::new(manifest.cluster.spec.mysql.flavor),
            dir,
            cluster: manifest.cluster,
            catalogs: manifest.catalogs,
            ports,
            configs: BTreeMap::new(),
        }
    }

    pub fn declared(&mut self) -> Declared {
        declared(&self.cluster, &self.catalogs, &mut self.images)
    }

    /// The image instances are made from now (see
    /// [`image::instance_image`]).
    pub fn instance_image(
        &mut self,
        status: &cnmysql_api::ClusterStatus,
    ) -> anyhow::Result<String> {
        let d = self.declared();
        image::instance_image(status, d.image.as_deref()).ok_or_else(|| {
            anyhow::anyhow!(
                "no server image: {}",
                d.error
                    .unwrap_or_else(|| "spec.mysql.image is not resolved".into())
            )
        })
    }

    /// The image `name` is made from now: the one its annotation-driven
    /// upgrade pinned, else the cluster's ([`Self::instance_image`]).
    pub fn image_of_instance(
        &mut self,
        status: &cnmysql_api::ClusterStatus,
        name: &str,
    ) -> anyhow::Result<String> {
        let cluster = self.instance_image(status);
        match cnmysql_core::upgrade::annotated::image_for(
            status,
            name,
            cluster.as_ref().ok().cloned(),
        ) {
            Some(image) => Ok(image),
            None => cluster,
        }
    }

    /// What the annotations ask, with the servers they name resolved the
    /// way the Cluster's own image is.
    pub fn asked(&mut self) -> anyhow::Result<cnmysql_core::upgrade::annotations::Asked> {
        let mut asked = crate::annotations::asked(&self.dir, &self.cluster)?;
        let catalogs = self.catalogs.clone();
        for v in cnmysql_core::upgrade::annotations::server_values(&asked) {
            let catalog = image::find_catalog(&self.cluster.spec, &catalogs);
            let r = cnmysql_core::upgrade::annotated::resolve_server(
                &self.cluster.spec,
                &v,
                catalog,
                HOST_IMAGE,
                |image| self.images.version(image),
            );
            asked.servers.insert(v, r);
        }
        Ok(asked)
    }

    /// Write `name`'s configuration for `image` and the current spec.
    pub fn write(&mut self, name: &str, image: &str) -> anyhow::Result<()> {
        let ordinal = cnmysql_api::names::ordinal_of(
            self.cluster.metadata.name.as_deref().unwrap_or_default(),
            name,
        )
        .ok_or_else(|| anyhow::anyhow!("{name} is not an instance"))?;
        let programs = self.images.programs(image)?;
        let template = Some(self.images.template(image)?);
        let cfg = self.dir.build_instance_config(
            &self.cluster,
            &self.ports,
            ordinal,
            &programs,
            template,
        )?;
        std::fs::create_dir_all(self.dir.instance_dir(name))?;
        cnmysql_tls::write_private(
            &self.dir.instance_config(name),
            &serde_json::to_string_pretty(&cfg)?,
            true,
        )?;
        self.configs.insert(name.to_string(), cfg);
        Ok(())
    }

    /// At start: each instance keeps the image its configuration names
    /// (the rollout moves it, one at a time); a new one gets the image
    /// instances are made from now.
    pub fn write_all(
        &mut self,
        names: &[String],
        status: &cnmysql_api::ClusterStatus,
    ) -> anyhow::Result<()> {
        for name in names {
            let existing = InstanceConfig::load(&self.dir.instance_config(name))
                .ok()
                .filter(|_| self.dir.instance_dir(name).join("data").exists());
            let image = match existing {
                Some(cfg) => image_of(&cfg),
                None => self.image_of_instance(status, name)?,
            };
            self.write(name, &image)?;
        }
        Ok(())
    }

    /// What of `name`'s configuration is outdated now.
    pub fn outdated(&mut self, name: &str, status: &cnmysql_api::ClusterStatus) -> Option<String> {
        let image = self.image_of_instance(status, name).ok()?;
        let cfg = self.configs.get(name)?;
        outdated(cfg, &image, &self.cluster)
    }
}

/// What the Cluster declares: its target image (resolved through the
/// manifest's catalogs or the image store) and the force annotation.
pub fn declared(cluster: &Cluster, catalogs: &[CatalogDocument], images: &mut Images) -> Declared {
    let force = cluster
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(FORCE_ANNOTATION))
        .is_some_and(|v| v == "true");
    let catalog = image::find_catalog(&cluster.spec, catalogs);
    image::resolve(
        &cluster.spec,
        catalog,
        HOST_IMAGE,
        |image| images.version(image),
        force,
    )
}

/// The image an instance's configuration runs.
pub fn image_of(cfg: &InstanceConfig) -> String {
    cfg.programs
        .image
        .as_ref()
        .map(|i| i.reference.clone())
        .unwrap_or_else(|| HOST_IMAGE.to_string())
}

/// What differs between the instance's configuration and what it should
/// be made from now, in the user's terms (`cnmysql_core::definition`: a
/// local instance records its image and its server settings).
pub fn outdated(cfg: &InstanceConfig, image: &str, cluster: &Cluster) -> Option<String> {
    let made = cnmysql_core::definition::Definition::of(&cfg.spec, image_of(cfg));
    let have = serde_json::to_value(made).ok()?;
    let have = have.as_object()?;
    let recorded = ["image", "parameters"]
        .into_iter()
        .filter_map(|k| Some((k.to_string(), have.get(k)?.clone())))
        .collect();
    let want = cnmysql_core::definition::Definition::of(&cluster.spec, image.to_string());
    cnmysql_core::definition::outdated(&recorded, &want)
}

/// Whether two manifests carry the same image catalogs.
pub fn same_catalogs(a: &[CatalogDocument], b: &[CatalogDocument]) -> bool {
    let key = |docs: &[CatalogDocument]| {
        docs.iter()
            .map(|d| {
                let (flavor, images) = d.entries();
                (d.kind(), d.name().to_string(), flavor, images.to_vec())
            })
            .collect::<Vec<_>>()
    };
    key(a) == key(b)
}

/// The fields `cnmysql local apply` may change on a running cluster; any
/// other change is refused naming it.
pub fn check_change(old: &Cluster, new: &Cluster) -> Result<Vec<String>, String> {
    let mut a = serde_json::to_value(&old.spec).unwrap_or_default();
    let mut b = serde_json::to_value(&new.spec).unwrap_or_default();
    let live: &[&[&str]] = &[
        &["mysql", "image"],
        &["mysql", "version"],
        &["mysql", "imageCatalogRef"],
        &["mysql", "upgradeAt"],
        &["mysql", "parameters"],
        &["maintenanceWindow"],
        &["primaryUpdateMethod"],
        &["primaryUpdateStrategy"],
        &["inPlaceInstanceManagerUpdates"],
        &["failoverDelay"],
        &["maxSwitchoverDelay"],
        &["replica"],
        &["managed", "adopt"],
    ];
    let mut changed = Vec::new();
    for path in live {
        let take = |v: &mut serde_json::Value| {
            let mut cur = v;
            for p in &path[..path.len() - 1] {
                cur = cur.get_mut(*p)?;
            }
            cur.as_object_mut()?.remove(*path.last()?)
        };
        let (x, y) = (take(&mut a), take(&mut b));
        if x != y {
            let show = |v: &Option<serde_json::Value>| match v {
                None => "(unset)".to_string(),
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
            };
            changed.push(format!(
                "spec.{}: {} → {}",
                path.join("."),
                show(&x),
                show(&y)
            ));
        }
    }
    if a != b {
        let (ao, bo) = (
            a.as_object().cloned().unwrap_or_default(),
            b.as_object().cloned().unwrap_or_default(),
        );
        let mut fields: Vec<String> = ao
            .keys()
            .chain(bo.keys())
            .filter(|k| ao.get(*k) != bo.get(*k))
            .map(|k| format!("spec.{k}"))
            .collect();
        fields.dedup();
        return Err(format!(
            "{} cannot change on a running local cluster: put it back, or stop the cluster (`cnmysql local down`), change it and start it again",
            fields.join(", ")
        ));
    }
    let ann = |c: &Cluster| c.metadata.annotations.clone().unwrap_or_default();
    if ann(old) != ann(new) {
        changed.push("metadata.annotations".into());
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(spec: &str) -> Cluster {
        cnmysql_api::parse_cluster(&format!(
            "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata: {{name: db}}\nspec: {spec}\n"
        ))
        .unwrap()
    }

    #[test]
    fn catalogs_are_compared_by_what_they_list() {
        let m = |v: &str| {
            cnmysql_api::parse_manifest(&format!(
                "apiVersion: mysql.cnmysql.io/v1\nkind: ImageCatalog\nmetadata: {{name: c}}\nspec:\n  flavor: mariadb\n  images:\n  - {{version: \"{v}\", image: \"mariadb:{v}\"}}\n---\napiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata: {{name: db}}\nspec: {{}}\n"
            ))
            .unwrap()
            .catalogs
        };
        assert!(same_catalogs(&m("11.8"), &m("11.8")));
        assert!(!same_catalogs(&m("11.8"), &m("11.4")));
        assert!(!same_catalogs(&m("11.8"), &[]));
    }

    #[test]
    fn only_what_can_change_live_may_change() {
        let old = cluster("{instances: 3, mysql: {image: 'mariadb:10.11.18'}}");
        let new = cluster(
            "{instances: 3, mysql: {image: 'mariadb:10.11.19', upgradeAt: '2026-12-01T02:00:00Z'}}",
        );
        let changed = check_change(&old, &new).unwrap();
        assert_eq!(
            changed[0],
            "spec.mysql.image: mariadb:10.11.18 → mariadb:10.11.19"
        );
        assert_eq!(
            changed[1],
            "spec.mysql.upgradeAt: (unset) → 2026-12-01T02:00:00Z"
        );
        let e = check_change(
            &old,
            &cluster("{instances: 5, mysql: {image: 'mariadb:10.11.18'}}"),
        )
        .unwrap_err();
        assert!(e.starts_with("spec.instances cannot change"), "{e}");
    }
}
