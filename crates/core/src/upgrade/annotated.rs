//! Upgrades asked for by annotation, one instance at a time: what
//! `cnmysql.io/upgrade-to` on an instance asks for, and what to do about it
//! given what the instance runs and what the status records.
//!
//! - `manager=operator`: the running operator's executable, in place;
//! - `manager=file:///path[#sha256=HEX]`: an executable already on the
//!   instance's filesystem, checked by its SHA-256, in place;
//! - `image=REF` / `version=V`: the instance recreated on that server.
//!
//! The record lives in `status.instanceUpgrades` (it outlives a Pod deleted
//! to change its image) and is mirrored on the instance as
//! `cnmysql.io/upgrade-status` (`in-progress`, `failed`, `done`),
//! `cnmysql.io/upgrade-release` (what it runs once done),
//! `cnmysql.io/upgrade-last-failed-attempt-at` and
//! `cnmysql.io/upgrade-attempts`. A failed attempt is tried again while
//! `upgrade-to` stays, never sooner than the back-off; removing it stops.
//!
//! The instance itself moves through the rollout (`rollout.rs`): an
//! attempt in progress makes it a rollout target of its own (its manager
//! hash, its image), so the health gate, the order and the primary's rules
//! are the rollout's.

use std::collections::BTreeMap;

use cnmysql_api::{InstanceUpgrade, UpgradePhase};

use crate::event::Event;
use crate::status::Snapshot;
use crate::time::timestamp;
use crate::upgrade::annotations::{
    ATTEMPTS, Decision, LAST_FAILED_ATTEMPT_AT, Recorded, ServerTarget, Source, Status, Target,
    UPGRADE_RELEASE, UPGRADE_STATUS, UPGRADE_TO, backoff_ms, decide, parse,
};

/// An attempt whose rollout step was given this long ago and has not
/// reached its target (the instance not back ready on its new server, the
/// manager not reporting the new hash) has failed.
pub const STEP_DEADLINE_MS: i64 = 90_000;
/// An attempt not done this long after it started has failed, whatever
/// held it (the health gate, say).
pub const ATTEMPT_DEADLINE_MS: i64 = 600_000;

/// Resolve `image=` or `version=` the way the Cluster's own image is
/// resolved (`image::resolve`): a version through the Cluster's
/// image catalog, an image's version from the catalog, its tag or what the
/// platform knows of it.
pub fn resolve_server(
    spec: &cnmysql_api::ClusterSpec,
    value: &str,
    catalog: Option<Result<crate::upgrade::image::Catalog, String>>,
    default_image: &str,
    image_version: impl FnMut(&str) -> Option<String>,
) -> Result<ServerTarget, String> {
    let mut spec = spec.clone();
    match parse(value)? {
        Target::Image(i) => {
            spec.mysql.image = Some(i);
            spec.mysql.version = None;
        }
        Target::Version(v) => {
            spec.mysql.image = None;
            spec.mysql.version = Some(v);
        }
        _ => return Err(format!("{UPGRADE_TO}={value} names no server")),
    }
    let d = crate::upgrade::image::resolve(&spec, catalog, default_image, image_version, false);
    let bad = |e: String| format!("{UPGRADE_TO}={value}: {e}");
    let image = d
        .image
        .ok_or_else(|| bad(d.error.clone().unwrap_or_else(|| "no image".into())))?;
    let version = d.version.ok_or_else(|| {
        bad(format!(
            "the server version of {image} is not known: list it in the Cluster's image catalog, or ask for version=<version>"
        ))
    })?;
    Ok(ServerTarget { image, version })
}

/// The record of `name`'s annotation-driven upgrade.
pub fn record<'a>(s: &'a Snapshot, name: &str) -> Option<&'a InstanceUpgrade> {
    s.status.instance_upgrades.get(name)
}

fn status_of(r: &InstanceUpgrade) -> Option<Status> {
    Status::parse(&r.status)
}

/// Whether `name` has an attempt under way.
pub fn in_progress(s: &Snapshot, name: &str) -> bool {
    record(s, name).is_some_and(|r| status_of(r) == Some(Status::InProgress))
}

/// The manager hash `name` must run, when an annotation pins it (its
/// attempt is under way, failed, or done while `upgrade-to` stays).
pub fn pinned_hash<'a>(s: &'a Snapshot, name: &str) -> Option<&'a str> {
    record(s, name)
        .filter(|r| {
            matches!(
                parse(&r.upgrade_to),
                Ok(Target::ManagerFromOperator | Target::ManagerFromFile { .. })
            )
        })
        .and_then(|r| r.manager_hash.as_deref())
}

/// Whether a rollout step given to `name` at `given_ms` still stands for
/// its annotation-driven attempt: not once the attempt failed (the retry
/// gets its step at once), nor once a newer attempt started after it.
pub fn step_stands(s: &Snapshot, name: &str, given_ms: i64) -> bool {
    record(s, name).is_none_or(|r| {
        let started = r
            .attempt_started_at
            .as_deref()
            .and_then(|a| a.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .map(|a| a.as_millisecond());
        status_of(r) != Some(Status::Failed) && started.is_none_or(|a| a <= given_ms)
    })
}

/// Whether `name`'s rollout step lasts until the instance is ready (not
/// only until its server runs): a server attempt under way, whose
/// [`STEP_DEADLINE_MS`] runs from the step.
pub fn step_awaits_ready(s: &Snapshot, name: &str) -> bool {
    in_progress(s, name) && in_place_source(s, name).is_none()
}

/// The source of `name`'s in-place upgrade under way, if it is one.
pub fn in_place_source(s: &Snapshot, name: &str) -> Option<Source> {
    let r = record(s, name).filter(|r| status_of(r) == Some(Status::InProgress))?;
    match parse(&r.upgrade_to).ok()? {
        Target::ManagerFromOperator => Some(Source::Operator),
        Target::ManagerFromFile { path, sha256 } => Some(Source::File { path, sha256 }),
        _ => None,
    }
}

/// The server image an instance is made from: the one its annotation-driven
/// upgrade pinned (under way, or done and not behind the Cluster's own),
/// else `cluster_image`.
pub fn image_for(
    status: &cnmysql_api::ClusterStatus,
    name: &str,
    cluster_image: Option<String>,
) -> Option<String> {
    let pinned = status.instance_upgrades.get(name).and_then(|r| {
        let image = r.image.clone()?;
        match Status::parse(&r.status) {
            // A failed attempt whose instance never came back keeps
            // retrying on the same image; one that failed validation
            // pinned nothing.
            Some(Status::InProgress | Status::Failed) => Some(image),
            Some(Status::Done) => {
                // Done: kept until the Cluster's own image is as new.
                let ahead = match (
                    r.version
                        .as_deref()
                        .and_then(crate::upgrade::version::Version::parse),
                    status
                        .target_server_version
                        .as_deref()
                        .or(status.server_version.as_deref())
                        .and_then(crate::upgrade::version::Version::parse),
                ) {
                    (Some(mine), Some(cluster)) => {
                        mine.compare(&cluster) == std::cmp::Ordering::Greater
                    }
                    _ => true,
                };
                ahead.then_some(image)
            }
            None => None,
        }
    });
    pinned.or(cluster_image)
}

/// Whether `r` pins a server image `name`'s data has run on (its data
/// version, or the version it runs, is at least the pinned one): taking
/// the instance off it would be a downgrade.
fn keeps_pin(s: &Snapshot, name: &str, r: &InstanceUpgrade) -> bool {
    use crate::upgrade::version::Version;
    let Some(pinned) = r.version.as_deref().and_then(Version::parse) else {
        return false;
    };
    let running = s
        .get(name)
        .and_then(|o| o.status.as_ref())
        .map(|st| st.server_version.clone());
    r.image.is_some()
        && [
            s.status.data_version_by_instance.get(name).cloned(),
            running,
        ]
        .into_iter()
        .flatten()
        .filter_map(|v| Version::parse(&v))
        .any(|v| v.compare(&pinned).is_ge())
}

/// The annotations that mirror `record` on the instance (None: remove).
pub fn mirror(record: Option<&InstanceUpgrade>) -> BTreeMap<String, Option<String>> {
    let mut out = BTreeMap::new();
    out.insert(UPGRADE_STATUS.to_string(), record.map(|r| r.status.clone()));
    out.insert(
        UPGRADE_RELEASE.to_string(),
        record.and_then(|r| r.release.clone()),
    );
    out.insert(
        LAST_FAILED_ATTEMPT_AT.to_string(),
        record.and_then(|r| r.last_failed_attempt_at.clone()),
    );
    out.insert(
        ATTEMPTS.to_string(),
        record
            .filter(|r| r.attempts > 0)
            .map(|r| r.attempts.to_string()),
    );
    out
}

/// The keys of `want` whose value differs from `have`.
pub fn differing(
    have: &BTreeMap<String, String>,
    want: BTreeMap<String, Option<String>>,
) -> BTreeMap<String, Option<String>> {
    want.into_iter()
        .filter(|(k, v)| have.get(k) != v.as_ref())
        .collect()
}

/// One instance's change from [`pass`].
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub instance: String,
    /// The record from now on (None: removed).
    pub record: Option<InstanceUpgrade>,
    pub event: Option<Event>,
}

/// What the annotation pass does now: records to write, and annotations
/// to bring in line with them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pass {
    pub changes: Vec<Change>,
    /// Per instance, annotations to set (Some) or remove (None).
    pub annotate: Vec<(String, BTreeMap<String, Option<String>>)>,
    /// An instance back ready on its new server whose system tables are
    /// older (MariaDB: `mariadb-upgrade` has not run for this major
    /// version): its manager is asked to upgrade them before it is done.
    pub system_tables: Option<String>,
}

/// Why an attempt may not start now on this cluster, if anything stops it.
fn conflict(s: &Snapshot, target: &Target) -> Option<String> {
    let server = matches!(target, Target::Image(_) | Target::Version(_));
    let declared = s.status.upgrade_history.last().filter(|r| {
        matches!(r.phase, UpgradePhase::Upgrading) || (r.phase == UpgradePhase::Pending && server)
    });
    declared.map(|r| {
        format!(
            "the declared server upgrade to {} is {}: asked again once it ends",
            r.version,
            r.phase.as_str()
        )
    })
}

/// What `name` runs of `target`'s kind when it runs what was asked.
fn reached(s: &Snapshot, name: &str, target: &Target, wanted: Option<&str>) -> Option<String> {
    let o = s.get(name)?;
    let st = o.status.as_ref()?;
    match target {
        Target::ManagerFromOperator | Target::ManagerFromFile { .. } => {
            let w = wanted?;
            (st.executable_hash == w && st.mysqld_running).then(|| w.to_string())
        }
        Target::Image(_) | Target::Version(_) => {
            let w = wanted?;
            (st.ready
                && o.outdated.is_none()
                && !st.server_version.is_empty()
                && crate::upgrade::version::matches(&st.server_version, w)
                && crate::upgrade::server_checks::system_tables_current(s, name))
            .then(|| st.server_version.clone())
        }
    }
}

/// An instance no longer asked for anything: a server image its data has
/// run on stays its pinned image (never taken back to an older one);
/// anything else is dropped, an attempt not done said to be cancelled.
fn not_asked(
    s: &Snapshot,
    name: &str,
    rec: Option<&InstanceUpgrade>,
    change: &mut impl FnMut(Option<InstanceUpgrade>, Option<Event>),
) -> Option<InstanceUpgrade> {
    match rec {
        None => None,
        // Asked no more: a server image the instance's data has
        // run on stays its image (never taken back to an older
        // one); anything else is dropped.
        Some(r) if keeps_pin(s, name, r) => {
            // Kept as the instance's image, no longer as asked
            // (a Pod made again does not carry the annotation).
            if !r.upgrade_to.is_empty() || status_of(r) != Some(Status::Done) {
                let kept = InstanceUpgrade {
                    upgrade_to: String::new(),
                    status: Status::Done.as_str().into(),
                    release: r.release.clone().or_else(|| r.version.clone()),
                    attempt_started_at: None,
                    message: String::new(),
                    ..r.clone()
                };
                change(Some(kept.clone()), None);
                return Some(kept);
            }
            Some(r.clone())
        }
        Some(r) => {
            let cancelled = status_of(r) != Some(Status::Done);
            change(
                None,
                cancelled.then(|| {
                    Event::new(
                        true,
                        "InstanceUpgradeCancelled",
                        Some(name),
                        format!(
                            "{UPGRADE_TO} was removed from {name}: its upgrade to {} is not retried",
                            r.upgrade_to
                        ),
                    )
                }),
            );
            None
        }
    }
}

/// The annotation pass over every instance whose annotations are known.
/// `in_flight`: when the rollout last gave each instance a step.
pub fn pass(s: &Snapshot, in_flight: &crate::upgrade::gates::InFlight) -> Pass {
    let mut out = Pass::default();
    let at = timestamp(s.now_ms);
    'each: for o in &s.instances {
        let name = &o.name;
        let Some(ann) = s.declared.asked.instances.get(name) else {
            continue;
        };
        let rec = record(s, name);
        let mut change = |record: Option<InstanceUpgrade>, event: Option<Event>| {
            out.changes.push(Change {
                instance: name.clone(),
                record,
                event,
            });
        };
        let new = match ann
            .get(UPGRADE_TO)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
        {
            None => not_asked(s, name, rec, &mut change),
            Some(value) => 'decide: {
                let same = rec.filter(|r| r.upgrade_to == value);
                let recorded = same.map(|r| Recorded {
                    status: status_of(r),
                    release: r.release.clone(),
                    last_failed_ms: r
                        .last_failed_attempt_at
                        .as_deref()
                        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                        .map(|t| t.as_millisecond()),
                    attempts: r.attempts,
                });
                let recorded = recorded.unwrap_or_default();
                // Asked anew: the image the instance's data has run on is
                // carried over until the new attempt pins another.
                let base = same.cloned().unwrap_or_else(|| {
                    let pin = rec.filter(|r| keeps_pin(s, name, r));
                    InstanceUpgrade {
                        upgrade_to: value.to_string(),
                        image: pin.and_then(|r| r.image.clone()),
                        version: pin.and_then(|r| r.version.clone()),
                        ..Default::default()
                    }
                });
                // `count`: a new attempt refused at its start (a deadline
                // fails the attempt already counted); a value that does not
                // parse is no attempt and is not retried.
                let fail = |mut r: InstanceUpgrade, why: String, count: bool| {
                    if count {
                        r.attempts += 1;
                    }
                    let r = failed_now(&r, &why, s.now_ms);
                    let event = if parse(value).is_err() {
                        Event::new(
                            true,
                            "InstanceUpgradeFailed",
                            Some(name),
                            format!("{name}: {why}"),
                        )
                    } else {
                        failed_event(name, &r)
                    };
                    (r, event)
                };
                let target = match parse(value) {
                    Ok(t) => t,
                    Err(why) => {
                        // Not retried: nothing changes until the value does.
                        if same.is_none_or(|r| r.message != why) {
                            let (r, e) = fail(base, why, false);
                            change(Some(r.clone()), Some(e));
                            break 'decide Some(r);
                        }
                        break 'decide same.cloned();
                    }
                };
                let server = match &target {
                    Target::Image(_) | Target::Version(_) => {
                        match s.declared.asked.servers.get(value) {
                            None => continue 'each, // not resolved yet
                            Some(r) => Some(r.clone()),
                        }
                    }
                    _ => None,
                };
                let wanted: Option<String> = match (&target, &server) {
                    (Target::ManagerFromOperator, _) => s.status.operator_executable_hash.clone(),
                    (Target::ManagerFromFile { sha256, .. }, _) => sha256
                        .clone()
                        .or_else(|| same.and_then(|r| r.manager_hash.clone())),
                    (_, Some(Ok(t))) => Some(t.version.clone()),
                    (_, _) => None,
                };
                let reached = reached(s, name, &target, wanted.as_deref());
                if reached.is_none()
                    && server.is_some()
                    && out.system_tables.is_none()
                    && o.ready()
                    && o.outdated.is_none()
                    && o.status.as_ref().is_some_and(|st| {
                        wanted.as_deref().is_some_and(|w| {
                            crate::upgrade::version::matches(&st.server_version, w)
                        })
                    })
                    && !crate::upgrade::server_checks::system_tables_current(s, name)
                {
                    out.system_tables = Some(name.clone());
                }
                match decide(reached.as_deref(), &recorded, s.now_ms) {
                    Decision::Done { release } => {
                        let mut r = base.clone();
                        if status_of(&r) != Some(Status::Done)
                            || r.release.as_deref() != Some(release.as_str())
                        {
                            r.status = Status::Done.as_str().into();
                            r.release = Some(release.clone());
                            r.message.clear();
                            r.attempt_started_at = None;
                            if let (Some(Ok(t)), None) = (&server, &r.image) {
                                r.version = Some(t.version.clone());
                            }
                            change(
                                Some(r.clone()),
                                Some(Event::new(
                                    false,
                                    "InstanceUpgradeDone",
                                    Some(name),
                                    format!("{name} runs {release} ({UPGRADE_TO}={value})"),
                                )),
                            );
                        }
                        Some(r)
                    }
                    Decision::Start => {
                        let refused = match (&target, &server) {
                            (_, Some(Err(e))) => Some(e.clone()),
                            (_, Some(Ok(t))) => {
                                let from = o
                                    .status
                                    .as_ref()
                                    .map(|st| st.server_version.clone())
                                    .filter(|v| !v.is_empty())
                                    .or_else(|| {
                                        s.status.data_version_by_instance.get(name).cloned()
                                    });
                                let v = crate::upgrade::version::Version::parse;
                                match from {
                                    Some(f) => match (v(&f), v(&t.version)) {
                                        (Some(f), Some(to)) => crate::upgrade::version::check_path(
                                            s.spec.mysql.flavor,
                                            &f,
                                            &to,
                                        )
                                        .err(),
                                        _ => Some(format!(
                                            "{f} → {} is not a pair of server versions",
                                            t.version
                                        )),
                                    },
                                    None => Some(format!(
                                        "the server version {name} runs is not known yet"
                                    )),
                                }
                            }
                            (Target::ManagerFromOperator, _) if wanted.is_none() => {
                                Some("the operator's executable hash is not known yet".into())
                            }
                            _ => None,
                        }
                        .or_else(|| conflict(s, &target));
                        if let Some(why) = refused {
                            let (r, e) = fail(base.clone(), why, true);
                            change(Some(r.clone()), Some(e));
                            Some(r)
                        } else {
                            let mut r = base.clone();
                            r.attempts += 1;
                            r.status = Status::InProgress.as_str().into();
                            r.attempt_started_at = Some(at.clone());
                            r.message.clear();
                            r.manager_hash = wanted.clone().filter(|_| server.is_none());
                            if let Some(Ok(t)) = &server {
                                r.image = Some(t.image.clone());
                                r.version = Some(t.version.clone());
                            }
                            let what = match &server {
                                Some(Ok(t)) => format!("recreated on {} ({})", t.image, t.version),
                                _ => "its manager replaced in place".to_string(),
                            };
                            change(
                                Some(r.clone()),
                                Some(Event::new(
                                    false,
                                    "InstanceUpgradeStarted",
                                    Some(name),
                                    format!(
                                        "{name}: attempt {} at {UPGRADE_TO}={value}: {what}",
                                        r.attempts
                                    ),
                                )),
                            );
                            Some(r)
                        }
                    }
                    Decision::Wait(_) => {
                        let mut r = base.clone();
                        let started = r
                            .attempt_started_at
                            .as_deref()
                            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                            .map(|t| t.as_millisecond());
                        let step = in_flight.get(name).copied();
                        let late = if status_of(&r) != Some(Status::InProgress) {
                            None
                        } else if step.is_some_and(|t| {
                            s.now_ms - t > STEP_DEADLINE_MS && started.is_none_or(|st| t >= st)
                        }) {
                            Some(match o.status.as_ref() {
                                None => format!(
                                    "{name} did not come back within {} s",
                                    STEP_DEADLINE_MS / 1000
                                ),
                                Some(st) if !st.message.is_empty() => format!(
                                    "{name} did not reach its target within {} s: {}",
                                    STEP_DEADLINE_MS / 1000,
                                    st.message
                                ),
                                Some(_) => format!(
                                    "{name} did not reach its target within {} s",
                                    STEP_DEADLINE_MS / 1000
                                ),
                            })
                        } else if started.is_some_and(|t| s.now_ms - t > ATTEMPT_DEADLINE_MS) {
                            Some(format!("not done within {} s", ATTEMPT_DEADLINE_MS / 1000))
                        } else {
                            None
                        };
                        if let Some(why) = late {
                            let (failed, e) = fail(r, why, false);
                            r = failed;
                            change(Some(r.clone()), Some(e));
                        }
                        Some(r)
                    }
                }
            }
        };
        if let Some(r) = &new {
            let d = differing(ann, mirror(Some(r)));
            if !d.is_empty() {
                out.annotate.push((name.clone(), d));
            }
        } else if rec.is_some() {
            let d = differing(ann, mirror(None));
            if !d.is_empty() {
                out.annotate.push((name.clone(), d));
            }
        }
    }
    out
}

/// The event of a failed attempt (retried while the annotation stays).
pub fn failed_event(instance: &str, r: &InstanceUpgrade) -> Event {
    Event::new(
        true,
        "InstanceUpgradeFailed",
        Some(instance),
        format!(
            "{instance}: attempt {} at {UPGRADE_TO}={} failed: {}; retried in {} s while the annotation stays",
            r.attempts,
            r.upgrade_to,
            r.message,
            backoff_ms(r.attempts) / 1000
        ),
    )
}

/// The outcome of an in-place or recreate step that failed outright (the
/// manager refused the file, the platform could not make the instance):
/// the record as failed, counted, with the reason.
pub fn failed_now(r: &InstanceUpgrade, why: &str, now_ms: i64) -> InstanceUpgrade {
    let mut r = r.clone();
    r.status = Status::Failed.as_str().into();
    r.last_failed_attempt_at = Some(timestamp(now_ms));
    r.attempt_started_at = None;
    r.message = why.to_string();
    r
}

#[cfg(test)]
mod tests;
