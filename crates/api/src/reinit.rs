//! What the Cluster says about instances whose data is replaced by a clone
//! of the primary (`reinit`, and diverged instances healing themselves).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `spec.mysql.divergedInstances`: whether a diverged instance re-clones
/// itself when that provably loses no acknowledged write.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DivergedInstances {
    #[default]
    Automatic,
    Manual,
}

/// Transactions only one instance held, saved before its data was replaced.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SavedTransactions {
    pub instance: String,
    /// When they were saved (RFC 3339).
    pub time: String,
    /// Their GTID set.
    pub gtid_set: String,
    /// The binary log file holding their events, on the instance's volume.
    pub file: String,
    /// The same file in the backup store, when the Cluster has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
}
