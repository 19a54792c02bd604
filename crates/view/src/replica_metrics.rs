//! A replica cluster's series (`spec.replica`), from `status.replica`:
//! whether it follows its source, receives from it, and how far behind
//! its designated primary is. Registered with the rest of the page
//! (`metrics.rs`).

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use cnmysql_core::status::Snapshot;

type Labels = Vec<(String, String)>;
type Gauges = Family<Labels, Gauge<f64, AtomicU64>>;

pub(crate) struct ReplicaFamilies {
    following: Gauges,
    receiving: Gauges,
    lag: Gauges,
}

impl ReplicaFamilies {
    /// Register the series; their names (without the prefix) go to `names`.
    pub(crate) fn register(r: &mut Registry, names: &mut Vec<String>) -> ReplicaFamilies {
        let mut g = |name: &'static str, help: &str| {
            let f = Gauges::default();
            r.register(name, help, f.clone());
            names.push(name.to_string());
            f
        };
        ReplicaFamilies {
            following: g(
                "cluster_replica_following",
                "1 while the Cluster is a replica cluster following its source (spec.replica.enabled)",
            ),
            receiving: g(
                "cluster_replica_receiving",
                "1 while the replica cluster's designated primary receives from its source",
            ),
            lag: g(
                "cluster_replica_lag_seconds",
                "How far the replica cluster's designated primary is behind its source",
            ),
        }
    }

    /// The cluster's samples, labelled `cluster`; none for a Cluster that
    /// never was a replica cluster.
    pub(crate) fn samples(&self, s: &Snapshot, cluster: &Labels) {
        let Some(r) = &s.status.replica else {
            return;
        };
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        self.following.get_or_create(cluster).set(flag(r.enabled));
        self.receiving
            .get_or_create(cluster)
            .set(flag(r.enabled && r.receiving));
        if let Some(l) = r.lag_seconds.filter(|_| r.enabled) {
            self.lag.get_or_create(cluster).set(l as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_cluster_exports_following_receiving_and_lag() {
        let mut s = cnmysql_core::testutil::snapshot(vec![cnmysql_core::testutil::primary(
            "db-1", "0-1-5",
        )]);
        s.status.replica = Some(cnmysql_api::replica::ReplicaStatus {
            enabled: true,
            source: "east:3306".into(),
            receiving: true,
            lag_seconds: Some(7),
            ..Default::default()
        });
        let mut r = Registry::with_prefix("cnmysql");
        let mut names = Vec::new();
        let f = ReplicaFamilies::register(&mut r, &mut names);
        f.samples(&s, &vec![("cluster".into(), "db".into())]);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).unwrap();
        assert!(
            out.contains("cnmysql_cluster_replica_following{cluster=\"db\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("cnmysql_cluster_replica_receiving{cluster=\"db\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("cnmysql_cluster_replica_lag_seconds{cluster=\"db\"} 7"),
            "{out}"
        );
        assert_eq!(names.len(), 3);
    }
}
