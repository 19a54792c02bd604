//! The annotation pass: for every instance whose annotations are known,
//! what its `cnmysql.io/upgrade-to` asks given what it runs and what the
//! status records (see `annotated.rs` for the vocabulary), as record
//! changes, events and annotations to bring in line. One decision per
//! function: [`pass`] walks the instances, [`asked`] reads one request,
//! and [`done`], [`start`] and [`wait`] carry out the three outcomes of
//! `annotations::decide`.

use std::collections::BTreeMap;

use cnmysql_api::{InstanceUpgrade, UpgradePhase};

use crate::event::Event;
use crate::status::{Observed, Snapshot};
use crate::time::{parse_ms, timestamp};
use crate::upgrade::annotated::{
    ATTEMPT_DEADLINE_MS, STEP_DEADLINE_MS, differing, failed_event, failed_now, image_for,
    keeps_pin, mirror, record, status_of,
};
use crate::upgrade::annotations::{
    Decision, Recorded, ServerTarget, Status, Target, UPGRADE_TO, decide, parse,
};
use crate::upgrade::gates::InFlight;

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

/// The annotation pass over every instance whose annotations are known.
/// `in_flight`: when the rollout last gave each instance a step.
pub fn pass(s: &Snapshot, in_flight: &InFlight) -> Pass {
    let mut out = Pass::default();
    for o in &s.instances {
        let name = &o.name;
        let Some(ann) = s.declared.asked.instances.get(name) else {
            continue;
        };
        let rec = record(s, name);
        let mut changes = Vec::new();
        let value = ann
            .get(UPGRADE_TO)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty());
        let new = match value {
            None => not_asked(s, name, rec, &mut changes),
            Some(value) => {
                let one = One {
                    s,
                    o,
                    value,
                    same: rec.filter(|r| r.upgrade_to == value),
                    in_flight,
                };
                match asked(&one, &mut changes, &mut out.system_tables) {
                    Some(new) => new,
                    None => continue, // its server is not resolved yet
                }
            }
        };
        out.changes
            .extend(changes.into_iter().map(|(record, event)| Change {
                instance: name.clone(),
                record,
                event,
            }));
        if new.is_some() || rec.is_some() {
            let d = differing(ann, mirror(new.as_ref()));
            if !d.is_empty() {
                out.annotate.push((name.clone(), d));
            }
        }
    }
    out
}

/// Record changes (the record from now on, an event) of one instance.
type Changes = Vec<(Option<InstanceUpgrade>, Option<Event>)>;

/// One instance asked for something by `upgrade-to=value`.
struct One<'a> {
    s: &'a Snapshot,
    o: &'a Observed,
    value: &'a str,
    /// Its record, when it is of this same request.
    same: Option<&'a InstanceUpgrade>,
    in_flight: &'a InFlight,
}

impl One<'_> {
    fn name(&self) -> &str {
        &self.o.name
    }

    /// The record the decision starts from: this request's, or a new one
    /// carrying over the image the instance's data has run on until the
    /// new attempt pins another.
    fn base(&self) -> InstanceUpgrade {
        self.same.cloned().unwrap_or_else(|| {
            let pin = record(self.s, self.name()).filter(|r| keeps_pin(self.s, self.name(), r));
            InstanceUpgrade {
                upgrade_to: self.value.to_string(),
                image: pin.and_then(|r| r.image.clone()),
                version: pin.and_then(|r| r.version.clone()),
                ..Default::default()
            }
        })
    }

    /// The record failed for `why`. `count`: a new attempt refused at its
    /// start (a deadline fails the attempt already counted); a value that
    /// does not parse is no attempt and is not retried.
    fn fail(&self, mut r: InstanceUpgrade, why: String, count: bool) -> (InstanceUpgrade, Event) {
        if count {
            r.attempts += 1;
        }
        let r = failed_now(&r, &why, self.s.now_ms);
        let name = self.name();
        let event = if parse(self.value).is_err() {
            let text = format!("{name}: {why}");
            Event::new(true, "InstanceUpgradeFailed", Some(name), text)
        } else {
            failed_event(name, &r)
        };
        (r, event)
    }
}

/// What the instance asked for becomes (its record from now on); None
/// when it cannot be decided yet (its server is not resolved).
fn asked(
    one: &One,
    changes: &mut Changes,
    system_tables: &mut Option<String>,
) -> Option<Option<InstanceUpgrade>> {
    let target = match parse(one.value) {
        Ok(t) => t,
        // Not retried: nothing changes until the value does.
        Err(why) if one.same.is_none_or(|r| r.message != why) => {
            let (r, e) = one.fail(one.base(), why, false);
            changes.push((Some(r.clone()), Some(e)));
            return Some(Some(r));
        }
        Err(_) => return Some(one.same.cloned()),
    };
    let server = match &target {
        Target::Image(_) | Target::Version(_) => {
            Some(one.s.declared.asked.servers.get(one.value)?.clone())
        }
        _ => None,
    };
    let wanted = wanted(one, &target, &server);
    let reached = reached(one.s, one.name(), &target, wanted.as_deref())
        .filter(|_| on_asked_image(one, &server));
    if system_tables.is_none()
        && reached.is_none()
        && server.is_some()
        && needs_system_tables(one, wanted.as_deref())
    {
        *system_tables = Some(one.name().to_string());
    }
    let recorded = recorded(one.same);
    let ask = Ask {
        target: &target,
        server: &server,
        wanted,
    };
    Some(Some(
        match decide(reached.as_deref(), &recorded, one.o.ready(), one.s.now_ms) {
            Decision::Done { release } => done(one, &ask, release, changes),
            Decision::Start => start(one, &ask, changes),
            Decision::Wait(_) => wait(one, changes),
        },
    ))
}

/// What was asked, resolved.
struct Ask<'a> {
    target: &'a Target,
    server: &'a Option<Result<ServerTarget, String>>,
    /// What the instance must run once done: a manager's hash, a server
    /// version.
    wanted: Option<String>,
}

fn wanted(
    one: &One,
    target: &Target,
    server: &Option<Result<ServerTarget, String>>,
) -> Option<String> {
    match (target, server) {
        (Target::ManagerFromOperator, _) => one.s.status.operator_executable_hash.clone(),
        (Target::ManagerFromFile { sha256, .. }, _) => sha256
            .clone()
            .or_else(|| one.same.and_then(|r| r.manager_hash.clone())),
        (_, Some(Ok(t))) => Some(t.version.clone()),
        (_, _) => None,
    }
}

/// Back ready on the wanted server version, with system tables older
/// than it.
fn needs_system_tables(one: &One, wanted: Option<&str>) -> bool {
    let o = one.o;
    o.ready()
        && o.outdated.is_none()
        && o.status.as_ref().is_some_and(|st| {
            wanted.is_some_and(|w| crate::upgrade::version::matches(&st.server_version, w))
        })
        && !crate::upgrade::server_checks::system_tables_current(one.s, one.name())
}

fn recorded(same: Option<&InstanceUpgrade>) -> Recorded {
    same.map(|r| Recorded {
        status: status_of(r),
        release: r.release.clone(),
        last_failed_ms: r.last_failed_attempt_at.as_deref().and_then(parse_ms),
        attempts: r.attempts,
    })
    .unwrap_or_default()
}

/// It runs what was asked: the record says done (once).
fn done(one: &One, ask: &Ask, release: String, changes: &mut Changes) -> InstanceUpgrade {
    let mut r = one.base();
    if status_of(&r) == Some(Status::Done) && r.release.as_deref() == Some(release.as_str()) {
        return r;
    }
    r.status = Status::Done.as_str().into();
    r.release = Some(release.clone());
    r.message.clear();
    r.attempt_started_at = None;
    if let (Some(Ok(t)), None) = (ask.server, &r.image) {
        r.version = Some(t.version.clone());
    }
    let (name, value) = (one.name(), one.value);
    let text = format!("{name} runs {release} ({UPGRADE_TO}={value})");
    let event = Event::new(false, "InstanceUpgradeDone", Some(name), text);
    changes.push((Some(r.clone()), Some(event)));
    r
}

/// A new attempt: refused with the reason, or begun (pinned to its
/// manager hash or server image).
fn start(one: &One, ask: &Ask, changes: &mut Changes) -> InstanceUpgrade {
    if let Some(why) = refusal(one, ask).or_else(|| conflict(one.s, ask.target)) {
        let (r, e) = one.fail(one.base(), why, true);
        changes.push((Some(r.clone()), Some(e)));
        return r;
    }
    let mut r = one.base();
    r.attempts += 1;
    r.status = Status::InProgress.as_str().into();
    r.attempt_started_at = Some(timestamp(one.s.now_ms));
    r.message.clear();
    r.manager_hash = ask.wanted.clone().filter(|_| ask.server.is_none());
    if let Some(Ok(t)) = ask.server {
        r.image = Some(t.image.clone());
        r.version = Some(t.version.clone());
    }
    let what = match ask.server {
        Some(Ok(t)) => format!("recreated on {} ({})", t.image, t.version),
        _ => "its manager replaced in place".to_string(),
    };
    let (name, value) = (one.name(), one.value);
    let text = format!(
        "{name}: attempt {} at {UPGRADE_TO}={value}: {what}",
        r.attempts
    );
    let event = Event::new(false, "InstanceUpgradeStarted", Some(name), text);
    changes.push((Some(r.clone()), Some(event)));
    r
}

/// Why a new attempt may not begin, from what was asked: a server that
/// did not resolve, a version move not allowed or not known yet, an
/// operator hash not known yet.
fn refusal(one: &One, ask: &Ask) -> Option<String> {
    match (ask.target, ask.server) {
        (_, Some(Err(e))) => Some(e.clone()),
        (_, Some(Ok(t))) => version_refusal(one, &t.version),
        (Target::ManagerFromOperator, _) if ask.wanted.is_none() => {
            Some("the operator's executable hash is not known yet".into())
        }
        _ => None,
    }
}

fn version_refusal(one: &One, to: &str) -> Option<String> {
    let name = one.name();
    let from = one
        .o
        .status
        .as_ref()
        .map(|st| st.server_version.clone())
        .filter(|v| !v.is_empty())
        .or_else(|| one.s.status.data_version_by_instance.get(name).cloned());
    let Some(f) = from else {
        return Some(format!("the server version {name} runs is not known yet"));
    };
    let v = crate::upgrade::version::Version::parse;
    match (v(&f), v(to)) {
        (Some(f), Some(t)) => {
            crate::upgrade::version::check_path(one.s.spec.mysql.flavor, &f, &t).err()
        }
        _ => Some(format!("{f} → {to} is not a pair of server versions")),
    }
}

/// An attempt under way: failed once past its step's or its own deadline.
fn wait(one: &One, changes: &mut Changes) -> InstanceUpgrade {
    let r = one.base();
    match late(one, &r) {
        Some(why) => {
            let (failed, e) = one.fail(r, why, false);
            changes.push((Some(failed.clone()), Some(e)));
            failed
        }
        None => r,
    }
}

/// Why the attempt in progress in `r` has failed by now, if it has.
fn late(one: &One, r: &InstanceUpgrade) -> Option<String> {
    if status_of(r) != Some(Status::InProgress) {
        return None;
    }
    let (s, name) = (one.s, one.name());
    let started = r.attempt_started_at.as_deref().and_then(parse_ms);
    let step = one.in_flight.get(name).copied();
    let step_late =
        step.is_some_and(|t| s.now_ms - t > STEP_DEADLINE_MS && started.is_none_or(|st| t >= st));
    let secs = STEP_DEADLINE_MS / 1000;
    if step_late {
        return Some(match one.o.status.as_ref() {
            None => format!("{name} did not come back within {secs} s"),
            Some(st) if !st.message.is_empty() => format!(
                "{name} did not reach its target within {secs} s: {}",
                st.message
            ),
            Some(_) => format!("{name} did not reach its target within {secs} s"),
        });
    }
    started
        .is_some_and(|t| s.now_ms - t > ATTEMPT_DEADLINE_MS)
        .then(|| format!("not done within {} s", ATTEMPT_DEADLINE_MS / 1000))
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

/// Whether the server image `one` is made from now is the one asked (or
/// none is asked). An instance pinned to another image by an earlier
/// request has not reached this one even when it runs the same version:
/// its definition was judged against that pin, so it is made again from
/// the asked image first — called done at once, it was made again later
/// by the rollout, after the orchestrator had handed it the primary role
/// (a second switchover).
fn on_asked_image(one: &One, server: &Option<Result<ServerTarget, String>>) -> bool {
    match server {
        Some(Ok(t)) => image_for(&one.s.status, one.name(), None).is_none_or(|pin| pin == t.image),
        _ => true,
    }
}

/// An instance no longer asked for anything: a server image its data has
/// run on stays its pinned image (never taken back to an older one);
/// anything else is dropped, an attempt not done said to be cancelled.
fn not_asked(
    s: &Snapshot,
    name: &str,
    rec: Option<&InstanceUpgrade>,
    changes: &mut Changes,
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
                changes.push((Some(kept.clone()), None));
                return Some(kept);
            }
            Some(r.clone())
        }
        Some(r) => {
            let cancelled = status_of(r) != Some(Status::Done);
            changes.push((
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
            ));
            None
        }
    }
}
