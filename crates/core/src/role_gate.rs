//! What an instance manager does first each turn, before it converges its
//! server to its role ([`crate::role::reconcile`]): whether a switchover's
//! primary hands over yet, whether a writable server must turn read-only
//! now and why, whether to promote, renew the lease or only hold. Pure: the
//! manager reads the facts (its server read-only or not, whether its lease
//! is still proven, how far a hand-over's target is) and carries the
//! answer out.

use crate::role::Desired;
use crate::self_fence::Cause;

/// A switchover's primary keeps serving, lease and all, until its target
/// has caught up: its writes stop only for what is left. `target`: whether
/// the target is ready ([`crate::switchover::ready_to_hand_over`]), asked
/// only of a writable primary handing over. Returns the role to take this
/// turn and, while it waits, what it waits for.
pub fn hand_over_when_caught_up(
    desired: Desired,
    target: Option<Result<(), String>>,
) -> (Desired, String) {
    match (desired, target) {
        (Desired::HandOver { to }, Some(Err(why))) => (
            Desired::Primary,
            format!("handing the primary role over to {to} once it has caught up ({why})"),
        ),
        (d, _) => (d, String::new()),
    }
}

/// What the manager's server looks like, for [`first`].
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    pub me: &'a str,
    /// The server answers read-only.
    pub read_only: bool,
    /// This manager's lease lapsed since it last renewed it (it woke from a
    /// freeze, say).
    pub lease_lapsed: bool,
    /// The instance the cluster last failed over from
    /// (`status.failoverFrom`).
    pub failover_from: Option<&'a str>,
    /// Why a primary must refuse writes: a volume nearly full
    /// (`crate::disk_guard`).
    pub writes_refused: Option<&'a str>,
}

/// The first step of a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum First {
    /// Make the server read-only now, for `cause`, saying `why`; nothing
    /// else this turn.
    ReadOnly { cause: Cause, why: String },
    /// Promote this server (it is read-only).
    Promote,
    /// Stay the primary: renew the lease (read-only if that fails), then
    /// converge.
    RenewLease,
    /// Read-only already: running, held for `why`; nothing else this turn.
    Hold(String),
    /// Stay the primary, read-only for `why`: renew the lease, then hold.
    HoldPrimary(String),
    /// Converge the server to its role.
    Converge,
}

pub fn first(desired: &Desired, f: &Facts<'_>) -> First {
    let writable = !f.read_only;
    match desired {
        Desired::Promote if writable => First::ReadOnly {
            cause: Cause::Demotion,
            why: "not yet the accepted primary".into(),
        },
        Desired::Promote => First::Promote,
        // Writable with a lease that lapsed: read-only first, before any
        // renewal is tried — that call may take seconds, and another
        // primary may already be writing.
        Desired::Primary if writable && f.lease_lapsed => First::ReadOnly {
            cause: Cause::Deposed,
            why: "self-fenced: the primary lease was not renewed in time".into(),
        },
        Desired::Primary => match f.writes_refused {
            Some(why) if writable => First::ReadOnly {
                cause: Cause::Demotion,
                why: format!("writes refused: {why}"),
            },
            Some(why) => First::HoldPrimary(format!("writes refused: {why}")),
            None => First::RenewLease,
        },
        Desired::HoldReadOnly(_) | Desired::HandOver { .. } => {
            let why = match desired {
                Desired::HandOver { to } => format!("handing the primary role over to {to}"),
                Desired::HoldReadOnly(why) => why.clone(),
                _ => String::new(),
            };
            if !writable {
                return First::Hold(why);
            }
            // A primary failed over from (it woke from a freeze, say) is
            // deposed: a commit it holds must not complete.
            let cause = if f.failover_from == Some(f.me) {
                Cause::Deposed
            } else {
                Cause::Demotion
            };
            First::ReadOnly { cause, why }
        }
        Desired::Replica { .. } | Desired::Detached { .. } | Desired::DesignatedPrimary { .. } => {
            First::Converge
        }
    }
}

/// A primary whose lease could not be renewed: read-only if it is not yet
/// (deposed: another primary may exist or be about to).
pub fn lease_not_renewed(read_only: bool) -> First {
    if read_only {
        First::Hold("self-fenced: cannot renew the primary lease".into())
    } else {
        First::ReadOnly {
            cause: Cause::Deposed,
            why: "self-fenced: the primary lease could not be renewed".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(read_only: bool) -> Facts<'static> {
        Facts {
            me: "db-1",
            read_only,
            lease_lapsed: false,
            failover_from: None,
            writes_refused: None,
        }
    }

    #[test]
    fn a_hand_over_waits_as_primary_until_its_target_caught_up() {
        let to = || Desired::HandOver { to: "db-2".into() };
        let (d, waiting) = hand_over_when_caught_up(to(), Some(Err("3 s behind".into())));
        assert_eq!(d, Desired::Primary);
        assert!(
            waiting.contains("db-2") && waiting.contains("3 s behind"),
            "{waiting}"
        );
        assert_eq!(
            hand_over_when_caught_up(to(), Some(Ok(()))),
            (to(), String::new())
        );
        // Read-only already (not asked): the hand-over goes on.
        assert_eq!(hand_over_when_caught_up(to(), None), (to(), String::new()));
    }

    #[test]
    fn a_writable_server_turns_read_only_before_anything_else_unless_it_is_the_primary() {
        let cases = [
            (Desired::Promote, Cause::Demotion),
            (Desired::HoldReadOnly("fenced".into()), Cause::Demotion),
            (Desired::HandOver { to: "db-2".into() }, Cause::Demotion),
        ];
        for (d, cause) in cases {
            assert!(
                matches!(first(&d, &facts(false)), First::ReadOnly { cause: c, .. } if c == cause),
                "{d:?}"
            );
        }
        assert_eq!(first(&Desired::Primary, &facts(false)), First::RenewLease);
    }

    #[test]
    fn a_primary_whose_lease_lapsed_is_deposed_before_it_tries_to_renew() {
        let f = Facts {
            lease_lapsed: true,
            ..facts(false)
        };
        assert!(matches!(
            first(&Desired::Primary, &f),
            First::ReadOnly {
                cause: Cause::Deposed,
                ..
            }
        ));
        // Read-only already: it may renew.
        let f = Facts {
            read_only: true,
            ..f
        };
        assert_eq!(first(&Desired::Primary, &f), First::RenewLease);
    }

    #[test]
    fn the_instance_failed_over_from_is_deposed_not_demoted() {
        let f = Facts {
            failover_from: Some("db-1"),
            ..facts(false)
        };
        let held = Desired::HoldReadOnly("waiting".into());
        assert!(matches!(
            first(&held, &f),
            First::ReadOnly {
                cause: Cause::Deposed,
                ..
            }
        ));
        assert_eq!(first(&held, &facts(true)), First::Hold("waiting".into()));
    }

    #[test]
    fn read_only_servers_promote_hold_or_converge() {
        assert_eq!(first(&Desired::Promote, &facts(true)), First::Promote);
        let replica = Desired::Replica {
            source: "db-1".into(),
        };
        assert_eq!(first(&replica, &facts(true)), First::Converge);
        assert_eq!(first(&replica, &facts(false)), First::Converge);
        assert!(matches!(
            lease_not_renewed(false),
            First::ReadOnly {
                cause: Cause::Deposed,
                ..
            }
        ));
        assert!(matches!(lease_not_renewed(true), First::Hold(_)));
    }

    #[test]
    fn a_primary_short_of_room_turns_read_only_and_holds_its_lease() {
        let full = "db-1's data volume has 40 MB left";
        let f = |read_only| Facts {
            writes_refused: Some(full),
            ..facts(read_only)
        };
        let First::ReadOnly { cause, why } = first(&Desired::Primary, &f(false)) else {
            panic!()
        };
        assert_eq!(cause, Cause::Demotion);
        assert!(why.contains(full), "{why}");
        assert_eq!(
            first(&Desired::Primary, &f(true)),
            First::HoldPrimary(format!("writes refused: {full}"))
        );
        // Room again: the primary renews and converges (writable).
        assert_eq!(first(&Desired::Primary, &facts(true)), First::RenewLease);
        // A lapsed lease still comes first.
        let lapsed = Facts {
            lease_lapsed: true,
            ..f(false)
        };
        assert!(matches!(
            first(&Desired::Primary, &lapsed),
            First::ReadOnly {
                cause: Cause::Deposed,
                ..
            }
        ));
    }
}
