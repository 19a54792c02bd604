//! Prometheus metrics of a cluster, from what the control plane observes:
//! one snapshot plus the events recorded so far. Rendering is pure (no
//! clock, no I/O), so every platform serves the same series.
//!
//! Series (OpenMetrics text):
//! - per instance (`instance` label): `cnmysql_instance_up`, `_ready`,
//!   `_primary`, `_read_only`, `_fenced`, `_diverged`,
//!   `_replication_lag_seconds`, `_semi_sync_waiting` (a primary waiting for
//!   acknowledgements), `_semi_sync_clients`, `_mysqld_uptime_seconds` (it
//!   keeps climbing through an in-place upgrade),
//!   `_certificate_expiry_timestamp_seconds` (the sooner of the manager's
//!   certificate and the CA), `_manager_current` (1 when
//!   the manager runs the operator's executable, 0 while it is stale);
//! - per cluster: `cnmysql_cluster_instances`, `_ready_instances`,
//!   `_stale_instances` (instances a rollout still has to bring up to date:
//!   an older manager, or an outdated definition such as a server image),
//!   `_primary_failing` (1 while a failing primary is being timed),
//!   `_primary_changing` (1 while targetPrimary differs from currentPrimary),
//!   `_phase` (1 for the current phase, label `phase`);
//! - rollouts (any kind: server version, definition, manager):
//!   `cnmysql_cluster_updated_instances` (instances the rollout has
//!   brought up to date), `_rollout_last_step_timestamp_seconds` (when it
//!   last gave an instance a step), `_rollout_target_info` (labels `image`,
//!   `version`, `manager`), `_server_upgrade_phase` (1 for the phase of the
//!   latest server upgrade, labels `version`, `phase`), and per instance
//!   `cnmysql_instance_server_version_info` (label `version`);
//!   annotation-driven upgrades: `cnmysql_instance_annotated_upgrade_status`
//!   (1 for the instance's record, labels `status`, `upgrade_to`),
//!   `_annotated_upgrade_attempts`, and per cluster
//!   `cnmysql_cluster_orchestrated_upgrade_status` (labels `status`,
//!   `upgrade_to`). Alert on a
//!   rollout that has not finished long after its last step:
//!   `deploy/prometheus-rules.yaml`;
//! - base backups, per cluster: `cnmysql_cluster_backup_last_success_timestamp_seconds`,
//!   `_backup_last_failure_timestamp_seconds`, `_backup_last_duration_seconds`
//!   (of the last successful one), `_backup_last_stored_bytes`;
//! - continuous binlog archiving, on the primary that archives:
//!   `cnmysql_instance_archive_lag_seconds` (how far behind the clock the
//!   archive is known complete), `_archive_failing` (1 while it cannot
//!   store), `_archived_bytes` (binary log bytes stored by the current run);
//! - replica clusters (`replica_metrics.rs`): `cnmysql_cluster_replica_following`,
//!   `_replica_receiving`, `_replica_lag_seconds`;
//! - volumes (`volume_metrics.rs`): `cnmysql_instance_volume_size_bytes`,
//!   `_used_bytes`, `_available_bytes` (label `volume`), and per cluster
//!   `cnmysql_cluster_writes_refused`;
//! - `cnmysql_events_total` by `reason` and `type`: switchovers,
//!   failovers, blocked operations, fencing, restarts since the cluster was
//!   created.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use cnmysql_core::status::{Role, Snapshot};

type Labels = Vec<(String, String)>;
type Values = Family<Labels, Gauge<f64, AtomicU64>>;

/// Events counted so far, by (reason, type).
pub type EventCounts = BTreeMap<(String, String), u64>;

fn gauge(registry: &mut Registry, name: &str, help: &str) -> Values {
    let f = Values::default();
    registry.register(name, help, f.clone());
    f
}

fn label(k: &str, v: &str) -> Labels {
    vec![(k.to_string(), v.to_string())]
}

fn flag(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

/// The metrics page of a cluster.
pub fn encode_cluster(s: &Snapshot, events: &EventCounts) -> String {
    encode_clusters(&[Labelled {
        labels: Vec::new(),
        snapshot: s,
        events,
    }])
}

/// One cluster's observation, its series carrying `labels` as well (the
/// operator serves many Clusters on one page: `namespace` and `cluster`).
pub struct Labelled<'a> {
    pub labels: Vec<(String, String)>,
    pub snapshot: &'a Snapshot,
    pub events: &'a EventCounts,
}

/// The metrics page of several clusters: each series once, one sample per
/// cluster (or instance) told apart by the clusters' labels.
pub fn encode_clusters(clusters: &[Labelled]) -> String {
    let mut r = Registry::with_prefix("cnmysql");
    let f = Families::register(&mut r);
    for c in clusters {
        instance_samples(&f, c);
        let s = c.snapshot;
        // Per cluster: named by the `cluster` label unless it is among the
        // labels already.
        let cluster = if c.labels.iter().any(|(k, _)| k == "cluster") {
            c.labels.clone()
        } else {
            let mut l = c.labels.clone();
            l.extend(label("cluster", &s.cluster));
            l
        };
        cluster_samples(&f, c, &cluster);
        upgrade_samples(&f, c, &cluster);
        backup_samples(&f, s, &cluster);
        f.replica.samples(s, &cluster);
        f.volumes.cluster_samples(s, &cluster);
    }
    let mut out = String::new();
    encode(&mut out, &r).expect("writing to a String cannot fail");
    out
}

/// Each instance's series.
fn instance_samples(f: &Families, c: &Labelled) {
    let s = c.snapshot;
    let with = |k: &str, v: &str| {
        let mut l = c.labels.clone();
        l.extend(label(k, v));
        l
    };
    for o in &s.instances {
        let l = with("instance", &o.name);
        f.up.get_or_create(&l).set(flag(o.reachable()));
        f.ready.get_or_create(&l).set(flag(o.ready()));
        f.fenced.get_or_create(&l).set(flag(s.is_fenced(&o.name)));
        f.diverged
            .get_or_create(&l)
            .set(flag(s.is_diverged(&o.name)));
        if let Some(cur) = cnmysql_core::upgrade::rollout::is_current(s, &o.name) {
            f.current.get_or_create(&l).set(flag(cur));
        }
        let Some(st) = &o.status else { continue };
        if !st.server_version.is_empty() {
            let mut v = l.clone();
            v.push(("version".into(), st.server_version.clone()));
            f.server_version.get_or_create(&v).set(1.0);
        }
        if let Some(secs) = st.uptime_seconds {
            f.uptime.get_or_create(&l).set(secs as f64);
        }
        if let Some(ms) = st
            .certificate_expires_at
            .as_deref()
            .and_then(cnmysql_core::time::parse_ms)
        {
            f.cert_expiry.get_or_create(&l).set(ms as f64 / 1000.0);
        }
        if let Some(ms) = st
            .last_transaction_at
            .as_deref()
            .and_then(cnmysql_core::time::parse_ms)
        {
            f.last_transaction.get_or_create(&l).set(ms as f64 / 1000.0);
        }
        if let Some(a) = &st.archive {
            if let Some(secs) = a.lag_seconds {
                f.archive_lag.get_or_create(&l).set(secs);
            }
            f.archive_failing
                .get_or_create(&l)
                .set(flag(!a.error.is_empty()));
            f.archived_bytes.get_or_create(&l).set(a.bytes as f64);
        }
        f.primary
            .get_or_create(&l)
            .set(flag(st.role == Role::Primary));
        f.read_only.get_or_create(&l).set(flag(st.read_only));
        f.server.samples(&l, st);
        f.volumes.samples(&l, st);
        if let Some(secs) = st.lag_seconds {
            f.lag.get_or_create(&l).set(secs as f64);
        }
        if let Some(semi) = &st.semi_sync
            && st.role == Role::Primary
        {
            f.semi_waiting
                .get_or_create(&l)
                .set(flag(semi.source_active));
            f.semi_clients
                .get_or_create(&l)
                .set(f64::from(semi.clients));
        }
    }
}

/// The cluster's series: instances, readiness, rollout, primary changes,
/// phase, events.
fn cluster_samples(f: &Families, c: &Labelled, cluster: &Labels) {
    let s = c.snapshot;
    f.instances
        .get_or_create(cluster)
        .set(f64::from(s.spec.instances));
    f.stale_n.get_or_create(cluster).set(
        s.instances
            .iter()
            .filter(|o| cnmysql_core::upgrade::rollout::is_stale(s, &o.name))
            .count() as f64,
    );
    f.ready_n
        .get_or_create(cluster)
        .set(s.instances.iter().filter(|o| o.ready()).count() as f64);
    f.updated_n.get_or_create(cluster).set(
        s.instances
            .iter()
            .filter(|o| !cnmysql_core::upgrade::rollout::is_stale(s, &o.name))
            .count() as f64,
    );
    if let Some(t) = s.declared.operator_certificate_expires_at {
        f.operator_cert_expiry.get_or_create(cluster).set(t as f64);
    }
    if let Some(t) = s
        .status
        .last_rollout_step_time
        .as_deref()
        .and_then(cnmysql_core::time::parse_ms)
    {
        f.last_step.get_or_create(cluster).set(t as f64 / 1000.0);
    }
    let mut t = cluster.clone();
    t.push((
        "image".into(),
        s.declared
            .image
            .clone()
            .or_else(|| s.status.image.clone())
            .unwrap_or_default(),
    ));
    t.push((
        "version".into(),
        s.declared.version.clone().unwrap_or_default(),
    ));
    t.push((
        "manager".into(),
        s.status
            .operator_executable_hash
            .clone()
            .unwrap_or_default(),
    ));
    f.target_info.get_or_create(&t).set(1.0);
    f.failing
        .get_or_create(cluster)
        .set(flag(s.status.primary_failing_since.is_some()));
    f.changing
        .get_or_create(cluster)
        .set(flag(s.status.target_primary != s.status.current_primary));
    if let Some(p) = s.status.phase {
        let mut l = cluster.clone();
        l.push(("phase".into(), p.as_str().into()));
        f.phase.get_or_create(&l).set(1.0);
    }
    for ((reason, kind), n) in c.events {
        let mut l = c.labels.clone();
        l.push(("reason".to_string(), reason.clone()));
        l.push(("type".to_string(), kind.clone()));
        f.counted.get_or_create(&l).inc_by(*n);
    }
}

/// Annotated, orchestrated and server upgrades.
fn upgrade_samples(f: &Families, c: &Labelled, cluster: &Labels) {
    let s = c.snapshot;
    let with = |k: &str, v: &str| {
        let mut l = c.labels.clone();
        l.extend(label(k, v));
        l
    };
    for (name, rec) in &s.status.instance_upgrades {
        let mut l = with("instance", name);
        f.attempts.get_or_create(&l).set(rec.attempts as f64);
        l.push(("status".into(), rec.status.clone()));
        l.push(("upgrade_to".into(), rec.upgrade_to.clone()));
        f.annotated.get_or_create(&l).set(1.0);
    }
    if let Some(o) = &s.status.orchestrated_upgrade {
        let mut l = cluster.clone();
        l.push(("status".into(), o.status.clone()));
        l.push(("upgrade_to".into(), o.upgrade_to.clone()));
        f.orchestrated.get_or_create(&l).set(1.0);
    }
    if let Some(rec) = s.status.upgrade_history.last() {
        let mut l = cluster.clone();
        l.push(("version".into(), rec.version.clone()));
        l.push(("phase".into(), rec.phase.as_str().into()));
        f.upgrade_phase.get_or_create(&l).set(1.0);
    }
}

/// The last base backups.
fn backup_samples(f: &Families, s: &Snapshot, cluster: &Labels) {
    if let Some(b) = &s.status.backup {
        let secs = |t: &str| cnmysql_core::time::parse_ms(t).map(|ms| ms as f64 / 1000.0);
        if let Some(ok) = &b.last_successful_backup {
            if let Some(t) = secs(&ok.stopped_at) {
                f.backup_ok.get_or_create(cluster).set(t);
                if let Some(began) = secs(&ok.started_at) {
                    f.backup_duration.get_or_create(cluster).set(t - began);
                }
            }
            f.backup_bytes
                .get_or_create(cluster)
                .set(ok.stored_bytes as f64);
        }
        if let Some(t) = b
            .last_failed_backup
            .as_ref()
            .and_then(|f| secs(&f.stopped_at))
        {
            f.backup_failed.get_or_create(cluster).set(t);
        }
    }
}

/// Every series of the page, registered once.
struct Families {
    up: Values,
    ready: Values,
    primary: Values,
    read_only: Values,
    fenced: Values,
    diverged: Values,
    lag: Values,
    semi_waiting: Values,
    semi_clients: Values,
    uptime: Values,
    cert_expiry: Values,
    operator_cert_expiry: Values,
    last_transaction: Values,
    current: Values,
    stale_n: Values,
    instances: Values,
    ready_n: Values,
    failing: Values,
    changing: Values,
    phase: Values,
    updated_n: Values,
    last_step: Values,
    target_info: Values,
    upgrade_phase: Values,
    server_version: Values,
    annotated: Values,
    attempts: Values,
    orchestrated: Values,
    archive_lag: Values,
    archive_failing: Values,
    archived_bytes: Values,
    backup_ok: Values,
    backup_failed: Values,
    backup_duration: Values,
    backup_bytes: Values,
    counted: Family<Labels, Counter>,
    server: crate::server_metrics::ServerFamilies,
    replica: crate::replica_metrics::ReplicaFamilies,
    volumes: crate::volume_metrics::VolumeFamilies,
}

impl Families {
    /// In the page's order: the gauges, then the events counter.
    fn register(r: &mut Registry) -> Families {
        Families::register_named(r).0
    }

    /// [`Families::register`], and the names of the series registered
    /// (without the `cnmysql_` prefix; the events counter as sampled).
    fn register_named(r: &mut Registry) -> (Families, Vec<String>) {
        let mut names: Vec<&'static str> = Vec::new();
        let mut server_names = Vec::new();
        let mut g = |name: &'static str, help: &str| {
            names.push(name);
            gauge(r, name, help)
        };
        let f = Families {
            up: g("instance_up", "The instance manager answered the last poll"),
            ready: g("instance_ready", "The instance is ready to serve its role"),
            primary: g("instance_primary", "The instance runs as the primary"),
            read_only: g("instance_read_only", "The server refuses writes"),
            fenced: g("instance_fenced", "The instance is fenced"),
            diverged: g(
                "instance_diverged",
                "The instance is kept out: its GTID history diverged",
            ),
            lag: g(
                "instance_replication_lag_seconds",
                "Seconds the replica's applier is behind its source",
            ),
            semi_waiting: g(
                "instance_semi_sync_waiting",
                "The primary waits for semi-sync acknowledgements (not fallen back)",
            ),
            semi_clients: g(
                "instance_semi_sync_clients",
                "Replicas connected to the primary as semi-sync acknowledgers",
            ),
            uptime: g(
                "instance_mysqld_uptime_seconds",
                "Seconds since the instance's mysqld started",
            ),
            cert_expiry: g(
                "instance_certificate_expiry_timestamp_seconds",
                "When the first of the instance manager's certificate and the cluster CA expires",
            ),
            last_transaction: g(
                "instance_last_transaction_timestamp_seconds",
                "When the manager last saw the server's GTID history grow: the primary's last committed write, a replica's last applied transaction",
            ),
            operator_cert_expiry: g(
                "cluster_operator_certificate_expiry_timestamp_seconds",
                "When the operator's client certificate for the cluster expires",
            ),
            current: g(
                "instance_manager_current",
                "The instance manager runs the operator's executable (0: an upgrade is due)",
            ),
            stale_n: g(
                "cluster_stale_instances",
                "Instances a rollout still has to bring up to date (older manager or outdated definition)",
            ),
            instances: g("cluster_instances", "Instances the Cluster declares"),
            ready_n: g("cluster_ready_instances", "Instances ready"),
            failing: g(
                "cluster_primary_failing",
                "A failing primary is being timed for failover",
            ),
            changing: g(
                "cluster_primary_changing",
                "A switchover or failover is in progress",
            ),
            phase: g(
                "cluster_phase",
                "The cluster's phase (1 for the current one)",
            ),
            updated_n: g(
                "cluster_updated_instances",
                "Instances a rollout has brought up to date (manager, definition, server image)",
            ),
            last_step: g(
                "cluster_rollout_last_step_timestamp_seconds",
                "When a rollout last gave an instance a step (Unix seconds)",
            ),
            target_info: g(
                "cluster_rollout_target_info",
                "What rollouts bring instances to: the server image and version, the manager's hash",
            ),
            upgrade_phase: g(
                "cluster_server_upgrade_phase",
                "The phase of the latest server version upgrade (1 for the current one)",
            ),
            server_version: g(
                "instance_server_version_info",
                "The server version the instance runs",
            ),
            annotated: g(
                "instance_annotated_upgrade_status",
                "The instance's upgrade asked by cnmysql.io/upgrade-to: 1 for its status (in-progress, failed, done)",
            ),
            attempts: g(
                "instance_annotated_upgrade_attempts",
                "Attempts made at the instance's upgrade asked by cnmysql.io/upgrade-to",
            ),
            orchestrated: g(
                "cluster_orchestrated_upgrade_status",
                "The upgrade the Cluster's cnmysql.io/upgrade-to asks: 1 for its status (in-progress, failed, done)",
            ),
            archive_lag: g(
                "instance_archive_lag_seconds",
                "How far behind the clock the binlog archive is known to be complete",
            ),
            archive_failing: g(
                "instance_archive_failing",
                "1 while the primary's binlog archiving cannot store what it reads",
            ),
            archived_bytes: g(
                "instance_archived_bytes",
                "Binary log bytes the primary's current archiving run has stored",
            ),
            backup_ok: g(
                "cluster_backup_last_success_timestamp_seconds",
                "When the last successful base backup stopped (Unix seconds)",
            ),
            backup_failed: g(
                "cluster_backup_last_failure_timestamp_seconds",
                "When the last failed base backup stopped (Unix seconds)",
            ),
            backup_duration: g(
                "cluster_backup_last_duration_seconds",
                "How long the last successful base backup took",
            ),
            backup_bytes: g(
                "cluster_backup_last_stored_bytes",
                "Bytes the last successful base backup took in the store",
            ),
            counted: Family::<Labels, Counter>::default(),
            server: crate::server_metrics::ServerFamilies::register(r, &mut server_names),
            replica: crate::replica_metrics::ReplicaFamilies::register(r, &mut server_names),
            volumes: crate::volume_metrics::VolumeFamilies::register(r, &mut server_names),
        };
        r.register(
            "events",
            "Events recorded since the cluster was created, by reason",
            f.counted.clone(),
        );
        let mut names: Vec<String> = names.into_iter().map(String::from).collect();
        names.extend(server_names);
        names.push("events_total".into());
        (f, names)
    }
}

/// Every series name this module can export (`cnmysql_…`): what alert
/// rules and dashboards may name.
pub fn metric_names() -> Vec<String> {
    let (_, names) = Families::register_named(&mut Registry::default());
    names.iter().map(|n| format!("cnmysql_{n}")).collect()
}

#[cfg(test)]
mod tests;
