//! The command line: every command, subcommand and option of `cnmysql`,
//! as clap reads them (what each does is in `main.rs` and the crates it
//! calls).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "cnmysql",
    version,
    about = "Highly available MySQL-family clusters: operator, instance manager and local mode"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run a cluster on this machine, without Kubernetes.
    Local {
        #[command(subcommand)]
        command: LocalCommand,
    },
    /// The instance manager (PID 1 of a database pod).
    Instance {
        #[command(subcommand)]
        command: InstanceCommand,
    },
    /// Print the Cluster CustomResourceDefinition (YAML).
    Crd,
    /// The Kubernetes operator: reconcile Clusters on an API server.
    Operator(OperatorArgs),
    /// The operator's install: `install generate` prints its manifests.
    Install {
        #[command(subcommand)]
        command: crate::install::InstallCommand,
    },
    /// The kubectl plugin (`kubectl cnmsql`): install it, or run its commands.
    Plugin {
        #[command(subcommand)]
        command: PluginEntry,
    },
    /// Serve a physical copy of the MariaDB server on this host to a
    /// Cluster importing it (`spec.bootstrap.import.method: backup`).
    Donor(DonorArgs),
}

/// `cnmysql donor`: run it on the old server's host, as a user that may
/// read its data directory (the server's own user, or root).
#[derive(clap::Args)]
pub(crate) struct DonorArgs {
    /// Where to listen, e.g. 10.0.0.5:4444 (nothing is chosen for you:
    /// the donor serves your data to whoever holds its token and an
    /// import account).
    #[arg(long, value_name = "ADDRESS")]
    pub listen: std::net::SocketAddr,
    /// The donor's TLS certificate (PEM): the importer checks it against
    /// the ca.crt of its import Secret; the server's own certificate does.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: PathBuf,
    /// The key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_key: PathBuf,
    /// A file holding the token an importer must present (at least 16
    /// characters, e.g. `openssl rand -hex 32`); put the same value in the
    /// import Secret under the key donor-token.
    #[arg(long, value_name = "FILE")]
    pub token_file: PathBuf,
    /// Where the server listens, an address of this host; the donor and
    /// mariadb-backup sign in there over TLS, as import accounts require.
    #[arg(long, value_name = "ADDRESS", default_value = "127.0.0.1:3306")]
    pub server: std::net::SocketAddr,
    /// The CA that issued the server's certificate: the import account's
    /// password goes only to a server presenting one of its certificates.
    #[arg(long, value_name = "FILE")]
    pub server_ca: PathBuf,
    /// The name the server's certificate must carry [default: the CA
    /// alone is checked].
    #[arg(long, value_name = "NAME")]
    pub server_name: Option<String>,
    /// The server's option file, read by mariadb-backup for the server's
    /// InnoDB settings [default: /etc/mysql/my.cnf when it exists].
    #[arg(long, value_name = "FILE")]
    pub server_cnf: Option<PathBuf>,
    /// The mariadb-backup program.
    #[arg(long, value_name = "FILE", default_value = "mariadb-backup")]
    pub mariadb_backup: PathBuf,
    /// Where copies are staged while they stream [default: a directory
    /// under the system's temporary directory].
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
}

#[derive(Subcommand)]
pub(crate) enum PluginEntry {
    /// Link `kubectl-cnmsql` and `kubectl-cloudnative_mysql` to this
    /// executable in a directory on your PATH.
    Install {
        /// Where to put the links [default: the directory of this executable].
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Run a plugin command without installing it, e.g.
    /// `cnmysql plugin run -- promote cluster-example cluster-example-2`.
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 1..)]
        args: Vec<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum BackupFrom {
    Primary,
    PreferReplica,
}

impl BackupFrom {
    pub(crate) fn target(self) -> cnmysql_api::backup_resources::BackupTarget {
        use cnmysql_api::backup_resources::BackupTarget;
        match self {
            BackupFrom::Primary => BackupTarget::Primary,
            BackupFrom::PreferReplica => BackupTarget::PreferReplica,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Output {
    Table,
    Json,
}

#[derive(Subcommand)]
pub(crate) enum LocalCommand {
    /// Create or resume a cluster from a manifest and serve its endpoints.
    Up {
        /// The Cluster manifest (YAML).
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Where the cluster keeps its data [default: <data dir>/cnmysql/<cluster>].
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// First port: the endpoints rw, ro, r on N, N+1, N+2, Prometheus
        /// metrics on N+9, then two ports per instance from N+10 (mysqld,
        /// control API). 0 picks free ports. Kept for the cluster's later
        /// starts [default: 13306].
        #[arg(long, value_name = "N")]
        port_base: Option<u16>,
        /// Return once the cluster is ready and keep it running in the background.
        #[arg(long)]
        detach: bool,
        /// With --detach: how long to wait for the cluster to be ready.
        #[arg(long, default_value = "300", value_name = "SECONDS")]
        wait_timeout: u64,
    },
    /// Change a cluster's manifest (server image or version, image
    /// catalogs, upgradeAt, maintenance window, server settings, update
    /// methods, annotations): a running cluster takes it up at once and
    /// rolls its instances as the Cluster says.
    Apply {
        /// The Cluster manifest (YAML; image catalogs may follow it after
        /// `---`).
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// The cluster's state directory, if it was made with --state-dir.
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
    /// Set or remove annotations on the cluster or one of its instances,
    /// as `kubectl annotate` does: `KEY=VALUE` sets, `KEY-` removes.
    /// `cnmysql.io/upgrade-to` asks for an upgrade (manager=operator,
    /// manager=file:///path[#sha256=HEX], image=REF, version=V).
    Annotate {
        /// The cluster, optionally an instance, then KEY=VALUE or KEY-.
        #[arg(value_name = "CLUSTER [INSTANCE] KEY=VALUE|KEY-", num_args = 1.., required = true, action = clap::ArgAction::Append)]
        args: Vec<String>,
        /// Replace a value the key already holds.
        #[arg(long)]
        overwrite: bool,
        /// The cluster's state directory, if it was made with --state-dir.
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
    /// Show instances, roles, GTIDs and endpoints.
    Status {
        #[command(flatten)]
        target: Target,
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Planned switchover: make a healthy replica the primary.
    Promote {
        #[command(flatten)]
        member: Member,
    },
    /// Fence an instance (out of every route, read-only, never a failover
    /// candidate) or unfence it.
    Fence {
        #[arg(value_parser = ["on", "off"])]
        mode: String,
        #[command(flatten)]
        member: Member,
    },
    /// Upgrade a running cluster to this executable: the control plane
    /// re-execs as it (no instance stops), then the instance managers are
    /// rolled (in place or by recreating them, per the Cluster's spec).
    Upgrade {
        #[command(flatten)]
        target: Target,
        /// Return once the control plane runs this executable, without
        /// following the rollout of the instance managers.
        #[arg(long)]
        no_wait: bool,
        /// How long to follow the rollout.
        #[arg(long, default_value = "600", value_name = "SECONDS")]
        wait_timeout: u64,
    },
    /// Re-exec an instance manager in place (the same binary); mysqld keeps
    /// running.
    RestartInplace {
        #[command(flatten)]
        member: Member,
    },
    /// Re-initialise an instance: it saves the transactions only it holds
    /// (a file beside its data, and the backup store), then replaces its
    /// data with a fresh clone of the primary. Refused for the primary.
    Reinit {
        #[command(flatten)]
        member: Member,
        /// Return once requested, without following it.
        #[arg(long)]
        no_wait: bool,
        /// How long to follow it.
        #[arg(long, default_value = "600", value_name = "SECONDS")]
        wait_timeout: u64,
    },
    /// Take a base backup into the store `spec.backup` names, from the
    /// most caught-up ready replica or, failing one, the primary
    /// (continuous binlog archiving runs by itself).
    Backup {
        #[command(flatten)]
        target: Target,
        /// Which instance to copy: a ready replica when there is one, or
        /// the primary.
        #[arg(long, value_enum, default_value = "prefer-replica")]
        backup_target: BackupFrom,
    },
    /// Hibernate the cluster (every instance stopped, its data kept) or
    /// wake it (the same primary back), as `kubectl cnmsql hibernate`.
    Hibernate {
        #[command(flatten)]
        args: crate::shared_verbs::Toggle,
        /// The cluster's state directory, if it was made with --state-dir.
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
    /// Pause reconciliation for maintenance, or resume it, as `kubectl
    /// cnmsql maintenance`.
    Maintenance {
        #[command(flatten)]
        args: crate::shared_verbs::Toggle,
        /// The cluster's state directory, if it was made with --state-dir.
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
    /// A SQL session as the administrator on the primary (or a ready
    /// replica, or the instance named), as `kubectl cnmsql mysql`.
    Mysql {
        #[command(flatten)]
        args: crate::shared_verbs::Session,
        /// The cluster's state directory, if it was made with --state-dir.
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
    /// A diagnostic bundle (the cluster, status, events, logs; never a
    /// secret), as `kubectl cnmsql report`.
    Report {
        #[command(flatten)]
        args: crate::shared_verbs::Bundle,
        /// The cluster's state directory, if it was made with --state-dir.
        #[arg(long, value_name = "DIR")]
        state_dir: Option<PathBuf>,
    },
    /// The base backups in the store, and how far the binlog archive
    /// reaches.
    Backups {
        #[command(flatten)]
        target: Target,
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: Output,
    },
    /// The instance managers' logs (with the server's own lines): one
    /// instance, or all of the cluster's.
    Logs {
        #[command(flatten)]
        target: Target,
        /// One instance, e.g. cluster-example-2 [default: all of them].
        #[arg(long, value_name = "INSTANCE")]
        instance: Option<String>,
        #[command(flatten)]
        options: crate::log_view::LogOptions,
    },
    /// Recent events: switchovers, failovers, fencing, blocked operations.
    Events {
        #[command(flatten)]
        target: Target,
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Stop the cluster cleanly; its data is kept.
    Down {
        #[command(flatten)]
        target: Target,
    },
    /// Stop the cluster and delete its state directory, data included.
    Destroy {
        #[command(flatten)]
        target: Target,
    },
}

/// Which local cluster: its name (as kubectl names objects), or its state
/// directory.
#[derive(clap::Args)]
pub(crate) struct Target {
    /// The cluster, e.g. cluster-example.
    #[arg(value_name = "CLUSTER")]
    pub(crate) cluster: Option<String>,
    /// The cluster, as a flag (the same as the argument).
    #[arg(long = "name", value_name = "CLUSTER", conflicts_with = "cluster")]
    pub(crate) name: Option<String>,
    /// The cluster's state directory, if it was made with --state-dir
    /// [default: <data dir>/cnmysql/<cluster>].
    #[arg(long, value_name = "DIR")]
    pub(crate) state_dir: Option<PathBuf>,
}

impl Target {
    pub(crate) fn dir(self) -> anyhow::Result<cnmysql_local::state::StateDir> {
        let name = self.cluster.or(self.name);
        cnmysql_local::existing_state_dir(self.state_dir.as_deref(), name.as_deref())
    }
}

/// One instance of a local cluster: `CLUSTER INSTANCE`, or `INSTANCE` with
/// the cluster given by --name or --state-dir (or read from the instance
/// name, `<cluster>-<n>`).
#[derive(clap::Args)]
pub(crate) struct Member {
    /// The cluster and the instance, e.g. cluster-example cluster-example-2.
    #[arg(value_name = "CLUSTER] [INSTANCE", num_args = 1..=2, required = true)]
    pub(crate) names: Vec<String>,
    /// The cluster, as a flag.
    #[arg(long = "name", value_name = "CLUSTER")]
    pub(crate) name: Option<String>,
    /// The cluster's state directory, if it was made with --state-dir
    /// [default: <data dir>/cnmysql/<cluster>].
    #[arg(long, value_name = "DIR")]
    pub(crate) state_dir: Option<PathBuf>,
}

impl Member {
    pub(crate) fn resolve(self) -> anyhow::Result<(cnmysql_local::state::StateDir, String)> {
        let (cluster, instance) = match (self.names.as_slice(), self.name) {
            ([c, i], None) => (Some(c.clone()), i.clone()),
            ([c, i], Some(n)) if *c == n => (Some(n), i.clone()),
            ([c, _], Some(n)) => anyhow::bail!(
                "the cluster is named twice, differently: {c} and --name {n}; give one"
            ),
            ([i], Some(n)) => (Some(n), i.clone()),
            ([i], None) if self.state_dir.is_some() => (None, i.clone()),
            ([i], None) => match i.rsplit_once('-') {
                Some((c, n)) if n.parse::<u32>().is_ok() => (Some(c.to_string()), i.clone()),
                _ => anyhow::bail!(
                    "name the cluster too: `CLUSTER INSTANCE`, e.g. cluster-example cluster-example-2"
                ),
            },
            _ => unreachable!("clap takes one or two names"),
        };
        let dir = cnmysql_local::existing_state_dir(self.state_dir.as_deref(), cluster.as_deref())?;
        Ok((dir, instance))
    }
}

#[derive(clap::Args)]
pub(crate) struct OperatorArgs {
    /// Kubeconfig to use outside a cluster [default: $KUBECONFIG, ~/.kube/config, else in-cluster].
    #[arg(long, value_name = "FILE")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Context of the kubeconfig to use.
    #[arg(long)]
    pub(crate) context: Option<String>,
    /// Namespaces to watch, comma-separated [default: all namespaces].
    #[arg(long, value_delimiter = ',', env = "CNMYSQL_WATCH_NAMESPACES")]
    pub(crate) namespaces: Vec<String>,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR:PORT")]
    pub(crate) http_bind: std::net::SocketAddr,
    /// Reconcile only while holding the leader Lease (run several replicas safely).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub(crate) leader_elect: bool,
    /// Namespace of the leader Lease [default: this Pod's namespace].
    #[arg(long, env = "POD_NAMESPACE", default_value = "cnmysql-system")]
    pub(crate) leader_election_namespace: String,
    /// This replica's identity in the leader Lease [default: the host name].
    #[arg(long, env = "POD_NAME")]
    pub(crate) identity: Option<String>,
    /// The operator's own image: instance Pods copy the manager from it.
    #[arg(
        long,
        env = "CNMYSQL_OPERATOR_IMAGE",
        default_value = "ghcr.io/cloudnative-mysql/cnmysql:latest"
    )]
    pub(crate) operator_image: String,
}

// Parsed once at start: the size of a variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub(crate) enum InstanceCommand {
    /// Copy this executable to DEST (the bootstrap-controller init container
    /// of an instance Pod): the instance manager then runs from it.
    BootstrapController {
        /// Where to put the manager, e.g. /controller/manager.
        dest: PathBuf,
    },
    /// The server's own client (`mariadb` / `mysql`) as the administrator
    /// over the instance's socket, with the arguments after `--`; the
    /// password goes in a file only its owner reads, never on a command
    /// line. In an instance Pod (what `kubectl cnmsql mysql` runs) it is
    /// configured from the Pod's environment.
    Client {
        /// Local platform: the instance configuration.
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(last = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Supervise mysqld for one instance.
    Run {
        /// Local platform: the instance configuration it wrote.
        #[arg(long, required_unless_present = "kubernetes")]
        config: Option<PathBuf>,
        /// Local platform: the cluster status file.
        #[arg(long, required_unless_present = "kubernetes")]
        state_file: Option<PathBuf>,
        /// Kubernetes: PID 1 of an instance Pod, configured from the
        /// environment the Pod spec sets (the options below) and its
        /// ServiceAccount.
        #[arg(long, conflicts_with_all = ["config", "state_file"])]
        kubernetes: bool,
        #[command(flatten)]
        pod: PodOptions,
    },
}

/// The in-pod manager's configuration: options, or the environment the
/// operator's Pod spec sets.
#[derive(clap::Args, Debug)]
pub(crate) struct PodOptions {
    /// The Cluster the Pod belongs to.
    #[arg(long, env = "CNMYSQL_CLUSTER", hide_env_values = true)]
    pub(crate) cluster: Option<String>,
    /// This instance (the Pod's name).
    #[arg(long, env = "CNMYSQL_INSTANCE")]
    pub(crate) instance: Option<String>,
    #[arg(long, env = "CNMYSQL_NAMESPACE")]
    pub(crate) namespace: Option<String>,
    #[arg(long, env = "CNMYSQL_POD_IP")]
    pub(crate) pod_ip: Option<String>,
    /// The data volume's mount point (the data directory is `data/` in it).
    #[arg(long, env = "CNMYSQL_DATA")]
    pub(crate) data: Option<PathBuf>,
    /// A private directory for sockets and the rendered my.cnf.
    #[arg(long, env = "CNMYSQL_RUN")]
    pub(crate) run: Option<PathBuf>,
    /// The instance's certificate, key and CA (`tls.crt`, `tls.key`,
    /// `ca.crt`).
    #[arg(long, env = "CNMYSQL_TLS")]
    pub(crate) tls: Option<PathBuf>,
    /// The cluster's passwords (`admin-password`, `replication-password`,
    /// `app-password`).
    #[arg(long, env = "CNMYSQL_SECRETS")]
    pub(crate) secrets: Option<PathBuf>,
    /// Where mysqld and the control API listen (default: the Pod IP).
    #[arg(long, env = "CNMYSQL_BIND")]
    pub(crate) bind: Option<String>,
    #[arg(long, env = "CNMYSQL_MYSQL_PORT", default_value_t = cnmysql_api::names::MYSQL_PORT)]
    pub(crate) mysql_port: u16,
    #[arg(long, env = "CNMYSQL_CONTROL_PORT", default_value_t = cnmysql_api::names::CONTROL_PORT)]
    pub(crate) control_port: u16,
    #[arg(long, env = "CNMYSQL_PROBE_PORT", default_value_t = cnmysql_api::names::PROBE_PORT)]
    pub(crate) probe_port: u16,
}
