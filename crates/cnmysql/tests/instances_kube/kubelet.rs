//! The test as the kubelet: a loopback Pod IP, the Pod's Secrets written
//! where it mounts them, `cnmysql instance run --kubernetes` started with
//! the Pod's environment; and the app's connections to a Pod IP.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::kube::*;
use cnmysql_envtest::{ControlPlane, wait_for};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, Patch, PatchParams};
use mysql_async::prelude::*;
use serde_json::json;

/// One "Pod" run by the test.
pub struct RunningPod {
    pub name: String,
    pub ip: String,
    pub child: tokio::process::Child,
    log: PathBuf,
}

impl RunningPod {
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn stop(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let _ = tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await;
        let _ = self.child.kill().await;
    }
}

pub fn secret_value(s: &Secret, key: &str) -> Vec<u8> {
    s.data.as_ref().unwrap()[key].0.clone()
}

fn write(path: &Path, data: &[u8]) {
    std::fs::write(path, data).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o400)).unwrap();
}

/// Start the Pod `name` the way a kubelet would, at `ip`.
pub async fn run_pod(
    cp: &ControlPlane,
    client: &kube::Client,
    root: &Path,
    name: &str,
    ip: &str,
    kubeconfig: &Path,
) -> RunningPod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "prod");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "prod");
    // Bound and running, with its IP, and Ready: this stand-in kubelet
    // runs no probes, and the operator counts an instance ready only with
    // its Pod Ready (its own poll of the manager decides the rest).
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "phase": "Running",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": "True"}],
        }})),
    )
    .await
    .unwrap();
    let pod = pods.get(name).await.unwrap();
    let env: BTreeMap<String, String> = pod.spec.as_ref().unwrap().containers[0]
        .env
        .iter()
        .flatten()
        .map(|e| {
            let v = match (
                &e.value,
                e.value_from.as_ref().and_then(|f| f.field_ref.as_ref()),
            ) {
                (Some(v), _) => v.clone(),
                (None, Some(f)) => match f.field_path.as_str() {
                    "metadata.name" => name.to_string(),
                    "metadata.namespace" => "prod".to_string(),
                    "status.podIP" => ip.to_string(),
                    other => panic!("unexpected downward API field {other}"),
                },
                _ => panic!("unexpected env {e:?}"),
            };
            (e.name.clone(), v)
        })
        .collect();
    // The Pod's volumes, at test-local paths.
    let dir = root.join(name);
    let (data, run, tls, sec) = (
        dir.join("data"),
        dir.join("run"),
        dir.join("tls"),
        dir.join("secrets"),
    );
    for d in [&data, &run, &tls, &sec] {
        std::fs::create_dir_all(d).unwrap();
    }
    let cert = secrets.get(&format!("{name}-tls")).await.unwrap();
    for k in ["ca.crt", "tls.crt", "tls.key"] {
        write(&tls.join(k), &secret_value(&cert, k));
    }
    for (secret, file) in [
        ("db-root", "admin-password"),
        ("db-replication", "replication-password"),
        ("db-app", "app-password"),
    ] {
        write(
            &sec.join(file),
            &secret_value(&secrets.get(secret).await.unwrap(), "password"),
        );
    }
    let log = dir.join("manager.log");
    let out = std::fs::File::create(&log).unwrap();
    let child = tokio::process::Command::new(crate::common::BIN)
        .args(["instance", "run", "--kubernetes"])
        .envs(env)
        .env("CNMYSQL_DATA", &data)
        .env("CNMYSQL_RUN", &run)
        .env("CNMYSQL_TLS", &tls)
        .env("CNMYSQL_SECRETS", &sec)
        .env("KUBECONFIG", kubeconfig)
        .env(
            "PATH",
            format!("{}:/usr/sbin", std::env::var("PATH").unwrap_or_default()),
        )
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let _ = cp;
    RunningPod {
        name: name.into(),
        ip: ip.into(),
        child,
        log,
    }
}

pub async fn http_status(ip: &str, port: u16, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect((ip, port)).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).await.ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

pub async fn app_conn(client: &kube::Client, ip: &str) -> mysql_async::Result<mysql_async::Conn> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "prod");
    let app = String::from_utf8(secret_value(
        &secrets.get("db-app").await.unwrap(),
        "password",
    ))
    .unwrap();
    mysql_async::Conn::new(
        mysql_async::OptsBuilder::default()
            .ip_or_hostname(ip)
            .tcp_port(3306)
            .user(Some("app"))
            .pass(Some(app))
            .prefer_socket(false),
    )
    .await
}

pub async fn row_on(client: &kube::Client, ip: &str, id: u32) -> Option<String> {
    let mut c = app_conn(client, ip).await.ok()?;
    c.query_first::<String, _>(format!("SELECT v FROM app.t WHERE id = {id}"))
        .await
        .ok()?
}

pub fn rand_byte() -> u8 {
    (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        % 250) as u8
}

/// The operator, and a Cluster of two whose Pods and Secrets it made; a
/// kubeconfig with a token of the cluster's ServiceAccount, which is all
/// the instances act with.
pub async fn a_cluster_of_two(cp: &ControlPlane, client: &kube::Client) -> (Operator, PathBuf) {
    let op = Operator::start(cp, "op").await;
    let manifest = serde_saphyr::from_str::<serde_json::Value>(
        "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: db\n  namespace: prod\nspec:\n  instances: 2\n  mysql:\n    parameters:\n      innodb_buffer_pool_size: 32M\n",
    )
    .unwrap();
    apply_cluster(client, &manifest).await;
    wait_for(
        "the operator's Pods and Secrets",
        Duration::from_secs(60),
        || async {
            (names::<Pod>(client, "db").await.len() == 2
                && names::<Secret>(client, "db").await.len() == 7)
                .then_some(())
        },
    )
    .await;
    let out = kubectl(cp, &["create", "token", "db", "-n", "prod"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kubeconfig = cp
        .kubeconfig_with_token("db", String::from_utf8(out.stdout).unwrap().trim())
        .unwrap();
    (op, kubeconfig)
}
