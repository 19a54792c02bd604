//! The operator's Prometheus metrics: its own (reconciles by result, errors
//! by kind, reconcile durations, whether this replica leads) and, on the
//! same page, the core's cluster series for every Cluster it polls, labelled
//! with `namespace` and `cluster` (see `cnmysql_view::metrics`).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use cnmysql_core::status::Snapshot;
use cnmysql_view::metrics::{EventCounts, Labelled};

type Labels = Vec<(String, String)>;

/// The latest observation of each polled Cluster (`(namespace, name)`) and
/// the events the operator recorded for it since it started leading.
type Observed = BTreeMap<(String, String), (Option<Snapshot>, EventCounts)>;

#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    reconciles: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    duration: Histogram,
    topology_pass: Histogram,
    topology_poll: Histogram,
    pub leader: Gauge<i64, AtomicI64>,
    clusters: Arc<Mutex<Observed>>,
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
        let duration = seconds(&mut r, "reconcile_duration", "How long a reconcile took");
        // A failover or hand-over is decided within one topology pass:
        // its time (and the poll's share of it) bounds how soon.
        let topology_pass = seconds(
            &mut r,
            "topology_pass_duration",
            "How long a topology pass took: routes, poll, decision, Pods",
        );
        let topology_poll = seconds(
            &mut r,
            "topology_poll_duration",
            "How long the instances took to answer a topology pass's poll",
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
            topology_pass,
            topology_poll,
            leader,
            clusters: Default::default(),
        }
    }
}

/// A histogram of durations in seconds, 5 ms to about 10 s, registered.
fn seconds(r: &mut Registry, name: &str, help: &str) -> Histogram {
    let h = Histogram::new(exponential_buckets(0.005, 2.0, 12));
    r.register_with_unit(
        name,
        help,
        prometheus_client::registry::Unit::Seconds,
        h.clone(),
    );
    h
}

impl Metrics {
    pub fn observe(&self, took: Duration, error: Option<&str>) {
        self.duration.observe(took.as_secs_f64());
        let result = if error.is_some() { "error" } else { "ok" };
        self.reconciles
            .get_or_create(&vec![("result".into(), result.into())])
            .inc();
        if let Some(e) = error {
            self.count_error(e);
        }
    }

    /// A failed step, by its label (`Error::metric_label`).
    fn count_error(&self, label: &str) {
        self.errors
            .get_or_create(&vec![("error".into(), label.into())])
            .inc();
    }

    /// One topology pass: all of it, and its poll of the instances.
    pub fn observe_topology_pass(&self, took: Duration, poll: Duration) {
        self.topology_pass.observe(took.as_secs_f64());
        self.topology_poll.observe(poll.as_secs_f64());
    }

    /// A topology pass that failed: counted where a failed reconcile is,
    /// under its step's label (the duration histograms count only passes
    /// that finish).
    pub fn topology_pass_failed(&self, e: &crate::error::Error) {
        self.count_error(e.metric_label());
    }

    /// The latest snapshot of a Cluster's topology.
    pub fn observe_cluster(&self, namespace: &str, snapshot: &Snapshot) {
        let key = (namespace.to_string(), snapshot.cluster.clone());
        self.clusters.lock().unwrap().entry(key).or_default().0 = Some(snapshot.clone());
    }

    /// An Event recorded for a Cluster (`kind`: `Normal` or `Warning`).
    pub fn count_event(&self, namespace: &str, cluster: &str, reason: &str, kind: &str) {
        let key = (namespace.to_string(), cluster.to_string());
        *self
            .clusters
            .lock()
            .unwrap()
            .entry(key)
            .or_default()
            .1
            .entry((reason.to_string(), kind.to_string()))
            .or_default() += 1;
    }

    /// A Cluster is gone (or no longer polled here): drop its series.
    pub fn forget_cluster(&self, namespace: &str, cluster: &str) {
        self.clusters
            .lock()
            .unwrap()
            .remove(&(namespace.to_string(), cluster.to_string()));
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("metrics encode");
        let clusters = self.clusters.lock().unwrap();
        let pages: Vec<Labelled> = clusters
            .iter()
            .filter_map(|((ns, name), (snapshot, events))| {
                Some(Labelled {
                    labels: vec![
                        ("namespace".into(), ns.clone()),
                        ("cluster".into(), name.clone()),
                    ],
                    snapshot: snapshot.as_ref()?,
                    events,
                })
            })
            .collect();
        if pages.is_empty() {
            return out;
        }
        // One page: the operator's families, then the clusters'.
        let own = out.strip_suffix("# EOF\n").unwrap_or(&out).to_string();
        own + &cnmysql_view::metrics::encode_clusters(&pages)
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

    #[test]
    fn topology_passes_are_timed_and_failed_ones_counted() {
        let m = super::Metrics::default();
        m.observe_topology_pass(
            std::time::Duration::from_millis(90),
            std::time::Duration::from_millis(50),
        );
        m.topology_pass_failed(&crate::error::Error::Topology(anyhow::anyhow!("poll")));
        let text = m.encode();
        for series in [
            "cnmysql_operator_reconcile_errors_total{error=\"topology\"} 1",
            "cnmysql_operator_topology_pass_duration_seconds_count 1",
            "cnmysql_operator_topology_poll_duration_seconds_count 1",
            // 90 ms falls in the 0.16 s bucket, not the 0.08 s one.
            "cnmysql_operator_topology_pass_duration_seconds_bucket{le=\"0.08\"} 0",
            "cnmysql_operator_topology_pass_duration_seconds_bucket{le=\"0.16\"} 1",
        ] {
            assert!(text.contains(series), "{series} missing from {text}");
        }
    }

    #[test]
    fn polled_clusters_join_the_page_until_forgotten() {
        let m = super::Metrics::default();
        let snapshot = cnmysql_core::status::Snapshot {
            cluster: "db".into(),
            spec: serde_json::from_value(serde_json::json!({"instances": 1})).unwrap(),
            status: Default::default(),
            instances: Vec::new(),
            now_ms: 0,
            declared: Default::default(),
        };
        m.observe_cluster("prod", &snapshot);
        m.count_event("prod", "db", "FailoverCompleted", "Warning");
        let text = m.encode();
        assert!(
            text.contains("cnmysql_cluster_instances{namespace=\"prod\",cluster=\"db\"}"),
            "{text}"
        );
        assert!(
            text.contains("cnmysql_events_total{namespace=\"prod\",cluster=\"db\",reason=\"FailoverCompleted\",type=\"Warning\"} 1"),
            "{text}"
        );
        assert!(text.contains("cnmysql_operator_leader"), "{text}");
        assert_eq!(text.matches("# EOF").count(), 1, "{text}");
        m.forget_cluster("prod", "db");
        assert!(!m.encode().contains("cnmysql_cluster_instances"));
    }
}
