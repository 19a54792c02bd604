//! Automatic failover: when the primary fails, wait `failoverDelay`, pick a
//! candidate only when GTID history proves it safe, wait out the old
//! primary's lease, fence the old primary, then name the candidate target.
//! Anything uncertain blocks, with the reason.

use cnmysql_api::Phase;
use cnmysql_gtid::{History, Relation};

use crate::lease::Lease;
use crate::status::{InstancePhase, Observed, Role, Snapshot};

/// What the control plane should do about the primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to do: the primary is healthy, or a primary change is already
    /// under way, or the cluster has no established primary yet.
    Nothing,
    /// The primary is healthy again: clear `primaryFailingSince`.
    Recovered,
    /// The primary is failing since this moment; wait for `failoverDelay`.
    Failing { since_ms: i64, reason: String },
    /// The old primary may still hold the lease: try again at this time.
    WaitForLease { until_ms: i64 },
    /// No safe candidate: stay put, report why.
    Blocked { reason: String },
    /// Fence `old` and make `candidate` the target primary.
    Promote { old: String, candidate: String },
}

/// Why the primary counts as failed, if it does.
pub fn primary_failure(s: &Snapshot) -> Option<String> {
    let primary = s.status.current_primary.as_deref()?;
    let Some(o) = s.get(primary) else {
        return Some(format!("{primary} is not part of the cluster"));
    };
    match &o.status {
        None => Some(format!("{primary} is unreachable")),
        Some(st) if !st.mysqld_running => Some(format!("mysqld of {primary} is not running")),
        Some(st) if st.phase == InstancePhase::Failed => {
            Some(format!("{primary} failed: {}", st.message))
        }
        _ => None,
    }
}

/// A replica whose SQL thread is healthy and which is otherwise eligible.
fn eligible(s: &Snapshot, o: &Observed, old: &str) -> Result<(), String> {
    if o.name == old {
        return Err("the failed primary".into());
    }
    if s.is_fenced(&o.name) {
        return Err("fenced".into());
    }
    if s.is_diverged(&o.name) {
        return Err("diverged".into());
    }
    let Some(st) = &o.status else {
        return Err("unreachable".into());
    };
    if !st.mysqld_running || st.phase != InstancePhase::Running {
        return Err(format!("not running ({:?})", st.phase));
    }
    if st.role != Role::Replica {
        return Err("not a replica".into());
    }
    let Some(r) = &st.replication else {
        return Err("no replication configured".into());
    };
    if !r.sql_running {
        return Err("replication SQL thread stopped".into());
    }
    if r.last_sql_errno != 0 {
        return Err(format!(
            "replication SQL error {}: {}",
            r.last_sql_errno, r.last_sql_error
        ));
    }
    Ok(())
}

/// Pick the candidate that provably holds the best history, or say why none can.
///
/// `old_known` is the failed primary's last observed history and `old_source`
/// its GTID source id: a candidate holding transactions from any other source
/// that the old primary never had is an errant transaction, and blocks.
pub fn choose_candidate(
    s: &Snapshot,
    old: &str,
    old_known: Option<&History>,
    old_source: &str,
) -> Result<String, String> {
    let flavor = s.spec.mysql.flavor;
    let mut candidates: Vec<(&Observed, History)> = Vec::new();
    let mut excluded = Vec::new();
    for o in &s.instances {
        match eligible(s, o, old) {
            Ok(()) => {
                let st = o.status.as_ref().expect("eligible means observed");
                match crate::status::received_history(flavor, st) {
                    Ok(h) => candidates.push((o, h)),
                    Err(e) => excluded.push(format!("{}: unreadable GTID state ({e})", o.name)),
                }
            }
            Err(why) if o.name != old => excluded.push(format!("{}: {why}", o.name)),
            Err(_) => {}
        }
    }
    if candidates.is_empty() {
        return Err(format!("no eligible replica ({})", excluded.join("; ")));
    }
    for (i, (a, ha)) in candidates.iter().enumerate() {
        for (b, hb) in &candidates[i + 1..] {
            if ha.relation(hb) == Relation::Diverged {
                return Err(format!(
                    "the GTID histories of {} and {} have diverged",
                    a.name, b.name
                ));
            }
        }
    }
    let best = candidates
        .iter()
        .filter(|(_, h)| candidates.iter().all(|(_, other)| h.contains(other)))
        // Prefer the lowest ordinal among equals, for predictability.
        .min_by_key(|(o, _)| o.ordinal);
    let Some((best, history)) = best else {
        return Err("no candidate holds every transaction the others hold".into());
    };
    for (name, h) in required_histories(s, old) {
        if !history.contains(&h) {
            return Err(format!(
                "{} lacks transactions that {name} holds (dataDurability: required)",
                best.name
            ));
        }
    }
    for (name, target) in refill_targets(s, old) {
        if !crate::status::reaches(history, &target) {
            return Err(format!(
                "{} lacks transactions that {name} may have acknowledged before its restart (its source held {target} after it; dataDurability: required)",
                best.name
            ));
        }
    }
    if let Some(known) = old_known {
        // A replica cluster receives its source's transactions: only those
        // of its own instances (read-only but the primary) can be errant.
        let upstream = crate::role::replica_source(&s.status).is_some();
        let own: Vec<String> = s
            .instances
            .iter()
            .map(|o| s.status_source_id(&o.name))
            .collect();
        let errant: Vec<String> = history
            .sources_missing_from(known)
            .into_iter()
            .filter(|src| src != old_source)
            .filter(|src| !upstream || own.contains(src))
            .collect();
        if !errant.is_empty() {
            return Err(format!(
                "{} holds transactions from source(s) {} that the primary {old} never had (errant transactions)",
                best.name,
                errant.join(", ")
            ));
        }
    }
    Ok(best.name.clone())
}

/// Under `dataDurability: required`, every acknowledged write is on at
/// least `minSyncReplicas` replicas. Unless fewer replicas than that are out
/// of sight, the acknowledging ones may all be unseen, so no choice could be
/// proven to hold every acknowledged write; and the chosen candidate must
/// hold everything every observed replica holds (fenced ones included).
fn durability_allows(s: &Snapshot, old: &str) -> Result<(), String> {
    if !acknowledges_only_with_a_replica(s) {
        return Ok(());
    }
    let others = || {
        s.instances
            .iter()
            .filter(|o| o.name != old && !s.is_diverged(&o.name))
    };
    let unseen: Vec<&str> = others()
        .filter(|o| o.status.as_ref().is_none_or(|st| !st.mysqld_running))
        .map(|o| o.name.as_str())
        .collect();
    let min = s.spec.min_sync_replicas.max(1) as usize;
    if unseen.len() >= min {
        return Err(format!(
            "dataDurability is required and {} replica(s) that may hold acknowledged writes cannot be seen ({})",
            unseen.len(),
            unseen.join(", ")
        ));
    }
    // What a replica acknowledged is in its relay log until applied; a
    // restart empties that log, and until the replica has fetched again
    // what its source held, those writes may be in the old primary's
    // binary log alone. Such a replica is as good as unseen, unless it
    // read its source's position after the restart: that bounds what it
    // lost, and the candidate must hold it (`refill_targets`).
    let refilling: Vec<&str> = others()
        .filter(|o| {
            o.status.as_ref().is_some_and(|st| {
                st.mysqld_running && st.relay_refilling && st.relay_refill_target.is_none()
            })
        })
        .map(|o| o.name.as_str())
        .collect();
    if unseen.len() + refilling.len() >= min {
        return Err(format!(
            "dataDurability is required and {} restarted and has not fetched again from {old} what it may have acknowledged before (a restart empties a replica's relay log); waiting for {old}",
            refilling.join(", ")
        ));
    }
    Ok(())
}

/// Under `dataDurability: required` a primary acknowledges no commit that
/// no replica received.
pub fn acknowledges_only_with_a_replica(s: &Snapshot) -> bool {
    let semi = &s.spec.mysql.semi_sync;
    semi.enabled && semi.data_durability == cnmysql_api::DataDurability::Required
}

/// After its lease's self-fence point a primary whose manager runs is
/// read-only; the replicas stop receiving from it this much later (slack
/// for the clocks of two machines).
pub const SELF_FENCED_SLACK_MS: i64 = 1_000;

/// Whether the replicas may stop receiving from a failing primary whose
/// lease expires at `expires_at_ms`, before it does.
///
/// Under `required` at once: once none receives, whatever it acknowledged
/// is in the histories the candidate is chosen from, and it acknowledges
/// nothing more. Otherwise a primary the control plane cannot see may
/// still reach its replicas and acknowledge alone (after a fallback, or
/// with semi-sync off), and what they receive from it is kept rather than
/// left on it alone: they stop only once its manager, if it runs, has
/// made it read-only (`lease::SELF_FENCE_MARGIN_MS` before the expiry),
/// so that their stop (up to 2 s for a source gone silent) is over by the
/// time the lease expires. A primary whose server runs on while its
/// manager does not (starved) may acknowledge alone in those last
/// seconds, and what it does is lost, as asynchronous replication allows.
pub fn detach_while_lease_runs(s: &Snapshot, expires_at_ms: i64) -> bool {
    let self_fenced = expires_at_ms - crate::lease::SELF_FENCE_MARGIN_MS + SELF_FENCED_SLACK_MS;
    acknowledges_only_with_a_replica(s) || s.now_ms >= self_fenced
}

/// Whether the candidate may be promoted while the failed primary's lease
/// still runs (the step then passes the lease to it). Under `required`
/// durability a primary acknowledges no commit that no replica received.
/// Once every replica has been told to stop receiving from it
/// (`status.failoverFrom`, which the step also requires every running
/// instance to report done before it promotes), whatever it acknowledged
/// is in the histories the candidate was chosen on, and it can
/// acknowledge nothing more, lease or not: waiting out the lease protects
/// no write. Not if it renewed its lease after it was found failing: it
/// reached the store since, and is given the lease's time. Under
/// `preferred`, or with semi-sync off, a primary can acknowledge alone,
/// and only the lease's expiry (its self-fence 5 s before) stops it.
pub fn promote_before_expiry(s: &Snapshot, lease: &Lease, current: &str) -> bool {
    let since = s
        .status
        .primary_failing_since
        .as_deref()
        .and_then(crate::time::parse_ms);
    acknowledges_only_with_a_replica(s)
        && s.status.failover_from.as_deref() == Some(current)
        && since.is_some_and(|since| lease.renew_time_ms <= since)
}

/// Histories of every observed instance but the old primary (candidates or
/// not: fenced, restarting, lagging), which the chosen candidate must also
/// contain under `required` durability: any of them may hold the only copy
/// of an acknowledged write.
fn required_histories(s: &Snapshot, old: &str) -> Vec<(String, History)> {
    if !acknowledges_only_with_a_replica(s) {
        return Vec::new();
    }
    running_others(s, old)
        .filter_map(|(name, st)| {
            crate::status::received_history(s.spec.mysql.flavor, st)
                .ok()
                .map(|h| (name.to_string(), h))
        })
        .collect()
}

/// Every instance but the old primary whose server runs and which is not
/// diverged, with what it reports.
fn running_others<'a>(
    s: &'a Snapshot,
    old: &'a str,
) -> impl Iterator<Item = (&'a str, &'a crate::status::InstanceStatus)> {
    s.instances
        .iter()
        .filter(move |o| o.name != old && !s.is_diverged(&o.name))
        .filter_map(|o| {
            let st = o.status.as_ref().filter(|st| st.mysqld_running)?;
            Some((o.name.as_str(), st))
        })
}

/// Under `required`: each restarted replica's source position read after
/// its restart, while it has not fetched all of it again. What it
/// acknowledged before its restart and lost is in that position, so the
/// candidate must hold it (the replica's own received history may not).
fn refill_targets(s: &Snapshot, old: &str) -> Vec<(String, String)> {
    if !acknowledges_only_with_a_replica(s) {
        return Vec::new();
    }
    running_others(s, old)
        .filter(|(_, st)| st.relay_refilling)
        .filter_map(|(name, st)| Some((name.to_string(), st.relay_refill_target.clone()?)))
        .collect()
}

/// The failover decision for one snapshot.
///
/// `lease`: the primary lease as last read (None when leases are disabled).
/// `old_gone`: the platform has confirmed no process of the old primary can
/// still write (its processes are gone), which releases its lease.
pub fn decide(s: &Snapshot, lease: Option<&Lease>, old_gone: bool) -> Decision {
    let (Some(current), Some(target)) = (
        s.status.current_primary.as_deref(),
        s.status.target_primary.as_deref(),
    ) else {
        return Decision::Nothing;
    };
    if current != target {
        // A switchover or failover is already moving the primary.
        return Decision::Nothing;
    }
    if s.status.failover_from.as_deref() == Some(current) {
        // Begun: the old primary is fenced out and the replicas stopped
        // receiving from it. It answering again (a node waking from a
        // freeze, about to be stopped) does not take the failover back.
        return choose(s, lease, old_gone, current);
    }
    let Some(reason) = primary_failure(s) else {
        return if s.status.primary_failing_since.is_some() {
            Decision::Recovered
        } else {
            Decision::Nothing
        };
    };
    let since_ms = s
        .status
        .primary_failing_since
        .as_deref()
        .and_then(crate::time::parse_ms);
    let Some(since_ms) = since_ms else {
        return Decision::Failing {
            since_ms: s.now_ms,
            reason,
        };
    };
    let delay_ms = s.spec.failover_delay.max(0).saturating_mul(1000);
    if s.now_ms < since_ms.saturating_add(delay_ms) {
        return Decision::Failing { since_ms, reason };
    }
    choose(s, lease, old_gone, current)
}

/// Past the failover delay: the candidate, or why none may take over, or
/// the lease still to wait for.
fn choose(s: &Snapshot, lease: Option<&Lease>, old_gone: bool, current: &str) -> Decision {
    let old_known = s
        .status
        .gtid_executed_by_instance
        .get(current)
        .and_then(|t| crate::status::parse_history(s.spec.mysql.flavor, t).ok());
    let Some(old_known) = old_known else {
        return Decision::Blocked {
            reason: format!(
                "failover of {current} blocked: its last GTID state was never observed, so errant transactions cannot be ruled out"
            ),
        };
    };
    let old_known = Some(old_known);
    let old_source = s.status_source_id(current);
    if let Err(reason) = durability_allows(s, current) {
        return Decision::Blocked {
            reason: format!("failover of {current} blocked: {reason}"),
        };
    }
    let candidate = match choose_candidate(s, current, old_known.as_ref(), &old_source) {
        Ok(c) => c,
        Err(reason) => {
            return Decision::Blocked {
                reason: format!("failover of {current} blocked: {reason}"),
            };
        }
    };
    if s.spec.enable_primary_lease
        && !old_gone
        && let Some(l) = lease
        && l.held_by(current, s.now_ms)
        && !promote_before_expiry(s, l, current)
    {
        return Decision::WaitForLease {
            until_ms: l.expires_at_ms(),
        };
    }
    Decision::Promote {
        old: current.to_string(),
        candidate,
    }
}

/// The phase to show while a primary change is under way.
pub fn changing_phase(s: &Snapshot) -> Option<Phase> {
    match (
        s.status.current_primary.as_deref(),
        s.status.target_primary.as_deref(),
    ) {
        (Some(c), Some(t)) if c != t => Some(if s.status.phase == Some(Phase::FailingOver) {
            Phase::FailingOver
        } else {
            Phase::Switchover
        }),
        _ => None,
    }
}

#[cfg(test)]
mod received_tests {
    use super::*;
    use crate::testutil::{replica, snapshot};

    #[test]
    fn the_candidate_that_received_most_is_chosen_not_the_one_that_applied_most() {
        // Found by the local fault suite: the primary froze; db-2 had
        // received (and acknowledged) up to 0-1-102 but applied only 100,
        // db-3 had received and applied 101. Promoting db-3 lost 102 and
        // left db-2 diverged.
        let mut db2 = replica("db-2", "0-1-100");
        db2.status
            .as_mut()
            .unwrap()
            .replication
            .as_mut()
            .unwrap()
            .received_gtid = "0-1-102".into();
        let db3 = replica("db-3", "0-1-101");
        let mut s = snapshot(vec![
            Observed {
                name: "db-1".into(),
                ordinal: 1,
                status: None,
                outdated: None,
            },
            db2,
            db3,
        ]);
        s.status.current_primary = Some("db-1".into());
        let known: History = "0-1-99"
            .parse::<cnmysql_gtid::mariadb::BinlogState>()
            .map(History::Mariadb)
            .unwrap();
        assert_eq!(
            choose_candidate(&s, "db-1", Some(&known), "1"),
            Ok("db-2".into())
        );
    }
}

#[cfg(test)]
mod tests;
