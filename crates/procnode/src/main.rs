//! `cnmysql-node`: a Kubernetes node that runs Pods as local processes
//! (development and tests only; see the crate documentation).

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cnmysql-node",
    version,
    about = "A Kubernetes node that runs Pods as local processes (development and tests; needs root)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct NodeArgs {
    /// The node's name.
    #[arg(long, default_value = "procnode")]
    name: String,
    /// Which host file stands for an image's executable:
    /// REPO=CONTAINER_PATH=HOST_FILE (REPO without tag, or *; CONTAINER_PATH
    /// may be a bare program name found on PATH). Repeatable.
    #[arg(long = "image", value_name = "REPO=PATH=HOST_FILE")]
    images: Vec<String>,
    /// The server image store (scripts/images): a container whose image is
    /// one of its images runs inside that root filesystem. Default:
    /// $CNMYSQL_IMAGE_STORE, else ~/.cache/cnmysql/images.
    #[arg(long, value_name = "DIR")]
    server_images: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Join the API server of a kubeconfig as a node and run its Pods.
    Run {
        #[arg(long, env = "KUBECONFIG", value_name = "FILE")]
        kubeconfig: PathBuf,
        /// Pods' files, claims' data, services.json and the control socket.
        #[arg(long, value_name = "DIR")]
        state_dir: PathBuf,
        #[command(flatten)]
        node: NodeArgs,
    },
    /// Start etcd, kube-apiserver and kube-controller-manager from
    /// KUBEBUILDER_ASSETS on loopback (files in DIR, DIR/kubeconfig for an
    /// administrator) and this node; runs until SIGTERM or SIGINT.
    Up {
        #[arg(long, value_name = "DIR")]
        state_dir: PathBuf,
        #[command(flatten)]
        node: NodeArgs,
    },
    /// Put a fault on a Pod of a running node: cut (no traffic, no longer
    /// reported), isolate (no traffic, still probed), freeze (processes
    /// stopped, no longer reported), heal (undo).
    Fault {
        #[arg(long, value_name = "DIR")]
        state_dir: PathBuf,
        #[arg(value_parser = ["cut", "isolate", "freeze", "heal"])]
        kind: String,
        /// NAMESPACE/POD
        pod: String,
    },
    /// Print the host PID of a container's PID 1.
    Pid {
        #[arg(long, value_name = "DIR")]
        state_dir: PathBuf,
        /// NAMESPACE/POD
        pod: String,
        container: String,
    },
    /// (internal) Run one container; started by the node.
    #[command(hide = true)]
    Shim { spec: PathBuf },
}

fn logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

async fn client(kubeconfig: &std::path::Path) -> anyhow::Result<(kube::Client, String)> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading kubeconfig {}", kubeconfig.display()))?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await?;
    let url = config.cluster_url.to_string();
    Ok((kube::Client::try_from(config)?, url))
}

async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

fn config(
    state: PathBuf,
    n: NodeArgs,
    api_server: String,
) -> anyhow::Result<cnmysql_procnode::Config> {
    Ok(cnmysql_procnode::Config {
        name: n.name,
        state,
        images: cnmysql_procnode::images::Images::parse(&n.images)?.with_server_store(
            n.server_images
                .clone()
                .unwrap_or_else(cnmysql_instance::server_image::default_store),
        ),
        api_server,
    })
}

fn main() {
    let cli = Cli::parse();
    if let Command::Shim { spec } = &cli.command {
        // Single-threaded, before any runtime exists.
        cnmysql_procnode::shim::main(spec);
    }
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    if let Err(e) = rt.block_on(run(cli)) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Shim { .. } => unreachable!(),
        Command::Run {
            kubeconfig,
            state_dir,
            node,
        } => {
            logs();
            let (client, url) = client(&kubeconfig).await?;
            cnmysql_procnode::run(client, config(state_dir, node, url)?, stop_signal()).await
        }
        Command::Up { state_dir, node } => {
            logs();
            up(state_dir, node).await
        }
        Command::Fault {
            state_dir,
            kind,
            pod,
        } => {
            cnmysql_procnode::request(&state_dir, &format!("fault {kind} {pod}")).await?;
            Ok(())
        }
        Command::Pid {
            state_dir,
            pod,
            container,
        } => {
            let pid =
                cnmysql_procnode::request(&state_dir, &format!("pid {pod} {container}")).await?;
            println!("{pid}");
            Ok(())
        }
    }
}

async fn up(state: PathBuf, node: NodeArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&state)?;
    let state = std::fs::canonicalize(&state)?;
    let _lock = cnmysql_procnode::harness::one_at_a_time(false, &state.display().to_string())?;
    let cp_dir = state.join("control-plane");
    // Each `up` starts a fresh cluster.
    let _ = std::fs::remove_dir_all(&cp_dir);
    let _ = std::fs::remove_dir_all(state.join("node"));
    let cp = cnmysql_envtest::ControlPlane::start(cnmysql_envtest::Options {
        controllers: cnmysql_procnode::harness::CONTROLLERS
            .iter()
            .map(|s| s.to_string())
            .collect(),
        dir: Some(cp_dir.clone()),
        ..Default::default()
    })
    .await?;
    std::fs::copy(&cp.kubeconfig, state.join("kubeconfig"))?;
    let client = cp.client().await?;
    let cfg = config(state.join("node"), node, cp.url.clone())?;
    tracing::info!(kubeconfig = %state.join("kubeconfig").display(), "control plane ready");
    let r = cnmysql_procnode::run(client, cfg, stop_signal()).await;
    drop(cp);
    r
}
