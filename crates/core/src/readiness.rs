//! When an instance is ready (it serves its Services; on Kubernetes its
//! readiness probe passes): a pure function of the role it should play
//! and what its server shows. A replica, or a replica cluster's designated
//! primary, is ready while it replicates healthily from the source it
//! should; a primary while it is writable.
//!
//! A designated primary that cannot follow its source yet (just demoted,
//! its new source still catching up with it) is not ready, yet the local
//! platform's rw keeps routing to it (`services.rs`): what follows it must
//! keep reading its last transactions.

use crate::role::Desired;
use crate::status::{ReplicationStatus, Role};

/// What the server showed, as readiness needs it.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// The manager's phase is Running (mysqld answers, nothing under way).
    pub running: bool,
    pub role: Role,
    pub read_only: bool,
    /// Its replication, and whether it is from the source `desired` names.
    pub replication: Option<(&'a ReplicationStatus, bool)>,
    /// It follows a binlog archive and the last read and batch went well
    /// (`archive_replica`).
    pub archive_following: bool,
    /// A primary read-only because a volume is nearly full
    /// (`disk_guard.rs`): it stays ready, so clients reach it and are told
    /// at once that writes are refused, and reads go on.
    pub writes_refused: bool,
}

/// Whether the instance is ready for the role `desired` gives it.
pub fn ready(desired: Option<&Desired>, seen: Seen<'_>) -> bool {
    if !seen.running {
        return false;
    }
    let following = || {
        seen.read_only
            && seen
                .replication
                .is_some_and(|(r, from_source)| r.healthy() && from_source)
    };
    match desired {
        // A switchover's primary serves until it hands over.
        Some(Desired::Primary) => {
            seen.role == Role::Primary && (!seen.read_only || seen.writes_refused)
        }
        Some(Desired::HandOver { .. }) => seen.role == Role::Primary && !seen.read_only,
        // Replicating, healthy, from the source it should: a replica still
        // on a former primary (a switchover just happened) is not ready
        // until it has moved to the new one.
        Some(Desired::Replica { .. }) => following(),
        Some(Desired::DesignatedPrimary { .. }) => {
            following() || (seen.read_only && seen.archive_following)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy() -> ReplicationStatus {
        ReplicationStatus {
            io_state: "Yes".into(),
            sql_running: true,
            ..Default::default()
        }
    }

    fn seen(role: Role, read_only: bool, r: Option<(&ReplicationStatus, bool)>) -> Seen<'_> {
        Seen {
            running: true,
            role,
            read_only,
            replication: r,
            archive_following: false,
            writes_refused: false,
        }
    }

    #[test]
    fn a_designated_primary_is_ready_following_its_source() {
        let d = Desired::DesignatedPrimary {
            source: "west-rw:3306".into(),
        };
        let ok = healthy();
        assert!(ready(
            Some(&d),
            seen(Role::Replica, true, Some((&ok, true)))
        ));
        // Just demoted, not following yet: not ready (rw still routes to
        // it on the local platform, see services.rs).
        assert!(!ready(Some(&d), seen(Role::Unknown, true, None)));
        assert!(!ready(Some(&d), seen(Role::Primary, false, None)));
        // Following a binlog archive: its loop's word.
        let mut a = seen(Role::Unknown, true, None);
        a.archive_following = true;
        assert!(ready(Some(&d), a));
    }

    #[test]
    fn a_replica_is_ready_only_following_its_source_healthily() {
        let d = Desired::Replica {
            source: "db-1".into(),
        };
        let ok = healthy();
        assert!(ready(
            Some(&d),
            seen(Role::Replica, true, Some((&ok, true)))
        ));
        assert!(
            !ready(Some(&d), seen(Role::Replica, true, Some((&ok, false)))),
            "still on a former primary"
        );
        assert!(!ready(Some(&d), seen(Role::Unknown, true, None)));
        let stopped = ReplicationStatus {
            sql_running: false,
            ..healthy()
        };
        assert!(!ready(
            Some(&d),
            seen(Role::Replica, true, Some((&stopped, true)))
        ));
    }

    #[test]
    fn a_primary_is_ready_writable_and_nothing_is_ready_unless_running() {
        assert!(ready(
            Some(&Desired::Primary),
            seen(Role::Primary, false, None)
        ));
        assert!(!ready(
            Some(&Desired::Primary),
            seen(Role::Primary, true, None)
        ));
        // Read-only because a volume is nearly full: still serving (reads,
        // and a plain refusal of writes).
        let mut full = seen(Role::Primary, true, None);
        full.writes_refused = true;
        assert!(ready(Some(&Desired::Primary), full));
        assert!(!ready(Some(&Desired::HandOver { to: "db-2".into() }), full));
        assert!(!ready(
            Some(&Desired::Promote),
            seen(Role::Primary, false, None)
        ));
        let mut s = seen(Role::Primary, false, None);
        s.running = false;
        assert!(!ready(Some(&Desired::Primary), s));
        assert!(!ready(None, seen(Role::Primary, false, None)));
    }
}
