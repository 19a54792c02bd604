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
use crate::shim::{MountSpec, Spec};
use crate::volumes::{self, Owner};

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

fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_string()
}

#[derive(Clone, Debug)]
struct CStatus {
    name: String,
    image: String,
    ready: bool,
    started: bool,
    restarts: i32,
    state: Value,
    last: Value,
    running: bool,
    done: Option<i32>,
}

impl CStatus {
    fn new(c: &Container) -> CStatus {
        CStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            ready: false,
            started: false,
            restarts: 0,
            state: json!({"waiting": {"reason": "PodInitializing"}}),
            last: json!({}),
            running: false,
            done: None,
        }
    }

    fn json(&self, pid: Option<i32>) -> Value {
        json!({
            "name": self.name,
            "image": self.image,
            "imageID": format!("procnode://{}", self.image),
            "containerID": pid.map(|p| format!("procnode://{p}")),
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restarts,
            "state": self.state,
            "lastState": self.last,
        })
    }
}

struct Report {
    ip: String,
    start: String,
    phase: &'static str,
    initialized: bool,
    init: Vec<CStatus>,
    containers: Vec<CStatus>,
    transitions: BTreeMap<&'static str, (bool, String)>,
    message: Option<String>,
}

struct Shared {
    report: Mutex<Report>,
    changed: Notify,
    info: Arc<Mutex<PodInfo>>,
}

impl Shared {
    fn update(&self, f: impl FnOnce(&mut Report)) {
        f(&mut self.report.lock().unwrap());
        self.changed.notify_one();
    }

    fn status_json(&self) -> Value {
        let mut r = self.report.lock().unwrap();
        let pids = self.info.lock().unwrap().pids.clone();
        let all_ready = !r.containers.is_empty() && r.containers.iter().all(|c| c.ready);
        let mut conds = Vec::new();
        for (t, v) in [
            ("PodScheduled", true),
            ("Initialized", r.initialized),
            ("ContainersReady", all_ready),
            ("Ready", all_ready),
        ] {
            let at = match r.transitions.get(t) {
                Some((old, at)) if *old == v => at.clone(),
                _ => {
                    let at = now();
                    r.transitions.insert(t, (v, at.clone()));
                    at
                }
            };
            conds.push(json!({
                "type": t,
                "status": if v { "True" } else { "False" },
                "lastProbeTime": null,
                "lastTransitionTime": at,
            }));
        }
        json!({"status": {
            "phase": r.phase,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": r.ip,
            "podIPs": [{"ip": r.ip}],
            "startTime": r.start,
            "conditions": conds,
            "message": r.message,
            "initContainerStatuses": r.init.iter().map(|c| c.json(pids.get(&c.name).copied())).collect::<Vec<_>>(),
            "containerStatuses": r.containers.iter().map(|c| c.json(pids.get(&c.name).copied())).collect::<Vec<_>>(),
        }})
    }
}

/// Is the Pod being deleted (or gone)? With the grace period to give it.
fn stopping(p: &Option<Pod>) -> Option<Duration> {
    match p {
        None => Some(Duration::from_secs(2)),
        Some(p) if p.metadata.deletion_timestamp.is_some() => Some(Duration::from_secs(
            p.metadata
                .deletion_grace_period_seconds
                .or_else(|| {
                    p.spec
                        .as_ref()
                        .and_then(|s| s.termination_grace_period_seconds)
                })
                .unwrap_or(30)
                .max(0) as u64,
        )),
        _ => None,
    }
}

/// Like [`wait_stop`], but a Pod that is cut off or frozen does not learn
/// of its deletion until the fault is healed (its node would not).
async fn wait_stop_reachable(
    rx: &mut watch::Receiver<Option<Pod>>,
    fault: &mut watch::Receiver<Fault>,
) -> Duration {
    loop {
        if !fault.borrow_and_update().silent()
            && let Some(g) = stopping(&rx.borrow())
        {
            return g;
        }
        tokio::select! {
            r = rx.changed() => if r.is_err() && !fault.borrow().silent() {
                return Duration::from_secs(2);
            } else if r.is_err() {
                let _ = fault.changed().await;
            },
            r = fault.changed() => if r.is_err() {
                return wait_stop(rx).await;
            },
        }
    }
}

async fn wait_stop(rx: &mut watch::Receiver<Option<Pod>>) -> Duration {
    loop {
        if let Some(g) = stopping(&rx.borrow()) {
            return g;
        }
        if rx.changed().await.is_err() {
            return Duration::from_secs(2);
        }
    }
}

/// The processes in the PID namespace of `pid1`.
pub fn namespace_pids(pid1: i32) -> Vec<i32> {
    let Ok(ns) = std::fs::read_link(format!("/proc/{pid1}/ns/pid")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if std::fs::read_link(format!("/proc/{pid}/ns/pid"))
            .ok()
            .as_ref()
            == Some(&ns)
        {
            out.push(pid);
        }
    }
    out
}

/// Send `sig` to every process in the PID namespace of `pid1`.
pub fn signal_namespace(pid1: i32, sig: nix::sys::signal::Signal) {
    for pid in namespace_pids(pid1) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
    }
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

#[derive(Clone, Copy)]
enum Slot {
    Init(usize),
    Main(usize),
}

impl Shared {
    fn container(&self, slot: Slot, f: impl FnOnce(&mut CStatus)) {
        self.update(|r| match slot {
            Slot::Init(i) => f(&mut r.init[i]),
            Slot::Main(i) => f(&mut r.containers[i]),
        })
    }
}

/// How the container's command is started.
async fn shim_spec(env: &PodEnv, c: &Container) -> anyhow::Result<Spec> {
    let ctx = &env.ctx;
    let image = c.image.clone().unwrap_or_default();
    let bin = ctx.images.bin_dir(&ctx.state, &image)?;
    let vars = crate::env::build(
        &ctx.client,
        &env.pod,
        &env.ip.to_string(),
        c,
        (&ctx.api.0, ctx.api.1),
        bin.as_ref().and_then(|b| b.to_str()),
    )
    .await?;
    let map: BTreeMap<String, String> = vars.iter().cloned().collect();
    let mut argv: Vec<String> = c
        .command
        .iter()
        .flatten()
        .chain(c.args.iter().flatten())
        .map(|a| crate::env::expand(a, &map))
        .collect();
    anyhow::ensure!(
        c.command.as_ref().is_some_and(|v| !v.is_empty()),
        "container {}: the process node needs a command (it cannot read the image's entrypoint)",
        c.name
    );
    if let Some(host) = ctx.images.resolve(&image, &argv[0]) {
        argv[0] = host.display().to_string();
    }
    let mut mounts = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        let src = env
            .volumes
            .get(&m.name)
            .with_context(|| format!("volumeMount {}: no such volume", m.name))?;
        let src = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
            Some(sp) => {
                let p = src.join(sp);
                if !p.exists() {
                    std::fs::create_dir_all(&p)?;
                }
                p
            }
            None => src.clone(),
        };
        mounts.push(MountSpec {
            source: src,
            target: PathBuf::from(&m.mount_path),
            read_only: m.read_only.unwrap_or(false),
        });
    }
    Ok(Spec {
        argv,
        env: vars,
        cwd: c.working_dir.clone(),
        mounts,
        uid: env.user,
        gid: env.user,
        groups: Vec::new(),
        pid_file: env.dir.join(format!("{}.pid", c.name)),
    })
}

struct Running {
    child: tokio::process::Child,
    pid1: Option<i32>,
}

async fn start(env: &PodEnv, c: &Container) -> anyhow::Result<Running> {
    let spec = shim_spec(env, c).await?;
    let _ = std::fs::remove_file(&spec.pid_file);
    let spec_path = env.dir.join(format!("{}.json", c.name));
    std::fs::write(&spec_path, serde_json::to_vec(&spec)?)?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(env.dir.join(format!("{}.log", c.name)))?;
    let mut child = tokio::process::Command::new(&env.ctx.self_exe);
    child
        .arg("shim")
        .arg(&spec_path)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true);
    // If the node dies, its containers die with it.
    unsafe {
        child.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = child.spawn().context("starting the container shim")?;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut pid1 = None;
    while Instant::now() < deadline {
        if let Ok(t) = std::fs::read_to_string(&spec.pid_file)
            && let Ok(p) = t.trim().parse::<i32>()
        {
            pid1 = Some(p);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(Running { child, pid1 })
}

async fn terminate(run: &mut Running, grace: Duration) -> i32 {
    use nix::sys::signal::{Signal, kill};
    if let Some(pid) = run.child.id() {
        let _ = kill(nix::unistd::Pid::from_raw(pid as i32), Signal::SIGTERM);
    }
    let status = match tokio::time::timeout(grace, run.child.wait()).await {
        Ok(s) => s.ok(),
        Err(_) => {
            let _ = run.child.start_kill();
            run.child.wait().await.ok()
        }
    };
    exit_code(status)
}

fn exit_code(s: Option<std::process::ExitStatus>) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    match s {
        Some(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9)),
        None => 137,
    }
}

struct ProbeState {
    probe: k8s_openapi::api::core::v1::Probe,
    timing: Timing,
    next: Instant,
    ok: u32,
    bad: u32,
}

impl ProbeState {
    fn new(p: &Option<k8s_openapi::api::core::v1::Probe>, from: Instant) -> Option<ProbeState> {
        p.as_ref().map(|p| {
            let timing = Timing::of(p);
            ProbeState {
                probe: p.clone(),
                timing,
                next: from + timing.initial_delay,
                ok: 0,
                bad: 0,
            }
        })
    }

    /// Run the probe when due; Some(true) when it crossed its success
    /// threshold, Some(false) its failure threshold.
    async fn due(&mut self, c: &Container, env: &PodEnv, pid1: Option<i32>) -> Option<bool> {
        if Instant::now() < self.next {
            return None;
        }
        self.next = Instant::now() + self.timing.period;
        let src = IpAddr::V4(env.ctx.block.probe_source());
        if probes::check(&self.probe, c, env.ip, src, pid1).await {
            self.ok += 1;
            self.bad = 0;
            (self.ok >= self.timing.success_threshold).then_some(true)
        } else {
            self.bad += 1;
            self.ok = 0;
            (self.bad >= self.timing.failure_threshold).then_some(false)
        }
    }
}

/// Run a container, restarting it per `policy`, until the Pod stops (None)
/// or it finished for good (its exit code).
async fn supervise(
    env: &PodEnv,
    c: &Container,
    slot: Slot,
    policy: &str,
    mut stop: watch::Receiver<Option<Pod>>,
) -> Option<i32> {
    let sh = &env.shared;
    let mut fault = env.fault.clone();
    let mut backoff = Duration::from_secs(1);
    loop {
        // A kubelet starts no container in a Pod that is being deleted.
        if !env.fault.borrow().silent() && stopping(&stop.borrow()).is_some() {
            return None;
        }
        let mut run =
            match start(env, c).await {
                Ok(r) => r,
                Err(e) => {
                    let msg = format!("{e:#}");
                    sh.container(slot, |s| {
                    s.state = json!({"waiting": {"reason": "CreateContainerError", "message": msg}})
                });
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = wait_stop_reachable(&mut stop, &mut fault) => return None,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                    continue;
                }
            };
        if let Some(p) = run.pid1 {
            sh.info.lock().unwrap().pids.insert(c.name.clone(), p);
        }
        let started_at = now();
        let t0 = Instant::now();
        let is_main = matches!(slot, Slot::Main(_));
        let mut startup = if is_main {
            ProbeState::new(&c.startup_probe, t0)
        } else {
            None
        };
        let mut live = if is_main {
            ProbeState::new(&c.liveness_probe, t0)
        } else {
            None
        };
        let mut ready = if is_main {
            ProbeState::new(&c.readiness_probe, t0)
        } else {
            None
        };
        let mut started = startup.is_none();
        sh.container(slot, |s| {
            s.state = json!({"running": {"startedAt": started_at}});
            s.running = true;
            s.started = started && is_main;
            s.ready = started && ready.is_none() && is_main;
        });
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let (code, reason) = loop {
            tokio::select! {
                s = run.child.wait() => {
                    let code = exit_code(s.ok());
                    break (code, if code == 0 { "Completed" } else { "Error" });
                }
                grace = wait_stop_reachable(&mut stop, &mut fault) => {
                    let code = terminate(&mut run, grace).await;
                    sh.container(slot, |s| {
                        s.running = false;
                        s.ready = false;
                        s.state = json!({"terminated": {"exitCode": code, "reason": "Completed", "startedAt": started_at, "finishedAt": now()}});
                    });
                    return None;
                }
                _ = tick.tick() => {
                    if env.fault.borrow().silent() {
                        continue;
                    }
                    if !started {
                        match startup.as_mut().unwrap().due(c, env, run.pid1).await {
                            Some(true) => {
                                started = true;
                                let r = ready.is_none();
                                sh.container(slot, |s| { s.started = true; s.ready = r; });
                            }
                            Some(false) => {
                                let code = terminate(&mut run, grace_of(&env.pod)).await;
                                break (code, "StartupProbeFailed");
                            }
                            None => {}
                        }
                        continue;
                    }
                    if let Some(l) = live.as_mut() && l.due(c, env, run.pid1).await == Some(false) {
                        tracing::info!(pod = ?env.pod.metadata.name, container = c.name, "liveness probe failed; restarting");
                        let code = terminate(&mut run, grace_of(&env.pod)).await;
                        break (code, "LivenessProbeFailed");
                    }
                    if let Some(r) = ready.as_mut()
                        && let Some(v) = r.due(c, env, run.pid1).await
                    {
                        sh.container(slot, |s| if s.ready != v { s.ready = v; });
                    }
                }
            }
        };
        let finished = now();
        let restart = match policy {
            "Always" => true,
            "OnFailure" => code != 0,
            _ => false,
        };
        sh.container(slot, |s| {
            s.running = false;
            s.ready = false;
            s.started = false;
            let term = json!({"terminated": {"exitCode": code, "reason": reason, "startedAt": started_at, "finishedAt": finished}});
            if restart {
                s.last = term;
                s.restarts += 1;
                s.state = json!({"waiting": {"reason": "CrashLoopBackOff"}});
            } else {
                s.state = term;
                s.done = Some(code);
            }
        });
        if !restart {
            return Some(code);
        }
        if t0.elapsed() > Duration::from_secs(60) {
            backoff = Duration::from_secs(1);
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = wait_stop_reachable(&mut stop, &mut fault) => return None,
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

fn grace_of(p: &Pod) -> Duration {
    Duration::from_secs(
        p.spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30)
            .max(0) as u64,
    )
}
