//! One container's process: its shim spec (namespaces, mounts, user,
//! environment), start, termination, exit code, and signalling every
//! process of its PID namespace.

use super::*;

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

/// How the container's command is started.
pub(super) async fn shim_spec(env: &PodEnv, c: &Container) -> anyhow::Result<Spec> {
    let ctx = &env.ctx;
    let image = c.image.clone().unwrap_or_default();
    // A server image is the container's whole root filesystem; any other
    // image stands for host files.
    let root = ctx.images.root_filesystem(&image);
    let bin = match root {
        Some(_) => None,
        None => ctx.images.bin_dir(&ctx.state, &image)?,
    };
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
    if root.is_none()
        && let Some(host) = ctx.images.resolve(&image, &argv[0])
    {
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
    // As the kubelet does: a hosts file naming localhost and the Pod, for
    // a container with its own root filesystem (one without it keeps the
    // host's).
    if root.is_some() && !mounts.iter().any(|m| m.target == Path::new("/etc/hosts")) {
        mounts.push(MountSpec {
            source: hosts_file(env)?,
            target: PathBuf::from("/etc/hosts"),
            read_only: false,
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
        root: root.map(|image| RootSpec {
            image,
            layer: env.dir.join(format!("{}.layer", c.name)),
        }),
    })
}

/// The Pod's hosts file (`<pod dir>/etc-hosts`), written on first use.
fn hosts_file(env: &PodEnv) -> anyhow::Result<PathBuf> {
    let path = env.dir.join("etc-hosts");
    let spec = env.pod.spec.as_ref();
    let name = spec
        .and_then(|s| s.hostname.clone())
        .or_else(|| env.pod.metadata.name.clone())
        .unwrap_or_default();
    let fqdn = match spec.and_then(|s| s.subdomain.as_deref()) {
        Some(sub) => format!(
            " {name}.{sub}.{}.svc.cluster.local",
            env.pod.metadata.namespace.as_deref().unwrap_or("default")
        ),
        None => String::new(),
    };
    let text = format!(
        "# Kubernetes-managed hosts file (the process node).\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n{}\t{name}{fqdn}\n",
        env.ip
    );
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

pub(super) struct Running {
    pub(super) child: tokio::process::Child,
    pub(super) pid1: Option<i32>,
}

pub(super) async fn start(env: &PodEnv, c: &Container) -> anyhow::Result<Running> {
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

pub(super) async fn terminate(run: &mut Running, grace: Duration) -> i32 {
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

pub(super) fn exit_code(s: Option<std::process::ExitStatus>) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    match s {
        Some(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9)),
        None => 137,
    }
}
