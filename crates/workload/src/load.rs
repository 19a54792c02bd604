//! Sustained load beside a measurement: connections inserting one row per
//! transaction as fast as each is acknowledged, through one address (rw).
//! A writer whose connection breaks (a failover, a switchover) connects
//! again and goes on, as an application's pool does. Only the count of
//! acknowledged commits is kept: which rows survived is the write
//! checker's business.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use mysql_async::prelude::*;

/// The table the load writes: each row's commit time, for lag.
pub const TABLE: &str = "CREATE TABLE IF NOT EXISTS app.load (id BIGINT AUTO_INCREMENT PRIMARY KEY, at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), pad VARCHAR(200) NOT NULL, KEY (at))";

pub struct Load {
    stop: Arc<AtomicBool>,
    committed: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    /// `writers` connections to `opts` writing flat out (none: nothing
    /// runs). The table is made first.
    pub async fn start(opts: mysql_async::Opts, writers: usize) -> anyhow::Result<Load> {
        let stop = Arc::new(AtomicBool::new(false));
        let committed = Arc::new(AtomicU64::new(0));
        if writers > 0 {
            let mut c = mysql_async::Conn::new(opts.clone()).await?;
            c.query_drop("CREATE DATABASE IF NOT EXISTS app").await?;
            c.query_drop(TABLE).await?;
        }
        let tasks = (0..writers)
            .map(|_| {
                let (stop, committed, opts) = (stop.clone(), committed.clone(), opts.clone());
                tokio::spawn(write(opts, stop, committed))
            })
            .collect();
        Ok(Load {
            stop,
            committed,
            tasks,
        })
    }

    /// Commits acknowledged so far.
    pub fn committed(&self) -> u64 {
        self.committed.load(Ordering::Relaxed)
    }

    /// Stop every writer; the commits acknowledged.
    pub async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            let _ = t.await;
        }
        self.committed.load(Ordering::Relaxed)
    }
}

async fn write(opts: mysql_async::Opts, stop: Arc<AtomicBool>, committed: Arc<AtomicU64>) {
    let mut conn: Option<mysql_async::Conn> = None;
    while !stop.load(Ordering::Relaxed) {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match tokio::time::timeout(
                Duration::from_secs(2),
                mysql_async::Conn::new(opts.clone()),
            )
            .await
            {
                Ok(Ok(c)) => conn.insert(c),
                _ => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let insert = c.query_drop("INSERT INTO app.load (pad) VALUES (REPEAT('x', 100))");
        match tokio::time::timeout(Duration::from_secs(5), insert).await {
            Ok(Ok(())) => {
                committed.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                conn = None;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}
