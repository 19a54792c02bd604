//! A replica does not sync its binary log, nor InnoDB's redo log, at
//! every commit; a primary does both, from before it takes its first
//! write.
//!
//! Why (issue 46): a replica applies serially what a primary commits in
//! groups, so every commit it applies paid the fsyncs the primary shares
//! among a group. Under 16 writers on the project's 2-core machine a
//! MariaDB replica applied 1,100 rows/s against the primary's 2,000 with
//! both syncs; without the binary log's it kept up on the local platform.
//! On a real node (each Pod its own share of CPU) both flavours still fell
//! 4–9 s behind, the redo log's fsync per commit the cost; without it a
//! MySQL replica applied all 730–790 commits/s (p99 0.6 s). See
//! docs/benchmarks.md ("Replica apply lag").
//!
//! Why it loses nothing:
//!
//! - A crash of mysqld (killed, out of memory, its container or Pod gone)
//!   leaves the operating system running: every write the server made is
//!   in its cache and reaches the disk. The prepare record reaches the
//!   redo log before the binary log names a transaction (both settings
//!   still write at every commit, they only skip the fsync), so recovery
//!   is exactly that of a fully synced server.
//! - A crash of the operating system (power lost, the node reset) can lose
//!   the last writes of either log, in any order: such a replica's data
//!   may claim transactions it lacks. So before relaxing, the manager
//!   records the kernel's boot id in the data directory (synced); a data
//!   directory found at start with another boot's record is never started:
//!   once another instance is the running primary, it is replaced by a
//!   clone of it ([`unsynced_next`]). A clean stop of the server (which
//!   syncs both logs) removes the record, so a planned reboot or drain
//!   costs no clone.
//! - What semi-sync acknowledges is the relay log, which this does not
//!   touch (it is not synced at every event either, as before).
//! - A replica becomes a primary only through [`restore`], run before its
//!   writes open: both settings back, the redo log flushed to disk
//!   (`FLUSH LOCAL ENGINE LOGS`, not logged), every binary log file
//!   synced, and only then the record removed. A restarted server starts
//!   with the configured values (the settings are not persisted), so a
//!   replica is relaxed only once its manager has made it follow.
//!
//! A user who sets `sync_binlog` in `spec.mysql.parameters`, or an
//! `innodb_flush_log_at_trx_commit` other than 1, keeps the configuration
//! on every instance: nothing is relaxed. One who sets
//! `innodb_flush_log_at_trx_commit = 1` keeps the redo log synced on
//! replicas (only the binary log is relaxed, which an operating-system
//! crash cannot make lie: the prepare is durable before the binary log
//! names it).

use std::collections::BTreeMap;

use cnmysql_api::ClusterStatus;

use crate::flavor::Sql;
use crate::role::Bootstrap;

/// The setting relaxed on replicas.
pub const SETTING: &str = "sync_binlog";

/// InnoDB's, relaxed too unless the user set it.
pub const INNODB_SETTING: &str = "innodb_flush_log_at_trx_commit";

/// The file in the data directory that records the boot of the kernel a
/// relaxed server ran under.
pub const MARK: &str = "cnmysql-unsynced";

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

/// Whether InnoDB's redo log is relaxed on replicas too: the user did not
/// set it.
pub fn relaxes_innodb(parameters: &BTreeMap<String, String>) -> bool {
    relaxes(parameters) && users(parameters, INNODB_SETTING).is_none()
}

/// What a replica runs once it follows its primary (after its data
/// directory records the boot, when [`relaxes_innodb`]).
pub fn relax(parameters: &BTreeMap<String, String>) -> Vec<Sql> {
    if !relaxes(parameters) {
        return Vec::new();
    }
    let mut out = vec![Sql::new(format!("SET GLOBAL {SETTING} = 0"))];
    if relaxes_innodb(parameters) {
        out.push(Sql::new(format!("SET GLOBAL {INNODB_SETTING} = 2")));
    }
    out
}

/// What an instance runs before its writes open: the configured values
/// back and the redo log on disk (the caller then syncs the binary log
/// files and removes the record). `LOCAL`: a flush written to the binary
/// log would be a transaction of this instance's own.
pub fn restore(parameters: &BTreeMap<String, String>) -> Vec<Sql> {
    if !relaxes(parameters) {
        return Vec::new();
    }
    let mut out = vec![Sql::new(format!("SET GLOBAL {SETTING} = 1"))];
    if relaxes_innodb(parameters) {
        out.push(Sql::new(format!("SET GLOBAL {INNODB_SETTING} = 1")));
        out.push(Sql::new("FLUSH LOCAL ENGINE LOGS"));
    }
    out
}

/// Whether a data directory is unsynced: it records a boot (`mark`, the
/// file's text) other than the running kernel's (`boot_id`). A machine
/// restarted since the server last ran relaxed.
pub fn unsynced(mark: Option<&str>, boot_id: &str) -> bool {
    mark.is_some_and(|m| m.trim() != boot_id.trim())
}

/// What `me`, whose data directory is unsynced, does: replaced by a clone
/// of the current primary once that runs (`primary_running`), otherwise
/// wait. Never started on that data: it may claim transactions it lacks.
pub fn unsynced_next(me: &str, status: &ClusterStatus, primary_running: bool) -> Bootstrap {
    let why = "the machine restarted while this replica did not sync its logs at every commit: \
               its data may lack transactions it claims";
    match status.current_primary.as_deref() {
        Some(p) if p != me && primary_running => Bootstrap::Reclone(p.to_string()),
        Some(p) if p != me => Bootstrap::Wait(format!("{why}; it is cloned again once {p} runs")),
        Some(_) => Bootstrap::Wait(format!(
            "{why}; it is the recorded primary, so it waits for a person (promote another \
             instance, or remove {MARK} from its data directory to trust it)"
        )),
        None => Bootstrap::Wait(format!("{why}; it is cloned again once a primary runs")),
    }
}

/// The event of an unsynced data directory replaced by a clone.
pub fn replaced_event(me: &str, primary: &str) -> crate::event::Event {
    crate::event::Event::new(
        true,
        "UnsyncedDataReplaced",
        Some(me),
        format!(
            "the machine of {me} restarted while it did not sync its logs at every commit; its data is replaced by a clone of {primary}"
        ),
    )
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
        assert_eq!(
            texts(relax(&none)),
            [
                "SET GLOBAL sync_binlog = 0",
                "SET GLOBAL innodb_flush_log_at_trx_commit = 2"
            ]
        );
        assert_eq!(
            texts(restore(&none)),
            [
                "SET GLOBAL sync_binlog = 1",
                "SET GLOBAL innodb_flush_log_at_trx_commit = 1",
                "FLUSH LOCAL ENGINE LOGS"
            ]
        );
        assert!(relaxes_innodb(&none));
    }

    #[test]
    fn a_users_own_redo_setting_keeps_the_redo_log_synced() {
        let p = BTreeMap::from([("innodb-flush-log-at-trx-commit".into(), "1".into())]);
        assert_eq!(texts(relax(&p)), ["SET GLOBAL sync_binlog = 0"]);
        assert_eq!(texts(restore(&p)), ["SET GLOBAL sync_binlog = 1"]);
        assert!(!relaxes_innodb(&p));
    }

    #[test]
    fn only_a_record_of_another_boot_makes_the_data_unsynced() {
        assert!(!unsynced(None, "b1"));
        assert!(!unsynced(Some("b1\n"), "b1"));
        assert!(unsynced(Some("b0"), "b1"));
    }

    #[test]
    fn unsynced_data_is_never_started_and_is_replaced_only_from_a_running_primary() {
        let mut st = ClusterStatus::default();
        let wait = |b: Bootstrap| matches!(b, Bootstrap::Wait(_));
        assert!(wait(unsynced_next("db-2", &st, true)), "no primary");
        st.current_primary = Some("db-1".into());
        assert!(
            wait(unsynced_next("db-2", &st, false)),
            "the primary is not running"
        );
        assert_eq!(
            unsynced_next("db-2", &st, true),
            Bootstrap::Reclone("db-1".into())
        );
        // Itself the recorded primary (crashed while promoting): a person.
        let Bootstrap::Wait(why) = unsynced_next("db-1", &st, true) else {
            panic!("the recorded primary is not replaced")
        };
        assert!(why.contains("person"), "{why}");
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
        assert_eq!(texts(relax(&p)), ["SET GLOBAL sync_binlog = 0"]);
    }
}
