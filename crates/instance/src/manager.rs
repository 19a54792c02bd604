//! The instance manager: obtains data (initialise or clone), supervises
//! mysqld, converges the server's role towards the cluster's intent, and
//! answers the control API.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cnmysql_api::Flavor;
use cnmysql_api::names::REPLICATION_USER;
use cnmysql_core::flavor::{self, SourceSpec};
use cnmysql_core::role::{self, Action, Bootstrap, Desired, Local};
use cnmysql_core::status::{InstancePhase, InstanceStatus, Role, history_reaches, parse_history};
use cnmysql_core::{isolation, lease, self_fence, semisync, switchover};
use mysql_async::Pool;
use mysql_async::prelude::*;
use sha2::Digest;
use tokio::sync::watch;

use crate::api::{self, Backend};
use crate::bootstrap::{self, read_secret};
use crate::client::ControlClient;
use crate::clone::{self, ProgressCell};
use crate::cluster_state::ClusterState;
use crate::config::{InstanceConfig, PeerAddr, render_mycnf};
use crate::mysqld::{self, ServerState, Supervisor};
use crate::sql;

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
pub fn executable_hash() -> String {
    match std::fs::read("/proc/self/exe") {
        Ok(bytes) => hex::encode(sha2::Sha256::digest(&bytes)),
        Err(_) => String::new(),
    }
}

/// How a request to become read-only ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fenced {
    ReadOnly,
    /// mysqld was killed instead (it starts again read-only).
    Killed,
}

pub struct Manager<C: ClusterState> {
    cfg: Arc<InstanceConfig>,
    cluster: C,
    supervisor: Arc<Supervisor>,
    pool: Mutex<Option<Pool>>,
    phase: Mutex<(InstancePhase, String)>,
    progress: ProgressCell,
    desired: Mutex<Option<Desired>>,
    /// When the lease was last taken or renewed (monotonic: a wall-clock
    /// step must not postpone self-fencing).
    last_renew: Mutex<Option<Instant>>,
    /// When mysqld last wrote a log line.
    mysqld_output: Mutex<Option<Arc<Mutex<Instant>>>>,
    /// Last successful read of the cluster state.
    last_cluster_ok: Mutex<Instant>,
    exe_hash: String,
    started_at: String,
    /// The manager's own binary (its private copy): what an in-place
    /// upgrade replaces.
    exe_path: std::path::PathBuf,
    /// The log FIFO's descriptor, handed on across a re-exec.
    log_fd: Mutex<Option<std::os::fd::RawFd>>,
    /// A re-exec is scheduled: no second one meanwhile.
    reexec_pending: std::sync::atomic::AtomicBool,
    /// The listening sockets (control API, probes), handed on across a
    /// re-exec so that nobody is refused during it.
    listen_fds: Mutex<Vec<(&'static str, std::os::fd::RawFd)>>,
    /// Holds the control API still just before a re-exec.
    gate: Arc<api::Gate>,
    peers: ControlClient,
    shutdown: watch::Sender<bool>,
    /// mysqld was killed because this instance was deposed while writable:
    /// its next start recovers as a replica (rolls back what waited for an
    /// acknowledgement), whatever an older view of the status says.
    deposed: std::sync::atomic::AtomicBool,
}

impl<C: ClusterState> Backend for Manager<C> {
    async fn status(&self) -> InstanceStatus {
        self.observe().await
    }
    fn cluster(&self) -> &str {
        &self.cfg.cluster
    }
    fn config(&self) -> &InstanceConfig {
        &self.cfg
    }
    async fn apply_semi_sync(&self, s: &semisync::Settings) -> anyhow::Result<()> {
        if *self.desired.lock().unwrap() != Some(Desired::Primary) {
            anyhow::bail!("{} is not the primary", self.cfg.instance);
        }
        Manager::apply_semi_sync(self, s).await
    }
    fn executable_path(&self) -> &std::path::Path {
        &self.exe_path
    }
    fn may_reexec(&self) -> Result<(), String> {
        let (phase, message) = self.phase.lock().unwrap().clone();
        if self
            .reexec_pending
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Err("a re-exec is already under way".into());
        }
        match phase {
            InstancePhase::Running | InstancePhase::Restarting | InstancePhase::Failed => Ok(()),
            _ => Err(format!(
                "not now: the instance is {phase:?}{}; try again once it is running",
                if message.is_empty() {
                    String::new()
                } else {
                    format!(" ({message})")
                }
            )),
        }
    }
    fn reexec(
        self: Arc<Self>,
        exe: std::path::PathBuf,
        upgraded: bool,
        answered: tokio::sync::oneshot::Receiver<()>,
    ) {
        use std::sync::atomic::Ordering;
        if self.reexec_pending.swap(true, Ordering::SeqCst) {
            return;
        }
        tokio::spawn(async move {
            // The answer is written (or the caller left, or it took too
            // long); a moment more for the TLS layer to flush it.
            let _ = tokio::time::timeout(crate::upgrade::ANSWER_TIMEOUT, answered).await;
            tokio::time::sleep(crate::upgrade::FLUSH_GRACE).await;
            let mysqld = match self.supervisor.state() {
                ServerState::Running { pid } => Some(pid),
                _ => None,
            };
            let Some(fd) = *self.log_fd.lock().unwrap() else {
                tracing::error!("cannot re-exec: the log FIFO is not open");
                self.reexec_pending.store(false, Ordering::SeqCst);
                return;
            };
            // Requests already being served finish first; new ones wait in
            // the backlog for the next image.
            let open = self.gate.quiesce(crate::upgrade::QUIESCE_TIMEOUT).await;
            if open > 0 {
                tracing::warn!(open, "re-executing with control API connections still open");
            }
            let listeners = self.listen_fds.lock().unwrap().clone();
            let e = crate::upgrade::reexec(&exe, mysqld, fd, &listeners);
            self.gate.release();
            tracing::error!(error = %e, "re-exec failed; this manager goes on supervising mysqld");
            if upgraded {
                crate::upgrade::restore_previous(&exe);
            }
            self.reexec_pending.store(false, Ordering::SeqCst);
        });
    }
}

impl<C: ClusterState> Manager<C> {
    pub fn new(cfg: InstanceConfig, cluster: C) -> anyhow::Result<Arc<Self>> {
        let cfg = Arc::new(cfg);
        let material = cfg.tls.load()?;
        Ok(Arc::new(Manager {
            supervisor: Supervisor::new(cfg.clone()),
            cluster,
            pool: Mutex::new(None),
            phase: Mutex::new((InstancePhase::Initializing, String::new())),
            progress: Arc::new(Mutex::new(None)),
            desired: Mutex::new(None),
            last_renew: Mutex::new(None),
            mysqld_output: Mutex::new(None),
            last_cluster_ok: Mutex::new(Instant::now()),
            exe_hash: executable_hash(),
            started_at: jiff::Timestamp::now().to_string(),
            exe_path: current_exe_path(),
            log_fd: Mutex::new(None),
            reexec_pending: Default::default(),
            listen_fds: Mutex::new(Vec::new()),
            gate: Default::default(),
            peers: ControlClient::new(material.client_config()?),
            shutdown: watch::channel(false).0,
            deposed: Default::default(),
            cfg,
        }))
    }

    /// Ask the manager to stop (as SIGTERM does).
    pub fn request_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    fn set_phase(&self, phase: InstancePhase, message: impl Into<String>) {
        let message = message.into();
        let mut p = self.phase.lock().unwrap();
        if p.0 != phase || p.1 != message {
            tracing::info!(phase = ?phase, reason = %message, "instance phase");
        }
        *p = (phase, message);
        if phase != InstancePhase::Starting {
            // After a re-exec: the state is known, the control API answers.
            self.gate.adopted();
        }
    }

    fn pool(&self) -> Option<Pool> {
        self.pool.lock().unwrap().clone()
    }

    /// Run until shutdown is requested; then stop mysqld cleanly.
    pub async fn run(self: Arc<Self>) -> anyhow::Result<()> {
        let cfg = self.cfg.clone();
        std::fs::create_dir_all(&cfg.run_dir)?;
        std::fs::set_permissions(
            &cfg.run_dir,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )?;
        std::fs::write(cfg.mycnf(), render_mycnf(&cfg))?;
        // After an in-place upgrade or restart: the running mysqld and the
        // log FIFO the previous image handed on.
        let adopted = crate::upgrade::adopt(&cfg);
        let logs = mysqld::start_log_forwarder(&cfg.log_fifo(), adopted.log_fifo)?;
        *self.log_fd.lock().unwrap() = Some(logs.fd());
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
        self.listen_fds
            .lock()
            .unwrap()
            .push(("control", listener.as_raw_fd()));
        let tls = cfg.tls.load()?.server_config()?;
        let api_task = tokio::spawn(api::serve(
            listener,
            tls,
            api::router(self.clone()),
            self.shutdown.subscribe(),
            self.gate.clone(),
        ));
        if let Some(port) = cfg.probe_port {
            let probes = listen(
                inherited.remove("probes"),
                &cfg.control_bind,
                port,
                "probes",
            )
            .await?;
            self.listen_fds
                .lock()
                .unwrap()
                .push(("probes", probes.as_raw_fd()));
            let app = api::probe_router(self.clone());
            let mut stop = self.shutdown.subscribe();
            tokio::spawn(async move {
                let _ = axum::serve(probes, app)
                    .with_graceful_shutdown(async move { crate::stopped(&mut stop).await })
                    .await;
            });
        }
        tracing::info!(
            instance = cfg.instance,
            control = format!("{}:{}", cfg.control_bind, cfg.control_port),
            version = VERSION,
            hash = self.exe_hash,
            "instance manager started"
        );

        let mut stop = self.shutdown.subscribe();
        let work = {
            let me = self.clone();
            async move {
                if me.obtain_data().await? {
                    let watchdog = tokio::spawn(me.clone().self_fence_watchdog());
                    me.reconcile_loop().await;
                    watchdog.abort();
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
        // Stop accepting writes before anything else, and before giving the
        // lease up: a deposed primary woken from a freeze gets its Pod's
        // SIGTERM first, and a grace period is no fence (DESIGN §4). A
        // request held up by commits that wait for acknowledgements kills
        // mysqld (self_fence.rs); clients get errors, never a false
        // acknowledgement.
        let cause = if self.lease_proven() {
            self_fence::Cause::Stopping
        } else {
            self_fence::Cause::Deposed
        };
        let fenced = match self.make_read_only(cause, "shutting down").await {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, "cannot make mysqld read-only before stopping it");
                Fenced::ReadOnly
            }
        };
        if fenced == Fenced::ReadOnly
            && let Some(pool) = self.pool()
            && let Ok(Ok(mut conn)) =
                tokio::time::timeout(Duration::from_secs(1), pool.get_conn()).await
        {
            // The source side is switched off so the server can shut down
            // without replicas.
            let f = self.cfg.flavor();
            let off = semisync::Settings {
                enabled: false,
                wait_for_count: 1,
                timeout_millis: 1,
            };
            let _ = sql::exec_all(&mut conn, &sql::semi_sync_source(f, &off)).await;
        }
        self.release_lease_if_held().await;
        self.supervisor.shutdown().await;
        logs.drain().await;
        let pool = self.pool.lock().unwrap().take();
        if let Some(p) = pool {
            let _ = tokio::time::timeout(Duration::from_secs(1), p.disconnect()).await;
        }
        self.shutdown.send_replace(true);
        let _ = api_task.await;
        tracing::info!("instance manager stopped");
        result
    }

    async fn sleep_or_stop(&self, d: Duration) -> bool {
        let mut stop = self.shutdown.subscribe();
        tokio::select! {
            _ = tokio::time::sleep(d) => *self.shutdown.borrow(),
            _ = crate::stopped(&mut stop) => true,
        }
    }

    /// How the next start of mysqld recovers from a crash, from the
    /// latest cluster status (see [`role::recovery`]).
    fn set_recovery(&self, status: &cnmysql_api::ClusterStatus) {
        let recovery = if self.deposed.load(Ordering::SeqCst) {
            role::Recovery::AsReplica
        } else {
            role::recovery(&self.cfg.instance, status)
        };
        let options = cnmysql_core::flavor::recovery_options(
            self.cfg.flavor(),
            recovery,
            self.cfg.spec.mysql.semi_sync.enabled,
        );
        self.supervisor.set_start_options(options);
    }

    fn start_server(&self) {
        self.supervisor.start();
    }

    async fn connect_admin(&self) -> anyhow::Result<()> {
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
        conn.disconnect().await.ok();
        *self.pool.lock().unwrap() = Some(sql::admin_pool(&self.cfg.socket(), &admin));
        Ok(())
    }

    /// Get an initialised data directory and a running server. False when
    /// shutdown came first.
    async fn obtain_data(&self) -> anyhow::Result<bool> {
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
            match role::bootstrap(&self.cfg.instance, &status, has_data) {
                Bootstrap::UseExisting => {
                    self.set_phase(InstancePhase::Starting, "starting on existing data");
                    self.start_server();
                    self.connect_admin().await?;
                    return Ok(true);
                }
                Bootstrap::InitPrimary => {
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
                        Err(e) => {
                            tracing::error!(source, error = %e, "clone failed; retrying");
                            self.set_phase(
                                InstancePhase::Cloning,
                                format!("clone from {source} failed: {e}"),
                            );
                            *self.progress.lock().unwrap() = None;
                            if self.supervisor.is_active() {
                                self.supervisor.shutdown().await;
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

    /// Every instance's address: the platform's current view (Pod IPs on
    /// Kubernetes) over the static configuration.
    fn all_peers(&self) -> BTreeMap<String, PeerAddr> {
        let mut all = self.cfg.peers.clone();
        all.extend(self.cluster.peers());
        all
    }

    fn peer(&self, name: &str) -> Option<PeerAddr> {
        self.cluster
            .peers()
            .remove(name)
            .or_else(|| self.cfg.peers.get(name).cloned())
    }

    async fn clone_replica(&self, source: &str) -> anyhow::Result<()> {
        let peer = self
            .peer(source)
            .ok_or_else(|| anyhow::anyhow!("no address known for {source}"))?;
        self.set_phase(InstancePhase::Cloning, format!("cloning from {source}"));
        let gtid = clone::clone_from(&self.cfg, source, &peer, &self.peers, &self.progress).await?;
        self.set_phase(
            InstancePhase::Starting,
            format!("starting the clone of {source} at {gtid:?}"),
        );
        self.start_server();
        self.connect_admin().await?;
        let pool = self.pool().expect("connected");
        let mut conn = pool.get_conn().await?;
        let mut stmts = Vec::new();
        if !gtid.is_empty() {
            if self.cfg.flavor() == Flavor::Mariadb {
                // The copy's own binlog starts empty: give it the history it
                // holds, so comparisons of GTID state see what it contains.
                stmts.push(flavor::Sql::new("RESET MASTER"));
                stmts.push(flavor::Sql::new(format!(
                    "SET GLOBAL gtid_binlog_state = {}",
                    flavor::quote(&gtid)
                )));
            }
            stmts.extend(flavor::seed_gtid_position(self.cfg.flavor(), &gtid));
        }
        sql::exec_all(&mut conn, &stmts).await?;
        drop(conn);
        bootstrap::mark_initialized(&self.cfg, &format!("cloned from {source} at {gtid}"))?;
        Ok(())
    }

    async fn reconcile_loop(&self) {
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
            // Periodic, but at once when the cluster status changes, and
            // quickly while a primary change is in flight.
            let busy = matches!(
                *self.desired.lock().unwrap(),
                Some(Desired::Promote)
                    | Some(Desired::HoldReadOnly(_))
                    | Some(Desired::HandOver { .. })
            );
            let period = Duration::from_millis(if busy { 50 } else { 250 });
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

    /// Every 200 ms, independently of the reconcile loop (whose calls to
    /// the cluster state can hang while the network is cut, for as long as
    /// a connection takes to time out): a server that held the lease and
    /// can no longer prove it is made read-only. The first thing that runs
    /// after a freeze, too.
    async fn self_fence_watchdog(self: Arc<Self>) {
        loop {
            self.fall_back_if_due().await;
            let held = self.last_renew.lock().unwrap().is_some();
            if held
                && !self.lease_proven()
                && matches!(self.supervisor.state(), ServerState::Running { .. })
                && let Some(pool) = self.pool()
            {
                let writable = match tokio::time::timeout(Duration::from_millis(500), async {
                    let mut c = pool.get_conn().await?;
                    let ro: Option<i64> = c.query_first("SELECT @@read_only").await?;
                    anyhow::Ok(ro == Some(0))
                })
                .await
                {
                    Ok(Ok(w)) => w,
                    Ok(Err(_)) => false,
                    // No answer within the budget: treat as writable.
                    Err(_) => true,
                };
                if writable {
                    tracing::error!(
                        "the primary lease has not been renewed in time: making this primary read-only"
                    );
                    if let Err(e) = self
                        .make_read_only(
                            self_fence::Cause::Deposed,
                            "self-fenced: the primary lease could not be renewed",
                        )
                        .await
                    {
                        tracing::warn!(error = %e, "self-fencing failed; retrying");
                    }
                }
            }
            if self.sleep_or_stop(Duration::from_millis(200)).await {
                return;
            }
        }
    }

    /// `preferred` semi-sync: the primary falls back to asynchronous
    /// replication itself once a commit has waited `timeoutMillis`, and only
    /// while it provably holds the lease (`semisync::fall_back`).
    async fn fall_back_if_due(&self) {
        let spec = &self.cfg.spec;
        if semisync::fallback_after_ms(spec).is_none()
            || !matches!(
                *self.desired.lock().unwrap(),
                Some(Desired::Primary) | Some(Desired::HandOver { .. })
            )
            || !matches!(self.supervisor.state(), ServerState::Running { .. })
        {
            return;
        }
        let Some(pool) = self.pool() else { return };
        let f = self.cfg.flavor();
        let waited = tokio::time::timeout(Duration::from_millis(500), async {
            let mut c = pool.get_conn().await?;
            let ms: Option<u64> = c.query_first(flavor::longest_ack_wait_ms(f).text).await?;
            anyhow::Ok(ms.unwrap_or(0))
        })
        .await;
        let Ok(Ok(waited)) = waited else { return };
        if !semisync::fall_back(spec, self.lease_proven(), waited) {
            return;
        }
        let off = semisync::Settings {
            enabled: false,
            wait_for_count: 1,
            timeout_millis: semisync::NEVER_FALL_BACK_MS,
        };
        match self.apply_semi_sync(&off).await {
            Ok(()) => tracing::warn!(
                waited_ms = waited,
                "no replica acknowledged in time: falling back to asynchronous replication (dataDurability: preferred)"
            ),
            Err(e) => tracing::warn!(error = %e, "cannot fall back to asynchronous replication"),
        }
    }

    fn local_source_name(&self, host: &str, port: u16) -> Option<String> {
        self.all_peers()
            .into_iter()
            .find(|(_, p)| p.host == host && p.mysql_port == port)
            .map(|(n, _)| n)
            .or_else(|| Some(format!("{host}:{port}")))
    }

    /// Status of a peer instance over the control API, if it answers quickly.
    async fn peer_status(&self, name: &str) -> Option<InstanceStatus> {
        let peer = self.peer(name)?;
        tokio::time::timeout(
            Duration::from_millis(1500),
            self.peers.for_peer(&peer).get_json::<InstanceStatus>(
                &peer.host,
                peer.control_port,
                "/status",
            ),
        )
        .await
        .ok()?
        .ok()
    }

    async fn release_lease_if_held(&self) {
        if self.last_renew.lock().unwrap().is_some() {
            match self.cluster.release_lease(&self.cfg.instance).await {
                Ok(()) => {
                    *self.last_renew.lock().unwrap() = None;
                    tracing::info!("released the primary lease");
                }
                Err(e) => tracing::warn!(error = %e, "cannot release the primary lease"),
            }
        }
    }

    /// Renew the lease when due. False when this primary must not be
    /// writable (it could not renew for too long).
    async fn keep_lease(&self) -> bool {
        if !self.cfg.spec.enable_primary_lease {
            return true;
        }
        let last = *self.last_renew.lock().unwrap();
        if last.is_none_or(|t| t.elapsed().as_millis() as i64 >= lease::RENEW_EVERY_MS) {
            let attempt = Instant::now();
            // Bounded: a cut-off network must not hold the loop up.
            let renewal = tokio::time::timeout(
                Duration::from_millis(lease::RENEW_EVERY_MS as u64),
                self.cluster.acquire_lease(&self.cfg.instance),
            )
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("timed out")));
            match renewal {
                Ok(()) => {
                    *self.last_renew.lock().unwrap() = Some(attempt);
                    self.deposed.store(false, Ordering::SeqCst);
                }
                Err(e) => tracing::warn!(error = %e, "cannot renew the primary lease"),
            }
        }
        match *self.last_renew.lock().unwrap() {
            Some(t) => !lease::must_self_fence(0, t.elapsed().as_millis() as i64),
            None => false,
        }
    }

    /// The primary lease is provably this instance's: renewed within the
    /// time after which it fences itself (leases off: always).
    fn lease_proven(&self) -> bool {
        if !self.cfg.spec.enable_primary_lease {
            return true;
        }
        self.last_renew
            .lock()
            .unwrap()
            .is_some_and(|t| !lease::must_self_fence(0, t.elapsed().as_millis() as i64))
    }

    /// Make mysqld read-only and close the writers' sessions, within
    /// [`self_fence::READ_ONLY_BUDGET_MS`]; past it, escalate as
    /// [`self_fence::escalation`] says for `cause`.
    async fn make_read_only(&self, cause: self_fence::Cause, why: &str) -> anyhow::Result<Fenced> {
        let pool = self
            .pool()
            .ok_or_else(|| anyhow::anyhow!("no connection to mysqld yet"))?;
        let f = self.cfg.flavor();
        let budget = Duration::from_millis(self_fence::READ_ONLY_BUDGET_MS);
        let began = Instant::now();
        let mut conn = match tokio::time::timeout(budget, pool.get_conn()).await {
            Ok(c) => Some(c?),
            Err(_) => None,
        };
        let done = match conn.as_mut() {
            Some(c) => {
                let left = budget.saturating_sub(began.elapsed());
                match tokio::time::timeout(left, sql::exec_all(c, &flavor::read_only(f, true)))
                    .await
                {
                    Ok(r) => {
                        r?;
                        true
                    }
                    Err(_) => false,
                }
            }
            None => false,
        };
        if !done {
            // The connection is mid-statement: never reuse it.
            drop(conn.take());
            match self_fence::escalation(cause) {
                self_fence::Escalation::KillServer { as_replica } => {
                    if as_replica {
                        self.deposed.store(true, Ordering::SeqCst);
                        self.supervisor
                            .set_start_options(cnmysql_core::flavor::recovery_options(
                                f,
                                role::Recovery::AsReplica,
                                self.cfg.spec.mysql.semi_sync.enabled,
                            ));
                    }
                    tracing::error!(
                        why,
                        ?cause,
                        budget_ms = self_fence::READ_ONLY_BUDGET_MS,
                        "mysqld did not become read-only in time (commits wait for acknowledgements that will not come); killing it"
                    );
                    // Not started again when the manager is stopping anyway.
                    self.supervisor.kill_to_fence(*self.shutdown.borrow());
                    return Ok(Fenced::Killed);
                }
                self_fence::Escalation::CloseSessionsAndRetry => {
                    let mut other = pool.get_conn().await?;
                    let killed = sql::kill_writers(&mut other).await?;
                    tracing::warn!(
                        why,
                        killed,
                        "read-only was held up; closed the writers' sessions"
                    );
                    sql::exec_all(&mut other, &flavor::read_only(f, true)).await?;
                    conn = Some(other);
                }
            }
        }
        let mut conn = conn.expect("a connection that set read-only");
        let killed = sql::kill_writers(&mut conn).await?;
        tracing::info!(
            why,
            killed,
            millis = began.elapsed().as_millis() as u64,
            "read-only"
        );
        Ok(Fenced::ReadOnly)
    }

    /// Drain replication before promotion. True once everything the old
    /// primary wrote (or, if it is gone, everything received) is applied.
    async fn drained(
        &self,
        conn: &mut mysql_async::Conn,
        status: &cnmysql_api::ClusterStatus,
        view: &sql::ServerView,
    ) -> anyhow::Result<bool> {
        let f = self.cfg.flavor();
        let Some(repl) = &view.replication else {
            return Ok(true);
        };
        let old = status
            .current_primary
            .clone()
            .filter(|c| c != &self.cfg.instance);
        let wait_for = match old {
            Some(old) => match self.peer_status(&old).await {
                Some(st) if st.mysqld_running && !st.read_only => {
                    self.set_phase(
                        InstancePhase::Running,
                        format!("waiting for {old} to become read-only"),
                    );
                    return Ok(false);
                }
                Some(st) if st.mysqld_running => st.gtid_position,
                _ if role::drain_rule(status) == role::Drain::CatchUpWithOldPrimary => {
                    self.set_phase(
                        InstancePhase::Running,
                        format!("waiting for {old} to hand over (switchover)"),
                    );
                    return Ok(false);
                }
                _ => repl.received_gtid.clone(),
            },
            None => repl.received_gtid.clone(),
        };
        if wait_for.is_empty() || history_reaches(f, &view.gtid_executed, &wait_for) {
            return Ok(true);
        }
        self.set_phase(
            InstancePhase::Running,
            format!("catching up to {wait_for} before promotion"),
        );
        // Wait briefly for the applier, then judge by the executed history
        // (the replication position alone misses a former primary's own writes).
        let _: Option<i64> = conn
            .query_first(flavor::wait_for_position(f, &wait_for, 0.2).text)
            .await?;
        let now = sql::observe(conn, f).await?;
        Ok(history_reaches(f, &now.gtid_executed, &wait_for))
    }

    async fn promote(
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
            sql::exec_all(conn, &[flavor::stop_replica(f), flavor::reset_replica(f)]).await?;
        }
        if self.cfg.spec.enable_primary_lease {
            let attempt = Instant::now();
            self.cluster.acquire_lease(&self.cfg.instance).await?;
            *self.last_renew.lock().unwrap() = Some(attempt);
        }
        if !self.cluster.claim_primary(&self.cfg.instance).await? {
            tracing::warn!("the target primary changed while promoting; staying read-only");
            self.release_lease_if_held().await;
            return Ok(());
        }
        // The accepted primary again: a crash now keeps what it wrote.
        self.deposed.store(false, Ordering::SeqCst);
        let healthy = self.cfg.spec.instances.saturating_sub(1).max(0) as u32;
        sql::exec_all(
            conn,
            &sql::semi_sync_source(f, &semisync::desired(&self.cfg.spec, healthy)),
        )
        .await?;
        sql::exec_all(conn, &flavor::read_only(f, false)).await?;
        tracing::info!("promoted: writable primary");
        Ok(())
    }

    async fn reconcile_once(&self) -> anyhow::Result<()> {
        let status = self.cluster.get().await?;
        *self.last_cluster_ok.lock().unwrap() = Instant::now();
        self.set_recovery(&status);
        let desired = role::desired(&self.cfg.instance, &status);
        *self.desired.lock().unwrap() = Some(desired.clone());
        let Some(pool) = self.pool() else {
            return Ok(());
        };
        if !matches!(self.supervisor.state(), ServerState::Running { .. }) {
            self.set_phase(InstancePhase::Restarting, "waiting for mysqld");
            return Ok(());
        }
        let mut conn = pool.get_conn().await?;
        let f = self.cfg.flavor();
        let view = sql::observe(&mut conn, f).await?;
        // A switchover's primary keeps serving, lease and all, until its
        // target has caught up: its writes stop only for what is left.
        let mut waiting_to_hand_over = String::new();
        let desired = match desired {
            Desired::HandOver { to } if !view.read_only => {
                let target = self.peer_status(&to).await;
                match switchover::ready_to_hand_over(&to, target.as_ref()) {
                    Ok(()) => Desired::HandOver { to },
                    Err(why) => {
                        waiting_to_hand_over = format!(
                            "handing the primary role over to {to} once it has caught up ({why})"
                        );
                        Desired::Primary
                    }
                }
            }
            d => d,
        };
        if desired.releases_lease() {
            self.release_lease_if_held().await;
            if view.semi_sync.source_enabled {
                // A former primary must not wait for acknowledgements of the
                // transactions it now only applies: its applier would stall.
                let off = semisync::Settings {
                    enabled: false,
                    wait_for_count: 1,
                    timeout_millis: view.semi_sync.timeout_millis.max(1),
                };
                sql::exec_all(&mut conn, &sql::semi_sync_source(f, &off)).await?;
                tracing::info!("semi-sync source side switched off on a non-primary");
            }
        }
        match &desired {
            Desired::Promote => {
                if !view.read_only {
                    drop(conn);
                    self.make_read_only(
                        self_fence::Cause::Demotion,
                        "not yet the accepted primary",
                    )
                    .await?;
                    return Ok(());
                }
                return self.promote(&mut conn, &status, &view).await;
            }
            Desired::Primary => {
                if !self.keep_lease().await {
                    if !view.read_only {
                        tracing::error!(
                            "cannot renew the primary lease in time: making this primary read-only"
                        );
                        drop(conn);
                        self.make_read_only(
                            self_fence::Cause::Deposed,
                            "self-fenced: the primary lease could not be renewed",
                        )
                        .await?;
                    }
                    self.set_phase(
                        InstancePhase::Running,
                        "self-fenced: cannot renew the primary lease",
                    );
                    return Ok(());
                }
            }
            Desired::HoldReadOnly(_) | Desired::HandOver { .. } => {
                let why = match &desired {
                    Desired::HandOver { to } => format!("handing the primary role over to {to}"),
                    Desired::HoldReadOnly(why) => why.clone(),
                    _ => unreachable!(),
                };
                if !view.read_only {
                    drop(conn);
                    self.make_read_only(self_fence::Cause::Demotion, &why)
                        .await?;
                    return Ok(());
                }
                self.set_phase(InstancePhase::Running, why);
                return Ok(());
            }
            Desired::Replica { .. } => {}
        }
        let local = Local {
            read_only: view.read_only,
            source: view
                .replication
                .as_ref()
                .filter(|r| !r.source_host.is_empty())
                .and_then(|r| self.local_source_name(&r.source_host, r.source_port)),
            io_running: view
                .replication
                .as_ref()
                .is_some_and(|r| r.io_state == "Yes" || r.io_state == "Connecting"),
            sql_running: view.replication.as_ref().is_some_and(|r| r.sql_running),
        };
        for action in role::reconcile(&desired, &local) {
            tracing::info!(action = ?action, "role change");
            match action {
                Action::SetReadOnly(true) => {
                    // Writable while another instance is the primary: deposed.
                    if self
                        .make_read_only(self_fence::Cause::Deposed, "replica")
                        .await?
                        == Fenced::Killed
                    {
                        return Ok(());
                    }
                }
                Action::SetReadOnly(false) => {
                    sql::exec_all(&mut conn, &flavor::read_only(f, false)).await?
                }
                Action::ResetReplication => {
                    sql::exec_all(
                        &mut conn,
                        &[flavor::stop_replica(f), flavor::reset_replica(f)],
                    )
                    .await?;
                }
                Action::StartReplication => {
                    sql::exec_all(&mut conn, &[flavor::start_replica(f)]).await?;
                }
                Action::Follow(source) => {
                    // Never follow a source whose history lacks ours, and
                    // judge only a history it has read from its server: a
                    // manager that answers before reaching its mysqld (just
                    // restarted) reports none, and every replica would take
                    // itself for diverged.
                    let Some(src) = self.peer_status(&source).await.filter(|s| s.mysqld_running)
                    else {
                        self.set_phase(
                            InstancePhase::Running,
                            format!("waiting for {source} to answer"),
                        );
                        return Ok(());
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
                        return Ok(());
                    }
                    let peer = self
                        .peer(&source)
                        .ok_or_else(|| anyhow::anyhow!("no address known for {source}"))?;
                    let spec = SourceSpec {
                        host: peer.host.clone(),
                        port: peer.mysql_port,
                        user: REPLICATION_USER.into(),
                        password: read_secret(&self.cfg.secrets.replication_password)?,
                        ssl_ca: self.cfg.tls.ca.display().to_string(),
                        ssl_cert: self.cfg.tls.cert.display().to_string(),
                        ssl_key: self.cfg.tls.key.display().to_string(),
                        use_current_pos: true,
                        verify_host: peer.tls_name.is_none(),
                    };
                    sql::exec_all(
                        &mut conn,
                        &[
                            flavor::stop_replica(f),
                            flavor::change_source(f, &spec),
                            flavor::start_replica(f),
                        ],
                    )
                    .await?;
                }
            }
        }
        if desired == Desired::Primary
            && status.current_primary.as_deref() != Some(self.cfg.instance.as_str())
        {
            self.cluster.claim_primary(&self.cfg.instance).await?;
        }
        self.set_phase(InstancePhase::Running, waiting_to_hand_over);
        Ok(())
    }

    /// Apply semi-sync settings on this primary (the operator's steady-state adjustment).
    pub async fn apply_semi_sync(&self, settings: &semisync::Settings) -> anyhow::Result<()> {
        let pool = self
            .pool()
            .ok_or_else(|| anyhow::anyhow!("mysqld is not connected"))?;
        let mut conn = pool.get_conn().await?;
        sql::exec_all(
            &mut conn,
            &sql::semi_sync_source(self.cfg.flavor(), settings),
        )
        .await
    }

    /// The liveness isolation check: cluster state unreachable for long and
    /// no peer answering.
    pub async fn isolated(&self) -> bool {
        let unreachable_for = self.last_cluster_ok.lock().unwrap().elapsed();
        if unreachable_for < isolation::UNREACHABLE_FOR {
            return false;
        }
        let mut any_peer = false;
        for (name, peer) in &self.all_peers() {
            if name == &self.cfg.instance {
                continue;
            }
            let probe = tokio::net::TcpStream::connect((peer.host.as_str(), peer.control_port));
            if matches!(
                tokio::time::timeout(Duration::from_millis(500), probe).await,
                Ok(Ok(_))
            ) {
                any_peer = true;
                break;
            }
        }
        isolation::isolated(unreachable_for, any_peer)
    }

    /// A fresh look at the server for `/status`.
    pub async fn observe(&self) -> InstanceStatus {
        let (phase, message) = self.phase.lock().unwrap().clone();
        let mut st = InstanceStatus {
            instance: self.cfg.instance.clone(),
            flavor: Some(self.cfg.flavor()),
            phase,
            message,
            executable_hash: self.exe_hash.clone(),
            manager_version: VERSION.into(),
            manager_pid: std::process::id(),
            manager_started_at: self.started_at.clone(),
            clone: self
                .progress
                .lock()
                .unwrap()
                .clone()
                .filter(|p| p.stage != "done"),
            ..Default::default()
        };
        if let ServerState::Running { pid } = self.supervisor.state() {
            st.mysqld_pid = Some(pid);
        }
        st.isolated = self.isolated().await;
        let Some(pool) = self.pool() else { return st };
        let observed = tokio::time::timeout(Duration::from_secs(2), async {
            let mut conn = pool.get_conn().await?;
            sql::observe(&mut conn, self.cfg.flavor()).await
        })
        .await;
        let view = match observed {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                st.message = format!("cannot query mysqld: {e}");
                return st;
            }
            Err(_) => {
                st.message = "mysqld did not answer within 2s".into();
                return st;
            }
        };
        st.mysqld_running = true;
        st.read_only = view.read_only;
        st.source_id = view.source_id.clone();
        st.holds_lease = self
            .last_renew
            .lock()
            .unwrap()
            .is_some_and(|t| (t.elapsed().as_millis() as i64) < lease::TTL_MS);
        st.gtid_executed = view.gtid_executed;
        st.gtid_position = view.gtid_position;
        st.uptime_seconds = Some(view.uptime_seconds);
        st.semi_sync = Some(view.semi_sync);
        st.lag_seconds = view.replication.as_ref().and_then(|r| r.seconds_behind);
        let desired = self.desired.lock().unwrap().clone();
        st.role = match (&view.replication, &desired) {
            (Some(_), _) => Role::Replica,
            (None, _) if !view.read_only => Role::Primary,
            (None, Some(Desired::Primary)) => Role::Primary,
            _ => Role::Unknown,
        };
        st.ready = st.phase == InstancePhase::Running
            && match desired {
                // A switchover's primary serves until it hands over.
                Some(Desired::Primary) | Some(Desired::HandOver { .. }) => {
                    st.role == Role::Primary && !view.read_only
                }
                Some(Desired::Promote) => false,
                Some(Desired::Replica { .. }) => {
                    view.read_only && view.replication.as_ref().is_some_and(|r| r.healthy())
                }
                _ => false,
            };
        st.replication = view.replication;
        st
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
