//! The operator's topology task for one Cluster: poll every instance's
//! `/status` over mutual TLS at its Pod IP, and run the topology engine's
//! pass (`cnmysql_engine::pass`) with Kubernetes as its platform:
//!
//! | action | on Kubernetes |
//! |---|---|
//! | event | an `events.k8s.io/v1` Event on the Cluster |
//! | status change | the conditional status write (`cnmysql_k8s::cluster_handle`) |
//! | fence out | delete the Pod (its claim stays) |
//! | release the lease | delete the Lease `<cluster>-primary`, only once the holder's Pod is gone |
//! | restart | nothing at once: the step's answer now lets the Pod be made |
//! | recreate | delete the Pod; once it is gone it is made again with the operator's image and the Cluster's definition |
//! | control API | the Pod IP, port 9443, a client expecting the instance's certificate |
//!
//! After each pass the task brings the Pods to the step's answer of which
//! instances run (`pods.rs`): it is the only writer of Pods. Restarts in
//! place that a user asked for on a Pod are carried out after that
//! (`restart.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::DeleteParams;
use kube::{Api, Resource, ResourceExt};
use tracing::Instrument;

use cnmysql_api::names::CONTROL_PORT;
use cnmysql_api::{Cluster, ClusterStatus};
use cnmysql_control::client::ControlClient;
use cnmysql_core::cadence::Cadence;
use cnmysql_core::event::Event;
use cnmysql_core::lease::Lease;
use cnmysql_core::memory::Memory;
use cnmysql_core::reconcile::Observation;
use cnmysql_core::status::{Observed, Snapshot};
use cnmysql_core::status_change::StatusChange;
use cnmysql_engine::poller::{self, Target};
use cnmysql_engine::{ControlRequest, Platform};
use cnmysql_k8s::cluster_handle::ClusterHandle;
use cnmysql_k8s::cluster_state::{lease_from, pass_lease_of, release_lease_of};
use cnmysql_k8s::events::Kind;

use crate::context::Context;
use crate::error::{At, Error};
use crate::events::publish;
use crate::labels;
use crate::objects;

/// The operator's mutual-TLS client for a Cluster, from its Secret (cached
/// until the Secret changes).
pub(crate) async fn control_client(
    ctx: &Context,
    cluster: &Cluster,
) -> anyhow::Result<ControlClient> {
    let ns = cluster.namespace().unwrap_or_default();
    let name = labels::operator_tls_secret(&cluster.name_any());
    let oref = kube::runtime::reflector::ObjectRef::<Secret>::new(&name).within(&ns);
    let cached = ctx
        .secrets
        .lock()
        .unwrap()
        .iter()
        .find_map(|s| s.get(&oref));
    // From the watch cache; read once from the API before it has it.
    let s = match cached {
        Some(s) => (*s).clone(),
        None => {
            let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
            secrets.get(&name).await?
        }
    };
    let version = s.resource_version().unwrap_or_default();
    if let Some(c) = ctx.memory.client(cluster, &version) {
        return Ok(c);
    }
    let get = |k: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(k))
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .ok_or_else(|| anyhow::anyhow!("Secret {name} has no {k}"))
    };
    let material = cnmysql_tls::Material {
        ca_pem: get("ca.crt")?,
        identity: cnmysql_tls::Identity {
            cert_pem: get("tls.crt")?,
            key_pem: get("tls.key")?,
        },
    };
    let client = ControlClient::new(material.client_config()?)
        .with_connect_timeout(Duration::from_millis(500));
    let expires_at = cnmysql_tls::validity_of(&material.identity.cert_pem).map(|(_, until)| until);
    ctx.memory
        .set_client(cluster, version, client.clone(), expires_at);
    Ok(client)
}

/// When the Pod's container last stopped or started again in place, if
/// it has been restarted (Unix ms): the kubelet restarts a container whose
/// PID 1 died in the same Pod.
fn restarted_in_place_at_ms(p: &Pod) -> Option<i64> {
    // A Pod being deleted is not coming back in place, nor soon one
    // whose container the kubelet holds back after repeated crashes.
    if p.metadata.deletion_timestamp.is_some() || in_back_off(p) {
        return None;
    }
    let c = p.status.as_ref()?.container_statuses.as_ref()?.first()?;
    let ms = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time| t.0.as_millisecond();
    let stopped = c
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .or_else(|| c.last_state.as_ref().and_then(|s| s.terminated.as_ref()))
        .and_then(|t| t.finished_at.as_ref())
        .map(ms);
    let started = (c.restart_count > 0)
        .then(|| {
            c.state
                .as_ref()?
                .running
                .as_ref()?
                .started_at
                .as_ref()
                .map(ms)
        })
        .flatten();
    stopped.max(started)
}

/// Whether a Pod may take clients: Ready by the kubelet's probes, and
/// not being deleted.
fn pod_serving(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// An instance counts as ready only once its Pod is Ready too: what users
/// see (`kubectl get pods`) and what routes traffic (a Service sends
/// nothing to a Pod that is not Ready) agree with the status. A Pod being
/// deleted is not: it is going away, whatever its last probe said (a
/// primary that handed over answers read-only for a few seconds more).
fn only_ready_with_its_pod(mut o: Observed, pods: &BTreeMap<String, Pod>) -> Observed {
    let pod_ready = pods.get(&o.name).is_some_and(pod_serving);
    if let Some(st) = o.status.as_mut()
        && !pod_ready
    {
        st.ready = false;
    }
    o
}

/// The kubelet holds the Pod's container back before starting it again
/// (`CrashLoopBackOff`: 10 s after a second crash, doubling up to 5 min):
/// waiting for it in place would outlast a failover.
fn in_back_off(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.as_deref())
        == Some("CrashLoopBackOff")
}

/// A Pod, not being deleted, whose container the kubelet holds in crash
/// back-off: since when its container last stopped (Unix ms; `now_ms` when
/// the kubelet does not say).
fn back_off_since_ms(p: &Pod, now_ms: i64) -> Option<i64> {
    if p.metadata.deletion_timestamp.is_some() || !in_back_off(p) {
        return None;
    }
    let stopped = p
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0.as_millisecond());
    Some(stopped.unwrap_or(now_ms))
}

fn pod_ip(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .pod_ip
        .clone()
        .filter(|ip| !ip.is_empty())
}

/// Kubernetes as the engine's platform, for one pass over one Cluster.
struct KubePlatform<'a> {
    ctx: &'a Context,
    cluster: &'a Cluster,
    pods: &'a BTreeMap<String, Pod>,
    client: ControlClient,
    handle: ClusterHandle,
    leases: Api<KubeLease>,
    /// The Lease as read by [`Platform::lease`] this pass.
    lease: Option<KubeLease>,
    /// The Cluster as this pass last wrote its status (with the
    /// resourceVersion the write gave it).
    written: Option<Cluster>,
}

impl Platform for KubePlatform<'_> {
    fn executable_hash(&self) -> &str {
        &self.ctx.operator_hash
    }

    async fn lease(&mut self) -> anyhow::Result<Option<Lease>> {
        let name = labels::lease(&self.cluster.name_any());
        self.lease = self.leases.get_opt(&name).await?;
        Ok(self.lease.as_ref().map(lease_from))
    }

    async fn change_status(&mut self, change: &StatusChange) -> anyhow::Result<bool> {
        // After a write of this pass, the Cluster as that write left it:
        // the next is then written without a read unless someone else
        // wrote in between.
        let seen = self.written.clone().unwrap_or_else(|| self.cluster.clone());
        let Some((status, rv)) = write_status(&self.handle, &seen, change).await? else {
            return Ok(false);
        };
        let mut now = seen;
        now.status = Some(status);
        now.metadata.resource_version = rv;
        self.written = Some(now);
        Ok(true)
    }

    async fn record(&mut self, e: &Event) {
        let kind = if e.warning {
            Kind::Warning
        } else {
            Kind::Normal
        };
        let note = match &e.instance {
            Some(i) if !e.message.contains(i.as_str()) => format!("{i}: {}", e.message),
            _ => e.message.clone(),
        };
        tracing::info!(reason = e.reason, instance = ?e.instance, "{}", e.message);
        publish(self.ctx, self.cluster, kind, "Topology", e.reason, &note).await;
    }

    async fn fence_out(&mut self, instance: &str, _: &Memory) -> anyhow::Result<()> {
        if self.delete_pod(instance).await? {
            tracing::warn!(instance = %instance, "fenced out: Pod deleted, claim kept");
        }
        Ok(())
    }

    async fn release_lease(&mut self, holder: &str) -> anyhow::Result<()> {
        // Only once its Pod is gone; otherwise the lease runs out.
        if self.pods.contains_key(holder) {
            return Ok(());
        }
        let Some(l) = &self.lease else {
            return Ok(());
        };
        if release_lease_of(&self.leases, l, holder).await? {
            tracing::info!(holder = %holder, "released the lease of a primary whose Pod is gone");
        }
        Ok(())
    }

    async fn pass_lease(&mut self, from: &str, to: &str, seen: i64) -> anyhow::Result<()> {
        let Some(l) = &self.lease else {
            anyhow::bail!("the primary Lease was not read this pass");
        };
        pass_lease_of(&self.leases, l, from, to, seen).await?;
        tracing::warn!(from = %from, to = %to, "passed the primary lease before its expiry");
        Ok(())
    }

    async fn allow_start(&mut self, instance: &str, _: &Memory) -> anyhow::Result<()> {
        // The step's answer lets it run: its Pod is made after the pass.
        tracing::info!(instance = %instance, "creating the Pod of the held-down instance again");
        Ok(())
    }

    async fn recreate(&mut self, instance: &str, _: bool, _: &Memory) -> anyhow::Result<bool> {
        // Made again once gone, with the manager of this operator's image
        // and the Cluster's current definition; a primary restarted on
        // purpose is not held down meanwhile.
        self.delete_pod(instance).await
    }

    async fn annotate(
        &mut self,
        instance: Option<&str>,
        set: &BTreeMap<String, Option<String>>,
    ) -> anyhow::Result<()> {
        crate::instance_upgrade::annotate(self.ctx, self.cluster, instance, set).await
    }

    async fn control(
        &mut self,
        instance: &str,
        request: &ControlRequest,
    ) -> anyhow::Result<String> {
        let ip = self
            .pods
            .get(instance)
            .and_then(pod_ip)
            .ok_or_else(|| anyhow::anyhow!("{instance} has no Pod IP"))?;
        request
            .send(&self.client.expecting(instance), &ip, CONTROL_PORT)
            .await
    }
}

/// Apply a status change with the conditional status write: nothing is
/// asked of the API server when it does not apply to the Cluster at hand
/// (the watch cache's); otherwise it is computed again from the latest
/// Cluster. The status written and the Cluster's resourceVersion after
/// the write, if it was written.
async fn write_status(
    handle: &ClusterHandle,
    cluster: &Cluster,
    change: &StatusChange,
) -> anyhow::Result<Option<(ClusterStatus, Option<String>)>> {
    let mut latest = None;
    let done = handle
        .update_status_if_changed(cluster, |_, st| {
            let applied = change.apply(st);
            latest = Some(st.clone());
            applied
        })
        .await?;
    Ok(done
        .filter(|d| d.value && d.written)
        .and_then(|d| Some((latest?, d.resource_version))))
}

/// [`write_status`] for `cluster`: true when it was written.
pub async fn change_status(
    ctx: &Context,
    cluster: &Cluster,
    change: &StatusChange,
) -> anyhow::Result<bool> {
    let handle = ClusterHandle::new(
        ctx.client.clone(),
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
    );
    Ok(write_status(&handle, cluster, change).await?.is_some())
}

impl KubePlatform<'_> {
    /// Delete an instance's Pod; false when it was gone already.
    async fn delete_pod(&self, instance: &str) -> anyhow::Result<bool> {
        let api: Api<Pod> = Api::namespaced(
            self.ctx.client.clone(),
            &self.cluster.namespace().unwrap_or_default(),
        );
        match api.delete(instance, &DeleteParams::default()).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

/// One topology pass for `cluster`. Returns when to poll next.
/// Apply the routes `cluster`'s status and the Pods' readiness and
/// addresses call for (`routing.rs`; nothing when they are what was
/// applied last).
async fn route(ctx: &Context, cluster: &Cluster, pods: &BTreeMap<String, Pod>) {
    let ready: Vec<String> = objects::instances(cluster)
        .into_iter()
        .filter(|n| pods.get(n).is_some_and(pod_serving))
        .collect();
    let routes = cnmysql_core::services::routes_following_status(
        &cluster.status.clone().unwrap_or_default(),
        &ready,
    );
    if let Err(e) = crate::routing::converge(ctx, cluster, &routes, pods).await {
        tracing::warn!(error = %format!("{e:#}"), "applying the routes failed; again at the next pass");
    }
}

pub async fn step(
    ctx: &Context,
    cluster: &Cluster,
    pods: &BTreeMap<String, Pod>,
) -> Result<Duration, Error> {
    // A Pod's new address (its sandbox made again after a node restart)
    // or readiness reaches the routes before the poll, which waits up to
    // its timeout on instances that do not answer. Each part is timed
    // (`cnmysql_operator_topology_*_duration_seconds`, and at debug level).
    let began = std::time::Instant::now();
    route(ctx, cluster, pods).await;
    let routed = began.elapsed();
    let client = control_client(ctx, cluster).await.at(Error::Topology)?;
    let names = objects::instances(cluster);
    let targets = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let pod = pods.get(name);
            Target {
                name: name.clone(),
                ordinal: i as u32 + 1,
                // A Pod being deleted still answers until its container
                // stops: a leaving primary hands over from there.
                address: pod
                    .and_then(pod_ip)
                    .map(|ip| (client.expecting(name), ip, CONTROL_PORT)),
                outdated: pod.and_then(|p| objects::definition::outdated(p, cluster)),
            }
        })
        .collect();
    let polled = poller::poll_noting_refusals(targets).await;
    let polled_at = began.elapsed();
    let refused: Vec<String> = polled
        .iter()
        .filter(|(_, r)| *r)
        .map(|(o, _)| o.name.clone())
        .collect();
    let observed = polled
        .into_iter()
        .map(|(o, _)| only_ready_with_its_pod(o, pods))
        .collect();
    let status = cluster.status.clone().unwrap_or_default();
    let snapshot = Snapshot {
        cluster: cluster.name_any(),
        spec: cluster.spec.clone(),
        status: status.clone(),
        instances: observed,
        now_ms: jiff::Timestamp::now().as_millisecond(),
        // As the reconcile resolved and recorded it (catalog.rs).
        declared: cnmysql_core::declared::Declared {
            image: status.target_image.clone(),
            version: status.target_server_version.clone(),
            error: ctx.memory.image_error(cluster),
            force_rollout: crate::catalog::forced(cluster),
            asked: crate::instance_upgrade::asked(ctx, cluster, pods).await,
            operator_certificate_expires_at: ctx.memory.client_expiry(cluster),
        },
    };
    let ns = cluster.namespace().unwrap_or_default();
    ctx.metrics.observe_cluster(&ns, &snapshot);
    // The proof a Pod's processes cannot write: the Pod is gone (the
    // kubelet confirmed its containers stopped, or it never existed).
    let absent: Vec<String> = names
        .iter()
        .filter(|n| !pods.contains_key(*n))
        .cloned()
        .collect();
    let primary_restarted_at_ms = status
        .current_primary
        .as_ref()
        .and_then(|p| pods.get(p))
        .and_then(restarted_in_place_at_ms);
    // Its Pod stays (not being deleted) and its address answers, but
    // nothing listens: the container died and the kubelet starts it again
    // in the same Pod, which it reports only up to a second later.
    let primary_down_in_place = status.current_primary.as_ref().is_some_and(|p| {
        refused.contains(p)
            && pods
                .get(p)
                .is_some_and(|pod| pod.metadata.deletion_timestamp.is_none() && !in_back_off(pod))
    });
    // Pods deleted gracefully: their preStop hook holds the shutdown.
    let leaving: Vec<String> = names
        .iter()
        .filter(|n| {
            pods.get(*n)
                .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
        })
        .cloned()
        .collect();
    if !leaving.is_empty() {
        tracing::debug!(?leaving, "instances leaving on notice");
    }
    let cordoned = crate::nodes::cordoned(ctx, pods);
    let backing_off: Vec<(String, i64)> = pods
        .iter()
        .filter_map(|(n, p)| Some((n.clone(), back_off_since_ms(p, snapshot.now_ms)?)))
        .collect();
    let mut platform = KubePlatform {
        ctx,
        cluster,
        pods,
        client: client.clone(),
        handle: ClusterHandle::new(ctx.client.clone(), &ns, &cluster.name_any()),
        leases: Api::namespaced(ctx.client.clone(), &ns),
        lease: None,
        written: None,
    };
    let facts = Observation {
        lease: None,
        snapshot: &snapshot,
        absent: &absent,
        // A Pod's termination takes time: it starts while the lease runs out.
        fence_early: true,
        primary_restarted_at_ms,
        primary_down_in_place,
        leaving: &leaving,
        cordoned: &cordoned,
        backing_off: &backing_off,
    };
    let mut memory = ctx.memory.core(cluster);
    let passed = cnmysql_engine::pass(&mut platform, &facts, &mut memory).await;
    let passed_at = began.elapsed();
    ctx.memory.set_core(cluster, &memory);
    let written = platform.written.take();
    // The routes, then the Pods, follow the status as the pass left it: a
    // primary change moves rw, ro and r at once (`routing.rs`) and
    // relabels the Pods; a released instance's Pod is made in this pass.
    let now = written.unwrap_or_else(|| cluster.clone());
    route(ctx, &now, pods).await;
    let keep = passed.at(Error::Topology)?;
    crate::pods::converge(ctx, &now, pods, &keep).await?;
    crate::restart::carry_out(ctx, cluster, pods, &client).await?;
    let took = began.elapsed();
    ctx.metrics.observe_topology_pass(took, polled_at - routed);
    tracing::debug!(
        route_ms = routed.as_millis() as u64,
        poll_ms = (polled_at - routed).as_millis() as u64,
        decide_ms = (passed_at - polled_at).as_millis() as u64,
        total_ms = took.as_millis() as u64,
        "topology pass"
    );
    let after = now.status.clone().unwrap_or(status);
    Ok(Duration::from_millis(
        Cadence::KUBERNETES.next_poll_ms(&after),
    ))
}

/// Start the polling task of `cluster` unless one runs. It reads the
/// Cluster and its Pods from the watch caches (no API reads while idle) and
/// ends when the Cluster is gone or the operator stops leading.
pub fn ensure_running(ctx: &std::sync::Arc<Context>, cluster: &Cluster) {
    let Some(uid) = cluster.uid() else { return };
    if !ctx.memory.claim_task(cluster, &uid) {
        return;
    }
    let ctx = ctx.clone();
    let oref = kube::runtime::reflector::ObjectRef::<Cluster>::new(&cluster.name_any())
        .within(&cluster.namespace().unwrap_or_default());
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let span = tracing::info_span!("cluster", namespace = %ns, cluster = %name);
    tokio::spawn(
        async move {
            let mut stop = ctx.stop.subscribe();
            let waker = ctx.memory.waker(&ns, &name);
            loop {
                if *stop.borrow() {
                    return;
                }
                let current = ctx
                    .clusters
                    .lock()
                    .unwrap()
                    .iter()
                    .find_map(|s| s.get(&oref));
                let Some(c) = current.filter(|c| c.uid().as_deref() == Some(uid.as_str())) else {
                    if ctx.memory.end_task(&ns, &name, &uid) {
                        ctx.metrics.forget_cluster(&ns, &name);
                    }
                    return;
                };
                let mut period = Duration::from_millis(Cadence::KUBERNETES.steady_ms);
                if c.meta().deletion_timestamp.is_none()
                    && cnmysql_api::validation::validate(&c).is_empty()
                {
                    let pods = crate::pods::cached(&ctx, &c);
                    match step(&ctx, &c, &pods).await {
                        Ok(next) => period = next,
                        Err(e) => {
                            ctx.metrics.topology_pass_failed(&e);
                            tracing::warn!(error = %e, "topology pass failed");
                        }
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(period) => {}
                    _ = waker.notified() => tracing::debug!("topology task woken"),
                    _ = stop.changed() => return,
                }
            }
        }
        .instrument(span),
    );
}

/// Forget a deleted Cluster.
pub fn forget(ctx: &Context, cluster: &Cluster) {
    ctx.memory.forget(cluster);
    ctx.metrics.forget_cluster(
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(container_status: serde_json::Value, deleting: bool) -> Pod {
        let mut p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-1"},
            "status": {"containerStatuses": [container_status]}
        }))
        .unwrap();
        if deleting {
            p.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
        }
        p
    }

    #[test]
    fn an_instance_whose_pod_is_being_deleted_is_not_ready() {
        let ready_pod = |deleting: bool| {
            let mut p = pod(
                serde_json::json!({"name": "mysql", "image": "i", "imageID": "", "ready": true, "restartCount": 0}),
                deleting,
            );
            p.status.as_mut().unwrap().conditions =
                Some(vec![k8s_openapi::api::core::v1::PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..Default::default()
                }]);
            BTreeMap::from([("db-1".to_string(), p)])
        };
        let observed = || Observed {
            name: "db-1".into(),
            ordinal: 1,
            status: Some(cnmysql_core::status::InstanceStatus {
                ready: true,
                ..Default::default()
            }),
            outdated: None,
        };
        assert!(only_ready_with_its_pod(observed(), &ready_pod(false)).ready());
        assert!(!only_ready_with_its_pod(observed(), &ready_pod(true)).ready());
    }

    #[test]
    fn a_restarted_container_is_waited_for_unless_held_back_or_deleted() {
        let restarted = serde_json::json!({
            "name": "mysql", "image": "i", "imageID": "", "ready": false, "restartCount": 1,
            "state": {"running": {"startedAt": "2026-01-01T00:00:10Z"}},
            "lastState": {"terminated": {"exitCode": 137, "finishedAt": "2026-01-01T00:00:09Z"}}
        });
        assert_eq!(
            restarted_in_place_at_ms(&pod(restarted.clone(), false)),
            Some(1_767_225_610_000)
        );
        assert_eq!(restarted_in_place_at_ms(&pod(restarted, true)), None);
        let held_back = serde_json::json!({
            "name": "mysql", "image": "i", "imageID": "", "ready": false, "restartCount": 2,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s restarting failed container"}},
            "lastState": {"terminated": {"exitCode": 137, "finishedAt": "2026-01-01T00:00:09Z"}}
        });
        let p = pod(held_back.clone(), false);
        assert!(in_back_off(&p));
        assert_eq!(restarted_in_place_at_ms(&p), None);
        // In back-off since its container stopped; not a Pod on its way out.
        assert_eq!(back_off_since_ms(&p, 0), Some(1_767_225_609_000));
        assert_eq!(back_off_since_ms(&pod(held_back, true), 0), None);
        assert_eq!(back_off_since_ms(&pod(restarted_running(), false), 0), None);
    }

    fn restarted_running() -> serde_json::Value {
        serde_json::json!({
            "name": "mysql", "image": "i", "imageID": "", "ready": true, "restartCount": 1,
            "state": {"running": {"startedAt": "2026-01-01T00:00:10Z"}}
        })
    }
}
