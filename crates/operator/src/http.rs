//! `/metrics` (OpenMetrics), `/healthz` (the process answers) and `/readyz`
//! (connected to the API server with the CRD served) on one port.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

#[derive(Clone)]
struct Shared {
    metrics: Metrics,
    ready: Arc<AtomicBool>,
}

pub async fn serve(listener: tokio::net::TcpListener, metrics: Metrics, ready: Arc<AtomicBool>) {
    let app = Router::new()
        .route("/metrics", get(metrics_page))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(Shared { metrics, ready });
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "the metrics and health server stopped");
    }
}

async fn metrics_page(State(s): State<Shared>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}

async fn readyz(State(s): State<Shared>) -> impl IntoResponse {
    if s.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ok")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not connected to the API server yet",
        )
    }
}
