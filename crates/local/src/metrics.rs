//! The cluster's Prometheus endpoint on the local platform: plain HTTP on
//! loopback, `GET /metrics`, rendered by the core from the control plane's
//! latest observation and the recorded events.

use std::sync::Arc;

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use cnmysql_core::status::Snapshot;
use tokio::sync::watch;

use crate::state::StateDir;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Serve `/metrics` on `host:port` until the runtime stops.
pub async fn serve(
    host: &str,
    port: u16,
    latest: watch::Receiver<Option<Snapshot>>,
    dir: StateDir,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind((host, port))
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen for metrics on {host}:{port}: {e}"))?;
    let state = Arc::new((latest, dir));
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let state = state.clone();
            async move {
                let (latest, dir) = &*state;
                let snapshot = latest.borrow().clone();
                match snapshot {
                    Some(s) => {
                        let events = tokio::task::spawn_blocking({
                            let dir = dir.clone();
                            move || dir.event_counts()
                        })
                        .await
                        .unwrap_or_default();
                        let page = cnmysql_view::metrics::encode_cluster(&s, &events);
                        ([(CONTENT_TYPE, OPENMETRICS)], page).into_response()
                    }
                    None => (
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        "the control plane has not observed the cluster yet\n",
                    )
                        .into_response(),
                }
            }
        }),
    );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics endpoint stopped");
        }
    });
    Ok(())
}
