//! Retention (`spec.backup.retentionPolicy`): which base backups and binlog
//! runs may go. A pure decision over the manifests and the runs' heads,
//! then the deletions.
//!
//! - Base backups that stopped before the window are deleted, failed ones
//!   too; the newest completed backup is always kept, however old.
//! - A binlog run goes only when it has ended, is not the newest, and the
//!   oldest kept backup holds its last transaction: nothing a kept backup
//!   could need to reach any later point is ever deleted. A run that cannot
//!   be shown so (no head, an orphaned last transaction) stays.

use cnmysql_api::Flavor;
use futures::TryStreamExt;
use object_store::ObjectStoreExt;

use crate::archive::{self, Head};
use crate::base_backup::{BASE, Manifest};
use crate::destination::Destination;
use crate::recovery_plan::position_within;

/// What retention deletes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    pub backups: Vec<String>,
    pub runs: Vec<String>,
}

/// Decide what goes, keeping `keep_seconds` back from `now_us`.
pub fn decide(
    flavor: Flavor,
    backups: &[Manifest],
    runs: &[(String, Option<Head>)],
    keep_seconds: u64,
    now_us: i64,
) -> Pruned {
    let cutoff = now_us - (keep_seconds as i64).saturating_mul(1_000_000);
    let mut sorted: Vec<&Manifest> = backups.iter().collect();
    sorted.sort_by(|a, b| a.record.id.cmp(&b.record.id));
    let newest_done = sorted
        .iter()
        .rev()
        .find(|m| m.completed())
        .map(|m| m.record.id.clone());
    let old = |m: &Manifest| {
        m.stopped_us()
            .or_else(|| {
                m.record
                    .started_at
                    .parse::<jiff::Timestamp>()
                    .ok()
                    .map(|t| t.as_microsecond())
            })
            .is_some_and(|t| t < cutoff)
    };
    let mut out = Pruned::default();
    for m in &sorted {
        if Some(&m.record.id) != newest_done.as_ref() && old(m) {
            out.backups.push(m.record.id.clone());
        }
    }
    let oldest_kept = sorted
        .iter()
        .find(|m| m.completed() && !out.backups.contains(&m.record.id));
    let Some(base) = oldest_kept else {
        return out;
    };
    let mut names: Vec<&(String, Option<Head>)> = runs.iter().collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    let newest = names.last().map(|r| r.0.clone());
    for (run, head) in names {
        if Some(run) == newest.as_ref() {
            continue;
        }
        let Some(h) = head else { continue };
        let Some(last) = &h.last else { continue };
        if h.ended && position_within(flavor, &last.to_string(), &base.record.gtid) {
            out.runs.push(run.clone());
        }
    }
    out
}

/// Apply a retention policy (`30d`) to the store as of `now_us`: what
/// went, and the stop time of the oldest backup kept (the first point a
/// recovery can reach).
pub async fn apply(
    dest: &Destination,
    flavor: Flavor,
    policy: &str,
    now_us: i64,
) -> anyhow::Result<(Pruned, String)> {
    let keep = cnmysql_api::validation::retention_seconds(policy).ok_or_else(|| {
        anyhow::anyhow!(
            "spec.backup.retentionPolicy: {policy:?} is not a retention; write 30d, 4w or 12h"
        )
    })?;
    let backups = crate::base_backup::list(dest).await?;
    let heads = heads(dest).await?;
    let pruned = decide(flavor, &backups, &heads, keep, now_us);
    if !pruned.backups.is_empty() || !pruned.runs.is_empty() {
        delete(dest, &pruned).await?;
    }
    let first = backups
        .iter()
        .filter(|m| m.completed() && !pruned.backups.contains(&m.record.id))
        .map(|m| m.record.stopped_at.clone())
        .next()
        .unwrap_or_default();
    Ok((pruned, first))
}

impl Pruned {
    /// What went, for an event.
    pub fn describe(&self, policy: &str) -> String {
        format!(
            "retention {policy}: deleted base backups [{}] and binlog runs [{}]",
            self.backups.join(", "),
            self.runs.join(", ")
        )
    }

    pub fn is_empty(&self) -> bool {
        self.backups.is_empty() && self.runs.is_empty()
    }
}

/// Every run's head (none when it has no head yet).
pub async fn heads(dest: &Destination) -> anyhow::Result<Vec<(String, Option<Head>)>> {
    let listed = dest
        .store
        .list_with_delimiter(Some(&dest.key(archive::BINLOGS)))
        .await?;
    let mut out = Vec::new();
    for p in listed.common_prefixes {
        let Some(run) = p.filename().map(str::to_string) else {
            continue;
        };
        let head = match dest.store.get(&dest.key(&archive::head_key(&run))).await {
            Ok(r) => serde_json::from_slice(&r.bytes().await?).ok(),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        out.push((run, head));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Delete what `pruned` names: a backup's manifest first (it is never used
/// half-deleted), then its data; a run's pieces, then its head and
/// description.
pub async fn delete(dest: &Destination, pruned: &Pruned) -> anyhow::Result<()> {
    for id in &pruned.backups {
        let manifest = dest.key(&format!("{BASE}/{id}/backup.json"));
        match dest.store.delete(&manifest).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        remove_prefix(dest, &format!("{BASE}/{id}")).await?;
    }
    for run in &pruned.runs {
        remove_prefix(dest, &format!("{}/{run}", archive::BINLOGS)).await?;
    }
    Ok(())
}

async fn remove_prefix(dest: &Destination, name: &str) -> anyhow::Result<()> {
    let prefix = dest.key(name);
    let mut objects: Vec<object_store::path::Path> = dest
        .store
        .list(Some(&prefix))
        .map_ok(|o| o.location)
        .try_collect()
        .await?;
    // Pieces before the head and the description.
    objects.sort_by_key(|p| {
        let s = p.as_ref();
        (
            s.ends_with("run.json") || s.ends_with("head.json"),
            s.to_string(),
        )
    });
    for o in objects {
        match dest.store.delete(&o).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cnmysql_api::backup::BackupRecord;

    const HOUR: i64 = 3_600_000_000;

    fn backup(id: &str, hour: i64, gtid: &str, ok: bool) -> Manifest {
        let at = jiff::Timestamp::from_microsecond(hour * HOUR)
            .unwrap()
            .to_string();
        Manifest {
            record: BackupRecord {
                id: id.into(),
                phase: if ok { "completed" } else { "failed" }.into(),
                instance: "db-1".into(),
                started_at: at.clone(),
                stopped_at: at,
                gtid: gtid.into(),
                ..Default::default()
            },
            flavor: Flavor::Mariadb,
            format: "mbstream".into(),
            key: String::new(),
            sha256: String::new(),
            server_version: String::new(),
        }
    }

    fn head(last: Option<&str>, ended: bool) -> Option<Head> {
        Some(Head {
            file: "b.000001".into(),
            offset: 0,
            last: last.map(|l| l.parse().unwrap()),
            last_commit_us: 0,
            complete_until_us: 0,
            ended,
            state: String::new(),
        })
    }

    #[test]
    fn old_backups_go_with_the_runs_no_kept_backup_needs() {
        let backups = [
            backup("b1", 1, "0-1-10", true),
            backup("b2", 2, "0-1-20", false),
            backup("b3", 30, "0-2-300", true),
            backup("b4", 50, "0-2-500", true),
        ];
        let runs = [
            ("r1".to_string(), head(Some("0-1-250"), true)),
            ("r2".to_string(), head(Some("0-2-350"), true)),
            ("r3".to_string(), head(None, true)),
            ("r4".to_string(), head(Some("0-2-600"), false)),
        ];
        // Keep 24 hours at hour 52: b3 (hour 30) and b4 stay.
        let p = decide(Flavor::Mariadb, &backups, &runs, 24 * 3600, 52 * HOUR);
        assert_eq!(p.backups, ["b1", "b2"]);
        // r1 ends before b3's position; r2 goes past it and stays; a run
        // without a transaction and the newest run stay.
        assert_eq!(p.runs, ["r1"]);
    }

    #[test]
    fn the_newest_backup_is_kept_however_old_and_without_one_no_run_goes() {
        let backups = [
            backup("b1", 1, "0-1-10", true),
            backup("b2", 2, "0-1-20", true),
        ];
        let runs = [
            ("r1".to_string(), head(Some("0-1-5"), true)),
            ("r2".to_string(), head(Some("0-1-30"), false)),
        ];
        let p = decide(Flavor::Mariadb, &backups, &runs, 3600, 100 * HOUR);
        assert_eq!(p.backups, ["b1"]);
        assert_eq!(p.runs, ["r1"]);
        let none = decide(Flavor::Mariadb, &[], &runs, 3600, 100 * HOUR);
        assert_eq!(none, Pruned::default());
    }
}
