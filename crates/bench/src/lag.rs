//! Replica apply lag under sustained writers (issue 46): a 3-instance
//! cluster with `dataDurability: required`, a load through `rw` for a
//! fixed time, and every 200 ms each replica asked how old the newest row
//! it has applied is. Beside the lag: the primary's commit rate and each
//! replica's apply rate over the same window (transactions, counted in
//! their GTID histories), and how long each replica took to hold every
//! transaction once the load stopped.

use std::time::{Duration, Instant};

use mysql_async::prelude::*;
use serde_json::{Value, json};

use crate::harness::{Bench, stats};

/// What writes through `rw` during a measurement.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Workload {
    /// Connections inserting one row per transaction as fast as each is
    /// acknowledged; the rows' commit times are the lag's clock.
    Writers(usize),
    /// `sysbench oltp_write_only` with this many threads, beside one such
    /// writer whose rows are the lag's clock (replicas apply in commit
    /// order, so its newest row applied dates everything before it).
    Sysbench(usize),
}

impl std::str::FromStr for Workload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("{s:?}: expected a number of writers (16) or sysbench:THREADS (sysbench:16)")
        };
        match s.strip_prefix("sysbench:") {
            Some(t) => t.parse().map(Workload::Sysbench).map_err(|_| bad()),
            None => s.parse().map(Workload::Writers).map_err(|_| bad()),
        }
    }
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Workload::Writers(n) => write!(f, "{n} writers"),
            Workload::Sysbench(n) => write!(f, "sysbench oltp_write_only, {n} threads"),
        }
    }
}

impl Workload {
    /// The key of its figures in the JSON.
    pub(crate) fn key(&self) -> String {
        match self {
            Workload::Writers(n) => format!("writers_{n}"),
            Workload::Sysbench(n) => format!("sysbench_oltp_write_only_{n}"),
        }
    }
}

pub(crate) fn lag(runs: usize, seconds: u64, loads: &[Workload]) -> anyhow::Result<Value> {
    let rt = tokio::runtime::Runtime::new()?;
    let mut out = serde_json::Map::new();
    for &load in loads {
        let mut figures = Figures::default();
        for i in 0..runs {
            let b = Bench::new();
            b.up_durable("lag")?;
            let r = rt.block_on(one_run(&b, load, Duration::from_secs(seconds)))?;
            figures.add(&format!("lag run {} ({load})", i + 1), &r);
        }
        out.insert(load.key(), figures.json());
    }
    out.insert(
        "note".into(),
        json!(format!(
            "a 3-instance cluster, dataDurability required; the load through rw for {seconds} s (N writers: connections inserting one row per transaction; sysbench: oltp_write_only beside one such writer); every 200 ms each replica's lag = now - the commit time of the newest such row it holds (0 when it holds every row); rates in transactions (GTID histories) over the same window"
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
            "{what}: p50 {:.3}s p99 {:.3}s max {:.3}s; primary {:.0} commits/s, replicas {:?} transactions/s; caught up {:.2}s after the load stopped",
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
            "replica_applied_transactions_per_second": stats(self.applies),
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

async fn one_run(b: &Bench, load: Workload, window: Duration) -> anyhow::Result<Run> {
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
    measure(opts, replicas, load, window).await
}

/// `load` through `rw` for `window`, each replica (a connection to it)
/// asked every 200 ms how far behind it is; then how long each takes to
/// hold every transaction. The local platform's measurement and the real
/// node's (`kube.rs`).
pub(crate) async fn measure(
    rw: mysql_async::Opts,
    mut replicas: Vec<mysql_async::Conn>,
    load: Workload,
    window: Duration,
) -> anyhow::Result<Run> {
    let clock_writers = match load {
        Workload::Writers(n) => n,
        Workload::Sysbench(_) => 1,
    };
    let writers = cnmysql_workload::load::Load::start(rw.clone(), clock_writers).await?;
    let warm_up = Duration::from_secs(2);
    let sysbench = match load {
        Workload::Sysbench(threads) => {
            let secs = (warm_up + window).as_secs() + 1;
            Some(tokio::task::block_in_place(|| {
                crate::sysbench::Sysbench::start(&rw, threads, secs)
            })?)
        }
        Workload::Writers(_) => None,
    };
    let mut primary = mysql_async::Conn::new(rw).await?;
    // Warm up: the writers connected and the appliers under way.
    tokio::time::sleep(warm_up).await;
    let start = Instant::now();
    let first_commits = transactions(&mut primary).await?;
    let mut first_applied = Vec::new();
    for r in replicas.iter_mut() {
        first_applied.push(transactions(r).await?);
    }
    let mut samples = Vec::new();
    while start.elapsed() < window {
        for r in replicas.iter_mut() {
            samples.push(lag_of(r).await?);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let secs = start.elapsed().as_secs_f64();
    let commit_rate = (transactions(&mut primary).await? - first_commits) as f64 / secs;
    let mut apply_rates = Vec::new();
    for (r, first) in replicas.iter_mut().zip(&first_applied) {
        apply_rates.push((transactions(r).await? - first) as f64 / secs);
    }
    writers.stop().await;
    if let Some(s) = sysbench {
        let tps = tokio::task::block_in_place(|| s.finish(Duration::from_secs(60)))?;
        eprintln!("sysbench oltp_write_only: {tps:.0} transactions/s over its whole run");
    }
    let stopped = Instant::now();
    let total = transactions(&mut primary).await?;
    for r in replicas.iter_mut() {
        let deadline = Instant::now() + Duration::from_secs(600);
        while transactions(r).await? < total {
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

/// Transactions in a server's GTID history: MySQL's executed set, or
/// MariaDB's current position (its sequence numbers, one domain here).
async fn transactions(c: &mut mysql_async::Conn) -> anyhow::Result<u64> {
    let mariadb: Option<String> = c.query_first("SELECT @@version").await?;
    if mariadb.is_some_and(|v| v.contains("MariaDB")) {
        let pos: Option<String> = c.query_first("SELECT @@global.gtid_current_pos").await?;
        let pos: cnmysql_gtid::mariadb::GtidPos = pos.unwrap_or_default().parse()?;
        return Ok(pos.seq_total());
    }
    let set: Option<String> = c.query_first("SELECT @@global.gtid_executed").await?;
    let set: cnmysql_gtid::mysql::GtidSet = set.unwrap_or_default().parse()?;
    Ok(set.count())
}

/// How old the newest row this replica holds is, in seconds.
async fn lag_of(c: &mut mysql_async::Conn) -> anyhow::Result<f64> {
    let us: Option<Option<i64>> = c
        .query_first("SELECT TIMESTAMPDIFF(MICROSECOND, MAX(at), NOW(6)) FROM app.load")
        .await?;
    Ok(us.flatten().unwrap_or(0) as f64 / 1e6)
}
