//! Import from a server outside the new Cluster, on the local platform,
//! against real servers (the flavour under test). The source is another
//! running cluster, reached only through its rw endpoint with an account
//! of its own, as any existing server would be. First a logical import of
//! one named database (its rows, view, routine and trigger; nothing
//! else). Then a physical copy (MySQL: the clone plugin; MariaDB:
//! `mariadb-backup` streamed by `cnmysql donor` beside the source) with
//! writes running on the source, the new
//! Cluster following the source from the copy's GTID position, and a
//! cut-over at the source's final position that loses no acknowledged
//! write.

mod common;

use std::time::{Duration, Instant};

use common::donor::{DONOR_TOKEN, DonorProcess};
use common::follow::*;
use common::*;
use mysql_async::prelude::*;

const IMPORTER: &str = "importer-Secret-1";

/// The import account on the source: reads everything, a consistent
/// snapshot, the GTID position, the binary log (to follow on) and, on
/// MySQL, the clone.
async fn create_import_account(c: &LocalCluster) {
    let mut a = c.admin(&c.current_primary()).await;
    let mut grants = "SELECT, RELOAD, LOCK TABLES, SHOW VIEW, TRIGGER, EVENT, EXECUTE, \
                      REPLICATION CLIENT, REPLICATION SLAVE"
        .to_string();
    match flavor() {
        Flavor::Mysql => grants.push_str(", BACKUP_ADMIN, SHOW_ROUTINE"),
        // mariadb-backup, run by the donor as this account.
        Flavor::Mariadb => grants.push_str(", PROCESS"),
    }
    for q in [
        format!("CREATE USER 'importer'@'%' IDENTIFIED BY '{IMPORTER}' REQUIRE SSL"),
        format!("GRANT {grants} ON *.* TO 'importer'@'%'"),
    ] {
        a.query_drop(q).await.unwrap();
    }
}

/// The Secret `<cluster>-<what>-source` holding the import account.
fn importer_secret(secrets: &std::path::Path, secret: &str, source: &LocalCluster) {
    account_secret(secrets, secret, source);
    let d = secrets.join(secret);
    std::fs::write(d.join("username"), "importer").unwrap();
    std::fs::write(d.join("password"), IMPORTER).unwrap();
    std::fs::write(d.join("donor-token"), DONOR_TOKEN).unwrap();
}

/// A database with rows, a view, a function and a trigger, and one that a
/// named import leaves behind.
async fn seed(c: &LocalCluster) {
    let mut a = c.admin(&c.current_primary()).await;
    let depth = match flavor() {
        Flavor::Mysql => "SET SESSION cte_max_recursion_depth = 10000",
        Flavor::Mariadb => "SET SESSION max_recursive_iterations = 10000",
    };
    for q in [
        depth,
        "CREATE DATABASE shop",
        "CREATE TABLE shop.orders (id INT PRIMARY KEY, qty INT NOT NULL, audit INT NOT NULL DEFAULT 0)",
        "INSERT INTO shop.orders (id, qty) WITH RECURSIVE s (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 5000) SELECT n, n % 7 FROM s",
        "CREATE VIEW shop.big AS SELECT id FROM shop.orders WHERE qty > 5",
        "CREATE FUNCTION shop.twice(x INT) RETURNS INT DETERMINISTIC RETURN 2 * x",
        "CREATE TRIGGER shop.audit BEFORE UPDATE ON shop.orders FOR EACH ROW SET NEW.audit = OLD.audit + 1",
        "CREATE DATABASE scratch",
        "CREATE TABLE scratch.t (i INT PRIMARY KEY)",
    ] {
        a.query_drop(q).await.unwrap_or_else(|e| panic!("{q}: {e}"));
    }
}

/// `instance` holds shop as seeded: rows, view, function and trigger.
async fn holds_shop(c: &LocalCluster, instance: &str) {
    let mut a = c.admin(instance).await;
    let rows: Option<(u64, u64, u64)> = a
        .query_first(
            "SELECT COUNT(*), (SELECT COUNT(*) FROM shop.big), shop.twice(21) FROM shop.orders",
        )
        .await
        .unwrap();
    assert_eq!(rows, Some((5000, 714, 42)), "shop on {instance}");
    let triggers: Vec<String> = a
        .query("SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = 'shop'")
        .await
        .unwrap();
    assert_eq!(triggers, ["audit"], "the trigger on {instance}");
}

/// What an import recorded in `instance`'s data directory.
fn imported_record(c: &LocalCluster, instance: &str) -> serde_json::Value {
    let path = c.instance_dir(instance).join("data/cnmysql_imported.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn import_block(source: &LocalCluster, rest: &str) -> String {
    format!(
        "  bootstrap:\n    import:\n      source:\n        host: 127.0.0.1\n        port: {}\n{rest}",
        source.service_port("rw")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_imported_from_a_running_server_follows_it_and_cuts_over_without_loss() {
    let secrets = tempfile::tempdir().unwrap();
    // The only test of this binary: the local platform reads it when it
    // writes the instances' configuration.
    unsafe { std::env::set_var("CNMYSQL_SECRETS_DIR", secrets.path()) };

    let old = LocalCluster::start("old", &sized("old", 1, 0, ""));
    create_import_account(&old).await;
    create_source_account(&old).await;
    seed(&old).await;

    // A logical import of shop alone, with nothing following.
    importer_secret(secrets.path(), "copy-import-source", &old);
    let began = Instant::now();
    let copy = LocalCluster::start(
        "copy",
        &sized(
            "copy",
            1,
            200,
            &import_block(&old, "      method: logical\n      databases: [shop]\n"),
        ),
    );
    eprintln!(
        "logical import of one database: ready {:.1}s after start",
        began.elapsed().as_secs_f64()
    );
    holds_shop(&copy, "copy-1").await;
    let record = imported_record(&copy, "copy-1");
    assert_eq!(record["method"], "logical", "{record}");
    // The function, view and trigger root made run as root here: said.
    assert_eq!(
        record["definers"],
        serde_json::json!(["root@localhost"]),
        "{record}"
    );
    let mut a = copy.admin("copy-1").await;
    let loader: Vec<String> = a
        .query("SELECT User FROM mysql.user WHERE User = 'cnmysql_loader'")
        .await
        .unwrap();
    assert!(loader.is_empty(), "the loader's account is gone");
    drop(a);
    assert_eq!(
        record["gtid"],
        executed(&old, &old.current_primary()).await.as_str(),
        "the copy's history is the source's at the snapshot: {record}"
    );
    let mut a = copy.admin("copy-1").await;
    let dbs: Vec<String> = a.query("SHOW DATABASES LIKE 'scratch'").await.unwrap();
    assert!(dbs.is_empty(), "only the named database is copied");
    // Its own accounts, not the source's: app signs in with copy's password.
    let mut app = copy.app(copy.service_port("rw")).await.unwrap();
    app.query_drop("UPDATE shop.orders SET qty = qty WHERE id = 1")
        .await
        .unwrap();
    drop(app);
    copy.destroy();

    // The default method, writes running on the source, then following it.
    importer_secret(secrets.path(), "new-import-source", &old);
    source_secret(secrets.path(), "new", &old);
    // MariaDB: the physical copy, streamed by a donor on the source's host.
    let donor = (flavor() == Flavor::Mariadb).then(|| DonorProcess::start(&old, "old-1"));
    let method = donor.as_ref().map_or(String::new(), |d| {
        format!("      method: backup\n      donorPort: {}\n", d.port)
    });
    let w = writer::start(&old).await;
    w.wait_for_more(200, Duration::from_secs(30)).await;
    let began = Instant::now();
    let new_manifest = |enabled: bool, token: Option<&str>| {
        sized(
            "new",
            2,
            100,
            &format!(
                "{}{}",
                import_block(&old, &method),
                follows(&old, enabled, token)
            ),
        )
    };
    let new = LocalCluster::start("new", &new_manifest(true, None));
    let imported_in = began.elapsed();
    wait_for("new to follow old", Duration::from_secs(120), || async {
        (replica_status(&new)["receiving"] == true).then_some(())
    })
    .await;
    for n in ["new-1", "new-2"] {
        holds_shop(&new, n).await;
    }
    let record = imported_record(&new, "new-1");
    let how = match flavor() {
        Flavor::Mysql => "clone",
        Flavor::Mariadb => "backup",
    };
    assert_eq!(record["method"], how, "{record}");
    drop(donor);
    w.wait_for_more(200, Duration::from_secs(30)).await;

    // Cut-over: writes stop on old, new promoted at old's final position.
    let out = w.stop().await;
    let token = executed(&old, &old.current_primary()).await;
    let cut = Instant::now();
    apply(&new, &new_manifest(false, Some(&token)));
    wait_for("new to take writes", Duration::from_secs(120), || async {
        writable(&new).await.then_some(())
    })
    .await;
    let cut_over = cut.elapsed();
    // New's own writes reach its replica on the history it took over.
    let w2 = writer::start(&new).await;
    w2.wait_for_more(100, Duration::from_secs(30)).await;
    let after = w2.stop().await;
    for n in ["new-1", "new-2"] {
        holds(&new, n, &out.acked).await;
        holds(&new, n, &after.acked).await;
    }
    eprintln!(
        "import ({how}, {} bytes): ready {:.1}s after start with writes running; {} acknowledged rows on old, 0 missing on new; writable {:.1}s after the cut-over",
        record["bytes"],
        imported_in.as_secs_f64(),
        out.acked.len(),
        cut_over.as_secs_f64()
    );
    new.destroy();
    old.destroy();
}
