//! The server: mysqld's supervision and log (`mysqld.rs`), its
//! configuration (`config.rs`), the SQL the manager runs (`sql.rs`), making
//! its first data (`bootstrap.rs`), private servers of the manager's own
//! (`private_server.rs`), server images (`server_image.rs`), the versions
//! that ran on the data (`server_version.rs`), its TLS files
//! (`server_tls.rs`), its binary log files (`binlog_files.rs`), the record of
//! its logs not synced at every commit (`unsynced_mark.rs`), MySQL's socket
//! lock file left by a server that is gone (`socket_lock.rs`) and the run
//! directory (`run_dir.rs`).

pub mod binlog_files;
pub mod bootstrap;
pub mod config;
pub mod mysqld;
pub mod private_server;
pub mod run_dir;
pub mod server_image;
pub mod server_tls;
pub mod server_version;
pub mod socket_lock;
pub mod sql;
pub mod unsynced_mark;
