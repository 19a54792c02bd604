//! API-call scenarios of the operator's status writes against the in-memory
//! API (the same scenarios run against a real API server in the ignored
//! tests of `crates/cnmysql/tests/operator.rs` and `instances_kube.rs`).

use cnmysql_api::{Cluster, ClusterSpec, ClusterStatus};
use cnmysql_core::status_change::StatusChange;
use cnmysql_k8s::fake::FakeApi;
use cnmysql_operator::context::Context;
use cnmysql_operator::metrics::Metrics;
use cnmysql_operator::objects::Environment;
use serde_json::json;

fn context(api: &FakeApi) -> Context {
    Context::new(
        api.client("prod"),
        Environment {
            operator_image: "registry.example/cnmysql:test".into(),
        },
        "0".repeat(64),
        Metrics::default(),
    )
}

/// Each call the operator made, as (method, status), in order.
fn methods_and_statuses(api: &FakeApi) -> Vec<(String, u16)> {
    api.calls()
        .iter()
        .map(|c| (c.method.to_string(), c.status))
        .collect()
}

fn cluster(api: &FakeApi) -> Cluster {
    let spec: ClusterSpec = serde_json::from_value(json!({ "instances": 3 })).unwrap();
    let mut c = Cluster::new("db", spec);
    c.metadata.namespace = Some("prod".into());
    c.status = Some(ClusterStatus {
        current_primary: Some("db-1".into()),
        target_primary: Some("db-1".into()),
        ..Default::default()
    });
    api.put_cluster(serde_json::to_value(&c).unwrap());
    serde_json::from_value(api.cluster("prod", "db").unwrap()).unwrap()
}

#[tokio::test]
async fn a_conflicting_status_write_is_retried_on_the_fresh_object_keeping_the_other_change() {
    let api = FakeApi::new();
    let c = cluster(&api);
    let ctx = context(&api);
    // The plugin fences db-3 between the operator's read and its write.
    api.before_next_patch(|obj| obj["status"]["fencedInstances"] = json!(["db-3"]));
    let change = StatusChange::PrimaryFailingSince(Some("2026-11-23T10:00:00Z".into()));
    assert!(
        cnmysql_operator::topology::change_status(&ctx, &c, &change)
            .await
            .unwrap()
    );

    let st: ClusterStatus =
        serde_json::from_value(api.cluster("prod", "db").unwrap()["status"].clone()).unwrap();
    assert_eq!(
        st.fenced_instances,
        ["db-3"],
        "the other writer's change is kept"
    );
    assert_eq!(
        st.primary_failing_since.as_deref(),
        Some("2026-11-23T10:00:00Z")
    );
    let calls = methods_and_statuses(&api);
    // The write is sent at the cached copy's resourceVersion without a
    // read first; the API server refuses it (the plugin wrote in between),
    // so the operator reads the fresh object and computes the change again.
    assert_eq!(
        calls,
        [
            ("PATCH".to_string(), 409),
            ("GET".to_string(), 200),
            ("PATCH".to_string(), 200)
        ]
    );
    // Each write names the resourceVersion it was computed from and carries
    // only what changed.
    let patches: Vec<serde_json::Value> = api
        .calls()
        .into_iter()
        .filter(|c| c.method == http::Method::PATCH)
        .filter_map(|c| c.body)
        .collect();
    assert_ne!(
        patches[0]["metadata"]["resourceVersion"],
        patches[1]["metadata"]["resourceVersion"]
    );
    for p in &patches {
        assert_eq!(
            p["status"].as_object().unwrap().keys().collect::<Vec<_>>(),
            ["primaryFailingSince"],
            "{p}"
        );
    }
}

#[tokio::test]
async fn a_change_that_no_longer_applies_to_the_fresh_object_writes_nothing() {
    let api = FakeApi::new();
    let mut c = cluster(&api);
    // The operator's cache: a switchover to db-2 in progress ...
    c.status.as_mut().unwrap().target_primary = Some("db-2".into());
    // ... which on the API server has completed already.
    let mut done = serde_json::to_value(&c).unwrap();
    done["status"]["currentPrimary"] = json!("db-2");
    api.put_cluster(done);
    let ctx = context(&api);
    let change = StatusChange::AbortSwitchover {
        current: Some("db-1".into()),
        at: "2026-11-23T10:00:00Z".into(),
        reason: "switchover to db-2 blocked: it did not catch up".into(),
    };
    assert!(
        !cnmysql_operator::topology::change_status(&ctx, &c, &change)
            .await
            .unwrap()
    );
    let calls = methods_and_statuses(&api);
    assert_eq!(
        calls,
        [("PATCH".to_string(), 409), ("GET".to_string(), 200)],
        "the stale write refused, the fresh object read and found done, nothing written"
    );
    let st = &api.cluster("prod", "db").unwrap()["status"];
    assert_eq!(st["targetPrimary"], "db-2");
}

/// One topology step of the core over `c` with `absent` instances' Pods
/// gone, its memory kept as the topology task keeps it.
/// `failing`: the primary has been failing for long (failover is decided).
fn topology_step(
    ctx: &Context,
    c: &Cluster,
    absent: &[String],
    failing: bool,
) -> cnmysql_core::ready::Ready {
    let mut memory = ctx.memory.core(c);
    memory.first_step_ms.get_or_insert(0);
    let mut snapshot = cnmysql_core::status::Snapshot {
        cluster: "db".into(),
        spec: c.spec.clone(),
        status: c.status.clone().unwrap_or_default(),
        instances: Vec::new(),
        now_ms: 1_900_000_000_000,
        declared: Default::default(),
    };
    snapshot.instances = cnmysql_operator::objects::instances(c)
        .into_iter()
        .enumerate()
        .map(|(i, name)| cnmysql_core::status::Observed {
            name,
            ordinal: i as u32 + 1,
            status: None,
            outdated: None,
        })
        .collect();
    if failing {
        snapshot.status.primary_failing_since = Some("2026-01-01T00:00:00Z".into());
    }
    let ready = cnmysql_core::ready::ready(
        &cnmysql_core::reconcile::Observation {
            fence_early: true,
            ..cnmysql_core::testutil::observe(&snapshot, absent)
        },
        &mut memory,
    );
    ctx.memory.set_core(c, &memory);
    ready
}

fn held_down(ctx: &Context, c: &Cluster) -> Vec<String> {
    ctx.memory.core(c).held_down.into_iter().collect()
}

/// One pass of the topology task over `c` as far as Pods go: the core's
/// step with the instances that have no Pod in the fake absent, then the
/// Pods brought to its answer. `existing`: Pods put in the fake first, as
/// the operator left them. Returns the step's actions.
async fn one_pass(
    api: &FakeApi,
    ctx: &Context,
    c: &Cluster,
    existing: &[&str],
    failing: bool,
) -> Vec<cnmysql_core::action::Action> {
    let status = c.status.clone().unwrap_or_default();
    for n in existing {
        let mut p = cnmysql_operator::objects::pod::pod(c, n, &ctx.env);
        let roles = cnmysql_operator::objects::pod::role_labels(&status, n);
        p.metadata.labels.get_or_insert_default().extend(roles);
        api.put_pod(serde_json::to_value(&p).unwrap());
    }
    let live = pods_in(api);
    let absent: Vec<String> = cnmysql_operator::objects::instances(c)
        .into_iter()
        .filter(|n| !live.contains_key(n))
        .collect();
    let ready = topology_step(ctx, c, &absent, failing);
    ctx.memory.set_ground(
        c,
        cnmysql_operator::pods::Ground {
            instances: cnmysql_operator::objects::instances(c)
                .into_iter()
                .collect(),
            image: status.target_image.clone(),
        },
    );
    cnmysql_operator::pods::converge(ctx, c, &live, &ready.running)
        .await
        .unwrap();
    ready.actions
}

#[tokio::test]
async fn a_steady_primary_whose_pod_is_gone_is_held_down_for_the_failover_decision() {
    let api = FakeApi::new();
    let c = cluster(&api);
    let ctx = context(&api);
    // db-1 is the primary and its Pod is gone; db-3's too.
    one_pass(&api, &ctx, &c, &["db-2"], false).await;
    assert_eq!(
        api.pods("prod"),
        ["db-2", "db-3"],
        "the replica's Pod is made again, the primary's is not (it would come back as the primary)"
    );
    // The step recorded the hold-down from the Pod's absence.
    assert_eq!(held_down(&ctx, &c), ["db-1"]);
    // The next pass still leaves it down.
    one_pass(&api, &ctx, &c, &[], false).await;
    assert_eq!(api.pods("prod"), ["db-2", "db-3"]);
    let posts: Vec<String> = api
        .calls()
        .into_iter()
        .filter(|c| c.method == http::Method::POST)
        .map(|c| {
            c.body.unwrap()["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        posts,
        ["db-3"],
        "the operator created db-3 once and db-1 never"
    );
}

#[tokio::test]
async fn a_restarted_operator_holds_the_gone_primary_down_from_the_status_alone() {
    let api = FakeApi::new();
    let c = cluster(&api);
    // A fresh operator: nothing in memory, only the status says db-1 leads.
    let ctx = context(&api);
    assert!(held_down(&ctx, &c).is_empty());
    one_pass(&api, &ctx, &c, &["db-2", "db-3"], false).await;
    assert_eq!(api.pods("prod"), ["db-2", "db-3"]);
    assert_eq!(held_down(&ctx, &c), ["db-1"]);
}

#[tokio::test]
async fn no_pod_is_made_before_the_reconcile_has_laid_its_groundwork() {
    let api = FakeApi::new();
    let c = cluster(&api);
    let ctx = context(&api);
    let ready = topology_step(&ctx, &c, &["db-2".to_string()], false);
    cnmysql_operator::pods::converge(&ctx, &c, &Default::default(), &ready.running)
        .await
        .unwrap();
    assert!(api.pods("prod").is_empty());
    assert!(api.calls().is_empty(), "no API call for nothing to do");
}

#[tokio::test]
async fn a_primary_handing_over_is_recreated_so_the_switchover_can_finish() {
    let api = FakeApi::new();
    let mut c = cluster(&api);
    // A switchover from db-1 to db-2 is under way when db-1's Pod goes.
    c.status.as_mut().unwrap().target_primary = Some("db-2".into());
    let ctx = context(&api);
    one_pass(&api, &ctx, &c, &["db-2", "db-3"], false).await;
    assert_eq!(api.pods("prod"), ["db-1", "db-2", "db-3"]);
    assert!(held_down(&ctx, &c).is_empty());
}

#[tokio::test]
async fn a_single_instance_is_recreated_in_place_at_once() {
    let api = FakeApi::new();
    let mut c = cluster(&api);
    c.spec.instances = 1;
    let ctx = context(&api);
    one_pass(&api, &ctx, &c, &[], false).await;
    assert_eq!(api.pods("prod"), ["db-1"]);
}

#[tokio::test]
async fn a_held_down_primary_the_step_lets_come_back_is_recreated_not_held_down_again() {
    // Issue 18: failover was blocked, the topology step restarted the old
    // primary, and the Pod rule held it down again, every 200 ms for five
    // minutes, while the cluster had no primary.
    let api = FakeApi::new();
    let c = cluster(&api);
    let ctx = context(&api);
    one_pass(&api, &ctx, &c, &["db-2", "db-3"], false).await;
    assert_eq!(api.pods("prod"), ["db-2", "db-3"]);
    assert_eq!(held_down(&ctx, &c), ["db-1"]);
    // The core step, with db-1 gone and its last GTID state never observed:
    // failover is blocked, so it lets db-1 come back in place, in this pass.
    let actions = one_pass(&api, &ctx, &c, &[], true).await;
    assert!(
        actions.contains(&cnmysql_core::action::Action::Restart("db-1".into())),
        "{actions:?}"
    );
    assert_eq!(api.pods("prod"), ["db-1", "db-2", "db-3"]);
    one_pass(&api, &ctx, &c, &[], true).await;
    assert_eq!(api.pods("prod"), ["db-1", "db-2", "db-3"]);
    assert!(held_down(&ctx, &c).is_empty());
}

/// What the snapshot's instances answer: three ready MariaDB 10.11.19
/// instances, db-1 the primary.
fn observed() -> Vec<cnmysql_core::status::Observed> {
    use cnmysql_core::status::{InstancePhase, InstanceStatus, Observed, Role};
    (1..=3)
        .map(|i| Observed {
            name: format!("db-{i}"),
            ordinal: i,
            status: Some(InstanceStatus {
                instance: format!("db-{i}"),
                phase: InstancePhase::Running,
                role: if i == 1 { Role::Primary } else { Role::Replica },
                mysqld_running: true,
                ready: true,
                server_version: "10.11.19-MariaDB".into(),
                executable_hash: "0".repeat(64),
                ..Default::default()
            }),
            outdated: None,
        })
        .collect()
}

fn pods_in(api: &FakeApi) -> std::collections::BTreeMap<String, k8s_openapi::api::core::v1::Pod> {
    api.pods("prod")
        .into_iter()
        .map(|n| {
            let p = serde_json::from_value(api.pod("prod", &n).unwrap()).unwrap();
            (n, p)
        })
        .collect()
}

#[tokio::test]
async fn an_annotated_upgrade_is_read_from_its_pod_recorded_mirrored_and_carried_by_the_pod_made_again()
 {
    use cnmysql_core::upgrade::annotations::{UPGRADE_STATUS, UPGRADE_TO};
    let api = FakeApi::new();
    let c = cluster(&api);
    let ctx = context(&api);
    let desired = cnmysql_operator::objects::desired(&c, &ctx.env);
    for p in &desired.pods {
        api.put_pod(serde_json::to_value(p).unwrap());
    }
    let old_db2 = pods_in(&api)["db-2"].clone();
    // Asked on db-2's Pod (as `kubectl annotate pod db-2 …` does).
    let ask = |k: &str, v: Option<&str>| {
        std::collections::BTreeMap::from([(k.to_string(), v.map(str::to_string))])
    };
    cnmysql_operator::instance_upgrade::annotate(
        &ctx,
        &c,
        Some("db-2"),
        &ask(UPGRADE_TO, Some("image=mariadb:11.8")),
    )
    .await
    .unwrap();
    // Read back, with the server it names resolved by its tag; a Pod being
    // deleted is unknown rather than unannotated.
    let mut pods = pods_in(&api);
    pods.get_mut("db-3").unwrap().metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
    );
    let asked = cnmysql_operator::instance_upgrade::asked(&ctx, &c, &pods).await;
    assert_eq!(asked.instances["db-2"][UPGRADE_TO], "image=mariadb:11.8");
    assert!(!asked.instances.contains_key("db-3"));
    let target = asked.servers["image=mariadb:11.8"].clone().unwrap();
    assert_eq!(
        (target.image.as_str(), target.version.as_str()),
        ("mariadb:11.8", "11.8")
    );

    // The core starts the attempt; the operator records it and mirrors it
    // on the Pod.
    let snapshot = cnmysql_core::status::Snapshot {
        cluster: "db".into(),
        spec: c.spec.clone(),
        status: c.status.clone().unwrap_or_default(),
        instances: observed(),
        now_ms: 1_900_000_000_000,
        declared: cnmysql_core::declared::Declared {
            asked,
            ..Default::default()
        },
    };
    let pass = cnmysql_core::upgrade::annotated_pass::pass(&snapshot, &Default::default());
    let change = &pass.changes[0];
    assert_eq!(change.instance, "db-2");
    let record = change.record.clone().unwrap();
    assert_eq!(
        (record.status.as_str(), record.image.as_deref()),
        ("in-progress", Some("mariadb:11.8"))
    );
    assert!(
        cnmysql_operator::topology::change_status(
            &ctx,
            &c,
            &StatusChange::InstanceUpgrade {
                instance: "db-2".into(),
                record: Some(record.clone()),
            },
        )
        .await
        .unwrap()
    );
    let (who, set) = &pass.annotate[0];
    cnmysql_operator::instance_upgrade::annotate(&ctx, &c, Some(who), set)
        .await
        .unwrap();
    let pod = api.pod("prod", "db-2").unwrap();
    assert_eq!(
        pod["metadata"]["annotations"][UPGRADE_STATUS],
        "in-progress"
    );
    assert_eq!(
        pod["metadata"]["annotations"]["cnmysql.io/upgrade-attempts"],
        "1"
    );

    // The Pod as it is made again: on the pinned image, outdated against
    // the old one, carrying what was asked and where it stands; the other
    // instances keep the cluster's image.
    let c: Cluster = serde_json::from_value(api.cluster("prod", "db").unwrap()).unwrap();
    let again = cnmysql_operator::objects::desired(&c, &ctx.env);
    let db2 = again
        .pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("db-2"))
        .unwrap();
    assert_eq!(
        db2.spec.as_ref().unwrap().containers[0].image.as_deref(),
        Some("mariadb:11.8")
    );
    let a = db2.metadata.annotations.as_ref().unwrap();
    assert_eq!(
        (a[UPGRADE_TO].as_str(), a[UPGRADE_STATUS].as_str()),
        ("image=mariadb:11.8", "in-progress")
    );
    assert!(
        cnmysql_operator::objects::definition::outdated(&old_db2, &c)
            .is_some_and(|o| o.contains("mariadb:11.8")),
    );
    let db1 = again
        .pods
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("db-1"))
        .unwrap();
    assert_ne!(
        db1.spec.as_ref().unwrap().containers[0].image.as_deref(),
        Some("mariadb:11.8")
    );
    assert!(
        !db1.metadata
            .annotations
            .as_ref()
            .unwrap()
            .contains_key(UPGRADE_TO)
    );

    // The Cluster's own annotations are patched on its metadata, the
    // status untouched.
    cnmysql_operator::instance_upgrade::annotate(
        &ctx,
        &c,
        None,
        &ask(UPGRADE_STATUS, Some("done")),
    )
    .await
    .unwrap();
    let obj = api.cluster("prod", "db").unwrap();
    assert_eq!(obj["metadata"]["annotations"][UPGRADE_STATUS], "done");
    assert_eq!(
        obj["status"]["instanceUpgrades"]["db-2"]["status"],
        "in-progress"
    );
}
