//! The primary lease as this instance holds it: renewed while it is the
//! primary, released when it stops being one, and proven before writes
//! (the proof itself: `lease_proof.rs`).

use super::*;

impl<C: ClusterState> Manager<C> {
    pub(super) async fn release_lease_if_held(&self) {
        if self.link.lease.held() {
            match self.cluster.release_lease(&self.cfg.instance).await {
                Ok(()) => {
                    self.owners.lease.released();
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
        let last = self.link.lease.last_renewed();
        // Found taken (a failover from it given up since, say): asked again
        // at once rather than at the next renewal.
        let due = last.is_none_or(|t| t.elapsed().as_millis() as i64 >= lease::RENEW_EVERY_MS);
        if due || self.link.lease.taken() {
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
                    self.owners.lease.renewed(attempt);
                    self.fencer.reinstated();
                }
                Err(e) => match e.downcast_ref::<lease::LeaseError>() {
                    Some(lease::LeaseError::HeldByOther { holder, .. }) => {
                        tracing::error!(holder = %holder, "the primary lease was passed to another instance: this primary is deposed");
                        self.owners.lease.taken();
                    }
                    _ => tracing::warn!(error = %e, "cannot renew the primary lease"),
                },
            }
        }
        self.link.lease.fresh() == Some(true)
    }
}
