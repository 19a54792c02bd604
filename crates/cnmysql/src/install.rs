//! `cnmysql install generate` and `kubectl cnmsql install generate`: the
//! operator's manifests for the options a team chooses, printed (or
//! written to a file) for `kubectl apply --server-side -f`.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use cnmysql_operator::install::{DEFAULT_IMAGE, LogLevel, NAMESPACE, Options, Resources};

#[derive(Subcommand)]
pub enum InstallCommand {
    /// Print the operator's manifests: the CRD, RBAC, the operator's
    /// Deployment and, as asked, monitoring and NetworkPolicies. With no
    /// option it is deploy/operator.yaml.
    Generate(GenerateArgs),
    /// Print a Prometheus scrape job that does what the PodMonitor of
    /// `generate --monitoring` does, for a Prometheus without the
    /// Prometheus Operator (paste it under `scrape_configs:`).
    ScrapeConfig {
        /// The operator's namespace.
        #[arg(long, default_value = NAMESPACE)]
        namespace: String,
        /// A kubeconfig for Prometheus's Kubernetes discovery, when
        /// Prometheus runs outside the cluster [default: in-cluster].
        #[arg(long, value_name = "FILE")]
        kubeconfig: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

#[derive(Args)]
pub struct GenerateArgs {
    /// The operator's namespace (its Deployment, ServiceAccount and Lease).
    #[arg(long, default_value = NAMESPACE)]
    namespace: String,
    /// Watch only these namespaces (comma-separated): the operator's rights
    /// on Secrets, Pods and the rest are RoleBindings in them alone
    /// [default: all namespaces, one ClusterRole].
    #[arg(long, value_delimiter = ',', value_name = "NS,...")]
    watch_namespaces: Vec<String>,
    /// The operator image (also every instance Pod's init container).
    #[arg(long, default_value = DEFAULT_IMAGE)]
    image: String,
    /// Operator replicas: one leads, the others wait for its Lease and take
    /// over within the lease time.
    #[arg(long, default_value_t = 1)]
    replicas: i32,
    /// The operator's CPU request.
    #[arg(long, default_value = "50m")]
    cpu_request: String,
    /// A CPU limit [default: none, so a failover of many Clusters at once is
    /// not throttled].
    #[arg(long)]
    cpu_limit: Option<String>,
    /// The operator's memory request.
    #[arg(long, default_value = "32Mi")]
    memory_request: String,
    /// The operator's memory limit.
    #[arg(long, default_value = "256Mi")]
    memory_limit: String,
    /// The operator's log level (CNMYSQL_LOG; JSON lines on stderr).
    #[arg(long, value_enum, default_value = "info")]
    log_level: Level,
    /// Add the Prometheus Operator's PodMonitor and PrometheusRule (the
    /// alert rules), and the Grafana dashboard as a ConfigMap labelled
    /// grafana_dashboard=1.
    #[arg(long)]
    monitoring: bool,
    /// A label for the monitoring objects, so your Prometheus selects them
    /// (e.g. release=prometheus); may be given more than once.
    #[arg(long, value_name = "KEY=VALUE", value_parser = key_value)]
    monitoring_label: Vec<(String, String)>,
    /// Add the instances' NetworkPolicy to each of these namespaces
    /// (comma-separated; given with no value: the watched namespaces).
    #[arg(long, value_delimiter = ',', num_args = 0.., value_name = "NS,...")]
    network_policy: Option<Vec<String>>,
    /// Write to this file instead of standard output.
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
}

fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("{s:?}: write KEY=VALUE, e.g. release=prometheus"))
}

impl GenerateArgs {
    fn options(&self) -> anyhow::Result<Options> {
        let network_policy_namespaces = match &self.network_policy {
            None => Vec::new(),
            Some(list) if !list.is_empty() => list.clone(),
            Some(_) if self.watch_namespaces.is_empty() => anyhow::bail!(
                "--network-policy with no namespace applies to the watched namespaces, and this install watches all of them: name the namespaces of your Clusters (--network-policy shop,billing)"
            ),
            Some(_) => self.watch_namespaces.clone(),
        };
        Ok(Options {
            namespace: self.namespace.clone(),
            watch_namespaces: self.watch_namespaces.clone(),
            image: self.image.clone(),
            replicas: self.replicas,
            resources: Resources {
                cpu_request: self.cpu_request.clone(),
                memory_request: self.memory_request.clone(),
                memory_limit: self.memory_limit.clone(),
                cpu_limit: self.cpu_limit.clone(),
            },
            log_level: match self.log_level {
                Level::Error => LogLevel::Error,
                Level::Warn => LogLevel::Warn,
                Level::Info => LogLevel::Info,
                Level::Debug => LogLevel::Debug,
                Level::Trace => LogLevel::Trace,
            },
            monitoring: self.monitoring,
            monitoring_labels: self.monitoring_label.iter().cloned().collect(),
            network_policy_namespaces,
        })
    }
}

pub fn run(command: InstallCommand) -> anyhow::Result<()> {
    let args = match command {
        InstallCommand::Generate(args) => args,
        InstallCommand::ScrapeConfig {
            namespace,
            kubeconfig,
        } => return scrape_config(namespace, kubeconfig),
    };
    let text = cnmysql_operator::install::generate(&args.options()?)
        .map_err(|errors| anyhow::anyhow!("{}", errors.join("\n")))?;
    match &args.output {
        Some(path) => std::fs::write(path, text)
            .with_context(|| format!("writing the manifests to {}", path.display())),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

fn scrape_config(namespace: String, kubeconfig: Option<PathBuf>) -> anyhow::Result<()> {
    let o = Options {
        namespace,
        ..Options::default()
    };
    o.check()
        .map_err(|errors| anyhow::anyhow!("{}", errors.join("\n")))?;
    let kubeconfig = kubeconfig.map(|k| k.display().to_string());
    print!(
        "{}",
        cnmysql_operator::install::scrape_config_yaml(&o, kubeconfig.as_deref())
    );
    Ok(())
}
