//! One topology reconcile step, for every platform: what the controller
//! does after it has observed the cluster — when the primary fails, when a
//! switchover stalls, when a primary change completes, when semi-sync must
//! follow the healthy replicas, and what the status then says.
//!
//! [`step`] is pure: it turns an [`Observation`] (facts the platform
//! reports) and what the controller remembers ([`Memory`]: held-down
//! instances, the warm-up, what was said) into a list of [`Action`]s. The
//! topology engine (`cnmysql-engine`) carries them out on a platform: the
//! local control plane with processes and files, the Kubernetes operator
//! with Pods, the Cluster status and the Lease, the simulation in memory.
//! How often a platform polls is [`Cadence`]. The decisions themselves
//! live in `failover.rs`, `switchover.rs`, `semisync.rs`, `upgrade/` and
//! `phase.rs`; the failover's part of the step in `reconcile/failover_step.rs`.

use cnmysql_api::{Flavor, Phase};

use crate::action::Action;
use crate::event::Event;
use crate::failover::{self, Decision};
use crate::lease::Lease;
use crate::memory::Memory;
use crate::semisync;
use crate::status::Snapshot;
use crate::status_change::StatusChange;
use crate::switchover::{self, Progress};
use crate::time::timestamp;

mod failover_step;
use failover_step::{carry_out_decision, failover_decision};

/// A semi-sync adjustment is not repeated within this long.
pub const SEMI_SYNC_RETRY_MS: i64 = 2_000;

/// How long a primary restarted in place by the rollout may be away before
/// failover treats it as failed.
pub const PRIMARY_RESTART_MS: i64 = 120_000;

/// What the platform observed, beyond the snapshot: facts only; what to
/// make of them is the step's.
#[derive(Clone, Copy, Debug)]
pub struct Observation<'a> {
    pub snapshot: &'a Snapshot,
    /// The primary Lease as last read (None when it could not be read, or
    /// was not read: see [`needs_lease`]).
    pub lease: Option<&'a Lease>,
    /// Instances the platform proved have no process that can still write:
    /// locally neither the manager nor mysqld runs; on Kubernetes the Pod
    /// is gone (deleted and its containers confirmed stopped, or never
    /// created).
    pub absent: &'a [String],
    /// Start fencing the failed primary as soon as failover is decided,
    /// while its lease runs out: where fencing takes time (a Pod's
    /// termination), a primary proven gone early needs no lease wait.
    /// Locally fencing is instant and waits for the lease instead.
    pub fence_early: bool,
    /// When the platform last saw the primary's processes start again in
    /// place (Kubernetes: its container restarted in the same Pod after
    /// its PID 1 died), Unix ms. See [`IN_PLACE_RESTART_GRACE_MS`].
    pub primary_restarted_at_ms: Option<i64>,
    /// The platform saw the primary's processes gone while the place they
    /// run in stays and will start them again (Kubernetes: its Pod, not
    /// being deleted, refuses connections to its control port: the
    /// container died and the kubelet restarts it, before the kubelet has
    /// reported so). Counts as a restart in place from the first pass it
    /// was seen.
    pub primary_down_in_place: bool,
    /// Instances going away on notice (Kubernetes: their Pod is being
    /// deleted gracefully, its preStop hook holding the shutdown): a
    /// primary among them hands over first ([`crate::handover`]).
    pub leaving: &'a [String],
    /// Instances whose place is about to be emptied (Kubernetes: their
    /// node is cordoned, as `kubectl drain` does first): a primary among
    /// them hands over while nothing is wrong, and none is handed to.
    pub cordoned: &'a [String],
    /// Instances the platform holds in a crash back-off before it starts
    /// their processes again (Kubernetes: a container in
    /// `CrashLoopBackOff`), with when they last stopped (Unix ms). See
    /// [`crate::crash_backoff`].
    pub backing_off: &'a [(String, i64)],
}

/// A primary whose processes were started again in place within this long
/// is given the time to come back rather than failed over. Recovering as
/// the primary (its status says so), it keeps the transactions it had
/// prepared; fenced out and replaced meanwhile, it would then hold
/// transactions the new primary never had and be kept out as diverged
/// (issue 18: one in about fifteen primary PID 1 kills on Kubernetes).
/// A restart that does not bring it back within the grace fails over as
/// usual.
pub const IN_PLACE_RESTART_GRACE_MS: i64 = 15_000;

/// Decisions wait this long after a controller first steps a cluster
/// unless every instance not held down has answered: a fresh control plane
/// (just started, restarted or newly leading) must not take its own
/// missing observations for a failed primary.
pub const WARM_UP_MS: i64 = 15_000;

/// Whether the step needs the primary Lease now: only to decide a
/// failover (a platform reads it from the API only then).
pub fn needs_lease(s: &Snapshot) -> bool {
    s.spec.enable_primary_lease && crate::failover::primary_failure(s).is_some()
}

/// Whether decisions still wait for the first observations (see
/// [`WARM_UP_MS`]); remembers who answered. A manager that answers while
/// it is still starting its server has not told its state yet: a cluster
/// starting again (or a control plane meeting it) would otherwise take
/// its primary, a few hundred milliseconds from serving, for a failing one.
pub fn warming_up(s: &Snapshot, memory: &mut Memory) -> bool {
    let first = *memory.first_step_ms.get_or_insert(s.now_ms);
    for o in &s.instances {
        let told = o.status.as_ref().is_some_and(|st| {
            st.mysqld_running
                || !matches!(
                    st.phase,
                    crate::status::InstancePhase::Initializing
                        | crate::status::InstancePhase::Starting
                )
        });
        if told {
            memory.answered.insert(o.name.clone());
        }
    }
    s.now_ms.saturating_sub(first) < WARM_UP_MS
        && s.instances
            .iter()
            .any(|o| !memory.answered.contains(&o.name) && !memory.held_down.contains(&o.name))
}

/// While hibernated or waking, the only thing the step does is record
/// the hibernation or forget it once every instance is back.
fn hibernation_step(h: crate::hibernation::Next) -> Vec<Action> {
    use crate::hibernation::{ANNOTATION, Next};
    let (on, reason, message) = match h {
        Next::Hold => return Vec::new(),
        Next::Record => (
            true,
            "Hibernating",
            format!("{ANNOTATION}=on: stopping every instance, keeping its data"),
        ),
        Next::Woke => (
            false,
            "WokeFromHibernation",
            "every instance is back and ready".to_string(),
        ),
    };
    vec![Action::Status {
        change: StatusChange::Hibernated(on),
        then: vec![Event::new(false, reason, None, message)],
    }]
}

/// One step: everything the controller does about the topology now.
/// Nothing before the cluster has a target primary, or while warming up.
pub(crate) fn step(o: &Observation<'_>, memory: &mut Memory) -> Vec<Action> {
    let s = o.snapshot;
    if let Some(h) = crate::hibernation::next(s) {
        return hibernation_step(h);
    }
    if warming_up(s, memory) || s.status.target_primary.is_none() {
        return Vec::new();
    }
    if crate::pause::paused(&s.declared.asked.cluster) {
        return Vec::new();
    }
    let at = timestamp(s.now_ms);
    let mut out = Vec::new();
    primary_changes(o, memory, &mut out);
    let away: Vec<String> = o.leaving.iter().chain(o.absent).cloned().collect();
    abort_stalled_switchover(s, &away, &at, &mut out);
    if hand_over(o, memory, &at, &mut out) {
        return out;
    }
    let primary = s.status.current_primary.clone().unwrap_or_default();
    let decision = failover_decision(o, memory, &primary);
    carry_out_decision(o, memory, decision, &primary, &at, &mut out);
    out.extend(crate::crash_backoff::remake(s, o.backing_off, memory));

    if let Some(a) = semi_sync(s, memory) {
        out.push(a);
    }
    out.extend(crate::upgrade::step::server_upgrade_step(s, memory));
    out.extend(crate::upgrade::step::annotation_step(s, memory));
    if memory.restarting_primary.is_none() && s.status.primary_failing_since.is_none() {
        out.extend(crate::upgrade::step::rollout_step(s, memory));
    }
    out
}

/// What follows a primary change the step sees: say it completed, let
/// instances seen running go, hold a vanished steady primary down, and let
/// the held-down ones start again once no change is under way.
fn primary_changes(o: &Observation<'_>, memory: &mut Memory, out: &mut Vec<Action>) {
    let s = o.snapshot;
    // A primary change completed: say so, and let the fenced-out former
    // primary start again so it rejoins (or is found diverged).
    if s.status.current_primary != memory.last_current {
        if let (Some(prev), Some(cur)) = (&memory.last_current, &s.status.current_primary) {
            let reason = if s.status.phase == Some(Phase::FailingOver) {
                "FailoverCompleted"
            } else {
                "SwitchoverCompleted"
            };
            out.push(Action::Event(Event::new(
                false,
                reason,
                Some(cur),
                format!("{cur} replaced {prev} as primary"),
            )));
        }
        memory.last_current = s.status.current_primary.clone();
    }
    // Let go once seen running again.
    memory
        .released
        .retain(|n| s.get(n).is_some_and(|o| o.status.is_none()));
    // A vanished steady primary is held down for the failover decision
    // (`hold_down.rs`): recorded here, from the platform's facts.
    for a in o.absent {
        if !memory.held_down.contains(a)
            && crate::hold_down::keep_down(&s.spec, &s.status, a, memory)
        {
            memory.held_down.insert(a.clone());
            out.push(Action::Event(Event::new(
                true,
                "PrimaryDown",
                Some(a),
                format!("the processes of the primary {a} are gone; it is held down for the failover decision"),
            )));
        }
    }
    if s.status.current_primary == s.status.target_primary {
        let held: Vec<String> = memory.held_down.iter().cloned().collect();
        for h in held {
            if Some(&h) != s.status.current_primary.as_ref() {
                out.push(restart(memory, &h));
            }
        }
    }
}

/// A switchover that cannot finish is given up, with its reason.
fn abort_stalled_switchover(s: &Snapshot, away: &[String], at: &str, out: &mut Vec<Action>) {
    if let Progress::Abort { reason } = switchover::progress(s, away) {
        out.push(Action::Status {
            change: StatusChange::AbortSwitchover {
                current: s.status.current_primary.clone(),
                at: at.to_string(),
                reason: reason.clone(),
            },
            then: vec![Event::new(
                true,
                "SwitchoverBlocked",
                s.status.target_primary.as_deref(),
                reason,
            )],
        });
    }
}

/// Fence `instance` out: held down from now on.
fn fence_out(memory: &mut Memory, instance: &str) -> Action {
    memory.held_down.insert(instance.to_string());
    Action::FenceOut(instance.to_string())
}

/// Let a held-down `instance` start again; nothing holds it down again
/// until it has been seen running.
fn restart(memory: &mut Memory, instance: &str) -> Action {
    memory.held_down.remove(instance);
    memory.released.insert(instance.to_string());
    Action::Restart(instance.to_string())
}

/// Steady-state semi-sync adjustment on a settled, ready primary.
fn semi_sync(s: &Snapshot, memory: &mut Memory) -> Option<Action> {
    let spec = &s.spec;
    if !spec.mysql.semi_sync.enabled || s.status.current_primary != s.status.target_primary {
        return None;
    }
    let primary = s.status.current_primary.clone()?;
    let p = s.get(&primary)?.status.as_ref()?;
    if !p.ready {
        return None;
    }
    let want = semisync::desired(spec, semisync::healthy_replicas(s));
    let have = p.semi_sync.clone().unwrap_or_default();
    let differs = have.source_enabled != want.enabled
        || have.timeout_millis != want.timeout_millis
        || (spec.mysql.flavor == Flavor::Mysql && have.wait_for_count != want.wait_for_count);
    let recently = memory
        .last_semi_sync
        .as_ref()
        .is_some_and(|(w, t)| *w == want && s.now_ms - t < SEMI_SYNC_RETRY_MS);
    if !differs || recently {
        return None;
    }
    memory.last_semi_sync = Some((want, s.now_ms));
    Some(Action::SemiSync {
        instance: primary.clone(),
        settings: want,
        then: Event::new(
            false,
            "SemiSyncAdjusted",
            Some(&primary),
            match semisync::fallback_after_ms(spec) {
                Some(after) => format!(
                    "semi-sync enabled={} waitForCount={}; the primary falls back to asynchronous after {after} ms without an acknowledgement",
                    want.enabled, want.wait_for_count
                ),
                None => format!(
                    "semi-sync enabled={} waitForCount={} timeoutMillis={}",
                    want.enabled, want.wait_for_count, want.timeout_millis
                ),
            },
        ),
    })
}

/// A primary leaving on notice ([`crate::handover`]): the switchover to
/// start (true: nothing else this step), or why none can, said once.
fn hand_over(o: &Observation, memory: &mut Memory, at: &str, out: &mut Vec<Action>) -> bool {
    use crate::handover::Handover;
    match crate::handover::decide(o.snapshot, o.leaving, o.cordoned) {
        Handover::None => false,
        Handover::Impossible {
            primary,
            why,
            cordoned,
        } => {
            if memory.last_handover_refusal != why {
                let message = if cordoned {
                    format!(
                        "{primary}'s node is cordoned but no replica elsewhere can take over ({why}); it stays primary, and its eviction waits"
                    )
                } else {
                    format!(
                        "{primary} is going away on notice but no replica can take over ({why}); it will be failed over once gone"
                    )
                };
                out.push(Action::Event(Event::new(
                    true,
                    "HandoverImpossible",
                    Some(&primary),
                    message,
                )));
                memory.last_handover_refusal = why;
            }
            false
        }
        Handover::Start { from, to, cordoned } => {
            let (reason, note) = if cordoned {
                (
                    "SwitchoverFromCordonedNode",
                    format!(
                        "{from}'s node is cordoned (a drain is coming): it hands the primary role to {to}"
                    ),
                )
            } else {
                (
                    "SwitchoverForLeavingPrimary",
                    format!("{from} is going away on notice: it hands the primary role to {to}"),
                )
            };
            out.push(Action::switchover(from, to, at.to_string(), reason, note));
            true
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod platform_rule_tests;

#[cfg(test)]
mod lease_wait_tests;
