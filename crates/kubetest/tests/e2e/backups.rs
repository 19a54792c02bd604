//! Backup objects, the archive, and a recovered cluster.

use super::*;

/// The `objectStore` of a Cluster's backup section on `s3`, indented.
pub(crate) fn object_store(s3: &cnmysql_envtest::object_store::S3Server, indent: &str) -> String {
    format!(
        "{indent}destinationPath: s3://{}/e2e\n{indent}endpointURL: {}\n{indent}pathStyle: true\n{indent}s3Credentials:\n{indent}  accessKeyId: {{name: store, key: ACCESS_KEY_ID}}\n{indent}  secretAccessKey: {{name: store, key: SECRET_ACCESS_KEY}}\n",
        s3.bucket, s3.endpoint
    )
}

/// A cluster whose `spec.backup` stores into a real S3 server (SeaweedFS)
/// on an address of this machine the Pods reach, with its credentials in
/// the Secret `store`: `cluster` is the Cluster's YAML, `extra` more
/// lines under `backup:`. The server stops when dropped.
pub(crate) async fn env_with_store(
    bucket: &str,
    cluster: String,
    extra: &str,
) -> (Env, cnmysql_envtest::object_store::S3Server) {
    let mut server = None;
    let e = env_made_with(&[], async |host| {
        let s3 = cnmysql_envtest::object_store::S3Server::start_at(bucket, host)
            .await
            .unwrap();
        let manifest = format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: store\n  namespace: {NS}\nstringData:\n  ACCESS_KEY_ID: {}\n  SECRET_ACCESS_KEY: {}\n---\n{cluster}  backup:\n    objectStore:\n{}{extra}",
            cnmysql_envtest::object_store::ACCESS_KEY_ID,
            cnmysql_envtest::object_store::SECRET_ACCESS_KEY,
            object_store(&s3, "      ")
        );
        server = Some(s3);
        manifest
    })
    .await;
    (e, server.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn backup_objects_archive_and_a_recovered_cluster_hold_every_acknowledged_row() {
    let (e, _s3) = env_with_store(
        "backups",
        cluster_yaml("required"),
        "    retentionPolicy: 30d\n",
    )
    .await;
    let w = e.writer().await;
    w.wait_for_more(200, Duration::from_secs(30)).await;

    let primary = a_backup_object_is_taken_once(&e).await;
    let (made, from) = a_scheduled_backup_takes_one_at_once(&e, &primary).await;
    w.wait_for_more(200, Duration::from_secs(30)).await;
    let o = w.stop().await;
    the_archive_passes_the_last_write(&e).await;
    a_recovery_from_a_backup_not_made_yet_waits(&e).await;
    a_recovered_cluster_holds_every_acknowledged_row(&e, &made, &from, &o).await;
}

/// A Backup object, taken once, as a user asks for one: the plugin creates
/// it and follows it to the end. The primary it was taken from.
async fn a_backup_object_is_taken_once(e: &Env) -> String {
    use cnmysql_api::backup_resources::Backup;
    // creates it and follows it to the end.
    let backups: Api<Backup> = Api::namespaced(e.k.client.clone(), NS);
    let said = e.plugin(&[
        "cnmsql",
        "-n",
        NS,
        "backup",
        "db",
        "--backup-target",
        "primary",
        "--backup-name",
        "first",
    ]);
    assert!(
        said.starts_with("backup ") && said.contains("consistent with"),
        "{said}"
    );
    let done = until(
        "the Backup to complete",
        Duration::from_secs(120),
        || async {
            let st = backups.get("first").await.ok()?.status?;
            assert_ne!(st.phase, "failed", "{st:?}");
            (st.phase == "completed").then_some(st)
        },
    )
    .await
    .unwrap();
    eprintln!(
        "Backup first: {} of {}, {} bytes stored as {}, consistent with {} ({}; {})",
        done.backup_id,
        done.instance,
        done.raw_bytes,
        done.stored_bytes,
        done.gtid,
        done.message,
        done.progress
    );
    let primary = e.status().await.current_primary.unwrap();
    assert_eq!(done.instance, primary, "target primary: {done:?}");
    assert!(done.progress.starts_with("completed: "), "{done:?}");
    primary
}

/// A ScheduledBackup asked to take one at once, from a ready replica (its
/// default target): the Backup's name and status.
async fn a_scheduled_backup_takes_one_at_once(
    e: &Env,
    primary: &str,
) -> (String, cnmysql_api::backup_resources::BackupObjectStatus) {
    use cnmysql_api::backup_resources::{Backup, ScheduledBackup};
    use kube::api::PostParams;
    let backups: Api<Backup> = Api::namespaced(e.k.client.clone(), NS);
    let scheduled: Api<ScheduledBackup> = Api::namespaced(e.k.client.clone(), NS);
    let sb: ScheduledBackup = serde_json::from_value(serde_json::json!({
        "apiVersion": "mysql.cnmysql.io/v1", "kind": "ScheduledBackup",
        "metadata": {"name": "nightly"},
        "spec": {"cluster": {"name": "db"}, "schedule": "0 3 * * *", "immediate": true}
    }))
    .unwrap();
    scheduled.create(&PostParams::default(), &sb).await.unwrap();
    let made = until("the scheduled Backup", Duration::from_secs(120), || async {
        let st = scheduled.get("nightly").await.ok()?.status?;
        let name = st.last_backup_name.clone();
        let b = backups.get(&name).await.ok()?.status?;
        (b.phase == "completed" && !st.next_schedule_time.is_empty()).then_some((name, st))
    })
    .await
    .unwrap();
    let from = backups.get(&made.0).await.unwrap().status.unwrap();
    eprintln!(
        "ScheduledBackup nightly made {} from {} ({}); next at {}",
        made.0, from.instance, from.message, made.1.next_schedule_time
    );
    // Its default target, prefer-replica: a ready replica, not the primary.
    assert_ne!(from.instance, primary, "{from:?}");
    assert!(
        from.message.contains("most caught-up ready replica"),
        "{from:?}"
    );
    (made.0, from)
}

/// Continuous archiving passes the last write, and the status says so.
async fn the_archive_passes_the_last_write(e: &Env) {
    let stopped = jiff::Timestamp::now();
    let seen = std::sync::Mutex::new(String::new());
    let passed = until(
        "the archive to pass the last write",
        Duration::from_secs(90),
        || async {
            let st = e.status().await;
            *seen.lock().unwrap() = format!(
                "{:?} {:?}",
                st.backup.as_ref().and_then(|b| b.archive.as_ref()),
                st.conditions
                    .iter()
                    .find(|c| c.type_ == "ContinuousArchiving")
            );
            let until: jiff::Timestamp = st.backup?.archive?.complete_until.parse().ok()?;
            let on = st
                .conditions
                .iter()
                .any(|c| c.type_ == "ContinuousArchiving" && c.status == "True");
            (on && until > stopped).then_some(())
        },
    )
    .await;
    if let Err(e) = passed {
        panic!(
            "{e} (stopped at {stopped}); last seen: {}",
            seen.lock().unwrap()
        );
    }
    let st = e.status().await.backup.unwrap();
    assert!(st.last_successful_backup.is_some(), "{st:?}");
}

/// A Cluster naming a Backup that does not exist: not invalid, blocked,
/// saying why, and nothing made.
async fn a_recovery_from_a_backup_not_made_yet_waits(e: &Env) {
    use kube::api::PostParams;
    // saying why, and nothing made.
    let waiting = cnmysql_kubetest::cluster_manifest(NS, "waiting", "required")
        .replace("instances: 3", "instances: 2")
        + "  bootstrap:\n    recovery:\n      source:\n        backup: {name: not-yet}\n";
    let c = cnmysql_api::parse_cluster(&waiting).unwrap();
    e.clusters.create(&PostParams::default(), &c).await.unwrap();
    let why = until(
        "the blocked recovery in the status",
        Duration::from_secs(60),
        || async {
            let st = e.k.cluster_status(NS, "waiting").await.ok()?;
            st.conditions
                .iter()
                .find(|c| c.type_ == "Ready" && c.reason == "RecoverySourceNotReady")
                .map(|c| (st.phase, c.message.clone()))
        },
    )
    .await
    .unwrap();
    assert_eq!(why.0, Some(cnmysql_api::Phase::Degraded), "{why:?}");
    assert!(why.1.contains("there is no Backup not-yet"), "{why:?}");
    assert!(e.pods.get_opt("waiting-1").await.unwrap().is_none());
    e.clusters
        .delete("waiting", &Default::default())
        .await
        .unwrap();
}

/// A new Cluster recovered from the scheduled Backup object (its store and
/// id, resolved by the operator) and the archive after it: every
/// acknowledged row.
async fn a_recovered_cluster_holds_every_acknowledged_row(
    e: &Env,
    made: &str,
    from: &cnmysql_api::backup_resources::BackupObjectStatus,
    o: &cnmysql_workload::writer::Outcome,
) {
    use kube::api::PostParams;
    // and id, resolved by the operator) and the archive after it: every
    // acknowledged row.
    let restored = cnmysql_kubetest::cluster_manifest(NS, "restored", "required")
        .replace("instances: 3", "instances: 2")
        + &format!(
            "  bootstrap:\n    recovery:\n      source:\n        backup: {{name: {}}}\n",
            made
        );
    let c = cnmysql_api::parse_cluster(&restored).unwrap();
    e.clusters.create(&PostParams::default(), &c).await.unwrap();
    e.k.wait_healthy(NS, "restored", 2, Duration::from_secs(240))
        .await
        .unwrap();
    let all = ["restored-1", "restored-2"].map(String::from).to_vec();
    let missing =
        e.k.rows_missing(NS, "restored", &all, &o.acked)
            .await
            .unwrap();
    assert_eq!(
        missing, 0,
        "acknowledged rows missing from the recovered Cluster"
    );
    let rec = until(
        "the recovery in the status",
        Duration::from_secs(60),
        || async {
            e.k.cluster_status(NS, "restored")
                .await
                .ok()?
                .backup?
                .recovered
        },
    )
    .await
    .unwrap();
    assert_eq!(rec.backup_id, from.backup_id, "the Backup named: {rec:?}");
    eprintln!(
        "recovered from {} to {} ({} replayed), {} acknowledged rows all there",
        rec.backup_id,
        rec.gtid,
        rec.replayed,
        o.acked.len()
    );
}
