//! The kubectl plugin through the real `kubectl` against a real
//! kube-apiserver: requests land in the Cluster status, every Event is
//! accepted by the server (an invalid generated name was once refused there
//! while an in-memory API took it), and `status -o json` shows the Cluster
//! without the server's bookkeeping.
//!
//! Ignored unless run by `scripts/test-kube` with `KUBEBUILDER_ASSETS` set.

mod common;

use std::time::Duration;

use cnmysql_api::Cluster;
use cnmysql_envtest::wait_for;
use common::kube::*;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

fn plugin(
    cp: &cnmysql_envtest::ControlPlane,
    bin: &std::path::Path,
    args: &[&str],
) -> (bool, String, String) {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // kubectl takes no flags before a plugin's name: they go after it.
    let out = std::process::Command::new("kubectl")
        .arg(args[0])
        .arg("--kubeconfig")
        .arg(&cp.kubeconfig)
        .args(&args[1..])
        .env("PATH", path)
        .env_remove("KUBECONFIG")
        .output()
        .expect("kubectl is installed");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[tokio::test]
#[ignore = "needs a real API server: set KUBEBUILDER_ASSETS (etcd, kube-apiserver, kube-controller-manager) and run scripts/test-kube"]
async fn the_plugin_records_events_and_prints_clean_json_on_a_real_api_server() {
    let (cp, client) = control_plane().await;
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    let out = common::cnmysql(&["plugin", "install", "--dir", bin.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Created the client-side way, so it carries kubectl's last-applied
    // annotation; no operator runs, so the status is set by hand.
    let manifest = dir.path().join("db.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: db\n  namespace: prod\nspec:\n  instances: 3\n",
    )
    .unwrap();
    let out = kubectl(&cp, &["apply", "-f", manifest.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "prod");
    clusters
        .patch_status(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"currentPrimary": "db-1", "targetPrimary": "db-1", "readyInstances": 3}})),
        )
        .await
        .unwrap();

    let (ok, stdout, stderr) = plugin(
        &cp,
        &bin,
        &["cnmsql", "-n", "prod", "status", "db", "-o", "json"],
    );
    assert!(ok, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["status"]["currentPrimary"], "db-1");
    assert!(!stdout.contains("managedFields"), "{stdout}");
    assert!(!stdout.contains("last-applied-configuration"), "{stdout}");

    let (ok, _, stderr) = plugin(
        &cp,
        &bin,
        &["cnmsql", "-n", "prod", "fence", "on", "db", "db-3"],
    );
    assert!(ok, "{stderr}");
    let (ok, _, stderr) = plugin(
        &cp,
        &bin,
        &[
            "cnmsql",
            "-n",
            "prod",
            "promote",
            "db",
            "db-2",
            "--wait=false",
        ],
    );
    assert!(ok, "{stderr}");
    let (ok, _, stderr) = plugin(
        &cp,
        &bin,
        &[
            "cnmsql",
            "-n",
            "prod",
            "promote",
            "db",
            "db-3",
            "--wait=false",
        ],
    );
    assert!(!ok, "a second switchover while one is pending is refused");
    assert!(stderr.contains("already in progress"), "{stderr}");
    assert!(
        !stderr.contains("cannot record"),
        "an event was refused: {stderr}"
    );
    let st = clusters.get("db").await.unwrap().status.unwrap();
    assert_eq!(st.fenced_instances, ["db-3"]);
    assert_eq!(st.target_primary.as_deref(), Some("db-2"));

    backup_and_report(&cp, &bin, &client, dir.path()).await;
    annotations(&cp, &bin, &clusters).await;

    let events: Api<Event> = Api::namespaced(client.clone(), "prod");
    let reasons = wait_for("the plugin's events", Duration::from_secs(10), || async {
        let mut r: Vec<String> = events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter_map(|e| e.reason)
            .collect();
        r.sort();
        (r.len() >= 3).then_some(r)
    })
    .await;
    assert_eq!(
        reasons,
        ["Fenced", "SwitchoverRefused", "SwitchoverRequested"]
    );
}

/// `maintenance` and `hibernate` set and remove their annotations.
async fn annotations(
    cp: &cnmysql_envtest::ControlPlane,
    bin: &std::path::Path,
    clusters: &Api<Cluster>,
) {
    let annotation = |c: &Cluster, k: &str| c.metadata.annotations.as_ref()?.get(k).cloned();
    for (verb, key, on) in [
        ("maintenance", "cnmysql.io/reconcile", "paused"),
        ("hibernate", "cnmysql.io/hibernation", "on"),
    ] {
        let (ok, _, stderr) = plugin(cp, bin, &["cnmsql", "-n", "prod", verb, "on", "db"]);
        assert!(ok, "{verb} on: {stderr}");
        let c = clusters.get("db").await.unwrap();
        assert_eq!(annotation(&c, key).as_deref(), Some(on), "{verb}");
        let (ok, _, stderr) = plugin(cp, bin, &["cnmsql", "-n", "prod", verb, "off", "db"]);
        assert!(ok, "{verb} off: {stderr}");
        let c = clusters.get("db").await.unwrap();
        assert_eq!(annotation(&c, key), None, "{verb}");
    }
}

/// `backup` of a Cluster without a store is refused, creating nothing;
/// `report` bundles the Cluster and its objects.
async fn backup_and_report(
    cp: &cnmysql_envtest::ControlPlane,
    bin: &std::path::Path,
    client: &kube::Client,
    dir: &std::path::Path,
) {
    // A backup of a Cluster without a store is refused, naming the field;
    // nothing is created.
    let (ok, _, stderr) = plugin(cp, bin, &["cnmsql", "-n", "prod", "backup", "db"]);
    assert!(!ok);
    assert!(stderr.contains("spec.backup"), "{stderr}");
    let made: Api<cnmysql_api::backup_resources::Backup> = Api::namespaced(client.clone(), "prod");
    assert!(
        made.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // A report: the Cluster and its objects in one bundle.
    let out = dir.join("r.tar.gz");
    let (ok, stdout, stderr) = plugin(
        cp,
        bin,
        &[
            "cnmsql",
            "-n",
            "prod",
            "report",
            "db",
            "-f",
            out.to_str().unwrap(),
        ],
    );
    assert!(ok, "{stderr}");
    assert_eq!(stdout.trim(), out.to_str().unwrap());
    let files = common::untar_gz(&out);
    for f in [
        "cluster.yaml",
        "status.txt",
        "pods.yaml",
        "events.yaml",
        "backups.yaml",
    ] {
        assert!(
            files.contains_key(&format!("r/{f}")),
            "{f} in {:?}",
            files.keys()
        );
    }
    assert!(files["r/cluster.yaml"].contains("name: db"));
    assert!(!files["r/cluster.yaml"].contains("managedFields"));
}
