//! A replica's binary log is not synced to disk at every commit; a
//! primary's always is, from before it takes its first write.
//!
//! Why (issue 46): a replica applies serially what a primary commits in
//! groups, and each of its commits paid an fsync of its binary log. Under
//! 16 writers on the project's 2-core machine a MariaDB replica applied
//! 1,100 rows/s against the primary's 2,000 and fell 11.5 s behind in
//! 20 s; with `sync_binlog = 0` on the replicas it applied 1,850 rows/s
//! (p99 2.2 s). See docs/benchmarks.md ("Replica apply lag").
//!
//! Why it is safe: InnoDB stays durable (`innodb_flush_log_at_trx_commit`
//! is left as configured), and a transaction is prepared durably in InnoDB
//! before it is written to the binary log. An operating-system crash of a
//! replica can therefore lose only the tail of its binary log, never data
//! its binary log names: crash recovery rolls back what was prepared but
//! not logged, or keeps what was committed, and the applied position
//! (MariaDB `mysql.gtid_slave_pos`, MySQL `mysql.gtid_executed`) is kept
//! in InnoDB with the data. The history such a replica reports never
//! claims a transaction its data lacks, so a failover never picks it for
//! transactions it does not hold. A mysqld crash (not the machine's)
//! loses nothing: the written log is in the operating system's cache.
//! What semi-sync acknowledges is the relay log, which this does not
//! touch.
//!
//! A replica becomes a primary only through [`restore`], run before its
//! writes open: `sync_binlog` back to its configured value, then every
//! binary log file synced, so what it logged as a replica is on disk
//! before it acknowledges anything. A restarted server starts with the
//! configured value (the setting is not persisted), so a replica is
//! relaxed only once its manager has made it follow.
//!
//! A user who sets `sync_binlog` in `spec.mysql.parameters`, or an
//! `innodb_flush_log_at_trx_commit` other than 1, keeps the configuration
//! on every instance: nothing is relaxed.

use std::collections::BTreeMap;

use crate::flavor::Sql;

/// The setting relaxed on replicas.
pub const SETTING: &str = "sync_binlog";

/// The user's value of `name` in `spec.mysql.parameters`, if set.
fn users(parameters: &BTreeMap<String, String>, name: &str) -> Option<String> {
    parameters
        .iter()
        .find(|(k, _)| k.replace('-', "_").eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_string())
}

/// Whether replicas relax: the operator owns `sync_binlog` (the user did
/// not set it) and InnoDB syncs at every commit (the argument above rests
/// on it).
fn relaxes(parameters: &BTreeMap<String, String>) -> bool {
    users(parameters, SETTING).is_none()
        && users(parameters, "innodb_flush_log_at_trx_commit").is_none_or(|v| v == "1")
}

/// What a replica runs once it follows its primary.
pub fn relax(parameters: &BTreeMap<String, String>) -> Vec<Sql> {
    if !relaxes(parameters) {
        return Vec::new();
    }
    vec![Sql::new(format!("SET GLOBAL {SETTING} = 0"))]
}

/// What an instance runs before its writes open: the configured value
/// back (the caller then syncs the binary log files).
pub fn restore(parameters: &BTreeMap<String, String>) -> Vec<Sql> {
    if !relaxes(parameters) {
        return Vec::new();
    }
    vec![Sql::new(format!("SET GLOBAL {SETTING} = 1"))]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(v: Vec<Sql>) -> Vec<String> {
        v.into_iter().map(|s| s.text).collect()
    }

    #[test]
    fn a_replica_relaxes_the_binlog_sync_and_a_primary_restores_it() {
        let none = BTreeMap::new();
        assert_eq!(texts(relax(&none)), ["SET GLOBAL sync_binlog = 0"]);
        assert_eq!(texts(restore(&none)), ["SET GLOBAL sync_binlog = 1"]);
    }

    #[test]
    fn a_users_own_sync_binlog_is_kept_on_every_instance() {
        for name in ["sync_binlog", "sync-binlog", "SYNC_BINLOG"] {
            let p = BTreeMap::from([(name.to_string(), "100".to_string())]);
            assert!(relax(&p).is_empty(), "{name}");
            assert!(restore(&p).is_empty(), "{name}");
        }
        // InnoDB not syncing at every commit: the argument does not hold.
        let p = BTreeMap::from([("innodb_flush_log_at_trx_commit".into(), "2".into())]);
        assert!(relax(&p).is_empty());
        let p = BTreeMap::from([("innodb_flush_log_at_trx_commit".into(), "1".into())]);
        assert_eq!(relax(&p).len(), 1);
    }
}
