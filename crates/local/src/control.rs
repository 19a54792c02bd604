//! The local control plane: what the operator and the kubelet do on
//! Kubernetes, for one machine. It starts one instance manager process per
//! instance (restarting any that dies), polls their `/status` over mTLS,
//! derives routing and the cluster status with the pure core, and serves the
//! Service endpoints.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cnmysql_api::names::instance_name;
use cnmysql_api::{Cluster, ServiceRole};
use cnmysql_core::services::desired_routes;
use cnmysql_core::status::{InstancePhase, InstanceStatus, Observed, Snapshot};
use cnmysql_instance::client::ControlClient;
use cnmysql_instance::config::Programs;
use cnmysql_instance::manager::executable_hash;
use tokio::process::Command;
use tokio::sync::watch;

use crate::process::Handle;
use crate::proxy::{self, Endpoints, Handover, RouteTable};
use crate::state::{Ports, StateDir};

/// How progress is shown: readable lines on a terminal, JSON in a log file.
#[derive(Clone, Copy)]
pub struct Reporter {
    pub json: bool,
    pub color: bool,
}

impl Reporter {
    pub fn for_stdout() -> Reporter {
        let tty = std::io::stdout().is_terminal();
        Reporter {
            json: false,
            color: tty && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    pub fn say(&self, who: Option<&str>, msg: &str) {
        if self.json {
            let line = serde_json::json!({
                "timestamp": jiff::Timestamp::now().to_string(),
                "level": "INFO",
                "target": "cnmysql::local",
                "instance": who,
                "message": msg,
            });
            println!("{line}");
        } else if let Some(w) = who {
            if self.color {
                println!("\x1b[36m{w}\x1b[0m: {msg}");
            } else {
                println!("{w}: {msg}");
            }
        } else if self.color {
            println!("\x1b[1m{msg}\x1b[0m");
        } else {
            println!("{msg}");
        }
    }
}

/// The Services of a cluster with their roles, in a stable order.
pub fn services(cluster: &Cluster) -> Vec<(String, ServiceRole)> {
    let svc = &cluster.spec.managed.services;
    let mut out: Vec<(String, ServiceRole)> = ServiceRole::ALL
        .iter()
        .filter(|r| !svc.disabled_default_services.contains(r))
        .map(|r| (r.as_str().to_string(), *r))
        .collect();
    out.extend(
        svc.additional
            .iter()
            .map(|a| (a.name.clone(), a.selector_type)),
    );
    out
}

fn human_bytes(b: f64) -> String {
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else {
        format!("{:.0} MB", b / 1e6)
    }
}

struct ManagedProcess {
    name: String,
    child: Option<Handle>,
    restarts: u32,
    /// Being recreated by the rollout: started again from the operator's
    /// executable as soon as it has stopped.
    recreating: bool,
    next_start: Instant,
    /// Not restarted: a fenced-out former primary, until failover completes.
    held_down: bool,
    /// When this manager last answered `/status`.
    answered: bool,
}

impl ManagedProcess {
    /// Neither the manager nor its mysqld can be running any more.
    fn gone(&self, dir: &StateDir) -> bool {
        self.child.is_none() && dir.live_mysqld_pid(&self.name).is_none()
    }
}

pub struct ControlPlane {
    dir: StateDir,
    cluster: Cluster,
    ports: Ports,
    programs: Programs,
    template: Option<PathBuf>,
    reporter: Reporter,
    /// SHA-256 of this executable: the target of the rollout.
    hash: String,
    client: ControlClient,
}

impl ControlPlane {
    pub fn new(
        dir: StateDir,
        cluster: Cluster,
        ports: Ports,
        programs: Programs,
        template: Option<PathBuf>,
        reporter: Reporter,
    ) -> anyhow::Result<Self> {
        let client = ControlClient::new(dir.operator_material()?.client_config()?)
            .with_connect_timeout(Duration::from_millis(500));
        Ok(ControlPlane {
            dir,
            cluster,
            ports,
            programs,
            template,
            reporter,
            hash: executable_hash(),
            client,
        })
    }

    fn name(&self) -> String {
        self.cluster.metadata.name.clone().unwrap_or_default()
    }

    fn instance_names(&self) -> Vec<String> {
        (1..=self.cluster.spec.instances as u32)
            .map(|i| instance_name(&self.name(), i))
            .collect()
    }

    fn write_instance_configs(&self) -> anyhow::Result<()> {
        for i in 1..=self.cluster.spec.instances as u32 {
            let cfg = self.dir.build_instance_config(
                &self.cluster,
                &self.ports,
                i,
                &self.programs,
                self.template.clone(),
            )?;
            std::fs::create_dir_all(self.dir.instance_dir(&cfg.instance))?;
            cnmysql_tls::write_private(
                &self.dir.instance_config(&cfg.instance),
                &serde_json::to_string_pretty(&cfg)?,
                true,
            )?;
        }
        Ok(())
    }

    /// The instance's private copy of the manager executable.
    fn manager_exe(&self, name: &str) -> PathBuf {
        self.dir.instance_dir(name).join("bin").join("cnmysql")
    }

    fn spawn_manager(&self, name: &str) -> anyhow::Result<Handle> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.manager_log(name))?;
        let exe = self.manager_exe(name);
        if !exe.exists() {
            crate::process::install_copy(&exe)?;
        }
        let child = Command::new(&exe)
            .arg("instance")
            .arg("run")
            .arg("--config")
            .arg(self.dir.instance_config(name))
            .arg("--state-file")
            .arg(self.dir.status_file())
            .env_remove(crate::process::ADOPT_MANAGERS_ENV)
            .env_remove(proxy::ADOPT_ENDPOINTS_ENV)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()?;
        if let Some(pid) = child.id() {
            std::fs::write(self.dir.manager_pid(name), pid.to_string())?;
        }
        Ok(Handle::Spawned(child))
    }

    async fn poll(&self) -> Vec<Observed> {
        let futs = self
            .instance_names()
            .into_iter()
            .enumerate()
            .map(|(i, name)| {
                let port = self
                    .ports
                    .instances
                    .get(&name)
                    .map(|p| p.control)
                    .unwrap_or(0);
                let host = self.ports.host.clone();
                let client = self.client.clone();
                async move {
                    let status = tokio::time::timeout(
                        Duration::from_millis(1000),
                        client.get_json::<InstanceStatus>(&host, port, "/status"),
                    )
                    .await
                    .ok()
                    .and_then(Result::ok);
                    Observed {
                        name,
                        ordinal: i as u32 + 1,
                        status,
                        outdated: None,
                    }
                }
            });
        futures::future::join_all(futs).await
    }

    /// Run until SIGINT or SIGTERM; then stop every instance cleanly.
    /// `endpoints`: already serving (taken over from the previous image
    /// as early as possible by `up`), or started here.
    pub async fn run(self, endpoints: Option<Endpoints>) -> anyhow::Result<()> {
        let started = Instant::now();
        let name = self.name();
        self.write_instance_configs()?;
        let svc = services(&self.cluster);
        let Endpoints {
            handover,
            routes: routes_tx,
        } = match endpoints {
            Some(e) => e,
            None => Endpoints::start(&self.ports, RouteTable::new(), None).await?,
        };
        let (metrics_tx, metrics_rx) = watch::channel(None);
        if let Some(port) = self.ports.metrics {
            crate::metrics::serve(&self.ports.host, port, metrics_rx, self.dir.clone()).await?;
        }
        let operator_hash = self.hash.clone();
        self.dir.update_status(|s| {
            s.operator_executable_hash = Some(operator_hash.clone());
            s.instances = self.cluster.spec.instances;
        })?;
        self.reporter.say(
            None,
            &format!(
                "Starting cluster {name} ({} instances) in {}",
                self.cluster.spec.instances,
                self.dir.root.display()
            ),
        );

        // After `cnmysql local upgrade` re-executed this control plane: the
        // managers still running are its children, supervised as before.
        let adopted = crate::process::adopted_managers();
        let mut procs: Vec<ManagedProcess> = self
            .instance_names()
            .into_iter()
            .map(|n| ManagedProcess {
                child: adopted.get(&n).map(|pid| Handle::Adopted(*pid)),
                recreating: false,
                name: n,
                restarts: 0,
                next_start: Instant::now(),
                held_down: false,
                answered: false,
            })
            .collect();

        let mut sigterm =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
        let mut sighup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
        if !adopted.is_empty() {
            let text = format!(
                "the control plane now runs {}; instances kept running: {}",
                &operator_hash[..12.min(operator_hash.len())],
                adopted.keys().cloned().collect::<Vec<_>>().join(", ")
            );
            self.dir.event(false, "OperatorUpgraded", None, &text);
            self.reporter.say(None, &text);
        }
        let mut last_phase: BTreeMap<String, (InstancePhase, String)> = BTreeMap::new();
        let mut last_clone_report: BTreeMap<String, Instant> = BTreeMap::new();
        let mut cluster_phase = String::new();
        let mut announced = false;
        let mut memory = cnmysql_core::reconcile::Memory::default();
        let status_seen = crate::cluster_state::FileClusterState::new(self.dir.clone());
        let mut period = Duration::from_millis(200);
        let mut status_unreadable = false;
        loop {
            tokio::select! {
                _ = sigterm.recv() => break,
                _ = sigint.recv() => break,
                _ = sighup.recv() => {
                    // `cnmysql local upgrade`: replace this control plane
                    // with the new executable; the instances keep running.
                    let e = self.upgrade_control_plane(&procs, &handover).await;
                    tracing::error!(error = %e, "the control plane was not replaced");
                    self.dir.event(true, "OperatorUpgradeFailed", None, &format!("the control plane was not replaced: {e}"));
                    continue;
                }
                _ = tokio::time::sleep(period) => {}
                _ = cnmysql_instance::ClusterState::changed(&status_seen) => {}
            }
            // Keep one manager per instance running, like a kubelet.
            for p in procs.iter_mut() {
                if let Some(c) = p.child.as_mut()
                    && let Some(st) = c.try_wait()
                {
                    p.child = None;
                    // As a container dies with its PID 1: a manager that
                    // died (killed, crashed) takes its mysqld along, so no
                    // server runs unsupervised and a primary's death can be
                    // proven at once (failover need not wait for its lease).
                    // A manager's in-place re-exec is not an exit.
                    if let Some(pid) = self.dir.live_mysqld_pid(&p.name) {
                        self.reporter.say(
                            Some(&p.name),
                            &format!("the instance manager exited ({st}) leaving mysqld (pid {pid}) running; stopping it"),
                        );
                        stop_orphan(pid).await;
                    }
                    if std::mem::take(&mut p.recreating) {
                        // Recreated by the rollout: started again at once
                        // from the operator's executable.
                        match crate::process::install_copy(&self.manager_exe(&p.name)) {
                            Ok(()) => self.reporter.say(
                                Some(&p.name),
                                "stopped for the upgrade; starting it with the new instance manager",
                            ),
                            Err(e) => self.reporter.say(
                                Some(&p.name),
                                &format!("cannot install the new instance manager: {e}"),
                            ),
                        }
                        p.next_start = Instant::now();
                        continue;
                    }
                    p.restarts += 1;
                    let status = self.dir.read_status().unwrap_or_default();
                    if cnmysql_core::hold_down::keep_down(
                        &self.cluster.spec,
                        &status,
                        &p.name,
                        &memory,
                    ) {
                        // A dead primary is failed over, not restarted in
                        // place: it comes back as a replica afterwards.
                        p.held_down = true;
                        self.reporter.say(
                            Some(&p.name),
                            &format!("the primary's instance manager exited ({st}); failing over"),
                        );
                        self.dir.event(
                            true,
                            "PrimaryDown",
                            Some(&p.name),
                            &format!("the primary's instance manager exited ({st})"),
                        );
                    } else {
                        self.reporter.say(
                            Some(&p.name),
                            &format!("instance manager exited ({st}); restarting it"),
                        );
                    }
                    p.next_start =
                        Instant::now() + Duration::from_millis(500 * u64::from(p.restarts.min(10)));
                }
            }
            for p in procs.iter_mut() {
                if p.child.is_none() && !p.held_down && Instant::now() >= p.next_start {
                    match self.spawn_manager(&p.name) {
                        Ok(c) => p.child = Some(c),
                        Err(e) => self.reporter.say(
                            Some(&p.name),
                            &format!("cannot start the instance manager: {e}"),
                        ),
                    }
                }
            }
            let observed = self.poll().await;
            for o in &observed {
                if let Some(p) = procs.iter_mut().find(|p| p.name == o.name)
                    && let Some(st) = &o.status
                {
                    p.answered = true;
                    // Liveness: an isolated instance is restarted, as a
                    // kubelet would restart the container.
                    if st.isolated {
                        self.dir.event(true, "IsolationRestart", Some(&p.name), "liveness failed: isolated from the cluster state and every peer; restarting the instance");
                        self.kill_instance(p).await;
                    }
                }
            }
            let booting = started.elapsed() < Duration::from_secs(15)
                && procs.iter().any(|p| !p.answered && !p.held_down);
            let current = self.dir.read_status();
            match (&current, status_unreadable) {
                // Decisions need the recorded primary, fencing and
                // divergence: none are taken without them.
                (Err(e), false) => {
                    tracing::error!(error = %e, "the cluster status cannot be read; no topology decisions until it can");
                    self.dir.event(true, "StatusUnreadable", None, &format!("the cluster status cannot be read ({e}); failover, switchover and fencing wait until it can"));
                }
                (Ok(_), true) => tracing::info!("the cluster status can be read again"),
                _ => {}
            }
            status_unreadable = current.is_err();
            let snapshot = Snapshot {
                cluster: name.clone(),
                spec: self.cluster.spec.clone(),
                status: current.unwrap_or_default(),
                instances: observed.clone(),
                now_ms: jiff::Timestamp::now().as_millisecond(),
            };
            if !booting
                && !status_unreadable
                && let Err(e) = self.topology(&snapshot, &mut procs, &mut memory).await
            {
                tracing::warn!(error = %e, "topology step failed");
            }
            metrics_tx.send_replace(Some(snapshot));
            let status = self.dir.read_status().unwrap_or_default();
            // Poll fast while the primary is moving or failing.
            period = Duration::from_millis(
                if status.current_primary != status.target_primary
                    || status.primary_failing_since.is_some()
                {
                    50
                } else {
                    200
                },
            );
            let snapshot = Snapshot {
                cluster: name.clone(),
                spec: self.cluster.spec.clone(),
                status: status.clone(),
                instances: observed.clone(),
                now_ms: jiff::Timestamp::now().as_millisecond(),
            };
            let routes = desired_routes(&snapshot);
            let table = proxy::table(&routes, &svc);
            if *routes_tx.borrow() != table {
                tracing::info!(routes = ?table, "routing changed");
                routes_tx.send_replace(table.clone());
                let _ = cnmysql_tls::write_private(
                    &self.dir.routes_file(),
                    &serde_json::to_string_pretty(&table).unwrap_or_default(),
                    false,
                );
            }
            let report = cnmysql_core::reconcile::report(&snapshot, &memory);
            let summary = report.summary.clone();
            let change = cnmysql_core::reconcile::StatusChange::Report(report);
            let _ = self.dir.update_status(|s| {
                change.apply(s);
            });
            // Progress for the human watching.
            for o in &observed {
                let Some(st) = &o.status else { continue };
                let key = (st.phase, st.message.clone());
                if last_phase.get(&o.name) != Some(&key) {
                    let text = if st.message.is_empty() {
                        format!("{:?}", st.phase)
                    } else {
                        format!("{:?}: {}", st.phase, st.message)
                    };
                    self.reporter.say(Some(&o.name), &text);
                    last_phase.insert(o.name.clone(), key);
                }
                if let Some(c) = &st.clone {
                    let due = last_clone_report
                        .get(&o.name)
                        .is_none_or(|t| t.elapsed() >= Duration::from_secs(2));
                    // Reported once data has flowed for a second: an
                    // earlier rate (and ETA) is noise.
                    if due && c.bytes > 0 && c.elapsed_seconds >= 1.0 {
                        let of = c
                            .expected_bytes
                            .map(|e| format!(" of ~{}", human_bytes(e as f64)))
                            .unwrap_or_default();
                        let eta = c
                            .eta_seconds
                            .map(|e| format!(", ETA {}", human_duration(e)))
                            .unwrap_or_default();
                        self.reporter.say(
                            Some(&o.name),
                            &format!(
                                "{} from {}: {}{of} at {}/s{eta}",
                                c.stage,
                                c.source,
                                human_bytes(c.bytes as f64),
                                human_bytes(c.bytes_per_second)
                            ),
                        );
                        last_clone_report.insert(o.name.clone(), Instant::now());
                    }
                }
            }
            let phase_text = format!("{} ({})", summary.phase.as_str(), summary.reason);
            if phase_text != cluster_phase {
                self.reporter.say(None, &format!("cluster: {phase_text}"));
                cluster_phase = phase_text;
            }
            if !announced && summary.phase == cnmysql_api::Phase::Healthy {
                announced = true;
                self.announce(&status, started.elapsed());
            }
        }
        self.reporter
            .say(None, "Stopping: replicas first, then the primary");
        self.stop_all(procs).await;
        let _ = self.dir.update_status(|s| {
            s.phase = Some(cnmysql_api::Phase::Stopped);
            s.phase_reason = Some("stopped by the user; data kept".into());
            s.ready_instances = 0;
        });
        self.reporter.say(
            None,
            &format!(
                "Cluster {name} stopped; data kept in {}",
                self.dir.root.display()
            ),
        );
        Ok(())
    }

    /// The topology step of the core, carried out with processes and
    /// files: see `cnmysql_core::reconcile` for what is done when.
    async fn topology(
        &self,
        s: &Snapshot,
        procs: &mut [ManagedProcess],
        memory: &mut cnmysql_core::reconcile::Memory,
    ) -> anyhow::Result<()> {
        use cnmysql_core::reconcile::{Observation, step};
        let primary = s.status.current_primary.clone().unwrap_or_default();
        let lease = self.dir.read_lease().ok();
        // Locally the platform can prove a killed primary's processes gone.
        let primary_gone = procs
            .iter()
            .find(|p| p.name == primary)
            .is_some_and(|p| p.held_down && p.gone(&self.dir));
        let held: Vec<String> = procs
            .iter()
            .filter(|p| p.held_down)
            .map(|p| p.name.clone())
            .collect();
        let actions = step(
            &Observation {
                snapshot: s,
                lease: lease.as_ref(),
                primary_gone,
                held_down: &held,
                fence_early: false,
                primary_restarted_at_ms: None,
            },
            memory,
        );
        for a in actions {
            self.carry_out(a, procs).await?;
        }
        Ok(())
    }

    async fn carry_out(
        &self,
        action: cnmysql_core::reconcile::Action,
        procs: &mut [ManagedProcess],
    ) -> anyhow::Result<()> {
        use cnmysql_core::reconcile::Action;
        match action {
            Action::Event(e) => self.record(&e),
            Action::Status { change, then } => {
                let mut applied = false;
                self.dir.update_status(|st| applied = change.apply(st))?;
                if applied {
                    for e in &then {
                        self.record(e);
                    }
                }
            }
            Action::FenceOut(name) => {
                if let Some(p) = procs.iter_mut().find(|p| p.name == name) {
                    p.held_down = true;
                    self.kill_instance(p).await;
                }
            }
            Action::ReleaseLease { holder } => {
                // Only with proof that none of its processes can still write;
                // otherwise the lease runs out on its own.
                let gone = procs
                    .iter()
                    .find(|p| p.name == holder)
                    .is_some_and(|p| p.gone(&self.dir));
                if !gone {
                    tracing::warn!(instance = %holder, "not releasing the lease: its processes may still run");
                    return Ok(());
                }
                self.dir.update_lease(|l| {
                    Ok(if l.holder_identity.as_deref() == Some(&holder) {
                        l.release(&holder)
                    } else {
                        l.clone()
                    })
                })?;
            }
            Action::Restart(name) => {
                if let Some(p) = procs.iter_mut().find(|p| p.name == name && p.held_down) {
                    p.held_down = false;
                    p.next_start = Instant::now();
                    self.reporter.say(
                        Some(&p.name),
                        "restarting the former primary to rejoin as a replica",
                    );
                }
            }
            Action::UpgradeInPlace { instance, then } => {
                let port = self.ports.instances[&instance].control;
                match cnmysql_instance::upgrade::push(
                    &self.client,
                    &self.ports.host,
                    port,
                    &self.hash,
                )
                .await
                {
                    Ok(()) => self.record(&then),
                    Err(e) => self.record(&cnmysql_core::reconcile::Event {
                        warning: true,
                        reason: "UpgradeFailed",
                        instance: Some(instance.clone()),
                        message: format!(
                            "in-place upgrade of {instance} failed (retried later): {e}"
                        ),
                    }),
                }
            }
            Action::Recreate { instance, then, .. } => {
                if let Some(p) = procs.iter_mut().find(|p| p.name == instance) {
                    self.record(&then);
                    match p.child.as_ref() {
                        // Stopped cleanly (mysqld shut down, lease given
                        // up); the supervision loop starts it again.
                        Some(c) => {
                            p.recreating = true;
                            c.signal(nix::sys::signal::Signal::SIGTERM);
                        }
                        None => {
                            crate::process::install_copy(&self.manager_exe(&instance))?;
                            p.next_start = Instant::now();
                        }
                    }
                }
            }
            Action::SemiSync {
                instance,
                settings,
                then,
            } => {
                let body = serde_json::json!({"enabled": settings.enabled, "waitForCount": settings.wait_for_count, "timeoutMillis": settings.timeout_millis});
                let port = self.ports.instances[&instance].control;
                let (code, text) = self
                    .client
                    .post(
                        &self.ports.host,
                        port,
                        "/semisync",
                        &[("content-type", "application/json".into())],
                        body.to_string().into(),
                    )
                    .await?;
                if code == 200 {
                    self.record(&then);
                } else {
                    tracing::warn!(code, text, "semi-sync adjustment refused");
                }
            }
        }
        Ok(())
    }

    /// Replace this process with the executable `cnmysql local upgrade`
    /// named, handing on the running managers (still its children after
    /// the exec). Returns only when that failed.
    async fn upgrade_control_plane(
        &self,
        procs: &[ManagedProcess],
        handover: &Arc<Handover>,
    ) -> anyhow::Error {
        use std::os::unix::process::CommandExt;
        let request = self.dir.upgrade_request();
        let exe = match std::fs::read_to_string(&request) {
            Ok(t) => PathBuf::from(t.trim()),
            Err(e) => {
                return anyhow::anyhow!(
                    "SIGHUP without an upgrade request ({}: {e})",
                    request.display()
                );
            }
        };
        let _ = std::fs::remove_file(&request);
        let managers: Vec<String> = procs
            .iter()
            .filter_map(|p| Some(format!("{}={}", p.name, p.child.as_ref()?.id()?)))
            .collect();
        let (endpoints, stuck) = handover.park().await;
        self.reporter.say(
            None,
            &format!(
                "Upgrading the control plane to {}; instances keep running, {} client connections handed over{}",
                exe.display(),
                endpoints.connections.len(),
                if stuck > 0 {
                    format!(", {stuck} closed (their peers were not reading)")
                } else {
                    String::new()
                }
            ),
        );
        let err = std::process::Command::new(&exe)
            .args(std::env::args_os().skip(1))
            .env(crate::process::ADOPT_MANAGERS_ENV, managers.join(","))
            .env(
                proxy::ADOPT_ENDPOINTS_ENV,
                serde_json::to_string(&endpoints).unwrap_or_default(),
            )
            .exec();
        handover.unpark();
        anyhow::anyhow!("cannot execute {}: {err}", exe.display())
    }

    /// An event in `events.jsonl`, and a line for the human watching.
    fn record(&self, e: &cnmysql_core::reconcile::Event) {
        self.dir
            .event(e.warning, e.reason, e.instance.as_deref(), &e.message);
        self.reporter
            .say(None, &format!("{}: {}", e.reason, e.message));
    }

    /// Stop an instance's manager and mysqld at once (fencing a failed primary).
    async fn kill_instance(&self, p: &mut ManagedProcess) {
        // mysqld first. Killed first, the manager would leave mysqld's
        // process group orphaned, and the kernel continues an orphaned group
        // that has a stopped member (SIGHUP, SIGCONT): a frozen primary's
        // mysqld would run, writable, until its own kill (seen by the fault
        // suite as two writable instances).
        if let Some(pid) = self.dir.live_mysqld_pid(&p.name) {
            stop_orphan(pid).await;
        }
        if let Some(c) = p.child.as_mut() {
            c.kill().await;
        }
        p.child = None;
        if let Some(pid) = self.dir.live_mysqld_pid(&p.name) {
            stop_orphan(pid).await;
        }
        let _ = std::fs::remove_file(self.dir.manager_pid(&p.name));
    }

    fn announce(&self, status: &cnmysql_api::ClusterStatus, elapsed: Duration) {
        let name = self.name();
        let host = &self.ports.host;
        let mut text = format!(
            "Cluster {name} is ready: {} instances, primary {} ({:.1}s)\n",
            self.cluster.spec.instances,
            status.current_primary.as_deref().unwrap_or("?"),
            elapsed.as_secs_f64()
        );
        for (svc, role) in services(&self.cluster) {
            let what = match role {
                ServiceRole::Rw => "read-write, the primary",
                ServiceRole::Ro => "read-only, the replicas",
                ServiceRole::R => "read-only, any instance",
            };
            text.push_str(&format!(
                "  {svc:<4} {host}:{:<6} {what}\n",
                self.ports.services[&svc]
            ));
        }
        text.push_str(&format!(
            "Connect:  mariadb -h {host} -P {} -u app -p\"$(cat {})\"\n",
            self.ports.services["rw"],
            self.dir.secret_files().app_password.display()
        ));
        if let Some(port) = self.ports.metrics {
            text.push_str(&format!("Metrics:  http://{host}:{port}/metrics\n"));
        }
        let target = self.dir.cli_target(&name);
        text.push_str(&format!("Status:   cnmysql local status {target}\n"));
        text.push_str(&format!("Stop:     cnmysql local down {target}"));
        self.reporter.say(None, &text);
    }

    async fn stop_all(&self, mut procs: Vec<ManagedProcess>) {
        let primary = self.dir.read_status().ok().and_then(|s| s.current_primary);
        procs.sort_by_key(|p| Some(&p.name) == primary.as_ref());
        for p in procs.iter_mut() {
            let Some(child) = p.child.as_mut() else {
                continue;
            };
            child.signal(nix::sys::signal::Signal::SIGTERM);
            if child.wait_for(Duration::from_secs(90)).await {
                self.reporter.say(Some(&p.name), "stopped");
            } else {
                // Its server too: a manager killed mid-shutdown must not
                // leave a mysqld nobody supervises.
                self.reporter.say(
                    Some(&p.name),
                    "did not stop within 90s; killing it and its mysqld",
                );
                self.kill_instance(p).await;
            }
            let _ = std::fs::remove_file(self.dir.manager_pid(&p.name));
        }
    }
}

/// SIGKILL a mysqld left without its manager and wait (up to 10 s) for it
/// to be gone.
async fn stop_orphan(pid: i32) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    let deadline = Instant::now() + Duration::from_secs(10);
    while crate::state::pid_alive(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `42s`, `3m05s`, `2h10m`.
fn human_duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}
