//! What the manager's concerns share. The configuration and the server's
//! supervision are read by all; the other values are written by the
//! convergence loop alone (it holds the [`Owners`]) and only read by the
//! other loops and the control API, through the receivers here: the
//! connection to the running server (made by obtaining the data, which
//! starts the server), the role convergence works towards, the lease proof
//! (`lease_proof.rs`), the phase, when the cluster state was last read and
//! the server's version. A concern gets a clone of the link: it can read
//! these, never write them.

use super::lease_proof::LeaseView;
use super::*;

#[derive(Clone)]
pub(super) struct Link {
    pub cfg: Arc<InstanceConfig>,
    pub supervisor: Arc<Supervisor>,
    server: watch::Receiver<Option<Pool>>,
    role: watch::Receiver<Option<Desired>>,
    pub lease: LeaseView,
    stop: watch::Receiver<bool>,
    phase: watch::Receiver<(InstancePhase, String)>,
    cluster_seen: watch::Receiver<Instant>,
    server_version: watch::Receiver<Option<String>>,
    writes_refused: watch::Receiver<Option<String>>,
}

/// The writing ends of the link's values, kept by their owners.
pub(super) struct Owners {
    pub server: watch::Sender<Option<Pool>>,
    pub role: watch::Sender<Option<Desired>>,
    pub lease: super::lease_proof::LeaseKeeper,
    /// The instance's phase and why.
    pub phase: watch::Sender<(InstancePhase, String)>,
    /// When the cluster state was last read.
    pub cluster_seen: watch::Sender<Instant>,
    /// The running server's version (`VERSION()`), once it runs.
    pub server_version: watch::Sender<Option<String>>,
    /// Why the primary refuses writes (`cnmysql_core::disk_guard`).
    pub writes_refused: watch::Sender<Option<String>>,
}

impl Link {
    /// A link and the writing ends of its values; `stop` is the manager's
    /// request to stop.
    pub fn new(
        cfg: Arc<InstanceConfig>,
        supervisor: Arc<Supervisor>,
        stop: watch::Receiver<bool>,
    ) -> (Link, Owners) {
        let (server, server_rx) = watch::channel(None);
        let (role, role_rx) = watch::channel(None);
        let (lease, lease_view) =
            super::lease_proof::LeaseKeeper::new(cfg.spec.enable_primary_lease);
        let (phase, phase_rx) = watch::channel((InstancePhase::Initializing, String::new()));
        let (cluster_seen, seen_rx) = watch::channel(Instant::now());
        let (server_version, version_rx) = watch::channel(None);
        let (writes_refused, refused_rx) = watch::channel(None);
        let link = Link {
            cfg,
            supervisor,
            server: server_rx,
            role: role_rx,
            lease: lease_view,
            stop,
            phase: phase_rx,
            cluster_seen: seen_rx,
            server_version: version_rx,
            writes_refused: refused_rx,
        };
        let owners = Owners {
            server,
            role,
            lease,
            phase,
            cluster_seen,
            server_version,
            writes_refused,
        };
        (link, owners)
    }

    /// The pool of admin connections to the running server, once connected.
    pub fn pool(&self) -> Option<Pool> {
        self.server.borrow().clone()
    }

    /// The role convergence works towards (none before its first turn).
    pub fn role(&self) -> Option<Desired> {
        self.role.borrow().clone()
    }

    /// The instance's phase and why.
    pub fn phase(&self) -> (InstancePhase, String) {
        self.phase.borrow().clone()
    }

    /// How long ago convergence last read the cluster state.
    pub fn cluster_unseen_for(&self) -> Duration {
        self.cluster_seen.borrow().elapsed()
    }

    /// The running server's version, once known.
    pub fn server_version(&self) -> Option<String> {
        self.server_version.borrow().clone()
    }

    /// Why this primary refuses writes, while it does.
    pub fn writes_refused(&self) -> Option<String> {
        self.writes_refused.borrow().clone()
    }

    /// The server runs (as its supervisor last saw).
    pub fn server_running(&self) -> bool {
        matches!(self.supervisor.state(), ServerState::Running { .. })
    }

    /// The manager was asked to stop.
    pub fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    /// Sleep `d`, or less when the manager is asked to stop: true then.
    pub async fn sleep_or_stop(&self, d: Duration) -> bool {
        let mut stop = self.stop.clone();
        tokio::select! {
            _ = tokio::time::sleep(d) => self.stopping(),
            _ = crate::stopped(&mut stop) => true,
        }
    }
}
