//! Role convergence: the loop that turns the cluster's intent and what the
//! server reports into the core's role actions (`cnmysql_core::role`) and
//! carries them out — follow, promote, drain, hand over, become read-only
//! (self-fencing, with the watchdog of `watchdog.rs`), semi-sync.

use super::acked_alone;
use super::*;
use cnmysql_api::ClusterStatus;
use cnmysql_core::role_gate::{self, First};

impl<C: ClusterState> Manager<C> {
    pub(super) async fn reconcile_loop(&self) {
        let mut last_error = String::new();
        loop {
            match self.reconcile_once().await {
                Ok(()) => last_error.clear(),
                Err(e) => {
                    let msg = e.to_string();
                    if msg != last_error {
                        tracing::warn!(error = msg, "reconcile step failed; retrying");
                        last_error = msg;
                    }
                }
            }
            // Periodic, but at once when the cluster status changes,
            // quickly while a primary change is in flight, and soon while
            // the IO thread waits to connect again.
            let busy = matches!(
                self.link.role(),
                Some(Desired::Promote)
                    | Some(Desired::HoldReadOnly(_))
                    | Some(Desired::HandOver { .. })
                    | Some(Desired::Detached { .. })
            );
            let retrying = self.reconnects.retrying();
            let period = Duration::from_millis(match (busy, retrying) {
                (true, _) => 50,
                (false, true) => 100,
                (false, false) => 250,
            });
            let mut stop = self.shutdown.subscribe();
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = self.cluster.changed() => {}
                _ = crate::stopped(&mut stop) => return,
            }
            if *self.shutdown.borrow() {
                return;
            }
        }
    }

    /// One turn: read the cluster's intent, look at the server, take the
    /// first step the core names (`role_gate::first`), then converge the
    /// server to its role (`role::reconcile`).
    pub(super) async fn reconcile_once(&self) -> anyhow::Result<()> {
        let status =
            cnmysql_core::replica_cluster::with_declared(self.cluster.get().await?, &self.cfg.spec);
        self.owners.cluster_seen.send_replace(Instant::now());
        self.set_recovery(&status);
        let desired = role::desired(&self.cfg.instance, &status);
        self.owners.role.send_replace(Some(desired.clone()));
        let Some((mut conn, view)) = self.running_server().await? else {
            return Ok(());
        };
        // Only a read-only server is ever stopped to be re-cloned: a
        // writable one is made read-only (below) first. The pass's
        // connection is let go first: a connected client holds a MySQL
        // shutdown up (`stop_server.rs`).
        if view.read_only
            && let Some(primary) = self.reinit_due(&status, &view).await?
        {
            drop(conn);
            self.reinit(&primary, &view).await?;
            return Ok(());
        }
        let target = match &desired {
            Desired::HandOver { to } if !view.read_only => Some(switchover::ready_to_hand_over(
                to,
                self.peers.status(to).await.as_ref(),
            )),
            _ => None,
        };
        let (desired, waiting) = role_gate::hand_over_when_caught_up(desired, target);
        // A primary handing over keeps its semi-sync source side until it
        // follows the new primary: switching it off stops MySQL's
        // acknowledgement receiver, which takes up to a second, and its
        // target waits on it meanwhile (a second more without writes).
        let handing_over = matches!(desired, Desired::HandOver { .. });
        if desired.releases_lease()
            && view.read_only
            && !self
                .leave_primary_side(&mut conn, &view, !handing_over)
                .await?
        {
            return Ok(());
        }
        // A failover from this instance may pass its lease on before it
        // expires: from now on its own clock proves nothing.
        if status.failover_from.as_deref() == Some(self.cfg.instance.as_str()) {
            self.owners.lease.taken();
        }
        let held = self.copy_refusal(&mut conn, &desired, &view).await;
        let refused = self.writes_refused(&desired, &status, held);
        let facts = role_gate::Facts {
            me: &self.cfg.instance,
            read_only: view.read_only,
            lease_lapsed: self.link.lease.lapsed(),
            failover_from: status.failover_from.as_deref(),
            writes_refused: refused.as_deref(),
        };
        let mut first = role_gate::first(&desired, &facts);
        if first == First::RenewLease && !self.keep_lease().await {
            first = role_gate::lease_not_renewed(view.read_only);
        }
        match first {
            First::ReadOnly { cause, why } => {
                if cause == self_fence::Cause::Deposed {
                    tracing::error!(reason = %why, "making this server read-only");
                }
                drop(conn);
                let (_, read_only) = self.fencer.make_read_only_keeping(cause, &why).await?;
                if let Some(mut ro) = read_only
                    && matches!(desired, Desired::HandOver { .. })
                {
                    // Its target waits for the close: in this pass, on the
                    // connection that made it read-only. The pass's view
                    // still tells the acknowledgements' state: read-only
                    // changes neither semi-sync side.
                    self.leave_primary_side(&mut ro, &view, false).await?;
                }
                return Ok(());
            }
            First::Promote => return self.promote(&mut conn, &status, &view).await,
            First::Hold(why) => {
                self.set_phase(InstancePhase::Running, why);
                return Ok(());
            }
            First::HoldPrimary(why) => {
                // Read-only already; the lease is still this primary's.
                let why = if self.keep_lease().await {
                    why
                } else {
                    "self-fenced: cannot renew the primary lease".into()
                };
                self.set_phase(InstancePhase::Running, why);
                return Ok(());
            }
            First::RenewLease | First::Converge => {}
        }
        self.converge(&desired, &mut conn, &status, &view).await?;
        self.set_phase(InstancePhase::Running, waiting);
        Ok(())
    }

    /// Why this primary must refuse writes now, if it must: the cluster's
    /// word (`status.writesRefused`, any instance short of room), or its
    /// own volumes' without waiting for it (`cnmysql_core::disk_guard`).
    /// Published for the status's readiness.
    fn writes_refused(
        &self,
        desired: &Desired,
        status: &ClusterStatus,
        held_for_copy: Option<String>,
    ) -> Option<String> {
        // The hysteresis (writes back only with twice the reserve) is the
        // cluster's, in `status.writesRefused`, which comes first below.
        // Without it this primary judges its own volumes against the
        // reserve alone: a refusal of its own that the status never
        // recorded (a full volume for a moment, space freed as the writers
        // were cut off) must not hold writes back with nothing saying so:
        // `short` is asked as if nothing were refused yet.
        let refused = (*desired == Desired::Primary)
            .then(|| {
                status.writes_refused.clone().or_else(|| {
                    let mine = super::volumes::usage(&self.cfg);
                    cnmysql_core::disk_guard::short(&self.cfg.instance, &mine, false)
                })
            })
            .flatten()
            .or(held_for_copy);
        if refused != self.link.writes_refused() {
            match &refused {
                Some(why) => tracing::warn!(reason = %why, "refusing writes"),
                None if self.link.writes_refused().is_some() => {
                    tracing::info!("taking writes again")
                }
                None => {}
            }
            self.owners.writes_refused.send_replace(refused.clone());
        }
        refused
    }

    /// A connection to the server and what it reports, once mysqld runs.
    async fn running_server(&self) -> anyhow::Result<Option<(mysql_async::Conn, sql::ServerView)>> {
        let Some(pool) = self.pool() else {
            return Ok(None);
        };
        if !matches!(self.supervisor.state(), ServerState::Running { .. }) {
            self.set_phase(InstancePhase::Restarting, "waiting for mysqld");
            return Ok(None);
        }
        let mut conn = pool.get_conn().await?;
        let view = sql::observe(&mut conn, self.cfg.flavor()).await?;
        Ok(Some((conn, view)))
    }

    /// The server to its role: a replica cluster's checks first, then the
    /// core's role actions in order, then the claim of `currentPrimary`.
    async fn converge(
        &self,
        desired: &Desired,
        conn: &mut mysql_async::Conn,
        status: &ClusterStatus,
        view: &sql::ServerView,
    ) -> anyhow::Result<()> {
        if !self
            .replica_cluster_may_go_on(desired, conn, status, view)
            .await?
        {
            return Ok(());
        }
        self.align_replica_side(conn, desired, view).await?;
        let local = self.local_state(desired, view).await;
        let actions = role::reconcile(desired, &local);
        // Replication stopped (by an error, or by a person) starts again
        // only if the source still holds everything this server has: a
        // transaction written here behind the operator's back makes it
        // diverged, not a replica that fails to start over and over.
        if let Desired::Replica { source } = desired
            && actions.contains(&role::Action::StartReplication)
            && self.peers.get(source).is_some()
            && !self.source_holds_ours(source, view).await?
        {
            return Ok(());
        }
        for action in actions {
            tracing::info!(action = ?action, "role change");
            if !self.take_role_step(conn, action, view).await? {
                return Ok(());
            }
        }
        if *desired == Desired::Primary
            && status.current_primary.as_deref() != Some(self.cfg.instance.as_str())
        {
            self.cluster.claim_primary(&self.cfg.instance).await?;
        }
        Ok(())
    }

    /// A server that is no longer the primary, once read-only: its lease
    /// released, and (`semi_sync_off`) its semi-sync source side on its way
    /// off (`leave_source_side.rs`). Only read-only: left while writable,
    /// the commits waiting for an acknowledgement would complete and their
    /// clients be told they committed with no replica holding them; a
    /// lease released while writable lets another primary start. False
    /// when the pass ends here (the server was killed).
    async fn leave_primary_side(
        &self,
        conn: &mut mysql_async::Conn,
        view: &sql::ServerView,
        semi_sync_off: bool,
    ) -> anyhow::Result<bool> {
        let f = self.cfg.flavor();
        if !semi_sync_off {
            // Handing over: once read-only (closed while writable, the
            // commits waiting would hold read-only up for ever), and before
            // the lease goes back (a call to the cluster's state): the
            // target waits for the close, and takes the lease only after.
            super::hand_over_acks::close(conn, f, view).await;
            self.release_lease_if_held().await;
            return Ok(true);
        }
        self.release_lease_if_held().await;
        if view.semi_sync.source_enabled && view.replication.is_none() {
            // Read-only does not stop commits already waiting for an
            // acknowledgement (MySQL lets read-only be set meanwhile):
            // switching semi-sync off would complete them and tell
            // their clients they committed, with no replica holding
            // them. They must never complete: the server is killed.
            if super::fence::commits_wait(conn, f).await {
                self.fencer.kill_deposed_server(
                    "commits wait for acknowledgements on a server that is no longer the primary",
                );
                return Ok(false);
            }
        }
        // A former primary must not wait for acknowledgements of the
        // transactions it now only applies (its applier would stall): made
        // neutral now, switched off once that holds nobody up.
        self.leaving.step(conn, f, &view.semi_sync).await?;
        Ok(true)
    }

    /// The semi-sync replica side as the role wants it
    /// (`semisync::replica_side`), set before replication starts; a
    /// running IO thread connects again so that it registers as it now
    /// should (a designated primary stops acknowledging another cluster's
    /// primary at once).
    async fn align_replica_side(
        &self,
        conn: &mut mysql_async::Conn,
        desired: &Desired,
        view: &sql::ServerView,
    ) -> anyhow::Result<()> {
        let f = self.cfg.flavor();
        let want = semisync::replica_side(&self.cfg.spec, desired);
        if view.semi_sync.replica_enabled == want {
            return Ok(());
        }
        sql::exec_all(conn, &[sql::semi_sync_replica(f, want)]).await?;
        let receiving = view
            .replication
            .as_ref()
            .is_some_and(|r| r.io_state == "Yes" || r.io_state == "Connecting");
        if receiving {
            sql::exec_all(conn, &flavor::reconnect_io_thread(f)).await?;
        }
        tracing::info!(on = want, "semi-sync replica side set for this role");
        Ok(())
    }

    /// The server's side of its role, as `role::reconcile` reads it.
    async fn local_state(&self, desired: &Desired, view: &sql::ServerView) -> Local {
        let mut local = Local {
            read_only: view.read_only,
            source: view
                .replication
                .as_ref()
                .filter(|r| !r.source_host.is_empty())
                .and_then(|r| self.peers.source_name(&r.source_host, r.source_port)),
            io_running: view
                .replication
                .as_ref()
                .is_some_and(|r| r.io_state == "Yes" || r.io_state == "Connecting"),
            sql_running: view.replication.as_ref().is_some_and(|r| r.sql_running),
            io_retrying_a_ready_source: false,
        };
        // A designated primary following a binlog archive: its loop does
        // (`archive_replica`), not the replication threads.
        if let Desired::DesignatedPrimary { source } = desired
            && view.replication.is_none()
            && self.archive_follower.reporting()
        {
            local.source = Some(source.clone());
            local.io_running = true;
            local.sql_running = true;
        }
        // Only asked while the IO thread waits to retry a connection its
        // source refused (not one it rejected: that would only fail again).
        // Its server answering is enough: a primary whose container
        // restarted in place takes its replicas back while it is still
        // read-only, so that under `required` its first commits find an
        // acknowledger at once instead of after the server's next retry,
        // up to a second later (real node: 0.4 s of a PID 1 kill's 2.2 s).
        let retrying = matches!(desired, Desired::Replica { .. })
            && view.replication.as_ref().is_some_and(|r| {
                r.io_state == "Connecting" && r.last_io_error.contains("Can't connect")
            });
        self.reconnects.set_retrying(retrying);
        if let Desired::Replica { source } = desired
            && retrying
            && local.source.as_deref() == Some(source.as_str())
        {
            let answers = self
                .peers
                .status(source)
                .await
                .is_some_and(|p| p.mysqld_running);
            local.io_retrying_a_ready_source = answers && self.reconnects.may_reconnect();
        }
        local
    }

    /// One step towards the role; false when the pass ends here.
    async fn take_role_step(
        &self,
        conn: &mut mysql_async::Conn,
        action: Action,
        view: &sql::ServerView,
    ) -> anyhow::Result<bool> {
        let f = self.cfg.flavor();
        match action {
            Action::SetReadOnly(true) => {
                // Writable while another instance is the primary: deposed.
                if self
                    .fencer
                    .make_read_only(self_fence::Cause::Deposed, "replica")
                    .await?
                    == Fenced::Killed
                {
                    return Ok(false);
                }
            }
            Action::SetReadOnly(false) => self.open_writes(conn).await?,
            Action::ResetReplication => {
                sql::stop_replication(conn, f, receiving(view)).await?;
                sql::exec_all(conn, &[flavor::reset_replica(f)]).await?;
            }
            Action::StartReplication => {
                // MariaDB empties the relay log when both threads start.
                if f == Flavor::Mariadb && relay_refill::both_threads_stopped(view) {
                    self.refill.emptied(relay_refill::emptying(f, view));
                }
                sql::exec_all(conn, &[flavor::start_replica(f)]).await?;
            }
            Action::Reconnect => {
                sql::exec_all(conn, &flavor::reconnect_io_thread(f)).await?;
            }
            Action::StopReceiving => {
                sql::exec_all(conn, &[flavor::stop_receiving(f)]).await?;
                self.set_phase(
                    InstancePhase::Running,
                    "a failover is under way: receiving nothing more from the failed primary",
                );
            }
            Action::Follow(source) if self.peers.get(&source).is_none() => {
                return self.follow_external(conn, &source, view).await;
            }
            Action::Follow(source) => return self.follow(conn, &source, view).await,
        }
        Ok(true)
    }

    /// Whether `source`'s history holds ours. False when it cannot be
    /// judged now (said in the phase), and when it lacks ours: then this
    /// instance is diverged (recorded) and must not replicate from it.
    async fn source_holds_ours(
        &self,
        source: &str,
        view: &sql::ServerView,
    ) -> anyhow::Result<bool> {
        let f = self.cfg.flavor();
        // Judge only a history it has read from its server: a manager
        // that answers before reaching its mysqld (just restarted) reports
        // none, and every replica would take itself for diverged.
        let Some(src) = self.peers.status(source).await.filter(|s| s.mysqld_running) else {
            self.set_phase(
                InstancePhase::Running,
                format!("waiting for {source} to answer"),
            );
            return Ok(false);
        };
        let mine = parse_history(f, &view.gtid_executed)?;
        let theirs = parse_history(f, &src.gtid_executed)?;
        if let Err(why) = role::may_follow(&mine, &theirs) {
            tracing::error!(
                source,
                why,
                "diverged from the primary; staying read-only and out of service"
            );
            self.cluster.mark_diverged(&self.cfg.instance, &why).await?;
            return Ok(false);
        }
        Ok(true)
    }

    /// Follow `source`, unless its history lacks ours (diverged); false
    /// when it cannot be judged or followed now.
    async fn follow(
        &self,
        conn: &mut mysql_async::Conn,
        source: &str,
        view: &sql::ServerView,
    ) -> anyhow::Result<bool> {
        let f = self.cfg.flavor();
        if !self.source_holds_ours(source, view).await? {
            return Ok(false);
        }
        let peer = self
            .peers
            .get(source)
            .ok_or_else(|| anyhow::anyhow!("no address known for {source}"))?;
        let spec = SourceSpec {
            // A peer of this cluster: applied as the server.
            privilege_checks_user: None,
            host: peer.host.clone(),
            port: peer.mysql_port,
            user: REPLICATION_USER.into(),
            password: read_secret(&self.cfg.secrets.replication_password)?,
            ssl_ca: self.cfg.server_tls_paths().peers_ca.display().to_string(),
            ssl_cert: self.cfg.tls.cert.display().to_string(),
            ssl_key: self.cfg.tls.key.display().to_string(),
            use_current_pos: true,
            // The user's server certificate names the Services, not each
            // instance: its CA is checked.
            verify_host: peer.tls_name.is_none() && !self.cfg.server_tls_paths().users,
        };
        sql::stop_replication(conn, f, receiving(view)).await?;
        // Changing the source empties the relay log: judged with both
        // threads stopped.
        let stopped = match view.replication {
            Some(_) => relay_refill::emptying(f, &sql::observe(conn, f).await?),
            None => relay_refill::Emptying::NothingConfigured,
        };
        self.refill.emptied(stopped);
        sql::exec_all(
            conn,
            &[flavor::change_source(f, &spec), flavor::start_replica(f)],
        )
        .await?;
        // A replica's logs are not synced at every commit
        // (`replica_durability`), once its data directory records the
        // boot it runs under; open_writes restores them.
        let parameters = &self.cfg.spec.mysql.parameters;
        if replica_durability::relaxes_innodb(parameters) {
            let data = self.cfg.data_dir.clone();
            tokio::task::spawn_blocking(move || unsynced_mark::mark(&data)).await??;
        }
        sql::exec_all(conn, &replica_durability::relax(parameters)).await?;
        acked_alone::clear(&self.cfg);
        Ok(true)
    }

    pub(super) async fn promote(
        &self,
        conn: &mut mysql_async::Conn,
        status: &cnmysql_api::ClusterStatus,
        view: &sql::ServerView,
    ) -> anyhow::Result<()> {
        let f = self.cfg.flavor();
        if !self.drained(conn, status, view).await? {
            return Ok(());
        }
        if view.replication.is_some() {
            sql::stop_replication(conn, f, receiving(view)).await?;
            sql::exec_all(conn, &[flavor::reset_replica(f)]).await?;
        }
        if self.cfg.spec.enable_primary_lease {
            let attempt = Instant::now();
            self.cluster.acquire_lease(&self.cfg.instance).await?;
            self.owners.lease.renewed(attempt);
        }
        if !self.cluster.claim_primary(&self.cfg.instance).await? {
            tracing::warn!("the target primary changed while promoting; staying read-only");
            self.release_lease_if_held().await;
            return Ok(());
        }
        // The accepted primary again: a crash now keeps what it wrote.
        self.fencer.reinstated();
        if let Some(source) = role::replica_source(status) {
            // A replica cluster's: it follows the source, never writable,
            // and syncs its logs as a primary does (its replicas follow
            // it; data it ran unsynced is trusted by no one).
            self.durable_binlog(conn).await?;
            tracing::info!(source, "promoted: the replica cluster's designated primary");
            return Ok(());
        }
        self.open_writes(conn).await?;
        tracing::info!("promoted: writable primary");
        Ok(())
    }

    /// Open writes on the accepted primary: semi-sync as the spec asks
    /// first (a restarted primary's server starts with it off), and when
    /// that means commits acknowledged without a replica, the record of it
    /// before the first such commit.
    async fn open_writes(&self, conn: &mut mysql_async::Conn) -> anyhow::Result<()> {
        let f = self.cfg.flavor();
        self.durable_binlog(conn).await?;
        let settings = semisync::at_promotion(&self.cfg.spec);
        if !settings.enabled {
            acked_alone::record(&self.cfg, "writes opened with semi-sync off")?;
        }
        sql::exec_all(conn, &sql::semi_sync_source(f, &settings)).await?;
        sql::exec_all(conn, &flavor::read_only(f, false)).await
    }

    /// Both logs synced at every commit again, and what they hold from its
    /// time as a replica on disk, before a write is taken; then the record
    /// of running unsynced removed (`replica_durability`).
    async fn durable_binlog(&self, conn: &mut mysql_async::Conn) -> anyhow::Result<()> {
        let restore = replica_durability::restore(&self.cfg.spec.mysql.parameters);
        if restore.is_empty() {
            return Ok(());
        }
        sql::exec_all(conn, &restore).await?;
        let cfg = self.cfg.clone();
        tokio::task::spawn_blocking(move || {
            crate::binlog_files::sync_all(&cfg)?;
            unsynced_mark::clear(&cfg.data_dir)
        })
        .await??;
        Ok(())
    }
}

/// Whether the receiver is running (connected, or connecting, to a source).
pub(super) fn receiving(view: &sql::ServerView) -> bool {
    view.replication
        .as_ref()
        .is_some_and(|r| r.io_state == "Yes")
}
