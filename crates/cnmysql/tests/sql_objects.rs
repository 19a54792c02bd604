//! Declared databases, users and grants on the local platform, against
//! real servers: created on the primary and replicated, drift put back,
//! a password rotated when its Secret changes, and deletion as each
//! `deletionPolicy` says; bad documents refused naming the field.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use mysql_async::prelude::*;
use mysql_async::{Conn, OptsBuilder};

fn objects(name: &str, with_grant_and_database: bool) -> String {
    let meta = |kind: &str, n: &str| {
        format!(
            "---\napiVersion: mysql.cnmysql.io/v1\nkind: {kind}\nmetadata:\n  name: {n}\nspec:\n  cluster: {{name: {name}}}\n"
        )
    };
    let mut out = meta("User", "shopper")
        + "  passwordSecretKeyRef: {name: shop-pw, key: password}\n  limits: {maxUserConnections: 5}\n";
    if with_grant_and_database {
        out += &(meta("Database", "shop") + "  deletionPolicy: Delete\n");
        out += &(meta("Grant", "shopper-shop")
            + "  privileges: [SELECT, INSERT, UPDATE, DELETE, CREATE]\n  database: shop\n  username: shopper\n  deletionPolicy: Delete\n");
    }
    out
}

async fn as_shopper(port: u16, password: &str) -> mysql_async::Result<Conn> {
    let opts = OptsBuilder::default()
        .ip_or_hostname("127.0.0.1")
        .tcp_port(port)
        .user(Some("shopper"))
        .pass(Some(password))
        .prefer_socket(false);
    Conn::new(opts).await
}

/// The privileges of shopper on `shop`.*, as the server says.
async fn shop_privileges(c: &LocalCluster, instance: &str) -> Vec<String> {
    let mut a = c.admin(instance).await;
    let mut v: Vec<String> = a
        .query(
            "SELECT PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES \
             WHERE GRANTEE = '''shopper''@''%''' AND TABLE_SCHEMA = 'shop'",
        )
        .await
        .unwrap();
    v.sort();
    v
}

fn all_ready(c: &LocalCluster, n: usize) -> Option<()> {
    let st = c.status_json();
    let o = st["sqlObjects"].as_object()?;
    (o.len() == n && o.values().all(|v| v["ready"] == true)).then_some(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_databases_users_and_grants_are_held_corrected_rotated_and_deleted() {
    let secrets = tempfile::tempdir().unwrap();
    // The only test of this binary: the local platform reads it.
    unsafe { std::env::set_var("CNMYSQL_SECRETS_DIR", secrets.path()) };
    let pw = secrets.path().join("shop-pw");
    std::fs::create_dir_all(&pw).unwrap();
    std::fs::write(pw.join("password"), "first-Pw1\n").unwrap();

    let text = format!("{}{}", manifest("sqo", 2), objects("sqo", true));
    let c = LocalCluster::start("sqo", &text);
    wait_for("3 objects ready", Duration::from_secs(60), || async {
        all_ready(&c, 3)
    })
    .await;
    let rw = c.service_port("rw");
    let mut s = as_shopper(rw, "first-Pw1").await.expect("shopper connects");
    s.query_drop("CREATE TABLE shop.orders (id INT PRIMARY KEY)")
        .await
        .unwrap();
    s.query_drop("INSERT INTO shop.orders VALUES (1)")
        .await
        .unwrap();
    let denied = s.query_drop("CREATE DATABASE other").await;
    assert!(denied.is_err(), "nothing beyond the grant");
    drop(s);
    // Replicated: the replica holds the user, its grant and the row.
    let replica = ["sqo-1", "sqo-2"]
        .into_iter()
        .find(|n| *n != c.current_primary())
        .unwrap();
    wait_for(
        "the replica has it all",
        Duration::from_secs(30),
        || async {
            let privileges = shop_privileges(&c, replica).await;
            let mut a = c.admin(replica).await;
            let n: Option<i64> = a
                .query_first("SELECT COUNT(*) FROM shop.orders")
                .await
                .ok()?;
            (privileges.len() == 5 && n == Some(1)).then_some(())
        },
    )
    .await;

    // Drift: a privilege taken away and one added by hand are put back.
    let primary = c.current_primary();
    let mut a = c.admin(&primary).await;
    a.query_drop("REVOKE INSERT ON shop.* FROM 'shopper'@'%'")
        .await
        .unwrap();
    a.query_drop("GRANT DROP ON shop.* TO 'shopper'@'%'")
        .await
        .unwrap();
    drop(a);
    wait_for(
        "the grant as declared again",
        Duration::from_secs(30),
        || async {
            let p = shop_privileges(&c, &primary).await;
            (p == ["CREATE", "DELETE", "INSERT", "SELECT", "UPDATE"]).then_some(())
        },
    )
    .await;
    assert!(c.has_event("SqlObjectApplied").is_some());

    // Rotation: a new value in the Secret is the password.
    std::fs::write(pw.join("password"), "second-Pw2\n").unwrap();
    wait_for("the new password", Duration::from_secs(30), || async {
        as_shopper(rw, "second-Pw2").await.ok().map(|_| ())
    })
    .await;
    assert!(
        as_shopper(rw, "first-Pw1").await.is_err(),
        "the old one no longer"
    );
    let events = c.events();
    assert!(
        events.iter().all(|e| !e.to_string().contains("second-Pw2")),
        "a password never reaches events"
    );
    let st = std::fs::read_to_string(Path::new(&c.state_arg()).join("sql-objects.json")).unwrap();
    assert!(!st.contains("second-Pw2") && !st.contains("first-Pw1"));

    // A document naming an account the Cluster owns is refused, naming
    // the field; nothing changes.
    let bad = c.dir.path().join("bad.yaml");
    std::fs::write(&bad, text.replace("name: shopper\n", "name: app\n")).unwrap();
    let out = c.local(&["apply", "-f", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.name") && err.contains("the Cluster owns"),
        "{err}"
    );

    // Deleted: the database (Delete) dropped, the grant (Delete) revoked,
    // the user (Keep) left alone.
    let fewer = c.dir.path().join("fewer.yaml");
    std::fs::write(
        &fewer,
        format!("{}{}", manifest("sqo", 2), objects("sqo", false)),
    )
    .unwrap();
    ok(&c.local(&["apply", "-f", fewer.to_str().unwrap()]), "apply");
    wait_for("the database dropped", Duration::from_secs(30), || async {
        let mut a = c.admin(&primary).await;
        let n: Option<i64> = a
            .query_first(
                "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'shop'",
            )
            .await
            .ok()?;
        (n == Some(0) && all_ready(&c, 1).is_some()).then_some(())
    })
    .await;
    assert!(shop_privileges(&c, &primary).await.is_empty());
    assert!(
        as_shopper(rw, "second-Pw2").await.is_ok(),
        "the user is kept"
    );
    assert!(c.has_event("SqlObjectDeleted").is_some());
    c.destroy();
}
