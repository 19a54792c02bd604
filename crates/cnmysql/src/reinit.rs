//! Following a re-initialisation from the command line (`cnmysql local
//! reinit`, `kubectl cnmsql reinit`): one line per change of what the
//! instance is doing, until it is back and ready.

use std::future::Future;
use std::time::{Duration, Instant};

/// Print each new line of progress until it ends or `limit` passes.
pub async fn follow<F>(
    limit: Duration,
    instance: &str,
    mut read: impl FnMut() -> F,
) -> anyhow::Result<()>
where
    F: Future<Output = anyhow::Result<cnmysql_api::ClusterStatus>>,
{
    let began = Instant::now();
    let mut last = String::new();
    loop {
        let st = read().await?;
        match cnmysql_core::reinit::progress(&st, instance) {
            None => {
                eprintln!(
                    "{instance}: re-initialised and ready ({:.1}s)",
                    began.elapsed().as_secs_f64()
                );
                return Ok(());
            }
            Some(line) if line != last => {
                eprintln!("{line}");
                last = line;
            }
            Some(_) => {}
        }
        if began.elapsed() > limit {
            anyhow::bail!(
                "{instance} is not back after {}s ({last}); it goes on: follow it with `status`",
                limit.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
