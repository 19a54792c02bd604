//! Carrying a step's actions out, in the order the core gave them (fence,
//! then release the lease, then retarget), with the events each one
//! records when it took effect.

use cnmysql_core::reconcile::{Action, Event, Memory};

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
                Ok(()) => platform.record(&then).await,
                // Sent again after `SEMI_SYNC_RETRY_MS` while it differs.
                Err(e) => {
                    tracing::warn!(instance = %instance, error = %e, "semi-sync adjustment failed")
                }
            },
            Action::UpgradeInPlace { instance, then } => {
                let request = ControlRequest::Upgrade {
                    hash: platform.executable_hash().to_string(),
                };
                match platform.control(&instance, &request).await {
                    Ok(()) => platform.record(&then).await,
                    Err(e) => platform.record(&upgrade_failed(&instance, &e)).await,
                }
            }
            Action::Recreate {
                instance,
                primary,
                then,
            } => {
                if platform.recreate(&instance, primary, memory).await? {
                    platform.record(&then).await;
                }
            }
        }
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
