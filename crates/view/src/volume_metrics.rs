//! How full each instance's volumes are, as its manager measures the file
//! systems: `cnmysql_instance_volume_size_bytes`, `_used_bytes` and
//! `_available_bytes`, labelled `instance` and `volume` (`data`,
//! `binlogs`). Exact figures (the Cluster status rounds them to 1%). Per
//! cluster, `cnmysql_cluster_writes_refused`: 1 while the primary refuses
//! writes because a volume is nearly full (`status.writesRefused`). Per
//! instance, its binary logs: `cnmysql_instance_binlog_bytes` and
//! `_files` (what the purge rule keeps, `binlog_retention`).
//! Registered with the rest of the page (`metrics.rs`); the alerts on a
//! filling or full volume are in `deploy/prometheus-rules.yaml`.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use cnmysql_core::status::InstanceStatus;

type Labels = Vec<(String, String)>;
type Gauges = Family<Labels, Gauge<f64, AtomicU64>>;

pub(crate) struct VolumeFamilies {
    size: Gauges,
    used: Gauges,
    available: Gauges,
    refused: Gauges,
    binlog_bytes: Gauges,
    binlog_files: Gauges,
}

impl VolumeFamilies {
    /// Register the series; their names (without the prefix) go to `names`.
    pub(crate) fn register(r: &mut Registry, names: &mut Vec<String>) -> VolumeFamilies {
        let mut g = |name: &'static str, help: &str| {
            let f = Gauges::default();
            r.register(name, help, f.clone());
            names.push(name.to_string());
            f
        };
        VolumeFamilies {
            size: g(
                "instance_volume_size_bytes",
                "Size of the instance's volume's file system (volume: data, binlogs)",
            ),
            used: g(
                "instance_volume_used_bytes",
                "Bytes in use on the instance's volume",
            ),
            available: g(
                "instance_volume_available_bytes",
                "Bytes the server may still write on the instance's volume",
            ),
            refused: g(
                "cluster_writes_refused",
                "1 while the primary refuses writes because a volume is nearly full (status.writesRefused)",
            ),
            binlog_bytes: g(
                "instance_binlog_bytes",
                "Bytes of the binary log files the instance keeps",
            ),
            binlog_files: g(
                "instance_binlog_files",
                "Binary log files the instance keeps (status binlogs.keptFor says why the oldest)",
            ),
        }
    }

    /// The cluster's sample, labelled `cluster`.
    pub(crate) fn cluster_samples(&self, s: &cnmysql_core::status::Snapshot, cluster: &Labels) {
        let on = s.status.writes_refused.is_some();
        self.refused
            .get_or_create(cluster)
            .set(if on { 1.0 } else { 0.0 });
    }

    /// One instance's samples; `instance` holds its labels.
    pub(crate) fn samples(&self, instance: &Labels, st: &InstanceStatus) {
        for v in &st.volumes {
            let mut l = instance.clone();
            l.push(("volume".into(), v.volume.clone()));
            self.size.get_or_create(&l).set(v.size_bytes as f64);
            self.used.get_or_create(&l).set(v.used_bytes as f64);
            self.available
                .get_or_create(&l)
                .set(v.available_bytes as f64);
        }
        if let Some(b) = &st.binlogs {
            self.binlog_bytes
                .get_or_create(instance)
                .set(b.bytes as f64);
            self.binlog_files
                .get_or_create(instance)
                .set(f64::from(b.files));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_volume_is_a_sample_of_its_own() {
        let st = InstanceStatus {
            volumes: vec![
                cnmysql_api::VolumeUsage {
                    volume: "data".into(),
                    size_bytes: 1000,
                    used_bytes: 800,
                    available_bytes: 150,
                },
                cnmysql_api::VolumeUsage {
                    volume: "binlogs".into(),
                    size_bytes: 500,
                    used_bytes: 10,
                    available_bytes: 490,
                },
            ],
            binlogs: Some(cnmysql_api::BinlogsStatus {
                files: 3,
                bytes: 4096,
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut r = Registry::with_prefix("cnmysql");
        let mut names = Vec::new();
        let f = VolumeFamilies::register(&mut r, &mut names);
        f.samples(&vec![("instance".into(), "db-1".into())], &st);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).unwrap();
        for want in [
            "cnmysql_instance_volume_size_bytes{instance=\"db-1\",volume=\"data\"} 1000",
            "cnmysql_instance_volume_used_bytes{instance=\"db-1\",volume=\"data\"} 800",
            "cnmysql_instance_volume_available_bytes{instance=\"db-1\",volume=\"data\"} 150",
            "cnmysql_instance_volume_available_bytes{instance=\"db-1\",volume=\"binlogs\"} 490",
            "cnmysql_instance_binlog_bytes{instance=\"db-1\"} 4096",
            "cnmysql_instance_binlog_files{instance=\"db-1\"} 3",
        ] {
            assert!(out.contains(want), "{want} in\n{out}");
        }
        assert_eq!(names.len(), 6);
    }
}
