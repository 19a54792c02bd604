//! Routing tolerates a manager that misses a poll or two, as a kubelet's
//! readiness probe tolerates failures before it takes a Pod out of its
//! Services: a manager replaced in place (its server running on) does not
//! answer for a moment, and dropping its routes then would close every
//! client connection through it. An instance whose processes are gone
//! gets no grace (a container that died is not ready at once). Only what
//! was observed is carried over,
//! and only for routing: what the status decides (a failover, a fence, a
//! divergence) still takes an instance out at once, and the topology step
//! always sees the poll as it was.

use std::collections::BTreeMap;

use cnmysql_core::status::{InstanceStatus, Snapshot};

/// How long an instance that stopped answering keeps its routes.
pub const GRACE_MS: i64 = 1_500;

#[derive(Default)]
pub struct RouteGrace {
    /// Each instance's last answer and when it came.
    last: BTreeMap<String, (InstanceStatus, i64)>,
}

impl RouteGrace {
    /// `s` with each silent instance's last answer, if recent enough and
    /// its processes are not `gone`.
    pub fn fill(&mut self, s: &Snapshot, gone: &[String]) -> Snapshot {
        let mut out = s.clone();
        for o in &mut out.instances {
            match &o.status {
                Some(st) => {
                    self.last.insert(o.name.clone(), (st.clone(), s.now_ms));
                }
                None if gone.contains(&o.name) => {
                    self.last.remove(&o.name);
                }
                None => {
                    o.status = self
                        .last
                        .get(&o.name)
                        .filter(|(_, at)| s.now_ms - at <= GRACE_MS)
                        .map(|(st, _)| st.clone());
                }
            }
        }
        let names: Vec<&String> = s.instances.iter().map(|o| &o.name).collect();
        self.last.retain(|n, _| names.contains(&n));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cnmysql_core::status::{Observed, Role};

    fn snap(at: i64, answered: bool) -> Snapshot {
        let status = answered.then(|| InstanceStatus {
            instance: "db-1".into(),
            role: Role::Primary,
            ready: true,
            ..Default::default()
        });
        Snapshot {
            cluster: "db".into(),
            spec: serde_json::from_str("{}").unwrap(),
            status: cnmysql_api::ClusterStatus {
                current_primary: Some("db-1".into()),
                target_primary: Some("db-1".into()),
                ..Default::default()
            },
            instances: vec![Observed {
                name: "db-1".into(),
                ordinal: 1,
                status,
                outdated: None,
            }],
            now_ms: at,
            declared: Default::default(),
        }
    }

    #[test]
    fn a_missed_poll_keeps_the_routes_a_long_silence_does_not() {
        let mut g = RouteGrace::default();
        let seen = |g: &mut RouteGrace, at: i64, answered: bool, gone: &[String]| {
            g.fill(&snap(at, answered), gone).instances[0]
                .status
                .is_some()
        };
        assert!(seen(&mut g, 0, true, &[]));
        assert!(
            seen(&mut g, 400, false, &[]),
            "a manager replaced in place keeps its routes"
        );
        assert!(seen(&mut g, GRACE_MS, false, &[]));
        assert!(
            !seen(&mut g, GRACE_MS + 1, false, &[]),
            "silent for longer: out"
        );
        let gone = ["db-1".to_string()];
        assert!(seen(&mut g, 2_000, true, &[]));
        assert!(
            !seen(&mut g, 2_100, false, &gone),
            "its processes gone: out at once"
        );
    }
}
