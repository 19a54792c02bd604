//! `cnmysql-bench`: measures what the issues set goals for, on real mariadbd
//! processes, and prints a table and JSON. Build the binaries in release mode
//! first: `cargo build --release -p cnmysql -p cnmysql-bench`, then run
//! `target/release/cnmysql-bench all`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod backup;
mod kube;
mod operator;
mod server_upgrade;
mod upgrade;

use clap::{Parser, Subcommand};
use mysql_async::prelude::*;
use serde_json::{Value, json};

#[derive(Parser)]
#[command(about = "Benchmarks of cnmysql (start-up, clone throughput, manager memory)")]
struct Cli {
    #[command(subcommand)]
    what: What,
    /// Repetitions of each measurement.
    #[arg(long, default_value = "5", global = true)]
    runs: usize,
    /// Write the JSON results here as well.
    #[arg(long, global = true)]
    json: Option<PathBuf>,
    /// Server flavours of the local measurements (startup, clone, memory,
    /// failover, switchover, upgrade), one column each: `mariadb` (this
    /// machine's server), `mysql` (the server image `mysql:9.7`, built by
    /// scripts/images; needs root), or both.
    #[arg(
        long,
        global = true,
        value_delimiter = ',',
        default_value = "mariadb,mysql"
    )]
    flavor: Vec<BenchFlavor>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum BenchFlavor {
    Mariadb,
    Mysql,
}

impl BenchFlavor {
    fn name(self) -> &'static str {
        match self {
            BenchFlavor::Mariadb => "mariadb",
            BenchFlavor::Mysql => "mysql",
        }
    }
}

/// The flavour the measurement under way runs on.
static FLAVOR: std::sync::Mutex<BenchFlavor> = std::sync::Mutex::new(BenchFlavor::Mariadb);

fn flavor() -> BenchFlavor {
    *FLAVOR.lock().unwrap()
}

#[derive(Subcommand, Clone, Copy)]
enum What {
    /// `local up` of a new 3-instance cluster until all instances are ready.
    Startup,
    /// Clone throughput over the mTLS control API versus a plain local
    /// `mariadb-backup --stream | mbstream -x` of the same data.
    Clone {
        /// Megabytes of table data on the primary.
        #[arg(long, default_value = "500")]
        megabytes: u64,
    },
    /// Idle resident memory of the instance managers (mysqld excluded).
    Memory,
    /// kill -9 of the primary's manager and mysqld under continuous writes,
    /// until the first acknowledged write through rw; rows lost.
    Failover,
    /// Planned switchover under continuous writes: longest interval without
    /// an acknowledged write through rw; rows lost.
    Switchover,
    /// The operator against a real API server (needs KUBEBUILDER_ASSETS):
    /// time from kubectl apply to all objects, idle API requests per minute,
    /// resident memory with 1 and 10 Clusters.
    Operator,
    /// Failover and switchover on Kubernetes (needs KUBEBUILDER_ASSETS and
    /// root): a real control plane and a real node (kubelet, containerd,
    /// kube-proxy) running the operator and a 3-instance Cluster; Pod
    /// deleted on notice (a handover), PID 1 killed, node cut off,
    /// node frozen, planned switchover; beside the same figures on the
    /// local platform.
    Kube {
        /// Runs of the slow cases (node cut off or frozen: each waits for
        /// the 15 s lease).
        #[arg(long, default_value = "3")]
        slow_runs: usize,
        /// Skip the local platform's failover and switchover.
        #[arg(long)]
        no_local: bool,
    },
    /// Instance-manager upgrades under writes: in place (swap time and
    /// query gap per instance, mysqld kept) and rolling (total time, rw
    /// write gap across the switchover).
    Upgrade,
    /// Server version upgrades under writes (needs root and the server
    /// images): MariaDB 10.11.18 → 10.11.19 and 10.11.19 → 11.8, MySQL 9.7
    /// to a second image of 9.7; total time and longest rw write gap,
    /// beside a plain switchover.
    ServerUpgrade,
    /// Backups (issue 23): base backup throughput against a plain
    /// `mariadb-backup --stream | zstd` pipe into the same store, archive
    /// lag under steady writes, recovery time with and without replay.
    Backup {
        /// Megabytes of table data on the primary.
        #[arg(long, default_value = "500")]
        megabytes: u64,
    },
    /// All of the above but the operator and Kubernetes.
    All,
}

fn cnmysql_bin() -> PathBuf {
    let me = std::env::current_exe().expect("own path");
    me.parent().expect("a directory").join("cnmysql")
}

fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output()?;
    if !out.status.success() {
        anyhow::bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn manifest(name: &str, instances: u32) -> String {
    let flavor = match flavor() {
        BenchFlavor::Mariadb => "",
        BenchFlavor::Mysql => "    flavor: mysql\n    image: mysql:9.7\n",
    };
    format!(
        "apiVersion: mysql.cnmysql.io/v1\nkind: Cluster\nmetadata:\n  name: {name}\nspec:\n  instances: {instances}\n  mysql:\n{flavor}    parameters:\n      innodb_buffer_pool_size: 128M\n"
    )
}

struct Bench {
    dir: tempfile::TempDir,
}

impl Bench {
    fn new() -> Bench {
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
    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }
    fn up(&self, name: &str, instances: u32) -> anyhow::Result<Duration> {
        self.up_with(&manifest(name, instances))
    }
    fn up_with(&self, manifest_text: &str) -> anyhow::Result<Duration> {
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
    fn down(&self) -> anyhow::Result<()> {
        run(Command::new(cnmysql_bin())
            .args(["local", "down", "--state-dir"])
            .arg(self.state()))?;
        Ok(())
    }
    fn ports(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.state().join("ports.json")).unwrap())
            .unwrap()
    }
    fn secret(&self, name: &str) -> String {
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
fn say_where_the_longest_gap_ended(o: &cnmysql_bench::writer::Outcome) -> anyhow::Result<()> {
    if let Some(end) = o
        .ack_times
        .windows(2)
        .max_by_key(|w| w[1] - w[0])
        .map(|w| w[1])
    {
        let wall = jiff::Timestamp::now() - jiff::SignedDuration::try_from(end.elapsed())?;
        eprintln!("  longest gap ended at {wall}");
    }
    Ok(())
}

fn stats(mut v: Vec<f64>) -> Value {
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

fn startup(runs: usize) -> anyhow::Result<Value> {
    let mut fresh = Vec::new();
    let mut resume = Vec::new();
    for i in 0..runs {
        let b = Bench::new();
        fresh.push(b.up(&format!("boot{i}"), 3)?.as_secs_f64());
        b.down()?;
        resume.push(b.up(&format!("boot{i}"), 3)?.as_secs_f64());
        eprintln!(
            "startup run {}: new {:.2}s, resume {:.2}s",
            i + 1,
            fresh[i],
            resume[i]
        );
    }
    Ok(
        json!({"new_3_instances_seconds": stats(fresh), "resume_3_instances_seconds": stats(resume)}),
    )
}

use cnmysql_instance::clone::dir_size;

/// Load about `megabytes` MB of rows into `b.t` through the cluster's rw
/// endpoint.
fn load(b: &Bench, megabytes: u64) -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    let port = b.ports()["services"]["rw"].as_u64().unwrap() as u16;
    let pw = b.secret("app-password");
    eprintln!("loading {megabytes} MB…");
    rt.block_on(async {
        let opts = mysql_async::OptsBuilder::default()
            .ip_or_hostname("127.0.0.1")
            .tcp_port(port)
            .user(Some("app"))
            .pass(Some(pw));
        let mut c = mysql_async::Conn::new(opts).await?;
        c.query_drop(match flavor() {
            BenchFlavor::Mariadb => "SET SESSION max_recursive_iterations = 1000000",
            BenchFlavor::Mysql => "SET SESSION cte_max_recursion_depth = 1000000",
        })
        .await?;
        c.query_drop("CREATE DATABASE IF NOT EXISTS b").await?;
        c.query_drop("USE b").await?;
        c.query_drop(
            "CREATE TABLE IF NOT EXISTS t (id INT PRIMARY KEY, body VARCHAR(1100) NOT NULL)",
        )
        .await?;
        let rows = megabytes * 1000;
        let mut lo = 1;
        while lo <= rows {
            let hi = (lo + 49_999).min(rows);
            c.query_drop(format!(
                "INSERT INTO t WITH RECURSIVE s (seq) AS (SELECT {lo} UNION ALL SELECT seq + 1 FROM s WHERE seq < {hi}) \
                 SELECT seq, REPEAT(SHA2(seq, 256), 16) FROM s"
            ))
            .await?;
            lo = hi + 1;
        }
        anyhow::Ok(())
    })
}

fn clone(runs: usize, megabytes: u64) -> anyhow::Result<Value> {
    let b = Bench::new();
    b.up("clone", 1)?;
    load(&b, megabytes)?;
    let primary_dir = b.state().join("instances/clone-1");
    let data_bytes = dir_size(&primary_dir.join("data"));
    // Both sides copy the same data directory, measured from the start of the
    // backup to the end of the extraction (prepare excluded on both sides).
    // Runs alternate between the two, each after a `sync`, so that page-cache
    // write-back of one run does not land on the other.
    let mut baseline = Vec::new();
    let mut ours = Vec::new();
    let mut total = Vec::new();
    let mut ours_bytes = 0u64;
    b.down()?;
    for i in 0..runs {
        // Ours: a new replica cloned through the primary's control API, from
        // an empty instance directory.
        let _ = std::fs::remove_dir_all(b.state().join("instances/clone-2"));
        run(&mut Command::new("sync"))?;
        let t = Instant::now();
        b.up("clone", 2)?;
        let ready = t.elapsed().as_secs_f64();
        let log = std::fs::read_to_string(b.state().join("instances/clone-2/manager.log"))?;
        // The copy itself: MariaDB's stream extracted (prepare excluded),
        // MySQL's CLONE statement.
        let copied = log
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .rfind(|v| v["message"] == "backup copied; preparing" || v["message"] == "clone copied")
            .ok_or_else(|| anyhow::anyhow!("no clone in the log"))?;
        let mbps = data_bytes as f64 / 1e6 / copied["seconds"].as_f64().unwrap_or(f64::INFINITY);
        ours.push(mbps);
        ours_bytes = copied["bytes"].as_u64().unwrap_or(0);
        total.push(ready);
        eprintln!(
            "clone run {}: {mbps:.0} MB/s ({}); replica ready {ready:.2}s after up",
            i + 1,
            match flavor() {
                BenchFlavor::Mariadb => "stream over mTLS",
                BenchFlavor::Mysql => "clone plugin over TLS",
            }
        );

        if flavor() == BenchFlavor::Mysql {
            let secs = mysql_plain_clone(&b, i)?;
            let mbps = data_bytes as f64 / 1e6 / secs;
            baseline.push(mbps);
            eprintln!(
                "baseline run {}: plain CLONE of {:.0} MB in {secs:.2}s = {mbps:.0} MB/s",
                i + 1,
                data_bytes as f64 / 1e6
            );
            b.down()?;
            continue;
        }
        // Baseline: the backup tool piped straight into the extractor, locally.
        let target = b.dir.path().join(format!("baseline-{i}"));
        let tmp = b.dir.path().join(format!("baseline-tmp-{i}"));
        std::fs::create_dir_all(&target)?;
        std::fs::create_dir_all(&tmp)?;
        let cnf = primary_dir.join("run/backup.cnf");
        run(&mut Command::new("sync"))?;
        let t = Instant::now();
        let sh = format!(
            "mariadb-backup --defaults-file={} --backup --stream=mbstream --parallel=2 --target-dir={} 2>/dev/null | mbstream -x -C {}",
            cnf.display(),
            tmp.display(),
            target.display()
        );
        run(Command::new("bash").args(["-o", "pipefail", "-c", &sh]))?;
        let secs = t.elapsed().as_secs_f64();
        let mbps = data_bytes as f64 / 1e6 / secs;
        baseline.push(mbps);
        eprintln!(
            "baseline run {}: {:.0} MB in {secs:.2}s = {mbps:.0} MB/s",
            i + 1,
            data_bytes as f64 / 1e6
        );
        std::fs::remove_dir_all(&target)?;
        std::fs::remove_dir_all(&tmp)?;
        b.down()?;
    }
    let ratio = {
        let m = |v: &Vec<f64>| {
            let mut v = v.clone();
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            v[v.len() / 2]
        };
        m(&ours) / m(&baseline)
    };
    Ok(json!({
        "data_dir_bytes": data_bytes,
        "note": match flavor() {
            BenchFlavor::Mariadb => "MB/s = size of the primary data directory (binary logs included, which neither side copies) over the time from backup start to extracted copy",
            BenchFlavor::Mysql => "MB/s = size of the primary data directory over the time of the CLONE statement: cnmysql's clone (TLS, X509 account, recipient made by the manager) versus the same statement run by hand into a plain recipient server, both from the same primary",
        },
        "streamed_bytes_last_run": ours_bytes,
        "cnmysql_clone_mb_per_s": stats(ours),
        "baseline_mb_per_s": stats(baseline),
        "ratio_of_medians": ratio,
        "replica_ready_after_up_seconds": stats(total),
    }))
}

/// The baseline of MySQL's clone: a plain recipient server of the same
/// image, made and started by hand next to the cluster, runs the same
/// `CLONE INSTANCE` from the primary (TLS, the replication account and a
/// replica's certificate); seconds of the statement.
fn mysql_plain_clone(b: &Bench, run_no: usize) -> anyhow::Result<f64> {
    use cnmysql_instance::config::Programs;
    let spec = cnmysql_api::parse_cluster(&manifest("clone", 2))?.spec;
    let programs = Programs::for_spec(&spec, &cnmysql_instance::server_image::default_store())
        .map_err(anyhow::Error::msg)?;
    let dir = b.dir.path().join(format!("plain-{run_no}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    cnmysql_instance::bootstrap::install_db(spec.mysql.flavor, &programs, &dir.join("data"))?;
    let primary_port = b.ports()["instances"]["clone-1"]["mysql"].as_u64().unwrap();
    let tls = b.state().join("pki");
    let pick = |ext: &str| -> anyhow::Result<PathBuf> {
        std::fs::read_dir(&tls)?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().ends_with(ext))
            .ok_or_else(|| anyhow::anyhow!("no *{ext} in {}", tls.display()))
    };
    let (ca, cert, key) = (pick("ca.crt")?, pick("clone-2.crt")?, pick("clone-2.key")?);
    let sock = dir.join("s.sock");
    let cnf = format!(
        "[mysqld]\ndatadir = {}\nsocket = {}\npid_file = {}\nskip_networking = ON\nskip_log_bin = ON\nplugin_load_add = mysql_clone.so\nmysqlx = OFF\nsecure_file_priv = NULL\ninnodb_buffer_pool_size = 128M\nclone_valid_donor_list = 127.0.0.1:{primary_port}\nclone_ssl_ca = {}\nclone_ssl_cert = {}\nclone_ssl_key = {}\n",
        dir.join("data").display(),
        sock.display(),
        dir.join("pid").display(),
        ca.display(),
        cert.display(),
        key.display()
    );
    std::fs::write(dir.join("my.cnf"), cnf)?;
    let mut server = programs
        .command(&programs.mysqld)
        .arg(format!("--defaults-file={}", dir.join("my.cnf").display()))
        .arg("--user=root")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let password = b.secret("replication-password");
    let rt = tokio::runtime::Runtime::new()?;
    let secs = rt.block_on(async {
        let opts = mysql_async::OptsBuilder::default()
            .socket(Some(sock.display().to_string()))
            .user(Some("root"))
            .prefer_socket(true);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut c = loop {
            match mysql_async::Conn::new(opts.clone()).await {
                Ok(c) => break c,
                Err(e) if Instant::now() > deadline => anyhow::bail!("plain recipient: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        run(&mut Command::new("sync"))?;
        let t = Instant::now();
        c.query_drop(format!(
            "CLONE INSTANCE FROM 'cnmysql_replication'@'127.0.0.1':{primary_port} IDENTIFIED BY '{}' DATA DIRECTORY = '{}' REQUIRE SSL",
            password.replace('\'', "''"),
            dir.join("copy").display()
        ))
        .await?;
        let secs = t.elapsed().as_secs_f64();
        let _ = c.query_drop("SHUTDOWN").await;
        anyhow::Ok(secs)
    });
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    secs
}

const DURABLE: &str = "    semiSync:\n      enabled: true\n      timeoutMillis: 1000\n      dataDurability: required\n  minSyncReplicas: 1\n  maxSyncReplicas: 1\n  failoverDelay: 0\n";

impl Bench {
    fn up_durable(&self, name: &str) -> anyhow::Result<()> {
        self.up_with(&format!("{}{DURABLE}", manifest(name, 3)))?;
        Ok(())
    }
    fn current_primary(&self) -> String {
        self.status()["currentPrimary"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
    fn status(&self) -> Value {
        serde_json::from_str(
            &std::fs::read_to_string(self.state().join("status.json")).unwrap_or_default(),
        )
        .unwrap_or(Value::Null)
    }
    fn wait(
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
    async fn lost_on(&self, instance: &str, acked: &[u64]) -> anyhow::Result<usize> {
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
        let mut c = mysql_async::Conn::new(opts).await?;
        let ids: Vec<u64> = c.query("SELECT id FROM chk.w").await?;
        let have: std::collections::BTreeSet<u64> = ids.into_iter().collect();
        Ok(acked.iter().filter(|a| !have.contains(a)).count())
    }
}

fn failover(runs: usize) -> anyhow::Result<Value> {
    let rt = tokio::runtime::Runtime::new()?;
    let (mut times, mut lost_all) = (Vec::new(), Vec::new());
    let (mut all_ready, mut recloned) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let b = Bench::new();
        b.up_durable("fo")?;
        let port = b.ports()["services"]["rw"].as_u64().unwrap() as u16;
        let (secs, lost) = rt
            .block_on(async {
                let w = cnmysql_bench::writer::WriteChecker::start(port, b.secret("app-password"))
                    .await;
                w.wait_for_more(200, Duration::from_secs(20)).await;
                let old = b.current_primary();
                let dir = b.state().join("instances").join(&old);
                let pids: Vec<i32> = ["manager.pid", "run/mysqld.pid"]
                    .iter()
                    .filter_map(|f| {
                        std::fs::read_to_string(dir.join(f))
                            .ok()?
                            .trim()
                            .parse()
                            .ok()
                    })
                    .collect();
                for p in &pids {
                    unsafe_kill(*p);
                }
                // Measure from the moment both processes are gone to the first
                // acknowledged write sent after it, so no answer of the old
                // primary counts as a write after the failover.
                while !pids.iter().all(|p| cnmysql_bench::faults::process_gone(*p)) {
                    std::thread::sleep(Duration::from_micros(200));
                }
                let killed = Instant::now();
                b.wait("a new primary", Duration::from_secs(60), |s| {
                    s["currentPrimary"].as_str().is_some_and(|p| p != old)
                })?;
                // Back to N: the old primary restarted, rejoined or (diverged,
                // on MySQL) saved what only it held and re-cloned itself.
                b.wait("all three ready again", Duration::from_secs(120), |s| {
                    s["readyInstances"] == 3
                        && s["divergedInstances"].is_null()
                        && s["reinitializing"].is_null()
                })?;
                let ready = killed.elapsed().as_secs_f64();
                let saved = b.status()["savedTransactions"]
                    .as_array()
                    .map_or(0, Vec::len);
                w.wait_for_more(100, Duration::from_secs(30)).await;
                let o = w.stop().await;
                let first = o
                    .first_ack_after(killed)
                    .ok_or_else(|| anyhow::anyhow!("no write after the kill"))?;
                let new = b.current_primary();
                let lost = b.lost_on(&new, &o.acked).await?;
                anyhow::Ok(((first - killed).as_secs_f64(), lost, ready, saved))
            })
            .map(|(secs, lost, ready, saved)| {
                all_ready.push(ready);
                recloned.push(saved as f64);
                (secs, lost)
            })?;
        eprintln!(
            "failover run {}: first write {secs:.3}s after kill -9, all ready after {:.3}s ({}), {lost} acknowledged rows lost",
            i + 1,
            all_ready.last().unwrap(),
            if *recloned.last().unwrap() > 0.0 {
                "diverged: saved and re-cloned"
            } else {
                "rejoined"
            }
        );
        times.push(secs);
        lost_all.push(lost as f64);
    }
    Ok(json!({
        "kill9_to_first_write_seconds": stats(times),
        "kill9_to_all_ready_seconds": stats(all_ready),
        "old_primary_recloned": stats(recloned),
        "acknowledged_rows_lost": stats(lost_all),
    }))
}

fn unsafe_kill(pid: i32) {
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
}

fn switchover(runs: usize) -> anyhow::Result<Value> {
    let rt = tokio::runtime::Runtime::new()?;
    let b = Bench::new();
    b.up_durable("so")?;
    let port = b.ports()["services"]["rw"].as_u64().unwrap() as u16;
    let (mut gaps, mut lost_all) = (Vec::new(), Vec::new());
    for i in 0..runs {
        b.wait("all instances ready", Duration::from_secs(60), |s| {
            s["readyInstances"] == 3
        })?;
        let old = b.current_primary();
        let target = if old == "so-2" { "so-3" } else { "so-2" };
        let (gap, lost) = rt.block_on(async {
            let w =
                cnmysql_bench::writer::WriteChecker::start(port, b.secret("app-password")).await;
            w.wait_for_more(200, Duration::from_secs(20)).await;
            let out = Command::new(cnmysql_bin())
                .args(["local", "promote", "so", target, "--state-dir"])
                .arg(b.state())
                .output()?;
            anyhow::ensure!(
                out.status.success(),
                "promote failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            w.wait_for_more(200, Duration::from_secs(20)).await;
            let o = w.stop().await;
            say_where_the_longest_gap_ended(&o)?;
            let lost = b.lost_on(target, &o.acked).await?;
            anyhow::Ok((o.longest_gap.as_secs_f64(), lost))
        })?;
        eprintln!(
            "switchover run {} ({old} -> {target}): longest write gap {gap:.3}s, {lost} acknowledged rows lost",
            i + 1
        );
        gaps.push(gap);
        lost_all.push(lost as f64);
    }
    Ok(json!({"longest_write_gap_seconds": stats(gaps), "acknowledged_rows_lost": stats(lost_all)}))
}

fn rss_kib(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn memory(runs: usize) -> anyhow::Result<Value> {
    let b = Bench::new();
    b.up("mem", 3)?;
    let mut samples = Vec::new();
    for i in 0..runs.max(1) {
        std::thread::sleep(Duration::from_secs(2));
        for n in 1..=3 {
            let pid: u32 =
                std::fs::read_to_string(b.state().join(format!("instances/mem-{n}/manager.pid")))?
                    .trim()
                    .parse()?;
            if let Some(k) = rss_kib(pid) {
                samples.push(k / 1024.0);
            }
        }
        eprintln!(
            "memory sample {}: {:?} MiB",
            i + 1,
            &samples[samples.len().saturating_sub(3)..]
        );
    }
    Ok(json!({"idle_manager_rss_mib": stats(samples)}))
}

/// One table, a flavour column first: `results` maps flavour to measurements.
fn print_table(results: &Value) {
    println!(
        "{:<8} {:<56} {:>10} {:>10} {:>10}",
        "flavour", "measurement", "median", "min", "max"
    );
    fn walk(flavor: &str, prefix: &str, v: &Value) {
        if let Some(m) = v.get("median") {
            let f = |x: &Value| x.as_f64().map(|f| format!("{f:.2}")).unwrap_or("-".into());
            println!(
                "{:<8} {:<56} {:>10} {:>10} {:>10}",
                flavor,
                prefix,
                f(m),
                f(&v["min"]),
                f(&v["max"])
            );
            return;
        }
        if let Some(o) = v.as_object() {
            for (k, x) in o {
                walk(
                    flavor,
                    &if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    },
                    x,
                );
            }
        } else if let Some(f) = v.as_f64() {
            println!("{:<8} {:<56} {:>10.2}", flavor, prefix, f);
        }
    }
    for (flavor, v) in results.as_object().into_iter().flatten() {
        walk(flavor, "", v);
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    anyhow::ensure!(
        cnmysql_bin().exists(),
        "{} not found: build it first (cargo build --release -p cnmysql)",
        cnmysql_bin().display()
    );
    let mut by_flavor = serde_json::Map::new();
    let all = matches!(cli.what, What::All);
    let local = matches!(
        cli.what,
        What::All
            | What::Startup
            | What::Clone { .. }
            | What::Memory
            | What::Failover
            | What::Switchover
            | What::Upgrade
            | What::ServerUpgrade
            | What::Backup { .. }
    );
    for f in if local {
        cli.flavor.clone()
    } else {
        vec![BenchFlavor::Mariadb]
    } {
        *FLAVOR.lock().unwrap() = f;
        let mut results = serde_json::Map::new();
        measure(&cli, all, &mut results)?;
        by_flavor.insert(f.name().into(), Value::Object(results));
    }
    let results = Value::Object(by_flavor);
    print_table(&results);
    let text = serde_json::to_string_pretty(&results)?;
    println!("{text}");
    if let Some(p) = cli.json {
        std::fs::write(p, text)?;
    }
    Ok(())
}

/// The measurements `cli` asks for, on the current flavour.
fn measure(
    cli: &Cli,
    all: bool,
    results: &mut serde_json::Map<String, Value>,
) -> anyhow::Result<()> {
    if all || matches!(cli.what, What::Startup) {
        results.insert("startup".into(), startup(cli.runs)?);
    }
    if let What::Clone { megabytes } = cli.what {
        results.insert("clone".into(), clone(cli.runs, megabytes)?);
    } else if all {
        results.insert("clone".into(), clone(cli.runs, 500)?);
    }
    if all || matches!(cli.what, What::Memory) {
        results.insert("memory".into(), memory(cli.runs)?);
    }
    if all || matches!(cli.what, What::Failover) {
        results.insert("failover".into(), failover(cli.runs)?);
    }
    if all || matches!(cli.what, What::Switchover) {
        results.insert("switchover".into(), switchover(cli.runs)?);
    }
    if all || matches!(cli.what, What::Upgrade) {
        results.insert("upgrade".into(), upgrade::upgrade(cli.runs)?);
    }
    if let What::Backup { megabytes } = cli.what {
        results.insert("backup".into(), backup::backup(cli.runs, megabytes)?);
    } else if all {
        results.insert("backup".into(), backup::backup(cli.runs, 500)?);
    }
    if all || matches!(cli.what, What::ServerUpgrade) {
        results.insert(
            "server_upgrade".into(),
            server_upgrade::server_upgrade(cli.runs)?,
        );
    }
    if let What::Kube {
        slow_runs,
        no_local,
    } = cli.what
    {
        results.insert(
            "kubernetes".into(),
            kube::kube(cli.runs, slow_runs, &cnmysql_bin())?,
        );
        if !no_local {
            results.insert("local_failover".into(), failover(cli.runs)?);
            results.insert("local_switchover".into(), switchover(cli.runs)?);
        }
    }
    if matches!(cli.what, What::Operator) {
        results.insert(
            "operator".into(),
            operator::operator(cli.runs, &cnmysql_bin())?,
        );
    }
    Ok(())
}
