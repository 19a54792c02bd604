//! What a user asks of a running local cluster: a switchover, an upgrade of
//! the control plane and the instance managers, an in-place restart of a
//! manager, fencing. Backups are in `backups.rs`.

use std::time::{Duration, Instant};

use crate::state::{StateDir, live_pid};
use crate::status_report::snapshot;

/// `cnmysql local apply`: take a changed manifest for an existing cluster.
/// Only what may change on a running cluster may change (server image and
/// version, catalogs, upgradeAt, maintenance window, server settings,
/// update methods, delays, annotations); anything else is refused naming
/// the field, and nothing is written. A running control plane takes it up
/// within a pass; returns what changed.
pub fn apply(
    manifest: &std::path::Path,
    state_dir: Option<&std::path::Path>,
) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(manifest)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", manifest.display()))?;
    let m = cnmysql_api::parse_manifest(&text)?;
    let name = m.cluster.metadata.name.clone().unwrap_or_default();
    let dir = crate::lookup::existing_state_dir(state_dir, Some(&name))?;
    let old_text = std::fs::read_to_string(dir.manifest())?;
    let old = cnmysql_api::parse_manifest(&old_text)?;
    let mut changed = crate::definition::check_change(&old.cluster, &m.cluster)
        .map_err(|e| anyhow::anyhow!("{e}; nothing was changed"))?;
    if !crate::definition::same_catalogs(&old.catalogs, &m.catalogs) {
        changed.push("image catalogs".into());
    }
    if crate::sql_objects::documents(&old.sql_objects)
        != crate::sql_objects::documents(&m.sql_objects)
    {
        changed.push("databases, users and grants".into());
    }
    if !changed.is_empty() {
        cnmysql_tls::write_private(&dir.manifest(), &text, true)?;
    }
    Ok(changed)
}

/// Planned switchover: validate, set targetPrimary, and (with `wait`) wait
/// until the rw endpoint routes to the new primary.
pub async fn promote(dir: &StateDir, target: &str, wait: bool) -> anyhow::Result<()> {
    if live_pid(&dir.control_pid()).is_none() {
        anyhow::bail!("the cluster is not running; start it with `cnmysql local up`");
    }
    let mut s = snapshot(dir).await?;
    // The cluster's annotations (a pause refuses it).
    s.declared.asked.cluster = crate::annotations::read(dir)?.of(None);
    let refused = |why: cnmysql_core::switchover::Refusal| {
        let text = why.message(target);
        let reason = cnmysql_core::switchover::REFUSED_EVENT;
        dir.event(true, reason, Some(target), &text);
        anyhow::anyhow!("{text}")
    };
    cnmysql_core::switchover::validate(&s, target).map_err(refused)?;
    // Written only while the status is still what was validated.
    let mut outcome = None;
    dir.update_status(|st| {
        if (&st.current_primary, &st.target_primary)
            == (&s.status.current_primary, &s.status.target_primary)
        {
            outcome = Some(cnmysql_core::switchover::request(
                &s.cluster,
                &s.spec,
                &s.declared.asked.cluster,
                st,
                target,
                jiff::Timestamp::now().as_millisecond(),
            ));
        }
    })?;
    // The request checks the status as it is now (its lag may have grown
    // since the snapshot): its refusal is said as such.
    let requested = match outcome {
        Some(Ok(r)) => r,
        Some(Err(why)) => return Err(refused(why)),
        None => {
            anyhow::bail!("the primary changed while the switchover was being requested; try again")
        }
    };
    let (reason, text) = requested.event();
    dir.event(false, reason, Some(target), &text);
    let old = requested.from;
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
    let hash = cnmysql_control::executable_hash();
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
    cnmysql_core::status::check_member(&name, &cluster.spec, instance)?;
    let ports = dir.load_ports()?;
    let port = ports.instances[instance].control;
    let client =
        cnmysql_control::client::ControlClient::new(dir.operator_material()?.client_config()?);
    let done = cnmysql_control::upgrade::restart_in_place_and_wait(
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
    cnmysql_core::status::check_member(&name, &cluster.spec, instance)?;
    let mut f = None;
    dir.update_status(|st| f = Some(cnmysql_core::fencing::request(st, instance, on)))?;
    let f = f.expect("update_status runs its closure");
    if f.changed {
        let (warning, reason, message) = f.event();
        dir.event(warning, reason, Some(instance), &message);
    }
    Ok(f)
}
