//! Making a server stop writing: read-only within a budget, escalated as
//! `cnmysql_core::self_fence` says for the cause — the writers' sessions
//! closed, or mysqld killed (a deposed primary then recovers as a
//! replica, once the status names another primary to be). A server that
//! must stop writing is not done with while a commit waits for a semi-sync
//! acknowledgement (MySQL turns read-only meanwhile): that commit must
//! never complete.

use super::link::Link;
use super::*;
use std::sync::atomic::AtomicBool;

/// How a request to become read-only ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fenced {
    ReadOnly,
    /// mysqld was killed instead (it starts again read-only).
    Killed,
}

/// Fencing, shared by convergence (demotion, a writable replica), the
/// watchdog (a lease that cannot be proven) and the stop. It owns whether
/// this instance was deposed while writable.
pub(super) struct Fencer {
    link: Link,
    /// mysqld was killed because this instance was deposed while writable:
    /// its next start recovers as a replica (rolls back what waited for an
    /// acknowledgement) once the status names another instance as the
    /// primary to be (`role::recovery_when`).
    deposed: AtomicBool,
    /// The cluster status as last seen, for the recovery of a kill.
    status: std::sync::Mutex<cnmysql_api::ClusterStatus>,
}

impl Fencer {
    pub fn new(link: Link) -> Fencer {
        Fencer {
            link,
            deposed: AtomicBool::new(false),
            status: Default::default(),
        }
    }

    /// Whether this instance was deposed while writable (and has not been
    /// the accepted primary since).
    pub fn deposed(&self) -> bool {
        self.deposed.load(Ordering::SeqCst)
    }

    /// The accepted primary again (it took or renewed the lease, or it
    /// claimed the primary): a crash now keeps what it wrote.
    pub fn reinstated(&self) {
        self.deposed.store(false, Ordering::SeqCst);
    }

    /// The cluster status as convergence last read it.
    pub fn seen_status(&self, status: &cnmysql_api::ClusterStatus) {
        *self.status.lock().unwrap() = status.clone();
    }

    /// Deposed: when mysqld starts again it recovers as a replica (the
    /// transactions that waited are rolled back where the flavour can),
    /// once the status last seen names another primary to be
    /// (`role::recovery_when`).
    fn mark_deposed(&self) {
        self.deposed.store(true, Ordering::SeqCst);
        let cfg = &self.link.cfg;
        let recovery = role::recovery_when(&cfg.instance, &self.status.lock().unwrap(), true);
        self.link
            .supervisor
            .set_start_options(cnmysql_core::flavor::recovery_options(
                cfg.flavor(),
                recovery,
                cfg.spec.mysql.semi_sync.enabled,
            ));
    }

    /// Kill mysqld of a deposed primary whose waiting commits must never
    /// complete; it starts again read-only, recovering as a replica.
    pub fn kill_deposed_server(&self, why: &str) {
        self.mark_deposed();
        tracing::error!(
            why,
            "killing mysqld: nothing it holds unacknowledged may be acknowledged"
        );
        self.link.supervisor.kill_to_fence(self.link.stopping());
    }

    /// Make mysqld read-only and close the writers' sessions, within
    /// [`self_fence::READ_ONLY_BUDGET_MS`]; past it, escalate as
    /// [`self_fence::escalation`] says for `cause`.
    pub async fn make_read_only(
        &self,
        cause: self_fence::Cause,
        why: &str,
    ) -> anyhow::Result<Fenced> {
        let (fenced, _) = self.make_read_only_keeping(cause, why).await?;
        Ok(fenced)
    }

    /// [`Fencer::make_read_only`], and the connection that made the server
    /// read-only (none when mysqld was killed instead), for what must
    /// follow on it at once: a hand-over closes its acknowledgements
    /// there, without a connection and a look at the server more (under
    /// load each cost the hand-over up to 0.2 s).
    pub async fn make_read_only_keeping(
        &self,
        cause: self_fence::Cause,
        why: &str,
    ) -> anyhow::Result<(Fenced, Option<mysql_async::Conn>)> {
        let pool = self
            .link
            .pool()
            .ok_or_else(|| anyhow::anyhow!("no connection to mysqld yet"))?;
        let f = self.link.cfg.flavor();
        let budget = Duration::from_millis(self_fence::READ_ONLY_BUDGET_MS);
        let began = Instant::now();
        let mut conn = match tokio::time::timeout(budget, pool.get_conn()).await {
            Ok(c) => Some(c?),
            Err(_) => None,
        };
        if let Some(c) = conn.as_mut()
            && self.expired_while_writable(cause, c).await
        {
            let age = self.link.lease.age_ms().unwrap_or_default();
            self.kill_deposed_server(&if self.link.lease.taken() {
                format!("{why}: still writable {age} ms after the primary lease was last renewed, and a failover passed it to another instance")
            } else {
                format!("{why}: still writable {age} ms after the primary lease was last renewed, past its expiry (the manager did not run: frozen, stopped or starved)")
            });
            return Ok((Fenced::Killed, None));
        }
        let done = match conn.as_mut() {
            Some(c) => {
                let left = budget.saturating_sub(began.elapsed());
                match tokio::time::timeout(left, sql::exec_all(c, &flavor::read_only(f, true)))
                    .await
                {
                    Ok(r) => {
                        r?;
                        // MySQL turns read-only while commits still wait
                        // for an acknowledgement: for a server that must
                        // stop writing, those are not done with.
                        cause == self_fence::Cause::Demotion || !commits_wait(c, f).await
                    }
                    Err(_) => false,
                }
            }
            None => false,
        };
        if !done {
            // The connection is mid-statement: never reuse it.
            drop(conn.take());
            match self_fence::escalation(cause) {
                self_fence::Escalation::KillServer { as_replica } => {
                    if as_replica {
                        self.mark_deposed();
                    }
                    tracing::error!(
                        why,
                        ?cause,
                        budget_ms = self_fence::READ_ONLY_BUDGET_MS,
                        "mysqld did not become read-only in time (commits wait for acknowledgements that will not come); killing it"
                    );
                    // Not started again when the manager is stopping anyway.
                    self.link.supervisor.kill_to_fence(self.link.stopping());
                    return Ok((Fenced::Killed, None));
                }
                self_fence::Escalation::CloseSessionsAndRetry => {
                    let mut other = pool.get_conn().await?;
                    let killed = sql::kill_writers(&mut other).await?;
                    tracing::warn!(
                        why,
                        killed,
                        "read-only was held up; closed the writers' sessions"
                    );
                    sql::exec_all(&mut other, &flavor::read_only(f, true)).await?;
                    conn = Some(other);
                }
            }
        }
        let mut conn = conn.expect("a connection that set read-only");
        let killed = sql::kill_writers(&mut conn).await?;
        tracing::info!(
            why,
            killed,
            millis = began.elapsed().as_millis() as u64,
            "read-only"
        );
        Ok((Fenced::ReadOnly, Some(conn)))
    }

    /// The primary lease expired while this server stayed writable
    /// (`self_fence::kill_at_once`): no answer counts as writable.
    async fn expired_while_writable(
        &self,
        cause: self_fence::Cause,
        conn: &mut mysql_async::Conn,
    ) -> bool {
        let age = self.link.lease.expired_age_ms();
        if !self_fence::kill_at_once(cause, age, true) {
            return false;
        }
        let ro = tokio::time::timeout(
            Duration::from_millis(self_fence::READ_ONLY_BUDGET_MS),
            conn.query_first::<i64, _>("SELECT @@read_only"),
        )
        .await;
        let writable = !matches!(ro, Ok(Ok(Some(1))));
        self_fence::kill_at_once(cause, age, writable)
    }
}

/// Whether a session waits for a semi-sync acknowledgement (an error
/// counts as yes: the caller then kills rather than releases).
pub(super) async fn commits_wait(conn: &mut mysql_async::Conn, f: cnmysql_api::Flavor) -> bool {
    let n: Result<Option<u64>, _> = conn.query_first(flavor::ack_waiters(f).text).await;
    !matches!(n, Ok(Some(0)) | Ok(None))
}
