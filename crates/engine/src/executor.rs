//! Carrying a step's actions out, in the order the core gave them (fence,
//! then release the lease, then retarget), with the events each one
//! records when it took effect.

use std::collections::VecDeque;

use cnmysql_core::action::Action;
use cnmysql_core::event::Event;
use cnmysql_core::memory::Memory;
use cnmysql_core::outcome::{Outcome, advance};
use cnmysql_core::upgrade::rollout::Source;

use crate::platform::{ControlRequest, Platform};

/// Carry `actions` out on `platform`. Stops at the first platform error
/// (what follows may depend on it: a lease released only after a fence);
/// the next pass decides again.
///
/// Where an outcome needs a decision (an upgrade step that failed), the
/// core's [`advance`] says what follows, at `now_ms` (the pass's snapshot
/// time), and that is carried out next.
pub async fn carry_out<P: Platform>(
    platform: &mut P,
    actions: Vec<Action>,
    memory: &Memory,
    now_ms: i64,
) -> anyhow::Result<()> {
    let mut queue = VecDeque::from(actions);
    while let Some(action) = queue.pop_front() {
        if let Some(o) = carry_one(platform, action, memory).await? {
            for next in advance(o, now_ms).into_iter().rev() {
                queue.push_front(next);
            }
        }
    }
    Ok(())
}

/// One action; the outcome, when what follows is the core's to decide.
async fn carry_one<P: Platform>(
    platform: &mut P,
    action: Action,
    memory: &Memory,
) -> anyhow::Result<Option<Outcome>> {
    match action {
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
                Source::File { path, sha256 } => ControlRequest::UpgradeFromFile { path, sha256 },
            };
            Ok(Some(match platform.control(&instance, &request).await {
                Ok(hash) => Outcome::UpgradedInPlace {
                    instance,
                    attempt,
                    hash,
                    then,
                },
                Err(e) => Outcome::UpgradeFailed {
                    instance,
                    attempt,
                    error: format!("{e:#}"),
                },
            }))
        }
        Action::Recreate {
            instance,
            primary,
            attempt,
            then,
        } => match platform.recreate(&instance, primary, memory).await {
            Ok(true) => {
                platform.record(&then).await;
                Ok(None)
            }
            Ok(false) => Ok(None),
            Err(e) if attempt.is_some() => Ok(Some(Outcome::UpgradeFailed {
                instance,
                attempt,
                error: format!("{e:#}"),
            })),
            Err(e) => Err(e),
        },
        other => {
            carry_plain(platform, other, memory).await?;
            Ok(None)
        }
    }
}

/// An action whose outcome needs no decision.
async fn carry_plain<P: Platform>(
    platform: &mut P,
    action: Action,
    memory: &Memory,
) -> anyhow::Result<()> {
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
        Action::PassLease {
            from,
            to,
            seen_renew_ms,
            then,
        } => {
            platform.pass_lease(&from, &to, seen_renew_ms).await?;
            platform.record(&then).await;
        }
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
        Action::UpgradeInPlace { .. } | Action::Recreate { .. } => {
            unreachable!("carried by carry_one")
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cnmysql_core::lease::Lease;
    use cnmysql_core::status_change::StatusChange;

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
        async fn pass_lease(&mut self, from: &str, to: &str, _: i64) -> anyhow::Result<()> {
            self.calls.push(format!("pass {from} {to}"));
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
        futures::executor::block_on(carry_out(&mut p, failover(), &memory, 0)).unwrap();
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
        futures::executor::block_on(carry_out(&mut p, failover(), &memory, 0)).unwrap();
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
        futures::executor::block_on(carry_out(&mut p, actions, &Memory::default(), 0)).unwrap();
        assert_eq!(
            p.calls,
            [
                "control db-2 Upgrade { hash: \"abc\" }",
                "event UpgradeFailed"
            ]
        );
    }
}
