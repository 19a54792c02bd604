//! A whole Kubernetes cluster on this machine for tests and benchmarks: a
//! real control plane and one or more real nodes (`crates/realnode`: the
//! kubelet, containerd, runc, kube-proxy, from `KUBEBUILDER_ASSETS` and
//! Debian), and the operator installed from `deploy/operator.yaml`
//! unchanged, running as a Pod of its Deployment from an image made of the
//! `cnmysql` under test. Everything is stopped when it is dropped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use cnmysql_envtest::ControlPlane;

mod hogs;
pub use hogs::CpuHogs;
mod nodes;
pub mod prometheus;
pub mod routes;
pub use nodes::operator_image_name;
use nodes::start_real;

/// What an ignored test that needs this harness says about why.
pub use cnmysql_realnode::IGNORE_REASON;

/// The `spec.mysql` lines of the flavour under test: `CNMYSQL_TEST_FLAVOR`
/// (`mariadb`, the default, or `mysql`: the server image `mysql:9.7`, or
/// `CNMYSQL_TEST_IMAGE`).
pub fn flavor_lines() -> String {
    match std::env::var("CNMYSQL_TEST_FLAVOR").as_deref() {
        Ok("mysql") => format!(
            "    flavor: mysql\n    image: {}\n",
            std::env::var("CNMYSQL_TEST_IMAGE").unwrap_or_else(|_| "mysql:9.7".into())
        ),
        _ => "    flavor: mariadb\n".into(),
    }
}

/// A 3-instance Cluster `name` of the flavour under test with
/// semi-synchronous replication of the given `dataDurability`, immediate
/// failover, small buffers.
pub fn cluster_manifest(namespace: &str, name: &str, durability: &str) -> String {
    format!(
        "apiVersion: mysql.cnmysql.io/v1
kind: Cluster
metadata:
  name: {name}
  namespace: {namespace}
spec:
  instances: 3
  minSyncReplicas: 1
  maxSyncReplicas: 1
  failoverDelay: 0
  maxSwitchoverDelay: 60
  mysql:
{flavor}    parameters:
      innodb_buffer_pool_size: 32M
    semiSync:
      enabled: true
      timeoutMillis: 1000
      dataDurability: {durability}
",
        flavor = flavor_lines()
    )
}

/// The `cnmysql` of the build under test (the operator image is made of
/// it): beside the running program, or one directory up from a test's
/// `deps/`; built first if it is not there yet.
pub fn cnmysql_exe() -> PathBuf {
    let me = std::env::current_exe().expect("the running program's path");
    let dir = me.parent().expect("a directory");
    let dir = if dir.ends_with("deps") {
        dir.parent().expect("the profile's directory")
    } else {
        dir
    };
    let exe = dir.join("cnmysql");
    if !exe.is_file() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "cnmysql", "--bin", "cnmysql"])
            .status()
            .expect("cargo");
        assert!(status.success(), "building cnmysql");
    }
    exe
}

/// How many instances the status shows as primary, and as ready.
pub fn primaries_and_ready(st: &cnmysql_api::ClusterStatus) -> (usize, usize) {
    let states = st.instance_states.values();
    (
        states.clone().filter(|s| s.role == "primary").count(),
        states.filter(|s| s.ready).count(),
    )
}

/// A connection as the application user, or None.
pub async fn connect(host: &str, port: u16, password: &str) -> Option<mysql_async::Conn> {
    connect_within(app_opts(host, port, password)).await.ok()
}

/// How long a test's connection attempt may take, as any client sets one:
/// a SYN sent while a Service still led to an address that is gone stays
/// pinned to it by its conntrack entry through every retransmission, and
/// without a limit one attempt would hang for minutes.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A connection with `opts`, or why not within [`CONNECT_TIMEOUT`].
pub async fn connect_within(opts: mysql_async::Opts) -> Result<mysql_async::Conn, String> {
    match tokio::time::timeout(CONNECT_TIMEOUT, mysql_async::Conn::new(opts)).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no connection within {CONNECT_TIMEOUT:?}")),
    }
}

/// The application user's connection options for `host:port`.
fn app_opts(host: &str, port: u16, password: &str) -> mysql_async::Opts {
    mysql_async::OptsBuilder::default()
        .ip_or_hostname(host)
        .tcp_port(port)
        .user(Some("app"))
        .pass(Some(password))
        .prefer_socket(false)
        .into()
}

/// The repository's root (for `deploy/`).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub struct KubeCluster {
    /// Dropped before the control plane: its Pods stop while the API
    /// server still answers.
    node: Box<cnmysql_realnode::RealNode>,
    pub cp: ControlPlane,
    pub client: kube::Client,
    state: tempfile::TempDir,
}

pub use cnmysql_envtest::until;

impl KubeCluster {
    /// Start the control plane and a node with the operator's image made
    /// of `cnmysql` and every server image built here, install the
    /// operator, and return once it is Ready.
    pub async fn start(cnmysql: &Path) -> anyhow::Result<KubeCluster> {
        Self::start_with_images(cnmysql, &[]).await
    }

    /// The same, with more images `REPO=PATH=HOST_FILE` (an executable
    /// image; say, a newer operator to upgrade to).
    pub async fn start_with_images(
        cnmysql: &Path,
        extra_images: &[String],
    ) -> anyhow::Result<KubeCluster> {
        Self::start_nodes(cnmysql, extra_images, 1).await
    }

    /// The same on `nodes` nodes (`realnode`, `realnode-2`, ...).
    pub async fn start_nodes(
        cnmysql: &Path,
        extra_images: &[String],
        nodes: usize,
    ) -> anyhow::Result<KubeCluster> {
        let state = tempfile::Builder::new().prefix("cnmysql-kube-").tempdir()?;
        let (node, cp) = start_real(cnmysql, extra_images, nodes).await?;
        let client = cp.client().await?;
        let kc = KubeCluster {
            node,
            cp,
            client,
            state,
        };
        let manifest = repo().join("deploy/operator.yaml");
        kc.cp.kubectl(
            &[
                "apply",
                "--server-side",
                "-f",
                &manifest.display().to_string(),
            ],
            None,
        )?;
        kc.cp
            .kubectl(
                &[
                    "-n",
                    "cnmysql-system",
                    "rollout",
                    "status",
                    "deployment/cnmysql-operator",
                    "--timeout=120s",
                ],
                None,
            )
            .with_context(|| kc.node_log_tail())?;
        Ok(kc)
    }

    /// The harness's own directory (the plugin is installed there).
    pub fn state(&self) -> &Path {
        self.state.path()
    }
}

/// What tests and benchmarks ask of a Cluster running on the node.
impl KubeCluster {
    /// Create `namespace` and `kubectl apply` `manifest` in it.
    pub async fn apply_in_new_namespace(
        &self,
        namespace: &str,
        manifest: &str,
    ) -> anyhow::Result<()> {
        let ns: kube::Api<k8s_openapi::api::core::v1::Namespace> =
            kube::Api::all(self.client.clone());
        ns.create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}}))?,
        )
        .await?;
        // Objects that name no namespace go into this one.
        self.cp
            .kubectl(&["-n", namespace, "apply", "-f", "-"], Some(manifest))?;
        Ok(())
    }

    pub fn clusters(&self, namespace: &str) -> kube::Api<cnmysql_api::Cluster> {
        kube::Api::namespaced(self.client.clone(), namespace)
    }

    pub async fn cluster_status(
        &self,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<cnmysql_api::ClusterStatus> {
        Ok(self
            .clusters(namespace)
            .get(name)
            .await?
            .status
            .unwrap_or_default())
    }

    /// Wait until `n` instances are ready (and their Pods Ready), one
    /// primary, no change under way; returns the primary.
    pub async fn wait_healthy(
        &self,
        namespace: &str,
        name: &str,
        n: usize,
        timeout: Duration,
    ) -> anyhow::Result<String> {
        use k8s_openapi::api::core::v1::Pod;
        let pods: kube::Api<Pod> = kube::Api::namespaced(self.client.clone(), namespace);
        let r = until("a healthy cluster", timeout, || async {
            let st = self.cluster_status(namespace, name).await.ok()?;
            let (primaries, ready) = primaries_and_ready(&st);
            let list = pods
                .list(
                    &kube::api::ListParams::default().labels(&format!("cnmysql.io/cluster={name}")),
                )
                .await
                .ok()?;
            let pods_ready = list
                .items
                .iter()
                .filter(|p| {
                    p.status
                        .iter()
                        .flat_map(|s| s.conditions.iter().flatten())
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                })
                .count();
            (st.phase == Some(cnmysql_api::Phase::Healthy)
                && primaries == 1
                && ready == n
                && pods_ready == n
                && st.target_primary == st.current_primary)
                .then_some(st.current_primary.clone()?)
        })
        .await;
        r.map_err(|err| anyhow::anyhow!("{err}\n{}", self.diagnose(namespace, name)))
    }

    /// What a person would look at when a Cluster does not get healthy:
    /// its Pods, its status, the namespace's latest events, the operator's
    /// log and the last lines of each instance manager's.
    pub fn diagnose(&self, namespace: &str, name: &str) -> String {
        let get = |args: &[&str]| self.cp.kubectl(args, None).unwrap_or_default();
        let pods = get(&["-n", namespace, "get", "pods", "-o", "wide"]);
        let status = get(&[
            "-n",
            namespace,
            "get",
            "cluster",
            name,
            "-o",
            "jsonpath={.status}",
        ]);
        let events = get(&[
            "-n",
            namespace,
            "get",
            "events",
            "--sort-by=.metadata.creationTimestamp",
            "-o",
            "custom-columns=LAST:.lastTimestamp,TYPE:.type,REASON:.reason,OBJECT:.involvedObject.name,MESSAGE:.message",
        ]);
        let events: Vec<&str> = events.lines().collect();
        let tail = events[events.len().saturating_sub(40)..].join("\n");
        let operator = get(&[
            "-n",
            "cnmysql-system",
            "logs",
            "deploy/cnmysql-operator",
            "--tail=60",
        ]);
        let selector = format!("{}={name}", cnmysql_api::names::CLUSTER_LABEL);
        let managers = get(&[
            "-n",
            namespace,
            "logs",
            "-l",
            &selector,
            "-c",
            "mysql",
            "--prefix",
            "--tail=40",
            "--max-log-requests=10",
        ]);
        format!("{pods}\n{status}\n{tail}\n{operator}\n{managers}")
    }

    /// The application user's password.
    pub async fn app_password(&self, namespace: &str, cluster: &str) -> anyhow::Result<String> {
        self.password_of(namespace, &format!("{cluster}-app")).await
    }

    /// The `password` key of the Secret `secret`.
    pub async fn password_of(&self, namespace: &str, secret: &str) -> anyhow::Result<String> {
        let s: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(self.client.clone(), namespace);
        let data = s.get(secret).await?.data.unwrap_or_default();
        let pw = data
            .get("password")
            .with_context(|| format!("the Secret {secret} has no password"))?;
        Ok(String::from_utf8(pw.0.clone())?)
    }

    /// Run `sql` as the server's root account in the `mysql` container of
    /// `pod`, through its socket (root signs in nowhere else); what the
    /// client printed.
    pub async fn root_sql(
        &self,
        namespace: &str,
        cluster: &str,
        pod: &str,
        sql: &str,
    ) -> anyhow::Result<String> {
        let pw = self
            .password_of(namespace, &format!("{cluster}-root"))
            .await?;
        let client = match std::env::var("CNMYSQL_TEST_FLAVOR").as_deref() {
            Ok("mysql") => "mysql",
            _ => "mariadb",
        };
        self.cp.kubectl(
            &[
                "-n",
                namespace,
                "exec",
                pod,
                "-c",
                "mysql",
                "--",
                client,
                "--socket=/run/cnmysql/mysqld.sock",
                "--user=root",
                &format!("--password={pw}"),
                "--batch",
                "--skip-column-names",
                "-e",
                sql,
            ],
            None,
        )
    }

    /// Run `kubectl <args>` with the plugin (`kubectl cnmsql`) installed.
    pub fn plugin(&self, cnmysql: &Path, args: &[&str]) -> anyhow::Result<String> {
        let dir = self.state().join("bin");
        if !dir.join("kubectl-cnmsql").exists() {
            let st = Command::new(cnmysql)
                .args(["plugin", "install", "--dir"])
                .arg(&dir)
                .stdout(Stdio::null())
                .status()?;
            anyhow::ensure!(st.success(), "installing the plugin");
        }
        let path = format!(
            "{}:{}",
            dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        // kubectl takes no flags before a plugin's name.
        let out = Command::new("kubectl")
            .arg(args[0])
            .arg("--kubeconfig")
            .arg(&self.cp.kubeconfig)
            .args(&args[1..])
            .env("PATH", path)
            .env_remove("KUBECONFIG")
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// How many of the `acked` rows of `app.w` are missing on the instance
    /// that lacks the most (each reached at its Pod address, given 30 s to
    /// catch up).
    pub async fn rows_missing(
        &self,
        namespace: &str,
        cluster: &str,
        instances: &[String],
        acked: &[u64],
    ) -> anyhow::Result<usize> {
        use k8s_openapi::api::core::v1::Pod;
        use mysql_async::prelude::*;
        let want: std::collections::BTreeSet<u64> = acked.iter().copied().collect();
        let password = self.app_password(namespace, cluster).await?;
        let pods: kube::Api<Pod> = kube::Api::namespaced(self.client.clone(), namespace);
        let mut worst = 0;
        for name in instances {
            let deadline = Instant::now() + Duration::from_secs(30);
            let missing = loop {
                let attempt = async {
                    let pod = pods.get(name).await.map_err(|e| e.to_string())?;
                    let ip = pod
                        .status
                        .and_then(|s| s.pod_ip)
                        .ok_or_else(|| "no Pod IP".to_string())?;
                    let opts = app_opts(&ip, 3306, &password);
                    let mut c = connect_within(opts)
                        .await
                        .map_err(|e| format!("connecting to {ip}: {e}"))?;
                    let ids: Vec<u64> = c
                        .query("SELECT id FROM app.w")
                        .await
                        .map_err(|e| format!("reading app.w at {ip}: {e}"))?;
                    let have: std::collections::BTreeSet<u64> = ids.into_iter().collect();
                    let gone: Vec<&u64> = want.difference(&have).collect();
                    if !gone.is_empty() && Instant::now() > deadline {
                        eprintln!(
                            "{name} lacks acknowledged rows {:?}",
                            &gone[..gone.len().min(10)]
                        );
                    }
                    Ok::<_, String>(gone.len())
                };
                match attempt.await {
                    Ok(0) => break 0,
                    Ok(m) if Instant::now() > deadline => break m,
                    Err(e) if Instant::now() > deadline => {
                        let pods = self
                            .cp
                            .kubectl(&["-n", namespace, "get", "pods", "-o", "wide"], None)
                            .unwrap_or_default();
                        bail!("{name}: cannot read its rows for 30 s: {e}\n{pods}")
                    }
                    _ => {}
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            };
            worst = worst.max(missing);
        }
        Ok(worst)
    }

    /// Wait until every one of `instances` checksums the writer's table as
    /// `primary` does (`CHECKSUM TABLE app.w`): they hold the same rows.
    pub async fn same_rows(
        &self,
        namespace: &str,
        cluster: &str,
        primary: &str,
        instances: &[String],
    ) -> anyhow::Result<()> {
        use k8s_openapi::api::core::v1::Pod;
        use mysql_async::prelude::*;
        let password = self.app_password(namespace, cluster).await?;
        let pods: kube::Api<Pod> = kube::Api::namespaced(self.client.clone(), namespace);
        let checksum = |name: String| {
            let (pods, password) = (pods.clone(), password.clone());
            async move {
                let ip = pods.get(&name).await.ok()?.status?.pod_ip?;
                let mut c = connect(&ip, 3306, &password).await?;
                let r: Option<(String, Option<i64>)> =
                    c.query_first("CHECKSUM TABLE app.w").await.ok()?;
                r?.1
            }
        };
        let want = until("the primary's checksum", Duration::from_secs(30), || {
            checksum(primary.to_string())
        })
        .await?;
        for name in instances {
            until(
                &format!("app.w on {name} checksums as on {primary}"),
                Duration::from_secs(30),
                || async { (checksum(name.clone()).await? == want).then_some(()) },
            )
            .await?;
        }
        Ok(())
    }
}

impl Drop for KubeCluster {
    fn drop(&mut self) {
        if std::env::var_os("CNMYSQL_ENVTEST_KEEP").is_some() {
            let kept = std::mem::replace(
                &mut self.state,
                tempfile::Builder::new().tempdir().expect("tempdir"),
            )
            .keep();
            eprintln!("kubetest: keeping {}", kept.display());
        }
        // The node tears itself down when dropped, before the control
        // plane (field order).
    }
}
