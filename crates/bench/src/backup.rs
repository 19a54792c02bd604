//! Backups and recovery (issue 23): base backup throughput against a plain
//! `mariadb-backup --stream | zstd` pipe into the same store; recovery time
//! of the base backup alone and with binary logs replayed; archive lag under
//! a steady write load (how far the archive's known-complete point trails
//! the clock, sampled).

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{Bench, BenchFlavor, cnmysql_bin, dir_size, flavor, load, manifest, run, stats};

fn with_store(name: &str, instances: u32, store: &std::path::Path) -> String {
    format!(
        "{}  backup:\n    objectStore:\n      destinationPath: file://{}\n",
        manifest(name, instances),
        store.display()
    )
}

fn local(b: &Bench, args: &[&str]) -> anyhow::Result<String> {
    run(Command::new(cnmysql_bin())
        .arg("local")
        .args(args)
        .arg("--state-dir")
        .arg(b.state()))
}

fn status(b: &Bench) -> anyhow::Result<Value> {
    Ok(serde_json::from_str(&local(b, &["status", "-o", "json"])?)?)
}

/// Seconds the archive trails the clock, from one status sample.
fn lag(st: &Value) -> Option<f64> {
    let primary = st["status"]["currentPrimary"].as_str()?;
    let inst = st["instances"]
        .as_array()?
        .iter()
        .find(|i| i["name"] == primary)?;
    let until: jiff::Timestamp = inst["archive"]["completeUntil"].as_str()?.parse().ok()?;
    Some((jiff::Timestamp::now().as_microsecond() - until.as_microsecond()) as f64 / 1e6)
}

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Time `local up` of a 1-instance Cluster recovering from `store`.
fn recover(store: &std::path::Path, target: &str) -> anyhow::Result<(f64, Value)> {
    let r = Bench::new();
    let m = format!(
        "{}  bootstrap:\n    recovery:\n      source:\n        objectStore:\n          destinationPath: file://{}\n          serverName: src\n{target}",
        manifest("rec", 1),
        store.display()
    );
    let took = r.up_with(&m)?.as_secs_f64();
    let st = status(&r)?;
    let rec = st["instances"][0]["recovered"].clone();
    Ok((took, rec))
}

pub fn backup(runs: usize, megabytes: u64) -> anyhow::Result<Value> {
    let b = Bench::new();
    let store = b.dir.path().join("store");
    b.up_with(&with_store("src", 1, &store))?;
    load(&b, megabytes)?;
    let data = b.state().join("instances/src-1");
    let data_bytes = dir_size(&data.join("data"));

    // Base backups: ours (the manager's stream over mTLS, zstd, multipart
    // into the store) and the plain pipe, alternating, each after a sync.
    let mut ours = Vec::new();
    let mut plain = Vec::new();
    let mut stored = 0u64;
    for i in 0..runs {
        run(&mut Command::new("sync"))?;
        let t = Instant::now();
        let out = local(&b, &["backup"])?;
        let secs = t.elapsed().as_secs_f64();
        ours.push(data_bytes as f64 / 1e6 / secs);
        eprintln!("backup run {}: {secs:.2}s: {}", i + 1, out.trim());
        if flavor() == BenchFlavor::Mariadb {
            let tmp = b.dir.path().join(format!("plain-tmp-{i}"));
            std::fs::create_dir_all(&tmp)?;
            let out = store.join(format!("plain-{i}.mbstream.zst"));
            run(&mut Command::new("sync"))?;
            let t = Instant::now();
            let sh = format!(
                "mariadb-backup --defaults-file={} --backup --stream=mbstream --parallel=2 --target-dir={} 2>/dev/null | zstd -3 -q -o {}",
                data.join("run/backup.cnf").display(),
                tmp.display(),
                out.display()
            );
            run(Command::new("bash").args(["-o", "pipefail", "-c", &sh]))?;
            let secs = t.elapsed().as_secs_f64();
            plain.push(data_bytes as f64 / 1e6 / secs);
            stored = std::fs::metadata(&out)?.len();
            eprintln!("plain pipe run {}: {secs:.2}s ({stored} bytes)", i + 1);
            std::fs::remove_file(&out)?;
            std::fs::remove_dir_all(&tmp)?;
        }
    }

    // Archive lag under steady writes: the write checker through rw for
    // 30 s, the primary's report sampled every 250 ms.
    let rt = tokio::runtime::Runtime::new()?;
    let port = b.ports()["services"]["rw"].as_u64().unwrap() as u16;
    let w = rt.block_on(cnmysql_workload::writer::WriteChecker::start(
        port,
        b.secret("app-password"),
    ));
    let mut lags = Vec::new();
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(30) {
        if let Some(l) = status(&b).ok().as_ref().and_then(lag) {
            lags.push(l);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let o = rt.block_on(w.stop());
    let written = jiff::Timestamp::now();
    eprintln!(
        "archive lag under {} writes in 30 s: median {:.2}s, p99 {:.2}s",
        o.acked.len(),
        percentile(&lags, 0.5),
        percentile(&lags, 0.99)
    );
    // Until the archive holds the last write.
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let st = status(&b)?;
        let reach = st["instances"][0]["archive"]["completeUntil"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok());
        if reach.is_some_and(|t| t > written) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }

    // Recovery: the base backup alone, then with the writes replayed.
    let (base_only, _) = recover(
        &store,
        "      recoveryTarget:\n        targetImmediate: true\n",
    )?;
    eprintln!("recovery of the base backup alone: {base_only:.2}s");
    let (latest, rec) = recover(&store, "")?;
    eprintln!("recovery to the latest state: {latest:.2}s ({rec})");
    let ratio = |a: &Vec<f64>, b: &Vec<f64>| {
        if b.is_empty() {
            Value::Null
        } else {
            json!(percentile(a, 0.5) / percentile(b, 0.5))
        }
    };
    Ok(json!({
        "data_dir_bytes": data_bytes,
        "note": "MB/s = size of the primary data directory over the wall time of `cnmysql local backup` (stream, zstd, multipart store, manifest) or of the plain `mariadb-backup --stream | zstd -3` pipe into the same directory; archive lag = now - the primary's completeUntil, sampled every 250 ms under the write checker",
        "backup_mb_per_s": stats(ours.clone()),
        "plain_pipe_mb_per_s": stats(plain.clone()),
        "ratio_of_medians": ratio(&ours, &plain),
        "plain_pipe_stored_bytes": stored,
        "archive_lag_seconds": {
            "median": percentile(&lags, 0.5),
            "p99": percentile(&lags, 0.99),
            "max": percentile(&lags, 1.0),
            "samples": lags.len(),
            "writes": o.acked.len(),
        },
        "recovery_base_only_seconds": base_only,
        "recovery_latest_seconds": latest,
        "recovery_replayed_transactions": rec["replayed"],
        // The replay's share of the wall time: the latest state's
        // recovery less the base's (the private server's second start
        // included); and the applier's own time, from the status.
        "replay_transactions_per_second": rec["replayed"]
            .as_f64()
            .map(|n| n / (latest - base_only).max(0.001)),
        "replay_applier_millis": rec["replayMillis"],
        "applier_transactions_per_second": rec["replayed"]
            .as_f64()
            .zip(rec["replayMillis"].as_f64())
            .map(|(n, ms)| n * 1000.0 / ms.max(1.0)),
    }))
}
