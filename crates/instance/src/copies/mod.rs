//! Copies of a server's data: MariaDB's streamed physical copy and the
//! progress every copy reports (`clone.rs`, `clone_progress.rs`), MySQL's
//! clone plugin (`clone_plugin.rs`) and its local backup
//! (`mysql_backup.rs`), the donor that serves a copy of a server outside
//! the operator (`donor.rs`), the logical import (`logical_import.rs`),
//! the transactions a diverged instance saves before it is re-cloned
//! (`saved_transactions.rs`), and the source accounts a copy or a replica
//! cluster uses (`source_account.rs`).

pub mod clone;
pub mod clone_plugin;
pub mod clone_progress;
pub mod donor;
pub mod logical_import;
pub mod mysql_backup;
pub mod saved_transactions;
pub mod source_account;
