//! `ScheduledBackup` documents in a local manifest, run by the control
//! plane as the operator runs them on Kubernetes: when one is due
//! (`cnmysql_backup::schedule::plan`, shared), `cnmysql local backup` happens,
//! recorded in the status and events as any backup. When each last ran is
//! kept in `<state>/schedules.json`.

use std::collections::BTreeMap;
use std::time::Duration;

use cnmysql_backup::schedule::{self, Plan};
use serde::{Deserialize, Serialize};

use crate::state::StateDir;

#[derive(Serialize, Deserialize, Default, Clone, Debug)]
#[serde(rename_all = "camelCase")]
struct Record {
    /// When the control plane first saw the schedule.
    seen_at: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    last_schedule_time: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    next_schedule_time: String,
}

fn path(dir: &StateDir) -> std::path::PathBuf {
    dir.root.join("schedules.json")
}

/// Check the schedules every few seconds, until the process ends.
pub async fn run(dir: StateDir) {
    let tick = move || {
        let dir = dir.clone();
        async move { tick(&dir).await }
    };
    crate::periodic::every(Duration::from_secs(2), "scheduled backups", tick).await
}

async fn tick(dir: &StateDir) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(dir.manifest())?;
    let m = cnmysql_api::parse_manifest(&text)?;
    if m.scheduled_backups.is_empty() {
        return Ok(());
    }
    // Nothing is due before the cluster has a primary to back up.
    let st = dir.read_status()?;
    if st.current_primary.is_none() || st.ready_instances < 1 {
        return Ok(());
    }
    let mut records: BTreeMap<String, Record> = std::fs::read_to_string(path(dir))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let now = jiff::Timestamp::now();
    for sb in &m.scheduled_backups {
        let name = sb.metadata.name.clone().unwrap_or_default();
        let r = records.entry(name.clone()).or_insert_with(|| Record {
            seen_at: now.to_string(),
            ..Default::default()
        });
        let seen: jiff::Timestamp = r.seen_at.parse().unwrap_or(now);
        let last = r.last_schedule_time.parse().ok();
        let s = &sb.spec;
        let plan = schedule::plan(&s.schedule, s.immediate, s.suspend, seen, last, now)
            .map_err(|e| anyhow::anyhow!("ScheduledBackup {name}: {e}"))?;
        let (at, next) = match plan {
            Plan::Suspended => continue,
            Plan::Wait(at) => {
                r.next_schedule_time = at.to_string();
                continue;
            }
            Plan::Due { at, next } => (at, next),
        };
        r.last_schedule_time = at.to_string();
        r.next_schedule_time = next.map(|t| t.to_string()).unwrap_or_default();
        cnmysql_tls::write_private(&path(dir), &serde_json::to_string_pretty(&records)?, false)?;
        tracing::info!(schedule = name, "scheduled backup due");
        if let Err(e) = crate::backups::backup(dir, sb.spec.target, |line| {
            tracing::info!(schedule = name, "{line}")
        })
        .await
        {
            // Recorded in the status and events by the backup itself.
            tracing::warn!(schedule = name, error = %e, "scheduled backup failed");
        }
        return Ok(());
    }
    cnmysql_tls::write_private(&path(dir), &serde_json::to_string_pretty(&records)?, false)?;
    Ok(())
}
