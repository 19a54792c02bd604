//! Upgrades asked by annotation: a canary from a file, a broken image retried.

use super::upgrades::{catalog_cluster_yaml, needs_several_server_versions};
use super::*;

/// Another build of `cnmysql` (bytes appended) written into `claim`'s
/// volume, where its Pod sees it at `/var/lib/cnmysql/cnmysql-next`, the
/// way an air-gapped site puts a release on a volume the Pod mounts; its
/// SHA-256. `wrong`: a copy of the running build instead (another hash).
pub(crate) async fn put_build(e: &Env, claim: &str, wrong: bool) -> String {
    use sha2::Digest;
    let mut bytes = std::fs::read(cnmysql_exe()).unwrap();
    if !wrong {
        bytes.extend_from_slice(b"\nannotated upgrade release\n");
    }
    let path =
        e.k.claim_path(NS, claim)
            .await
            .unwrap()
            .join("cnmysql-next");
    std::fs::write(&path, &bytes).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut good = std::fs::read(cnmysql_exe()).unwrap();
    good.extend_from_slice(b"\nannotated upgrade release\n");
    hex::encode(sha2::Sha256::digest(&good))
}

impl Env {
    pub(crate) async fn pod_annotation(&self, pod: &str, key: &str) -> Option<String> {
        self.pods
            .get_opt(pod)
            .await
            .ok()??
            .metadata
            .annotations?
            .get(key)
            .cloned()
    }

    /// Let `w` write on a little, stop it, say what it saw, and check
    /// that every acknowledged row is on every instance.
    pub(crate) async fn finish(
        &self,
        w: WriteChecker,
        what: &str,
    ) -> cnmysql_workload::writer::Outcome {
        w.wait_for_more(50, Duration::from_secs(30)).await;
        let out = w.stop().await;
        eprintln!(
            "{what}: {} writes acknowledged, {} failed, longest gap {:?}",
            out.acked.len(),
            out.errors,
            out.longest_gap
        );
        self.verify(&out.acked).await;
        out
    }

    /// Wait until the latest server upgrade record satisfies `accept`;
    /// that record.
    pub(crate) async fn upgrade_record(
        &self,
        what: &str,
        timeout: Duration,
        accept: impl Fn(&cnmysql_api::UpgradeRecord) -> bool,
    ) -> cnmysql_api::UpgradeRecord {
        until(what, timeout, || async {
            self.status()
                .await
                .upgrade_history
                .last()
                .filter(|r| accept(r))
                .cloned()
        })
        .await
        .unwrap()
    }

    /// Wait until `pod` carries `cnmysql.io/upgrade-status: <status>`.
    pub(crate) async fn await_upgrade_status(
        &self,
        pod: &str,
        status: &str,
        what: &str,
        timeout: Duration,
    ) {
        until(what, timeout, || async {
            (self
                .pod_annotation(pod, "cnmysql.io/upgrade-status")
                .await
                .as_deref()
                == Some(status))
            .then_some(())
        })
        .await
        .unwrap()
    }

    /// `kubectl annotate <kind> <name> <key=value>` in the test namespace.
    pub(crate) fn annotate(&self, kind: &str, name: &str, kv: &str) {
        self.k
            .cp
            .kubectl(&["-n", NS, "annotate", kind, name, kv], None)
            .unwrap();
    }

    /// Wait until the Cluster's orchestrated upgrade is done (never failed
    /// meanwhile); its record.
    pub(crate) async fn orchestrated_done(
        &self,
        timeout: Duration,
    ) -> cnmysql_api::OrchestratedUpgrade {
        until("the orchestrated upgrade to be done", timeout, || async {
            let o = self.status().await.orchestrated_upgrade?;
            assert_ne!(o.status, "failed", "{o:?}");
            (o.status == "done").then_some(o)
        })
        .await
        .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn annotations_upgrade_a_canary_from_a_file_retry_a_failure_and_walk_the_whole_cluster()
 {
    let e = env("required").await;
    e.patch_cluster(r#"{"spec":{"instanceUpdateStrategy":"manual"}}"#);
    let before: Vec<_> = {
        let mut v = Vec::new();
        for p in ["db-1", "db-2", "db-3"] {
            v.push(e.pod_processes(p).await);
        }
        v
    };
    let old = e.status().await.operator_executable_hash.unwrap();
    let w = e.writer().await;
    w.wait_for_more(50, Duration::from_secs(30)).await;

    // The canary: db-2's volume holds the wrong build at first.
    let want = put_build(&e, "db-2", true).await;
    let file = "/var/lib/cnmysql/cnmysql-next";
    e.annotate(
        "pod",
        "db-2",
        &format!("cnmysql.io/upgrade-to=manager=file://{file}#sha256={want}"),
    );
    let failed_at = until(
        "db-2's attempt to fail on the hash",
        Duration::from_secs(60),
        || async {
            match e
                .pod_annotation("db-2", "cnmysql.io/upgrade-status")
                .await
                .as_deref()
            {
                Some("failed") => {
                    e.pod_annotation("db-2", "cnmysql.io/upgrade-last-failed-attempt-at")
                        .await
                }
                _ => None,
            }
        },
    )
    .await
    .unwrap();
    eprintln!("failed at {failed_at}");
    let rec = e.status().await.instance_upgrades["db-2"].clone();
    assert!(rec.message.contains("SHA-256"), "{rec:?}");
    assert!(e.events_named("InstanceUpgradeFailed").await >= 1);
    // Fixed: the right build put there; the retry takes.
    put_build(&e, "db-2", false).await;
    e.await_upgrade_status(
        "db-2",
        "done",
        "db-2's retried attempt to be done",
        Duration::from_secs(90),
    )
    .await;
    assert_eq!(
        e.pod_annotation("db-2", "cnmysql.io/upgrade-release")
            .await
            .as_deref(),
        Some(want.as_str())
    );
    // The status reports the new hash at the operator's next poll.
    until(
        "db-2's new hash in the status",
        Duration::from_secs(30),
        || async {
            let st = e.status().await;
            (st.executable_hash_by_instance.get("db-2") == Some(&want)).then_some(())
        },
    )
    .await
    .unwrap();
    assert_eq!(
        e.pod_processes("db-2").await,
        before[1],
        "db-2: same Pod, manager and mysqld"
    );
    let st = e.status().await;
    for (p, b) in [("db-1", &before[0]), ("db-3", &before[2])] {
        assert_eq!(st.executable_hash_by_instance[p], old, "{p} untouched");
        assert_eq!(&e.pod_processes(p).await, b, "{p} untouched");
    }

    // The whole cluster, from files on each volume (no hash given).
    put_build(&e, "db-1", false).await;
    put_build(&e, "db-3", false).await;
    e.annotate(
        "cluster",
        "db",
        &format!("cnmysql.io/upgrade-to=manager=file://{file}"),
    );
    let o = e.orchestrated_done(Duration::from_secs(180)).await;
    assert_eq!(o.release.as_deref(), Some(want.as_str()));
    // Mirrored onto the Cluster by a second write after the status record.
    until(
        "the Cluster's upgrade-status annotation done",
        Duration::from_secs(30),
        || async {
            let c = e.clusters.get("db").await.ok()?;
            (c.metadata.annotations?.get("cnmysql.io/upgrade-status")? == "done").then_some(())
        },
    )
    .await
    .unwrap();
    let st = e.status().await;
    for (p, b) in ["db-1", "db-2", "db-3"].iter().zip(&before) {
        assert_eq!(st.executable_hash_by_instance[*p], want, "{p}");
        assert_eq!(&e.pod_processes(p).await, b, "{p}: in place");
    }
    let out = e.finish(w, "annotated upgrades").await;
    assert_eq!(out.errors, 0, "writes failed while managers were swapped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with the six Kubernetes binaries, scripts/setup --kube, and run scripts/test-kube (with the server images mariadb:10.11.18, 10.11.19 and 11.8)"]
pub(crate) async fn an_annotated_server_canary_fails_on_a_broken_image_is_retried_once_the_catalog_is_fixed_then_the_cluster_follows()
 {
    if needs_several_server_versions(
        "an_annotated_server_canary_fails_on_a_broken_image_is_retried_once_the_catalog_is_fixed_then_the_cluster_follows",
    ) {
        return;
    }
    let broken = cnmysql_workload::broken_image::BrokenImage::new(
        "10.11.19",
        &format!("broken-{}", std::process::id()),
    )
    .unwrap();
    let bad = format!("docker.io/library/{}", broken.reference);
    const NEW: &str = "docker.io/library/mariadb:10.11.19";
    // The catalog's 10.11.19 entry names the broken image at first.
    let manifest = catalog_cluster_yaml("10.11.18").replace(NEW, &bad);
    let e = env_with_manifest(&manifest, &[]).await;
    e.patch_cluster(r#"{"spec":{"instanceUpdateStrategy":"manual"}}"#);
    let primary = e.status().await.current_primary.unwrap();
    let canary = ["db-1", "db-2", "db-3"]
        .into_iter()
        .find(|n| *n != primary)
        .unwrap();
    let w = e.writer().await;
    w.wait_for_more(50, Duration::from_secs(30)).await;
    e.annotate("pod", canary, "cnmysql.io/upgrade-to=version=10.11.19");
    let began = Instant::now();
    let failed = until(
        "the attempt on the broken image to fail",
        Duration::from_secs(240),
        || async {
            let r = e.status().await.instance_upgrades.get(canary).cloned()?;
            (r.status == "failed").then_some(r)
        },
    )
    .await
    .unwrap();
    eprintln!("failed after {:?}: {}", began.elapsed(), failed.message);
    assert!(
        failed.message.contains("did not reach its target"),
        "{failed:?}"
    );
    assert!(failed.last_failed_attempt_at.is_some());
    // The Pod carries it too (it was made again for the attempt).
    e.await_upgrade_status(
        canary,
        "failed",
        "the failure on the Pod",
        Duration::from_secs(30),
    )
    .await;
    // The cause fixed: the catalog names the real image; the retry takes.
    e.k.cp
        .kubectl(
            &[
                "patch",
                "clusterimagecatalog",
                "mariadb",
                "--type",
                "json",
                "-p",
                &format!(r#"[{{"op":"replace","path":"/spec/images/1/image","value":"{NEW}"}}]"#),
            ],
            None,
        )
        .unwrap();
    until(
        "the retried attempt to be done",
        Duration::from_secs(240),
        || async {
            let r = e.status().await.instance_upgrades.get(canary).cloned()?;
            (r.status == "done").then_some(())
        },
    )
    .await
    .unwrap();
    let pod = e.pods.get(canary).await.unwrap();
    assert_eq!(pod.spec.unwrap().containers[0].image.as_deref(), Some(NEW));
    // The Pod's annotations mirror the record a pass after it is written.
    until(
        "the release on the Pod",
        Duration::from_secs(30),
        || async {
            let r = e
                .pod_annotation(canary, "cnmysql.io/upgrade-release")
                .await?;
            r.starts_with("10.11.19").then_some(())
        },
    )
    .await
    .unwrap();
    for p in ["db-1", "db-2", "db-3"]
        .into_iter()
        .filter(|p| *p != canary)
    {
        let pod = e.pods.get(p).await.unwrap();
        assert_eq!(
            pod.spec.unwrap().containers[0].image.as_deref(),
            Some("docker.io/library/mariadb:10.11.18"),
            "{p} untouched"
        );
    }
    // The whole cluster: the other replica, then the primary after a
    // switchover.
    e.annotate("cluster", "db", "cnmysql.io/upgrade-to=version=10.11.19");
    let o = e.orchestrated_done(Duration::from_secs(420)).await;
    assert_eq!(
        o.release.as_deref().map(|r| r.starts_with("10.11.19")),
        Some(true),
        "{o:?}"
    );
    for p in ["db-1", "db-2", "db-3"] {
        let pod = e.pods.get(p).await.unwrap();
        assert_eq!(
            pod.spec.unwrap().containers[0].image.as_deref(),
            Some(NEW),
            "{p}"
        );
    }
    assert_ne!(
        e.status().await.current_primary.unwrap(),
        primary,
        "switched over first"
    );
    assert_eq!(e.events_named("FailoverCompleted").await, 0);
    e.finish(w, "annotated server upgrades").await;
}
