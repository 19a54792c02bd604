//! Stopping mysqld as the manager does it: its own connections closed
//! first. MySQL gives the clients still connected when it is asked to
//! shut down two seconds to leave before it disconnects them ("Giving N
//! client threads a chance to die gracefully"), so a pooled admin
//! connection left open made every stop — a Pod's, a re-clone's — two
//! seconds longer. The pool is taken away first: the loops find no server
//! to ask until the next start hands out a new one (`obtain.rs`).

use super::*;

/// How long a connection another loop has taken may keep the pool's
/// closing waiting; the stop goes on without it after that.
const CLOSE_WAIT: Duration = Duration::from_millis(500);

impl<C: ClusterState> Manager<C> {
    /// Stop mysqld cleanly and do not start it again (the manager stops).
    pub(super) async fn stop_server(&self) {
        self.close_admin_connections().await;
        self.supervisor.shutdown().await;
    }

    /// Stop mysqld cleanly until the next start: its data is replaced.
    pub(super) async fn stop_server_for_now(&self) {
        self.close_admin_connections().await;
        self.supervisor.stop_for_now().await;
    }

    async fn close_admin_connections(&self) {
        if let Some(pool) = self.owners.server.send_replace(None) {
            let _ = tokio::time::timeout(CLOSE_WAIT, pool.disconnect()).await;
        }
    }
}
