use super::tests::observe;
use super::*;
use crate::cadence::Cadence;
use crate::testutil::{primary, replica, snapshot};

fn settled(primary_name: &str) -> Snapshot {
    let mut s = snapshot(vec![
        primary("db-1", "0-1-100"),
        replica("db-2", "0-1-100"),
        replica("db-3", "0-1-100"),
    ]);
    s.status.current_primary = Some(primary_name.into());
    s.status.target_primary = Some(primary_name.into());
    s.status
        .gtid_executed_by_instance
        .insert(primary_name.into(), "0-1-100".into());
    s.now_ms = 1_767_225_600_000;
    s
}

#[test]
fn nothing_is_decided_while_warming_up_unless_everyone_answered() {
    let mut s = settled("db-1");
    s.instances[0].status = None;
    s.status.primary_failing_since = Some("2025-01-01T00:00:00Z".into());
    let gone = ["db-1".to_string()];
    let mut m = Memory::default();
    assert!(step(&observe(&s, &gone), &mut m).is_empty());
    assert_eq!(m.first_step_ms, Some(s.now_ms));
    // Past the warm-up, the missing primary is failed over.
    s.now_ms += WARM_UP_MS;
    let a = step(&observe(&s, &gone), &mut m);
    assert!(a.contains(&Action::FenceOut("db-1".into())), "{a:?}");
    // Everyone answering ends the warm-up at once ...
    let mut s = settled("db-1");
    let mut m = Memory::default();
    assert!(!warming_up(&s, &mut m));
    // ... once they have told their state: a primary whose manager
    // answers while its server is still starting (a cluster starting
    // again) is waited for, not failed.
    let st = s.instances[0].status.as_mut().unwrap();
    st.mysqld_running = false;
    st.phase = crate::status::InstancePhase::Starting;
    let mut m = Memory::default();
    assert!(warming_up(&s, &mut m));
}

#[test]
fn an_absent_steady_primary_is_held_down_once_and_said_so() {
    let mut s = settled("db-1");
    s.instances[0].status = None;
    let gone = ["db-1".to_string()];
    let mut m = Memory {
        first_step_ms: Some(0),
        ..Default::default()
    };
    assert!(
        !crate::hold_down::may_start(&m, &s.spec, &s.status, "db-1"),
        "the platform waits for the step"
    );
    let a = step(&observe(&s, &gone), &mut m);
    assert!(
        a.iter()
            .any(|a| matches!(a, Action::Event(e) if e.reason == "PrimaryDown"))
    );
    assert!(m.held_down.contains("db-1"));
    let again = step(&observe(&s, &gone), &mut m);
    assert!(
        !again
            .iter()
            .any(|a| matches!(a, Action::Event(e) if e.reason == "PrimaryDown"))
    );
    // An absent replica is started again by its platform.
    let gone = ["db-2".to_string()];
    let mut m = Memory {
        first_step_ms: Some(0),
        ..Default::default()
    };
    step(&observe(&s, &gone), &mut m);
    assert!(m.held_down.is_empty() && crate::hold_down::may_start(&m, &s.spec, &s.status, "db-2"));
    // With a failover delay, the primary is started again in place.
    s.spec.failover_delay = 30;
    let gone = ["db-1".to_string()];
    step(&observe(&s, &gone), &mut m);
    assert!(crate::hold_down::may_start(&m, &s.spec, &s.status, "db-1"));
}

#[test]
fn polls_are_fast_while_the_primary_moves_or_fails() {
    let s = settled("db-1");
    assert_eq!(Cadence::LOCAL.next_poll_ms(&s.status), 200);
    let mut st = s.status.clone();
    st.target_primary = Some("db-2".into());
    assert_eq!(Cadence::LOCAL.next_poll_ms(&st), 50);
    let mut st = s.status.clone();
    st.primary_failing_since = Some("x".into());
    assert_eq!(Cadence::KUBERNETES.next_poll_ms(&st), 200);
    assert_eq!(Cadence::KUBERNETES.next_poll_ms(&s.status), 1_000);
}
