//! The security suite on a real node (issue 45; the local part is
//! `crates/cnmysql/tests/security/`). Two Clusters named `db` in two
//! namespaces share one CA, as Clusters given the same cert-manager issuer
//! do. Each attack passes only while its hole stays closed:
//! - mysqld reads neither the ServiceAccount token nor a mounted password;
//! - the instance container cannot write its root filesystem;
//! - `kubectl cnmsql mysql` leaves no password file behind;
//! - the probe port says nothing but ready / not ready;
//! - the other namespace's operator certificate, from the same issuer, is
//!   refused by this namespace's instances (403), this one's is served;
//! - a Grant of ALL PRIVILEGES on `*` is refused, naming the field, and
//!   its user holds nothing.
//!
//! Run with `scripts/test-kube security` (and `CNMYSQL_TEST_FLAVOR=mysql`
//! for MySQL 9.7).

use std::time::Duration;

use cnmysql_kubetest::{KubeCluster, until};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::Api;

const SHARED_CA: &str = "shared-ca";

fn manifest(instances: u32) -> String {
    format!(
        "apiVersion: mysql.cnmysql.io/v1
kind: Cluster
metadata:
  name: db
spec:
  instances: {instances}
  secrets:
    caSecret: {SHARED_CA}
  mysql:
{}    parameters:
      innodb_buffer_pool_size: 32M
",
        cnmysql_kubetest::flavor_lines()
    )
}

fn ca_secret(ca: &cnmysql_tls::Ca) -> String {
    let indent = |pem: &str| {
        pem.lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    };
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {SHARED_CA}\nstringData:\n  ca.crt: |\n{}  ca.key: |\n{}",
        indent(&ca.identity.cert_pem),
        indent(&ca.identity.key_pem)
    )
}

async fn secret_text(k: &KubeCluster, ns: &str, name: &str, key: &str) -> String {
    let s = Api::<Secret>::namespaced(k.client.clone(), ns)
        .get(name)
        .await
        .unwrap();
    String::from_utf8(s.data.unwrap()[key].0.clone()).unwrap()
}

async fn pod_ip(k: &KubeCluster, ns: &str, pod: &str) -> String {
    Api::<Pod>::namespaced(k.client.clone(), ns)
        .get(pod)
        .await
        .unwrap()
        .status
        .and_then(|s| s.pod_ip)
        .unwrap()
}

/// `kubectl exec` in the mysql container of `pod`: its output, or why not.
fn exec(k: &KubeCluster, ns: &str, pod: &str, cmd: &[&str]) -> anyhow::Result<String> {
    let mut args = vec!["-n", ns, "exec", pod, "-c", "mysql", "--"];
    args.extend(cmd);
    k.cp.kubectl(&args, None)
}

/// POST /semisync to `ip`'s control API with the operator certificate of
/// `ns`: the HTTP status.
async fn semi_sync_as(k: &KubeCluster, ns: &str, ip: &str) -> u16 {
    let material = cnmysql_tls::Material {
        ca_pem: secret_text(k, ns, "db-operator-tls", "ca.crt").await,
        identity: cnmysql_tls::Identity {
            cert_pem: secret_text(k, ns, "db-operator-tls", "tls.crt").await,
            key_pem: secret_text(k, ns, "db-operator-tls", "tls.key").await,
        },
    };
    let client = cnmysql_control::client::ControlClient::new(material.client_config().unwrap())
        .expecting("db-1");
    let body = serde_json::json!({"enabled": false, "waitForCount": 1, "timeoutMillis": 1000});
    let json = [("content-type", "application/json".to_string())];
    let (code, _) = client
        .post(
            ip,
            cnmysql_api::names::CONTROL_PORT,
            cnmysql_control::contract::SEMISYNC,
            &json,
            body.to_string().into(),
        )
        .await
        .unwrap();
    code
}

/// The body of GET `path` on the probe port of `ip`, as a stranger asks.
async fn probe(ip: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect((ip, cnmysql_api::names::PROBE_PORT))
        .await
        .unwrap();
    tcp.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    tcp.read_to_string(&mut out).await.unwrap();
    out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
async fn a_real_node_keeps_secrets_files_identities_and_grants_where_they_belong() {
    let k = KubeCluster::start(&cnmysql_kubetest::cnmysql_exe())
        .await
        .unwrap();
    let ca = cnmysql_tls::Ca::generate("shared").unwrap();
    for (ns, n) in [("sec-a", 2), ("sec-b", 1)] {
        k.apply_in_new_namespace(ns, &format!("{}---\n{}", ca_secret(&ca), manifest(n)))
            .await
            .unwrap();
    }
    let primary = k
        .wait_healthy("sec-a", "db", 2, Duration::from_secs(300))
        .await
        .unwrap();
    k.wait_healthy("sec-b", "db", 1, Duration::from_secs(300))
        .await
        .unwrap();

    // mysqld reads no file: the token and a mounted password are NULL.
    let read = k
        .root_sql(
            "sec-a",
            "db",
            &primary,
            "SELECT LOAD_FILE('/var/run/secrets/kubernetes.io/serviceaccount/token') IS NULL, \
             LOAD_FILE('/etc/cnmysql/secrets/admin-password') IS NULL, \
             LOAD_FILE('/etc/cnmysql/tls/tls.key') IS NULL",
        )
        .await
        .unwrap();
    assert_eq!(
        read.split_whitespace().collect::<Vec<_>>(),
        ["1", "1", "1"],
        "{read}"
    );

    // The root filesystem cannot be written; the volumes can.
    let wrote = exec(
        &k,
        "sec-a",
        &primary,
        &["sh", "-c", "echo x > /usr/planted"],
    );
    assert!(wrote.is_err(), "the root filesystem was written");
    exec(
        &k,
        "sec-a",
        &primary,
        &["sh", "-c", "echo x > /tmp/fine && rm /tmp/fine"],
    )
    .expect("/tmp is writable");

    // A SQL session leaves no password file behind.
    let out = k
        .plugin(
            &cnmysql_kubetest::cnmysql_exe(),
            &[
                "cnmsql", "-n", "sec-a", "mysql", "db", "--", "-e", "SELECT 1",
            ],
        )
        .unwrap();
    assert!(out.contains('1'), "{out}");
    let pw = secret_text(&k, "sec-a", "db-root", "password").await;
    let files = exec(
        &k,
        "sec-a",
        &primary,
        &[
            "sh",
            "-c",
            "grep -rl -- \"$0\" /run/cnmysql /tmp || true",
            &pw,
        ],
    )
    .unwrap();
    assert!(files.trim().is_empty(), "files hold the password: {files}");

    // The probe port tells a stranger nothing.
    let ip = pod_ip(&k, "sec-a", &primary).await;
    assert_eq!(probe(&ip, "/readyz").await, "ready");
    assert_eq!(probe(&ip, "/healthz").await, "ok");

    // One issuer, two namespaces: only this namespace's operator.
    assert_eq!(
        semi_sync_as(&k, "sec-b", &ip).await,
        403,
        "another namespace's operator was served"
    );
    assert_eq!(semi_sync_as(&k, "sec-a", &ip).await, 200);

    // A Grant of everything on every database: refused, naming the field.
    let objects = "apiVersion: v1\nkind: Secret\nmetadata: {name: evil-pw}\nstringData: {password: evil-Pw1}\n\
        ---\napiVersion: mysql.cnmysql.io/v1\nkind: User\nmetadata: {name: evil}\nspec:\n  cluster: {name: db}\n  passwordSecretKeyRef: {name: evil-pw, key: password}\n\
        ---\napiVersion: mysql.cnmysql.io/v1\nkind: Grant\nmetadata: {name: evil-all}\nspec:\n  cluster: {name: db}\n  privileges: [ALL PRIVILEGES]\n  database: '*'\n  username: evil\n  grantOption: true\n";
    k.cp.kubectl(&["-n", "sec-a", "apply", "-f", "-"], Some(objects))
        .unwrap();
    let grants: Api<cnmysql_api::sql_objects::Grant> = Api::namespaced(k.client.clone(), "sec-a");
    let users: Api<cnmysql_api::sql_objects::User> = Api::namespaced(k.client.clone(), "sec-a");
    let ready = |c: Option<cnmysql_api::sql_objects::SqlObjectStatus>| {
        c.and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Ready"))
            .map(|c| (c.status, c.message))
    };
    until("the user made", Duration::from_secs(90), || async {
        let s = ready(users.get("evil").await.ok()?.status)?;
        (s.0 == "True").then_some(())
    })
    .await
    .unwrap();
    let why = until("the grant refused", Duration::from_secs(90), || async {
        let s = ready(grants.get("evil-all").await.ok()?.status)?;
        (s.0 == "False").then_some(s.1)
    })
    .await
    .unwrap();
    assert!(why.contains("spec.privileges[0]"), "{why}");
    let held = k
        .root_sql("sec-a", "db", &primary, "SHOW GRANTS FOR 'evil'@'%'")
        .await
        .unwrap();
    assert_eq!(held.lines().count(), 1, "{held}");
    assert!(held.contains("USAGE"), "{held}");
}
