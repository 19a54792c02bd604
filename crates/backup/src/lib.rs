//! Backups and binlog archives in an object store (issue 23): where a
//! Cluster's backups go (`destination.rs`), and how a stream is stored
//! there compressed and read back (`stored_stream.rs`).

pub mod destination;
pub mod stored_stream;
