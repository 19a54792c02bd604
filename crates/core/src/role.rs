//! What an instance does with its own server, decided from the cluster's
//! targetPrimary / currentPrimary and what it observes locally.
//!
//! Every instance starts read-only. Only the instance that is both the
//! target and the current primary is ever made writable.

use cnmysql_api::ClusterStatus;

/// How to obtain a data directory when an instance starts with none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bootstrap {
    /// A brand-new cluster: initialise an empty server as the first primary.
    InitPrimary,
    /// Clone the named primary from a physical backup stream.
    CloneFrom(String),
    /// Start the server on the data that is already there.
    UseExisting,
    /// Do nothing yet, and say why.
    Wait(String),
    /// Remove the data there and clone the named primary: a replica's
    /// data that a machine restart may have left claiming transactions it
    /// lacks (`replica_durability::unsynced_next`). It holds nothing the
    /// primary lacks: the primary syncs its binary log before sending it.
    Reclone(String),
}

/// Decide how to get data. `has_data` is whether the data directory holds an
/// initialised server.
pub fn bootstrap(me: &str, status: &ClusterStatus, has_data: bool) -> Bootstrap {
    if has_data {
        return Bootstrap::UseExisting;
    }
    let target = status.target_primary.as_deref();
    let current = status.current_primary.as_deref();
    match (target, current) {
        // Only a cluster that never had a primary may start from nothing: an
        // empty directory on an established primary means lost data, and
        // initialising it would publish an empty database as the primary.
        (Some(t), None) if t == me && status.current_primary_timestamp.is_none() => {
            Bootstrap::InitPrimary
        }
        (Some(t), Some(c)) if t == me && c == me && status.current_primary_timestamp.is_none() => {
            Bootstrap::InitPrimary
        }
        (_, Some(c)) if c == me => Bootstrap::Wait(format!(
            "{me} is the current primary but its data directory is empty; refusing to initialise an empty primary \
             (restore the data or promote another instance)"
        )),
        (_, Some(c)) => Bootstrap::CloneFrom(c.to_string()),
        _ => Bootstrap::Wait("no primary has been elected yet".into()),
    }
}

/// How a server recovers its binary log after a crash, decided when it is
/// (re)started. A server that is no longer the primary rolls back the
/// transactions it had written to its binary log but not committed (their
/// clients never got an answer: the commit was waiting for a semi-sync
/// acknowledgement) instead of committing them, so a former primary killed
/// mid-commit can follow the new primary rather than being diverged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// Keep (commit) every transaction found in the binary log.
    AsPrimary,
    /// Roll back and truncate what was not committed.
    AsReplica,
}

/// The recovery for `me`: as a replica only when another instance is the
/// recorded primary and `me` is not the target. Without a recorded primary
/// (a new cluster), while `me` still is it, or once `me` is to become it
/// (from before it claims the role: a replica may already hold its
/// transactions), nothing is thrown away.
pub fn recovery(me: &str, status: &ClusterStatus) -> Recovery {
    let other_primary = status.current_primary.as_deref().is_some_and(|p| p != me);
    if other_primary && status.target_primary.as_deref() != Some(me) {
        Recovery::AsReplica
    } else {
        Recovery::AsPrimary
    }
}

/// The recovery of a server killed because it was deposed while writable
/// (`deposed`: its lease lapsed or passed on, a failover began from it):
/// as a replica only when the status names another instance as the
/// target or current primary. A failover from it may still be given up
/// (no safe candidate), and it is then the primary again: had it rolled
/// back the transactions that waited for an acknowledgement, a replica
/// that received one would hold it under a GTID the primary then hands
/// to a different transaction, a divergence no GTID comparison can see
/// (found by the local fault suite, seed 14888791570802437234). Kept
/// instead, such a transaction is at worst one the new primary lacks,
/// and the former primary is found diverged and heals.
pub fn recovery_when(me: &str, status: &ClusterStatus, deposed: bool) -> Recovery {
    let moving_away = status.target_primary.as_deref().is_some_and(|t| t != me);
    if deposed && moving_away {
        Recovery::AsReplica
    } else {
        recovery(me, status)
    }
}

/// The role this instance should play.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Desired {
    /// Writable primary.
    Primary,
    /// Become the primary: drain replication, take the lease, claim
    /// `currentPrimary`, then open writes.
    Promote,
    /// Read-only replica of `source`.
    Replica { source: String },
    /// A replica of `source` while a failover away from it chooses the new
    /// primary: read-only, receiving nothing more from it (what it has
    /// received is still applied).
    Detached { source: String },
    /// Read-only, no new replication source, with the reason (fenced,
    /// diverged, waiting for a primary).
    HoldReadOnly(String),
    /// The primary's place in a replica cluster: read-only, following the
    /// cluster's external `source` (`host:port`); the other instances
    /// follow it.
    DesignatedPrimary { source: String },
    /// The primary in a switchover to `to`: it stays writable, holding its
    /// lease, until `to` has caught up
    /// ([`crate::switchover::ready_to_hand_over`]), then turns read-only so
    /// `to` can drain the rest and take over.
    HandOver { to: String },
}

impl Desired {
    /// Any role in which this instance must not hold the primary lease.
    pub fn releases_lease(&self) -> bool {
        !matches!(self, Desired::Primary | Desired::Promote)
    }
}

/// The external source a replica cluster follows now (`status.replica`
/// enabled), as `host:port`.
pub fn replica_source(status: &ClusterStatus) -> Option<&str> {
    status
        .replica
        .as_ref()
        .filter(|r| r.enabled)
        .map(|r| r.source.as_str())
}

pub fn desired(me: &str, status: &ClusterStatus) -> Desired {
    if status.fenced_instances.iter().any(|n| n == me) {
        return Desired::HoldReadOnly("fenced".into());
    }
    if status.diverged_instances.iter().any(|n| n == me) {
        return Desired::HoldReadOnly(
            "diverged: its GTID history is not contained in the primary's".into(),
        );
    }
    let target = status.target_primary.as_deref();
    let current = status.current_primary.as_deref();
    if let Some(c) = current
        && status.failover_from.as_deref() == Some(c)
    {
        // A failover away from `c` has begun: nothing more is taken from
        // it, since what a replica receives (and acknowledges) now might be
        // missing from the instance promoted.
        if me == c {
            return Desired::HoldReadOnly("a failover away from it is under way".into());
        }
        if target != Some(me) {
            return Desired::Detached {
                source: c.to_string(),
            };
        }
    }
    match (target, current) {
        (Some(t), Some(c)) if t == me && c == me => match replica_source(status) {
            Some(source) => Desired::DesignatedPrimary {
                source: source.to_string(),
            },
            None => Desired::Primary,
        },
        (Some(t), _) if t == me => Desired::Promote,
        (Some(t), Some(c)) if c == me => Desired::HandOver { to: t.to_string() },
        (_, Some(c)) => Desired::Replica {
            source: c.to_string(),
        },
        _ => Desired::HoldReadOnly("waiting for a primary".into()),
    }
}

/// What a promoting instance must have applied before it opens writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drain {
    /// Planned switchover: everything the old primary wrote, read from the
    /// old primary itself once it is read-only. If it cannot be reached,
    /// wait: the control plane aborts the switchover after
    /// maxSwitchoverDelay, and failover (with its own checks) takes over.
    CatchUpWithOldPrimary,
    /// Failover (the old primary is fenced): everything already received.
    OwnRelayLog,
}

impl Drain {
    /// How long a promoting instance waits for the old primary's own
    /// answer (is it still writable, how far did it get). In a switchover
    /// the answer is what it drains to. In a failover the old primary was
    /// judged gone and is fenced: an answer is only a last check (a
    /// writable one is waited for), and a silent one (frozen, cut off)
    /// must not hold the promotion up.
    pub fn ask_old_primary_ms(self) -> u64 {
        match self {
            Drain::CatchUpWithOldPrimary => 1_500,
            Drain::OwnRelayLog => 300,
        }
    }
}

pub fn drain_rule(status: &ClusterStatus) -> Drain {
    if status.phase == Some(cnmysql_api::Phase::FailingOver) || status.current_primary.is_none() {
        Drain::OwnRelayLog
    } else {
        Drain::CatchUpWithOldPrimary
    }
}

/// May a server with history `mine` follow a source with history `source`?
/// Only when the source holds everything it has: anything else is divergence.
pub fn may_follow(
    mine: &cnmysql_gtid::History,
    source: &cnmysql_gtid::History,
) -> Result<(), String> {
    if source.contains(mine) {
        Ok(())
    } else {
        let extra = mine.sources_missing_from(source);
        Err(format!(
            "its GTID history ({mine}) holds transactions the primary ({source}) lacks, from source(s) {}",
            extra.join(", ")
        ))
    }
}

/// What the manager observes on its own server.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Local {
    pub read_only: bool,
    /// The instance replication is configured to follow, if any.
    pub source: Option<String>,
    pub io_running: bool,
    pub sql_running: bool,
    /// The IO thread is retrying a connection that failed (the server
    /// retries once a second at best) while its source's server is known
    /// to answer now: a cluster starting again, whose replicas were
    /// quicker than their primary, or a primary whose container restarted
    /// in place (taken back while still read-only).
    pub io_retrying_a_ready_source: bool,
}

/// One step towards the desired role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    SetReadOnly(bool),
    /// Stop replication and forget the source.
    ResetReplication,
    /// Point replication at `source` and start it.
    Follow(String),
    /// Replication is configured but a thread is stopped: start it.
    StartReplication,
    /// Connect the IO thread again now rather than at its next retry.
    Reconnect,
    /// Stop the IO thread (receive nothing more from the source); the SQL
    /// thread goes on applying what was received.
    StopReceiving,
}

/// The steps from `local` to `desired`, in order. Read-only always comes first
/// when moving away from primary; writes are opened last.
pub fn reconcile(desired: &Desired, local: &Local) -> Vec<Action> {
    let mut out = Vec::new();
    match desired {
        Desired::Promote => {}
        Desired::Primary => {
            if local.source.is_some() {
                out.push(Action::ResetReplication);
            }
            if local.read_only {
                out.push(Action::SetReadOnly(false));
            }
        }
        Desired::Replica { source } | Desired::DesignatedPrimary { source } => {
            if !local.read_only {
                out.push(Action::SetReadOnly(true));
            }
            if local.source.as_deref() != Some(source.as_str()) {
                out.push(Action::Follow(source.clone()));
            } else if !local.io_running || !local.sql_running {
                out.push(Action::StartReplication);
            } else if local.io_retrying_a_ready_source {
                out.push(Action::Reconnect);
            }
        }
        Desired::Detached { .. } => {
            if !local.read_only {
                out.push(Action::SetReadOnly(true));
            }
            if local.io_running {
                out.push(Action::StopReceiving);
            }
        }
        Desired::HoldReadOnly(_) | Desired::HandOver { .. } => {
            if !local.read_only {
                out.push(Action::SetReadOnly(true));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frozen or cut-off old primary never answers: in a failover the
    /// promoting candidate gives it a moment, not the 1.5 s a switchover
    /// gives the old primary it drains from (which cost every failover
    /// from a lost node 1.5 s).
    #[test]
    fn a_failover_does_not_wait_long_for_a_silent_old_primary() {
        let mut st = ClusterStatus {
            current_primary: Some("db-1".into()),
            target_primary: Some("db-2".into()),
            phase: Some(cnmysql_api::Phase::FailingOver),
            ..Default::default()
        };
        assert_eq!(drain_rule(&st), Drain::OwnRelayLog);
        assert!(drain_rule(&st).ask_old_primary_ms() <= 300);
        st.phase = Some(cnmysql_api::Phase::Switchover);
        assert_eq!(drain_rule(&st).ask_old_primary_ms(), 1_500);
    }

    fn status(target: Option<&str>, current: Option<&str>, ever: bool) -> ClusterStatus {
        ClusterStatus {
            target_primary: target.map(str::to_string),
            current_primary: current.map(str::to_string),
            current_primary_timestamp: ever.then(|| "2026-01-01T00:00:00Z".to_string()),
            ..Default::default()
        }
    }

    #[test]
    fn only_a_new_cluster_initialises_an_empty_primary() {
        assert_eq!(
            bootstrap("db-1", &status(Some("db-1"), None, false), false),
            Bootstrap::InitPrimary
        );
        assert!(matches!(
            bootstrap("db-1", &status(Some("db-1"), Some("db-1"), true), false),
            Bootstrap::Wait(_)
        ));
        assert_eq!(
            bootstrap("db-2", &status(Some("db-1"), Some("db-1"), true), false),
            Bootstrap::CloneFrom("db-1".into())
        );
        assert!(matches!(
            bootstrap("db-2", &status(Some("db-1"), None, false), false),
            Bootstrap::Wait(_)
        ));
        assert_eq!(
            bootstrap("db-1", &status(Some("db-1"), Some("db-1"), true), true),
            Bootstrap::UseExisting
        );
    }

    #[test]
    fn during_a_failover_nothing_more_is_taken_from_the_failed_primary() {
        let mut st = status(Some("db-1"), Some("db-1"), true);
        st.failover_from = Some("db-1".into());
        // Every replica stops receiving (the candidate too, until chosen),
        // and the old primary, should it wake, holds read-only.
        let detached = desired("db-2", &st);
        assert_eq!(
            detached,
            Desired::Detached {
                source: "db-1".into()
            }
        );
        assert!(matches!(desired("db-1", &st), Desired::HoldReadOnly(_)));
        let receiving = Local {
            read_only: true,
            source: Some("db-1".into()),
            io_running: true,
            sql_running: true,
            io_retrying_a_ready_source: false,
        };
        assert_eq!(
            reconcile(&detached, &receiving),
            vec![Action::StopReceiving]
        );
        let stopped = Local {
            io_running: false,
            ..receiving
        };
        assert!(
            reconcile(&detached, &stopped).is_empty(),
            "the applier goes on"
        );
        // The candidate, once chosen, promotes; the others stay detached
        // until it is the current primary, then follow it.
        st.target_primary = Some("db-2".into());
        assert_eq!(desired("db-2", &st), Desired::Promote);
        assert!(matches!(desired("db-3", &st), Desired::Detached { .. }));
        st.current_primary = Some("db-2".into());
        assert_eq!(
            desired("db-3", &st),
            Desired::Replica {
                source: "db-2".into()
            }
        );
    }

    #[test]
    fn only_target_and_current_primary_is_writable() {
        assert_eq!(
            desired("db-1", &status(Some("db-1"), Some("db-1"), true)),
            Desired::Primary
        );
        assert_eq!(
            desired("db-2", &status(Some("db-1"), Some("db-1"), true)),
            Desired::Replica {
                source: "db-1".into()
            }
        );
        let mut fenced = status(Some("db-1"), Some("db-1"), true);
        fenced.fenced_instances.push("db-1".into());
        assert!(matches!(desired("db-1", &fenced), Desired::HoldReadOnly(_)));
    }

    #[test]
    fn a_replica_clusters_primary_follows_its_source_read_only_until_promoted() {
        let mut st = status(Some("db-1"), Some("db-1"), true);
        st.replica = Some(cnmysql_api::replica::ReplicaStatus {
            enabled: true,
            source: "east-rw:3306".into(),
            ..Default::default()
        });
        let d = desired("db-1", &st);
        assert_eq!(
            d,
            Desired::DesignatedPrimary {
                source: "east-rw:3306".into()
            }
        );
        assert!(d.releases_lease(), "read-only: no lease");
        let writable = Local {
            read_only: false,
            ..Default::default()
        };
        assert_eq!(
            reconcile(&d, &writable),
            vec![
                Action::SetReadOnly(true),
                Action::Follow("east-rw:3306".into())
            ],
            "a demoted primary turns read-only before it follows"
        );
        // Its replicas follow it as in any cluster.
        assert_eq!(
            desired("db-2", &st),
            Desired::Replica {
                source: "db-1".into()
            }
        );
        // Promoted: the source is forgotten, then writes open.
        st.replica.as_mut().unwrap().enabled = false;
        let following = Local {
            read_only: true,
            source: Some("east-rw:3306".into()),
            io_running: true,
            sql_running: true,
            ..Default::default()
        };
        assert_eq!(
            reconcile(&desired("db-1", &st), &following),
            vec![Action::ResetReplication, Action::SetReadOnly(false)]
        );
    }

    #[test]
    fn following_needs_containment() {
        let h = |t: &str| cnmysql_gtid::History::Mariadb(t.parse().unwrap());
        assert!(may_follow(&h("0-1-90"), &h("0-1-100,0-2-120")).is_ok());
        assert!(may_follow(&h("0-1-101"), &h("0-1-100,0-2-101")).is_err());
        assert!(may_follow(&h(""), &h("0-1-5")).is_ok());
    }

    #[test]
    fn a_replica_goes_read_only_before_following() {
        let local = Local {
            read_only: false,
            source: None,
            ..Default::default()
        };
        assert_eq!(
            reconcile(
                &Desired::Replica {
                    source: "db-1".into()
                },
                &local
            ),
            vec![Action::SetReadOnly(true), Action::Follow("db-1".into())]
        );
        let following = Local {
            read_only: true,
            source: Some("db-1".into()),
            io_running: true,
            sql_running: true,
            io_retrying_a_ready_source: false,
        };
        assert!(
            reconcile(
                &Desired::Replica {
                    source: "db-1".into()
                },
                &following
            )
            .is_empty()
        );
        let stopped = Local {
            io_running: false,
            ..following.clone()
        };
        assert_eq!(
            reconcile(
                &Desired::Replica {
                    source: "db-1".into()
                },
                &stopped
            ),
            vec![Action::StartReplication]
        );
        assert_eq!(
            reconcile(&Desired::Primary, &following),
            vec![Action::ResetReplication, Action::SetReadOnly(false)]
        );
        // Waiting for the next connect retry while the source is ready
        // already: connect now.
        let retrying = Local {
            io_retrying_a_ready_source: true,
            ..following.clone()
        };
        assert_eq!(
            reconcile(
                &Desired::Replica {
                    source: "db-1".into()
                },
                &retrying
            ),
            vec![Action::Reconnect]
        );
    }

    #[test]
    fn only_a_server_that_is_no_longer_primary_recovers_as_a_replica() {
        let mut st = ClusterStatus::default();
        assert_eq!(recovery("db-1", &st), Recovery::AsPrimary);
        st.current_primary = Some("db-1".into());
        st.target_primary = Some("db-2".into());
        assert_eq!(recovery("db-1", &st), Recovery::AsPrimary);
        // The target of a switchover or failover is about to claim the role.
        assert_eq!(recovery("db-2", &st), Recovery::AsPrimary);
        assert_eq!(recovery("db-3", &st), Recovery::AsReplica);
        st.current_primary = Some("db-2".into());
        assert_eq!(recovery("db-1", &st), Recovery::AsReplica);
        assert_eq!(recovery("db-2", &st), Recovery::AsPrimary);
    }

    #[test]
    fn a_deposed_server_rolls_back_only_once_another_instance_is_to_be_primary() {
        let mut st = ClusterStatus {
            current_primary: Some("db-1".into()),
            target_primary: Some("db-1".into()),
            ..Default::default()
        };
        // A failover begun from it, no candidate chosen (or given up): it
        // may be the primary again, and a replica may hold what waited.
        st.failover_from = Some("db-1".into());
        assert_eq!(recovery_when("db-1", &st, true), Recovery::AsPrimary);
        // The candidate is named: it will not be.
        st.target_primary = Some("db-2".into());
        assert_eq!(recovery_when("db-1", &st, true), Recovery::AsReplica);
        assert_eq!(recovery_when("db-1", &st, false), Recovery::AsPrimary);
        st.current_primary = Some("db-2".into());
        assert_eq!(recovery_when("db-1", &st, false), Recovery::AsReplica);
    }
}
