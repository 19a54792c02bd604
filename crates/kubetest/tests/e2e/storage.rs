//! Claims grown in place, binary logs on claims of their own.

use super::*;

/// The test Cluster with these `spec.storage` lines (YAML under
/// `storage:`), ready.
async fn env_with_storage(storage: &str) -> Env {
    let yaml = cluster_yaml("required").replace(
        "  failoverDelay: 0\n",
        &format!("  failoverDelay: 0\n  storage:\n{storage}"),
    );
    env_with_manifest(&yaml, &[]).await
}

/// Each claim's requested size and capacity (`status.capacity`).
pub(crate) async fn claim_sizes(e: &Env) -> std::collections::BTreeMap<String, (String, String)> {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(e.k.client.clone(), NS);
    let list = claims.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .map(|c| {
            let name = c.metadata.name.clone().unwrap_or_default();
            let asked = c
                .spec
                .and_then(|s| s.resources?.requests?.get("storage").map(|q| q.0.clone()))
                .unwrap_or_default();
            let has = c
                .status
                .and_then(|s| s.capacity?.get("storage").map(|q| q.0.clone()))
                .unwrap_or_default();
            (name, (asked, has))
        })
        .collect()
}

/// Some more writes, then the writer's outcome: none failed while the
/// claims grew, no instance restarted, every acknowledged row on every
/// instance.
async fn no_write_failed_nor_restart(
    e: &Env,
    w: WriteChecker,
) -> cnmysql_workload::writer::Outcome {
    w.wait_for_more(20, Duration::from_secs(30)).await;
    let o = w.stop().await;
    assert_eq!(o.errors, 0, "writes failed while the claims grew");
    for n in ["db-1", "db-2", "db-3"] {
        assert_eq!(e.restarts(n).await, 0, "{n} was restarted");
    }
    e.verify(&o.acked).await;
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn raising_the_storage_size_grows_the_claims_one_at_a_time_and_shrinking_is_refused()
 {
    let e = env("required").await;
    let primary = e.status().await.current_primary.unwrap();
    let w = e.writer().await;
    w.wait_for_more(50, Duration::from_secs(30)).await;
    e.patch_cluster(r#"{"spec":{"storage":{"size":"2Gi"}}}"#);
    // Watch the claims: never two growing at once, the primary's last.
    let seen = std::sync::Mutex::new(Vec::<String>::new());
    let grown = until("every claim at 2Gi", Duration::from_secs(180), || async {
        let sizes = claim_sizes(&e).await;
        let growing = sizes.values().filter(|(asked, has)| asked != has).count();
        assert!(growing <= 1, "two claims growing at once: {sizes:?}");
        let mut order = seen.lock().unwrap();
        for (n, (asked, _)) in &sizes {
            if asked == "2Gi" && !order.contains(n) {
                order.push(n.clone());
            }
        }
        sizes
            .values()
            .all(|(a, h)| a == "2Gi" && h == "2Gi")
            .then_some(())
    })
    .await;
    let order = seen.into_inner().unwrap();
    grown.unwrap_or_else(|err| panic!("{err}: {order:?}\n{}", e.k.diagnose(NS, "db")));
    assert_eq!(
        order.last(),
        Some(&primary),
        "the primary's claim last: {order:?}"
    );
    let condition = |st: &cnmysql_api::ClusterStatus| {
        st.conditions
            .iter()
            .find(|c| c.type_ == "StorageExpanding")
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    until(
        "the condition to say done",
        Duration::from_secs(30),
        || async {
            let c = condition(&e.status().await)?;
            (c.0 == "False" && c.1 == "AsRequested").then_some(())
        },
    )
    .await
    .unwrap();
    // Smaller than the claims: refused, naming the field; nothing touched.
    e.patch_cluster(r#"{"spec":{"storage":{"size":"1Gi"}}}"#);
    let refused = until("the shrink refused", Duration::from_secs(30), || async {
        let c = condition(&e.status().await)?;
        (c.1 == "Refused").then_some(c.2)
    })
    .await
    .unwrap();
    assert!(
        refused.contains("spec.storage.size is 1Gi") && refused.contains("cannot shrink"),
        "{refused}"
    );
    assert!(e.events_named("StorageExpansionRefused").await >= 1);
    assert!(claim_sizes(&e).await.values().all(|(a, _)| a == "2Gi"));
    let o = no_write_failed_nor_restart(&e, w).await;
    eprintln!(
        "storage growth order: {order:?}; {} rows acknowledged",
        o.acked.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn binary_logs_on_claims_of_their_own_are_written_there_and_grow_apart_from_the_data()
 {
    let e = env_with_storage("    binlogs:\n      size: 1Gi\n").await;
    let sizes = claim_sizes(&e).await;
    for n in ["db-1", "db-2", "db-3"] {
        assert!(sizes.contains_key(&format!("{n}-binlog")), "{sizes:?}");
    }
    let rw = e.k.wait_service(NS, "db-rw").await.unwrap();
    let mut conn = e.admin(rw).await;
    let base: Option<String> = conn.query_first("SELECT @@log_bin_basename").await.unwrap();
    assert_eq!(
        base.as_deref(),
        Some("/var/lib/cnmysql-binlog/binlog/mysql-bin")
    );
    drop(conn);
    let w = e.writer().await;
    w.wait_for_more(50, Duration::from_secs(30)).await;
    e.patch_cluster(r#"{"spec":{"storage":{"binlogs":{"size":"2Gi"}}}}"#);
    let grown = until(
        "the binlog claims at 2Gi",
        Duration::from_secs(180),
        || async {
            let sizes = claim_sizes(&e).await;
            sizes
                .iter()
                .all(|(n, (a, h))| {
                    let want = if n.ends_with("-binlog") { "2Gi" } else { "1Gi" };
                    a == want && h == want
                })
                .then_some(())
        },
    )
    .await;
    if let Err(err) = grown {
        panic!(
            "{err}: {:?}\n{}",
            claim_sizes(&e).await,
            e.k.diagnose(NS, "db")
        );
    }
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let o = w.stop().await;
    assert_eq!(o.errors, 0, "writes failed while the binlog claims grew");
    e.healthy(3, Duration::from_secs(30)).await;
    e.verify(&o.acked).await;
}

/// A writer that fills the database through `rw` with 1 MiB rows, four a
/// second (data and binary log both land on the data volume), until
/// stopped; it connects again after an error and keeps what went wrong.
struct Filler {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    /// Rows written, and each failure's message.
    written: std::sync::Arc<std::sync::atomic::AtomicU64>,
    errors: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Filler {
    fn start(rw: std::net::SocketAddr, password: String) -> Filler {
        use std::sync::atomic::Ordering;
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let written = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let errors = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (w, errs) = (written.clone(), errors.clone());
        let task = tokio::spawn(async move {
            let opts = cnmysql_workload::writer::app_opts_at(rw, password);
            let mut conn: Option<mysql_async::Conn> = None;
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.changed() => return,
                }
                if conn.is_none() {
                    conn = cnmysql_kubetest::connect_within(opts.clone()).await.ok();
                }
                let Some(c) = conn.as_mut() else { continue };
                let r = async {
                    c.query_drop("CREATE TABLE IF NOT EXISTS app.fill (id INT AUTO_INCREMENT PRIMARY KEY, b LONGBLOB) ENGINE=InnoDB").await?;
                    c.query_drop("INSERT INTO app.fill (b) VALUES (REPEAT('x', 1048576))")
                        .await
                };
                match tokio::time::timeout(Duration::from_secs(10), r).await {
                    Ok(Ok(())) => {
                        w.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Err(e)) => {
                        errs.lock().unwrap().push(e.to_string());
                        conn = None;
                    }
                    Err(_) => {
                        errs.lock().unwrap().push("no answer within 10 s".into());
                        conn = None;
                    }
                }
            }
        });
        Filler {
            stop,
            task,
            written,
            errors,
        }
    }

    fn written(&self) -> u64 {
        self.written.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn errors(&self) -> Vec<String> {
        self.errors.lock().unwrap().clone()
    }

    /// Stop; rows written and the failures.
    async fn stop(self) -> (u64, Vec<String>) {
        let _ = self.stop.send(true);
        let written = self.written.clone();
        let errors = self.errors.clone();
        let _ = self.task.await;
        let n = written.load(std::sync::atomic::Ordering::Relaxed);
        let e = errors.lock().unwrap().clone();
        (n, e)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn a_filling_volume_grows_before_it_fills_replicas_first_up_to_its_maximum() {
    let e = env_with_storage("    size: 768Mi\n    autoGrow:\n      usedPercent: 50\n      increment: 256Mi\n      maximum: 1280Mi\n").await;
    let primary = e.status().await.current_primary.unwrap();
    // Real, size-limited file systems: each instance measures about 768Mi.
    let measured = until(
        "every instance's data volume measured",
        Duration::from_secs(30),
        || async {
            let st = e.status().await;
            let sizes: Vec<u64> = st
                .instance_states
                .values()
                .filter_map(|s| {
                    s.volumes
                        .iter()
                        .find(|v| v.volume == "data")
                        .map(|v| v.size_bytes)
                })
                .collect();
            (sizes.len() == 3).then_some(sizes)
        },
    )
    .await
    .unwrap();
    assert!(
        measured.iter().all(|s| *s > 600 << 20 && *s <= 768 << 20),
        "{measured:?}"
    );
    let w = e.writer().await;
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let rw = e.k.wait_service(NS, "db-rw").await.unwrap();
    let fill = Filler::start(rw, e.app_password().await);
    // Watch the claims: never two growing at once; per size, the primary's
    // claim last.
    let steps = std::sync::Mutex::new(Vec::<(String, String)>::new());
    let grown = until(
        "every data claim grown to 1280Mi",
        Duration::from_secs(400),
        || async {
            let sizes = claim_sizes(&e).await;
            let growing = sizes.values().filter(|(asked, has)| asked != has).count();
            assert!(growing <= 1, "two claims growing at once: {sizes:?}");
            let mut seen = steps.lock().unwrap();
            for (n, (asked, _)) in &sizes {
                let step = (n.clone(), asked.clone());
                if asked != "768Mi" && !seen.contains(&step) {
                    seen.push(step);
                }
            }
            sizes
                .values()
                .all(|(a, h)| a == "1280Mi" && h == "1280Mi")
                .then_some(())
        },
    )
    .await;
    let steps = steps.into_inner().unwrap();
    grown.unwrap_or_else(|err| panic!("{err}: {steps:?}\n{}", e.k.diagnose(NS, "db")));
    for size in ["1Gi", "1280Mi"] {
        let order: Vec<&String> = steps
            .iter()
            .filter(|(_, s)| s == size)
            .map(|(n, _)| n)
            .collect();
        assert_eq!(order.len(), 3, "{steps:?}");
        assert_eq!(
            order.last(),
            Some(&&primary),
            "the primary's claim last at {size}: {steps:?}"
        );
    }
    // Past the threshold at the maximum: a warning, and no step further.
    let at_max = until(
        "the maximum reached and said",
        Duration::from_secs(300),
        || async {
            let st = e.status().await;
            let c = st
                .conditions
                .iter()
                .find(|c| c.type_ == "StorageExpanding")?;
            (c.reason == "AtMaximum").then(|| c.message.clone())
        },
    )
    .await
    .unwrap_or_else(|err| panic!("{err}\n{}", e.k.diagnose(NS, "db")));
    let (written, failed) = fill.stop().await;
    assert!(
        at_max.contains("at spec.storage.autoGrow.maximum (1280Mi)"),
        "{at_max}"
    );
    assert!(e.events_named("StorageAtMaximum").await >= 1);
    assert!(claim_sizes(&e).await.values().all(|(a, _)| a == "1280Mi"));
    let st = e.status().await;
    assert_eq!(st.volume_growth.len(), 6, "{:?}", st.volume_growth);
    // Each size's first claim says how full a volume was; the others
    // follow that step.
    for (i, s) in st.volume_growth.iter().enumerate() {
        let why = if i % 3 == 0 {
            "full, past spec.storage.autoGrow.usedPercent (50%)"
        } else {
            "spec.storage.autoGrow's step: every data claim to"
        };
        assert!(s.reason.contains(why), "{:?}", st.volume_growth);
    }
    let table = e.plugin(&["cnmsql", "-n", NS, "status", "db"]);
    assert!(
        table.contains("STORAGE USED") && table.contains("data "),
        "{table}"
    );
    assert!(
        failed.is_empty(),
        "a fill insert failed: the volume filled before it grew: {failed:?}"
    );
    let o = no_write_failed_nor_restart(&e, w).await;
    eprintln!(
        "autoGrow: {written} MiB filled, steps {steps:?}, {} rows acknowledged",
        o.acked.len()
    );
}

/// Writes are taken again by themselves: the status lets go and the
/// filler writes again.
async fn writes_taken_again(e: &Env, fill: &Filler, before: u64) {
    until("writes taken again", Duration::from_secs(180), || async {
        let st = e.status().await;
        (st.writes_refused.is_none() && fill.written() > before + 5).then_some(())
    })
    .await
    .unwrap_or_else(|err| panic!("{err}\n{}", e.k.diagnose(NS, "db")));
}

/// After writes were refused: all instances ready, the same primary, no
/// instance restarted, every acknowledged row on every instance (writes
/// refused while full are failures, not losses).
async fn back_with_the_same_primary(
    e: &Env,
    w: WriteChecker,
    primary: &str,
) -> cnmysql_workload::writer::Outcome {
    e.healthy(3, Duration::from_secs(60)).await;
    w.wait_for_more(20, Duration::from_secs(30)).await;
    let o = w.stop().await;
    assert_eq!(e.status().await.current_primary.as_deref(), Some(primary));
    for n in ["db-1", "db-2", "db-3"] {
        assert_eq!(e.restarts(n).await, 0, "{n} was restarted");
    }
    e.verify(&o.acked).await;
    o
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn a_full_volume_refuses_writes_plainly_loses_nothing_and_takes_them_again_once_grown()
 {
    let e = env_with_storage("    size: 768Mi\n").await;
    let primary = e.status().await.current_primary.unwrap();
    let w = e.writer().await;
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let rw = e.k.wait_service(NS, "db-rw").await.unwrap();
    let fill = Filler::start(rw, e.app_password().await);
    // No policy: the volumes fill until the guard refuses writes.
    let refused = until(
        "writes refused for a nearly full volume",
        Duration::from_secs(400),
        || async { e.status().await.writes_refused },
    )
    .await
    .unwrap_or_else(|err| panic!("{err}\n{}", e.k.diagnose(NS, "db")));
    let refused_at = Instant::now();
    assert!(
        refused.contains("volume has") && refused.contains("left"),
        "{refused}"
    );
    // Clients are told plainly: the server is read-only.
    let said = until("a fill insert refused", Duration::from_secs(30), || async {
        fill.errors()
            .into_iter()
            .find(|m| m.contains("read-only") || m.contains("read_only") || m.contains("1290"))
    })
    .await
    .unwrap_or_else(|err| panic!("{err}: {:?}", fill.errors()));
    let st = e.status().await;
    assert_eq!(st.phase, Some(cnmysql_api::Phase::Degraded));
    assert!(
        st.phase_reason
            .as_deref()
            .is_some_and(|r| r.contains("writes refused")),
        "{:?}",
        st.phase_reason
    );
    // Held for 15 s, watched every second: no failover, writes still
    // refused, no volume reaches ENOSPC.
    let held = Instant::now();
    while held.elapsed() < Duration::from_secs(15) {
        let st = e.status().await;
        assert_eq!(st.current_primary.as_deref(), Some(primary.as_str()));
        assert!(st.writes_refused.is_some(), "let go without room: {st:?}");
        for (n, s) in &st.instance_states {
            for v in &s.volumes {
                assert!(
                    v.available_bytes > 0,
                    "{n}'s {} volume filled: {v:?}",
                    v.volume
                );
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    for n in ["db-1", "db-2", "db-3"] {
        assert_eq!(e.restarts(n).await, 0, "{n} was restarted");
    }
    // Room given: writes are taken again by themselves.
    let before = fill.written();
    e.patch_cluster(r#"{"spec":{"storage":{"size":"1280Mi"}}}"#);
    writes_taken_again(&e, &fill, before).await;
    let back_after = refused_at.elapsed();
    let (written, errors) = fill.stop().await;
    let o = back_with_the_same_primary(&e, w, &primary).await;
    eprintln!(
        "full volume: refused ({refused}); first refusal said {said:?}; writes back {back_after:?} after the refusal was seen; {written} MiB filled, {} fill inserts refused, {} rows acknowledged, {} writes failed",
        errors.len(),
        o.acked.len(),
        o.errors
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn a_binlog_volume_held_by_a_stuck_archive_grows_to_its_maximum_then_refuses_writes_until_the_archive_is_back()
 {
    // Binary logs fill their volume only while someone still needs them:
    // here the archive, whose store hangs. The data volume is larger: a
    // replica's holds its relay logs too.
    let yaml = cluster_yaml("required").replace(
        "  failoverDelay: 0\n",
        "  failoverDelay: 0\n  storage:\n    size: 2Gi\n    binlogs:\n      size: 512Mi\n      autoGrow:\n        usedPercent: 50\n        increment: 256Mi\n        maximum: 768Mi\n",
    );
    let (e, s3) = super::backups::env_with_store("binlogs", yaml, "").await;
    let primary = e.status().await.current_primary.unwrap();
    let w = e.writer().await;
    w.wait_for_more(50, Duration::from_secs(30)).await;
    s3.pause();
    let rw = e.k.wait_service(NS, "db-rw").await.unwrap();
    let fill = Filler::start(rw, e.app_password().await);
    let logs_at = |size: &'static str| {
        let e = &e;
        move || async move {
            let sizes = claim_sizes(e).await;
            sizes
                .iter()
                .filter(|(n, _)| n.ends_with("-binlog"))
                .all(|(_, (a, h))| a == size && h == size)
                .then_some(())
        }
    };
    until(
        "the binlog claims grown to 768Mi",
        Duration::from_secs(300),
        logs_at("768Mi"),
    )
    .await
    .unwrap_or_else(|err| panic!("{err}\n{}", e.k.diagnose(NS, "db")));
    let refused = until(
        "writes refused for the full binlog volume",
        Duration::from_secs(400),
        || async { e.status().await.writes_refused },
    )
    .await
    .unwrap_or_else(|err| panic!("{err}\n{}", e.k.diagnose(NS, "db")));
    assert!(refused.contains("binlogs volume"), "{refused}");
    until("a fill insert refused", Duration::from_secs(30), || async {
        fill.errors().into_iter().find(|m| m.contains("1290"))
    })
    .await
    .unwrap_or_else(|err| panic!("{err}: {:?}", fill.errors()));
    // The status says who keeps the files.
    let kept = until(
        "the primary to say the archive keeps its files",
        Duration::from_secs(30),
        || async {
            let st = e.status().await;
            let b = st.instance_states.get(&primary)?.binlogs.clone()?;
            b.kept_for.contains("archive").then_some(b)
        },
    )
    .await
    .unwrap_or_else(|err| panic!("{err}\n{}", e.k.diagnose(NS, "db")));
    until("the maximum said", Duration::from_secs(60), || async {
        (e.events_named("StorageAtMaximum").await >= 1).then_some(())
    })
    .await
    .unwrap();
    // The store answers again: the archive catches up, the files it now
    // holds are purged, and writes come back with nobody raising anything.
    let before = fill.written();
    s3.resume();
    writes_taken_again(&e, &fill, before).await;
    let (written, errors) = fill.stop().await;
    let o = back_with_the_same_primary(&e, w, &primary).await;
    let after = e.status().await;
    let purged = after.instance_states[&primary]
        .binlogs
        .clone()
        .unwrap_or_default();
    assert!(purged.purged_files > 0, "{purged:?}");
    eprintln!(
        "binlog volume: refused ({refused}); kept {} files, {} bytes for: {}; then {} files purged; {written} MiB filled, {} fill inserts refused, {} rows acknowledged",
        kept.files,
        kept.bytes,
        kept.kept_for,
        purged.purged_files,
        errors.len(),
        o.acked.len()
    );
}
