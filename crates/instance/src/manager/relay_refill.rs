//! Whether this replica can still vouch for what it acknowledged.
//!
//! Semi-sync counts a replica's acknowledgement once the transaction is in
//! its relay log, before it is applied. A restart throws that log away:
//! MySQL recovers the relay log at start-up (`relay_log_recovery`),
//! MariaDB in GTID mode empties it whenever replication starts with both
//! threads stopped, and both empty it when the source is changed. Until
//! the replica has fetched again everything its source held after that
//! moment, a write it acknowledged may be in the source's binary log
//! alone, and a failover under `dataDurability: required` must not count
//! on it (`cnmysql_core::failover`). Found by the Kubernetes fault suite:
//! every instance killed at once, the primary's container held back by
//! the kubelet, a replica promoted without one acknowledged row (MariaDB,
//! seed 7316166684586105572).
//!
//! The proof: after the emptying, the source's position is read, and then
//! this replica's received history is seen to reach it. The source's
//! binary log held every write acknowledged before the emptying, and it
//! sends them again in order.

use super::*;

/// How often an unproven replica compares itself with its source.
const EVERY: Duration = Duration::from_millis(250);

/// The emptyings seen and the last one proven refilled.
#[derive(Default)]
pub(super) struct Refill {
    /// Replication started or pointed anew by this manager.
    starts: u64,
    /// (mysqld's pid, `starts`) when the received history was last shown
    /// to reach what the source held after them.
    proven: Option<(u32, u64)>,
}

impl<C: ClusterState> Manager<C> {
    /// Replication is about to start with its relay log emptied (see the
    /// module): what it acknowledged is unproven until fetched again.
    pub(super) fn relay_log_emptied(&self) {
        self.refill.lock().unwrap().starts += 1;
    }

    /// The emptying this proof is about: the server's pid and the starts.
    fn refill_key(&self) -> Option<(u32, u64)> {
        match self.supervisor.state() {
            ServerState::Running { pid } => Some((pid, self.refill.lock().unwrap().starts)),
            _ => None,
        }
    }

    /// For `/status`: true unless the current server's relay log is
    /// proven refilled since it was last emptied.
    pub(super) fn relay_refilling(&self) -> bool {
        let key = self.refill_key();
        key.is_none() || self.refill.lock().unwrap().proven != key
    }

    /// Proves refills as they happen, while the manager runs.
    pub(super) async fn relay_refill_loop(self: Arc<Self>) {
        loop {
            if let Err(e) = self.prove_refilled().await {
                tracing::debug!(error = %e, "relay log refill not proven yet");
            }
            if self.sleep_or_stop(EVERY).await {
                return;
            }
        }
    }

    async fn prove_refilled(&self) -> anyhow::Result<()> {
        let Some(key) = self.refill_key() else {
            return Ok(());
        };
        if self.refill.lock().unwrap().proven == Some(key) {
            return Ok(());
        }
        let desired = self.desired.lock().unwrap().clone();
        let Some(Desired::Replica { source }) = desired else {
            return Ok(());
        };
        // Read after the emptying (the key was taken before): the source's
        // binary log holds all that was acknowledged before it.
        let Some(src) = self.peer_status(&source).await.filter(|s| s.mysqld_running) else {
            return Ok(());
        };
        let Some(pool) = self.pool() else {
            return Ok(());
        };
        let mut conn = pool.get_conn().await?;
        let view = sql::observe(&mut conn, self.cfg.flavor()).await?;
        let mine = InstanceStatus {
            gtid_executed: view.gtid_executed,
            replication: view.replication,
            ..Default::default()
        };
        if !received_reaches(self.cfg.flavor(), &mine, &src.gtid_position) {
            return Ok(());
        }
        // Unless it was emptied again meanwhile.
        let now = self.refill_key();
        let mut refill = self.refill.lock().unwrap();
        if now == Some(key) && refill.starts == key.1 {
            refill.proven = Some(key);
        }
        Ok(())
    }
}
