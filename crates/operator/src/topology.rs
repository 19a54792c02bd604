//! The operator's topology work for one Cluster: poll every instance's
//! `/status` over mutual TLS at its Pod IP, build the snapshot, run the
//! core's reconcile step (`cnmysql_core::reconcile`), and carry its actions
//! out on Kubernetes:
//!
//! | action | on Kubernetes |
//! |---|---|
//! | event | an `events.k8s.io/v1` Event on the Cluster |
//! | status change | a merge patch of the status subresource, conditional on the resourceVersion it was computed from, retried on conflict |
//! | fence out | delete the Pod (its claim stays) and do not recreate it until released |
//! | release the lease | delete the Lease `<cluster>-primary`, only once the holder's Pod is gone |
//! | restart | recreate the Pod on its claim |
//! | semi-sync | `POST /semisync` on the primary |
//! | upgrade in place | stream the operator's executable to `POST /instance/manager/upgrade` at the Pod IP |
//! | recreate (rolling upgrade) | delete the Pod; the next reconcile creates it with the operator's image |
//!
//! Restarts in place that a user asked for on a Pod are carried out in
//! `restart.rs` after each step.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease as KubeLease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use cnmysql_api::Cluster;
use cnmysql_api::names::CONTROL_PORT;
use cnmysql_core::reconcile::{self, Action, Event, Memory, Observation, StatusChange};
use cnmysql_core::status::{InstanceStatus, Observed, Snapshot};
use cnmysql_instance::client::ControlClient;
use cnmysql_k8s::cluster_state::lease_from;
use cnmysql_k8s::events::Kind;

use crate::context::Context;
use crate::labels;
use crate::objects;
use crate::reconcile::{Error, publish};

/// Decisions wait this long after the operator first sees a Cluster unless
/// every instance has answered: a fresh operator must not take its own
/// missing observations for a failed primary.
pub const WARM_UP: Duration = Duration::from_secs(15);

/// What the operator remembers about one Cluster.
pub struct ClusterMemory {
    pub core: Memory,
    /// Fenced-out former primaries: their Pods are not recreated.
    pub held_down: BTreeSet<String>,
    first_seen: Instant,
    answered: BTreeSet<String>,
    client: Option<(String, ControlClient)>,
    /// The uid of the Cluster a task is polling, while one runs.
    task: Option<String>,
}

impl Default for ClusterMemory {
    fn default() -> Self {
        ClusterMemory {
            core: Memory::default(),
            held_down: BTreeSet::new(),
            first_seen: Instant::now(),
            answered: BTreeSet::new(),
            client: None,
            task: None,
        }
    }
}

fn key(cluster: &Cluster) -> String {
    format!(
        "{}/{}",
        cluster.namespace().unwrap_or_default(),
        cluster.name_any()
    )
}

/// Instances whose Pods the operator must not recreate now, and the core's
/// memory that [`cnmysql_core::hold_down::keep_down`] judges a missing Pod by.
pub fn hold_down_memory(ctx: &Context, cluster: &Cluster) -> (BTreeSet<String>, Memory) {
    ctx.topology
        .lock()
        .unwrap()
        .get(&key(cluster))
        .map(|m| (m.held_down.clone(), m.core.clone()))
        .unwrap_or_default()
}

/// Keep `instance`'s Pod down until the topology step lets it come back
/// (see [`held_down`]).
pub fn hold_down(ctx: &Context, cluster: &Cluster, instance: &str) {
    ctx.topology
        .lock()
        .unwrap()
        .entry(key(cluster))
        .or_default()
        .held_down
        .insert(instance.to_string());
}

/// The operator's mutual-TLS client for a Cluster, from its Secret (cached
/// until the Secret changes).
async fn control_client(ctx: &Context, cluster: &Cluster) -> Result<ControlClient, Error> {
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
    if let Some((v, c)) = ctx
        .topology
        .lock()
        .unwrap()
        .get(&key(cluster))
        .and_then(|m| m.client.clone())
        && v == version
    {
        return Ok(c);
    }
    let get = |k: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(k))
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .ok_or_else(|| Error::Secret(format!("Secret {name} has no {k}")))
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
    ctx.topology
        .lock()
        .unwrap()
        .entry(key(cluster))
        .or_default()
        .client = Some((version, client.clone()));
    Ok(client)
}

/// When the Pod's container last stopped or started again in place, if
/// it has been restarted (Unix ms): the kubelet restarts a container whose
/// PID 1 died in the same Pod.
fn restarted_in_place_at_ms(p: &Pod) -> Option<i64> {
    // A Pod being deleted is not coming back in place.
    if p.metadata.deletion_timestamp.is_some() {
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

fn pod_ip(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .pod_ip
        .clone()
        .filter(|ip| !ip.is_empty())
}

/// Poll every instance's `/status` at its Pod IP; say which Pods were made
/// from another definition than the Cluster's.
async fn observe(
    client: &ControlClient,
    cluster: &Cluster,
    names: &[String],
    pods: &BTreeMap<String, Pod>,
) -> Vec<Observed> {
    let polls = names.iter().enumerate().map(|(i, name)| {
        let target = pods
            .get(name)
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .and_then(pod_ip);
        let client = client.expecting(name);
        let outdated = pods
            .get(name)
            .and_then(|p| crate::objects::definition::outdated(p, cluster));
        async move {
            let status = match target {
                Some(ip) => tokio::time::timeout(
                    Duration::from_millis(1000),
                    client.get_json::<InstanceStatus>(&ip, CONTROL_PORT, "/status"),
                )
                .await
                .ok()
                .and_then(Result::ok),
                None => None,
            };
            Observed {
                name: name.clone(),
                ordinal: i as u32 + 1,
                status,
                outdated,
            }
        }
    });
    futures::future::join_all(polls).await
}

/// A JSON merge patch turning `old` into `new` (top-level keys; a key that
/// disappeared becomes null).
fn merge_patch(old: &serde_json::Value, new: &serde_json::Value) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        return new.clone();
    };
    for (k, v) in n {
        if o.get(k) != Some(v) {
            out.insert(k.clone(), v.clone());
        }
    }
    for k in o.keys() {
        if !n.contains_key(k) {
            out.insert(k.clone(), serde_json::Value::Null);
        }
    }
    serde_json::Value::Object(out)
}

/// Apply a status change conditionally: computed from the latest Cluster,
/// written only at its resourceVersion, retried on conflict. True when it
/// applied.
pub async fn change_status(
    ctx: &Context,
    cluster: &Cluster,
    change: &StatusChange,
) -> Result<bool, Error> {
    // Nothing to do by the Cluster at hand: no request at all.
    let mut probe = cluster.status.clone().unwrap_or_default();
    if !change.apply(&mut probe) {
        return Ok(false);
    }
    let api: Api<Cluster> =
        Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default());
    for _ in 0..5 {
        let c = api.get(&cluster.name_any()).await?;
        let old = c.status.clone().unwrap_or_default();
        let mut new = old.clone();
        if !change.apply(&mut new) {
            return Ok(false);
        }
        let diff = merge_patch(
            &serde_json::to_value(&old).expect("status serialises"),
            &serde_json::to_value(&new).expect("status serialises"),
        );
        let patch = json!({
            "metadata": { "resourceVersion": c.resource_version() },
            "status": diff,
        });
        match api
            .patch_status(
                &c.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(false)
}

async fn record(ctx: &Context, cluster: &Cluster, e: &Event) {
    let kind = if e.warning {
        Kind::Warning
    } else {
        Kind::Normal
    };
    let note = match &e.instance {
        Some(i) if !e.message.contains(i.as_str()) => format!("{i}: {}", e.message),
        _ => e.message.clone(),
    };
    tracing::info!(cluster = %cluster.name_any(), reason = e.reason, instance = ?e.instance, "{}", e.message);

    publish(ctx, cluster, kind, "Topology", e.reason, &note).await;
}

/// One topology step for `cluster`. Returns whether a primary change is
/// under way (to poll faster).
pub async fn step(
    ctx: &Context,
    cluster: &Cluster,
    pods: &BTreeMap<String, Pod>,
) -> Result<bool, Error> {
    let client = control_client(ctx, cluster).await?;
    let names = objects::instances(cluster);
    let observed = observe(&client, cluster, &names, pods).await;
    let status = cluster.status.clone().unwrap_or_default();
    let snapshot = Snapshot {
        cluster: cluster.name_any(),
        spec: cluster.spec.clone(),
        status: status.clone(),
        instances: observed,
        now_ms: jiff::Timestamp::now().as_millisecond(),
    };
    let k = key(cluster);
    ctx.metrics
        .observe_cluster(&cluster.namespace().unwrap_or_default(), &snapshot);
    let (mut memory, held, warming) = {
        let mut all = ctx.topology.lock().unwrap();
        let m = all.entry(k.clone()).or_default();
        for o in &snapshot.instances {
            if o.reachable() {
                m.answered.insert(o.name.clone());
            }
        }
        let warming = m.first_seen.elapsed() < WARM_UP
            && names
                .iter()
                .any(|n| !m.answered.contains(n) && !m.held_down.contains(n));
        (
            m.core.clone(),
            m.held_down.iter().cloned().collect::<Vec<_>>(),
            warming,
        )
    };
    let ns = cluster.namespace().unwrap_or_default();
    let leases: Api<KubeLease> = Api::namespaced(ctx.client.clone(), &ns);
    let lease_name = labels::lease(&cluster.name_any());
    let mut changing = status.current_primary != status.target_primary;
    let mut restarted = false;
    if !warming && status.target_primary.is_some() {
        // The Lease matters only to a failover: read it only then.
        let failing = cnmysql_core::failover::primary_failure(&snapshot).is_some();
        let lease_obj = if cluster.spec.enable_primary_lease && failing {
            leases.get_opt(&lease_name).await?
        } else {
            None
        };
        let lease = lease_obj.as_ref().map(lease_from);
        let primary = status.current_primary.clone().unwrap_or_default();
        // Proof the old primary cannot write: its Pod is gone (the kubelet
        // confirmed its containers stopped, or it never existed).
        let primary_gone = !primary.is_empty() && !pods.contains_key(&primary);
        let primary_restarted_at_ms = pods.get(&primary).and_then(restarted_in_place_at_ms);
        let actions = reconcile::step(
            &Observation {
                snapshot: &snapshot,
                lease: lease.as_ref(),
                primary_gone,
                held_down: &held,
                // A Pod's termination takes time: start it at once.
                fence_early: true,
                primary_restarted_at_ms,
            },
            &mut memory,
        );
        for a in actions {
            match a {
                Action::Event(e) => record(ctx, cluster, &e).await,
                Action::Status { change, then } => {
                    if matches!(change, StatusChange::StartFailover { .. }) {
                        changing = true;
                    }
                    if change_status(ctx, cluster, &change).await? {
                        for e in &then {
                            record(ctx, cluster, e).await;
                        }
                    }
                }
                Action::FenceOut(name) => {
                    ctx.topology
                        .lock()
                        .unwrap()
                        .entry(k.clone())
                        .or_default()
                        .held_down
                        .insert(name.clone());
                    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
                    match api.delete(&name, &DeleteParams::default()).await {
                        Ok(_) => {
                            tracing::warn!(instance = %name, "fenced out: Pod deleted, claim kept")
                        }
                        Err(kube::Error::Api(e)) if e.code == 404 => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Action::ReleaseLease { holder } => {
                    // Only once its Pod is gone; otherwise the lease runs out.
                    if pods.contains_key(&holder) {
                        continue;
                    }
                    if let Some(l) = &lease_obj
                        && lease_from(l).holder_identity.as_deref() == Some(holder.as_str())
                    {
                        let dp = DeleteParams {
                            preconditions: Some(Preconditions {
                                resource_version: l.resource_version(),
                                uid: None,
                            }),
                            ..Default::default()
                        };
                        match leases.delete(&lease_name, &dp).await {
                            Ok(_) => {
                                tracing::info!(holder = %holder, "released the lease of a primary whose Pod is gone")
                            }
                            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
                Action::Restart(name) => {
                    if let Some(m) = ctx.topology.lock().unwrap().get_mut(&k) {
                        m.held_down.remove(&name);
                    }
                    tracing::info!(instance = %name, "recreating the former primary's Pod to rejoin as a replica");
                    restarted = true;
                }
                Action::UpgradeInPlace { instance, then } => {
                    let Some(ip) = pods.get(&instance).and_then(pod_ip) else {
                        continue;
                    };
                    match cnmysql_instance::upgrade::push(
                        &client.expecting(&instance),
                        &ip,
                        CONTROL_PORT,
                        &ctx.operator_hash,
                    )
                    .await
                    {
                        Ok(()) => record(ctx, cluster, &then).await,
                        Err(e) => {
                            let e = cnmysql_core::reconcile::Event {
                                warning: true,
                                reason: "UpgradeFailed",
                                instance: Some(instance.clone()),
                                message: format!(
                                    "in-place upgrade of {instance} failed (retried later): {e}"
                                ),
                            };
                            record(ctx, cluster, &e).await
                        }
                    }
                }
                Action::Recreate { instance, then, .. } => {
                    // Its Pod is created again by the next reconcile, with
                    // the manager of this operator's image and the Cluster's
                    // current definition (server image, resources...).
                    if let Some(m) = ctx.topology.lock().unwrap().get_mut(&k) {
                        m.core.restarting_primary = memory.restarting_primary.clone();
                    }
                    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
                    match api.delete(&instance, &DeleteParams::default()).await {
                        Ok(_) => record(ctx, cluster, &then).await,
                        Err(kube::Error::Api(e)) if e.code == 404 => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Action::SemiSync {
                    instance,
                    settings,
                    then,
                } => {
                    let Some(ip) = pods.get(&instance).and_then(pod_ip) else {
                        continue;
                    };
                    let body = json!({"enabled": settings.enabled, "waitForCount": settings.wait_for_count, "timeoutMillis": settings.timeout_millis});
                    match client
                        .expecting(&instance)
                        .post(
                            &ip,
                            CONTROL_PORT,
                            "/semisync",
                            &[("content-type", "application/json".into())],
                            body.to_string().into(),
                        )
                        .await
                    {
                        Ok((200, _)) => record(ctx, cluster, &then).await,
                        Ok((code, text)) => {
                            tracing::warn!(code, text, "semi-sync adjustment refused")
                        }
                        Err(e) => tracing::warn!(error = %e, "semi-sync adjustment failed"),
                    }
                }
            }
        }
    }
    if restarted {
        // What the step released must be known to the Pod rule first.
        if let Some(m) = ctx.topology.lock().unwrap().get_mut(&k) {
            m.core = memory.clone();
        }
        let want = objects::desired(cluster, &ctx.env).pods;
        crate::reconcile::ensure_pods(cluster, ctx, &want).await?;
    }
    if status.target_primary.is_some() {
        let report = StatusChange::Report(reconcile::report(&snapshot, &memory));
        change_status(ctx, cluster, &report).await?;
    }
    if let Some(m) = ctx.topology.lock().unwrap().get_mut(&k) {
        m.core = memory;
    }
    crate::restart::carry_out(ctx, cluster, pods, &client).await?;
    Ok(changing || status.primary_failing_since.is_some())
}

/// How often a Cluster's instances are polled.
pub const POLL: Duration = Duration::from_secs(1);
/// ... while the primary is moving or failing.
pub const FAST_POLL: Duration = Duration::from_millis(200);

/// Start the polling task of `cluster` unless one runs. It reads the
/// Cluster and its Pods from the watch caches (no API reads while idle) and
/// ends when the Cluster is gone or the operator stops leading.
pub fn ensure_running(ctx: &std::sync::Arc<Context>, cluster: &Cluster) {
    let Some(uid) = cluster.uid() else { return };
    {
        let mut all = ctx.topology.lock().unwrap();
        let m = all.entry(key(cluster)).or_default();
        if m.task.as_deref() == Some(uid.as_str()) {
            return;
        }
        m.task = Some(uid.clone());
    }
    let ctx = ctx.clone();
    let oref = kube::runtime::reflector::ObjectRef::<Cluster>::new(&cluster.name_any())
        .within(&cluster.namespace().unwrap_or_default());
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    tokio::spawn(async move {
        let mut stop = ctx.stop.subscribe();
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
                let mut all = ctx.topology.lock().unwrap();
                let k = format!("{ns}/{name}");
                if all.get(&k).and_then(|m| m.task.as_deref()) == Some(uid.as_str()) {
                    all.remove(&k);
                    ctx.metrics.forget_cluster(&ns, &name);
                }
                return;
            };
            let mut period = POLL;
            if c.meta().deletion_timestamp.is_none()
                && cnmysql_api::validation::validate(&c).is_empty()
            {
                let pods: BTreeMap<String, Pod> = ctx
                    .pods
                    .lock()
                    .unwrap()
                    .iter()
                    .flat_map(|s| s.state())
                    .filter(|p| {
                        p.namespace().as_deref() == Some(ns.as_str())
                            && p.labels().get(labels::CLUSTER) == Some(&name)
                    })
                    .map(|p| (p.name_any(), (*p).clone()))
                    .collect();
                match step(&ctx, &c, &pods).await {
                    Ok(true) => period = FAST_POLL,
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(cluster = %name, namespace = %ns, error = %e, "topology step failed")
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = stop.changed() => return,
            }
        }
    });
}

/// Forget a deleted Cluster.
pub fn forget(ctx: &Context, cluster: &Cluster) {
    ctx.topology.lock().unwrap().remove(&key(cluster));
    ctx.metrics.forget_cluster(
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn merge_patches_clear_removed_fields() {
        let old = serde_json::json!({"a": 1, "b": "x", "c": [1]});
        let new = serde_json::json!({"a": 1, "b": "y"});
        assert_eq!(
            super::merge_patch(&old, &new),
            serde_json::json!({"b": "y", "c": null})
        );
    }
}
