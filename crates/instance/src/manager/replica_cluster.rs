//! A replica cluster's designated primary (`spec.replica`): it follows a
//! server outside the cluster, with the credentials of the Secret
//! `<cluster>-replica-source`, and leaves it only when promoted, once
//! the promotion token and everything received are applied
//! (`cnmysql_core::replica_cluster`).

use cnmysql_api::replica::{source_secret, split_address};
use cnmysql_core::replica_cluster::{self, Promotion};

use super::*;
use crate::source_account::SourceAccount;

impl<C: ClusterState> Manager<C> {
    fn source_credentials(&self) -> anyhow::Result<SourceAccount> {
        SourceAccount::load(&self.cfg, &source_secret(&self.cfg.cluster), "spec.replica")
    }

    /// Follow the replica cluster's source `source` (`host:port`), once its
    /// history holds this server's and none of its server ids are ours;
    /// false (and the phase says why) while it cannot.
    pub(super) async fn follow_external(
        &self,
        conn: &mut mysql_async::Conn,
        source: &str,
        view: &sql::ServerView,
    ) -> anyhow::Result<bool> {
        let f = self.cfg.flavor();
        let status = self.cluster.get().await?;
        if status
            .replica
            .as_ref()
            .is_some_and(|r| r.object_store.is_some())
        {
            // The binlog archive's loop follows it (`archive_replica`).
            self.set_phase(
                InstancePhase::Running,
                format!("about to follow the binlog archive {source}"),
            );
            return Ok(false);
        }
        let (host, port) = split_address(source)
            .ok_or_else(|| anyhow::anyhow!("spec.replica.source: {source} is not host:port"))?;
        let name = status
            .replica
            .as_ref()
            .and_then(|r| r.tls_server_name.clone())
            .unwrap_or_else(|| host.to_string());
        let cred = self.source_credentials()?;
        let (server_id, theirs) = match source_history(&cred, host, port, &name, f).await {
            Ok(seen) => seen,
            Err(e) => {
                self.set_phase(
                    InstancePhase::Running,
                    format!("cannot reach the replica cluster's source {source}: {e:#}"),
                );
                return Ok(false);
            }
        };
        if let Some(why) = self.clashing_server_id(server_id, &theirs, &view.gtid_executed) {
            self.set_phase(InstancePhase::Running, why);
            return Ok(false);
        }
        let mine = parse_history(f, &view.gtid_executed)?;
        let source_history = parse_history(f, &theirs)?;
        if let Err(why) = role::may_follow(&mine, &source_history) {
            // Never marked diverged: in a switchover between clusters the
            // new source is still catching up with this one.
            self.set_phase(
                InstancePhase::Running,
                format!("not following {source} yet: {why}"),
            );
            return Ok(false);
        }
        let (ssl_cert, ssl_key) = cred
            .client
            .as_ref()
            .map(|(c, k)| (c.display().to_string(), k.display().to_string()))
            .unwrap_or_default();
        // MySQL: the source's transactions are applied with the applier
        // account's privileges, never the server's own.
        let checks = (f == Flavor::Mysql).then(|| flavor::APPLIER_USER.to_string());
        if checks.is_some() {
            super::applier::make_applier(conn).await?;
        }
        let change = SourceSpec {
            privilege_checks_user: checks,
            host: host.to_string(),
            port,
            user: cred.user,
            password: cred.password,
            ssl_ca: cred.ca.display().to_string(),
            ssl_cert,
            ssl_key,
            use_current_pos: true,
            // The server checks no name but the host it connects to: the
            // name was checked above; it checks the CA.
            verify_host: name == host,
        };
        sql::stop_replication(conn, f, super::converge::receiving(view)).await?;
        sql::exec_all(
            conn,
            &[flavor::change_source(f, &change), flavor::start_replica(f)],
        )
        .await?;
        tracing::info!(source, "following the replica cluster's source");
        Ok(true)
    }

    /// A server id of this cluster that the source's server, or a
    /// transaction of its history this server did not write, uses too: the
    /// applier would skip those events as its own. (MariaDB GTIDs name
    /// their server; this cluster's own writes coming back are fine.)
    fn clashing_server_id(&self, source_id: u32, history: &str, mine: &str) -> Option<String> {
        let base = self.cfg.spec.mysql.server_id_base;
        let last = base.saturating_add(self.cfg.spec.instances.max(0) as u32);
        let ours = |id: u32| id > base && id <= last;
        let mut clash: Vec<u32> = Vec::new();
        if ours(source_id) {
            clash.push(source_id);
        }
        if self.cfg.flavor() == Flavor::Mariadb {
            clash.extend(
                history
                    .split(',')
                    .map(str::trim)
                    .filter(|g| !history_reaches(Flavor::Mariadb, mine, g))
                    .filter_map(|g| g.split('-').nth(1)?.parse::<u32>().ok())
                    .filter(|id| ours(*id)),
            );
        }
        clash.sort();
        clash.dedup();
        (!clash.is_empty()).then(|| {
            format!(
                "not following the source: server id(s) {clash:?} are used by the source and by this cluster \
                 (ids {}..={last}); set spec.mysql.serverIdBase so the two clusters' ranges do not overlap",
                base + 1
            )
        })
    }

    /// A replica cluster's steps before the role's: a demoted primary made
    /// read-only; a promoted one leaving its source only once the token
    /// and all it received are applied. False when the pass ends here.
    pub(super) async fn replica_cluster_may_go_on(
        &self,
        desired: &Desired,
        conn: &mut mysql_async::Conn,
        status: &cnmysql_api::ClusterStatus,
        view: &sql::ServerView,
    ) -> anyhow::Result<bool> {
        match desired {
            Desired::DesignatedPrimary { source } if !view.read_only => {
                self.fencer
                    .make_read_only(
                        self_fence::Cause::Demotion,
                        &format!("demoted: the cluster now follows {source}"),
                    )
                    .await?;
                Ok(false)
            }
            // Only a cluster that was a replica cluster: any other primary
            // forgets a stray source as it always did.
            Desired::Primary if status.replica.is_some() && self.follows_external(view) => {
                self.ready_to_leave_source(conn, status, view).await
            }
            // One that followed a binlog archive, until it is all applied.
            Desired::Primary
                if status
                    .replica
                    .as_ref()
                    .is_some_and(|r| r.object_store.is_some())
                    && self.archive_follower.was_following().await =>
            {
                use super::archive_replica::Promoted;
                match self.archive_follower.promotion_done(status, view).await? {
                    Promoted::Done => Ok(true),
                    Promoted::Waiting(why) => {
                        if let Some(why) = why {
                            self.set_phase(InstancePhase::Running, why);
                        }
                        Ok(false)
                    }
                }
            }
            _ => Ok(true),
        }
    }

    /// Replication is configured from a server that is not one of the
    /// cluster's instances: a replica cluster's source.
    pub(super) fn follows_external(&self, view: &sql::ServerView) -> bool {
        view.replication
            .as_ref()
            .filter(|r| !r.source_host.is_empty())
            .and_then(|r| self.peers.source_name(&r.source_host, r.source_port))
            .is_some_and(|n| self.peers.get(&n).is_none())
    }

    /// A promoted replica cluster's primary, still following its source:
    /// true once it may forget the source and open writes.
    pub(super) async fn ready_to_leave_source(
        &self,
        conn: &mut mysql_async::Conn,
        status: &cnmysql_api::ClusterStatus,
        view: &sql::ServerView,
    ) -> anyhow::Result<bool> {
        let f = self.cfg.flavor();
        let Some(repl) = &view.replication else {
            return Ok(true);
        };
        let token = status
            .replica
            .as_ref()
            .and_then(|r| r.promotion_token.as_deref());
        let receiving = repl.io_state == "Yes" || repl.io_state == "Connecting";
        match replica_cluster::promotion(
            f,
            &view.gtid_executed,
            token,
            receiving,
            &repl.received_gtid,
        ) {
            Promotion::Ready => Ok(true),
            Promotion::StopReceiving => {
                sql::exec_all(conn, &[flavor::stop_receiving(f)]).await?;
                tracing::info!(
                    "promotion: receiving nothing more from the replica cluster's source"
                );
                Ok(false)
            }
            Promotion::AwaitToken(why) | Promotion::Applying(why) => {
                self.set_phase(InstancePhase::Running, why);
                Ok(false)
            }
        }
    }
}

/// The source's server id and executed history, read over TLS with the
/// source account.
async fn source_history(
    cred: &SourceAccount,
    host: &str,
    port: u16,
    name: &str,
    f: Flavor,
) -> anyhow::Result<(u32, String)> {
    let mut conn = cred.connect(host, port, name).await?;
    let (binlog, _position, _ro, applied): (String, String, i64, String) = conn
        .query_first(flavor::gtid_and_read_only(f).text)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no row for the GTID query"))?;
    let server_id: Option<u32> = conn.query_first("SELECT @@server_id").await?;
    let _ = conn.disconnect().await;
    Ok((
        server_id.unwrap_or_default(),
        flavor::executed_history(f, &binlog, &applied),
    ))
}
