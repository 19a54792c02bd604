//! Reading what recovery needs from the store, before anything is made: the
//! base backup to start from, and every binlog piece, checked and written
//! at its place in a local copy of its file (sparse where the run did not
//! start at the file's beginning), with the indexes the plan is made from.

use std::path::Path;

use cnmysql_api::Flavor;
use cnmysql_api::backup::RecoveryTarget;

use crate::archive_mirror::ArchiveMirror;
use crate::base_backup::Manifest;
use crate::destination::Destination;
use crate::recovery_plan::{RunArchive, Target};

const TARGET: &str = "spec.bootstrap.recovery.recoveryTarget";

/// The target a recovery spec asks for (none: the latest state).
pub fn target(t: Option<&RecoveryTarget>) -> Result<Target, String> {
    let Some(t) = t else {
        return Ok(Target::Latest);
    };
    let set = t.targets_set();
    if set > 1 {
        return Err(format!(
            "{TARGET}: set one of targetTime, targetGTID and targetImmediate, not {set}"
        ));
    }
    if let Some(time) = &t.target_time {
        let ts: jiff::Timestamp = time.parse().map_err(|e| {
            format!("{TARGET}.targetTime: {time:?} is not an RFC 3339 time ({e}); write it like 2026-11-24T20:15:00Z")
        })?;
        return Ok(Target::Time(ts.as_microsecond()));
    }
    if let Some(g) = &t.target_gtid {
        return Ok(Target::Gtid(g.clone()));
    }
    if t.target_immediate {
        return Ok(Target::BaseOnly);
    }
    Ok(Target::Latest)
}

/// The base backup to recover from: the one named, or the latest completed
/// one that ends before a time target (or that a GTID target holds).
pub fn choose_base<'a>(
    flavor: Flavor,
    backups: &'a [Manifest],
    id: Option<&str>,
    target: &Target,
    source: &str,
) -> Result<&'a Manifest, String> {
    let done: Vec<&Manifest> = backups.iter().filter(|m| m.completed()).collect();
    if let Some(id) = id {
        return done.into_iter().find(|m| m.record.id == id).ok_or_else(|| {
            format!(
                "spec.bootstrap.recovery.source.backupId: {source} holds no completed backup {id} (completed: {})",
                list(backups)
            )
        });
    }
    let fits = |m: &&Manifest| match target {
        Target::Time(t) => m.stopped_us().is_some_and(|s| s <= *t),
        Target::Gtid(g) => crate::recovery_plan::position_within(flavor, &m.record.gtid, g),
        _ => true,
    };
    done.into_iter().rev().find(fits).ok_or_else(|| {
        format!(
            "{source} holds no completed base backup before the recovery target (backups: {})",
            list(backups)
        )
    })
}

fn list(backups: &[Manifest]) -> String {
    if backups.is_empty() {
        return "none".into();
    }
    backups
        .iter()
        .map(|m| format!("{} {}", m.record.id, m.record.phase))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Read the whole binlog archive: each run's description, head and pieces.
/// Pieces are checked (a damaged one is refused, named) and written into
/// `dir/<run>/<file>` at their offsets.
pub async fn fetch_archive(dest: &Destination, dir: &Path) -> anyhow::Result<Vec<RunArchive>> {
    ArchiveMirror::new(dir).refresh(dest).await
}
