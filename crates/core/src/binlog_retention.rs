//! Which of an instance's binary logs may be purged. The servers never
//! purge by themselves (the settings that would make them are the
//! operator's); each instance manager purges its own files by this rule:
//!
//! * the file being written is kept;
//! * a file is kept while anyone who reads binary logs lacks some of what
//!   it holds: each replica of the cluster (its executed history as last
//!   reported, so a stale report only keeps more) and the binlog archive
//!   (`status.backup.archive.held`), whose new primary's run starts from
//!   the first file the archive does not hold all of;
//! * a file is kept for `spec.mysql.binlogRetentionSeconds` after it was
//!   last written, for readers the cluster cannot see (a replica cluster
//!   away a while); a connected reader's file is kept by the server itself
//!   (`PURGE BINARY LOGS` stops there);
//! * when the volume holding the files passes [`PRESSURE_PERCENT`] used
//!   (a directory on a file system shared with the rest of the host, as
//!   local mode's are: when less than [`SHARED_FREE_RESERVES`] disk-guard
//!   reserves are left), the retention time and replicas that do not report (down, their Pod
//!   gone) no longer keep files: a replica that comes back to find its
//!   files gone re-clones itself. The archive and every replica that
//!   reports still keep theirs: a full disk then refuses writes
//!   (`disk_guard`) rather than break point-in-time recovery or strand a
//!   running replica.
//!
//! Files go oldest first, and never past the first one kept.

use cnmysql_api::{ClusterSpec, ClusterStatus, Flavor, VolumeUsage};
use cnmysql_gtid::History;

use crate::disk_guard;
use crate::status::parse_history;

/// Past this share of the volume used (percent), the retention time and
/// absent replicas no longer keep files.
pub const PRESSURE_PERCENT: u64 = 70;

/// On a file system shared with the rest of the host (local mode), the
/// share used says nothing of the cluster: a laptop's disk 80% full of
/// other things is no reason to drop a replica's files. There the volume
/// is short once less than this many disk-guard reserves
/// ([`crate::disk_guard::reserve`]) are free.
pub const SHARED_FREE_RESERVES: u64 = 4;

/// One binary log file, oldest first.
#[derive(Clone, Debug, PartialEq)]
pub struct BinlogFile {
    pub name: String,
    pub bytes: u64,
    /// Every transaction written up to this file's end (the next file's
    /// first event: MySQL `Previous_gtids`, MariaDB `Gtid_list`); None for
    /// the file being written, or one not read yet.
    pub ends: Option<History>,
    /// When it was last written (ms since the epoch).
    pub written_ms: i64,
}

/// Someone who reads the binary logs, and what they hold.
#[derive(Clone, Debug, PartialEq)]
pub struct Need {
    /// Who, as the status says it (`replica c-2`, `the binlog archive`).
    pub who: String,
    /// What they hold; None when unknown (everything is kept for them).
    pub history: Option<History>,
    /// Kept for even when the volume is under pressure.
    pub hard: bool,
}

/// How long to keep files anyway, and whether the volume is short.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Policy {
    pub retention_ms: i64,
    pub pressure: bool,
}

/// What to purge, and why the first file kept is kept.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// `PURGE BINARY LOGS TO` this file: every file before it goes.
    pub purge_to: Option<String>,
    pub files: usize,
    pub bytes: u64,
    pub kept_for: String,
}

/// The rule, over the files oldest first.
pub fn decide(files: &[BinlogFile], needs: &[Need], policy: Policy, now_ms: i64) -> Decision {
    let mut out = Decision::default();
    for (i, f) in files.iter().enumerate() {
        let last = i + 1 == files.len();
        if let Some(why) = keeps(f, last, needs, policy, now_ms) {
            out.kept_for = why;
            if i > 0 {
                out.purge_to = Some(f.name.clone());
            }
            return out;
        }
        out.files += 1;
        out.bytes += f.bytes;
    }
    // Only the file being written is ever kept for nothing: an empty list.
    Decision::default()
}

/// Why `f` is kept, or None when it may go.
fn keeps(
    f: &BinlogFile,
    last: bool,
    needs: &[Need],
    policy: Policy,
    now_ms: i64,
) -> Option<String> {
    if last {
        return Some("the file being written".into());
    }
    let Some(ends) = &f.ends else {
        return Some("what it holds is not read yet".into());
    };
    let age_ms = now_ms.saturating_sub(f.written_ms);
    if !policy.pressure && age_ms < policy.retention_ms {
        return Some(format!(
            "spec.mysql.binlogRetentionSeconds: written {} s ago, kept {} s",
            age_ms / 1000,
            policy.retention_ms / 1000
        ));
    }
    needs
        .iter()
        .filter(|n| n.hard || !policy.pressure)
        .find_map(|n| match &n.history {
            None => Some(format!("{} (what it holds is not known)", n.who)),
            Some(h) if !covers(h, ends) => Some(format!("{} lacks transactions in it", n.who)),
            Some(_) => None,
        })
}

/// Does `held` include everything up to `ends`? MySQL by set. MariaDB
/// by the last GTID of each domain the file reaches: the reader's state
/// must name its server with a sequence number as high (and the domain
/// no lower), as a replica of that server's does. A history that only
/// passed it in sequence numbers of another server (a diverged former
/// primary's, as the status may still show it for a moment after its
/// re-clone) does not count.
fn covers(held: &History, ends: &History) -> bool {
    match (held, ends) {
        (History::Mysql(h), History::Mysql(e)) => e.is_subset(h),
        (History::Mariadb(h), History::Mariadb(e)) => h.contains_pos(&e.pos()),
        _ => false,
    }
}

/// Who reads `me`'s binary logs: the cluster's other members (not a
/// diverged one or one being re-cloned: they copy the data again) and,
/// when binary logs are archived, the archive.
pub fn needs(spec: &ClusterSpec, cluster: &str, status: &ClusterStatus, me: &str) -> Vec<Need> {
    let flavor = spec.mysql.flavor;
    let history = |text: Option<&String>| {
        text.filter(|t| !t.trim().is_empty())
            .and_then(|t| parse_history(flavor, t).ok())
    };
    let leaving = |name: &str| {
        status.diverged_instances.iter().any(|n| n == name)
            || status.reinit_requests.iter().any(|n| n == name)
            || status.reinitializing.as_deref() == Some(name)
    };
    let mut out: Vec<Need> = (1..=spec.instances.max(0) as u32)
        .map(|n| cnmysql_api::names::instance_name(cluster, n))
        .filter(|name| name != me && !leaving(name))
        .map(|name| Need {
            hard: status
                .instance_states
                .get(&name)
                .is_some_and(|s| s.role != "unreachable"),
            history: history(status.gtid_executed_by_instance.get(&name)),
            who: if status.current_primary.as_deref() == Some(name.as_str()) {
                format!("primary {name}")
            } else {
                format!("replica {name}")
            },
        })
        .collect();
    if spec.backup.as_ref().is_some_and(|b| b.archive_binlogs) {
        let held = status
            .backup
            .as_ref()
            .and_then(|b| b.archive.as_ref())
            .map(|a| &a.held);
        out.push(Need {
            who: "the binlog archive".into(),
            history: history(held),
            hard: true,
        });
    }
    out
}

/// Is room short: the volume holding this instance's binary logs past
/// [`PRESSURE_PERCENT`] (`shared`: the volume is a directory of a file
/// system shared with the host, short by [`SHARED_FREE_RESERVES`]), or
/// writes refused, by this primary or by the cluster
/// (`status.writesRefused`, any instance's volume). The second matters on
/// a replica: the disk guard refuses writes for its volume while it is
/// above the pressure mark (the guard lets go only with room to spare),
/// and files kept for the retention time would then never go.
pub fn pressure(
    volumes: &[VolumeUsage],
    shared: bool,
    writes_refused: bool,
    status: &ClusterStatus,
) -> bool {
    let holding = volumes
        .iter()
        .find(|v| v.volume == "binlogs")
        .or_else(|| volumes.iter().find(|v| v.volume == "data"));
    let short = |v: &VolumeUsage| match shared {
        true => v.available_bytes < disk_guard::reserve(v).saturating_mul(SHARED_FREE_RESERVES),
        false => v.used_percent() >= PRESSURE_PERCENT,
    };
    writes_refused || status.writes_refused.is_some() || holding.is_some_and(short)
}

/// The policy for `spec`.
pub fn policy(spec: &ClusterSpec, pressure: bool) -> Policy {
    Policy {
        retention_ms: spec
            .mysql
            .binlog_retention_seconds
            .max(0)
            .saturating_mul(1000),
        pressure,
    }
}

/// A file's end as the server says it: MySQL's `Previous_gtids` text,
/// MariaDB's `Gtid_list` (`[0-1-100,0-2-5]`).
pub fn parse_file_end(flavor: Flavor, text: &str) -> Option<History> {
    let t = text.trim().trim_start_matches('[').trim_end_matches(']');
    parse_history(flavor, &t.replace('\n', "")).ok()
}

#[cfg(test)]
mod tests;
