//! Polling the instances' `/status` over mutual TLS, all at once.

use std::time::Duration;

use cnmysql_control::client::ControlClient;
use cnmysql_core::status::{InstanceStatus, Observed};

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
    poll_noting_refusals(targets)
        .await
        .into_iter()
        .map(|(o, _)| o)
        .collect()
}

/// As [`poll`], and for each instance whether its address refused the
/// connection: the host is there but nothing listens on the port (the
/// process is gone, not frozen or cut off, which time out).
pub async fn poll_noting_refusals(targets: Vec<Target>) -> Vec<(Observed, bool)> {
    let polls = targets.into_iter().map(|t| async move {
        let answer = match &t.address {
            Some((client, host, port)) => tokio::time::timeout(
                POLL_TIMEOUT,
                client.get_json::<InstanceStatus>(host, *port, "/status"),
            )
            .await
            .ok(),
            None => None,
        };
        let refused = matches!(&answer, Some(Err(e)) if refused(e));
        let observed = Observed {
            name: t.name,
            ordinal: t.ordinal,
            status: answer.and_then(Result::ok),
            outdated: t.outdated,
        };
        (observed, refused)
    });
    futures::future::join_all(polls).await
}

/// Whether an error came from a refused connection.
pub fn refused(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
    })
}
