//! Replica apply lag under sustained writers (issue 46): a 3-instance
//! cluster with `dataDurability: required`, writers through `rw` for a
//! fixed time, and every 200 ms each replica asked how old the newest row
//! it has applied is. Beside the lag: the primary's commit rate and each
//! replica's apply rate over the same window, and how long each replica
//! took to hold every row once the writers stopped.

use std::time::{Duration, Instant};

use mysql_async::prelude::*;
use serde_json::{Value, json};

use crate::harness::{Bench, stats};

/// `writers`: each measurement's connections through `rw`, each inserting
/// one row per transaction as fast as it is acknowledged.
pub(crate) fn lag(runs: usize, seconds: u64, writers: &[usize]) -> anyhow::Result<Value> {
    let rt = tokio::runtime::Runtime::new()?;
    let mut out = serde_json::Map::new();
    for &writers in writers {
        let mut figures = Figures::default();
        for i in 0..runs {
            let b = Bench::new();
            b.up_durable("lag")?;
            let r = rt.block_on(one_run(&b, writers, Duration::from_secs(seconds)))?;
            figures.add(&format!("lag run {} ({writers} writers)", i + 1), &r);
        }
        out.insert(format!("writers_{writers}"), figures.json());
    }
    out.insert(
        "note".into(),
        json!(format!(
            "a 3-instance cluster, dataDurability required; N connections insert one row per transaction through rw for {seconds} s; every 200 ms each replica's lag = now - the commit time of the newest row it holds (0 when it holds every row); rates over the same window"
        )),
    );
    Ok(Value::Object(out))
}

/// The figures of several runs: each run's lag percentiles, the primary's
/// commit rate and every replica's apply rate side by side.
#[derive(Default)]
pub(crate) struct Figures {
    p50: Vec<f64>,
    p99: Vec<f64>,
    max: Vec<f64>,
    commits: Vec<f64>,
    applies: Vec<f64>,
    catch_up: Vec<f64>,
}

impl Figures {
    /// One run's figures, also printed on a line beginning with `what`.
    pub(crate) fn add(&mut self, what: &str, r: &Run) {
        eprintln!(
            "{what}: p50 {:.3}s p99 {:.3}s max {:.3}s; primary {:.0} commits/s, replicas {:?} rows/s; caught up {:.2}s after the writers stopped",
            r.percentile(0.5),
            r.percentile(0.99),
            r.percentile(1.0),
            r.commit_rate,
            r.apply_rates
                .iter()
                .map(|a| format!("{a:.0}"))
                .collect::<Vec<_>>(),
            r.catch_up
        );
        self.p50.push(r.percentile(0.5));
        self.p99.push(r.percentile(0.99));
        self.max.push(r.percentile(1.0));
        self.commits.push(r.commit_rate);
        self.applies.extend(r.apply_rates.iter().copied());
        self.catch_up.push(r.catch_up);
    }

    pub(crate) fn json(self) -> Value {
        json!({
            "apply_lag_p50_seconds": stats(self.p50),
            "apply_lag_p99_seconds": stats(self.p99),
            "apply_lag_max_seconds": stats(self.max),
            "primary_commits_per_second": stats(self.commits),
            "replica_applied_rows_per_second": stats(self.applies),
            "caught_up_after_writers_stopped_seconds": stats(self.catch_up),
        })
    }
}

pub(crate) struct Run {
    /// Lag samples of every replica, in seconds.
    samples: Vec<f64>,
    commit_rate: f64,
    apply_rates: Vec<f64>,
    catch_up: f64,
}

impl Run {
    fn percentile(&self, p: f64) -> f64 {
        let mut v = self.samples.clone();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        if v.is_empty() {
            return f64::NAN;
        }
        v[((v.len() - 1) as f64 * p).round() as usize]
    }
}

async fn one_run(b: &Bench, writers: usize, window: Duration) -> anyhow::Result<Run> {
    let port = b.ports()["services"]["rw"].as_u64().unwrap() as u16;
    let opts = cnmysql_workload::writer::app_opts(port, b.secret("app-password"));
    let primary = b.current_primary();
    let mut replicas = Vec::new();
    for r in (1..=3)
        .map(|n| format!("lag-{n}"))
        .filter(|n| *n != primary)
    {
        let mut a = b.admin(&r).await?;
        if let Some(sql) = replica_sql(&r) {
            a.query_drop(sql).await?;
        }
        replicas.push(a);
    }
    measure(opts, replicas, writers, window).await
}

/// `writers` connections to `rw` writing flat out for `window`, each
/// replica (a connection to it) asked every 200 ms how far
/// behind it is; then how long each takes to hold every row. The local
/// platform's measurement and the real node's (`kube.rs`).
pub(crate) async fn measure(
    rw: mysql_async::Opts,
    mut admins: Vec<mysql_async::Conn>,
    writers: usize,
    window: Duration,
) -> anyhow::Result<Run> {
    let load = cnmysql_workload::load::Load::start(rw.clone(), writers).await?;
    let mut c = mysql_async::Conn::new(rw).await?;
    // Warm up: the writers connected and the appliers under way.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let start = Instant::now();
    let first_commits = load.committed();
    let mut first_applied = Vec::new();
    for a in admins.iter_mut() {
        first_applied.push(rows(a).await?);
    }
    let mut samples = Vec::new();
    while start.elapsed() < window {
        for a in admins.iter_mut() {
            samples.push(lag_of(a).await?);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let secs = start.elapsed().as_secs_f64();
    let commit_rate = (load.committed() - first_commits) as f64 / secs;
    let mut apply_rates = Vec::new();
    for (a, first) in admins.iter_mut().zip(&first_applied) {
        apply_rates.push((rows(a).await? - first) as f64 / secs);
    }
    load.stop().await;
    let stopped = Instant::now();
    let total: u64 = c
        .query_first("SELECT COUNT(*) FROM app.load")
        .await?
        .unwrap_or(0);
    for a in admins.iter_mut() {
        let deadline = Instant::now() + Duration::from_secs(600);
        while rows(a).await? < total {
            anyhow::ensure!(Instant::now() < deadline, "a replica did not catch up");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(Run {
        samples,
        commit_rate,
        apply_rates,
        catch_up: stopped.elapsed().as_secs_f64(),
    })
}

/// For trying a setting by hand: `CNMYSQL_BENCH_REPLICA_SQL`, statements
/// each replica runs (as its administrator) before the writers start,
/// named in the output.
pub(crate) fn replica_sql(replica: &str) -> Option<String> {
    let sql = std::env::var("CNMYSQL_BENCH_REPLICA_SQL").ok()?;
    eprintln!("on {replica}: {sql}");
    Some(sql)
}

/// Rows a replica holds (ids are given in commit order closely enough:
/// the count is what is compared).
async fn rows(c: &mut mysql_async::Conn) -> anyhow::Result<u64> {
    Ok(c.query_first("SELECT COUNT(*) FROM app.load")
        .await?
        .unwrap_or(0))
}

/// How old the newest row this replica holds is, in seconds.
async fn lag_of(c: &mut mysql_async::Conn) -> anyhow::Result<f64> {
    let us: Option<Option<i64>> = c
        .query_first("SELECT TIMESTAMPDIFF(MICROSECOND, MAX(at), NOW(6)) FROM app.load")
        .await?;
    Ok(us.flatten().unwrap_or(0) as f64 / 1e6)
}
