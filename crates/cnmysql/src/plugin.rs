//! The kubectl plugin: `kubectl cnmsql …` (also `kubectl cloudnative-mysql`).
//!
//! The same `cnmysql` executable, found by kubectl on the PATH as
//! `kubectl-cnmsql`; it knows it is the plugin by the name it was started
//! under. Commands act on a Cluster in Kubernetes, or with `--local` on a
//! cluster run by `cnmysql local up`.

use crate::shared_verbs::Switch;
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

impl PluginTarget {
    /// The target of a local cluster (`cnmysql local`'s share of the verbs).
    pub fn local(state_dir: Option<PathBuf>) -> PluginTarget {
        PluginTarget {
            namespace: None,
            kubeconfig: None,
            context: None,
            local: true,
            state_dir,
        }
    }
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
    /// Hibernate the cluster (every instance stopped, its data kept) or
    /// wake it (the same primary back): the `cnmysql.io/hibernation`
    /// annotation on the Cluster.
    Hibernate(crate::shared_verbs::Toggle),
    /// Pause reconciliation for maintenance, or resume it: the
    /// `cnmysql.io/reconcile=paused` annotation on the Cluster. While
    /// paused the instances keep running and status is still reported, but
    /// nothing is changed: no failover, switchover, rollout or new object.
    Maintenance(crate::shared_verbs::Toggle),
    /// A SQL session as the administrator on the primary (or a ready
    /// replica, or the instance named): the server's own client in the
    /// instance's container (`kubectl exec`), with the arguments after `--`
    /// (e.g. `-- -e 'SHOW DATABASES'`).
    Mysql(crate::shared_verbs::Session),
    /// Take a base backup into the store the Cluster's `spec.backup` names:
    /// a `Backup` object (`<cluster>-<time>`), followed until it completes.
    Backup {
        /// The cluster, e.g. cluster-example.
        cluster: String,
        /// Which instance to copy: a ready replica when there is one, or
        /// the primary.
        #[arg(long, value_enum, default_value = "prefer-replica")]
        backup_target: crate::cli::BackupFrom,
        /// The Backup's name [default: <cluster>-<YYYYMMDDhhmmss>, UTC].
        #[arg(long = "backup-name", value_name = "NAME")]
        backup_name: Option<String>,
        /// Follow it until it completes (--wait=false returns once created).
        #[arg(long, default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
        wait: bool,
        /// How long to follow it.
        #[arg(long, value_name = "SECONDS", default_value = "3600")]
        timeout: u64,
    },
    /// A diagnostic bundle (a .tar.gz) of the cluster: the Cluster and its
    /// objects (Pods, claims, Services, EndpointSlices, budgets, backups),
    /// the Events about them, the status, and with --logs the last lines of
    /// each instance's log. Secrets are never read.
    Report(crate::shared_verbs::Bundle),
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
    /// The operator's install: `install generate` prints its manifests
    /// (the same as `cnmysql install generate`).
    Install {
        #[command(subcommand)]
        command: crate::install::InstallCommand,
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
        PluginCommand::Install { command } => crate::install::run(command),
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
        PluginCommand::Hibernate(a) => switch(&t, &a.cluster, Switch::Hibernation, a.on()).await,
        PluginCommand::Maintenance(a) => switch(&t, &a.cluster, Switch::Maintenance, a.on()).await,
        PluginCommand::Mysql(a) => mysql(&t, &a.cluster, a.instance, a.replica, &a.args).await,
        PluginCommand::Report(a) => report(&t, &a.cluster, a.file, a.logs.then_some(a.tail)).await,
        PluginCommand::Backup {
            cluster,
            backup_target,
            backup_name,
            wait,
            timeout,
        } => {
            let ask = BackupAsk {
                target: backup_target.target(),
                name: backup_name,
                wait,
                limit: Duration::from_secs(timeout),
            };
            backup(&t, &cluster, ask).await
        }
        PluginCommand::Promote {
            cluster,
            instance,
            wait,
            timeout,
        } => promote(&t, &cluster, &instance, wait, timeout).await,
        PluginCommand::RestartInplace {
            cluster,
            instance,
            wait,
            timeout,
        } => restart_inplace(&t, &cluster, &instance, wait, timeout).await,
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
        return crate::log_view::follow_logs(t.local_dir(cluster)?, instance, options).await;
    }
    let h = t.kubernetes(cluster).await?;
    let req = cnmysql_k8s::logs::LogRequest {
        instance,
        follow: options.follow,
        tail: options.tail.map(i64::from),
    };
    cnmysql_k8s::logs::logs(&h, &req, options.printer()).await
}

/// `promote`: a planned switchover, followed unless --wait=false.
async fn promote(
    t: &PluginTarget,
    cluster: &str,
    instance: &str,
    wait: bool,
    timeout: Option<u64>,
) -> anyhow::Result<()> {
    if t.local {
        return cnmysql_local::promote(&t.local_dir(cluster)?, instance, wait).await;
    }
    let h = t.kubernetes(cluster).await?;
    let req = k8s::request_switchover(&h, instance).await?;
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
    let took = k8s::wait_for_switchover(&h, instance, limit, Duration::from_millis(500)).await?;
    eprintln!("{instance} is the primary ({:.1}s)", took.as_secs_f64());
    Ok(())
}

/// `restart-inplace`: the manager re-execs, mysqld keeps running.
async fn restart_inplace(
    t: &PluginTarget,
    cluster: &str,
    instance: &str,
    wait: bool,
    timeout: u64,
) -> anyhow::Result<()> {
    if t.local {
        return cnmysql_local::restart_inplace(&t.local_dir(cluster)?, instance).await;
    }
    let h = t.kubernetes(cluster).await?;
    let request = k8s::request_restart_inplace(&h, instance).await?;
    eprintln!("In-place restart of {instance} requested ({request})");
    if !wait {
        return Ok(());
    }
    let took =
        k8s::wait_for_restart_inplace(&h, instance, &request, Duration::from_secs(timeout)).await?;
    eprintln!(
        "{instance}: instance manager restarted in place and ready ({:.1}s); mysqld kept running (`kubectl get events` has the PIDs)",
        took.as_secs_f64()
    );
    Ok(())
}

/// What `backup` was asked for.
struct BackupAsk {
    target: cnmysql_api::backup_resources::BackupTarget,
    name: Option<String>,
    wait: bool,
    limit: Duration,
}

/// `backup`: locally at once (as `cnmysql local backup`), else a Backup
/// object, followed unless --wait=false.
async fn backup(t: &PluginTarget, cluster: &str, ask: BackupAsk) -> anyhow::Result<()> {
    if t.local {
        if ask.name.is_some() {
            anyhow::bail!(
                "--backup-name names a Backup object: it applies to Kubernetes, not with --local"
            );
        }
        let taken =
            cnmysql_local::backup(&t.local_dir(cluster)?, ask.target, |l| eprintln!("{l}")).await?;
        crate::backup_view::say_taken(&taken);
        return Ok(());
    }
    let h = t.kubernetes(cluster).await?;
    let name = cnmysql_k8s::backup_request::request_backup(&h, ask.name, ask.target).await?;
    eprintln!("Backup {name} of cluster {cluster} created");
    if !ask.wait {
        println!("{name}");
        return Ok(());
    }
    let st = cnmysql_k8s::backup_request::wait_for_backup(&h, &name, ask.limit, |line| {
        eprintln!("{name}: {line}")
    })
    .await?;
    println!(
        "{}",
        crate::backup_view::backup_line(
            &st.backup_id,
            &st.instance,
            st.raw_bytes,
            st.stored_bytes,
            &st.gtid
        )
    );
    Ok(())
}

/// `report`: gather on the platform, write one bundle, say where.
pub(crate) async fn report(
    t: &PluginTarget,
    cluster: &str,
    file: Option<PathBuf>,
    log_tail: Option<usize>,
) -> anyhow::Result<()> {
    let files = if t.local {
        cnmysql_local::report::collect(&t.local_dir(cluster)?, log_tail).await?
    } else {
        let h = t.kubernetes(cluster).await?;
        cnmysql_k8s::report::collect(&h, log_tail.map(|n| n as i64)).await?
    };
    let out = file.unwrap_or_else(|| crate::report::default_path(cluster));
    crate::report::write(&out, &files)?;
    eprintln!("{} files of cluster {cluster} written", files.len());
    println!("{}", out.display());
    Ok(())
}

/// The instance a `mysql` session opens on: the one named, else the
/// current primary, or with `replica` a ready replica in service.
fn session_instance(
    st: &cnmysql_api::ClusterStatus,
    named: Option<String>,
    replica: bool,
) -> anyhow::Result<String> {
    if let Some(i) = named {
        return Ok(i);
    }
    if !replica {
        return st
            .current_primary
            .clone()
            .context("the cluster has no primary yet: name an instance");
    }
    st.instance_states
        .iter()
        .find(|(i, s)| {
            s.role == "replica" && s.ready && !cnmysql_core::services::out_of_service(st, i)
        })
        .map(|(i, _)| i.clone())
        .context("no ready replica in service: name an instance")
}

/// `mysql`: run `cnmysql instance client` where the instance's server is.
pub(crate) async fn mysql(
    t: &PluginTarget,
    cluster: &str,
    instance: Option<String>,
    replica: bool,
    args: &[String],
) -> anyhow::Result<()> {
    let mut cmd = if t.local {
        let dir = t.local_dir(cluster)?;
        let i = session_instance(&dir.read_status()?, instance, replica)?;
        let mut c = std::process::Command::new(std::env::current_exe()?);
        c.args(["instance", "client", "--config"])
            .arg(dir.instance_config(&i));
        c
    } else {
        let h = t.kubernetes(cluster).await?;
        let st = h.get().await?.status.unwrap_or_default();
        let i = session_instance(&st, instance, replica)?;
        let mut c = std::process::Command::new("kubectl");
        c.arg("exec");
        if std::io::stdin().is_terminal() {
            c.arg("-it");
        } else {
            c.arg("-i");
        }
        if let Some(k) = &t.kubeconfig {
            c.arg("--kubeconfig").arg(k);
        }
        if let Some(ctx) = &t.context {
            c.args(["--context", ctx]);
        }
        c.args(["-n", h.namespace(), &i, "-c", "mysql", "--"])
            .args([cnmysql_api::names::MANAGER_PATH, "instance", "client"]);
        c
    };
    let st = cmd
        .arg("--")
        .args(args)
        .status()
        .context("starting the session")?;
    std::process::exit(st.code().unwrap_or(1));
}

/// Set (`Some`) or remove a Cluster annotation, on Kubernetes or locally.
async fn annotate(
    t: &PluginTarget,
    cluster: &str,
    key: &str,
    value: Option<&str>,
) -> anyhow::Result<()> {
    if t.local {
        let dir = t.local_dir(cluster)?;
        let change =
            std::collections::BTreeMap::from([(key.to_string(), value.map(str::to_string))]);
        cnmysql_local::annotations::set(&dir, None, &change)?;
    } else {
        let h = t.kubernetes(cluster).await?;
        h.annotate(key, value).await?;
    }
    Ok(())
}

/// `maintenance|hibernate on|off`: the switch's annotation set or removed.
pub(crate) async fn switch(
    t: &PluginTarget,
    cluster: &str,
    which: crate::shared_verbs::Switch,
    on: bool,
) -> anyhow::Result<()> {
    let (key, value) = which.annotation();
    annotate(t, cluster, key, on.then_some(value)).await?;
    eprintln!("{}", which.said(cluster, on));
    Ok(())
}

#[cfg(test)]
mod tests;
