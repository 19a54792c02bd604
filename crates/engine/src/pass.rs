//! One topology pass: from what the platform observed to the status it
//! reports.

use cnmysql_core::memory::Memory;
use cnmysql_core::reconcile::{self, Observation};
use cnmysql_core::status::Snapshot;
use cnmysql_core::status_change::StatusChange;

use crate::executor::carry_out;
use crate::platform::Platform;

/// What a platform observed for one pass.
pub struct Facts<'a> {
    pub snapshot: &'a Snapshot,
    /// See [`Observation::absent`].
    pub absent: &'a [String],
    /// See [`Observation::fence_early`].
    pub fence_early: bool,
    /// See [`Observation::primary_restarted_at_ms`].
    pub primary_restarted_at_ms: Option<i64>,
    /// See [`Observation::primary_down_in_place`].
    pub primary_down_in_place: bool,
    /// See [`Observation::leaving`].
    pub leaving: &'a [String],
    /// See [`Observation::cordoned`].
    pub cordoned: &'a [String],
}

/// Read the Lease if the step needs it, take the core's step, carry its
/// actions out, then report the summary (a report computed before a
/// primary change this pass wrote is stale and not applied; the next
/// pass reports).
#[tracing::instrument(name = "pass", skip_all, fields(cluster = %facts.snapshot.cluster))]
pub async fn pass<P: Platform>(
    platform: &mut P,
    facts: &Facts<'_>,
    memory: &mut Memory,
) -> anyhow::Result<()> {
    let s = facts.snapshot;
    let lease = if reconcile::needs_lease(s) {
        platform.lease().await?
    } else {
        None
    };
    let actions = reconcile::step(
        &Observation {
            snapshot: s,
            lease: lease.as_ref(),
            absent: facts.absent,
            fence_early: facts.fence_early,
            primary_restarted_at_ms: facts.primary_restarted_at_ms,
            primary_down_in_place: facts.primary_down_in_place,
            leaving: facts.leaving,
            cordoned: facts.cordoned,
        },
        memory,
    );
    carry_out(platform, actions, memory).await?;
    if s.status.target_primary.is_some() {
        let report = StatusChange::Report(cnmysql_core::status_change::report(s, memory));
        platform.change_status(&report).await?;
    }
    if let Some(b) = cnmysql_core::archiving::desired(s)
        && cnmysql_core::archiving::worth_writing(s.status.backup.as_ref(), &b)
    {
        platform
            .change_status(&StatusChange::Backup(Box::new(b)))
            .await?;
    }
    Ok(())
}
