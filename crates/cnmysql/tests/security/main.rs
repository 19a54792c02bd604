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

#[path = "../common/mod.rs"]
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
    let port = c.control_port(&primary);
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

mod declared;
mod files;
mod identity;
mod import;
