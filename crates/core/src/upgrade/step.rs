//! The rollouts' part of a topology step: the server upgrade's status and
//! system tables, upgrades asked by annotation, and the rollout of a new
//! manager, definition or server image, one instance at a time.

use crate::action::Action;
use crate::event::Event;
use crate::memory::Memory;
use crate::status::Snapshot;
use crate::status_change::StatusChange;
use crate::time::timestamp;
use crate::upgrade::rollout::{self, Next};

/// A system tables upgrade not reported done is asked for again after
/// this long.
pub const SYSTEM_TABLES_RETRY_MS: i64 = 60_000;

/// The server upgrade's pass: its status (with the events that go with
/// it, recorded once it is written) and the system tables step.
pub(crate) fn server_upgrade_step(s: &Snapshot, memory: &mut Memory) -> Vec<Action> {
    let advance = crate::upgrade::server::advance(s);
    let mut out = Vec::new();
    if advance.status != crate::upgrade::server::UpgradeStatus::of(&s.status) {
        out.push(Action::Status {
            change: StatusChange::ServerUpgrade(advance.status.clone()),
            then: advance.events.clone(),
        });
    }
    if let Some(instance) = advance.system_tables {
        out.extend(ask_system_tables(s, memory, instance));
    }
    out
}

/// Ask `instance` to upgrade its system tables, unless it was asked
/// within [`SYSTEM_TABLES_RETRY_MS`].
fn ask_system_tables(s: &Snapshot, memory: &mut Memory, instance: String) -> Option<Action> {
    let recently = memory
        .system_tables_asked
        .as_ref()
        .is_some_and(|(n, t)| *n == instance && s.now_ms - t < SYSTEM_TABLES_RETRY_MS);
    if recently {
        return None;
    }
    memory.system_tables_asked = Some((instance.clone(), s.now_ms));
    let version = s
        .get(&instance)
        .and_then(|o| o.status.as_ref())
        .and_then(|st| crate::upgrade::version::Version::parse(&st.server_version))
        .map(|v| v.to_string())
        .or_else(|| s.declared.version.clone())
        .unwrap_or_else(|| "the running version".into());
    Some(Action::UpgradeSystemTables {
        then: Event::new(
            false,
            "SystemTablesUpgraded",
            Some(&instance),
            format!("system tables of {instance} upgraded to {version}"),
        ),
        instance,
    })
}

/// The annotation-driven upgrades' pass: each instance's record and the
/// orchestration, with their mirrors on the objects.
pub(crate) fn annotation_step(s: &Snapshot, memory: &mut Memory) -> Vec<Action> {
    let mut out = Vec::new();
    let pass = crate::upgrade::annotated_pass::pass(s, &memory.rollout_in_flight);
    for c in pass.changes {
        out.push(Action::Status {
            change: StatusChange::InstanceUpgrade {
                instance: c.instance,
                record: c.record,
            },
            then: c.event.into_iter().collect(),
        });
    }
    for (instance, set) in pass.annotate {
        out.push(Action::Annotate {
            instance: Some(instance),
            set,
        });
    }
    if let Some(instance) = pass.system_tables {
        out.extend(ask_system_tables(s, memory, instance));
    }
    let next = rollout::next(s, &memory.rollout_in_flight, memory.consent(s));
    let busy = match &next {
        Next::Current | Next::Held { .. } | Next::WaitingForUser { .. } => None,
        n => n.reason(),
    };
    let o = crate::upgrade::orchestrated::pass(s, busy.as_deref());
    if let Some(record) = o.record {
        out.push(Action::Status {
            change: StatusChange::OrchestratedUpgrade(record),
            then: o.event.into_iter().collect(),
        });
    }
    if !o.annotate.is_empty() {
        out.push(Action::Annotate {
            instance: None,
            set: o.annotate,
        });
    }
    if let Some((instance, value)) = o.mark {
        out.push(Action::Annotate {
            instance: Some(instance),
            set: [(
                crate::upgrade::annotations::UPGRADE_TO.to_string(),
                Some(value),
            )]
            .into(),
        });
    }
    out
}

/// The rollout's next step as actions, with an event per step.
pub(crate) fn rollout_step(s: &Snapshot, memory: &mut Memory) -> Vec<Action> {
    // A step is done once its instance answers up to date with its server
    // running (ready or not: the health gate asks for more, unless forced).
    memory.rollout_in_flight.retain(|n, t| {
        crate::upgrade::annotated::step_stands(s, n, *t)
            && s.get(n).is_none_or(|o| {
                o.outdated.is_some()
                    || rollout::is_current(s, n) != Some(true)
                    || o.status.as_ref().is_none_or(|st| !st.mysqld_running)
                    || (crate::upgrade::annotated::step_awaits_ready(s, n) && !o.ready())
            })
    });
    // A switchover while the supervised rollout waited is the human's go.
    if let Some((p, target)) = memory.waiting_for_user.clone()
        && s.status.current_primary.as_ref() != Some(&p)
        && s.status.current_primary == s.status.target_primary
    {
        memory.supervised_consent = Some(target);
        memory.waiting_for_user = None;
    }
    let next = rollout::next(s, &memory.rollout_in_flight, memory.consent(s));
    if let (Next::WaitingForUser { primary, .. }, Some(target)) =
        (&next, &s.status.operator_executable_hash)
    {
        memory.waiting_for_user = Some((primary.clone(), target.clone()));
    }
    let at = timestamp(s.now_ms);
    let mut out = Vec::new();
    let said = next.reason().unwrap_or_default();
    let changed = said != memory.last_rollout;
    memory.last_rollout = said.clone();
    match next {
        Next::Current => {
            if changed {
                out.push(Action::Event(Event::new(
                    false,
                    "UpgradeCompleted",
                    None,
                    "every instance is up to date: the operator's instance manager and the Cluster's definition".into(),
                )));
            }
        }
        Next::Wait { .. } | Next::Held { .. } => {}
        Next::WaitingForUser { primary, message } => {
            if changed {
                out.push(Action::Event(Event::new(
                    true,
                    "UpgradeWaitingForUser",
                    Some(&primary),
                    message,
                )));
            }
        }
        Next::InPlace {
            instance, source, ..
        } => {
            out.push(step_time(&at));
            memory.rollout_in_flight.insert(instance.clone(), s.now_ms);
            let how = match &source {
                rollout::Source::Operator => "streaming the new executable".to_string(),
                rollout::Source::File { path, .. } => format!("from {path} on the instance"),
            };
            out.push(Action::UpgradeInPlace {
                then: Event::new(
                    false,
                    "UpgradingInstanceManager",
                    Some(&instance),
                    format!("{said}: {how}; mysqld keeps running"),
                ),
                attempt: attempt(s, &instance),
                source,
                instance,
            });
        }
        Next::Recreate {
            instance,
            primary,
            note,
            change,
            ..
        } => {
            out.push(step_time(&at));
            memory.rollout_in_flight.insert(instance.clone(), s.now_ms);
            if primary {
                memory.restarting_primary = Some((instance.clone(), s.now_ms));
            }
            let how = match note {
                Some(n) => format!("{said}: recreating it ({n})"),
                None => format!("{said}: recreating it"),
            };
            let reason = match change {
                Some(_) => "UpdatingInstance",
                None => "UpgradingInstanceManager",
            };
            out.push(Action::Recreate {
                then: Event::new(false, reason, Some(&instance), how),
                attempt: attempt(s, &instance),
                instance,
                primary,
            });
        }
        Next::Switchover { from, to, .. } => {
            out.push(step_time(&at));
            let note = format!("{said}: {from} hands the primary role to {to}");
            out.push(Action::switchover(
                from,
                to,
                at,
                "SwitchoverForUpgrade",
                note,
            ));
        }
    }
    out
}

/// The annotation-driven attempt under way on `instance`, if any.
fn attempt(s: &Snapshot, instance: &str) -> Option<cnmysql_api::InstanceUpgrade> {
    crate::upgrade::annotated::record(s, instance)
        .filter(|_| crate::upgrade::annotated::in_progress(s, instance))
        .cloned()
}

/// Record when the rollout gave its last step (for the stuck-rollout alert).
fn step_time(at: &str) -> Action {
    Action::Status {
        change: StatusChange::RolloutStep(at.to_string()),
        then: vec![],
    }
}
