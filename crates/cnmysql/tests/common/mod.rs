//! A local cluster driven through the real `cnmysql` binary, on free ports
//! and a temporary state directory, torn down (and checked for leftover
//! processes) when the test ends.

#![allow(dead_code)]

pub mod donor;
pub mod follow;
pub mod kube;
mod server_flavor;
pub mod writer;

#[allow(unused_imports)]
pub use server_flavor::{
    Flavor, binlog_end, binlog_gtids, flavor, flavor_lines, sequence, server_program, sql,
    start_io_thread, stop_io_thread, write_as_admin,
};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use mysql_async::prelude::*;
use mysql_async::{Conn, OptsBuilder};
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_cnmysql");

pub fn cnmysql(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run cnmysql")
}

/// `cnmysql local up -f <manifest> --state-dir <state> --port-base <base>`
/// and any further flags.
pub fn local_up(manifest: &Path, state: &Path, port_base: &str, more: &[&str]) -> Output {
    let mut args = vec![
        "local",
        "up",
        "-f",
        manifest.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
        "--port-base",
        port_base,
    ];
    args.extend_from_slice(more);
    cnmysql(&args)
}

/// A manifest for a cluster of `instances` with small memory settings, on
/// the flavour under test. It ends inside `spec.mysql`.
pub fn manifest(name: &str, instances: u32) -> String {
    format!(
        "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: {name}\nspec:\n  instances: {instances}\n  mysql:\n{}    parameters:\n      innodb_buffer_pool_size: 32M\n",
        flavor_lines()
    )
}

pub struct LocalCluster {
    pub started: Instant,
    pub name: String,
    pub dir: tempfile::TempDir,
    destroyed: bool,
}

/// Wait until `f` returns Some, or fail after `timeout` with `what` (one
/// helper for every test suite).
pub use cnmysql_envtest::wait_for;

impl LocalCluster {
    /// `local up --detach` a new cluster and wait until it is ready.
    pub fn start(name: &str, manifest_text: &str) -> LocalCluster {
        let c = LocalCluster::new(name);
        c.up(manifest_text);
        c.let_app_make_databases();
        c
    }

    /// A new cluster with its accounts exactly as the platform made them.
    pub fn start_as_made(name: &str, manifest_text: &str) -> LocalCluster {
        let c = LocalCluster::new(name);
        c.up(manifest_text);
        c
    }

    /// The application account owns only the `app` database; these tests
    /// make databases of their own through it, so the fixture grants it
    /// the same privileges on every database (binary-logged, so every
    /// instance holds it). Never on a replica cluster, which must write
    /// nothing of its own. `tests/local_cluster.rs` checks the default.
    fn let_app_make_databases(&self) {
        if self.status()["replica"]["enabled"] == true {
            return;
        }
        let grant = "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX, ALTER, \
            CREATE TEMPORARY TABLES, LOCK TABLES, EXECUTE, CREATE VIEW, SHOW VIEW, \
            CREATE ROUTINE, ALTER ROUTINE, EVENT, TRIGGER, REFERENCES ON *.* TO 'app'@'%'";
        let state = self.state_arg();
        let out = cnmysql(&[
            "local",
            "mysql",
            "--state-dir",
            &state,
            &self.name,
            "--",
            "-e",
            grant,
        ]);
        assert!(
            out.status.success(),
            "granting app every database: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A cluster's state in a new temporary directory, not yet up.
    fn new(name: &str) -> LocalCluster {
        let dir = tempfile::Builder::new()
            .prefix("cnmysql-test-")
            .tempdir()
            .unwrap();
        LocalCluster {
            name: name.to_string(),
            dir,
            destroyed: false,
            started: Instant::now(),
        }
    }

    /// One instance's status, as `local status -o json` shows it (null when
    /// it does not answer).
    pub fn instance_status(&self, name: &str) -> Value {
        self.status_json()["instances"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| i["name"] == name)
            .cloned()
            .unwrap_or_default()
    }

    /// `local up --detach` a new cluster, waiting at most `wait_secs`, and
    /// return how that went (a cluster expected not to come up).
    pub fn try_start(name: &str, manifest_text: &str, wait_secs: u32) -> (LocalCluster, Output) {
        let c = LocalCluster::new(name);
        let m = c.state().join("cluster.yaml");
        std::fs::write(&m, manifest_text).unwrap();
        let out = local_up(
            &m,
            Path::new(&c.state_arg()),
            "0",
            &["--detach", "--wait-timeout", &wait_secs.to_string()],
        );
        (c, out)
    }

    pub fn state(&self) -> &Path {
        self.dir.path()
    }

    pub fn state_arg(&self) -> String {
        self.state().join("state").display().to_string()
    }

    /// `local up --detach` (creating or resuming).
    pub fn up(&self, manifest_text: &str) -> Output {
        let m = self.state().join("cluster.yaml");
        std::fs::write(&m, manifest_text).unwrap();
        let out = local_up(
            &m,
            Path::new(&self.state_arg()),
            "0",
            &["--detach", "--wait-timeout", "180"],
        );
        if !out.status.success() {
            eprintln!("[{}] {}", self.name, self.log_tails());
        }
        assert!(
            out.status.success(),
            "local up failed:\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    pub fn down(&self) {
        let out = cnmysql(&["local", "down", "--state-dir", &self.state_arg()]);
        assert!(
            out.status.success(),
            "local down failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn ports(&self) -> Value {
        let p = Path::new(&self.state_arg()).join("ports.json");
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    }

    pub fn service_port(&self, svc: &str) -> u16 {
        self.ports()["services"][svc].as_u64().unwrap() as u16
    }

    pub fn instance_port(&self, instance: &str) -> u16 {
        self.ports()["instances"][instance]["mysql"]
            .as_u64()
            .unwrap() as u16
    }

    /// An instance's `GET /status` straight from its manager, as the
    /// operator and its peers ask it (mutual TLS, the operator's
    /// certificate), within `within`: the answer, or why there was none.
    pub async fn manager_status(&self, instance: &str, within: Duration) -> Result<Value, String> {
        let pki = Path::new(&self.state_arg()).join("pki");
        let tls = cnmysql_tls::TlsPaths::in_dir(&pki, "cnmysql-operator")
            .load()
            .map_err(|e| e.to_string())?;
        let client = cnmysql_control::client::ControlClient::new(
            tls.client_config().map_err(|e| e.to_string())?,
        );
        let port = self.control_port(instance);
        match tokio::time::timeout(within, client.get_json("127.0.0.1", port, "/status")).await {
            Ok(answer) => answer.map_err(|e| e.to_string()),
            Err(_) => Err(format!("no answer within {within:?}")),
        }
    }

    /// An instance's control API port.
    pub fn control_port(&self, instance: &str) -> u16 {
        self.ports()["instances"][instance]["control"]
            .as_u64()
            .expect("a control port") as u16
    }

    pub fn app_password(&self) -> String {
        std::fs::read_to_string(Path::new(&self.state_arg()).join("secrets/app-password")).unwrap()
    }

    pub fn admin_password(&self) -> String {
        std::fs::read_to_string(Path::new(&self.state_arg()).join("secrets/admin-password"))
            .unwrap()
    }

    pub fn instance_dir(&self, instance: &str) -> PathBuf {
        Path::new(&self.state_arg())
            .join("instances")
            .join(instance)
    }

    /// Connect as the application through a port (a Service or an instance).
    pub async fn app(&self, port: u16) -> mysql_async::Result<Conn> {
        let opts = OptsBuilder::default()
            .ip_or_hostname("127.0.0.1")
            .tcp_port(port)
            .user(Some("app"))
            .pass(Some(self.app_password()))
            .prefer_socket(false);
        Conn::new(opts).await
    }

    /// Connect as the admin over an instance's private socket.
    pub async fn admin(&self, instance: &str) -> Conn {
        let sock = self.instance_dir(instance).join("run/mysqld.sock");
        let opts = OptsBuilder::default()
            .socket(Some(sock.display().to_string()))
            .user(Some("root"))
            .pass(Some(self.admin_password()))
            .prefer_socket(true);
        Conn::new(opts).await.expect("admin connection")
    }

    pub fn status_json(&self) -> Value {
        let out = cnmysql(&[
            "local",
            "status",
            "--state-dir",
            &self.state_arg(),
            "-o",
            "json",
        ]);
        assert!(
            out.status.success(),
            "status failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// The cluster status as the control plane last wrote it.
    pub fn status(&self) -> Value {
        serde_json::from_str(
            &std::fs::read_to_string(Path::new(&self.state_arg()).join("status.json")).unwrap(),
        )
        .unwrap()
    }

    pub fn current_primary(&self) -> String {
        self.status()["currentPrimary"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// Backends of each endpoint, as the control plane routes them now.
    pub fn routes(&self) -> BTreeMap<String, Vec<String>> {
        std::fs::read_to_string(Path::new(&self.state_arg()).join("routes.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    pub fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(Path::new(&self.state_arg()).join("events.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The events of these reasons, in order, each as `reason instance`
    /// with its message.
    pub fn event_steps(&self, reasons: &[&str]) -> Vec<(String, String)> {
        self.events()
            .iter()
            .filter(|e| reasons.iter().any(|r| e["reason"] == *r))
            .map(|e| {
                (
                    format!(
                        "{} {}",
                        e["reason"].as_str().unwrap_or_default(),
                        e["instance"].as_str().unwrap_or("-")
                    ),
                    e["message"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    pub fn has_event(&self, reason: &str) -> Option<Value> {
        self.events().into_iter().find(|e| e["reason"] == reason)
    }

    fn pid(&self, path: PathBuf) -> Option<i32> {
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    }

    /// PID of an instance's manager.
    pub fn manager_pid(&self, instance: &str) -> i32 {
        self.pid(self.instance_dir(instance).join("manager.pid"))
            .expect("manager pid")
    }

    /// PIDs of an instance's manager and mysqld.
    pub fn instance_pids(&self, instance: &str) -> (i32, i32) {
        let d = self.instance_dir(instance);
        (
            self.pid(d.join("manager.pid")).expect("manager pid"),
            self.pid(d.join("run/mysqld.pid")).unwrap_or_else(|| {
                panic!(
                    "{instance} has no mysqld.pid; run/: {:?}\n{}",
                    std::fs::read_dir(d.join("run"))
                        .map(|r| r.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
                        .unwrap_or_default(),
                    self.log_tails()
                )
            }),
        )
    }

    /// Send a signal to an instance's manager and mysqld.
    /// Either may be gone by now (a continue after a freeze, when the
    /// instance was meanwhile fenced and re-cloned): those that are not.
    pub fn signal_instance(&self, instance: &str, sig: nix::sys::signal::Signal) {
        let d = self.instance_dir(instance);
        let pids = [
            self.pid(d.join("manager.pid")),
            self.pid(d.join("run/mysqld.pid")),
        ];
        for pid in pids.into_iter().flatten() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
            if sig == nix::sys::signal::Signal::SIGSTOP {
                wait_stopped(pid);
            }
        }
    }

    /// Run a `local` subcommand against this cluster.
    pub fn local(&self, args: &[&str]) -> Output {
        let state = self.state_arg();
        let mut all = vec!["local"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--state-dir", &state]);
        cnmysql(&all)
    }

    /// The cluster's Prometheus page (`GET /metrics` on its metrics port).
    pub async fn metrics(&self) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let port = self.ports()["metrics"].as_u64().expect("a metrics port") as u16;
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect to the metrics endpoint");
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        assert!(out.contains("application/openmetrics-text"), "{out}");
        out
    }

    /// The kubectl plugin, started under one of its names (`kubectl-cnmsql`,
    /// `kubectl-cloudnative_mysql`), on this local cluster.
    pub fn plugin(&self, name: &str, args: &[&str]) -> Output {
        let bin = self.state().join("bin");
        if !bin.join(name).exists() {
            let out = cnmysql(&["plugin", "install", "--dir", bin.to_str().unwrap()]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let state = self.state_arg();
        Command::new(bin.join(name))
            .args(["--local", "--state-dir", &state])
            .args(args)
            .output()
            .expect("run the plugin")
    }

    /// `@@read_only` of each running instance, by name.
    pub async fn writable_instances(&self) -> Vec<String> {
        let mut out = Vec::new();
        for n in self.ports()["instances"].as_object().unwrap().keys() {
            let sock = self.instance_dir(n).join("run/mysqld.sock");
            let opts = OptsBuilder::default()
                .socket(Some(sock.display().to_string()))
                .user(Some("root"))
                .pass(Some(self.admin_password()))
                .prefer_socket(true);
            if let Ok(Ok(mut c)) =
                tokio::time::timeout(Duration::from_secs(2), Conn::new(opts)).await
            {
                let ro: Option<i64> = c.query_first("SELECT @@read_only").await.ok().flatten();
                if ro == Some(0) {
                    out.push(n.clone());
                }
            }
        }
        out
    }

    pub fn instance_name(&self, ordinal: u32) -> String {
        format!("{}-{ordinal}", self.name)
    }

    /// PIDs of every process whose command line mentions this cluster's
    /// state directory (control plane, managers, servers).
    pub fn processes(&self) -> Vec<(i32, String)> {
        processes_mentioning(&self.state_arg())
    }

    /// Destroy the cluster and assert nothing it started is still running.
    pub fn destroy(mut self) {
        let t = Instant::now();
        // `down`, then `destroy` (which is `down` and removing the state):
        // the logs are still there to show why a teardown failed.
        let out = cnmysql(&["local", "down", "--state-dir", &self.state_arg()]);
        eprintln!(
            "[{}] down took {:?}; {:?} since start",
            self.name,
            t.elapsed(),
            self.started.elapsed()
        );
        let left = self.processes();
        // Every manager stopped its own server in time: the control plane's
        // and `down`'s fallbacks (kill a manager after 90 s, then its
        // mysqld) were not needed.
        let control = std::fs::read_to_string(Path::new(&self.state_arg()).join("control.log"))
            .unwrap_or_default();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let forced: Vec<&str> = control
            .lines()
            .chain(stderr.lines())
            .filter(|l| l.contains("did not stop within") || l.contains("left without its manager"))
            .collect();
        if !out.status.success() || !left.is_empty() || !forced.is_empty() {
            eprintln!("{}", self.log_tails());
        }
        self.keep_logs();
        let removed = cnmysql(&["local", "destroy", "--state-dir", &self.state_arg()]);
        self.destroyed = true;
        assert!(
            out.status.success(),
            "down failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(left.is_empty(), "processes left behind: {left:?}");
        assert!(forced.is_empty(), "stopped by force: {forced:?}");
        assert!(
            removed.status.success(),
            "destroy failed: {}",
            String::from_utf8_lossy(&removed.stderr)
        );
    }

    /// With `CNMYSQL_TEST_KEEP_LOGS=DIR`, copy the control plane's and every
    /// manager's whole log to `DIR/<cluster>-<n>/` before the state goes.
    fn keep_logs(&self) {
        let Some(dir) = std::env::var_os("CNMYSQL_TEST_KEEP_LOGS") else {
            return;
        };
        let state = Path::new(&self.state_arg()).to_path_buf();
        // Also called while a failed test unwinds: nothing here may panic.
        let Some(to) = (0..1000)
            .map(|n| Path::new(&dir).join(format!("{}-{n}", self.name)))
            .find(|p| !p.exists())
        else {
            return;
        };
        if let Err(e) = std::fs::create_dir_all(&to) {
            eprintln!("[{}] cannot keep logs in {}: {e}", self.name, to.display());
            return;
        }
        let _ = std::fs::copy(state.join("control.log"), to.join("control.log"));
        for e in std::fs::read_dir(state.join("instances"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = format!("{}.log", e.file_name().to_string_lossy());
            let _ = std::fs::copy(e.path().join("manager.log"), to.join(name));
        }
        eprintln!("[{}] logs kept in {}", self.name, to.display());
    }

    /// The last lines of the control plane's and every manager's log.
    pub fn log_tails(&self) -> String {
        let state = Path::new(&self.state_arg()).to_path_buf();
        let mut logs = vec![state.join("control.log")];
        if let Ok(dir) = std::fs::read_dir(state.join("instances")) {
            logs.extend(dir.flatten().map(|e| e.path().join("manager.log")));
        }
        let mut out = String::new();
        for log in logs {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!("==== {} (last 40 lines)\n", log.display()));
            for l in &lines[lines.len().saturating_sub(40)..] {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }
}

pub fn processes_mentioning(needle: &str) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = state
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z');
        if cmd.contains(needle) && !zombie && pid != std::process::id() as i32 {
            out.push((pid, cmd));
        }
    }
    out
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        if self.destroyed {
            return;
        }
        // A failed test: show what the cluster logged before it is removed.
        if std::thread::panicking() {
            eprintln!("[{}] {}", self.name, self.log_tails());
        }
        self.keep_logs();
        let _ = cnmysql(&["local", "destroy", "--state-dir", &self.state_arg()]);
        // Backstop: nothing of ours survives a failed test.
        for (pid, _) in processes_mentioning(&self.state_arg()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Wait (up to 10 s) until every thread of `pid` is stopped. `kill`
/// returns once SIGSTOP is queued, not once it took effect: the group stop
/// starts when one thread takes the signal, and on a busy machine the
/// others run meanwhile (a server can still read and execute a statement
/// sent "after" the freeze). Gone counts as stopped.
pub fn wait_stopped(pid: i32) {
    let stopped = || {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return true;
        };
        tasks.flatten().all(|t| {
            std::fs::read_to_string(t.path().join("stat")).map_or(true, |st| {
                let state = st.rsplit(')').next().unwrap_or("").trim_start();
                state.starts_with(['T', 't', 'Z', 'X'])
            })
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !stopped() {
        assert!(
            Instant::now() < deadline,
            "process {pid} did not stop within 10 s of SIGSTOP"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Rows of a query as strings.
pub async fn rows(conn: &mut Conn, q: &str) -> Vec<Vec<String>> {
    let rows: Vec<mysql_async::Row> = conn.query(q).await.unwrap();
    rows.into_iter()
        .map(|r| {
            (0..r.len())
                .map(|i| match r.as_ref(i) {
                    Some(mysql_async::Value::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
                    Some(mysql_async::Value::NULL) | None => "NULL".into(),
                    Some(v) => v.as_sql(true),
                })
                .collect()
        })
        .collect()
}

/// The output of a command that must have succeeded (stdout and stderr).
pub fn ok(out: &Output, what: &str) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

impl LocalCluster {
    /// Each instance as `local status -o json` shows it, by name.
    pub fn instances(&self) -> BTreeMap<String, Value> {
        instances_by_name(&self.status_json())
    }

    /// `cnmysql local annotate <args>`, which must succeed.
    pub fn annotate(&self, args: &[&str]) {
        let mut all = vec!["annotate"];
        all.extend_from_slice(args);
        ok(&self.local(&all), &format!("annotate {args:?}"));
    }

    /// Wait until the cluster's orchestrated upgrade is done (never
    /// failed meanwhile); its record.
    pub async fn orchestrated_done(&self, timeout: Duration) -> Value {
        wait_for("the orchestrated upgrade to be done", timeout, || async {
            let o = self.status()["orchestratedUpgrade"].clone();
            assert_ne!(o["status"], "failed", "{o}");
            (o["status"] == "done").then_some(o)
        })
        .await
    }
}

pub fn instances_by_name(status: &Value) -> BTreeMap<String, Value> {
    status["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["name"].as_str().unwrap().to_string(), i.clone()))
        .collect()
}

/// The files of a `report` bundle, by path, as text.
#[allow(dead_code)]
pub fn untar_gz(path: &Path) -> BTreeMap<String, String> {
    use std::io::Read as _;
    let gz = flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap());
    let mut out = BTreeMap::new();
    for e in tar::Archive::new(gz).entries().unwrap() {
        let mut e = e.unwrap();
        let name = e.path().unwrap().display().to_string();
        let mut text = String::new();
        e.read_to_string(&mut text).unwrap();
        out.insert(name, text);
    }
    out
}

/// A TLS client that trusts the CAs in `ca_pem` and presents no
/// certificate of its own.
#[allow(dead_code)]
pub fn client_without_certificate(ca_pem: &str) -> rustls::ClientConfig {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    rustls::ClientConfig::builder_with_provider(cnmysql_tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}
