//! Instances the platform holds back after repeated crashes.
//!
//! The kubelet restarts a container that died at once the first time, then
//! waits 10 s, 20 s, 40 s … up to 5 min between restarts
//! (`CrashLoopBackOff`), and forgets the count only after 10 min without a
//! crash. A database cluster hit by a few crashes in a row (an OOM storm,
//! every instance killed twice) would sit out minutes of timers with
//! nothing wrong left to wait for. Past [`PATIENCE_MS`] (1 s) of such a wait the
//! step has the instance made anew (Kubernetes: its Pod deleted and made
//! again, which starts it at once), at most once per [`REMAKE_EVERY_MS`]
//! each: a server that cannot start at all (a bad parameter) still does
//! not restart in a tight loop.
//!
//! A replica is made anew as soon as the wait is past the patience. The
//! primary only when no failover can replace it (`Memory::last_block`):
//! while a replica can take over, failover does, as for any primary that
//! does not come back in place; when none can (every instance crashed),
//! the primary is restarted on purpose and waited for, as the rollout
//! restarts one in place.

use crate::action::Action;
use crate::event::Event;
use crate::memory::Memory;
use crate::status::Snapshot;

/// How long an instance may wait out a crash back-off before it is made
/// anew. Making a Pod again took 1–2 s to a started container on the real
/// node, against the kubelet's waits of 10 s and more: none of them is
/// worth sitting out; the second lets the kubelet's report settle.
pub const PATIENCE_MS: i64 = 1_000;

/// An instance is made anew from a back-off at most this often.
pub const REMAKE_EVERY_MS: i64 = 300_000;

/// The instances to make anew now. `backing_off`: each instance the
/// platform holds in a crash back-off, with when its processes last
/// stopped (Unix ms).
pub fn remake(s: &Snapshot, backing_off: &[(String, i64)], memory: &mut Memory) -> Vec<Action> {
    let mut out = Vec::new();
    for (name, stopped_ms) in backing_off {
        let waited = s.now_ms.saturating_sub(*stopped_ms);
        if waited < PATIENCE_MS
            || memory.held_down.contains(name)
            || memory
                .remade_from_back_off
                .get(name)
                .is_some_and(|at| s.now_ms.saturating_sub(*at) < REMAKE_EVERY_MS)
        {
            continue;
        }
        let primary = s.status.current_primary.as_deref() == Some(name.as_str());
        if primary && memory.last_block.is_empty() {
            continue;
        }
        memory.remade_from_back_off.insert(name.clone(), s.now_ms);
        if primary {
            memory.restarting_primary = Some((name.clone(), s.now_ms));
        }
        out.push(Action::Recreate {
            instance: name.clone(),
            primary,
            attempt: None,
            then: Event::new(
                true,
                "RemadeFromCrashBackOff",
                Some(name),
                format!(
                    "{name} crashed repeatedly and has waited {} s of the platform's crash back-off; it is made anew so it starts at once (at most once every {} min)",
                    waited / 1000,
                    REMAKE_EVERY_MS / 60_000
                ),
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{replica, snapshot};

    fn remade(actions: &[Action]) -> Vec<(String, bool)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Recreate {
                    instance, primary, ..
                } => Some((instance.clone(), *primary)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_replica_past_the_patience_is_made_anew_once_per_period() {
        let mut s = snapshot(vec![replica("db-2", "0-1-1"), replica("db-3", "0-1-1")]);
        s.now_ms = 1_000_000;
        let mut m = Memory::default();
        let waits = [
            ("db-2".to_string(), s.now_ms - PATIENCE_MS),
            ("db-3".to_string(), s.now_ms - PATIENCE_MS + 1),
        ];
        assert_eq!(
            remade(&remake(&s, &waits, &mut m)),
            vec![("db-2".to_string(), false)],
            "the patience is taken"
        );
        s.now_ms += REMAKE_EVERY_MS - 1;
        assert_eq!(
            remade(&remake(&s, &[("db-2".into(), s.now_ms - 60_000)], &mut m)),
            vec![],
            "not again within the period: a server that cannot start does not loop"
        );
        s.now_ms += 1;
        assert_eq!(
            remade(&remake(&s, &[("db-2".into(), s.now_ms - 60_000)], &mut m)).len(),
            1
        );
    }

    #[test]
    fn the_primary_only_when_no_failover_can_replace_it() {
        let mut s = snapshot(vec![replica("db-2", "0-1-1")]);
        s.now_ms = 1_000_000;
        let waits = [("db-1".to_string(), s.now_ms - 30_000)];
        let mut m = Memory::default();
        assert!(
            remake(&s, &waits, &mut m).is_empty(),
            "failover may replace it"
        );
        assert_eq!(m.restarting_primary, None);
        m.last_block = "failover of db-1 blocked: no replica is ready".into();
        assert_eq!(
            remade(&remake(&s, &waits, &mut m)),
            vec![("db-1".to_string(), true)]
        );
        assert_eq!(
            m.restarting_primary,
            Some(("db-1".to_string(), s.now_ms)),
            "waited for as a primary restarted on purpose"
        );
    }

    #[test]
    fn a_held_down_instance_is_left_to_the_failover() {
        let mut s = snapshot(vec![replica("db-2", "0-1-1")]);
        s.now_ms = 1_000_000;
        let mut m = Memory::default();
        m.held_down.insert("db-2".into());
        assert!(remake(&s, &[("db-2".into(), 0)], &mut m).is_empty());
    }
}
