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

use cnmysql_api::InstanceUpgrade;

use crate::event::Event;
use crate::status::Snapshot;
use crate::time::timestamp;
use crate::upgrade::annotations::{
    ATTEMPTS, LAST_FAILED_ATTEMPT_AT, ServerTarget, Source, Status, Target, UPGRADE_RELEASE,
    UPGRADE_STATUS, UPGRADE_TO, backoff_ms, parse,
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

pub(crate) fn status_of(r: &InstanceUpgrade) -> Option<Status> {
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
            .and_then(crate::time::parse_ms);
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
pub(crate) fn keeps_pin(s: &Snapshot, name: &str, r: &InstanceUpgrade) -> bool {
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
