//! The self-fence watchdog: every 200 ms, apart from the reconcile loop
//! (whose calls to the cluster state can hang while the network is cut,
//! for as long as a connection takes to time out), a server that held the
//! primary lease and can no longer prove it is made read-only. It is the
//! first thing that runs after a freeze; `fence.rs` kills a server whose
//! lease expired while it stayed writable without asking it first. The
//! same loop falls back from semi-sync when `preferred` durability says so
//! (`semi_sync.rs`).

use super::fence::Fencer;
use super::link::Link;
use super::*;

/// How often the watchdog looks.
const EVERY: Duration = Duration::from_millis(200);

/// How long the watchdog's probe of the server may take.
const PROBE_BUDGET: Duration = Duration::from_millis(500);

pub(super) struct Watchdog {
    pub link: Link,
    pub fencer: Arc<Fencer>,
}

impl Watchdog {
    pub async fn run(self) {
        loop {
            self.fence_if_deposed().await;
            super::semi_sync::fall_back_if_due(&self.link).await;
            if self.link.sleep_or_stop(EVERY).await {
                return;
            }
        }
    }

    /// Make this server read-only if it held the lease, cannot prove it
    /// any more and is still writable.
    async fn fence_if_deposed(&self) {
        let lease = &self.link.lease;
        if !lease.held() || lease.proven() || !self.link.server_running() {
            return;
        }
        let Some(pool) = self.link.pool() else { return };
        let probe = tokio::time::timeout(PROBE_BUDGET, async {
            let mut c = pool.get_conn().await?;
            let ro: Option<i64> = c.query_first("SELECT @@read_only").await?;
            anyhow::Ok(ro == Some(0))
        })
        .await;
        let writable = match probe {
            Ok(Ok(w)) => w,
            // Not reachable: not writable either.
            Ok(Err(_)) => false,
            // No answer in time: treat as writable.
            Err(_) => true,
        };
        if !writable {
            return;
        }
        tracing::error!(
            "the primary lease has not been renewed in time: making this primary read-only"
        );
        if let Err(e) = self
            .fencer
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
