//! Replica clusters (`spec.replica`): what the status says of one, and
//! when its designated primary may stop following its source and open
//! writes (a promotion). Pure functions of what was observed.

use cnmysql_api::replica::{ReplicaSpec, ReplicaStatus};
use cnmysql_api::{ClusterSpec, Flavor};

use crate::status::{Snapshot, history_reaches};

/// `status.replica` for this snapshot: the spec's part, and what the
/// designated primary (the current primary) shows of its replication.
pub fn status(s: &Snapshot) -> Option<ReplicaStatus> {
    let Some(r) = s.spec.replica.as_ref() else {
        // `spec.replica` removed: the record stays, as promoted (a manager
        // started with the block must not read its absence as "follow").
        return s.status.replica.as_ref().map(|old| ReplicaStatus {
            enabled: false,
            source: old.source.clone(),
            ..Default::default()
        });
    };
    let mut out = declared(r);
    let primary = s
        .status
        .current_primary
        .as_deref()
        .and_then(|p| s.get(p))
        .and_then(|o| o.status.as_ref());
    let Some(p) = primary else {
        // Nothing seen this time: keep what was last recorded.
        if let Some(old) = &s.status.replica {
            out.gtid_position = old.gtid_position.clone();
            out.lag_seconds = old.lag_seconds;
        }
        return Some(out);
    };
    out.gtid_position = Some(p.gtid_executed.clone()).filter(|g| !g.is_empty());
    if r.source.object_store.is_some() {
        from_archive(&mut out, p, r.enabled);
        return Some(out);
    }
    let following = p
        .replication
        .as_ref()
        .filter(|x| format!("{}:{}", x.source_host, x.source_port) == r.source.address());
    if let Some(x) = following {
        out.receiving = x.io_state == "Yes";
        out.lag_seconds = x.seconds_behind;
        let error = [&x.last_io_error, &x.last_sql_error]
            .into_iter()
            .find(|e| !e.is_empty());
        out.last_error = error.cloned();
    } else if r.enabled {
        out.last_error = Some(if p.message.is_empty() {
            "the designated primary does not follow the source yet".to_string()
        } else {
            p.message.clone()
        });
    }
    Some(out)
}

/// What a designated primary following a binlog archive shows.
fn from_archive(out: &mut ReplicaStatus, p: &crate::status::InstanceStatus, enabled: bool) {
    match &p.archive_replica {
        Some(a) => {
            out.receiving = a.reading && a.error.is_none();
            out.lag_seconds = a.lag_seconds;
            out.last_error = a.error.clone();
        }
        None if enabled => {
            out.last_error = Some(if p.message.is_empty() {
                "the designated primary does not follow the binlog archive yet".to_string()
            } else {
                p.message.clone()
            });
        }
        None => {}
    }
}

/// The part of `status.replica` the spec decides.
pub fn declared(r: &ReplicaSpec) -> ReplicaStatus {
    ReplicaStatus {
        enabled: r.enabled,
        source: r.source.address(),
        tls_server_name: r.source.tls_server_name.clone(),
        promotion_token: r.promotion_token.clone(),
        object_store: r.source.object_store.clone().map(Box::new),
        ..Default::default()
    }
}

/// The status an instance manager acts on: the recorded one, or, before
/// the control plane first wrote it, what the spec the manager started
/// with declares (a new replica cluster's first primary must never open
/// writes).
pub fn with_declared(
    mut status: cnmysql_api::ClusterStatus,
    spec: &ClusterSpec,
) -> cnmysql_api::ClusterStatus {
    if status.replica.is_none() {
        status.replica = spec.replica.as_ref().map(declared);
    }
    status
}

/// Where a promotion of the designated primary stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Promotion {
    /// Keep receiving: the promotion token is not applied yet.
    AwaitToken(String),
    /// Stop receiving, then apply what was received.
    StopReceiving,
    /// Received transactions are still being applied.
    Applying(String),
    /// Everything received is applied: forget the source, open writes.
    Ready,
}

/// The next step of a promotion, from the designated primary's executed
/// history, the token, whether it still receives, and what it received.
pub fn promotion(
    f: Flavor,
    executed: &str,
    token: Option<&str>,
    receiving: bool,
    received: &str,
) -> Promotion {
    if let Some(t) = token.filter(|t| !t.trim().is_empty())
        && !history_reaches(f, executed, t)
    {
        return Promotion::AwaitToken(format!(
            "waiting for the promotion token {t} (applied so far: {executed})"
        ));
    }
    if receiving {
        return Promotion::StopReceiving;
    }
    if !received.is_empty() && !history_reaches(f, executed, received) {
        return Promotion::Applying(format!(
            "applying what was received from the source ({received}) before opening writes"
        ));
    }
    Promotion::Ready
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_promotion_waits_for_its_token_then_drains_what_was_received() {
        let f = Flavor::Mariadb;
        assert!(matches!(
            promotion(f, "0-1-10", Some("0-1-12"), true, "0-1-12"),
            Promotion::AwaitToken(_)
        ));
        assert_eq!(
            promotion(f, "0-1-12", Some("0-1-12"), true, "0-1-12"),
            Promotion::StopReceiving
        );
        assert!(matches!(
            promotion(f, "0-1-11", None, false, "0-1-12"),
            Promotion::Applying(_)
        ));
        assert_eq!(
            promotion(f, "0-1-12", None, false, "0-1-12"),
            Promotion::Ready
        );
        assert_eq!(promotion(f, "0-1-12", None, false, ""), Promotion::Ready);
        let m = Flavor::Mysql;
        let u = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        assert!(matches!(
            promotion(m, &format!("{u}:1-5"), Some(&format!("{u}:1-7")), true, ""),
            Promotion::AwaitToken(_)
        ));
        assert_eq!(
            promotion(
                m,
                &format!("{u}:1-7"),
                Some(&format!("{u}:1-7")),
                false,
                &format!("{u}:1-7")
            ),
            Promotion::Ready
        );
    }

    #[test]
    fn a_new_replica_clusters_manager_follows_its_spec_before_the_status_says_so() {
        let spec: ClusterSpec = serde_json::from_value(serde_json::json!({
            "instances": 3,
            "replica": {"enabled": true, "source": {"host": "db-rw.east", "port": 3306}}
        }))
        .unwrap();
        let st = with_declared(cnmysql_api::ClusterStatus::default(), &spec);
        assert_eq!(crate::role::replica_source(&st), Some("db-rw.east:3306"));
        let mut promoted = st.clone();
        promoted.replica.as_mut().unwrap().enabled = false;
        let kept = with_declared(promoted, &spec);
        assert_eq!(
            crate::role::replica_source(&kept),
            None,
            "the status wins once written"
        );
    }
}
