//! What the manager's poll of its server costs (issue 34: the server's
//! figures for `/metrics` must cost it no more than a few milliseconds):
//! on a 1-instance cluster, the whole poll (`sql::observe`: GTID state,
//! replication, semi-sync and the figures) and the figures' own statement
//! alone (the status variables; the binary logs' size is read off the
//! disk since 2026-12-03, not asked of the server), each timed per round
//! trip over the server's socket.

use std::time::Instant;

use mysql_async::prelude::*;
use serde_json::{Value, json};

use crate::harness::{Bench, BenchFlavor, flavor, stats};

const ROUNDS: usize = 200;

pub(crate) fn observe(runs: usize) -> anyhow::Result<Value> {
    let rt = tokio::runtime::Runtime::new()?;
    let b = Bench::new();
    b.up("obs", 1)?;
    let f = match flavor() {
        BenchFlavor::Mariadb => cnmysql_api::Flavor::Mariadb,
        BenchFlavor::Mysql => cnmysql_api::Flavor::Mysql,
    };
    let (poll, figures) = rt.block_on(async {
        let mut c = b.admin("obs-1").await?;
        let figures_query = format!(
            "SHOW GLOBAL STATUS WHERE Variable_name IN ({})",
            cnmysql_view::server_metrics::status_variables()
                .map(|v| format!("'{v}'"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let (mut poll, mut figures) = (Vec::new(), Vec::new());
        for run in 0..runs.max(1) {
            for _ in 0..ROUNDS {
                let t = Instant::now();
                cnmysql_instance::sql::observe(&mut c, f).await?;
                poll.push(t.elapsed().as_secs_f64() * 1000.0);
                let t = Instant::now();
                c.query_drop(&figures_query).await?;
                figures.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            eprintln!("observe run {}: {ROUNDS} polls", run + 1);
        }
        anyhow::Ok((poll, figures))
    })?;
    Ok(json!({
        "poll_ms": stats(poll),
        "server_figures_ms": stats(figures),
    }))
}
