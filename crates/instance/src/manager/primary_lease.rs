//! The primary lease as this instance holds it: renewed while it is the
//! primary, released when it stops being one, and proven before writes.

use super::*;

impl<C: ClusterState> Manager<C> {
    pub(super) async fn release_lease_if_held(&self) {
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
    pub(super) async fn keep_lease(&self) -> bool {
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
        self.renewal_fresh() == Some(true)
    }

    /// This manager renewed the primary lease once, but too long ago to
    /// prove it still holds it (never renewed — a manager just started —
    /// is not lapsed: it renews before it judges).
    pub(super) fn lease_lapsed(&self) -> bool {
        self.cfg.spec.enable_primary_lease && self.renewal_fresh() == Some(false)
    }

    /// The primary lease is provably this instance's: renewed within the
    /// time after which it fences itself (leases off: always).
    pub(super) fn lease_proven(&self) -> bool {
        !self.cfg.spec.enable_primary_lease || self.renewal_fresh() == Some(true)
    }

    /// How long ago this manager last renewed the lease (None: it holds
    /// none), on the monotonic clock.
    pub(super) fn lease_age_ms(&self) -> Option<u64> {
        self.last_renew
            .lock()
            .unwrap()
            .map(|t| t.elapsed().as_millis() as u64)
    }

    /// Whether this manager's last renewal is recent enough to prove the
    /// lease; None when it never renewed.
    fn renewal_fresh(&self) -> Option<bool> {
        self.last_renew
            .lock()
            .unwrap()
            .map(|t| !lease::must_self_fence(0, t.elapsed().as_millis() as i64))
    }
}
