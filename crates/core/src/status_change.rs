//! Changes of the cluster status the topology step asks for, each applying
//! only while the status is what the step saw, and the report of every
//! pass (phase, conditions, what each instance said).

use std::collections::BTreeMap;

use cnmysql_api::{ClusterStatus, Phase};

use crate::memory::Memory;
use crate::phase::{Summary, set_condition, summarize};
use crate::status::Snapshot;
use crate::upgrade::rollout::{self, Next};

/// A change of the cluster status that only applies while the status is
/// still what the step saw; the platform applies it under its lock or with
/// a resourceVersion precondition, and retries on conflict.
#[derive(Clone, Debug, PartialEq)]
pub enum StatusChange {
    /// Set (`Some`, RFC 3339) or clear `primaryFailingSince`.
    PrimaryFailingSince(Option<String>),
    /// Record (true) or forget (false) a hibernation (`hibernation.rs`).
    Hibernated(bool),
    /// Start a planned switchover from `from` to `to` (the rollout's), if
    /// `from` is still both the current and the target primary.
    Switchover {
        from: String,
        to: String,
        at: String,
    },
    /// Give up a stalled switchover: point the target back at `current`,
    /// if the switchover is still pending from that primary.
    /// Give the role back to `current`; `reason` says why, in the status
    /// at once (a client following the switchover reads it there).
    AbortSwitchover {
        current: Option<String>,
        at: String,
        reason: String,
    },
    /// Begin a failover: target `candidate`, if `old` is still both the
    /// current and the target primary.
    /// A failover away from `old` begins: replicas stop receiving from it
    /// (`status.failoverFrom`) before the new primary is chosen.
    BeginFailover { old: String },
    /// No replica can take over from `old`: the failover begun is given up.
    AbandonFailover { old: String },
    StartFailover {
        old: String,
        candidate: String,
        at: String,
    },
    /// The summary: phase, reason, counts, conditions, last observed GTID
    /// state and manager hash per instance.
    Report(Box<Report>),
    /// The server upgrade's part of the status (images, versions, history).
    ServerUpgrade(crate::upgrade::server::UpgradeStatus),
    /// A rollout gave an instance a step at this time (RFC 3339).
    RolloutStep(String),
    /// Set (Some) or remove an instance's annotation-driven upgrade record.
    InstanceUpgrade {
        instance: String,
        record: Option<cnmysql_api::InstanceUpgrade>,
    },
    /// Set (Some) or remove the orchestrated upgrade's record.
    OrchestratedUpgrade(Option<cnmysql_api::OrchestratedUpgrade>),
    /// `status.backup` as the primary's archiving and a recovery report it
    /// (`archiving.rs`); written when it matters.
    Backup(Box<cnmysql_api::backup::BackupStatus>),
    /// A base backup ended: the last successful or failed one; the first
    /// successful one also starts the recoverable range.
    BackupTaken(Box<cnmysql_api::backup::BackupRecord>),
    /// Retention moved the earliest point a recovery can reach.
    FirstRecoverabilityPoint(String),
}

/// The reported part of the status.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub summary: Summary,
    pub instances: i32,
    /// The label selector of the instances' Pods (the scale subresource's).
    pub selector: String,
    pub gtids: BTreeMap<String, String>,
    /// GTID source ids of the observed instances.
    pub sources: BTreeMap<String, String>,
    pub hashes: BTreeMap<String, String>,
    /// Every declared instance as this poll saw it.
    pub states: BTreeMap<String, cnmysql_api::InstanceState>,
    /// Replicas too far behind to serve (`lagging.rs`).
    pub lagging: Vec<String>,
    /// A replica cluster's `status.replica` (`replica_cluster.rs`).
    pub replica: Option<cnmysql_api::replica::ReplicaStatus>,
    /// Why the primary refuses writes (`disk_guard.rs`).
    pub writes_refused: Option<String>,
    pub now_ms: i64,
    /// The primary fields of the status it was computed from: a report is
    /// stale, and not applied, once a primary change or a failing primary
    /// was recorded after it (it would overwrite that phase).
    pub basis: [Option<String>; 3],
}

fn basis(st: &ClusterStatus) -> [Option<String>; 3] {
    [
        st.current_primary.clone(),
        st.target_primary.clone(),
        st.primary_failing_since.clone(),
    ]
}

impl StatusChange {
    /// Apply the change to `st`; false when it no longer applies (nothing
    /// changed).
    pub fn apply(&self, st: &mut ClusterStatus) -> bool {
        match self {
            StatusChange::PrimaryFailingSince(v) => primary_failing_since(st, v),
            StatusChange::Hibernated(on) => {
                let changed = st.hibernated != *on;
                st.hibernated = *on;
                changed
            }
            StatusChange::AbandonFailover { old } => abandon_failover(st, old),
            StatusChange::BeginFailover { old } => begin_failover(st, old),
            StatusChange::Switchover { from, to, at } => {
                if st.current_primary.as_ref() == Some(from)
                    && st.target_primary.as_ref() == Some(from)
                {
                    crate::switchover::write(st, to, at);
                    true
                } else {
                    false
                }
            }
            StatusChange::AbortSwitchover {
                current,
                at,
                reason,
            } => {
                if st.current_primary != st.target_primary && st.current_primary == *current {
                    st.target_primary = st.current_primary.clone();
                    st.target_primary_timestamp = Some(at.clone());
                    // No longer a switchover in progress; the next report
                    // recomputes the phase from what the instances show.
                    st.phase = Some(Phase::Degraded);
                    st.phase_reason = Some(reason.clone());
                    true
                } else {
                    false
                }
            }
            StatusChange::StartFailover { old, candidate, at } => {
                start_failover(st, old, candidate, at)
            }
            StatusChange::ServerUpgrade(u) => u.apply(st),
            StatusChange::RolloutStep(at) => {
                st.last_rollout_step_time = Some(at.clone());
                true
            }
            StatusChange::InstanceUpgrade { instance, record } => {
                if st.instance_upgrades.get(instance) == record.as_ref() {
                    return false;
                }
                match record {
                    Some(r) => st.instance_upgrades.insert(instance.clone(), r.clone()),
                    None => st.instance_upgrades.remove(instance),
                };
                true
            }
            StatusChange::BackupTaken(r) => {
                let b = st.backup.get_or_insert_with(Default::default);
                if r.phase == "completed" {
                    if b.first_recoverability_point.is_empty() {
                        b.first_recoverability_point = r.stopped_at.clone();
                    }
                    b.last_successful_backup = Some((**r).clone());
                } else {
                    b.last_failed_backup = Some((**r).clone());
                }
                true
            }
            StatusChange::FirstRecoverabilityPoint(t) => {
                let b = st.backup.get_or_insert_with(Default::default);
                if b.first_recoverability_point == *t {
                    return false;
                }
                b.first_recoverability_point = t.clone();
                true
            }
            StatusChange::Backup(b) => {
                if !crate::archiving::worth_writing(st.backup.as_ref(), b) {
                    return false;
                }
                // Backups recorded meanwhile (by the platform) are kept.
                let mut b = (**b).clone();
                if let Some(old) = &st.backup {
                    b.last_successful_backup = old.last_successful_backup.clone();
                    b.last_failed_backup = old.last_failed_backup.clone();
                    b.first_recoverability_point = old.first_recoverability_point.clone();
                }
                st.backup = Some(b);
                true
            }
            StatusChange::OrchestratedUpgrade(o) => {
                if st.orchestrated_upgrade == *o {
                    return false;
                }
                st.orchestrated_upgrade = o.clone();
                true
            }
            StatusChange::Report(r) => {
                if basis(st) != r.basis || !r.differs(st) {
                    return false;
                }
                // A failover that completed (or was given up) ends here.
                if st.failover_from.is_some() && st.failover_from != st.current_primary {
                    st.failover_from = None;
                }
                st.phase = Some(r.summary.phase);
                st.phase_reason = Some(r.summary.reason.clone());
                st.ready_instances = r.summary.ready_instances;
                st.instances = r.instances;
                st.selector = Some(r.selector.clone());
                // Last observed: unreachable instances keep their last entry.
                st.gtid_executed_by_instance.extend(r.gtids.clone());
                st.source_id_by_instance.extend(r.sources.clone());
                st.executable_hash_by_instance.extend(r.hashes.clone());
                st.instance_states = r.states.clone();
                st.lagging_instances = r.lagging.clone();
                st.replica = r.replica.clone();
                st.writes_refused = r.writes_refused.clone();
                // An instance scaled away gives its re-initialisation slot
                // and requests up.
                if r.forgets(st) {
                    st.reinitializing.take_if(|i| !r.states.contains_key(i));
                    st.reinit_requests.retain(|i| r.states.contains_key(i));
                }
                for (t, on, reason, msg) in &r.summary.conditions {
                    set_condition(&mut st.conditions, t, *on, reason, msg, r.now_ms, None);
                }
                true
            }
        }
    }
}

impl Report {
    /// Whether the status names, for re-initialisation, an instance that
    /// is no longer declared.
    fn forgets(&self, st: &ClusterStatus) -> bool {
        let gone = |i: &String| !self.states.contains_key(i);
        !self.states.is_empty()
            && (st.reinitializing.as_ref().is_some_and(gone) || st.reinit_requests.iter().any(gone))
    }

    fn differs(&self, st: &ClusterStatus) -> bool {
        let s = &self.summary;
        self.forgets(st)
            || st.phase != Some(s.phase)
            || st.phase_reason.as_deref() != Some(s.reason.as_str())
            || st.ready_instances != s.ready_instances
            || st.instances != self.instances
            || st.selector.as_deref() != Some(self.selector.as_str())
            || self
                .gtids
                .iter()
                .any(|(k, v)| st.gtid_executed_by_instance.get(k) != Some(v))
            || self
                .sources
                .iter()
                .any(|(k, v)| st.source_id_by_instance.get(k) != Some(v))
            || self
                .hashes
                .iter()
                .any(|(k, v)| st.executable_hash_by_instance.get(k) != Some(v))
            || st.instance_states != self.states
            || st.lagging_instances != self.lagging
            || st.replica != self.replica
            || st.writes_refused != self.writes_refused
            || s.conditions.iter().any(|(t, on, reason, msg)| {
                !st.conditions.iter().any(|c| {
                    c.type_ == *t
                        && (c.status == "True") == *on
                        && c.reason == *reason
                        && c.message == *msg
                })
            })
    }
}

/// The status summary for this snapshot: phase and conditions from
/// `phase.rs`, overridden while failover is blocked, plus the last observed
/// GTID state and manager hash of every reachable instance.
pub fn report(s: &Snapshot, memory: &Memory) -> Report {
    let mut summary = summarize(s);
    let rollout = rollout::next(s, &memory.rollout_in_flight, memory.consent(s));
    let settled = matches!(
        summary.phase,
        Phase::Healthy | Phase::Degraded | Phase::CreatingReplica
    );
    if let Some(reason) = rollout.reason().filter(|_| settled) {
        summary.phase = match rollout {
            Next::WaitingForUser { .. } => Phase::WaitingForUser,
            _ => Phase::Upgrading,
        };
        summary.reason = reason;
    }
    let upgrade = crate::upgrade::server::advance(s);
    if let Some(reason) = upgrade
        .reason
        .filter(|_| settled || summary.phase == Phase::Upgrading)
    {
        let upgrading = upgrade
            .status
            .current()
            .is_some_and(|r| r.phase == cnmysql_api::UpgradePhase::Upgrading);
        if upgrading {
            summary.phase = Phase::Upgrading;
            // The rollout's own words say which instance moves now.
            if rollout == Next::Current {
                summary.reason = reason;
            }
        } else if upgrade.degraded.is_some() {
            summary.phase = Phase::Degraded;
            summary.reason = reason;
        } else if summary.phase == Phase::Healthy {
            summary.reason = reason;
        }
    }
    if let Some((why, message)) = &upgrade.degraded {
        for c in summary.conditions.iter_mut().filter(|c| c.0 == "Degraded") {
            if !c.1 {
                c.1 = true;
                c.2 = why.clone();
                c.3 = message.clone();
            }
        }
    }
    if let Next::Held { reason, .. } = &rollout
        && summary.phase == Phase::Healthy
    {
        summary.reason = reason.clone();
    }
    if let Some(o) = &s.status.orchestrated_upgrade {
        let what = format!(
            "Orchestrated upgrade ({}={}): {}",
            crate::upgrade::annotations::UPGRADE_TO,
            o.upgrade_to,
            o.message
        );
        match o.status.as_str() {
            "in-progress" if settled || summary.phase == Phase::Upgrading => {
                summary.phase = Phase::Upgrading;
                summary.reason = what;
            }
            "failed" if o.instance.is_some() && settled => {
                summary.phase = Phase::Degraded;
                summary.reason = what;
            }
            "failed" if summary.phase == Phase::Healthy => summary.reason = what,
            _ => {}
        }
    }
    if !memory.last_block.is_empty() {
        summary.phase = Phase::Degraded;
        summary.reason = memory.last_block.clone();
        for c in summary.conditions.iter_mut().filter(|c| c.0 == "Degraded") {
            c.1 = true;
            c.2 = "FailoverBlocked".into();
            c.3 = memory.last_block.clone();
        }
    }
    let hashes = s
        .instances
        .iter()
        .filter_map(|o| {
            o.status
                .as_ref()
                .map(|st| (o.name.clone(), st.executable_hash.clone()))
        })
        .collect();
    let states = s
        .instances
        .iter()
        .map(|o| {
            let state = match &o.status {
                Some(st) => cnmysql_api::InstanceState {
                    role: st.role.as_str().into(),
                    phase: serde_json::to_value(st.phase)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                    ready: st.ready,
                    read_only: st.read_only,
                    lag_seconds: st.lag_seconds,
                    semi_sync: crate::semisync::summary(st),
                    tls_trust: st.tls_trust.clone(),
                    tls_issuer: st.tls_issuer.clone(),
                    volumes: st.volumes.iter().map(|v| v.coarse()).collect(),
                    binlogs: st.binlogs.as_ref().map(|b| b.coarse()),
                },
                None => cnmysql_api::InstanceState {
                    role: "unreachable".into(),
                    ..Default::default()
                },
            };
            (o.name.clone(), state)
        })
        .collect();
    Report {
        summary,
        instances: s.spec.instances,
        selector: format!("{}={}", cnmysql_api::names::CLUSTER_LABEL, s.cluster),
        gtids: s.gtid_by_instance(),
        sources: s.source_ids(),
        hashes,
        states,
        lagging: crate::lagging::instances(s),
        replica: crate::replica_cluster::status(s),
        writes_refused: crate::disk_guard::writes_refused(s),
        now_ms: s.now_ms,
        basis: basis(&s.status),
    }
}

/// `primaryFailingSince`.
fn primary_failing_since(st: &mut ClusterStatus, v: &Option<String>) -> bool {
    if st.primary_failing_since == *v {
        return false;
    }
    st.primary_failing_since = v.clone();
    true
}

/// No replica can take over from `old`: the failover begun is given up.
fn abandon_failover(st: &mut ClusterStatus, old: &str) -> bool {
    if st.failover_from.as_deref() == Some(old) && st.target_primary.as_deref() == Some(old) {
        st.failover_from = None;
        true
    } else {
        false
    }
}

/// A failover away from `old` begins: replicas stop receiving from it.
fn begin_failover(st: &mut ClusterStatus, old: &str) -> bool {
    if st.current_primary.as_deref() == Some(old)
        && st.target_primary.as_deref() == Some(old)
        && st.failover_from.as_deref() != Some(old)
    {
        st.failover_from = Some(old.to_string());
        true
    } else {
        false
    }
}

/// The candidate is chosen: `targetPrimary` moves to it.
fn start_failover(st: &mut ClusterStatus, old: &str, candidate: &str, at: &str) -> bool {
    if st.current_primary.as_deref() == Some(old) && st.target_primary.as_deref() == Some(old) {
        st.target_primary = Some(candidate.to_string());
        st.target_primary_timestamp = Some(at.to_string());
        st.phase = Some(Phase::FailingOver);
        st.phase_reason = Some(format!("promoting {candidate} in place of {old}"));
        true
    } else {
        false
    }
}
