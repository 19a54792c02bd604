//! The server image a Cluster asks for: `spec.mysql.image`, the entry of
//! its image catalog (`ImageCatalog` in its namespace, or
//! `ClusterImageCatalog`) for `spec.mysql.version`, or the flavour's
//! default; resolved by the core (`image::resolve`) from what is
//! read here. The result goes into the status (`targetImage`,
//! `targetServerVersion`) before any Pod is made from it; which image Pods
//! are made from is then the server upgrade's (`image::instance_image`).

use kube::ResourceExt;
use kube::api::Api;

use cnmysql_api::{CatalogDocument, CatalogKind, Cluster, ClusterImageCatalog, ImageCatalog};
use cnmysql_core::declared::Declared;
use cnmysql_core::upgrade::annotations::Asked;
use cnmysql_core::upgrade::image;
use cnmysql_core::upgrade::server::FORCE_ANNOTATION;

use crate::context::Context;

/// Whether the Cluster carries `cnmysql.io/force-rolling-update: "true"`.
pub fn forced(cluster: &Cluster) -> bool {
    cluster
        .annotations()
        .get(FORCE_ANNOTATION)
        .is_some_and(|v| v == "true")
}

/// The catalog documents the Cluster names (none without a reference);
/// an error naming the field when it cannot be read.
async fn documents(ctx: &Context, cluster: &Cluster) -> Result<Vec<CatalogDocument>, String> {
    let Some(r) = &cluster.spec.mysql.image_catalog_ref else {
        return Ok(Vec::new());
    };
    let ns = cluster.namespace().unwrap_or_default();
    let found = match r.kind {
        CatalogKind::ImageCatalog => Api::<ImageCatalog>::namespaced(ctx.client.clone(), &ns)
            .get_opt(&r.name)
            .await
            .map(|o| o.map(CatalogDocument::Namespaced)),
        CatalogKind::ClusterImageCatalog => Api::<ClusterImageCatalog>::all(ctx.client.clone())
            .get_opt(&r.name)
            .await
            .map(|o| o.map(CatalogDocument::ClusterWide)),
    };
    found.map(|f| f.into_iter().collect()).map_err(|e| {
        format!(
            "spec.mysql.imageCatalogRef: {} {} cannot be read: {e}",
            r.kind.as_str(),
            r.name
        )
    })
}

/// Read the catalog the Cluster names (if any) and resolve its target.
pub async fn resolve(ctx: &Context, cluster: &Cluster) -> Declared {
    let docs = match documents(ctx, cluster).await {
        Ok(d) => d,
        Err(e) => {
            return Declared {
                error: Some(e),
                force_rollout: forced(cluster),
                ..Default::default()
            };
        }
    };
    let catalog = image::find_catalog(&cluster.spec, &docs);
    image::resolve(
        &cluster.spec,
        catalog,
        crate::objects::image::default_image(cluster.spec.mysql.flavor),
        |_| None,
        forced(cluster),
    )
}

/// Resolve the servers `asked` names (`image=`, `version=` in
/// `cnmysql.io/upgrade-to`) through the Cluster's catalog, as its own
/// image is.
pub async fn resolve_servers(ctx: &Context, cluster: &Cluster, asked: &mut Asked) {
    let values = cnmysql_core::upgrade::annotations::server_values(asked);
    if values.is_empty() {
        return;
    }
    let docs = documents(ctx, cluster).await;
    for v in values {
        let r = match &docs {
            Err(e) => Err(e.clone()),
            Ok(docs) => cnmysql_core::upgrade::annotated::resolve_server(
                &cluster.spec,
                &v,
                image::find_catalog(&cluster.spec, docs),
                crate::objects::image::default_image(cluster.spec.mysql.flavor),
                |_| None,
            ),
        };
        asked.servers.insert(v, r);
    }
}

/// The Clusters among `clusters` whose image catalog is `kind/name` (in
/// `namespace` for a namespaced one): reconciled when it changes.
pub fn referring<'a>(
    clusters: impl IntoIterator<Item = &'a Cluster>,
    kind: CatalogKind,
    namespace: Option<&str>,
    name: &str,
) -> Vec<kube::runtime::reflector::ObjectRef<Cluster>> {
    clusters
        .into_iter()
        .filter(|c| {
            c.spec.mysql.image_catalog_ref.as_ref().is_some_and(|r| {
                r.kind == kind
                    && r.name == name
                    && (kind == CatalogKind::ClusterImageCatalog
                        || c.namespace().as_deref() == namespace)
            })
        })
        .map(kube::runtime::reflector::ObjectRef::from_obj)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(ns: &str, name: &str, spec: &str, annotations: &str) -> Cluster {
        let mut c: Cluster = serde_json::from_str(&format!(
            r#"{{"apiVersion":"mysql.cnmysql.io/v1","kind":"Cluster","metadata":{{"name":"{name}","namespace":"{ns}","annotations":{annotations}}},"spec":{spec}}}"#
        ))
        .unwrap();
        c.metadata.uid = Some(name.into());
        c
    }

    #[test]
    fn the_force_annotation_is_read_only_when_true() {
        assert!(forced(&cluster(
            "a",
            "db",
            "{}",
            r#"{"cnmysql.io/force-rolling-update":"true"}"#
        )));
        assert!(!forced(&cluster(
            "a",
            "db",
            "{}",
            r#"{"cnmysql.io/force-rolling-update":"yes"}"#
        )));
        assert!(!forced(&cluster("a", "db", "{}", "{}")));
    }

    #[test]
    fn a_changed_catalog_names_the_clusters_that_use_it() {
        let by = |kind: &str, name: &str| {
            format!(
                r#"{{"mysql":{{"version":"10.11.19","imageCatalogRef":{{"kind":"{kind}","name":"{name}"}}}}}}"#
            )
        };
        let all = [
            cluster("a", "one", &by("ImageCatalog", "m"), "{}"),
            cluster("b", "two", &by("ImageCatalog", "m"), "{}"),
            cluster("b", "three", &by("ClusterImageCatalog", "m"), "{}"),
            cluster("b", "four", "{}", "{}"),
        ];
        let names = |refs: Vec<kube::runtime::reflector::ObjectRef<Cluster>>| {
            refs.into_iter().map(|r| r.name).collect::<Vec<_>>()
        };
        assert_eq!(
            names(referring(&all, CatalogKind::ImageCatalog, Some("b"), "m")),
            ["two"]
        );
        assert_eq!(
            names(referring(&all, CatalogKind::ClusterImageCatalog, None, "m")),
            ["three"]
        );
        assert!(referring(&all, CatalogKind::ImageCatalog, Some("a"), "other").is_empty());
    }
}
