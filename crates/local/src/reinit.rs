//! `cnmysql local reinit`: ask an instance to save what only it holds and
//! re-clone itself from the primary (`cnmysql_core::reinit`).

use crate::state::{StateDir, live_pid};

/// Request the re-initialisation of `instance` (refused with the reason
/// for the primary, or when no primary could give it a copy).
pub fn request_reinit(dir: &StateDir, instance: &str) -> anyhow::Result<()> {
    if live_pid(&dir.control_pid()).is_none() {
        anyhow::bail!("the cluster is not running; start it with `cnmysql local up`");
    }
    let cluster = dir.load_cluster()?;
    let name = cluster.metadata.name.clone().unwrap_or_default();
    cnmysql_core::status::check_member(&name, &cluster.spec, instance)?;
    let mut outcome = None;
    dir.update_status(|st| outcome = Some(cnmysql_core::reinit::request(st, instance)))?;
    match outcome.expect("update_status runs its closure") {
        Err(why) => {
            dir.event(true, "ReinitRefused", Some(instance), &why.to_string());
            anyhow::bail!("re-initialisation of {instance} refused: {why}");
        }
        Ok(true) => {
            let e = cnmysql_core::reinit::requested_event(instance);
            dir.event(e.warning, e.reason, Some(instance), &e.message);
            eprintln!("{instance}: re-initialisation requested");
        }
        Ok(false) => eprintln!("{instance}: re-initialisation was already requested"),
    }
    Ok(())
}
