use super::*;
use crate::status_change::report;
pub(super) use crate::testutil::observe;
use crate::testutil::{replica, snapshot};

/// A controller past its warm-up.
pub(super) fn warm() -> Memory {
    Memory {
        first_step_ms: Some(0),
        ..Default::default()
    }
}

fn settled(s: &mut Snapshot, primary: &str) {
    s.status.current_primary = Some(primary.into());
    s.status.target_primary = Some(primary.into());
    s.status
        .gtid_executed_by_instance
        .insert(primary.into(), "0-1-100".into());
}

/// db-1 the settled primary, unreachable and failing since T0; db-2
/// at 0-1-100, db-3 at `db3`.
/// Whether `actions` record an Event with `reason`.
fn said(actions: &[Action], reason: &str) -> bool {
    actions
        .iter()
        .any(|a| matches!(a, Action::Event(e) if e.reason == reason))
}

pub(super) fn failing_primary(db3: &str) -> Snapshot {
    let mut s = snapshot(vec![
        crate::status::Observed {
            name: "db-1".into(),
            ordinal: 1,
            status: None,
            outdated: None,
        },
        replica("db-2", "0-1-100"),
        replica("db-3", db3),
    ]);
    settled(&mut s, "db-1");
    s.status.primary_failing_since = Some("2026-01-01T00:00:00Z".into());
    s
}

#[test]
fn a_dead_primary_is_fenced_then_the_candidate_targeted() {
    let mut s = failing_primary("0-1-90");
    s.now_ms = i64::MAX / 4;
    let mut m = Memory {
        last_current: Some("db-1".into()),
        ..warm()
    };
    let gone = ["db-1".to_string()];
    let step_of = |s: &Snapshot, m: &mut Memory| step(&observe(s, &gone), m);
    let actions = step_of(&s, &mut m);
    // Said; then fence first, then the lease, then the replicas stop
    // receiving from it: in that order.
    assert!(matches!(&actions[0], Action::Event(e) if e.reason == "PrimaryDown"));
    let actions = &actions[1..];
    assert_eq!(actions[0], Action::FenceOut("db-1".into()));
    assert_eq!(
        actions[1],
        Action::ReleaseLease {
            holder: "db-1".into()
        }
    );
    let Action::Status { change, then } = &actions[2] else {
        panic!("{actions:?}")
    };
    assert_eq!(then[0].reason, "FailoverStarted");
    assert!(change.apply(&mut s.status));
    assert_eq!(s.status.failover_from.as_deref(), Some("db-1"));
    assert_eq!(
        s.status.target_primary.as_deref(),
        Some("db-1"),
        "no candidate yet"
    );
    assert!(matches!(
        crate::role::desired("db-2", &s.status),
        crate::role::Desired::Detached { .. }
    ));

    // A status that lost the field again (an old CRD prunes it) is
    // said once, and the failover is begun again.
    let mut pruned = s.clone();
    pruned.status.failover_from = None;
    let again = step_of(&pruned, &mut m);
    assert!(said(&again, "FailoverStalled"), "{again:?}");
    let again = step_of(&pruned, &mut m);
    assert!(!said(&again, "FailoverStalled"), "said once: {again:?}");

    // No candidate while a replica may still receive from db-1.
    let actions = step_of(&s, &mut m);
    assert!(
        actions.iter().all(|a| !matches!(
            a,
            Action::Status {
                change: StatusChange::StartFailover { .. },
                ..
            }
        )),
        "{actions:?}"
    );
    assert!(said(&actions, "FailoverWaitingForReplicas"), "{actions:?}");

    // Said once while nothing changes.
    let again = step_of(&s, &mut m);
    assert!(!said(&again, "FailoverWaitingForReplicas"), "{again:?}");

    // Once both stopped receiving, the most advanced is targeted.
    for o in s.instances.iter_mut().filter(|o| o.name != "db-1") {
        if let Some(r) = o.status.as_mut().and_then(|st| st.replication.as_mut()) {
            r.io_state = "No".into();
        }
    }
    let actions = step_of(&s, &mut m);
    let actions: Vec<_> = actions
        .into_iter()
        .filter(|a| !matches!(a, Action::Event(_)))
        .collect();
    let Action::Status {
        change: StatusChange::StartFailover { old, candidate, .. },
        then,
    } = &actions[0]
    else {
        panic!("{actions:?}")
    };
    assert_eq!((old.as_str(), candidate.as_str()), ("db-1", "db-2"));
    assert_eq!(then[0].reason, "FailingOver");

    // Applied once; a second writer finds it no longer applies.
    let mut st = s.status.clone();
    let Action::Status { change, .. } = &actions[0] else {
        unreachable!()
    };
    assert!(change.apply(&mut st));
    assert_eq!(st.target_primary.as_deref(), Some("db-2"));
    assert!(!change.apply(&mut st));

    // The same step's report was computed before the failover started:
    // it must not overwrite the phase the failover set.
    assert_eq!(st.phase, Some(Phase::FailingOver));
    let stale = StatusChange::Report(Box::new(report(&s, &m)));
    assert!(!stale.apply(&mut st));
    assert_eq!(st.phase, Some(Phase::FailingOver));
    // Computed from the fresh status, it applies.
    let mut fresh = s.clone();
    fresh.status = st.clone();
    assert!(StatusChange::Report(Box::new(report(&fresh, &m))).apply(&mut st));
    assert_eq!(
        st.phase,
        Some(Phase::FailingOver),
        "still moving the primary"
    );
    assert_eq!(st.instance_states["db-1"].role, "unreachable");
    assert_eq!(st.instance_states["db-2"].role, "replica");
}

#[test]
fn a_paused_cluster_takes_no_action_and_says_why() {
    let mut s = failing_primary("0-1-90");
    s.now_ms = i64::MAX / 4;
    s.declared
        .asked
        .cluster
        .insert(crate::pause::ANNOTATION.into(), crate::pause::PAUSED.into());
    let mut m = Memory {
        last_current: Some("db-1".into()),
        ..warm()
    };
    let gone = ["db-1".to_string()];
    let step_of = |s: &Snapshot, m: &mut Memory| step(&observe(s, &gone), m);
    assert_eq!(step_of(&s, &mut m), Vec::new(), "no failover while paused");
    let summary = crate::phase::summarize(&s);
    assert!(
        summary.reason.starts_with("reconciliation paused"),
        "{}",
        summary.reason
    );
    // Removed: the failover goes ahead.
    s.declared.asked.cluster.clear();
    assert!(step_of(&s, &mut m).contains(&Action::FenceOut("db-1".into())));
}

#[test]
fn a_completed_change_restarts_the_held_down_former_primary_and_says_so() {
    let mut s = snapshot(vec![replica("db-2", "0-1-100")]);
    settled(&mut s, "db-2");
    s.status.phase = Some(Phase::FailingOver);
    let mut m = Memory {
        last_current: Some("db-1".into()),
        held_down: ["db-1".to_string()].into(),
        ..warm()
    };
    let actions = step(
        &Observation {
            snapshot: &s,
            lease: None,
            absent: &[],
            fence_early: false,
            primary_restarted_at_ms: None,
            primary_down_in_place: false,
            leaving: &[],
            cordoned: &[],
            backing_off: &[],
        },
        &mut m,
    );
    assert!(matches!(&actions[0], Action::Event(e) if e.reason == "FailoverCompleted"));
    assert!(actions.contains(&Action::Restart("db-1".into())));
    assert!(m.held_down.is_empty() && m.released.contains("db-1"));
    assert_eq!(m.last_current.as_deref(), Some("db-2"));
    // Said once.
    let again = step(
        &Observation {
            snapshot: &s,
            lease: None,
            absent: &[],
            fence_early: false,
            primary_restarted_at_ms: None,
            primary_down_in_place: false,
            leaving: &[],
            cordoned: &[],
            backing_off: &[],
        },
        &mut m,
    );
    assert!(!again.iter().any(|a| matches!(a, Action::Event(_))));
}

#[test]
fn a_report_applies_only_when_something_changed() {
    let mut s = snapshot(vec![replica("db-2", "0-1-100")]);
    settled(&mut s, "db-2");
    let m = Memory::default();
    let change = StatusChange::Report(Box::new(report(&s, &m)));
    let mut st = s.status.clone();
    assert!(change.apply(&mut st));
    assert!(!change.apply(&mut st), "an unchanged report writes nothing");
    let blocked = Memory {
        last_block: "failover of db-1 blocked: x".into(),
        ..Default::default()
    };
    let r = report(&s, &blocked);
    assert_eq!(r.summary.phase, Phase::Degraded);
}

#[test]
fn an_instance_scaled_away_gives_up_its_reinit_slot_and_requests() {
    // The platforms observe every declared instance, reachable or not.
    let mut s = snapshot(vec![
        crate::testutil::primary("db-1", "0-1-100"),
        replica("db-2", "0-1-100"),
    ]);
    settled(&mut s, "db-2");
    s.status.reinitializing = Some("db-3".into());
    s.status.reinit_requests = vec!["db-1".into(), "db-3".into()];
    let change = StatusChange::Report(Box::new(report(&s, &Memory::default())));
    let mut st = s.status.clone();
    assert!(change.apply(&mut st));
    assert_eq!(st.reinitializing, None);
    assert_eq!(st.reinit_requests, vec!["db-1".to_string()]);
    // A declared instance keeps its slot.
    s.status.reinitializing = Some("db-1".into());
    let mut st = s.status.clone();
    StatusChange::Report(Box::new(report(&s, &Memory::default()))).apply(&mut st);
    assert_eq!(st.reinitializing.as_deref(), Some("db-1"));
}

#[test]
fn a_rollout_switchover_right_after_a_failover_drains_from_the_old_primary() {
    // The failover to db-2 is done, but the phase still says
    // FailingOver (no report since) when the rollout hands over.
    let mut st = cnmysql_api::ClusterStatus {
        current_primary: Some("db-2".into()),
        target_primary: Some("db-2".into()),
        phase: Some(Phase::FailingOver),
        ..Default::default()
    };
    let change = StatusChange::Switchover {
        from: "db-2".into(),
        to: "db-1".into(),
        at: "2026-01-01T00:00:00Z".into(),
    };
    assert!(change.apply(&mut st));
    assert_eq!(st.target_primary.as_deref(), Some("db-1"));
    assert_eq!(st.phase, Some(Phase::Switchover));
    // So db-1 catches up with db-2 before it opens writes (it would
    // have opened them with what it had, losing acknowledged writes).
    assert_eq!(
        crate::role::drain_rule(&st),
        crate::role::Drain::CatchUpWithOldPrimary
    );
}

#[test]
fn an_abandoned_switchover_says_why_in_the_same_status_write() {
    // A follower of the switchover (kubectl cnmsql promote) that reads
    // the status right after the abort printed the stale "moving the
    // primary" reason.
    let mut st = cnmysql_api::ClusterStatus {
        current_primary: Some("db-1".into()),
        target_primary: Some("db-2".into()),
        phase: Some(Phase::Switchover),
        phase_reason: Some("moving the primary from db-1 to db-2".into()),
        ..Default::default()
    };
    let change = StatusChange::AbortSwitchover {
        current: Some("db-1".into()),
        at: "2026-01-01T00:01:00Z".into(),
        reason: "switchover to db-2 blocked: it did not catch up".into(),
    };
    assert!(change.apply(&mut st));
    assert_eq!(st.target_primary.as_deref(), Some("db-1"));
    assert_ne!(st.phase, Some(Phase::Switchover));
    assert!(st.phase_reason.unwrap().contains("did not catch up"));
}

#[test]
fn a_primary_restarting_in_place_is_not_fenced_out_within_the_grace() {
    let mut s = failing_primary("0-1-100");
    s.now_ms = 1_767_225_610_000; // 10 s after failing
    let observe = |restarted: Option<i64>, gone: bool| {
        let mut m = Memory {
            last_current: Some("db-1".into()),
            ..warm()
        };
        let absent = if gone {
            vec!["db-1".to_string()]
        } else {
            vec![]
        };
        step(
            &Observation {
                snapshot: &s,
                lease: None,
                absent: &absent,
                fence_early: true,
                primary_restarted_at_ms: restarted,
                primary_down_in_place: false,
                leaving: &[],
                cordoned: &[],
                backing_off: &[],
            },
            &mut m,
        )
    };
    let fences = |a: &[Action]| a.iter().any(|a| matches!(a, Action::FenceOut(_)));
    // Its container restarted 2 s ago: wait for it.
    assert!(!fences(&observe(Some(s.now_ms - 2_000), false)));
    // No restart seen, the restart too long ago, or its Pod gone: fail over.
    assert!(fences(&observe(None, false)));
    assert!(fences(&observe(
        Some(s.now_ms - IN_PLACE_RESTART_GRACE_MS),
        false
    )));
    assert!(fences(&observe(Some(s.now_ms - 2_000), true)));
}

/// A primary that came back from an in-place restart, was seen ready,
/// and then failed anew (its node frozen) is failed over at once: the
/// restart's grace is for coming back from that restart.
#[test]
fn a_primary_ready_again_after_an_in_place_restart_is_not_waited_for_when_it_fails_anew() {
    let mut ready = failing_primary("0-1-100");
    ready.instances[0] = crate::testutil::primary("db-1", "0-1-100");
    ready.status.primary_failing_since = None;
    ready.now_ms = 1_767_225_610_000;
    let restarted = ready.now_ms - 2_000;
    let mut failed = failing_primary("0-1-100");
    failed.now_ms = ready.now_ms + 1_000;
    let mut m = Memory {
        last_current: Some("db-1".into()),
        ..warm()
    };
    let pass = |s: &Snapshot, m: &mut Memory| {
        step(
            &Observation {
                fence_early: true,
                primary_restarted_at_ms: Some(restarted),
                ..observe(s, &[])
            },
            m,
        )
    };
    let fences = |a: &[Action]| a.iter().any(|a| matches!(a, Action::FenceOut(_)));
    // Not seen ready since the restart: waited for.
    assert!(!fences(&pass(&failed, &mut m.clone())));
    // Seen ready, then failed: failed over.
    pass(&ready, &mut m);
    assert!(fences(&pass(&failed, &mut m)), "{m:?}");
}

/// The race a real kubelet shows: the primary's container died, the
/// kubelet has not reported it yet (up to about a second), and the
/// control plane already sees the primary unreachable. Its Pod refusing
/// connections is the fact that it will come back in place.
#[test]
fn a_primary_seen_down_in_place_before_the_kubelet_reports_is_waited_for() {
    let mut s = failing_primary("0-1-100");
    s.now_ms = 1_767_225_610_000; // 10 s after failing
    let start = s.now_ms;
    let mut m = Memory {
        last_current: Some("db-1".into()),
        ..warm()
    };
    let fences = |a: &[Action]| a.iter().any(|a| matches!(a, Action::FenceOut(_)));
    let observe = |s: &Snapshot, down: bool, m: &mut Memory| {
        step(
            &Observation {
                snapshot: s,
                lease: None,
                absent: &[],
                fence_early: true,
                primary_restarted_at_ms: None,
                primary_down_in_place: down,
                leaving: &[],
                cordoned: &[],
                backing_off: &[],
            },
            m,
        )
    };
    // Seen down in place: waited for, across passes, within the grace.
    assert!(!fences(&observe(&s, true, &mut m)));
    s.now_ms = start + IN_PLACE_RESTART_GRACE_MS - 1;
    assert!(!fences(&observe(&s, true, &mut m)));
    // Still down when the grace has run out: fail over as usual.
    s.now_ms = start + IN_PLACE_RESTART_GRACE_MS;
    assert!(fences(&observe(&s, true, &mut m)));
    // Unreachable without that fact (frozen, cut off): no wait.
    let mut fresh = Memory {
        last_current: Some("db-1".into()),
        ..warm()
    };
    s.now_ms = start;
    assert!(fences(&observe(&s, false, &mut fresh)));
}
