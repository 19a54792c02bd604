//! The instance manager's platform boundary on Kubernetes: the Cluster
//! status and the Lease `<cluster>-primary`, read and written through the
//! API server with the instance's own ServiceAccount.
//!
//! - the Cluster and the cluster's Pods are watched (a reflector each), so a
//!   change of targetPrimary, currentPrimary or fencing wakes the manager at
//!   once, and peers are found at their current Pod IPs;
//! - every write is conditional on the resourceVersion it was computed
//!   from: a claim of currentPrimary never overwrites a newer failover;
//! - the cluster state counts as reachable only if a real request went
//!   through recently, so the liveness isolation check sees an API-server
//!   outage even while the watch cache still answers.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease as KubeLease, LeaseSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};

use cnmysql_api::names::{CONTROL_PORT, MYSQL_PORT};
use cnmysql_api::{Cluster, ClusterStatus};
use cnmysql_control::ClusterState;
use cnmysql_control::peer::PeerAddr;
use cnmysql_core::event::Event;
use cnmysql_core::lease::Lease;

use crate::cluster_handle::ClusterHandle;
use crate::events::{self, Kind};

/// Who reports the managers' Events.
pub const REPORTER: &str = "mysql.cnmysql.io/instance-manager";
/// How stale the proof of reaching the API server may be.
const VERIFY_EVERY: Duration = Duration::from_secs(5);

pub struct KubeClusterState {
    handle: ClusterHandle,
    leases: Api<KubeLease>,
    lease_name: String,
    clusters: Store<Cluster>,
    pods: Store<Pod>,
    version: tokio::sync::watch::Receiver<u64>,
    seen: AtomicU64,
    /// When a request last reached the API server.
    verified: Mutex<Option<Instant>>,
}

fn ms(t: &MicroTime) -> i64 {
    t.0.as_millisecond()
}

fn micro(ms: i64) -> MicroTime {
    MicroTime(Timestamp::from_millisecond(ms).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// The core's view of a Lease object.
pub fn lease_from(l: &KubeLease) -> Lease {
    let spec = l.spec.clone().unwrap_or_default();
    Lease {
        holder_identity: spec.holder_identity.filter(|h| !h.is_empty()),
        acquire_time_ms: spec.acquire_time.as_ref().map(ms).unwrap_or(0),
        renew_time_ms: spec.renew_time.as_ref().map(ms).unwrap_or(0),
        lease_duration_ms: i64::from(spec.lease_duration_seconds.unwrap_or(0)) * 1000,
        lease_transitions: spec.lease_transitions.unwrap_or(0).max(0) as u32,
    }
}

fn lease_spec(l: &Lease) -> LeaseSpec {
    LeaseSpec {
        holder_identity: l.holder_identity.clone(),
        acquire_time: Some(micro(l.acquire_time_ms)),
        renew_time: Some(micro(l.renew_time_ms)),
        lease_duration_seconds: Some((l.lease_duration_ms / 1000) as i32),
        lease_transitions: Some(l.lease_transitions as i32),
        ..Default::default()
    }
}

impl KubeClusterState {
    /// Start watching `cluster` in `namespace` and its Pods; returns once
    /// the Cluster has been read.
    pub async fn start(client: Client, namespace: &str, cluster: &str) -> anyhow::Result<Self> {
        let clusters_api: Api<Cluster> = Api::namespaced(client.clone(), namespace);
        let pods_api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let (version_tx, version) = tokio::sync::watch::channel(0u64);
        let version_tx = std::sync::Arc::new(version_tx);

        let (clusters, writer) = reflector::store();
        let stream = reflector::reflector(
            writer,
            watcher(
                clusters_api,
                watcher::Config::default().fields(&format!("metadata.name={cluster}")),
            ),
        )
        .default_backoff()
        .applied_objects();
        let tx = version_tx.clone();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(r) = stream.next().await {
                match r {
                    Ok(_) => tx.send_modify(|v| *v += 1),
                    Err(e) => tracing::warn!(error = %e, "watching the Cluster"),
                }
            }
        });
        let (pods, writer) = reflector::store();
        let stream = reflector::reflector(
            writer,
            watcher(
                pods_api,
                watcher::Config::default().labels(&format!("cnmysql.io/cluster={cluster}")),
            ),
        )
        .default_backoff()
        .applied_objects();
        let tx = version_tx.clone();
        tokio::spawn(async move {
            futures::pin_mut!(stream);
            while let Some(r) = stream.next().await {
                match r {
                    // A peer's address changed: a reason to look again.
                    Ok(_) => tx.send_modify(|v| *v += 1),
                    Err(e) => tracing::warn!(error = %e, "watching the cluster's Pods"),
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(60), clusters.wait_until_ready())
            .await
            .with_context(|| {
                format!("cluster {cluster} in namespace {namespace} could not be read within 60s")
            })??;
        Ok(KubeClusterState {
            handle: ClusterHandle::new(client.clone(), namespace, cluster),
            leases: Api::namespaced(client, namespace),
            lease_name: cnmysql_api::names::service_name(cluster, "primary"),
            clusters,
            pods,
            version,
            seen: AtomicU64::new(0),
            verified: Mutex::new(Some(Instant::now())),
        })
    }

    fn cached(&self) -> Option<std::sync::Arc<Cluster>> {
        self.clusters
            .get(&ObjectRef::new(self.handle.name()).within(self.handle.namespace()))
    }

    fn mark_verified(&self) {
        *self.verified.lock().unwrap() = Some(Instant::now());
    }

    /// The latest Cluster, read from the API server.
    async fn fresh(&self) -> anyhow::Result<Cluster> {
        let c = self.handle.get().await?;
        self.mark_verified();
        Ok(c)
    }

    async fn event(&self, cluster: &Cluster, kind: Kind, action: &str, reason: &str, note: &str) {
        if let Err(e) = events::publish(
            self.handle.client(),
            cluster,
            REPORTER,
            kind,
            action,
            reason,
            note,
        )
        .await
        {
            tracing::warn!(error = %e, reason, "cannot record an event");
        }
    }

    /// Change the status with the conditional status write
    /// ([`ClusterHandle::update_status`]); a request that went through
    /// proves the API server reachable.
    async fn update_status<T>(
        &self,
        change: impl FnMut(&Cluster, &mut ClusterStatus) -> T,
    ) -> anyhow::Result<(Cluster, T, bool)> {
        let done = self.handle.update_status(change).await?;
        self.mark_verified();
        Ok((done.cluster, done.value, done.written))
    }
}

impl ClusterState for KubeClusterState {
    async fn get(&self) -> anyhow::Result<ClusterStatus> {
        let stale = self
            .verified
            .lock()
            .unwrap()
            .is_none_or(|t| t.elapsed() >= VERIFY_EVERY);
        let c = if stale {
            std::sync::Arc::new(self.fresh().await?)
        } else {
            self.cached()
                .context("the Cluster is not in the watch cache (deleted?)")?
        };
        Ok(c.status.clone().unwrap_or_default())
    }

    async fn claim_primary(&self, instance: &str) -> anyhow::Result<bool> {
        let now = Timestamp::now().to_string();
        let (c, claimed, changed) = self
            .update_status(|_, st| {
                if st.target_primary.as_deref() != Some(instance) {
                    return false;
                }
                if st.current_primary.as_deref() != Some(instance) {
                    st.current_primary = Some(instance.to_string());
                    st.current_primary_timestamp = Some(now.clone());
                    st.primary_failing_since = None;
                }
                true
            })
            .await?;
        if changed {
            self.event(
                &c,
                Kind::Normal,
                "Promote",
                "Promoted",
                &format!("{instance} is now the primary"),
            )
            .await;
        }
        Ok(claimed)
    }

    async fn change<T: Send>(
        &self,
        mut f: impl FnMut(&mut ClusterStatus) -> (T, Option<Event>) + Send,
    ) -> anyhow::Result<T> {
        let (c, (value, event), written) = self.update_status(|_, st| f(st)).await?;
        if written && let Some(e) = event {
            let kind = if e.warning {
                Kind::Warning
            } else {
                Kind::Normal
            };
            self.event(&c, kind, "Rejoin", e.reason, &e.message).await;
        }
        Ok(value)
    }

    async fn acquire_lease(&self, instance: &str) -> anyhow::Result<()> {
        let now = Timestamp::now().as_millisecond();
        let existing = self.leases.get_opt(&self.lease_name).await?;
        self.mark_verified();
        let current = existing.as_ref().map(lease_from).unwrap_or_default();
        let next = current.acquire(instance, now)?;
        let obj = KubeLease {
            metadata: ObjectMeta {
                name: Some(self.lease_name.clone()),
                resource_version: existing.as_ref().and_then(|l| l.resource_version()),
                labels: Some(BTreeMap::from([(
                    "cnmysql.io/cluster".to_string(),
                    self.handle.name().to_string(),
                )])),
                ..Default::default()
            },
            spec: Some(lease_spec(&next)),
        };
        // Both conditional: a create fails if someone created it first, a
        // replace if someone changed it since we read it.
        let r = match existing {
            None => self.leases.create(&PostParams::default(), &obj).await,
            Some(_) => {
                self.leases
                    .replace(&self.lease_name, &PostParams::default(), &obj)
                    .await
            }
        };
        match r {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                anyhow::bail!("the primary lease changed while taking it; will retry")
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn changed(&self) {
        let mut rx = self.version.clone();
        loop {
            let v = *rx.borrow_and_update();
            if self.seen.swap(v, Ordering::SeqCst) != v {
                return;
            }
            if rx.changed().await.is_err() {
                // The watches are gone: fall back to periodic reconciles.
                std::future::pending::<()>().await;
            }
        }
    }

    async fn release_lease(&self, instance: &str) -> anyhow::Result<()> {
        let Some(existing) = self.leases.get_opt(&self.lease_name).await? else {
            return Ok(());
        };
        release_lease_of(&self.leases, &existing, instance).await?;
        Ok(())
    }

    fn peers(&self) -> BTreeMap<String, PeerAddr> {
        self.pods
            .state()
            .iter()
            // A Pod being deleted keeps its address until it is gone: a
            // leaving primary is still the source its replicas catch up
            // from while it hands over (core/handover.rs).
            .filter_map(|p| {
                let ip = p
                    .status
                    .as_ref()?
                    .pod_ip
                    .clone()
                    .filter(|ip| !ip.is_empty())?;
                let port = |name: &str, default: u16| {
                    p.spec
                        .as_ref()
                        .and_then(|s| {
                            s.containers.iter().find_map(|c| {
                                c.ports.iter().flatten().find_map(|cp| {
                                    (cp.name.as_deref() == Some(name))
                                        .then_some(cp.container_port as u16)
                                })
                            })
                        })
                        .unwrap_or(default)
                };
                let name = p.name_any();
                Some((
                    name.clone(),
                    PeerAddr {
                        host: ip,
                        mysql_port: port("mysql", MYSQL_PORT),
                        control_port: port("control", CONTROL_PORT),
                        tls_name: Some(name),
                    },
                ))
            })
            .collect()
    }
}

/// Delete `lease` if `holder` holds it, only at the version read (a lease
/// renewed or taken over since is left alone). True when it was deleted.
pub async fn release_lease_of(
    leases: &Api<KubeLease>,
    lease: &KubeLease,
    holder: &str,
) -> anyhow::Result<bool> {
    if lease_from(lease).holder_identity.as_deref() != Some(holder) {
        return Ok(false);
    }
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: lease.resource_version(),
            uid: None,
        }),
        ..Default::default()
    };
    match leases.delete(&lease.name_any(), &dp).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Hand `lease` from `from` to `to` (`Lease::pass`), only at the version
/// read: renewed or changed since, the API server refuses the write and
/// this is an error.
pub async fn pass_lease_of(
    leases: &Api<KubeLease>,
    lease: &KubeLease,
    from: &str,
    to: &str,
    seen_renew_ms: i64,
) -> anyhow::Result<()> {
    let now = Timestamp::now().as_millisecond();
    let next = lease_from(lease).pass(from, to, seen_renew_ms, now)?;
    let mut obj = lease.clone();
    obj.spec = Some(lease_spec(&next));
    leases
        .replace(&lease.name_any(), &PostParams::default(), &obj)
        .await?;
    Ok(())
}

/// Whether Pod `name` is being deleted (false when it does not exist).
pub async fn pod_is_terminating(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<bool> {
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client.clone(), namespace);
    Ok(pods
        .get_opt(name)
        .await?
        .is_some_and(|p| p.metadata.deletion_timestamp.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_round_trip_through_the_api_shape() {
        let l = Lease::default().acquire("db-1", 1_700_000_000_123).unwrap();
        let k = KubeLease {
            metadata: Default::default(),
            spec: Some(lease_spec(&l)),
        };
        let back = lease_from(&k);
        assert_eq!(back.holder_identity.as_deref(), Some("db-1"));
        assert_eq!(back.renew_time_ms, 1_700_000_000_123);
        assert_eq!(back.lease_duration_ms, cnmysql_core::lease::TTL_MS);
        // A released lease (no holder) is free for anyone.
        let empty = KubeLease::default();
        assert!(lease_from(&empty).acquire("db-2", 5).is_ok());
    }
}
