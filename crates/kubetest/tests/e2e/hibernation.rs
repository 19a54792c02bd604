//! Hibernation: every Pod stopped, the claims kept, the same primary back.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn hibernation_stops_every_pod_keeps_the_claims_and_brings_back_the_same_primary()
{
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let e = env("required").await;
    let rw = e.k.wait_service(NS, "db-rw").await.unwrap();
    let mut c = e.admin(rw).await;
    c.query_drop("CREATE TABLE app.h (i INT PRIMARY KEY)")
        .await
        .unwrap();
    c.query_drop("INSERT INTO app.h VALUES (1), (2), (3)")
        .await
        .unwrap();
    drop(c);
    let primary = e.status().await.current_primary.unwrap();
    e.plugin(&["cnmsql", "-n", NS, "hibernate", "on", "db"]);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(e.k.client.clone(), NS);
    until(
        "every Pod gone, the claims kept",
        Duration::from_secs(180),
        || async {
            let pods = e.pods.list(&ListParams::default()).await.ok()?.items;
            let kept = claims.list(&ListParams::default()).await.ok()?.items.len();
            let st = e.status().await;
            (pods.is_empty() && kept == 3 && st.phase == Some(cnmysql_api::Phase::Hibernated))
                .then_some(())
        },
    )
    .await
    .unwrap();
    let st = e.status().await;
    assert!(st.hibernated);
    assert!(
        st.phase_reason
            .unwrap_or_default()
            .contains("cnmysql.io/hibernation"),
        "the status says why"
    );
    assert_eq!(st.current_primary.as_deref(), Some(primary.as_str()));

    e.plugin(&["cnmsql", "-n", NS, "hibernate", "off", "db"]);
    until(
        "the cluster back, whole",
        Duration::from_secs(240),
        || async {
            let st = e.status().await;
            (!st.hibernated && st.ready_instances == 3).then_some(())
        },
    )
    .await
    .unwrap();
    let st = e.status().await;
    assert_eq!(
        st.current_primary.as_deref(),
        Some(primary.as_str()),
        "the same primary comes back"
    );
    assert!(st.diverged_instances.is_empty());
    let rows = until("the rows through rw", Duration::from_secs(60), || async {
        let mut c = e.admin(rw).await;
        c.query_first::<i64, _>("SELECT COUNT(*) FROM app.h")
            .await
            .ok()?
    })
    .await
    .unwrap();
    assert_eq!(rows, 3);
}
