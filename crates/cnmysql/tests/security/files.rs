//! mysqld reads no file a statement names.

use super::*;

/// A file the server's user can read that a statement must not.
pub(crate) fn a_secret_file(c: &LocalCluster) -> PathBuf {
    Path::new(&c.state_arg()).join("secrets/admin-password")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(crate) async fn mysqld_reads_no_file_a_statement_names() {
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
pub(crate) fn walk(dir: &Path) -> Vec<PathBuf> {
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
