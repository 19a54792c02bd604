//! `cnmysql-bench`: measures what the issues set goals for, on real mariadbd
//! processes, and prints a table and JSON. Build the binaries in release mode
//! first: `cargo build --release -p cnmysql -p cnmysql-bench`, then run
//! `target/release/cnmysql-bench all`.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

mod api_requests;
mod backup;
mod clone;
mod harness;
mod kube;
mod lag;
mod observe;
mod operator;
mod server_upgrade;
mod sysbench;
mod timeline;
mod upgrade;

use clap::{Parser, Subcommand};

pub(crate) use clone::*;
pub(crate) use harness::*;
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
    /// Connections writing flat out through rw during every failover and
    /// switchover measured (local and Kubernetes), beside the write
    /// checker: the load the fault meets.
    #[arg(long, default_value = "0", global = true)]
    load: usize,
}

#[derive(Subcommand, Clone)]
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
    /// What the manager's poll of its server costs: the whole poll and the
    /// server figures for /metrics alone, in milliseconds.
    Observe,
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
        /// Runs of the slow cases (node cut off or frozen: each keeps the
        /// node lost for a while, then waits for the instance to rejoin).
        #[arg(long, default_value = "3")]
        slow_runs: usize,
        /// Skip the local platform's failover and switchover.
        #[arg(long)]
        no_local: bool,
        /// Only these cases (lag, switchover, delete, kill, cut, freeze).
        #[arg(long, value_delimiter = ',')]
        cases: Vec<String>,
        /// The loads of the lag case, as `lag --writers` takes them
        /// (default: `--load` writers).
        #[arg(long, value_delimiter = ',')]
        lag_loads: Vec<lag::Workload>,
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
    /// Replica apply lag under sustained writers (1 and 16 connections
    /// through rw): lag percentiles, the primary's commit rate beside each
    /// replica's apply rate, and the catch-up time once writes stop.
    Lag {
        /// Seconds of writes per run.
        #[arg(long, default_value = "30")]
        seconds: u64,
        /// Loads measured, one measurement each: a number of writer
        /// connections, or `sysbench:THREADS` (Debian's sysbench,
        /// `oltp_write_only`).
        #[arg(long, value_delimiter = ',', default_value = "1,16")]
        writers: Vec<lag::Workload>,
    },
    /// All of the above but the operator and Kubernetes.
    All,
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

fn failover(runs: usize, load: usize) -> anyhow::Result<Value> {
    let rt = tokio::runtime::Runtime::new()?;
    let (mut times, mut lost_all) = (Vec::new(), Vec::new());
    let (mut all_ready, mut recloned) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let b = Bench::new();
        b.up_durable("fo")?;
        let port = b.ports()["services"]["rw"].as_u64().unwrap() as u16;
        let (secs, lost) = rt
            .block_on(async {
                let w =
                    cnmysql_workload::writer::WriteChecker::start(port, b.secret("app-password"))
                        .await;
                let opts = cnmysql_workload::writer::app_opts(port, b.secret("app-password"));
                let load = cnmysql_workload::load::Load::start(opts, load).await?;
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
                while !pids
                    .iter()
                    .all(|p| cnmysql_workload::faults::process_gone(*p))
                {
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
                load.stop().await;
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
        "load_writers": load,
        "kill9_to_first_write_seconds": stats(times),
        "kill9_to_all_ready_seconds": stats(all_ready),
        "old_primary_recloned": stats(recloned),
        "acknowledged_rows_lost": stats(lost_all),
    }))
}

fn unsafe_kill(pid: i32) {
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
}

fn switchover(runs: usize, load: usize) -> anyhow::Result<Value> {
    let rt = tokio::runtime::Runtime::new()?;
    let b = Bench::new();
    b.up_durable("so")?;
    let port = b.ports()["services"]["rw"].as_u64().unwrap() as u16;
    let (mut gaps, mut lost_all, mut given_up) = (Vec::new(), Vec::new(), 0usize);
    for i in 0..runs {
        b.wait("all instances ready", Duration::from_secs(600), |s| {
            s["readyInstances"] == 3
        })?;
        let old = b.current_primary();
        let target = if old == "so-2" { "so-3" } else { "so-2" };
        let (gap, lost, refused) = rt.block_on(async {
            let w =
                cnmysql_workload::writer::WriteChecker::start(port, b.secret("app-password")).await;
            let opts = cnmysql_workload::writer::app_opts(port, b.secret("app-password"));
            let load = cnmysql_workload::load::Load::start(opts, load).await?;
            w.wait_for_more(200, Duration::from_secs(20)).await;
            let out = Command::new(cnmysql_bin())
                .args(["local", "promote", "so", target, "--state-dir"])
                .arg(b.state())
                .output()?;
            // A target that cannot keep up is given up on (with the
            // primary still serving): a measured outcome, not a failure.
            let stderr = String::from_utf8_lossy(&out.stderr).to_string();
            let refused = (!out.status.success())
                .then(|| stderr.lines().last().unwrap_or_default().to_string());
            anyhow::ensure!(
                out.status.success() || stderr.contains("given up") || stderr.contains("refused"),
                "promote failed: {stderr}"
            );
            w.wait_for_more(200, Duration::from_secs(20)).await;
            load.stop().await;
            let o = w.stop().await;
            say_where_the_longest_gap_ended(&o)?;
            let holder = if refused.is_some() {
                old.as_str()
            } else {
                target
            };
            let lost = b.lost_on(holder, &o.acked).await?;
            anyhow::Ok((o.longest_gap.as_secs_f64(), lost, refused))
        })?;
        match refused {
            Some(why) => {
                eprintln!(
                    "switchover run {} ({old} -> {target}) given up, writes kept flowing (longest gap {gap:.3}s, {lost} rows lost): {why}",
                    i + 1
                );
                given_up += 1;
            }
            None => {
                eprintln!(
                    "switchover run {} ({old} -> {target}): longest write gap {gap:.3}s, {lost} acknowledged rows lost",
                    i + 1
                );
                gaps.push(gap);
            }
        }
        lost_all.push(lost as f64);
    }
    Ok(
        json!({"load_writers": load, "longest_write_gap_seconds": stats(gaps), "acknowledged_rows_lost": stats(lost_all), "given_up": given_up}),
    )
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
            | What::Observe
            | What::Failover
            | What::Switchover
            | What::Upgrade
            | What::ServerUpgrade
            | What::Backup { .. }
            | What::Lag { .. }
    );
    for f in if local {
        cli.flavor.clone()
    } else if std::env::var("CNMYSQL_TEST_FLAVOR").as_deref() == Ok("mysql") {
        // The Kubernetes measurements take the flavour the test clusters
        // do: labelled so.
        vec![BenchFlavor::Mysql]
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
    if all || matches!(cli.what, What::Observe) {
        results.insert("observe".into(), observe::observe(cli.runs)?);
    }
    if all || matches!(cli.what, What::Failover) {
        results.insert("failover".into(), failover(cli.runs, cli.load)?);
    }
    if all || matches!(cli.what, What::Switchover) {
        results.insert("switchover".into(), switchover(cli.runs, cli.load)?);
    }
    if let What::Lag { seconds, writers } = &cli.what {
        results.insert("lag".into(), lag::lag(cli.runs, *seconds, writers)?);
    } else if all {
        results.insert(
            "lag".into(),
            lag::lag(
                cli.runs,
                30,
                &[lag::Workload::Writers(1), lag::Workload::Writers(16)],
            )?,
        );
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
        cases,
        lag_loads,
    } = &cli.what
    {
        results.insert(
            "kubernetes".into(),
            kube::kube(
                cli.runs,
                *slow_runs,
                cases,
                lag_loads,
                &cnmysql_bin(),
                cli.load,
            )?,
        );
        if !*no_local {
            results.insert("local_failover".into(), failover(cli.runs, cli.load)?);
            results.insert("local_switchover".into(), switchover(cli.runs, cli.load)?);
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
