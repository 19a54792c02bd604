//! The operator's status writes from its watch cache's copy of a Cluster
//! (`ClusterHandle::update_status_if_changed`): what reaches the API
//! server when that copy is current, and when another writer got there
//! first.

use cnmysql_api::{Cluster, ClusterSpec, ClusterStatus};
use cnmysql_k8s::cluster_handle::ClusterHandle;
use cnmysql_k8s::fake::FakeApi;
use http::Method;
use serde_json::json;

const NS: &str = "shop";

fn setup() -> (FakeApi, ClusterHandle) {
    let spec: ClusterSpec = serde_json::from_value(json!({ "instances": 3 })).unwrap();
    let mut c = Cluster::new("db", spec);
    c.metadata.namespace = Some(NS.into());
    c.status = Some(ClusterStatus {
        current_primary: Some("db-1".into()),
        ..Default::default()
    });
    let api = FakeApi::new();
    api.put_cluster(serde_json::to_value(c).unwrap());
    let h = ClusterHandle::new(api.client(NS), NS, "db");
    (api, h)
}

fn methods(api: &FakeApi) -> Vec<(Method, u16)> {
    api.calls()
        .into_iter()
        .map(|c| (c.method, c.status))
        .collect()
}

fn status_of(api: &FakeApi) -> ClusterStatus {
    serde_json::from_value(api.cluster(NS, "db").unwrap()["status"].clone()).unwrap()
}

/// A current copy: one conditional patch, no read (under writes the
/// topology task writes about once a second; the read was half of it).
#[tokio::test]
async fn a_current_copy_is_written_without_a_read() {
    let (api, h) = setup();
    let seen = h.get().await.unwrap();
    let done = h
        .update_status_if_changed(&seen, |_, st| {
            st.lagging_instances = vec!["db-3".into()];
        })
        .await
        .unwrap()
        .expect("written");
    assert!(done.written);
    assert_eq!(methods(&api), [(Method::GET, 200), (Method::PATCH, 200)]);
    assert_eq!(status_of(&api).lagging_instances, ["db-3"]);
    let rv = api.cluster(NS, "db").unwrap()["metadata"]["resourceVersion"].clone();
    assert_eq!(done.resource_version.as_deref(), rv.as_str());
}

/// A stale copy: the patch at its resourceVersion is refused, the Cluster
/// read, the change computed again and written; the other writer's change
/// is kept.
#[tokio::test]
async fn a_stale_copy_is_refused_then_read_and_nothing_is_lost() {
    let (api, h) = setup();
    let seen = h.get().await.unwrap();
    api.before_next_patch(|c| {
        c["status"]["gtidExecutedByInstance"] = json!({"db-1": "0-1-42"});
    });
    h.update_status_if_changed(&seen, |_, st| {
        st.lagging_instances = vec!["db-3".into()];
    })
    .await
    .unwrap()
    .expect("written");
    assert_eq!(
        methods(&api),
        [
            (Method::GET, 200),
            (Method::PATCH, 409),
            (Method::GET, 200),
            (Method::PATCH, 200)
        ]
    );
    let st = status_of(&api);
    assert_eq!(st.lagging_instances, ["db-3"]);
    assert_eq!(st.gtid_executed_by_instance["db-1"], "0-1-42");
}

/// Nothing to change: nothing asked.
#[tokio::test]
async fn an_unchanged_status_asks_nothing() {
    let (api, h) = setup();
    let seen = h.get().await.unwrap();
    let done = h
        .update_status_if_changed(&seen, |_, st| {
            st.current_primary = Some("db-1".into());
        })
        .await
        .unwrap();
    assert!(done.is_none());
    assert_eq!(methods(&api), [(Method::GET, 200)]);
}
