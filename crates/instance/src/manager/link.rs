//! What the manager's concerns share. The configuration and the server's
//! supervision are read by all; three values are each written by one
//! concern and only read by the others, through the receivers here: the
//! connection to the running server (written by obtaining the data, which
//! starts the server), the role convergence works towards (written by
//! convergence) and the lease proof (`lease_proof.rs`, written by
//! convergence, which renews the lease). A concern gets a clone of the
//! link: it can read these, never write them.

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
}

/// The writing ends of the link's values, kept by their owners.
pub(super) struct Owners {
    pub server: watch::Sender<Option<Pool>>,
    pub role: watch::Sender<Option<Desired>>,
    pub lease: super::lease_proof::LeaseKeeper,
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
        let link = Link {
            cfg,
            supervisor,
            server: server_rx,
            role: role_rx,
            lease: lease_view,
            stop,
        };
        (
            link,
            Owners {
                server,
                role,
                lease,
            },
        )
    }

    /// The pool of admin connections to the running server, once connected.
    pub fn pool(&self) -> Option<Pool> {
        self.server.borrow().clone()
    }

    /// The role convergence works towards (none before its first turn).
    pub fn role(&self) -> Option<Desired> {
        self.role.borrow().clone()
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
