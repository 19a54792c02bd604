use super::*;
use crate::testutil::{primary, replica, snapshot};
use crate::upgrade::gates::MAX_LAG_SECONDS;

const OLD: &str = "old";
const NEW: &str = "new";

/// db-1 primary, db-2 and db-3 replicas, each with the given hash.
fn cluster(hashes: [&str; 3]) -> Snapshot {
    let mut obs = vec![
        primary("db-1", "0-1-10"),
        replica("db-2", "0-1-10"),
        replica("db-3", "0-1-10"),
    ];
    for (o, h) in obs.iter_mut().zip(hashes) {
        let st = o.status.as_mut().unwrap();
        st.executable_hash = h.into();
        if let Some(r) = st.replication.as_mut() {
            r.io_state = "Yes".into();
        }
    }
    let mut s = snapshot(obs);
    s.status.operator_executable_hash = Some(NEW.into());
    s
}

fn step(s: &Snapshot) -> Next {
    next(s, &InFlight::new(), false)
}

#[test]
fn nothing_to_do_when_every_instance_is_current_or_there_is_no_target() {
    assert_eq!(step(&cluster([NEW, NEW, NEW])), Next::Current);
    let mut s = cluster([OLD, OLD, OLD]);
    s.status.operator_executable_hash = None;
    assert_eq!(step(&s), Next::Current);
}

#[test]
fn replicas_go_first_in_ascending_ordinal_then_the_primary_after_a_switchover() {
    let all = vec!["db-1".to_string(), "db-2".into(), "db-3".into()];
    assert_eq!(
        step(&cluster([OLD, OLD, OLD])),
        Next::Recreate {
            instance: "db-2".into(),
            primary: false,
            stale: all.clone(),
            note: None,
            change: None
        }
    );
    assert!(
        matches!(step(&cluster([OLD, NEW, OLD])), Next::Recreate { instance, .. } if instance == "db-3")
    );
    assert_eq!(
        step(&cluster([OLD, NEW, NEW])),
        Next::Switchover {
            from: "db-1".into(),
            to: "db-2".into(),
            stale: vec!["db-1".into()],
            change: None
        }
    );
}

#[test]
fn the_switchover_goes_to_the_most_advanced_replica() {
    let mut s = cluster([OLD, NEW, NEW]);
    s.instances[2].status.as_mut().unwrap().gtid_executed = "0-1-11".into();
    s.instances[0].status.as_mut().unwrap().gtid_executed = "0-1-11".into();
    assert!(matches!(step(&s), Next::Switchover { to, .. } if to == "db-3"));
}

#[test]
fn after_the_switchover_the_old_primary_is_recreated_as_a_replica() {
    let mut s = cluster([OLD, NEW, NEW]);
    s.instances[0].status.as_mut().unwrap().role = crate::status::Role::Replica;
    s.instances[1].status.as_mut().unwrap().role = crate::status::Role::Primary;
    s.status.current_primary = Some("db-2".into());
    s.status.target_primary = Some("db-2".into());
    assert!(
        matches!(step(&s), Next::Recreate { instance, primary: false, .. } if instance == "db-1")
    );
}

#[test]
fn without_a_healthy_replica_the_primary_restarts_in_place() {
    let mut s = cluster([OLD, NEW, NEW]);
    s.status.fenced_instances = vec!["db-2".into(), "db-3".into()];
    match step(&s) {
        Next::Recreate {
            instance,
            primary: true,
            note: Some(note),
            ..
        } => {
            assert_eq!(instance, "db-1");
            assert!(note.contains("no healthy replica"), "{note}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn restart_method_and_single_instances_restart_the_primary_in_place() {
    let mut s = cluster([OLD, NEW, NEW]);
    s.spec.primary_update_method = PrimaryUpdateMethod::Restart;
    assert!(matches!(step(&s), Next::Recreate { primary: true, .. }));
    let mut one = snapshot(vec![primary("db-1", "0-1-1")]);
    one.spec.instances = 1;
    one.instances[0].status.as_mut().unwrap().executable_hash = OLD.into();
    one.status.operator_executable_hash = Some(NEW.into());
    one.spec.primary_update_strategy = PrimaryUpdateStrategy::Supervised;
    assert!(
        matches!(step(&one), Next::Recreate { instance, primary: true, note: Some(n), .. } if instance == "db-1" && n.contains("single"))
    );
}

#[test]
fn supervised_stops_everything_while_the_primary_is_stale() {
    let mut s = cluster([OLD, OLD, OLD]);
    s.spec.primary_update_strategy = PrimaryUpdateStrategy::Supervised;
    match step(&s) {
        Next::WaitingForUser { primary, message } => {
            assert_eq!(primary, "db-1");
            assert!(message.contains("switch over"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // Once a human switched over to an up-to-date replica, it goes on.
    let mut s = cluster([OLD, NEW, OLD]);
    s.spec.primary_update_strategy = PrimaryUpdateStrategy::Supervised;
    s.status.current_primary = Some("db-2".into());
    s.status.target_primary = Some("db-2".into());
    assert!(matches!(step(&s), Next::Recreate { instance, .. } if instance == "db-1"));
    // After a human switched over to a stale replica, the rollout has
    // consent and goes on, the new primary included.
    let mut s = cluster([OLD, OLD, OLD]);
    s.spec.primary_update_strategy = PrimaryUpdateStrategy::Supervised;
    assert!(
        matches!(next(&s, &InFlight::new(), true), Next::Recreate { instance, .. } if instance == "db-2")
    );
    let mut s = cluster([OLD, NEW, NEW]);
    s.spec.primary_update_strategy = PrimaryUpdateStrategy::Supervised;
    assert!(matches!(
        next(&s, &InFlight::new(), true),
        Next::Switchover { .. }
    ));
    // Unsupervised replicas move while the primary is stale.
    let mut s = cluster([OLD, NEW, OLD]);
    s.spec.primary_update_strategy = PrimaryUpdateStrategy::Unsupervised;
    s.status.current_primary = Some("db-1".into());
    s.status.target_primary = Some("db-1".into());
    assert!(matches!(step(&s), Next::Recreate { instance, .. } if instance == "db-3"));
}

#[test]
fn in_place_treats_the_primary_like_a_replica_and_ignores_the_primary_settings() {
    let mut s = cluster([OLD, NEW, NEW]);
    s.spec.in_place_instance_manager_updates = true;
    s.spec.primary_update_strategy = PrimaryUpdateStrategy::Supervised;
    assert_eq!(
        step(&s),
        Next::InPlace {
            instance: "db-1".into(),
            source: Source::Operator,
            stale: vec!["db-1".into()]
        }
    );
    let mut s = cluster([OLD, OLD, NEW]);
    s.spec.in_place_instance_manager_updates = true;
    assert!(matches!(step(&s), Next::InPlace { instance, .. } if instance == "db-2"));
}

#[test]
fn fenced_and_diverged_instances_are_skipped_and_their_hash_ignored() {
    let mut s = cluster([NEW, OLD, OLD]);
    s.status.fenced_instances = vec!["db-2".into()];
    s.status.diverged_instances = vec!["db-3".into()];
    assert_eq!(step(&s), Next::Current);
    s.status.diverged_instances.clear();
    assert!(matches!(step(&s), Next::Recreate { instance, .. } if instance == "db-3"));
    // Unfenced, it is upgraded in turn.
    s.status.fenced_instances.clear();
    assert!(matches!(step(&s), Next::Recreate { instance, .. } if instance == "db-2"));
}

#[test]
fn nothing_moves_while_an_instance_is_not_ready_or_lags() {
    let mut s = cluster([OLD, NEW, OLD]);
    s.instances[1].status.as_mut().unwrap().ready = false;
    assert!(matches!(step(&s), Next::Wait { reason, .. } if reason.contains("db-2 to be ready")));
    let mut s = cluster([OLD, NEW, OLD]);
    s.instances[1].status = None;
    assert!(
        matches!(step(&s), Next::Wait { reason, .. } if reason.contains("db-2 to be reachable"))
    );
    let mut s = cluster([OLD, NEW, OLD]);
    s.instances[1].status.as_mut().unwrap().lag_seconds = Some(MAX_LAG_SECONDS + 1);
    assert!(matches!(step(&s), Next::Wait { reason, .. } if reason.contains("catch up")));
}

#[test]
fn nothing_moves_while_the_primary_changes_or_fails() {
    let mut s = cluster([OLD, OLD, OLD]);
    s.status.target_primary = Some("db-2".into());
    assert!(matches!(step(&s), Next::Wait { .. }));
    let mut s = cluster([OLD, OLD, OLD]);
    s.status.primary_failing_since = Some("2026-01-01T00:00:00Z".into());
    assert!(matches!(step(&s), Next::Wait { .. }));
}

#[test]
fn a_step_in_flight_is_not_repeated_until_it_may_have_failed() {
    let s = cluster([OLD, OLD, OLD]);
    let mut f = InFlight::new();
    f.insert("db-2".into(), 0);
    assert!(matches!(next(&s, &f, false), Next::Wait { reason, .. } if reason.contains("db-2")));
    let mut later = s.clone();
    later.now_ms = STEP_RETRY_MS;
    assert!(
        matches!(next(&later, &f, false), Next::Recreate { instance, .. } if instance == "db-2")
    );
}

#[test]
fn an_unreachable_instance_keeps_its_last_reported_hash() {
    let mut s = cluster([NEW, NEW, NEW]);
    s.instances[2].status = None;
    s.status
        .executable_hash_by_instance
        .insert("db-3".into(), OLD.into());
    assert!(
        matches!(step(&s), Next::Wait { reason, stale } if reason.contains("db-3") && stale == vec!["db-3".to_string()])
    );
}

#[test]
fn the_reason_names_the_instance_and_what_remains() {
    let n = step(&cluster([OLD, NEW, OLD]));
    assert_eq!(
        n.reason().unwrap(),
        "Upgrading instance manager on db-3 (2 remaining)"
    );
}

/// `cluster(hashes)` with the named instances' definitions outdated.
fn outdated_in(hashes: [&str; 3], outdated: &[&str]) -> Snapshot {
    let mut s = cluster(hashes);
    for o in s.instances.iter_mut() {
        if outdated.contains(&o.name.as_str()) {
            o.outdated = Some("image mariadb:10.11 → mariadb:10.11.9".into());
        }
    }
    s
}

#[test]
fn an_outdated_definition_is_stale_even_with_the_manager_current_or_no_target() {
    let s = outdated_in([NEW, NEW, NEW], &["db-3"]);
    assert!(
        matches!(step(&s), Next::Recreate { instance, change: Some(_), .. } if instance == "db-3")
    );
    let mut s = outdated_in([OLD, OLD, OLD], &["db-2"]);
    s.status.operator_executable_hash = None;
    assert_eq!(step(&s).stale(), ["db-2"]);
}

#[test]
fn an_outdated_instance_is_recreated_even_where_managers_go_in_place() {
    let mut s = outdated_in([OLD, OLD, NEW], &["db-2"]);
    s.spec.in_place_instance_manager_updates = true;
    let n = step(&s);
    assert!(
        matches!(&n, Next::Recreate { instance, primary: false, change: Some(_), .. } if instance == "db-2"),
        "{n:?}"
    );
    assert_eq!(
        n.reason().unwrap(),
        "Updating db-2: image mariadb:10.11 → mariadb:10.11.9 (2 remaining)"
    );
    // A manager-only replica still goes in place.
    let mut s = outdated_in([NEW, OLD, NEW], &[]);
    s.spec.in_place_instance_manager_updates = true;
    assert!(matches!(step(&s), Next::InPlace { .. }));
    // So does an up-to-date primary's manager, but an outdated primary
    // is switched over first, in-place or not.
    let mut s = outdated_in([NEW, NEW, NEW], &["db-1"]);
    s.spec.in_place_instance_manager_updates = true;
    let n = step(&s);
    assert!(
        matches!(&n, Next::Switchover { from, change: Some(_), .. } if from == "db-1"),
        "{n:?}"
    );
    assert!(n.reason().unwrap().starts_with("Updating image"), "{n:?}");
}

#[test]
fn a_supervised_outdated_primary_waits_for_the_user_and_says_why() {
    let mut s = outdated_in([NEW, NEW, NEW], &["db-1", "db-2", "db-3"]);
    s.spec.primary_update_strategy = PrimaryUpdateStrategy::Supervised;
    s.spec.in_place_instance_manager_updates = true;
    match step(&s) {
        Next::WaitingForUser { primary, message } => {
            assert_eq!(primary, "db-1");
            assert!(message.contains("outdated (image"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn waiting_on_an_outdated_instance_says_updating() {
    let mut s = outdated_in([NEW, NEW, NEW], &["db-3"]);
    s.instances[1].status.as_mut().unwrap().ready = false;
    assert_eq!(
        step(&s).reason().unwrap(),
        "Updating instances: waiting for db-2 to be ready (1 remaining)"
    );
    let s = outdated_in([NEW, NEW, NEW], &["db-3"]);
    let mut f = InFlight::new();
    f.insert("db-3".into(), s.now_ms);
    assert_eq!(
        next(&s, &f, false).reason().unwrap(),
        "Updating instances: waiting for db-3 to come back updated (image mariadb:10.11 → mariadb:10.11.9) (1 remaining)"
    );
}

#[test]
fn an_outdated_replica_that_is_down_is_recreated_but_only_when_the_rest_is_healthy() {
    // db-3's new image did not start; the image has been corrected.
    let mut s = outdated_in([NEW, NEW, NEW], &["db-1", "db-2", "db-3"]);
    s.instances[2].status.as_mut().unwrap().ready = false;
    assert!(
        matches!(step(&s), Next::Recreate { instance, primary: false, .. } if instance == "db-3")
    );
    // Unreachable just the same.
    s.instances[2].status = None;
    assert!(matches!(step(&s), Next::Recreate { instance, .. } if instance == "db-3"));
    // Not while another instance is down too: that would be a second.
    s.instances[1].status.as_mut().unwrap().ready = false;
    assert!(matches!(step(&s), Next::Wait { .. }));
    // Nor a replica that is down with only its manager stale.
    let mut s = outdated_in([NEW, OLD, OLD], &[]);
    s.instances[2].status.as_mut().unwrap().ready = false;
    assert!(matches!(step(&s), Next::Wait { reason, .. } if reason.contains("db-3 to be ready")));
    // Nor a down primary: that is the failover's business.
    let mut s = outdated_in([NEW, NEW, NEW], &["db-1"]);
    s.instances[0].status.as_mut().unwrap().ready = false;
    assert!(matches!(step(&s), Next::Wait { .. }));
}
