//! The instance manager's control API as its callers see it. The control
//! planes (the engine, the operator, the local platform) and the managers'
//! peers depend on this crate, not on the manager:
//!
//! - [`contract`]: the paths, headers and typed request bodies;
//! - [`client`]: the mutual-TLS HTTP/1.1 client;
//! - [`requests`]: typed calls (semi-sync settings, system tables);
//! - [`upgrade`]: the upgrade push, the upgrade from a file on the
//!   instance, the in-place restart;
//! - [`base_backup`]: a base backup streamed from a manager into the store;
//! - [`cluster_state`]: the other side of the boundary, what a manager asks
//!   of its platform (the cluster status, the lease, where its peers are),
//!   implemented by `cnmysql-k8s` and `cnmysql-local`;
//! - [`peer`]: where another instance answers.

pub mod base_backup;
pub mod client;
pub mod cluster_state;
pub mod contract;
pub mod peer;
pub mod requests;
pub mod upgrade;

pub use client::ControlClient;
pub use cluster_state::ClusterState;

/// The SHA-256 of the running executable, as a manager reports it and as
/// the control plane compares it (the rollout target); empty when it
/// cannot be read.
pub fn executable_hash() -> String {
    use sha2::Digest;
    match std::fs::read("/proc/self/exe") {
        Ok(bytes) => hex::encode(sha2::Sha256::digest(&bytes)),
        Err(_) => String::new(),
    }
}
