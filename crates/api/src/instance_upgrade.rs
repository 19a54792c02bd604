//! Upgrades asked for by annotation (`cnmysql.io/upgrade-to` on an instance
//! or on the Cluster): what the status records about each, so that the
//! record outlives the object it was asked on (a Pod is deleted to change
//! its server image) and a restarted operator takes up where it was.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Whether a new operator executable or a new definition moves instances by
/// itself.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InstanceUpdateStrategy {
    /// The rollout brings every instance up to date, one at a time.
    #[default]
    Automatic,
    /// Out-of-date instances are reported, but only those asked by a
    /// `cnmysql.io/upgrade-to` annotation (on them or on the Cluster) move.
    Manual,
}

/// One instance's annotation-driven upgrade, as last decided.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceUpgrade {
    /// The `cnmysql.io/upgrade-to` value this record is about.
    pub upgrade_to: String,
    /// `in-progress`, `failed` or `done`.
    pub status: String,
    /// What the instance runs once done: a manager hash or a server
    /// version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// Attempts made for this value.
    #[serde(default)]
    pub attempts: u32,
    /// When the current attempt started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_started_at: Option<String>,
    /// When the last attempt failed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failed_attempt_at: Option<String>,
    /// Why the last attempt failed, or what the current one waits for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The manager hash the attempt installs (from `#sha256=`, the
    /// operator's, or as the instance hashed the file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager_hash: Option<String>,
    /// The server image the instance is made from for this upgrade (kept
    /// once done, so the instance is never taken back to an older one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// That image's server version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// The whole-cluster orchestration of an annotation-driven upgrade.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrchestratedUpgrade {
    /// The Cluster's `cnmysql.io/upgrade-to` value.
    pub upgrade_to: String,
    /// `in-progress`, `failed` or `done`.
    pub status: String,
    /// What every instance runs once done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// The instance being upgraded, or the one that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Where it stands, for humans.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Fenced or diverged instances left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete_time: Option<String>,
}

/// Per instance, by name.
pub type InstanceUpgrades = BTreeMap<String, InstanceUpgrade>;
