//! What a platform provides to the engine: single actions on its
//! instances, its cluster status and its Lease. Each method is one
//! platform operation; the order, the events around them and what they are
//! for are the engine's and the core's.

use std::future::Future;

use cnmysql_control::ControlClient;
use cnmysql_core::event::Event;
use cnmysql_core::lease::Lease;
use cnmysql_core::memory::Memory;
use cnmysql_core::semisync::Settings;
use cnmysql_core::status_change::StatusChange;

/// A request to an instance's control API.
#[derive(Clone, Debug, PartialEq)]
pub enum ControlRequest {
    /// `POST /semisync`: the primary's semi-sync settings.
    SemiSync(Settings),
    /// `POST /instance/manager/upgrade`: stream the control plane's own
    /// executable (SHA-256 `hash`); the manager re-execs, mysqld keeps
    /// running.
    Upgrade { hash: String },
    /// `POST /instance/mysql/upgrade`: bring the system tables to the
    /// version the server runs (MariaDB: `mariadb-upgrade`).
    UpgradeSystemTables,
    /// `POST /instance/manager/upgrade-from-file`: the manager checks an
    /// executable on its own filesystem (SHA-256 when given) and re-execs
    /// into it; answers the file's hash.
    UpgradeFromFile {
        path: String,
        sha256: Option<String>,
    },
}

impl ControlRequest {
    /// Send it to the control API at `host:port`; the answer's body.
    pub async fn send(
        &self,
        client: &ControlClient,
        host: &str,
        port: u16,
    ) -> anyhow::Result<String> {
        use cnmysql_control::{requests, upgrade};
        match self {
            ControlRequest::SemiSync(s) => {
                requests::set_semi_sync(client, host, port, &s.into()).await
            }
            ControlRequest::Upgrade { hash } => {
                upgrade::push(client, host, port, hash).await?;
                Ok(hash.clone())
            }
            ControlRequest::UpgradeFromFile { path, sha256 } => {
                upgrade::from_file(client, host, port, path, sha256.as_deref()).await
            }
            ControlRequest::UpgradeSystemTables => {
                requests::upgrade_system_tables(client, host, port).await
            }
        }
    }
}

/// A platform the engine carries the core's actions out on. `memory` is
/// the controller's memory as the step left it (which instances are held
/// down or released). Which instances to keep running is the pass's
/// answer ([`crate::pass`]), converged to after the actions.
pub trait Platform {
    /// The SHA-256 of the control plane's executable (the rollout target).
    fn executable_hash(&self) -> &str;

    /// The primary Lease as stored now; `None` when there is none.
    fn lease(&mut self) -> impl Future<Output = anyhow::Result<Option<Lease>>> + Send;

    /// Apply `change` to the cluster status if it still applies, under a
    /// lock or a resourceVersion precondition, retrying on conflict. True
    /// when it was written.
    fn change_status(
        &mut self,
        change: &StatusChange,
    ) -> impl Future<Output = anyhow::Result<bool>> + Send;

    /// Record an event (and tell whoever watches).
    fn record(&mut self, event: &Event) -> impl Future<Output = ()> + Send;

    /// Stop every process of `instance` now, keep its data, and start
    /// nothing for it while `memory` holds it down.
    fn fence_out(
        &mut self,
        instance: &str,
        memory: &Memory,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// Release the primary Lease held by `holder`, only with proof that
    /// none of its processes can still write; otherwise do nothing (the
    /// lease runs out).
    fn release_lease(&mut self, holder: &str) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// Hand the primary Lease from `from` to `to` before it expires, as a
    /// conditional write: an error (and nothing written) unless `from`
    /// still holds it, renewed last at `seen_renew_ms`.
    fn pass_lease(
        &mut self,
        from: &str,
        to: &str,
        seen_renew_ms: i64,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// `instance` is no longer held down (see `memory`): start it again.
    fn allow_start(
        &mut self,
        instance: &str,
        memory: &Memory,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// Stop `instance` cleanly and start it again from the control plane's
    /// executable and the Cluster's current definition (`primary`: it is
    /// the primary, restarted in place on purpose). True when it was
    /// started on its way; false when there was nothing to recreate.
    fn recreate(
        &mut self,
        instance: &str,
        primary: bool,
        memory: &Memory,
    ) -> impl Future<Output = anyhow::Result<bool>> + Send;

    /// Send `request` to `instance`'s control API (see
    /// [`ControlRequest::send`]); the answer's body, or an error when it
    /// has no address now or refused.
    fn control(
        &mut self,
        instance: &str,
        request: &ControlRequest,
    ) -> impl Future<Output = anyhow::Result<String>> + Send;

    /// Set (Some) or remove (None) annotations on `instance`'s object (its
    /// Pod; locally its annotation file), or on the Cluster's when
    /// `instance` is None.
    fn annotate(
        &mut self,
        instance: Option<&str>,
        set: &std::collections::BTreeMap<String, Option<String>>,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;
}
