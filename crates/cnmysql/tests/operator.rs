//! `cnmysql operator` against a real kube-apiserver (and
//! kube-controller-manager for garbage collection): the objects of a
//! Cluster, server-side apply, owner references, idempotence, corrections,
//! Pod recreation on its claim, invalid Clusters, the instances' RBAC,
//! deletion, and leader election between two replicas.
//!
//! Ignored unless run by `scripts/test-kube` with `KUBEBUILDER_ASSETS` set.

mod common;

use std::time::{Duration, Instant};

use cnmysql_api::Cluster;
use cnmysql_envtest::{ControlPlane, wait_for};
use common::kube::*;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

fn owned_by(
    meta_refs: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
    uid: &str,
) -> bool {
    meta_refs
        .iter()
        .any(|o| o.uid == uid && o.controller == Some(true) && o.kind == "Cluster")
}

#[tokio::test]
#[ignore = "needs a real API server: set KUBEBUILDER_ASSETS (etcd, kube-apiserver, kube-controller-manager) and run scripts/test-kube"]
async fn the_operator_creates_corrects_and_deletes_a_clusters_objects() {
    let (cp, client) = control_plane().await;
    let op = Operator::start(&cp, "op-a").await;
    wait_for(
        "the operator to be ready",
        Duration::from_secs(30),
        || async { (op.get("/readyz").await.map(|r| r.0) == Some(200)).then_some(()) },
    )
    .await;
    wait_for("the operator to lead", Duration::from_secs(30), || async {
        (op.metric("cnmysql_operator_leader").await == 1.0).then_some(())
    })
    .await;

    let uid = the_first_reconcile_creates_exactly_the_expected_objects(&client).await;
    every_object_is_owned_and_applied(&client, &uid).await;
    the_status_targets_the_first_instance(&client).await;
    an_unchanged_cluster_is_not_written(&client, &op).await;
    topology_passes_are_timed(&op).await;
    progress_alone_starts_no_reconcile(&client, &op).await;
    edits_are_corrected_unless_paused(&client, &op).await;
    pods_are_recreated_on_their_claims_and_scaled_down(&client).await;
    instances_get_only_the_rights_they_need(&cp);
    an_invalid_cluster_is_degraded_and_makes_nothing(&client).await;

    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "prod");
    // 7. Deleting the Cluster removes its Pods and owned objects.
    clusters
        .delete("db", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("garbage collection", Duration::from_secs(90), || async {
        let left = versions(&client, "db").await;
        left.is_empty().then_some(())
    })
    .await;

    let log = op.log();
    assert!(
        !log.contains("BEGIN RSA PRIVATE KEY") && !log.contains("PRIVATE KEY-----"),
        "a key reached the log"
    );
    op.stop().await;
}

/// The first reconcile creates exactly the expected objects.
async fn the_first_reconcile_creates_exactly_the_expected_objects(client: &kube::Client) -> String {
    let applied = Instant::now();
    let cluster = apply_cluster(client, &cluster_manifest("db", "")).await;
    let uid = cluster.uid().unwrap();
    wait_for(
        "every object of the Cluster",
        Duration::from_secs(60),
        || async {
            let ok = names::<Pod>(client, "db").await.len() == 3
                && names::<PersistentVolumeClaim>(client, "db").await.len() == 3
                && names::<Service>(client, "db").await.len() == 3
                && names::<Secret>(client, "db").await.len() == 8
                && names::<PodDisruptionBudget>(client, "db").await.len() == 2
                && names::<RoleBinding>(client, "db").await.len() == 1;
            ok.then_some(())
        },
    )
    .await;
    eprintln!("kubectl apply -> every object: {:?}", applied.elapsed());
    assert_eq!(names::<Pod>(client, "db").await, ["db-1", "db-2", "db-3"]);
    assert_eq!(
        names::<PersistentVolumeClaim>(client, "db").await,
        ["db-1", "db-2", "db-3"]
    );
    assert_eq!(
        names::<Service>(client, "db").await,
        ["db-r", "db-ro", "db-rw"]
    );
    assert_eq!(
        names::<Secret>(client, "db").await,
        [
            "db-1-tls",
            "db-2-tls",
            "db-3-tls",
            "db-app",
            "db-ca",
            "db-operator-tls",
            "db-replication",
            "db-root"
        ]
    );
    assert_eq!(names::<ServiceAccount>(client, "db").await, ["db"]);
    assert_eq!(names::<Role>(client, "db").await, ["db"]);
    assert_eq!(
        names::<PodDisruptionBudget>(client, "db").await,
        ["db", "db-primary"]
    );
    uid
}

/// Owner references and server-side apply under one field manager.
async fn every_object_is_owned_and_applied(client: &kube::Client, uid: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "prod");
    let p1 = pods.get("db-1").await.unwrap();
    assert!(owned_by(p1.owner_references(), uid));
    let spec = p1.spec.as_ref().unwrap();
    assert_eq!(
        spec.init_containers.as_ref().unwrap()[0].image.as_deref(),
        Some(IMAGE)
    );
    assert_eq!(spec.service_account_name.as_deref(), Some("db"));
    let svcs: Api<Service> = Api::namespaced(client.clone(), "prod");
    let rw = svcs.get("db-rw").await.unwrap();
    assert!(owned_by(rw.owner_references(), uid));
    let managers: Vec<String> = rw
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| {
            format!(
                "{}/{}",
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default()
            )
        })
        .collect();
    assert!(
        managers.contains(&"cnmysql-operator/Apply".to_string()),
        "{managers:?}"
    );
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "prod");
    assert!(owned_by(
        claims.get("db-2").await.unwrap().owner_references(),
        uid
    ));
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "prod");
    assert!(owned_by(
        secrets.get("db-ca").await.unwrap().owner_references(),
        uid
    ));
}

/// The status: first instance targeted, the operator's hash published.
async fn the_status_targets_the_first_instance(client: &kube::Client) {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "prod");
    let st = wait_for("the status", Duration::from_secs(30), || async {
        let c = clusters.get("db").await.ok()?;
        let st = c.status?;
        (st.target_primary.is_some() && st.operator_executable_hash.is_some()).then_some(st)
    })
    .await;
    assert_eq!(st.target_primary.as_deref(), Some("db-1"));
    assert_eq!(st.operator_executable_hash.as_ref().unwrap().len(), 64);
    assert_eq!(st.instances, 3);
}

/// The Cluster's topology passes are timed on the metrics page, the poll
/// apart (no Pod runs here: the poll has no one to ask).
async fn topology_passes_are_timed(op: &Operator) {
    for name in [
        "cnmysql_operator_topology_pass_duration_seconds_count",
        "cnmysql_operator_topology_poll_duration_seconds_count",
    ] {
        wait_for(name, Duration::from_secs(30), || async {
            (op.metric(name).await >= 1.0).then_some(())
        })
        .await;
    }
}

/// Reconciling an unchanged Cluster writes nothing.
async fn an_unchanged_cluster_is_not_written(client: &kube::Client, op: &Operator) {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "prod");
    let before = versions(client, "db").await;
    let reconciles = op.metric("cnmysql_operator_reconciles_total").await;
    // A label on the Cluster changes no spec, but triggers a reconcile.
    clusters
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "1"}}})),
        )
        .await
        .unwrap();
    wait_for("another reconcile", Duration::from_secs(30), || async {
        (op.metric("cnmysql_operator_reconciles_total").await > reconciles).then_some(())
    })
    .await;
    assert_eq!(
        versions(client, "db").await,
        before,
        "a reconcile of an unchanged Cluster wrote"
    );
}

/// Under writes the status' progress figures (each instance's GTID
/// history) change at every poll; they alone start no reconcile, which
/// applies every owned object (issue 46: most of the API server's work
/// for a Cluster under load). Each round writes such a figure and then a
/// label, and waits for the label's reconcile: one reconcile a round, not
/// two.
async fn progress_alone_starts_no_reconcile(client: &kube::Client, op: &Operator) {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "prod");
    let first = op.metric("cnmysql_operator_reconciles_total").await;
    let rounds = 5;
    for i in 0..rounds {
        let progress =
            json!({"status": {"gtidExecutedByInstance": {"db-1": format!("0-1-{}", 100 + i)}}});
        clusters
            .patch_status("db", &PatchParams::default(), &Patch::Merge(progress))
            .await
            .unwrap();
        let seen = op.metric("cnmysql_operator_reconciles_total").await;
        let label = json!({"metadata": {"labels": {"round": i.to_string()}}});
        clusters
            .patch("db", &PatchParams::default(), &Patch::Merge(label))
            .await
            .unwrap();
        wait_for("the label's reconcile", Duration::from_secs(30), || async {
            (op.metric("cnmysql_operator_reconciles_total").await > seen).then_some(())
        })
        .await;
    }
    let reconciles = op.metric("cnmysql_operator_reconciles_total").await - first;
    // One slack for a reconcile the topology task's own status write starts.
    assert!(
        reconciles <= (rounds + 1) as f64,
        "{reconciles} reconciles for {rounds} label changes: progress figures started some"
    );
}

/// A user's edit of an owned Service is corrected; paused for
/// maintenance, the operator leaves its objects as a person left them, and
/// says so; resumed, it corrects them.
async fn edits_are_corrected_unless_paused(client: &kube::Client, op: &Operator) {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "prod");
    let svcs: Api<Service> = Api::namespaced(client.clone(), "prod");
    svcs.patch(
        "db-rw",
        &PatchParams::apply("someone-else").force(),
        &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "db-rw"},
            "spec": {"selector": {"app": "hijacked"}, "ports": [{"name": "mysql", "port": 3306}]}
        })),
    )
    .await
    .unwrap();
    // The operator writes rw's endpoints: the selector is taken away and
    // the slices the EndpointSlice controller made for it are deleted,
    // leaving the operator's own.
    wait_for(
        "the rw selector taken away, only the operator's slice left",
        Duration::from_secs(30),
        || async {
            routed_by_the_operator_alone(client, "db-rw")
                .await
                .then_some(())
        },
    )
    .await;

    // 3b. Paused for maintenance: the operator leaves its objects as a
    // person left them, and says so; resumed, it corrects them.
    let pause = |v: Option<&str>| json!({"metadata": {"annotations": {cnmysql_core::pause::ANNOTATION: v}}});
    clusters
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(pause(Some("paused"))),
        )
        .await
        .unwrap();
    wait_for(
        "the status to say paused",
        Duration::from_secs(30),
        || async {
            let st = clusters.get("db").await.ok()?.status?;
            st.phase_reason?
                .starts_with("reconciliation paused")
                .then_some(())
        },
    )
    .await;
    let before = op.metric("cnmysql_operator_reconciles_total").await;
    svcs.patch(
        "db-rw",
        &PatchParams::apply("someone-else").force(),
        &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "db-rw"},
            "spec": {"selector": {"app": "maintenance"}, "ports": [{"name": "mysql", "port": 3306}]}
        })),
    )
    .await
    .unwrap();
    // The edit of an owned object is reconciled (and left alone).
    wait_for(
        "a reconcile after the edit",
        Duration::from_secs(30),
        || async { (op.metric("cnmysql_operator_reconciles_total").await > before).then_some(()) },
    )
    .await;
    let sel = svcs
        .get("db-rw")
        .await
        .unwrap()
        .spec
        .unwrap()
        .selector
        .unwrap();
    assert_eq!(sel.get("app").map(String::as_str), Some("maintenance"));
    clusters
        .patch("db", &PatchParams::default(), &Patch::Merge(pause(None)))
        .await
        .unwrap();
    wait_for(
        "the rw selector taken away once resumed",
        Duration::from_secs(30),
        || async {
            routed_by_the_operator_alone(client, "db-rw")
                .await
                .then_some(())
        },
    )
    .await;
}

/// Whether `service` selects nothing and every EndpointSlice kube-proxy
/// would route it by is the operator's (and there is one).
async fn routed_by_the_operator_alone(client: &kube::Client, service: &str) -> bool {
    let svcs: Api<Service> = Api::namespaced(client.clone(), "prod");
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(client.clone(), "prod");
    let Ok(svc) = svcs.get(service).await else {
        return false;
    };
    let selects = svc
        .spec
        .and_then(|s| s.selector)
        .is_some_and(|s| !s.is_empty());
    let lp = ListParams::default().labels(&format!("kubernetes.io/service-name={service}"));
    let Ok(list) = slices.list(&lp).await else {
        return false;
    };
    let by = |s: &k8s_openapi::api::discovery::v1::EndpointSlice| {
        s.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("endpointslice.kubernetes.io/managed-by").cloned())
    };
    !selects
        && !list.items.is_empty()
        && list
            .items
            .iter()
            .all(|s| by(s).as_deref() == Some("cnmysql-operator"))
}

/// A deleted Pod is recreated, on the same claim; scaling down removes the
/// highest ordinal, its Pod and its claim.
async fn pods_are_recreated_on_their_claims_and_scaled_down(client: &kube::Client) {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "prod");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "prod");
    let old = pods.get("db-2").await.unwrap().uid().unwrap();
    pods.delete("db-2", &DeleteParams::default()).await.unwrap();
    let again = wait_for("db-2 to be recreated", Duration::from_secs(30), || async {
        let p = pods.get("db-2").await.ok()?;
        (p.uid()? != old).then_some(p)
    })
    .await;
    let claim = again
        .spec
        .unwrap()
        .volumes
        .unwrap()
        .into_iter()
        .find_map(|v| v.persistent_volume_claim)
        .unwrap();
    assert_eq!(claim.claim_name, "db-2");

    // Scaling down removes the highest ordinal, its Pod and its claim.
    clusters
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"instances": 2, "minSyncReplicas": 0, "maxSyncReplicas": 1}}),
            ),
        )
        .await
        .unwrap();
    wait_for("db-3 removed", Duration::from_secs(60), || async {
        (names::<Pod>(client, "db").await == ["db-1", "db-2"]
            && names::<PersistentVolumeClaim>(client, "db").await == ["db-1", "db-2"])
        .then_some(())
    })
    .await;
}

/// The instances' RBAC: what they need, and no more.
fn instances_get_only_the_rights_they_need(cp: &ControlPlane) {
    let sa = "system:serviceaccount:prod:db";
    for (verb, what, allowed) in [
        ("get", "clusters.mysql.cnmysql.io/db", true),
        ("watch", "clusters.mysql.cnmysql.io/db", true),
        (
            "patch",
            "clusters.mysql.cnmysql.io/db --subresource=status",
            true,
        ),
        (
            "patch",
            "clusters.mysql.cnmysql.io/other --subresource=status",
            false,
        ),
        ("update", "clusters.mysql.cnmysql.io/db", false),
        ("delete", "clusters.mysql.cnmysql.io/db", false),
        ("create", "leases.coordination.k8s.io", true),
        ("update", "leases.coordination.k8s.io/db-primary", true),
        ("delete", "leases.coordination.k8s.io/db-primary", true),
        (
            "update",
            "leases.coordination.k8s.io/cnmysql-operator",
            false,
        ),
        ("create", "events.events.k8s.io", true),
        ("get", "secrets/db-2-tls", true),
        ("get", "secrets/db-replication", true),
        ("get", "secrets/db-ca", false),
        ("get", "secrets/db-operator-tls", false),
        ("list", "secrets", false),
        ("list", "pods", true),
        ("delete", "pods/db-1", false),
        ("create", "pods", false),
    ] {
        let mut args = vec!["auth", "can-i", verb];
        args.extend(what.split(' '));
        args.extend(["-n", "prod", "--as", sa]);
        let out = kubectl(cp, &args);
        let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert_eq!(
            said == "yes",
            allowed,
            "can-i {verb} {what}: {said} {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// An invalid Cluster: Degraded with the field named, an Event, and
/// nothing created.
async fn an_invalid_cluster_is_degraded_and_makes_nothing(client: &kube::Client) {
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), "prod");
    apply_cluster(
        client,
        &cluster_manifest("bad", "  storage:\n    size: ten gigs\n"),
    )
    .await;
    let st = wait_for(
        "the invalid Cluster to be Degraded",
        Duration::from_secs(30),
        || async {
            let st = clusters.get("bad").await.ok()?.status?;
            st.conditions
                .iter()
                .any(|c| {
                    c.type_ == "Degraded"
                        && c.status == "True"
                        && c.message.contains("spec.storage.size")
                })
                .then_some(st)
        },
    )
    .await;
    assert!(st.phase_reason.unwrap().contains("spec.storage.size"));
    let events: Api<Event> = Api::namespaced(client.clone(), "prod");
    let ev = wait_for("the InvalidSpec event", Duration::from_secs(30), || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("InvalidSpec"))
    })
    .await;
    assert!(ev.note.unwrap().contains("spec.storage.size"));
    assert_eq!(ev.regarding.unwrap().name.as_deref(), Some("bad"));
    assert!(names::<Pod>(client, "bad").await.is_empty());
    assert!(names::<Secret>(client, "bad").await.is_empty());
    assert!(names::<Service>(client, "bad").await.is_empty());
}

#[tokio::test]
#[ignore = "needs a real API server: set KUBEBUILDER_ASSETS (etcd, kube-apiserver, kube-controller-manager) and run scripts/test-kube"]
async fn only_the_leader_reconciles_and_a_standby_takes_over() {
    let (cp, client) = control_plane().await;
    let a = Operator::start(&cp, "op-a").await;
    wait_for("op-a to lead", Duration::from_secs(30), || async {
        (a.metric("cnmysql_operator_leader").await == 1.0).then_some(())
    })
    .await;
    let b = Operator::start(&cp, "op-b").await;
    wait_for("op-b to be ready", Duration::from_secs(30), || async {
        (b.get("/readyz").await.map(|r| r.0) == Some(200)).then_some(())
    })
    .await;
    apply_cluster(&client, &cluster_manifest("db", "")).await;
    wait_for("db's Pods", Duration::from_secs(60), || async {
        (names::<Pod>(&client, "db").await.len() == 3).then_some(())
    })
    .await;
    assert_eq!(b.metric("cnmysql_operator_leader").await, 0.0);
    assert_eq!(
        b.metric("cnmysql_operator_reconciles_total").await,
        0.0,
        "the standby reconciled"
    );

    // The leader stops (a rolling update of the Deployment): it gives the
    // lease up on the way out, and the standby takes over and acts.
    let stopped = Instant::now();
    a.stop().await;
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "default");
    let lease = leases.get("cnmysql-operator").await.unwrap();
    let holder = lease.spec.and_then(|s| s.holder_identity);
    assert!(
        holder.as_deref() != Some("op-a"),
        "op-a kept the lease after stopping: {holder:?}"
    );
    wait_for("op-b to lead", Duration::from_secs(30), || async {
        (b.metric("cnmysql_operator_leader").await == 1.0).then_some(())
    })
    .await;
    eprintln!("leader handover: {:?}", stopped.elapsed());
    apply_cluster(&client, &cluster_manifest("db2", "")).await;
    wait_for(
        "db2's Pods from the new leader",
        Duration::from_secs(60),
        || async { (names::<Pod>(&client, "db2").await.len() == 3).then_some(()) },
    )
    .await;
    b.stop().await;
}

#[tokio::test]
#[ignore = "needs a real API server: set KUBEBUILDER_ASSETS (etcd, kube-apiserver, kube-controller-manager) and run scripts/test-kube"]
async fn the_deployed_rbac_is_enough_for_the_operator_to_run_a_cluster() {
    let (cp, client) = control_plane().await;
    let manifest =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/operator.yaml");
    let out = kubectl(
        &cp,
        &["apply", "--server-side", "-f", manifest.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Run as the operator's ServiceAccount, with exactly its ClusterRole.
    let kubeconfig = operator_kubeconfig(&cp, "cnmysql-system");
    let out = kubectl(
        &cp,
        &[
            "auth",
            "can-i",
            "delete",
            "secrets",
            "-n",
            "prod",
            "--as",
            "system:serviceaccount:cnmysql-system:cnmysql-operator",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "no",
        "the operator never deletes Secrets"
    );
    let op = Operator::start_with(&cp, "op-sa", &kubeconfig).await;
    apply_cluster(&client, &cluster_manifest("db", "")).await;
    wait_for(
        "the Cluster's objects, created with the deployed RBAC",
        Duration::from_secs(60),
        || async {
            let ok = names::<Pod>(&client, "db").await.len() == 3
                && names::<RoleBinding>(&client, "db").await.len() == 1
                && names::<PodDisruptionBudget>(&client, "db").await.len() == 2;
            ok.then_some(())
        },
    )
    .await;
    assert!(!op.log().contains("forbidden"), "{}", op.log());
    op.stop().await;
}

#[tokio::test]
#[ignore = "needs a real API server: set KUBEBUILDER_ASSETS (etcd, kube-apiserver, kube-controller-manager) and run scripts/test-kube"]
async fn a_namespaced_install_runs_a_cluster_with_no_secret_access_beyond_its_namespaces() {
    let (cp, client) = control_plane().await;
    // Generated as a team would: the operator in a namespace of its own
    // choosing, watching one namespace.
    let manifest = cnmysql_operator::install::generate(&cnmysql_operator::install::Options {
        namespace: "db-operators".into(),
        watch_namespaces: vec!["prod".into()],
        ..Default::default()
    })
    .unwrap();
    let file = cp.dir().join("namespaced.yaml");
    std::fs::write(&file, manifest).unwrap();
    let out = kubectl(
        &cp,
        &["apply", "--server-side", "-f", file.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sa = "system:serviceaccount:db-operators:cnmysql-operator";
    let can = |verb: &str, scope: &[&str]| {
        let mut args = vec!["auth", "can-i", verb, "secrets", "--as", sa];
        args.extend(scope);
        String::from_utf8_lossy(&kubectl(&cp, &args).stdout)
            .trim()
            .to_string()
    };
    assert_eq!(
        can("list", &["--all-namespaces"]),
        "no",
        "Secrets of every namespace"
    );
    assert_eq!(
        can("get", &["-n", "default"]),
        "no",
        "Secrets of another namespace"
    );
    assert_eq!(can("list", &["-n", "prod"]), "yes");
    let kubeconfig = operator_kubeconfig(&cp, "db-operators");
    // As deployed: the leader Lease in the operator's own namespace.
    let op = Operator::start_with_args(
        &cp,
        "op-ns",
        &kubeconfig,
        &[
            "--namespaces",
            "prod",
            "--leader-election-namespace",
            "db-operators",
        ],
    )
    .await;
    apply_cluster(&client, &cluster_manifest("db", "")).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let ok = names::<Pod>(&client, "db").await.len() == 3
            && names::<RoleBinding>(&client, "db").await.len() == 1
            && names::<PodDisruptionBudget>(&client, "db").await.len() == 2;
        if ok {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the Cluster's objects were not created with the namespaced RBAC within 60 s: {}",
            op.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!op.log().contains("forbidden"), "{}", op.log());
    op.stop().await;
}

/// A kubeconfig with a token of the operator's ServiceAccount: its
/// deployed RBAC and nothing more.
fn operator_kubeconfig(cp: &cnmysql_envtest::ControlPlane, namespace: &str) -> std::path::PathBuf {
    let out = kubectl(
        cp,
        &["create", "token", "cnmysql-operator", "-n", namespace],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout).unwrap();
    cp.kubeconfig_with_token("operator", token.trim()).unwrap()
}
