use super::*;
use crate::declared::Declared;
use crate::testutil::snapshot;
use crate::upgrade::gates::InFlight;
use crate::upgrade::image::{Catalog, instance_image, resolve};
use crate::upgrade::rollout::Next;
use crate::upgrade::version::tag_version;
use crate::upgrade::version::{Version, check_path};
use cnmysql_api::{CatalogImage, ClusterSpec, Flavor, MaintenanceWindow};

const OLD: &str = "docker.io/library/mariadb:10.11.18";
const NEW: &str = "docker.io/library/mariadb:10.11.19";
const T0: i64 = 1_800_000_000_000;

fn v(text: &str) -> Version {
    Version::parse(text).unwrap()
}

#[test]
fn versions_compare_on_what_both_state() {
    assert_eq!(v("10.11.19-MariaDB-0+deb12u1").to_string(), "10.11.19");
    assert!(v("10.11").compare(&v("10.11.19")).is_eq());
    assert!(v("10.11.18").compare(&v("10.11.19")).is_lt());
    assert!(v("11.8.9").compare(&v("10.11.19")).is_gt());
    assert!(Version::parse("latest").is_none());
    assert_eq!(tag_version(NEW).as_deref(), Some("10.11.19"));
    assert_eq!(tag_version("mysql:9.7").as_deref(), Some("9.7"));
    assert_eq!(tag_version("registry:5000/mariadb:latest"), None);
    assert_eq!(tag_version("mariadb@sha256:abcd"), None);
}

#[test]
fn downgrades_and_skipped_mysql_long_term_releases_are_refused() {
    let e = check_path(Flavor::Mariadb, &v("10.11.19"), &v("10.11.18")).unwrap_err();
    assert!(e.contains("downgrade"), "{e}");
    assert!(check_path(Flavor::Mariadb, &v("11.8.9"), &v("10.11.19")).is_err());
    assert!(check_path(Flavor::Mariadb, &v("10.11.18"), &v("11.8")).is_ok());
    let e = check_path(Flavor::Mysql, &v("8.0.40"), &v("9.7.4")).unwrap_err();
    assert!(e.contains("upgrade to 8.4 first"), "{e}");
    assert!(check_path(Flavor::Mysql, &v("8.4.3"), &v("9.7.4")).is_ok());
    assert!(check_path(Flavor::Mysql, &v("9.1.0"), &v("9.7.4")).is_ok());
    assert!(check_path(Flavor::Mysql, &v("8.0.40"), &v("8.4.3")).is_ok());
}

fn catalog(flavor: Flavor) -> Catalog {
    Catalog {
        what: "ClusterImageCatalog/mariadb".into(),
        flavor,
        images: vec![
            CatalogImage {
                version: "10.11.18".into(),
                image: OLD.into(),
            },
            CatalogImage {
                version: "10.11.19".into(),
                image: NEW.into(),
            },
        ],
    }
}

/// `spec` resolved through the test catalog of `flavor`.
fn from_catalog(spec: &ClusterSpec, flavor: Flavor) -> Declared {
    resolve(spec, Some(Ok(catalog(flavor))), "x", |_| None, false)
}

#[test]
fn the_spec_resolves_through_a_catalog_an_image_or_the_default() {
    let mut spec: ClusterSpec = serde_json::from_str(r#"{"mysql": {"version": "10.11.19", "imageCatalogRef": {"kind": "ClusterImageCatalog", "name": "mariadb"}}}"#).unwrap();
    let d = from_catalog(&spec, Flavor::Mariadb);
    assert_eq!(
        (d.image.as_deref(), d.version.as_deref()),
        (Some(NEW), Some("10.11.19"))
    );
    spec.mysql.version = Some("11.8".into());
    let d = from_catalog(&spec, Flavor::Mariadb);
    assert!(
        d.error
            .unwrap()
            .contains("lists no 11.8; it lists 10.11.18, 10.11.19")
    );
    let d = from_catalog(&spec, Flavor::Mysql);
    assert!(d.error.unwrap().contains("name a mariadb catalog"));
    let d = resolve(&spec, None, "x", |_| None, false);
    assert!(
        d.error
            .unwrap()
            .contains("ClusterImageCatalog mariadb was not found")
    );

    let spec: ClusterSpec =
        serde_json::from_str(r#"{"mysql": {"image": "mariadb:11.8"}}"#).unwrap();
    // The platform may know more than the tag (the image store's manifest).
    let d = resolve(&spec, None, "x", |_| Some("11.8.9".into()), false);
    assert_eq!(d.version.as_deref(), Some("11.8.9"));
    let d = resolve(&spec, None, "x", |_| None, false);
    assert_eq!(d.version.as_deref(), Some("11.8"));
    let spec: ClusterSpec =
        serde_json::from_str(r#"{"mysql": {"image": "mariadb:11.8", "version": "10.11.19"}}"#)
            .unwrap();
    let d = resolve(&spec, None, "x", |_| None, false);
    assert!(d.error.unwrap().contains("holds 11.8"));
    let spec: ClusterSpec = serde_json::from_str("{}").unwrap();
    let d = resolve(&spec, None, OLD, |_| None, true);
    assert_eq!(
        (d.image.as_deref(), d.version.as_deref(), d.force_rollout),
        (Some(OLD), Some("10.11.18"), true)
    );
}

/// db-1 primary, db-2 and db-3 replicas, all on 10.11.18 data and
/// program, the cluster running OLD and declaring `target`.
fn cluster(target: &str, version: &str) -> Snapshot {
    let mut obs = crate::testutil::three();
    for o in &mut obs {
        let st = o.status.as_mut().unwrap();
        st.server_version = "10.11.18".into();
        st.data_version = "10.11.18".into();
        st.system_tables_version = "10.11.18".into();
        st.lag_seconds = Some(0);
    }
    let mut s = snapshot(obs);
    s.now_ms = T0;
    s.status.image = Some(OLD.into());
    s.declared = Declared {
        image: Some(target.into()),
        version: Some(version.into()),
        ..Default::default()
    };
    s
}

/// A window open one minute a day, at midnight: closed at the tests' times.
fn closed_window() -> MaintenanceWindow {
    MaintenanceWindow {
        days: vec![],
        start: "00:00".into(),
        duration: "1m".into(),
    }
}

/// The phase of the latest record.
fn last_phase(s: &Snapshot) -> UpgradePhase {
    s.status.upgrade_history.last().unwrap().phase
}

/// Apply a pass's status to the snapshot, as a platform would.
fn pass(s: &mut Snapshot) -> Advance {
    let a = advance(s);
    a.status.apply(&mut s.status);
    a
}

/// `name` came back on `version` from the target definition.
fn upgraded(s: &mut Snapshot, name: &str, version: &str) {
    let o = s.instances.iter_mut().find(|o| o.name == name).unwrap();
    o.outdated = None;
    let st = o.status.as_mut().unwrap();
    st.server_version = version.into();
    st.data_version = version.into();
}

fn steps(s: &Snapshot) -> Vec<(String, String)> {
    s.status
        .upgrade_history
        .last()
        .unwrap()
        .conditions
        .iter()
        .map(|c| {
            (
                format!(
                    "{}{}",
                    c.type_,
                    c.instance
                        .as_deref()
                        .map(|i| format!(" {i}"))
                        .unwrap_or_default()
                ),
                c.status.clone(),
            )
        })
        .collect()
}

#[test]
fn a_new_cluster_takes_its_target_without_an_upgrade() {
    let mut s = cluster(NEW, "10.11.19");
    s.status.image = None;
    let a = pass(&mut s);
    assert_eq!(s.status.image.as_deref(), Some(NEW));
    assert!(s.status.upgrade_history.is_empty() && a.events.is_empty());
    assert_eq!(s.status.server_version.as_deref(), Some("10.11.18"));
}

#[test]
fn a_downgrade_is_refused_with_nothing_touched() {
    let mut s = cluster(OLD, "10.11.18");
    s.status.image = Some(NEW.into());
    for o in &mut s.instances {
        o.status.as_mut().unwrap().data_version = "10.11.19".into();
    }
    let a = pass(&mut s);
    let r = s.status.upgrade_history.last().unwrap();
    assert_eq!(r.phase, UpgradePhase::Failed);
    assert_eq!(r.conditions[0].reason, "DowngradeRefused");
    assert!(
        r.conditions[0]
            .message
            .contains("10.11.18 is lower than 10.11.19"),
        "{}",
        r.conditions[0].message
    );
    assert!(
        a.events
            .iter()
            .any(|e| e.reason == "ServerUpgradeRefused" && e.warning)
    );
    assert_eq!(a.degraded.as_ref().unwrap().0, "DowngradeRefused");
    // Instances are still made from the image the cluster runs.
    assert_eq!(instance_image(&s.status, Some(OLD)).as_deref(), Some(NEW));
    // Said once.
    assert!(pass(&mut s).events.is_empty());
}

#[test]
fn an_upgrade_waits_for_upgrade_at_then_the_window_then_walks_every_step_in_order() {
    let mut s = cluster(NEW, "10.11.19");
    s.spec.mysql.upgrade_at = Some(timestamp(T0 + 60_000));
    let a = pass(&mut s);
    let r = s.status.upgrade_history.last().unwrap();
    assert_eq!(r.phase, UpgradePhase::Pending);
    assert!(a.reason.unwrap().contains("starts at"));
    assert!(a.events.iter().any(|e| e.reason == "ServerUpgradePending"));
    assert_eq!(instance_image(&s.status, Some(NEW)).as_deref(), Some(OLD));

    // Past upgradeAt, but outside the maintenance window.
    s.now_ms = T0 + 61_000;
    s.spec.maintenance_window = Some(closed_window());
    let a = pass(&mut s);
    assert!(a.reason.unwrap().contains("outside the maintenance window"));
    assert_eq!(last_phase(&s), UpgradePhase::Pending);

    s.spec.maintenance_window = None;
    let a = pass(&mut s);
    assert!(a.events.iter().any(|e| e.reason == "ServerUpgradeStarted"));
    assert_eq!(instance_image(&s.status, Some(NEW)).as_deref(), Some(NEW));
    assert_eq!(
        steps(&s),
        [
            ("Validation".to_string(), "True".to_string()),
            ("PreHealthCheck".into(), "True".into()),
            ("UpgradeReplica db-2".into(), "Unknown".into()),
            ("UpgradeReplica db-3".into(), "Unknown".into()),
            ("Switchover db-1".into(), "Unknown".into()),
            ("UpgradeFormerPrimary db-1".into(), "Unknown".into()),
            ("PostUpgrade".into(), "Unknown".into()),
            ("PostHealthCheck".into(), "Unknown".into()),
        ]
    );
    // The platform now reports the instances outdated; replicas first.
    for o in &mut s.instances {
        o.outdated = Some("image … → …".into());
    }
    pass(&mut s);
    assert_eq!(steps(&s)[2].1, "Unknown");
    upgraded(&mut s, "db-2", "10.11.19");
    pass(&mut s);
    assert_eq!(steps(&s)[2].1, "True");
    assert_eq!(steps(&s)[3].1, "Unknown");
    upgraded(&mut s, "db-3", "10.11.19");
    pass(&mut s);
    assert_eq!(steps(&s)[4], ("Switchover db-1".into(), "Unknown".into()));
    s.status.current_primary = Some("db-2".into());
    s.status.target_primary = Some("db-2".into());
    pass(&mut s);
    assert_eq!(steps(&s)[4].1, "True");
    upgraded(&mut s, "db-1", "10.11.19");
    // Within one major.minor MariaDB has nothing to upgrade: say db-2's
    // tables are older than that.
    s.instances[1]
        .status
        .as_mut()
        .unwrap()
        .system_tables_version = "10.6.5-MariaDB".into();
    let a = pass(&mut s);
    // PostUpgrade: the new primary's system tables first.
    assert_eq!(steps(&s)[6], ("PostUpgrade".into(), "Unknown".into()));
    assert_eq!(a.system_tables.as_deref(), Some("db-2"));
    for n in ["db-1", "db-2", "db-3"] {
        let o = s.instances.iter_mut().find(|o| o.name == n).unwrap();
        o.status.as_mut().unwrap().system_tables_version = "10.11.19-MariaDB".into();
    }
    let a = pass(&mut s);
    assert!(
        a.events
            .iter()
            .any(|e| e.reason == "ServerUpgradeCompleted"),
        "{a:?}"
    );
    let r = s.status.upgrade_history.last().unwrap();
    assert_eq!(r.phase, UpgradePhase::Upgraded);
    assert!(
        r.conditions
            .iter()
            .all(|c| c.status == "True" && c.complete_time.is_some())
    );
    assert_eq!(s.status.image.as_deref(), Some(NEW));
    assert_eq!(s.status.server_version.as_deref(), Some("10.11.19"));
    // Nothing more to do.
    assert_eq!(advance(&s).status, UpgradeStatus::of(&s.status));
}

#[test]
fn an_unhealthy_cluster_holds_the_start_unless_forced() {
    let mut s = cluster(NEW, "10.11.19");
    s.instances[2].status.as_mut().unwrap().ready = false;
    let a = pass(&mut s);
    assert!(a.reason.unwrap().contains("waiting for db-3 to be ready"));
    assert_eq!(last_phase(&s), UpgradePhase::Pending);
    s.declared.force_rollout = true;
    pass(&mut s);
    let r = s.status.upgrade_history.last().unwrap();
    assert_eq!(r.phase, UpgradePhase::Upgrading);
    assert_eq!(r.conditions[1].reason, "Forced");
}

#[test]
fn a_step_past_its_deadline_fails_the_upgrade_and_holds_rollouts_until_retried() {
    let mut s = cluster(NEW, "10.11.19");
    pass(&mut s);
    for o in &mut s.instances {
        o.outdated = Some("image".into());
    }
    pass(&mut s);
    s.now_ms += STEP_DEADLINE_MS + 1;
    let a = pass(&mut s);
    assert!(a.events.iter().any(|e| e.reason == "ServerUpgradeFailed"));
    assert_eq!(last_phase(&s), UpgradePhase::Failed);
    // Instances stay on the target definition: the ones already moved are
    // not moved back.
    assert_eq!(instance_image(&s.status, Some(NEW)).as_deref(), Some(NEW));
    let next = crate::upgrade::rollout::next(&s, &InFlight::new(), false);
    assert!(
        matches!(&next, Next::Wait { reason, .. } if reason.contains("failed at UpgradeReplica")),
        "{next:?}"
    );
    // upgradeAt after the failure: tried again.
    s.spec.mysql.upgrade_at = Some(timestamp(s.now_ms + 500));
    s.now_ms += 1000;
    let a = pass(&mut s);
    assert!(a.events.iter().any(|e| e.reason == "ServerUpgradeRetrying"));
    assert_eq!(last_phase(&s), UpgradePhase::Upgrading);
}

#[test]
fn rollouts_move_only_inside_the_maintenance_window_and_force_skips_the_health_gate() {
    let mut s = cluster(OLD, "10.11.18");
    for o in &mut s.instances {
        o.outdated = Some("spec.resources changed".into());
    }
    s.spec.maintenance_window = Some(closed_window());
    let next = crate::upgrade::rollout::next(&s, &InFlight::new(), false);
    assert!(
        matches!(&next, Next::Wait { reason, .. } if reason.contains("opens at")),
        "{next:?}"
    );
    s.spec.maintenance_window = None;
    s.instances[2].status.as_mut().unwrap().ready = false;
    s.instances[2].outdated = None;
    let next = crate::upgrade::rollout::next(&s, &InFlight::new(), false);
    assert!(
        matches!(&next, Next::Wait { reason, .. } if reason.contains("db-3 to be ready")),
        "{next:?}"
    );
    s.declared.force_rollout = true;
    let next = crate::upgrade::rollout::next(&s, &InFlight::new(), false);
    assert!(
        matches!(&next, Next::Recreate { instance, .. } if instance == "db-2"),
        "{next:?}"
    );
}
