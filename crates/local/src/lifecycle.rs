//! A local cluster's life: `up` (in the foreground, or detached with its
//! log in the state directory), `down`, `destroy`, and where its state
//! directory is.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::control::{ControlPlane, Reporter};
use crate::lookup::resolve_state_dir;
use crate::process;
use crate::state::{self, StateDir, live_pid};

/// Set in the environment of a detached control plane.
pub const DETACHED_ENV: &str = "CNMYSQL_LOCAL_DETACHED";

pub struct UpOptions {
    pub manifest: PathBuf,
    pub state_dir: Option<PathBuf>,
    pub port_base: Option<u16>,
    pub detach: bool,
    pub wait_timeout: Duration,
}

pub async fn up(opts: UpOptions) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&opts.manifest)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", opts.manifest.display()))?;
    let manifest = cnmysql_api::parse_manifest(&text)?;
    let cluster = manifest.cluster.clone();
    if let Some(b) = cluster
        .spec
        .recovery()
        .and_then(|r| r.source.backup.as_ref())
    {
        anyhow::bail!(
            "{}: spec.bootstrap.recovery.source.backup ({}) names a Backup object, which only Kubernetes has; locally, name the store in source.objectStore (with serverName) and the backup by source.backupId (`cnmysql local backups` lists them)",
            opts.manifest.display(),
            b.name
        );
    }
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let dir = resolve_state_dir(opts.state_dir.as_deref(), Some(&name))?;
    // Re-executed by `cnmysql local upgrade`: this process is the running
    // control plane, and the managers it hands on keep running; the
    // endpoints' clients are served again first of all.
    let adopted = process::adopted_managers();
    let endpoints = crate::proxy::Endpoints::resume(&dir).await?;
    if let Some(pid) = live_pid(&dir.control_pid())
        && pid != std::process::id() as i32
    {
        anyhow::bail!(
            "cluster {name} is already running (control plane pid {pid}); see `cnmysql local status {}`",
            dir.cli_target(&name)
        );
    }
    if dir.exists() {
        for n in dir
            .load_ports()
            .map(|p| p.instances.into_keys().collect::<Vec<_>>())
            .unwrap_or_default()
        {
            if let Some(pid) = live_pid(&dir.manager_pid(&n))
                && !adopted.contains_key(&n)
            {
                anyhow::bail!(
                    "the instance manager of {n} from an earlier run is still running (pid {pid}); run `cnmysql local down {}` first",
                    dir.cli_target(&name)
                );
            }
        }
    }
    // The image instances are made from must be there before anything
    // starts (its programs found, its flavour the Cluster's).
    {
        let mut images = crate::definition::Images::new(cluster.spec.mysql.flavor);
        let declared = crate::definition::declared(&cluster, &manifest.catalogs, &mut images);
        if let Some(e) = declared.error {
            anyhow::bail!(e);
        }
        let status = dir.read_status().unwrap_or_default();
        if let Some(image) =
            cnmysql_core::upgrade::image::instance_image(&status, declared.image.as_deref())
        {
            images.programs(&image)?;
        }
    }
    // A first start that fails before any instance ran leaves nothing that
    // would block the retry its error suggests (saved ports above all).
    let first_start = (!dir.exists()).then(|| dir.root.exists());
    let ports = match prepare_start(&dir, &cluster, &text, &opts, &adopted) {
        Ok(p) => p,
        Err(e) => {
            if let Some(root_existed) = first_start {
                forget_failed_first_start(&dir, root_existed);
            }
            return Err(e);
        }
    };
    if opts.detach && std::env::var_os(DETACHED_ENV).is_none() {
        return detach(&opts, &dir);
    }
    std::fs::write(dir.control_pid(), std::process::id().to_string())
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", dir.control_pid().display()))?;
    let reporter = if std::env::var_os(DETACHED_ENV).is_some() {
        Reporter {
            json: true,
            color: false,
        }
    } else {
        Reporter::for_stdout()
    };
    let result = ControlPlane::new(dir.clone(), manifest, ports, reporter)?
        .run(endpoints)
        .await;
    let _ = std::fs::remove_file(dir.control_pid());
    if result.is_err()
        && let Some(root_existed) = first_start
        && !dir.any_instance_data()
    {
        forget_failed_first_start(&dir, root_existed);
    }
    result
}

/// Remove what a failed first start made: the whole state directory if this
/// start created it, else only the files that mark a cluster (its manifest,
/// saved ports, status), never anything else in a directory given with
/// --state-dir.
fn forget_failed_first_start(dir: &StateDir, root_existed: bool) {
    if root_existed {
        for f in [dir.manifest(), dir.ports_file(), dir.status_file()] {
            let _ = std::fs::remove_file(f);
        }
    } else {
        let _ = std::fs::remove_dir_all(&dir.root);
    }
}

/// Write the cluster's files and check its ports, before anything runs.
fn prepare_start(
    dir: &StateDir,
    cluster: &cnmysql_api::Cluster,
    text: &str,
    opts: &UpOptions,
    adopted: &std::collections::BTreeMap<String, u32>,
) -> anyhow::Result<state::Ports> {
    let ports = dir.prepare(cluster, text, opts.port_base)?;
    // After an upgrade's exec the endpoints' sockets are this process's own.
    let handed_over = crate::proxy::inherited()
        .map(|i| i.listeners)
        .unwrap_or_default();
    for (svc, port) in &ports.services {
        if !handed_over.contains_key(svc) && !state::port_free(&ports.host, *port) {
            anyhow::bail!(
                "port {port} for the {svc} endpoint is in use; choose other ports with --port-base (0 picks free ones) or stop what uses it"
            );
        }
    }
    if adopted.is_empty() {
        dir.update_status(|s| {
            s.phase = None;
            s.phase_reason = Some("starting the instances".into());
            s.ready_instances = 0;
        })?;
    }
    Ok(ports)
}

/// Start the control plane in its own session, wait until the cluster is
/// ready, print how to reach it, and return.
fn detach(opts: &UpOptions, dir: &StateDir) -> anyhow::Result<()> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.control_log())?;
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    cmd.arg("local")
        .arg("up")
        .arg("-f")
        .arg(std::path::absolute(&opts.manifest)?)
        .arg("--state-dir")
        .arg(&dir.root)
        .env(DETACHED_ENV, "1")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    if let Some(b) = opts.port_base {
        cmd.arg("--port-base").arg(b.to_string());
    }
    // SAFETY: setsid is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let deadline = Instant::now() + opts.wait_timeout;
    let mut last = String::new();
    loop {
        if let Some(st) = child.try_wait()? {
            let tail = std::fs::read_to_string(dir.control_log()).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(15).collect();
            anyhow::bail!(
                "the control plane exited ({st}) before the cluster was ready; last lines of {}:\n{}",
                dir.control_log().display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        if let Ok(s) = dir.read_status() {
            let now = format!(
                "{} {}",
                s.phase.map(|p| p.as_str()).unwrap_or("Starting"),
                s.phase_reason.unwrap_or_default()
            );
            if now != last {
                eprintln!("{now}");
                last = now;
            }
            if s.phase == Some(cnmysql_api::Phase::Healthy) {
                break;
            }
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "the cluster was not ready within {:?}; it keeps starting in the background (see {} and `cnmysql local status`)",
                opts.wait_timeout,
                dir.control_log().display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let ports = dir.load_ports()?;
    println!(
        "Cluster is ready (control plane pid {}, log {})",
        child.id(),
        dir.control_log().display()
    );
    for (svc, port) in &ports.services {
        println!("  {svc:<4} {}:{port}", ports.host);
    }
    println!(
        "Connect:  mariadb -h {} -P {} -u app -p\"$(cat {})\"",
        ports.host,
        ports.services["rw"],
        dir.secret_files().app_password.display()
    );
    if let Some(port) = ports.metrics {
        println!("Metrics:  http://{}:{port}/metrics", ports.host);
    }
    let name = dir
        .load_cluster()
        .ok()
        .and_then(|c| c.metadata.name)
        .unwrap_or_default();
    println!("Stop:     cnmysql local down {}", dir.cli_target(&name));
    Ok(())
}

fn wait_gone(pid: i32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if !state::pid_alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Stop the control plane and every instance; keep the data.
pub fn down(dir: &StateDir) -> anyhow::Result<()> {
    if !dir.exists() {
        anyhow::bail!("no local cluster in {}", dir.root.display());
    }
    if let Some(pid) = live_pid(&dir.control_pid()) {
        eprintln!("Stopping the control plane (pid {pid}) and its instances…");
        kill(Pid::from_raw(pid), Signal::SIGTERM)?;
        if !wait_gone(pid, Duration::from_secs(300)) {
            anyhow::bail!("the control plane (pid {pid}) did not stop within 300s");
        }
    }
    // Managers left without a control plane (it was killed): stop them too.
    let names: Vec<String> = dir
        .load_ports()
        .map(|p| p.instances.into_keys().collect())
        .unwrap_or_default();
    for n in &names {
        if let Some(pid) = live_pid(&dir.manager_pid(n)) {
            eprintln!("Stopping {n} (pid {pid})…");
            kill(Pid::from_raw(pid), Signal::SIGTERM)?;
            if !wait_gone(pid, Duration::from_secs(120)) {
                kill(Pid::from_raw(pid), Signal::SIGKILL)?;
            }
        }
        let _ = std::fs::remove_file(dir.manager_pid(n));
        // A server whose manager is gone (killed before it could stop it)
        // is stopped here: nothing else would, and destroy removes its data.
        if let Some(pid) = dir.live_mysqld_pid(n) {
            eprintln!("Stopping {n}'s mysqld (pid {pid}), left without its manager…");
            kill(Pid::from_raw(pid), Signal::SIGTERM)?;
            if !wait_gone(pid, Duration::from_secs(60)) {
                kill(Pid::from_raw(pid), Signal::SIGKILL)?;
            }
        }
    }
    let _ = std::fs::remove_file(dir.control_pid());
    eprintln!("Stopped; data kept in {}", dir.root.display());
    Ok(())
}

/// Stop everything and delete the state directory.
pub fn destroy(dir: &StateDir) -> anyhow::Result<()> {
    if dir.exists() {
        down(dir)?;
    }
    if dir.root.exists() {
        std::fs::remove_dir_all(&dir.root)?;
        eprintln!("Removed {}", dir.root.display());
    }
    Ok(())
}
