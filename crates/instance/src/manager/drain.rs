//! Draining before promotion: the target of a primary change applies
//! everything the old primary may have told a client was committed —
//! its final history and, when it closed its acknowledgements to hand
//! over (`hand_over_acks`), its binary log up to where it ended — or,
//! when the old primary is gone, everything this replica received.

use super::*;

/// How long one pass of the target waits for its applier to reach the
/// point it drains to: the server answers as soon as it is reached, and a
/// pass that gives up sooner costs a whole pass more before promotion.
const DRAIN_WAIT_SECS: f64 = 1.0;

impl<C: ClusterState> Manager<C> {
    /// Drain replication before promotion. True once everything the old
    /// primary wrote (or, if it is gone, everything received) is applied.
    pub(super) async fn drained(
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
        let patience = Duration::from_millis(role::drain_rule(status).ask_old_primary_ms());
        let (wait_for, binlog) = match old {
            Some(old) => match self.final_status_of(&old, patience).await {
                Some(st) if st.mysqld_running => match switchover::final_history_of(&old, &st) {
                    Ok(point) => {
                        let holds = history_reaches(f, &view.gtid_executed, &point.history);
                        let failing_over = status.failover_from.as_deref() == Some(old.as_str());
                        let receiver = self.receiver(repl, &old);
                        match switchover::drain_step(point, receiver, failing_over, holds) {
                            switchover::DrainStep::Apply(p) => (p.history, p.binlog),
                            switchover::DrainStep::ReceiveAgain => {
                                self.receive_again(conn, receiver, &old).await?;
                                return Ok(false);
                            }
                        }
                    }
                    Err(why) => {
                        self.set_phase(InstancePhase::Running, why);
                        return Ok(false);
                    }
                },
                _ if role::drain_rule(status) == role::Drain::CatchUpWithOldPrimary => {
                    self.set_phase(
                        InstancePhase::Running,
                        format!("waiting for {old} to hand over (switchover)"),
                    );
                    return Ok(false);
                }
                _ => (repl.received_gtid.clone(), None),
            },
            None => (repl.received_gtid.clone(), None),
        };
        if let Some(at) = &binlog
            && !super::hand_over_acks::applied_up_to(conn, f, at, DRAIN_WAIT_SECS).await?
        {
            self.set_phase(
                InstancePhase::Running,
                format!(
                    "applying the old primary's binary log up to {}:{} before promotion",
                    at.file, at.position
                ),
            );
            return Ok(false);
        }
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
            .query_first(flavor::wait_for_position(f, &wait_for, DRAIN_WAIT_SECS).text)
            .await?;
        let now = sql::observe(conn, f).await?;
        Ok(history_reaches(f, &now.gtid_executed, &wait_for))
    }

    /// The old primary's status, asked again within this pass while it
    /// answers that its history is not final yet (not read-only, or
    /// commits waiting until it closes its acknowledgements), for at most
    /// `FINAL_WITHIN`: the close comes tens of milliseconds after
    /// read-only, and a whole pass more of the target (its own server
    /// observed, the cluster's state read) is writes lost.
    async fn final_status_of(&self, old: &str, patience: Duration) -> Option<InstanceStatus> {
        const FINAL_WITHIN: Duration = Duration::from_millis(250);
        const ASK_AGAIN: Duration = Duration::from_millis(10);
        let started = Instant::now();
        loop {
            let st = self.peers.status_within(old, patience).await?;
            let settled = !st.mysqld_running || switchover::final_history_of(old, &st).is_ok();
            if settled || started.elapsed() + ASK_AGAIN >= FINAL_WITHIN {
                return Some(st);
            }
            tokio::time::sleep(ASK_AGAIN).await;
        }
    }

    /// A target that stopped receiving from the old primary during the
    /// hand-over (its receiver stopped by an error or by hand) could never
    /// reach what the old primary holds, and the old primary
    /// would stay read-only until the switchover is given up: it starts
    /// receiving again. One still connecting is waited for.
    async fn receive_again(
        &self,
        conn: &mut mysql_async::Conn,
        receiver: switchover::Receiver,
        old: &str,
    ) -> anyhow::Result<()> {
        if receiver == switchover::Receiver::Stopped {
            sql::exec_all(conn, &[flavor::start_replica(self.cfg.flavor())]).await?;
            tracing::info!(old, "receiving from the old primary again before promotion");
        }
        self.set_phase(
            InstancePhase::Running,
            format!("waiting to receive from {old} again before promotion"),
        );
        Ok(())
    }

    /// How this replica stands towards the old primary.
    fn receiver(
        &self,
        repl: &cnmysql_core::status::ReplicationStatus,
        old: &str,
    ) -> switchover::Receiver {
        let from_old = self
            .peers
            .source_name(&repl.source_host, repl.source_port)
            .as_deref()
            == Some(old);
        match repl.io_state.as_str() {
            "Yes" if from_old => switchover::Receiver::Receiving,
            "No" if from_old => switchover::Receiver::Stopped,
            _ => switchover::Receiver::Other,
        }
    }
}
