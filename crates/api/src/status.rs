//! The observed state of a Cluster (`status`): where it is (its phase and
//! conditions), which instance is the primary and which is to be, what each
//! instance showed last, and the records of upgrades, failovers and backups.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One instance as the control plane last saw it (`status.instanceStates`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceState {
    /// `primary`, `replica` or `unknown` as the server reports it;
    /// `unreachable` when its manager did not answer.
    pub role: String,
    /// The manager's phase (`running`, `cloning`, `preparing`, ...); absent
    /// when unreachable.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Ready to serve its role.
    #[serde(default)]
    pub ready: bool,
    /// The server refuses writes.
    #[serde(default)]
    pub read_only: bool,
    /// How far behind its source a replica's applier is, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<u64>,
    /// Semi-synchronous replication as the instance has it (`waits 1 of
    /// 2`, `acks`, `fell back to async`, `off`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub semi_sync: String,
    /// The CAs its manager trusts and the one that signed the certificate
    /// it presents (short SHA-256 fingerprints); a change of CA waits for
    /// these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls_trust: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_issuer: Option<String>,
    /// How full its volumes are: `data`, and `binlogs` when the binary
    /// logs have a volume of their own. Used and available bytes move
    /// here in steps of 1% of the size, so a filling volume does not
    /// rewrite the status at every poll; the metrics are exact.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeUsage>,
    /// Its binary logs, and why the oldest is kept (docs/storage.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlogs: Option<crate::binlogs::BinlogsStatus>,
}

/// One claim the operator asked to grow.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeGrowthStep {
    pub claim: String,
    /// The size asked for.
    pub to: String,
    /// What asked: a size raised, or how full a volume was.
    pub reason: String,
    /// When (RFC 3339).
    pub time: String,
}

/// How many steps `status.volumeGrowth` keeps.
pub const VOLUME_GROWTH_KEPT: usize = 20;

/// One volume of an instance as its manager measures the file system.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeUsage {
    /// `data` or `binlogs`.
    pub volume: String,
    /// The file system's size.
    pub size_bytes: u64,
    /// Bytes in use.
    pub used_bytes: u64,
    /// Bytes the server may still write (what is reserved for root left
    /// out).
    pub available_bytes: u64,
}

impl VolumeUsage {
    /// Percent in use of what the server can use, rounded up, as `df`
    /// shows it: 100 once nothing is available.
    pub fn used_percent(&self) -> u64 {
        let usable = self.used_bytes.saturating_add(self.available_bytes);
        if usable == 0 {
            return 100;
        }
        (u128::from(self.used_bytes) * 100).div_ceil(u128::from(usable)) as u64
    }

    /// The figures in steps of 1% of the size (used rounded up, available
    /// down), for the Cluster status.
    pub fn coarse(&self) -> VolumeUsage {
        let step = (self.size_bytes / 100).max(1);
        VolumeUsage {
            volume: self.volume.clone(),
            size_bytes: self.size_bytes,
            used_bytes: (self.used_bytes.div_ceil(step).saturating_mul(step)).min(self.size_bytes),
            available_bytes: self.available_bytes / step * step,
        }
    }
}

/// Observed state of the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// A short word for where the cluster is (see [`Phase`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Why the cluster is in that phase, for humans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_reason: Option<String>,

    #[serde(default)]
    pub instances: i32,
    #[serde(default)]
    pub ready_instances: i32,
    /// The label selector of the instances' Pods, as the scale subresource
    /// reports it (`kubectl scale`, autoscalers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,

    /// The instance currently accepted as primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_primary: Option<String>,
    /// When the current primary became primary (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_primary_timestamp: Option<String>,
    /// The desired primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_primary: Option<String>,
    /// When a primary change was requested (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_primary_timestamp: Option<String>,
    /// When the current primary became unhealthy (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_failing_since: Option<String>,
    /// A failover away from this primary has begun: every replica stops
    /// receiving from it before the new primary is chosen, so that nothing
    /// it could still get acknowledged is missing from the one promoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover_from: Option<String>,

    /// Instances kept out of service because their GTID history is unsafe.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diverged_instances: Vec<String>,
    /// Why each diverged instance is kept out, and whether it re-clones
    /// itself (`spec.mysql.divergedInstances`) or waits for `reinit`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub diverged_reasons: BTreeMap<String, String>,
    /// Instances a user asked to re-initialise (`reinit`): each saves what
    /// only it holds, then re-clones itself from the primary.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reinit_requests: Vec<String>,
    /// The instance re-cloning itself now (one at a time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reinitializing: Option<String>,
    /// Transactions only a diverged instance held, saved before it was
    /// re-initialised (newest last, the last 20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub saved_transactions: Vec<crate::reinit::SavedTransactions>,
    /// The cluster was hibernated (its instances stopped, their data kept),
    /// and has not yet come back whole: nothing fails over meanwhile.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hibernated: bool,
    /// Replicas further behind than `spec.maxReplicaLagSeconds`: out of
    /// the ro and r Services and not counted ready until they catch up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lagging_instances: Vec<String>,
    /// Instances fenced out of routing and held read-only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fenced_instances: Vec<String>,
    /// Last observed GTID state per instance.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gtid_executed_by_instance: BTreeMap<String, String>,
    /// The GTID source of each instance as last observed (MySQL: its
    /// server_uuid; MariaDB: its server_id): the transactions an instance
    /// wrote as primary carry it, which failover needs to know once the
    /// instance is gone.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub source_id_by_instance: BTreeMap<String, String>,
    /// What the last poll saw of each instance: role, phase, readiness.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub instance_states: BTreeMap<String, InstanceState>,

    /// SHA-256 of the running operator executable: the target of manager upgrades.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_executable_hash: Option<String>,
    /// SHA-256 reported by each instance manager on its last status poll.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub executable_hash_by_instance: BTreeMap<String, String>,

    /// The server image the cluster runs: instances are made from it, and
    /// from `targetImage` only once an upgrade to it has started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The cluster's server version: the oldest that has run on any
    /// instance's data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_version: Option<String>,
    /// The image the Cluster's spec asks for (`spec.mysql.image`, the
    /// catalog's entry for `spec.mysql.version`, or the flavour's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_image: Option<String>,
    /// The server version `targetImage` holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_server_version: Option<String>,
    /// The newest server version that has run on each instance's data.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub data_version_by_instance: BTreeMap<String, String>,
    /// One entry per target server version, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upgrade_history: Vec<crate::upgrade::UpgradeRecord>,
    /// When a rollout last gave an instance a step (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_rollout_step_time: Option<String>,
    /// Upgrades asked by a `cnmysql.io/upgrade-to` annotation on an
    /// instance, by instance.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub instance_upgrades: crate::instance_upgrade::InstanceUpgrades,
    /// The whole-cluster upgrade asked by the annotation on the Cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orchestrated_upgrade: Option<crate::instance_upgrade::OrchestratedUpgrade>,

    /// Backups, the binlog archive, and what a recovery reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<crate::backup::BackupStatus>,

    /// Ready, Progressing, Degraded, ContinuousArchiving.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// A replica cluster's source and how far it has come (`replica.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<crate::replica::ReplicaStatus>,
    /// Why the primary refuses writes: a volume of some instance is
    /// nearly full (docs/storage.md). Writes are taken again by themselves
    /// once every volume has room.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes_refused: Option<String>,
    /// The claims the operator grew (`spec.storage.autoGrow`, or a size
    /// raised), newest last; the last 20 steps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_growth: Vec<VolumeGrowthStep>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum Phase {
    /// The first instance is being initialised.
    #[serde(rename = "Setting up primary")]
    SettingUpPrimary,
    /// Replicas are being cloned.
    #[serde(rename = "Creating replica")]
    CreatingReplica,
    /// Every instance is ready.
    #[serde(rename = "Cluster in healthy state")]
    Healthy,
    #[serde(rename = "Switchover in progress")]
    Switchover,
    #[serde(rename = "Failing over")]
    FailingOver,
    /// An instance manager or server upgrade is rolling.
    Upgrading,
    /// A rollout waits for a human (supervised primary update).
    WaitingForUser,
    /// Something needs attention; see the reason and conditions.
    #[serde(rename = "Degraded")]
    Degraded,
    #[serde(rename = "Stopped")]
    Stopped,
    /// Every instance stopped on purpose, its data kept
    /// (`cnmysql.io/hibernation: on`).
    #[serde(rename = "Hibernated")]
    Hibernated,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::SettingUpPrimary => "Setting up primary",
            Phase::CreatingReplica => "Creating replica",
            Phase::Healthy => "Cluster in healthy state",
            Phase::Switchover => "Switchover in progress",
            Phase::FailingOver => "Failing over",
            Phase::Upgrading => "Upgrading",
            Phase::WaitingForUser => "WaitingForUser",
            Phase::Degraded => "Degraded",
            Phase::Stopped => "Stopped",
            Phase::Hibernated => "Hibernated",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::VolumeUsage;

    #[test]
    fn usage_is_rounded_to_whole_percents_of_the_size_and_full_is_100() {
        let v = VolumeUsage {
            volume: "data".into(),
            size_bytes: 10_000,
            used_bytes: 8_001,
            available_bytes: 1_499,
        };
        assert_eq!(v.used_percent(), 85);
        let c = v.coarse();
        assert_eq!((c.used_bytes, c.available_bytes), (8_100, 1_400));
        // A little more written moves nothing until the next percent.
        let more = VolumeUsage {
            used_bytes: 8_050,
            available_bytes: 1_450,
            ..v.clone()
        };
        assert_eq!(more.coarse(), c);
        let full = VolumeUsage {
            used_bytes: 9_500,
            available_bytes: 0,
            ..v
        };
        assert_eq!(full.used_percent(), 100);
    }
}
