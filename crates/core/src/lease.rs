//! The primary lease `<cluster>-primary`: who may be writable.
//!
//! An instance acquires the lease before it promotes itself, renews it well
//! inside its TTL while it is primary, and releases it on demotion, fencing
//! and shutdown. A primary that could not renew for `TTL - SELF_FENCE_MARGIN`
//! makes itself read-only, so that by the time failover has waited out the
//! TTL the old primary is already not writable (DESIGN §4).

use serde::{Deserialize, Serialize};

/// Lease duration.
pub const TTL_MS: i64 = 15_000;
/// How often the holder renews.
pub const RENEW_EVERY_MS: i64 = 5_000;
/// A holder that has not renewed for `TTL - margin` fences itself.
pub const SELF_FENCE_MARGIN_MS: i64 = 5_000;

/// The fields of a coordination.k8s.io/v1 Lease that matter to us.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    pub holder_identity: Option<String>,
    /// Unix milliseconds.
    pub acquire_time_ms: i64,
    pub renew_time_ms: i64,
    pub lease_duration_ms: i64,
    pub lease_transitions: u32,
}

impl Lease {
    /// Held by someone other than `me`, and not expired at `now`.
    pub fn held_by_other(&self, me: &str, now_ms: i64) -> bool {
        match &self.holder_identity {
            Some(h) if h != me => {
                now_ms < self.renew_time_ms.saturating_add(self.lease_duration_ms)
            }
            _ => false,
        }
    }

    /// Held by `who` and not expired.
    pub fn held_by(&self, who: &str, now_ms: i64) -> bool {
        self.holder_identity.as_deref() == Some(who)
            && now_ms < self.renew_time_ms.saturating_add(self.lease_duration_ms)
    }

    /// When it expires if nobody renews it.
    pub fn expires_at_ms(&self) -> i64 {
        self.renew_time_ms.saturating_add(self.lease_duration_ms)
    }

    /// Take or renew the lease for `me`. Errors when another holder has it.
    pub fn acquire(&self, me: &str, now_ms: i64) -> Result<Lease, LeaseError> {
        if self.held_by_other(me, now_ms) {
            return Err(LeaseError::HeldByOther {
                holder: self.holder_identity.clone().unwrap_or_else(|| "?".into()),
                until_ms: self.expires_at_ms(),
            });
        }
        let same = self.holder_identity.as_deref() == Some(me);
        Ok(Lease {
            holder_identity: Some(me.to_string()),
            acquire_time_ms: if same { self.acquire_time_ms } else { now_ms },
            renew_time_ms: now_ms,
            lease_duration_ms: TTL_MS,
            lease_transitions: self.lease_transitions
                + u32::from(!same && self.holder_identity.is_some()),
        })
    }

    /// Renew: only the current holder may, and only before expiry.
    pub fn renew(&self, me: &str, now_ms: i64) -> Result<Lease, LeaseError> {
        if !self.held_by(me, now_ms) {
            return Err(LeaseError::NotOurs);
        }
        self.acquire(me, now_ms)
    }

    /// Hand the lease from `from` to `to` before it expires: a failover
    /// that proved `from` can acknowledge nothing more
    /// (`failover::promote_before_expiry`). Only while `from` still holds
    /// it exactly as decided on (renewed at `seen_renew_ms`, not since):
    /// a renewal in between means `from` reached the store, and the
    /// decision is taken again.
    pub fn pass(
        &self,
        from: &str,
        to: &str,
        seen_renew_ms: i64,
        now_ms: i64,
    ) -> Result<Lease, LeaseError> {
        if self.holder_identity.as_deref() != Some(from) || self.renew_time_ms != seen_renew_ms {
            return Err(LeaseError::Changed);
        }
        Ok(Lease {
            holder_identity: Some(to.to_string()),
            acquire_time_ms: now_ms,
            renew_time_ms: now_ms,
            lease_duration_ms: TTL_MS,
            lease_transitions: self.lease_transitions + 1,
        })
    }

    /// Release if `me` holds it; anyone else's lease is left alone.
    pub fn release(&self, me: &str) -> Lease {
        if self.holder_identity.as_deref() == Some(me) {
            Lease {
                holder_identity: None,
                ..self.clone()
            }
        } else {
            self.clone()
        }
    }
}

/// Why the lease cannot be taken or renewed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    #[error("the primary lease is held by {holder} until {until_ms} ms")]
    HeldByOther { holder: String, until_ms: i64 },
    #[error("the primary lease is no longer ours")]
    NotOurs,
    #[error("the primary lease changed since it was read")]
    Changed,
}

/// A primary must make itself read-only when its last successful renewal
/// is this old.
pub fn must_self_fence(last_renewed_ms: i64, now_ms: i64) -> bool {
    now_ms >= last_renewed_ms.saturating_add(TTL_MS - SELF_FENCE_MARGIN_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time() {
        let l = Lease::default().acquire("a", 0).unwrap();
        assert!(l.acquire("b", 1_000).is_err());
        assert!(l.acquire("b", TTL_MS - 1).is_err());
        let taken = l.acquire("b", TTL_MS).unwrap();
        assert_eq!(taken.holder_identity.as_deref(), Some("b"));
        assert_eq!(taken.lease_transitions, 1);
        assert!(taken.renew("a", TTL_MS + 1).is_err());
    }

    #[test]
    fn release_frees_it_at_once() {
        let l = Lease::default().acquire("a", 0).unwrap().release("a");
        assert!(!l.held_by_other("b", 1));
        assert_eq!(
            Lease::default()
                .acquire("a", 0)
                .unwrap()
                .release("b")
                .holder_identity
                .as_deref(),
            Some("a")
        );
    }

    #[test]
    fn a_lease_passes_only_as_it_was_seen() {
        let l = Lease::default().acquire("a", 1_000).unwrap();
        let passed = l.pass("a", "b", 1_000, 2_000).unwrap();
        assert_eq!(passed.holder_identity.as_deref(), Some("b"));
        assert_eq!(passed.lease_transitions, 1);
        // The old holder cannot take it back, nor renew it.
        assert!(passed.acquire("a", 2_001).is_err());
        assert!(passed.renew("a", 2_001).is_err());
        // The candidate's own take is a renewal.
        assert_eq!(passed.acquire("b", 2_500).unwrap().lease_transitions, 1);
        // Renewed since it was seen, or someone else's: nothing passes.
        let renewed = l.renew("a", 1_500).unwrap();
        assert_eq!(
            renewed.pass("a", "b", 1_000, 2_000),
            Err(LeaseError::Changed)
        );
        assert_eq!(l.pass("c", "b", 1_000, 2_000), Err(LeaseError::Changed));
    }

    #[test]
    fn a_holder_fences_itself_before_others_may_take_over() {
        let renewed = 1_000;
        // It fences itself strictly before the lease expires for others.
        let fence_at = (renewed..).find(|t| must_self_fence(renewed, *t)).unwrap();
        let l = Lease::default().acquire("a", renewed).unwrap();
        let free_at = (renewed..).find(|t| !l.held_by_other("b", *t)).unwrap();
        assert!(fence_at + 1_000 <= free_at, "{fence_at} vs {free_at}");
    }
}
