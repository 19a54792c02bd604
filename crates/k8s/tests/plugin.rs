//! API-call scenarios for the plugin's requests: what is sent to the API
//! server, in which order, and what is refused without writing anything.

use std::time::Duration;

use cnmysql_api::{Cluster, ClusterSpec, ClusterStatus};
use cnmysql_k8s::fake::FakeApi;
use cnmysql_k8s::plugin::{self, ClusterHandle};
use http::Method;
use serde_json::{Value, json};

const NS: &str = "shop";

fn cluster(status: ClusterStatus) -> Value {
    let spec: ClusterSpec = serde_json::from_value(json!({ "instances": 3 })).unwrap();
    let mut c = Cluster::new("db", spec);
    c.metadata.namespace = Some(NS.into());
    c.status = Some(status);
    serde_json::to_value(c).unwrap()
}

fn healthy() -> ClusterStatus {
    ClusterStatus {
        current_primary: Some("db-1".into()),
        target_primary: Some("db-1".into()),
        ..Default::default()
    }
}

fn setup(status: ClusterStatus) -> (FakeApi, ClusterHandle) {
    let api = FakeApi::new();
    api.put_cluster(cluster(status));
    let h = ClusterHandle::new(api.client(NS), NS, "db");
    (api, h)
}

fn status_of(api: &FakeApi) -> ClusterStatus {
    serde_json::from_value(api.cluster(NS, "db").unwrap()["status"].clone()).unwrap()
}

fn methods(api: &FakeApi) -> Vec<(Method, u16)> {
    api.calls()
        .into_iter()
        .map(|c| (c.method, c.status))
        .collect()
}

#[tokio::test]
async fn promote_sets_the_target_with_a_guarded_status_patch() {
    let (api, h) = setup(healthy());
    let rv_before = api.cluster(NS, "db").unwrap()["metadata"]["resourceVersion"].clone();
    let req = plugin::request_switchover(&h, "db-2").await.unwrap();
    assert_eq!(req.from, "db-1");
    assert_eq!(req.to, "db-2");

    let calls = api.calls();
    assert_eq!(
        methods(&api),
        [
            (Method::GET, 200),
            (Method::PATCH, 200),
            (Method::POST, 201)
        ]
    );
    assert_eq!(
        calls[0].path,
        "/apis/mysql.cnmysql.io/v1/namespaces/shop/clusters/db"
    );
    assert_eq!(
        calls[1].path,
        "/apis/mysql.cnmysql.io/v1/namespaces/shop/clusters/db/status"
    );
    assert_eq!(
        calls[1].content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    let patch = calls[1].body.clone().unwrap();
    assert_eq!(patch["metadata"]["resourceVersion"], rv_before);
    assert_eq!(patch["status"]["targetPrimary"], "db-2");
    assert_eq!(patch["status"]["phase"], "Switchover in progress");
    // Only the request is written: the current primary is the operator's.
    assert!(patch["status"].get("currentPrimary").is_none());
    let ts = patch["status"]["targetPrimaryTimestamp"].as_str().unwrap();
    assert!(ts.parse::<jiff::Timestamp>().is_ok(), "RFC 3339: {ts}");

    let st = status_of(&api);
    assert_eq!(st.target_primary.as_deref(), Some("db-2"));
    assert_eq!(st.current_primary.as_deref(), Some("db-1"));

    assert_eq!(
        calls[2].path,
        "/apis/events.k8s.io/v1/namespaces/shop/events"
    );
    let ev = &api.events()[0];
    assert_eq!(ev["reason"], "SwitchoverRequested");
    assert_eq!(ev["type"], "Normal");
    assert_eq!(ev["regarding"]["kind"], "Cluster");
    assert_eq!(ev["regarding"]["name"], "db");
    assert_eq!(ev["regarding"]["apiVersion"], "mysql.cnmysql.io/v1");
}

#[tokio::test]
async fn a_refused_promote_writes_no_status() {
    for (status, target, why, reason) in [
        (
            ClusterStatus {
                fenced_instances: vec!["db-2".into()],
                ..healthy()
            },
            "db-2",
            "fenced",
            "TargetFenced",
        ),
        (
            ClusterStatus {
                diverged_instances: vec!["db-3".into()],
                ..healthy()
            },
            "db-3",
            "diverged",
            "TargetDiverged",
        ),
        (healthy(), "db-1", "already the primary", "AlreadyPrimary"),
        (
            healthy(),
            "db-4",
            "not an instance of cluster db",
            "NotAMember",
        ),
        (
            ClusterStatus {
                target_primary: Some("db-3".into()),
                ..healthy()
            },
            "db-2",
            "already in progress",
            "ChangeInProgress",
        ),
        (
            ClusterStatus::default(),
            "db-2",
            "no primary yet",
            "NoPrimaryYet",
        ),
    ] {
        let (api, h) = setup(status.clone());
        let err = plugin::request_switchover(&h, target)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(why), "{target}: {err}");
        assert!(
            api.calls().iter().all(|c| c.method != Method::PATCH),
            "{target}: nothing may be patched"
        );
        assert_eq!(status_of(&api), status);
        let ev = &api.events()[0];
        assert_eq!(ev["reason"], "SwitchoverRefused");
        assert_eq!(ev["type"], "Warning");
        // The refusal's typed reason, for a reader and for alerting.
        let note = ev["note"].as_str().unwrap_or_default();
        assert!(note.contains(&format!("({})", reason)), "{target}: {note}");
    }
}

#[tokio::test]
async fn a_concurrent_status_write_is_kept_and_the_request_retried() {
    let (api, h) = setup(healthy());
    // The operator records a GTID between our read and our patch.
    api.before_next_patch(|c| {
        c["status"]["gtidExecutedByInstance"] = json!({"db-1": "0-1-42"});
    });
    plugin::request_switchover(&h, "db-2").await.unwrap();
    assert_eq!(
        methods(&api),
        [
            (Method::GET, 200),
            (Method::PATCH, 409),
            (Method::GET, 200),
            (Method::PATCH, 200),
            (Method::POST, 201)
        ]
    );
    let st = status_of(&api);
    assert_eq!(st.target_primary.as_deref(), Some("db-2"));
    assert_eq!(st.gtid_executed_by_instance["db-1"], "0-1-42");
}

#[tokio::test]
async fn a_concurrent_failover_makes_the_retry_refuse() {
    let (api, h) = setup(healthy());
    api.before_next_patch(|c| {
        c["status"]["targetPrimary"] = json!("db-3");
        c["status"]["phase"] = json!("Failing over");
    });
    let err = plugin::request_switchover(&h, "db-2")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("already in progress"), "{err}");
    assert_eq!(status_of(&api).target_primary.as_deref(), Some("db-3"));
}

#[tokio::test]
async fn a_missing_cluster_names_the_namespace() {
    let api = FakeApi::new();
    let h = ClusterHandle::new(api.client(NS), NS, "nope");
    let err = plugin::request_switchover(&h, "nope-2")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cluster nope not found in namespace shop"),
        "{err}"
    );
    assert!(err.contains("-n NAMESPACE"), "{err}");
}

#[tokio::test]
async fn fencing_edits_the_list_and_is_idempotent() {
    let (api, h) = setup(healthy());
    let f = plugin::set_fencing(&h, "db-2", true).await.unwrap();
    assert!(f.changed && !f.primary);
    assert_eq!(status_of(&api).fenced_instances, ["db-2"]);
    let patch = api.calls()[1].body.clone().unwrap();
    assert_eq!(patch["status"], json!({"fencedInstances": ["db-2"]}));
    assert!(patch["metadata"]["resourceVersion"].is_string());

    // Again: nothing to write.
    let n = api.calls().len();
    let f = plugin::set_fencing(&h, "db-2", true).await.unwrap();
    assert!(!f.changed);
    assert_eq!(api.calls().len(), n + 1, "one GET, no PATCH");

    // The primary too: the result says writes stop.
    let f = plugin::set_fencing(&h, "db-1", true).await.unwrap();
    assert!(f.changed && f.primary);
    assert_eq!(status_of(&api).fenced_instances, ["db-1", "db-2"]);
    let last = api.events().last().unwrap().clone();
    assert_eq!(last["reason"], "Fenced");
    assert!(last["note"].as_str().unwrap().contains("accepts no writes"));

    plugin::set_fencing(&h, "db-1", false).await.unwrap();
    plugin::set_fencing(&h, "db-2", false).await.unwrap();
    assert!(status_of(&api).fenced_instances.is_empty());
    assert_eq!(api.events().last().unwrap()["reason"], "Unfenced");
}

#[tokio::test]
async fn fencing_refuses_a_stranger_and_survives_a_concurrent_fence() {
    let (api, h) = setup(healthy());
    let err = plugin::set_fencing(&h, "other-2", true)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("not an instance of cluster db"), "{err}");
    assert!(api.calls().iter().all(|c| c.method != Method::PATCH));

    // Someone fences db-3 between our read and our write: both stay fenced.
    api.before_next_patch(|c| c["status"]["fencedInstances"] = json!(["db-3"]));
    plugin::set_fencing(&h, "db-2", true).await.unwrap();
    assert_eq!(status_of(&api).fenced_instances, ["db-2", "db-3"]);
}

#[tokio::test]
async fn waiting_follows_the_operator() {
    let (api, h) = setup(healthy());
    plugin::request_switchover(&h, "db-2").await.unwrap();
    let operator = api.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut c = operator.cluster(NS, "db").unwrap();
        c["status"]["currentPrimary"] = json!("db-2");
        operator.put_cluster(c);
    });
    let took = plugin::wait_for_switchover(
        &h,
        "db-2",
        Duration::from_secs(10),
        Duration::from_millis(10),
    )
    .await
    .unwrap();
    assert!(took < Duration::from_secs(10));

    // An aborted switchover: the operator gives the role back, with a reason.
    let (api, h) = setup(healthy());
    plugin::request_switchover(&h, "db-3").await.unwrap();
    let mut c = api.cluster(NS, "db").unwrap();
    c["status"]["targetPrimary"] = json!("db-1");
    c["status"]["phaseReason"] = json!(
        "switchover to db-3 blocked: it did not catch up with db-1 within maxSwitchoverDelay (3600s)"
    );
    api.put_cluster(c);
    let err = plugin::wait_for_switchover(
        &h,
        "db-3",
        Duration::from_secs(10),
        Duration::from_millis(10),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("did not catch up"), "{err}");

    // Nothing happens: the wait ends at its limit and says the request stands.
    let (_api, h) = setup(healthy());
    plugin::request_switchover(&h, "db-2").await.unwrap();
    let err = plugin::wait_for_switchover(
        &h,
        "db-2",
        Duration::from_millis(50),
        Duration::from_millis(10),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("the request stands"), "{err}");
}
