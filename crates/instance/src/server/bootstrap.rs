//! Giving an instance its first data: an empty server for a new cluster's
//! first primary (from a template when there is one), with the accounts the
//! cluster needs.

use std::path::Path;
use std::time::Duration;

use cnmysql_api::Flavor;
use cnmysql_api::names::{APP_DATABASE, APP_USER, REPLICATION_USER};
use cnmysql_core::flavor::{self, Sql, quote};
use mysql_async::prelude::*;

use crate::config::{InstanceConfig, Programs};
use crate::sql;

/// Privileges of the application account on its database: everything a
/// schema owner needs, nothing on any other database, nothing that
/// bypasses read-only or administers the server.
const APP_PRIVILEGES: &str = "SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX, ALTER, \
    CREATE TEMPORARY TABLES, LOCK TABLES, EXECUTE, CREATE VIEW, SHOW VIEW, CREATE ROUTINE, \
    ALTER ROUTINE, EVENT, TRIGGER, REFERENCES";

/// Run the flavour's install program into an empty directory.
pub fn install_db(flavor: Flavor, programs: &Programs, target: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(target)?;
    // Its own temporary directory: in the shared /tmp another server's
    // cleanup can take this one's files away mid-install.
    let tmp = tempfile::Builder::new()
        .prefix(".cnmysql-install-tmp")
        .tempdir_in(target.parent().unwrap_or(Path::new("/tmp")))?;
    let mut cmd = programs.command(&programs.install_db);
    cmd.arg("--no-defaults")
        .arg(format!("--datadir={}", target.display()))
        .arg(format!("--tmpdir={}", tmp.path().display()));
    match flavor {
        Flavor::Mariadb => {
            // --force: without it the script insists on resolving the
            // host's name first (with resolveip), which a container's root
            // filesystem without /etc/hosts cannot; grants use no host
            // names here (--skip-name-resolve).
            cmd.arg("--auth-root-authentication-method=normal")
                .arg("--skip-test-db")
                .arg("--skip-name-resolve")
                .arg("--force")
                .arg("--innodb-log-file-size=48M");
        }
        // root@localhost without a password, reachable only over the
        // private socket until init_primary_accounts secures it.
        Flavor::Mysql => {
            cmd.arg("--initialize-insecure")
                .arg("--innodb-redo-log-capacity=48M");
        }
    }
    if nix::unistd::geteuid().is_root() {
        cmd.arg("--user=root");
    }
    let out = cmd
        .output()
        .map_err(|e| programs.start_error(&programs.install_db, &e))?;
    if !out.status.success() {
        anyhow::bail!(
            "{} failed ({}): {}",
            programs.install_db.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    // A data directory made to be copied carries no server identity: each
    // copy makes its own server_uuid at its first start.
    let _ = std::fs::remove_file(target.join("auto.cnf"));
    Ok(())
}

/// Fill `dir` with an empty server: copy the template, or run the install
/// program.
pub fn prepare_empty_datadir_at(cfg: &InstanceConfig, dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    match &cfg.template_dir {
        Some(t) if t.join("mysql").is_dir() => {
            std::fs::create_dir_all(dir)?;
            let out = std::process::Command::new("cp")
                .arg("-a")
                .arg("--reflink=auto")
                .arg(format!("{}/.", t.display()))
                .arg(dir)
                .output()?;
            if !out.status.success() {
                anyhow::bail!(
                    "copying the template failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            // Older templates kept the identity of the server that made them.
            let _ = std::fs::remove_file(dir.join("auto.cnf"));
            Ok(())
        }
        _ => install_db(cfg.flavor(), &cfg.programs, dir),
    }
}

/// Fill the data directory with an empty server.
pub fn prepare_empty_datadir(cfg: &InstanceConfig) -> anyhow::Result<()> {
    prepare_empty_datadir_at(cfg, &cfg.data_dir)
}

pub fn read_secret(path: &Path) -> anyhow::Result<String> {
    let s = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read secret file {}: {e}", path.display()))?;
    let s = s.trim_end_matches(['\n', '\r']).to_string();
    if s.is_empty() {
        anyhow::bail!("secret file {} is empty", path.display());
    }
    Ok(s)
}

/// On a freshly installed server (root without a password, reachable only
/// through the private socket): secure root and create the cluster's accounts.
/// None of it is written to the binary log: replicas receive it with their
/// physical copy, and the GTID history starts with the user's first write.
pub async fn init_primary_accounts(cfg: &InstanceConfig) -> anyhow::Result<()> {
    let opts = sql::socket_opts(&cfg.socket(), "root", None);
    let mut conn = sql::wait_connectable(&opts, Duration::from_secs(120)).await?;
    conn.query_drop("SET SESSION sql_log_bin = 0").await?;
    if cfg.flavor() == Flavor::Mariadb {
        // The install program's `test` database, open to every account.
        conn.query_drop("DROP DATABASE IF EXISTS `test`").await?;
    }
    revoke_grants_to_everyone(&mut conn).await?;
    set_accounts(&mut conn, cfg).await?;
    conn.disconnect().await.ok();
    Ok(())
}

/// Take away what the install program gives every account: MariaDB's
/// `PUBLIC` privileges on `test` and on any database named `test_…` (so
/// any account could make one and own it). Nothing else is granted to
/// everyone. Binary-logged or not as the session is.
pub async fn revoke_grants_to_everyone(conn: &mut mysql_async::Conn) -> anyhow::Result<()> {
    let open: Vec<(String, String)> = conn
        .query("SELECT Db, User FROM mysql.db WHERE User IN ('PUBLIC', '')")
        .await?;
    for (db, user) in open {
        let who = if user.is_empty() {
            "''@'%'".to_string()
        } else {
            "PUBLIC".to_string()
        };
        let at = format!("`{}`.*", db.replace('`', "``"));
        let revoke = format!("REVOKE ALL PRIVILEGES ON {at} FROM {who}");
        if let Err(e) = conn.query_drop(&revoke).await {
            tracing::warn!(statement = revoke, error = %e, "a grant to everyone stays");
        }
    }
    Ok(())
}

/// Give the cluster's accounts this cluster's passwords (they may exist
/// already, with another's: a recovered server holds its source's), make
/// the `app` database `app` owns, drop anonymous and remote root accounts,
/// and leave the server read-only. None of it is written to the binary log
/// (a replica cluster does the same on its own, and follows its source's
/// log without a clash).
pub async fn set_accounts(
    conn: &mut mysql_async::Conn,
    cfg: &InstanceConfig,
) -> anyhow::Result<()> {
    let admin = read_secret(&cfg.secrets.admin_password)?;
    let repl = read_secret(&cfg.secrets.replication_password)?;
    let app = read_secret(&cfg.secrets.app_password)?;
    let conn = &mut *conn;
    conn.query_drop("SET SESSION sql_log_bin = 0").await?;
    if cfg.flavor() == Flavor::Mysql {
        // Even root cannot write under super_read_only, which the server
        // starts with; it is set again below, before anything else runs.
        sql::exec_all(conn, &flavor::read_only(Flavor::Mysql, false)).await?;
    }
    let extra: Vec<(String, String)> = conn
        .query("SELECT User, Host FROM mysql.user WHERE (User = 'root' AND Host <> 'localhost') OR User = ''")
        .await?;
    let mut stmts: Vec<Sql> = extra
        .iter()
        .map(|(u, h)| Sql::new(format!("DROP USER {}@{}", quote(u), quote(h))))
        .collect();
    let alter = |pw: &str| format!("ALTER USER 'root'@'localhost' IDENTIFIED BY {pw}");
    stmts.push(Sql::secret(alter(&quote(&admin)), alter("'<redacted>'")));
    let require = replication_requirement(cfg);
    stmts.extend(flavor::create_replication_user(
        cfg.flavor(),
        REPLICATION_USER,
        &repl,
        &require,
    ));
    let create_app = |pw: &str| {
        format!(
            "CREATE USER IF NOT EXISTS {}@'%' IDENTIFIED BY {pw}",
            quote(APP_USER)
        )
    };
    stmts.push(Sql::secret(
        create_app(&quote(&app)),
        create_app("'<redacted>'"),
    ));
    stmts.push(Sql::new(format!(
        "CREATE DATABASE IF NOT EXISTS `{APP_DATABASE}` CHARACTER SET utf8mb4"
    )));
    stmts.push(Sql::new(format!(
        "GRANT {APP_PRIVILEGES} ON `{APP_DATABASE}`.* TO {}@'%'",
        quote(APP_USER)
    )));
    let replication_tls = format!(" {require}");
    for (user, pw, tls) in [
        (REPLICATION_USER, &repl, replication_tls.as_str()),
        (APP_USER, &app, ""),
    ] {
        let alter = |pw: &str| format!("ALTER USER {}@'%' IDENTIFIED BY {pw}{tls}", quote(user));
        stmts.push(Sql::secret(alter(&quote(pw)), alter("'<redacted>'")));
    }
    sql::exec_all(conn, &stmts).await?;
    sql::exec_all(conn, &flavor::read_only(cfg.flavor(), true)).await?;
    Ok(())
}

/// What the replication account requires of a replica's certificate:
/// the subject every instance of this cluster has (its name in its
/// namespace), from the CA that signed this instance's certificate, so a
/// certificate of another cluster, or of a CA mysqld also trusts (the
/// user's, with `serverTlsSecret`), is refused. A certificate issued
/// before instances shared their subject is only held to its issuer.
fn replication_requirement(cfg: &InstanceConfig) -> String {
    use cnmysql_tls::{Name, oneline};
    let cert = std::fs::read_to_string(&cfg.tls.cert).unwrap_or_default();
    let (cn, unit) = cnmysql_api::names::subject(&cfg.namespace, &cfg.cluster, &cfg.instance);
    let shared = format!(
        "/CN={cn}/O=cloudnative-mysql/OU={}",
        unit.unwrap_or_default()
    );
    let subject = oneline(&cert, Name::Subject).filter(|s| *s == shared);
    let issuer = oneline(&cert, Name::Issuer);
    flavor::replication_requirement(subject.as_deref(), issuer.as_deref())
}

/// Write `record` as `file` in the data directory (what a recovery or an
/// import brought), then mark the data made with `how`.
pub fn record_and_mark<T: serde::Serialize>(
    cfg: &InstanceConfig,
    file: &str,
    record: &T,
    how: &str,
) -> anyhow::Result<()> {
    std::fs::write(cfg.data_dir.join(file), serde_json::to_vec_pretty(record)?)?;
    mark_initialized(cfg, how)
}

/// Record that the data directory holds a server this instance may start.
pub fn mark_initialized(cfg: &InstanceConfig, how: &str) -> anyhow::Result<()> {
    std::fs::write(cfg.initialized_marker(), format!("{how}\n"))?;
    Ok(())
}

pub fn is_initialized(cfg: &InstanceConfig) -> bool {
    cfg.initialized_marker().is_file()
}

/// Put `new` (a clone, a restored or recovered backup) in place of the data
/// directory, never over an initialised one (`what` names the copy in the
/// refusal). Binary logs on a volume of their own belong to the data they
/// sit beside: they go with it, or the server would start on the old
/// history's logs.
pub fn replace_data_dir(cfg: &InstanceConfig, new: &Path, what: &str) -> anyhow::Result<()> {
    if cfg.data_dir.exists() {
        anyhow::ensure!(
            !is_initialized(cfg),
            "refusing to replace an initialised data directory with {what}"
        );
        std::fs::remove_dir_all(&cfg.data_dir)?;
    }
    if let Some(dir) = &cfg.binlog_dir {
        if dir.exists() {
            std::fs::remove_dir_all(dir)?;
        }
        std::fs::create_dir_all(dir)?;
    }
    std::fs::rename(new, &cfg.data_dir)?;
    Ok(())
}
