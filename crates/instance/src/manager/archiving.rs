//! Continuous binlog archiving on the primary (`spec.backup`): while this
//! instance is the writable primary holding its lease, an archiver
//! (`cnmysql_backup::archiver`) stores its binary logs as they are written.
//! It stops the moment that stops being true — demoted, fenced, deposed,
//! shutting down — and the next primary's archiver continues the archive.

use super::*;
use cnmysql_api::backup::ArchiveStatus;
use cnmysql_backup::archiver::{Archiver, Begin, Source};

use super::link::Link;

/// How often the archiver reads the binary log.
pub const ARCHIVE_INTERVAL: Duration = Duration::from_millis(1000);

/// The server, as the archiver sees it.
struct Server {
    pool: Pool,
    flavor: Flavor,
}

impl Source for Server {
    async fn begin(&self) -> anyhow::Result<Begin> {
        let mut c = self.pool.get_conn().await?;
        c.query_drop("FLUSH BINARY LOGS").await?;
        let file: Option<String> = match self.flavor {
            Flavor::Mariadb => c
                .query_first::<mysql_async::Row, _>("SHOW MASTER STATUS")
                .await?
                .and_then(|r| r.get(0)),
            Flavor::Mysql => c
                .query_first::<mysql_async::Row, _>("SHOW BINARY LOG STATUS")
                .await?
                .and_then(|r| r.get(0)),
        };
        let file = file.ok_or_else(|| anyhow::anyhow!("the server writes no binary log"))?;
        let (position, state, server): (String, String, String) = match self.flavor {
            Flavor::Mariadb => c
                .query_first(
                    "SELECT @@gtid_binlog_pos, @@gtid_binlog_state, CAST(@@server_id AS CHAR)",
                )
                .await?
                .unwrap_or_default(),
            Flavor::Mysql => c
                .query_first("SELECT @@gtid_executed, @@gtid_executed, @@server_uuid")
                .await?
                .unwrap_or_default(),
        };
        Ok(Begin {
            file,
            position: position.replace('\n', ""),
            state: state.replace('\n', ""),
            server,
        })
    }

    async fn files(&self) -> anyhow::Result<Vec<String>> {
        let mut c = self.pool.get_conn().await?;
        let rows: Vec<mysql_async::Row> = c.query("SHOW BINARY LOGS").await?;
        Ok(rows.into_iter().filter_map(|r| r.get(0)).collect())
    }
}

/// The archiving concern: it owns the archiver while this instance is
/// the writable primary, and the status `/status` reports.
pub(super) struct Archiving {
    link: Link,
    status: Arc<Mutex<ArchiveStatus>>,
}

impl Archiving {
    pub fn new(link: Link) -> Self {
        Archiving {
            link,
            status: Default::default(),
        }
    }

    /// The archiving status to report, when this instance archives (or
    /// tried to).
    pub fn status(&self) -> Option<ArchiveStatus> {
        let st = self.status.lock().unwrap().clone();
        (!st.run.is_empty() || !st.error.is_empty()).then_some(st)
    }

    /// Whether this instance should archive now: the writable primary (or
    /// one read-only only because it refuses writes for a full volume),
    /// holding its lease.
    async fn should_archive(&self) -> bool {
        let primary = matches!(
            self.link.role(),
            Some(Desired::Primary) | Some(Desired::HandOver { .. })
        );
        if !primary || !self.link.lease.proven() || self.link.stopping() {
            return false;
        }
        if !self.link.server_running() {
            return false;
        }
        let Some(pool) = self.link.pool() else {
            return false;
        };
        let ro = tokio::time::timeout(Duration::from_secs(2), async {
            let mut c = pool.get_conn().await?;
            c.query_first::<i64, _>("SELECT @@read_only").await
        })
        .await;
        // A primary that refuses writes for a nearly full volume is
        // read-only and still the primary: its archiving goes on, since the
        // binary logs the archive lacks are what may be filling the volume
        // (`binlog_retention`), and only the archive taking them frees it.
        let guarded = self.link.writes_refused().is_some();
        matches!(ro, Ok(Ok(Some(0)))) || (guarded && matches!(ro, Ok(Ok(Some(1)))))
    }

    /// A primary demoted into a replica cluster turns read-only in its
    /// next pass: the archiver's last read waits for that (at most 5 s),
    /// so the archive ends with the demoted primary's last transaction —
    /// the promotion token a cluster following the archive waits for.
    async fn until_demoted_read_only(&self) {
        let demoted = matches!(self.link.role(), Some(Desired::DesignatedPrimary { .. }));
        let Some(pool) = self.link.pool().filter(|_| demoted) else {
            return;
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if let Ok(mut c) = pool.get_conn().await
                    && let Ok(Some(1)) = c.query_first::<i64, _>("SELECT @@read_only").await
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
    }

    /// Start and stop the archiver as this instance becomes and stops
    /// being the primary.
    pub async fn run(self: Arc<Self>) {
        let Some(backup) = self
            .link
            .cfg
            .spec
            .backup
            .clone()
            .filter(|b| b.archive_binlogs)
        else {
            return;
        };
        let mut running: Option<(watch::Sender<bool>, tokio::task::JoinHandle<()>)> = None;
        loop {
            let want = self.should_archive().await;
            match (running.is_some(), want) {
                (false, true) => {
                    match cnmysql_backup::destination::open_for_cluster(
                        &backup.object_store,
                        self.link.cfg.secrets.backup_dir.as_deref(),
                        &self.link.cfg.cluster,
                    ) {
                        Ok(dest) => {
                            let (tx, rx) = watch::channel(false);
                            let archiver = Archiver {
                                dest,
                                flavor: self.link.cfg.flavor(),
                                instance: self.link.cfg.instance.clone(),
                                dir: self.link.cfg.binlog_dir(),
                                source: Server {
                                    pool: self.link.pool().expect("checked by should_archive"),
                                    flavor: self.link.cfg.flavor(),
                                },
                                status: self.status.clone(),
                                interval: ARCHIVE_INTERVAL,
                            };
                            let task = tokio::spawn(
                                async move { archiver.run(rx).await }.in_current_span(),
                            );
                            running = Some((tx, task));
                        }
                        Err(e) => {
                            let mut st = self.status.lock().unwrap();
                            if st.error != e {
                                tracing::warn!(error = e, "binlog archiving cannot start");
                            }
                            if st.failing_since.is_empty() {
                                st.failing_since = jiff::Timestamp::now().to_string();
                            }
                            st.error = e;
                        }
                    }
                }
                (true, false) => {
                    let (tx, task) = running.take().unwrap();
                    self.until_demoted_read_only().await;
                    tracing::info!("no longer the writable primary: binlog archiving stops");
                    tx.send_replace(true);
                    let _ = task.await;
                    *self.status.lock().unwrap() = ArchiveStatus::default();
                }
                _ => {}
            }
            if self.link.sleep_or_stop(Duration::from_millis(500)).await {
                if let Some((tx, task)) = running.take() {
                    tx.send_replace(true);
                    let _ = task.await;
                }
                return;
            }
        }
    }
}
