//! The primary's side of a copy no commit may hold up for good
//! (`cnmysql_core::copy_unblock`): writes held while a copy waits with no
//! replica connected, the waiting commits ended (their clients get an
//! error), writes taken again once a replica is connected.

use super::*;
use cnmysql_core::copy_unblock::{self, Ending, Step};

impl<C: ClusterState> Manager<C> {
    /// The refusal a copy asks of the primary this pass, if any. The
    /// process list is read only while writes are held for a copy, or
    /// while semi-sync is on and no replica is connected to acknowledge.
    pub(super) async fn copy_refusal(
        &self,
        conn: &mut mysql_async::Conn,
        desired: &Desired,
        view: &sql::ServerView,
    ) -> Option<String> {
        if *desired != Desired::Primary {
            return None;
        }
        let semi = &view.semi_sync;
        let holding = self.link.writes_refused().as_deref() == Some(copy_unblock::REASON);
        if !holding && (!semi.source_enabled || semi.clients > 0) {
            return None;
        }
        let (copy_age, waiting, replicas): (Option<u64>, u64, u64) = conn
            .query_first(copy_unblock::observe().text)
            .await
            .ok()
            .flatten()
            .unwrap_or((None, 0, 0));
        let required =
            self.cfg.spec.mysql.semi_sync.data_durability == cnmysql_api::DataDurability::Required;
        match copy_unblock::step(
            required,
            replicas,
            copy_age.map(Duration::from_secs),
            holding,
            waiting,
        ) {
            Step::Take => None,
            Step::Hold { end_waiting } => {
                if end_waiting {
                    self.end_waiting_commits(conn).await;
                }
                Some(copy_unblock::REASON.to_string())
            }
        }
    }

    async fn end_waiting_commits(&self, conn: &mut mysql_async::Conn) {
        tracing::warn!(
            "a copy for a new replica waits on commits no replica can acknowledge; \
             ending them (their clients get an error, not an acknowledgement)"
        );
        match copy_unblock::ending(self.cfg.flavor()) {
            // The writers' sessions closed, as a demotion closes them.
            Ending::KillSessions => {
                let _ = sql::kill_writers(conn).await;
            }
            Ending::RestartServer => self.supervisor.kill_to_fence(false),
        }
    }
}
