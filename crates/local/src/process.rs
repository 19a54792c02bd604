//! An instance manager process as the local control plane sees it: one it
//! started, or one it adopted after re-executing itself for an upgrade (a
//! process keeps its PID across exec, so the managers are still its
//! children and `waitpid` reaps them as before).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// Names the running managers handed to the next image of the control
/// plane: `name=pid,name=pid`.
pub const ADOPT_MANAGERS_ENV: &str = "CNMYSQL_ADOPT_MANAGERS";

pub enum Handle {
    Spawned(tokio::process::Child),
    Adopted(u32),
}

impl Handle {
    pub fn id(&self) -> Option<u32> {
        match self {
            Handle::Spawned(c) => c.id(),
            Handle::Adopted(p) => Some(*p),
        }
    }

    /// How it ended, if it did (reaping it).
    pub fn try_wait(&mut self) -> Option<String> {
        match self {
            Handle::Spawned(c) => match c.try_wait() {
                Ok(Some(st)) => Some(st.to_string()),
                Ok(None) => None,
                Err(e) => Some(e.to_string()),
            },
            Handle::Adopted(pid) => {
                match waitpid(Pid::from_raw(*pid as i32), Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) => None,
                    Ok(WaitStatus::Exited(_, code)) => Some(format!("exit status: {code}")),
                    Ok(WaitStatus::Signaled(_, sig, _)) => Some(format!("signal: {sig}")),
                    Ok(_) => None,
                    // Not our child (should not happen): alive or not.
                    Err(_) => (!crate::state::pid_alive(*pid as i32)).then(|| "gone".into()),
                }
            }
        }
    }

    pub fn signal(&self, sig: Signal) {
        if let Some(pid) = self.id() {
            let _ = kill(Pid::from_raw(pid as i32), sig);
        }
    }

    /// Wait up to `timeout` for it to end; false if it still runs.
    pub async fn wait_for(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.try_wait().is_some() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn kill(&mut self) {
        self.signal(Signal::SIGKILL);
        self.wait_for(Duration::from_secs(10)).await;
    }
}

/// The managers the previous image of this control plane handed on.
pub fn adopted_managers() -> std::collections::BTreeMap<String, u32> {
    std::env::var(ADOPT_MANAGERS_ENV)
        .unwrap_or_default()
        .split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// Put a copy of this running executable at `dest` (atomically): an
/// instance manager runs from its own copy, so replacing the control
/// plane's executable, or an in-place upgrade of another instance, changes
/// nothing under it.
pub fn install_copy(dest: &Path) -> anyhow::Result<()> {
    let dir = dest
        .parent()
        .ok_or_else(|| anyhow::anyhow!("{} has no directory", dest.display()))?;
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    let tmp: PathBuf = dir.join(format!(".install-{}", std::process::id()));
    std::fs::copy("/proc/self/exe", &tmp)
        .map_err(|e| anyhow::anyhow!("cannot copy the executable to {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, dest)
        .map_err(|e| anyhow::anyhow!("cannot put the executable at {}: {e}", dest.display()))?;
    Ok(())
}
