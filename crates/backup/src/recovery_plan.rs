//! Which binary log bytes recovery replays on top of a base backup to reach
//! its target: a pure function of the base backup's GTID position, the
//! archive's runs with their pieces' indexes, and the target.
//!
//! - Runs are taken in the order they began; within a run, files in order,
//!   pieces by offset. A piece missing inside a file, a file missing after a
//!   rotation, or pieces missing before the run's head, are a *gap*.
//! - A transaction is applied once: one the base or an earlier run already
//!   holds is skipped (runs overlap where a new primary starts archiving).
//! - A transaction an earlier run archived that a later run's history does
//!   not hold was lost in a failover (it was never acknowledged under
//!   `dataDurability: required`): it is *orphaned* and not applied, as the
//!   history that went on did not hold it. On MariaDB a transaction is also
//!   orphaned when a later run archived another with the same domain and
//!   sequence number.
//! - Every applied transaction must follow the one before it: the next
//!   sequence number of its domain (MariaDB), the next number of its UUID
//!   (MySQL). Anything else is a gap, named, and nothing is planned: a
//!   recovery that skipped a transaction would be a history that never was.
//! - A time target applies every transaction committed at or before it, and
//!   needs proof the archive reaches it: a later transaction, or a head
//!   saying everything before it was read. A GTID target applies until the
//!   set is held; the latest target applies everything.

use std::collections::{BTreeMap, BTreeSet};

use cnmysql_api::Flavor;
use cnmysql_gtid::mariadb::GtidPos;
use cnmysql_gtid::mysql::GtidSet;

use crate::archive::{Head, PieceIndex, Run};
use crate::binlog::{Tx, TxId};

/// One run as listed and read from the store.
#[derive(Clone, Debug)]
pub struct RunArchive {
    pub run: Run,
    /// Its pieces' indexes, in any order.
    pub pieces: Vec<PieceIndex>,
    pub head: Option<Head>,
}

/// What to recover to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Everything archived.
    Latest,
    /// Every transaction committed at or before this time (microseconds).
    Time(i64),
    /// Until this GTID set (MySQL) or position (MariaDB) is held.
    Gtid(String),
    /// The base backup alone.
    BaseOnly,
}

/// Bytes of one binary log file to replay: its header (`0..header_end`),
/// then each range in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replay {
    pub run: String,
    pub file: String,
    pub header_end: u64,
    pub ranges: Vec<(u64, u64)>,
}

/// What recovery will do, and what it reaches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub replays: Vec<Replay>,
    /// Transactions replayed.
    pub applied: u64,
    /// Transactions left out as lost in a failover.
    pub orphaned: u64,
    pub last: Option<TxId>,
    pub last_commit_us: Option<i64>,
    /// The GTID position (MariaDB) or set (MySQL) recovered to.
    pub position: String,
}

/// The GTID state recovery has reached.
enum Applied {
    /// Per domain: the last server and sequence number.
    Mariadb(BTreeMap<u32, (u32, u64)>),
    Mysql(GtidSet),
}

impl Applied {
    fn parse(flavor: Flavor, s: &str) -> Result<Applied, String> {
        Ok(match flavor {
            Flavor::Mariadb => {
                let pos: GtidPos = s.parse().map_err(|e| format!("{e}"))?;
                Applied::Mariadb(pos.gtids().map(|g| (g.domain, (g.server, g.seq))).collect())
            }
            Flavor::Mysql => Applied::Mysql(s.parse().map_err(|e| format!("{e}"))?),
        })
    }

    fn holds(&self, id: &TxId) -> bool {
        match (self, id) {
            (Applied::Mariadb(m), TxId::Mariadb(g)) => {
                m.get(&g.domain).is_some_and(|&(_, seq)| seq >= g.seq)
            }
            (Applied::Mysql(s), TxId::Mysql { uuid, tag, gno }) => s.contains_gtid(uuid, tag, *gno),
            _ => false,
        }
    }

    /// Does `id` come right after what is held? The reason when not.
    fn follows(&self, id: &TxId) -> Result<(), String> {
        match (self, id) {
            (Applied::Mariadb(m), TxId::Mariadb(g)) => match m.get(&g.domain) {
                // A domain the base never saw: nothing to follow.
                None => Ok(()),
                Some(&(_, seq)) if g.seq == seq + 1 => Ok(()),
                Some(&(server, seq)) => Err(format!(
                    "after {}-{server}-{seq} the next transaction archived is {g}",
                    g.domain
                )),
            },
            (Applied::Mysql(s), TxId::Mysql { uuid, tag, gno }) => {
                if *gno == 1 || s.contains_gtid(uuid, tag, gno - 1) {
                    Ok(())
                } else {
                    Err(format!(
                        "{id} is archived but {uuid}:{} is not (the history holds {s})",
                        gno - 1
                    ))
                }
            }
            _ => Err(format!("{id} is of the other flavour")),
        }
    }

    fn record(&mut self, id: &TxId) {
        match (self, id) {
            (Applied::Mariadb(m), TxId::Mariadb(g)) => {
                let e = m.entry(g.domain).or_insert((g.server, g.seq));
                if g.seq >= e.1 {
                    *e = (g.server, g.seq);
                }
            }
            (Applied::Mysql(s), TxId::Mysql { uuid, tag, gno }) => {
                let _ = s.insert(uuid, tag, *gno);
            }
            _ => {}
        }
    }

    /// Does this state hold all of `target` (a position or set)?
    fn reaches(&self, target: &Applied) -> bool {
        match (self, target) {
            (Applied::Mariadb(m), Applied::Mariadb(t)) => t
                .iter()
                .all(|(d, &(_, seq))| m.get(d).is_some_and(|&(_, s)| s >= seq)),
            (Applied::Mysql(s), Applied::Mysql(t)) => t.is_subset(s),
            _ => false,
        }
    }

    fn text(&self) -> String {
        match self {
            Applied::Mariadb(m) => m
                .iter()
                .map(|(d, (s, n))| format!("{d}-{s}-{n}"))
                .collect::<Vec<_>>()
                .join(","),
            Applied::Mysql(s) => s.to_string(),
        }
    }
}

/// One thing met walking the archive in order.
enum Item<'a> {
    Tx {
        run: usize,
        file: &'a str,
        header_end: u64,
        tx: &'a Tx,
    },
    /// Something is missing here.
    Gap(String),
}

/// Walk each run's files and pieces in order, noting every gap.
fn items(runs: &[RunArchive]) -> Vec<Item<'_>> {
    let mut out = Vec::new();
    for (r, ra) in runs.iter().enumerate() {
        let name = &ra.run.run;
        let mut by_file: BTreeMap<&str, Vec<&PieceIndex>> = BTreeMap::new();
        for p in &ra.pieces {
            by_file.entry(p.file.as_str()).or_default().push(p);
        }
        let mut expect_file: Option<String> = Some(ra.run.first_file.clone());
        let mut last: Option<(String, u64)> = None;
        for (file, mut pieces) in by_file {
            pieces.sort_by_key(|p| p.start);
            if let Some(want) = &expect_file
                && want.as_str() != file
            {
                out.push(Item::Gap(format!(
                    "run {name}: binary log {want} is missing from the archive (the next archived is {file})"
                )));
            }
            let mut at = 0u64;
            let mut header_end = 0u64;
            expect_file = None;
            for p in pieces {
                if p.end <= at && p.start < at {
                    // Held whole by pieces before it (a store that took a
                    // request after it timed out, and its retry).
                    continue;
                }
                if p.start > at {
                    out.push(Item::Gap(format!(
                        "run {name}: bytes {at}-{} of {file} are missing from the archive",
                        p.start
                    )));
                }
                if let Some(h) = p.header_end {
                    header_end = h;
                }
                // Where pieces overlap, what lies before `at` was met already.
                for tx in p.txs.iter().filter(|t| t.start >= at || p.start >= at) {
                    out.push(Item::Tx {
                        run: r,
                        file,
                        header_end,
                        tx,
                    });
                }
                at = at.max(p.end);
                expect_file = p.rotated_to.clone();
            }
            last = Some((file.to_string(), at));
        }
        if let Some(h) = &ra.head {
            let behind = match &last {
                None => true,
                Some((f, at)) => (f.as_str(), *at) < (h.file.as_str(), h.offset),
            };
            if behind {
                let (f, at) = last.unwrap_or_default();
                out.push(Item::Gap(format!(
                    "run {name}: the archive holds {f} up to {at}, but the run recorded {} up to {} as archived: pieces are missing",
                    h.file, h.offset
                )));
            }
        }
    }
    out
}

/// Which transactions of earlier runs later runs do not hold.
fn orphans(flavor: Flavor, runs: &[RunArchive]) -> Result<BTreeSet<(usize, TxId)>, String> {
    let mut out = BTreeSet::new();
    let starts: Vec<Applied> = runs
        .iter()
        .map(|r| {
            Applied::parse(flavor, &r.run.start_position)
                .map_err(|e| format!("run {}: its start position cannot be read: {e}", r.run.run))
        })
        .collect::<Result<_, _>>()?;
    // MariaDB: (domain, seq) -> server, of each run's transactions.
    let taken: Vec<BTreeMap<(u32, u64), u32>> = runs
        .iter()
        .map(|r| {
            r.pieces
                .iter()
                .flat_map(|p| &p.txs)
                .filter_map(|t| match &t.id {
                    TxId::Mariadb(g) => Some(((g.domain, g.seq), g.server)),
                    _ => None,
                })
                .collect()
        })
        .collect();
    for (k, r) in runs.iter().enumerate() {
        for t in r.pieces.iter().flat_map(|p| &p.txs) {
            let lost = (k + 1..runs.len()).any(|j| {
                let not_held = !starts[j].holds(&t.id);
                let retaken = match &t.id {
                    TxId::Mariadb(g) => taken[j]
                        .get(&(g.domain, g.seq))
                        .is_some_and(|&s| s != g.server),
                    _ => false,
                };
                not_held || retaken
            });
            if lost {
                out.insert((k, t.id.clone()));
            }
        }
    }
    Ok(out)
}

/// Whether the position `inner` is within `outer` (a backup taken before
/// a GTID target).
pub fn position_within(flavor: Flavor, inner: &str, outer: &str) -> bool {
    match (Applied::parse(flavor, outer), Applied::parse(flavor, inner)) {
        (Ok(o), Ok(i)) => o.reaches(&i),
        _ => false,
    }
}

/// Plan the replay from a base backup at `base_position` to `target`.
pub fn plan(
    flavor: Flavor,
    base_position: &str,
    runs: &[RunArchive],
    target: &Target,
) -> Result<Plan, String> {
    let mut applied = Applied::parse(flavor, base_position)
        .map_err(|e| format!("the base backup's GTID position cannot be read: {e}"))?;
    let mut plan = Plan {
        replays: Vec::new(),
        applied: 0,
        orphaned: 0,
        last: None,
        last_commit_us: None,
        position: applied.text(),
    };
    if *target == Target::BaseOnly {
        return Ok(plan);
    }
    let goal = match target {
        Target::Gtid(s) => Some(
            Applied::parse(flavor, s)
                .map_err(|e| format!("spec.bootstrap.recovery.recoveryTarget.targetGTID: {e}"))?,
        ),
        _ => None,
    };
    let mut sorted: Vec<RunArchive> = runs.to_vec();
    sorted.sort_by(|a, b| a.run.run.cmp(&b.run.run));
    let lost = orphans(flavor, &sorted)?;
    let mut reached = false;
    for item in items(&sorted) {
        if let Some(g) = &goal
            && applied.reaches(g)
        {
            reached = true;
            break;
        }
        let (run, file, header_end, tx) = match item {
            Item::Gap(why) => {
                return Err(format!(
                    "the binlog archive has a gap before the recovery target: {why}; recover to an earlier target, or from a base backup taken after the gap"
                ));
            }
            Item::Tx {
                run,
                file,
                header_end,
                tx,
            } => (run, file, header_end, tx),
        };
        if lost.contains(&(run, tx.id.clone())) {
            plan.orphaned += 1;
            continue;
        }
        if applied.holds(&tx.id) {
            continue;
        }
        if let Target::Time(t) = target
            && tx.commit_us > *t
        {
            reached = true;
            break;
        }
        applied.follows(&tx.id).map_err(|why| {
            format!(
                "the binlog archive has a gap: {why} (run {}, {file}); recover to an earlier target, or from a base backup taken after the gap",
                sorted[run].run.run
            )
        })?;
        applied.record(&tx.id);
        plan.applied += 1;
        plan.last = Some(tx.id.clone());
        plan.last_commit_us = Some(tx.commit_us);
        let run_name = &sorted[run].run.run;
        match plan.replays.last_mut() {
            Some(r) if &r.run == run_name && r.file == file => match r.ranges.last_mut() {
                Some(last) if last.1 == tx.start => last.1 = tx.end,
                _ => r.ranges.push((tx.start, tx.end)),
            },
            _ => plan.replays.push(Replay {
                run: run_name.clone(),
                file: file.to_string(),
                header_end,
                ranges: vec![(tx.start, tx.end)],
            }),
        }
    }
    if let Some(g) = &goal
        && applied.reaches(g)
    {
        reached = true;
    }
    match target {
        Target::Gtid(s) if !reached => {
            return Err(format!(
                "the target GTID {s} is not in the binlog archive: it reaches {}",
                applied.text()
            ));
        }
        Target::Time(t) if !reached => {
            let complete = sorted
                .iter()
                .rev()
                .find_map(|r| r.head.as_ref())
                .map(|h| h.complete_until_us)
                .unwrap_or(i64::MIN);
            if complete < *t {
                return Err(format!(
                    "the binlog archive is complete only up to {}, before the target time {}: wait until archiving catches up, or choose an earlier time",
                    show_time(complete),
                    show_time(*t)
                ));
            }
        }
        _ => {}
    }
    plan.position = applied.text();
    Ok(plan)
}

/// A time in microseconds as RFC 3339.
pub fn show_time(us: i64) -> String {
    jiff::Timestamp::from_microsecond(us)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| "(never)".into())
}

#[cfg(test)]
mod tests;
