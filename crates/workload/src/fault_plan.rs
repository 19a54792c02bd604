//! The faults of the randomized suites: their kinds, the platforms'
//! lists, their bounds and goals, and the seeded plan of a run.

use std::time::Duration;

use rand::{Rng, SeedableRng};

/// One fault of the suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// The primary's Pod is deleted (Kubernetes).
    PrimaryPodDeleted,
    /// SIGKILL of the primary's PID 1 (the instance manager; locally the
    /// control plane then stops its mysqld, as a container dies with PID 1).
    PrimaryKilled,
    /// A planned switchover to a replica chosen at random.
    Switchover,
    /// The primary's processes are stopped (SIGSTOP) for [`FREEZE`], then
    /// continued.
    PrimaryFrozen,
    /// The primary's node is cut off the network for [`FREEZE`], then
    /// healed (Kubernetes).
    PrimaryCutOff,
    /// SIGKILL of a replica's PID 1.
    ReplicaKilled,
    /// A replica's Pod is deleted (Kubernetes).
    ReplicaPodDeleted,
    /// A replica is fenced, then unfenced.
    FenceReplica,
    /// Every instance's PID 1 SIGKILLed at once (an OOM storm, a crash of
    /// them all).
    AllKilled,
    /// Every instance's Pod deleted at once (Kubernetes).
    AllPodsDeleted,
    /// The node holding the primary restarted with its disks kept: its
    /// containerd and kubelet killed with everything they ran, then
    /// started again (Kubernetes; on one node, every instance and the
    /// operator).
    NodeRestarted,
    /// The machine's CPU taken by busy processes for [`FREEZE`]: a slow
    /// primary is not a dead one, and no failover may follow.
    CpuStarved,
}

/// How long a frozen or cut-off node stays so: longer than the lease, so
/// that failover happens and the old primary wakes up deposed.
pub const FREEZE: Duration = Duration::from_secs(20);

/// The recovery bound after a fault: healthy again (every instance ready,
/// one primary) within this long after the fault ended.
pub const RECOVERY_BOUND: Duration = Duration::from_secs(60);

/// The bound after a whole-cluster crash: every instance ready again.
pub const WHOLE_BOUND: Duration = Duration::from_secs(90);

/// Answers a watcher sample may give in this long after its instance
/// resumed are not counted as a second writable primary: a frozen process
/// answers the queries it received while frozen before it can act, and the
/// requirement is read-only within a second of running again.
pub const RESUME_GRACE: Duration = Duration::from_secs(1);

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::PrimaryPodDeleted => "primary-pod-deleted",
            Fault::PrimaryKilled => "primary-pid1-killed",
            Fault::Switchover => "switchover",
            Fault::PrimaryFrozen => "primary-node-frozen",
            Fault::PrimaryCutOff => "primary-node-cut-off",
            Fault::ReplicaKilled => "replica-pid1-killed",
            Fault::ReplicaPodDeleted => "replica-pod-deleted",
            Fault::FenceReplica => "replica-fenced-and-unfenced",
            Fault::AllKilled => "all-pid1s-killed",
            Fault::AllPodsDeleted => "all-pods-deleted",
            Fault::NodeRestarted => "node-restarted",
            Fault::CpuStarved => "cpu-starved",
        }
    }

    /// The median outage the issue sets as a goal for this kind.
    pub fn goal(self) -> Duration {
        match self {
            Fault::PrimaryFrozen | Fault::PrimaryCutOff => {
                Duration::from_millis(cnmysql_core::lease::TTL_MS as u64 + 5_000)
            }
            Fault::Switchover => Duration::from_secs(1),
            Fault::AllKilled | Fault::AllPodsDeleted | Fault::NodeRestarted => WHOLE_BOUND,
            _ => Duration::from_secs(5),
        }
    }

    /// Every instance dies in it.
    pub fn whole_cluster(self) -> bool {
        matches!(
            self,
            Fault::AllKilled | Fault::AllPodsDeleted | Fault::NodeRestarted
        )
    }

    /// How long after it ended the cluster must be healthy again.
    pub fn recovery_bound(self) -> Duration {
        if self.whole_cluster() {
            WHOLE_BOUND
        } else {
            RECOVERY_BOUND
        }
    }
}

/// The faults of one platform: those it can inflict.
pub const KUBERNETES: &[Fault] = &[
    Fault::PrimaryPodDeleted,
    Fault::PrimaryKilled,
    Fault::Switchover,
    Fault::PrimaryFrozen,
    Fault::PrimaryCutOff,
    Fault::ReplicaKilled,
    Fault::ReplicaPodDeleted,
    Fault::FenceReplica,
    Fault::AllKilled,
    Fault::AllPodsDeleted,
    Fault::NodeRestarted,
    Fault::CpuStarved,
];

/// The whole-cluster crashes alone, for a run that tries only them.
pub const WHOLE_CLUSTER: &[Fault] = &[
    Fault::AllKilled,
    Fault::AllPodsDeleted,
    Fault::NodeRestarted,
];

/// The local platform has no Pods and no network to cut.
pub const LOCAL: &[Fault] = &[
    Fault::PrimaryKilled,
    Fault::Switchover,
    Fault::PrimaryFrozen,
    Fault::ReplicaKilled,
    Fault::FenceReplica,
];

/// The seed of a run: `CNMYSQL_FAULT_SEED` to replay one, else a new one.
pub fn seed() -> u64 {
    match std::env::var("CNMYSQL_FAULT_SEED") {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("CNMYSQL_FAULT_SEED={s:?} is not a whole number")),
        Err(_) => rand::rng().random(),
    }
}

/// How many faults a run inflicts: `CNMYSQL_FAULTS`, else `default`.
pub fn count(default: usize) -> usize {
    std::env::var("CNMYSQL_FAULTS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(default)
}

/// A random sequence of `n` faults drawn from `kinds`, and for each a
/// random number (to pick a replica, say): the same for the same seed.
pub fn plan(seed: u64, n: usize, kinds: &[Fault]) -> Vec<(Fault, u64)> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| (kinds[rng.random_range(0..kinds.len())], rng.random()))
        .collect()
}
