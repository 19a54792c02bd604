//! Observation: the instance's `/status` — phase, role, GTID history, lag,
//! semi-sync, readiness — and the isolation check behind its liveness.

use super::backend::ControlBackend;
use super::*;

impl<C: ClusterState> ControlBackend<C> {
    /// The liveness isolation check: cluster state unreachable for long and
    /// no peer answering.
    async fn isolated(&self) -> bool {
        // While the data is being obtained (made, cloned, recovered) the
        // cluster state is not read: that is no isolation (a long recovery
        // of a single instance has no peer to answer either).
        if matches!(
            self.link.phase().0,
            InstancePhase::Initializing | InstancePhase::Cloning | InstancePhase::Preparing
        ) {
            return false;
        }
        let unreachable_for = self.link.cluster_unseen_for();
        if unreachable_for < isolation::UNREACHABLE_FOR {
            return false;
        }
        let mut any_peer = false;
        for (name, peer) in &self.peers.all() {
            if name == &self.link.cfg.instance {
                continue;
            }
            let probe = tokio::net::TcpStream::connect((peer.host.as_str(), peer.control_port));
            if matches!(
                tokio::time::timeout(Duration::from_millis(500), probe).await,
                Ok(Ok(_))
            ) {
                any_peer = true;
                break;
            }
        }
        isolation::isolated(unreachable_for, any_peer)
    }

    /// When the history was last seen to grow: a new history is stamped
    /// now, the one first seen is not (its age is unknown).
    fn note_history(&self, gtid: &str) -> Option<String> {
        let mut seen = self.history_seen.lock().unwrap();
        match seen.as_mut() {
            Some((g, at)) if g.as_str() != gtid => {
                *g = gtid.to_string();
                *at = Some(jiff::Timestamp::now().to_string());
            }
            Some(_) => {}
            None => *seen = Some((gtid.to_string(), None)),
        }
        seen.as_ref().and_then(|(_, at)| at.clone())
    }

    /// A fresh look at the server for `/status`.
    pub(super) async fn observe(&self) -> InstanceStatus {
        let (phase, message) = self.link.phase();
        let mut st = InstanceStatus {
            instance: self.link.cfg.instance.clone(),
            flavor: Some(self.link.cfg.flavor()),
            phase,
            message,
            executable_hash: self.exe_hash.clone(),
            manager_version: VERSION.into(),
            manager_pid: std::process::id(),
            manager_started_at: self.started_at.clone(),
            certificate_expires_at: self.certs.expires_at(),
            tls_trust: self.certs.trust().0,
            tls_issuer: self.certs.trust().1,
            clone: self
                .progress
                .lock()
                .unwrap()
                .clone()
                .filter(|p| p.stage != "done"),
            ..Default::default()
        };
        if let ServerState::Running { pid } = self.link.supervisor.state() {
            st.mysqld_pid = Some(pid);
        }
        st.server_version = self.link.server_version().unwrap_or_default();
        let data = &self.link.cfg.data_dir;
        st.data_version = crate::server_version::data_version(data).unwrap_or_default();
        st.system_tables_version =
            crate::server_version::system_tables_version(self.link.cfg.flavor(), data)
                .unwrap_or_default();
        st.volumes = super::volumes::usage(&self.link.cfg);
        st.isolated = self.isolated().await;
        st.archive = self.archiving.status();
        st.binlogs = self.binlogs.status();
        st.archive_replica = self.archive_follower.status();
        st.recovered = super::recovery::recovered(&self.link.cfg.data_dir);
        let Some(pool) = self.link.pool() else {
            return st;
        };
        let observed = tokio::time::timeout(Duration::from_secs(2), async {
            let mut conn = pool.get_conn().await?;
            let f = self.link.cfg.flavor();
            let view = sql::observe(&mut conn, f).await?;
            if !(view.read_only && view.semi_sync.source_enabled) {
                return anyhow::Ok((view, false, None));
            }
            if cnmysql_core::semisync::acks_closed(f, &view.semi_sync) {
                // Read after the closed count was: final, whatever waits.
                let at = hand_over_acks::binlog_end(&mut conn, f).await?;
                let waiting = super::fence::commits_wait(&mut conn, f).await;
                return Ok((view, waiting, at));
            }
            if hand_over_acks::will_close(f, self.link.role().as_ref(), &view) {
                // About to close them: final only then.
                return Ok((view, true, None));
            }
            let (view, waiting) = settled_history(&mut conn, f, view).await?;
            Ok((view, waiting, None))
        })
        .await;
        let (view, commits_awaiting_ack, acks_closed_at) = match observed {
            Ok(Ok(v)) => v,
            Ok(Err(e)) => {
                st.message = format!("cannot query mysqld: {e}");
                return st;
            }
            Err(_) => {
                st.message = "mysqld did not answer within 2s".into();
                return st;
            }
        };
        st.mysqld_running = true;
        st.read_only = view.read_only;
        st.source_id = view.source_id.clone();
        st.holds_lease = self.link.lease.within_ttl();
        st.last_transaction_at = self.note_history(&view.gtid_executed);
        st.gtid_executed = view.gtid_executed;
        st.gtid_position = view.gtid_position;
        st.commits_awaiting_ack = commits_awaiting_ack;
        st.acks_closed_at = acks_closed_at;
        st.uptime_seconds = Some(view.uptime_seconds);
        st.semi_sync = Some(view.semi_sync);
        st.server = view.server;
        if let Some(bytes) = crate::server::binlog_files::total_bytes(&self.link.cfg) {
            st.server
                .insert(cnmysql_view::server_metrics::BINLOG_BYTES.into(), bytes);
        }
        st.lag_seconds = view.replication.as_ref().and_then(|r| r.seconds_behind);
        let desired = self.link.role();
        st.role = match (&view.replication, &desired) {
            (Some(_), _) => Role::Replica,
            (None, _) if !view.read_only => Role::Primary,
            (None, Some(Desired::Primary)) => Role::Primary,
            _ => Role::Unknown,
        };
        let replication = view.replication.as_ref().map(|r| {
            let from = self.peers.source_name(&r.source_host, r.source_port);
            let desired_source = match &desired {
                Some(Desired::Replica { source }) | Some(Desired::DesignatedPrimary { source }) => {
                    Some(source)
                }
                _ => None,
            };
            (r, from.is_some() && from.as_ref() == desired_source)
        });
        st.ready = readiness::ready(
            desired.as_ref(),
            readiness::Seen {
                running: st.phase == InstancePhase::Running,
                role: st.role,
                read_only: view.read_only,
                replication,
                archive_following: self
                    .archive_follower
                    .status()
                    .is_some_and(|a| a.error.is_none()),
                writes_refused: view.read_only && self.link.writes_refused().is_some(),
            },
        );
        // Unknown (no desired role yet) counts as unproven.
        st.relay_refilling = !matches!(
            desired,
            Some(Desired::Primary | Desired::DesignatedPrimary { .. })
        ) && st.role != Role::Primary
            && self.refill.refilling();
        if st.relay_refilling {
            st.relay_refill_target = self.refill.target();
        }
        st.replication = view.replication;
        st
    }
}

/// A read-only server with semi-sync's source side on (a primary handing
/// over): whether its history is final, read so that no commit slips
/// between the answers. MySQL completes a commit that waited for an
/// acknowledgement after read-only was set; asked "does any wait?" after
/// the history was read, a commit that completed in between reads as
/// "none waits" beside a history without it, and the switchover's target
/// promoted without it (real node, MySQL, `required`, seed
/// 3410147549173993031: the old primary and the replica that acknowledged
/// held a transaction the new primary lacked). So: asked before and after
/// the history is read again, and the history must not have moved. What
/// this cannot see: a commit still on its way to the wait (flushing) at
/// the first question that waits at the second read and completes before
/// the last question. A MySQL primary handing over closes its
/// acknowledgements first (`hand_over_acks`), and is then not asked this:
/// the rule stays for a manager that could not close them (or an older one).
async fn settled_history(
    conn: &mut mysql_async::Conn,
    f: cnmysql_api::Flavor,
    first: sql::ServerView,
) -> anyhow::Result<(sql::ServerView, bool)> {
    let before = super::fence::commits_wait(conn, f).await;
    let view = sql::observe(conn, f).await?;
    let after = super::fence::commits_wait(conn, f).await;
    let settled =
        switchover::history_settled(&first.gtid_executed, before, &view.gtid_executed, after);
    Ok((view, !settled))
}
