//! A task of the control plane that runs every few seconds until the
//! process ends, saying each new failure once.

use std::time::Duration;

/// Run `tick` every `period`; a failure is logged (under `what`) when it
/// differs from the last one.
pub async fn every(
    period: Duration,
    what: &str,
    mut tick: impl AsyncFnMut() -> anyhow::Result<()>,
) {
    let mut last_error = String::new();
    loop {
        if let Err(e) = tick().await {
            let msg = format!("{e:#}");
            if msg != last_error {
                tracing::warn!(error = msg, "{what}");
                last_error = msg;
            }
        }
        tokio::time::sleep(period).await;
    }
}
