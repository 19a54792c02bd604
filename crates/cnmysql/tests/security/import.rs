//! Imports: the donor, a hostile source's names, the logical load's account.

use super::files::a_secret_file;
use super::*;

/// The import account on a source: what `mariadb-backup` needs.
pub(crate) async fn make_import_account(c: &LocalCluster) {
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
pub(crate) async fn ask_donor(
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

pub(crate) fn basic(user: &str, password: &str) -> (&'static str, String) {
    (
        "authorization",
        cnmysql_instance::donor::basic_authorization(user, password),
    )
}

pub(crate) fn token(t: &str) -> (&'static str, String) {
    (cnmysql_instance::donor::TOKEN_HEADER, t.to_string())
}

/// Whether a connection to `port` that sends nothing is closed by the
/// other side within `within`.
pub(crate) async fn closed_within(port: u16, within: Duration) -> bool {
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
pub(crate) async fn the_donor_says_nothing_to_strangers_and_holds_nothing_open() {
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
pub(crate) async fn a_hostile_sources_names_never_become_options() {
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
pub(crate) async fn a_logical_load_runs_as_an_account_that_reaches_nothing_beyond_its_databases() {
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
