//! Where another instance of the cluster answers: the address its manager
//! is handed by the platform, and the name its certificate carries.

use serde::{Deserialize, Serialize};

/// How to reach one instance of the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PeerAddr {
    pub host: String,
    pub mysql_port: u16,
    pub control_port: u16,
    /// The name its certificate carries, when `host` is an address the
    /// certificate cannot name (a Pod IP): the control API verifies this
    /// name instead, and replication verifies the chain only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_name: Option<String>,
}
