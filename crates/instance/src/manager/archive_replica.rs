//! Following a binlog archive (`spec.replica.source.objectStore`): while
//! this instance is the designated primary of such a replica cluster, or
//! is being promoted from it, a loop reads the source's archive every
//! couple of seconds into a local mirror (only new pieces are fetched),
//! plans what this server lacks (`recovery_plan`, from its own history),
//! and hands each batch to the server's applier as the relay logs of its
//! `archive` channel (`cnmysql_core::archive_replica`). The archive is
//! only ever applied to a read-only server; a promotion applies the
//! token (or, without one, everything archived), then removes the channel
//! before writes open. Any other role removes a channel left behind.

use super::link::Link;
use super::*;
use cnmysql_api::backup::ObjectStore;
use cnmysql_backup::archive_mirror::ArchiveMirror;
use cnmysql_backup::{destination, recovery_plan, relay_log};
use cnmysql_core::archive_replica::{self as ar, Following};
use cnmysql_core::replica_cluster::Promotion;
use cnmysql_core::status::ArchiveReplicaStatus;

/// How often the archive is read.
const READ_EVERY: Duration = Duration::from_secs(2);

/// What the loop reports, and what a promotion reads of it.
#[derive(Default)]
struct Shared {
    status: Option<ArchiveReplicaStatus>,
    following: Option<Following>,
    /// When a promotion was first seen: only a read after it counts as
    /// having read the archive to its end.
    promotion_seen: Option<Instant>,
}

/// The archive follower: it owns its loop's report and the gate a
/// promotion closes. Convergence asks it whether a promotion may open
/// writes ([`ArchiveFollower::promotion_done`]); `/status` reads its
/// report.
pub(super) struct ArchiveFollower<C: ClusterState> {
    link: Link,
    cluster: Arc<C>,
    shared: Mutex<Shared>,
    /// Set once a promotion from the archive has finished: no batch starts
    /// after it (held while a batch starts).
    gate: tokio::sync::Mutex<bool>,
}

/// Where a promotion from the archive stands.
pub(super) enum Promoted {
    /// The archive is applied and its channel gone: writes may open.
    Done,
    /// Not yet, and why (for the instance's phase) when there is a reason
    /// to say.
    Waiting(Option<String>),
}

/// The loop's own state.
#[derive(Default)]
struct Follower {
    mirror: Option<(String, ArchiveMirror)>,
    /// The batch being applied: the position it reaches, and the commit
    /// time of its last transaction.
    batch: Option<(String, Option<i64>)>,
    last_read: Option<Instant>,
}

/// What this instance should do with the archive now.
enum Want {
    Nothing,
    Follow {
        store: Box<ObjectStore>,
        promoting: bool,
    },
    /// Not (or no longer) following: remove a channel left behind.
    Remove,
}

impl<C: ClusterState> ArchiveFollower<C> {
    pub fn new(link: Link, cluster: Arc<C>) -> Self {
        ArchiveFollower {
            link,
            cluster,
            shared: Default::default(),
            gate: Default::default(),
        }
    }

    /// What `/status` reports of following the archive.
    pub fn status(&self) -> Option<ArchiveReplicaStatus> {
        self.shared().status.clone()
    }

    /// The loop reports following the archive (with or without an error).
    pub fn reporting(&self) -> bool {
        self.shared().status.is_some()
    }

    /// The loop, for the manager's life.
    pub async fn run(self: Arc<Self>) {
        let mut me = Follower::default();
        loop {
            let result = match self.archive_want().await {
                Want::Nothing => Ok(()),
                Want::Remove => self.remove_channel().await,
                Want::Follow { store, promoting } => {
                    self.archive_step(&mut me, &store, promoting).await
                }
            };
            if let Err(e) = result {
                me.batch = None;
                self.archive_error(format!("{e:#}"));
            }
            if self.link.sleep_or_stop(Duration::from_millis(500)).await {
                return;
            }
        }
    }

    /// Whether to follow the archive: the designated primary of a replica
    /// cluster that follows one, or its primary being promoted while the
    /// channel is still there; removal for any other role that has one.
    async fn archive_want(&self) -> Want {
        if !self.link.server_running() {
            return Want::Nothing;
        }
        let Ok(status) = self.cluster.get().await else {
            return Want::Nothing;
        };
        let store = status.replica.as_ref().and_then(|r| r.object_store.clone());
        let desired = self.link.role();
        match (desired, store) {
            (Some(Desired::DesignatedPrimary { .. }), Some(store)) => {
                *self.gate.lock().await = false;
                Want::Follow {
                    store,
                    promoting: false,
                }
            }
            (Some(Desired::Primary), Some(store))
                if !*self.gate.lock().await && self.was_following().await =>
            {
                Want::Follow {
                    store,
                    promoting: true,
                }
            }
            (None, _) => Want::Nothing,
            _ if status.replica.is_some() && self.has_channel().await == Some(true) => Want::Remove,
            _ => {
                self.shared().status = None;
                Want::Nothing
            }
        }
    }

    fn shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap()
    }

    fn archive_error(&self, e: String) {
        let mut sh = self.shared();
        let st = sh.status.get_or_insert_with(Default::default);
        if st.error.as_deref() != Some(&e) {
            tracing::warn!(error = e, "following the binlog archive");
        }
        st.error = Some(e);
        st.reading = false;
        st.applying = false;
    }

    /// This instance followed the archive until now: its loop reported,
    /// or its channel is there (after a restart). A promotion applies the
    /// rest of the archive first.
    pub async fn was_following(&self) -> bool {
        self.shared().status.is_some() || self.has_channel().await == Some(true)
    }

    /// The channel exists on the server (None: the server did not say).
    async fn has_channel(&self) -> Option<bool> {
        let mut c = self.link.pool()?.get_conn().await.ok()?;
        match c.query_iter(ar::status(self.link.cfg.flavor()).text).await {
            Ok(mut r) => Some(!r.collect::<mysql_async::Row>().await.ok()?.is_empty()),
            Err(mysql_async::Error::Server(e)) if ar::NO_CHANNEL_ERRORS.contains(&e.code) => {
                Some(false)
            }
            Err(_) => None,
        }
    }

    /// Remove the channel and take the instance's own server id back.
    pub async fn remove_channel(&self) -> anyhow::Result<()> {
        let pool = self
            .link
            .pool()
            .ok_or_else(|| anyhow::anyhow!("no connection yet"))?;
        let mut c = pool.get_conn().await?;
        if self.has_channel().await == Some(true) {
            sql::exec_all(&mut c, &ar::remove(self.link.cfg.flavor())).await?;
            tracing::info!("the binlog archive's channel is removed");
        }
        sql::exec_all(&mut c, &[ar::own_server_id(self.link.cfg.server_id())]).await?;
        self.shared().status = None;
        Ok(())
    }

    /// One step: watch the batch under way, or read the archive and start
    /// the next one.
    async fn archive_step(
        &self,
        me: &mut Follower,
        store: &ObjectStore,
        promoting: bool,
    ) -> anyhow::Result<()> {
        let f = self.link.cfg.flavor();
        let pool = self
            .link
            .pool()
            .ok_or_else(|| anyhow::anyhow!("no connection yet"))?;
        let mut c = pool.get_conn().await?;
        let read_only: Option<i64> = c.query_first("SELECT @@read_only").await?;
        anyhow::ensure!(
            read_only == Some(1),
            "the server is writable: the binlog archive is applied to a read-only server only"
        );
        let executed = super::replay::reached(f, &mut c).await?;
        if let Some((position, _)) = me.batch.clone() {
            if !recovery_plan::position_within(f, &position, &executed) {
                return self.batch_running(&mut c).await;
            }
            sql::exec_all(&mut c, &[ar::own_server_id(self.link.cfg.server_id())]).await?;
            tracing::info!(position, "a batch from the binlog archive is applied");
            me.batch = None;
            self.set_following(false, None, promoting, &position);
        }
        if me.last_read.is_some_and(|t| t.elapsed() < READ_EVERY) {
            return Ok(());
        }
        let runs = self.read_archive(me, store).await?;
        let plan = recovery_plan::plan(f, &executed, &runs, &recovery_plan::Target::Latest)
            .map_err(|e| anyhow::anyhow!("the binlog archive cannot be followed: {e}"))?;
        if plan.applied == 0 {
            // Caught up: files the source rotated away from are applied.
            if let Some((_, m)) = &me.mirror {
                m.prune_closed_files(&runs);
            }
            self.set_following(false, None, promoting, &executed);
            return Ok(());
        }
        let mirror = &me.mirror.as_ref().expect("read_archive made it").1;
        sql::exec_all(&mut c, &ar::remove(f)).await.ok();
        let naming = relay_log::Naming {
            base: self.link.cfg.data_dir.join(ar::RELAY_BASE),
            keep_sources: true,
            in_data_dir: true,
        };
        let relay = relay_log::write_as(f, mirror.dir(), &plan.replays, &naming);
        let relay = match relay {
            Ok(r) => r,
            Err(e) => {
                // A copy pruned too eagerly: fetch it all again.
                if let Some((_, m)) = me.mirror.as_mut() {
                    m.clear()?;
                }
                me.mirror = None;
                return Err(e.context("writing the relay logs"));
            }
        };
        let first = relay.files.first().and_then(|r| r.path.file_name());
        let first = first.and_then(|n| n.to_str()).unwrap_or_default();
        // Never after a promotion has finished (it may open writes now).
        let finished = self.gate.lock().await;
        if *finished {
            return Ok(());
        }
        if f == Flavor::Mysql {
            // Another cluster's history: applied as the applier account.
            super::applier::make_applier(&mut c).await?;
        }
        sql::exec_all(&mut c, &ar::apply(f, first)).await?;
        tracing::info!(
            transactions = plan.applied,
            to = plan.position,
            "applying a batch from the binlog archive"
        );
        self.set_following(true, plan.last_commit_us, promoting, &plan.position);
        me.batch = Some((plan.position, plan.last_commit_us));
        drop(finished);
        Ok(())
    }

    /// Read the archive (new pieces only).
    async fn read_archive(
        &self,
        me: &mut Follower,
        store: &ObjectStore,
    ) -> anyhow::Result<Vec<recovery_plan::RunArchive>> {
        let server = store.server_name.clone().unwrap_or_default();
        let dest = destination::open_for_cluster(
            store,
            self.link.cfg.secrets.backup_dir.as_deref(),
            &server,
        )
        .map_err(|e| anyhow::anyhow!(e.replace("spec.backup.", "spec.replica.source.")))?;
        let address = format!("{}/{server}", store.destination_path);
        if me.mirror.as_ref().is_none_or(|(a, _)| *a != address) {
            let dir = self.link.cfg.data_dir.with_extension("archive-replica");
            let mut m = ArchiveMirror::new(&dir);
            m.clear()?;
            me.mirror = Some((address, m));
        }
        let mirror = &mut me.mirror.as_mut().expect("made above").1;
        let runs = mirror.refresh(&dest).await?;
        me.last_read = Some(Instant::now());
        Ok(runs)
    }

    /// The batch's applier: running (fine), or stopped with its error.
    async fn batch_running(&self, c: &mut mysql_async::Conn) -> anyhow::Result<()> {
        let rows: Vec<mysql_async::Row> = c.query(ar::status(self.link.cfg.flavor()).text).await?;
        let row = rows
            .first()
            .ok_or_else(|| anyhow::anyhow!("the archive's channel is gone"))?;
        let running = ["Slave_SQL_Running", "Replica_SQL_Running"]
            .iter()
            .any(|k| sql::col_str(row, k) == "Yes");
        let error = sql::col_str(row, "Last_SQL_Error");
        anyhow::ensure!(
            running,
            "the applier stopped applying the binlog archive: {}",
            if error.is_empty() {
                "no error given"
            } else {
                &error
            }
        );
        Ok(())
    }

    fn set_following(
        &self,
        applying: bool,
        last_commit_us: Option<i64>,
        promoting: bool,
        position: &str,
    ) {
        let mut sh = self.shared();
        let read_to_end =
            promoting && !applying && sh.promotion_seen.is_some_and(|t| t.elapsed() > READ_EVERY);
        sh.following = Some(Following {
            applying,
            read_to_end,
        });
        let now_us = jiff::Timestamp::now().as_microsecond();
        sh.status = Some(ArchiveReplicaStatus {
            reading: true,
            applying,
            position: position.to_string(),
            lag_seconds: Some(
                last_commit_us
                    .map(|t| ((now_us - t).max(0) / 1_000_000) as u64)
                    .unwrap_or(0),
            ),
            error: None,
        });
    }

    /// A promoted primary still holding the archive's channel: true once
    /// it may remove it and open writes (`archive_replica::promotion`).
    pub async fn promotion_done(
        &self,
        status: &cnmysql_api::ClusterStatus,
        view: &sql::ServerView,
    ) -> anyhow::Result<Promoted> {
        let token = status
            .replica
            .as_ref()
            .and_then(|r| r.promotion_token.as_deref());
        // Decided while no batch starts (`archive_step` holds it too).
        let mut finished = self.gate.lock().await;
        let at = {
            let mut sh = self.shared();
            sh.promotion_seen.get_or_insert_with(Instant::now);
            sh.following.unwrap_or(Following {
                applying: true,
                read_to_end: false,
            })
        };
        match ar::promotion(self.link.cfg.flavor(), &view.gtid_executed, token, at) {
            Promotion::Ready => {
                // No batch starts from here on (`archive_step`).
                *finished = true;
                self.remove_channel().await?;
                tracing::info!(
                    position = view.gtid_executed,
                    "promotion: the binlog archive is applied and no longer followed"
                );
                Ok(Promoted::Done)
            }
            Promotion::AwaitToken(why) | Promotion::Applying(why) => {
                Ok(Promoted::Waiting(Some(why.to_string())))
            }
            Promotion::StopReceiving => Ok(Promoted::Waiting(None)),
        }
    }
}
