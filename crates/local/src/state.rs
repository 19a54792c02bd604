//! The state directory of a local cluster: its manifest, ports, secrets,
//! PKI, status (the local stand-in for the Cluster status) and instances.
//!
//! ```text
//! <state>/cluster.yaml        the manifest the cluster was started with
//! <state>/ports.json          endpoints and per-instance ports
//! <state>/status.json         ClusterStatus (written under status.lock)
//! <state>/control.pid         the control plane's pid while it runs
//! <state>/control.log         its log when detached
//! <state>/pki/                ca.crt, ca.key, <instance>.crt/.key, cnmysql-operator.crt/.key
//! <state>/secrets/            admin, replication, app passwords (0600)
//! <state>/instances/<name>/   data/, run/, config.json, manager.log, manager.pid
//! ```

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use cnmysql_api::names::{OPERATOR_IDENTITY, instance_name};
use cnmysql_api::{Cluster, ClusterStatus, ServiceRole};
use cnmysql_control::peer::PeerAddr;
use cnmysql_core::lease::Lease;
use cnmysql_instance::config::{InstanceConfig, Programs, SecretFiles};
use cnmysql_tls::{Material, TlsPaths};
use nix::fcntl::{Flock, FlockArg};
use rand::Rng;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InstancePorts {
    pub mysql: u16,
    pub control: u16,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Ports {
    pub host: String,
    /// Service name (`rw`, `ro`, `r`, additional names) → port.
    pub services: BTreeMap<String, u16>,
    pub instances: BTreeMap<String, InstancePorts>,
    /// Prometheus metrics of the cluster (`/metrics`, plain HTTP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<u16>,
}

#[derive(Clone, Debug)]
pub struct StateDir {
    pub root: PathBuf,
}

/// The default state directory of a cluster: `<data dir>/cnmysql/<name>`.
pub fn default_state_dir(cluster: &str) -> PathBuf {
    dirs::data_dir()
        .unwrap_or_else(|| std::env::temp_dir().join("cnmysql-data"))
        .join("cnmysql")
        .join(cluster)
}

/// Is this TCP port free on `host` right now?
pub fn port_free(host: &str, port: u16) -> bool {
    std::net::TcpListener::bind((host, port)).is_ok()
}

/// No socket at all is bound to the port, not even one that shares
/// addresses: an endpoint with no ready instance keeps its port bound but
/// does not listen, and [`port_free`] alone would not see it.
fn port_unbound(host: &str, port: u16) -> bool {
    use std::net::ToSocketAddrs;
    let Some(addr) = (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
    else {
        return false;
    };
    socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )
    .and_then(|s| s.bind(&addr.into()))
    .is_ok()
}

/// A free port below the kernel's ephemeral range: a port the kernel may
/// hand to an outgoing connection could be taken again before the server
/// that was given it binds it.
fn free_port(host: &str) -> anyhow::Result<u16> {
    let low_ephemeral: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    let (lo, hi) = (10_000u16, low_ephemeral.max(10_200));
    let mut rng = rand::rng();
    for _ in 0..200 {
        let p = rng.random_range(lo..hi);
        if port_free(host, p) && port_unbound(host, p) {
            return Ok(p);
        }
    }
    Ok(std::net::TcpListener::bind((host, 0))?.local_addr()?.port())
}

impl StateDir {
    pub fn new(root: PathBuf) -> StateDir {
        StateDir { root }
    }
    pub fn manifest(&self) -> PathBuf {
        self.root.join("cluster.yaml")
    }
    pub fn ports_file(&self) -> PathBuf {
        self.root.join("ports.json")
    }
    pub fn status_file(&self) -> PathBuf {
        self.root.join("status.json")
    }
    pub fn status_lock(&self) -> PathBuf {
        self.root.join("status.lock")
    }
    pub fn lease_file(&self) -> PathBuf {
        self.root.join("lease.json")
    }
    /// The endpoints' current backends, written by the control plane.
    pub fn routes_file(&self) -> PathBuf {
        self.root.join("routes.json")
    }
    pub fn routes(&self) -> std::collections::BTreeMap<String, Vec<String>> {
        std::fs::read_to_string(self.routes_file())
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }
    pub fn events_file(&self) -> PathBuf {
        self.root.join("events.jsonl")
    }
    pub fn control_pid(&self) -> PathBuf {
        self.root.join("control.pid")
    }
    /// The executable `cnmysql local upgrade` asks the control plane to become.
    pub fn upgrade_request(&self) -> PathBuf {
        self.root.join("upgrade-request")
    }
    pub fn control_log(&self) -> PathBuf {
        self.root.join("control.log")
    }
    pub fn pki(&self) -> PathBuf {
        self.root.join("pki")
    }
    pub fn secrets_dir(&self) -> PathBuf {
        self.root.join("secrets")
    }
    pub fn instance_dir(&self, name: &str) -> PathBuf {
        self.root.join("instances").join(name)
    }
    /// Create the state directory if needed and prove it writable, so a
    /// file-system problem is reported once, naming the directory and the
    /// flag that chooses it, before anything is half made.
    pub fn check_writable(&self) -> anyhow::Result<()> {
        let fail = |what: &str, path: &Path, e: std::io::Error| {
            anyhow::anyhow!(
                "cannot use {} as the cluster's state directory: {what} {}: {e}. Choose a writable directory with --state-dir DIR (default: <data dir>/cnmysql/<cluster>)",
                self.root.display(),
                path.display()
            )
        };
        std::fs::create_dir_all(&self.root).map_err(|e| fail("cannot create", &self.root, e))?;
        let probe = self
            .root
            .join(format!(".write-check-{}", std::process::id()));
        std::fs::write(&probe, b"").map_err(|e| fail("cannot write", &probe, e))?;
        let _ = std::fs::remove_file(&probe);
        Ok(())
    }

    /// How to name this cluster on the command line: its name when the
    /// state directory is the default one, else `--state-dir DIR`.
    pub fn cli_target(&self, cluster: &str) -> String {
        if self.root == default_state_dir(cluster) {
            cluster.to_string()
        } else {
            format!("--state-dir {}", self.root.display())
        }
    }

    /// Whether any instance has a data directory (the cluster has run).
    pub fn any_instance_data(&self) -> bool {
        std::fs::read_dir(self.root.join("instances"))
            .map(|entries| {
                entries
                    .flatten()
                    .any(|e| e.path().join("data").join("mysql").is_dir())
            })
            .unwrap_or(false)
    }
    pub fn instance_config(&self, name: &str) -> PathBuf {
        self.instance_dir(name).join("config.json")
    }
    pub fn manager_log(&self, name: &str) -> PathBuf {
        self.instance_dir(name).join("manager.log")
    }
    /// The PID of the instance's mysqld (the server writes the file), if
    /// that process still runs (and is this instance's server, not a
    /// process that reused a stale PID).
    pub fn live_mysqld_pid(&self, name: &str) -> Option<i32> {
        let run = self.instance_dir(name).join("run");
        let pid = std::fs::read_to_string(run.join("mysqld.pid"))
            .ok()?
            .trim()
            .parse::<i32>()
            .ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let ours = String::from_utf8_lossy(&cmdline).contains(&*run.to_string_lossy());
        (ours && pid_alive(pid)).then_some(pid)
    }
    pub fn manager_pid(&self, name: &str) -> PathBuf {
        self.instance_dir(name).join("manager.pid")
    }
    pub fn secret_files(&self) -> SecretFiles {
        let d = self.secrets_dir();
        SecretFiles {
            admin_password: d.join("admin-password"),
            replication_password: d.join("replication-password"),
            app_password: d.join("app-password"),
            backup_dir: Some(backup_secrets_dir()),
        }
    }
    pub fn operator_tls(&self) -> TlsPaths {
        TlsPaths::in_dir(&self.pki(), OPERATOR_IDENTITY)
    }
    pub fn operator_material(&self) -> anyhow::Result<Material> {
        Ok(self.operator_tls().load()?)
    }

    pub fn exists(&self) -> bool {
        self.manifest().is_file()
    }

    /// The manifest the cluster was created with.
    pub fn load_cluster(&self) -> anyhow::Result<Cluster> {
        let text = std::fs::read_to_string(self.manifest())
            .map_err(|e| anyhow::anyhow!("no local cluster in {}: {e}", self.root.display()))?;
        Ok(cnmysql_api::parse_manifest(&text)?.cluster)
    }

    pub fn load_ports(&self) -> anyhow::Result<Ports> {
        let text = std::fs::read_to_string(self.ports_file())?;
        Ok(serde_json::from_str(&text)?)
    }

    /// Create what is missing: directories, secrets, PKI, ports, status.
    /// What exists is kept, so `up` on an existing directory resumes.
    pub fn prepare(
        &self,
        cluster: &Cluster,
        manifest_text: &str,
        port_base: Option<u16>,
    ) -> anyhow::Result<Ports> {
        let name = cluster.metadata.name.clone().unwrap_or_default();
        self.check_writable()?;
        if self.exists() {
            let old = self.load_cluster()?;
            if old.metadata.name != cluster.metadata.name {
                anyhow::bail!(
                    "{} holds cluster {:?}, not {:?}; pass another --state-dir",
                    self.root.display(),
                    old.metadata.name.unwrap_or_default(),
                    name
                );
            }
            if old.spec.storage.binlogs.is_some() != cluster.spec.storage.binlogs.is_some() {
                anyhow::bail!(
                    "spec.storage.binlogs is set when the cluster is made and cannot be added or removed later \
                     (the server's history lives in those logs): put it back as it was"
                );
            }
            if old.spec.instances > cluster.spec.instances {
                anyhow::bail!(
                    "spec.instances went down from {} to {}: scaling down a local cluster is not supported; \
                     keep spec.instances at {} or destroy the cluster",
                    old.spec.instances,
                    cluster.spec.instances,
                    old.spec.instances
                );
            }
        }
        cnmysql_tls::write_private(&self.manifest(), manifest_text, true)?;
        std::fs::create_dir_all(self.secrets_dir())?;
        let secrets = self.secret_files();
        for f in [
            &secrets.admin_password,
            &secrets.replication_password,
            &secrets.app_password,
        ] {
            if !f.exists() {
                cnmysql_tls::write_private(f, &cnmysql_tls::random_password(), true)?;
            }
        }
        let instances: Vec<String> = (1..=cluster.spec.instances as u32)
            .map(|i| instance_name(&name, i))
            .collect();
        crate::pki::ensure(
            &self.pki(),
            &name,
            &instances,
            cluster.spec.secrets.certificate_lifetime(),
            &Default::default(),
        )?;
        let ports = self.prepare_ports(cluster, &instances, port_base)?;
        if !self.status_file().exists() {
            let status = ClusterStatus {
                target_primary: Some(instance_name(&name, 1)),
                target_primary_timestamp: Some(jiff::Timestamp::now().to_string()),
                instances: cluster.spec.instances,
                ..Default::default()
            };
            self.write_status(&status)?;
        }
        Ok(ports)
    }

    fn prepare_ports(
        &self,
        cluster: &Cluster,
        instances: &[String],
        port_base: Option<u16>,
    ) -> anyhow::Result<Ports> {
        let host = "127.0.0.1".to_string();
        let mut ports = if self.ports_file().exists() {
            self.load_ports()?
        } else {
            Ports {
                host: host.clone(),
                services: BTreeMap::new(),
                instances: BTreeMap::new(),
                metrics: None,
            }
        };
        let svc = &cluster.spec.managed.services;
        let mut services: Vec<String> = ServiceRole::ALL
            .iter()
            .filter(|r| !svc.disabled_default_services.contains(r))
            .map(|r| r.as_str().to_string())
            .collect();
        services.extend(svc.additional.iter().map(|a| a.name.clone()));
        // A fixed base gives predictable ports: services from the base, then
        // two per instance. Base 0 picks free ports.
        let base = port_base.unwrap_or(13306);
        let mut used: std::collections::BTreeSet<u16> = ports
            .services
            .values()
            .copied()
            .chain(ports.instances.values().flat_map(|p| [p.mysql, p.control]))
            .chain(ports.metrics)
            .collect();
        let mut pick = |offset: u32| -> anyhow::Result<u16> {
            if base == 0 {
                // Distinct within the cluster.
                loop {
                    let p = free_port(&host)?;
                    if used.insert(p) {
                        return Ok(p);
                    }
                }
            } else {
                let p = base as u32 + offset;
                u16::try_from(p).map_err(|_| {
                    anyhow::anyhow!("port {p} is out of range; choose a lower --port-base")
                })
            }
        };
        for (i, s) in services.iter().enumerate() {
            if !ports.services.contains_key(s) {
                ports.services.insert(s.clone(), pick(i as u32)?);
            }
        }
        ports.services.retain(|k, _| services.contains(k));
        if ports.metrics.is_none() {
            // Just below the instances' ports.
            ports.metrics = Some(pick(9)?);
        }
        for (i, n) in instances.iter().enumerate() {
            if !ports.instances.contains_key(n) {
                let off = 10 + 2 * i as u32;
                ports.instances.insert(
                    n.clone(),
                    InstancePorts {
                        mysql: pick(off)?,
                        control: pick(off + 1)?,
                    },
                );
            }
        }
        let text = serde_json::to_string_pretty(&ports)?;
        cnmysql_tls::write_private(&self.ports_file(), &text, false)?;
        Ok(ports)
    }

    /// The configuration of one instance manager.
    pub fn build_instance_config(
        &self,
        cluster: &Cluster,
        ports: &Ports,
        ordinal: u32,
        programs: &Programs,
        template: Option<PathBuf>,
    ) -> anyhow::Result<InstanceConfig> {
        let name = cluster.metadata.name.clone().unwrap_or_default();
        let me = instance_name(&name, ordinal);
        let mine = ports
            .instances
            .get(&me)
            .ok_or_else(|| anyhow::anyhow!("no ports for {me}"))?;
        let dir = self.instance_dir(&me);
        let peers = ports
            .instances
            .iter()
            .map(|(n, p)| {
                (
                    n.clone(),
                    PeerAddr {
                        host: ports.host.clone(),
                        mysql_port: p.mysql,
                        control_port: p.control,
                        tls_name: None,
                    },
                )
            })
            .collect();
        Ok(InstanceConfig {
            namespace: cnmysql_api::names::LOCAL_NAMESPACE.into(),
            cluster: name,
            instance: me.clone(),
            ordinal,
            spec: cluster.spec.clone(),
            data_dir: dir.join("data"),
            binlog_dir: cluster
                .spec
                .storage
                .binlogs
                .is_some()
                .then(|| dir.join("binlog")),
            run_dir: dir.join("run"),
            template_dir: template,
            tls: TlsPaths::in_dir(&self.pki(), &me),
            secrets: self.secret_files(),
            programs: programs.clone(),
            mysql_bind: ports.host.clone(),
            mysql_port: mine.mysql,
            control_bind: ports.host.clone(),
            control_port: mine.control,
            peers,
            shutdown_timeout_secs: 60,
            exit_with_parent: true,
            shared_volumes: true,
            probe_port: None,
        })
    }

    pub fn read_status(&self) -> anyhow::Result<ClusterStatus> {
        let path = self.status_file();
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{} is not a cluster status: {e}", path.display()))
    }

    fn write_status(&self, s: &ClusterStatus) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(s)?;
        cnmysql_tls::write_private(&self.status_file(), &text, false)?;
        Ok(())
    }

    /// Read-modify-write the status under an exclusive lock; returns the new status.
    pub fn update_status(
        &self,
        f: impl FnOnce(&mut ClusterStatus),
    ) -> anyhow::Result<ClusterStatus> {
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.status_lock())?;
        let _guard = Flock::lock(lock, FlockArg::LockExclusive).map_err(|(_, e)| e)?;
        // The status is created once, by `prepare`, when the cluster is
        // made. A status that is missing or cannot be read afterwards is
        // never replaced by an empty one: that would forget the primary,
        // fencing and divergence, and let a new primary be chosen.
        let mut s = self.read_status().map_err(|e| {
            anyhow::anyhow!(
                "the cluster status {} cannot be read ({e}); nothing was changed. It is written when `cnmysql local up` creates the cluster: restore it from a copy, or destroy and recreate the cluster",
                self.status_file().display()
            )
        })?;
        let before = s.clone();
        f(&mut s);
        // Nothing changed, nothing written: watchers of the file see only
        // real changes.
        if s != before {
            self.write_status(&s)?;
        }
        Ok(s)
    }
}

impl StateDir {
    pub fn read_lease(&self) -> anyhow::Result<Lease> {
        match std::fs::read_to_string(self.lease_file()) {
            Ok(text) => Ok(serde_json::from_str(&text)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Lease::default()),
            Err(e) => Err(anyhow::anyhow!(
                "cannot read the primary lease {}: {e}",
                self.lease_file().display()
            )),
        }
    }

    /// Change the lease under its own lock; `f` may refuse with an error.
    pub fn update_lease(
        &self,
        f: impl FnOnce(&Lease) -> Result<Lease, cnmysql_core::lease::LeaseError>,
    ) -> anyhow::Result<Lease> {
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.root.join("lease.lock"))?;
        let _guard = Flock::lock(lock, FlockArg::LockExclusive).map_err(|(_, e)| e)?;
        let cur = self.read_lease()?;
        let new = f(&cur)?;
        if new != cur {
            cnmysql_tls::write_private(
                &self.lease_file(),
                &serde_json::to_string_pretty(&new)?,
                false,
            )?;
        }
        Ok(new)
    }

    /// Record an event (the local stand-in for Kubernetes Events).
    /// How many events of each (reason, type) were recorded so far.
    pub fn event_counts(&self) -> cnmysql_view::metrics::EventCounts {
        let mut counts = cnmysql_view::metrics::EventCounts::new();
        let Ok(text) = std::fs::read_to_string(self.events_file()) else {
            return counts;
        };
        for line in text.lines() {
            let Ok(e) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if let (Some(reason), Some(kind)) = (e["reason"].as_str(), e["type"].as_str()) {
                *counts
                    .entry((reason.to_string(), kind.to_string()))
                    .or_default() += 1;
            }
        }
        counts
    }

    pub fn event(&self, warning: bool, reason: &str, instance: Option<&str>, message: &str) {
        use std::io::Write;
        let line = serde_json::json!({
            "time": jiff::Timestamp::now().to_string(),
            "type": if warning { "Warning" } else { "Normal" },
            "reason": reason,
            "instance": instance,
            "message": message,
        });
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.events_file())
        {
            let _ = writeln!(f, "{line}");
        }
    }

    /// The last `n` events, oldest first.
    pub fn events(&self, n: usize) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(self.events_file()).unwrap_or_default();
        let all: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        all[all.len().saturating_sub(n)..].to_vec()
    }
}

/// A pid file's process, if it is alive.
pub fn live_pid(path: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(path).ok()?.trim().parse().ok()?;
    pid_alive(pid).then_some(pid)
}

/// Is this process alive (and not a zombie)?
pub fn pid_alive(pid: i32) -> bool {
    u32::try_from(pid).is_ok_and(cnmysql_instance::mysqld::is_alive)
}

/// Where the local platform finds the Secrets a manifest's `spec.backup`
/// and `spec.bootstrap.recovery` name, as `<dir>/<name>/<key>` files:
/// `$CNMYSQL_SECRETS_DIR`, or `~/.config/cnmysql/secrets`.
pub fn backup_secrets_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CNMYSQL_SECRETS_DIR") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/root".into());
    home.join(".config/cnmysql/secrets")
}

#[cfg(test)]
mod tests;
