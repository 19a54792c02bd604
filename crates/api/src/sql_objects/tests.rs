use super::*;

fn grant(yaml: &str) -> GrantSpec {
    serde_saphyr::from_str(yaml).unwrap()
}

#[test]
fn a_grant_names_known_privileges_on_a_database_or_a_table_of_one() {
    let g = grant(
        "cluster: {name: db}\nprivileges: [select, Insert]\ndatabase: shop\nusername: shopper\n",
    );
    assert!(g.check().is_empty(), "{:?}", g.check());
    assert_eq!((g.table.as_str(), g.host.as_str()), ("*", "%"));
    let g = grant(
        "cluster: {name: db}\nprivileges: [SUPER]\ndatabase: '*'\ntable: orders\nusername: root\n",
    );
    let fields: Vec<String> = g.check().into_iter().map(|e| e.field).collect();
    assert_eq!(
        fields,
        ["spec.privileges[0]", "spec.table", "spec.username"]
    );
}

#[test]
fn a_users_name_and_secret_are_names_never_paths() {
    let user = |name: &str, secret: &str, key: &str| -> Vec<String> {
        let u: UserSpec = serde_saphyr::from_str(&format!(
            "cluster: {{name: db}}\nname: {name:?}\npasswordSecretKeyRef: {{name: {secret:?}, key: {key:?}}}\n"
        ))
        .unwrap();
        u.check("x").into_iter().map(|e| e.field).collect()
    };
    assert!(user("svc.reader", "shop-pw", "password").is_empty());
    assert_eq!(user("a.b'c", "shop-pw", "password"), ["spec.name"]);
    assert_eq!(user("Root", "shop-pw", "password"), ["spec.name"]);
    assert_eq!(
        user("evil", "../../etc", "passwd"),
        ["spec.passwordSecretKeyRef.name"]
    );
    assert_eq!(
        user("evil", "shop-pw", ".."),
        ["spec.passwordSecretKeyRef.key"]
    );
    assert_eq!(
        user("evil", "shop-pw", "a/b"),
        ["spec.passwordSecretKeyRef.key"]
    );
}

#[test]
fn a_manifest_document_is_parsed_by_kind_and_checked() {
    let doc = "apiVersion: mysql.cnmysql.io/v1\nkind: Database\nmetadata:\n  name: shop\nspec:\n  cluster: {name: db}\n  deletionPolicy: Delete\n";
    let d = SqlObjectDoc::parse("Database", doc).unwrap().unwrap();
    assert_eq!((d.key().as_str(), d.cluster()), ("Database/shop", "db"));
    assert_eq!(d.deletion_policy(), DeletionPolicy::Delete);
    assert!(SqlObjectDoc::parse("Cluster", doc).is_none());
    let bad = doc.replace("shop", "mysql");
    let e = SqlObjectDoc::parse("Database", &bad).unwrap().unwrap_err();
    assert_eq!(e[0].field, "spec.name");
}

#[test]
fn a_user_may_not_be_one_the_cluster_owns_and_a_database_not_the_servers() {
    let u: UserSpec = serde_saphyr::from_str(
        "cluster: {name: db}\nname: app\npasswordSecretKeyRef: {name: s, key: password}\nlimits: {maxUserConnections: 10}\n",
    )
    .unwrap();
    assert_eq!(
        u.limits.clone().unwrap_or_default().max_user_connections,
        Some(10)
    );
    let e = u.check("x");
    assert_eq!(e.len(), 1);
    assert!(e[0].message.contains("the Cluster owns"), "{e:?}");
    let d: DatabaseSpec = serde_saphyr::from_str("cluster: {name: db}\nname: mysql\n").unwrap();
    assert_eq!(d.check("x")[0].field, "spec.name");
    let d: DatabaseSpec = serde_saphyr::from_str("cluster: {name: db}\n").unwrap();
    assert!(d.check("shop").is_empty());
    assert_eq!(d.deletion_policy, DeletionPolicy::Keep);
}
