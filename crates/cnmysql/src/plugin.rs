//! The kubectl plugin: `kubectl cnmsql …` (also `kubectl cloudnative-mysql`).
//!
//! The same `cnmysql` executable, found by kubectl on the PATH as
//! `kubectl-cnmsql`; it knows it is the plugin by the name it was started
//! under. Commands act on a Cluster in Kubernetes, or with `--local` on a
//! cluster run by `cnmysql local up`.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::{ArgAction, Parser, Subcommand, ValueEnum};

use cnmysql_k8s::client::{ConnectOptions, connect};
use cnmysql_k8s::plugin::{self as k8s, ClusterHandle};

/// The file names kubectl finds the plugin under. kubectl reads a dash in a
/// plugin's file name as a space between words, and an underscore as a
/// dash: `kubectl-cloudnative_mysql` is `kubectl cloudnative-mysql`.
pub const PLUGIN_NAMES: [&str; 2] = ["kubectl-cnmsql", "kubectl-cloudnative_mysql"];

/// Names earlier versions installed (`kubectl-cloudnative-mysql` would be
/// `kubectl cloudnative mysql`); `plugin install` removes its own links.
const OLD_PLUGIN_NAMES: [&str; 1] = ["kubectl-cloudnative-mysql"];

/// True when started as `kubectl-cnmsql` or `kubectl-cloudnative_mysql`.
pub fn invoked_as_plugin(argv0: &str) -> bool {
    let base = Path::new(argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("");
    PLUGIN_NAMES.contains(&base) || OLD_PLUGIN_NAMES.contains(&base)
}

#[derive(Parser)]
#[command(
    name = "kubectl cnmsql",
    bin_name = "kubectl cnmsql",
    version,
    about = "Day-2 operations on cloudnative-mysql clusters: status, switchover, fencing, re-initialisation, in-place restarts, logs"
)]
pub struct PluginCli {
    #[command(flatten)]
    pub target: PluginTarget,
    #[command(subcommand)]
    pub command: PluginCommand,
}

/// Where the cluster lives; kubectl's own flags for Kubernetes.
#[derive(clap::Args, Clone)]
pub struct PluginTarget {
    /// The namespace of the Cluster [default: the context's namespace].
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// Path to the kubeconfig file [default: $KUBECONFIG, then ~/.kube/config].
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Act on a cluster run by `cnmysql local up` instead of Kubernetes.
    #[arg(long, global = true)]
    pub local: bool,
    /// With --local: the cluster's state directory [default: found by cluster name].
    #[arg(long, global = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum StatusOutput {
    Table,
    Json,
}

#[derive(Subcommand)]
pub enum PluginCommand {
    /// Show the cluster's primary, phase, fenced and diverged instances.
    Status {
        cluster: String,
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: StatusOutput,
    },
    /// Planned switchover: make a healthy replica the primary.
    Promote {
        /// The cluster, e.g. cluster-example.
        cluster: String,
        /// The replica to promote, e.g. cluster-example-2.
        instance: String,
        /// Wait until the instance is the primary (--wait=false returns once requested).
        #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
        wait: bool,
        /// How long to wait [default: the cluster's maxSwitchoverDelay + 30s].
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<u64>,
    },
    /// Restart an instance manager in place: it re-executes its binary and
    /// adopts the running server, so mysqld keeps running and no client is
    /// disconnected.
    RestartInplace {
        /// The cluster, e.g. cluster-example.
        cluster: String,
        /// The instance, e.g. cluster-example-2.
        instance: String,
        /// Wait until the instance is ready again (--wait=false returns once requested).
        #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
        wait: bool,
        /// How long to wait.
        #[arg(long, value_name = "SECONDS", default_value = "60")]
        timeout: u64,
    },
    /// Re-initialise an instance: it saves the transactions only it holds
    /// (a file on its volume, and the backup store), then replaces its data
    /// with a fresh clone of the primary (its volume is kept). Refused for
    /// the primary, and while the cluster has no primary.
    Reinit {
        /// The cluster, e.g. cluster-example.
        cluster: String,
        /// The instance, e.g. cluster-example-2.
        instance: String,
        /// Follow it until the instance is ready again (--wait=false returns once requested).
        #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
        wait: bool,
        /// How long to follow it.
        #[arg(long, value_name = "SECONDS", default_value = "600")]
        timeout: u64,
    },
    /// The instance managers' logs (with the server's own lines): one
    /// instance, or all of the cluster's.
    Logs {
        /// The cluster, e.g. cluster-example.
        cluster: String,
        /// One instance, e.g. cluster-example-2 [default: all of them].
        instance: Option<String>,
        #[command(flatten)]
        options: crate::log_view::LogOptions,
    },
    /// Fence an instance (out of every route, held read-only, never a
    /// failover candidate), or unfence it.
    Fence {
        #[arg(value_parser = ["on", "off"])]
        mode: String,
        /// The cluster, e.g. cluster-example.
        cluster: String,
        /// The instance, e.g. cluster-example-2.
        instance: String,
    },
}

impl PluginTarget {
    async fn kubernetes(&self, cluster: &str) -> anyhow::Result<ClusterHandle> {
        if self.state_dir.is_some() {
            anyhow::bail!("--state-dir applies to local clusters: add --local");
        }
        let (client, ns) = connect(&ConnectOptions {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            namespace: self.namespace.clone(),
        })
        .await?;
        Ok(ClusterHandle::new(client, &ns, cluster))
    }

    fn local_dir(&self, cluster: &str) -> anyhow::Result<cnmysql_local::state::StateDir> {
        if self.kubeconfig.is_some() || self.context.is_some() || self.namespace.is_some() {
            anyhow::bail!(
                "--kubeconfig, --context and --namespace apply to Kubernetes clusters, not with --local"
            );
        }
        let dir = cnmysql_local::resolve_state_dir(self.state_dir.as_deref(), Some(cluster))?;
        let found = dir.load_cluster().with_context(|| {
            format!(
                "no local cluster {cluster} in {} (start it with `cnmysql local up`, or pass --state-dir)",
                dir.root.display()
            )
        })?;
        let name = found.metadata.name.unwrap_or_default();
        if name != cluster {
            anyhow::bail!("{} holds cluster {name}, not {cluster}", dir.root.display());
        }
        Ok(dir)
    }
}

fn color() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

pub async fn run(cli: PluginCli) -> anyhow::Result<()> {
    let t = cli.target;
    match cli.command {
        PluginCommand::Status { cluster, output } => {
            if t.local {
                let report = cnmysql_local::status_report(&t.local_dir(&cluster)?).await?;
                match output {
                    StatusOutput::Json => println!("{}", serde_json::to_string_pretty(&report)?),
                    StatusOutput::Table => print!("{}", cnmysql_local::render_status(&report)),
                }
                return Ok(());
            }
            let c = t.kubernetes(&cluster).await?.get().await?;
            match output {
                StatusOutput::Json => {
                    println!("{}", serde_json::to_string_pretty(&k8s::for_display(c))?)
                }
                StatusOutput::Table => print!("{}", k8s::render_status(&c, color())),
            }
            Ok(())
        }
        PluginCommand::Logs {
            cluster,
            instance,
            options,
        } => logs(&t, &cluster, instance, &options).await,
        PluginCommand::Promote {
            cluster,
            instance,
            wait,
            timeout,
        } => {
            if t.local {
                return cnmysql_local::promote(&t.local_dir(&cluster)?, &instance, wait).await;
            }
            let h = t.kubernetes(&cluster).await?;
            let req = k8s::request_switchover(&h, &instance).await?;
            eprintln!(
                "Switchover of cluster {} from {} to {} requested",
                h.name(),
                req.from,
                req.to
            );
            if !wait {
                return Ok(());
            }
            let limit = match timeout {
                Some(s) => Duration::from_secs(s),
                None => k8s::switchover_wait_limit(&h.get().await?),
            };
            eprintln!(
                "Waiting up to {}s for {instance} to become primary…",
                limit.as_secs()
            );
            let took =
                k8s::wait_for_switchover(&h, &instance, limit, Duration::from_millis(500)).await?;
            eprintln!("{instance} is the primary ({:.1}s)", took.as_secs_f64());
            Ok(())
        }
        PluginCommand::RestartInplace {
            cluster,
            instance,
            wait,
            timeout,
        } => {
            if t.local {
                return cnmysql_local::restart_inplace(&t.local_dir(&cluster)?, &instance).await;
            }
            let h = t.kubernetes(&cluster).await?;
            let request = k8s::request_restart_inplace(&h, &instance).await?;
            eprintln!("In-place restart of {instance} requested ({request})");
            if !wait {
                return Ok(());
            }
            let took = k8s::wait_for_restart_inplace(
                &h,
                &instance,
                &request,
                Duration::from_secs(timeout),
            )
            .await?;
            eprintln!(
                "{instance}: instance manager restarted in place and ready ({:.1}s); mysqld kept running (`kubectl get events` has the PIDs)",
                took.as_secs_f64()
            );
            Ok(())
        }
        PluginCommand::Reinit {
            cluster,
            instance,
            wait,
            timeout,
        } => {
            let limit = Duration::from_secs(timeout);
            if t.local {
                let dir = t.local_dir(&cluster)?;
                cnmysql_local::reinit::request_reinit(&dir, &instance)?;
                if !wait {
                    return Ok(());
                }
                return crate::reinit::follow(limit, &instance, || async { dir.read_status() })
                    .await;
            }
            let h = t.kubernetes(&cluster).await?;
            if k8s::request_reinit(&h, &instance).await? {
                eprintln!("{instance}: re-initialisation requested");
            } else {
                eprintln!("{instance}: re-initialisation was already requested");
            }
            if !wait {
                return Ok(());
            }
            crate::reinit::follow(limit, &instance, || async {
                Ok(h.get().await?.status.unwrap_or_default())
            })
            .await
        }
        PluginCommand::Fence {
            mode,
            cluster,
            instance,
        } => {
            let on = mode == "on";
            let f = if t.local {
                cnmysql_local::fence(&t.local_dir(&cluster)?, &instance, on)?
            } else {
                let h = t.kubernetes(&cluster).await?;
                k8s::set_fencing(&h, &instance, on).await?
            };
            for line in f.report() {
                eprintln!("{line}");
            }
            Ok(())
        }
    }
}

/// `cnmysql plugin install`: put the plugin names on a directory of the PATH
/// as symbolic links to this executable.
pub fn install(dir: &Path) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("finding this executable")?;
    std::fs::create_dir_all(dir).with_context(|| format!("--dir {}", dir.display()))?;
    for name in OLD_PLUGIN_NAMES {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()) {
            std::fs::remove_file(&link).with_context(|| format!("removing {}", link.display()))?;
        }
    }
    for name in PLUGIN_NAMES {
        let link = dir.join(name);
        match std::fs::symlink_metadata(&link) {
            Ok(m) if m.file_type().is_symlink() => std::fs::remove_file(&link)?,
            Ok(_) => anyhow::bail!(
                "{} exists and is not a link this command made; remove it first",
                link.display()
            ),
            Err(_) => {}
        }
        std::os::unix::fs::symlink(&exe, &link)
            .with_context(|| format!("linking {} to {}", link.display(), exe.display()))?;
        println!("{} -> {}", link.display(), exe.display());
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d == dir))
        .unwrap_or(false);
    if !on_path {
        eprintln!(
            "note: {} is not on your PATH; add it so kubectl finds the plugin",
            dir.display()
        );
    }
    Ok(())
}

/// `logs`: locally from the state directory, else the instance Pods'.
async fn logs(
    t: &PluginTarget,
    cluster: &str,
    instance: Option<String>,
    options: &crate::log_view::LogOptions,
) -> anyhow::Result<()> {
    if t.local {
        return crate::local::follow_logs(t.local_dir(cluster)?, instance, options).await;
    }
    let h = t.kubernetes(cluster).await?;
    let req = cnmysql_k8s::logs::LogRequest {
        instance,
        follow: options.follow,
        tail: options.tail.map(i64::from),
    };
    cnmysql_k8s::logs::logs(&h, &req, options.printer()).await
}
