//! One topology pass: from what the platform observed to the status it
//! reports.

use cnmysql_core::memory::Memory;
use cnmysql_core::reconcile::{self, Observation};
use cnmysql_core::running::Running;
use cnmysql_core::status_change::StatusChange;

use crate::executor::carry_out;
use crate::platform::Platform;

/// One pass over what the platform observed (`observed.lease` is left
/// `None`: the pass reads the Lease itself, only if the step needs it):
/// take the core's step, carry its actions out, then report the summary (a
/// report computed before a primary change this pass wrote is stale and
/// not applied; the next pass reports). Returns the instances to keep
/// running, which the platform converges to once the pass has succeeded
/// (after a failed pass it keeps its processes as they are).
#[tracing::instrument(name = "pass", skip_all, fields(cluster = %observed.snapshot.cluster))]
pub async fn pass<P: Platform>(
    platform: &mut P,
    observed: &Observation<'_>,
    memory: &mut Memory,
) -> anyhow::Result<Running> {
    let s = observed.snapshot;
    let lease = if reconcile::needs_lease(s) {
        platform.lease().await?
    } else {
        None
    };
    let ready = cnmysql_core::ready::ready(
        &Observation {
            lease: lease.as_ref(),
            ..*observed
        },
        memory,
    );
    carry_out(platform, ready.actions, memory, s.now_ms).await?;
    if s.status.target_primary.is_some() {
        let report = StatusChange::Report(Box::new(cnmysql_core::status_change::report(s, memory)));
        platform.change_status(&report).await?;
    }
    if let Some(b) = cnmysql_core::archiving::desired(s)
        && cnmysql_core::archiving::worth_writing(s.status.backup.as_ref(), &b)
    {
        platform
            .change_status(&StatusChange::Backup(Box::new(b)))
            .await?;
    }
    Ok(ready.running)
}
