//! What the topology controller remembers between steps: held-down
//! instances, the warm-up, what it has already said. The step reads and
//! writes it; a platform keeps it per cluster.

use std::collections::{BTreeMap, BTreeSet};

use crate::semisync::Settings;
use crate::status::Snapshot;
use crate::upgrade::gates::InFlight;

/// What the controller remembers between steps.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Memory {
    /// The reason failover is blocked, reported once; empty when not blocked.
    pub last_block: String,
    /// A wait for the old primary's lease was reported.
    pub last_wait: bool,
    /// The current primary at the last step.
    pub last_current: Option<String>,
    /// The last semi-sync adjustment sent, and when (Unix ms).
    pub last_semi_sync: Option<(Settings, i64)>,
    /// Instances given a rollout step, and when (Unix ms).
    pub rollout_in_flight: InFlight,
    /// The rollout's last reported state (an event is recorded per change).
    pub last_rollout: String,
    /// The primary being restarted in place by the rollout, and since when:
    /// its absence is not a failure for `reconcile::PRIMARY_RESTART_MS`.
    pub restarting_primary: Option<(String, i64)>,
    /// The supervised rollout waits on this primary for this target hash.
    pub waiting_for_user: Option<(String, String)>,
    /// A human switched over while the supervised rollout to this target
    /// hash waited: it goes on to the end.
    pub supervised_consent: Option<String>,
    /// Instances the step let come back (`Action::Restart`) that have not
    /// answered since: nothing holds them down again meanwhile
    /// (`hold_down::keep_down`).
    pub released: BTreeSet<String>,
    /// Instances kept stopped: a vanished steady primary
    /// (`hold_down::keep_down`) and fenced-out former primaries,
    /// until the step lets them come back (`Action::Restart`). The
    /// platforms start no process (create no Pod) for them.
    pub held_down: BTreeSet<String>,
    /// When this controller first stepped this cluster (Unix ms): see
    /// `reconcile::WARM_UP_MS`.
    pub first_step_ms: Option<i64>,
    /// Instances that have answered since then.
    pub answered: BTreeSet<String>,
    /// The instance last asked to upgrade its system tables, and when
    /// (Unix ms): not asked again within `upgrade_step::SYSTEM_TABLES_RETRY_MS`.
    pub system_tables_asked: Option<(String, i64)>,
    /// The primary seen down in place (`reconcile::Observation::primary_down_in_place`)
    /// and since when (Unix ms), until it is seen otherwise.
    pub primary_down_in_place: Option<(String, i64)>,
    /// Why a leaving primary could not hand over, reported once.
    pub last_handover_refusal: String,
    /// The primary a failover was begun from (`status.failoverFrom`
    /// written), and whether a status that lost it again was said.
    pub failover_begun: Option<(String, bool)>,
    /// The last `FailoverWaitingForReplicas` said (said again only when it
    /// changes).
    pub last_detach_wait: String,
    /// Instances made anew out of a crash back-off, and when (Unix ms):
    /// see `crash_backoff::REMAKE_EVERY_MS`.
    pub remade_from_back_off: BTreeMap<String, i64>,
    /// The primary and the in-place restart of its processes (Unix ms, as
    /// the platform reports it) it was seen ready after: that restart is
    /// over, and its grace (`reconcile::IN_PLACE_RESTART_GRACE_MS`) no
    /// longer holds a failover back.
    pub back_after_restart: Option<(String, i64)>,
}

impl Memory {
    /// Whether the supervised rollout to the current target has consent.
    pub(crate) fn consent(&self, s: &Snapshot) -> bool {
        self.supervised_consent.is_some()
            && self.supervised_consent == s.status.operator_executable_hash
    }
}
