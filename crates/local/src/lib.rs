//! The local platform: `cnmysql local up|status|down|destroy`.

pub mod cluster_state;
pub mod control;
pub mod metrics;
pub mod process;
pub mod proxy;
pub mod state;
pub mod template;

use std::io::IsTerminal;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cnmysql_api::Flavor;
use cnmysql_core::status::{InstanceStatus, Role};
use cnmysql_instance::client::ControlClient;
use cnmysql_instance::config::Programs;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::control::{ControlPlane, Reporter};
use crate::state::{StateDir, live_pid};

/// Set in the environment of a detached control plane.
pub const DETACHED_ENV: &str = "CNMYSQL_LOCAL_DETACHED";

pub struct UpOptions {
    pub manifest: PathBuf,
    pub state_dir: Option<PathBuf>,
    pub port_base: Option<u16>,
    pub detach: bool,
    pub wait_timeout: Duration,
}

/// Resolve the state directory: the flag, or the default for the cluster in
/// the manifest.
pub fn resolve_state_dir(flag: Option<&Path>, cluster: Option<&str>) -> anyhow::Result<StateDir> {
    match (flag, cluster) {
        (Some(p), _) => Ok(StateDir::new(std::path::absolute(p)?)),
        (None, Some(c)) => Ok(StateDir::new(state::default_state_dir(c))),
        (None, None) => anyhow::bail!(
            "name the cluster (e.g. `cluster-example`) or its state directory (--state-dir DIR)"
        ),
    }
}

/// The state directory of a cluster that must already exist (every command
/// but `up`), with an error that says what was looked for and what to do.
pub fn existing_state_dir(flag: Option<&Path>, cluster: Option<&str>) -> anyhow::Result<StateDir> {
    let dir = resolve_state_dir(flag, cluster)?;
    if !dir.exists() {
        let what = match (flag, cluster) {
            (None, Some(c)) => format!("there is no local cluster {c}"),
            _ => "there is no local cluster there".to_string(),
        };
        anyhow::bail!(
            "{what}: {} has no cluster.yaml. Create one with `cnmysql local up -f <manifest>`; a cluster made with --state-dir is named with the same --state-dir",
            dir.root.display()
        );
    }
    Ok(dir)
}

pub async fn up(opts: UpOptions) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&opts.manifest)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", opts.manifest.display()))?;
    let cluster = cnmysql_api::parse_cluster(&text)?;
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
    let programs = Programs::discover(cluster.spec.mysql.flavor).map_err(|e| anyhow::anyhow!(e))?;
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
    let template = match cluster.spec.mysql.flavor {
        Flavor::Mariadb => Some(template::ensure_template(&programs)?),
        Flavor::Mysql => None,
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
    let result = ControlPlane::new(dir.clone(), cluster, ports, programs, template, reporter)?
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

/// The cluster as `local status` shows it.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    pub cluster: String,
    pub state_dir: PathBuf,
    pub running: bool,
    pub endpoints: std::collections::BTreeMap<String, String>,
    /// The Prometheus endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<String>,
    pub status: cnmysql_api::ClusterStatus,
    /// Why the recorded status could not be read (the instances are still
    /// shown as they answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_error: Option<String>,
    pub instances: Vec<InstanceReport>,
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceReport {
    pub name: String,
    pub reachable: bool,
    #[serde(flatten)]
    pub status: Option<InstanceStatus>,
}

pub async fn status_report(dir: &StateDir) -> anyhow::Result<StatusReport> {
    let cluster = dir.load_cluster()?;
    let (status, status_error) = match dir.read_status() {
        Ok(s) => (s, None),
        Err(e) => (Default::default(), Some(format!("{e:#}"))),
    };
    let ports = dir.load_ports()?;
    let client = ControlClient::new(dir.operator_material()?.client_config()?)
        .with_connect_timeout(Duration::from_millis(800));
    let mut instances = Vec::new();
    for (name, p) in &ports.instances {
        let st = tokio::time::timeout(
            Duration::from_secs(3),
            client.get_json::<InstanceStatus>(&ports.host, p.control, "/status"),
        )
        .await
        .ok()
        .and_then(Result::ok);
        instances.push(InstanceReport {
            name: name.clone(),
            reachable: st.is_some(),
            status: st,
        });
    }
    instances.sort_by_key(|i| {
        cnmysql_api::names::ordinal_of(cluster.metadata.name.as_deref().unwrap_or(""), &i.name)
    });
    Ok(StatusReport {
        cluster: cluster.metadata.name.unwrap_or_default(),
        state_dir: dir.root.clone(),
        running: live_pid(&dir.control_pid()).is_some(),
        endpoints: ports
            .services
            .iter()
            .map(|(k, v)| (k.clone(), format!("{}:{v}", ports.host)))
            .collect(),
        metrics: ports
            .metrics
            .map(|p| format!("http://{}:{p}/metrics", ports.host)),
        status,
        status_error,
        instances,
    })
}

fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(n - 1).collect::<String>())
    }
}

/// Semi-sync as a reader wants it: on a primary, how many acknowledgements
/// each commit waits for out of the replicas connected, or that it fell
/// back to asynchronous; on a replica, whether it acknowledges.
fn semi_sync_cell(s: &InstanceStatus) -> String {
    let Some(semi) = &s.semi_sync else {
        return "-".into();
    };
    match s.role {
        Role::Primary if semi.source_active => {
            format!("waits {} of {}", semi.wait_for_count.max(1), semi.clients)
        }
        Role::Primary if semi.source_enabled => "fell back to async".into(),
        Role::Replica if semi.replica_active => "acks".into(),
        Role::Replica if semi.replica_enabled => "enabled".into(),
        _ => "off".into(),
    }
}

/// A table for people; colours only on a terminal.
pub fn render_status(r: &StatusReport) -> String {
    let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let paint = |code: &str, s: String| {
        if color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s
        }
    };
    let mut out = String::new();
    let phase = r.status.phase.map(|p| p.as_str()).unwrap_or("Unknown");
    out.push_str(&format!(
        "Cluster:  {}  ({})\n",
        r.cluster,
        if r.running { "running" } else { "stopped" }
    ));
    out.push_str(&format!(
        "Phase:    {phase}{}\n",
        r.status
            .phase_reason
            .as_deref()
            .map(|x| format!(" — {x}"))
            .unwrap_or_default()
    ));
    if let Some(e) = &r.status_error {
        out.push_str(&paint(
            "31",
            format!("Status:   cannot be read ({e}); no topology changes until it can"),
        ));
        out.push('\n');
    }
    out.push_str(&format!(
        "Primary:  current {}  target {}\n",
        r.status.current_primary.as_deref().unwrap_or("-"),
        r.status.target_primary.as_deref().unwrap_or("-")
    ));
    let eps: Vec<String> = r
        .endpoints
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    out.push_str(&format!("Services: {}\n", eps.join("  ")));
    if let Some(m) = &r.metrics {
        out.push_str(&format!("Metrics:  {m}\n"));
    }
    out.push('\n');
    let header = [
        "INSTANCE",
        "ROLE",
        "READY",
        "READ-ONLY",
        "GTID",
        "LAG",
        "SEMI-SYNC",
        "PHASE",
        "MANAGER",
    ];
    let mut rows: Vec<[String; 9]> = Vec::new();
    for i in &r.instances {
        let row = match &i.status {
            None => [
                i.name.clone(),
                "-".into(),
                "no".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "unreachable".into(),
                "-".into(),
            ],
            Some(s) => [
                i.name.clone(),
                {
                    let role = match s.role {
                        Role::Primary => "primary",
                        Role::Replica => "replica",
                        Role::Unknown => "-",
                    };
                    // Markers a reader must not miss.
                    let mut marks = Vec::new();
                    if r.status.fenced_instances.contains(&i.name) {
                        marks.push("fenced");
                    }
                    if r.status.diverged_instances.contains(&i.name) {
                        marks.push("diverged");
                    }
                    if r.status.target_primary.as_deref() == Some(i.name.as_str())
                        && r.status.current_primary != r.status.target_primary
                    {
                        marks.push("target");
                    }
                    if marks.is_empty() {
                        role.to_string()
                    } else {
                        format!("{role} ({})", marks.join(", "))
                    }
                },
                if s.ready { "yes" } else { "no" }.into(),
                if s.read_only { "yes" } else { "no" }.into(),
                short(
                    if s.gtid_position.is_empty() {
                        "-"
                    } else {
                        &s.gtid_position
                    },
                    28,
                ),
                s.lag_seconds
                    .map(|l| format!("{l}s"))
                    .unwrap_or_else(|| "-".into()),
                semi_sync_cell(s),
                format!("{:?}", s.phase).to_lowercase(),
                short(&s.executable_hash, 12),
            ],
        };
        rows.push(row);
    }
    let widths: Vec<usize> = (0..9)
        .map(|c| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[String]| -> String {
        cells
            .iter()
            .enumerate()
            .map(|(c, s)| format!("{s:<w$}", w = widths[c]))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    out.push_str(&paint("1", line(&header.map(String::from))));
    out.push('\n');
    for row in rows {
        let mut l = line(&row);
        if color {
            l = if row[2] == "yes" {
                paint("32", l)
            } else {
                paint("31", l)
            };
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// A fresh snapshot of the cluster, as the control plane sees it.
pub async fn snapshot(dir: &StateDir) -> anyhow::Result<cnmysql_core::status::Snapshot> {
    let cluster = dir.load_cluster()?;
    let report = status_report(dir).await?;
    if let Some(e) = report.status_error {
        anyhow::bail!("the cluster status cannot be read: {e}");
    }
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let instances = report
        .instances
        .into_iter()
        .map(|i| cnmysql_core::status::Observed {
            ordinal: cnmysql_api::names::ordinal_of(&name, &i.name).unwrap_or(0),
            name: i.name,
            status: i.status,
            outdated: None,
        })
        .collect();
    Ok(cnmysql_core::status::Snapshot {
        cluster: name,
        spec: cluster.spec,
        status: report.status,
        instances,
        now_ms: jiff::Timestamp::now().as_millisecond(),
    })
}

/// Planned switchover: validate, set targetPrimary, and (with `wait`) wait
/// until the rw endpoint routes to the new primary.
pub async fn promote(dir: &StateDir, target: &str, wait: bool) -> anyhow::Result<()> {
    if live_pid(&dir.control_pid()).is_none() {
        anyhow::bail!("the cluster is not running; start it with `cnmysql local up`");
    }
    let s = snapshot(dir).await?;
    if let Err(why) = cnmysql_core::switchover::validate(&s, target) {
        dir.event(true, "SwitchoverRefused", Some(target), &why);
        anyhow::bail!("switchover to {target} refused: {why}");
    }
    let old = s.status.current_primary.clone().unwrap_or_default();
    let mut requested = false;
    dir.update_status(|st| {
        if st.current_primary.as_deref() == Some(old.as_str())
            && st.target_primary.as_deref() == Some(old.as_str())
        {
            st.target_primary = Some(target.to_string());
            st.target_primary_timestamp = Some(jiff::Timestamp::now().to_string());
            st.phase = Some(cnmysql_api::Phase::Switchover);
            st.phase_reason = Some(format!("switching over from {old} to {target}"));
            requested = true;
        }
    })?;
    if !requested {
        anyhow::bail!("the primary changed while the switchover was being requested; try again");
    }
    dir.event(
        false,
        "SwitchoverRequested",
        Some(target),
        &format!("switchover from {old} to {target} requested"),
    );
    if !wait {
        eprintln!("Switchover from {old} to {target} requested");
        return Ok(());
    }
    eprintln!("Switching over from {old} to {target}…");
    let began = Instant::now();
    let limit = Duration::from_secs(s.spec.max_switchover_delay.max(0) as u64 + 30);
    loop {
        let st = dir.read_status()?;
        // Done once the rw endpoint routes to the new primary.
        let routed = dir
            .routes()
            .get("rw")
            .is_some_and(|b| b.iter().any(|n| n == target));
        if st.current_primary.as_deref() == Some(target) && routed {
            eprintln!(
                "{target} is the primary ({:.2}s)",
                began.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if st.target_primary.as_deref() != Some(target) {
            let why = dir
                .events(20)
                .into_iter()
                .rev()
                .find(|e| e["reason"] == "SwitchoverBlocked")
                .and_then(|e| e["message"].as_str().map(str::to_string))
                .unwrap_or_else(|| "the switchover was cancelled".into());
            anyhow::bail!("{why}");
        }
        if began.elapsed() > limit {
            anyhow::bail!(
                "{target} did not become primary within {limit:?}; see `cnmysql local status`"
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `cnmysql local upgrade`: make the running control plane of `dir` run
/// this executable (it re-execs; no instance stops), then follow the
/// rollout of the instance managers until every instance runs it.
pub async fn upgrade(dir: &StateDir, wait: Option<Duration>) -> anyhow::Result<()> {
    let Some(pid) = live_pid(&dir.control_pid()) else {
        anyhow::bail!(
            "the cluster in {} is not running; `cnmysql local up` starts it with this executable",
            dir.root.display()
        );
    };
    let exe = std::env::current_exe()?;
    let hash = cnmysql_instance::manager::executable_hash();
    let short = |h: &str| h.chars().take(12).collect::<String>();
    let before = dir.read_status()?;
    if before.operator_executable_hash.as_deref() != Some(hash.as_str()) {
        cnmysql_tls::write_private(&dir.upgrade_request(), &exe.display().to_string(), false)?;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGHUP,
        )?;
        eprintln!(
            "Replacing the control plane (pid {pid}) with {} ({})…",
            exe.display(),
            short(&hash)
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while dir.read_status()?.operator_executable_hash.as_deref() != Some(hash.as_str()) {
            if Instant::now() >= deadline {
                anyhow::bail!(
                    "the control plane did not take the new executable within 30 s; see {} and `cnmysql local events`",
                    dir.control_log().display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!(
            "The control plane runs {}; instances kept running",
            short(&hash)
        );
    } else {
        eprintln!("The control plane already runs {}", short(&hash));
    }
    let Some(limit) = wait else { return Ok(()) };
    let began = Instant::now();
    let mut last = String::new();
    loop {
        let st = dir.read_status()?;
        let out_of_service =
            |n: &String| st.fenced_instances.contains(n) || st.diverged_instances.contains(n);
        let stale: Vec<&String> = st
            .executable_hash_by_instance
            .iter()
            .filter(|(n, h)| *h != &hash && !out_of_service(n))
            .map(|(n, _)| n)
            .collect();
        // The rollout's reasons say what happens; other phases are named.
        let reason = st.phase_reason.clone().unwrap_or_default();
        let line = match st.phase {
            Some(cnmysql_api::Phase::Upgrading | cnmysql_api::Phase::WaitingForUser) => reason,
            p => format!("{}: {reason}", p.map(|p| p.as_str()).unwrap_or("?")),
        };
        if line != last {
            eprintln!("{line}");
            last = line;
        }
        if stale.is_empty() && st.phase == Some(cnmysql_api::Phase::Healthy) {
            eprintln!(
                "Every instance runs {} ({:.1}s)",
                short(&hash),
                began.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if began.elapsed() > limit {
            anyhow::bail!(
                "the rollout did not finish within {limit:?} ({} still stale); it goes on in the background, see `cnmysql local status`",
                stale.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `cnmysql local restart-inplace`: the instance manager re-execs its own
/// binary; mysqld keeps running. Returns once the new image answers.
pub async fn restart_inplace(dir: &StateDir, instance: &str) -> anyhow::Result<()> {
    let cluster = dir.load_cluster()?;
    let name = cluster.metadata.name.clone().unwrap_or_default();
    cnmysql_core::status::check_member(&name, &cluster.spec, instance)
        .map_err(anyhow::Error::msg)?;
    let ports = dir.load_ports()?;
    let port = ports.instances[instance].control;
    let client =
        cnmysql_instance::client::ControlClient::new(dir.operator_material()?.client_config()?);
    let done = cnmysql_instance::upgrade::restart_in_place_and_wait(
        &client,
        &ports.host,
        port,
        Duration::from_secs(60),
    )
    .await
    .map_err(|e| anyhow::anyhow!("{instance}: {e}"))?;
    eprintln!("{}", done.describe(instance));
    Ok(())
}

/// Fence or unfence an instance.
pub fn fence(
    dir: &StateDir,
    instance: &str,
    on: bool,
) -> anyhow::Result<cnmysql_core::fencing::Fencing> {
    let cluster = dir.load_cluster()?;
    let name = cluster.metadata.name.clone().unwrap_or_default();
    cnmysql_core::status::check_member(&name, &cluster.spec, instance)
        .map_err(anyhow::Error::msg)?;
    let mut f = None;
    dir.update_status(|st| f = Some(cnmysql_core::fencing::request(st, instance, on)))?;
    let f = f.expect("update_status runs its closure");
    if f.changed {
        let (warning, reason, message) = f.event();
        dir.event(warning, reason, Some(instance), &message);
    }
    Ok(f)
}
