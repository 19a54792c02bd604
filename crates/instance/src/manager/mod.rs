//! The instance manager: this file starts its loops and stops them. The
//! convergence loop (`converge.rs`, with obtaining the data, reinit,
//! import and the lease) is the only writer of the values the others read
//! through the link (`link.rs`). The self-fence watchdog, archiving, the
//! archive follower, the relay refill proof and certificate renewal are
//! structs that own their state and run loops of their own. The control
//! API's side is `ControlBackend` (`backend.rs`, `observe.rs`), which
//! holds the concerns' handles, never the manager. docs/architecture.md
//! has a table of the loops and what each owns. mysqld's supervision is
//! `crate::mysqld`.

mod acked_alone;
mod applier;
mod archive_replica;
mod archiving;
mod backend;
mod binlog_retention;
mod certificates;
mod converge;
mod copy_unblock;
mod drain;
mod fence;
mod hand_over_acks;
pub mod import;
mod lease_proof;
mod leave_source_side;
mod link;
mod observe;
mod obtain;
mod peers;
mod primary_lease;
mod reconnects;
pub mod recovery;
mod reexec;
mod reinit;
mod relay_refill;
mod replay;
mod replica_cluster;
mod semi_sync;
mod sql_objects;
mod stop_server;
mod unsynced_data;
mod volumes;
mod watchdog;

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cnmysql_api::Flavor;
use cnmysql_api::names::REPLICATION_USER;
use cnmysql_core::flavor::{self, SourceSpec};
use cnmysql_core::role::{self, Action, Bootstrap, Desired, Local};
use cnmysql_core::status::{
    InstancePhase, InstanceStatus, Role, history_reaches, parse_history, received_reaches,
};
use cnmysql_core::{
    isolation, lease, readiness, replica_durability, self_fence, semisync, switchover,
};
use mysql_async::Pool;
use mysql_async::prelude::*;
use tokio::sync::watch;
use tracing::Instrument;

use crate::api::{self, Backend};
use crate::bootstrap::{self, read_secret};
use crate::clone;
use crate::clone_progress::ProgressCell;
use crate::config::{InstanceConfig, render_mycnf};
use crate::mysqld::{self, ServerState, Supervisor};
use crate::sql;
use crate::unsynced_mark;
use cnmysql_control::ClusterState;
use cnmysql_control::peer::PeerAddr;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A starting mysqld that neither accepts connections nor writes a log line
/// for this long is hung. (Long crash recovery keeps logging progress.)
const STARTUP_SILENCE: Duration = Duration::from_secs(30);

/// The path this process was started from (not `/proc/self/exe`, which
/// names the old, deleted file once an upgrade replaced it).
fn current_exe_path() -> std::path::PathBuf {
    let p = std::env::current_exe().unwrap_or_default();
    let s = p.to_string_lossy();
    match s.strip_suffix(" (deleted)") {
        Some(t) => t.into(),
        None => p,
    }
}

/// SHA-256 of the running executable, hex encoded.
pub use cnmysql_control::executable_hash;

use fence::{Fenced, Fencer};
use link::{Link, Owners};

pub struct Manager<C: ClusterState> {
    cfg: Arc<InstanceConfig>,
    cluster: Arc<C>,
    /// The other instances: addresses and status.
    peers: Arc<peers::Peers<C>>,
    supervisor: Arc<Supervisor>,
    /// What the concerns read of each other (`link.rs`).
    link: Link,
    /// The writing ends of the link's values: the server connection, the
    /// role and the lease proof, written by convergence alone.
    owners: Owners,
    /// Fencing, which owns whether this instance was deposed.
    fencer: Arc<Fencer>,
    progress: ProgressCell,
    /// When mysqld last wrote a log line.
    mysqld_output: Mutex<Option<Arc<Mutex<Instant>>>>,
    /// The in-place re-exec and what it hands on.
    reexec: Arc<reexec::Reexec>,
    /// Holds the control API still around a re-exec.
    gate: Arc<crate::serve::Gate>,
    /// Its certificates, loaded again when renewed (`certificates::Renewal`).
    certs: Arc<certificates::Certificates>,
    shutdown: watch::Sender<bool>,
    /// Continuous binlog archiving, while this instance is the primary.
    archiving: Arc<archiving::Archiving>,
    /// Following a binlog archive, as a replica cluster's designated
    /// primary.
    archive_follower: Arc<archive_replica::ArchiveFollower<C>>,
    /// Purging the binary logs nobody needs any more.
    binlogs: Arc<binlog_retention::BinlogRetention<C>>,
    /// Whether the relay log is proven to hold again what it held before
    /// it was last emptied.
    refill: Arc<relay_refill::RelayRefill<C>>,
    /// The control API's side (`backend.rs`, `observe.rs`).
    backend: Arc<backend::ControlBackend<C>>,
    /// Whether the IO thread waits to retry a connection, and when the
    /// manager last had it connect again at once (`reconnects.rs`).
    reconnects: reconnects::Reconnects,
    /// A former primary's semi-sync source side on its way off
    /// (`leave_source_side.rs`).
    leaving: leave_source_side::LeaveSourceSide,
}

impl<C: ClusterState> Manager<C> {
    pub fn new(cfg: InstanceConfig, cluster: C) -> anyhow::Result<Arc<Self>> {
        let cfg = Arc::new(cfg);
        let certs = Arc::new(certificates::Certificates::load(cfg.tls.clone())?);
        let supervisor = Supervisor::new(cfg.clone());
        let shutdown = watch::channel(false).0;
        let (link, owners) = Link::new(cfg.clone(), supervisor.clone(), shutdown.subscribe());
        let cluster = Arc::new(cluster);
        let gate = Arc::new(crate::serve::Gate::default());
        let peers = Arc::new(peers::Peers::new(
            cfg.clone(),
            cluster.clone(),
            certs.clone(),
        ));
        let refill = Arc::new(relay_refill::RelayRefill::new(link.clone(), peers.clone()));
        let archiving = Arc::new(archiving::Archiving::new(link.clone()));
        let archive_follower = Arc::new(archive_replica::ArchiveFollower::new(
            link.clone(),
            cluster.clone(),
        ));
        let binlogs = Arc::new(binlog_retention::BinlogRetention::new(
            link.clone(),
            cluster.clone(),
        ));
        let progress: ProgressCell = Arc::new(Mutex::new(None));
        let reexec = Arc::new(reexec::Reexec::new(current_exe_path(), gate.clone()));
        let backend = Arc::new(backend::ControlBackend {
            cluster: cluster.clone(),
            peers: peers.clone(),
            link: link.clone(),
            certs: certs.clone(),
            progress: progress.clone(),
            refill: refill.clone(),
            archiving: archiving.clone(),
            archive_follower: archive_follower.clone(),
            binlogs: binlogs.clone(),
            reexec: reexec.clone(),
            exe_hash: executable_hash(),
            started_at: jiff::Timestamp::now().to_string(),
            history_seen: Mutex::new(None),
        });
        Ok(Arc::new(Manager {
            supervisor,
            cluster,
            refill,
            archiving,
            archive_follower,
            binlogs,
            peers,
            fencer: Arc::new(Fencer::new(link.clone())),
            link,
            owners,
            progress,
            mysqld_output: Mutex::new(None),
            reconnects: Default::default(),
            leaving: Default::default(),
            reexec,
            gate,
            certs,
            shutdown,
            backend,
            cfg,
        }))
    }

    /// Ask the manager to stop (as SIGTERM does).
    pub fn request_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    fn set_phase(&self, phase: InstancePhase, message: impl Into<String>) {
        let message = message.into();
        self.owners.phase.send_if_modified(|p| {
            let changed = p.0 != phase || p.1 != message;
            if changed {
                tracing::info!(phase = ?phase, reason = %message, "instance phase");
                *p = (phase, message);
            }
            changed
        });
        if phase != InstancePhase::Starting {
            // After a re-exec: the state is known, the control API answers.
            self.gate.adopted();
        }
    }

    fn pool(&self) -> Option<Pool> {
        self.link.pool()
    }

    /// Run until shutdown is requested; then stop mysqld cleanly. Logs
    /// carry a span naming the cluster and the instance.
    pub async fn run(self: Arc<Self>) -> anyhow::Result<()> {
        let span = tracing::info_span!(
            "instance",
            cluster = %self.cfg.cluster,
            instance = %self.cfg.instance
        );
        self.run_in_span().instrument(span).await
    }

    async fn run_in_span(self: Arc<Self>) -> anyhow::Result<()> {
        let cfg = self.cfg.clone();
        crate::run_dir::prepare(&cfg.run_dir)?;
        crate::run_dir::make_private_dir(&cfg.tmp_dir())?;
        crate::run_dir::make_private_dir(&cfg.secure_files_dir())?;
        // Older managers left the administrator's backup options here.
        let _ = std::fs::remove_file(cfg.run_dir.join("backup.cnf"));
        let server_tls = crate::server_tls::install(&cfg)?;
        self.certs.set_server_expiry(server_tls.expires_at);
        std::fs::write(cfg.mycnf(), render_mycnf(&cfg))?;
        if let Some(dir) = &cfg.binlog_dir {
            std::fs::create_dir_all(dir)
                .map_err(|e| anyhow::anyhow!("the binary log directory {}: {e}", dir.display()))?;
        }
        // After an in-place upgrade or restart: the running mysqld and the
        // log FIFO the previous image handed on.
        let adopted = crate::upgrade::adopt(&cfg);
        let logs = mysqld::start_log_forwarder(&cfg.log_fifo(), adopted.log_fifo)?;
        self.reexec.set_log_fd(logs.fd());
        *self.mysqld_output.lock().unwrap() = Some(logs.last_output());
        match adopted.mysqld_pid {
            Some(pid) => {
                self.supervisor.adopt(pid);
                // Requests wait in the inherited listener until this image
                // has taken up the running server (a few milliseconds), or
                // at most ADOPT_HOLD.
                self.gate.hold_until_adopted();
                let gate = self.gate.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(crate::upgrade::ADOPT_HOLD).await;
                    gate.adopted();
                });
            }
            None => mysqld::stop_leftover(&cfg).await,
        }

        // After a re-exec the listening sockets are the previous image's,
        // still open: requests that came meanwhile are waiting in them.
        let mut inherited = crate::inherit::take_all(crate::upgrade::LISTENERS_ENV);
        let listener = listen(
            inherited.remove("control"),
            &cfg.control_bind,
            cfg.control_port,
            "control API",
        )
        .await?;
        self.reexec.add_listener("control", listener.as_raw_fd());
        let api_task = tokio::spawn(
            crate::serve::serve(
                listener,
                self.certs.server(),
                api::router(self.backend.clone()),
                self.shutdown.subscribe(),
                self.gate.clone(),
                Default::default(),
            )
            .in_current_span(),
        );
        if let Some(port) = cfg.probe_port {
            let probes = listen(
                inherited.remove("probes"),
                &cfg.control_bind,
                port,
                "probes",
            )
            .await?;
            self.reexec.add_listener("probes", probes.as_raw_fd());
            let app = api::probe_router(self.backend.clone());
            // Probes are short: a kubelet holds a connection a second or
            // two, and nobody else gets to keep one.
            let limits = crate::serve::Limits {
                max_connections: 64,
                header_timeout: Duration::from_secs(5),
                keep_alive: false,
                per_source: 4,
            };
            tokio::spawn(crate::serve::serve_plain(
                probes,
                app,
                self.shutdown.subscribe(),
                limits,
            ));
        }
        tracing::info!(
            instance = cfg.instance,
            control = format!("{}:{}", cfg.control_bind, cfg.control_port),
            version = VERSION,
            hash = self.backend.exe_hash,
            "instance manager started"
        );

        let renewal = certificates::Renewal {
            link: self.link.clone(),
            certs: self.certs.clone(),
        };
        let renewals = tokio::spawn(renewal.run().in_current_span());
        let mut stop = self.shutdown.subscribe();
        let work = {
            let me = self.clone();
            async move {
                if me.obtain_data().await? {
                    let watchdog = watchdog::Watchdog {
                        link: me.link.clone(),
                        fencer: me.fencer.clone(),
                    };
                    let watchdog = tokio::spawn(watchdog.run().in_current_span());
                    let archiving = tokio::spawn(me.archiving.clone().run().in_current_span());
                    let following =
                        tokio::spawn(me.archive_follower.clone().run().in_current_span());
                    let refill = tokio::spawn(me.refill.clone().run().in_current_span());
                    let binlogs = tokio::spawn(me.binlogs.clone().run().in_current_span());
                    me.reconcile_loop().await;
                    watchdog.abort();
                    refill.abort();
                    binlogs.abort();
                    let _ = archiving.await;
                    let _ = following.await;
                }
                anyhow::Ok(())
            }
        };
        let result = tokio::select! {
            r = work => r,
            _ = crate::stopped(&mut stop) => Ok(()),
        };
        if let Err(e) = &result {
            tracing::error!(error = %e, "instance manager failed");
            self.set_phase(InstancePhase::Failed, e.to_string());
        }
        self.set_phase(InstancePhase::ShuttingDown, "");
        self.fence_before_stop().await;
        self.release_lease_if_held().await;
        self.stop_server().await;
        self.synced_after_clean_stop().await;
        logs.drain().await;
        self.shutdown.send_replace(true);
        renewals.abort();
        let _ = api_task.await;
        tracing::info!("instance manager stopped");
        result
    }

    /// Before stopping: read-only first (killed if commits hold it up),
    /// then the semi-sync source side off on a server seen read-only.
    async fn fence_before_stop(&self) {
        // Stop accepting writes before anything else, and before giving the
        // lease up: a deposed primary woken from a freeze gets its Pod's
        // SIGTERM first, and a grace period is no fence (DESIGN §4). A
        // request held up by commits that wait for acknowledgements kills
        // mysqld (self_fence.rs); clients get errors, never a false
        // acknowledgement.
        let cause = if self.link.lease.proven() {
            self_fence::Cause::Stopping
        } else {
            self_fence::Cause::Deposed
        };
        let fenced = match self.fencer.make_read_only(cause, "shutting down").await {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, "cannot make mysqld read-only before stopping it");
                Fenced::ReadOnly
            }
        };
        // A server killed to fence it has no shutdown to log or settle.
        if fenced != Fenced::ReadOnly {
            return;
        }
        let Some(pool) = self.pool() else { return };
        let Ok(Ok(mut conn)) = tokio::time::timeout(Duration::from_secs(1), pool.get_conn()).await
        else {
            return;
        };
        let f = self.cfg.flavor();
        // An error above was taken for read-only: check, since a writable
        // server's waiting commits would complete (and be acknowledged)
        // once its semi-sync source side is off.
        if let Ok(Some(1u8)) = conn.query_first::<u8, _>("SELECT @@global.read_only").await {
            // The source side is switched off so the server can shut down
            // without replicas.
            let off = semisync::off(1);
            let _ = sql::exec_all(&mut conn, &sql::semi_sync_source(f, &off)).await;
        }
        // MySQL logs the steps of its shutdown only at its most verbose
        // level: a shutdown that hangs then says at which step (one took
        // over a minute once after a hand-over, cause unseen). MariaDB
        // logs them by default.
        if f == Flavor::Mysql {
            let _ = conn.query_drop("SET GLOBAL log_error_verbosity = 3").await;
        }
    }

    async fn sleep_or_stop(&self, d: Duration) -> bool {
        self.link.sleep_or_stop(d).await
    }
}

/// A listening socket: the one the previous image handed on, or a new one.
async fn listen(
    inherited: Option<std::os::fd::OwnedFd>,
    host: &str,
    port: u16,
    what: &str,
) -> anyhow::Result<tokio::net::TcpListener> {
    if let Some(fd) = inherited {
        let l = std::net::TcpListener::from(fd);
        l.set_nonblocking(true)?;
        return Ok(tokio::net::TcpListener::from_std(l)?);
    }
    tokio::net::TcpListener::bind((host, port))
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {host}:{port} ({what}): {e}"))
}
