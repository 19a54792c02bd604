//! The instance manager's own configuration (written by the platform) and
//! the server configuration it renders from it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use cnmysql_api::validation::fold_parameter_name;
use cnmysql_api::{ClusterSpec, Flavor};
use cnmysql_control::peer::PeerAddr;
use cnmysql_tls::TlsPaths;
use serde::{Deserialize, Serialize};

/// The server programs an instance manager runs, and where they come from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Programs {
    pub mysqld: PathBuf,
    /// The program that makes a new data directory (MySQL: mysqld itself,
    /// with `--initialize-insecure`).
    pub install_db: PathBuf,
    /// MariaDB's physical backup tool (MySQL clones with its clone plugin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<PathBuf>,
    /// MariaDB's backup stream extractor (`mbstream`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_extract: Option<PathBuf>,
    /// MariaDB's system tables upgrade (`mariadb-upgrade`), run after a
    /// version change (MySQL upgrades itself at start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<PathBuf>,
    /// The binary log reader (`mariadb-binlog`, `mysqlbinlog`) and the
    /// command-line client, which replay binary logs at recovery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlog: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<PathBuf>,
    /// The logical dump client (`mariadb-dump`, `mysqldump`), which a
    /// logical import runs against the source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dump: Option<PathBuf>,
    /// The server image the programs come from (their paths are inside
    /// it); none: this machine's own programs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageRoot>,
}

/// A server image as the instance manager uses it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ImageRoot {
    pub reference: String,
    pub root: PathBuf,
    pub server_version: String,
}

/// The program names of a flavour: mysqld, install, backup, extract.
fn program_names(flavor: Flavor) -> [&'static [&'static str]; 4] {
    match flavor {
        Flavor::Mariadb => [
            &["mariadbd", "mysqld"],
            &["mariadb-install-db", "mysql_install_db"],
            &["mariadb-backup", "mariabackup"],
            &["mbstream"],
        ],
        Flavor::Mysql => [&["mysqld"], &["mysqld"], &[], &[]],
    }
}

impl Programs {
    /// Find the programs of a flavour on `PATH` (and the usual sbin dirs).
    pub fn discover(flavor: Flavor) -> Result<Programs, String> {
        Self::find(flavor, which, |missing| {
            format!(
                "cannot find {missing} on PATH; install the {} server packages (Debian: apt-get install {}), or name a server image in spec.mysql.image (scripts/images builds them)",
                flavor.as_str(),
                match flavor {
                    Flavor::Mariadb => "mariadb-server mariadb-backup",
                    Flavor::Mysql => "mysql-server-core",
                }
            )
        })
    }

    /// The programs a Cluster asks for on this machine: those of the server
    /// image `spec.mysql.image` names (from `store`), or the machine's own.
    pub fn for_spec(spec: &ClusterSpec, store: &Path) -> Result<Programs, String> {
        let Some(reference) = spec.mysql.image.as_deref() else {
            return Self::discover(spec.mysql.flavor);
        };
        let image = crate::server_image::resolve(store, reference)
            .map_err(|e| format!("spec.mysql.image: {e}"))?;
        if image.manifest.flavor != spec.mysql.flavor {
            return Err(format!(
                "spec.mysql.image: {} holds a {} server ({}) but spec.mysql.flavor is {}: set spec.mysql.flavor: {}, or name a {} image",
                image.reference,
                image.manifest.flavor.as_str(),
                image.manifest.server_version,
                spec.mysql.flavor.as_str(),
                image.manifest.flavor.as_str(),
                spec.mysql.flavor.as_str(),
            ));
        }
        Self::from_image(&image)
    }

    /// The programs of a server image (scripts/images), run from it.
    pub fn from_image(image: &crate::server_image::ServerImage) -> Result<Programs, String> {
        let flavor = image.manifest.flavor;
        let mut p = Self::find(
            flavor,
            |name| {
                ["usr/sbin", "usr/bin"]
                    .iter()
                    .map(|d| Path::new("/").join(d).join(name))
                    .find(|p| image.root.join(p.strip_prefix("/").unwrap()).is_file())
            },
            |missing| {
                format!(
                    "server image {} has no {missing}; rebuild it with `scripts/images --rebuild {}`",
                    image.reference, image.reference
                )
            },
        )?;
        p.image = Some(ImageRoot {
            reference: image.reference.clone(),
            root: image.root.clone(),
            server_version: image.manifest.server_version.clone(),
        });
        Ok(p)
    }

    fn find(
        flavor: Flavor,
        lookup: impl Fn(&str) -> Option<PathBuf>,
        missing: impl Fn(&str) -> String,
    ) -> Result<Programs, String> {
        let upgrade = match flavor {
            Flavor::Mariadb => ["mariadb-upgrade", "mysql_upgrade"]
                .iter()
                .find_map(|n| lookup(n)),
            Flavor::Mysql => None,
        };
        let (binlog_names, client_names, dump_names): (&[&str], &[&str], &[&str]) = match flavor {
            Flavor::Mariadb => (
                &["mariadb-binlog", "mysqlbinlog"],
                &["mariadb", "mysql"],
                &["mariadb-dump", "mysqldump"],
            ),
            Flavor::Mysql => (&["mysqlbinlog"], &["mysql"], &["mysqldump"]),
        };
        let binlog = binlog_names.iter().find_map(|n| lookup(n));
        let client = client_names.iter().find_map(|n| lookup(n));
        let dump = dump_names.iter().find_map(|n| lookup(n));
        let mut found = Vec::new();
        for alternatives in program_names(flavor) {
            if alternatives.is_empty() {
                found.push(None);
                continue;
            }
            match alternatives.iter().find_map(|n| lookup(n)) {
                Some(p) => found.push(Some(p)),
                None => return Err(missing(alternatives[0])),
            }
        }
        let mut it = found.into_iter();
        let mut next = || it.next().flatten();
        Ok(Programs {
            mysqld: next().expect("mysqld is required"),
            install_db: next().expect("the install program is required"),
            backup: next(),
            stream_extract: next(),
            upgrade,
            binlog,
            client,
            dump,
            image: None,
        })
    }

    /// A command that runs `program` (one of these programs): from the
    /// server image when there is one.
    pub fn command(&self, program: &Path) -> std::process::Command {
        use std::os::unix::process::CommandExt as _;
        let mut cmd = std::process::Command::new(program);
        if let Some(img) = &self.image {
            let entry = crate::server_image::Entry::new(&img.root);
            // SAFETY: `enter` only makes system calls on prepared strings.
            unsafe {
                cmd.pre_exec(move || entry.enter());
            }
        }
        cmd
    }

    /// [`Programs::command`] for tokio.
    pub fn tokio_command(&self, program: &Path) -> tokio::process::Command {
        tokio::process::Command::from(self.command(program))
    }

    /// The error of a program that did not start, naming the image and
    /// what it needs.
    pub fn start_error(&self, program: &Path, e: &std::io::Error) -> anyhow::Error {
        match &self.image {
            Some(img) => anyhow::anyhow!(crate::server_image::explain_start_error(
                &img.reference,
                program,
                e
            )),
            None => anyhow::anyhow!("cannot run {}: {e}", program.display()),
        }
    }

    /// What `mysqld --version` says, whole (empty when it did not run).
    pub fn version_line(&self) -> String {
        self.command(&self.mysqld)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    }

    /// The server version these programs hold (digits: `10.11.19`): the
    /// image's manifest, else `mysqld --version`.
    pub fn server_version(&self) -> Option<String> {
        let text = match &self.image {
            Some(img) => img.server_version.clone(),
            None => self.version_line(),
        };
        text.split_whitespace()
            .find_map(cnmysql_core::upgrade::version::Version::parse)
            .map(|v| v.to_string())
    }

    /// MariaDB's backup tool and extractor, or why there are none.
    pub fn mariadb_backup(&self) -> anyhow::Result<(&Path, &Path)> {
        match (&self.backup, &self.stream_extract) {
            (Some(b), Some(x)) => Ok((b, x)),
            _ => anyhow::bail!(
                "no mariadb-backup and mbstream: install mariadb-backup, or use a server image that has them"
            ),
        }
    }
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Files that hold the cluster's secrets (never their contents).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SecretFiles {
    pub admin_password: PathBuf,
    pub replication_password: PathBuf,
    pub app_password: PathBuf,
    /// Where the Secrets `spec.backup`, `spec.bootstrap.recovery`,
    /// `spec.replica` and `spec.secrets.serverTlsSecret` name are, as
    /// `<dir>/<name>/<key>` (mounted Secrets on Kubernetes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_dir: Option<PathBuf>,
}

/// Where mysqld's TLS files are ([`InstanceConfig::server_tls_paths`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerTlsPaths {
    /// What mysqld presents to clients and peers.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The CAs a peer (a replica, a clone) trusts when it connects.
    pub peers_ca: PathBuf,
    /// The user's certificate (`spec.secrets.serverTlsSecret`): peers check
    /// its CA, not the name in it.
    pub users: bool,
}

/// Everything an instance manager needs to know, written by the platform.
#[derive(Serialize, Deserialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct InstanceConfig {
    /// The namespace the cluster is in (the local platform's: `local`);
    /// the identities its control API accepts name it.
    #[serde(default = "local_namespace")]
    pub namespace: String,
    pub cluster: String,
    pub instance: String,
    pub ordinal: u32,
    pub spec: ClusterSpec,
    pub data_dir: PathBuf,
    /// Where the binary logs go when they have a volume of their own
    /// (`spec.storage.binlogs`); in the data directory otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlog_dir: Option<PathBuf>,
    pub run_dir: PathBuf,
    /// An initialised, never started data directory to copy instead of
    /// running the install program (fast start).
    #[serde(default)]
    pub template_dir: Option<PathBuf>,
    pub tls: TlsPaths,
    pub secrets: SecretFiles,
    pub programs: Programs,
    /// Address mysqld binds to.
    pub mysql_bind: String,
    pub mysql_port: u16,
    /// Address and port of the control API.
    pub control_bind: String,
    pub control_port: u16,
    /// Every instance of the cluster, this one included.
    pub peers: BTreeMap<String, PeerAddr>,
    /// Seconds a clean mysqld shutdown may take before it is killed.
    #[serde(default = "default_shutdown_timeout")]
    pub shutdown_timeout_secs: u64,
    /// Stop (cleanly) when the parent process goes away: local platform only.
    #[serde(default)]
    pub exit_with_parent: bool,
    /// The data and binary-log directories are on a file system shared
    /// with the rest of the host (local platform), not volumes of their
    /// own: how full it is says little of this cluster
    /// (`cnmysql_core::binlog_retention::pressure`).
    #[serde(default)]
    pub shared_volumes: bool,
    /// Plain-HTTP port of `/healthz` and `/readyz` for the kubelet's probes
    /// (it has no client certificate for the control port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_port: Option<u16>,
}

fn local_namespace() -> String {
    cnmysql_api::names::LOCAL_NAMESPACE.into()
}

fn default_shutdown_timeout() -> u64 {
    30
}

impl InstanceConfig {
    pub fn load(path: &Path) -> anyhow::Result<InstanceConfig> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            anyhow::anyhow!("cannot read instance configuration {}: {e}", path.display())
        })?;
        serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!("instance configuration {} is invalid: {e}", path.display())
        })
    }

    pub fn flavor(&self) -> Flavor {
        self.spec.mysql.flavor
    }
    /// The directory of the binary logs and their index.
    pub fn binlog_dir(&self) -> PathBuf {
        self.binlog_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.clone())
    }

    /// The certificate, key and CA bundle of mysqld's TLS: the instance's
    /// own, or with `spec.secrets.serverTlsSecret` copies of the user's in
    /// the run directory (`crate::server_tls` puts them there), whose
    /// bundle trusts the user's CA beside the cluster's.
    pub fn server_tls_paths(&self) -> ServerTlsPaths {
        if self.spec.secrets.server_tls_secret.is_none() {
            return ServerTlsPaths {
                cert: self.tls.cert.clone(),
                key: self.tls.key.clone(),
                peers_ca: self.tls.ca.clone(),
                users: false,
            };
        }
        let dir = self.run_dir.join("server-tls");
        ServerTlsPaths {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
            peers_ca: dir.join("peers-ca.crt"),
            users: true,
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.run_dir.join("mysqld.sock")
    }
    pub fn mycnf(&self) -> PathBuf {
        self.run_dir.join("my.cnf")
    }
    pub fn pid_file(&self) -> PathBuf {
        self.run_dir.join("mysqld.pid")
    }
    /// The server's own temporary files (sorts, temporary tables): never
    /// the machine's shared /tmp, where another server's files live.
    pub fn tmp_dir(&self) -> PathBuf {
        self.run_dir.join("tmp")
    }
    pub fn log_fifo(&self) -> PathBuf {
        self.run_dir.join("mysqld.log.fifo")
    }
    /// The only directory MariaDB's statements may read or write files
    /// in (`secure_file_priv`): private, and empty.
    pub fn secure_files_dir(&self) -> PathBuf {
        self.run_dir.join("secure-files")
    }
    /// Written once the data directory holds a server this instance may start.
    pub fn initialized_marker(&self) -> PathBuf {
        self.data_dir.join("cnmysql-initialized")
    }
    /// Server id: `spec.mysql.serverIdBase` plus the ordinal (MariaDB
    /// GTIDs carry it, so it must be unique and stable per instance, and
    /// apart from those of any cluster this one replicates with).
    pub fn server_id(&self) -> u32 {
        self.spec.mysql.server_id_base.saturating_add(self.ordinal)
    }
}

/// Settings we choose unless the user overrides them in `spec.mysql.parameters`.
const TUNABLE_DEFAULTS: &[(&str, &str)] = &[
    ("innodb_buffer_pool_size", "64M"),
    ("max_connections", "151"),
    ("skip_name_resolve", "ON"),
    ("performance_schema", "OFF"),
    ("innodb_flush_log_at_trx_commit", "1"),
    ("sync_binlog", "1"),
    // Binary logs are purged a whole file at a time: files of 64 MiB let
    // the rule (`binlog_retention`) free room on a small volume, where the
    // servers' 1 GiB would keep it all in one file.
    ("max_binlog_size", "64M"),
];

/// The same, per flavour (the names differ).
fn flavour_defaults(f: Flavor) -> &'static [(&'static str, &'static str)] {
    match f {
        Flavor::Mariadb => &[
            ("innodb_log_file_size", "48M"),
            ("slave_net_timeout", "10"),
            // A semi-sync replica's receiver, when stopped, first connects
            // to its source again to end the dump thread that served it,
            // and waits this long when the source no longer answers (its
            // Pod or node gone): on every failover's critical path. 1 s is
            // the least it takes; the server's default is 5 (2 measured).
            ("rpl_semi_sync_slave_kill_conn_timeout", "1"),
        ],
        Flavor::Mysql => &[
            ("innodb_redo_log_capacity", "48M"),
            ("replica_net_timeout", "10"),
            // A replica that crashed fetches its relay log again from the
            // source instead of trusting a torn one.
            ("relay_log_recovery", "ON"),
            // The X protocol would claim port 33060 on every instance.
            ("mysqlx", "OFF"),
            // A multi-threaded replica publishes how far it has applied
            // (what SOURCE_POS_WAIT and SHOW REPLICA STATUS read) only at
            // its checkpoints, 300 ms apart by default: a switchover's
            // target, which waits for the old primary's last position,
            // waited up to that long after applying it.
            ("replica_checkpoint_period", "10"),
        ],
    }
}

/// MySQL's plugins the operator relies on: the clone plugin (physical
/// copies) and both sides of semi-synchronous replication.
pub const MYSQL_PLUGINS: &str = "mysql_clone.so;semisync_source.so;semisync_replica.so";

/// Render the server configuration: our defaults, the user's parameters, then
/// the settings the operator owns (which validation keeps users from setting).
/// A binary log file name as the server is told it: relative to the data
/// directory, or absolute in a directory of their own.
fn binlog_path(c: &InstanceConfig, name: &str) -> String {
    match &c.binlog_dir {
        Some(d) => d.join(name).display().to_string(),
        None => name.to_string(),
    }
}

fn secure_file_priv(c: &InstanceConfig) -> String {
    match c.flavor() {
        Flavor::Mysql => "NULL".into(),
        Flavor::Mariadb => c.secure_files_dir().display().to_string(),
    }
}

pub fn render_mycnf(c: &InstanceConfig) -> String {
    let mut settings: BTreeMap<String, String> = TUNABLE_DEFAULTS
        .iter()
        .chain(flavour_defaults(c.flavor()))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for (k, v) in &c.spec.mysql.parameters {
        settings.insert(fold_parameter_name(k), v.clone());
    }
    let semi = &c.spec.mysql.semi_sync;
    let mut owned: Vec<(&str, String)> = vec![
        ("datadir", c.data_dir.display().to_string()),
        ("socket", c.socket().display().to_string()),
        ("pid_file", c.pid_file().display().to_string()),
        ("tmpdir", c.tmp_dir().display().to_string()),
        ("bind_address", c.mysql_bind.clone()),
        ("port", c.mysql_port.to_string()),
        ("server_id", c.server_id().to_string()),
        ("log_bin", binlog_path(c, "mysql-bin")),
        ("log_bin_index", binlog_path(c, "mysql-bin.index")),
        ("relay_log", "relay-bin".into()),
        ("read_only", "ON".into()),
        // The cluster CA (client certificates: the replication account's),
        // with the user's CA beside it when mysqld presents the user's
        // certificate: MySQL refuses to load a certificate its CA list
        // cannot verify.
        (
            "ssl_ca",
            c.server_tls_paths().peers_ca.display().to_string(),
        ),
        ("ssl_cert", c.server_tls_paths().cert.display().to_string()),
        ("ssl_key", c.server_tls_paths().key.display().to_string()),
        // mysqld reads and writes no file a statement names (LOAD_FILE,
        // LOAD DATA, SELECT … INTO OUTFILE): MySQL's NULL forbids them all;
        // MariaDB has no such value, and gets a private empty directory.
        ("secure_file_priv", secure_file_priv(c)),
        // The server purges no binary log by itself: the instance manager
        // does, once nobody needs a file (`binlog_retention`).
        ("binlog_expire_logs_seconds", "0".into()),
    ];
    match c.flavor() {
        Flavor::Mariadb => {
            owned.extend([
                ("binlog_format", "ROW".to_string()),
                ("log_slave_updates", "ON".to_string()),
                ("gtid_strict_mode", "ON".to_string()),
                ("gtid_domain_id", "0".to_string()),
                ("skip_slave_start", "ON".to_string()),
                ("expire_logs_days", "0".to_string()),
                ("rpl_semi_sync_master_enabled", "OFF".to_string()),
                (
                    "rpl_semi_sync_slave_enabled",
                    if semi.enabled { "ON" } else { "OFF" }.to_string(),
                ),
                ("rpl_semi_sync_master_wait_point", "AFTER_SYNC".to_string()),
                // A primary with no semi-sync replica still waits.
                ("rpl_semi_sync_master_wait_no_slave", "ON".to_string()),
                (
                    "rpl_semi_sync_master_timeout",
                    // The start-up floor; the operator adjusts it at run time.
                    cnmysql_core::semisync::desired(&c.spec, 0)
                        .timeout_millis
                        .to_string(),
                ),
            ]);
        }
        Flavor::Mysql => {
            owned.extend([
                ("log_replica_updates", "ON".to_string()),
                ("gtid_mode", "ON".to_string()),
                ("enforce_gtid_consistency", "ON".to_string()),
                ("skip_replica_start", "ON".to_string()),
                ("binlog_expire_logs_auto_purge", "OFF".to_string()),
                ("super_read_only", "ON".to_string()),
                ("plugin_load_add", MYSQL_PLUGINS.to_string()),
                ("rpl_semi_sync_source_enabled", "OFF".to_string()),
                (
                    "rpl_semi_sync_replica_enabled",
                    if semi.enabled { "ON" } else { "OFF" }.to_string(),
                ),
                ("rpl_semi_sync_source_wait_point", "AFTER_SYNC".to_string()),
                ("rpl_semi_sync_source_wait_no_replica", "ON".to_string()),
                (
                    "rpl_semi_sync_source_timeout",
                    cnmysql_core::semisync::desired(&c.spec, 0)
                        .timeout_millis
                        .to_string(),
                ),
            ]);
        }
    }
    for (k, v) in owned {
        settings.insert(k.to_string(), v);
    }
    let mut out = String::from(
        "# Rendered by the cnmysql instance manager; changes here are overwritten.\n[mysqld]\n",
    );
    for (k, v) in &settings {
        let _ = writeln!(out, "{k} = {v}");
    }
    out
}

/// The option file mariadb-backup reads: the server's file plus admin
/// credentials (so no password appears on a command line).
pub fn render_backup_cnf(c: &InstanceConfig, admin_password: &str) -> String {
    format!(
        "!include {}\n{}",
        c.mycnf().display(),
        render_client_cnf(&c.socket(), admin_password)
    )
}

/// The `[client]` options of the administrator over the server's socket
/// (a file only its owner reads: the password is never on a command line).
pub fn render_client_cnf(socket: &Path, admin_password: &str) -> String {
    format!(
        "[client]\nuser = root\npassword = {}\nsocket = {}\n",
        option_value(admin_password),
        socket.display()
    )
}

/// `v` as a quoted option-file value (`"` and `\` escaped).
pub fn option_value(v: &str) -> String {
    format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
}

#[cfg(test)]
pub(crate) mod tests;
