//! `cnmysql`: one binary for the instance manager, the local platform and
//! the day-2 commands.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

mod backup_view;
mod cli;
mod client;
mod install;
mod local;
mod log_view;
mod logs;
mod plugin;
mod reinit;
mod report;
mod shared_verbs;

use cli::*;
use logs::init_json_logs;

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

async fn supervise<C: cnmysql_control::ClusterState>(
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
        namespace,
        cluster,
        instance,
        ordinal,
        spec,
        data_dir: data.join("data"),
        binlog_dir: std::env::var_os("CNMYSQL_BINLOGS")
            .map(|d| std::path::PathBuf::from(d).join("binlog")),
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
        shared_volumes: false,
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

/// `cnmysql donor` until SIGTERM or SIGINT.
async fn donor(a: cli::DonorArgs) -> anyhow::Result<()> {
    let mut signals = StopSignals::listen()?;
    init_json_logs();
    let server_cnf = a.server_cnf.or_else(|| {
        let p = PathBuf::from("/etc/mysql/my.cnf");
        p.is_file().then_some(p)
    });
    let opts = cnmysql_instance::donor::DonorOptions {
        listen: a.listen,
        tls_cert: a.tls_cert,
        tls_key: a.tls_key,
        token_file: a.token_file,
        server: a.server,
        server_ca: a.server_ca,
        server_name: a.server_name,
        server_cnf,
        mariadb_backup: a.mariadb_backup,
        work_dir: a.work_dir.unwrap_or_else(|| {
            let uid = nix::unistd::geteuid();
            std::env::temp_dir().join(format!("cnmysql-donor-{uid}"))
        }),
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        tokio::select! {
            _ = signals.term.recv() => {}
            _ = signals.int.recv() => {}
        }
        let _ = stop.send(true);
    });
    cnmysql_instance::donor::run(opts, stopped).await
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Crd => {
            print!("{}", cnmysql_api::crd_yaml());
            Ok(())
        }
        Command::Install { command } => crate::install::run(command),
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
        Command::Donor(a) => donor(a).await,
        Command::Instance {
            command: InstanceCommand::BootstrapController { dest },
        } => bootstrap_controller(&dest),
        Command::Instance {
            command: InstanceCommand::Client { config, args },
        } => client::exec(config.as_deref(), &args),
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
        Command::Local { command } => local::run(command).await,
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
