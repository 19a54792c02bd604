//! The operator's own Prometheus metrics: reconciles by result, errors by
//! kind, reconcile durations, and whether this replica leads.

use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    reconciles: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    duration: Histogram,
    pub leader: Gauge<i64, AtomicI64>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut r = Registry::with_prefix("cnmysql_operator");
        let reconciles = Family::<Labels, Counter>::default();
        r.register(
            "reconciles",
            "Cluster reconciles by result",
            reconciles.clone(),
        );
        let errors = Family::<Labels, Counter>::default();
        r.register(
            "reconcile_errors",
            "Failed reconciles by kind of error",
            errors.clone(),
        );
        let duration = Histogram::new(exponential_buckets(0.005, 2.0, 12));
        r.register_with_unit(
            "reconcile_duration",
            "How long a reconcile took",
            prometheus_client::registry::Unit::Seconds,
            duration.clone(),
        );
        let leader = Gauge::<i64, AtomicI64>::default();
        r.register(
            "leader",
            "1 while this replica holds the leader lease",
            leader.clone(),
        );
        Metrics {
            registry: Arc::new(r),
            reconciles,
            errors,
            duration,
            leader,
        }
    }
}

impl Metrics {
    pub fn observe(&self, took: Duration, error: Option<&str>) {
        self.duration.observe(took.as_secs_f64());
        let result = if error.is_some() { "error" } else { "ok" };
        self.reconciles
            .get_or_create(&vec![("result".into(), result.into())])
            .inc();
        if let Some(e) = error {
            self.errors
                .get_or_create(&vec![("error".into(), e.into())])
                .inc();
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("metrics encode");
        out
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reconciles_and_errors_are_counted() {
        let m = super::Metrics::default();
        m.observe(std::time::Duration::from_millis(20), None);
        m.observe(std::time::Duration::from_millis(20), Some("conflict"));
        let text = m.encode();
        assert!(
            text.contains("cnmysql_operator_reconciles_total{result=\"ok\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("cnmysql_operator_reconcile_errors_total{error=\"conflict\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("cnmysql_operator_reconcile_duration_seconds_count 2"),
            "{text}"
        );
    }
}
