//! What came of an action the platform carried out, when what follows is a
//! decision: the platform reports the outcome and carries out the actions
//! [`advance`] returns (the shape of raft-rs's `advance`), deciding nothing
//! itself, not even the time it records.

use cnmysql_api::InstanceUpgrade;

use crate::action::Action;
use crate::event::Event;
use crate::status_change::StatusChange;
use crate::upgrade::annotated as iu;

/// An outcome the core decides on.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The manager took its new executable ([`Action::UpgradeInPlace`]);
    /// `hash` is the one it found and will report from now on.
    UpgradedInPlace {
        instance: String,
        attempt: Option<InstanceUpgrade>,
        hash: String,
        then: Event,
    },
    /// A step of an upgrade failed outright: the manager refused its new
    /// executable, or the instance could not be recreated. `attempt`: the
    /// annotation-driven upgrade it belongs to, if any.
    UpgradeFailed {
        instance: String,
        attempt: Option<InstanceUpgrade>,
        error: String,
    },
}

/// The actions that follow `outcome`, at `now_ms` (the pass's snapshot
/// time).
pub fn advance(outcome: Outcome, now_ms: i64) -> Vec<Action> {
    match outcome {
        Outcome::UpgradedInPlace {
            instance,
            attempt,
            hash,
            then,
        } => {
            let mut out = Vec::new();
            // A file named without its hash: the hash the manager found is
            // what it must report from now on.
            if let Some(a) = attempt.filter(|a| a.manager_hash.is_none()) {
                let record = InstanceUpgrade {
                    manager_hash: Some(hash.trim().to_string()),
                    ..a
                };
                out.push(Action::Status {
                    change: StatusChange::InstanceUpgrade {
                        instance,
                        record: Some(record),
                    },
                    then: Vec::new(),
                });
            }
            out.push(Action::Event(then));
            out
        }
        Outcome::UpgradeFailed {
            instance,
            attempt: None,
            error,
        } => vec![Action::Event(Event {
            warning: true,
            reason: "UpgradeFailed",
            message: format!("in-place upgrade of {instance} failed (retried later): {error}"),
            instance: Some(instance),
        })],
        // Recorded failed (retried after the back-off while the annotation
        // stays), with its mirror on the instance and an event.
        Outcome::UpgradeFailed {
            instance,
            attempt: Some(a),
            error,
        } => {
            let record = iu::failed_now(&a, &error, now_ms);
            vec![
                Action::Status {
                    then: vec![iu::failed_event(&instance, &record)],
                    change: StatusChange::InstanceUpgrade {
                        instance: instance.clone(),
                        record: Some(record.clone()),
                    },
                },
                Action::Annotate {
                    set: iu::mirror(Some(&record)),
                    instance: Some(instance),
                },
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(hash: Option<&str>) -> InstanceUpgrade {
        InstanceUpgrade {
            manager_hash: hash.map(str::to_string),
            status: "InProgress".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_failed_attempt_is_recorded_at_the_passes_time_with_its_mirror_and_event() {
        let out = advance(
            Outcome::UpgradeFailed {
                instance: "db-2".into(),
                attempt: Some(attempt(Some("abc"))),
                error: "refused".into(),
            },
            1_700_000_000_000,
        );
        let [
            Action::Status { change, then },
            Action::Annotate { instance, set },
        ] = &out[..]
        else {
            panic!("{out:?}")
        };
        let StatusChange::InstanceUpgrade {
            record: Some(r), ..
        } = change
        else {
            panic!("{change:?}")
        };
        assert_eq!(r.status, "failed");
        assert_eq!(
            r.last_failed_attempt_at.as_deref(),
            Some("2023-11-14T22:13:20Z")
        );
        assert_eq!(then[0].reason, "InstanceUpgradeFailed");
        assert_eq!(instance.as_deref(), Some("db-2"));
        assert_eq!(set, &iu::mirror(Some(r)));
    }

    #[test]
    fn an_upgrade_outside_an_attempt_only_tells() {
        let out = advance(
            Outcome::UpgradeFailed {
                instance: "db-2".into(),
                attempt: None,
                error: "refused".into(),
            },
            0,
        );
        assert!(matches!(&out[..], [Action::Event(e)] if e.reason == "UpgradeFailed" && e.warning));
    }

    #[test]
    fn the_hash_a_manager_found_is_recorded_only_when_the_attempt_named_none() {
        let then = Event::new(false, "Upgraded", Some("db-2"), "done".into());
        let up = |a| Outcome::UpgradedInPlace {
            instance: "db-2".into(),
            attempt: a,
            hash: "f00d\n".into(),
            then: then.clone(),
        };
        let named = advance(up(Some(attempt(Some("abc")))), 0);
        assert_eq!(named, vec![Action::Event(then.clone())]);
        let found = advance(up(Some(attempt(None))), 0);
        let Action::Status {
            change:
                StatusChange::InstanceUpgrade {
                    record: Some(r), ..
                },
            ..
        } = &found[0]
        else {
            panic!("{found:?}")
        };
        assert_eq!(r.manager_hash.as_deref(), Some("f00d"));
        assert_eq!(found[1], Action::Event(then));
    }
}
