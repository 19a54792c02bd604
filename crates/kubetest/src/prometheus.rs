//! A real Prometheus server (Debian's, from `scripts/setup --tests`) on
//! this machine, scraping a real node's operator with the scrape job
//! `cnmysql install scrape-config` writes and evaluating the shipped alert
//! rules. Debian builds Prometheus without its Kubernetes discovery, so
//! this harness stands in for that one part: every second it lists the
//! Pods of the namespaces the job names through the API server and writes
//! them as the discovery would hand them over (one target per container
//! port, with the `__meta_kubernetes_pod_*` labels), for a `file_sd`
//! source. Prometheus itself then applies the job's relabelling (which
//! Pods and which port are kept), scrapes, stores and alerts.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

/// The Prometheus server executable.
pub fn binary() -> anyhow::Result<PathBuf> {
    cnmysql_envtest::tools::find_tool(
        "CNMYSQL_PROMETHEUS",
        "prometheus",
        "cnmysql/tools/usr/bin/prometheus",
        "The Prometheus server, which scripts/setup --tests takes out of Debian's package prometheus",
    )
}

/// A running Prometheus; stopped when dropped.
pub struct Prometheus {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
    discovery: tokio::task::JoinHandle<()>,
}

/// The label name the Kubernetes discovery gives a Pod label.
fn meta(key: &str) -> String {
    let name: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("__meta_kubernetes_pod_label_{name}")
}

/// What the pod role of the Kubernetes discovery hands over for `pods`.
fn target_groups(pods: &[Pod]) -> Value {
    let mut groups = Vec::new();
    for p in pods {
        let Some(ip) = p.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
            continue;
        };
        let containers = p
            .spec
            .as_ref()
            .map(|s| s.containers.clone())
            .unwrap_or_default();
        for c in containers {
            for port in c.ports.unwrap_or_default() {
                let mut labels = serde_json::Map::new();
                for (k, v) in p.metadata.labels.clone().unwrap_or_default() {
                    labels.insert(meta(&k), v.into());
                }
                labels.insert(
                    "__meta_kubernetes_namespace".into(),
                    p.metadata.namespace.clone().unwrap_or_default().into(),
                );
                labels.insert(
                    "__meta_kubernetes_pod_name".into(),
                    p.metadata.name.clone().unwrap_or_default().into(),
                );
                labels.insert(
                    "__meta_kubernetes_pod_container_name".into(),
                    c.name.clone().into(),
                );
                labels.insert(
                    "__meta_kubernetes_pod_container_port_name".into(),
                    port.name.clone().unwrap_or_default().into(),
                );
                groups.push(json!({
                    "targets": [format!("{ip}:{}", port.container_port)],
                    "labels": labels,
                }));
            }
        }
    }
    Value::Array(groups)
}

async fn discover(client: kube::Client, namespaces: Vec<String>, file: PathBuf) {
    loop {
        let mut pods = Vec::new();
        for ns in &namespaces {
            let api: kube::Api<Pod> = kube::Api::namespaced(client.clone(), ns);
            if let Ok(list) = api.list(&Default::default()).await {
                pods.extend(list.items);
            }
        }
        let tmp = file.with_extension("tmp");
        if std::fs::write(&tmp, target_groups(&pods).to_string()).is_ok() {
            let _ = std::fs::rename(&tmp, &file);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

impl Prometheus {
    /// Start Prometheus with `job` (a scrape job for the Kubernetes
    /// discovery, as `cnmysql install scrape-config` writes it) and the
    /// rule file `rules`, scraping and evaluating every second.
    pub async fn start(
        client: kube::Client,
        job: &Value,
        rules: &str,
    ) -> anyhow::Result<Prometheus> {
        let dir = tempfile::Builder::new()
            .prefix("cnmysql-prometheus-")
            .tempdir()?;
        let targets = dir.path().join("targets.json");
        std::fs::write(&targets, "[]")?;
        std::fs::write(dir.path().join("rules.yaml"), rules)?;
        let namespaces: Vec<String> = job["kubernetes_sd_configs"][0]["namespaces"]["names"]
            .as_array()
            .context("the job names no namespace")?
            .iter()
            .filter_map(|n| n.as_str().map(str::to_string))
            .collect();
        let mut job = job.clone();
        let m = job.as_object_mut().context("a job")?;
        m.remove("kubernetes_sd_configs");
        m.insert(
            "file_sd_configs".into(),
            json!([{ "files": [targets.display().to_string()], "refresh_interval": "1s" }]),
        );
        m.insert("scrape_interval".into(), "1s".into());
        let config = json!({
            "global": { "scrape_interval": "1s", "evaluation_interval": "1s" },
            "rule_files": [dir.path().join("rules.yaml").display().to_string()],
            "scrape_configs": [job],
        });
        let config_file = dir.path().join("prometheus.yml");
        std::fs::write(&config_file, config.to_string())?;
        let port = cnmysql_envtest::free_port();
        let mut cmd = Command::new(binary()?);
        cmd.arg(format!("--config.file={}", config_file.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("prometheus.log"))?);
        cnmysql_envtest::die_with_parent(&mut cmd);
        let child = cmd.spawn().context("starting prometheus")?;
        let discovery = tokio::spawn(discover(client, namespaces, targets));
        let p = Prometheus {
            child,
            port,
            dir,
            discovery,
        };
        crate::until("Prometheus to answer", Duration::from_secs(30), || async {
            p.get("/-/ready").await.ok()
        })
        .await
        .with_context(|| p.log())?;
        Ok(p)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// GET `path` of its HTTP API; the body.
    pub async fn get(&self, path: &str) -> anyhow::Result<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
            .await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        let (head, body) = out.split_once("\r\n\r\n").context("an HTTP answer")?;
        if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
            bail!("{path}: {head}");
        }
        Ok(body.to_string())
    }

    /// The value of an instant query: each series' labels and value.
    pub async fn query(&self, expr: &str) -> anyhow::Result<Vec<(Value, f64)>> {
        let q: String = expr
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let body: Value =
            serde_json::from_str(&self.get(&format!("/api/v1/query?query={q}")).await?)?;
        Ok(body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|r| {
                let v = r["value"][1]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(f64::NAN);
                (r["metric"].clone(), v)
            })
            .collect())
    }

    /// The alerts now pending or firing: (name, state, labels).
    pub async fn alerts(&self) -> anyhow::Result<Vec<(String, String, Value)>> {
        let body: Value = serde_json::from_str(&self.get("/api/v1/alerts").await?)?;
        Ok(body["data"]["alerts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|a| {
                (
                    a["labels"]["alertname"].as_str().unwrap_or("").to_string(),
                    a["state"].as_str().unwrap_or("").to_string(),
                    a["labels"].clone(),
                )
            })
            .collect())
    }

    /// The labels of `alert` once it fires (for `namespace`).
    pub async fn wait_firing(
        &self,
        alert: &str,
        namespace: &str,
        timeout: Duration,
    ) -> anyhow::Result<Value> {
        crate::until(&format!("{alert} to fire"), timeout, || async {
            self.alerts()
                .await
                .ok()?
                .into_iter()
                .find_map(|(name, state, labels)| {
                    (name == alert && state == "firing" && labels["namespace"] == namespace)
                        .then_some(labels)
                })
        })
        .await
    }

    /// Wait until `alert` neither fires nor is pending (for `namespace`).
    pub async fn wait_resolved(
        &self,
        alert: &str,
        namespace: &str,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        crate::until(&format!("{alert} to resolve"), timeout, || async {
            let alerts = self.alerts().await.ok()?;
            (!alerts
                .iter()
                .any(|(name, _, labels)| name == alert && labels["namespace"] == namespace))
            .then_some(())
        })
        .await
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.discovery.abort();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The shipped rules with their waits scaled for a test: every `for:` to
/// `for_` and the backup age of `CnmysqlBackupTooOld` (two days) to
/// `backup_age_seconds`. The expressions are otherwise the shipped ones.
pub fn scaled_rules(rules: &str, for_: &str, backup_age_seconds: u64) -> String {
    let scaled: String = rules
        .lines()
        .map(|l| match l.trim_start().strip_prefix("for: ") {
            Some(_) => format!("{}for: {for_}", &l[..l.len() - l.trim_start().len()]),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let age = "> 2 * 86400";
    assert!(
        scaled.contains(age),
        "CnmysqlBackupTooOld no longer says {age}"
    );
    scaled.replace(age, &format!("> {backup_age_seconds}"))
}
