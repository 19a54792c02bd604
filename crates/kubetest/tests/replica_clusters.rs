//! Replica clusters on a real node: two Clusters in two namespaces stand in
//! for two regions. West follows east through east's rw Service over TLS
//! (the account requires a client certificate of east's CA); a controlled
//! switchover between them (east demoted, west promoted at east's exact
//! GTID position) loses no acknowledged write and east then follows west;
//! last, west is deleted under writes and east promoted without a token,
//! its RPO counted in acknowledged rows.
//!
//! A second test imports a Cluster from another namespace's server (MySQL:
//! the clone plugin; MariaDB: mariadb-backup streamed by `cnmysql donor`
//! in the old server's Pod), follows it, and cuts over at its final
//! position.
//!
//! Run with `scripts/test-kube replica` (needs KUBEBUILDER_ASSETS and root).

mod replica_common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cnmysql_kubetest::{KubeCluster, until};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};
use replica_common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
async fn two_clusters_in_two_namespaces_switch_over_without_loss_and_promote_after_a_loss() {
    let k = KubeCluster::start(&cnmysql_kubetest::cnmysql_exe())
        .await
        .unwrap();
    // East may follow west later: its block is there from the start
    // (the Secret's keys are mounted only into Pods made with one).
    k.apply_in_new_namespace(
        "east",
        &manifest(
            "east",
            "east",
            0,
            &follows("west", "placeholder.invalid", false),
        ),
    )
    .await
    .unwrap();
    ready(&k, "east", 2, "east ready").await;
    let east_rw = service_ip(&k, "east").await;
    let w1 = writer(&k, "east").await;
    w1.wait_for_more(100, Duration::from_secs(60)).await;

    // West follows east through east's rw ClusterIP.
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(k.client.clone());
    ns.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({"metadata": {"name": "west"}})).unwrap(),
    )
    .await
    .unwrap();
    copy_source_secret(&k, "east", "west").await;
    k.cp.kubectl(
        &["-n", "west", "apply", "-f", "-"],
        Some(&manifest(
            "west",
            "west",
            100,
            &follows("east", &east_rw.ip().to_string(), true),
        )),
    )
    .unwrap();
    ready(&k, "west", 2, "west ready, following east").await;
    until(
        "west receiving from east",
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
    .unwrap();
    w1.wait_for_more(100, Duration::from_secs(60)).await;
    assert!(
        !writable(&k, "west").await,
        "a replica cluster takes no writes"
    );

    // Switchover: east demoted to follow west ...
    let west_rw = service_ip(&k, "west").await;
    copy_source_secret(&k, "west", "east").await;
    let demoted_at = Instant::now();
    patch_replica(
        &k,
        "east",
        serde_json::json!({"enabled": true, "source": {"host": west_rw.ip().to_string(), "tlsServerName": "west-rw.west.svc"}}),
    )
    .await;
    let token = final_position(&k, "east").await;
    let out1 = w1.stop().await;
    // ... west promoted at exactly that position.
    promote_at(&k, "west", &token, Duration::from_secs(120)).await;
    let downtime = demoted_at.elapsed();
    let w2 = writer(&k, "west").await;
    w2.wait_for_more(100, Duration::from_secs(60)).await;
    let missing = k
        .rows_missing("west", "west", &instances("west"), &out1.acked)
        .await
        .unwrap();
    assert_eq!(missing, 0, "rows east acknowledged are on west");
    until("east following west", Duration::from_secs(180), || async {
        let r = status(&k, "east").await.replica?;
        (r.receiving && r.source == format!("{}:3306", west_rw.ip())).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", k.diagnose("east", "east")));
    w2.wait_for_more(100, Duration::from_secs(60)).await;
    let out2 = w2.stop().await;
    let all: Vec<u64> = out1.acked.iter().chain(&out2.acked).copied().collect();
    let missing = k
        .rows_missing("east", "east", &instances("east"), &all)
        .await
        .unwrap();
    assert_eq!(
        missing,
        0,
        "every acknowledged row is on east\n{}",
        k.diagnose("east", "east")
    );
    eprintln!(
        "switchover between clusters: {} + {} acknowledged rows, 0 lost; writes stopped {:.1}s",
        out1.acked.len(),
        out2.acked.len(),
        downtime.as_secs_f64()
    );

    // West is lost under writes; east promoted without a token.
    let w3 = writer(&k, "west").await;
    w3.wait_for_more(200, Duration::from_secs(60)).await;
    let lost_at = Instant::now();
    k.clusters("west")
        .delete("west", &DeleteParams::default())
        .await
        .unwrap();
    let out3 = w3.stop().await;
    patch_replica(
        &k,
        "east",
        serde_json::json!({"enabled": false, "promotionToken": null}),
    )
    .await;
    until("east takes writes", Duration::from_secs(120), || async {
        writable(&k, "east").await.then_some(())
    })
    .await
    .unwrap();
    let promoted_in = lost_at.elapsed();
    let rpo = k
        .rows_missing("east", "east", &instances("east"), &out3.acked)
        .await
        .unwrap();
    eprintln!(
        "promotion after the source was lost: writable {:.1}s after the delete; RPO {rpo} of {} acknowledged rows",
        promoted_in.as_secs_f64(),
        out3.acked.len()
    );
}

/// The token the donor of the import test is given.
const DONOR_TOKEN: &str = "donor-token-0123456789abcdef";

/// `<cluster>-<what>-source` in `ns`: the account `user`/`password` and
/// the CA of the source cluster `source`.
async fn account_secret(k: &KubeCluster, source: &str, ns: &str, name: &str, user: &str, pw: &str) {
    let from: Api<Secret> = Api::namespaced(k.client.clone(), source);
    let key = |s: &Secret, k: &str| s.data.as_ref().and_then(|d| d.get(k)).cloned();
    let ca = from.get(&format!("{source}-ca")).await.unwrap();
    let ca = key(&ca, "ca.crt").or_else(|| key(&ca, "tls.crt")).unwrap();
    let data = BTreeMap::from([
        ("username".to_string(), ByteString(user.as_bytes().to_vec())),
        ("password".to_string(), ByteString(pw.as_bytes().to_vec())),
        ("ca.crt".to_string(), ca),
        (
            cnmysql_api::replica::DONOR_TOKEN_KEY.to_string(),
            ByteString(DONOR_TOKEN.as_bytes().to_vec()),
        ),
    ]);
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    let to: Api<Secret> = Api::namespaced(k.client.clone(), ns);
    to.create(&PostParams::default(), &secret).await.unwrap();
}

/// `cnmysql donor` running in the primary Pod of `ns`'s Cluster `ns` (the
/// manager copied there, the server image's mariadb-backup, the instance's
/// server certificate), listening on 4444: the kubectl process holding it,
/// and the Pod's address once the donor answers there.
async fn donor_in_primary_pod(k: &KubeCluster, ns: &str) -> (KillOnDrop, String) {
    let pod = status(k, ns).await.current_primary.unwrap();
    let script = format!(
        "printf %s '{DONOR_TOKEN}' > \"$CNMYSQL_RUN/donor-token\" && \
         exec {} donor --listen \"$CNMYSQL_POD_IP:{}\" \
         --tls-cert \"$CNMYSQL_TLS/tls.crt\" --tls-key \"$CNMYSQL_TLS/tls.key\" \
         --token-file \"$CNMYSQL_RUN/donor-token\" --server \"$CNMYSQL_POD_IP:3306\" \
         --server-name \"$CNMYSQL_INSTANCE\" \
         --server-ca \"$CNMYSQL_TLS/ca.crt\" --server-cnf \"$CNMYSQL_RUN/my.cnf\" \
         --work-dir \"$CNMYSQL_RUN/donor\"",
        cnmysql_api::names::MANAGER_PATH,
        cnmysql_api::import::DEFAULT_DONOR_PORT
    );
    let child = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&k.cp.kubeconfig)
        .args([
            "-n", ns, "exec", &pod, "-c", "mysql", "--", "sh", "-c", &script,
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let held = KillOnDrop(child);
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(k.client.clone(), ns);
    let ip = pods
        .get(&pod)
        .await
        .unwrap()
        .status
        .and_then(|s| s.pod_ip)
        .unwrap();
    let at = format!("{ip}:{}", cnmysql_api::import::DEFAULT_DONOR_PORT);
    until("the donor to listen", Duration::from_secs(60), || async {
        tokio::net::TcpStream::connect(&at).await.ok().map(|_| ())
    })
    .await
    .unwrap();
    (held, ip)
}

/// A child process killed when dropped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `sql` as root on the primary of `ns`'s Cluster `ns`.
async fn on_primary(k: &KubeCluster, ns: &str, sql: &str) -> String {
    let p = status(k, ns).await.current_primary.unwrap();
    k.root_sql(ns, ns, &p, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:#}"))
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
async fn a_cluster_is_imported_from_a_server_in_another_namespace_and_cut_over_without_loss() {
    const PW: &str = "importer-Secret-1";
    let mysql = std::env::var("CNMYSQL_TEST_FLAVOR").as_deref() == Ok("mysql");
    let k = KubeCluster::start(&cnmysql_kubetest::cnmysql_exe())
        .await
        .unwrap();
    a_legacy_cluster_with_an_importer_account(&k, mysql, PW).await;
    let legacy_rw = service_ip(&k, "legacy").await;
    let w1 = writer(&k, "legacy").await;
    w1.wait_for_more(100, Duration::from_secs(60)).await;

    // Fresh: imported from legacy's rw, then following it.
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(k.client.clone());
    ns.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({"metadata": {"name": "fresh"}})).unwrap(),
    )
    .await
    .unwrap();
    for s in ["fresh-import-source", "fresh-replica-source"] {
        account_secret(&k, "legacy", "fresh", s, "importer", PW).await;
    }
    let ip = legacy_rw.ip().to_string();
    // MariaDB: a physical copy from `cnmysql donor`, run where the old
    // server's data is (here its Pod), reached with the server at the
    // Pod's address; MySQL: the clone plugin through the rw Service.
    let (donor, import) = if mysql {
        let import = format!(
            "  bootstrap:\n    import:\n      source:\n        host: {ip}\n        tlsServerName: legacy-rw.legacy.svc\n"
        );
        (None, import)
    } else {
        let (donor, pod_ip) = donor_in_primary_pod(&k, "legacy").await;
        let import = format!(
            "  bootstrap:\n    import:\n      source:\n        host: {pod_ip}\n        tlsServerName: legacy-rw.legacy.svc\n      method: backup\n"
        );
        (Some(donor), import)
    };
    let began = Instant::now();
    k.cp.kubectl(
        &["-n", "fresh", "apply", "-f", "-"],
        Some(&manifest(
            "fresh",
            "fresh",
            100,
            &format!("{import}{}", follows("legacy", &ip, true)),
        )),
    )
    .unwrap();
    ready(&k, "fresh", 2, "fresh imported and ready").await;
    let imported_in = began.elapsed();
    let record =
        k.cp.kubectl(
            &[
                "-n",
                "fresh",
                "exec",
                "fresh-1",
                "-c",
                "mysql",
                "--",
                "sh",
                "-c",
                "cat \"$CNMYSQL_DATA/data/cnmysql_imported.json\"",
            ],
            None,
        )
        .unwrap();
    let how = if mysql { "clone" } else { "backup" };
    let record: serde_json::Value = serde_json::from_str(&record).unwrap();
    assert_eq!(record["method"], how, "{record}");
    drop(donor);
    until(
        "fresh receiving from legacy",
        Duration::from_secs(120),
        || async {
            status(&k, "fresh")
                .await
                .replica
                .filter(|r| r.receiving)
                .map(|_| ())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", k.diagnose("fresh", "fresh")));
    assert_eq!(
        on_primary(
            &k,
            "fresh",
            "SELECT COUNT(*), shop.twice(21) FROM shop.orders"
        )
        .await,
        "3\t42"
    );
    w1.wait_for_more(100, Duration::from_secs(60)).await;

    // Cut-over at legacy's final position.
    let out = w1.stop().await;
    let cut_over = cut_over_at_the_final_position(&k, mysql).await;
    let missing = k
        .rows_missing("fresh", "fresh", &instances("fresh"), &out.acked)
        .await
        .unwrap();
    assert_eq!(missing, 0, "rows legacy acknowledged are on fresh");
    eprintln!(
        "import ({how}) on a real node: ready {:.1}s after apply; {} acknowledged rows on legacy, 0 missing on fresh; writable {:.1}s after the cut-over",
        imported_in.as_secs_f64(),
        out.acked.len(),
        cut_over.as_secs_f64()
    );
}

/// A cluster in namespace `legacy` standing for a server outside the
/// operator: an account the import uses (password `pw`), a database with
/// rows and a function.
async fn a_legacy_cluster_with_an_importer_account(k: &KubeCluster, mysql: bool, pw: &str) {
    k.apply_in_new_namespace("legacy", &manifest("legacy", "legacy", 0, ""))
        .await
        .unwrap();
    ready(k, "legacy", 2, "legacy ready").await;
    let extra = if mysql {
        ", BACKUP_ADMIN, SHOW_ROUTINE"
    } else {
        // mariadb-backup runs as the account.
        ", PROCESS"
    };
    on_primary(
        k,
        "legacy",
        &format!(
            "CREATE USER importer IDENTIFIED BY '{pw}' REQUIRE SSL; \
             GRANT SELECT, RELOAD, LOCK TABLES, SHOW VIEW, TRIGGER, EVENT, EXECUTE, \
             REPLICATION CLIENT, REPLICATION SLAVE{extra} ON *.* TO importer; \
             CREATE DATABASE shop; CREATE TABLE shop.orders (id INT PRIMARY KEY); \
             INSERT INTO shop.orders VALUES (1), (2), (3); \
             CREATE FUNCTION shop.twice(x INT) RETURNS INT DETERMINISTIC RETURN 2 * x"
        ),
    )
    .await;
}

/// Cut-over at legacy's final position: fresh promoted with it as the
/// token; how long until fresh takes writes.
async fn cut_over_at_the_final_position(k: &KubeCluster, mysql: bool) -> Duration {
    let token = on_primary(
        k,
        "legacy",
        if mysql {
            "SELECT @@gtid_executed"
        } else {
            "SELECT @@gtid_binlog_pos"
        },
    )
    .await
    .replace(['\n', ' '], "");
    let cut = Instant::now();
    patch_replica(
        k,
        "fresh",
        serde_json::json!({"enabled": false, "promotionToken": token}),
    )
    .await;
    until("fresh takes writes", Duration::from_secs(120), || async {
        writable(k, "fresh").await.then_some(())
    })
    .await
    .unwrap();
    cut.elapsed()
}
