//! The control API's contract: the paths the manager serves on its
//! mutual-TLS port, the headers it reads and writes, and the typed bodies
//! of its requests, shared by the manager (which serves them) and its
//! callers (which send them).

use serde::{Deserialize, Serialize};

/// `GET`: the instance's status (`cnmysql_core::status::InstanceStatus`).
pub const STATUS: &str = "/status";
/// `GET`: the instance's physical copy as a stream (a clone, a backup).
pub const BACKUP: &str = "/backup";
/// `POST` [`SemiSync`]: the primary's semi-sync settings (operator only).
pub const SEMISYNC: &str = "/semisync";
/// `POST` the executable's bytes, its SHA-256 in [`MANAGER_HASH_HEADER`]:
/// the manager re-execs into it, mysqld keeps running.
pub const UPGRADE: &str = "/instance/manager/upgrade";
/// `POST` [`FromFile`]: re-exec into an executable already on the
/// instance; answers its SHA-256.
pub const UPGRADE_FROM_FILE: &str = "/instance/manager/upgrade-from-file";
/// `POST`: bring the system tables to the server's version.
pub const UPGRADE_SYSTEM_TABLES: &str = "/instance/mysql/upgrade";
/// `POST`: the manager re-execs its own executable.
pub const RESTART_IN_PLACE: &str = "/instance/manager/restart-inplace";

/// The SHA-256 of a pushed executable.
pub const MANAGER_HASH_HEADER: &str = cnmysql_api::names::MANAGER_HASH_HEADER;
/// The size of the data directory a `/backup` stream copies, when the
/// server knows it (for progress and time left).
pub const SIZE_HEADER: &str = "x-cnmysql-datadir-bytes";
/// The GTID position (MariaDB) or set (MySQL) a `/backup` stream is
/// consistent with, when the server says so before the stream.
pub const GTID_HEADER: &str = "x-cnmysql-gtid";
/// MariaDB: the donor's executed history (its binlog state with what it
/// applied) when a `/backup` stream begins. The copy's binary log starts
/// empty; with this it knows the older servers' entries it holds.
pub const HISTORY_HEADER: &str = "x-cnmysql-history";

/// `POST`: the primary is made to hold the declared databases, users and
/// grants (operator and local control plane only).
pub const SQL_OBJECTS: &str = "/instance/sql-objects";

/// One object of a [`SQL_OBJECTS`] request: the platform's key for it
/// (e.g. `Database/shop`) and what is declared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SqlObject {
    pub key: String,
    pub declared: cnmysql_core::sql_objects::Declared,
}

/// What was done for one object: the statements run (as logs may show
/// them, never a password), or why it could not be.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SqlObjectResult {
    pub key: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What a pass that changed nothing has to say (something kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The body of [`SEMISYNC`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SemiSync {
    pub enabled: bool,
    pub wait_for_count: u32,
    pub timeout_millis: u64,
}

impl From<&cnmysql_core::semisync::Settings> for SemiSync {
    fn from(s: &cnmysql_core::semisync::Settings) -> SemiSync {
        SemiSync {
            enabled: s.enabled,
            wait_for_count: s.wait_for_count,
            timeout_millis: s.timeout_millis,
        }
    }
}

/// The body of [`UPGRADE_FROM_FILE`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FromFile {
    pub path: String,
    #[serde(default)]
    pub sha256: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_the_json_the_manager_has_always_read() {
        let s = SemiSync {
            enabled: true,
            wait_for_count: 2,
            timeout_millis: 10_000,
        };
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            serde_json::json!({"enabled": true, "waitForCount": 2, "timeoutMillis": 10000})
        );
        let f: FromFile = serde_json::from_str(r#"{"path": "/controller/cnmysql"}"#).unwrap();
        assert_eq!(f.sha256, None);
    }
}
