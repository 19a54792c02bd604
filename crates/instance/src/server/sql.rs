//! The manager's administrative connection to its own server (local socket).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use cnmysql_api::Flavor;
use cnmysql_core::flavor::{self, Sql};
use cnmysql_core::status::{ReplicationStatus, SemiSyncStatus};
use mysql_async::prelude::*;
use mysql_async::{Conn, Opts, OptsBuilder, Pool, PoolConstraints, PoolOpts, Row, Value};

/// Connection options for the admin account over the local socket.
pub fn socket_opts(socket: &Path, user: &str, password: Option<&str>) -> Opts {
    OptsBuilder::default()
        .socket(Some(socket.display().to_string()))
        .user(Some(user))
        .pass(password)
        .prefer_socket(true)
        .wait_timeout(Some(28_800))
        .into()
}

pub fn admin_pool(socket: &Path, password: &str) -> Pool {
    let constraints = PoolConstraints::new(0, 4).expect("0 <= 4");
    let opts = OptsBuilder::from_opts(socket_opts(
        socket,
        cnmysql_api::names::ADMIN_USER,
        Some(password),
    ))
    .pool_opts(
        PoolOpts::default()
            .with_constraints(constraints)
            .with_inactive_connection_ttl(Duration::from_secs(30)),
    );
    Pool::new(opts)
}

/// Run statements, logging only their redacted form.
pub async fn exec_all(conn: &mut Conn, stmts: &[Sql]) -> anyhow::Result<()> {
    for s in stmts {
        tracing::debug!(sql = %s, "exec");
        conn.query_drop(&s.text)
            .await
            .map_err(|e| anyhow::anyhow!("{} failed: {e}", s.shown()))?;
    }
    Ok(())
}

/// Stop replication now, even in the middle of a transaction whose end
/// will never arrive. MySQL's multi-threaded applier, told to stop while
/// it holds part of a transaction (its source died or was cut off while
/// sending it), waits 60 s for the rest: a failover's replicas would
/// follow nobody, and under `required` every commit would wait, that
/// long. When nothing is being received, ending the coordinator first
/// rolls that part back at once; the whole transaction comes again from
/// the next source if it has it. A receiver that is running (a switchover,
/// whose old primary finished sending) is stopped the ordinary way.
pub async fn stop_replication(conn: &mut Conn, f: Flavor, receiving: bool) -> anyhow::Result<()> {
    if f == Flavor::Mysql && !receiving {
        exec_all(conn, &[flavor::stop_receiving(f)]).await?;
        let coordinator: Option<u64> = conn.query_first(flavor::MYSQL_APPLIER_COORDINATOR).await?;
        if let Some(id) = coordinator {
            tracing::info!(
                thread = id,
                "ending the applier's coordinator: nothing more is received, so a transaction it holds only part of is rolled back now (mysqld reports this stop as an error; the transaction comes again whole from the next source)"
            );
            // It may have ended by itself in between.
            if let Err(e) = conn.query_drop(format!("KILL {id}")).await {
                tracing::debug!(error = %e, "the coordinator was already gone");
            }
            // A kill is only noticed later; a STOP REPLICA before the
            // coordinator has gone would start the 60 s wait after all.
            coordinator_gone(conn, id).await?;
        }
    }
    exec_all(conn, &[flavor::stop_replica(f)]).await
}

/// Wait (up to 10 s) until thread `id` has left the process list.
async fn coordinator_gone(conn: &mut Conn, id: u64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let still: Option<u64> = conn
            .exec_first(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE ID = ?",
                (id,),
            )
            .await?;
        if still.is_none() {
            return Ok(());
        }
        if Instant::now() > deadline {
            tracing::warn!(
                thread = id,
                "the applier's coordinator has not ended after 10 s"
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait until the server accepts connections with these options.
pub async fn wait_connectable(opts: &Opts, timeout: Duration) -> anyhow::Result<Conn> {
    let deadline = Instant::now() + timeout;
    loop {
        match Conn::new(opts.clone()).await {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() >= deadline => {
                anyhow::bail!("the server did not accept connections within {timeout:?}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

pub fn col_str(row: &Row, name: &str) -> String {
    match row.get_opt::<Value, _>(name) {
        Some(Ok(Value::Bytes(b))) => String::from_utf8_lossy(&b).into_owned(),
        Some(Ok(Value::Int(i))) => i.to_string(),
        Some(Ok(Value::UInt(i))) => i.to_string(),
        _ => String::new(),
    }
}

/// What the manager observes on its own server in one round trip set.
#[derive(Debug, Clone, Default)]
pub struct ServerView {
    pub gtid_executed: String,
    pub gtid_position: String,
    pub read_only: bool,
    pub replication: Option<ReplicationStatus>,
    pub semi_sync: SemiSyncStatus,
    pub uptime_seconds: u64,
    pub source_id: String,
    pub server: BTreeMap<String, u64>,
}

pub async fn observe(conn: &mut Conn, f: Flavor) -> anyhow::Result<ServerView> {
    let (binlog, position, ro, applied): (String, String, i64, String) = conn
        .query_first(flavor::gtid_and_read_only(f).text)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no row for the GTID query"))?;
    let executed = flavor::executed_history(f, &binlog, &applied);
    let rows: Vec<Row> = conn.query(flavor::replica_status(f).text).await?;
    // MySQL lists every channel; a binlog archive's is not replication.
    let default_channel = rows
        .iter()
        .find(|r| col_str(r, "Channel_Name") != cnmysql_core::archive_replica::CHANNEL);
    let applying_lag_millis = match (default_channel, flavor::applying_lag_micros(f)) {
        (Some(_), Some(q)) => {
            // A finer figure beside Seconds_Behind: a server that will not
            // tell it leaves it unknown, it does not fail the look.
            let us: Option<i64> = conn.query_first(q.text).await.ok().flatten();
            // A clock behind the primary's reads as none behind.
            us.map(|us| us.max(0) as u64 / 1000)
        }
        _ => None,
    };
    let replication = default_channel.map(|r| {
        let (host, port, io, sql, io_err, sql_err, io_errno, sql_errno, behind, using, received) =
            match f {
                Flavor::Mariadb => (
                    "Master_Host",
                    "Master_Port",
                    "Slave_IO_Running",
                    "Slave_SQL_Running",
                    "Last_IO_Error",
                    "Last_SQL_Error",
                    "Last_IO_Errno",
                    "Last_SQL_Errno",
                    "Seconds_Behind_Master",
                    "Using_Gtid",
                    "Gtid_IO_Pos",
                ),
                Flavor::Mysql => (
                    "Source_Host",
                    "Source_Port",
                    "Replica_IO_Running",
                    "Replica_SQL_Running",
                    "Last_IO_Error",
                    "Last_SQL_Error",
                    "Last_IO_Errno",
                    "Last_SQL_Errno",
                    "Seconds_Behind_Source",
                    "Auto_Position",
                    "Retrieved_Gtid_Set",
                ),
            };
        ReplicationStatus {
            source_host: col_str(r, host),
            source_port: col_str(r, port).parse().unwrap_or(0),
            io_state: col_str(r, io),
            sql_running: col_str(r, sql) == "Yes",
            last_io_error: col_str(r, io_err),
            last_sql_error: col_str(r, sql_err),
            last_io_errno: col_str(r, io_errno).parse().unwrap_or(0),
            last_sql_errno: col_str(r, sql_errno).parse().unwrap_or(0),
            seconds_behind: col_str(r, behind).parse().ok(),
            applying_lag_millis,
            using_gtid: col_str(r, using),
            received_gtid: col_str(r, received),
        }
    });
    let vars: Vec<(String, String)> = conn.query(global_status_query()).await?;
    let settings = semi_sync_settings(conn, f).await?;
    let get = |list: &[(String, String)], names: &[&str]| -> String {
        list.iter()
            .find(|(k, _)| names.iter().any(|n| k.eq_ignore_ascii_case(n)))
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let on = |s: String| s.eq_ignore_ascii_case("ON") || s == "1";
    let semi_sync = SemiSyncStatus {
        source_enabled: on(get(
            &settings,
            &[
                "rpl_semi_sync_master_enabled",
                "rpl_semi_sync_source_enabled",
            ],
        )),
        source_active: on(get(
            &vars,
            &["Rpl_semi_sync_master_status", "Rpl_semi_sync_source_status"],
        )),
        replica_enabled: on(get(
            &settings,
            &[
                "rpl_semi_sync_slave_enabled",
                "rpl_semi_sync_replica_enabled",
            ],
        )),
        replica_active: on(get(
            &vars,
            &["Rpl_semi_sync_slave_status", "Rpl_semi_sync_replica_status"],
        )),
        clients: get(
            &vars,
            &[
                "Rpl_semi_sync_master_clients",
                "Rpl_semi_sync_source_clients",
            ],
        )
        .parse()
        .unwrap_or(0),
        wait_for_count: get(&settings, &["rpl_semi_sync_source_wait_for_replica_count"])
            .parse()
            .unwrap_or(1),
        timeout_millis: get(
            &settings,
            &[
                "rpl_semi_sync_master_timeout",
                "rpl_semi_sync_source_timeout",
            ],
        )
        .parse()
        .unwrap_or(0),
    };
    let source_id: Option<String> = conn
        .query_first(match f {
            Flavor::Mariadb => "SELECT CAST(@@server_id AS CHAR)",
            Flavor::Mysql => "SELECT @@server_uuid",
        })
        .await?;
    Ok(ServerView {
        source_id: source_id.unwrap_or_default(),
        gtid_executed: executed,
        gtid_position: position,
        read_only: ro != 0,
        replication,
        semi_sync,
        uptime_seconds: get(&vars, &["Uptime"]).parse().unwrap_or(0),
        server: server_figures(&vars),
    })
}

/// The status variables the manager reads: its own (uptime, semi-sync)
/// and the server's figures for `/metrics`, in one statement.
/// The semi-sync settings each flavour has, read one by one as
/// `(name, value)`. Not `SHOW GLOBAL VARIABLES WHERE …`: MySQL answers that
/// by materialising every system variable, which on a replica under 16
/// writers was 5 % of its server's CPU (issue 46); the config names every
/// one of these (a server without them does not start), so they exist.
async fn semi_sync_settings(conn: &mut Conn, f: Flavor) -> anyhow::Result<Vec<(String, String)>> {
    let names = semi_sync_setting_names(f);
    let row: Option<Row> = conn.query_first(semi_sync_settings_query(names)).await?;
    let row = row.ok_or_else(|| anyhow::anyhow!("the semi-sync settings returned no row"))?;
    Ok(names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let v: Option<String> = row.get_opt(i).and_then(|v| v.ok()).flatten();
            (n.to_string(), v.unwrap_or_default())
        })
        .collect())
}

fn semi_sync_setting_names(f: Flavor) -> &'static [&'static str] {
    match f {
        Flavor::Mariadb => &[
            "rpl_semi_sync_master_enabled",
            "rpl_semi_sync_slave_enabled",
            "rpl_semi_sync_master_timeout",
        ],
        Flavor::Mysql => &[
            "rpl_semi_sync_source_enabled",
            "rpl_semi_sync_replica_enabled",
            "rpl_semi_sync_source_timeout",
            "rpl_semi_sync_source_wait_for_replica_count",
        ],
    }
}

fn semi_sync_settings_query(names: &[&str]) -> String {
    let cols: Vec<String> = names
        .iter()
        .map(|n| format!("CAST(@@global.{n} AS CHAR)"))
        .collect();
    format!("SELECT {}", cols.join(", "))
}

fn global_status_query() -> String {
    let own = [
        "Uptime",
        "Rpl_semi_sync_master_status",
        "Rpl_semi_sync_slave_status",
        "Rpl_semi_sync_master_clients",
        "Rpl_semi_sync_source_status",
        "Rpl_semi_sync_replica_status",
        "Rpl_semi_sync_source_clients",
    ];
    let names: Vec<String> = own
        .into_iter()
        .chain(cnmysql_view::server_metrics::status_variables())
        .map(|n| format!("'{n}'"))
        .collect();
    format!(
        "SHOW GLOBAL STATUS WHERE Variable_name IN ({})",
        names.join(", ")
    )
}

/// The server's figures: the numeric status variables read. The size of
/// its binary logs is read off the disk by the caller
/// (`binlog_files::total_bytes`): asking the server can wait as long as a
/// commit waits for an acknowledgement.
fn server_figures(vars: &[(String, String)]) -> BTreeMap<String, u64> {
    cnmysql_view::server_metrics::status_variables()
        .filter_map(|name| {
            let (_, v) = vars.iter().find(|(k, _)| k.eq_ignore_ascii_case(name))?;
            Some((name.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// Close every client connection that could write (MariaDB's read_only lets
/// open transactions of privileged users through): everything except
/// replication threads, system users and our own connection.
pub async fn kill_writers(conn: &mut Conn) -> anyhow::Result<usize> {
    let ids: Vec<(u64, String, String)> = conn
        .query(
            "SELECT ID, USER, COMMAND FROM information_schema.PROCESSLIST \
             WHERE ID <> CONNECTION_ID() AND USER NOT IN ('system user', 'event_scheduler', 'root') \
             AND COMMAND NOT IN ('Binlog Dump', 'Binlog Dump GTID', 'Daemon')",
        )
        .await?;
    let mut n = 0;
    for (id, _, _) in &ids {
        if conn
            .query_drop(format!("KILL CONNECTION {id}"))
            .await
            .is_ok()
        {
            n += 1;
        }
    }
    Ok(n)
}

/// Statements that set the primary's semi-sync side.
/// The semi-sync replica side on or off (read by the IO thread when it
/// connects: restart it for the change to take).
pub fn semi_sync_replica(f: Flavor, on: bool) -> Sql {
    let v = if on { "ON" } else { "OFF" };
    Sql::new(match f {
        Flavor::Mariadb => format!("SET GLOBAL rpl_semi_sync_slave_enabled = {v}"),
        Flavor::Mysql => format!("SET GLOBAL rpl_semi_sync_replica_enabled = {v}"),
    })
}

/// The source side's timeout alone (also what a former primary made
/// neutral is told: `semisync::LeaveStep::Neutralise`).
pub fn semi_sync_source_timeout(f: Flavor, millis: u64) -> Sql {
    Sql::new(match f {
        Flavor::Mariadb => format!("SET GLOBAL rpl_semi_sync_master_timeout = {millis}"),
        Flavor::Mysql => format!("SET GLOBAL rpl_semi_sync_source_timeout = {millis}"),
    })
}

pub fn semi_sync_source(f: Flavor, s: &cnmysql_core::semisync::Settings) -> Vec<Sql> {
    let on = if s.enabled { "ON" } else { "OFF" };
    match f {
        Flavor::Mariadb => vec![
            semi_sync_source_timeout(f, s.timeout_millis),
            Sql::new(format!("SET GLOBAL rpl_semi_sync_master_enabled = {on}")),
        ],
        Flavor::Mysql => vec![
            semi_sync_source_timeout(f, s.timeout_millis),
            Sql::new(format!(
                "SET GLOBAL rpl_semi_sync_source_wait_for_replica_count = {}",
                s.wait_for_count.max(1)
            )),
            Sql::new(format!("SET GLOBAL rpl_semi_sync_source_enabled = {on}")),
        ],
    }
}
