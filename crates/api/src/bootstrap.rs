//! `spec.bootstrap`: how a new Cluster's data comes to be — recovered from
//! another Cluster's backups (`backup.rs`) or imported from a server
//! outside the operator (`import.rs`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::backup::RecoverySpec;

/// `spec.bootstrap`: how a new Cluster's data comes to be.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapSpec {
    /// Recover from a base backup and the binlog archive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<RecoverySpec>,
    /// Copy a server outside the operator (`import.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub import: Option<crate::import::ImportSpec>,
}

impl crate::ClusterSpec {
    /// `spec.bootstrap.recovery`, when the Cluster is made by recovery.
    pub fn recovery(&self) -> Option<&RecoverySpec> {
        self.bootstrap.as_ref().and_then(|b| b.recovery.as_ref())
    }

    pub fn import(&self) -> Option<&crate::import::ImportSpec> {
        self.bootstrap.as_ref().and_then(|b| b.import.as_ref())
    }
}
