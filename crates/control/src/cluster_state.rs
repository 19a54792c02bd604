//! Where an instance manager reads the cluster's intent and records what it
//! did: the Cluster status and the Lease on Kubernetes, files on the local
//! platform. Every change is conditional, so two managers can never both
//! believe they won.

use std::future::Future;

use std::collections::BTreeMap;

use cnmysql_api::ClusterStatus;
use cnmysql_core::event::Event;

use crate::peer::PeerAddr;

pub trait ClusterState: Send + Sync + 'static {
    /// The cluster status as last written.
    fn get(&self) -> impl Future<Output = anyhow::Result<ClusterStatus>> + Send;

    /// Record `instance` as `currentPrimary` (and its timestamp) only if it is
    /// still the `targetPrimary`. True when recorded (or already so).
    fn claim_primary(&self, instance: &str) -> impl Future<Output = anyhow::Result<bool>> + Send;

    /// Change the status with a pure function of it (a conditional write);
    /// the event it returns is recorded once the change is written.
    fn change<T: Send>(
        &self,
        f: impl FnMut(&mut ClusterStatus) -> (T, Option<Event>) + Send,
    ) -> impl Future<Output = anyhow::Result<T>> + Send;

    /// List `instance` in `divergedInstances` with the reason (and what
    /// happens next); an event the first time.
    fn mark_diverged(
        &self,
        instance: &str,
        reason: &str,
    ) -> impl Future<Output = anyhow::Result<()>> + Send {
        async move {
            self.change(|st| {
                let first = !st.diverged_instances.iter().any(|n| n == instance);
                cnmysql_core::reinit::note_diverged(st, instance, reason);
                let event = first.then(|| {
                    Event::new(
                        true,
                        "Diverged",
                        Some(instance),
                        format!("{instance} is kept out of service and read-only: {reason}"),
                    )
                });
                ((), event)
            })
            .await
        }
    }

    /// Take or renew the primary lease; an error when another holder has it.
    fn acquire_lease(&self, instance: &str) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// Resolves when the cluster status may have changed since the last call
    /// (a watch on Kubernetes; a cheap file check locally), so role changes
    /// are acted on at once rather than at the next periodic reconcile.
    fn changed(&self) -> impl Future<Output = ()> + Send;

    /// Give the lease up if `instance` holds it.
    fn release_lease(&self, instance: &str) -> impl Future<Output = anyhow::Result<()>> + Send;

    /// Where the other instances are now, when the platform moves them (Pod
    /// IPs on Kubernetes); the static configuration's peers otherwise.
    fn peers(&self) -> BTreeMap<String, PeerAddr> {
        BTreeMap::new()
    }
}
