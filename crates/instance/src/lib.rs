//! The instance manager of cloudnative-mysql: PID 1 of every database pod
//! (and one process per instance on the local platform).

mod api;
mod binlog_files;
pub mod bootstrap;
pub mod clone;
mod clone_plugin;
mod clone_progress;
pub mod config;
pub mod donor;
pub mod inherit;
pub mod logical_import;
pub mod manager;
mod mysql_backup;
pub mod mysqld;
mod private_server;
mod run_dir;
mod saved_transactions;
mod serve;
pub mod server_image;
mod server_tls;
mod server_version;
mod source_account;
pub mod sql;
pub mod upgrade;

// The control API's client is its callers' (cnmysql-control); the
// manager's peers use it too.
use cnmysql_control::client;

pub use cnmysql_control::ClusterState;
pub use config::InstanceConfig;
pub use manager::Manager;

/// Resolve once the flag is true (or its sender is gone). Holds no borrow
/// across an await, so it can live in spawned tasks.
pub async fn stopped(rx: &mut tokio::sync::watch::Receiver<bool>) {
    loop {
        if *rx.borrow_and_update() {
            return;
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}
