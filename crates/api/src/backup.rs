//! Where a Cluster's backups and binlog archive go: an object store (S3 or
//! an S3-compatible server, Google Cloud Storage, Azure Blob) or, on the
//! local platform, a directory. Shaped like CloudNativePG's
//! `barmanObjectStore`; credentials come from Secrets (locally, from files
//! named the same way) and never appear in the status, events or logs.
//!
//! `spec.backup` names the store and the retention; `spec.bootstrap.recovery`
//! makes a new Cluster from what another one stored there.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An object store destination.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStore {
    /// `s3://bucket/prefix`, `gs://bucket/prefix`,
    /// `azure://container/prefix` (the account from `azureCredentials`) or
    /// `file:///directory`.
    pub destination_path: String,
    /// The folder under `destinationPath` that holds this Cluster's base
    /// backups and binlog archive [default: the Cluster's name]. A recovery
    /// source names the folder of the Cluster it recovers from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
    /// The S3 endpoint of an S3-compatible server (`https://…`); the
    /// provider's default when unset.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "endpointURL"
    )]
    pub endpoint_url: Option<String>,
    /// The S3 region (`us-east-1` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Address buckets in the path (`https://host/bucket/key`), as most
    /// S3-compatible servers want, rather than as a host name.
    #[serde(default)]
    pub path_style: bool,
    /// A CA bundle (PEM) the endpoint's certificate is checked against.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "endpointCA"
    )]
    pub endpoint_ca: Option<SecretKeyRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_credentials: Option<S3Credentials>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub google_credentials: Option<GoogleCredentials>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure_credentials: Option<AzureCredentials>,
}

/// A key of a Secret in the Cluster's namespace (locally: the file
/// `<secrets dir>/<name>/<key>`).
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    pub name: String,
    pub key: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3Credentials {
    pub access_key_id: SecretKeyRef,
    pub secret_access_key: SecretKeyRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_token: Option<SecretKeyRef>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GoogleCredentials {
    /// A service account key (JSON).
    pub application_credentials: SecretKeyRef,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AzureCredentials {
    pub storage_account: SecretKeyRef,
    pub storage_key: SecretKeyRef,
}

/// How the primary's continuous binlog archiving stands (reported by the
/// instance manager that archives, and carried into the Cluster status).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveStatus {
    /// The run (one primary's stretch of archiving) in progress.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub run: String,
    /// The binary log file and offset archived up to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub file: String,
    #[serde(default)]
    pub offset: u64,
    /// The last transaction archived, and when it committed (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_transaction: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_commit_time: String,
    /// When a piece was last stored.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_archived_time: String,
    /// Every transaction committed before this time is archived.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub complete_until: String,
    /// Seconds between now and `completeUntil` when last reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<f64>,
    /// Every transaction the archive holds (MariaDB binlog state, MySQL
    /// GTID set), once this run has caught up with what the server had
    /// when it began; empty until then. Binary logs are purged only once
    /// this holds all they contain.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub held: String,
    /// Pieces and bytes (as written by the server) stored by this run.
    #[serde(default)]
    pub pieces: u64,
    #[serde(default)]
    pub bytes: u64,
    /// Why archiving does not progress, since when (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failing_since: String,
}

impl ObjectStore {
    /// Every Secret key this store's settings name.
    pub fn secret_refs(&self) -> Vec<&SecretKeyRef> {
        let mut out: Vec<&SecretKeyRef> = Vec::new();
        out.extend(self.endpoint_ca.iter());
        if let Some(c) = &self.s3_credentials {
            out.push(&c.access_key_id);
            out.push(&c.secret_access_key);
            out.extend(c.session_token.iter());
        }
        if let Some(c) = &self.google_credentials {
            out.push(&c.application_credentials);
        }
        if let Some(c) = &self.azure_credentials {
            out.push(&c.storage_account);
            out.push(&c.storage_key);
        }
        out
    }
}

/// `spec.backup`: base backups and continuous binlog archiving.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    pub object_store: ObjectStore,
    /// How long base backups are kept, as a number and a unit: `30d`,
    /// `4w`, `12h`. Older ones are deleted with the binlogs no kept backup
    /// needs; never the newest, nor anything the oldest kept one needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_policy: Option<String>,
    /// Archive the primary's binary logs continuously [default: true].
    #[serde(default = "default_true")]
    pub archive_binlogs: bool,
}

fn default_true() -> bool {
    true
}

/// Recovery of a new Cluster from another's backups.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoverySpec {
    pub source: RecoverySource,
    /// What to recover to [default: the latest state the archive holds].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_target: Option<RecoveryTarget>,
}

/// Where the backups to recover from are: a store (`objectStore`, with an
/// optional `backupId`), or on Kubernetes a `Backup` object of the same
/// namespace (`backup.name`), whose store and id the operator records in
/// `status.backup.recoverySource` before the first Pod is made.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoverySource {
    /// The store, with `serverName` the name of the Cluster that stored
    /// its backups there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_store: Option<ObjectStore>,
    /// A base backup by its id (as `cnmysql local backups` or the Backup's
    /// status shows it) [default: the latest one before the target].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_id: Option<String>,
    /// A completed `Backup` object (Kubernetes): its store and its base
    /// backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupName>,
}

/// A `Backup` object in the Cluster's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupName {
    pub name: String,
}

/// The store and base backup a recovery reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedSource {
    pub object_store: ObjectStore,
    pub backup_id: Option<String>,
}

impl RecoverySpec {
    /// The store and backup to recover from: `source.objectStore` as
    /// written, or the Backup object `source.backup` names as the operator
    /// resolved it into `status.backup.recoverySource`.
    pub fn resolved(
        &self,
        status: Option<&crate::ClusterStatus>,
    ) -> Result<ResolvedSource, String> {
        if let Some(store) = &self.source.object_store {
            return Ok(ResolvedSource {
                object_store: store.clone(),
                backup_id: self.source.backup_id.clone(),
            });
        }
        let Some(b) = &self.source.backup else {
            return Err(
                "spec.bootstrap.recovery.source: name an objectStore or a backup".to_string(),
            );
        };
        status
            .and_then(|s| s.backup.as_ref())
            .and_then(|b| b.recovery_source.as_ref())
            .and_then(|r| {
                Some(ResolvedSource {
                    object_store: r.object_store.clone()?,
                    backup_id: r.backup_id.clone(),
                })
            })
            .ok_or_else(|| {
                format!(
                    "spec.bootstrap.recovery.source.backup: Backup {} is not resolved yet (the operator records its store and id in status.backup.recoverySource)",
                    b.name
                )
            })
    }
}

/// A point to recover to: one of the three.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryTarget {
    /// Every transaction committed at or before this time (RFC 3339).
    /// MariaDB records commit times in whole seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_time: Option<String>,
    /// Until this GTID set (MySQL) or position (MariaDB) is applied.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "targetGTID"
    )]
    pub target_gtid: Option<String>,
    /// The base backup alone, with no binlog replayed.
    #[serde(default)]
    pub target_immediate: bool,
}

impl RecoveryTarget {
    /// How many of the three targets are set (one is allowed).
    pub fn targets_set(&self) -> usize {
        [
            self.target_time.is_some(),
            self.target_gtid.is_some(),
            self.target_immediate,
        ]
        .iter()
        .filter(|b| **b)
        .count()
    }
}

/// `status.backup`: what there is to recover from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupStatus {
    /// The earliest time this Cluster can be recovered to: the oldest kept
    /// base backup's end.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub first_recoverability_point: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_backup: Option<BackupRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failed_backup: Option<BackupRecord>,
    /// Continuous binlog archiving, as the primary reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<ArchiveStatus>,
    /// What this Cluster was recovered to, when it was made by recovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered: Option<Recovered>,
    /// The store and backup id of the Backup object that
    /// `spec.bootstrap.recovery.source.backup` names, recorded once by the
    /// operator before the first Pod is made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_source: Option<RecoverySource>,
}

/// One base backup, as its manifest (`backup.json`) records it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupRecord {
    pub id: String,
    /// `completed` or `failed`.
    pub phase: String,
    pub instance: String,
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
}

/// What a recovery reached.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Recovered {
    pub backup_id: String,
    /// The GTID position or set recovered to.
    pub gtid: String,
    /// The last transaction replayed from the archive, and its commit time.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_transaction: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_commit_time: String,
    /// Transactions replayed, and those left out as lost in a failover.
    #[serde(default)]
    pub replayed: u64,
    #[serde(default)]
    pub orphaned: u64,
    /// How long the server's applier took to replay them, in
    /// milliseconds (the base backup's restore not included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_millis: Option<u64>,
    pub completed_at: String,
}
