//! Backups and binlog archives in an object store (issue 23): where a
//! Cluster's backups go (`destination.rs`).

pub mod destination;
