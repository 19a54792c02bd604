//! A replica cluster fed from the binlog archive on a real node: east
//! (namespace east) backs up and archives to a real S3 server (SeaweedFS);
//! west (namespace west) has no network path configured to east at all —
//! it is recovered from east's base backup and then follows east's
//! archive in the store. East is demoted (its archive ends with its last
//! transaction) and west promoted at east's final position: every row east
//! acknowledged is on both of west's instances.
//!
//! Run with `scripts/test-kube replica` (needs KUBEBUILDER_ASSETS and root).

mod replica_common;

use std::time::{Duration, Instant};

use cnmysql_api::backup_resources::Backup;
use cnmysql_envtest::object_store::{ACCESS_KEY_ID, S3Server, SECRET_ACCESS_KEY};
use cnmysql_kubetest::{KubeCluster, until};
use kube::api::{Api, PostParams};
use replica_common::*;

/// A Secret `store` with the S3 server's keys, then `cluster`.
fn with_store_secret(ns: &str, cluster: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: store\n  namespace: {ns}\nstringData:\n  ACCESS_KEY_ID: {ACCESS_KEY_ID}\n  SECRET_ACCESS_KEY: {SECRET_ACCESS_KEY}\n---\n{cluster}"
    )
}

/// An `objectStore` block on `s3`, indented by `indent`.
fn store(s3: &S3Server, indent: &str, server: Option<&str>) -> String {
    let mut out = format!(
        "{indent}destinationPath: s3://{}/dr\n{indent}endpointURL: {}\n{indent}pathStyle: true\n{indent}s3Credentials:\n{indent}  accessKeyId: {{name: store, key: ACCESS_KEY_ID}}\n{indent}  secretAccessKey: {{name: store, key: SECRET_ACCESS_KEY}}\n",
        s3.bucket, s3.endpoint
    );
    if let Some(s) = server {
        out.push_str(&format!("{indent}serverName: {s}\n"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
async fn a_replica_cluster_follows_another_namespace_s_binlog_archive_and_is_promoted_without_loss()
{
    let k = KubeCluster::start(&cnmysql_kubetest::cnmysql_exe())
        .await
        .unwrap();
    let s3 = S3Server::start_at("archives", k.host_address())
        .await
        .unwrap();
    // East: archiving to the store; its replica block is there from the
    // start (demoted later, to a source not reachable yet).
    let east = manifest(
        "east",
        "east",
        0,
        &format!(
            "  backup:\n    objectStore:\n{}  replica:\n    enabled: false\n    source:\n      host: placeholder.invalid\n",
            store(&s3, "      ", None)
        ),
    );
    k.apply_in_new_namespace("east", &with_store_secret("east", &east))
        .await
        .unwrap();
    ready(&k, "east", 2, "east ready").await;
    let w = writer(&k, "east").await;
    w.wait_for_more(100, Duration::from_secs(60)).await;
    let backups: Api<Backup> = Api::namespaced(k.client.clone(), "east");
    let b: Backup = serde_json::from_value(serde_json::json!({
        "apiVersion": "mysql.cnmysql.io/v1", "kind": "Backup",
        "metadata": {"name": "base"}, "spec": {"cluster": {"name": "east"}}
    }))
    .unwrap();
    backups.create(&PostParams::default(), &b).await.unwrap();
    until("east's base backup", Duration::from_secs(180), || async {
        let st = backups.get("base").await.ok()?.status?;
        assert_ne!(st.phase, "failed", "{st:?}");
        (st.phase == "completed").then_some(())
    })
    .await
    .unwrap();

    // West: recovered from that backup, then following the archive.
    let west_manifest = |enabled: bool| {
        manifest(
            "west",
            "west",
            100,
            &format!(
                "  bootstrap:\n    recovery:\n      source:\n        objectStore:\n{}  replica:\n    enabled: {enabled}\n    source:\n      objectStore:\n{}",
                store(&s3, "          ", Some("east")),
                store(&s3, "        ", Some("east"))
            ),
        )
    };
    k.apply_in_new_namespace("west", &with_store_secret("west", &west_manifest(true)))
        .await
        .unwrap();
    ready(&k, "west", 2, "west ready, following east's archive").await;
    until(
        "west reading east's archive",
        Duration::from_secs(120),
        || async {
            status(&k, "west")
                .await
                .replica
                .filter(|r| r.receiving)
                .map(|_| ())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", k.diagnose("west", "west")));
    assert!(
        !writable(&k, "west").await,
        "a replica cluster takes no writes"
    );
    w.wait_for_more(300, Duration::from_secs(60)).await;
    let so_far = w.acked_ids();
    let began = Instant::now();
    until(
        "east's acknowledged rows on west",
        Duration::from_secs(120),
        || async {
            let missing = k
                .rows_missing("west", "west", &instances("west"), &so_far)
                .await
                .ok()?;
            (missing == 0).then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", k.diagnose("west", "west")));
    eprintln!(
        "following the archive: {} acknowledged rows on both of west's instances {:.1}s later",
        so_far.len(),
        began.elapsed().as_secs_f64()
    );

    // East demoted: its archive ends with its last transaction, the token.
    let demoted_at = Instant::now();
    patch_replica(&k, "east", serde_json::json!({"enabled": true})).await;
    let token = final_position(&k, "east").await;
    let out = w.stop().await;
    promote_at(&k, "west", &token, Duration::from_secs(180)).await;
    let downtime = demoted_at.elapsed();
    let missing = k
        .rows_missing("west", "west", &instances("west"), &out.acked)
        .await
        .unwrap();
    assert_eq!(missing, 0, "every row east acknowledged is on west");
    eprintln!(
        "switchover through the archive: {} acknowledged rows, 0 lost; writes stopped {:.1}s",
        out.acked.len(),
        downtime.as_secs_f64()
    );
}
