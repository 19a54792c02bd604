//! `cnmysql-realnode`: a real single-node Kubernetes on this machine, with
//! the operator's and the servers' images imported (development and tests;
//! see the crate documentation).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cnmysql-realnode",
    version,
    about = "A real single-node Kubernetes on this machine: control plane, containerd, kubelet, kube-proxy (needs root and KUBEBUILDER_ASSETS)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the node and its control plane; write DIR/kubeconfig, then
    /// DIR/node.ready; run until SIGTERM or SIGINT, then stop everything.
    Up {
        #[arg(long, value_name = "DIR")]
        state_dir: PathBuf,
        /// The first node's name (the others are NAME-2, NAME-3, ...).
        #[arg(long, default_value = "realnode")]
        name: String,
        /// How many nodes.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=8))]
        nodes: u8,
        /// The operator image: NAME=EXECUTABLE (the release cnmysql
        /// binary, placed at /usr/local/bin/cnmysql).
        #[arg(long, value_name = "NAME=FILE")]
        operator_image: Vec<String>,
        /// A server image from the image store: NAME=STORE_REF (e.g.
        /// docker.io/library/mariadb:10.11=mariadb:10.11.19). Repeatable.
        #[arg(long = "server-image", value_name = "NAME=STORE_REF")]
        server_images: Vec<String>,
    },
    /// Make images and import them into every running node of DIR (say, a
    /// new operator build to roll out with `kubectl set image`).
    Import {
        #[arg(long, value_name = "DIR")]
        state_dir: PathBuf,
        /// An executable image: NAME=EXECUTABLE (placed at
        /// /usr/local/bin/cnmysql, as the operator image has it).
        #[arg(long, value_name = "NAME=FILE")]
        operator_image: Vec<String>,
        /// A server image from the image store: NAME=STORE_REF. Repeatable.
        #[arg(long = "server-image", value_name = "NAME=STORE_REF")]
        server_images: Vec<String>,
    },
}

fn images(
    operator: &[String],
    servers: &[String],
) -> anyhow::Result<Vec<cnmysql_realnode::images::Image>> {
    let mut out = Vec::new();
    for op in operator {
        let (n, file) = split(op, "--operator-image")?;
        out.push(cnmysql_realnode::images::operator(&n, &PathBuf::from(file)));
    }
    let store = cnmysql_realnode::images::store();
    for s in servers {
        let (n, r) = split(s, "--server-image")?;
        out.push(cnmysql_realnode::images::server(&n, &store, &r)?);
    }
    Ok(out)
}

fn split(s: &str, what: &str) -> anyhow::Result<(String, String)> {
    s.split_once('=')
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .ok_or_else(|| anyhow::anyhow!("{what} {s:?}: expected NAME=VALUE"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let (state_dir, name, nodes, images) = match Cli::parse().command {
        Command::Up {
            state_dir,
            name,
            nodes,
            operator_image,
            server_images,
        } => (
            state_dir,
            name,
            nodes,
            images(operator_image.as_slice(), &server_images)?,
        ),
        Command::Import {
            state_dir,
            operator_image,
            server_images,
        } => {
            let images = images(&operator_image, &server_images)?;
            let top = state_dir.join("node");
            let dirs = (0..8)
                .map(|i| cnmysql_realnode::node_dir(&top, i))
                .take_while(|d| d.join("containerd").is_dir());
            for dir in dirs {
                let c = cnmysql_realnode::containerd::Containerd::attach(&dir)?;
                for i in &images {
                    c.import(&i.archive()?, &i.name)?;
                    println!("imported {} into {}", i.name, dir.display());
                }
            }
            return Ok(());
        }
    };
    std::fs::create_dir_all(&state_dir)?;
    let _ = std::fs::remove_file(state_dir.join("node.ready"));
    let node = cnmysql_realnode::RealNode::start(cnmysql_realnode::Options {
        name: Some(name),
        nodes: nodes.into(),
        images,
        dir: Some(state_dir.join("node")),
    })
    .await?;
    std::fs::copy(node.kubeconfig(), state_dir.join("kubeconfig"))?;
    std::fs::write(state_dir.join("node.ready"), "")?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("stopping the node");
    drop(node);
    Ok(())
}
