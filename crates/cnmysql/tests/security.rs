//! The security suite, local platform, against real servers (both
//! flavours: `CNMYSQL_TEST_FLAVOR=mysql` runs it on MySQL 9.7). Each test
//! is an attack a person with the rights the docs give tried, and passes
//! only while the hole stays closed (docs/security.md):
//! - a declared Grant never gives more than database-level privileges on
//!   the application's databases, whether the operator's validation or the
//!   instance manager's own check is what stands in the way;
//! - declared objects never take over (set a password, grant, drop) what
//!   no declaration made, unless the Cluster lists it for adoption;
//! - a User's password never comes from one of the Cluster's own Secrets;
//! - mysqld reads no file a statement names.

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use common::*;
use mysql_async::prelude::*;
use mysql_async::{Conn, OptsBuilder};
use serde_json::Value;

/// Every test of this binary shares one secrets directory (the local
/// platform reads it from the environment, once per process).
fn secrets() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::tempdir().unwrap();
        // Before any cluster starts; every test goes through here first.
        unsafe { std::env::set_var("CNMYSQL_SECRETS_DIR", d.path()) };
        d
    })
    .path()
}

/// A Secret `name` with `password` under the key `password`.
fn secret(name: &str, password: &str) {
    let dir = secrets().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("password"), format!("{password}\n")).unwrap();
}

fn doc(kind: &str, name: &str, cluster: &str, spec: &str) -> String {
    format!(
        "---\napiVersion: mysql.cnmysql.io/v1\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n  cluster: {{name: {cluster}}}\n{spec}"
    )
}

fn user(cluster: &str, name: &str, secret: &str) -> String {
    doc(
        "User",
        name,
        cluster,
        &format!("  passwordSecretKeyRef: {{name: {secret}, key: password}}\n"),
    )
}

fn grant(cluster: &str, name: &str, username: &str, database: &str, privileges: &str) -> String {
    doc(
        "Grant",
        name,
        cluster,
        &format!(
            "  username: {username}\n  database: {database:?}\n  privileges: [{privileges}]\n"
        ),
    )
}

/// `cnmysql local apply` of `text`; its output.
fn apply(c: &LocalCluster, text: &str, file: &str) -> std::process::Output {
    let f = c.dir.path().join(file);
    std::fs::write(&f, text).unwrap();
    c.local(&["apply", "-f", f.to_str().unwrap()])
}

/// How `key` stands in `local status`: (ready, message).
fn object(c: &LocalCluster, key: &str) -> Option<(bool, String)> {
    let st = c.status_json();
    let o: &Value = st["sqlObjects"].get(key)?;
    Some((
        o["ready"] == true,
        o["message"].as_str().unwrap_or_default().to_string(),
    ))
}

async fn wait_object(c: &LocalCluster, key: &str, ready: bool, says: &str) -> String {
    wait_for(
        &format!("{key} ready={ready}, saying {says:?}"),
        Duration::from_secs(60),
        || async {
            let (r, message) = object(c, key)?;
            (r == ready && message.contains(says)).then_some(message)
        },
    )
    .await
}

async fn connect_as(port: u16, user: &str, password: &str) -> mysql_async::Result<Conn> {
    let opts = OptsBuilder::default()
        .ip_or_hostname("127.0.0.1")
        .tcp_port(port)
        .user(Some(user))
        .pass(Some(password))
        .prefer_socket(false);
    Conn::new(opts).await
}

/// What `user`@`%` may do, as the server says.
async fn grants_of(c: &LocalCluster, user: &str) -> Vec<String> {
    let mut a = c.admin(&c.current_primary()).await;
    a.query(format!("SHOW GRANTS FOR '{user}'@'%'"))
        .await
        .unwrap_or_default()
}

/// The declared objects as the primary's manager receives them, sent with
/// the operator's own certificate: what an operator with a bug (or a
/// validation that was bypassed) would ask.
async fn ask_the_manager_directly(
    c: &LocalCluster,
    objects: &[cnmysql_control::contract::SqlObject],
) -> Vec<cnmysql_control::contract::SqlObjectResult> {
    let primary = c.current_primary();
    let pki = Path::new(&c.state_arg()).join("pki");
    let material = cnmysql_tls::TlsPaths::in_dir(&pki, cnmysql_api::names::OPERATOR_IDENTITY)
        .load()
        .unwrap();
    let client = cnmysql_control::client::ControlClient::new(material.client_config().unwrap())
        .expecting(&primary);
    let port = c.ports()["instances"][&primary]["control"]
        .as_u64()
        .unwrap() as u16;
    cnmysql_control::requests::reconcile_sql_objects(&client, "127.0.0.1", port, objects)
        .await
        .unwrap()
}

fn declared_grant(
    user: &str,
    database: &str,
    privileges: &[&str],
) -> cnmysql_core::sql_objects::Declared {
    cnmysql_core::sql_objects::Declared::Grant(cnmysql_core::sql_objects::DeclaredGrant {
        user: user.into(),
        host: "%".into(),
        database: database.into(),
        table: "*".into(),
        privileges: privileges.iter().map(|s| s.to_string()).collect(),
        grant_option: true,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_grant_never_gives_more_than_the_applications_databases() {
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
async fn declared_objects_never_take_over_what_no_declaration_made() {
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

/// A file the server's user can read that a statement must not.
fn a_secret_file(c: &LocalCluster) -> PathBuf {
    Path::new(&c.state_arg()).join("secrets/admin-password")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysqld_reads_no_file_a_statement_names() {
    secrets();
    let name = "sec-files";
    // Two instances: the replica's copy of the primary (whose backup tool
    // is given the administrator's options) is made too.
    let c = LocalCluster::start_as_made(name, &manifest(name, 2));
    let mut a = c.admin(&c.current_primary()).await;
    let file = a_secret_file(&c);
    for path in [file.display().to_string(), "/etc/passwd".into()] {
        let read: Option<Option<Vec<u8>>> = a
            .query_first(format!("SELECT LOAD_FILE('{path}')"))
            .await
            .unwrap();
        assert_eq!(read, Some(None), "LOAD_FILE('{path}') returned something");
    }
    let outfile = c.dir.path().join("out.txt");
    let wrote = a
        .query_drop(format!("SELECT 1 INTO OUTFILE '{}'", outfile.display()))
        .await;
    assert!(wrote.is_err() && !outfile.exists(), "a file was written");
    let loaded = a
        .query_drop(format!(
            "LOAD DATA INFILE '{}' INTO TABLE mysql.user",
            file.display()
        ))
        .await;
    assert!(loaded.is_err(), "LOAD DATA read a file");
    drop(a);

    // A SQL session as the administrator leaves no file with its password.
    let state = c.state_arg();
    let out = cnmysql(&[
        "local",
        "mysql",
        "--state-dir",
        &state,
        &c.name,
        "--",
        "-e",
        "SELECT 1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let password = c.admin_password();
    let run = c.instance_dir(&c.current_primary()).join("run");
    for entry in walk(&run) {
        let text = std::fs::read(&entry).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&text).contains(password.trim())
                || entry.ends_with("backup.cnf"),
            "{} holds the administrator's password",
            entry.display()
        );
    }
    c.destroy();
}

/// Every regular file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => out.extend(walk(&p)),
            Ok(t) if t.is_file() => out.push(p),
            _ => {}
        }
    }
    out
}

/// The import account on a source: what `mariadb-backup` needs.
async fn make_import_account(c: &LocalCluster) {
    let mut a = c.admin(&c.current_primary()).await;
    for q in [
        "CREATE USER 'importer'@'%' IDENTIFIED BY 'import-Pw1' REQUIRE SSL",
        "GRANT SELECT, RELOAD, LOCK TABLES, PROCESS, REPLICATION CLIENT ON *.* TO 'importer'@'%'",
    ] {
        a.query_drop(q).await.unwrap();
    }
}

/// `GET /backup` of the donor with `headers`: its status, and its body
/// unless `keep` (then the response is handed back to be held open).
async fn ask_donor(
    source: &LocalCluster,
    port: u16,
    headers: &[(&str, String)],
) -> (u16, String, Option<Box<dyn std::any::Any + Send>>) {
    use http_body_util::BodyExt;
    let ca = std::fs::read_to_string(Path::new(&source.state_arg()).join("pki/ca.crt")).unwrap();
    let tls = cnmysql_tls::client_config_trusting(&ca, None).unwrap();
    let client =
        cnmysql_control::client::ControlClient::new(tls).expecting(&format!("{}-1", source.name));
    let r = client
        .send(
            "127.0.0.1",
            port,
            "GET",
            cnmysql_control::contract::BACKUP,
            headers,
            None,
        )
        .await
        .expect("the donor answers");
    let code = r.status().as_u16();
    if code == 200 {
        return (code, String::new(), Some(Box::new(r)));
    }
    let body = r.into_body().collect().await.unwrap().to_bytes();
    (code, String::from_utf8_lossy(&body).into_owned(), None)
}

fn basic(user: &str, password: &str) -> (&'static str, String) {
    (
        "authorization",
        cnmysql_instance::donor::basic_authorization(user, password),
    )
}

fn token(t: &str) -> (&'static str, String) {
    (cnmysql_instance::donor::TOKEN_HEADER, t.to_string())
}

/// Whether a connection to `port` that sends nothing is closed by the
/// other side within `within`.
async fn closed_within(port: u16, within: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(within, tcp.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_donor_says_nothing_to_strangers_and_holds_nothing_open() {
    secrets();
    if flavor() != Flavor::Mariadb {
        eprintln!("cnmysql donor serves MariaDB's mariadb-backup only: nothing to try on MySQL");
        return;
    }
    use common::donor::{DONOR_TOKEN, DonorProcess};
    let name = "sec-donor";
    let source = LocalCluster::start_as_made(name, &manifest(name, 1));
    make_import_account(&source).await;
    let donor = DonorProcess::start(&source, &format!("{name}-1"));
    let port = donor.port;
    wait_for("the donor listens", Duration::from_secs(30), || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()
            .map(|_| ())
    })
    .await;

    // Whatever is wrong, one answer, which names neither the server nor
    // the account.
    let attempts = [
        vec![],
        vec![basic("importer", "import-Pw1")],
        vec![
            token("not-the-token-at-all"),
            basic("importer", "import-Pw1"),
        ],
        vec![token(DONOR_TOKEN)],
        vec![token(DONOR_TOKEN), basic("importer", "wrong-Pw")],
        vec![token(DONOR_TOKEN), basic("nobody", "import-Pw1")],
    ];
    let mut bodies = std::collections::BTreeSet::new();
    for headers in &attempts {
        let (code, body, _) = ask_donor(&source, port, headers).await;
        assert_eq!(code, 401, "{body}");
        bodies.insert(body);
    }
    assert_eq!(bodies.len(), 1, "the answers differ: {bodies:?}");
    let body = bodies.into_iter().next().unwrap();
    assert!(
        !body.contains("importer") && !body.contains("nobody") && !body.contains("Access denied"),
        "{body}"
    );
    assert!(!donor.log().contains("import-Pw1"), "a password in the log");

    // One copy at a time: a second while the first streams is told so.
    let good = [token(DONOR_TOKEN), basic("importer", "import-Pw1")];
    let (code, _, streaming) = ask_donor(&source, port, &good).await;
    assert_eq!(code, 200);
    let (code, body, _) = ask_donor(&source, port, &good).await;
    assert_eq!(code, 409, "{body}");
    drop(streaming);

    // A connection that sends nothing is closed, TLS or not; and a few at
    // a time is all the donor keeps (one more is closed at once).
    assert!(
        closed_within(port, Duration::from_secs(15)).await,
        "an idle connection stayed open"
    );
    let idle: Vec<_> = futures::future::join_all(
        (0..4).map(|_| tokio::net::TcpStream::connect(("127.0.0.1", port))),
    )
    .await;
    assert!(
        closed_within(port, Duration::from_secs(1)).await,
        "a fifth connection was kept beside four idle ones"
    );
    drop(idle);
    drop(donor);
    source.destroy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_sources_names_never_become_options() {
    secrets();
    let name = "sec-src";
    let source = LocalCluster::start_as_made(name, &manifest(name, 1));
    let planted = source.dir.path().join("planted");
    let hostile = format!("--result-file={}", planted.display());
    let mut a = source.admin(&source.current_primary()).await;
    for q in [
        format!("CREATE DATABASE `{hostile}`"),
        "CREATE USER 'importer'@'%' IDENTIFIED BY 'import-Pw1' REQUIRE SSL".into(),
        "GRANT SELECT, RELOAD, LOCK TABLES, SHOW VIEW, TRIGGER, EVENT, EXECUTE, REPLICATION CLIENT ON *.* TO 'importer'@'%'".into(),
    ] {
        a.query_drop(q).await.unwrap();
    }
    if flavor() == Flavor::Mysql {
        a.query_drop("GRANT SHOW_ROUTINE ON *.* TO 'importer'@'%'")
            .await
            .unwrap();
    }
    drop(a);
    let secret = secrets().join("sec-copy-import-source");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::copy(
        Path::new(&source.state_arg()).join("pki/ca.crt"),
        secret.join("ca.crt"),
    )
    .unwrap();
    std::fs::write(secret.join("username"), "importer").unwrap();
    std::fs::write(secret.join("password"), "import-Pw1").unwrap();
    let copy = format!(
        "{}  bootstrap:\n    import:\n      method: logical\n      source:\n        host: 127.0.0.1\n        port: {}\n",
        manifest("sec-copy", 1),
        source.service_port("rw")
    );
    let (c, _) = LocalCluster::try_start("sec-copy", &copy, 1);
    let why = wait_for("the import refused", Duration::from_secs(90), || async {
        let phase = c.instance_status("sec-copy-1");
        let message = phase["message"].as_str().unwrap_or_default().to_string();
        message
            .contains("is not a user database to copy")
            .then_some(message)
    })
    .await;
    assert!(why.contains("--result-file"), "{why}");
    assert!(
        !planted.exists(),
        "the dump program took the name for an option"
    );
    c.destroy();
    source.destroy();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logical_load_runs_as_an_account_that_reaches_nothing_beyond_its_databases() {
    secrets();
    let name = "sec-load";
    let c = LocalCluster::start_as_made(name, &manifest(name, 1));
    let primary = c.current_primary();
    let mut a = c.admin(&primary).await;
    let f = match flavor() {
        Flavor::Mariadb => cnmysql_api::Flavor::Mariadb,
        Flavor::Mysql => cnmysql_api::Flavor::Mysql,
    };
    let statements =
        cnmysql_instance::logical_import::loader_account(f, &["shop".to_string()], "loader-Pw1");
    for s in &statements {
        a.query_drop(&s.text).await.unwrap();
    }
    drop(a);
    let sock = c.instance_dir(&primary).join("run/mysqld.sock");
    let opts = OptsBuilder::default()
        .socket(Some(sock.display().to_string()))
        .user(Some(cnmysql_instance::logical_import::LOADER_USER))
        .pass(Some("loader-Pw1"))
        .prefer_socket(true);
    let mut l = Conn::new(opts).await.expect("the loader connects");
    // What a dump does.
    for ok in [
        "CREATE DATABASE shop",
        "CREATE TABLE shop.t (i INT PRIMARY KEY)",
        "INSERT INTO shop.t VALUES (1)",
    ] {
        l.query_drop(ok)
            .await
            .unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    // What a hostile dump would try.
    let file = a_secret_file(&c).display().to_string();
    for attack in [
        "CREATE DATABASE other".to_string(),
        "INSERT INTO mysql.db (Host, Db, User) VALUES ('%', 'x', 'y')".into(),
        "CREATE USER sneaky IDENTIFIED BY 'x'".into(),
        "GRANT ALL ON *.* TO 'cnmysql_loader'@'localhost'".into(),
        "SET GLOBAL general_log_file = '/tmp/cnmysql-planted'".into(),
        "SET GLOBAL read_only = 0".into(),
        format!("CREATE TABLE shop.f AS SELECT LOAD_FILE('{file}') AS f"),
        format!("LOAD DATA INFILE '{file}' INTO TABLE shop.t"),
        "SELECT 1 INTO OUTFILE '/tmp/cnmysql-planted'".into(),
        match flavor() {
            Flavor::Mariadb => "CHANGE MASTER TO MASTER_HOST = '127.0.0.1'".into(),
            Flavor::Mysql => "CHANGE REPLICATION SOURCE TO SOURCE_HOST = '127.0.0.1'".into(),
        },
        "SHUTDOWN".into(),
    ] {
        let r = l.query_drop(&attack).await;
        let loaded_a_file = attack.contains("LOAD_FILE") && r.is_ok() && {
            let v: Option<Option<Vec<u8>>> =
                l.query_first("SELECT f FROM shop.f").await.unwrap_or(None);
            matches!(v, Some(Some(_)))
        };
        assert!(
            !loaded_a_file && (r.is_err() || attack.contains("LOAD_FILE")),
            "the loader could: {attack}"
        );
    }
    assert!(!Path::new("/tmp/cnmysql-planted").exists());
    drop(l);
    c.destroy();
}

/// What `client` gets from the control API at `port`: a change only the
/// operator may make (semi-sync), and a copy of the data.
async fn ask_as(
    client: cnmysql_control::client::ControlClient,
    port: u16,
) -> (anyhow::Result<String>, anyhow::Result<u16>) {
    let semi = cnmysql_control::contract::SemiSync {
        enabled: false,
        wait_for_count: 1,
        timeout_millis: 1000,
    };
    let set = cnmysql_control::requests::set_semi_sync(&client, "127.0.0.1", port, &semi).await;
    let copy = client
        .send(
            "127.0.0.1",
            port,
            "GET",
            cnmysql_control::contract::BACKUP,
            &[],
            None,
        )
        .await;
    (set, copy.map(|r| r.status().as_u16()))
}

/// A client of `c`'s control APIs presenting a certificate of `ca` for
/// `who` with `names`.
fn client_as(
    c: &LocalCluster,
    ca: &cnmysql_tls::Ca,
    who: &str,
    names: &[String],
) -> cnmysql_control::client::ControlClient {
    let trust = std::fs::read_to_string(Path::new(&c.state_arg()).join("pki/ca.crt")).unwrap();
    let m = cnmysql_tls::Material {
        ca_pem: trust,
        identity: ca.issue(who, names).unwrap(),
    };
    cnmysql_control::client::ControlClient::new(m.client_config().unwrap())
}

fn cluster_ca(c: &LocalCluster) -> cnmysql_tls::Ca {
    let pki = Path::new(&c.state_arg()).join("pki");
    cnmysql_tls::Ca {
        identity: cnmysql_tls::Identity {
            cert_pem: std::fs::read_to_string(pki.join("ca.crt")).unwrap(),
            key_pem: std::fs::read_to_string(pki.join("ca.key")).unwrap(),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_api_and_replication_know_whom_they_talk_to() {
    secrets();
    use cnmysql_api::names::{OPERATOR_IDENTITY, identity};
    let name = "sec-who";
    let c = LocalCluster::start_as_made(name, &manifest(name, 2));
    let primary = c.current_primary();
    let port = c.ports()["instances"][&primary]["control"]
        .as_u64()
        .unwrap() as u16;
    let ask = |client| ask_as(client, port);
    // The operator's common name, from another CA: no handshake at all.
    let other = cnmysql_tls::Ca::generate(name).unwrap();
    let (set, copy) = ask(client_as(
        &c,
        &other,
        OPERATOR_IDENTITY,
        &[OPERATOR_IDENTITY.into()],
    ))
    .await;
    assert!(
        set.is_err() && copy.is_err(),
        "another CA's certificate was served"
    );
    // The cluster's own CA (a shared issuer), but the common name alone,
    // or the identity of the same cluster name in another namespace, or
    // of another cluster: refused what only the operator may do, and the
    // data.
    let ca = cluster_ca(&c);
    for names in [
        vec![OPERATOR_IDENTITY.to_string()],
        vec![identity("staging", name, OPERATOR_IDENTITY)],
        vec![identity("local", "other", OPERATOR_IDENTITY)],
        vec![identity("staging", name, &format!("{name}-2"))],
    ] {
        let (set, copy) = ask(client_as(&c, &ca, OPERATOR_IDENTITY, &names)).await;
        let refused = set
            .as_ref()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(refused.contains("403"), "{names:?}: {set:?}");
        assert_eq!(copy.unwrap(), 403, "{names:?} may copy the data");
    }
    // The operator's own identity is served.
    let (set, _) = ask(client_as(
        &c,
        &ca,
        OPERATOR_IDENTITY,
        &[identity("local", name, OPERATOR_IDENTITY)],
    ))
    .await;
    assert!(set.is_ok(), "{set:?}");

    // Replication: the account's password with a certificate of the
    // cluster's CA for another subject is refused; its own instances'
    // certificate signs in.
    let repl =
        std::fs::read_to_string(Path::new(&c.state_arg()).join("secrets/replication-password"))
            .unwrap();
    let dir = c.dir.path().join("stranger");
    std::fs::create_dir_all(&dir).unwrap();
    let stranger = ca.issue("other-cluster", &["127.0.0.1".into()]).unwrap();
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert, &stranger.cert_pem).unwrap();
    std::fs::write(&key, &stranger.key_pem).unwrap();
    let pki = Path::new(&c.state_arg()).join("pki");
    let sign_in = |cert: PathBuf, key: PathBuf| {
        let ssl = mysql_async::SslOpts::default()
            .with_root_certs(vec![pki.join("ca.crt").into()])
            .with_danger_skip_domain_validation(true)
            .with_client_identity(Some(mysql_async::ClientIdentity::new(
                cert.into(),
                key.into(),
            )));
        let opts = OptsBuilder::default()
            .ip_or_hostname("127.0.0.1")
            .tcp_port(c.instance_port(&primary))
            .user(Some("cnmysql_replication"))
            .pass(Some(repl.trim().to_string()))
            .prefer_socket(false)
            .ssl_opts(Some(ssl));
        Conn::new(opts)
    };
    assert!(
        sign_in(cert, key).await.is_err(),
        "a stranger's certificate signed in as the replication account"
    );
    let own = format!("{name}-2");
    assert!(
        sign_in(
            pki.join(format!("{own}.crt")),
            pki.join(format!("{own}.key"))
        )
        .await
        .is_ok(),
        "an instance's certificate is refused"
    );
    c.destroy();
}
