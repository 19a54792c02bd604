//! API-call scenarios of the operator's status writes against the in-memory
//! API (the same scenarios run against a real API server in the ignored
//! tests of `crates/cnmysql/tests/operator.rs` and `instances_kube.rs`).

use cnmysql_api::{Cluster, ClusterSpec, ClusterStatus};
use cnmysql_core::reconcile::StatusChange;
use cnmysql_k8s::fake::FakeApi;
use cnmysql_operator::context::Context;
use cnmysql_operator::metrics::Metrics;
use cnmysql_operator::objects::Environment;
use serde_json::json;

fn context(api: &FakeApi) -> Context {
    Context {
        client: api.client("prod"),
        env: Environment {
            operator_image: "registry.example/cnmysql:test".into(),
        },
        operator_hash: "0".repeat(64),
        metrics: Metrics::default(),
        topology: Default::default(),
        clusters: Default::default(),
        pods: Default::default(),
        secrets: Default::default(),
        stop: tokio::sync::watch::channel(false).0,
    }
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
    let calls: Vec<(String, u16)> = api
        .calls()
        .iter()
        .map(|c| (c.method.to_string(), c.status))
        .collect();
    assert_eq!(
        calls,
        [
            ("GET".to_string(), 200),
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
    };
    assert!(
        !cnmysql_operator::topology::change_status(&ctx, &c, &change)
            .await
            .unwrap()
    );
    let methods: Vec<String> = api.calls().iter().map(|c| c.method.to_string()).collect();
    assert_eq!(methods, ["GET"], "read, found done, no write");
    let st = &api.cluster("prod", "db").unwrap()["status"];
    assert_eq!(st["targetPrimary"], "db-2");
}
