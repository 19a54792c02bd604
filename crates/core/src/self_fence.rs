//! How an instance that must stop accepting writes gets there, whatever
//! holds it up (DESIGN §4, "a deposed primary is read-only before anything
//! else").
//!
//! Setting the server read-only waits for the commits in flight. A commit
//! waiting for a semi-sync acknowledgement that will never come (the
//! replicas follow a new primary now) holds it up for the whole semi-sync
//! timeout, forever under `dataDurability: required` — and under
//! `preferred` the commit is then acknowledged to its client without any
//! replica holding it: a write that the new primary never sees. So the
//! request to become read-only gets a short budget; what happens when the
//! budget runs out depends on whether this instance may still be the
//! primary:
//!
//! - **deposed** (it cannot prove it holds the primary lease, or the lease
//!   is someone else's) or **stopping**: mysqld is killed. Nothing it has
//!   not acknowledged yet is ever acknowledged; the transactions that
//!   waited are rolled back when it starts again as a replica
//!   (`role::Recovery::AsReplica`), so it can rejoin instead of being kept
//!   out as diverged. Killing the waiting sessions instead would leave those
//!   transactions committed on it alone.
//! - **handing over** while it holds the lease (a switchover): the replicas
//!   are there to acknowledge, so the writers' sessions are closed and the
//!   request repeated.

/// How long a request to become read-only may take before it escalates.
pub const READ_ONLY_BUDGET_MS: u64 = 500;

/// Why the instance is being made read-only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// It cannot prove it holds the primary lease (or another instance
    /// holds it): another primary may exist or be about to.
    Deposed,
    /// The manager is stopping (SIGTERM, the Pod is deleted): whatever it
    /// was, it will not be the primary after this.
    Stopping,
    /// An ordinary demotion by the instance that still holds the lease:
    /// a switchover's hand-over, fencing, or a replica's role.
    Demotion,
}

/// Whether a server that must stop writing is killed without first being
/// asked to turn read-only: it is still `writable` although its primary
/// lease expired `lease_age_ms` ago (another instance may hold it and
/// write). A manager that runs makes its server read-only 5 s before the
/// lease expires, so one still writable after it did not run: it was
/// frozen, stopped or starved, and resumes now. Asking would wait out
/// [`READ_ONLY_BUDGET_MS`] behind the commits that waited through the stall
/// or came in with it — on MariaDB with `@@read_only` still 0, beside the
/// new primary — and end in the same kill.
pub fn kill_at_once(cause: Cause, lease_age_ms: Option<u64>, writable: bool) -> bool {
    cause != Cause::Demotion
        && writable
        && lease_age_ms.is_some_and(|age| age >= crate::lease::TTL_MS as u64)
}

/// What to do once the budget ran out and the server is still writable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Escalation {
    /// Close the writers' sessions and ask again.
    CloseSessionsAndRetry,
    /// Kill mysqld; it starts again read-only, recovering as a replica
    /// when `as_replica` (its unacknowledged tail is rolled back).
    KillServer { as_replica: bool },
}

/// The escalation for a read-only request that did not finish in time.
pub fn escalation(cause: Cause) -> Escalation {
    match cause {
        Cause::Deposed => Escalation::KillServer { as_replica: true },
        // A stopping primary that still held its lease recovers by the
        // cluster status at its next start (it may be the primary again).
        Cause::Stopping => Escalation::KillServer { as_replica: false },
        Cause::Demotion => Escalation::CloseSessionsAndRetry,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deposed_primary_is_killed_and_rolls_back_what_waited() {
        assert_eq!(
            escalation(Cause::Deposed),
            Escalation::KillServer { as_replica: true }
        );
    }

    #[test]
    fn a_stopping_instance_never_waits_out_its_grace_period() {
        // The frozen primary of issue 18 stayed writable for 65 s while
        // "shutting down": its read-only request waited behind a commit
        // that no replica would acknowledge.
        assert!(matches!(
            escalation(Cause::Stopping),
            Escalation::KillServer { .. }
        ));
    }

    #[test]
    fn a_writable_server_whose_lease_expired_is_killed_without_asking() {
        // The real-node fault suite saw a primary resumed from a 20 s
        // freeze stay writable for over a second while its read-only
        // request waited out the budget behind commits no replica would
        // acknowledge, beside the primary promoted meanwhile.
        let ttl = crate::lease::TTL_MS as u64;
        assert!(kill_at_once(Cause::Deposed, Some(20_000), true));
        assert!(kill_at_once(Cause::Stopping, Some(ttl), true));
        assert!(
            !kill_at_once(Cause::Deposed, Some(20_000), false),
            "read-only already"
        );
        assert!(
            !kill_at_once(Cause::Deposed, Some(ttl - 1), true),
            "not expired: nobody else may write yet, so it is asked"
        );
        assert!(!kill_at_once(Cause::Deposed, None, true), "never held it");
        assert!(!kill_at_once(Cause::Demotion, Some(20_000), true));
    }

    #[test]
    fn an_ordinary_demotion_closes_sessions_instead() {
        assert_eq!(
            escalation(Cause::Demotion),
            Escalation::CloseSessionsAndRetry
        );
    }
}
