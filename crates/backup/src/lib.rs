//! Backups and binlog archives in an object store (issue 23): where a
//! Cluster's backups go (`destination.rs`), how a stream is stored there
//! compressed and read back (`stored_stream.rs`), and what a MariaDB base
//! backup is consistent with, read as it passes (`mbstream.rs`).

mod archive;
pub mod archive_mirror;
pub mod archiver;
pub mod base_backup;
mod binlog;
pub mod destination;
pub mod mbstream;
pub mod recovery;
pub mod recovery_plan;
pub mod relay_log;
pub mod retention;
pub mod schedule;
pub mod stored_stream;
