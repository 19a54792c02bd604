//! Declared grants and objects: never more than the application's databases, never a takeover.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn a_declared_grant_never_gives_more_than_the_applications_databases() {
    secrets();
    secret("evil-pw", "evil-Pw1");
    let name = "sec-grant";
    let c = LocalCluster::start_as_made(name, &manifest(name, 1));
    let objects = user(name, "evil", "evil-pw");
    let text = format!("{}{objects}", manifest(name, 1));
    ok(&apply(&c, &text, "user.yaml"), "apply the user");
    wait_object(&c, "User/evil", true, "").await;

    // The operator's validation: each attack is refused before anything
    // runs, naming the field.
    for (database, privileges, field) in [
        ("*", "ALL PRIVILEGES", "spec.privileges[0]"),
        ("*", "INSERT, UPDATE", "spec.privileges[0]"),
        ("mysql", "SELECT, UPDATE", "spec.database"),
        ("mysq_", "SELECT", "spec.database"),
        ("cnmysql", "INSERT", "spec.database"),
    ] {
        let text = format!(
            "{}{objects}{}",
            manifest(name, 1),
            grant(name, "evil-grant", "evil", database, privileges)
        );
        let out = apply(&c, &text, "grant.yaml");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(field),
            "a Grant of {privileges} on {database} was not refused naming {field}: {err}"
        );
    }
    // The manager's own check, whoever asks: the same attacks sent with
    // the operator's certificate are refused, and nothing is granted.
    let attacks = [
        declared_grant("evil", "*", &["ALL PRIVILEGES"]),
        declared_grant("evil", "*", &["INSERT", "UPDATE"]),
        declared_grant("evil", "mysql", &["SELECT", "UPDATE"]),
        declared_grant("evil", "mysq_", &["SELECT"]),
        declared_grant("root", "shop", &["SELECT"]),
    ];
    let objects: Vec<_> = attacks
        .into_iter()
        .enumerate()
        .map(|(i, declared)| cnmysql_control::contract::SqlObject {
            key: format!("Grant/attack-{i}"),
            declared,
        })
        .collect();
    for r in ask_the_manager_directly(&c, &objects).await {
        let error = r.error.unwrap_or_default();
        assert!(
            error.starts_with("refused by the instance manager") && r.applied.is_empty(),
            "{}: {error}",
            r.key
        );
    }
    let held = grants_of(&c, "evil").await;
    assert_eq!(held.len(), 1, "evil holds nothing but USAGE: {held:?}");
    assert!(held[0].starts_with("GRANT USAGE ON *.*"), "{held:?}");

    // What a Grant may give works: the application's database, and the
    // harmless global privileges on *.
    let text = format!(
        "{}{objects}{}{}{}{}",
        manifest(name, 1),
        grant(name, "evil-app", "evil", "app", "SELECT"),
        grant(name, "evil-process", "evil", "*", "PROCESS"),
        doc("Database", "my-app", name, "  name: my_app\n"),
        grant(name, "evil-my-app", "evil", "my_app", "SELECT"),
        objects = user(name, "evil", "evil-pw"),
    );
    ok(
        &apply(&c, &text, "fine.yaml"),
        "apply what a Grant may give",
    );
    wait_object(&c, "Grant/evil-app", true, "").await;
    wait_object(&c, "Grant/evil-process", true, "").await;
    // The database-level grant names my_app literally, and the next pass
    // finds it held (the level it reads back is the one it wrote).
    wait_object(&c, "Grant/evil-my-app", true, "held as declared").await;
    let held = grants_of(&c, "evil").await.join("\n");
    assert!(held.contains("`my\\_app`.*"), "{held}");
    let mut evil = connect_as(c.service_port("rw"), "evil", "evil-Pw1")
        .await
        .expect("evil connects");
    let read: mysql_async::Result<Vec<String>> = evil.query("SELECT User FROM mysql.user").await;
    assert!(read.is_err(), "mysql.user is not readable: {read:?}");
    let made = evil
        .query_drop("CREATE USER sneaky IDENTIFIED BY 'x'")
        .await;
    assert!(made.is_err(), "no account can be made");
    drop(evil);
    c.destroy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn declared_objects_never_take_over_what_no_declaration_made() {
    secret("legacy-pw", "new-Pw2");
    secret("shop-pw", "shop-Pw3");
    let name = "sec-adopt";
    let c = LocalCluster::start_as_made(name, &manifest(name, 2));
    let primary = c.current_primary();
    let mut a = c.admin(&primary).await;
    for s in [
        "CREATE USER legacy@'%' IDENTIFIED BY 'old-Pw1'",
        "CREATE DATABASE billing",
        "CREATE TABLE app.orders (id INT PRIMARY KEY)",
        "INSERT INTO app.orders VALUES (1)",
    ] {
        a.query_drop(s).await.unwrap();
    }
    drop(a);
    let base = manifest(name, 2);
    let objects = [
        user(name, "legacy", "legacy-pw"),
        user(name, "shopper", "shop-pw"),
        doc("Database", "app", name, "  deletionPolicy: Delete\n"),
        grant(name, "shopper-billing", "shopper", "billing", "SELECT"),
        user(name, "sneaky", &format!("{name}-root")),
    ]
    .concat();
    ok(
        &apply(&c, &format!("{base}{objects}"), "take.yaml"),
        "apply",
    );
    let why = wait_object(&c, "User/legacy", false, "no declaration made it").await;
    assert!(why.contains("spec.managed.adopt.users"), "{why}");
    wait_object(&c, "Database/app", false, "no declaration made it").await;
    wait_object(
        &c,
        "Grant/shopper-billing",
        false,
        "database billing was not made",
    )
    .await;
    let why = wait_object(&c, "User/sneaky", false, "uses itself").await;
    assert!(why.starts_with("spec.passwordSecretKeyRef.name"), "{why}");
    wait_object(&c, "User/shopper", true, "").await;
    let rw = c.service_port("rw");
    assert!(
        connect_as(rw, "legacy", "old-Pw1").await.is_ok(),
        "the hand-made account keeps its password"
    );
    assert!(connect_as(rw, "sneaky", "anything").await.is_err());

    // Taken out of the manifest: `app` (never made by a declaration) stays,
    // with its rows, though its policy says Delete.
    let fewer = [
        user(name, "legacy", "legacy-pw"),
        user(name, "shopper", "shop-pw"),
    ]
    .concat();
    ok(&apply(&c, &format!("{base}{fewer}"), "fewer.yaml"), "apply");
    wait_for("app forgotten", Duration::from_secs(60), || async {
        object(&c, "Database/app").is_none().then_some(())
    })
    .await;
    let mut a = c.admin(&primary).await;
    let rows: Option<i64> = a
        .query_first("SELECT COUNT(*) FROM app.orders")
        .await
        .unwrap();
    assert_eq!(rows, Some(1), "app and its rows were kept");
    drop(a);
    let kept = c
        .events()
        .iter()
        .any(|e| e.to_string().contains("was kept"));
    assert!(kept, "the deletion says what it kept");

    // Listed for adoption by the Cluster: taken over, its password set.
    let adopting = base.replace(
        "  instances: 2\n",
        "  instances: 2\n  managed:\n    adopt:\n      users: [{name: legacy}]\n",
    );
    ok(
        &apply(&c, &format!("{adopting}{fewer}"), "adopt.yaml"),
        "apply",
    );
    wait_object(&c, "User/legacy", true, "").await;
    wait_for("the declared password", Duration::from_secs(30), || async {
        connect_as(rw, "legacy", "new-Pw2").await.ok().map(|_| ())
    })
    .await;
    c.destroy();
}
