//! Supervision: one instance manager process per instance, kept running
//! as a kubelet keeps a Pod's container running — started again when it
//! exits (with a growing delay), unless the topology step holds the
//! instance down (its [`Running`] answer); restarted when its liveness
//! fails; stopped cleanly, replicas first, when the cluster stops or
//! hibernates.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use cnmysql_core::running::Running;
use cnmysql_core::status::Observed;
use tokio::process::Command;

use crate::process::Handle;
use crate::progress::Reporter;
use crate::proxy;
use crate::state::StateDir;

/// One instance's manager process.
pub struct ManagedProcess {
    pub name: String,
    pub child: Option<Handle>,
    restarts: u32,
    /// Being recreated by the rollout: started again from the control
    /// plane's executable as soon as it has stopped.
    recreating: bool,
    next_start: Instant,
    /// Its processes went away under this control plane (exited, killed):
    /// from then on it starts only when the controller lets it. Starting
    /// the cluster is not a vanishing: every instance is started then.
    vanished: bool,
    /// The user was told it is held down (once per vanishing).
    held_said: bool,
}

impl ManagedProcess {
    /// Neither the manager nor its mysqld can be running any more.
    pub fn gone(&self, dir: &StateDir) -> bool {
        self.child.is_none() && dir.live_mysqld_pid(&self.name).is_none()
    }
}

/// The manager processes of one cluster.
pub struct Supervisor {
    pub dir: StateDir,
    pub reporter: Reporter,
    pub procs: Vec<ManagedProcess>,
}

impl Supervisor {
    /// `adopted`: managers still running after the control plane re-exec'd
    /// itself (its children still), supervised as before.
    pub fn new(
        dir: StateDir,
        reporter: Reporter,
        names: Vec<String>,
        adopted: &std::collections::BTreeMap<String, u32>,
    ) -> Supervisor {
        let procs = names
            .into_iter()
            .map(|n| ManagedProcess {
                child: adopted.get(&n).map(|pid| Handle::Adopted(*pid)),
                recreating: false,
                vanished: false,
                held_said: false,
                name: n,
                restarts: 0,
                next_start: Instant::now(),
            })
            .collect();
        Supervisor {
            dir,
            reporter,
            procs,
        }
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut ManagedProcess> {
        self.procs.iter_mut().find(|p| p.name == name)
    }

    /// Instances none of whose processes run: the platform's proof for
    /// the topology step.
    pub fn absent(&self) -> Vec<String> {
        self.procs
            .iter()
            .filter(|p| p.gone(&self.dir))
            .map(|p| p.name.clone())
            .collect()
    }

    /// The instance's private copy of the manager executable.
    pub fn manager_exe(&self, name: &str) -> PathBuf {
        self.dir.instance_dir(name).join("bin").join("cnmysql")
    }

    /// Reap managers that exited. As a container dies with its PID 1, a
    /// manager that died (killed, crashed) takes its mysqld along, so no
    /// server runs unsupervised and a primary's death is proven at once (a
    /// failover need not wait for its lease). A manager's in-place re-exec
    /// is not an exit.
    pub async fn reap(&mut self) {
        for i in 0..self.procs.len() {
            let Some(st) = self.procs[i].child.as_mut().and_then(|c| c.try_wait()) else {
                continue;
            };
            let name = self.procs[i].name.clone();
            self.procs[i].child = None;
            if let Some(pid) = self.dir.live_mysqld_pid(&name) {
                self.reporter.say(
                    Some(&name),
                    &format!("the instance manager exited ({st}) leaving mysqld (pid {pid}) running; stopping it"),
                );
                stop_orphan(pid).await;
            }
            let p = &mut self.procs[i];
            if std::mem::take(&mut p.recreating) {
                // Recreated by the rollout: started again at once from the
                // control plane's executable.
                p.next_start = Instant::now();
                let exe = self.manager_exe(&name);
                match crate::process::install_copy(&exe) {
                    Ok(()) => self.reporter.say(
                        Some(&name),
                        "stopped for the upgrade; starting it with the new instance manager",
                    ),
                    Err(e) => self.reporter.say(
                        Some(&name),
                        &format!("cannot install the new instance manager: {e}"),
                    ),
                }
                continue;
            }
            p.restarts += 1;
            p.vanished = true;
            p.held_said = false;
            p.next_start =
                Instant::now() + Duration::from_millis(500 * u64::from(p.restarts.min(10)));
            self.reporter
                .say(Some(&name), &format!("the instance manager exited ({st})"));
        }
    }

    /// Start every stopped manager that is due and that the topology step
    /// lets start (`running`, its last answer). Before any answer, only
    /// the managers that never ran under this control plane start.
    pub fn start_due(&mut self, running: Option<&Running>) {
        let now = Instant::now();
        for i in 0..self.procs.len() {
            let p = &mut self.procs[i];
            if p.child.is_some() || now < p.next_start {
                continue;
            }
            if p.vanished && !running.is_some_and(|r| r.may_start(&p.name)) {
                if !std::mem::replace(&mut p.held_said, true) {
                    // The topology step holds it down and fails over.
                    self.reporter
                        .say(Some(&p.name), "held down for the failover decision");
                }
                continue;
            }
            let name = p.name.clone();
            if p.vanished {
                self.reporter
                    .say(Some(&name), "starting the instance manager again");
            }
            match self.spawn(&name) {
                Ok(c) => self.procs[i].child = Some(c),
                Err(e) => self.reporter.say(
                    Some(&name),
                    &format!("cannot start the instance manager: {e}"),
                ),
            }
        }
    }

    /// Liveness: an instance isolated from the cluster state and every peer
    /// is restarted in place, as a kubelet restarts a container.
    pub async fn check_liveness(&mut self, observed: &[Observed]) {
        for o in observed {
            if !o.status.as_ref().is_some_and(|st| st.isolated) {
                continue;
            }
            self.dir.event(true, "IsolationRestart", Some(&o.name), "liveness failed: isolated from the cluster state and every peer; restarting the instance");
            self.kill(&o.name).await;
            match self.spawn(&o.name) {
                Ok(c) => {
                    if let Some(p) = self.get_mut(&o.name) {
                        p.child = Some(c)
                    }
                }
                Err(e) => self.reporter.say(
                    Some(&o.name),
                    &format!("cannot start the instance manager: {e}"),
                ),
            }
        }
    }

    /// Let a held-down instance start at once.
    pub fn start_now(&mut self, name: &str) {
        if let Some(p) = self.get_mut(name) {
            p.next_start = Instant::now();
        }
    }

    /// Stop `name` cleanly (mysqld shut down, lease given up) and start it
    /// again from the control plane's executable. False when not known.
    pub fn recreate(&mut self, name: &str) -> anyhow::Result<bool> {
        let exe = self.manager_exe(name);
        let Some(p) = self.get_mut(name) else {
            return Ok(false);
        };
        match p.child.as_ref() {
            // The supervision loop starts it again once it has stopped.
            Some(c) => {
                p.recreating = true;
                c.signal(nix::sys::signal::Signal::SIGTERM);
            }
            None => {
                p.next_start = Instant::now();
                crate::process::install_copy(&exe)?;
            }
        }
        Ok(true)
    }

    fn spawn(&self, name: &str) -> anyhow::Result<Handle> {
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

    /// Stop an instance's manager and mysqld at once (fencing a failed
    /// primary, a failed liveness).
    pub async fn kill(&mut self, name: &str) {
        let dir = self.dir.clone();
        let Some(p) = self.get_mut(name) else { return };
        // mysqld first. Killed first, the manager would leave mysqld's
        // process group orphaned, and the kernel continues an orphaned group
        // that has a stopped member (SIGHUP, SIGCONT): a frozen primary's
        // mysqld would run, writable, until its own kill (seen by the fault
        // suite as two writable instances).
        if let Some(pid) = dir.live_mysqld_pid(name) {
            stop_orphan(pid).await;
        }
        if let Some(c) = p.child.as_mut() {
            c.kill().await;
        }
        p.child = None;
        p.vanished = true;
        if let Some(pid) = dir.live_mysqld_pid(name) {
            stop_orphan(pid).await;
        }
        let _ = std::fs::remove_file(dir.manager_pid(name));
    }

    /// Stop every instance cleanly, replicas first, then the primary.
    pub async fn stop_all(&mut self, primary: Option<&str>) {
        let mut order: Vec<String> = self.procs.iter().map(|p| p.name.clone()).collect();
        order.sort_by_key(|n| Some(n.as_str()) == primary);
        for name in order {
            let Some(child) = self.get_mut(&name).and_then(|p| p.child.as_mut()) else {
                continue;
            };
            child.signal(nix::sys::signal::Signal::SIGTERM);
            if child.wait_for(Duration::from_secs(90)).await {
                self.reporter.say(Some(&name), "stopped");
            } else {
                // Its server too: a manager killed mid-shutdown must not
                // leave a mysqld nobody supervises.
                self.reporter.say(
                    Some(&name),
                    "did not stop within 90s; killing it and its mysqld",
                );
                self.kill(&name).await;
            }
            let _ = std::fs::remove_file(self.dir.manager_pid(&name));
            if let Some(p) = self.get_mut(&name) {
                p.child = None;
            }
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
