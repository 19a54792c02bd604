//! Connect the way kubectl does: `--kubeconfig`, else `$KUBECONFIG` or
//! `~/.kube/config`, else the in-cluster service account; `--context` picks a
//! context; the namespace is `--namespace`, else the context's, else
//! `default`.

use std::path::PathBuf;

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub namespace: Option<String>,
}

/// A client and the namespace to work in.
pub async fn connect(opts: &ConnectOptions) -> anyhow::Result<(Client, String)> {
    let options = KubeConfigOptions {
        context: opts.context.clone(),
        cluster: None,
        user: None,
    };
    let config = match &opts.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("--kubeconfig {}: cannot read it", path.display()))?;
            Config::from_custom_kubeconfig(kc, &options)
                .await
                .with_context(|| format!("--kubeconfig {}", path.display()))?
        }
        None if opts.context.is_some() => Config::from_kubeconfig(&options)
            .await
            .context("--context: no such context in the kubeconfig")?,
        None => Config::infer().await.context(
            "no Kubernetes configuration found: set --kubeconfig or KUBECONFIG, or run inside a cluster \
             (for a cluster started with `cnmysql local up`, add --local)",
        )?,
    };
    let namespace = opts
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config).context("building the Kubernetes client")?;
    Ok((client, namespace))
}
