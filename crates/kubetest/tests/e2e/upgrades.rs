//! New operator images and server versions, scheduled upgrades, a changed setting rolled out.

use super::*;

/// The image a new operator release would be: this build of `cnmysql` with
/// different trailing bytes (a different SHA-256), under its own repository
/// so the node runs that file for it.
pub(crate) const NEXT_IMAGE: &str = "ghcr.io/cloudnative-mysql/cnmysql-next:0.2.0";

pub(crate) fn next_operator(dir: &std::path::Path) -> String {
    use std::io::Write;
    let exe = dir.join("cnmysql-next");
    std::fs::copy(cnmysql_exe(), &exe).unwrap();
    let mut f = std::fs::OpenOptions::new().append(true).open(&exe).unwrap();
    writeln!(f, "\nnext operator release").unwrap();
    format!("{NEXT_IMAGE}=/usr/local/bin/cnmysql={}", exe.display())
}

impl Env {
    /// The upgrade procedure of docs/kubernetes.md: the manifest of the
    /// next release (`cnmysql install generate --image NEXT`) applied
    /// server-side over the running install; then wait until the new
    /// operator leads and every instance runs its executable, the cluster
    /// healthy. Returns the new hash.
    pub(crate) async fn upgrade_operator(&self, timeout: Duration) -> String {
        let old = self.status().await.operator_executable_hash.unwrap();
        self.apply_operator_manifest(NEXT_IMAGE);
        let new = self.every_instance_on_a_new_executable(&old, timeout).await;
        assert_eq!(self.leader_image(), NEXT_IMAGE, "the new operator leads");
        new
    }

    /// Back to the release installed first: its manifest applied again.
    /// Returns the hash every instance runs then.
    pub(crate) async fn downgrade_operator(&self, timeout: Duration) -> String {
        let old = self.status().await.operator_executable_hash.unwrap();
        let first = cnmysql_kubetest::operator_image_name().unwrap();
        self.apply_operator_manifest(&first);
        let back = self.every_instance_on_a_new_executable(&old, timeout).await;
        assert_eq!(self.leader_image(), first, "the first operator leads again");
        back
    }

    /// `kubectl apply --server-side` of the install for `image`, made by
    /// the generator as a user makes it.
    fn apply_operator_manifest(&self, image: &str) {
        let manifest = cnmysql_operator::install::generate(&cnmysql_operator::install::Options {
            image: image.into(),
            ..Default::default()
        })
        .unwrap();
        self.k
            .cp
            .kubectl(&["apply", "--server-side", "-f", "-"], Some(&manifest))
            .unwrap();
    }

    /// The image of the operator Pod holding the leader Lease.
    fn leader_image(&self) -> String {
        let get = |args: &[&str]| self.k.cp.kubectl(args, None).unwrap().trim().to_string();
        let holder = get(&[
            "-n",
            "cnmysql-system",
            "get",
            "lease",
            "cnmysql-operator",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ]);
        get(&[
            "-n",
            "cnmysql-system",
            "get",
            "pod",
            &holder,
            "-o",
            "jsonpath={.spec.containers[0].image}",
        ])
    }

    async fn every_instance_on_a_new_executable(&self, old: &str, timeout: Duration) -> String {
        until("every instance on the new executable", timeout, || async {
            let st = self.status().await;
            let new = st.operator_executable_hash.clone().filter(|h| h != old)?;
            let all = ["db-1", "db-2", "db-3"]
                .iter()
                .all(|i| st.executable_hash_by_instance.get(*i) == Some(&new));
            (all && st.phase == Some(cnmysql_api::Phase::Healthy) && st.ready_instances == 3)
                .then_some(new)
        })
        .await
        .unwrap_or_else(|err| {
            let events = self
                .k
                .cp
                .kubectl(&["-n", NS, "get", "events"], None)
                .unwrap_or_default();
            panic!("{err}\nevents:\n{events}")
        })
    }

    /// Pod uid, restart count, the host PIDs of its manager (PID 1 of the
    /// container) and of the mysqld under it.
    pub(crate) async fn pod_processes(&self, pod: &str) -> (String, i32, i32, Option<i32>) {
        let uid = self.pod_uid(pod).await.unwrap();
        let manager = self.k.pid(NS, pod, "mysql").await.unwrap();
        let parent = |p: i32| -> Option<i32> {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            stat.rsplit(')')
                .next()?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        };
        // The server (mariadbd, or MySQL's mysqld) whose ancestors include
        // the container's PID 1.
        let mysqld = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| matches!(c.trim(), "mariadbd" | "mysqld"))
            })
            .find(|p| {
                let mut at = *p;
                while let Some(up) = parent(at).filter(|u| *u > 1) {
                    if up == manager {
                        return true;
                    }
                    at = up;
                }
                false
            });
        (uid, self.restarts(pod).await, manager, mysqld)
    }

    pub(crate) async fn events_json(&self) -> String {
        self.k
            .cp
            .kubectl(&["-n", NS, "get", "events", "-o", "json"], None)
            .unwrap_or_default()
    }

    pub(crate) async fn events_named(&self, reason: &str) -> usize {
        self.events_json()
            .await
            .matches(&format!("\"reason\": \"{reason}\""))
            .count()
    }

    /// `kubectl patch cluster db --type merge -p <patch>`.
    pub(crate) fn patch_cluster(&self, patch: &str) {
        self.k
            .cp
            .kubectl(
                &[
                    "-n", NS, "patch", "cluster", "db", "--type", "merge", "-p", patch,
                ],
                None,
            )
            .unwrap();
    }

    /// The uids of the three instance Pods.
    pub(crate) async fn pod_uids(&self) -> Vec<String> {
        let mut uids = Vec::new();
        for p in ["db-1", "db-2", "db-3"] {
            uids.push(self.pod_uid(p).await.unwrap());
        }
        uids
    }

    /// After a rollout: every Pod recreated (none keeps its uid), the
    /// primary switched over first (once), never failed over.
    pub(crate) async fn assert_recreated_primary_last(&self, uids: &[String], old_primary: &str) {
        for (p, uid) in ["db-1", "db-2", "db-3"].iter().zip(uids) {
            assert_ne!(
                self.pod_uid(p).await.as_ref(),
                Some(uid),
                "{p} was not recreated"
            );
        }
        let now = self.status().await.current_primary.unwrap();
        assert_ne!(now, old_primary, "the primary was not switched over");
        assert_eq!(self.events_named("SwitchoverForUpgrade").await, 1);
        assert_eq!(self.events_named("FailoverCompleted").await, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn a_new_operator_image_upgrades_every_manager_in_place_and_restart_inplace_keeps_mysqld()
 {
    let dir = tempfile::tempdir().unwrap();
    let e = env_with_images("required", &[next_operator(dir.path())]).await;
    e.patch_cluster(r#"{"spec":{"inPlaceInstanceManagerUpdates":true}}"#);
    let pods = ["db-1", "db-2", "db-3"];
    let mut before = Vec::new();
    for p in pods {
        before.push(e.pod_processes(p).await);
    }
    assert!(before.iter().all(|b| b.3.is_some()), "{before:?}");
    let w = e.writer().await;
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let began = Instant::now();
    let hash = e.upgrade_operator(Duration::from_secs(240)).await;
    eprintln!(
        "in-place rollout done {:?} after the new install was applied",
        began.elapsed()
    );
    // No Pod recreated, no container restarted, every manager re-executed
    // under its PID with its mysqld still running.
    for (p, b) in pods.iter().zip(&before) {
        assert_eq!(&e.pod_processes(p).await, b, "{p} changed");
    }
    assert!(e.events_named("UpgradingInstanceManager").await >= 3);

    // A restart in place asked through the plugin, carried out by the
    // operator: the same Pod, manager PID and mysqld PID.
    let out = e.plugin(&["cnmsql", "-n", NS, "restart-inplace", "db", "db-2"]);
    eprintln!("{out}");
    assert_eq!(e.pod_processes("db-2").await, before[1]);
    assert_eq!(e.events_named("RestartedInPlace").await, 1);
    let st = e.status().await;
    assert_eq!(st.executable_hash_by_instance.get("db-2"), Some(&hash));

    // Back to the first release, the same way: its manifest applied again.
    let began = Instant::now();
    let back = e.downgrade_operator(Duration::from_secs(240)).await;
    assert_ne!(back, hash);
    eprintln!(
        "back to the first release {:?} after apply",
        began.elapsed()
    );
    for (p, b) in pods.iter().zip(&before) {
        assert_eq!(&e.pod_processes(p).await, b, "{p} changed going back");
    }

    let o = e.finish(w, "in place").await;
    assert_eq!(o.errors, 0, "writes failed while managers were swapped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn a_new_operator_image_recreates_replicas_then_switches_over_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let e = env_with_images("required", &[next_operator(dir.path())]).await;
    let primary = e.status().await.current_primary.unwrap();
    let uids = e.pod_uids().await;
    let w = e.writer().await;
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let began = Instant::now();
    e.upgrade_operator(Duration::from_secs(420)).await;
    eprintln!(
        "rolling upgrade done {:?} after the new install was applied",
        began.elapsed()
    );
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let o = w.stop().await;
    e.assert_recreated_primary_last(&uids, &primary).await;
    eprintln!(
        "rolling: {} writes acknowledged, longest gap {:?}",
        o.acked.len(),
        o.longest_gap
    );
    e.verify(&o.acked).await;
}

/// A cluster on MariaDB 10.11.18 whose image comes from a
/// ClusterImageCatalog, and that catalog.
/// Server version upgrades need several versions of one flavour: only
/// MariaDB has them here (10.11.18, 10.11.19, 11.8; MySQL 9.7 alone). On
/// MySQL such a test says so and does nothing.
pub(crate) fn needs_several_server_versions(test: &str) -> bool {
    let mysql = std::env::var("CNMYSQL_TEST_FLAVOR").as_deref() == Ok("mysql");
    if mysql {
        eprintln!(
            "{test}: not run on MySQL: it needs several server versions, and only MariaDB has them here"
        );
    }
    mysql
}

pub(crate) fn catalog_cluster_yaml(version: &str) -> String {
    let cluster = cluster_yaml("required").replace(
        "    flavor: mariadb\n",
        &format!(
            "    flavor: mariadb\n    version: \"{version}\"\n    imageCatalogRef:\n      kind: ClusterImageCatalog\n      name: mariadb\n"
        ),
    );
    format!(
        "apiVersion: mysql.cnmysql.io/v1
kind: ClusterImageCatalog
metadata:
  name: mariadb
spec:
  flavor: mariadb
  images:
  - version: \"10.11.18\"
    image: docker.io/library/mariadb:10.11.18
  - version: \"10.11.19\"
    image: docker.io/library/mariadb:10.11.19
  - version: \"11.8\"
    image: docker.io/library/mariadb:11.8
---
{cluster}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with the six Kubernetes binaries, scripts/setup --kube, and run scripts/test-kube (with the server images mariadb:10.11.18, 10.11.19 and 11.8)"]
pub(crate) async fn server_version_upgrades_through_a_catalog_record_each_step_lose_nothing_and_refuse_a_downgrade()
 {
    if needs_several_server_versions(
        "server_version_upgrades_through_a_catalog_record_each_step_lose_nothing_and_refuse_a_downgrade",
    ) {
        return;
    }
    const OLD: &str = "docker.io/library/mariadb:10.11.18";
    const NEW: &str = "docker.io/library/mariadb:10.11.19";
    let e = env_with_manifest(&catalog_cluster_yaml("10.11.18"), &[]).await;
    let st = e.status().await;
    assert_eq!(st.image.as_deref(), Some(OLD), "{st:?}");
    assert_eq!(st.server_version.as_deref(), Some("10.11.18"));
    let primary = st.current_primary.unwrap();
    let uids = e.pod_uids().await;
    let w = e.writer().await;
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let began = Instant::now();
    let patch =
        |v: &str| e.patch_cluster(&format!(r#"{{"spec":{{"mysql":{{"version":"{v}"}}}}}}"#));
    patch("10.11.19");
    let record = e
        .upgrade_record(
            "the upgrade to 10.11.19 recorded as Upgraded",
            Duration::from_secs(420),
            |r| r.version == "10.11.19" && r.phase == cnmysql_api::UpgradePhase::Upgraded,
        )
        .await;
    eprintln!("server upgrade done {:?} after the patch", began.elapsed());
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let o = w.stop().await;
    let steps: Vec<String> = record
        .conditions
        .iter()
        .map(|c| {
            format!(
                "{}{} {}",
                c.type_,
                c.instance
                    .as_deref()
                    .map(|i| format!(" {i}"))
                    .unwrap_or_default(),
                c.status
            )
        })
        .collect();
    assert_eq!(steps.len(), 8, "{steps:?}");
    assert!(steps.iter().all(|s| s.ends_with("True")), "{steps:?}");
    assert_eq!(steps[4], format!("Switchover {primary} True"));
    e.assert_recreated_primary_last(&uids, &primary).await;
    for p in ["db-1", "db-2", "db-3"] {
        let pod = e.pods.get(p).await.unwrap();
        assert_eq!(
            pod.spec.unwrap().containers[0].image.as_deref(),
            Some(NEW),
            "{p}"
        );
    }
    let st = e.status().await;
    assert_eq!(st.image.as_deref(), Some(NEW));
    assert_eq!(st.server_version.as_deref(), Some("10.11.19"));
    assert!(e.events_named("ServerUpgradeCompleted").await >= 1);
    eprintln!(
        "server upgrade 10.11.18 → 10.11.19: {} writes acknowledged, {} failed, longest gap {:?}",
        o.acked.len(),
        o.errors,
        o.longest_gap
    );
    e.verify(&o.acked).await;

    // Back to 10.11.18: refused before anything is touched.
    let uids = e.pod_uids().await;
    patch("10.11.18");
    until("the downgrade refused", Duration::from_secs(60), || async {
        let st = e.status().await;
        st.conditions
            .iter()
            .find(|c| c.type_ == "Degraded" && c.status == "True" && c.reason == "DowngradeRefused")
            .map(|_| ())
    })
    .await
    .unwrap();
    assert!(e.events_named("ServerUpgradeRefused").await >= 1);
    for _ in 0..10 {
        assert_eq!(e.pod_uids().await, uids, "no Pod recreated");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let st = e.status().await;
    assert_eq!(
        st.image.as_deref(),
        Some(NEW),
        "the cluster still runs 10.11.19"
    );

    // A major upgrade, 10.11 → 11.8: mariadb-upgrade on every instance.
    let w = e.writer().await;
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let began = Instant::now();
    patch("11.8");
    let record = e
        .upgrade_record(
            "the upgrade to 11.8 recorded as Upgraded",
            Duration::from_secs(420),
            |r| r.version == "11.8" && r.phase == cnmysql_api::UpgradePhase::Upgraded,
        )
        .await;
    eprintln!("major upgrade done {:?} after the patch", began.elapsed());
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let o = w.stop().await;
    assert!(
        record.conditions.iter().all(|c| c.status == "True"),
        "{record:?}"
    );
    assert!(
        e.events_named("SystemTablesUpgraded").await >= 3,
        "mariadb-upgrade on each instance"
    );
    let st = e.status().await;
    assert!(
        st.server_version
            .as_deref()
            .is_some_and(|v| v.starts_with("11.8")),
        "{st:?}"
    );
    for p in ["db-1", "db-2", "db-3"] {
        assert!(
            st.data_version_by_instance[p].starts_with("11.8"),
            "{p}: {st:?}"
        );
    }
    eprintln!(
        "server upgrade 10.11.19 → 11.8: {} writes acknowledged, {} failed, longest gap {:?}",
        o.acked.len(),
        o.errors,
        o.longest_gap
    );
    e.verify(&o.acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with the six Kubernetes binaries, scripts/setup --kube, and run scripts/test-kube (with the server images mariadb:10.11.18 and 10.11.19)"]
pub(crate) async fn a_scheduled_server_upgrade_waits_for_upgrade_at_and_a_closed_maintenance_window()
 {
    if needs_several_server_versions(
        "a_scheduled_server_upgrade_waits_for_upgrade_at_and_a_closed_maintenance_window",
    ) {
        return;
    }
    const NEW: &str = "docker.io/library/mariadb:10.11.19";
    let manifest = cluster_yaml("required").replace(
        "    flavor: mariadb\n",
        "    flavor: mariadb\n    image: docker.io/library/mariadb:10.11.18\n",
    );
    let e = env_with_manifest(&manifest, &[]).await;
    let uids = e.pod_uids().await;
    let patch = |p: String| e.patch_cluster(&p);
    // A window that opened an hour ago and is closed now holds the upgrade.
    let closed = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(2);
    let start = &closed.to_string()[11..16];
    patch(format!(
        r#"{{"spec":{{"mysql":{{"image":"{NEW}"}},"maintenanceWindow":{{"start":"{start}","duration":"1h"}}}}}}"#
    ));
    e.upgrade_record(
        "the upgrade held by the window",
        Duration::from_secs(60),
        |r| {
            r.phase == cnmysql_api::UpgradePhase::Pending
                && r.conditions[1].reason == "MaintenanceWindow"
        },
    )
    .await;
    // Open the window from now, and schedule the upgrade 20 s ahead.
    let at_ms = jiff::Timestamp::now().as_millisecond() + 20_000;
    let at = jiff::Timestamp::from_millisecond(at_ms).unwrap();
    let open = &jiff::Timestamp::now().to_string()[11..16];
    patch(format!(
        r#"{{"spec":{{"mysql":{{"upgradeAt":"{at}"}},"maintenanceWindow":{{"start":"{open}","duration":"2h"}}}}}}"#
    ));
    until("the upgrade scheduled", Duration::from_secs(60), || async {
        let st = e.status().await;
        (st.phase_reason
            .as_deref()
            .is_some_and(|r| r.contains("starts at")))
        .then_some(())
    })
    .await
    .unwrap();
    // Nothing moves before upgradeAt.
    while jiff::Timestamp::now().as_millisecond() < at_ms - 1_500 {
        assert_eq!(
            e.pod_uids().await,
            uids,
            "no Pod recreated before upgradeAt"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let record = e
        .upgrade_record("the upgrade done", Duration::from_secs(420), |r| {
            r.phase == cnmysql_api::UpgradePhase::Upgraded
        })
        .await;
    let started: jiff::Timestamp = record.start_time.unwrap().parse().unwrap();
    assert!(
        started.as_millisecond() >= at_ms,
        "started {started}, upgradeAt {at}"
    );
    assert!(e.events_named("ServerUpgradePending").await >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn a_changed_server_setting_is_rolled_out_one_pod_at_a_time_and_loses_nothing() {
    let e = env("required").await;
    let primary = e.status().await.current_primary.unwrap();
    let uids = e.pod_uids().await;
    let w = e.writer().await;
    w.wait_for_more(50, Duration::from_secs(30)).await;
    e.patch_cluster(r#"{"spec":{"mysql":{"parameters":{"max_connections":"321"}}}}"#);
    until(
        "every Pod recreated with the new setting",
        Duration::from_secs(420),
        || async {
            let st = e.status().await;
            let mut now = Vec::new();
            for p in ["db-1", "db-2", "db-3"] {
                now.push(e.pod_uid(p).await?);
            }
            (now.iter().zip(&uids).all(|(a, b)| a != b)
                && st.phase == Some(cnmysql_api::Phase::Healthy)
                && st.ready_instances == 3)
                .then_some(())
        },
    )
    .await
    .unwrap();
    w.wait_for_more(50, Duration::from_secs(30)).await;
    let o = w.stop().await;
    e.assert_recreated_primary_last(&uids, &primary).await;
    let events = e.events_json().await;
    assert!(events.contains("spec.mysql.parameters changed"), "{events}");
    let rw = e.k.wait_service(NS, "db-rw").await.unwrap();
    let mut c = e.admin(rw).await;
    let max: Option<u64> = c.query_first("SELECT @@max_connections").await.unwrap();
    assert_eq!(max, Some(321));
    eprintln!(
        "server setting rollout: {} writes acknowledged, {} failed, longest gap {:?}",
        o.acked.len(),
        o.errors,
        o.longest_gap
    );
    e.verify(&o.acked).await;
}
