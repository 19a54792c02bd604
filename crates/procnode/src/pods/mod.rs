//! One Pod's life on the node: an address, its volumes, init containers in
//! order, then its containers with probes and restarts, its status as a
//! kubelet reports it, and its end (SIGTERM, the grace period, SIGKILL,
//! then the Pod removed from the API).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Container, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

use crate::NodeCtx;
use crate::probes::{self, Timing};
use crate::shim::{MountSpec, RootSpec, Spec};
use crate::volumes::{self, Owner};

mod container;
mod status;
mod stopping;
mod supervision;

use container::*;
pub use container::{namespace_pids, signal_namespace};
use status::*;
use stopping::*;
use supervision::*;

/// A fault put on a Pod by a test (see `cnmysql-node fault`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Cut off: no traffic in or out, the node no longer reports or probes it.
    Cut,
    /// No traffic in or out, but the node still probes and reports it.
    Isolated,
    /// Processes stopped (SIGSTOP), the node no longer reports or probes it.
    Frozen,
}

impl Fault {
    fn silent(self) -> bool {
        matches!(self, Fault::Cut | Fault::Frozen)
    }
}

/// What the node knows of a running Pod, for faults and tests.
#[derive(Clone, Debug, Default)]
pub struct PodInfo {
    pub ip: Option<IpAddr>,
    pub uid: Option<u32>,
    /// Host PIDs of each container's PID 1.
    pub pids: BTreeMap<String, i32>,
}

/// The node's handle on one Pod's task.
pub struct PodHandle {
    pub pod: watch::Sender<Option<Pod>>,
    pub fault: watch::Sender<Fault>,
    pub info: Arc<Mutex<PodInfo>>,
}

/// Everything a container needs that is the same for all of a Pod's.
struct PodEnv {
    ctx: Arc<NodeCtx>,
    pod: Pod,
    dir: PathBuf,
    ip: IpAddr,
    volumes: volumes::Mounted,
    user: Option<u32>,
    shared: Arc<Shared>,
    fault: watch::Receiver<Fault>,
}

/// Run one Pod until it is deleted. Never fails: problems are reported in
/// the Pod's status and retried.
pub async fn run(
    ctx: Arc<NodeCtx>,
    mut pod_rx: watch::Receiver<Option<Pod>>,
    mut fault_rx: watch::Receiver<Fault>,
    info: Arc<Mutex<PodInfo>>,
) {
    let Some(pod) = pod_rx.borrow().clone() else {
        return;
    };
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let slot = match ctx.block.take() {
        Ok(k) => k,
        Err(e) => {
            tracing::error!(pod = %format!("{ns}/{name}"), error = %format!("{e:#}"), "no address for the pod");
            return;
        }
    };
    let ip = IpAddr::V4(ctx.block.pod_ip(slot));
    let spec = pod.spec.clone().unwrap_or_default();
    let run_as = spec
        .security_context
        .as_ref()
        .and_then(|s| s.run_as_user)
        .or_else(|| {
            spec.containers
                .first()
                .and_then(|c| c.security_context.as_ref())
                .and_then(|s| s.run_as_user)
        });
    let user = run_as.filter(|u| *u != 0).map(|_| ctx.block.uid(slot));
    {
        let mut i = info.lock().unwrap();
        i.ip = Some(ip);
        i.uid = Some(ctx.block.uid(slot));
    }
    let dir = ctx
        .state
        .join("pods")
        .join(format!("{ns}_{name}_{}", uid.get(..8).unwrap_or(&uid)));
    let shared = Arc::new(Shared {
        report: Mutex::new(Report {
            ip: ip.to_string(),
            start: now(),
            phase: "Pending",
            initialized: spec.init_containers.as_ref().is_none_or(|v| v.is_empty()),
            init: spec
                .init_containers
                .iter()
                .flatten()
                .map(CStatus::new)
                .collect(),
            containers: spec.containers.iter().map(CStatus::new).collect(),
            transitions: BTreeMap::new(),
            message: None,
        }),
        changed: Notify::new(),
        info: info.clone(),
    });
    shared.changed.notify_one();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let reporter = tokio::spawn(report_loop(
        api.clone(),
        name.clone(),
        shared.clone(),
        fault_rx.clone(),
    ));
    let fault_view = fault_rx.clone();
    let faults = tokio::spawn({
        let info = info.clone();
        let probes = ctx.block.probe_source();
        let shared = shared.clone();
        async move {
            let mut last = Fault::None;
            loop {
                let f = *fault_rx.borrow_and_update();
                apply_fault(&info, last, f, probes);
                if last.silent() && !f.silent() {
                    shared.changed.notify_one();
                }
                last = f;
                if fault_rx.changed().await.is_err() {
                    apply_fault(&info, last, Fault::None, probes);
                    return;
                }
            }
        }
    });

    let _ = std::fs::create_dir_all(&dir);
    life(
        &ctx,
        &pod,
        &dir,
        ip,
        user,
        &shared,
        pod_rx.clone(),
        fault_view,
    )
    .await;
    // A Pod whose containers finished stays until it is deleted.
    wait_stop(&mut pod_rx).await;
    faults.abort();
    {
        let i = info.lock().unwrap().clone();
        if let (Some(IpAddr::V4(v4)), Some(u)) = (i.ip, i.uid) {
            crate::net::heal(v4, u);
        }
        for pid in i.pids.values() {
            signal_namespace(*pid, nix::sys::signal::Signal::SIGCONT);
        }
    }
    reporter.abort();
    if pod_rx.borrow().is_some() {
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        if let Err(e) = api.delete(&name, &dp).await {
            tracing::debug!(pod = %format!("{ns}/{name}"), error = %e, "final delete");
        }
    }
    let _ = std::fs::remove_dir_all(dir.join("volumes"));
    ctx.block.release(slot);
    tracing::info!(pod = %format!("{ns}/{name}"), "pod removed");
}

fn apply_fault(info: &Arc<Mutex<PodInfo>>, from: Fault, to: Fault, probes: std::net::Ipv4Addr) {
    use nix::sys::signal::Signal;
    if from == to {
        return;
    }
    let i = info.lock().unwrap().clone();
    let (Some(IpAddr::V4(ip)), Some(uid)) = (i.ip, i.uid) else {
        return;
    };
    let cut = |f: Fault| matches!(f, Fault::Cut | Fault::Isolated);
    if cut(from) {
        crate::net::heal(ip, uid);
    }
    if from == Fault::Frozen {
        for pid in i.pids.values() {
            signal_namespace(*pid, Signal::SIGCONT);
        }
    }
    if cut(to) {
        let src = (to == Fault::Isolated).then_some(probes);
        if let Err(e) = crate::net::cut(ip, uid, src) {
            tracing::error!(error = %format!("{e:#}"), "cutting a pod's traffic");
        }
        let pids: Vec<i32> = i.pids.values().flat_map(|p| namespace_pids(*p)).collect();
        crate::net::kill_connections(&pids);
    }
    if to == Fault::Frozen {
        for pid in i.pids.values() {
            signal_namespace(*pid, Signal::SIGSTOP);
        }
    }
}

async fn report_loop(
    api: Api<Pod>,
    name: String,
    shared: Arc<Shared>,
    fault: watch::Receiver<Fault>,
) {
    loop {
        shared.changed.notified().await;
        tokio::time::sleep(Duration::from_millis(30)).await;
        if fault.borrow().silent() {
            continue;
        }
        let body = shared.status_json();
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            tracing::debug!(pod = name, error = %e, "status update failed; retrying");
            tokio::time::sleep(Duration::from_secs(1)).await;
            shared.changed.notify_one();
        }
    }
}

/// Prepare and run the Pod's containers; returns once they stopped for
/// the Pod's deletion, or finished for good.
#[allow(clippy::too_many_arguments)]
async fn life(
    ctx: &Arc<NodeCtx>,
    pod: &Pod,
    dir: &Path,
    ip: IpAddr,
    user: Option<u32>,
    shared: &Arc<Shared>,
    mut stop: watch::Receiver<Option<Pod>>,
    fault: watch::Receiver<Fault>,
) {
    let spec = pod.spec.clone().unwrap_or_default();
    let owner = Owner {
        uid: user,
        gid: user,
    };
    // Volumes, retried until they can be made (a Secret may come later).
    let mut delay = Duration::from_millis(200);
    let vols = loop {
        match volumes::prepare(&ctx.client, &ctx.state, dir, pod, &ip.to_string(), owner).await {
            Ok(v) => break v,
            Err(e) => {
                let msg = format!("{e:#}");
                tracing::warn!(pod = ?pod.metadata.name, error = msg, "volumes not ready");
                shared.update(|r| r.message = Some(format!("volumes: {msg}")));
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = wait_stop(&mut stop) => return,
                }
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    };
    shared.update(|r| r.message = None);
    let env = PodEnv {
        ctx: ctx.clone(),
        pod: pod.clone(),
        dir: dir.to_path_buf(),
        ip,
        volumes: vols,
        user,
        shared: shared.clone(),
        fault,
    };
    let policy = spec
        .restart_policy
        .clone()
        .unwrap_or_else(|| "Always".into());
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let code = supervise(&env, c, Slot::Init(i), "OnFailure", stop.clone()).await;
        if code != Some(0) {
            if code.is_some() {
                shared.update(|r| r.phase = "Failed");
            }
            return;
        }
    }
    shared.update(|r| {
        r.initialized = true;
        r.phase = "Running";
        for c in &mut r.containers {
            c.state = json!({"waiting": {"reason": "ContainerCreating"}});
        }
    });
    let all = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| supervise(&env, c, Slot::Main(i), &policy, stop.clone()));
    let codes = futures::future::join_all(all).await;
    if codes.iter().all(|c| c.is_some()) {
        let ok = codes.iter().all(|c| *c == Some(0));
        shared.update(|r| r.phase = if ok { "Succeeded" } else { "Failed" });
    }
}
