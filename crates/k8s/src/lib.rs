//! The Kubernetes platform's edge: a client built the way kubectl finds its
//! cluster, the Cluster status requests behind the `kubectl cnmsql` plugin,
//! and Events. Decisions stay in `cnmysql-core`; this crate only reads and
//! writes API objects.

pub mod backup_request;
pub mod client;
pub mod cluster_handle;
pub mod cluster_state;
pub mod events;
pub mod logs;
pub mod plugin;
pub mod report;

#[cfg(feature = "fake-api")]
pub mod fake;
