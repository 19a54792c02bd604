//! When and how a Pod stops: its deletion seen, with its grace period.

use super::*;

/// Is the Pod being deleted (or gone)? With the grace period to give it.
pub(super) fn stopping(p: &Option<Pod>) -> Option<Duration> {
    match p {
        None => Some(Duration::from_secs(2)),
        Some(p) if p.metadata.deletion_timestamp.is_some() => Some(Duration::from_secs(
            p.metadata
                .deletion_grace_period_seconds
                .or_else(|| {
                    p.spec
                        .as_ref()
                        .and_then(|s| s.termination_grace_period_seconds)
                })
                .unwrap_or(30)
                .max(0) as u64,
        )),
        _ => None,
    }
}

/// Like [`wait_stop`], but a Pod that is cut off or frozen does not learn
/// of its deletion until the fault is healed (its node would not).
pub(super) async fn wait_stop_reachable(
    rx: &mut watch::Receiver<Option<Pod>>,
    fault: &mut watch::Receiver<Fault>,
) -> Duration {
    loop {
        if !fault.borrow_and_update().silent()
            && let Some(g) = stopping(&rx.borrow())
        {
            return g;
        }
        tokio::select! {
            r = rx.changed() => if r.is_err() && !fault.borrow().silent() {
                return Duration::from_secs(2);
            } else if r.is_err() {
                let _ = fault.changed().await;
            },
            r = fault.changed() => if r.is_err() {
                return wait_stop(rx).await;
            },
        }
    }
}

pub(super) async fn wait_stop(rx: &mut watch::Receiver<Option<Pod>>) -> Duration {
    loop {
        if let Some(g) = stopping(&rx.borrow()) {
            return g;
        }
        if rx.changed().await.is_err() {
            return Duration::from_secs(2);
        }
    }
}

pub(super) fn grace_of(p: &Pod) -> Duration {
    Duration::from_secs(
        p.spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30)
            .max(0) as u64,
    )
}
