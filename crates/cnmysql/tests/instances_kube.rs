//! Instance managers on Kubernetes: real mariadbd, a real kube-apiserver,
//! the operator's objects. The test plays the kubelet for the operator's
//! Pods — it gives each a loopback Pod IP, writes its Secrets where the Pod
//! mounts them, and starts `cnmysql instance run --kubernetes` with the Pod's
//! environment and a token of the cluster's ServiceAccount — so what runs
//! is what a Pod runs. The first instance initialises and claims the
//! primary (status and Lease, through its own RBAC), the second clones it
//! and replicates over TLS to its Pod IP, the operator labels the primary
//! for the rw Service, and a clean stop gives the Lease back.
//!
//! Ignored unless run by `scripts/test-kube` with `KUBEBUILDER_ASSETS` set.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cnmysql_api::Cluster;
use cnmysql_envtest::{ControlPlane, wait_for};
use common::kube::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, Patch, PatchParams};
use mysql_async::prelude::*;
use serde_json::json;

/// One "Pod" run by the test.
struct RunningPod {
    name: String,
    ip: String,
    child: tokio::process::Child,
    log: PathBuf,
}

impl RunningPod {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn stop(&mut self) {
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

fn secret_value(s: &Secret, key: &str) -> Vec<u8> {
    s.data.as_ref().unwrap()[key].0.clone()
}

fn write(path: &Path, data: &[u8]) {
    std::fs::write(path, data).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o400)).unwrap();
}

/// Start the Pod `name` the way a kubelet would, at `ip`.
async fn run_pod(
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
    let child = tokio::process::Command::new(common::BIN)
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

async fn http_status(ip: &str, port: u16, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect((ip, port)).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).await.ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test]
#[ignore = "needs a real API server: set KUBEBUILDER_ASSETS (etcd, kube-apiserver, kube-controller-manager) and run scripts/test-kube"]
async fn instance_managers_run_a_cluster_through_the_api_server() {
    let (cp, client) = control_plane().await;
    let op = Operator::start(&cp, "op").await;
    let manifest = serde_saphyr::from_str::<serde_json::Value>(
        "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: db\n  namespace: prod\nspec:\n  instances: 2\n  mysql:\n    parameters:\n      innodb_buffer_pool_size: 32M\n",
    )
    .unwrap();
    apply_cluster(&client, &manifest).await;
    wait_for(
        "the operator's Pods and Secrets",
        Duration::from_secs(60),
        || async {
            (names::<Pod>(&client, "db").await.len() == 2
                && names::<Secret>(&client, "db").await.len() == 7)
                .then_some(())
        },
    )
    .await;
    // The instances act with the cluster's ServiceAccount, nothing more.
    let out = kubectl(&cp, &["create", "token", "db", "-n", "prod"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kubeconfig = cp
        .kubeconfig_with_token("db", String::from_utf8(out.stdout).unwrap().trim())
        .unwrap();

    // A loopback block of its own, so parallel runs do not meet.
    let block = format!("127.{}.{}", 100 + std::process::id() % 150, rand_byte());
    let root = tempfile::tempdir().unwrap();
    let mut p1 = run_pod(
        &cp,
        &client,
        root.path(),
        "db-1",
        &format!("{block}.1"),
        &kubeconfig,
    )
    .await;

    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "prod");
    wait_for(
        "db-1 to claim the primary",
        Duration::from_secs(90),
        || async {
            let st = clusters.get("db").await.ok()?.status?;
            (st.current_primary.as_deref() == Some("db-1")).then_some(())
        },
    )
    .await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "prod");
    let lease = wait_for("the primary Lease", Duration::from_secs(30), || async {
        leases.get_opt("db-primary").await.ok().flatten()
    })
    .await;
    assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("db-1"));

    let mut p2 = run_pod(
        &cp,
        &client,
        root.path(),
        "db-2",
        &format!("{block}.2"),
        &kubeconfig,
    )
    .await;
    for p in [&p1, &p2] {
        let ip = p.ip.clone();
        let name = p.name.clone();
        wait_for(
            &format!("{name} ready on its probe port"),
            Duration::from_secs(120),
            || {
                let ip = ip.clone();
                async move { (http_status(&ip, 8001, "/readyz").await == Some(200)).then_some(()) }
            },
        )
        .await;
    }

    // Writes on the primary reach the replica, over TLS to its Pod IP.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "prod");
    let app = String::from_utf8(secret_value(
        &secrets.get("db-app").await.unwrap(),
        "password",
    ))
    .unwrap();
    let conn = |ip: String| {
        let app = app.clone();
        async move {
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
    };
    let mut primary = conn(p1.ip.clone())
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", p1.log()));
    primary
        .query_drop("CREATE TABLE IF NOT EXISTS app.t (id INT PRIMARY KEY, v TEXT)")
        .await
        .unwrap();
    primary
        .query_drop("INSERT INTO app.t VALUES (1, 'through the Pod IP')")
        .await
        .unwrap();
    let ip2 = p2.ip.clone();
    let v: String = wait_for("the row on the replica", Duration::from_secs(60), || {
        let ip = ip2.clone();
        let c = conn(ip);
        async move {
            let mut c = c.await.ok()?;
            c.query_first::<String, _>("SELECT v FROM app.t WHERE id = 1")
                .await
                .ok()?
        }
    })
    .await;
    assert_eq!(v, "through the Pod IP");
    let mut replica = conn(p2.ip.clone()).await.unwrap();
    let ssl: Option<(String, String)> = replica
        .query_first("SHOW STATUS LIKE 'Slave_running'")
        .await
        .unwrap();
    assert_eq!(ssl.unwrap().1, "ON");
    drop(primary);
    drop(replica);

    // The operator labels the recorded primary for the rw Service.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "prod");
    wait_for("db-1 labelled primary", Duration::from_secs(30), || async {
        let p = pods.get("db-1").await.ok()?;
        (p.labels()
            .get("cnmysql.io/instanceRole")
            .map(String::as_str)
            == Some("primary"))
        .then_some(())
    })
    .await;

    // A planned switchover with the plugin: db-2 takes over, db-1 follows.
    let kc = cp.kubeconfig.to_str().unwrap().to_string();
    let out = common::cnmysql(&[
        "plugin",
        "run",
        "--",
        "--kubeconfig",
        &kc,
        "-n",
        "prod",
        "promote",
        "db",
        "db-2",
        "--timeout",
        "60",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let st = clusters.get("db").await.unwrap().status.unwrap();
    assert_eq!(st.current_primary.as_deref(), Some("db-2"));
    wait_for(
        "db-1 read-only, following db-2",
        Duration::from_secs(60),
        || async {
            let mut c = app_conn(&client, &p1.ip).await.ok()?;
            let ro: Option<(String, String)> = c
                .query_first("SHOW VARIABLES LIKE 'read_only'")
                .await
                .ok()?;
            (ro?.1 == "ON").then_some(())
        },
    )
    .await;
    wait_for(
        "db-2 labelled primary, db-1 replica",
        Duration::from_secs(30),
        || async {
            let l2 = pods
                .get("db-2")
                .await
                .ok()?
                .labels()
                .get("cnmysql.io/instanceRole")
                .cloned();
            let l1 = pods
                .get("db-1")
                .await
                .ok()?
                .labels()
                .get("cnmysql.io/instanceRole")
                .cloned();
            (l2.as_deref() == Some("primary") && l1.as_deref() == Some("replica")).then_some(())
        },
    )
    .await;
    let mut c = app_conn(&client, &p2.ip).await.unwrap();
    c.query_drop("INSERT INTO app.t VALUES (3, 'after the switchover')")
        .await
        .unwrap();
    drop(c);
    let v = wait_for("row 3 on db-1", Duration::from_secs(60), || async {
        row_on(&client, &p1.ip, 3).await
    })
    .await;
    assert_eq!(v, "after the switchover");

    // Fencing with the plugin: out of every route, read-only; then back.
    let out = common::cnmysql(&[
        "plugin",
        "run",
        "--",
        "--kubeconfig",
        &kc,
        "-n",
        "prod",
        "fence",
        "on",
        "db",
        "db-1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for("db-1 not routable", Duration::from_secs(30), || async {
        let l = pods
            .get("db-1")
            .await
            .ok()?
            .labels()
            .get("cnmysql.io/routable")
            .cloned();
        (l.as_deref() == Some("false")).then_some(())
    })
    .await;
    let out = common::cnmysql(&[
        "plugin",
        "run",
        "--",
        "--kubeconfig",
        &kc,
        "-n",
        "prod",
        "fence",
        "off",
        "db",
        "db-1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for("db-1 routable again", Duration::from_secs(30), || async {
        let l = pods
            .get("db-1")
            .await
            .ok()?
            .labels()
            .get("cnmysql.io/routable")
            .cloned();
        (l.as_deref() == Some("true")).then_some(())
    })
    .await;

    // A clean stop of the primary gives the Lease back.
    p1.stop().await;
    p2.stop().await;
    wait_for("the Lease released", Duration::from_secs(30), || async {
        leases
            .get_opt("db-primary")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(!p1.log().contains("PRIVATE KEY"), "a key reached the log");
    if std::env::var_os("CNMYSQL_SHOW_LOGS").is_some() {
        eprintln!("{}\n{}", p1.log(), p2.log());
    }
    op.stop().await;
}

async fn app_conn(client: &kube::Client, ip: &str) -> mysql_async::Result<mysql_async::Conn> {
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

async fn row_on(client: &kube::Client, ip: &str, id: u32) -> Option<String> {
    let mut c = app_conn(client, ip).await.ok()?;
    c.query_first::<String, _>(format!("SELECT v FROM app.t WHERE id = {id}"))
        .await
        .ok()?
}

#[tokio::test]
#[ignore = "needs a real API server: set KUBEBUILDER_ASSETS (etcd, kube-apiserver, kube-controller-manager) and run scripts/test-kube"]
async fn the_operator_fails_over_when_the_primary_dies_and_the_old_primary_rejoins() {
    let (cp, client) = control_plane().await;
    let op = Operator::start(&cp, "op").await;
    let manifest = serde_saphyr::from_str::<serde_json::Value>(
        "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: db\n  namespace: prod\nspec:\n  instances: 2\n  mysql:\n    parameters:\n      innodb_buffer_pool_size: 32M\n",
    )
    .unwrap();
    apply_cluster(&client, &manifest).await;
    wait_for(
        "the operator's Pods and Secrets",
        Duration::from_secs(60),
        || async {
            (names::<Pod>(&client, "db").await.len() == 2
                && names::<Secret>(&client, "db").await.len() == 7)
                .then_some(())
        },
    )
    .await;
    let out = kubectl(&cp, &["create", "token", "db", "-n", "prod"]);
    let kubeconfig = cp
        .kubeconfig_with_token("db", String::from_utf8(out.stdout).unwrap().trim())
        .unwrap();
    let block = format!(
        "127.{}.{}",
        100 + std::process::id() % 150,
        rand_byte().wrapping_add(1)
    );
    let root = tempfile::tempdir().unwrap();
    let ip1 = format!("{block}.1");
    let ip2 = format!("{block}.2");
    let mut p1 = run_pod(&cp, &client, root.path(), "db-1", &ip1, &kubeconfig).await;
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "prod");
    wait_for("db-1 primary", Duration::from_secs(90), || async {
        let st = clusters.get("db").await.ok()?.status?;
        (st.current_primary.as_deref() == Some("db-1")).then_some(())
    })
    .await;
    let mut p2 = run_pod(&cp, &client, root.path(), "db-2", &ip2, &kubeconfig).await;
    let mut c = wait_for("db-1 accepting writes", Duration::from_secs(60), || async {
        app_conn(&client, &ip1).await.ok()
    })
    .await;
    c.query_drop("CREATE TABLE app.t (id INT PRIMARY KEY, v TEXT)")
        .await
        .unwrap();
    c.query_drop("INSERT INTO app.t VALUES (1, 'before')")
        .await
        .unwrap();
    drop(c);
    wait_for("row 1 on db-2", Duration::from_secs(120), || async {
        row_on(&client, &ip2, 1).await
    })
    .await;
    // The operator reports the instances: both ready, healthy.
    wait_for("a healthy cluster", Duration::from_secs(60), || async {
        let st = clusters.get("db").await.ok()?.status?;
        (st.ready_instances == 2 && st.phase == Some(cnmysql_api::Phase::Healthy)).then_some(())
    })
    .await;
    // ... instance by instance, live (what the plugin's status shows) ...
    let st = clusters.get("db").await.unwrap().status.unwrap();
    assert_eq!(st.instance_states["db-1"].role, "primary", "{st:?}");
    assert_eq!(st.instance_states["db-2"].role, "replica", "{st:?}");
    assert!(st.instance_states["db-2"].ready && st.instance_states["db-2"].read_only);
    // ... and as Prometheus series, labelled with namespace and cluster.
    let series = |i: &str| {
        format!("cnmysql_instance_primary{{namespace=\"prod\",cluster=\"db\",instance=\"{i}\"}}")
    };
    assert_eq!(op.metric(&series("db-1")).await, 1.0);
    assert_eq!(op.metric(&series("db-2")).await, 0.0);

    // The primary's processes die (its container crashed for good).
    let killed = std::time::Instant::now();
    if let Some(pid) = p1.child.id() {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = p1.child.wait().await;
    wait_for("db-2 promoted", Duration::from_secs(60), || async {
        let st = clusters.get("db").await.ok()?.status?;
        (st.current_primary.as_deref() == Some("db-2")).then_some(())
    })
    .await;
    eprintln!(
        "kill -9 of the primary's Pod processes -> db-2 current primary: {:?}",
        killed.elapsed()
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "prod");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "prod");
    let lease = wait_for(
        "db-2 holding the Lease",
        Duration::from_secs(30),
        || async {
            let l = leases.get_opt("db-primary").await.ok()??;
            (l.spec.as_ref()?.holder_identity.as_deref() == Some("db-2")).then_some(l)
        },
    )
    .await;
    assert!(lease.spec.is_some());
    let mut c = app_conn(&client, &ip2).await.unwrap();
    c.query_drop("INSERT INTO app.t VALUES (2, 'after')")
        .await
        .unwrap();
    drop(c);

    // The fenced-out former primary's Pod is recreated (claim kept) once
    // the failover completed; started again it rejoins as a replica.
    let recreated = wait_for("db-1's Pod recreated", Duration::from_secs(60), || async {
        let p = pods.get("db-1").await.ok()?;
        (p.status.as_ref().and_then(|s| s.pod_ip.clone()).is_none()).then_some(p)
    })
    .await;
    assert_eq!(
        recreated
            .labels()
            .get("cnmysql.io/instanceRole")
            .map(String::as_str),
        Some("replica")
    );
    p1 = run_pod(&cp, &client, root.path(), "db-1", &ip1, &kubeconfig).await;
    let v = wait_for(
        "row 2 on the rejoined db-1",
        Duration::from_secs(120),
        || async { row_on(&client, &ip1, 2).await },
    )
    .await;
    assert_eq!(v, "after");
    assert_eq!(op.metric(&series("db-2")).await, 1.0);
    let page = op.get("/metrics").await.map(|(_, b)| b).unwrap_or_default();
    assert!(
        page.lines().any(|l| l.starts_with(
            "cnmysql_events_total{namespace=\"prod\",cluster=\"db\",reason=\"FailoverCompleted\""
        ) && l.ends_with(" 1")),
        "{page}"
    );
    let st = wait_for(
        "db-1 reported as a replica",
        Duration::from_secs(30),
        || async {
            let st = clusters.get("db").await.ok()?.status?;
            (st.instance_states.get("db-1")?.role == "replica").then_some(st)
        },
    )
    .await;
    assert!(st.diverged_instances.is_empty(), "{st:?}");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "prod");
    let reasons: Vec<String> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for want in [
        "PrimaryFailing",
        "FailingOver",
        "Promoted",
        "FailoverCompleted",
    ] {
        assert!(
            reasons.iter().any(|r| r == want),
            "no {want} event in {reasons:?}"
        );
    }
    p2.stop().await;
    p1.stop().await;
    op.stop().await;
}

fn rand_byte() -> u8 {
    (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        % 250) as u8
}

use kube::ResourceExt;
