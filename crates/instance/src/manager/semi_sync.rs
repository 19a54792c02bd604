//! The primary's semi-sync source side: the operator's steady-state
//! settings applied on request, and `preferred` durability's fallback to
//! asynchronous replication (run by the watchdog's loop). Both record,
//! before the server may do it, that commits may be acknowledged without a
//! replica (`acked_alone.rs`).

use super::acked_alone;
use super::link::Link;
use super::*;

/// `preferred` semi-sync: the primary falls back to asynchronous
/// replication itself once a commit has waited `timeoutMillis`, and only
/// while it provably holds the lease (`semisync::fall_back`).
pub(super) async fn fall_back_if_due(link: &Link) {
    let spec = &link.cfg.spec;
    if semisync::fallback_after_ms(spec).is_none()
        || !matches!(
            link.role(),
            Some(Desired::Primary) | Some(Desired::HandOver { .. })
        )
        || !link.server_running()
    {
        return;
    }
    // Only a primary that proves its lease may fall back: without it,
    // not even the processlist is read (a primary resumed from a freeze
    // has more urgent work).
    if !link.lease.proven() {
        return;
    }
    let Some(pool) = link.pool() else { return };
    let f = link.cfg.flavor();
    let waited = tokio::time::timeout(Duration::from_millis(500), async {
        let mut c = pool.get_conn().await?;
        let ms: Option<u64> = c.query_first(flavor::longest_ack_wait_ms(f).text).await?;
        anyhow::Ok(ms.unwrap_or(0))
    })
    .await;
    let Ok(Ok(waited)) = waited else { return };
    if !semisync::fall_back(spec, link.lease.proven(), waited) {
        return;
    }
    let off = semisync::off(semisync::NEVER_FALL_BACK_MS);
    if let Err(e) = acked_alone::record(
        &link.cfg,
        &format!("fell back to asynchronous replication after a commit waited {waited} ms"),
    ) {
        tracing::error!(error = %e, "cannot record the fallback; staying semi-synchronous");
        return;
    }
    match apply(link, &off).await {
        Ok(()) => tracing::warn!(
            waited_ms = waited,
            "no replica acknowledged in time: falling back to asynchronous replication (dataDurability: preferred)"
        ),
        Err(e) => tracing::warn!(error = %e, "cannot fall back to asynchronous replication"),
    }
}

/// Apply semi-sync settings on this primary (the operator's steady-state
/// adjustment).
pub(super) async fn apply(link: &Link, settings: &semisync::Settings) -> anyhow::Result<()> {
    let pool = link
        .pool()
        .ok_or_else(|| anyhow::anyhow!("mysqld is not connected"))?;
    let primary = matches!(
        link.role(),
        Some(Desired::Primary) | Some(Desired::Promote) | Some(Desired::HandOver { .. })
    );
    if primary && !settings.enabled {
        acked_alone::record(
            &link.cfg,
            "semi-sync switched off (no replica to acknowledge)",
        )?;
    }
    let mut conn = pool.get_conn().await?;
    sql::exec_all(
        &mut conn,
        &sql::semi_sync_source(link.cfg.flavor(), settings),
    )
    .await
}
