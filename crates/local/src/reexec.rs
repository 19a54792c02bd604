//! Re-executing the control plane for `cnmysql local upgrade`: the new
//! executable takes over this process, the running managers (still its
//! children after the exec) and the endpoints' client connections.

use std::path::PathBuf;
use std::sync::Arc;

use crate::progress::Reporter;
use crate::proxy::{self, Handover};
use crate::state::StateDir;
use crate::supervisor::Supervisor;

/// Replace this process with the executable `cnmysql local upgrade`
/// named. Returns only when that failed.
pub async fn reexec(
    dir: &StateDir,
    reporter: &Reporter,
    supervisor: &Supervisor,
    handover: &Arc<Handover>,
) -> anyhow::Error {
    use std::os::unix::process::CommandExt;
    let request = dir.upgrade_request();
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
    let managers: Vec<String> = supervisor
        .procs
        .iter()
        .filter_map(|p| Some(format!("{}={}", p.name, p.child.as_ref()?.id()?)))
        .collect();
    let (endpoints, stuck) = handover.park().await;
    reporter.say(
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
