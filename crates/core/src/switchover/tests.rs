//! The switchover's tests: handing over, and requests.

mod hand_over {
    use super::super::*;
    use crate::testutil::replica;

    /// A MySQL primary turned read-only while a commit still waited for
    /// its acknowledgement: the target must not take its executed history
    /// as final (the commit completes once a replica acknowledges it, and
    /// a target promoted without it left two instances diverged: seed
    /// 8282154587929078478 of the local fault suite).
    #[test]
    fn a_target_waits_for_the_old_primarys_commits_that_wait_for_an_acknowledgement() {
        let st = crate::status::InstanceStatus {
            mysqld_running: true,
            read_only: false,
            gtid_position: "u:1-172".into(),
            ..Default::default()
        };
        assert_eq!(
            final_history_of("db-1", &st),
            Err("waiting for db-1 to become read-only".into())
        );
        let waiting = crate::status::InstanceStatus {
            read_only: true,
            commits_awaiting_ack: true,
            ..st.clone()
        };
        assert_eq!(
            final_history_of("db-1", &waiting),
            Err("waiting for db-1's last commits, which wait for an acknowledgement".into())
        );
        let done = crate::status::InstanceStatus {
            read_only: true,
            gtid_position: "u:1-173".into(),
            ..st
        };
        assert_eq!(
            final_history_of("db-1", &done),
            Ok(FinalPoint {
                history: "u:1-173".into(),
                binlog: None
            })
        );
    }

    /// A MySQL primary handing over with its acknowledgements closed: a
    /// commit that still waits can never be acknowledged, so the target
    /// does not wait for it to complete (it never would); it applies the
    /// old primary's binary log up to where it ended once nothing could be
    /// acknowledged, the waiting commit included.
    #[test]
    fn with_acknowledgements_closed_the_target_applies_up_to_the_binlog_end_and_does_not_wait() {
        let at = crate::status::BinlogPoint {
            file: "binlog.000007".into(),
            position: 4_242,
        };
        let st = crate::status::InstanceStatus {
            mysqld_running: true,
            read_only: true,
            commits_awaiting_ack: true,
            acks_closed_at: Some(at.clone()),
            gtid_position: "u:1-172".into(),
            ..Default::default()
        };
        assert_eq!(
            final_history_of("db-1", &st),
            Ok(FinalPoint {
                history: "u:1-172".into(),
                binlog: Some(at.clone())
            })
        );
        let writable = crate::status::InstanceStatus {
            read_only: false,
            ..st
        };
        assert!(
            final_history_of("db-1", &writable).is_err(),
            "never before read-only"
        );
    }

    #[test]
    fn a_primary_hands_over_only_to_a_target_that_caught_up() {
        let mut o = replica("db-2", "0-1-100");
        let st = o.status.as_mut().unwrap();
        st.replication.as_mut().unwrap().io_state = "Yes".into();
        st.replication.as_mut().unwrap().seconds_behind = Some(0);
        assert_eq!(ready_to_hand_over("db-2", Some(st)), Ok(()));
        // Issue 18: a target 52 s behind took the primary's writes away
        // for 52 s. It is waited for with the primary still writable.
        st.replication.as_mut().unwrap().seconds_behind = Some(52);
        assert_eq!(
            ready_to_hand_over("db-2", Some(st)),
            Err("db-2 is 52 s behind".into())
        );
        st.replication.as_mut().unwrap().seconds_behind = None;
        assert!(ready_to_hand_over("db-2", Some(st)).is_err());
        st.replication.as_mut().unwrap().seconds_behind = Some(0);
        st.replication.as_mut().unwrap().sql_running = false;
        assert!(ready_to_hand_over("db-2", Some(st)).is_err());
    }

    #[test]
    fn a_whole_second_of_checkpoint_lag_is_read_finer_where_the_server_tells_it() {
        let mut o = replica("db-2", "0-1-100");
        let st = o.status.as_mut().unwrap();
        let r = st.replication.as_mut().unwrap();
        r.io_state = "Yes".into();
        r.seconds_behind = Some(1);
        // MariaDB, or MySQL with no finer figure: 1 s is waited out.
        assert_eq!(
            ready_to_hand_over("db-2", Some(st)),
            Err("db-2 is 1 s behind".into())
        );
        // MySQL under a steady writer: 1 s of checkpoint, 0.3 s in fact.
        st.replication.as_mut().unwrap().applying_lag_millis = Some(300);
        assert_eq!(ready_to_hand_over("db-2", Some(st)), Ok(()));
        // Really behind: the transaction in hand is older than the bound.
        st.replication.as_mut().unwrap().applying_lag_millis =
            Some(HAND_OVER_MAX_APPLYING_LAG_MILLIS + 1);
        assert!(ready_to_hand_over("db-2", Some(st)).is_err());
        // A backlog of seconds is a backlog whatever the worker in hand.
        let r = st.replication.as_mut().unwrap();
        r.applying_lag_millis = Some(0);
        r.seconds_behind = Some(2);
        assert_eq!(
            ready_to_hand_over("db-2", Some(st)),
            Err("db-2 is 2 s behind".into())
        );
        // A stopped applier is never caught up.
        let r = st.replication.as_mut().unwrap();
        r.seconds_behind = Some(1);
        r.sql_running = false;
        assert!(ready_to_hand_over("db-2", Some(st)).is_err());
        assert!(ready_to_hand_over("db-2", None).is_err());
    }

    /// A target whose receiver from the old primary stopped during the
    /// hand-over starts it again when something is missing, whether or not
    /// the old primary closed its acknowledgements (MariaDB never does:
    /// CI waited an hour for a history that could not arrive).
    #[test]
    fn a_stopped_receiver_missing_part_of_the_history_is_started_again() {
        let at = crate::status::BinlogPoint {
            file: "binlog.000002".into(),
            position: 400,
        };
        let plain = FinalPoint {
            history: "0-1-9".into(),
            binlog: None,
        };
        let closed = FinalPoint {
            binlog: Some(at),
            ..plain.clone()
        };
        use Receiver::*;
        assert_eq!(
            drain_step(plain.clone(), Stopped, false, false),
            DrainStep::ReceiveAgain
        );
        assert_eq!(
            drain_step(closed.clone(), Stopped, false, true),
            DrainStep::ReceiveAgain
        );
        assert_eq!(
            drain_step(plain.clone(), Stopped, false, true),
            DrainStep::Apply(plain.clone()),
            "nothing missing: promote"
        );
        assert_eq!(
            drain_step(closed.clone(), Receiving, false, false),
            DrainStep::Apply(closed.clone())
        );
        assert_eq!(
            drain_step(plain.clone(), Other, false, false),
            DrainStep::Apply(plain.clone())
        );
        assert_eq!(
            drain_step(closed.clone(), Other, false, false),
            DrainStep::ReceiveAgain
        );
        assert_eq!(
            drain_step(closed, Stopped, true, false),
            DrainStep::Apply(plain),
            "a failover detached it on purpose: its history only"
        );
    }
}

mod requests {
    use super::super::*;
    use crate::testutil::{primary, replica, snapshot as snap};

    fn healthy() -> Snapshot {
        let mut s = snap(vec![
            primary("db-1", "0-1-100"),
            replica("db-2", "0-1-100"),
            replica("db-3", "0-1-90"),
        ]);
        for o in &mut s.instances[1..] {
            let r = o.status.as_mut().unwrap().replication.as_mut().unwrap();
            r.io_state = "Yes".into();
        }
        s
    }

    #[test]
    fn a_healthy_caught_up_replica_may_take_over() {
        assert_eq!(validate(&healthy(), "db-2"), Ok(()));
        // A little behind is fine: the target catches up in a moment.
        let mut s = healthy();
        set_lag(&mut s, "db-3", MAX_TARGET_LAG_SECS);
        assert_eq!(validate(&s, "db-3"), Ok(()));
    }

    /// The lag as the instance reports it and as the status shows it.
    fn set_lag(s: &mut Snapshot, name: &str, lag: u64) {
        let o = s.instances.iter_mut().find(|o| o.name == name).unwrap();
        o.status.as_mut().unwrap().lag_seconds = Some(lag);
        for n in ["db-2", "db-3"] {
            let st = s.status.instance_states.entry(n.into()).or_default();
            st.role = "replica".into();
            st.ready = true;
        }
        s.status.instance_states.get_mut(name).unwrap().lag_seconds = Some(lag);
    }

    #[test]
    fn a_switchover_whose_target_falls_behind_while_waiting_is_given_up_at_once() {
        // Found by the benchmark under 16 flat-out writers (MySQL, 2
        // cores): accepted while caught up, the target then applied at half
        // the primary's commit rate, and the primary waited for it (writable)
        // toward maxSwitchoverDelay's hour.
        let mut s = healthy();
        s.spec.max_replica_lag_seconds = 60;
        s.spec.max_switchover_delay = 3600;
        s.status.target_primary = Some("db-2".into());
        s.status.target_primary_timestamp = Some(crate::time::timestamp(s.now_ms));
        set_lag(&mut s, "db-2", 20);
        assert_eq!(
            progress(&s, &[]),
            Progress::Waiting,
            "behind, not a backlog"
        );
        set_lag(&mut s, "db-2", 61);
        match progress(&s, &[]) {
            Progress::Abort { reason } => assert!(
                reason.contains("fell 61 s behind db-1") && reason.contains("db-1 stays primary"),
                "{reason}"
            ),
            p => panic!("{p:?}"),
        }
        // No limit set: only maxSwitchoverDelay gives up.
        s.spec.max_replica_lag_seconds = 0;
        assert_eq!(progress(&s, &[]), Progress::Waiting);
    }

    /// Found by the Kubernetes fault suite (MariaDB, seed
    /// 15338295528157353591): every Pod deleted at once, the operator saw
    /// the primary's deletion before the others' and handed over to a
    /// replica that was leaving too; the primary's hook then held it,
    /// read-only, until the handover's 60 s deadline.
    #[test]
    fn a_switchover_to_a_leaving_target_is_given_up_at_once() {
        let mut s = healthy();
        s.status.target_primary = Some("db-2".into());
        s.status.target_primary_timestamp = Some(crate::time::timestamp(s.now_ms));
        assert_eq!(progress(&s, &["db-1".into()]), Progress::Waiting);
        match progress(&s, &["db-1".into(), "db-2".into()]) {
            Progress::Abort { reason } => assert!(
                reason.contains("db-2 is leaving or gone") && reason.contains("db-1 stays primary"),
                "{reason}"
            ),
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn a_user_switchover_to_a_lagging_replica_is_refused_at_once_naming_a_caught_up_one() {
        let mut s = healthy();
        set_lag(&mut s, "db-3", 40);
        let e = validate(&s, "db-3").unwrap_err();
        assert_eq!(e.reason(), "TargetLagging");
        let said = e.message("db-3");
        assert!(
            said.contains("db-3 is 40 s behind") && said.contains("db-2 is caught up"),
            "{said}"
        );
        // None caught up: said so.
        set_lag(&mut s, "db-2", 9);
        let said = validate(&s, "db-3").unwrap_err().message("db-3");
        assert!(said.contains("no replica is caught up"), "{said}");
        // The control plane's own switchovers are not refused for lag:
        // they pick the most advanced eligible replica (a handover under a
        // heavy writer must not fall back to a failover).
        assert_eq!(eligible(&s, "db-3"), Ok(()));
        assert_eq!(
            crate::upgrade::gates::switchover_target(&s, "db-1", &[]).as_deref(),
            Some("db-2")
        );
    }

    #[test]
    fn requests_are_checked_against_the_cluster_alone() {
        let s = healthy();
        let check = |t: &str, st: &ClusterStatus| validate_request("db", &s.spec, false, st, t);
        let e = check("db-4", &s.status).unwrap_err();
        assert_eq!(e.reason(), "NotAMember");
        assert!(e.explain("db-4").contains("not an instance"));
        assert!(
            check("other-2", &s.status)
                .unwrap_err()
                .explain("other-2")
                .contains("db-1 to db-3")
        );
        assert_eq!(check("db-1", &s.status), Err(Refusal::AlreadyPrimary));
        let mut st = s.status.clone();
        st.fenced_instances = vec!["db-2".into()];
        assert_eq!(check("db-2", &st), Err(Refusal::Fenced));
        assert!(Refusal::Fenced.explain("db-2").contains("unfence it first"));
        let mut st = s.status.clone();
        st.diverged_instances = vec!["db-2".into()];
        assert_eq!(check("db-2", &st), Err(Refusal::Diverged));
        let mut st = s.status.clone();
        st.target_primary = Some("db-3".into());
        assert_eq!(
            check("db-2", &st),
            Err(Refusal::ChangeInProgress("db-3".into()))
        );
        let mut st = s.status.clone();
        st.current_primary = None;
        assert_eq!(check("db-2", &st), Err(Refusal::NoPrimaryYet));
        assert_eq!(check("db-2", &s.status), Ok(()));
    }

    #[test]
    fn a_request_sets_the_target_and_the_phase_in_one_write() {
        let s = healthy();
        let mut st = s.status.clone();
        let notes = [(
            crate::pause::ANNOTATION.to_string(),
            crate::pause::PAUSED.to_string(),
        )]
        .into();
        let paused = request("db", &s.spec, &notes, &mut st.clone(), "db-2", 0);
        assert_eq!(paused, Err(Refusal::Paused));
        assert!(
            Refusal::Paused
                .message("db-2")
                .contains("cnmysql.io/reconcile")
        );
        let r = request(
            "db",
            &s.spec,
            &Default::default(),
            &mut st,
            "db-2",
            1_767_225_600_000,
        )
        .unwrap();
        assert_eq!((r.from.as_str(), r.to.as_str()), ("db-1", "db-2"));
        assert_eq!(st.target_primary.as_deref(), Some("db-2"));
        assert_eq!(st.phase, Some(cnmysql_api::Phase::Switchover));
        assert_eq!(
            st.target_primary_timestamp.as_deref(),
            Some("2026-01-01T00:00:00Z")
        );
        assert_eq!(r.event().0, "SwitchoverRequested");
        // A second request meets the first one in progress; nothing changes.
        let before = st.clone();
        assert_eq!(
            request("db", &s.spec, &Default::default(), &mut st, "db-3", 0),
            Err(Refusal::ChangeInProgress("db-2".into()))
        );
        assert_eq!(st, before);
    }

    #[test]
    fn the_target_must_be_a_ready_healthy_replica() {
        let mut s = healthy();
        s.instances[1].status = None;
        assert_eq!(validate(&s, "db-2"), Err(Refusal::Unreachable));

        let mut s = healthy();
        s.instances[1].status.as_mut().unwrap().ready = false;
        assert!(matches!(validate(&s, "db-2"), Err(Refusal::NotReady(_))));

        let mut s = healthy();
        s.instances[1].status.as_mut().unwrap().role = Role::Primary;
        assert_eq!(validate(&s, "db-2"), Err(Refusal::NotAReplica));

        let mut s = healthy();
        let r = s.instances[1].status.as_mut().unwrap();
        r.replication.as_mut().unwrap().sql_running = false;
        assert!(matches!(
            validate(&s, "db-2"),
            Err(Refusal::ReplicationUnhealthy(_))
        ));

        let mut s = healthy();
        s.instances[1].status.as_mut().unwrap().replication = None;
        assert_eq!(validate(&s, "db-2"), Err(Refusal::NoReplication));
    }

    #[test]
    fn a_diverged_history_or_missing_primary_refuses() {
        let mut s = healthy();
        s.instances[0].status.as_mut().unwrap().gtid_executed = "0-1-102".into();
        s.instances[1].status.as_mut().unwrap().gtid_executed = "0-2-101".into();
        assert_eq!(validate(&s, "db-2"), Err(Refusal::HistoryDiverged));

        let mut s = healthy();
        s.instances[0].status = None;
        assert_eq!(
            validate(&s, "db-2"),
            Err(Refusal::PrimaryUnreachable("db-1".into()))
        );
    }

    /// A commit that waited at the first read and completed before the
    /// second shows only as a moved history; one still waiting shows as a
    /// wait. Only a still history with nothing waiting is final.
    #[test]
    fn a_history_is_final_only_when_still_and_nothing_waits() {
        let (g1, g2) = ("u:1-9662", "u:1-9663");
        assert!(history_settled(g1, false, g1, false));
        assert!(
            !history_settled(g1, false, g2, false),
            "completed in between"
        );
        assert!(!history_settled(g1, true, g1, false), "waited before");
        assert!(!history_settled(g1, false, g1, true), "waits after");
    }
}
