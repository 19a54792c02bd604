//! Bootstrapping the first primary of a new Cluster by recovery
//! (`spec.bootstrap.recovery`): everything is read and planned before
//! anything is made — the base backup chosen, every binlog piece fetched and
//! checked, the replay planned (`cnmysql_backup::recovery_plan`) — so a gap
//! or a damaged piece refuses the recovery with nothing half-made. Then the
//! base backup is unpacked and prepared, a private server (no network, no
//! grant checks) replays the planned binary log ranges through its own
//! applier (relay logs made of them, see `replay`), the accounts get this
//! Cluster's passwords, and the server stops; the manager starts it as usual, and replicas clone from it.

use super::*;
use cnmysql_api::backup::{Recovered, RecoverySpec};
use cnmysql_backup::{base_backup, destination, recovery, recovery_plan, stored_stream};
use std::process::Stdio;
use tokio::io::AsyncWriteExt;

/// Where what a recovery reached is recorded, in the data directory.
pub const RECOVERED_FILE: &str = "cnmysql_recovered.json";

/// What this instance's data was recovered to, when it was.
pub fn recovered(data_dir: &std::path::Path) -> Option<Recovered> {
    let text = std::fs::read_to_string(data_dir.join(RECOVERED_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

impl<C: ClusterState> Manager<C> {
    pub(super) async fn recover_primary(&self, spec: &RecoverySpec) -> anyhow::Result<()> {
        let cfg = &self.cfg;
        let f = cfg.flavor();
        let status = self.cluster.get().await?;
        let resolved = spec.resolved(Some(&status)).map_err(anyhow::Error::msg)?;
        let src = &resolved.object_store;
        let server = src.server_name.clone().ok_or_else(|| {
            anyhow::anyhow!("spec.bootstrap.recovery.source.objectStore.serverName: name the Cluster whose backups to recover from")
        })?;
        let dest = destination::open_for_cluster(src, cfg.secrets.backup_dir.as_deref(), &server)
            .map_err(|e| {
            anyhow::anyhow!(e.replace("spec.backup.", "spec.bootstrap.recovery.source."))
        })?;
        let target = recovery::target(spec.recovery_target.as_ref()).map_err(anyhow::Error::msg)?;
        self.set_phase(
            InstancePhase::Initializing,
            format!("recovery: reading {}", dest.path),
        );
        let backups = base_backup::list(&dest).await?;
        let base = recovery::choose_base(
            f,
            &backups,
            resolved.backup_id.as_deref(),
            &target,
            &dest.path,
        )
        .map_err(anyhow::Error::msg)?
        .clone();
        let work = cfg.data_dir.with_extension("recovery");
        if work.exists() {
            std::fs::remove_dir_all(&work)?;
        }
        std::fs::create_dir_all(&work)?;
        let binlogs = work.join("binlogs");
        let plan = if target == recovery_plan::Target::BaseOnly {
            recovery_plan::plan(f, &base.record.gtid, &[], &target)
        } else {
            let runs = recovery::fetch_archive(&dest, &binlogs)
                .await
                .map_err(|e| anyhow::anyhow!("recovery refused, nothing was made: {e:#}"))?;
            recovery_plan::plan(f, &base.record.gtid, &runs, &target)
        }
        .map_err(|e| anyhow::anyhow!("recovery refused, nothing was made: {e}"))?;
        tracing::info!(
            backup = base.record.id,
            base_gtid = base.record.gtid,
            replay = plan.applied,
            orphaned = plan.orphaned,
            to = plan.position,
            "recovery planned"
        );

        // The base backup.
        self.set_phase(
            InstancePhase::Initializing,
            format!(
                "recovery: restoring base backup {} ({} bytes)",
                base.record.id, base.record.raw_bytes
            ),
        );
        let gtid = restore_base(cfg, &dest, &base).await?;

        // Replay, on a private server, through its own applier.
        self.set_phase(
            InstancePhase::Initializing,
            format!(
                "recovery: replaying {} transactions from the binlog archive",
                plan.applied
            ),
        );
        let replay_seconds = self.replay(&gtid, &binlogs, &work, &plan).await?;

        let record = Recovered {
            backup_id: base.record.id.clone(),
            gtid: plan.position.clone(),
            last_transaction: plan
                .last
                .as_ref()
                .map(|t| t.to_string())
                .unwrap_or_default(),
            last_commit_time: plan
                .last_commit_us
                .map(recovery_plan::show_time)
                .unwrap_or_default(),
            replayed: plan.applied,
            orphaned: plan.orphaned,
            replay_millis: Some((replay_seconds * 1000.0).round() as u64),
            completed_at: jiff::Timestamp::now().to_string(),
        };
        std::fs::remove_dir_all(&work).ok();
        tracing::info!(
            backup = record.backup_id,
            gtid = record.gtid,
            last = record.last_transaction,
            last_commit = record.last_commit_time,
            replayed = record.replayed,
            "recovered"
        );
        let how = format!(
            "recovered from backup {} to {}",
            record.backup_id, record.gtid
        );
        bootstrap::record_and_mark(cfg, RECOVERED_FILE, &record, &how)?;
        Ok(())
    }
}

/// Restore base backup `base` from `dest` into the data directory; the
/// GTID state it holds.
async fn restore_base(
    cfg: &InstanceConfig,
    dest: &destination::Destination,
    base: &base_backup::Manifest,
) -> anyhow::Result<String> {
    let tmp = cfg.data_dir.with_extension("clone");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)?;
    }
    std::fs::create_dir_all(&tmp)?;
    Ok(match cfg.flavor() {
        Flavor::Mariadb => {
            let (mut extract, mut stdin, tail) = clone::spawn_extract(cfg, &tmp)?;
            let fetched = stored_stream::fetch(dest, &base.stored(), &mut stdin).await;
            let _ = stdin.shutdown().await;
            drop(stdin);
            let extracted = clone::finish_extract(&mut extract, &tail).await;
            fetched?;
            extracted?;
            clone::prepare_and_install(cfg, &tmp).await?
        }
        Flavor::Mysql => {
            let mut untar = tokio::process::Command::new("tar")
                .arg("-x")
                .arg("-C")
                .arg(&tmp)
                .arg("-f")
                .arg("-")
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| anyhow::anyhow!("cannot run tar: {e}"))?;
            let tail =
                crate::clone_progress::tail_lines(untar.stderr.take().expect("piped"), "tar");
            let mut stdin = untar.stdin.take().expect("piped");
            let fetched = stored_stream::fetch(dest, &base.stored(), &mut stdin).await;
            let _ = stdin.shutdown().await;
            drop(stdin);
            let st = untar.wait().await?;
            fetched?;
            anyhow::ensure!(
                st.success(),
                "unpacking the backup failed ({st}): {}",
                crate::clone_progress::tail_text(&tail)
            );
            bootstrap::replace_data_dir(cfg, &tmp, "a backup")?;
            base.record.gtid.clone()
        }
    })
}
