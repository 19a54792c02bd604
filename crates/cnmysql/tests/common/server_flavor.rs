//! The server flavour under test, and the statements and manifest lines
//! that differ between MariaDB and MySQL.

use mysql_async::Conn;
use mysql_async::prelude::*;

/// The server flavour the end-to-end suites run against:
/// `CNMYSQL_TEST_FLAVOR=mysql` runs them on MySQL from the server image
/// `CNMYSQL_TEST_IMAGE` (default `mysql:9.7`, built by `scripts/images`);
/// unset or `mariadb`, on this machine's MariaDB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    Mariadb,
    Mysql,
}

pub fn flavor() -> Flavor {
    match std::env::var("CNMYSQL_TEST_FLAVOR").as_deref() {
        Ok("mysql") => Flavor::Mysql,
        Ok("mariadb") | Ok("") | Err(_) => Flavor::Mariadb,
        Ok(other) => panic!("CNMYSQL_TEST_FLAVOR={other}: expected mysql or mariadb"),
    }
}

/// The statement of the flavour under test.
pub fn sql(mariadb: &'static str, mysql: &'static str) -> &'static str {
    match flavor() {
        Flavor::Mariadb => mariadb,
        Flavor::Mysql => mysql,
    }
}

pub fn stop_io_thread() -> &'static str {
    sql("STOP SLAVE IO_THREAD", "STOP REPLICA IO_THREAD")
}

pub fn start_io_thread() -> &'static str {
    sql("START SLAVE IO_THREAD", "START REPLICA IO_THREAD")
}

/// The transactions a server wrote to its binary log (its own and those it
/// replicated).
pub fn binlog_gtids() -> &'static str {
    sql("SELECT @@gtid_binlog_pos", "SELECT @@gtid_executed")
}

/// `SELECT <columns> FROM` the numbers `lo..=hi` as column `seq`, in a form
/// both flavours run.
pub fn sequence(lo: u64, hi: u64, columns: &str) -> String {
    format!(
        "WITH RECURSIVE s (seq) AS (SELECT {lo} UNION ALL SELECT seq + 1 FROM s WHERE seq < {hi}) SELECT {columns} FROM s"
    )
}

/// Where a server's binary log ends (`file:position`): it moves as soon as
/// a transaction is written there, before semi-sync acknowledges it (MySQL
/// adds it to gtid_executed only then).
pub async fn binlog_end(conn: &mut Conn) -> Option<String> {
    let row: mysql_async::Row = conn
        .query_first(sql("SHOW MASTER STATUS", "SHOW BINARY LOG STATUS"))
        .await
        .ok()??;
    Some(format!(
        "{}:{}",
        row.get::<String, _>("File")?,
        row.get::<u64, _>("Position")?
    ))
}

/// Write on a read-only server as its administrator, behind the cluster's
/// back (an errant transaction). MySQL's super_read_only holds even the
/// administrator, so it is lifted for the statement (read_only stays on).
pub async fn write_as_admin(conn: &mut Conn, statement: &str) {
    if flavor() == Flavor::Mysql {
        conn.query_drop("SET GLOBAL super_read_only = OFF")
            .await
            .unwrap();
    }
    let r = conn.query_drop(statement).await;
    if flavor() == Flavor::Mysql {
        conn.query_drop("SET GLOBAL super_read_only = ON")
            .await
            .unwrap();
    }
    r.unwrap();
}

/// The server program's process name.
pub fn server_program() -> &'static str {
    sql("mariadbd", "mysqld")
}

/// The `spec.mysql` lines that choose the flavour under test.
pub fn flavor_lines() -> String {
    match flavor() {
        Flavor::Mariadb => String::new(),
        Flavor::Mysql => format!(
            "    flavor: mysql\n    image: {}\n",
            std::env::var("CNMYSQL_TEST_IMAGE").unwrap_or_else(|_| "mysql:9.7".into())
        ),
    }
}
