//! The replay step of a recovery, on a private server (no network, no
//! grant checks), started twice. First it is given the base backup's
//! history and forgets the replication state the copy carries (a copy of
//! a replica names that replica's source and relay logs). Then the planned
//! binary log ranges, written as relay log files
//! (`cnmysql_backup::relay_log`) before it starts again, are applied by
//! its own applier threads. Progress is the applier's place in those
//! files; the replay is done once the server's history holds the planned
//! position, and fails with the applier's own error, or when the files end
//! before that position. Last, the accounts get this Cluster's passwords.

use super::*;
use crate::private_server::PrivateServer;
use cnmysql_backup::recovery_plan;
use cnmysql_backup::relay_log::{self, RelayLogs};
use std::path::Path;
use std::time::{Duration, Instant};

/// How often the applier is looked at.
const POLL: Duration = Duration::from_millis(250);
/// The applier has read everything, and the history has not moved, for
/// this long, and the position is still not held: the files end before it.
const RAN_OUT: Duration = Duration::from_secs(5);

/// The private server's options.
pub(super) fn server_args(cfg: &InstanceConfig) -> Vec<String> {
    vec![
        format!("--defaults-file={}", cfg.mycnf().display()),
        "--skip-grant-tables".to_string(),
        "--skip-networking".to_string(),
        "--max-allowed-packet=1G".to_string(),
        // Nothing waits on the replay's commits one by one: a recovery
        // that stops half-way starts again from the base backup (the
        // data directory is only marked made at the end), and the
        // server's clean shutdown writes everything out.
        "--sync-binlog=0".to_string(),
        "--innodb-flush-log-at-trx-commit=2".to_string(),
        match cfg.flavor() {
            Flavor::Mariadb => "--skip-slave-start",
            Flavor::Mysql => "--skip-replica-start",
        }
        .to_string(),
    ]
}

/// The private server's options that make it read `relay` as its relay log.
fn relay_log_args(f: Flavor, relay: &RelayLogs) -> Vec<String> {
    let mut args = vec![
        format!("--relay-log={}", relay.base.display()),
        format!("--relay-log-index={}", relay.index.display()),
    ];
    if f == Flavor::Mysql {
        // Recovery at start would throw the files away unread.
        args.push("--relay-log-recovery=OFF".into());
    }
    args
}

/// What the applier is doing, read from the replica status.
struct Applier {
    running: bool,
    error: String,
    file: String,
    pos: u64,
    read_everything: bool,
}

async fn applier(conn: &mut mysql_async::Conn, f: Flavor) -> anyhow::Result<Option<Applier>> {
    let rows: Vec<mysql_async::Row> = conn.query(flavor::replica_status(f).text).await?;
    let Some(r) = rows.first() else {
        return Ok(None);
    };
    let (running, state) = match f {
        Flavor::Mariadb => ("Slave_SQL_Running", "Slave_SQL_Running_State"),
        Flavor::Mysql => ("Replica_SQL_Running", "Replica_SQL_Running_State"),
    };
    Ok(Some(Applier {
        running: sql::col_str(r, running) == "Yes",
        error: sql::col_str(r, "Last_SQL_Error"),
        file: sql::col_str(r, "Relay_Log_File"),
        pos: sql::col_str(r, "Relay_Log_Pos").parse().unwrap_or(0),
        read_everything: sql::col_str(r, state).contains("read all relay log"),
    }))
}

impl<C: ClusterState> Manager<C> {
    /// Replay `plan` (its files under `binlogs`, relay logs made under
    /// `work`) onto the restored base backup whose history is `base_gtid`;
    /// the seconds the applier took.
    pub(super) async fn replay(
        &self,
        base_gtid: &str,
        binlogs: &Path,
        work: &Path,
        plan: &recovery_plan::Plan,
    ) -> anyhow::Result<f64> {
        let cfg = &self.cfg;
        let f = cfg.flavor();
        let mut server = PrivateServer::start(cfg, server_args(cfg), &cfg.socket()).await?;
        if let Err(e) = self.prepare_replay(&mut server.conn, base_gtid).await {
            let words = server.kill().await;
            anyhow::bail!("recovery failed while preparing the replay: {e:#}; server: {words}");
        }
        server.stop().await?;
        let relay = relay_log::write(f, binlogs, &plan.replays, &work.join("relay"))
            .map_err(|e| anyhow::anyhow!("recovery failed while preparing the replay: {e:#}"))?;
        let mut args = server_args(cfg);
        args.extend(relay_log_args(f, &relay));
        let mut server = PrivateServer::start(cfg, args, &cfg.socket()).await?;
        match self.apply_and_finish(&mut server.conn, &relay, plan).await {
            Ok(secs) => server.stop().await.map(|()| secs),
            Err(e) => {
                let words = server.kill().await;
                anyhow::bail!("recovery failed while replaying: {e:#}; server: {words}")
            }
        }
    }

    /// The base backup's history, writable, no replication state.
    async fn prepare_replay(
        &self,
        conn: &mut mysql_async::Conn,
        base_gtid: &str,
    ) -> anyhow::Result<()> {
        let f = self.cfg.flavor();
        sql::exec_all(conn, &flavor::read_only(f, false)).await?;
        if f == Flavor::Mariadb {
            // The data holds the history up to the backup; its binary log
            // is empty. Give it that history, so the replayed transactions
            // follow.
            sql::exec_all(conn, &flavor::adopt_history(f, base_gtid, base_gtid)).await?;
        } else {
            // The copy carries its GTID set; it must be the manifest's.
            let held = reached(self.cfg.flavor(), conn).await?;
            anyhow::ensure!(
                recovery_plan::position_within(f, base_gtid, &held),
                "the restored backup holds {held:?}, its manifest says {base_gtid:?}"
            );
        }
        // Never started (--skip-replica-start): forgotten as it is.
        sql::exec_all(conn, &[flavor::reset_replica(f)]).await
    }

    /// Apply `relay`, check the position reached, set the accounts; the
    /// seconds the applier took.
    async fn apply_and_finish(
        &self,
        conn: &mut mysql_async::Conn,
        relay: &RelayLogs,
        plan: &recovery_plan::Plan,
    ) -> anyhow::Result<f64> {
        let f = self.cfg.flavor();
        let secs = self.replay_relay_logs(conn, relay, plan).await?;
        let reached = reached(self.cfg.flavor(), conn).await?;
        anyhow::ensure!(
            recovery_plan::position_within(f, &plan.position, &reached),
            "after the replay the server is at {reached:?}, the plan reaches {:?}",
            plan.position
        );
        sql::exec_all(conn, &flavor::read_only(f, false)).await?;
        // Not binary-logged: a recovered cluster that then follows its
        // source (a replica cluster) must hold no transaction of its own.
        conn.query_drop("FLUSH LOCAL PRIVILEGES").await?;
        bootstrap::set_accounts(conn, &self.cfg).await?;
        Ok(secs)
    }

    /// Apply `relay` on the private server until its history holds
    /// `plan.position`; the seconds it took.
    async fn replay_relay_logs(
        &self,
        conn: &mut mysql_async::Conn,
        relay: &RelayLogs,
        plan: &recovery_plan::Plan,
    ) -> anyhow::Result<f64> {
        let f = self.cfg.flavor();
        let Some(first) = relay.files.first() else {
            return Ok(0.0);
        };
        let first = first
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        sql::exec_all(conn, &flavor::apply_relay_logs(f, first)).await?;
        let began = Instant::now();
        let mut logged = Instant::now();
        let mut ran_out: Option<Instant> = None;
        let mut shown: Option<u64> = None;
        let mut last: Option<String> = None;
        loop {
            let reached = reached(self.cfg.flavor(), conn).await?;
            if recovery_plan::position_within(f, &plan.position, &reached) {
                break;
            }
            let a = applier(conn, f)
                .await?
                .ok_or_else(|| anyhow::anyhow!("the replay's applier is gone"))?;
            anyhow::ensure!(
                a.running,
                "the applier stopped at {} {}: {}",
                a.file,
                a.pos,
                if a.error.is_empty() {
                    "no error given"
                } else {
                    &a.error
                }
            );
            // Read everything yet not there: the files ended early, once
            // the workers' queue has drained (the history stops moving).
            let moved = last.replace(reached.clone()).as_ref() != Some(&reached);
            ran_out = if a.read_everything && !moved {
                ran_out.or(Some(Instant::now()))
            } else {
                None
            };
            if ran_out.is_some_and(|t| t.elapsed() > RAN_OUT) {
                anyhow::bail!(
                    "the relay logs ended before the planned position: reached {reached:?}, planned {:?}",
                    plan.position
                );
            }
            let total = relay.total_bytes().max(1);
            let done = relay.done_bytes(&a.file, a.pos).unwrap_or(total);
            if shown.replace(done * 100 / total) != Some(done * 100 / total) {
                self.set_phase(
                    InstancePhase::Initializing,
                    format!(
                        "recovery: replaying {} transactions from the binlog archive: {}%",
                        plan.applied,
                        done * 100 / total
                    ),
                );
            }
            if logged.elapsed() > Duration::from_secs(5) {
                logged = Instant::now();
                tracing::info!(done, total, reached, "recovery: replaying");
            }
            tokio::time::sleep(POLL).await;
        }
        sql::exec_all(conn, &flavor::end_replay(f, self.cfg.server_id())).await?;
        let secs = began.elapsed().as_secs_f64();
        tracing::info!(
            transactions = plan.applied,
            seconds = secs,
            per_second = (plan.applied as f64 / secs.max(0.001)).round(),
            "recovery: replay applied"
        );
        Ok(secs)
    }
}

/// The private server's history, as the plan's position is written.
pub(super) async fn reached(f: Flavor, conn: &mut mysql_async::Conn) -> anyhow::Result<String> {
    let reached: String = conn
        .query_first(match f {
            Flavor::Mariadb => "SELECT @@gtid_binlog_pos",
            Flavor::Mysql => "SELECT @@gtid_executed",
        })
        .await?
        .unwrap_or_default();
    Ok(reached.replace('\n', ""))
}
