//! A MySQL primary handing over closes its acknowledgements once it is
//! read-only (before, the commits left waiting would hold read-only up
//! for ever: MySQL's `super_read_only` waits for them): with
//! `rpl_semi_sync_source_wait_for_replica_count` at its most
//! (`semisync::ACKS_CLOSED_COUNT`) no commit can be acknowledged, so no
//! client is told "committed" of anything its binary log gets from then
//! on. Its `/status` then names where its binary log ends
//! (`acks_closed_at`), and the target promotes only once it has received
//! and applied up to there: every commit a client was ever told of is in
//! the new primary, whatever the old one's commits were doing when they
//! were asked about (`switchover::final_history_of`). A commit left
//! waiting is never answered; the old primary is killed with it once the
//! target took over (`converge::leave_primary_side`), and its clients get
//! an error. Opening writes sets the spec's count again (a switchover
//! given up hands the role back that way).

use cnmysql_api::Flavor;
use cnmysql_core::flavor::hand_over as flavor;
use cnmysql_core::semisync;
use cnmysql_core::status::BinlogPoint;
use mysql_async::prelude::*;

use crate::server::sql;

/// Close the acknowledgements of a primary about to hand over, unless
/// they are closed already or it has nothing to close (MariaDB, semi-sync
/// off). An error is reported, not returned: the target then falls back
/// to asking whether commits wait (`observe::settled_history`).
pub(super) async fn close(conn: &mut mysql_async::Conn, f: Flavor, view: &sql::ServerView) {
    let Some(stmt) = flavor::close_acks(f) else {
        return;
    };
    if !closable(view) || semisync::acks_closed(f, &view.semi_sync) {
        return;
    }
    let began = std::time::Instant::now();
    match sql::exec_all(conn, &[stmt]).await {
        Ok(()) => tracing::info!(
            set_millis = began.elapsed().as_millis() as u64,
            "acknowledgements closed for the hand-over"
        ),
        Err(e) => tracing::warn!(error = %format!("{e:#}"), "closing the acknowledgements failed"),
    }
}

/// Whether this manager closes its server's acknowledgements before its
/// history is final: a MySQL primary handing over. Until it has, its
/// `/status` says commits await an acknowledgement (its history is not
/// final), so that no target promotes on the history alone meanwhile.
pub(super) fn will_close(
    f: Flavor,
    role: Option<&cnmysql_core::role::Desired>,
    view: &sql::ServerView,
) -> bool {
    flavor::close_acks(f).is_some()
        && closable(view)
        && matches!(role, Some(cnmysql_core::role::Desired::HandOver { .. }))
}

/// A server whose own commits wait for acknowledgements: the source side
/// on, and not a replica itself.
fn closable(view: &sql::ServerView) -> bool {
    view.semi_sync.source_enabled && view.replication.is_none()
}

/// Where the binary log ends now.
pub(super) async fn binlog_end(
    conn: &mut mysql_async::Conn,
    f: Flavor,
) -> anyhow::Result<Option<BinlogPoint>> {
    let row: Option<mysql_async::Row> = conn.query_first(flavor::binlog_end(f).text).await?;
    Ok(row.and_then(|r| {
        Some(BinlogPoint {
            file: r.get::<String, _>(0)?,
            position: r.get::<u64, _>(1)?,
        })
    }))
}

/// Whether this replica has received and applied its source's binary log
/// up to `at`, waiting for it at most `timeout_secs`.
pub(super) async fn applied_up_to(
    conn: &mut mysql_async::Conn,
    f: Flavor,
    at: &BinlogPoint,
    timeout_secs: f64,
) -> anyhow::Result<bool> {
    let waited: Option<Option<i64>> = conn
        .query_first(flavor::wait_for_source_point(f, at, timeout_secs).text)
        .await?;
    Ok(matches!(waited, Some(Some(n)) if n >= 0))
}
