//! How often a platform polls the instances.

use cnmysql_api::ClusterStatus;

/// How often a platform polls the instances: `steady_ms` normally,
/// `changing_ms` while the primary is moving or failing (see
/// [`Cadence::next_poll_ms`]). Each platform picks its own figures by what
/// a poll costs it (locally nothing; on Kubernetes a status read per
/// instance and possibly API writes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cadence {
    pub steady_ms: u64,
    pub changing_ms: u64,
}

impl Cadence {
    /// One machine: polls are loopback requests.
    pub const LOCAL: Cadence = Cadence {
        steady_ms: 200,
        changing_ms: 50,
    };
    /// Kubernetes: polls are Pod-network requests from the operator.
    pub const KUBERNETES: Cadence = Cadence {
        steady_ms: 1_000,
        changing_ms: 200,
    };

    /// When to poll next, after a step that left `status`.
    pub fn next_poll_ms(&self, status: &ClusterStatus) -> u64 {
        if changing(status) {
            self.changing_ms
        } else {
            self.steady_ms
        }
    }
}

/// The primary is moving (a switchover or failover under way) or failing.
fn changing(status: &ClusterStatus) -> bool {
    status.current_primary != status.target_primary || status.primary_failing_since.is_some()
}
