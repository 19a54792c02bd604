//! The failover part of a topology step: the decision for this pass
//! (`failover::decide`, with what the platform saw of a primary coming back
//! in place) and the actions that carry it out — fence the old primary out,
//! have the replicas stop receiving from it, wait for its lease, then
//! target the candidate.

use super::*;

/// The failover decision for this step, and what it makes the memory
/// forget (a block or a lease wait no longer under way).
pub(super) fn failover_decision(
    o: &Observation<'_>,
    memory: &mut Memory,
    primary: &str,
) -> Decision {
    let s = o.snapshot;
    // A primary the rollout restarts in place is away on purpose: its
    // absence is not a failure until it has had time to come back.
    if let Some((p, since)) = &memory.restarting_primary {
        let back = s.get(p).is_some_and(|o| o.ready());
        if back || *p != primary || s.now_ms - since > PRIMARY_RESTART_MS {
            memory.restarting_primary = None;
        }
    }
    let primary_gone = !primary.is_empty() && o.absent.iter().any(|a| a == primary);
    let down_since = down_in_place_since(o, primary, memory);
    let restarted_at = unfinished_restart(o, memory, primary);
    let restarting_in_place = !primary_gone
        && restarted_at
            .max(down_since)
            .is_some_and(|t| s.now_ms.saturating_sub(t) < IN_PLACE_RESTART_GRACE_MS);
    let decision = if memory.restarting_primary.is_some() {
        Decision::Nothing
    } else {
        match failover::decide(s, o.lease, primary_gone) {
            // Nothing against a primary that is coming back in place.
            Decision::WaitForLease { .. } | Decision::Promote { .. } if restarting_in_place => {
                Decision::Failing {
                    since_ms: s.now_ms,
                    reason: format!("{primary} is restarting in place"),
                }
            }
            d => d,
        }
    };
    if !matches!(decision, Decision::Blocked { .. }) {
        memory.last_block.clear();
    }
    if !matches!(decision, Decision::WaitForLease { .. }) {
        memory.last_wait = false;
    }
    decision
}

/// When the primary's processes were last started again in place, unless
/// it has been seen ready since: a primary that came back and then failed
/// anew (frozen, cut off) is not coming back from that restart (found by
/// the Kubernetes fault suite, MariaDB seed 3170357421360729976: a node
/// frozen 10 s after an in-place restart waited out the restart's grace,
/// 19.2 s without writes).
fn unfinished_restart(o: &Observation<'_>, memory: &mut Memory, primary: &str) -> Option<i64> {
    let at = o.primary_restarted_at_ms?;
    let key = (primary.to_string(), at);
    if o.snapshot.get(primary).is_some_and(|p| p.ready()) {
        memory.back_after_restart = Some(key.clone());
    }
    (memory.back_after_restart.as_ref() != Some(&key)).then_some(at)
}

/// The actions of a failover decision.
pub(super) fn carry_out_decision(
    o: &Observation<'_>,
    memory: &mut Memory,
    decision: Decision,
    primary: &str,
    at: &str,
    out: &mut Vec<Action>,
) {
    let s = o.snapshot;
    match decision {
        Decision::Nothing => {}
        Decision::Recovered => out.push(Action::Status {
            change: StatusChange::PrimaryFailingSince(None),
            then: vec![Event::new(
                false,
                "PrimaryRecovered",
                Some(primary),
                "the primary is healthy again".into(),
            )],
        }),
        Decision::Failing { since_ms, reason } => {
            if s.status.primary_failing_since.is_none() {
                out.push(Action::Status {
                    change: StatusChange::PrimaryFailingSince(Some(timestamp(since_ms))),
                    then: vec![Event::new(true, "PrimaryFailing", Some(primary), reason)],
                });
            }
        }
        Decision::WaitForLease { until_ms } => wait_for_lease(o, memory, primary, until_ms, out),
        Decision::Blocked { reason } => {
            if memory.last_block != reason {
                out.push(Action::Event(Event::new(
                    true,
                    "FailoverBlocked",
                    Some(primary),
                    reason.clone(),
                )));
                memory.last_block = reason;
            }
            // Nothing can take over: the replicas take from the old primary
            // again, and it may come back in place.
            if s.status.failover_from.as_deref() == Some(primary) {
                memory.failover_begun = None;
                out.push(Action::Status {
                    change: StatusChange::AbandonFailover {
                        old: primary.to_string(),
                    },
                    then: vec![],
                });
            }
            if memory.held_down.contains(primary) {
                out.push(restart(memory, primary));
            }
        }
        Decision::Promote { old, candidate } => {
            if s.status.failover_from.as_deref() != Some(old.as_str()) {
                lost_failover_from(memory, &old, out);
                out.extend(begin_failover(memory, &old));
                return;
            }
            if let Err(waiting) = detached_from(o, &old) {
                if memory.last_detach_wait != waiting {
                    out.push(Action::Event(Event::new(
                        false,
                        "FailoverWaitingForReplicas",
                        Some(&old),
                        waiting.clone(),
                    )));
                    memory.last_detach_wait = waiting;
                }
                return;
            }
            memory.failover_begun = None;
            memory.last_detach_wait.clear();
            // Begun while its lease ran (`wait_for_lease`), where fencing
            // did not start then (locally): fenced out now.
            if !memory.held_down.contains(&old) {
                out.push(fence_out(memory, &old));
            }
            if let Some(l) = o.lease.filter(|l| l.held_by(&old, s.now_ms)) {
                out.push(lease_for_candidate(o, &old, &candidate, l));
            }
            out.push(Action::Status {
                change: StatusChange::StartFailover {
                    old: old.clone(),
                    candidate: candidate.clone(),
                    at: at.to_string(),
                },
                then: vec![Event::new(
                    true,
                    "FailingOver",
                    Some(&candidate),
                    format!(
                        "failing over from {old} to {candidate}; {old} is fenced (processes stopped, data kept)"
                    ),
                )],
            });
        }
    }
}

/// A failover begun while the old primary's lease ran, every replica
/// detached from it: the lease it still holds. Proven gone since, it is
/// released. Otherwise it is passed to the candidate
/// (`failover::promote_before_expiry`): a conditional write, refused if
/// the old primary renewed since (the failover then waits for the lease
/// again), its event recorded once it is written.
fn lease_for_candidate(o: &Observation<'_>, old: &str, candidate: &str, lease: &Lease) -> Action {
    if o.absent.iter().any(|a| a == old) {
        return Action::ReleaseLease {
            holder: old.to_string(),
        };
    }
    Action::PassLease {
        from: old.to_string(),
        to: candidate.to_string(),
        seen_renew_ms: lease.renew_time_ms,
        then: Event::new(
            true,
            "LeasePassed",
            Some(old),
            format!(
                "{old} can acknowledge no more commits (dataDurability: required, every replica stopped receiving from it): its primary lease passes to {candidate} {} ms before it would expire",
                lease.expires_at_ms() - o.snapshot.now_ms
            ),
        ),
    }
}

/// Past the failover delay, a candidate chosen, the old primary's lease
/// still running. Where fencing takes time it starts now. The replicas
/// stop receiving from it while the lease runs
/// (`failover::detach_while_lease_runs`): under `required` at once, and
/// the lease then passes to the candidate once they all have; otherwise
/// once the old primary has fenced itself, so that at the lease's expiry
/// the candidate is promoted at once rather than after their stop (up to
/// 2 s for a source gone silent).
fn wait_for_lease(
    o: &Observation<'_>,
    memory: &mut Memory,
    primary: &str,
    until_ms: i64,
    out: &mut Vec<Action>,
) {
    let s = o.snapshot;
    if o.fence_early && !memory.held_down.contains(primary) {
        out.push(fence_out(memory, primary));
    }
    if failover::detach_while_lease_runs(s, until_ms)
        && s.status.failover_from.as_deref() != Some(primary)
    {
        out.push(stop_receiving_from(primary));
    }
    if !memory.last_wait {
        memory.last_wait = true;
        out.push(Action::Event(Event::new(
            true,
            "FailoverWaitingForLease",
            Some(primary),
            format!(
                "waiting until the primary lease of {primary} expires ({} ms)",
                until_ms - s.now_ms
            ),
        )));
    }
}

/// The first half of a failover from `old`: fence it out, release its
/// lease, and have every replica stop receiving from it
/// (`status.failoverFrom`). The candidate is chosen once they all have, so
/// that whatever a replica received from `old` — and could have
/// acknowledged to it, even as it wakes from a freeze — is in the history
/// the choice is made on.
fn begin_failover(memory: &mut Memory, old: &str) -> Vec<Action> {
    vec![
        fence_out(memory, old),
        Action::ReleaseLease {
            holder: old.to_string(),
        },
        stop_receiving_from(old),
    ]
}

/// Every replica stops receiving from `old` (`status.failoverFrom`).
fn stop_receiving_from(old: &str) -> Action {
    Action::Status {
        change: StatusChange::BeginFailover {
            old: old.to_string(),
        },
        then: vec![Event::new(
            true,
            "FailoverStarted",
            Some(old),
            format!(
                "failing over from {old}: replicas stop receiving from it, then the most advanced one is promoted"
            ),
        )],
    }
}

/// A failover begun from `old` whose `status.failoverFrom` is gone again
/// without a candidate chosen: the API server prunes the field (a Cluster
/// CRD older than this operator), and no failover can finish. Said once.
fn lost_failover_from(memory: &mut Memory, old: &str, out: &mut Vec<Action>) {
    match &mut memory.failover_begun {
        Some((from, said)) if from == old => {
            if !*said {
                *said = true;
                out.push(Action::Event(Event::new(
                    true,
                    "FailoverStalled",
                    Some(old),
                    "status.failoverFrom was written but is gone again: the Cluster CRD installed is older than this operator and drops it, so no failover can finish. Apply the CRD of this operator version (deploy/operator.yaml)".into(),
                )));
            }
        }
        _ => memory.failover_begun = Some((old.to_string(), false)),
    }
}

/// Whether every instance but `old` provably receives nothing more from
/// it: gone, its server stopped, or its IO thread stopped. An instance
/// that cannot be reached might still be receiving: wait for it.
fn detached_from(o: &Observation<'_>, old: &str) -> Result<(), String> {
    let s = o.snapshot;
    let receiving: Vec<&str> = s
        .instances
        .iter()
        .filter(|i| i.name != old && !o.absent.contains(&i.name))
        .filter(|i| {
            i.status.as_ref().is_none_or(|st| {
                st.mysqld_running && st.replication.as_ref().is_some_and(|r| r.io_state != "No")
            })
        })
        .map(|i| i.name.as_str())
        .collect();
    if receiving.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "waiting for {} to stop receiving from {old} before choosing the new primary",
            receiving.join(", ")
        ))
    }
}

/// Since when the primary has been seen down in place, in a streak of
/// passes that saw it so (a new primary or a pass that does not see it
/// down ends the streak).
fn down_in_place_since(o: &Observation, primary: &str, memory: &mut Memory) -> Option<i64> {
    if !o.primary_down_in_place || primary.is_empty() {
        memory.primary_down_in_place = None;
        return None;
    }
    let now = o.snapshot.now_ms;
    let since = match &memory.primary_down_in_place {
        Some((p, t)) if p == primary => *t,
        _ => now,
    };
    memory.primary_down_in_place = Some((primary.to_string(), since));
    Some(since)
}
