//! A primary that is leaving on notice hands over first.
//!
//! On Kubernetes a Pod that is deleted gracefully (a drain, an eviction,
//! `kubectl delete pod`) is told so before its processes are stopped: it
//! carries a deletion timestamp and its container runs its preStop hook.
//! A primary leaving that way is a planned change, not a failure: the
//! control plane switches over to the best replica as a user's switchover
//! would, and the leaving primary's hook holds its shutdown until the
//! handover is done ([`prestop`]), so writes stop only for the switchover
//! itself instead of a failover's lease wait.
//!
//! A node that is cordoned (`kubectl cordon`, the first thing `kubectl
//! drain` does) is notice too: its Pods will be evicted next, and the
//! primary's eviction is refused by its disruption budget so that it is
//! never simply taken. A primary on such a node hands over while nothing
//! is wrong yet; no replica there is handed to. Then the drain evicts it
//! as a replica, one at a time as the budgets allow.

use cnmysql_api::ClusterStatus;

use crate::status::Snapshot;

/// How long a leaving primary's hook waits for a handover to start; none
/// starting by then (no healthy replica, a single instance, the control
/// plane away) it lets the shutdown go on.
pub const START_WAIT_MS: i64 = 5_000;

/// How long a leaving primary's hook waits at most for the handover to
/// finish (a switchover stuck longer is given up by its own deadline).
pub const FINISH_WAIT_MS: i64 = 60_000;

/// What to do about instances leaving on notice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handover {
    /// The primary is not leaving (or no primary is settled): nothing.
    None,
    /// Switch over from the leaving primary to this replica; `cordoned`
    /// when it is its node being drained rather than its Pod deleted.
    Start {
        from: String,
        to: String,
        cordoned: bool,
    },
    /// The primary is leaving but no replica can take over: why.
    Impossible {
        primary: String,
        why: String,
        cordoned: bool,
    },
}

/// The switchover to start when the settled primary is among `leaving`
/// (instances whose place is going away on notice) or `cordoned` (on a
/// node about to be drained), to the most caught-up healthy replica that
/// is neither.
pub fn decide(s: &Snapshot, leaving: &[String], cordoned: &[String]) -> Handover {
    let Ok(primary) = crate::upgrade::gates::settled_primary(s) else {
        return Handover::None;
    };
    let is = |list: &[String], n: &str| list.iter().any(|l| l == n);
    let on_cordoned = is(cordoned, primary) && !is(leaving, primary);
    if !on_cordoned && !is(leaving, primary) {
        return Handover::None;
    }
    let impossible = |why: String| Handover::Impossible {
        primary: primary.to_string(),
        why,
        cordoned: on_cordoned,
    };
    if s.spec.instances <= 1 {
        return impossible("a single instance".into());
    }
    let excluded: Vec<String> = leaving.iter().chain(cordoned).cloned().collect();
    match crate::upgrade::gates::switchover_target(s, primary, &excluded) {
        Some(to) => Handover::Start {
            from: primary.to_string(),
            to,
            cordoned: on_cordoned,
        },
        None => impossible(
            s.instances
                .iter()
                .filter(|o| o.name != primary)
                .map(|o| format!("{}: {}", o.name, why_not(s, &o.name, leaving, cordoned)))
                .collect::<Vec<_>>()
                .join("; "),
        ),
    }
}

/// Why replica `name` cannot take the primary role over now.
fn why_not(s: &Snapshot, name: &str, leaving: &[String], cordoned: &[String]) -> String {
    if leaving.iter().any(|l| l == name) {
        return "leaving too".into();
    }
    if cordoned.iter().any(|l| l == name) {
        return "on a cordoned node too".into();
    }
    crate::switchover::eligible(s, name)
        .err()
        .map(|r| r.explain(name))
        .unwrap_or_else(|| "behind another replica".into())
}

/// How long a primary that handed over keeps its address answering before
/// its shutdown goes on. The Services that routed clients to it follow the
/// new labels only once the endpoint controller and every node's
/// kube-proxy have (kube-proxy programs at most once a second by default);
/// a Pod gone meanwhile turns clients' connection attempts into packets to
/// a dead address, which hang until the client's own timeout, where the
/// read-only former primary answers them at once. On the real node
/// rw took up to about 3 s to move on a busy two-core machine; the wait
/// costs nothing but the Pod's termination time.
pub const ROUTES_SETTLE_MS: u64 = 5_000;

/// What a leaving instance's preStop hook does now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PreStop {
    /// Hold the shutdown a little longer.
    Wait,
    /// Let the shutdown go on, and why.
    Go(&'static str),
    /// Handed over: let the shutdown go on after this many milliseconds,
    /// answering meanwhile ([`ROUTES_SETTLE_MS`]).
    GoAfter(u64),
}

/// Decide for instance `me`, whose hook has waited `waited_ms`, given the
/// cluster status as it stands now.
pub fn prestop(me: &str, status: &ClusterStatus, waited_ms: i64) -> PreStop {
    let current = status.current_primary.as_deref();
    let target = status.target_primary.as_deref();
    if current != Some(me) {
        return PreStop::GoAfter(ROUTES_SETTLE_MS);
    }
    if status.primary_failing_since.is_some() {
        return PreStop::Go("failing over: no handover to wait for");
    }
    if status.hibernated {
        return PreStop::Go("hibernating: every instance stops, nothing to hand over to");
    }
    if waited_ms >= FINISH_WAIT_MS {
        return PreStop::Go("the handover did not finish in time");
    }
    match target {
        Some(t) if t != me => PreStop::Wait,
        _ if waited_ms < START_WAIT_MS => PreStop::Wait,
        _ => PreStop::Go("no handover started: nothing to hand over to"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{primary, replica, snapshot};

    fn settled() -> Snapshot {
        let mut obs = vec![
            primary("db-1", "0-1-100"),
            replica("db-2", "0-1-100"),
            replica("db-3", "0-1-100"),
        ];
        for o in &mut obs {
            if let Some(r) = o.status.as_mut().and_then(|st| st.replication.as_mut()) {
                r.io_state = "Yes".into();
            }
        }
        let mut s = snapshot(obs);
        s.status.current_primary = Some("db-1".into());
        s.status.target_primary = Some("db-1".into());
        s
    }

    #[test]
    fn a_leaving_primary_hands_over_to_a_replica_that_stays() {
        let s = settled();
        let start = |from: &str, to: &str| Handover::Start {
            from: from.into(),
            to: to.into(),
            cordoned: false,
        };
        let decide = |s: &Snapshot, leaving: &[String]| decide(s, leaving, &[]);
        assert_eq!(decide(&s, &[]), Handover::None);
        assert_eq!(
            decide(&s, &["db-2".into()]),
            Handover::None,
            "a replica leaving changes nothing"
        );
        assert_eq!(decide(&s, &["db-1".into()]), start("db-1", "db-2"));
        assert_eq!(
            decide(&s, &["db-1".into(), "db-2".into()]),
            start("db-1", "db-3"),
            "never to another leaving instance"
        );
        match decide(&s, &["db-1".into(), "db-2".into(), "db-3".into()]) {
            Handover::Impossible { primary, why, .. } => {
                assert_eq!(primary, "db-1");
                assert_eq!(why, "db-2: leaving too; db-3: leaving too");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_primary_on_a_cordoned_node_hands_over_to_a_replica_elsewhere() {
        let s = settled();
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            decide(&s, &[], &names(&["db-2"])),
            Handover::None,
            "a replica on a cordoned node changes nothing"
        );
        assert_eq!(
            decide(&s, &[], &names(&["db-1", "db-2"])),
            Handover::Start {
                from: "db-1".into(),
                to: "db-3".into(),
                cordoned: true
            },
            "never to another instance on a cordoned node"
        );
        // Deleted on notice and cordoned: the deletion is what it is.
        assert!(matches!(
            decide(&s, &names(&["db-1"]), &names(&["db-1"])),
            Handover::Start {
                cordoned: false,
                ..
            }
        ));
        // The whole cluster on one cordoned node: it stays primary.
        match decide(&s, &[], &names(&["db-1", "db-2", "db-3"])) {
            Handover::Impossible { why, cordoned, .. } => {
                assert!(cordoned);
                assert_eq!(
                    why,
                    "db-2: on a cordoned node too; db-3: on a cordoned node too"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn no_handover_while_a_primary_change_is_under_way() {
        let mut s = settled();
        s.status.target_primary = Some("db-2".into());
        assert_eq!(decide(&s, &["db-1".into()], &[]), Handover::None);
        assert_eq!(decide(&s, &[], &["db-1".into()]), Handover::None);
        let mut s = settled();
        s.status.primary_failing_since = Some("2026-01-01T00:00:00Z".into());
        assert_eq!(decide(&s, &["db-1".into()], &[]), Handover::None);
    }

    #[test]
    fn the_hook_holds_the_primary_until_the_handover_is_done() {
        let mut st = ClusterStatus {
            current_primary: Some("db-1".into()),
            target_primary: Some("db-1".into()),
            ..Default::default()
        };
        assert_eq!(prestop("db-2", &st, 0), PreStop::GoAfter(ROUTES_SETTLE_MS));
        // Waiting for the control plane to start the handover, not forever.
        assert_eq!(prestop("db-1", &st, 0), PreStop::Wait);
        assert!(matches!(
            prestop("db-1", &st, START_WAIT_MS),
            PreStop::Go(_)
        ));
        // Under way: held until another instance is primary.
        st.target_primary = Some("db-2".into());
        assert_eq!(prestop("db-1", &st, START_WAIT_MS + 1), PreStop::Wait);
        assert!(matches!(
            prestop("db-1", &st, FINISH_WAIT_MS),
            PreStop::Go(_)
        ));
        st.current_primary = Some("db-2".into());
        assert_eq!(
            prestop("db-1", &st, 100),
            PreStop::GoAfter(ROUTES_SETTLE_MS)
        );
        // A failover does not wait on the hook.
        let failing = ClusterStatus {
            current_primary: Some("db-1".into()),
            target_primary: Some("db-1".into()),
            primary_failing_since: Some("2026-01-01T00:00:00Z".into()),
            ..Default::default()
        };
        assert!(matches!(prestop("db-1", &failing, 0), PreStop::Go(_)));
    }
}
