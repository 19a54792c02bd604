//! `cnmysql`: one binary for the instance manager, the local platform and
//! the day-2 commands.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

mod plugin;
mod reinit;

#[derive(Parser)]
#[command(
    name = "cnmysql",
    version,
    about = "Highly available MySQL-family clusters: operator, instance manager and local mode"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
    /// Print deploy/operator.yaml: the CRD, RBAC and the operator's Deployment.
    DeployManifest {
        /// The operator image to deploy.
        #[arg(long, default_value = cnmysql_operator::deploy::DEFAULT_IMAGE)]
        image: String,
    },
    /// The kubectl plugin (`kubectl cnmsql`): install it, or run its commands.
    Plugin {
        #[command(subcommand)]
        command: PluginEntry,
    },
}

#[derive(Subcommand)]
enum PluginEntry {
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
enum BackupFrom {
    Primary,
    PreferReplica,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Table,
    Json,
}

#[derive(Subcommand)]
enum LocalCommand {
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
    /// The base backups in the store, and how far the binlog archive
    /// reaches.
    Backups {
        #[command(flatten)]
        target: Target,
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: Output,
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
struct Target {
    /// The cluster, e.g. cluster-example.
    #[arg(value_name = "CLUSTER")]
    cluster: Option<String>,
    /// The cluster, as a flag (the same as the argument).
    #[arg(long = "name", value_name = "CLUSTER", conflicts_with = "cluster")]
    name: Option<String>,
    /// The cluster's state directory, if it was made with --state-dir
    /// [default: <data dir>/cnmysql/<cluster>].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

impl Target {
    fn dir(self) -> anyhow::Result<cnmysql_local::state::StateDir> {
        let name = self.cluster.or(self.name);
        cnmysql_local::existing_state_dir(self.state_dir.as_deref(), name.as_deref())
    }
}

/// One instance of a local cluster: `CLUSTER INSTANCE`, or `INSTANCE` with
/// the cluster given by --name or --state-dir (or read from the instance
/// name, `<cluster>-<n>`).
#[derive(clap::Args)]
struct Member {
    /// The cluster and the instance, e.g. cluster-example cluster-example-2.
    #[arg(value_name = "CLUSTER] [INSTANCE", num_args = 1..=2, required = true)]
    names: Vec<String>,
    /// The cluster, as a flag.
    #[arg(long = "name", value_name = "CLUSTER")]
    name: Option<String>,
    /// The cluster's state directory, if it was made with --state-dir
    /// [default: <data dir>/cnmysql/<cluster>].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

impl Member {
    fn resolve(self) -> anyhow::Result<(cnmysql_local::state::StateDir, String)> {
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
struct OperatorArgs {
    /// Kubeconfig to use outside a cluster [default: $KUBECONFIG, ~/.kube/config, else in-cluster].
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Context of the kubeconfig to use.
    #[arg(long)]
    context: Option<String>,
    /// Namespaces to watch, comma-separated [default: all namespaces].
    #[arg(long, value_delimiter = ',', env = "CNMYSQL_WATCH_NAMESPACES")]
    namespaces: Vec<String>,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR:PORT")]
    http_bind: std::net::SocketAddr,
    /// Reconcile only while holding the leader Lease (run several replicas safely).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    leader_elect: bool,
    /// Namespace of the leader Lease [default: this Pod's namespace].
    #[arg(long, env = "POD_NAMESPACE", default_value = "cnmysql-system")]
    leader_election_namespace: String,
    /// This replica's identity in the leader Lease [default: the host name].
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// The operator's own image: instance Pods copy the manager from it.
    #[arg(
        long,
        env = "CNMYSQL_OPERATOR_IMAGE",
        default_value = "ghcr.io/cloudnative-mysql/cnmysql:latest"
    )]
    operator_image: String,
}

// Parsed once at start: the size of a variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum InstanceCommand {
    /// Copy this executable to DEST (the bootstrap-controller init container
    /// of an instance Pod): the instance manager then runs from it.
    BootstrapController {
        /// Where to put the manager, e.g. /controller/manager.
        dest: PathBuf,
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
struct PodOptions {
    /// The Cluster the Pod belongs to.
    #[arg(long, env = "CNMYSQL_CLUSTER", hide_env_values = true)]
    cluster: Option<String>,
    /// This instance (the Pod's name).
    #[arg(long, env = "CNMYSQL_INSTANCE")]
    instance: Option<String>,
    #[arg(long, env = "CNMYSQL_NAMESPACE")]
    namespace: Option<String>,
    #[arg(long, env = "CNMYSQL_POD_IP")]
    pod_ip: Option<String>,
    /// The data volume's mount point (the data directory is `data/` in it).
    #[arg(long, env = "CNMYSQL_DATA")]
    data: Option<PathBuf>,
    /// A private directory for sockets and the rendered my.cnf.
    #[arg(long, env = "CNMYSQL_RUN")]
    run: Option<PathBuf>,
    /// The instance's certificate, key and CA (`tls.crt`, `tls.key`,
    /// `ca.crt`).
    #[arg(long, env = "CNMYSQL_TLS")]
    tls: Option<PathBuf>,
    /// The cluster's passwords (`admin-password`, `replication-password`,
    /// `app-password`).
    #[arg(long, env = "CNMYSQL_SECRETS")]
    secrets: Option<PathBuf>,
    /// Where mysqld and the control API listen (default: the Pod IP).
    #[arg(long, env = "CNMYSQL_BIND")]
    bind: Option<String>,
    #[arg(long, env = "CNMYSQL_MYSQL_PORT", default_value_t = cnmysql_api::names::MYSQL_PORT)]
    mysql_port: u16,
    #[arg(long, env = "CNMYSQL_CONTROL_PORT", default_value_t = cnmysql_api::names::CONTROL_PORT)]
    control_port: u16,
    #[arg(long, env = "CNMYSQL_PROBE_PORT", default_value_t = cnmysql_api::names::PROBE_PORT)]
    probe_port: u16,
}

fn init_json_logs() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("CNMYSQL_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn main() -> ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let argv0 = std::env::args().next().unwrap_or_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let result = if plugin::invoked_as_plugin(&argv0) {
        rt.block_on(plugin::run(plugin::PluginCli::parse()))
    } else {
        rt.block_on(run(Cli::parse()))
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Run the instance manager until SIGTERM or SIGINT (and, locally, until
/// the control plane that started it goes away).
/// SIGTERM and SIGINT, listened for from the start: as PID 1 of a
/// container the manager would otherwise ignore a SIGTERM that arrives
/// while it is still starting (its Pod deleted just then), and a deleted
/// Pod would keep a running server until the grace period ends.
struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn listen() -> anyhow::Result<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }
}

async fn supervise<C: cnmysql_instance::ClusterState>(
    signals: StopSignals,
    cfg: cnmysql_instance::InstanceConfig,
    state: C,
) -> anyhow::Result<()> {
    let exit_with_parent = cfg.exit_with_parent;
    let manager = cnmysql_instance::Manager::new(cfg, state)?;
    let m = manager.clone();
    tokio::spawn(async move {
        let StopSignals { mut term, mut int } = signals;
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
        m.request_shutdown();
    });
    if exit_with_parent {
        let m = manager.clone();
        let parent = nix::unistd::getppid();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                if nix::unistd::getppid() != parent {
                    tracing::warn!("the local control plane went away; shutting down");
                    m.request_shutdown();
                    break;
                }
            }
        });
    }
    manager.run().await
}

/// The instance configuration of a Pod, from the environment its spec sets,
/// the Cluster it belongs to, and the ServiceAccount's access to both.
async fn kubernetes_instance(
    pod: PodOptions,
) -> anyhow::Result<(
    cnmysql_instance::InstanceConfig,
    cnmysql_k8s::cluster_state::KubeClusterState,
)> {
    use anyhow::Context as _;
    fn need<T>(v: Option<T>, env: &str) -> anyhow::Result<T> {
        v.with_context(|| {
            format!(
                "{env} is not set: the instance Pod spec sets it (is this a Pod the operator made?)"
            )
        })
    }
    let cluster = need(pod.cluster.filter(|v| !v.is_empty()), "CNMYSQL_CLUSTER")?;
    let instance = need(pod.instance.filter(|v| !v.is_empty()), "CNMYSQL_INSTANCE")?;
    let namespace = need(pod.namespace.filter(|v| !v.is_empty()), "CNMYSQL_NAMESPACE")?;
    let pod_ip = need(pod.pod_ip.filter(|v| !v.is_empty()), "CNMYSQL_POD_IP")?;
    let data = need(pod.data, "CNMYSQL_DATA")?;
    let run = need(pod.run, "CNMYSQL_RUN")?;
    let tls = need(pod.tls, "CNMYSQL_TLS")?;
    let secrets = need(pod.secrets, "CNMYSQL_SECRETS")?;
    let ordinal = cnmysql_api::names::ordinal_of(&cluster, &instance).with_context(|| {
        format!("CNMYSQL_INSTANCE={instance} is not an instance of cluster {cluster}")
    })?;
    let (client, _) = cnmysql_k8s::client::connect(&Default::default()).await?;
    // A container restarted in a Pod that is already being deleted (the
    // operator fencing a failed primary) must not start the server: crash
    // recovery as a primary would keep a transaction no replica has.
    if cnmysql_k8s::cluster_state::pod_is_terminating(&client, &namespace, &instance).await? {
        anyhow::bail!("Pod {namespace}/{instance} is being deleted: not starting");
    }
    let spec =
        cnmysql_k8s::cluster_handle::ClusterHandle::new(client.clone(), &namespace, &cluster)
            .get()
            .await?
            .spec;
    let state =
        cnmysql_k8s::cluster_state::KubeClusterState::start(client, &namespace, &cluster).await?;
    let programs = cnmysql_instance::config::Programs::discover(spec.mysql.flavor)
        .map_err(anyhow::Error::msg)?;
    let bind = pod.bind.unwrap_or_else(|| pod_ip.clone());
    let cfg = cnmysql_instance::InstanceConfig {
        cluster,
        instance,
        ordinal,
        spec,
        data_dir: data.join("data"),
        run_dir: run,
        template_dir: None,
        tls: cnmysql_tls::TlsPaths {
            ca: tls.join("ca.crt"),
            cert: tls.join("tls.crt"),
            key: tls.join("tls.key"),
        },
        secrets: cnmysql_instance::config::SecretFiles {
            admin_password: secrets.join("admin-password"),
            replication_password: secrets.join("replication-password"),
            app_password: secrets.join("app-password"),
            backup_dir: std::env::var_os("CNMYSQL_BACKUP_SECRETS").map(Into::into),
        },
        programs,
        mysql_bind: bind.clone(),
        mysql_port: pod.mysql_port,
        control_bind: bind,
        control_port: pod.control_port,
        peers: Default::default(),
        shutdown_timeout_secs: 90,
        exit_with_parent: false,
        probe_port: Some(pod.probe_port),
    };
    Ok((cfg, state))
}

/// Copy this executable to `dest` atomically (a temporary file renamed
/// over it), executable by its owner and group.
fn bootstrap_controller(dest: &Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use std::os::unix::fs::PermissionsExt as _;
    let me = std::env::current_exe()?;
    let dir = dest
        .parent()
        .ok_or_else(|| anyhow::anyhow!("{}: no directory", dest.display()))?;
    let tmp = dir.join(format!(".manager.{}", std::process::id()));
    std::fs::copy(&me, &tmp)
        .with_context(|| format!("copying {} to {}", me.display(), tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&tmp, dest).with_context(|| format!("renaming into {}", dest.display()))?;
    eprintln!("installed the instance manager at {}", dest.display());
    Ok(())
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Crd => {
            print!("{}", cnmysql_api::crd_yaml());
            Ok(())
        }
        Command::DeployManifest { image } => {
            print!("{}", cnmysql_operator::deploy::manifest(&image));
            Ok(())
        }
        Command::Operator(a) => {
            init_json_logs();
            let identity = a
                .identity
                .or_else(|| std::env::var("HOSTNAME").ok())
                .unwrap_or_else(|| format!("cnmysql-operator-{}", std::process::id()));
            cnmysql_operator::run(cnmysql_operator::Options {
                connect: cnmysql_k8s::client::ConnectOptions {
                    kubeconfig: a.kubeconfig,
                    context: a.context,
                    namespace: None,
                },
                namespaces: a.namespaces.into_iter().filter(|n| !n.is_empty()).collect(),
                http_bind: a.http_bind,
                leader_elect: a.leader_elect,
                leader_election_namespace: a.leader_election_namespace,
                identity,
                operator_image: a.operator_image,
            })
            .await
        }
        Command::Instance {
            command: InstanceCommand::BootstrapController { dest },
        } => bootstrap_controller(&dest),
        Command::Plugin {
            command: PluginEntry::Install { dir },
        } => {
            let dir = match dir {
                Some(d) => d,
                None => std::env::current_exe()?
                    .parent()
                    .map(Path::to_path_buf)
                    .ok_or_else(|| {
                        anyhow::anyhow!("this executable has no directory; pass --dir")
                    })?,
            };
            plugin::install(&dir)
        }
        Command::Plugin {
            command: PluginEntry::Run { args },
        } => {
            let cli = plugin::PluginCli::try_parse_from(
                std::iter::once("kubectl cnmsql".to_string()).chain(args),
            )
            .unwrap_or_else(|e| e.exit());
            plugin::run(cli).await
        }
        Command::Local { command } => match command {
            LocalCommand::Up {
                file,
                state_dir,
                port_base,
                detach,
                wait_timeout,
            } => {
                if std::env::var_os(cnmysql_local::DETACHED_ENV).is_some() {
                    init_json_logs();
                }
                cnmysql_local::up(cnmysql_local::UpOptions {
                    manifest: file,
                    state_dir,
                    port_base,
                    detach,
                    wait_timeout: Duration::from_secs(wait_timeout),
                })
                .await
            }
            LocalCommand::Apply { file, state_dir } => {
                let changed = cnmysql_local::apply(&file, state_dir.as_deref())?;
                if changed.is_empty() {
                    println!("unchanged");
                }
                for c in changed {
                    println!("configured: {c}");
                }
                Ok(())
            }
            LocalCommand::Annotate {
                args,
                overwrite,
                state_dir,
            } => {
                anyhow::ensure!(
                    args.len() >= 2,
                    "nothing to annotate: give CLUSTER [INSTANCE] then KEY=VALUE to set or KEY- to remove"
                );
                let cluster = args[0].clone();
                let rest = &args[1..];
                let (instance, changes) = match rest.first() {
                    Some(a) if !a.contains('=') && !a.ends_with('-') => {
                        (Some(a.clone()), &rest[1..])
                    }
                    _ => (None, rest),
                };
                anyhow::ensure!(
                    !changes.is_empty(),
                    "nothing to annotate: give KEY=VALUE to set or KEY- to remove"
                );
                let changes = changes
                    .iter()
                    .map(|c| cnmysql_local::annotations::parse_change(c))
                    .collect::<anyhow::Result<Vec<_>>>()?;
                let dir = cnmysql_local::existing_state_dir(state_dir.as_deref(), Some(&cluster))?;
                println!(
                    "{}",
                    cnmysql_local::annotations::annotate(
                        &dir,
                        instance.as_deref(),
                        &changes,
                        overwrite
                    )?
                );
                Ok(())
            }
            LocalCommand::Status { target, output } => {
                let dir = target.dir()?;
                let report = cnmysql_local::status_report(&dir).await?;
                match output {
                    Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
                    Output::Table => print!("{}", cnmysql_local::render_status(&report)),
                }
                Ok(())
            }
            LocalCommand::Promote { member } => {
                let (dir, instance) = member.resolve()?;
                cnmysql_local::promote(&dir, &instance, true).await
            }
            LocalCommand::Fence { mode, member } => {
                let (dir, instance) = member.resolve()?;
                let f = cnmysql_local::fence(&dir, &instance, mode == "on")?;
                for line in f.report() {
                    eprintln!("{line}");
                }
                Ok(())
            }
            LocalCommand::Upgrade {
                target,
                no_wait,
                wait_timeout,
            } => {
                let wait = (!no_wait).then(|| Duration::from_secs(wait_timeout));
                cnmysql_local::upgrade(&target.dir()?, wait).await
            }
            LocalCommand::RestartInplace { member } => {
                let (dir, instance) = member.resolve()?;
                cnmysql_local::restart_inplace(&dir, &instance).await
            }
            LocalCommand::Reinit {
                member,
                no_wait,
                wait_timeout,
            } => {
                let (dir, instance) = member.resolve()?;
                cnmysql_local::reinit::request_reinit(&dir, &instance)?;
                if no_wait {
                    return Ok(());
                }
                reinit::follow(Duration::from_secs(wait_timeout), &instance, || async {
                    dir.read_status()
                })
                .await
            }
            LocalCommand::Backup {
                target,
                backup_target,
            } => {
                use cnmysql_api::backup_resources::BackupTarget;
                let from = match backup_target {
                    BackupFrom::Primary => BackupTarget::Primary,
                    BackupFrom::PreferReplica => BackupTarget::PreferReplica,
                };
                let t =
                    cnmysql_local::backup(&target.dir()?, from, |line| eprintln!("{line}")).await?;
                let m = &t.manifest.record;
                println!(
                    "backup {} of {}: {} bytes ({} stored), consistent with {}",
                    m.id, m.instance, m.raw_bytes, m.stored_bytes, m.gtid
                );
                Ok(())
            }
            LocalCommand::Backups { target, output } => {
                let dir = target.dir()?;
                let cluster = dir.load_cluster()?;
                let dest = cnmysql_local::backup_destination(&cluster)?;
                let list = cnmysql_backup::base_backup::list(&dest).await?;
                match output {
                    Output::Json => println!("{}", serde_json::to_string_pretty(&list)?),
                    Output::Table => {
                        println!(
                            "{:<18}  {:<9}  {:<10}  {:<20}  {:>12}  {:>12}  GTID",
                            "ID", "PHASE", "INSTANCE", "STOPPED", "BYTES", "STORED"
                        );
                        for m in &list {
                            println!(
                                "{:<18}  {:<9}  {:<10}  {:<20}  {:>12}  {:>12}  {}",
                                m.record.id,
                                m.record.phase,
                                m.record.instance,
                                m.record
                                    .stopped_at
                                    .get(..19)
                                    .unwrap_or(&m.record.stopped_at),
                                m.record.raw_bytes,
                                m.record.stored_bytes,
                                if m.completed() {
                                    &m.record.gtid
                                } else {
                                    &m.record.error
                                }
                            );
                        }
                    }
                }
                Ok(())
            }
            LocalCommand::Events { target, output } => {
                let dir = target.dir()?;
                for e in dir.events(200) {
                    match output {
                        Output::Json => println!("{e}"),
                        Output::Table => println!(
                            "{}  {:<7}  {:<22}  {:<20}  {}",
                            e["time"].as_str().unwrap_or(""),
                            e["type"].as_str().unwrap_or(""),
                            e["reason"].as_str().unwrap_or(""),
                            e["instance"].as_str().unwrap_or("-"),
                            e["message"].as_str().unwrap_or("")
                        ),
                    }
                }
                Ok(())
            }
            LocalCommand::Down { target } => cnmysql_local::down(&target.dir()?),
            LocalCommand::Destroy { target } => cnmysql_local::destroy(&target.dir()?),
        },
        Command::Instance {
            command:
                InstanceCommand::Run {
                    kubernetes: true,
                    pod,
                    ..
                },
        } => {
            let signals = StopSignals::listen()?;
            init_json_logs();
            let (cfg, state) = kubernetes_instance(pod).await?;
            supervise(signals, cfg, state).await
        }
        Command::Instance {
            command: InstanceCommand::Run {
                config, state_file, ..
            },
        } => {
            let signals = StopSignals::listen()?;
            init_json_logs();
            let (Some(config), Some(state_file)) = (config, state_file) else {
                anyhow::bail!("--config and --state-file are required without --kubernetes");
            };
            let cfg = cnmysql_instance::InstanceConfig::load(&config)?;
            let dir = state_file
                .parent()
                .map(|p| cnmysql_local::state::StateDir::new(p.to_path_buf()))
                .ok_or_else(|| anyhow::anyhow!("--state-file has no directory"))?;
            supervise(
                signals,
                cfg,
                cnmysql_local::cluster_state::FileClusterState::new(dir),
            )
            .await
        }
    }
}
