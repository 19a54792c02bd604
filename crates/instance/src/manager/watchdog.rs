//! The self-fence watchdog: every 200 ms, apart from the reconcile loop
//! (whose calls to the cluster state can hang while the network is cut,
//! for as long as a connection takes to time out), a server that held the
//! primary lease and can no longer prove it is made read-only. It is the
//! first thing that runs after a freeze, and it knows one: its own loop
//! stalled. A primary that runs again after a stall, without its lease and
//! with commits waiting for acknowledgements, has its mysqld killed at
//! once (`self_fence::kill_at_once`) instead of being asked to turn
//! read-only behind those commits while it stays writable.

use super::*;

/// How often the watchdog looks.
const EVERY: Duration = Duration::from_millis(200);

/// How long the watchdog's probe of the server may take.
const PROBE_BUDGET: Duration = Duration::from_millis(500);

impl<C: ClusterState> Manager<C> {
    pub(super) async fn self_fence_watchdog(self: Arc<Self>) {
        let mut stalled_ms = 0;
        loop {
            let began = Instant::now();
            self.fence_if_deposed(stalled_ms).await;
            self.fall_back_if_due().await;
            if self.sleep_or_stop(EVERY).await {
                return;
            }
            // Longer than a round can take: the process did not run.
            stalled_ms = began.elapsed().saturating_sub(EVERY).as_millis() as u64;
        }
    }

    /// Make this server read-only if it held the lease, cannot prove it
    /// any more and is still writable. `stalled_ms`: how long the last
    /// round overran.
    async fn fence_if_deposed(&self, stalled_ms: u64) {
        let held = self.last_renew.lock().unwrap().is_some();
        if !held
            || self.lease_proven()
            || !matches!(self.supervisor.state(), ServerState::Running { .. })
        {
            return;
        }
        let Some(pool) = self.pool() else { return };
        let probe = tokio::time::timeout(PROBE_BUDGET, async {
            let mut c = pool.get_conn().await?;
            let row: Option<(i64, u64)> = c
                .query_first(flavor::read_only_and_ack_waiters(self.cfg.flavor()).text)
                .await?;
            anyhow::Ok(row.unwrap_or((1, 0)))
        })
        .await;
        let (writable, waiters) = match probe {
            Ok(Ok((read_only, waiters))) => (read_only == 0, Some(waiters)),
            // Not reachable: not writable either.
            Ok(Err(_)) => (false, Some(0)),
            // No answer in time: writable, and commits may wait.
            Err(_) => (true, None),
        };
        if !writable {
            return;
        }
        if self_fence::kill_at_once(stalled_ms, waiters) {
            self.kill_deposed_server(&format!(
                "ran again after a stall of {stalled_ms} ms without its primary lease, {} waiting for acknowledgements no replica is known to send",
                waiters.map_or("commits perhaps".to_string(), |n| format!("{n} commit(s)"))
            ));
            return;
        }
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
