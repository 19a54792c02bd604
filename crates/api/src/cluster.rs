//! The `Cluster` custom resource: `mysql.cnmysql.io/v1`, kind `Cluster`.
//!
//! Field names, defaults and meanings follow the specification
//! (`replication-and-failover`, `operator-upgrades`). The CEL rules here are
//! mirrored by [`crate::validation`], which the CLI runs before anything is
//! started; a test keeps the two in agreement.

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::flavor::Flavor;
use crate::status::ClusterStatus;

/// Settings the operator owns: they cannot be set in `spec.mysql.parameters`.
/// Names are compared after folding `-` to `_` and lower-casing.
pub const OPERATOR_OWNED_PARAMETERS: &[&str] = &[
    "server_id",
    "port",
    "socket",
    "datadir",
    "bind_address",
    "pid_file",
    "tmpdir",
    "log_bin",
    "log_bin_index",
    "log_slave_updates",
    "log_replica_updates",
    "binlog_format",
    "gtid_strict_mode",
    "gtid_domain_id",
    "gtid_mode",
    "enforce_gtid_consistency",
    "read_only",
    "super_read_only",
    "relay_log",
    "ssl_ca",
    "ssl_cert",
    "ssl_key",
    "skip_slave_start",
    "skip_replica_start",
    "rpl_semi_sync_master_enabled",
    "rpl_semi_sync_slave_enabled",
    "rpl_semi_sync_master_timeout",
    "rpl_semi_sync_master_wait_point",
    "rpl_semi_sync_source_enabled",
    "rpl_semi_sync_replica_enabled",
    "rpl_semi_sync_source_timeout",
    "rpl_semi_sync_source_wait_for_replica_count",
    "rpl_semi_sync_source_wait_point",
    // Off, a primary with no semi-sync replica connected commits without
    // waiting, whatever the timeout: what `required` rests on
    // (docs/topology.md, never two writable).
    "rpl_semi_sync_master_wait_no_slave",
    "rpl_semi_sync_source_wait_no_replica",
    "plugin_load_add",
    "user",
    "secure_file_priv",
    // Binary logs are purged by the operator's rule alone
    // (`cnmysql_core::binlog_retention`): a server that expired them by
    // age would take what a replica or the archive still needs.
    "expire_logs_days",
    "binlog_expire_logs_seconds",
    "binlog_expire_logs_auto_purge",
    "max_binlog_total_size",
    "binlog_space_limit",
    "slave_connections_needed_for_purge",
];

/// Desired state of a highly available MySQL-family cluster.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "mysql.cnmysql.io",
    version = "v1",
    kind = "Cluster",
    namespaced,
    shortname = "cmy",
    status = "ClusterStatus",
    // `kubectl scale cluster/NAME --replicas=N`, and the size Kubernetes
    // controllers read from an owner of Pods (as CloudNativePG's Cluster).
    scale(
        spec_replicas_path = ".spec.instances",
        status_replicas_path = ".status.instances",
        label_selector_path = ".status.selector"
    ),
    printcolumn = r#"{"name":"Instances","type":"integer","jsonPath":".spec.instances"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyInstances"}"#,
    printcolumn = r#"{"name":"Primary","type":"string","jsonPath":".status.currentPrimary"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("self.minSyncReplicas <= self.maxSyncReplicas").message("spec.minSyncReplicas must not exceed spec.maxSyncReplicas: lower minSyncReplicas or raise maxSyncReplicas").field_path(".minSyncReplicas"))]
#[x_kube(validation = Rule::new("self.maxSyncReplicas < self.instances").message("spec.maxSyncReplicas must be lower than spec.instances (a primary cannot wait for itself): lower maxSyncReplicas or add instances").field_path(".maxSyncReplicas"))]
#[x_kube(validation = Rule::new("!self.mysql.semiSync.enabled || self.maxSyncReplicas >= 1").message("spec.mysql.semiSync.enabled needs at least one synchronous replica: set spec.maxSyncReplicas to 1 or more").field_path(".mysql.semiSync.enabled"))]
#[x_kube(validation = Rule::new("!self.mysql.semiSync.enabled || self.mysql.semiSync.dataDurability != 'required' || self.minSyncReplicas >= 1").message("spec.mysql.semiSync.dataDurability 'required' needs spec.minSyncReplicas of 1 or more").field_path(".minSyncReplicas"))]
#[x_kube(validation = Rule::new("!(has(self.mysql.image) && has(self.mysql.imageCatalogRef))").message("spec.mysql.image and spec.mysql.imageCatalogRef name the image two ways: keep one").field_path(".mysql.imageCatalogRef"))]
#[x_kube(validation = Rule::new("!has(self.mysql.imageCatalogRef) || has(self.mysql.version)").message("spec.mysql.imageCatalogRef needs spec.mysql.version: the version to look up in the catalog").field_path(".mysql.version"))]
pub struct ClusterSpec {
    /// Number of instances: one primary and `instances - 1` replicas.
    #[serde(default = "default_instances")]
    #[x_kube(validation = Rule::new("self >= 1").message("spec.instances must be at least 1"))]
    pub instances: i32,

    /// Lowest number of replicas that must acknowledge each commit
    /// (semi-synchronous replication).
    #[serde(default)]
    #[x_kube(validation = Rule::new("self >= 0").message("spec.minSyncReplicas must not be negative"))]
    pub min_sync_replicas: i32,

    /// Highest number of replicas that may be asked to acknowledge commits.
    #[serde(default)]
    #[x_kube(validation = Rule::new("self >= 0").message("spec.maxSyncReplicas must not be negative"))]
    pub max_sync_replicas: i32,

    /// Server flavour, configuration and semi-sync settings.
    #[serde(default)]
    pub mysql: MysqlSpec,

    /// Seconds the primary must be failing before automatic failover starts
    /// (0 = at once).
    #[serde(default)]
    #[x_kube(validation = Rule::new("self >= 0").message("spec.failoverDelay must be 0 or more seconds"))]
    pub failover_delay: i64,

    /// Seconds a switchover target may take to catch up before the switchover
    /// is aborted and reported as blocked.
    #[serde(default = "default_max_switchover_delay")]
    #[x_kube(validation = Rule::new("self >= 0").message("spec.maxSwitchoverDelay must be 0 or more seconds"))]
    pub max_switchover_delay: i64,

    /// A replica further behind its source than this many seconds serves
    /// no reads and does not count as ready until it is back within half
    /// of it (0 = no limit). It can still be chosen in a failover.
    #[serde(default = "default_max_replica_lag_seconds")]
    #[x_kube(validation = Rule::new("self >= 0").message("spec.maxReplicaLagSeconds must be 0 or more seconds"))]
    pub max_replica_lag_seconds: i64,

    /// Guard promotions with the `<cluster>-primary` Lease.
    #[serde(default = "default_true")]
    pub enable_primary_lease: bool,

    /// How a stale primary is updated in a rolling upgrade.
    #[serde(default)]
    pub primary_update_method: PrimaryUpdateMethod,

    /// Whether the rollout waits for a human before touching the primary.
    #[serde(default)]
    pub primary_update_strategy: PrimaryUpdateStrategy,

    /// Upgrade instance managers in place (re-exec, mysqld keeps running)
    /// instead of recreating instances.
    #[serde(default)]
    pub in_place_instance_manager_updates: bool,

    /// `automatic`: a new operator executable or definition rolls out by
    /// itself. `manual`: instances are only reported out of date; each moves
    /// when a `cnmysql.io/upgrade-to` annotation asks (a canary, or the
    /// Cluster's orchestration).
    #[serde(default)]
    pub instance_update_strategy: crate::instance_upgrade::InstanceUpdateStrategy,

    /// Resources the operator manages on behalf of the cluster.
    #[serde(default)]
    pub managed: ManagedSpec,

    /// The volume of each instance's data (Kubernetes): one PersistentVolumeClaim
    /// `<cluster>-<ordinal>` per instance.
    #[serde(default)]
    #[x_kube(validation = Rule::new("has(self.binlogs) == has(oldSelf.binlogs)").message("spec.storage.binlogs is set when the Cluster is made and cannot be added or removed later: put it back as it was"))]
    pub storage: crate::storage::StorageSpec,

    /// CPU and memory of the database container (Kubernetes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<k8s_openapi::api::core::v1::ResourceRequirements>,

    /// Where instances may run (Kubernetes).
    #[serde(default)]
    pub affinity: AffinitySpec,

    /// Secrets the user brings instead of letting the operator generate them.
    #[serde(default)]
    pub secrets: SecretsSpec,

    /// When rollouts (server version, definition, instance manager) may
    /// restart instances; unset: at any time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance_window: Option<crate::upgrade::MaintenanceWindow>,

    /// Base backups and continuous binlog archiving to an object store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<crate::backup::BackupSpec>,

    /// How a new Cluster's data comes to be [default: an empty server].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<crate::bootstrap::BootstrapSpec>,

    /// Follow another server as a replica cluster (`replica.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<crate::replica::ReplicaSpec>,
}

/// Scheduling of instances.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AffinitySpec {
    /// Keep instances of one cluster apart (on different `topologyKey` values).
    #[serde(default = "default_true")]
    pub enable_pod_anti_affinity: bool,
    /// `preferred` (default) lets instances share a node when no other fits;
    /// `required` leaves them Pending instead.
    #[serde(default)]
    pub pod_anti_affinity_type: AntiAffinityType,
    /// The node label that separates instances [default: kubernetes.io/hostname].
    #[serde(default = "default_topology_key")]
    #[schemars(length(max = 316))]
    pub topology_key: String,
    /// Only nodes with these labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Taints the instances tolerate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<k8s_openapi::api::core::v1::Toleration>,
}

impl Default for AffinitySpec {
    fn default() -> Self {
        AffinitySpec {
            enable_pod_anti_affinity: true,
            pod_anti_affinity_type: AntiAffinityType::default(),
            topology_key: default_topology_key(),
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
        }
    }
}

fn default_topology_key() -> String {
    "kubernetes.io/hostname".into()
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AntiAffinityType {
    #[default]
    Preferred,
    Required,
}

/// Names of existing Secrets in the Cluster's namespace to use instead of
/// generated ones, and how long the certificates it issues live. The
/// operator never changes or deletes a Secret it did not create.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretsSpec {
    /// Password of the `app` account, under the key `password`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub app_secret: Option<String>,
    /// Password of the administrative account, under the key `password`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub root_secret: Option<String>,
    /// The cluster's certificate authority: `ca.crt` and `ca.key` (PEM), or
    /// `tls.crt` and `tls.key` as cert-manager writes a CA's Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub ca_secret: Option<String>,
    /// The certificate mysqld presents to its clients, instead of the one
    /// issued from the cluster's CA: `tls.crt` (with its chain), `tls.key`
    /// and `ca.crt` (the CA that issued it), as cert-manager writes a
    /// Certificate's Secret. It should name the `rw`, `ro` and `r`
    /// Services the clients connect to. The instances trust its CA for
    /// replication and clones (checking the CA, not the name). A renewed
    /// Secret is taken into use without a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub server_tls_secret: Option<String>,
    /// How long the certificates issued to the instances and the operator
    /// are valid, in seconds (default 7776000, 90 days). Each is issued
    /// again when a third of its life is left, and the servers load it
    /// without a restart. At least 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 60").message("spec.secrets.certificateLifetimeSeconds must be at least 60 seconds"))]
    pub certificate_lifetime_seconds: Option<i64>,
}

impl SecretsSpec {
    /// The lifetime of an issued certificate, in seconds.
    pub fn certificate_lifetime(&self) -> i64 {
        self.certificate_lifetime_seconds
            .unwrap_or(crate::names::CERTIFICATE_LIFETIME_SECONDS)
    }
}

fn default_instances() -> i32 {
    1
}
fn default_max_switchover_delay() -> i64 {
    3600
}
fn default_max_replica_lag_seconds() -> i64 {
    60
}
fn default_true() -> bool {
    true
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MysqlSpec {
    /// `mysql` (MySQL / Percona) or `mariadb`.
    #[serde(default)]
    pub flavor: Flavor,

    /// Server image. On Kubernetes, the mysql container's image. On the
    /// local platform, an image of the server image store (`scripts/images`
    /// builds them, for example `mysql:9.7`); unset, the server installed
    /// on this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub image: Option<String>,

    /// The server version wanted (major.minor.patch, or major.minor). With
    /// `imageCatalogRef`, the version looked up there; with `image`, the
    /// version that image must hold. A version lower than the one that has
    /// run on the data is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]+(\.[0-9]+)?$"))]
    pub version: Option<String>,

    /// The image catalog that maps `version` to an image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_catalog_ref: Option<crate::upgrade::ImageCatalogRef>,

    /// A change of server version does not start before this time
    /// (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub upgrade_at: Option<String>,

    /// Server settings rendered into the configuration file. Settings the
    /// operator owns (server_id, binlog, GTID, TLS, read-only, semi-sync) are
    /// refused here.
    #[serde(default)]
    #[schemars(extend("maxProperties" = 256, "additionalProperties" = {"type": "string", "maxLength": 4096}))]
    #[x_kube(validation = Rule::new("self.all(k, k.matches('^[A-Za-z0-9_.-]+$') && !self[k].contains('\\n'))").message("spec.mysql.parameters: names are letters, digits, _ . - and values are single lines"))]
    #[x_kube(validation = Rule::new("self.all(k, !(k.lowerAscii().replace('-', '_') in ['server_id','port','socket','datadir','bind_address','pid_file','tmpdir','log_bin','log_bin_index','log_slave_updates','log_replica_updates','binlog_format','gtid_strict_mode','gtid_domain_id','gtid_mode','enforce_gtid_consistency','read_only','super_read_only','relay_log','ssl_ca','ssl_cert','ssl_key','skip_slave_start','skip_replica_start','rpl_semi_sync_master_enabled','rpl_semi_sync_slave_enabled','rpl_semi_sync_master_timeout','rpl_semi_sync_master_wait_point','rpl_semi_sync_source_enabled','rpl_semi_sync_replica_enabled','rpl_semi_sync_source_timeout','rpl_semi_sync_source_wait_for_replica_count','rpl_semi_sync_source_wait_point','plugin_load_add','user','rpl_semi_sync_master_wait_no_slave','rpl_semi_sync_source_wait_no_replica','secure_file_priv','expire_logs_days','binlog_expire_logs_seconds','binlog_expire_logs_auto_purge','max_binlog_total_size','binlog_space_limit','slave_connections_needed_for_purge']))").message("spec.mysql.parameters sets a setting the operator owns (server_id, binlog, GTID, TLS, read-only, semi-sync, paths): remove it; use spec.mysql.semiSync for semi-sync"))]
    pub parameters: BTreeMap<String, String>,

    /// Instance `<cluster>-N` runs with server id `serverIdBase + N`. Clusters
    /// that replicate from one another (replica clusters) need ranges
    /// that do not overlap: a server skips the events that carry its own
    /// id. Set when the Cluster is made; it cannot change.
    #[serde(default)]
    #[schemars(range(min = 0, max = 4_000_000_000u32))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.mysql.serverIdBase cannot change once the Cluster exists"))]
    pub server_id_base: u32,

    /// Semi-synchronous replication.
    #[serde(default)]
    pub semi_sync: SemiSyncSpec,

    /// What happens to an instance whose GTID history holds transactions
    /// the primary lacks (a former primary stopped mid-commit).
    /// `automatic`: when those transactions provably include no write a
    /// client was told had committed, they are saved (a binary log file on
    /// the instance's volume and in the backup store) and the instance
    /// re-clones itself from the primary. `manual`: it stays out, read-only,
    /// until `reinit` is asked for.
    #[serde(default)]
    pub diverged_instances: crate::reinit::DivergedInstances,

    /// Binary logs are kept at least this long (seconds) after they were
    /// last written, for readers outside the cluster (a replica cluster
    /// away for a while, tools that read them); 0 keeps none longer than
    /// the cluster itself needs. Whatever this says, a file is purged
    /// only once every replica of the cluster and the binlog archive hold
    /// all it contains, and never while a connected reader reads it. When
    /// the volume holding them passes 70% used, files older than this
    /// are no longer waited for (docs/storage.md, "Binary logs").
    #[serde(default = "default_binlog_retention")]
    #[schemars(range(min = 0, max = 31_536_000))]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 31536000").message("spec.mysql.binlogRetentionSeconds must be 0 to 31536000 seconds (a year)"))]
    pub binlog_retention_seconds: i64,
}

/// A week: a replica cluster cut off over a long weekend still finds the
/// files it needs.
pub const DEFAULT_BINLOG_RETENTION_SECONDS: i64 = 7 * 24 * 3600;

fn default_binlog_retention() -> i64 {
    DEFAULT_BINLOG_RETENTION_SECONDS
}

impl Default for MysqlSpec {
    fn default() -> Self {
        MysqlSpec {
            flavor: Flavor::default(),
            image: None,
            version: None,
            image_catalog_ref: None,
            upgrade_at: None,
            parameters: BTreeMap::new(),
            server_id_base: 0,
            semi_sync: SemiSyncSpec::default(),
            diverged_instances: Default::default(),
            binlog_retention_seconds: DEFAULT_BINLOG_RETENTION_SECONDS,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SemiSyncSpec {
    #[serde(default)]
    pub enabled: bool,

    /// Milliseconds a commit waits for acknowledgements before replication
    /// falls back to asynchronous (under `dataDurability: preferred`).
    #[serde(default = "default_semi_sync_timeout")]
    #[x_kube(validation = Rule::new("self >= 1").message("spec.mysql.semiSync.timeoutMillis must be at least 1"))]
    pub timeout_millis: i64,

    /// `preferred`: keep writes flowing when replicas are unhealthy.
    /// `required`: never lower the acknowledgement floor.
    #[serde(default)]
    pub data_durability: DataDurability,
}

impl Default for SemiSyncSpec {
    fn default() -> Self {
        SemiSyncSpec {
            enabled: false,
            timeout_millis: default_semi_sync_timeout(),
            data_durability: DataDurability::default(),
        }
    }
}

fn default_semi_sync_timeout() -> i64 {
    10_000
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DataDurability {
    #[default]
    Preferred,
    Required,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PrimaryUpdateMethod {
    /// Switch over to a healthy replica, then update the old primary.
    #[default]
    Switchover,
    /// Restart the primary in place.
    Restart,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PrimaryUpdateStrategy {
    #[default]
    Unsupervised,
    /// Stop the rollout before the primary and wait for a manual switchover.
    Supervised,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManagedSpec {
    #[serde(default)]
    pub services: ManagedServices,
    /// Databases and accounts that exist already (made by hand, or
    /// imported) which declared `Database` and `User` objects may take
    /// over. Nothing else that exists is ever adopted: a declaration that
    /// names one is not Ready, and deleting one never drops it.
    #[serde(
        default,
        skip_serializing_if = "crate::sql_objects::AdoptSpec::is_empty"
    )]
    pub adopt: crate::sql_objects::AdoptSpec,
}

/// The role a Service routes to.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ServiceRole {
    /// The current primary (read-write).
    Rw,
    /// Ready replicas (read-only).
    Ro,
    /// Any ready instance.
    R,
}

impl ServiceRole {
    pub const ALL: [ServiceRole; 3] = [ServiceRole::Rw, ServiceRole::Ro, ServiceRole::R];

    pub fn as_str(self) -> &'static str {
        match self {
            ServiceRole::Rw => "rw",
            ServiceRole::Ro => "ro",
            ServiceRole::R => "r",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManagedServices {
    /// Default Services not to create (`ro`, `r`; `rw` cannot be disabled).
    #[serde(default)]
    #[schemars(length(max = 3))]
    #[x_kube(validation = Rule::new("!('rw' in self)").message("spec.managed.services.disabledDefaultServices cannot contain rw: the read-write Service is always created"))]
    #[x_kube(validation = Rule::new("self.all(x, self.exists_one(y, y == x))").message("spec.managed.services.disabledDefaultServices lists a Service twice: remove the duplicate"))]
    pub disabled_default_services: Vec<ServiceRole>,

    /// Merged onto the three default Services.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<ServiceTemplate>,

    /// Extra Services routed to a role, named `<cluster>-<name>`.
    #[serde(default)]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self.all(x, !(x.name in ['rw', 'ro', 'r']))").message("spec.managed.services.additional[].name must not be rw, ro or r: those are the default Services; pick another name"))]
    #[x_kube(validation = Rule::new("self.all(x, self.exists_one(y, y.name == x.name))").message("spec.managed.services.additional[].name must be unique: rename one of the duplicates"))]
    pub additional: Vec<AdditionalService>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdditionalService {
    /// Rendered as `<cluster>-<name>`: a DNS label.
    #[schemars(length(max = 40))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && size(self) <= 40").message("spec.managed.services.additional[].name must be a lower-case DNS label of at most 40 characters"))]
    pub name: String,
    pub selector_type: ServiceRole,
    #[serde(default)]
    pub update_strategy: ServiceUpdateStrategy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_template: Option<ServiceTemplate>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ServiceUpdateStrategy {
    /// Merge the template onto the role defaults.
    #[default]
    Patch,
    /// Use the template instead of the role defaults (selector, ports and
    /// ownership labels stay the operator's).
    Replace,
}

/// The parts of a Service a user may customise.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ServiceTemplateMeta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<ServiceTemplateSpec>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceTemplateMeta {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64, "additionalProperties" = {"type": "string", "maxLength": 4096}))]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64, "additionalProperties" = {"type": "string", "maxLength": 4096}))]
    pub annotations: BTreeMap<String, String>,
}

/// Selector, ports and clusterIP are owned by the operator and are not
/// accepted here.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceTemplateSpec {
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<ServiceType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_traffic_policy: Option<TrafficPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<SessionAffinity>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 64)))]
    pub load_balancer_source_ranges: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub external_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check_node_port: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ServiceType {
    ClusterIP,
    NodePort,
    LoadBalancer,
    ExternalName,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum TrafficPolicy {
    Cluster,
    Local,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SessionAffinity {
    None,
    ClientIP,
}
