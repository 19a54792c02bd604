//! Logs as JSON lines on stderr, filtered by `CNMYSQL_LOG` (default `info`).

pub(crate) fn init_json_logs() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("CNMYSQL_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
