//! A Kubernetes node without a container runtime, for development and
//! tests: it joins a real API server as a Node, binds the Pods that name no
//! node, and runs the Pods bound to it as local processes — init containers
//! then containers, in private mount and PID namespaces, with their volumes,
//! environment, probes, restarts and status — and serves each Service on a
//! local port, as kube-proxy would. It learns only what a kubelet learns
//! from the API server, and writes only what a kubelet writes (the Node, its
//! Lease, Pod bindings and status, final Pod deletion, tokens, and the
//! PersistentVolumes of the claims it mounts).
//!
//! Not part of the shipped `cnmysql` binary.

pub mod env;
pub mod harness;
pub mod images;
pub mod net;
pub mod node;
pub mod pods;
pub mod probes;
pub mod proxy;
pub mod shim;
pub mod volumes;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::sync::watch;

use crate::pods::{Fault, PodHandle};

/// What the node shares with each Pod's task.
pub struct NodeCtx {
    pub client: kube::Client,
    pub name: String,
    pub state: PathBuf,
    pub block: net::Block,
    pub images: images::Images,
    /// Where containers reach the API server (`KUBERNETES_SERVICE_HOST`,
    /// `KUBERNETES_SERVICE_PORT`).
    pub api: (String, u16),
    /// This program, to start container shims.
    pub self_exe: PathBuf,
}

/// The node's settings.
pub struct Config {
    pub name: String,
    pub state: PathBuf,
    pub images: images::Images,
    /// The API server's URL, as containers should reach it.
    pub api_server: String,
}

/// The control socket in a state directory.
pub fn socket(state: &Path) -> PathBuf {
    state.join("node.sock")
}

type Pods = Arc<Mutex<HashMap<String, (String, PodHandle, tokio::task::JoinHandle<()>)>>>;

/// Run the node until `shutdown` resolves; then every Pod's processes are
/// killed and its network faults removed.
pub async fn run(
    client: kube::Client,
    cfg: Config,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(&cfg.state)
        .with_context(|| format!("creating {}", cfg.state.display()))?;
    let ctx = Arc::new(NodeCtx {
        client: client.clone(),
        name: cfg.name.clone(),
        state: cfg.state.clone(),
        block: {
            let b = net::Block::acquire()?;
            b.reset()?;
            b
        },
        images: cfg.images,
        api: host_port(&cfg.api_server)?,
        self_exe: std::env::current_exe()?,
    });
    node::register(&client, &cfg.name).await?;
    let pods: Pods = Default::default();
    let tasks = vec![
        tokio::spawn(node::heartbeat(client.clone(), cfg.name.clone())),
        tokio::spawn(node::schedule(client.clone(), cfg.name.clone())),
        tokio::spawn({
            let (c, s) = (client.clone(), cfg.state.clone());
            async move {
                if let Err(e) = proxy::run(c, s).await {
                    tracing::error!(error = %format!("{e:#}"), "service proxy stopped");
                }
            }
        }),
        tokio::spawn(control(ctx.clone(), pods.clone())),
        tokio::spawn(watch_pods(ctx.clone(), pods.clone())),
    ];
    std::fs::write(cfg.state.join("node.ready"), &cfg.name)?;
    tracing::info!(node = cfg.name, state = %cfg.state.display(), "process node running");
    shutdown.await;
    for t in &tasks {
        t.abort();
    }
    let all: Vec<_> = pods.lock().unwrap().drain().collect();
    for (_, (_, h, task)) in all {
        let i = h.info.lock().unwrap().clone();
        task.abort();
        let _ = task.await;
        if let (Some(std::net::IpAddr::V4(ip)), Some(uid)) = (i.ip, i.uid) {
            net::heal(ip, uid);
        }
        for pid in i.pids.values() {
            pods::signal_namespace(*pid, nix::sys::signal::Signal::SIGKILL);
        }
    }
    ctx.block.clear();
    let _ = std::fs::remove_file(cfg.state.join("node.ready"));
    let _ = std::fs::remove_file(socket(&cfg.state));
    Ok(())
}

fn host_port(url: &str) -> anyhow::Result<(String, u16)> {
    let u: http::Uri = url
        .parse()
        .with_context(|| format!("API server URL {url:?}"))?;
    let host = u.host().context("the API server URL has no host")?;
    Ok((
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        u.port_u16().unwrap_or(443),
    ))
}

async fn watch_pods(ctx: Arc<NodeCtx>, pods: Pods) {
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let cfg = watcher::Config::default().fields(&format!("spec.nodeName={}", ctx.name));
    let mut events = Box::pin(watcher(api, cfg).default_backoff());
    let mut listed: Option<std::collections::HashSet<String>> = None;
    while let Some(ev) = events.next().await {
        match ev {
            Ok(watcher::Event::Init) => listed = Some(Default::default()),
            Ok(watcher::Event::InitApply(p)) => {
                if let (Some(l), Some(uid)) = (listed.as_mut(), p.metadata.uid.clone()) {
                    l.insert(uid);
                }
                apply(&ctx, &pods, p).await;
            }
            Ok(watcher::Event::Apply(p)) => apply(&ctx, &pods, p).await,
            Ok(watcher::Event::InitDone) => {
                if let Some(l) = listed.take() {
                    for (uid, (_, h, _)) in pods.lock().unwrap().iter() {
                        if !l.contains(uid) {
                            let _ = h.pod.send(None);
                        }
                    }
                }
            }
            Ok(watcher::Event::Delete(p)) => {
                if let Some(uid) = &p.metadata.uid
                    && let Some((_, h, _)) = pods.lock().unwrap().get(uid)
                {
                    let _ = h.pod.send(None);
                }
            }
            Err(e) => tracing::debug!(error = %e, "watching this node's pods"),
        }
        pods.lock().unwrap().retain(|_, (_, _, t)| !t.is_finished());
    }
}

async fn apply(ctx: &Arc<NodeCtx>, pods: &Pods, p: Pod) {
    let Some(uid) = p.metadata.uid.clone() else {
        return;
    };
    if let Some((_, h, _)) = pods.lock().unwrap().get(&uid) {
        let _ = h.pod.send(Some(p));
        return;
    }
    let phase = p.status.as_ref().and_then(|s| s.phase.clone());
    let key = format!(
        "{}/{}",
        p.metadata.namespace.clone().unwrap_or_default(),
        p.metadata.name.clone().unwrap_or_default()
    );
    if p.metadata.deletion_timestamp.is_some()
        || matches!(phase.as_deref(), Some("Succeeded" | "Failed"))
    {
        // Not running here: a Pod being deleted is removed at once.
        if p.metadata.deletion_timestamp.is_some() {
            let api: Api<Pod> = Api::namespaced(
                ctx.client.clone(),
                p.metadata.namespace.as_deref().unwrap_or_default(),
            );
            let dp = DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            };
            let _ = api
                .delete(p.metadata.name.as_deref().unwrap_or_default(), &dp)
                .await;
        }
        return;
    }
    tracing::info!(pod = key, "starting pod");
    let (pod_tx, pod_rx) = watch::channel(Some(p));
    let (fault_tx, fault_rx) = watch::channel(Fault::None);
    let info = Arc::new(Mutex::new(pods::PodInfo::default()));
    let task = tokio::spawn(pods::run(ctx.clone(), pod_rx, fault_rx, info.clone()));
    pods.lock().unwrap().insert(
        uid,
        (
            key,
            PodHandle {
                pod: pod_tx,
                fault: fault_tx,
                info,
            },
            task,
        ),
    );
}

/// The control socket: one request a line, one answer a line.
///
/// - `fault <cut|isolate|freeze|heal> <namespace>/<pod>`
/// - `pid <namespace>/<pod> <container>`: the host PID of its PID 1
/// - `ip <namespace>/<pod>`
async fn control(ctx: Arc<NodeCtx>, pods: Pods) {
    let path = socket(&ctx.state);
    let _ = std::fs::remove_file(&path);
    let listener = match tokio::net::UnixListener::bind(&path) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, path = %path.display(), "control socket");
            return;
        }
    };
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let pods = pods.clone();
        tokio::spawn(async move {
            let (r, mut w) = stream.into_split();
            let mut lines = tokio::io::BufReader::new(r).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let answer = match answer(&pods, &line) {
                    Ok(a) => a,
                    Err(e) => format!("error: {e:#}"),
                };
                if w.write_all(format!("{answer}\n").as_bytes()).await.is_err() {
                    return;
                }
            }
        });
    }
}

fn answer(pods: &Pods, line: &str) -> anyhow::Result<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let find = |key: &str| -> anyhow::Result<(watch::Sender<Fault>, pods::PodInfo)> {
        let g = pods.lock().unwrap();
        let (_, h, _) = g
            .values()
            .find(|(k, _, t)| k == key && !t.is_finished())
            .with_context(|| format!("no pod {key} runs on this node"))?;
        Ok((h.fault.clone(), h.info.lock().unwrap().clone()))
    };
    match words.as_slice() {
        ["fault", kind, key] => {
            let f = match *kind {
                "cut" => Fault::Cut,
                "isolate" => Fault::Isolated,
                "freeze" => Fault::Frozen,
                "heal" | "thaw" => Fault::None,
                other => anyhow::bail!("unknown fault {other:?}: cut, isolate, freeze or heal"),
            };
            let (tx, _) = find(key)?;
            tx.send_replace(f);
            Ok("ok".into())
        }
        ["pid", key, container] => {
            let (_, info) = find(key)?;
            info.pids
                .get(*container)
                .map(|p| p.to_string())
                .with_context(|| format!("{key} has no running container {container}"))
        }
        ["ip", key] => {
            let (_, info) = find(key)?;
            info.ip.map(|i| i.to_string()).context("no address yet")
        }
        _ => anyhow::bail!("unknown request {line:?}"),
    }
}

/// Send one request to a node's control socket.
pub async fn request(state: &Path, line: &str) -> anyhow::Result<String> {
    let path = socket(state);
    let mut s = tokio::net::UnixStream::connect(&path)
        .await
        .with_context(|| format!("connecting to the node at {}", path.display()))?;
    s.write_all(format!("{line}\n").as_bytes()).await?;
    let mut lines = tokio::io::BufReader::new(s).lines();
    let a = lines.next_line().await?.unwrap_or_default();
    match a.strip_prefix("error: ") {
        Some(e) => anyhow::bail!("{e}"),
        None => Ok(a),
    }
}
