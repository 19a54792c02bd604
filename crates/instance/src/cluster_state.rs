//! Where an instance manager reads the cluster's intent and records what it
//! did: the Cluster status on Kubernetes, a state file on the local platform.

use std::future::Future;

use cnmysql_api::ClusterStatus;

pub trait ClusterState: Send + Sync + 'static {
    /// The cluster status as last written by the control plane.
    fn get(&self) -> impl Future<Output = anyhow::Result<ClusterStatus>> + Send;

    /// Record that `instance` is now the writable primary (sets
    /// `currentPrimary` and its timestamp).
    fn set_current_primary(
        &self,
        instance: &str,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;
}
