//! What every local measurement uses: the flavour under way, the
//! `cnmysql` binary beside this one, a cluster in a temporary state
//! directory (`Bench`), and the statistics of a series.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mysql_async::prelude::*;
use serde_json::{Value, json};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BenchFlavor {
    Mariadb,
    Mysql,
}

impl BenchFlavor {
    pub(crate) fn name(self) -> &'static str {
        match self {
            BenchFlavor::Mariadb => "mariadb",
            BenchFlavor::Mysql => "mysql",
        }
    }
}

/// The flavour the measurement under way runs on.
pub(crate) static FLAVOR: std::sync::Mutex<BenchFlavor> =
    std::sync::Mutex::new(BenchFlavor::Mariadb);

pub(crate) fn flavor() -> BenchFlavor {
    *FLAVOR.lock().unwrap()
}

pub(crate) fn cnmysql_bin() -> PathBuf {
    let me = std::env::current_exe().expect("own path");
    me.parent().expect("a directory").join("cnmysql")
}

pub(crate) fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output()?;
    if !out.status.success() {
        anyhow::bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(crate) fn manifest(name: &str, instances: u32) -> String {
    let flavor = match flavor() {
        BenchFlavor::Mariadb => "",
        BenchFlavor::Mysql => "    flavor: mysql\n    image: mysql:9.7\n",
    };
    format!(
        "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: {name}\nspec:\n  instances: {instances}\n  mysql:\n{flavor}    parameters:\n      innodb_buffer_pool_size: 128M\n"
    )
}

pub(crate) struct Bench {
    pub(crate) dir: tempfile::TempDir,
}

impl Bench {
    pub(crate) fn new() -> Bench {
        let mut dir = tempfile::Builder::new()
            .prefix("cnmysql-bench-")
            .tempdir()
            .expect("temp dir");
        // For a look at the logs afterwards.
        if std::env::var_os("CNMYSQL_BENCH_KEEP").is_some() {
            dir.disable_cleanup(true);
            eprintln!("keeping {}", dir.path().display());
        }
        Bench { dir }
    }
    pub(crate) fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }
    pub(crate) fn up(&self, name: &str, instances: u32) -> anyhow::Result<Duration> {
        self.up_with(&manifest(name, instances))
    }
    pub(crate) fn up_with(&self, manifest_text: &str) -> anyhow::Result<Duration> {
        let m = self.dir.path().join("c.yaml");
        std::fs::write(&m, manifest_text)?;
        let t = Instant::now();
        run(Command::new(cnmysql_bin())
            .args([
                "local",
                "up",
                "--detach",
                "--port-base",
                "0",
                "--wait-timeout",
                "600",
                "-f",
            ])
            .arg(&m)
            .arg("--state-dir")
            .arg(self.state()))?;
        Ok(t.elapsed())
    }
    pub(crate) fn down(&self) -> anyhow::Result<()> {
        run(Command::new(cnmysql_bin())
            .args(["local", "down", "--state-dir"])
            .arg(self.state()))?;
        Ok(())
    }
    pub(crate) fn ports(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.state().join("ports.json")).unwrap())
            .unwrap()
    }
    pub(crate) fn secret(&self, name: &str) -> String {
        std::fs::read_to_string(self.state().join("secrets").join(name)).unwrap()
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        // With CNMYSQL_BENCH_KEEP the cluster is stopped but its state kept.
        let how = if std::env::var_os("CNMYSQL_BENCH_KEEP").is_some() {
            "down"
        } else {
            "destroy"
        };
        let _ = Command::new(cnmysql_bin())
            .args(["local", how, "--state-dir"])
            .arg(self.state())
            .stderr(Stdio::null())
            .output();
    }
}

/// For a look at the logs: when (wall clock) the longest interval without
/// an acknowledged write ended.
pub(crate) fn say_where_the_longest_gap_ended(
    o: &cnmysql_workload::writer::Outcome,
) -> anyhow::Result<()> {
    if let Some((_, end)) = o.longest_gap_span() {
        let wall = jiff::Timestamp::now() - jiff::SignedDuration::try_from(end.elapsed())?;
        eprintln!("  longest gap ended at {wall}");
    }
    Ok(())
}

pub(crate) fn stats(mut v: Vec<f64>) -> Value {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let median = if v.is_empty() {
        f64::NAN
    } else if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    json!({"median": median, "min": v.first(), "max": v.last(), "runs": v.len(), "samples": v})
}

pub(crate) const DURABLE: &str = "    semiSync:\n      enabled: true\n      timeoutMillis: 1000\n      dataDurability: required\n  minSyncReplicas: 1\n  maxSyncReplicas: 1\n  failoverDelay: 0\n";

impl Bench {
    pub(crate) fn up_durable(&self, name: &str) -> anyhow::Result<()> {
        self.up_with(&format!("{}{DURABLE}", manifest(name, 3)))?;
        Ok(())
    }
    pub(crate) fn current_primary(&self) -> String {
        self.status()["currentPrimary"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
    pub(crate) fn status(&self) -> Value {
        serde_json::from_str(
            &std::fs::read_to_string(self.state().join("status.json")).unwrap_or_default(),
        )
        .unwrap_or(Value::Null)
    }
    pub(crate) fn wait(
        &self,
        what: &str,
        timeout: Duration,
        f: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while !f(&self.status()) {
            anyhow::ensure!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
    /// Acknowledged ids missing from an instance (queried over its socket).
    pub(crate) async fn lost_on(&self, instance: &str, acked: &[u64]) -> anyhow::Result<usize> {
        let mut c = self.admin(instance).await?;
        let ids: Vec<u64> = c.query("SELECT id FROM app.w").await?;
        let have: std::collections::BTreeSet<u64> = ids.into_iter().collect();
        Ok(acked.iter().filter(|a| !have.contains(a)).count())
    }
}

impl Bench {
    /// The administrator's connection to `instance`, over its socket.
    pub(crate) async fn admin(&self, instance: &str) -> anyhow::Result<mysql_async::Conn> {
        let sock = self
            .state()
            .join("instances")
            .join(instance)
            .join("run/mysqld.sock");
        let opts = mysql_async::OptsBuilder::default()
            .socket(Some(sock.display().to_string()))
            .user(Some("root"))
            .pass(Some(self.secret("admin-password")))
            .prefer_socket(true);
        Ok(mysql_async::Conn::new(opts).await?)
    }
}

pub(crate) fn rss_kib(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
