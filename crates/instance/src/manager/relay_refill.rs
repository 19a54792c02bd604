//! Whether this replica can still vouch for what it acknowledged.
//!
//! Semi-sync counts a replica's acknowledgement once the transaction is in
//! its relay log, before it is applied. A restart throws that log away:
//! MySQL recovers the relay log at start-up (`relay_log_recovery`),
//! MariaDB in GTID mode empties it whenever replication starts with both
//! threads stopped, and both empty it when the source is changed. Until
//! the replica has fetched again everything its source held after that
//! moment, a write it acknowledged may be in the source's binary log
//! alone, and a failover under `dataDurability: required` must not count
//! on it (`cnmysql_core::failover`). Found by the Kubernetes fault suite:
//! every instance killed at once, the primary's container held back by
//! the kubelet, a replica promoted without one acknowledged row (MariaDB,
//! seed 7316166684586105572).
//!
//! The proof: after the emptying, the source's position is read, and then
//! this replica's received history is seen to reach it. The source's
//! binary log held every write acknowledged before the emptying, and it
//! sends them again in order.
//!
//! Until then the position read is published (`relay_refill_target`): it
//! bounds what this replica may have acknowledged and lost, so a failover
//! may still go ahead on a candidate that holds it (the source frozen
//! moments after this replica came back; real node, MySQL, seed
//! 3407167566839483520: a 21.5 s stall for a block that was not true).

use super::link::Link;
use super::peers::Peers;
use super::*;

/// How often an unproven replica compares itself with its source.
const EVERY: Duration = Duration::from_millis(250);

/// The emptyings seen and the last one proven refilled. Every question
/// names the running server's pid (none while it is not running): a new
/// server process is an emptying of its own (MySQL's recovery at start-up).
#[derive(Default)]
struct Refill {
    /// Replication started or pointed anew by this manager.
    starts: u64,
    /// (mysqld's pid, `starts`) when the received history was last shown
    /// to reach what the source held after them.
    proven: Option<(u32, u64)>,
    /// The source's position read after the emptying keyed so: it holds
    /// every write this replica acknowledged before that emptying.
    target: Option<((u32, u64), String)>,
}

/// The emptying a proof is about: the server's pid and the starts.
type Key = (u32, u64);

impl Refill {
    fn key(&self, pid: Option<u32>) -> Option<Key> {
        pid.map(|pid| (pid, self.starts))
    }

    /// See `RelayRefill::emptied`.
    fn emptied(&mut self, pid: Option<u32>, what: Emptying) {
        let before = self.key(pid);
        let was_proven = before.is_some() && self.proven == before;
        self.starts += 1;
        let keep = match what {
            Emptying::NothingConfigured => true,
            Emptying::AllApplied => was_proven,
            Emptying::Unapplied => false,
        };
        if keep && let Some(pid) = pid {
            self.proven = Some((pid, self.starts));
        }
    }

    fn refilling(&self, pid: Option<u32>) -> bool {
        let key = self.key(pid);
        key.is_none() || self.proven != key
    }

    fn target(&self, pid: Option<u32>) -> Option<String> {
        let key = self.key(pid)?;
        match &self.target {
            Some((k, position)) if *k == key && self.proven != Some(key) => Some(position.clone()),
            _ => None,
        }
    }

    /// Keeps the first source position read after the emptying `key`,
    /// unless it was emptied again meanwhile (a later emptying needs a
    /// later read: what was acknowledged between the two is not in it).
    fn source_read(&mut self, pid: Option<u32>, key: Key, position: &str) {
        let known = self.target.as_ref().is_some_and(|(k, _)| *k == key);
        if !known && self.key(pid) == Some(key) && !position.is_empty() {
            self.target = Some((key, position.to_string()));
        }
    }

    /// The received history reached the source's position read after the
    /// emptying `key`: proven, unless it was emptied again meanwhile.
    fn reached(&mut self, pid: Option<u32>, key: Key) {
        if self.key(pid) == Some(key) {
            self.proven = Some(key);
        }
    }
}

/// What emptying the relay log now can throw away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Emptying {
    /// No replication was ever set up on this server (a fresh copy, a
    /// former primary): it acknowledged nothing as a replica.
    NothingConfigured,
    /// Both threads are stopped and everything received is applied: the
    /// relay log holds nothing that is not in the data.
    AllApplied,
    /// It may hold received transactions not yet applied.
    Unapplied,
}

/// What emptying the relay log of the server seen in `view` would lose.
pub(super) fn emptying(f: Flavor, view: &sql::ServerView) -> Emptying {
    let Some(r) = &view.replication else {
        return Emptying::NothingConfigured;
    };
    let received = r.received_gtid.trim();
    if both_threads_stopped(view)
        && (received.is_empty() || history_reaches(f, &view.gtid_executed, received))
    {
        Emptying::AllApplied
    } else {
        Emptying::Unapplied
    }
}

/// Neither replication thread runs (nor tries to connect).
pub(super) fn both_threads_stopped(view: &sql::ServerView) -> bool {
    view.replication
        .as_ref()
        .is_none_or(|r| r.io_state == "No" && !r.sql_running)
}

/// The relay refill concern: it owns the emptyings seen and the proofs,
/// told of each emptying by convergence, proving refills in its own loop,
/// and read by convergence and `/status`.
pub(super) struct RelayRefill<C: ClusterState> {
    link: Link,
    peers: Arc<Peers<C>>,
    state: Mutex<Refill>,
}

impl<C: ClusterState> RelayRefill<C> {
    pub fn new(link: Link, peers: Arc<Peers<C>>) -> Self {
        RelayRefill {
            link,
            peers,
            state: Default::default(),
        }
    }

    /// Replication is about to start with its relay log emptied (see the
    /// module): what it acknowledged is unproven until fetched again —
    /// unless nothing was configured, or a proof held for this server and
    /// the emptying throws away nothing unapplied.
    pub fn emptied(&self, what: Emptying) {
        let pid = self.pid();
        self.state.lock().unwrap().emptied(pid, what);
    }

    /// The running server's pid.
    fn pid(&self) -> Option<u32> {
        match self.link.supervisor.state() {
            ServerState::Running { pid } => Some(pid),
            _ => None,
        }
    }

    fn key(&self) -> Option<Key> {
        let pid = self.pid();
        self.state.lock().unwrap().key(pid)
    }

    /// True unless the current server's relay log is proven refilled since
    /// it was last emptied.
    pub fn refilling(&self) -> bool {
        let pid = self.pid();
        self.state.lock().unwrap().refilling(pid)
    }

    /// The source's position read after the current server's relay log was
    /// last emptied, while the refill is unproven: everything this replica
    /// may have acknowledged and lost is in it.
    pub fn target(&self) -> Option<String> {
        let pid = self.pid();
        self.state.lock().unwrap().target(pid)
    }

    /// Proves refills as they happen, while the manager runs.
    pub async fn run(self: Arc<Self>) {
        loop {
            if let Err(e) = self.prove().await {
                tracing::debug!(error = %e, "relay log refill not proven yet");
            }
            if self.link.sleep_or_stop(EVERY).await {
                return;
            }
        }
    }

    async fn prove(&self) -> anyhow::Result<()> {
        let Some(key) = self.key() else {
            return Ok(());
        };
        if self.state.lock().unwrap().proven == Some(key) {
            return Ok(());
        }
        let Some(Desired::Replica { source }) = self.link.role() else {
            return Ok(());
        };
        // Read after the emptying (the key was taken before): the source's
        // binary log holds all that was acknowledged before it.
        let Some(src) = self
            .peers
            .status(&source)
            .await
            .filter(|s| s.mysqld_running)
        else {
            return Ok(());
        };
        let pid = self.pid();
        self.state
            .lock()
            .unwrap()
            .source_read(pid, key, &src.gtid_position);
        let Some(pool) = self.link.pool() else {
            return Ok(());
        };
        let f = self.link.cfg.flavor();
        let mut conn = pool.get_conn().await?;
        let view = sql::observe(&mut conn, f).await?;
        let mine = InstanceStatus {
            gtid_executed: view.gtid_executed,
            replication: view.replication,
            ..Default::default()
        };
        if !received_reaches(f, &mine, &src.gtid_position) {
            return Ok(());
        }
        let pid = self.pid();
        self.state.lock().unwrap().reached(pid, key);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cnmysql_core::status::ReplicationStatus;

    fn view(io: &str, sql: bool, executed: &str, received: &str) -> sql::ServerView {
        sql::ServerView {
            gtid_executed: executed.into(),
            replication: Some(ReplicationStatus {
                io_state: io.into(),
                sql_running: sql,
                received_gtid: received.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_a_stopped_replica_that_applied_all_it_received_loses_nothing() {
        let fresh = sql::ServerView::default();
        assert_eq!(
            emptying(Flavor::Mariadb, &fresh),
            Emptying::NothingConfigured
        );
        let u = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        let (m, d) = (Flavor::Mysql, Flavor::Mariadb);
        let (mysql_100, mysql_90_100, mysql_90_101) = (
            format!("{u}:1-100"),
            format!("{u}:90-100"),
            format!("{u}:90-101"),
        );
        for (f, io, sql, executed, received, want) in [
            (d, "No", false, "0-1-100", "0-1-100", Emptying::AllApplied),
            // Received 102, applied 100: emptying throws away two that
            // may have been acknowledged.
            (d, "No", false, "0-1-100", "0-1-102", Emptying::Unapplied),
            // Still running: what it receives next is not judged.
            (d, "Yes", true, "0-1-100", "0-1-100", Emptying::Unapplied),
            (
                m,
                "No",
                false,
                &mysql_100,
                &mysql_90_100,
                Emptying::AllApplied,
            ),
            (
                m,
                "No",
                false,
                &mysql_100,
                &mysql_90_101,
                Emptying::Unapplied,
            ),
        ] {
            assert_eq!(
                emptying(f, &view(io, sql, executed, received)),
                want,
                "{f:?} io {io} sql {sql}: executed {executed}, received {received}"
            );
        }
    }

    #[test]
    fn the_source_position_read_after_an_emptying_bounds_it_until_proven() {
        let mut r = Refill::default();
        let (old, new) = (Some(40), Some(46));
        // A new server process: unproven, nothing read yet.
        assert!(r.refilling(new));
        assert_eq!(r.target(new), None);
        let key = r.key(new).unwrap();
        // A read for the old server's process is not about this one.
        r.source_read(old, r.key(old).unwrap(), "0-1-90");
        assert_eq!(r.target(new), None);
        r.source_read(new, key, "0-1-100");
        assert_eq!(r.target(new).as_deref(), Some("0-1-100"));
        // The first read after the emptying is kept (it is the bound).
        r.source_read(new, key, "0-1-120");
        assert_eq!(r.target(new).as_deref(), Some("0-1-100"));
        // Emptied again before it was proven (its source changed with
        // unapplied transactions): the old read bounds nothing now.
        r.emptied(new, Emptying::Unapplied);
        assert!(r.refilling(new));
        assert_eq!(r.target(new), None);
        // A read taken before that emptying and recorded after it is refused.
        r.source_read(new, key, "0-1-130");
        assert_eq!(r.target(new), None);
        let key = r.key(new).unwrap();
        r.source_read(new, key, "0-1-140");
        assert_eq!(r.target(new).as_deref(), Some("0-1-140"));
        // Proven: nothing is refilling, nothing published.
        r.reached(new, key);
        assert!(!r.refilling(new));
        assert_eq!(r.target(new), None);
        // A server started again is unproven however it was before.
        assert!(r.refilling(Some(51)));
        assert!(r.refilling(None));
    }

    #[test]
    fn a_proof_survives_only_an_emptying_that_loses_nothing() {
        let mut r = Refill::default();
        let pid = Some(7);
        r.emptied(pid, Emptying::NothingConfigured);
        assert!(!r.refilling(pid));
        r.emptied(pid, Emptying::AllApplied);
        assert!(!r.refilling(pid), "proven and all applied: kept");
        r.emptied(pid, Emptying::Unapplied);
        assert!(r.refilling(pid));
        r.emptied(pid, Emptying::AllApplied);
        assert!(r.refilling(pid), "all applied but not proven before");
        // A proof for an older emptying does not count.
        let stale = r.key(pid).unwrap();
        r.emptied(pid, Emptying::Unapplied);
        r.reached(pid, stale);
        assert!(r.refilling(pid));
    }
}
