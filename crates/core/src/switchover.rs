//! Planned switchover: a request to make a named healthy replica primary.
//! Like CloudNativePG, the request is a status transition (targetPrimary);
//! this module validates it ([`request`] for every platform: the local CLI,
//! the `kubectl` plugin, the rollout's own switchovers), and watches it
//! complete or time out.

use cnmysql_gtid::Relation;

use cnmysql_api::{ClusterSpec, ClusterStatus, Phase};

use crate::status::{Role, Snapshot};

/// Why a switchover is refused. [`Refusal::reason`] is the event reason
/// and metric label; the text (`Display`) says what to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The name is not one of the Cluster's instances.
    NotAMember(crate::status::NotAMember),
    NoPrimaryYet,
    /// A primary change to this instance is already under way.
    ChangeInProgress(String),
    AlreadyPrimary,
    Fenced,
    Diverged,
    Unreachable,
    /// Not ready: its phase and message.
    NotReady(String),
    NotAReplica,
    /// Its replication threads: the IO state, SQL running, the errors.
    ReplicationUnhealthy(String),
    NoReplication,
    /// The current primary does not answer: failover's business.
    PrimaryUnreachable(String),
    /// A history that cannot be read: whose, and why.
    UnreadableHistory(String),
    /// Its GTID history has diverged from the primary's.
    HistoryDiverged,
    /// Further behind than [`MAX_TARGET_LAG_SECS`]: its lag, and the
    /// replica that is caught up, if one is.
    Lagging {
        lag: u64,
        instead: Option<String>,
    },
    /// The control plane is paused (`cnmysql.io/reconcile`).
    Paused,
}

/// The Event reason of a refused switchover.
pub const REFUSED_EVENT: &str = "SwitchoverRefused";

impl Refusal {
    /// What a refused switchover to `target` says, to the user and in its
    /// Event ([`REFUSED_EVENT`]).
    pub fn message(&self, target: &str) -> String {
        format!(
            "switchover to {target} refused ({}): {}",
            self.reason(),
            self.explain(target)
        )
    }

    /// A CamelCase word for events and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::NotAMember(_) => "NotAMember",
            Refusal::NoPrimaryYet => "NoPrimaryYet",
            Refusal::ChangeInProgress(_) => "ChangeInProgress",
            Refusal::AlreadyPrimary => "AlreadyPrimary",
            Refusal::Fenced => "TargetFenced",
            Refusal::Diverged => "TargetDiverged",
            Refusal::Unreachable => "TargetUnreachable",
            Refusal::NotReady(_) => "TargetNotReady",
            Refusal::NotAReplica => "TargetNotAReplica",
            Refusal::ReplicationUnhealthy(_) => "ReplicationUnhealthy",
            Refusal::NoReplication => "NoReplication",
            Refusal::PrimaryUnreachable(_) => "PrimaryUnreachable",
            Refusal::UnreadableHistory(_) => "UnreadableHistory",
            Refusal::HistoryDiverged => "HistoryDiverged",
            Refusal::Lagging { .. } => "TargetLagging",
            Refusal::Paused => "ReconcilePaused",
        }
    }

    /// What the person who asked for `target` is told.
    pub fn explain(&self, target: &str) -> String {
        match self {
            Refusal::NotAMember(why) => why.to_string(),
            Refusal::NoPrimaryYet => "the cluster has no primary yet".into(),
            Refusal::ChangeInProgress(to) => {
                format!("a primary change to {to} is already in progress")
            }
            Refusal::AlreadyPrimary => format!("{target} is already the primary"),
            Refusal::Fenced => format!("{target} is fenced; unfence it first"),
            Refusal::Diverged => format!("{target} has diverged from the primary"),
            Refusal::Unreachable => format!("{target} is unreachable"),
            Refusal::NotReady(what) => format!("{target} is not ready ({what})"),
            Refusal::NotAReplica => format!("{target} is not a replica"),
            Refusal::ReplicationUnhealthy(what) => {
                format!("{target} replication is not healthy ({what})")
            }
            Refusal::NoReplication => format!("{target} has no replication configured"),
            Refusal::PrimaryUnreachable(p) => format!(
                "the primary {p} is not reachable; a switchover needs it (failover handles a failed primary)"
            ),
            Refusal::UnreadableHistory(why) => why.clone(),
            Refusal::HistoryDiverged => {
                format!("the GTID history of {target} has diverged from the primary's")
            }
            Refusal::Lagging { lag, instead } => format!(
                "{target} is {lag} s behind the primary (a switchover waits for its target to apply everything, and more than {MAX_TARGET_LAG_SECS} s is a backlog, not a moment); {}",
                match instead {
                    Some(i) => format!("{i} is caught up: switch over to it instead"),
                    None => "no replica is caught up: ask again once one is".into(),
                }
            ),
            Refusal::Paused => format!(
                "reconciliation is paused ({}={}): remove the annotation first",
                crate::pause::ANNOTATION,
                crate::pause::PAUSED
            ),
        }
    }
}

/// Check what can be checked of a switchover request from the Cluster alone
/// (its spec and status), before any instance is asked: the plugin runs this
/// on the client side, and [`validate`] starts with it.
pub fn validate_request(
    cluster: &str,
    spec: &ClusterSpec,
    paused: bool,
    status: &ClusterStatus,
    target: &str,
) -> Result<(), Refusal> {
    possible(cluster, spec, paused, status, target)?;
    caught_up(status, target)
}

/// [`validate_request`] but for the target's lag.
fn possible(
    cluster: &str,
    spec: &ClusterSpec,
    paused: bool,
    status: &ClusterStatus,
    target: &str,
) -> Result<(), Refusal> {
    crate::status::check_member(cluster, spec, target).map_err(Refusal::NotAMember)?;
    // Paused, nothing would watch the change through (the managers would
    // still carry it out).
    if paused {
        return Err(Refusal::Paused);
    }
    let current = status
        .current_primary
        .as_deref()
        .ok_or(Refusal::NoPrimaryYet)?;
    if status.target_primary.as_deref() != Some(current) {
        return Err(Refusal::ChangeInProgress(
            status.target_primary.clone().unwrap_or_else(|| "?".into()),
        ));
    }
    if target == current {
        return Err(Refusal::AlreadyPrimary);
    }
    if status.fenced_instances.iter().any(|n| n == target) {
        return Err(Refusal::Fenced);
    }
    if status.diverged_instances.iter().any(|n| n == target) {
        return Err(Refusal::Diverged);
    }
    Ok(())
}

/// A switchover written into a status by [`request`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requested {
    pub from: String,
    pub to: String,
}

impl Requested {
    /// The Event every platform records: (reason, message).
    pub fn event(&self) -> (&'static str, String) {
        (
            "SwitchoverRequested",
            format!("switchover from {} to {} requested", self.from, self.to),
        )
    }
}

/// Ask for a switchover to `target` in `status`: checked against the
/// Cluster alone ([`validate_request`]; a platform that can see the
/// instances runs [`validate`] first), then targetPrimary, its timestamp
/// and the phase are set, in one write. The platform writes the changed
/// status only while it is still the one this was computed from.
pub fn request(
    cluster: &str,
    spec: &ClusterSpec,
    annotations: &std::collections::BTreeMap<String, String>,
    status: &mut ClusterStatus,
    target: &str,
    now_ms: i64,
) -> Result<Requested, Refusal> {
    let paused = crate::pause::paused(annotations);
    validate_request(cluster, spec, paused, status, target)?;
    Ok(write(status, target, &crate::time::timestamp(now_ms)))
}

/// Write a switchover from the current primary to `target` into `status`:
/// targetPrimary, its timestamp (`at`, RFC 3339) and the phase, in one
/// write. Every switchover is written here: a user's ([`request`]) and the
/// rollout's (`status_change::StatusChange::Switchover`).
pub fn write(status: &mut ClusterStatus, target: &str, at: &str) -> Requested {
    let from = status.current_primary.clone().unwrap_or_default();
    status.target_primary = Some(target.to_string());
    status.target_primary_timestamp = Some(at.to_string());
    // With the target, in the same write: the phase decides how the new
    // primary drains (`role::drain_rule`). A phase left at FailingOver by a
    // failover just done would let it open writes without catching up with
    // the old primary.
    status.phase = Some(Phase::Switchover);
    status.phase_reason = Some(format!("switching over from {from} to {target}"));
    Requested {
        from,
        to: target.to_string(),
    }
}

/// The largest lag (the server's whole seconds) of a replica a user's
/// switchover is accepted for. A target further behind is refused at once,
/// naming a replica that is caught up: the primary would keep serving
/// while the target worked through its backlog, and give up after
/// `maxSwitchoverDelay` if it never did (under a writer faster than its
/// applier). The control plane's own switchovers (handovers, rollouts)
/// pick the most advanced eligible replica instead ([`eligible`]).
pub const MAX_TARGET_LAG_SECS: u64 = 2;

/// Check that `target` may become primary now, at a user's request: an
/// eligible replica ([`eligible`]) that is caught up.
pub fn validate(s: &Snapshot, target: &str) -> Result<(), Refusal> {
    eligible(s, target)?;
    caught_up(&s.status, target)
}

/// The lag of `name` in the status, if it is past the bound.
fn lag_past_bound(status: &ClusterStatus, name: &str) -> Option<u64> {
    status
        .instance_states
        .get(name)
        .and_then(|st| st.lag_seconds)
        .filter(|lag| *lag > MAX_TARGET_LAG_SECS)
}

/// `target`'s lag in the status within [`MAX_TARGET_LAG_SECS`]; refused
/// otherwise, naming a ready replica that is.
fn caught_up(status: &ClusterStatus, target: &str) -> Result<(), Refusal> {
    let Some(lag) = lag_past_bound(status, target) else {
        return Ok(());
    };
    let instead = status
        .instance_states
        .iter()
        .filter(|(n, st)| *n != target && st.role == "replica" && st.ready)
        .filter(|(n, _)| !status.fenced_instances.contains(n))
        .filter(|(n, _)| !status.diverged_instances.contains(n))
        .find(|(n, _)| lag_past_bound(status, n).is_none())
        .map(|(n, _)| n.clone());
    Err(Refusal::Lagging { lag, instead })
}

/// Check that `target` could take the primary role over: a ready, healthy
/// replica of the primary's history. Lag is not judged here (see
/// [`validate`]).
pub fn eligible(s: &Snapshot, target: &str) -> Result<(), Refusal> {
    let paused = crate::pause::paused(&s.declared.asked.cluster);
    possible(&s.cluster, &s.spec, paused, &s.status, target)?;
    let current = s.status.current_primary.as_deref().unwrap_or_default();
    let st = s
        .get(target)
        .and_then(|o| o.status.as_ref())
        .ok_or(Refusal::Unreachable)?;
    if !st.ready {
        return Err(Refusal::NotReady(format!(
            "{:?}{}",
            st.phase,
            if st.message.is_empty() {
                String::new()
            } else {
                format!(": {}", st.message)
            }
        )));
    }
    if st.role != Role::Replica {
        return Err(Refusal::NotAReplica);
    }
    match &st.replication {
        Some(r) if r.healthy() => {}
        Some(r) => {
            return Err(Refusal::ReplicationUnhealthy(format!(
                "IO {}, SQL running {}, {} {}",
                r.io_state, r.sql_running, r.last_io_error, r.last_sql_error
            )));
        }
        None => return Err(Refusal::NoReplication),
    }
    let flavor = s.spec.mysql.flavor;
    let mine = crate::status::parse_history(flavor, &st.gtid_executed)
        .map_err(|e| Refusal::UnreadableHistory(format!("{target}: {e}")))?;
    // A planned switchover needs the old primary: it hands over its last
    // transactions. A primary that is down is failover's business.
    let p = s
        .get(current)
        .and_then(|o| o.status.as_ref())
        .filter(|p| p.mysqld_running)
        .ok_or_else(|| Refusal::PrimaryUnreachable(current.to_string()))?;
    let primary = crate::status::parse_history(flavor, &p.gtid_executed)
        .map_err(|e| Refusal::UnreadableHistory(format!("{current}: {e}")))?;
    if mine.relation(&primary) == Relation::Diverged {
        return Err(Refusal::HistoryDiverged);
    }
    Ok(())
}

/// The largest replication lag (whole seconds, as the server reports it) at
/// which a primary hands over to its switchover target: 0, less than a
/// second. Writes stop when the primary turns read-only and resume when the
/// target has applied the rest and opened writes, so the target's lag is
/// the outage: a target further behind (just recreated, or applying a
/// backlog) is waited for while the primary keeps serving, for up to
/// `maxSwitchoverDelay`, after which the switchover is given up with the
/// primary never having stopped.
pub const HAND_OVER_MAX_LAG_SECS: u64 = 0;

/// Whether the primary may turn read-only for a switchover to `target`,
/// given what `target` reports (`None`: it does not answer). `Err` says
/// what is waited for.
pub fn ready_to_hand_over(
    target: &str,
    st: Option<&crate::status::InstanceStatus>,
) -> Result<(), String> {
    let st = st.ok_or_else(|| format!("{target} does not answer"))?;
    if !st.mysqld_running {
        return Err(format!("mysqld of {target} is not running"));
    }
    let r = st
        .replication
        .as_ref()
        .ok_or_else(|| format!("{target} is not replicating"))?;
    if !r.healthy() {
        return Err(format!(
            "replication of {target} is not healthy (IO {}, SQL running {})",
            r.io_state, r.sql_running
        ));
    }
    // The bound is a tunable constant that happens to be 0 today.
    #[allow(clippy::absurd_extreme_comparisons)]
    match (r.seconds_behind, r.applying_lag_millis) {
        (Some(lag), _) if lag <= HAND_OVER_MAX_LAG_SECS => Ok(()),
        (Some(lag), Some(ms)) if lag <= 1 && ms <= HAND_OVER_MAX_APPLYING_LAG_MILLIS => Ok(()),
        (Some(lag), _) => Err(format!("{target} is {lag} s behind")),
        (None, _) => Err(format!("the lag of {target} is unknown")),
    }
}

/// A target whose server counts its lag in whole seconds of a checkpoint
/// (MySQL's `Seconds_Behind_Source` under parallel appliers says 1 as
/// often as not under a steady writer, 0.1–0.4 s behind) is also caught
/// up when it says 1 and the transaction it applies now committed at most
/// this long ago: its backlog is then well under a second.
pub const HAND_OVER_MAX_APPLYING_LAG_MILLIS: u64 = 500;

/// Two reads of a handing-over primary's history, with whether a commit
/// waited for an acknowledgement just before and just after the second:
/// is the history final? Only when nothing waited either time and the
/// history did not move between the reads. A commit waiting at the first
/// read is either still waiting (seen) or completed since (the history
/// moved); one asked about only after the read could complete unseen in
/// between (the old primary's `/status` then said "none waits" beside a
/// history without it: real node, MySQL, seed 3410147549173993031).
pub fn history_settled(first: &str, waited_before: bool, second: &str, waited_after: bool) -> bool {
    !waited_before && !waited_after && first == second
}

/// What a switchover's target must have applied before it promotes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinalPoint {
    /// The old primary's history.
    pub history: String,
    /// With its acknowledgements closed (MySQL): where its binary log
    /// ended then. The target must also have received and applied up to
    /// it (commits still waiting there included: their clients are never
    /// answered, and the old primary is killed with them).
    pub binlog: Option<crate::status::BinlogPoint>,
}

/// The point a switchover's target must have applied before it promotes,
/// read from the old primary's status, once the old primary is read-only.
/// MySQL turns read-only while commits still wait for an acknowledgement,
/// and completes them when a replica acknowledges: a target promoted
/// without one would leave its client told "committed" of a write the new
/// primary lacks. So the point is final either when the old primary can
/// acknowledge nothing any more (`acks_closed_at`: nothing after it can be
/// told committed, by construction) or, without that, when none of its
/// commits waits (asked around the history: `history_settled`, which a
/// commit still being written at the first question can slip). `Err` says
/// what is waited for.
pub fn final_history_of(
    old: &str,
    st: &crate::status::InstanceStatus,
) -> Result<FinalPoint, String> {
    if !st.read_only {
        return Err(format!("waiting for {old} to become read-only"));
    }
    if let Some(at) = &st.acks_closed_at {
        return Ok(FinalPoint {
            history: st.gtid_position.clone(),
            binlog: Some(at.clone()),
        });
    }
    if st.commits_awaiting_ack {
        return Err(format!(
            "waiting for {old}'s last commits, which wait for an acknowledgement"
        ));
    }
    Ok(FinalPoint {
        history: st.gtid_position.clone(),
        binlog: None,
    })
}

/// How a switchover's target stands towards the old primary it drains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Receiver {
    /// Receiving from the old primary.
    Receiving,
    /// Replicating from the old primary with its receiver stopped (an
    /// error, or a person).
    Stopped,
    /// Connecting to it, or replicating from another source.
    Other,
}

/// What the target must do with the old primary's final point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DrainStep {
    /// Apply up to it (its history, and its binary log's end if any).
    Apply(FinalPoint),
    /// Start receiving from the old primary again first: what is missing
    /// could never arrive otherwise, and the old primary would stay
    /// read-only until the switchover is given up.
    ReceiveAgain,
}

/// The old primary's binary log end is a place in what the target
/// receives only while it receives from it; a failover detached every
/// replica from it first, so then only its history counts. A stopped
/// receiver that still lacks part of the history is started again.
pub fn drain_step(
    point: FinalPoint,
    receiver: Receiver,
    failing_over: bool,
    holds_history: bool,
) -> DrainStep {
    match receiver {
        Receiver::Receiving => DrainStep::Apply(point),
        _ if failing_over => DrainStep::Apply(FinalPoint {
            binlog: None,
            ..point
        }),
        _ if point.binlog.is_some() => DrainStep::ReceiveAgain,
        Receiver::Stopped if !holds_history => DrainStep::ReceiveAgain,
        _ => DrainStep::Apply(point),
    }
}

/// How a switchover in progress stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// No switchover in progress.
    Idle,
    Waiting,
    /// The target did not take over within maxSwitchoverDelay: give the role
    /// back to the old primary and report it blocked.
    Abort {
        reason: String,
    },
}

/// How a switchover under way stands; `away`: instances leaving on notice
/// or proven gone (the platform's word), which cannot take over.
pub fn progress(s: &Snapshot, away: &[String]) -> Progress {
    let (Some(current), Some(target)) = (
        s.status.current_primary.as_deref(),
        s.status.target_primary.as_deref(),
    ) else {
        return Progress::Idle;
    };
    if current == target || s.status.phase == Some(cnmysql_api::Phase::FailingOver) {
        return Progress::Idle;
    }
    let requested = s
        .status
        .target_primary_timestamp
        .as_deref()
        .and_then(crate::time::parse_ms)
        .unwrap_or(s.now_ms);
    if let Some(reason) = fell_behind(s, current, target) {
        return Progress::Abort { reason };
    }
    // Its Pod is being deleted or gone (every Pod of the cluster deleted
    // at once, say): it will not take over, and a leaving primary's hook
    // would hold its shutdown, read-only, until the handover's deadline.
    if away.iter().any(|l| l == target) {
        return Progress::Abort {
            reason: format!(
                "switchover to {target} given up: {target} is leaving or gone (its Pod is being deleted, or its processes stopped); {current} stays primary"
            ),
        };
    }
    let limit = s.spec.max_switchover_delay.max(0).saturating_mul(1000);
    if s.now_ms > requested.saturating_add(limit) {
        Progress::Abort {
            reason: format!(
                "switchover to {target} blocked: it did not catch up with {current} within maxSwitchoverDelay ({}s); {current} stays primary",
                s.spec.max_switchover_delay
            ),
        }
    } else {
        Progress::Waiting
    }
}

/// A target that became a lagging replica (`lagging.rs`: more than
/// `maxReplicaLagSeconds` behind) while the primary waits for it to catch
/// up: the primary commits faster than the target applies, and waiting
/// (up to `maxSwitchoverDelay`) would only let its backlog grow. Given up
/// at once, with the reason; the primary never stopped serving.
fn fell_behind(s: &Snapshot, current: &str, target: &str) -> Option<String> {
    if !crate::lagging::instances(s).iter().any(|l| l == target) {
        return None;
    }
    let lag = s.get(target)?.status.as_ref()?.lag_seconds?;
    Some(format!(
        "switchover to {target} given up: it fell {lag} s behind {current} while waiting to take over (more than maxReplicaLagSeconds, {} s: {current} commits faster than {target} applies); {current} stays primary",
        s.spec.max_replica_lag_seconds
    ))
}

#[cfg(test)]
mod tests;
