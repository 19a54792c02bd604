//! Re-initialising an instance: what only it holds is saved, then its data
//! is replaced by a fresh clone of the primary.
//!
//! Two ways in. A user asks (`reinit`, for any instance but the primary),
//! or a diverged instance heals itself when `spec.mysql.divergedInstances`
//! is `automatic` and what it alone holds provably includes no write a
//! client was told had committed:
//!
//! - under `dataDurability: required` by construction: a commit is
//!   acknowledged only once a replica holds it, failover promotes only a
//!   replica holding everything any visible replica holds, and it waits
//!   for every replica that may hold an acknowledged write
//!   (`failover::required_histories`). What the new primary lacks was
//!   therefore never acknowledged;
//! - otherwise only when the instance never acknowledged a commit without a
//!   replica during its term as primary: its manager records, before it
//!   lets the server do so (semi-sync off, or fallen back under
//!   `preferred`), that it may have (`acked_alone`), and clears the record
//!   once a replica holds everything again.
//!
//! Never two at once, never the primary, and never without a running
//! primary to clone: the instance being re-initialised is named in
//! `status.reinitializing`, claimed with a conditional status write.

use cnmysql_api::{ClusterSpec, ClusterStatus, DivergedInstances, SavedTransactions};

/// How many saved-transaction records the status keeps.
pub const SAVED_KEPT: usize = 20;

/// What the manager of an instance does about re-initialisation now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Nothing asked, nothing diverged.
    Nothing,
    /// Save what only it holds, then re-clone from the primary.
    Reclone { primary: String },
    /// Diverged and not provably safe to discard: stay out, with the reason.
    KeepOut(String),
    /// Asked or allowed, but not now: the reason.
    Wait(String),
}

/// What the manager knows of its own instance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Local<'a> {
    /// The record that this instance, as primary, may have acknowledged
    /// commits without a replica.
    pub acked_alone: Option<&'a str>,
    /// What it holds beyond the primary includes transactions of other
    /// sources: received as a replica, which may have acknowledged them.
    pub holds_others_writes: bool,
}

/// The decision for `me`.
pub fn next(me: &str, spec: &ClusterSpec, status: &ClusterStatus, local: Local) -> Next {
    let diverged = status.diverged_instances.iter().any(|n| n == me);
    let requested = status.reinit_requests.iter().any(|n| n == me);
    let resuming = status.reinitializing.as_deref() == Some(me);
    if !diverged && !requested && !resuming {
        return Next::Nothing;
    }
    if diverged
        && !requested
        && !resuming
        && let Err(why) = automatic_allowed(me, spec, local)
    {
        return Next::KeepOut(why);
    }
    match source(me, status) {
        Err(why) => Next::Wait(why),
        Ok(_) if !resuming && status.reinitializing.is_some() => Next::Wait(format!(
            "{} is being re-initialised; one instance at a time",
            status.reinitializing.as_deref().unwrap_or_default()
        )),
        Ok(primary) => Next::Reclone { primary },
    }
}

/// Whether a diverged instance may re-clone itself without being asked.
pub fn automatic_allowed(me: &str, spec: &ClusterSpec, local: Local) -> Result<(), String> {
    let ask = format!(
        "run `kubectl cnmsql reinit CLUSTER {me}` (or `cnmysql local reinit CLUSTER {me}`) to save its transactions and re-clone it"
    );
    if spec.mysql.diverged_instances == DivergedInstances::Manual {
        return Err(format!(
            "spec.mysql.divergedInstances is manual: it stays out until {ask}"
        ));
    }
    if let Some(record) = local.acked_alone {
        return Err(format!(
            "as primary it acknowledged commits no replica had ({record}): what only it holds may include writes a client was told had committed; {ask} once you have checked them"
        ));
    }
    let semi = &spec.mysql.semi_sync;
    if !semi.enabled {
        return Err(format!(
            "semi-sync is off, so as primary it acknowledged every commit without a replica: what only it holds may include writes a client was told had committed; {ask} once you have checked them"
        ));
    }
    // Under `preferred` failover need not wait for every replica, so a
    // replica left behind may hold writes it acknowledged that the new
    // primary lacks. Only its own writes as primary are provably
    // unacknowledged (no record: it never acknowledged alone).
    if semi.data_durability != cnmysql_api::DataDurability::Required && local.holds_others_writes {
        return Err(format!(
            "it holds transactions of another primary that the current one lacks, which it may have acknowledged as a replica (dataDurability: preferred); {ask} once you have checked them"
        ));
    }
    // `required` never falls back; `preferred` without a record never did:
    // the manager records a fallback before it lets the server make one.
    Ok(())
}

/// The primary to clone from: the accepted one, not `me`, ready, and not
/// in the middle of a change.
fn source(me: &str, status: &ClusterStatus) -> Result<String, String> {
    let Some(primary) = status.current_primary.clone() else {
        return Err("no primary to clone from".into());
    };
    if primary == me {
        return Err(format!(
            "{me} is the primary: switch over to another instance first"
        ));
    }
    if status.target_primary.as_deref() != Some(primary.as_str()) {
        return Err(format!(
            "the primary is changing ({primary} is leaving); waiting"
        ));
    }
    let ready = status
        .instance_states
        .get(&primary)
        .is_some_and(|s| s.ready && !s.read_only);
    if !ready {
        return Err(format!(
            "the primary {primary} is not ready and writable; waiting"
        ));
    }
    Ok(primary)
}

/// Why a request to re-initialise an instance is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(transparent)]
    NotAMember(#[from] crate::status::NotAMember),
    #[error(
        "{0} is the primary: re-initialising it would replace the cluster's newest data; switch over to another instance first (`promote`)"
    )]
    Primary(String),
    #[error(
        "the cluster has no primary: {0} may hold the newest history and nothing could give it a copy"
    )]
    NoPrimary(String),
    #[error("a primary change is under way (to {0}): ask again once it is done")]
    PrimaryChanging(String),
}

/// A user's request to re-initialise `instance`, refused with the reason
/// for the primary (it would take the cluster's writes with it) or when no
/// primary could give it a copy (it may hold the newest history).
pub fn request(status: &mut ClusterStatus, instance: &str) -> Result<bool, Refusal> {
    if status.current_primary.as_deref() == Some(instance) {
        return Err(Refusal::Primary(instance.to_string()));
    }
    let Some(primary) = status.current_primary.clone() else {
        return Err(Refusal::NoPrimary(instance.to_string()));
    };
    if status.target_primary.as_deref() != Some(primary.as_str()) {
        let to = status.target_primary.as_deref().unwrap_or("?");
        return Err(Refusal::PrimaryChanging(to.to_string()));
    }
    if status.reinit_requests.iter().any(|n| n == instance) {
        return Ok(false);
    }
    status.reinit_requests.push(instance.to_string());
    status.reinit_requests.sort();
    Ok(true)
}

/// Whether a replica's receiver stopped because its source no longer has
/// the binary logs with the transactions it lacks: it cannot catch up by
/// replication any more (MySQL error 13114 carrying the source's 1236,
/// MariaDB's 1236). A replica holding nothing the primary lacks then asks
/// for its own re-initialisation: a clone loses nothing it holds.
pub fn stranded(r: &crate::status::ReplicationStatus) -> bool {
    let e = &r.last_io_error;
    matches!(r.last_io_errno, 1236 | 13114)
        && (e.contains("purged") || e.contains("Could not find GTID state"))
}

/// The event of a stranded replica's own request.
pub fn stranded_event(instance: &str, primary: &str) -> crate::event::Event {
    crate::event::Event::new(
        true,
        "ReinitRequested",
        Some(instance),
        format!(
            "{instance} cannot catch up: {primary} no longer has the binary logs with the transactions it lacks; it holds nothing {primary} lacks, so it re-clones itself"
        ),
    )
}

/// The event of an accepted request.
pub fn requested_event(instance: &str) -> crate::event::Event {
    crate::event::Event::new(
        false,
        "ReinitRequested",
        Some(instance),
        format!(
            "re-initialisation of {instance} requested: it saves what only it holds, then re-clones itself from the primary"
        ),
    )
}

/// Where a requested re-initialisation of `instance` stands, for the
/// person waiting on it: `None` once it is done (the instance is back and
/// ready), else a line saying what happens now.
pub fn progress(status: &ClusterStatus, instance: &str) -> Option<String> {
    let state = status.instance_states.get(instance);
    let pending = status.reinit_requests.iter().any(|n| n == instance)
        || status.reinitializing.as_deref() == Some(instance)
        || status.diverged_instances.iter().any(|n| n == instance);
    if !pending && state.is_some_and(|s| s.ready) {
        return None;
    }
    let phase = state
        .map(|s| s.phase.as_str())
        .filter(|p| !p.is_empty())
        .unwrap_or("unreachable");
    Some(if status.reinitializing.as_deref() == Some(instance) {
        format!("{instance}: re-initialising ({phase})")
    } else if pending {
        match &status.reinitializing {
            Some(other) => format!("{instance}: waiting for {other} to finish re-initialising"),
            None => format!("{instance}: requested ({phase})"),
        }
    } else {
        format!("{instance}: re-cloned, starting ({phase})")
    })
}

/// Another instance is being re-initialised (one at a time).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0} is being re-initialised")]
pub struct Busy(pub String);

/// Name `me` as the instance being re-initialised, unless another is.
pub fn claim(status: &mut ClusterStatus, me: &str) -> Result<(), Busy> {
    match status.reinitializing.as_deref() {
        Some(other) if other != me => Err(Busy(other.to_string())),
        _ => {
            status.reinitializing = Some(me.to_string());
            Ok(())
        }
    }
}

/// `me` is back, with a fresh copy: no longer diverged, asked for or being
/// re-initialised.
pub fn finish(status: &mut ClusterStatus, me: &str) {
    if status.reinitializing.as_deref() == Some(me) {
        status.reinitializing = None;
    }
    status.reinit_requests.retain(|n| n != me);
    status.diverged_instances.retain(|n| n != me);
    status.diverged_reasons.remove(me);
}

/// Record saved transactions (before the data that held them is replaced).
pub fn record_saved(status: &mut ClusterStatus, saved: SavedTransactions) {
    if status.saved_transactions.contains(&saved) {
        return;
    }
    status.saved_transactions.push(saved);
    let excess = status.saved_transactions.len().saturating_sub(SAVED_KEPT);
    status.saved_transactions.drain(..excess);
}

/// Record why `me` diverged and what happens next, for `status`.
pub fn note_diverged(status: &mut ClusterStatus, me: &str, reason: &str) -> bool {
    let added = !status.diverged_instances.iter().any(|n| n == me);
    if added {
        status.diverged_instances.push(me.to_string());
        status.diverged_instances.sort();
    }
    let changed = status.diverged_reasons.get(me).map(String::as_str) != Some(reason);
    if changed {
        status
            .diverged_reasons
            .insert(me.to_string(), reason.to_string());
    }
    added || changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use cnmysql_api::{DataDurability, InstanceState};

    fn spec(durability: DataDurability, semi: bool) -> ClusterSpec {
        let mut s: ClusterSpec =
            serde_json::from_value(serde_json::json!({"instances": 3})).unwrap();
        s.mysql.semi_sync.enabled = semi;
        s.mysql.semi_sync.data_durability = durability;
        s
    }

    #[test]
    fn a_replica_whose_source_purged_what_it_lacks_is_stranded() {
        use crate::status::ReplicationStatus;
        let io = |errno, e: &str| ReplicationStatus {
            last_io_errno: errno,
            last_io_error: e.into(),
            ..Default::default()
        };
        // What MySQL 9.7 and MariaDB 10.11 say.
        assert!(stranded(&io(
            13114,
            "Got fatal error 1236 from source when reading data from binary log: 'Cannot replicate because the source purged required binary logs. Replicate the missing transactions from elsewhere, or provision a new replica from backup.'"
        )));
        assert!(stranded(&io(
            1236,
            "Got fatal error 1236 from master when reading data from binary log: 'Could not find GTID state requested by slave in any binlog files. Probably the slave state is too old and required binlog files have been purged.'"
        )));
        // Other receiver errors are not.
        assert!(!stranded(&io(2003, "error connecting to master")));
        assert!(!stranded(&io(
            13114,
            "Got fatal error 1236 from source when reading data from binary log: 'log event entry exceeded max_allowed_packet'"
        )));
        assert!(!stranded(&io(0, "")));
    }

    fn healthy(primary: &str) -> ClusterStatus {
        let mut st = ClusterStatus {
            current_primary: Some(primary.into()),
            target_primary: Some(primary.into()),
            ..Default::default()
        };
        st.instance_states.insert(
            primary.into(),
            InstanceState {
                role: "primary".into(),
                ready: true,
                ..Default::default()
            },
        );
        st
    }

    fn alone(record: &str) -> Local<'_> {
        Local {
            acked_alone: Some(record),
            ..Default::default()
        }
    }

    fn diverged(me: &str) -> ClusterStatus {
        let mut st = healthy("db-2");
        note_diverged(
            &mut st,
            me,
            "its history holds 1 transaction the primary lacks",
        );
        st
    }

    #[test]
    fn under_required_a_diverged_instance_recloning_itself_is_safe_by_construction() {
        let st = diverged("db-1");
        let n = next(
            "db-1",
            &spec(DataDurability::Required, true),
            &st,
            Local::default(),
        );
        assert_eq!(
            n,
            Next::Reclone {
                primary: "db-2".into()
            }
        );
    }

    #[test]
    fn under_preferred_only_an_instance_that_never_acknowledged_alone_heals_itself() {
        let st = diverged("db-1");
        let s = spec(DataDurability::Preferred, true);
        assert_eq!(
            next("db-1", &s, &st, Local::default()),
            Next::Reclone {
                primary: "db-2".into()
            }
        );
        let Next::KeepOut(why) = next(
            "db-1",
            &s,
            &st,
            alone("fell back to asynchronous replication at 12:00"),
        ) else {
            panic!("kept out when it acknowledged alone");
        };
        assert!(why.contains("fell back") && why.contains("reinit"), "{why}");
        // Even under required: a record means a commit may have been
        // acknowledged alone (durability lowered during the term).
        let r = next(
            "db-1",
            &spec(DataDurability::Required, true),
            &st,
            alone("x"),
        );
        assert!(matches!(r, Next::KeepOut(_)), "{r:?}");
    }

    #[test]
    fn under_preferred_a_replica_holding_another_primarys_writes_waits_for_a_person() {
        let st = diverged("db-1");
        let others = Local {
            holds_others_writes: true,
            ..Default::default()
        };
        let Next::KeepOut(why) = next("db-1", &spec(DataDurability::Preferred, true), &st, others)
        else {
            panic!("it may have acknowledged them");
        };
        assert!(why.contains("another primary"), "{why}");
        // Under required failover waited for it: nothing it holds was acknowledged.
        assert_eq!(
            next("db-1", &spec(DataDurability::Required, true), &st, others),
            Next::Reclone {
                primary: "db-2".into()
            }
        );
    }

    #[test]
    fn with_semi_sync_off_or_a_manual_policy_a_diverged_instance_waits_for_a_person() {
        let st = diverged("db-1");
        let Next::KeepOut(why) = next(
            "db-1",
            &spec(DataDurability::Preferred, false),
            &st,
            Local::default(),
        ) else {
            panic!("semi-sync off: every commit was acknowledged alone");
        };
        assert!(why.contains("semi-sync is off"), "{why}");
        let mut manual = spec(DataDurability::Required, true);
        manual.mysql.diverged_instances = DivergedInstances::Manual;
        let Next::KeepOut(why) = next("db-1", &manual, &st, Local::default()) else {
            panic!("manual policy");
        };
        assert!(
            why.contains("spec.mysql.divergedInstances is manual"),
            "{why}"
        );
    }

    #[test]
    fn a_request_overrides_the_policy_but_never_the_primary_or_a_missing_one() {
        let s = spec(DataDurability::Preferred, false);
        let mut st = diverged("db-1");
        assert_eq!(request(&mut st, "db-1"), Ok(true));
        assert_eq!(request(&mut st, "db-1"), Ok(false));
        assert_eq!(
            next("db-1", &s, &st, alone("x")),
            Next::Reclone {
                primary: "db-2".into()
            }
        );
        let e = request(&mut st, "db-2").unwrap_err();
        assert_eq!(e, Refusal::Primary("db-2".into()));
        let e = e.to_string();
        assert!(
            e.contains("is the primary") && e.contains("switch over"),
            "{e}"
        );
        let mut none = ClusterStatus::default();
        let e = request(&mut none, "db-3").unwrap_err().to_string();
        assert!(
            e.contains("no primary") && e.contains("newest history"),
            "{e}"
        );
    }

    #[test]
    fn never_two_at_once_and_never_onto_a_primary_that_is_not_serving() {
        let s = spec(DataDurability::Required, true);
        let mut st = diverged("db-1");
        note_diverged(&mut st, "db-3", "x");
        claim(&mut st, "db-3").unwrap();
        assert!(claim(&mut st, "db-1").is_err());
        let Next::Wait(why) = next("db-1", &s, &st, Local::default()) else {
            panic!("one at a time");
        };
        assert!(why.contains("db-3 is being re-initialised"), "{why}");
        // The one that claimed goes on.
        assert_eq!(
            next("db-3", &s, &st, Local::default()),
            Next::Reclone {
                primary: "db-2".into()
            }
        );
        finish(&mut st, "db-3");
        assert!(st.reinitializing.is_none() && !st.diverged_instances.contains(&"db-3".into()));
        // A primary in the middle of a change, or not ready: wait.
        st.target_primary = Some("db-3".into());
        assert!(matches!(
            next("db-1", &s, &st, Local::default()),
            Next::Wait(_)
        ));
        st.target_primary = Some("db-2".into());
        st.instance_states.get_mut("db-2").unwrap().ready = false;
        assert!(matches!(
            next("db-1", &s, &st, Local::default()),
            Next::Wait(_)
        ));
    }

    #[test]
    fn finishing_records_what_was_saved_and_keeps_the_last_twenty() {
        let mut st = diverged("db-1");
        claim(&mut st, "db-1").unwrap();
        for i in 0..25 {
            record_saved(
                &mut st,
                SavedTransactions {
                    instance: "db-1".into(),
                    gtid_set: format!("u:{i}"),
                    ..Default::default()
                },
            );
        }
        finish(&mut st, "db-1");
        assert_eq!(st.saved_transactions.len(), SAVED_KEPT);
        assert_eq!(st.saved_transactions.last().unwrap().gtid_set, "u:24");
        assert!(st.diverged_instances.is_empty() && st.diverged_reasons.is_empty());
    }

    #[test]
    fn progress_ends_when_the_instance_is_back_and_ready() {
        let mut st = diverged("db-1");
        request(&mut st, "db-1").unwrap();
        assert!(progress(&st, "db-1").unwrap().contains("requested"));
        claim(&mut st, "db-1").unwrap();
        assert!(progress(&st, "db-1").unwrap().contains("re-initialising"));
        finish(&mut st, "db-1");
        assert!(progress(&st, "db-1").unwrap().contains("starting"));
        st.instance_states.insert(
            "db-1".into(),
            InstanceState {
                ready: true,
                ..Default::default()
            },
        );
        assert_eq!(progress(&st, "db-1"), None);
    }

    #[test]
    fn a_healthy_instance_not_asked_for_does_nothing() {
        let st = healthy("db-2");
        assert_eq!(
            next(
                "db-1",
                &spec(DataDurability::Required, true),
                &st,
                Local::default()
            ),
            Next::Nothing
        );
    }
}
