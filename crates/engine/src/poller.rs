//! Polling the instances' `/status` over mutual TLS, all at once.

use std::time::Duration;

use cnmysql_core::status::{InstanceStatus, Observed};
use cnmysql_instance::client::ControlClient;

/// How long one instance may take to answer a poll: an instance that does
/// not answer within this is observed unreachable.
pub const POLL_TIMEOUT: Duration = Duration::from_millis(1000);

/// One instance to poll.
pub struct Target {
    pub name: String,
    pub ordinal: u32,
    /// Its control API now: a client expecting its certificate, host and
    /// port. `None`: it has none (no Pod, no Pod IP, being deleted).
    pub address: Option<(ControlClient, String, u16)>,
    /// See [`Observed::outdated`].
    pub outdated: Option<String>,
}

/// Poll every target concurrently; one that does not answer within
/// [`POLL_TIMEOUT`] is observed without a status.
pub async fn poll(targets: Vec<Target>) -> Vec<Observed> {
    let polls = targets.into_iter().map(|t| async move {
        let status = match &t.address {
            Some((client, host, port)) => tokio::time::timeout(
                POLL_TIMEOUT,
                client.get_json::<InstanceStatus>(host, *port, "/status"),
            )
            .await
            .ok()
            .and_then(Result::ok),
            None => None,
        };
        Observed {
            name: t.name,
            ordinal: t.ordinal,
            status,
            outdated: t.outdated,
        }
    });
    futures::future::join_all(polls).await
}
