//! What an instance manager reports on `GET /status`, and the snapshot of
//! the whole cluster the decisions are made from.

use std::collections::BTreeMap;

use cnmysql_api::{ClusterSpec, ClusterStatus, Flavor};
use cnmysql_gtid::{History, ParseError, mariadb, mysql};
use serde::{Deserialize, Serialize};

/// The role a server is playing right now, as observed on the server itself.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Writable or about to be: no replication configured.
    Primary,
    /// Replicating from a source.
    Replica,
    /// Not known yet (server not running, or still being initialised).
    #[default]
    Unknown,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Replica => "replica",
            Role::Unknown => "unknown",
        }
    }
}

/// Where the instance manager is in its own life cycle.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub enum InstancePhase {
    #[default]
    Initializing,
    /// Copying a physical backup from the primary.
    Cloning,
    /// Preparing the copied backup.
    Preparing,
    Starting,
    Running,
    /// mysqld exited and is being restarted.
    Restarting,
    ShuttingDown,
    /// Kept out of service (diverged, or failed to initialise) until a human acts.
    Failed,
}

/// A designated primary following a binlog archive.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveReplicaStatus {
    /// The last read of the archive succeeded.
    pub reading: bool,
    /// A batch is being applied.
    pub applying: bool,
    /// The position the last batch reaches.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub position: String,
    /// Seconds between the last read and the commit of the newest
    /// transaction applied or being applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<u64>,
    /// Why the archive cannot be read or applied now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationStatus {
    pub source_host: String,
    pub source_port: u16,
    /// `Yes`, `No` or `Connecting`.
    pub io_state: String,
    pub sql_running: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_io_error: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_sql_error: String,
    #[serde(default)]
    pub last_io_errno: u32,
    #[serde(default)]
    pub last_sql_errno: u32,
    /// `Seconds_Behind_Master`; none while the SQL thread is stopped.
    pub seconds_behind: Option<u64>,
    /// How old, in milliseconds, the oldest transaction the applier is
    /// applying now is (since its commit on the primary that first wrote
    /// it), 0 when none is in hand; only where the server tells it
    /// (MySQL's applier workers). Finer than `seconds_behind`, which MySQL
    /// counts in whole seconds of the last checkpoint's event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applying_lag_millis: Option<u64>,
    /// MariaDB `Using_Gtid` / MySQL auto-position.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub using_gtid: String,
    /// GTIDs received but maybe not applied yet (MariaDB `Gtid_IO_Pos`,
    /// MySQL `Retrieved_Gtid_Set`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub received_gtid: String,
}

impl ReplicationStatus {
    /// Both threads running and no error recorded.
    pub fn healthy(&self) -> bool {
        self.io_state == "Yes"
            && self.sql_running
            && self.last_sql_errno == 0
            && self.last_io_errno == 0
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SemiSyncStatus {
    pub source_enabled: bool,
    /// The source is currently waiting for acknowledgements (not fallen back).
    pub source_active: bool,
    pub replica_enabled: bool,
    pub replica_active: bool,
    /// Replicas currently connected as semi-sync acknowledgers.
    pub clients: u32,
    /// MySQL: `rpl_semi_sync_source_wait_for_replica_count`; MariaDB: always 1.
    pub wait_for_count: u32,
    pub timeout_millis: u64,
}

/// Progress of a clone, visible while it runs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CloneProgress {
    pub source: String,
    pub bytes: u64,
    pub bytes_per_second: f64,
    /// Size of the source's data directory, when it told us.
    pub expected_bytes: Option<u64>,
    pub eta_seconds: Option<f64>,
    pub elapsed_seconds: f64,
    pub stage: String,
}

impl CloneProgress {
    /// `backup from c-2: 1.20 GB of ~3.40 GB at 120 MB/s, ETA 18s`.
    pub fn describe(&self) -> String {
        let of = self
            .expected_bytes
            .map(|e| format!(" of ~{}", human_bytes(e as f64)))
            .unwrap_or_default();
        let eta = self
            .eta_seconds
            .map(|e| format!(", ETA {}", human_duration(e)))
            .unwrap_or_default();
        format!(
            "{} from {}: {}{of} at {}/s{eta}",
            self.stage,
            self.source,
            human_bytes(self.bytes as f64),
            human_bytes(self.bytes_per_second)
        )
    }
}

/// `812 MB`, `3.40 GB`.
pub fn human_bytes(b: f64) -> String {
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else {
        format!("{:.0} MB", b / 1e6)
    }
}

/// `42s`, `3m05s`, `2h10m`.
pub fn human_duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// A place in a server's binary log.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct BinlogPoint {
    pub file: String,
    pub position: u64,
}

/// The body of `GET /status`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatus {
    pub instance: String,
    pub flavor: Option<Flavor>,
    pub phase: InstancePhase,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    pub role: Role,
    pub mysqld_running: bool,
    pub ready: bool,
    pub read_only: bool,
    /// MySQL `@@gtid_executed`; MariaDB `@@gtid_binlog_state`.
    #[serde(default)]
    pub gtid_executed: String,
    /// MariaDB `@@gtid_current_pos`; MySQL: same as executed.
    #[serde(default)]
    pub gtid_position: String,
    /// A read-only server whose commits still wait for a semi-sync
    /// acknowledgement: MySQL lets read-only be set meanwhile and completes
    /// them when a replica acknowledges, so its history is not final yet.
    /// Asked only of a read-only server whose semi-sync source side is on
    /// (a primary handing over).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub commits_awaiting_ack: bool,
    /// A primary handing over that can have nothing acknowledged any more
    /// (`semisync::acks_closed`): where its binary log ended, read after
    /// that was so. Every commit a client can be told of is before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acks_closed_at: Option<BinlogPoint>,
    pub replication: Option<ReplicationStatus>,
    pub lag_seconds: Option<u64>,
    pub semi_sync: Option<SemiSyncStatus>,
    /// SHA-256 of the manager's own executable.
    pub executable_hash: String,
    /// Identity of this server in GTIDs: MariaDB `@@server_id`, MySQL `@@server_uuid`.
    #[serde(default)]
    pub source_id: String,
    /// The liveness isolation check failed (see `isolation.rs`).
    #[serde(default)]
    pub isolated: bool,
    /// The instance holds the primary lease and renewed it recently.
    #[serde(default)]
    pub holds_lease: bool,
    /// Seconds mysqld has been up (survives a manager re-exec).
    pub uptime_seconds: Option<u64>,
    /// A replica whose relay log may have been emptied (its server or its
    /// replication started again) and that has not yet fetched again all
    /// its source held since: a write it acknowledged before may now be
    /// in the source's binary log alone (`relay_refill` in the manager).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub relay_refilling: bool,
    /// While `relay_refilling`: the source's GTID position read after the
    /// relay log was emptied. Every write this replica acknowledged before
    /// is in it, so a candidate holding it holds them (none when the
    /// source could not be read since).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay_refill_target: Option<String>,
    pub manager_version: String,
    pub manager_pid: u32,
    /// When this image of the manager started (RFC 3339): changes on a
    /// re-exec, while the PID does not.
    #[serde(default)]
    pub manager_started_at: String,
    pub mysqld_pid: Option<u32>,
    pub clone: Option<CloneProgress>,
    /// The server's figures for `/metrics`, by status variable
    /// (`server_metrics::status_variables`, and `binlog_bytes`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub server: std::collections::BTreeMap<String, u64>,
    /// The version of the server program this manager runs (digits, like
    /// `10.11.19`), once known.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub server_version: String,
    /// The newest server version that has run on this instance's data.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub data_version: String,
    /// The version the system tables were last upgraded to (MariaDB:
    /// `mariadb-upgrade`; MySQL: the server's own upgrade at start).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub system_tables_version: String,
    /// Continuous binlog archiving, on the primary that archives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<cnmysql_api::backup::ArchiveStatus>,
    /// What this instance's data was recovered to, when a recovery made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered: Option<cnmysql_api::backup::Recovered>,
    /// Following a binlog archive (`archive_replica`), as the designated
    /// primary of a replica cluster that does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive_replica: Option<ArchiveReplicaStatus>,
    /// When the first of the manager's certificate, the cluster CA it
    /// trusts and the user's server certificate mysqld presents
    /// (`spec.secrets.serverTlsSecret`) expires (RFC 3339), as loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_expires_at: Option<String>,
    /// When the manager last saw the server's GTID history grow (RFC
    /// 3339): on the primary its last committed write, on a replica the
    /// last transaction it applied. Seen by the manager's polls, so within
    /// a second or two; none until it has seen one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transaction_at: Option<String>,
    /// The CAs the manager trusts, and the one that signed the certificate
    /// it presents (fingerprints, `cnmysql_tls::rotation`): a CA change
    /// moves on once every instance has loaded its step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls_trust: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_issuer: Option<String>,
    /// How full the data volume is, and the binary logs' when they have a
    /// directory of their own; measured whether or not mysqld runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<cnmysql_api::VolumeUsage>,
    /// Its binary logs and why the oldest is kept (`binlog_retention`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlogs: Option<cnmysql_api::BinlogsStatus>,
}

impl InstanceStatus {
    /// The executed history, parsed for the given flavour.
    pub fn history(&self) -> Result<History, ParseError> {
        parse_history(self.flavor.unwrap_or_default(), &self.gtid_executed)
    }
}

pub fn parse_history(flavor: Flavor, text: &str) -> Result<History, ParseError> {
    Ok(match flavor {
        Flavor::Mysql => History::Mysql(text.parse::<mysql::GtidSet>()?),
        Flavor::Mariadb => History::Mariadb(text.parse::<mariadb::BinlogState>()?),
    })
}

/// Everything an instance holds once it has applied what it received: its
/// executed history with the replication position its IO thread reached
/// (`Gtid_IO_Pos` / `Retrieved_Gtid_Set`). With semi-sync a replica
/// acknowledges a transaction once it is in its relay log, before applying
/// it: a replica that applies slowly holds acknowledged writes that its
/// executed history does not show yet, and a failover that compared
/// executed histories alone could promote a replica that never received
/// them. A promoted candidate applies all it received before it opens writes.
pub fn received_history(flavor: Flavor, st: &InstanceStatus) -> Result<History, ParseError> {
    let executed = parse_history(flavor, &st.gtid_executed)?;
    let Some(received) = st
        .replication
        .as_ref()
        .map(|r| r.received_gtid.trim())
        .filter(|r| !r.is_empty())
    else {
        return Ok(executed);
    };
    Ok(match executed {
        History::Mariadb(state) => {
            History::Mariadb(state.with_applied(&received.parse::<mariadb::GtidPos>()?))
        }
        History::Mysql(set) => History::Mysql(set.union(&received.parse::<mysql::GtidSet>()?)),
    })
}

/// Has the instance received (applied or not) everything up to `position`
/// (another server's `gtid_position`)? False on anything unreadable.
pub fn received_reaches(flavor: Flavor, st: &InstanceStatus, position: &str) -> bool {
    received_history(flavor, st).is_ok_and(|h| reaches(&h, position))
}

/// Does the executed history (`@@gtid_binlog_state` / `@@gtid_executed`)
/// include everything up to `position` (a position / GTID set)? False on
/// anything unreadable.
pub fn history_reaches(flavor: Flavor, history: &str, position: &str) -> bool {
    parse_history(flavor, history).is_ok_and(|h| reaches(&h, position))
}

/// Does `history` hold everything up to `position`, read in its flavour?
pub fn reaches(history: &History, position: &str) -> bool {
    match history {
        History::Mariadb(state) => position
            .parse::<mariadb::GtidPos>()
            .is_ok_and(|p| state.contains_pos(&p)),
        History::Mysql(set) => position
            .parse::<mysql::GtidSet>()
            .is_ok_and(|p| p.is_subset(set)),
    }
}

/// Whether `name` is one of the instances `spec` declares for `cluster`.
pub fn check_member(cluster: &str, spec: &ClusterSpec, name: &str) -> Result<(), NotAMember> {
    let member = cnmysql_api::names::ordinal_of(cluster, name)
        .is_some_and(|n| i64::from(n) <= i64::from(spec.instances));
    if member {
        return Ok(());
    }
    Err(NotAMember {
        name: name.to_string(),
        cluster: cluster.to_string(),
        instances: spec.instances,
    })
}

/// A name that is not one of a cluster's instances.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{name} is not an instance of cluster {cluster} (instances are {cluster}-1 to {cluster}-{instances})"
)]
pub struct NotAMember {
    pub name: String,
    pub cluster: String,
    pub instances: i32,
}

/// One instance as the control plane sees it.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Observed {
    pub name: String,
    pub ordinal: u32,
    /// The last `/status` answer, none if the instance could not be reached.
    pub status: Option<InstanceStatus>,
    /// Set by the platform when the instance was made from another
    /// definition than the Cluster now declares (on Kubernetes: its Pod,
    /// say with another server image); says what changed. Only recreating
    /// the instance applies it (see `upgrade/rollout.rs`).
    pub outdated: Option<String>,
}

impl Observed {
    pub fn reachable(&self) -> bool {
        self.status.is_some()
    }
    pub fn ready(&self) -> bool {
        self.status.as_ref().is_some_and(|s| s.ready)
    }
}

/// Everything a decision may look at, taken at one moment.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub cluster: String,
    pub spec: ClusterSpec,
    pub status: ClusterStatus,
    /// Ordered by ordinal.
    pub instances: Vec<Observed>,
    /// Unix milliseconds when the snapshot was taken.
    pub now_ms: i64,
    /// What the platform resolved the Cluster to declare beyond its spec:
    /// the target image and its version, the force annotation.
    pub declared: crate::declared::Declared,
}

impl Snapshot {
    pub fn get(&self, name: &str) -> Option<&Observed> {
        self.instances.iter().find(|i| i.name == name)
    }

    pub fn is_fenced(&self, name: &str) -> bool {
        self.status.fenced_instances.iter().any(|n| n == name)
    }

    pub fn is_diverged(&self, name: &str) -> bool {
        self.status.diverged_instances.iter().any(|n| n == name)
    }

    /// The GTID source id of an instance: as observed, as last recorded in
    /// the status, or for MariaDB the server id the manager derives from
    /// the ordinal.
    pub fn status_source_id(&self, name: &str) -> String {
        if let Some(id) = self
            .get(name)
            .and_then(|o| o.status.as_ref())
            .map(|s| s.source_id.clone())
            .filter(|s| !s.is_empty())
            .or_else(|| {
                self.status
                    .source_id_by_instance
                    .get(name)
                    .filter(|s| !s.is_empty())
                    .cloned()
            })
        {
            return id;
        }
        match self.spec.mysql.flavor {
            Flavor::Mariadb => cnmysql_api::names::ordinal_of(&self.cluster, name)
                .map(|o| (u64::from(self.spec.mysql.server_id_base) + u64::from(o)).to_string())
                .unwrap_or_default(),
            Flavor::Mysql => String::new(),
        }
    }

    /// The GTID source id of every instance whose server was observed.
    pub fn source_ids(&self) -> BTreeMap<String, String> {
        self.instances
            .iter()
            .filter_map(|i| {
                i.status
                    .as_ref()
                    .filter(|s| s.mysqld_running && !s.source_id.is_empty())
                    .map(|s| (i.name.clone(), s.source_id.clone()))
            })
            .collect()
    }

    /// The GTID history of every instance whose server was observed. A
    /// manager that answers before it has reached its mysqld (just
    /// restarted, say) reports no history at all: recorded as the
    /// instance's last known history, that empty text made every replica
    /// look errant against it, and failover was blocked (issue 18).
    pub fn gtid_by_instance(&self) -> BTreeMap<String, String> {
        self.instances
            .iter()
            .filter_map(|i| {
                i.status
                    .as_ref()
                    .filter(|s| s.mysqld_running)
                    .map(|s| (i.name.clone(), s.gtid_executed.clone()))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_history_is_recorded_only_from_an_observed_server() {
        let mut up = crate::testutil::replica("db-2", "0-1-100");
        let mut starting = crate::testutil::replica("db-3", "");
        starting.status.as_mut().unwrap().mysqld_running = false;
        up.status.as_mut().unwrap().mysqld_running = true;
        let s = crate::testutil::snapshot(vec![up, starting]);
        let g = s.gtid_by_instance();
        assert_eq!(g.get("db-2").map(String::as_str), Some("0-1-100"));
        assert_eq!(
            g.get("db-3"),
            None,
            "a manager that has not reached mysqld yet"
        );
    }
}
