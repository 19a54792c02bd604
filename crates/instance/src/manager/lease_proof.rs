//! When this manager last took or renewed the primary lease, on the
//! monotonic clock (a wall-clock step must not postpone self-fencing).
//! Convergence, which takes, renews and releases the lease
//! (`primary_lease.rs`), holds the one [`LeaseKeeper`]; the watchdog,
//! fencing, archiving and `/status` read it through a [`LeaseView`].

use std::time::Instant;

use cnmysql_core::lease;
use tokio::sync::watch;

/// What this manager knows of its hold on the lease.
#[derive(Clone, Copy, Debug, Default)]
struct Hold {
    /// Its last take or renewal (None: it holds none).
    renewed: Option<Instant>,
    /// Since then it found the lease held by another instance: a failover
    /// passed it on before its expiry (`Lease::pass`). Its own clock then
    /// proves nothing.
    taken: bool,
}

/// The writing end: held by convergence alone.
pub(super) struct LeaseKeeper {
    renewed: watch::Sender<Hold>,
}

/// The reading end.
#[derive(Clone)]
pub(super) struct LeaseView {
    /// `spec.enablePrimaryLease`: without it every primary proves it.
    enabled: bool,
    renewed: watch::Receiver<Hold>,
}

impl LeaseKeeper {
    pub fn new(enabled: bool) -> (LeaseKeeper, LeaseView) {
        let (tx, rx) = watch::channel(Hold::default());
        (
            LeaseKeeper { renewed: tx },
            LeaseView {
                enabled,
                renewed: rx,
            },
        )
    }

    /// Taken or renewed by an attempt that began at `attempt`.
    pub fn renewed(&self, attempt: Instant) {
        self.renewed.send_replace(Hold {
            renewed: Some(attempt),
            taken: false,
        });
    }

    /// Released: this manager holds none.
    pub fn released(&self) {
        self.renewed.send_replace(Hold::default());
    }

    /// Found held by another instance: not ours however recently renewed.
    pub fn taken(&self) {
        self.renewed.send_modify(|h| h.taken = h.renewed.is_some());
    }
}

impl LeaseView {
    /// When it was last taken or renewed (None: this manager holds none).
    pub fn last_renewed(&self) -> Option<Instant> {
        self.renewed.borrow().renewed
    }

    /// Another instance holds the lease this manager took.
    pub fn taken(&self) -> bool {
        self.renewed.borrow().taken
    }

    /// This manager took the lease and has not released it.
    pub fn held(&self) -> bool {
        self.last_renewed().is_some()
    }

    /// The primary lease is provably this instance's: renewed within the
    /// time after which it fences itself (leases off: always).
    pub fn proven(&self) -> bool {
        !self.enabled || self.fresh() == Some(true)
    }

    /// This manager renewed the primary lease once, but too long ago to
    /// prove it still holds it (never renewed — a manager just started —
    /// is not lapsed: it renews before it judges).
    pub fn lapsed(&self) -> bool {
        self.enabled && self.fresh() == Some(false)
    }

    /// Renewed within the lease's time to live: what `/status` reports as
    /// holding it (others may not take it yet).
    pub fn within_ttl(&self) -> bool {
        !self.taken()
            && self
                .age_ms()
                .is_some_and(|age| (age as i64) < lease::TTL_MS)
    }

    /// How long ago, for self-fencing, the lease stopped being provably
    /// this manager's: the age of its last renewal, or at least the whole
    /// lease when another instance holds it (who may write already).
    pub fn expired_age_ms(&self) -> Option<u64> {
        let age = self.age_ms()?;
        Some(if self.taken() {
            age.max(lease::TTL_MS as u64)
        } else {
            age
        })
    }

    /// How long ago this manager last renewed the lease (None: it holds
    /// none).
    pub fn age_ms(&self) -> Option<u64> {
        self.last_renewed().map(|t| t.elapsed().as_millis() as u64)
    }

    /// Whether the last renewal is recent enough to prove the lease; None
    /// when it never renewed.
    pub fn fresh(&self) -> Option<bool> {
        let taken = self.taken();
        self.last_renewed()
            .map(|t| !taken && !lease::must_self_fence(0, t.elapsed().as_millis() as i64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renewal_proves_the_lease_until_released_and_nothing_is_held_before() {
        let (keeper, view) = LeaseKeeper::new(true);
        assert!(!view.held() && !view.proven() && !view.lapsed());
        keeper.renewed(Instant::now());
        assert!(view.held() && view.proven() && !view.lapsed());
        if let Some(long_ago) = Instant::now().checked_sub(std::time::Duration::from_secs(60)) {
            keeper.renewed(long_ago);
            assert!(view.held() && !view.proven() && view.lapsed());
        }
        keeper.renewed(Instant::now());
        keeper.taken();
        assert!(
            view.held() && !view.proven() && view.lapsed() && !view.within_ttl(),
            "a lease another instance holds proves nothing, however fresh"
        );
        assert!(view.expired_age_ms() >= Some(lease::TTL_MS as u64));
        keeper.renewed(Instant::now());
        assert!(view.proven() && !view.taken());
        keeper.released();
        assert!(!view.held() && view.age_ms().is_none());
        keeper.taken();
        assert!(!view.taken(), "nothing held, nothing taken");
        let (_, off) = LeaseKeeper::new(false);
        assert!(
            off.proven() && !off.lapsed(),
            "without leases every primary proves it"
        );
    }
}
