//! The `Backup` (a base backup, on demand) and `ScheduledBackup` (base
//! backups on a cron schedule) resources, shaped as CloudNativePG's are.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A Cluster in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRef {
    pub name: String,
}

/// Which instance a base backup is taken from.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum BackupTarget {
    /// The primary.
    Primary,
    /// The most caught-up ready replica when there is one, else the
    /// primary.
    #[default]
    PreferReplica,
}

/// One base backup of a Cluster into the store its `spec.backup` names.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "mysql.cnmysql.io",
    version = "v1",
    kind = "Backup",
    namespaced,
    status = "BackupObjectStatus",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.cluster.name"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Instance","type":"string","jsonPath":".status.instance"}"#,
    printcolumn = r#"{"name":"GTID","type":"string","jsonPath":".status.gtid"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackupRequestSpec {
    pub cluster: ClusterRef,
    #[serde(default)]
    pub target: BackupTarget,
}

/// How a Backup went.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupObjectStatus {
    /// `running`, `completed` or `failed`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    /// Its id in the store (`cnmysql local backups`, `backupId` of a
    /// recovery).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub backup_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub destination_path: String,
    /// The store it is in (with `serverName`; Secrets by reference only):
    /// what a Cluster recovering from this Backup reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_store: Option<crate::backup::ObjectStore>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub instance: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub started_at: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stopped_at: String,
    /// The GTID position (MariaDB) or set (MySQL) it is consistent with.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gtid: String,
    #[serde(default)]
    pub raw_bytes: u64,
    #[serde(default)]
    pub stored_bytes: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// Which instance it is taken from and why (and any that refused).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// While running: bytes read of the instance's data size, rate and
    /// time left, refreshed every 10 seconds; then how long it took.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub progress: String,
}

/// Base backups of a Cluster on a schedule.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "mysql.cnmysql.io",
    version = "v1",
    kind = "ScheduledBackup",
    namespaced,
    status = "ScheduledBackupStatus",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.cluster.name"}"#,
    printcolumn = r#"{"name":"Schedule","type":"string","jsonPath":".spec.schedule"}"#,
    printcolumn = r#"{"name":"Last","type":"string","jsonPath":".status.lastScheduleTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScheduledBackupSpec {
    pub cluster: ClusterRef,
    /// A cron schedule, UTC: five fields (`0 3 * * *`), or six with seconds
    /// first (`0 0 3 * * *`).
    #[schemars(length(max = 128))]
    pub schedule: String,
    /// Take one at once when the ScheduledBackup is created.
    #[serde(default)]
    pub immediate: bool,
    /// Take none until this is false again.
    #[serde(default)]
    pub suspend: bool,
    #[serde(default)]
    pub target: BackupTarget,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduledBackupStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_schedule_time: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub next_schedule_time: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_backup_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
}
