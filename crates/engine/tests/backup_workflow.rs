//! The backup workflow (`cnmysql_engine::backup`) with an in-memory
//! platform and a real file store: what is recorded and said when a
//! backup cannot begin, when no instance serves it, and what retention
//! deletes. A backup that streams is proven against real managers by the
//! local (`crates/cnmysql/tests/backup_recovery.rs`) and Kubernetes suites.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use cnmysql_api::backup::BackupRecord;
use cnmysql_api::backup_resources::BackupTarget;
use cnmysql_api::{Cluster, ClusterStatus, Flavor};
use cnmysql_backup::base_backup::{Manifest, write_manifest};
use cnmysql_backup::destination::Destination;
use cnmysql_control::base_backup::Source;
use cnmysql_control::client::ControlClient;
use cnmysql_core::event::Event;
use cnmysql_core::status::CloneProgress;
use cnmysql_core::status_change::StatusChange;
use cnmysql_engine::backup::{BackupPlatform, Request, retain, take};

struct Memory {
    /// The file store (kept until the test ends).
    _store: tempfile::TempDir,
    pki: tempfile::TempDir,
    cluster: Cluster,
    addresses: BTreeMap<String, (String, u16)>,
    changes: Vec<StatusChange>,
    events: Vec<Event>,
    started: Vec<String>,
    progress: Mutex<Vec<CloneProgress>>,
}

impl Memory {
    fn new(retention: Option<&str>) -> Memory {
        let store = tempfile::tempdir().unwrap();
        let mut backup = serde_json::json!({
            "objectStore": {"destinationPath": format!("file://{}", store.path().display())}
        });
        if let Some(r) = retention {
            backup["retentionPolicy"] = r.into();
        }
        let cluster: Cluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "mysql.cnmysql.io/v1", "kind": "Cluster",
            "metadata": {"name": "db"},
            "spec": {"instances": 2, "backup": backup}
        }))
        .unwrap();
        Memory {
            _store: store,
            pki: tempfile::tempdir().unwrap(),
            cluster,
            addresses: BTreeMap::new(),
            changes: Vec::new(),
            events: Vec::new(),
            started: Vec::new(),
            progress: Mutex::default(),
        }
    }

    fn dest(&self) -> Destination {
        let spec = &self.cluster.spec.backup.as_ref().unwrap().object_store;
        cnmysql_backup::destination::open_for_cluster(spec, None, "db").unwrap()
    }

    fn reasons(&self) -> Vec<&str> {
        self.events.iter().map(|e| e.reason).collect()
    }
}

impl BackupPlatform for Memory {
    async fn destination(&mut self) -> Result<Destination, String> {
        Ok(self.dest())
    }

    async fn client(&mut self) -> Result<ControlClient, String> {
        let ca = cnmysql_tls::Ca::generate("db").unwrap();
        let id = ca.issue("cnmysql-operator", &[]).unwrap();
        let paths = cnmysql_tls::TlsPaths::in_dir(self.pki.path(), "operator");
        paths.write(&ca, &id).unwrap();
        let m = paths.load().unwrap();
        Ok(ControlClient::new(m.client_config().unwrap()))
    }

    async fn address(&mut self, instance: &str) -> Result<Option<(String, u16)>, String> {
        Ok(self.addresses.get(instance).cloned())
    }

    async fn change_status(&mut self, change: &StatusChange) -> anyhow::Result<bool> {
        self.changes.push(change.clone());
        Ok(true)
    }

    async fn record(&mut self, event: &Event) {
        self.events.push(event.clone());
    }

    async fn started(&mut self, id: &str, _: &Destination, first: &Source) -> Result<(), String> {
        self.started.push(format!("{id} on {}", first.instance));
        Ok(())
    }

    async fn progress(&self, p: CloneProgress) {
        self.progress.lock().unwrap().push(p);
    }
}

fn status(primary: Option<&str>) -> ClusterStatus {
    ClusterStatus {
        current_primary: primary.map(str::to_string),
        ..Default::default()
    }
}

fn request<'a>(cluster: &'a Cluster, st: &'a ClusterStatus, name: Option<&'a str>) -> Request<'a> {
    Request {
        cluster,
        status: st,
        target: BackupTarget::Primary,
        name,
        every: Duration::from_millis(100),
    }
}

#[tokio::test]
async fn a_backup_that_cannot_begin_is_refused_in_one_event_and_not_recorded() {
    let mut p = Memory::new(None);
    let st = status(None);
    let cluster = p.cluster.clone();
    let r = request(&cluster, &st, Some("nightly"));
    let why = take(&mut p, &r).await.err().unwrap();
    assert!(why.contains("no primary"), "{why}");
    assert_eq!(p.reasons(), ["BackupFailed"]);
    assert_eq!(p.events[0].message, format!("backup nightly failed: {why}"));
    assert!(p.events[0].warning);
    assert!(p.changes.is_empty() && p.started.is_empty());

    // A primary without an address (no Pod IP yet) cannot be backed up.
    let st = status(Some("db-1"));
    let r = Request { status: &st, ..r };
    let why = take(&mut p, &r).await.err().unwrap();
    assert!(
        why.contains("no instance of the cluster has an address"),
        "{why}"
    );
    assert_eq!(p.reasons(), ["BackupFailed", "BackupFailed"]);
}

#[tokio::test]
async fn a_backup_no_instance_serves_is_recorded_as_failed_and_retention_does_not_run() {
    let mut p = Memory::new(Some("1h"));
    // Nothing listens there.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    p.addresses
        .insert("db-1".into(), ("127.0.0.1".into(), port));
    let st = status(Some("db-1"));
    let cluster = p.cluster.clone();
    let r = request(&cluster, &st, None);
    let o = take(&mut p, &r).await.unwrap();
    assert!(!o.completed());
    assert_eq!(p.started, [format!("{} on db-1", o.id)]);
    let rec = &o.taken.manifest.record;
    assert_eq!(
        (rec.phase.as_str(), rec.instance.as_str()),
        ("failed", "db-1")
    );
    assert!(rec.error.contains("cannot be reached"), "{}", rec.error);
    // Recorded as the last failed backup; no retention after a failure.
    assert!(
        matches!(&p.changes[..], [StatusChange::BackupTaken(r)] if r.phase == "failed"),
        "{:?}",
        p.changes
    );
    assert!(o.pruned.is_none());
    assert_eq!(p.reasons(), ["BackupFailed"]);
    let e = &p.events[0];
    assert_eq!(e.instance.as_deref(), Some("db-1"));
    assert!(
        e.message
            .starts_with(&format!("base backup {} of db-1 failed: ", o.id)),
        "{}",
        e.message
    );
    // Its manifest is in the store, saying why.
    let listed = cnmysql_backup::base_backup::list(&p.dest()).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].record.phase, "failed");
}

fn done(id: &str, stopped: &str) -> Manifest {
    Manifest {
        record: BackupRecord {
            id: id.into(),
            phase: "completed".into(),
            instance: "db-1".into(),
            started_at: stopped.into(),
            stopped_at: stopped.into(),
            gtid: "0-1-10".into(),
            ..Default::default()
        },
        flavor: Flavor::Mariadb,
        format: "mbstream".into(),
        key: String::new(),
        sha256: String::new(),
        server_version: String::new(),
    }
}

#[tokio::test]
async fn retention_deletes_what_is_old_moves_the_first_point_and_says_what_went() {
    let mut p = Memory::new(None);
    let dest = p.dest();
    write_manifest(&dest, &done("20261101T000000Z", "2026-11-01T00:10:00Z"))
        .await
        .unwrap();
    write_manifest(&dest, &done("20261120T000000Z", "2026-11-20T00:10:00Z"))
        .await
        .unwrap();
    let now: jiff::Timestamp = "2026-11-26T00:00:00Z".parse().unwrap();
    // Nothing older than 30 days: nothing goes, nothing is said.
    let kept = retain(&mut p, &dest, Flavor::Mariadb, "30d", now)
        .await
        .unwrap();
    assert!(kept.is_empty());
    assert!(p.events.is_empty() && p.changes.is_empty());
    // 10 days: the first goes; the newest stays however old.
    let pruned = retain(&mut p, &dest, Flavor::Mariadb, "10d", now)
        .await
        .unwrap();
    assert_eq!(pruned.backups, ["20261101T000000Z"]);
    assert_eq!(
        p.changes,
        [StatusChange::FirstRecoverabilityPoint(
            "2026-11-20T00:10:00Z".into()
        )]
    );
    assert_eq!(p.reasons(), ["BackupsPruned"]);
    assert!(p.events[0].message.contains("20261101T000000Z"));
    let left = retain(&mut p, &dest, Flavor::Mariadb, "1h", now)
        .await
        .unwrap();
    assert!(
        left.is_empty(),
        "the newest completed backup is kept: {left:?}"
    );
    let bad = retain(&mut p, &dest, Flavor::Mariadb, "monthly", now).await;
    assert!(format!("{:#}", bad.unwrap_err()).contains("spec.backup.retentionPolicy"));
}
