//! What the topology step asks a platform to carry out.

use std::collections::BTreeMap;

use crate::event::Event;
use crate::semisync::Settings;
use crate::status_change::StatusChange;

/// What the platform is asked to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Record an event (and tell the human watching).
    Event(Event),
    /// Change the status if it still applies; record `then` only if it did.
    Status {
        change: StatusChange,
        then: Vec<Event>,
    },
    /// Stop every process of the instance now and keep it stopped, its data
    /// kept (locally: kill its manager and mysqld; Kubernetes: delete its
    /// Pod, keep its claim, do not recreate it until released).
    FenceOut(String),
    /// Release the primary Lease on behalf of `holder`, fenced out above —
    /// only once the platform has proof that none of its processes can
    /// still write (otherwise the lease simply runs out).
    ReleaseLease { holder: String },
    /// Hand the primary Lease from `from` to the failover's candidate
    /// `to` before it expires, only if it is still held by `from` as
    /// renewed at `seen_renew_ms` (`lease::Lease::pass`), then record
    /// `then`; an error when not, which stops the actions after it.
    PassLease {
        from: String,
        to: String,
        seen_renew_ms: i64,
        then: Event,
    },
    /// Let a held-down instance start again (it rejoins as a replica, or is
    /// found diverged).
    Restart(String),
    /// Set the primary's semi-sync settings over its control API; record
    /// `then` when it accepted them.
    SemiSync {
        instance: String,
        settings: Settings,
        then: Event,
    },
    /// Give the instance's manager a new executable in place: the
    /// operator's own, streamed (`POST /instance/manager/upgrade`), or a
    /// file on its filesystem (`POST /instance/manager/upgrade-from-file`);
    /// it re-execs, mysqld keeps running. Record `then` when the manager
    /// accepted it. `attempt`: the annotation-driven upgrade this step
    /// belongs to, recorded failed if the manager refuses.
    UpgradeInPlace {
        instance: String,
        source: crate::upgrade::annotations::Source,
        attempt: Option<cnmysql_api::InstanceUpgrade>,
        then: Event,
    },
    /// Set (Some) or remove annotations on an instance's object, or on
    /// the Cluster's (`instance` None).
    Annotate {
        instance: Option<String>,
        set: BTreeMap<String, Option<String>>,
    },
    /// Recreate the instance from the operator's executable: stop it
    /// cleanly and start it again (Kubernetes: delete its Pod, which is
    /// created again with the new manager). `primary`: it is the primary,
    /// restarted in place — start it again even though it is the primary.
    Recreate {
        instance: String,
        primary: bool,
        /// The annotation-driven upgrade this step belongs to, recorded
        /// failed if the platform cannot make the instance.
        attempt: Option<cnmysql_api::InstanceUpgrade>,
        then: Event,
    },
    /// Have the instance's manager bring its system tables to the version
    /// it runs (`POST /instance/mysql/upgrade`: MariaDB `mariadb-upgrade`).
    /// Record `then` when it did.
    UpgradeSystemTables { instance: String, then: Event },
}

impl Action {
    /// A switchover the controller starts itself, with its Event.
    pub fn switchover(
        from: String,
        to: String,
        at: String,
        reason: &'static str,
        note: String,
    ) -> Action {
        Action::Status {
            then: vec![Event::new(false, reason, Some(&to), note)],
            change: StatusChange::Switchover { from, to, at },
        }
    }
}
