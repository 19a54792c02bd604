//! Declared databases, users and grants.

use super::*;

/// Whether every one of `names` (`kind/name`) has `Ready=True`.
pub(crate) async fn objects_ready(e: &Env, names: &[&str]) -> bool {
    use cnmysql_api::sql_objects::{Database, Grant, SqlObjectStatus, User};
    let ready = |s: Option<SqlObjectStatus>| {
        s.is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
    };
    let c = e.k.client.clone();
    for n in names {
        let (kind, name) = n.split_once('/').unwrap();
        let st = match kind {
            "Database" => Api::<Database>::namespaced(c.clone(), NS)
                .get_opt(name)
                .await
                .ok()
                .flatten()
                .and_then(|o| o.status),
            "User" => Api::<User>::namespaced(c.clone(), NS)
                .get_opt(name)
                .await
                .ok()
                .flatten()
                .and_then(|o| o.status),
            _ => Api::<Grant>::namespaced(c.clone(), NS)
                .get_opt(name)
                .await
                .ok()
                .flatten()
                .and_then(|o| o.status),
        };
        if !ready(st) {
            return false;
        }
    }
    true
}

pub(crate) async fn shopper_through_rw(
    e: &Env,
    password: &str,
) -> Result<mysql_async::Conn, String> {
    let rw =
        e.k.wait_service(NS, "db-rw")
            .await
            .map_err(|x| x.to_string())?;
    let opts = mysql_async::OptsBuilder::default()
        .ip_or_hostname(rw.ip().to_string())
        .tcp_port(rw.port())
        .user(Some("shopper"))
        .pass(Some(password))
        .prefer_socket(false);
    tokio::time::timeout(Duration::from_secs(5), mysql_async::Conn::new(opts))
        .await
        .map_err(|_| "no answer within 5 s".to_string())?
        .map_err(|x| x.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real Kubernetes node: root, KUBEBUILDER_ASSETS with etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and scripts/setup --kube; run scripts/test-kube"]
pub(crate) async fn declared_databases_users_and_grants_are_carried_out_rotated_and_deleted_by_policy()
 {
    let objects = format!(
        "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: shop-pw\n  namespace: {NS}\nstringData:\n  password: first-Pw1\n\
         ---\napiVersion: mysql.cnmysql.io/v1\nkind: Database\nmetadata:\n  name: shop\n  namespace: {NS}\nspec:\n  cluster: {{name: db}}\n  deletionPolicy: Delete\n\
         ---\napiVersion: mysql.cnmysql.io/v1\nkind: User\nmetadata:\n  name: shopper\n  namespace: {NS}\nspec:\n  cluster: {{name: db}}\n  passwordSecretKeyRef: {{name: shop-pw, key: password}}\n\
         ---\napiVersion: mysql.cnmysql.io/v1\nkind: Grant\nmetadata:\n  name: shopper-shop\n  namespace: {NS}\nspec:\n  cluster: {{name: db}}\n  privileges: [SELECT, INSERT, CREATE]\n  database: shop\n  username: shopper\n  deletionPolicy: Delete\n"
    );
    let e = env_with_manifest(&format!("{}{objects}", cluster_yaml("required")), &[]).await;
    let all = ["Database/shop", "User/shopper", "Grant/shopper-shop"];
    let r = until(
        "the three objects ready",
        Duration::from_secs(120),
        || async { objects_ready(&e, &all).await.then_some(()) },
    )
    .await;
    if let Err(err) = r {
        panic!("{err}\n{}", e.k.diagnose(NS, "db"));
    }
    let mut s = shopper_through_rw(&e, "first-Pw1")
        .await
        .expect("shopper connects through rw");
    s.query_drop("CREATE TABLE shop.orders (id INT PRIMARY KEY)")
        .await
        .unwrap();
    s.query_drop("INSERT INTO shop.orders VALUES (1)")
        .await
        .unwrap();
    drop(s);
    // The Secret rotated: the next pass sets it (within 30 s).
    let secrets: Api<Secret> = Api::namespaced(e.k.client.clone(), NS);
    let patch = serde_json::json!({"stringData": {"password": "second-Pw2"}});
    secrets
        .patch(
            "shop-pw",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let started = Instant::now();
    until("the rotated password", Duration::from_secs(90), || async {
        shopper_through_rw(&e, "second-Pw2").await.ok().map(|_| ())
    })
    .await
    .unwrap();
    let rotated = started.elapsed();
    assert!(shopper_through_rw(&e, "first-Pw1").await.is_err());
    // Deleted under deletionPolicy: Delete: the finalizer holds each until
    // the database is dropped and the grant revoked.
    let dbs: Api<cnmysql_api::sql_objects::Database> = Api::namespaced(e.k.client.clone(), NS);
    let grants: Api<cnmysql_api::sql_objects::Grant> = Api::namespaced(e.k.client.clone(), NS);
    dbs.delete("shop", &DeleteParams::default()).await.unwrap();
    grants
        .delete("shopper-shop", &DeleteParams::default())
        .await
        .unwrap();
    until(
        "both gone, and the database dropped",
        Duration::from_secs(90),
        || async {
            let gone = dbs.get_opt("shop").await.ok()?.is_none()
                && grants.get_opt("shopper-shop").await.ok()?.is_none();
            // As app (the shopper no longer sees the database either way).
            let rw = e.k.wait_service(NS, "db-rw").await.ok()?;
            let mut c = e.admin(rw).await;
            let n: Option<i64> = c
                .query_first(
                    "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'shop'",
                )
                .await
                .ok()?;
            (gone && n == Some(0)).then_some(())
        },
    )
    .await
    .unwrap();
    eprintln!(
        "declared objects: ready, password rotated {rotated:?} after the Secret changed, deleted by policy"
    );
}
