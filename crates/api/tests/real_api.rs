//! The CRD on a real kube-apiserver: it installs (the CEL rules fit the
//! API server's cost budget), a valid Cluster is accepted, and every invalid
//! Cluster of the validation tests is refused by the server itself, with a
//! message naming the field.
//!
//! Ignored unless run by `scripts/test-kube` with `KUBEBUILDER_ASSETS` set.

use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};

mod common;
use common::{BASE, cases, manifest, oversized};

/// Install `deploy/crd.yaml` as committed, the way `kubectl apply
/// --server-side` does.
async fn install_crd(client: &kube::Client) -> anyhow::Result<()> {
    let path = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/crd.yaml"
    ));
    cnmysql_envtest::install_crd(client, path).await
}

fn cluster_api(client: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("mysql.cnmysql.io", "v1", "Cluster");
    Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk))
}

async fn try_apply(client: &kube::Client, text: &str) -> Result<(), String> {
    let obj: serde_json::Value = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
    dry_apply(&cluster_api(client), &obj).await
}

/// A server-side apply the API server validates (strictly) but does not
/// persist.
async fn dry_apply(api: &Api<DynamicObject>, obj: &serde_json::Value) -> Result<(), String> {
    let name = obj["metadata"]["name"].as_str().unwrap_or("db").to_string();
    api.patch(
        &name,
        &PatchParams::apply("cnmysql-test")
            .dry_run()
            .validation_strict(),
        &Patch::Apply(obj),
    )
    .await
    .map(|_| ())
    .map_err(|e| e.to_string())
}

#[tokio::test]
#[ignore = "needs a real API server: set KUBEBUILDER_ASSETS (etcd, kube-apiserver, kube-controller-manager) and run scripts/test-kube"]
async fn the_crd_installs_and_the_api_server_enforces_every_rule() {
    let cp = cnmysql_envtest::ControlPlane::start(Default::default())
        .await
        .unwrap();
    let client = cp.client().await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), install_crd(&client))
        .await
        .expect("CRD established within 60s")
        .unwrap_or_else(|e| panic!("the CRD does not install: {e}"));

    try_apply(&client, BASE)
        .await
        .expect("the base Cluster is accepted");
    // spec.mysql.serverIdBase is fixed once the Cluster exists.
    let mut made: serde_json::Value = serde_saphyr::from_str(BASE).unwrap();
    made["metadata"]["name"] = "ids".into();
    cluster_api(&client)
        .patch(
            "ids",
            &PatchParams::apply("cnmysql-test"),
            &Patch::Apply(&made),
        )
        .await
        .expect("a Cluster to change");
    made["spec"]["mysql"]["serverIdBase"] = 100.into();
    let err = dry_apply(&cluster_api(&client), &made)
        .await
        .expect_err("a change of serverIdBase is refused");
    assert!(err.contains("serverIdBase"), "{err}");
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/cluster.yaml"
    ))
    .unwrap();
    try_apply(&client, &example)
        .await
        .expect("examples/cluster.yaml is accepted");

    for (what, patch, field, _) in cases() {
        let text = manifest(patch);
        let err = try_apply(&client, &text)
            .await
            .err()
            .unwrap_or_else(|| panic!("{what}: the API server accepted it"));
        // The server names the path of the object the rule is attached
        // to: the field itself, its list, or its map.
        let mut path = field.split('[').next().unwrap();
        if path.starts_with("spec.mysql.parameters.") {
            path = "spec.mysql.parameters";
        }
        assert!(
            err.contains(path) || (field == "kind" && err.contains("Database")),
            "{what}: the API server's refusal does not name {field}: {err}"
        );
    }
    for (what, patch, field) in oversized() {
        let err = try_apply(&client, &manifest(patch))
            .await
            .err()
            .unwrap_or_else(|| panic!("{what}: the API server accepted it"));
        assert!(
            err.contains(field),
            "{what}: refusal does not name {field}: {err}"
        );
    }

    // The image catalogs: the upgrade example's is accepted; a version
    // listed twice, or one that is not a version, is refused.
    let catalogs = Api::<DynamicObject>::all_with(
        client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "mysql.cnmysql.io",
            "v1",
            "ClusterImageCatalog",
        )),
    );
    let apply_catalog = |images: serde_json::Value| {
        let catalogs = catalogs.clone();
        async move {
            let obj = serde_json::json!({
                "apiVersion": "mysql.cnmysql.io/v1",
                "kind": "ClusterImageCatalog",
                "metadata": {"name": "mariadb"},
                "spec": {"flavor": "mariadb", "images": images},
            });
            dry_apply(&catalogs, &obj).await
        }
    };
    let upgrade_example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/cluster-upgrade.yaml"
    ))
    .unwrap();
    let m = cnmysql_api::parse_manifest(&upgrade_example).unwrap();
    let cnmysql_api::CatalogDocument::ClusterWide(c) = &m.catalogs[0] else {
        panic!("the example's catalog is cluster-wide")
    };
    apply_catalog(serde_json::to_value(&c.spec.images).unwrap())
        .await
        .expect("the example's catalog is accepted");
    try_apply(&client, &serde_json::to_string(&m.cluster).unwrap())
        .await
        .expect("the example's Cluster is accepted");
    let twice = serde_json::json!([
        {"version": "10.11.18", "image": "a"},
        {"version": "10.11.18", "image": "b"}
    ]);
    let err = apply_catalog(twice)
        .await
        .expect_err("a version listed twice");
    assert!(err.contains("spec.images"), "{err}");
    let err = apply_catalog(serde_json::json!([{"version": "latest", "image": "a"}]))
        .await
        .expect_err("not a version");
    assert!(err.contains("spec.images[0].version"), "{err}");
}
