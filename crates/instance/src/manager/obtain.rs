//! Obtaining data: recover an existing data directory, initialise a new
//! primary, or clone a replica from a peer; starting and reaching mysqld.

use super::*;

impl<C: ClusterState> Manager<C> {
    /// How the next start of mysqld recovers from a crash, from the
    /// latest cluster status (see [`role::recovery`]).
    pub(super) fn set_recovery(&self, status: &cnmysql_api::ClusterStatus) {
        self.fencer.seen_status(status);
        let recovery = role::recovery_when(&self.cfg.instance, status, self.fencer.deposed());
        let options = cnmysql_core::flavor::recovery_options(
            self.cfg.flavor(),
            recovery,
            self.cfg.spec.mysql.semi_sync.enabled,
        );
        self.supervisor.set_start_options(options);
    }

    pub(super) fn start_server(&self) {
        self.supervisor.start();
    }

    pub(super) async fn connect_admin(&self) -> anyhow::Result<()> {
        let admin = read_secret(&self.cfg.secrets.admin_password)?;
        let opts = sql::socket_opts(
            &self.cfg.socket(),
            cnmysql_api::names::ADMIN_USER,
            Some(&admin),
        );
        // A server that neither accepts connections nor logs anything for
        // STARTUP_SILENCE is hung (seen: MariaDB stuck in init_slave under
        // load): kill it and let supervision start it again.
        let began = Instant::now();
        let conn = loop {
            if let Ok(c) = sql::wait_connectable(&opts, Duration::from_secs(1)).await {
                break c;
            }
            let quiet = self
                .mysqld_output
                .lock()
                .unwrap()
                .as_ref()
                .map(|l| l.lock().unwrap().elapsed())
                .unwrap_or_default();
            if quiet >= STARTUP_SILENCE
                && matches!(self.supervisor.state(), ServerState::Running { .. })
            {
                tracing::warn!(
                    quiet_secs = quiet.as_secs(),
                    "mysqld is silent and not accepting connections"
                );
                self.supervisor.kill_hung();
                if let Some(l) = self.mysqld_output.lock().unwrap().as_ref() {
                    *l.lock().unwrap() = Instant::now();
                }
            }
            if *self.shutdown.borrow() {
                anyhow::bail!("shutting down");
            }
            if began.elapsed() > Duration::from_secs(3600) {
                anyhow::bail!("mysqld did not accept connections within an hour");
            }
        };
        let mut conn = conn;
        // Record that this version has run on the data.
        if let Ok(Some(v)) = conn.query_first::<String, _>("SELECT VERSION()").await {
            if let Err(e) = crate::server_version::record(&self.cfg.data_dir, &v) {
                tracing::warn!(error = %e, "cannot record the server version in the data directory");
            }
            self.owners.server_version.send_replace(
                cnmysql_core::upgrade::version::Version::parse(&v).map(|v| v.to_string()),
            );
        }
        conn.disconnect().await.ok();
        self.owners
            .server
            .send_replace(Some(sql::admin_pool(&self.cfg.socket(), &admin)));
        Ok(())
    }

    /// Get an initialised data directory and a running server. False when
    /// shutdown came first.
    pub(super) async fn obtain_data(&self) -> anyhow::Result<bool> {
        let programs = self.cfg.programs.clone();
        let program_version = tokio::task::spawn_blocking(move || programs.server_version())
            .await
            .ok()
            .flatten();
        loop {
            let status = match self.cluster.get().await {
                Ok(s) => s,
                Err(e) => {
                    self.set_phase(
                        InstancePhase::Initializing,
                        format!("cannot read the cluster state: {e}"),
                    );
                    if self.sleep_or_stop(Duration::from_millis(500)).await {
                        return Ok(false);
                    }
                    continue;
                }
            };
            let has_data = bootstrap::is_initialized(&self.cfg);
            self.set_recovery(&status);
            let next = if has_data && unsynced_mark::unsynced(&self.cfg) {
                let running = self.primary_running(&status).await;
                replica_durability::unsynced_next(&self.cfg.instance, &status, running)
            } else {
                role::bootstrap(&self.cfg.instance, &status, has_data)
            };
            match next {
                Bootstrap::Reclone(primary) => self.remove_unsynced_data(&primary).await?,
                Bootstrap::UseExisting => {
                    // The last line of defence against a downgrade: an
                    // older server never starts on newer data.
                    if let Err(refused) = crate::server_version::check_start(
                        &self.cfg.data_dir,
                        program_version.as_deref(),
                    ) {
                        tracing::error!(reason = %refused, "server not started");
                        self.set_phase(InstancePhase::Failed, refused);
                        if self.sleep_or_stop(Duration::from_secs(5)).await {
                            return Ok(false);
                        }
                        continue;
                    }
                    self.set_phase(InstancePhase::Starting, "starting on existing data");
                    self.start_server();
                    self.connect_admin().await?;
                    return Ok(true);
                }
                Bootstrap::InitPrimary => {
                    if let Some(imp) = self.cfg.spec.import().cloned() {
                        return self.bootstrap_by_import(&imp).await;
                    }
                    if let Some(rec) = self.cfg.spec.recovery().cloned() {
                        if let Err(e) = self.recover_primary(&rec).await {
                            tracing::error!(error = %format!("{e:#}"), "recovery failed; retrying");
                            self.set_phase(InstancePhase::Failed, format!("{e:#}"));
                            if self.sleep_or_stop(Duration::from_secs(10)).await {
                                return Ok(false);
                            }
                            continue;
                        }
                        self.set_phase(InstancePhase::Starting, "starting the recovered server");
                        self.start_server();
                        self.connect_admin().await?;
                        return Ok(true);
                    }
                    self.set_phase(InstancePhase::Initializing, "initialising a new server");
                    let began = Instant::now();
                    let cfg = self.cfg.clone();
                    tokio::task::spawn_blocking(move || bootstrap::prepare_empty_datadir(&cfg))
                        .await??;
                    self.start_server();
                    bootstrap::init_primary_accounts(&self.cfg).await?;
                    bootstrap::mark_initialized(&self.cfg, "initialised as the first primary")?;
                    self.connect_admin().await?;
                    tracing::info!(
                        millis = began.elapsed().as_millis() as u64,
                        "new server initialised"
                    );
                    return Ok(true);
                }
                Bootstrap::CloneFrom(source) => {
                    match self.clone_replica(&source).await {
                        Ok(()) => return Ok(true),
                        Err(e)
                            if e.downcast_ref::<crate::clone_plugin::SourceBusy>()
                                .is_some() =>
                        {
                            tracing::info!(source, "{e}");
                            self.set_phase(InstancePhase::Cloning, e.to_string());
                            if self.sleep_or_stop(Duration::from_millis(500)).await {
                                return Ok(false);
                            }
                        }
                        Err(e) => {
                            tracing::error!(source, error = %e, "clone failed; retrying");
                            self.set_phase(
                                InstancePhase::Cloning,
                                format!("clone from {source} failed: {e}"),
                            );
                            *self.progress.lock().unwrap() = None;
                            if self.supervisor.is_active() {
                                self.stop_server().await;
                                // A fresh supervisor for the next attempt.
                                anyhow::bail!("clone failed after the server started: {e}");
                            }
                            if self.sleep_or_stop(Duration::from_secs(2)).await {
                                return Ok(false);
                            }
                        }
                    }
                }
                Bootstrap::Wait(reason) => {
                    self.set_phase(InstancePhase::Initializing, reason);
                    if self.sleep_or_stop(Duration::from_millis(300)).await {
                        return Ok(false);
                    }
                }
            }
        }
    }

    /// The first primary from an import, retried until it succeeds (each
    /// attempt starts from nothing). False when shutdown came first.
    async fn bootstrap_by_import(
        &self,
        imp: &cnmysql_api::import::ImportSpec,
    ) -> anyhow::Result<bool> {
        loop {
            match self.import_primary(imp).await {
                Ok(()) => break,
                Err(e) => {
                    tracing::error!(error = %format!("{e:#}"), "import failed; retrying");
                    self.set_phase(InstancePhase::Failed, format!("{e:#}"));
                    *self.progress.lock().unwrap() = None;
                    if self.sleep_or_stop(Duration::from_secs(10)).await {
                        return Ok(false);
                    }
                }
            }
        }
        self.set_phase(InstancePhase::Starting, "starting the imported server");
        self.start_server();
        self.connect_admin().await?;
        Ok(true)
    }

    pub(super) async fn clone_replica(&self, source: &str) -> anyhow::Result<()> {
        let peer = self
            .peers
            .get(source)
            .ok_or_else(|| anyhow::anyhow!("no address known for {source}"))?;
        self.set_phase(InstancePhase::Cloning, format!("cloning from {source}"));
        let copied = clone::clone_from(
            &self.cfg,
            source,
            &peer,
            &self.certs.peers(),
            &self.progress,
        )
        .await?;
        let mut gtid = copied.position;
        self.set_phase(
            InstancePhase::Starting,
            format!("starting the clone of {source}"),
        );
        self.start_server();
        self.connect_admin().await?;
        let pool = self.pool().expect("connected");
        let mut conn = pool.get_conn().await?;
        if self.cfg.flavor() == Flavor::Mysql {
            // The clone plugin's copy knows its own history.
            gtid = conn
                .query_first::<String, _>("SELECT @@gtid_executed")
                .await?
                .unwrap_or_default();
        }
        // A MariaDB copy's own binlog starts empty: give it the history it
        // holds (older servers' entries included), so comparisons of GTID
        // state see what it contains.
        let adopt = flavor::adopt_history(self.cfg.flavor(), &copied.binlog_state, &gtid);
        sql::exec_all(&mut conn, &adopt).await?;
        drop(conn);
        bootstrap::mark_initialized(&self.cfg, &format!("cloned from {source} at {gtid}"))?;
        self.finish_reinit().await
    }
}
