use super::*;
use crate::status_change::report;
pub(super) use crate::testutil::observe;
use crate::testutil::{replica, snapshot};

/// A controller past its warm-up.
fn warm() -> Memory {
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

fn failing_primary(db3: &str) -> Snapshot {
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
fn where_fencing_takes_time_it_starts_while_the_lease_runs_out() {
    let mut s = snapshot(vec![
        crate::status::Observed {
            name: "db-1".into(),
            ordinal: 1,
            status: None,
            outdated: None,
        },
        replica("db-2", "0-1-100"),
    ]);
    settled(&mut s, "db-1");
    s.status.primary_failing_since = Some("2026-01-01T00:00:00Z".into());
    s.now_ms = 1_767_225_700_000;
    let lease = Lease::default().acquire("db-1", s.now_ms - 1_000).unwrap();
    for (early, fenced) in [(false, false), (true, true)] {
        let mut m = warm();
        let actions = step(
            &Observation {
                snapshot: &s,
                lease: Some(&lease),
                absent: &[],
                fence_early: early,
                primary_restarted_at_ms: None,
                primary_down_in_place: false,
                leaving: &[],
                cordoned: &[],
                backing_off: &[],
            },
            &mut m,
        );
        assert_eq!(
            actions.contains(&Action::FenceOut("db-1".into())),
            fenced,
            "{actions:?}"
        );
        // Never a promotion while the lease may still be held.
        assert!(!actions.iter().any(|a| matches!(
            a,
            Action::Status {
                change: StatusChange::StartFailover { .. },
                ..
            }
        )));
    }
}

/// Under `required` the replicas stop receiving from the failing primary
/// while its lease runs, whether fencing takes time or not; nothing is
/// promoted in that pass. Under `preferred` they go on receiving until
/// the old primary has fenced itself, and nothing is promoted before the
/// lease expires.
#[test]
fn under_required_the_replicas_stop_receiving_while_the_lease_runs() {
    let mut s = failing_primary("0-1-100");
    s.now_ms = 1_767_225_700_000;
    let lease = Lease::default().acquire("db-1", s.now_ms - 1_000).unwrap();
    let begins = |a: &[Action]| {
        a.iter().any(|a| {
            matches!(
                a,
                Action::Status {
                    change: StatusChange::BeginFailover { .. },
                    ..
                }
            )
        })
    };
    let run = |s: &Snapshot, early: bool| {
        let actions = step(
            &Observation {
                lease: Some(&lease),
                fence_early: early,
                ..observe(s, &[])
            },
            &mut warm(),
        );
        assert!(!actions.iter().any(|a| matches!(
            a,
            Action::ReleaseLease { .. }
                | Action::Status {
                    change: StatusChange::StartFailover { .. },
                    ..
                }
        )));
        actions
    };
    s.spec.mysql.semi_sync.enabled = true;
    s.spec.mysql.semi_sync.data_durability = cnmysql_api::DataDurability::Required;
    assert!(begins(&run(&s, true)), "required, fencing takes time");
    assert!(begins(&run(&s, false)), "required, fencing is instant");
    s.spec.mysql.semi_sync.data_durability = cnmysql_api::DataDurability::Preferred;
    assert!(!begins(&run(&s, true)), "preferred keeps receiving");
    // Past the old primary's self-fence point (and the slack), the stop
    // overlaps the rest of the lease, under `preferred` too.
    let fenced_ago = crate::lease::TTL_MS - crate::lease::SELF_FENCE_MARGIN_MS
        + crate::failover::SELF_FENCED_SLACK_MS;
    for (ago, stops) in [(fenced_ago - 1, false), (fenced_ago, true)] {
        let lease = Lease::default().acquire("db-1", s.now_ms - ago).unwrap();
        let actions = step(
            &Observation {
                lease: Some(&lease),
                fence_early: true,
                ..observe(&s, &[])
            },
            &mut warm(),
        );
        assert_eq!(begins(&actions), stops, "renewed {ago} ms ago: {actions:?}");
        assert!(!actions.iter().any(|a| matches!(
            a,
            Action::PassLease { .. }
                | Action::Status {
                    change: StatusChange::StartFailover { .. },
                    ..
                }
        )));
    }
}

/// Under `required`, once every replica reports it stopped receiving from
/// the failed primary, its lease passes to the candidate (conditional on
/// the renewal seen) and the candidate is targeted, the old primary fenced
/// out first: it can acknowledge nothing more, so its lease guards no
/// write. Not while a replica still receives, not if it renewed after it
/// was found failing, never under `preferred`.
#[test]
fn under_required_the_lease_passes_once_every_replica_stopped_receiving() {
    let since = 1_767_225_600_000; // primary_failing_since
    let mut s = failing_primary("0-1-100");
    s.now_ms = since + 3_000;
    s.spec.mysql.semi_sync.enabled = true;
    s.spec.mysql.semi_sync.data_durability = cnmysql_api::DataDurability::Required;
    s.status.failover_from = Some("db-1".into());
    let stopped = |s: &mut Snapshot, name: &str, io: &str| {
        for i in s.instances.iter_mut().filter(|i| i.name == name) {
            if let Some(r) = i.status.as_mut().and_then(|st| st.replication.as_mut()) {
                r.io_state = io.into();
            }
        }
    };
    stopped(&mut s, "db-2", "No");
    let before = Lease::default().acquire("db-1", since - 2_000).unwrap();
    let run = |s: &Snapshot, lease: &Lease| {
        step(
            &Observation {
                lease: Some(lease),
                fence_early: true,
                ..observe(s, &[])
            },
            &mut Memory {
                last_current: Some("db-1".into()),
                ..warm()
            },
        )
    };
    let promotes = |a: &[Action]| {
        a.iter().position(|a| {
            matches!(
                a,
                Action::Status {
                    change: StatusChange::StartFailover { .. },
                    ..
                }
            )
        })
    };
    let passes = |a: &[Action]| a.iter().position(|a| matches!(a, Action::PassLease { .. }));
    let waiting = run(&s, &before);
    assert_eq!(
        (passes(&waiting), promotes(&waiting)),
        (None, None),
        "db-3 still receives: {waiting:?}"
    );
    stopped(&mut s, "db-3", "No");
    let actions = run(&s, &before);
    let (Some(pass), Some(promote)) = (passes(&actions), promotes(&actions)) else {
        panic!("{actions:?}");
    };
    assert!(pass < promote, "the lease first: {actions:?}");
    match &actions[pass] {
        Action::PassLease {
            from,
            to,
            seen_renew_ms,
            then,
        } => {
            assert_eq!((from.as_str(), to.as_str()), ("db-1", "db-2"));
            assert_eq!(*seen_renew_ms, since - 2_000);
            assert_eq!(then.reason, "LeasePassed");
        }
        a => panic!("{a:?}"),
    }
    assert!(actions[..pass].contains(&Action::FenceOut("db-1".into())));
    let renewed_since = Lease::default().acquire("db-1", since + 500).unwrap();
    let actions = run(&s, &renewed_since);
    assert_eq!(
        (passes(&actions), promotes(&actions)),
        (None, None),
        "renewed after it was found failing: {actions:?}"
    );
    s.spec.mysql.semi_sync.data_durability = cnmysql_api::DataDurability::Preferred;
    let actions = run(&s, &before);
    assert_eq!(
        (passes(&actions), promotes(&actions)),
        (None, None),
        "preferred: {actions:?}"
    );
}

/// A failover begun while the lease ran where fencing did not start then
/// (locally), the lease expired meanwhile: the old primary is fenced out
/// before the candidate is targeted (found by the local topology suite: a
/// frozen primary was left stopped, never killed, after `preferred`'s
/// early stop of receiving).
#[test]
fn a_failover_begun_while_the_lease_ran_fences_the_old_primary_out_before_targeting() {
    let mut s = failing_primary("0-1-100");
    s.now_ms = 1_767_225_700_000;
    s.status.failover_from = Some("db-1".into());
    for i in s.instances.iter_mut() {
        if let Some(r) = i.status.as_mut().and_then(|st| st.replication.as_mut()) {
            r.io_state = "No".into();
        }
    }
    let expired = Lease::default().acquire("db-1", s.now_ms - 20_000).unwrap();
    let mut m = Memory {
        last_current: Some("db-1".into()),
        ..warm()
    };
    let actions = step(
        &Observation {
            lease: Some(&expired),
            fence_early: false,
            ..observe(&s, &[])
        },
        &mut m,
    );
    let fence = actions
        .iter()
        .position(|a| *a == Action::FenceOut("db-1".into()));
    let target = actions.iter().position(|a| {
        matches!(
            a,
            Action::Status {
                change: StatusChange::StartFailover { .. },
                ..
            }
        )
    });
    assert!(
        matches!((fence, target), (Some(f), Some(t)) if f < t),
        "{actions:?}"
    );
    assert!(m.held_down.contains("db-1"));
}

/// A failover begun while the lease ran, whose old primary is proven gone
/// before the lease expires: the lease is released (the candidate takes it
/// at once) and the candidate targeted once the replicas have stopped.
#[test]
fn a_failover_begun_early_releases_the_lease_when_the_old_primary_is_gone() {
    let mut s = failing_primary("0-1-100");
    s.now_ms = 1_767_225_700_000;
    s.spec.mysql.semi_sync.enabled = true;
    s.spec.mysql.semi_sync.data_durability = cnmysql_api::DataDurability::Required;
    s.status.failover_from = Some("db-1".into());
    for i in s.instances.iter_mut() {
        if let Some(r) = i.status.as_mut().and_then(|st| st.replication.as_mut()) {
            r.io_state = "No".into();
        }
    }
    let lease = Lease::default().acquire("db-1", s.now_ms - 1_000).unwrap();
    let gone = ["db-1".to_string()];
    let actions = step(
        &Observation {
            lease: Some(&lease),
            fence_early: true,
            ..observe(&s, &gone)
        },
        &mut Memory {
            last_current: Some("db-1".into()),
            ..warm()
        },
    );
    assert!(
        actions.contains(&Action::ReleaseLease {
            holder: "db-1".into()
        }),
        "{actions:?}"
    );
    assert!(actions.iter().any(|a| matches!(
        a,
        Action::Status {
            change: StatusChange::StartFailover { .. },
            ..
        }
    )));
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
