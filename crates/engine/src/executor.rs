//! Carrying a step's actions out, in the order the core gave them (fence,
//! then release the lease, then retarget), with the events each one
//! records when it took effect.

use cnmysql_core::action::Action;
use cnmysql_core::event::Event;
use cnmysql_core::memory::Memory;
use cnmysql_core::status_change::StatusChange;
use cnmysql_core::upgrade::rollout::Source;

use crate::platform::{ControlRequest, Platform};

/// Carry `actions` out on `platform`. Stops at the first platform error
/// (what follows may depend on it: a lease released only after a fence);
/// the next pass decides again.
pub async fn carry_out<P: Platform>(
    platform: &mut P,
    actions: Vec<Action>,
    memory: &Memory,
) -> anyhow::Result<()> {
    for action in actions {
        match action {
            Action::Event(e) => platform.record(&e).await,
            Action::Status { change, then } => {
                if platform.change_status(&change).await? {
                    for e in &then {
                        platform.record(e).await;
                    }
                }
            }
            Action::FenceOut(instance) => platform.fence_out(&instance, memory).await?,
            Action::ReleaseLease { holder } => platform.release_lease(&holder).await?,
            Action::Restart(instance) => {
                tracing::info!(instance = %instance, "letting the held-down instance start again");
                platform.allow_start(&instance, memory).await?
            }
            Action::SemiSync {
                instance,
                settings,
                then,
            } => match platform
                .control(&instance, &ControlRequest::SemiSync(settings))
                .await
            {
                Ok(_) => platform.record(&then).await,
                // Sent again after `SEMI_SYNC_RETRY_MS` while it differs.
                Err(e) => {
                    tracing::warn!(instance = %instance, error = %e, "semi-sync adjustment failed")
                }
            },
            Action::UpgradeInPlace {
                instance,
                source,
                attempt,
                then,
            } => {
                let request = match source {
                    Source::Operator => ControlRequest::Upgrade {
                        hash: platform.executable_hash().to_string(),
                    },
                    Source::File { path, sha256 } => {
                        ControlRequest::UpgradeFromFile { path, sha256 }
                    }
                };
                match platform.control(&instance, &request).await {
                    Ok(hash) => {
                        // A file named without its hash: the hash the
                        // manager found is what it must report from now on.
                        if let Some(a) = attempt.filter(|a| a.manager_hash.is_none()) {
                            let record = cnmysql_api::InstanceUpgrade {
                                manager_hash: Some(hash.trim().to_string()),
                                ..a
                            };
                            platform
                                .change_status(&StatusChange::InstanceUpgrade {
                                    instance: instance.clone(),
                                    record: Some(record),
                                })
                                .await?;
                        }
                        platform.record(&then).await
                    }
                    Err(e) => match attempt {
                        Some(a) => attempt_failed(platform, &instance, &a, &e).await?,
                        None => platform.record(&upgrade_failed(&instance, &e)).await,
                    },
                }
            }
            Action::Annotate { instance, set } => {
                // Mirrors and marks are compared again on the next pass.
                if let Err(e) = platform.annotate(instance.as_deref(), &set).await {
                    tracing::warn!(instance = ?instance, error = %format!("{e:#}"), "cannot annotate");
                }
            }
            Action::UpgradeSystemTables { instance, then } => {
                match platform
                    .control(&instance, &ControlRequest::UpgradeSystemTables)
                    .await
                {
                    Ok(_) => platform.record(&then).await,
                    // Asked again after SYSTEM_TABLES_RETRY_MS.
                    Err(e) => {
                        platform
                            .record(&Event {
                                warning: true,
                                reason: "SystemTablesUpgradeFailed",
                                instance: Some(instance.clone()),
                                message: format!(
                                    "upgrading the system tables of {instance} failed (asked again in a minute): {e:#}"
                                ),
                            })
                            .await
                    }
                }
            }
            Action::Recreate {
                instance,
                primary,
                attempt,
                then,
            } => match platform.recreate(&instance, primary, memory).await {
                Ok(true) => platform.record(&then).await,
                Ok(false) => {}
                Err(e) => match attempt {
                    Some(a) => attempt_failed(platform, &instance, &a, &e).await?,
                    None => return Err(e),
                },
            },
        }
    }
    Ok(())
}

/// An annotation-driven attempt whose step failed outright: recorded
/// failed (retried after the back-off while the annotation stays), with
/// its mirror on the instance and an event.
async fn attempt_failed<P: Platform>(
    platform: &mut P,
    instance: &str,
    attempt: &cnmysql_api::InstanceUpgrade,
    e: &anyhow::Error,
) -> anyhow::Result<()> {
    use cnmysql_core::upgrade::annotated as iu;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default();
    let record = iu::failed_now(attempt, &format!("{e:#}"), now);
    let event = iu::failed_event(instance, &record);
    if platform
        .change_status(&StatusChange::InstanceUpgrade {
            instance: instance.to_string(),
            record: Some(record.clone()),
        })
        .await?
    {
        platform.record(&event).await;
    }
    if let Err(e) = platform
        .annotate(Some(instance), &iu::mirror(Some(&record)))
        .await
    {
        tracing::warn!(instance, error = %format!("{e:#}"), "cannot annotate");
    }
    Ok(())
}

/// The event of an in-place upgrade that did not take: the rollout tries
/// again.
pub fn upgrade_failed(instance: &str, e: &anyhow::Error) -> Event {
    Event {
        warning: true,
        reason: "UpgradeFailed",
        instance: Some(instance.to_string()),
        message: format!("in-place upgrade of {instance} failed (retried later): {e:#}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cnmysql_core::lease::Lease;

    /// A platform that records what it was asked, in order.
    #[derive(Default)]
    struct Recorder {
        calls: Vec<String>,
        status_applies: bool,
        control_fails: bool,
    }

    impl Platform for Recorder {
        fn executable_hash(&self) -> &str {
            "abc"
        }
        async fn lease(&mut self) -> anyhow::Result<Option<Lease>> {
            Ok(None)
        }
        async fn change_status(&mut self, _: &StatusChange) -> anyhow::Result<bool> {
            self.calls.push("status".into());
            Ok(self.status_applies)
        }
        async fn record(&mut self, e: &Event) {
            self.calls.push(format!("event {}", e.reason));
        }
        async fn fence_out(&mut self, i: &str, m: &Memory) -> anyhow::Result<()> {
            self.calls
                .push(format!("fence {i} held={}", m.held_down.contains(i)));
            Ok(())
        }
        async fn release_lease(&mut self, h: &str) -> anyhow::Result<()> {
            self.calls.push(format!("release {h}"));
            Ok(())
        }
        async fn allow_start(&mut self, i: &str, _: &Memory) -> anyhow::Result<()> {
            self.calls.push(format!("start {i}"));
            Ok(())
        }
        async fn recreate(&mut self, i: &str, _: bool, _: &Memory) -> anyhow::Result<bool> {
            self.calls.push(format!("recreate {i}"));
            Ok(true)
        }
        async fn control(&mut self, i: &str, r: &ControlRequest) -> anyhow::Result<String> {
            self.calls.push(format!("control {i} {r:?}"));
            anyhow::ensure!(!self.control_fails, "refused");
            Ok(String::new())
        }
        async fn annotate(
            &mut self,
            i: Option<&str>,
            set: &std::collections::BTreeMap<String, Option<String>>,
        ) -> anyhow::Result<()> {
            self.calls.push(format!("annotate {i:?} {}", set.len()));
            Ok(())
        }
    }

    fn event(reason: &'static str) -> Event {
        Event {
            warning: false,
            reason,
            instance: None,
            message: String::new(),
        }
    }

    fn failover() -> Vec<Action> {
        vec![
            Action::FenceOut("db-1".into()),
            Action::ReleaseLease {
                holder: "db-1".into(),
            },
            Action::Status {
                change: StatusChange::PrimaryFailingSince(None),
                then: vec![event("FailingOver")],
            },
        ]
    }

    #[test]
    fn actions_are_carried_out_in_order_and_events_follow_what_took_effect() {
        let mut memory = Memory::default();
        memory.held_down.insert("db-1".into());
        let mut p = Recorder {
            status_applies: true,
            ..Default::default()
        };
        futures::executor::block_on(carry_out(&mut p, failover(), &memory)).unwrap();
        assert_eq!(
            p.calls,
            [
                "fence db-1 held=true",
                "release db-1",
                "status",
                "event FailingOver"
            ]
        );
        // A change that no longer applies records no event.
        let mut p = Recorder::default();
        futures::executor::block_on(carry_out(&mut p, failover(), &memory)).unwrap();
        assert_eq!(p.calls.last().map(String::as_str), Some("status"));
    }

    #[test]
    fn a_failed_in_place_upgrade_is_said_once_with_its_reason() {
        let mut p = Recorder {
            control_fails: true,
            ..Default::default()
        };
        let actions = vec![Action::UpgradeInPlace {
            instance: "db-2".into(),
            source: Source::Operator,
            attempt: None,
            then: event("UpgradingInstanceManager"),
        }];
        futures::executor::block_on(carry_out(&mut p, actions, &Memory::default())).unwrap();
        assert_eq!(
            p.calls,
            [
                "control db-2 Upgrade { hash: \"abc\" }",
                "event UpgradeFailed"
            ]
        );
    }
}
