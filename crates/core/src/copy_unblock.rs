//! A physical copy taken from the primary while no replica is there to
//! acknowledge its commits (issue 46: every replica lost at once, each
//! cloned again; the same bite peers' users meet, e.g. Vitess's backups
//! blocked by a commit waiting for semi-sync). Under `dataDurability:
//! required` a commit waits for an acknowledgement for good, and both
//! flavours' copies need a moment with no commit in flight to record a
//! consistent position (MySQL's clone; the `BLOCK_COMMIT` stage of
//! `mariadb-backup`): the copy waits for the commit, the commit for a
//! replica, the replica for the copy, and nothing comes back without a
//! person.
//!
//! So once a copy has waited [`PATIENCE`] with no replica connected, the
//! primary holds writes (read-only, the reason in its status) until a
//! replica is connected again, and ends the commits that wait: their
//! clients get an error, never an acknowledgement, so what `required`
//! promises (an acknowledged commit is on a second instance) holds.
//! On MariaDB the writers' sessions are closed (`sql::kill_writers`, as a
//! demotion does), which ends the waiting commits; MySQL's semi-sync
//! wait ignores `KILL`, so its server is restarted (read-only, recovering
//! as the primary it still is): switching the source side off would end
//! a killed waiter, but on a writable server also complete any commit
//! arriving meanwhile unacknowledged, and read-only first waits behind the
//! waiters. The cost: such a commit becomes visible on
//! the primary before a second instance holds it, and is lost if the
//! primary's data is lost before the copy completes.

use std::time::Duration;

use cnmysql_api::Flavor;

use crate::flavor::Sql;

/// How long a copy waits with no replica before writes are held.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// Why writes are held (the primary's refusal, in its status).
pub const REASON: &str = "a new replica is being copied and no replica is connected to \
                          acknowledge commits (dataDurability: required); writes resume once one is";

/// One row: the longest a copy has been served (seconds; NULL when none
/// is), how many sessions' commits wait for an acknowledgement, and how
/// many replicas are connected (their binary log dump sessions: counted
/// whether or not this server's semi-sync side is on, which a restarted
/// primary's is not until it takes writes). MySQL's clone donor sessions
/// show the command `Clone`; `mariadb-backup` runs `BACKUP STAGE`.
pub fn observe() -> Sql {
    Sql::new(
        "SELECT (SELECT MAX(TIME) FROM information_schema.PROCESSLIST \
                 WHERE LOWER(COMMAND) = 'clone' OR INFO LIKE 'BACKUP STAGE%'), \
                (SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                 WHERE STATE LIKE 'Waiting for semi-sync ACK%'), \
                (SELECT COUNT(*) FROM information_schema.PROCESSLIST \
                 WHERE COMMAND LIKE 'Binlog Dump%')",
    )
}

/// What the primary does this pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Take writes as usual.
    Take,
    /// Hold writes; end the waiting commits first when `end_waiting`.
    Hold { end_waiting: bool },
}

/// The step for a primary under `required` (with `preferred` the
/// timeout ends the wait by itself) with `replicas` connected, a
/// copy served for `copy_age`, writes already held for a copy or not, and
/// `waiting` commits.
pub fn step(
    required: bool,
    replicas: u64,
    copy_age: Option<Duration>,
    holding: bool,
    waiting: u64,
) -> Step {
    if !required || replicas > 0 {
        return Step::Take;
    }
    if holding || copy_age.is_some_and(|a| a >= PATIENCE) {
        return Step::Hold {
            end_waiting: waiting > 0,
        };
    }
    Step::Take
}

/// How each flavour ends a commit that waits for an acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Close the writers' sessions, the waiting ones among them (MariaDB).
    KillSessions,
    /// Restart the server: MySQL's wait does not end on `KILL`.
    RestartServer,
}

pub fn ending(flavor: Flavor) -> Ending {
    match flavor {
        Flavor::Mariadb => Ending::KillSessions,
        Flavor::Mysql => Ending::RestartServer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_held_only_for_a_copy_stuck_with_no_replica_under_required() {
        let long = Some(Duration::from_secs(12));
        let hold = |end_waiting| Step::Hold { end_waiting };
        assert_eq!(step(true, 0, long, false, 2), hold(true));
        assert_eq!(step(true, 0, long, false, 0), hold(false));
        assert_eq!(
            step(true, 1, long, true, 2),
            Step::Take,
            "a replica acknowledges"
        );
        assert_eq!(
            step(false, 0, long, false, 2),
            Step::Take,
            "preferred falls back"
        );
        assert_eq!(step(true, 0, None, false, 2), Step::Take, "no copy waits");
        let short = Some(Duration::from_secs(3));
        assert_eq!(
            step(true, 0, short, false, 2),
            Step::Take,
            "a replica may come back"
        );
        // Held until a replica is connected, even once the copy has
        // ended (a restarted donor ends it; its recipient tries again).
        assert_eq!(step(true, 0, None, true, 0), hold(false));
    }

    #[test]
    fn mysql_restarts_where_mariadb_kills_a_session() {
        assert_eq!(ending(Flavor::Mariadb), Ending::KillSessions);
        assert_eq!(ending(Flavor::Mysql), Ending::RestartServer);
    }
}
