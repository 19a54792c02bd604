//! The annotation state machine, the rollout it drives and the
//! orchestrator, over snapshots.

use super::*;
use crate::testutil::snapshot;
use crate::upgrade::annotated_pass::{Pass, pass};
use crate::upgrade::annotations::{Decision, FIRST_BACKOFF_MS, MAX_BACKOFF_MS, Recorded, decide};
use crate::upgrade::gates::InFlight;
use crate::upgrade::rollout::{self, Next};

const HASH: &str = "aa11bb22cc33dd44ee55ff66aa11bb22cc33dd44ee55ff66aa11bb22cc33dd44";
const OPERATOR: &str = "0000000000000000000000000000000000000000000000000000000000000000";
const FILE: &str = "1111111111111111111111111111111111111111111111111111111111111111";

#[test]
fn every_form_parses_and_a_bad_one_says_how_to_write_it() {
    assert_eq!(parse("manager=operator"), Ok(Target::ManagerFromOperator));
    assert_eq!(
        parse(&format!(
            "manager=file:///opt/cnmysql#sha256={}",
            HASH.to_uppercase()
        )),
        Ok(Target::ManagerFromFile {
            path: "/opt/cnmysql".into(),
            sha256: Some(HASH.into())
        })
    );
    assert_eq!(
        parse("manager=file:///opt/cnmysql"),
        Ok(Target::ManagerFromFile {
            path: "/opt/cnmysql".into(),
            sha256: None
        })
    );
    assert_eq!(
        parse("image=mariadb:11.8"),
        Ok(Target::Image("mariadb:11.8".into()))
    );
    assert_eq!(
        parse("version=10.11.19"),
        Ok(Target::Version("10.11.19".into()))
    );
    for bad in [
        "operator",
        "manager=latest",
        "manager=file://relative/path",
        "manager=file:///x#md5=abc",
        "manager=file:///x#sha256=abc",
        "version=eleven",
        "image=",
        "colour=blue",
    ] {
        let e = parse(bad).unwrap_err();
        assert!(
            e.starts_with(UPGRADE_TO) && e.contains("write it as"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn failed_attempts_are_retried_with_a_growing_backoff_and_done_wins() {
    let going = Recorded {
        status: Some(Status::InProgress),
        attempts: 1,
        ..Default::default()
    };
    assert_eq!(decide(None, &Recorded::default(), true, 0), Decision::Start);
    assert!(matches!(decide(None, &going, true, 0), Decision::Wait(_)));
    assert_eq!(
        decide(Some("new"), &going, true, 0),
        Decision::Done {
            release: "new".into()
        }
    );
    let failed = |attempts| Recorded {
        status: Some(Status::Failed),
        last_failed_ms: Some(1_000_000),
        attempts,
        ..Default::default()
    };
    assert!(matches!(
        decide(None, &failed(1), true, 1_009_000),
        Decision::Wait(w) if w.contains("next in 1 s")
    ));
    assert_eq!(decide(None, &failed(1), true, 1_010_000), Decision::Start);
    assert!(matches!(
        decide(None, &failed(3), true, 1_030_000),
        Decision::Wait(_)
    ));
    assert_eq!(decide(None, &failed(3), true, 1_040_000), Decision::Start);
    assert_eq!(backoff_ms(50), MAX_BACKOFF_MS);
    // Done but not ready for a moment: still done; seen ready on
    // something else: a new attempt.
    let done = Recorded {
        status: Some(Status::Done),
        attempts: 1,
        ..Default::default()
    };
    assert!(matches!(decide(None, &done, false, 0), Decision::Wait(_)));
    assert_eq!(decide(None, &done, true, 0), Decision::Start);
}

/// db-1 primary, db-2 and db-3 replicas, all on the operator's manager
/// and MariaDB 10.11.18; `manual` strategy when asked.
fn cluster(manual: bool) -> Snapshot {
    let mut obs = crate::testutil::three();
    for o in &mut obs {
        let st = o.status.as_mut().unwrap();
        st.executable_hash = OPERATOR.into();
        st.server_version = "10.11.18-MariaDB".into();
        if let Some(r) = st.replication.as_mut() {
            r.io_state = "Yes".into();
        }
    }
    let mut s = snapshot(obs);
    s.spec.mysql.flavor = cnmysql_api::Flavor::Mariadb;
    s.status.operator_executable_hash = Some(OPERATOR.into());
    s.now_ms = 1_000_000;
    if manual {
        s.spec.instance_update_strategy = cnmysql_api::InstanceUpdateStrategy::Manual;
    }
    for n in ["db-1", "db-2", "db-3"] {
        s.declared.asked.instances.insert(n.into(), BTreeMap::new());
    }
    s
}

fn annotate(s: &mut Snapshot, instance: &str, value: &str) {
    s.declared
        .asked
        .instances
        .get_mut(instance)
        .unwrap()
        .insert(UPGRADE_TO.into(), value.into());
}

/// Apply a pass's changes and mirrors to the snapshot, as a platform
/// would; the pass.
fn run(s: &mut Snapshot) -> Pass {
    let p = pass(s, &InFlight::new());
    for c in &p.changes {
        match &c.record {
            Some(r) => s
                .status
                .instance_upgrades
                .insert(c.instance.clone(), r.clone()),
            None => s.status.instance_upgrades.remove(&c.instance),
        };
    }
    for (i, set) in &p.annotate {
        let a = s.declared.asked.instances.get_mut(i).unwrap();
        for (k, v) in set {
            match v {
                Some(v) => a.insert(k.clone(), v.clone()),
                None => a.remove(k),
            };
        }
    }
    p
}

/// The step of `instance`'s attempt failed outright (the engine records
/// it so).
fn refuse(s: &mut Snapshot, instance: &str, why: &str) {
    let r = failed_now(&s.status.instance_upgrades[instance], why, s.now_ms);
    s.status.instance_upgrades.insert(instance.into(), r);
}

fn set_hash(s: &mut Snapshot, instance: &str, hash: &str) {
    let o = s.instances.iter_mut().find(|o| o.name == instance).unwrap();
    o.status.as_mut().unwrap().executable_hash = hash.into();
}

#[test]
fn a_canary_from_a_file_moves_only_its_replica_in_place_under_manual_updates() {
    let mut s = cluster(true);
    // A new operator executable: under manual, every instance is stale
    // and none moves.
    s.status.operator_executable_hash = Some(HASH.into());
    assert!(
        matches!(rollout::next(&s, &InFlight::new(), false), Next::Held { stale, .. } if stale.len() == 3)
    );
    annotate(
        &mut s,
        "db-2",
        &format!("manager=file:///opt/cnmysql#sha256={FILE}"),
    );
    let p = run(&mut s);
    let r = &s.status.instance_upgrades["db-2"];
    assert_eq!((r.status.as_str(), r.attempts), ("in-progress", 1));
    assert_eq!(r.manager_hash.as_deref(), Some(FILE));
    assert_eq!(
        p.changes[0].event.as_ref().unwrap().reason,
        "InstanceUpgradeStarted"
    );
    assert_eq!(
        s.declared.asked.instances["db-2"][UPGRADE_STATUS],
        "in-progress"
    );
    // The rollout moves db-2 alone, in place from the file, even though
    // in-place updates are off for the rollout itself.
    assert_eq!(
        rollout::next(&s, &InFlight::new(), false),
        Next::InPlace {
            instance: "db-2".into(),
            source: Source::File {
                path: "/opt/cnmysql".into(),
                sha256: Some(FILE.into())
            },
            stale: vec!["db-2".into()],
        }
    );
    // Once it runs the file: done, with the release; the rest still held.
    set_hash(&mut s, "db-2", FILE);
    let p = run(&mut s);
    assert_eq!(
        p.changes[0].event.as_ref().unwrap().reason,
        "InstanceUpgradeDone"
    );
    let a = &s.declared.asked.instances["db-2"];
    assert_eq!(
        (a[UPGRADE_STATUS].as_str(), a[UPGRADE_RELEASE].as_str()),
        ("done", FILE)
    );
    assert!(
        matches!(rollout::next(&s, &InFlight::new(), false), Next::Held { stale, .. } if stale == ["db-1", "db-3"])
    );
    // Nothing more happens while it stays so.
    assert!(run(&mut s).changes.is_empty());
}

#[test]
fn under_automatic_updates_an_annotation_pins_its_instance_against_the_rollout() {
    let mut s = cluster(false);
    annotate(
        &mut s,
        "db-3",
        &format!("manager=file:///opt/cnmysql#sha256={FILE}"),
    );
    run(&mut s);
    set_hash(&mut s, "db-3", FILE);
    run(&mut s);
    assert_eq!(s.status.instance_upgrades["db-3"].status, "done");
    // The operator's own rollout leaves db-3 on its file.
    assert_eq!(rollout::next(&s, &InFlight::new(), false), Next::Current);
    // Removing the annotation hands it back to the rollout.
    s.declared
        .asked
        .instances
        .get_mut("db-3")
        .unwrap()
        .remove(UPGRADE_TO);
    run(&mut s);
    assert!(!s.status.instance_upgrades.contains_key("db-3"));
    assert!(
        matches!(rollout::next(&s, &InFlight::new(), false), Next::Recreate { instance, .. } if instance == "db-3")
    );
}

#[test]
fn a_refused_attempt_is_failed_with_the_time_and_retried_after_the_backoff_only() {
    let mut s = cluster(true);
    annotate(
        &mut s,
        "db-2",
        &format!("manager=file:///opt/cnmysql#sha256={FILE}"),
    );
    run(&mut s);
    // The manager refused the file (the engine records it so).
    refuse(&mut s, "db-2", "its SHA-256 is …, not … as asked");
    let p = run(&mut s);
    assert!(p.changes.is_empty(), "{p:?}");
    let a = &s.declared.asked.instances["db-2"];
    assert_eq!(a[UPGRADE_STATUS], "failed");
    assert_eq!(a[LAST_FAILED_ATTEMPT_AT], timestamp(s.now_ms));
    // Not movable while it waits.
    assert!(matches!(
        rollout::next(&s, &InFlight::new(), false),
        Next::Current | Next::Held { .. }
    ));
    s.now_ms += FIRST_BACKOFF_MS - 1_000;
    assert!(run(&mut s).changes.is_empty());
    s.now_ms += 1_000;
    run(&mut s);
    let r = &s.status.instance_upgrades["db-2"];
    assert_eq!((r.status.as_str(), r.attempts), ("in-progress", 2));
    // An attempt whose step does not take within the deadline fails.
    let in_flight: InFlight = [("db-2".to_string(), s.now_ms)].into();
    s.now_ms += STEP_DEADLINE_MS + 1;
    let p = pass(&s, &in_flight);
    let r = p.changes[0].record.as_ref().unwrap();
    assert_eq!(r.status, "failed");
    assert!(
        r.message.contains("did not reach its target"),
        "{}",
        r.message
    );
    // Removing the annotation stops the retries.
    s.declared
        .asked
        .instances
        .get_mut("db-2")
        .unwrap()
        .remove(UPGRADE_TO);
    let p = run(&mut s);
    assert_eq!(
        p.changes[0].event.as_ref().unwrap().reason,
        "InstanceUpgradeCancelled"
    );
    assert!(s.status.instance_upgrades.is_empty());
}

fn with_server(s: &mut Snapshot, value: &str, image: &str, version: &str) {
    s.declared.asked.servers.insert(
        value.into(),
        Ok(ServerTarget {
            image: image.into(),
            version: version.into(),
        }),
    );
}

#[test]
fn a_server_version_is_validated_pinned_and_the_primary_switched_over_first() {
    let mut s = cluster(true);
    // No downgrade.
    ask_server(&mut s, "db-2", "10.11.17");
    run(&mut s);
    let r = &s.status.instance_upgrades["db-2"];
    assert_eq!(r.status, "failed");
    assert!(r.message.contains("downgrade"), "{}", r.message);
    assert_eq!(
        image_for(&s.status, "db-2", Some("mariadb:10.11.18".into())).as_deref(),
        Some("mariadb:10.11.18")
    );
    // The primary asked for a newer one: pinned, and switched over first.
    ask_server(&mut s, "db-1", "10.11.19");
    run(&mut s);
    assert_eq!(s.status.instance_upgrades["db-1"].status, "in-progress");
    assert_eq!(
        image_for(&s.status, "db-1", Some("mariadb:10.11.18".into())).as_deref(),
        Some("mariadb:10.11.19")
    );
    s.instances[0].outdated = Some("image mariadb:10.11.18 → mariadb:10.11.19".into());
    assert!(matches!(
        rollout::next(&s, &InFlight::new(), false),
        Next::Switchover { from, .. } if from == "db-1"
    ));
    // A declared server upgrade under way refuses a new attempt.
    let mut t = cluster(true);
    t.status.upgrade_history.push(cnmysql_api::UpgradeRecord {
        version: "11.8".into(),
        image: "mariadb:11.8".into(),
        from_version: None,
        phase: cnmysql_api::UpgradePhase::Upgrading,
        start_time: None,
        complete_time: None,
        conditions: vec![],
    });
    ask_server(&mut t, "db-3", "10.11.19");
    run(&mut t);
    assert!(
        t.status.instance_upgrades["db-3"]
            .message
            .contains("declared server upgrade")
    );
}

#[test]
fn an_instance_pinned_to_another_image_of_the_asked_version_is_made_again_first() {
    let mut s = cluster(true);
    // db-2 runs 10.11.19 from an image an earlier request pinned.
    s.status.instance_upgrades.insert(
        "db-2".into(),
        cnmysql_api::InstanceUpgrade {
            upgrade_to: "image=canary:10.11.19".into(),
            status: "done".into(),
            release: Some("10.11.19-MariaDB".into()),
            image: Some("canary:10.11.19".into()),
            version: Some("10.11.19".into()),
            ..Default::default()
        },
    );
    let st = s.instances[1].status.as_mut().unwrap();
    st.server_version = "10.11.19-MariaDB".into();
    st.system_tables_version = "10.11.19-MariaDB".into();
    // Asked for another image of the same version: not done because the
    // version matches; made again from the asked image.
    annotate(&mut s, "db-2", "image=mariadb:10.11.19");
    with_server(
        &mut s,
        "image=mariadb:10.11.19",
        "mariadb:10.11.19",
        "10.11.19",
    );
    run(&mut s);
    let r = &s.status.instance_upgrades["db-2"];
    assert_eq!(r.status, "in-progress", "{r:?}");
    assert_eq!(
        image_for(&s.status, "db-2", None).as_deref(),
        Some("mariadb:10.11.19")
    );
    // Back on it: done.
    run(&mut s);
    assert_eq!(s.status.instance_upgrades["db-2"].status, "done");
    // Not ready for a moment (a switchover points it at its new source):
    // still done, no new attempt.
    s.instances[1].status.as_mut().unwrap().ready = false;
    let p = run(&mut s);
    assert!(p.changes.is_empty(), "{:?}", p.changes);
    assert_eq!(s.status.instance_upgrades["db-2"].attempts, 1);
}

/// `instance` asked for `version=<version>`, which resolves to
/// `mariadb:<version>`.
fn ask_server(s: &mut Snapshot, instance: &str, version: &str) {
    annotate(s, instance, &format!("version={version}"));
    with_server(
        s,
        &format!("version={version}"),
        &format!("mariadb:{version}"),
        version,
    );
}

/// Apply an orchestration pass to the snapshot.
fn orchestrate(s: &mut Snapshot) -> crate::upgrade::orchestrated::Orchestration {
    let o = crate::upgrade::orchestrated::pass(s, None);
    if let Some(r) = &o.record {
        s.status.orchestrated_upgrade = r.clone();
    }
    if let Some((i, v)) = &o.mark {
        annotate(s, i, v);
    }
    o
}

#[test]
fn the_orchestrator_marks_replicas_in_ordinal_order_the_primary_last_and_stops_at_a_failure() {
    let mut s = cluster(true);
    s.status.fenced_instances.push("db-3".into());
    s.declared.asked.cluster.insert(
        UPGRADE_TO.into(),
        format!("manager=file:///opt/cnmysql#sha256={FILE}"),
    );
    let o = orchestrate(&mut s);
    assert_eq!(o.mark.as_ref().map(|m| m.0.as_str()), Some("db-2"));
    let rec = s.status.orchestrated_upgrade.clone().unwrap();
    assert_eq!(
        (rec.status.as_str(), rec.skipped.clone()),
        ("in-progress", vec!["db-3".to_string()])
    );
    // db-2's attempt fails: the orchestration stops there, says so.
    run(&mut s);
    refuse(&mut s, "db-2", "not executable");
    let o = orchestrate(&mut s);
    assert!(o.mark.is_none());
    let rec = s.status.orchestrated_upgrade.clone().unwrap();
    assert_eq!(
        (rec.status.as_str(), rec.instance.as_deref()),
        ("failed", Some("db-2"))
    );
    assert!(rec.message.contains("not executable"));
    assert_eq!(o.annotate[UPGRADE_STATUS].as_deref(), Some("failed"));
    // Retried and done: the primary is next (db-3 fenced, skipped).
    s.now_ms += FIRST_BACKOFF_MS;
    run(&mut s);
    set_hash(&mut s, "db-2", FILE);
    run(&mut s);
    let o = orchestrate(&mut s);
    assert_eq!(o.mark.as_ref().map(|m| m.0.as_str()), Some("db-1"));
    run(&mut s);
    set_hash(&mut s, "db-1", FILE);
    run(&mut s);
    let o = orchestrate(&mut s);
    let rec = s.status.orchestrated_upgrade.clone().unwrap();
    assert_eq!(
        (rec.status.as_str(), rec.release.as_deref()),
        ("done", Some(FILE))
    );
    assert_eq!(o.event.unwrap().reason, "OrchestratedUpgradeDone");
}

#[test]
fn the_orchestrator_and_a_declared_server_upgrade_never_run_at_once() {
    let mut s = cluster(true);
    s.status.upgrade_history.push(cnmysql_api::UpgradeRecord {
        version: "10.11.19".into(),
        image: "mariadb:10.11.19".into(),
        from_version: None,
        phase: cnmysql_api::UpgradePhase::Pending,
        start_time: None,
        complete_time: None,
        conditions: vec![],
    });
    s.declared
        .asked
        .cluster
        .insert(UPGRADE_TO.into(), "manager=operator".into());
    let o = orchestrate(&mut s);
    assert!(o.mark.is_none());
    let rec = s.status.orchestrated_upgrade.clone().unwrap();
    assert!(
        rec.status == "failed" && rec.message.starts_with("refused"),
        "{rec:?}"
    );
    // Once it ends, the orchestration starts by itself…
    s.status.upgrade_history[0].phase = cnmysql_api::UpgradePhase::Upgraded;
    assert!(orchestrate(&mut s).mark.is_some());
    // …and a declared upgrade now waits for it.
    assert!(crate::upgrade::gates::orchestration_under_way(&s).is_some());
    // The automatic rollout holds meanwhile.
    s.spec.instance_update_strategy = cnmysql_api::InstanceUpdateStrategy::Automatic;
    s.status.operator_executable_hash = Some(HASH.into());
    assert!(matches!(
        rollout::next(&s, &InFlight::new(), false),
        Next::Held { .. }
    ));
}

#[test]
fn the_image_an_instances_data_has_run_on_is_never_given_up_for_an_older_one() {
    let mut s = cluster(true);
    ask_server(&mut s, "db-2", "10.11.19");
    run(&mut s);
    // It runs 10.11.19 now, its data too.
    {
        let o = s.instances.iter_mut().find(|o| o.name == "db-2").unwrap();
        let st = o.status.as_mut().unwrap();
        st.server_version = "10.11.19-MariaDB".into();
        st.system_tables_version = "10.11.19".into();
    }
    s.status
        .data_version_by_instance
        .insert("db-2".into(), "10.11.19".into());
    run(&mut s);
    assert_eq!(s.status.instance_upgrades["db-2"].status, "done");
    let cluster_image = Some("mariadb:10.11.18".to_string());
    let pinned = || Some("mariadb:10.11.19".to_string());
    assert_eq!(
        image_for(&s.status, "db-2", cluster_image.clone()),
        pinned()
    );
    // Asked for an older one: refused, and the pin stays.
    ask_server(&mut s, "db-2", "10.11.18");
    run(&mut s);
    let r = &s.status.instance_upgrades["db-2"];
    assert!(
        r.status == "failed" && r.message.contains("downgrade"),
        "{r:?}"
    );
    assert_eq!(
        image_for(&s.status, "db-2", cluster_image.clone()),
        pinned()
    );
    // Asked no more: kept as its image, done, no longer as asked.
    s.declared
        .asked
        .instances
        .get_mut("db-2")
        .unwrap()
        .remove(UPGRADE_TO);
    run(&mut s);
    let r = &s.status.instance_upgrades["db-2"];
    assert_eq!((r.status.as_str(), r.upgrade_to.as_str()), ("done", ""));
    assert_eq!(image_for(&s.status, "db-2", cluster_image), pinned());
    // The Cluster declaring 10.11.19 itself takes over.
    s.status.target_server_version = Some("10.11.19".into());
    assert_eq!(
        image_for(
            &s.status,
            "db-2",
            Some("docker.io/library/mariadb:10.11.19".into())
        )
        .as_deref(),
        Some("docker.io/library/mariadb:10.11.19")
    );
}
