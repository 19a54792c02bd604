//! A former primary's semi-sync source side, in two steps
//! (`semisync::leaving_primary`): first made neutral — only its timeout
//! lowered, so that its applier no longer waits for acknowledgements of
//! what it now only applies — and switched off once nobody is held up by
//! it. Switching it off stops the server's acknowledgement receiver,
//! which takes up to a second while a replica was registered, and MySQL
//! holds every new session meanwhile: right after a switchover those are
//! the clients kube-proxy still sends to the old primary.

use std::sync::Mutex;
use std::time::Instant;

use cnmysql_api::Flavor;
use cnmysql_core::semisync::{self, LeaveStep};
use cnmysql_core::status::SemiSyncStatus;

use crate::server::sql;

/// Since when this manager has seen its server's source side neutral.
#[derive(Default)]
pub(super) struct LeaveSourceSide {
    neutral_since: Mutex<Option<Instant>>,
}

impl LeaveSourceSide {
    /// The next step on a server that is read-only, no longer the primary,
    /// with no client's commit waiting (the caller checked).
    pub async fn step(
        &self,
        conn: &mut mysql_async::Conn,
        f: Flavor,
        semi: &SemiSyncStatus,
    ) -> anyhow::Result<()> {
        let neutral_for = self.neutral_for(semi);
        match semisync::leaving_primary(semi, neutral_for) {
            LeaveStep::Keep => {}
            LeaveStep::Neutralise => {
                let neutral = sql::semi_sync_source_timeout(f, semisync::NEUTRAL_TIMEOUT_MS);
                sql::exec_all(conn, &[neutral]).await?;
                tracing::info!("semi-sync source side made neutral on a non-primary");
            }
            LeaveStep::SwitchOff => {
                let off = semisync::off(semisync::NEUTRAL_TIMEOUT_MS);
                sql::exec_all(conn, &sql::semi_sync_source(f, &off)).await?;
                tracing::info!(
                    registered = semi.clients,
                    "semi-sync source side switched off on a non-primary"
                );
            }
        }
        Ok(())
    }

    /// How long the source side has been seen neutral, in milliseconds:
    /// the clock starts at the first sight (the pass after it was made
    /// neutral, or after a restart of the manager) and stops when it is
    /// anything else.
    fn neutral_for(&self, semi: &SemiSyncStatus) -> Option<u64> {
        let mut since = self.neutral_since.lock().unwrap();
        if !(semi.source_enabled && semi.timeout_millis == semisync::NEUTRAL_TIMEOUT_MS) {
            *since = None;
            return None;
        }
        let at = *since.get_or_insert_with(Instant::now);
        Some(at.elapsed().as_millis() as u64)
    }
}
