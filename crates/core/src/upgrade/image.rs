//! Which server image the Cluster declares: its image catalog, the spec
//! resolved to an image and the version it holds ([`Declared`]), and the
//! image instances are made from while an upgrade is or is not under way.

use cnmysql_api::{ClusterSpec, ClusterStatus, Flavor, UpgradePhase};

use crate::declared::Declared;
use crate::upgrade::version::{matches, tag_version};

/// An image catalog as the platform found it.
#[derive(Clone, Debug, PartialEq)]
pub struct Catalog {
    /// `ImageCatalog/<name>` or `ClusterImageCatalog/<name>`.
    pub what: String,
    pub flavor: Flavor,
    pub images: Vec<cnmysql_api::CatalogImage>,
}

/// The catalog `spec.mysql.imageCatalogRef` names among `docs` (None when
/// there is no reference; `Some(Err)` when it is not among them).
pub fn find_catalog(
    spec: &ClusterSpec,
    docs: &[cnmysql_api::CatalogDocument],
) -> Option<Result<Catalog, String>> {
    let r = spec.mysql.image_catalog_ref.as_ref()?;
    Some(
        docs.iter()
            .find(|d| d.kind() == r.kind && d.name() == r.name)
            .map(|d| {
                let (flavor, images) = d.entries();
                Catalog {
                    what: format!("{}/{}", r.kind.as_str(), r.name),
                    flavor,
                    images: images.to_vec(),
                }
            })
            .ok_or_else(|| {
                format!(
                    "{} {} was not found: create it, or name one that exists",
                    r.kind.as_str(),
                    r.name
                )
            }),
    )
}

/// Resolve the spec to an image and its version. `catalog`: the catalog
/// `spec.mysql.imageCatalogRef` names (an error when it cannot be read);
/// `default_image`: the flavour's image on this platform; `image_version`:
/// what the platform knows of an image's version beyond its tag.
pub fn resolve(
    spec: &ClusterSpec,
    catalog: Option<Result<Catalog, String>>,
    default_image: &str,
    mut image_version: impl FnMut(&str) -> Option<String>,
    force_rollout: bool,
) -> Declared {
    let m = &spec.mysql;
    let fail = |e: String| Declared {
        error: Some(e),
        force_rollout,
        ..Default::default()
    };
    let (image, version) = match (&m.image_catalog_ref, catalog) {
        (Some(r), Some(Ok(c))) => {
            if c.flavor != m.flavor {
                return fail(format!(
                    "spec.mysql.imageCatalogRef: {} lists {} images, and the Cluster's flavour is {}: name a {} catalog",
                    c.what,
                    c.flavor.as_str(),
                    m.flavor.as_str(),
                    m.flavor.as_str()
                ));
            }
            let want = m.version.clone().unwrap_or_default();
            let Some(entry) = c.images.iter().find(|i| i.version == want) else {
                let listed: Vec<&str> = c.images.iter().map(|i| i.version.as_str()).collect();
                return fail(format!(
                    "spec.mysql.version: {} ({}) lists no {want}; it lists {}: pick one of those or add it to the catalog",
                    c.what,
                    r.name,
                    listed.join(", ")
                ));
            };
            // What the platform knows of the image beats the catalog's word.
            if let Some(have) = image_version(&entry.image)
                && !matches(&have, &entry.version)
            {
                return fail(format!(
                    "spec.mysql.imageCatalogRef: {} lists {} as {}, and it holds {have}: correct the catalog",
                    c.what, entry.image, entry.version
                ));
            }
            (entry.image.clone(), Some(entry.version.clone()))
        }
        (Some(_), Some(Err(e))) => {
            return fail(format!("spec.mysql.imageCatalogRef: {e}"));
        }
        (Some(r), None) => {
            return fail(format!(
                "spec.mysql.imageCatalogRef: {} {} was not found: create it, or name one that exists",
                r.kind.as_str(),
                r.name
            ));
        }
        _ => {
            let image = m.image.clone().unwrap_or_else(|| default_image.to_string());
            let version = image_version(&image).or_else(|| tag_version(&image));
            (image, version)
        }
    };
    if let (Some(want), false) = (&m.version, m.image_catalog_ref.is_some()) {
        match &version {
            Some(have) if matches(have, want) => {}
            Some(have) => {
                return fail(format!(
                    "spec.mysql.version is {want}, and the image {image} holds {have}: name an image of {want}, or set the version it holds"
                ));
            }
            None => {}
        }
    }
    Declared {
        version: version.or_else(|| m.version.clone()),
        image: Some(image),
        error: None,
        force_rollout,
        asked: Default::default(),
        operator_certificate_expires_at: None,
    }
}

/// The image instances are made from now: the target once its upgrade has
/// started (or for a cluster that has run nothing yet), else the image the
/// cluster runs.
pub fn instance_image(status: &ClusterStatus, target: Option<&str>) -> Option<String> {
    let Some(target) = target else {
        return status.image.clone();
    };
    let started = status.upgrade_history.last().is_some_and(|r| {
        r.image == target
            && (matches!(r.phase, UpgradePhase::Upgrading | UpgradePhase::Upgraded)
                || (r.phase == UpgradePhase::Failed && r.start_time.is_some()))
    });
    match &status.image {
        Some(current) if !started => Some(current.clone()),
        _ => Some(target.to_string()),
    }
}
