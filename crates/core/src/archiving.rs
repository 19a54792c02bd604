//! What the Cluster's status says of continuous binlog archiving, on both
//! platforms: the `ContinuousArchiving` condition and `status.backup`'s
//! `archive` (the current primary's report) and `recovered` (what the
//! instance the Cluster was recovered into reached). Pure.
//!
//! The archive's reach moves every second; the status is rewritten for it
//! at most every `REFRESH_MS`, and at once when something else changes (a
//! new run, an error, its end).

use cnmysql_api::backup::{ArchiveStatus, BackupStatus, Recovered};

use crate::status::Snapshot;

pub const CONDITION: &str = "ContinuousArchiving";

/// How stale the recorded reach may grow before the status is rewritten.
pub const REFRESH_MS: i64 = 30_000;

fn archiving(s: &Snapshot) -> bool {
    s.spec.backup.as_ref().is_some_and(|b| b.archive_binlogs)
}

/// The primary's archiving report, when it gave one.
fn primary_archive(s: &Snapshot) -> Option<(String, Option<ArchiveStatus>)> {
    let p = s.status.current_primary.as_deref()?;
    let st = s.get(p)?.status.as_ref()?;
    Some((p.to_string(), st.archive.clone()))
}

/// The `ContinuousArchiving` condition: (status, reason, message).
pub fn condition(s: &Snapshot) -> Option<(bool, String, String)> {
    if !archiving(s) {
        return None;
    }
    Some(match primary_archive(s) {
        None => (
            false,
            "PrimaryUnknown".into(),
            "no primary reports on archiving".into(),
        ),
        Some((p, None)) => (
            false,
            "NotStarted".into(),
            format!("the primary {p} does not archive yet"),
        ),
        Some((p, Some(a))) if !a.error.is_empty() => (
            false,
            "Failing".into(),
            format!(
                "the primary {p} cannot archive since {}: {}",
                a.failing_since, a.error
            ),
        ),
        Some((p, Some(a))) => (
            true,
            "Archiving".into(),
            format!("the primary {p} archives its binary logs (run {})", a.run),
        ),
    })
}

/// `status.backup` as this snapshot would have it: the archive of the
/// current primary (kept as last recorded while none reports), and the
/// recovery an instance reports.
pub fn desired(s: &Snapshot) -> Option<BackupStatus> {
    let mut b = s.status.backup.clone().unwrap_or_default();
    if archiving(s)
        && let Some((_, Some(mut a))) = primary_archive(s)
    {
        a.lag_seconds = None;
        b.archive = Some(a);
    }
    let recovered: Option<Recovered> = s
        .instances
        .iter()
        .filter_map(|i| i.status.as_ref()?.recovered.clone())
        .next();
    if recovered.is_some() && b.recovered.is_none() {
        b.recovered = recovered;
    }
    (b != BackupStatus::default() || s.status.backup.is_some()).then_some(b)
}

/// Whether `new` is worth a status write over `old`: anything but the
/// archive's moving reach differs, or that reach is `REFRESH_MS` newer.
pub fn worth_writing(old: Option<&BackupStatus>, new: &BackupStatus) -> bool {
    let Some(old) = old else { return true };
    let strip = |b: &BackupStatus| {
        let mut b = b.clone();
        if let Some(a) = &mut b.archive {
            a.offset = 0;
            a.last_transaction.clear();
            a.last_commit_time.clear();
            a.last_archived_time.clear();
            a.complete_until.clear();
            a.pieces = 0;
            a.bytes = 0;
        }
        b
    };
    if strip(old) != strip(new) {
        return true;
    }
    let reach = |b: &BackupStatus| {
        b.archive
            .as_ref()
            .and_then(|a| crate::time::parse_ms(&a.complete_until))
    };
    match (reach(old), reach(new)) {
        (Some(o), Some(n)) => n - o >= REFRESH_MS,
        (o, n) => o != n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    fn with_archive(error: &str, until: &str) -> Snapshot {
        let mut s = snapshot(three());
        s.spec.backup = Some(Default::default());
        s.spec.backup.as_mut().unwrap().archive_binlogs = true;
        let st = s.instances[0].status.as_mut().unwrap();
        st.archive = Some(ArchiveStatus {
            run: "r1".into(),
            complete_until: until.into(),
            error: error.into(),
            failing_since: if error.is_empty() {
                ""
            } else {
                "2026-11-24T20:00:00Z"
            }
            .into(),
            lag_seconds: Some(0.5),
            ..Default::default()
        });
        s
    }

    #[test]
    fn the_condition_follows_the_primary_s_report() {
        let s = with_archive("", "2026-11-24T20:00:00Z");
        assert_eq!(condition(&s).unwrap().1, "Archiving");
        let s = with_archive("store unreachable", "2026-11-24T20:00:00Z");
        let (on, reason, msg) = condition(&s).unwrap();
        assert!(!on);
        assert_eq!(reason, "Failing");
        assert!(msg.contains("store unreachable"), "{msg}");
        let mut s = snapshot(three());
        assert_eq!(condition(&s), None);
        s.spec.backup = Some(Default::default());
        s.spec.backup.as_mut().unwrap().archive_binlogs = true;
        assert_eq!(condition(&s).unwrap().1, "NotStarted");
    }

    #[test]
    fn the_moving_reach_is_written_only_every_refresh() {
        let a = desired(&with_archive("", "2026-11-24T20:00:00Z")).unwrap();
        assert_eq!(a.archive.as_ref().unwrap().lag_seconds, None);
        let b = desired(&with_archive("", "2026-11-24T20:00:10Z")).unwrap();
        let c = desired(&with_archive("", "2026-11-24T20:00:31Z")).unwrap();
        let d = desired(&with_archive("boom", "2026-11-24T20:00:10Z")).unwrap();
        assert!(worth_writing(None, &a));
        assert!(!worth_writing(Some(&a), &b));
        assert!(worth_writing(Some(&a), &c));
        assert!(worth_writing(Some(&a), &d));
    }
}
