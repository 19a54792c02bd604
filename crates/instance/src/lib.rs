//! The instance manager of cloudnative-mysql: PID 1 of every database pod
//! (and one process per instance on the local platform).

mod api;
mod copies;
pub mod inherit;
pub mod manager;
mod serve;
mod server;
pub mod upgrade;

// The server and the copies by their own names, as the rest of the crate
// and the other crates use them.
pub use copies::{clone, donor, logical_import};
use copies::{clone_plugin, clone_progress, mysql_backup, saved_transactions, source_account};
use server::{binlog_files, private_server, run_dir, server_tls, server_version, unsynced_mark};
pub use server::{bootstrap, config, mysqld, server_image, sql};

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
