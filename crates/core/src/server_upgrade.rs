//! Server version upgrades: which image the Cluster asks for and which
//! version it holds, whether moving the data there is allowed, when it may
//! start, and the ordered steps that carry it out, recorded one entry per
//! target version in `status.upgradeHistory`.
//!
//! The cluster runs `status.image`; instances are made from it, and from
//! the target only once the upgrade to it has started (the record is
//! `Upgrading`): so nothing is touched while an upgrade is refused,
//! scheduled for later, outside the maintenance window or waiting for a
//! healthy cluster, and an instance recreated meanwhile comes back on the
//! version it ran. Once started, the rollout (`rollout.rs`) moves the
//! instances — replicas in ascending ordinal, a switchover, the former
//! primary — and [`advance`] only watches each step come true, in order:
//!
//! 1. `Validation`: the version is known and is not lower than any that has
//!    run on the data, nor a jump the flavour does not support.
//! 2. `PreHealthCheck`: every instance in service ready and caught up, no
//!    switchover or failover under way (skipped by the force annotation).
//! 3. `UpgradeReplica` per replica, `Switchover`, `UpgradeFormerPrimary`.
//! 4. `PostUpgrade`: system tables at the new version on every instance
//!    (MariaDB: `mariadb-upgrade`, run by the manager when asked; MySQL: the
//!    server's own upgrade at start, checked).
//! 5. `PostHealthCheck`: every instance ready, caught up, on the version.
//!
//! A step not true within [`STEP_DEADLINE_MS`] fails the upgrade: the
//! rollout stops where it is and the cluster keeps serving; setting
//! `spec.mysql.upgradeAt` to a later time tries again from that step.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use cnmysql_api::{
    ClusterSpec, ClusterStatus, Flavor, UpgradeCondition, UpgradePhase, UpgradeRecord,
};

use crate::event::Event;
use crate::status::Snapshot;
use crate::time::timestamp;

/// A step still not true this long after it began fails the upgrade.
pub const STEP_DEADLINE_MS: i64 = 30 * 60_000;

/// `lastProbeTime` is rewritten at most this often while nothing else of a
/// step changes (each write is a status update).
pub const PROBE_RECORD_MS: i64 = 60_000;

/// Step names, in order.
pub const VALIDATION: &str = "Validation";
pub const PRE_HEALTH_CHECK: &str = "PreHealthCheck";
pub const UPGRADE_REPLICA: &str = "UpgradeReplica";
pub const SWITCHOVER: &str = "Switchover";
pub const UPGRADE_FORMER_PRIMARY: &str = "UpgradeFormerPrimary";
pub const POST_UPGRADE: &str = "PostUpgrade";
pub const POST_HEALTH_CHECK: &str = "PostHealthCheck";

/// The annotation that lets a rollout go on past the health gate.
pub const FORCE_ANNOTATION: &str = "cnmysql.io/force-rolling-update";

/// A server version: its numeric components (`10.11.19` → 10, 11, 19).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version(Vec<u64>);

impl Version {
    /// The leading `N.N[.N]` of `text` (`10.11.19-MariaDB-0+deb12u1` →
    /// 10.11.19); None without at least major.minor.
    pub fn parse(text: &str) -> Option<Version> {
        let lead: String = text
            .trim()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let parts: Vec<u64> = lead
            .split('.')
            .take(3)
            .map_while(|p| p.parse().ok())
            .collect();
        (parts.len() >= 2).then_some(Version(parts))
    }

    /// Compared on the components both state (`10.11` equals `10.11.19`).
    pub fn compare(&self, other: &Version) -> Ordering {
        self.0
            .iter()
            .zip(&other.0)
            .map(|(a, b)| a.cmp(b))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }

    /// major.minor.
    pub fn series(&self) -> (u64, u64) {
        (self.0[0], self.0[1])
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u64::to_string).collect();
        f.write_str(&parts.join("."))
    }
}

/// Whether `text` states the version `want` (on the components `want`
/// states).
pub fn matches(text: &str, want: &str) -> bool {
    match (Version::parse(text), Version::parse(want)) {
        (Some(a), Some(b)) => a.compare(&b).is_eq(),
        _ => false,
    }
}

/// The version an image's tag states (`docker.io/library/mariadb:10.11.19`
/// → 10.11.19); None for `latest`, digests and tags without one.
pub fn tag_version(image: &str) -> Option<String> {
    let last = image.rsplit('/').next()?;
    let last = last.split('@').next()?;
    let (_, tag) = last.split_once(':')?;
    Version::parse(tag).map(|v| v.to_string())
}

/// MySQL's long-term releases: an upgrade may not skip one.
const MYSQL_LTS: &[(u64, u64)] = &[(5, 7), (8, 0), (8, 4), (9, 7)];

/// Whether the data that has run `from` may be moved to `to`: never lower,
/// and for MySQL never past a long-term release (upgrade to it first).
pub fn check_path(flavor: Flavor, from: &Version, to: &Version) -> Result<(), String> {
    if to.compare(from).is_lt() {
        return Err(format!(
            "{to} is lower than {from}, which has run on the data: a downgrade is not supported (the server cannot read data a newer version wrote)"
        ));
    }
    if flavor == Flavor::Mysql {
        let skipped: Vec<String> = MYSQL_LTS
            .iter()
            .filter(|lts| **lts > from.series() && **lts < to.series())
            .map(|(a, b)| format!("{a}.{b}"))
            .collect();
        if !skipped.is_empty() {
            return Err(format!(
                "MySQL cannot go from {from} to {to} at once: it skips the long-term release {}; upgrade to {} first",
                skipped.join(", "),
                skipped[0]
            ));
        }
    }
    Ok(())
}

/// What the platform found the Cluster to declare, beyond its spec.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Declared {
    /// The server image the spec asks for, once resolved.
    pub image: Option<String>,
    /// The version that image holds, when known.
    pub version: Option<String>,
    /// Why no image could be resolved (a missing catalog, a version it
    /// does not list), naming the field.
    pub error: Option<String>,
    /// `cnmysql.io/force-rolling-update: "true"`.
    pub force_rollout: bool,
    /// What the `cnmysql.io/upgrade-*` annotations ask, as the platform
    /// read them.
    pub asked: crate::instance_upgrade::Asked,
}

/// An image catalog as the platform found it.
#[derive(Clone, Debug, PartialEq)]
pub struct Catalog {
    /// `ImageCatalog/<name>` or `ClusterImageCatalog/<name>`.
    pub what: String,
    pub flavor: Flavor,
    pub images: Vec<cnmysql_api::CatalogImage>,
}

/// The catalog `spec.mysql.imageCatalogRef` names among `docs` (None when
/// there is no reference; `Some(Err)` when it is not among them).
pub fn find_catalog(
    spec: &ClusterSpec,
    docs: &[cnmysql_api::CatalogDocument],
) -> Option<Result<Catalog, String>> {
    let r = spec.mysql.image_catalog_ref.as_ref()?;
    Some(
        docs.iter()
            .find(|d| d.kind() == r.kind && d.name() == r.name)
            .map(|d| {
                let (flavor, images) = d.entries();
                Catalog {
                    what: format!("{}/{}", r.kind.as_str(), r.name),
                    flavor,
                    images: images.to_vec(),
                }
            })
            .ok_or_else(|| {
                format!(
                    "{} {} was not found: create it, or name one that exists",
                    r.kind.as_str(),
                    r.name
                )
            }),
    )
}

/// Resolve the spec to an image and its version. `catalog`: the catalog
/// `spec.mysql.imageCatalogRef` names (an error when it cannot be read);
/// `default_image`: the flavour's image on this platform; `image_version`:
/// what the platform knows of an image's version beyond its tag.
pub fn resolve(
    spec: &ClusterSpec,
    catalog: Option<Result<Catalog, String>>,
    default_image: &str,
    mut image_version: impl FnMut(&str) -> Option<String>,
    force_rollout: bool,
) -> Declared {
    let m = &spec.mysql;
    let fail = |e: String| Declared {
        error: Some(e),
        force_rollout,
        ..Default::default()
    };
    let (image, version) = match (&m.image_catalog_ref, catalog) {
        (Some(r), Some(Ok(c))) => {
            if c.flavor != m.flavor {
                return fail(format!(
                    "spec.mysql.imageCatalogRef: {} lists {} images, and the Cluster's flavour is {}: name a {} catalog",
                    c.what,
                    c.flavor.as_str(),
                    m.flavor.as_str(),
                    m.flavor.as_str()
                ));
            }
            let want = m.version.clone().unwrap_or_default();
            let Some(entry) = c.images.iter().find(|i| i.version == want) else {
                let listed: Vec<&str> = c.images.iter().map(|i| i.version.as_str()).collect();
                return fail(format!(
                    "spec.mysql.version: {} ({}) lists no {want}; it lists {}: pick one of those or add it to the catalog",
                    c.what,
                    r.name,
                    listed.join(", ")
                ));
            };
            // What the platform knows of the image beats the catalog's word.
            if let Some(have) = image_version(&entry.image)
                && !matches(&have, &entry.version)
            {
                return fail(format!(
                    "spec.mysql.imageCatalogRef: {} lists {} as {}, and it holds {have}: correct the catalog",
                    c.what, entry.image, entry.version
                ));
            }
            (entry.image.clone(), Some(entry.version.clone()))
        }
        (Some(_), Some(Err(e))) => {
            return fail(format!("spec.mysql.imageCatalogRef: {e}"));
        }
        (Some(r), None) => {
            return fail(format!(
                "spec.mysql.imageCatalogRef: {} {} was not found: create it, or name one that exists",
                r.kind.as_str(),
                r.name
            ));
        }
        _ => {
            let image = m.image.clone().unwrap_or_else(|| default_image.to_string());
            let version = image_version(&image).or_else(|| tag_version(&image));
            (image, version)
        }
    };
    if let (Some(want), false) = (&m.version, m.image_catalog_ref.is_some()) {
        match &version {
            Some(have) if matches(have, want) => {}
            Some(have) => {
                return fail(format!(
                    "spec.mysql.version is {want}, and the image {image} holds {have}: name an image of {want}, or set the version it holds"
                ));
            }
            None => {}
        }
    }
    Declared {
        version: version.or_else(|| m.version.clone()),
        image: Some(image),
        error: None,
        force_rollout,
        asked: Default::default(),
    }
}

/// The image instances are made from now: the target once its upgrade has
/// started (or for a cluster that has run nothing yet), else the image the
/// cluster runs.
pub fn instance_image(status: &ClusterStatus, target: Option<&str>) -> Option<String> {
    let Some(target) = target else {
        return status.image.clone();
    };
    let started = status.upgrade_history.last().is_some_and(|r| {
        r.image == target
            && (matches!(r.phase, UpgradePhase::Upgrading | UpgradePhase::Upgraded)
                || (r.phase == UpgradePhase::Failed && r.start_time.is_some()))
    });
    match &status.image {
        Some(current) if !started => Some(current.clone()),
        _ => Some(target.to_string()),
    }
}

/// The upgrade part of the status.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UpgradeStatus {
    pub image: Option<String>,
    pub server_version: Option<String>,
    pub target_image: Option<String>,
    pub target_version: Option<String>,
    pub data_versions: BTreeMap<String, String>,
    pub history: Vec<UpgradeRecord>,
}

impl UpgradeStatus {
    pub fn of(st: &ClusterStatus) -> UpgradeStatus {
        UpgradeStatus {
            image: st.image.clone(),
            server_version: st.server_version.clone(),
            target_image: st.target_image.clone(),
            target_version: st.target_server_version.clone(),
            data_versions: st.data_version_by_instance.clone(),
            history: st.upgrade_history.clone(),
        }
    }

    /// Write it into `st`; false when nothing changed.
    pub fn apply(&self, st: &mut ClusterStatus) -> bool {
        if UpgradeStatus::of(st) == *self {
            return false;
        }
        st.image = self.image.clone();
        st.server_version = self.server_version.clone();
        st.target_image = self.target_image.clone();
        st.target_server_version = self.target_version.clone();
        st.data_version_by_instance = self.data_versions.clone();
        st.upgrade_history = self.history.clone();
        true
    }

    /// The latest record, if it is about the current target.
    pub fn current(&self) -> Option<&UpgradeRecord> {
        self.history.last().filter(|r| {
            Some(&r.image) == self.target_image.as_ref() && self.image != self.target_image
        })
    }
}

/// What [`advance`] found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Advance {
    /// The upgrade part of the status as it should now read.
    pub status: UpgradeStatus,
    /// Events to record once that status is written.
    pub events: Vec<Event>,
    /// PostUpgrade: the instance whose system tables are to be upgraded now.
    pub system_tables: Option<String>,
    /// Why rollouts are held (an upgrade failed part way).
    pub hold: Option<String>,
    /// For the phase: what the upgrade waits for or does now.
    pub reason: Option<String>,
    /// The upgrade was refused or failed: the Degraded condition's reason
    /// and message.
    pub degraded: Option<(String, String)>,
}

/// Whether the primary is settled and every instance in service is
/// reachable, ready and caught up (the rollout's health gate); why not
/// otherwise.
pub fn healthy(s: &Snapshot) -> Result<(), String> {
    let primary = crate::rollout::settled_primary(s)?;
    crate::rollout::instances_healthy(s, primary, None)
}

/// Where a step stands now.
enum Probe {
    Done(String),
    NotYet(String),
}

/// Whether `name` runs the target version, from the target definition,
/// ready (and caught up, for a replica).
fn on_target(s: &Snapshot, name: &str, version: &str) -> Result<(), String> {
    let Some(o) = s.get(name) else {
        return Err(format!("{name} is not observed"));
    };
    if let Some(change) = &o.outdated {
        return Err(format!("{name} is to be recreated ({change})"));
    }
    let Some(st) = &o.status else {
        return Err(format!("waiting for {name} to be reachable"));
    };
    if !matches(&st.server_version, version) {
        return Err(format!(
            "waiting for {name} to run {version} (it runs {})",
            if st.server_version.is_empty() {
                "an unknown version"
            } else {
                &st.server_version
            }
        ));
    }
    // Forced: an instance that runs the version has taken its step, ready
    // or not (it may be the broken one the new version is to fix).
    if s.declared.force_rollout {
        return Ok(());
    }
    if !st.ready {
        return Err(format!("waiting for {name} to be ready on {version}"));
    }
    if s.status.current_primary.as_deref() != Some(name)
        && st
            .lag_seconds
            .is_some_and(|l| l > crate::rollout::MAX_LAG_SECONDS)
    {
        return Err(format!("waiting for {name} to catch up"));
    }
    Ok(())
}

/// Whether `name`'s system tables are at the version it runs: MariaDB's
/// `mariadb-upgrade` works per major.minor (it has nothing to do within
/// one), MySQL upgrades itself to the exact version.
pub fn system_tables_current(s: &Snapshot, name: &str) -> bool {
    let flavor = s.spec.mysql.flavor;
    s.get(name)
        .and_then(|o| o.status.as_ref())
        .is_some_and(|st| {
            match (
                Version::parse(&st.system_tables_version),
                Version::parse(&st.server_version),
            ) {
                (Some(t), Some(v)) if flavor == Flavor::Mariadb => t.series() >= v.series(),
                (Some(t), Some(v)) => t.compare(&v).is_ge(),
                _ => false,
            }
        })
}

fn in_service(s: &Snapshot, name: &str) -> bool {
    !s.is_fenced(name) && !s.is_diverged(name)
}

fn probe(s: &Snapshot, c: &UpgradeCondition, version: &str) -> Probe {
    let who = c.instance.clone().unwrap_or_default();
    match c.type_.as_str() {
        UPGRADE_REPLICA | UPGRADE_FORMER_PRIMARY => {
            if s.get(&who).is_none() {
                return Probe::Done(format!("{who} is no longer an instance"));
            }
            if !in_service(s, &who) {
                return Probe::Done(format!(
                    "{who} is out of service (fenced or diverged): it is brought to {version} when it returns"
                ));
            }
            match on_target(s, &who, version) {
                Ok(()) => Probe::Done(format!("{who} runs {version}")),
                Err(e) => Probe::NotYet(e),
            }
        }
        SWITCHOVER => {
            let current = s.status.current_primary.as_deref();
            if current != Some(who.as_str()) && current == s.status.target_primary.as_deref() {
                Probe::Done(format!(
                    "{who} handed the primary role to {}",
                    current.unwrap_or_default()
                ))
            } else if on_target(s, &who, version).is_ok() {
                Probe::Done(format!("{who} was restarted in place as the primary"))
            } else {
                Probe::NotYet(format!(
                    "waiting for {who} to hand the primary role to an upgraded replica"
                ))
            }
        }
        POST_UPGRADE => {
            let behind: Vec<&str> = s
                .instances
                .iter()
                .filter(|o| in_service(s, &o.name) && !system_tables_current(s, &o.name))
                .map(|o| o.name.as_str())
                .collect();
            if behind.is_empty() {
                Probe::Done(format!("system tables at {version} on every instance"))
            } else {
                Probe::NotYet(format!(
                    "upgrading the system tables on {}",
                    behind.join(", ")
                ))
            }
        }
        POST_HEALTH_CHECK => {
            if let Err(e) = healthy(s) {
                return Probe::NotYet(e);
            }
            for o in s.instances.iter().filter(|o| in_service(s, &o.name)) {
                if let Err(e) = on_target(s, &o.name, version) {
                    return Probe::NotYet(e);
                }
            }
            Probe::Done(format!("every instance is ready on {version}"))
        }
        _ => Probe::Done(String::new()),
    }
}

fn condition(type_: &str, instance: Option<&str>) -> UpgradeCondition {
    UpgradeCondition {
        type_: type_.to_string(),
        instance: instance.map(str::to_string),
        status: "Unknown".into(),
        reason: String::new(),
        message: String::new(),
        start_time: None,
        complete_time: None,
        last_probe_time: None,
        last_transition_time: None,
    }
}

/// Record what a step's probe found at `at` (`now_ms`): times move only
/// when something changed (or lastProbeTime, every [`PROBE_RECORD_MS`]).
fn record(c: &mut UpgradeCondition, status: &str, reason: &str, message: &str, now_ms: i64) {
    let at = timestamp(now_ms);
    if c.start_time.is_none() {
        c.start_time = Some(at.clone());
    }
    let changed = c.status != status || c.reason != reason || c.message != message;
    if c.status != status {
        c.last_transition_time = Some(at.clone());
        if status == "True" || status == "False" {
            c.complete_time = Some(at.clone());
        }
    }
    let stale_probe = c
        .last_probe_time
        .as_deref()
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .is_none_or(|t| now_ms - t.as_millisecond() >= PROBE_RECORD_MS);
    if changed || stale_probe {
        c.last_probe_time = Some(at);
    }
    c.status = status.into();
    c.reason = reason.into();
    c.message = message.into();
}

fn since_ms(t: &Option<String>) -> Option<i64> {
    t.as_deref()
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .map(|t| t.as_millisecond())
}

fn event(warning: bool, reason: &'static str, message: String) -> Event {
    Event {
        warning,
        reason,
        instance: None,
        message,
    }
}

/// One pass of the server upgrade: the upgrade part of the status as it
/// should now read, what to record, and what to do.
pub fn advance(s: &Snapshot) -> Advance {
    let mut u = UpgradeStatus::of(&s.status);
    let mut out = Advance::default();
    for o in &s.instances {
        if let Some(st) = o.status.as_ref().filter(|st| !st.data_version.is_empty()) {
            u.data_versions
                .insert(o.name.clone(), st.data_version.clone());
        }
    }
    u.data_versions
        .retain(|n, _| s.instances.iter().any(|o| &o.name == n));
    let oldest = u
        .data_versions
        .values()
        .filter_map(|v| Version::parse(v))
        .min_by(|a, b| a.compare(b));
    let newest = u
        .data_versions
        .values()
        .filter_map(|v| Version::parse(v))
        .max_by(|a, b| a.compare(b));
    if let Some(v) = &oldest {
        u.server_version = Some(v.to_string());
    }
    let d = &s.declared;
    u.target_image = d.image.clone();
    u.target_version = d.version.clone();
    if let Some(e) = &d.error {
        out.degraded = Some(("ImageUnresolved".into(), e.clone()));
        out.reason = Some(e.clone());
        out.status = u;
        return out;
    }
    let Some(target) = d.image.clone() else {
        out.status = u;
        return out;
    };
    // A cluster that has run nothing else takes the target as it is.
    if u.image.is_none() {
        u.image = Some(target);
        out.status = u;
        return out;
    }
    if u.image.as_deref() == Some(target.as_str()) {
        out.status = u;
        return out;
    }
    let now = s.now_ms;
    let at = timestamp(now);
    let needs_new = u
        .history
        .last()
        .is_none_or(|r| r.image != target || r.phase == UpgradePhase::Upgraded);
    if needs_new {
        u.history.push(UpgradeRecord {
            version: d.version.clone().unwrap_or_else(|| "unknown".into()),
            image: target.clone(),
            from_version: u.server_version.clone(),
            phase: UpgradePhase::New,
            start_time: None,
            complete_time: None,
            conditions: vec![
                condition(VALIDATION, None),
                condition(PRE_HEALTH_CHECK, None),
            ],
        });
        out.events.push(event(
            false,
            "ServerUpgradeDeclared",
            format!(
                "server upgrade to {} declared ({} → {target})",
                d.version.as_deref().unwrap_or("an unknown version"),
                u.image.as_deref().unwrap_or_default()
            ),
        ));
    }
    let flavor = s.spec.mysql.flavor;
    let rec = u.history.last_mut().expect("a record");
    let before = rec.phase;
    let version = rec.version.clone();

    // 1. Validation, every pass until the upgrade starts.
    if rec.start_time.is_none() {
        let verdict = match (Version::parse(&version), &newest) {
            (None, _) => Err((
                "UnknownVersion",
                format!(
                    "the server version of {target} is not known: set spec.mysql.version to the version it holds, or use an image catalog (spec.mysql.imageCatalogRef)"
                ),
            )),
            (Some(to), Some(from)) => check_path(flavor, from, &to).map_err(|e| {
                let why = if to.compare(from).is_lt() { "DowngradeRefused" } else { "UnsupportedUpgrade" };
                let m = &s.spec.mysql;
                let field = if m.version.is_some() {
                    "spec.mysql.version"
                } else if m.image.is_some() {
                    "spec.mysql.image"
                } else {
                    "the flavour's default image"
                };
                (why, format!("{field} asks for {to}: {e}. Set it back to {from} or to a supported newer version"))
            }),
            (Some(_), None) => Ok(()),
        };
        let c = &mut rec.conditions[0];
        match verdict {
            Err((why, message)) => {
                record(c, "False", why, &message, now);
                rec.phase = UpgradePhase::Failed;
                if rec.complete_time.is_none() {
                    rec.complete_time = Some(at.clone());
                }
                if before != UpgradePhase::Failed {
                    out.events.push(event(
                        true,
                        "ServerUpgradeRefused",
                        format!(
                            "server upgrade to {version} refused; nothing was touched: {message}"
                        ),
                    ));
                }
                out.degraded = Some((why.into(), message.clone()));
                out.reason = Some(format!("Server upgrade to {version} refused: {message}"));
                out.status = u;
                return out;
            }
            Ok(()) => {
                let from = newest
                    .as_ref()
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "a new cluster".into());
                record(
                    c,
                    "True",
                    "Validated",
                    &format!("{from} → {version} is supported"),
                    now,
                );
                rec.complete_time = None;
            }
        }
        // Scheduled?
        let scheduled = s
            .spec
            .mysql
            .upgrade_at
            .as_deref()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .map(|t| t.as_millisecond())
            .filter(|t| *t > now);
        let wait = if let Some(t) = scheduled {
            Some((
                "Scheduled",
                format!(
                    "the upgrade to {version} starts at {} (spec.mysql.upgradeAt)",
                    timestamp(t)
                ),
            ))
        } else if let Some(o) = crate::orchestrated_upgrade::running(s) {
            Some((
                "OrchestratedUpgrade",
                format!(
                    "the upgrade to {version} waits for the upgrade the Cluster's {} annotation asks ({}) to end",
                    crate::instance_upgrade::UPGRADE_TO,
                    o.upgrade_to
                ),
            ))
        } else if let Err(e) =
            crate::maintenance_window::check(s.spec.maintenance_window.as_ref(), now)
        {
            Some((
                "MaintenanceWindow",
                format!("the upgrade to {version} waits: {e}"),
            ))
        } else {
            match healthy(s) {
                Ok(()) => None,
                Err(_) if d.force_rollout => None,
                Err(e) => Some((
                    "Unhealthy",
                    format!("the upgrade to {version} waits for a healthy cluster: {e}"),
                )),
            }
        };
        let pre = &mut rec.conditions[1];
        if let Some((why, message)) = wait {
            let was = pre.reason.clone();
            record(pre, "Unknown", why, &message, now);
            rec.phase = UpgradePhase::Pending;
            if was != why {
                out.events
                    .push(event(false, "ServerUpgradePending", message.clone()));
            }
            out.reason = Some(format!("Server upgrade pending: {message}"));
            out.status = u;
            return out;
        }
        let message = if healthy(s).is_ok() {
            "every instance is ready and caught up".to_string()
        } else {
            format!("{FORCE_ANNOTATION} is set: going on without the health gate")
        };
        record(
            pre,
            "True",
            if healthy(s).is_ok() {
                "Healthy"
            } else {
                "Forced"
            },
            &message,
            now,
        );
        // Lay the steps out from the topology as it stands.
        let primary = s.status.current_primary.clone().unwrap_or_default();
        let mut replicas: Vec<_> = s
            .instances
            .iter()
            .filter(|o| o.name != primary && in_service(s, &o.name))
            .collect();
        replicas.sort_by_key(|o| o.ordinal);
        rec.conditions.truncate(2);
        for r in replicas {
            rec.conditions
                .push(condition(UPGRADE_REPLICA, Some(&r.name)));
        }
        if s.spec.instances > 1 {
            rec.conditions.push(condition(SWITCHOVER, Some(&primary)));
        }
        rec.conditions
            .push(condition(UPGRADE_FORMER_PRIMARY, Some(&primary)));
        rec.conditions.push(condition(POST_UPGRADE, None));
        rec.conditions.push(condition(POST_HEALTH_CHECK, None));
        rec.phase = UpgradePhase::Upgrading;
        rec.start_time = Some(at.clone());
        rec.complete_time = None;
        out.events.push(event(
            false,
            "ServerUpgradeStarted",
            format!(
                "server upgrade to {version} started: {}",
                rec.conditions[2..]
                    .iter()
                    .map(|c| match &c.instance {
                        Some(i) => format!("{} {i}", c.type_),
                        None => c.type_.clone(),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
        out.reason = Some(format!("Server upgrade to {version} started"));
        out.status = u;
        return out;
    }

    // A failed upgrade stays failed until spec.mysql.upgradeAt is set
    // after the failure.
    if rec.phase == UpgradePhase::Failed {
        let failed_at = since_ms(&rec.complete_time).unwrap_or(now);
        let retry = s
            .spec
            .mysql
            .upgrade_at
            .as_deref()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .is_some_and(|t| t.as_millisecond() > failed_at && t.as_millisecond() <= now);
        let failed = rec.conditions.iter().find(|c| c.status == "False").cloned();
        if !retry {
            let message = format!(
                "the server upgrade to {version} failed at {}: {}; the rollout is stopped. Fix the cause, then set spec.mysql.upgradeAt to a time after {} to go on",
                failed
                    .as_ref()
                    .map(|c| c.type_.as_str())
                    .unwrap_or("a step"),
                failed
                    .as_ref()
                    .map(|c| c.message.as_str())
                    .unwrap_or_default(),
                rec.complete_time.as_deref().unwrap_or_default()
            );
            out.hold = Some(message.clone());
            out.degraded = Some(("ServerUpgradeFailed".into(), message.clone()));
            out.reason = Some(message);
            out.status = u;
            return out;
        }
        for c in rec.conditions.iter_mut().filter(|c| c.status == "False") {
            c.status = "Unknown".into();
            c.start_time = Some(at.clone());
            c.complete_time = None;
            c.reason = "Retrying".into();
        }
        rec.phase = UpgradePhase::Upgrading;
        rec.complete_time = None;
        out.events.push(event(
            false,
            "ServerUpgradeRetrying",
            format!(
                "server upgrade to {version}: trying the failed step again (spec.mysql.upgradeAt)"
            ),
        ));
    }

    // 2. The steps, in order: the first not true is the one under way.
    for i in 2..rec.conditions.len() {
        if rec.conditions[i].status == "True" {
            continue;
        }
        let c = &mut rec.conditions[i];
        match probe(s, c, &version) {
            Probe::Done(message) => {
                record(c, "True", "Done", &message, now);
                out.events.push(event(
                    false,
                    "ServerUpgradeStep",
                    format!(
                        "server upgrade to {version}: {}{} done: {message}",
                        c.type_,
                        c.instance
                            .as_deref()
                            .map(|i| format!(" {i}"))
                            .unwrap_or_default()
                    ),
                ));
            }
            Probe::NotYet(message) => {
                let started = since_ms(&c.start_time).unwrap_or(now);
                if now - started > STEP_DEADLINE_MS {
                    let message = format!(
                        "not done within {} min: {message}",
                        STEP_DEADLINE_MS / 60_000
                    );
                    record(c, "False", "TimedOut", &message, now);
                    rec.phase = UpgradePhase::Failed;
                    rec.complete_time = Some(at.clone());
                    out.events.push(event(
                        true,
                        "ServerUpgradeFailed",
                        format!(
                            "server upgrade to {version} failed at {}: {message}",
                            c.type_
                        ),
                    ));
                    out.degraded = Some(("ServerUpgradeFailed".into(), message.clone()));
                    out.hold = Some(message.clone());
                    out.reason = Some(format!("Server upgrade to {version} failed: {message}"));
                    out.status = u;
                    return out;
                }
                record(c, "Unknown", "InProgress", &message, now);
                if c.type_ == POST_UPGRADE {
                    // The primary first, then the replicas in order.
                    let primary = s.status.current_primary.clone();
                    let mut order: Vec<&str> = primary.iter().map(String::as_str).collect();
                    order.extend(
                        s.instances
                            .iter()
                            .map(|o| o.name.as_str())
                            .filter(|n| Some(*n) != primary.as_deref()),
                    );
                    out.system_tables = order
                        .into_iter()
                        .find(|n| {
                            in_service(s, n)
                                && !system_tables_current(s, n)
                                && s.get(n).is_some_and(|o| o.ready())
                        })
                        .map(str::to_string);
                }
                let step = match &c.instance {
                    Some(n) => format!("{} {n}", c.type_),
                    None => c.type_.clone(),
                };
                out.reason = Some(format!(
                    "Upgrading the server to {version}: {step}: {message}"
                ));
                out.status = u;
                return out;
            }
        }
    }
    rec.phase = UpgradePhase::Upgraded;
    rec.complete_time = Some(at);
    let from = rec.from_version.clone().unwrap_or_default();
    u.image = Some(target.clone());
    u.server_version = Some(version.clone());
    out.events.push(event(
        false,
        "ServerUpgradeCompleted",
        format!("every instance runs {version} ({target}); upgraded from {from}"),
    ));
    out.status = u;
    out
}

#[cfg(test)]
mod tests;
