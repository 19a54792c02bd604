//! `cnmysql-bench upgrade`: instance-manager upgrades on the local platform,
//! real mariadbd, `dataDurability: required`, writes through rw throughout.
//!
//! - In place (`inPlaceInstanceManagerUpdates: true`), once per run: a new
//!   executable (this build with different trailing bytes, so a different
//!   hash) is rolled out with `<new> local upgrade`. Per swapped instance:
//!   the longest gap between successful queries sent straight to its mysqld
//!   and the failed ones, and the time from the upgrade request reaching the
//!   manager to the new image reporting Running (both from its log).
//! - Rolling (the default): the same with recreated managers and a
//!   switchover of the primary: total time of `local upgrade` and the
//!   longest gap between acknowledged writes through rw.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mysql_async::prelude::*;
use serde_json::{Value, json};

use crate::{Bench, DURABLE, manifest, run, stats};

/// A copy of the freshly built `cnmysql` whose hash differs (bytes appended
/// after the ELF image change nothing it runs).
fn variant(dir: &Path, n: usize) -> anyhow::Result<PathBuf> {
    use std::io::Write;
    let path = dir.join(format!("cnmysql-next-{n}"));
    std::fs::copy(crate::cnmysql_bin(), &path)?;
    let mut f = std::fs::OpenOptions::new().append(true).open(&path)?;
    writeln!(
        f,
        "\ncnmysql-bench upgrade variant {n} {:?}",
        Instant::now()
    )?;
    Ok(path)
}

/// Queries sent straight to one instance's mysqld over TCP, one after
/// another: how long the longest stretch without an answer was, and how
/// many failed.
struct Prober {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(Duration, u64, u64)>,
}

impl Prober {
    fn start(port: u16, password: String) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let task = tokio::spawn(async move {
            let opts = cnmysql_workload::writer::app_opts(port, password);
            let (mut last, mut longest, mut failed, mut ok) =
                (Instant::now(), Duration::ZERO, 0u64, 0u64);
            let mut conn: Option<mysql_async::Conn> = None;
            while !s.load(Ordering::Relaxed) {
                if conn.is_none() {
                    conn = mysql_async::Conn::new(opts.clone()).await.ok();
                }
                let answered = match conn.as_mut() {
                    Some(c) => c.query_drop("SELECT 1").await.is_ok(),
                    None => false,
                };
                if answered {
                    ok += 1;
                    longest = longest.max(last.elapsed());
                    last = Instant::now();
                } else {
                    failed += 1;
                    conn = None;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            (longest.max(last.elapsed()), failed, ok)
        });
        Prober { stop, task }
    }

    async fn stop(self) -> (Duration, u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or((Duration::MAX, u64::MAX, 0))
    }
}

fn log_time(v: &Value) -> Option<jiff::Timestamp> {
    v["timestamp"].as_str()?.parse().ok()
}

/// From the manager's log: seconds from the last upgrade request to the
/// first `Running` phase of the image that followed it.
fn swap_seconds(manager_log: &Path) -> anyhow::Result<f64> {
    let lines: Vec<Value> = std::fs::read_to_string(manager_log)?
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let asked = lines
        .iter()
        .rposition(|v| v["message"] == "instance manager upgrade requested")
        .ok_or_else(|| anyhow::anyhow!("no upgrade request in {}", manager_log.display()))?;
    let ready = lines[asked..]
        .iter()
        .find(|v| v["message"] == "instance phase" && v["phase"] == "Running")
        .ok_or_else(|| anyhow::anyhow!("the new image never ran in {}", manager_log.display()))?;
    let (a, b) = (
        log_time(&lines[asked]).ok_or_else(|| anyhow::anyhow!("no timestamp"))?,
        log_time(ready).ok_or_else(|| anyhow::anyhow!("no timestamp"))?,
    );
    Ok((b - a).get_milliseconds() as f64 / 1000.0)
}

fn pids(b: &Bench, instance: &str) -> (String, String) {
    let dir = b.state().join("instances").join(instance);
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    (read("manager.pid"), read("run/mysqld.pid"))
}

/// `<exe> local upgrade --no-wait` (returns once the control plane runs
/// `exe`), then wait for the rollout to finish. Returns the total time and
/// when the control plane's re-exec began and had ended (the local
/// endpoints it serves are handed across it; the rollout comes after).
fn upgrade_to(b: &Bench, exe: &Path) -> anyhow::Result<(f64, (Instant, Instant))> {
    let t = Instant::now();
    run(Command::new(exe)
        .args(["local", "upgrade", "--no-wait", "--state-dir"])
        .arg(b.state()))?;
    let switched = Instant::now();
    b.wait("the rollout", Duration::from_secs(600), |s| {
        let target = &s["operatorExecutableHash"];
        let hashes = s["executableHashByInstance"].as_object();
        s["phase"] == "Cluster in healthy state"
            && s["readyInstances"] == 3
            && hashes.is_some_and(|h| h.len() == 3 && h.values().all(|v| v == target))
    })?;
    Ok((t.elapsed().as_secs_f64(), (t, switched)))
}

/// The longest stretch without an acknowledged write that overlaps
/// `[from, to]` (the control plane's exec).
fn longest_gap_within(acks: &[Instant], (from, to): (Instant, Instant)) -> f64 {
    let mut longest = Duration::ZERO;
    for w in acks.windows(2) {
        if w[1] > from && w[0] < to {
            longest = longest.max(w[1] - w[0]);
        }
    }
    longest.as_secs_f64()
}

pub fn upgrade(runs: usize) -> anyhow::Result<Value> {
    let rt = tokio::runtime::Runtime::new()?;
    let instances = ["up-1", "up-2", "up-3"];

    // In place.
    let b = Bench::new();
    b.up_with(&format!(
        "{}{DURABLE}  inPlaceInstanceManagerUpdates: true\n",
        manifest("up", 3)
    ))?;
    let ports = b.ports();
    let rw = ports["services"]["rw"].as_u64().unwrap() as u16;
    let (mut swap, mut gap, mut failed, mut rollout) = (Vec::new(), Vec::new(), 0u64, Vec::new());
    let (mut write_errors, mut lost_rows) = (0u64, 0usize);
    let mut queries = 0u64;
    let mut kept = true;
    let (mut in_place_rw_gap, mut exec_gap) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let exe = variant(b.dir.path(), i)?;
        let before: BTreeMap<&str, (String, String)> =
            instances.iter().map(|n| (*n, pids(&b, n))).collect();
        let (secs, per, w, switched) = rt.block_on(async {
            let w =
                cnmysql_workload::writer::WriteChecker::start(rw, b.secret("app-password")).await;
            let probes: Vec<(&str, Prober)> = instances
                .iter()
                .map(|n| {
                    let port = ports["instances"][n]["mysql"].as_u64().unwrap() as u16;
                    (*n, Prober::start(port, b.secret("app-password")))
                })
                .collect();
            w.wait_for_more(100, Duration::from_secs(20)).await;
            let (secs, switched) = tokio::task::block_in_place(|| upgrade_to(&b, &exe))?;
            w.wait_for_more(100, Duration::from_secs(20)).await;
            let mut per = Vec::new();
            for (n, p) in probes {
                per.push((n, p.stop().await));
            }
            anyhow::Ok((secs, per, w.stop().await, switched))
        })?;
        in_place_rw_gap.push(w.longest_gap.as_secs_f64());
        exec_gap.push(longest_gap_within(&w.ack_times, switched));
        rollout.push(secs);
        write_errors += w.errors;
        let primary = b.current_primary();
        lost_rows += rt.block_on(b.lost_on(&primary, &w.acked))?;
        for (n, (longest, f, ok)) in per {
            let s = swap_seconds(&b.state().join("instances").join(n).join("manager.log"))?;
            eprintln!(
                "in-place run {} {n}: swap {s:.3}s, longest query gap {:.3}s, {f} of {} queries failed",
                i + 1,
                longest.as_secs_f64(),
                f + ok
            );
            swap.push(s);
            gap.push(longest.as_secs_f64());
            failed += f;
            queries += f + ok;
            // mysqld kept, a new manager image (same PID after exec).
            let now = pids(&b, n);
            kept &= now.1 == before[n].1 && now.0 == before[n].0;
        }
        eprintln!(
            "in-place run {}: rollout of 3 instances {secs:.2}s, {} writes through rw acknowledged, {} failed, longest gap {:.3}s",
            i + 1,
            w.acked.len(),
            w.errors,
            w.longest_gap.as_secs_f64()
        );
    }
    drop(b);

    // Rolling, with a switchover of the primary.
    let b = Bench::new();
    b.up_durable("up")?;
    let rw = b.ports()["services"]["rw"].as_u64().unwrap() as u16;
    let (mut total, mut rw_gap, mut rolling_lost) = (Vec::new(), Vec::new(), Vec::new());
    let mut rolling_errors = 0u64;
    for i in 0..runs {
        b.wait("all instances ready", Duration::from_secs(120), |s| {
            s["readyInstances"] == 3
        })?;
        let exe = variant(b.dir.path(), 100 + i)?;
        let (secs, o, switched) = rt.block_on(async {
            let w =
                cnmysql_workload::writer::WriteChecker::start(rw, b.secret("app-password")).await;
            w.wait_for_more(100, Duration::from_secs(20)).await;
            let (secs, switched) = tokio::task::block_in_place(|| upgrade_to(&b, &exe))?;
            w.wait_for_more(100, Duration::from_secs(20)).await;
            anyhow::Ok((secs, w.stop().await, switched))
        })?;
        exec_gap.push(longest_gap_within(&o.ack_times, switched));
        rolling_errors += o.errors;
        let primary = b.current_primary();
        let lost = rt.block_on(b.lost_on(&primary, &o.acked))?;
        eprintln!(
            "rolling run {}: 3 instances in {secs:.2}s, longest rw write gap {:.3}s, {} writes failed, {lost} acknowledged rows lost",
            i + 1,
            o.longest_gap.as_secs_f64(),
            o.errors
        );
        total.push(secs);
        rw_gap.push(o.longest_gap.as_secs_f64());
        rolling_lost.push(lost as f64);
    }
    drop(b);
    // The yardstick: a planned switchover on its own.
    let switchover = crate::switchover(runs, 0)?;
    Ok(json!({
        "switchover_for_comparison": switchover,
        "in_place": {
            "swap_request_to_running_seconds": stats(swap),
            "longest_query_gap_on_swapped_instance_seconds": stats(gap),
            "rollout_3_instances_seconds": stats(rollout),
            "queries_sent_to_swapped_instances": queries,
            "failed_queries": failed,
            "failed_writes_through_rw": write_errors,
            "longest_rw_write_gap_seconds": stats(in_place_rw_gap),
            "acknowledged_rows_lost": lost_rows,
            "every_mysqld_and_manager_pid_kept": kept,
        },
        "rolling": {
            "rollout_3_instances_seconds": stats(total),
            "longest_rw_write_gap_seconds": stats(rw_gap),
            "failed_writes_through_rw": rolling_errors,
            "acknowledged_rows_lost": stats(rolling_lost),
        },
        "control_plane_reexec": {
            "longest_rw_write_gap_across_it_seconds": stats(exec_gap),
        },
    }))
}
