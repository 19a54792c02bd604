//! The local control plane: what the operator and the kubelet do on
//! Kubernetes, for one machine. Its loop supervises one instance manager
//! process per instance (`supervisor.rs`), polls their `/status` over mTLS,
//! runs the topology engine's pass with this machine as its platform
//! (`platform.rs`), routes the Service endpoints (`proxy.rs`), serves
//! metrics and tells the human watching what happens (`progress.rs`).

use std::time::{Duration, Instant};

use cnmysql_api::names::{OPERATOR_IDENTITY, instance_name};
use cnmysql_api::{Cluster, ServiceRole};
use cnmysql_control::client::ControlClient;
use cnmysql_control::executable_hash;
use cnmysql_core::cadence::Cadence;
use cnmysql_core::memory::Memory;
use cnmysql_core::status::{Observed, Snapshot};
use cnmysql_engine::poller::{self, Target};
use tokio::sync::watch;
use tracing::Instrument;

use crate::definition::Definitions;
use crate::platform::LocalPlatform;
use crate::progress::Progress;
pub use crate::progress::Reporter;
use crate::proxy::{Endpoints, RouteTable};
use crate::state::{Ports, StateDir};
use crate::supervisor::Supervisor;
use crate::wakes::{Wake, Wakes};

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

pub struct ControlPlane {
    dir: StateDir,
    cluster: Cluster,
    ports: Ports,
    /// Each instance's configuration, and what it is made from.
    defs: Definitions,
    /// When the manifest was last read (`cnmysql local apply` rewrites it).
    manifest_read: Option<std::time::SystemTime>,
    reporter: Reporter,
    /// SHA-256 of this executable: the target of the rollout.
    hash: String,
    client: ControlClient,
    /// When the operator's certificate expires (Unix s), for the metrics.
    operator_cert_expiry: Option<i64>,
}

/// What the control plane's loop keeps between its turns.
struct Running {
    started: Instant,
    handover: std::sync::Arc<crate::proxy::Handover>,
    routing: crate::routing::Routing,
    metrics: watch::Sender<Option<Snapshot>>,
    supervisor: Supervisor,
    progress: Progress,
    /// Whether the user was told the cluster is healthy.
    announced: bool,
    /// The core's memory of this cluster.
    memory: Memory,
    /// The instances the last successful pass said to keep running.
    keep: Option<cnmysql_core::running::Running>,
    status_seen: crate::cluster_state::FileClusterState,
    period: Duration,
    status_unreadable: bool,
    certificates_checked: Option<Instant>,
}

impl ControlPlane {
    pub fn new(
        dir: StateDir,
        manifest: cnmysql_api::Manifest,
        ports: Ports,
        reporter: Reporter,
    ) -> anyhow::Result<Self> {
        let client = ControlClient::new(dir.operator_material()?.client_config()?)
            .with_connect_timeout(Duration::from_millis(500));
        let manifest_read = std::fs::metadata(dir.manifest())
            .and_then(|m| m.modified())
            .ok();
        Ok(ControlPlane {
            cluster: manifest.cluster.clone(),
            defs: Definitions::new(dir.clone(), manifest, ports.clone()),
            manifest_read,
            dir,
            ports,
            reporter,
            hash: executable_hash(),
            client,
            operator_cert_expiry: None,
        })
    }

    fn name(&self) -> String {
        self.cluster.metadata.name.clone().unwrap_or_default()
    }

    /// Issue again the certificates that are due; a new one of the
    /// operator's own is taken into use at once. Every few seconds.
    fn renew_certificates(
        &mut self,
        last: &mut Option<Instant>,
        status: &cnmysql_api::ClusterStatus,
    ) {
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(5)) {
            return;
        }
        *last = Some(Instant::now());
        let lifetime = self.cluster.spec.secrets.certificate_lifetime();
        let renewed = match crate::pki::ensure(
            &self.dir.pki(),
            &self.name(),
            &self.instance_names(),
            lifetime,
            &crate::pki::loaded(status),
        ) {
            Ok((r, waits)) => {
                for w in waits {
                    tracing::debug!(wait = w, "a certificate step waits");
                }
                r
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "certificates cannot be issued");
                return;
            }
        };
        self.operator_cert_expiry = std::fs::read_to_string(self.dir.operator_tls().cert)
            .ok()
            .and_then(|pem| cnmysql_tls::validity_of(&pem))
            .map(|(_, until)| until);
        for (who, why) in &renewed {
            tracing::info!(holder = who, reason = why, "new certificate files");
            let instance = (who != OPERATOR_IDENTITY).then_some(who.as_str());
            self.dir.event(
                false,
                "CertificateRenewed",
                instance,
                &format!("new certificate files for {who}: {why}"),
            );
        }
        if renewed.iter().any(|(w, _)| w == OPERATOR_IDENTITY) {
            match self
                .dir
                .operator_material()
                .and_then(|m| Ok(m.client_config()?))
            {
                Ok(tls) => {
                    self.client =
                        ControlClient::new(tls).with_connect_timeout(Duration::from_millis(500))
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "the operator's new certificate cannot be used")
                }
            }
        }
    }

    fn instance_names(&self) -> Vec<String> {
        (1..=self.cluster.spec.instances as u32)
            .map(|i| instance_name(&self.name(), i))
            .collect()
    }

    /// Take up a manifest `cnmysql local apply` wrote: what may change on
    /// a running cluster applies from this pass on (the rollout recreates
    /// the instances whose definition it changed).
    fn reload_manifest(&mut self) {
        let modified = std::fs::metadata(self.dir.manifest())
            .and_then(|m| m.modified())
            .ok();
        if modified == self.manifest_read {
            return;
        }
        self.manifest_read = modified;
        let parsed = std::fs::read_to_string(self.dir.manifest())
            .map_err(anyhow::Error::from)
            .and_then(|t| cnmysql_api::parse_manifest(&t).map_err(anyhow::Error::from));
        let m = match parsed {
            Ok(m) => m,
            Err(e) => {
                tracing::error!(error = %e, "the manifest cannot be read; the cluster keeps its last one");
                return;
            }
        };
        match crate::definition::check_change(&self.cluster, &m.cluster) {
            Ok(changed)
                if changed.is_empty()
                    && crate::definition::same_catalogs(&m.catalogs, &self.defs.catalogs) => {}
            Ok(changed) => {
                let text = if changed.is_empty() {
                    "image catalogs".to_string()
                } else {
                    changed.join("; ")
                };
                self.dir.event(false, "ClusterConfigured", None, &text);
                self.reporter.say(None, &format!("Configured: {text}"));
                self.cluster = m.cluster.clone();
                self.defs.cluster = m.cluster;
                self.defs.catalogs = m.catalogs;
            }
            Err(e) => {
                tracing::error!(error = %e, "manifest change refused");
                self.dir.event(true, "ConfigurationRefused", None, &e);
            }
        }
    }

    async fn poll(&mut self, status: &cnmysql_api::ClusterStatus) -> Vec<Observed> {
        let names = self.instance_names();
        let outdated: Vec<Option<String>> = names
            .iter()
            .map(|n| self.defs.outdated(n, status))
            .collect();
        let targets = names
            .into_iter()
            .zip(outdated)
            .enumerate()
            .map(|(i, (name, outdated))| Target {
                address: self
                    .ports
                    .instances
                    .get(&name)
                    .map(|p| (self.client.clone(), self.ports.host.clone(), p.control)),
                ordinal: i as u32 + 1,
                name,
                outdated,
            })
            .collect();
        poller::poll(targets).await
    }

    /// Run until SIGINT or SIGTERM; then stop every instance cleanly.
    /// `endpoints`: already serving (taken over from the previous image
    /// as early as possible by `up`), or started here.
    pub async fn run(self, endpoints: Option<Endpoints>) -> anyhow::Result<()> {
        // The span goes with the future, across every await (an entered
        // guard held across one would lend it to whatever task the
        // executor runs meanwhile).
        let span = tracing::info_span!("cluster", cluster = %self.name());
        self.serve(endpoints).instrument(span).await
    }

    async fn serve(mut self, endpoints: Option<Endpoints>) -> anyhow::Result<()> {
        let mut run = self.start(endpoints).await?;
        let mut wakes = Wakes::new()?;
        loop {
            match wakes.next(run.period, &run.status_seen).await {
                Wake::Stop => break,
                Wake::Replace => self.replace(&run).await,
                Wake::Tick => self.tick(&mut run).await,
            }
        }
        self.stop_cluster(&mut run.supervisor, &self.name()).await;
        Ok(())
    }

    /// Everything the loop keeps from one tick to the next, once the
    /// endpoints, metrics and side tasks serve and the managers still
    /// running (after a re-exec) are adopted.
    async fn start(&mut self, endpoints: Option<Endpoints>) -> anyhow::Result<Running> {
        let started = Instant::now();
        let names = self.instance_names();
        self.defs
            .write_all(&names, &self.dir.read_status().unwrap_or_default())?;
        let Endpoints { handover, routes } = match endpoints {
            Some(e) => e,
            None => Endpoints::start(&self.ports, RouteTable::new(), None).await?,
        };
        let (metrics, metrics_rx) = watch::channel(None);
        if let Some(port) = self.ports.metrics {
            crate::metrics::serve(&self.ports.host, port, metrics_rx, self.dir.clone()).await?;
        }
        tokio::spawn(crate::scheduled_backups::run(self.dir.clone()).in_current_span());
        tokio::spawn(crate::sql_objects::run(self.dir.clone()).in_current_span());
        self.record_start(&self.name())?;
        // After `cnmysql local upgrade` re-executed this control plane: the
        // managers still running are its children, supervised as before.
        let adopted = crate::process::adopted_managers();
        let supervisor = Supervisor::new(self.dir.clone(), self.reporter, names, &adopted);
        self.say_adopted(&adopted);
        Ok(Running {
            started,
            routing: crate::routing::Routing::new(services(&self.cluster), routes),
            handover,
            metrics,
            supervisor,
            progress: Progress::default(),
            announced: false,
            memory: Memory::default(),
            keep: None,
            status_seen: crate::cluster_state::FileClusterState::new(self.dir.clone()),
            period: Duration::from_millis(Cadence::LOCAL.steady_ms),
            status_unreadable: false,
            certificates_checked: None,
        })
    }

    /// `cnmysql local upgrade`: replace this control plane with the new
    /// executable; the instances keep running. Returns only if it failed.
    async fn replace(&self, run: &Running) {
        let e =
            crate::reexec::reexec(&self.dir, &self.reporter, &run.supervisor, &run.handover).await;
        tracing::error!(error = %e, "the control plane was not replaced");
        self.dir.event(
            true,
            "OperatorUpgradeFailed",
            None,
            &format!("the control plane was not replaced: {e}"),
        );
    }

    /// One turn of the loop, what the operator and the kubelet do on
    /// Kubernetes.
    async fn tick(&mut self, run: &mut Running) {
        let status = self.read_status(run);
        self.reload_manifest();
        self.renew_certificates(&mut run.certificates_checked, &status);
        // Managers that exited are reaped (their absence is the pass's
        // proof that nothing of theirs still writes) and started again as
        // the last pass said, before this pass observes them.
        run.supervisor.reap().await;
        self.keep_managers(run, &status).await;
        let observed = self.poll(&status).await;
        run.supervisor.check_liveness(&observed).await;
        let mut snapshot = self.snapshot(status, observed.clone());
        if !run.status_unreadable {
            self.pass(run, &snapshot).await;
        }
        run.metrics.send_replace(Some(snapshot.clone()));
        // Routing follows the status the pass left.
        snapshot.status = self.dir.read_status().unwrap_or_default();
        snapshot.now_ms = jiff::Timestamp::now().as_millisecond();
        run.period = Duration::from_millis(Cadence::LOCAL.next_poll_ms(&snapshot.status));
        let gone = run.supervisor.absent();
        run.routing.route(&self.dir, &snapshot, &gone);
        self.tell(run, &observed, &snapshot);
    }

    /// The cluster status; said once when it cannot be read, and again
    /// when it can.
    fn read_status(&self, run: &mut Running) -> cnmysql_api::ClusterStatus {
        let current = self.dir.read_status();
        match (&current, run.status_unreadable) {
            // Decisions need the recorded primary, fencing and
            // divergence: none are taken without them.
            (Err(e), false) => {
                tracing::error!(error = %e, "the cluster status cannot be read; no topology decisions until it can");
                self.dir.event(true, "StatusUnreadable", None, &format!("the cluster status cannot be read ({e}); failover, switchover and fencing wait until it can"));
            }
            (Ok(_), true) => tracing::info!("the cluster status can be read again"),
            _ => {}
        }
        run.status_unreadable = current.is_err();
        current.unwrap_or_default()
    }

    /// What the core decides from: the spec, the status, the instances as
    /// polled, the declarations and annotations.
    fn snapshot(
        &mut self,
        status: cnmysql_api::ClusterStatus,
        instances: Vec<Observed>,
    ) -> Snapshot {
        let mut snapshot = Snapshot {
            cluster: self.name(),
            spec: self.cluster.spec.clone(),
            status,
            instances,
            now_ms: jiff::Timestamp::now().as_millisecond(),
            declared: self.defs.declared(),
        };
        snapshot.declared.operator_certificate_expires_at = self.operator_cert_expiry;
        match self.defs.asked() {
            Ok(a) => snapshot.declared.asked = a,
            // Unknown: every instance's record is left as it is.
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "the annotations cannot be read"),
        }
        snapshot
    }

    /// The topology engine's pass with this machine as its platform.
    async fn pass(&mut self, run: &mut Running, snapshot: &Snapshot) {
        let absent = run.supervisor.absent();
        let mut platform = LocalPlatform {
            dir: &self.dir,
            ports: &self.ports,
            client: &self.client,
            reporter: &self.reporter,
            hash: &self.hash,
            supervisor: &mut run.supervisor,
            defs: &mut self.defs,
        };
        let observed = cnmysql_core::reconcile::Observation {
            lease: None,
            snapshot,
            absent: &absent,
            // Fencing is instant here: the lease is waited for.
            fence_early: false,
            primary_restarted_at_ms: None,
            primary_down_in_place: false,
            leaving: &[],
            cordoned: &[],
            backing_off: &[],
        };
        match cnmysql_engine::pass(&mut platform, &observed, &mut run.memory).await {
            Ok(keep) => run.keep = Some(keep),
            Err(e) => tracing::warn!(error = %e, "topology pass failed"),
        }
    }

    /// Progress for the human watching; once healthy, how to connect.
    fn tell(&self, run: &mut Running, observed: &[Observed], snapshot: &Snapshot) {
        let summary = cnmysql_core::status_change::report(snapshot, &run.memory).summary;
        run.progress.report(&self.reporter, observed, &summary);
        if !run.announced && summary.phase == cnmysql_api::Phase::Healthy {
            run.announced = true;
            self.announce(&snapshot.status, run.started.elapsed());
        }
    }

    /// One manager per instance running, like a kubelet, as the last
    /// pass said (`run.keep`): those it holds down stay down, and none
    /// runs while the cluster is hibernated.
    async fn keep_managers(&mut self, run: &mut Running, status: &cnmysql_api::ClusterStatus) {
        if !run.keep.as_ref().is_some_and(|k| k.hibernated) {
            run.supervisor.start_due(run.keep.as_ref());
        } else if run.supervisor.absent().len() < self.instance_names().len() {
            self.reporter.say(
                None,
                "Hibernating: stopping every instance, replicas first; data kept",
            );
            run.supervisor
                .stop_all(status.current_primary.as_deref())
                .await;
        }
    }

    /// The status records this control plane, and the user is told.
    fn record_start(&self, name: &str) -> anyhow::Result<()> {
        self.dir.update_status(|s| {
            s.operator_executable_hash = Some(self.hash.clone());
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
        Ok(())
    }

    /// After `cnmysql local upgrade`: which instances kept running.
    fn say_adopted(&self, adopted: &std::collections::BTreeMap<String, u32>) {
        if adopted.is_empty() {
            return;
        }
        let text = format!(
            "the control plane now runs {}; instances kept running: {}",
            &self.hash[..12.min(self.hash.len())],
            adopted.keys().cloned().collect::<Vec<_>>().join(", ")
        );
        self.dir.event(false, "OperatorUpgraded", None, &text);
        self.reporter.say(None, &text);
    }

    /// Stop every instance, replicas first, and record the cluster stopped.
    async fn stop_cluster(&self, supervisor: &mut Supervisor, name: &str) {
        self.reporter
            .say(None, "Stopping: replicas first, then the primary");
        let primary = self.dir.read_status().ok().and_then(|s| s.current_primary);
        supervisor.stop_all(primary.as_deref()).await;
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
}
