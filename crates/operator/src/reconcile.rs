//! One reconcile of one Cluster, in the order a reader expects:
//!
//! 1. **read** — the Cluster comes from the controller's watch;
//! 2. **validate** — the same checks as the CLI; an invalid Cluster gets a
//!    Degraded condition and an Event naming the field, and nothing is
//!    created or changed;
//! 3. **build** — every desired object, as pure functions (`objects`);
//! 4. **apply** — server-side apply under one field manager for the objects
//!    the operator fully owns (RBAC, Services, budgets); claims and Pods are
//!    created when missing and never rewritten (their specs are immutable or
//!    hold data), only the Pods' role labels are applied; Secrets are
//!    generated once;
//! 5. **report** — the Cluster status (initial targetPrimary, phase,
//!    conditions, the operator's executable hash).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use cnmysql_api::names::instance_name;
use cnmysql_api::{Cluster, Phase};
use cnmysql_core::phase::set_condition;
use cnmysql_k8s::events::{self, Kind};

use crate::context::Context;
use crate::labels::{CLUSTER, FIELD_MANAGER};
use crate::objects::{self, pod, secrets};

/// Who reports the operator's Events.
pub const REPORTER: &str = "mysql.cnmysql.io/cnmysql-operator";

/// Why a reconcile failed; the label is the metric's `error` value.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("certificates: {0}")]
    Tls(#[from] cnmysql_tls::TlsError),
    #[error("{0}")]
    Secret(String),
}

impl Error {
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(s)) if s.code == 409 => "conflict",
            Error::Kube(_) => "api",
            Error::Tls(_) => "tls",
            Error::Secret(_) => "secret",
        }
    }
}

/// How often an unchanged Cluster's objects are applied again.
pub const RESYNC: Duration = Duration::from_secs(300);

pub async fn reconcile(cluster: Arc<Cluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_inner(&cluster, &ctx).await;
    if result.is_ok() && cluster.meta().deletion_timestamp.is_none() {
        crate::topology::ensure_running(&ctx, &cluster);
    }
    ctx.metrics.observe(
        started.elapsed(),
        result.as_ref().err().map(Error::metric_label),
    );
    result
}

pub fn error_policy(cluster: Arc<Cluster>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(
        cluster = %cluster.name_any(),
        namespace = %cluster.namespace().unwrap_or_default(),
        error = %error,
        "reconcile failed; retrying"
    );
    Action::requeue(Duration::from_secs(
        if matches!(error.metric_label(), "conflict") {
            1
        } else {
            5
        },
    ))
}

async fn reconcile_inner(cluster: &Cluster, ctx: &Context) -> Result<Action, Error> {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_else(|| "default".into());
    if cluster.meta().deletion_timestamp.is_some() {
        // No finalizer: the garbage collector removes what the Cluster owns.
        crate::topology::forget(ctx, cluster);
        return Ok(Action::await_change());
    }

    // 2. validate
    let problems = cnmysql_api::validation::validate(cluster);
    if !problems.is_empty() {
        let message = problems
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join("; ");
        report_invalid(cluster, ctx, &message).await?;
        return Ok(Action::await_change());
    }

    // 3. build
    let desired = objects::desired(cluster, &ctx.env);

    // 4. apply
    ensure_secrets(cluster, ctx, &ns).await?;
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    apply(ctx, &ns, &desired.service_account, &pp).await?;
    apply(ctx, &ns, &desired.role, &pp).await?;
    apply(ctx, &ns, &desired.role_binding, &pp).await?;
    for s in &desired.services {
        apply(ctx, &ns, s, &pp).await?;
    }
    for b in &desired.budgets {
        apply(ctx, &ns, b, &pp).await?;
    }
    remove_stale_services(cluster, ctx, &ns, &desired.services).await?;

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let have: Vec<String> = claims
        .list(&ListParams::default().labels(&format!("{CLUSTER}={name}")))
        .await?
        .items
        .iter()
        .map(|c| c.name_any())
        .collect();
    for claim in desired
        .claims
        .iter()
        .filter(|c| !have.contains(&c.name_any()))
    {
        create_missing(ctx, &ns, claim).await?;
    }
    ensure_pods(cluster, ctx, &desired.pods).await?;
    scale_down(cluster, ctx).await?;

    // 5. report the operator's part of the status; the topology task
    // (`topology.rs`) polls the instances and reports the rest.
    report_status(cluster, ctx).await?;
    Ok(Action::requeue(RESYNC))
}

/// Create each instance's Pod when missing (not a held-down former
/// primary's), and apply the role labels of the existing ones.
///
/// Whether a missing Pod is held down is the core's rule
/// (`cnmysql_core::hold_down`). A primary handing over (a switchover under
/// way) is recreated at once: it comes back read-only, handing over
/// (`role::desired`), so the switchover can finish instead of timing out into
/// a failover. Holding down lives in operator memory; a restarted operator
/// derives it again from the status.
pub async fn ensure_pods(cluster: &Cluster, ctx: &Context, want: &[Pod]) -> Result<(), Error> {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let status = cluster.status.clone().unwrap_or_default();
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let live: BTreeMap<String, Pod> = pods
        .list(&ListParams::default().labels(&format!("{CLUSTER}={name}")))
        .await?
        .items
        .into_iter()
        .map(|p| (p.name_any(), p))
        .collect();
    let (held_down, memory) = crate::topology::hold_down_memory(ctx, cluster);
    for p in want {
        let mut p = p.clone();
        let instance = p.name_any();
        let roles = pod::role_labels(&status, &instance);
        match live.get(&instance) {
            // A fenced-out former primary stays down until failover is done.
            None if held_down.contains(&instance) => {}
            // The primary's Pod is gone (deleted, evicted, its node lost):
            // that is a failure of the primary. Its Pod is not recreated on
            // the spot, where it would come back as the primary: the
            // topology step fails over, or, when nothing can take over,
            // lets it come back in place.
            None if cnmysql_core::hold_down::keep_down(
                &cluster.spec,
                &status,
                &instance,
                &memory,
            ) =>
            {
                tracing::warn!(instance = %instance, "the primary's Pod is gone; holding it down for the failover decision");
                crate::topology::hold_down(ctx, cluster, &instance);
            }
            None => {
                p.metadata.labels.get_or_insert_default().extend(roles);
                create_missing(ctx, &ns, &p).await?;
            }
            Some(have) => {
                let labels = have.metadata.labels.clone().unwrap_or_default();
                if roles.iter().any(|(k, v)| labels.get(k) != Some(v)) {
                    let patch = json!({
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": { "name": instance, "labels": roles },
                    });
                    pods.patch(&instance, &pp, &Patch::Apply(&patch)).await?;
                }
            }
        }
    }
    Ok(())
}

/// Instances above `spec.instances` are removed, highest first — never the
/// primary: lowering `instances` below the primary's ordinal waits, with a
/// Warning, for a switchover to a lower ordinal. Their claims go too unless
/// `spec.storage.retainOnScaleDown`.
async fn scale_down(cluster: &Cluster, ctx: &Context) -> Result<(), Error> {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let declared = cluster.spec.instances.max(0) as u32;
    let extra = |n: &str| cnmysql_api::names::ordinal_of(&name, n).is_some_and(|o| o > declared);
    let selector = ListParams::default().labels(&format!("{CLUSTER}={name}"));
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let mut gone: Vec<String> = pods
        .list(&selector)
        .await?
        .items
        .iter()
        .map(|p| p.name_any())
        .filter(|n| extra(n))
        .collect();
    let claim_names: Vec<String> = claims
        .list(&selector)
        .await?
        .items
        .iter()
        .map(|c| c.name_any())
        .filter(|n| extra(n))
        .collect();
    if gone.is_empty() && (claim_names.is_empty() || cluster.spec.storage.retain_on_scale_down) {
        return Ok(());
    }
    let status = cluster.status.clone().unwrap_or_default();
    for p in [&status.current_primary, &status.target_primary]
        .into_iter()
        .flatten()
    {
        if extra(p) {
            let msg = format!(
                "spec.instances is {declared} but {p} is the primary: switch over to an instance up to {name}-{declared} first (kubectl cnmsql promote {name} {name}-1)"
            );
            publish(
                ctx,
                cluster,
                Kind::Warning,
                "ScaleDown",
                "ScaleDownBlocked",
                &msg,
            )
            .await;
            return Ok(());
        }
    }
    gone.sort_by_key(|n| std::cmp::Reverse(cnmysql_api::names::ordinal_of(&name, n)));
    for p in &gone {
        match pods.delete(p, &Default::default()).await {
            Ok(_) => {
                publish(
                    ctx,
                    cluster,
                    Kind::Normal,
                    "ScaleDown",
                    "InstanceRemoved",
                    &format!("{p} removed: spec.instances is {declared}"),
                )
                .await;
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    if !cluster.spec.storage.retain_on_scale_down {
        for c in &claim_names {
            match claims.delete(c, &Default::default()).await {
                Ok(_) => tracing::info!(claim = %c, "deleted the claim of a removed instance"),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// Server-side apply of an object the operator fully owns. An apply that
/// changes nothing is not written by the API server (the resourceVersion
/// stays), so an unchanged Cluster costs requests but no writes.
async fn apply<K>(ctx: &Context, ns: &str, obj: &K, pp: &PatchParams) -> Result<(), Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug,
    <K as Resource>::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    let mut body = serde_json::to_value(obj).expect("objects serialise");
    body["apiVersion"] = json!(K::api_version(&Default::default()));
    body["kind"] = json!(K::kind(&Default::default()));
    api.patch(&obj.name_any(), pp, &Patch::Apply(&body)).await?;
    Ok(())
}

/// Create an object if it does not exist; an existing one is left as it is.
async fn create_missing<K>(ctx: &Context, ns: &str, obj: &K) -> Result<bool, Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug,
    <K as Resource>::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api.create(&pp, obj).await {
        Ok(_) => {
            tracing::info!(kind = %K::kind(&Default::default()), name = %obj.name_any(), namespace = ns, "created");
            Ok(true)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Services the Cluster no longer declares (a disabled default, a removed
/// additional Service) are deleted.
async fn remove_stale_services(
    cluster: &Cluster,
    ctx: &Context,
    ns: &str,
    want: &[Service],
) -> Result<(), Error> {
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    let have = api
        .list(&ListParams::default().labels(&format!("{CLUSTER}={}", cluster.name_any())))
        .await?;
    let uid = cluster.uid();
    for s in have.items {
        let owned = s
            .owner_references()
            .iter()
            .any(|o| Some(&o.uid) == uid.as_ref() && o.controller == Some(true));
        if owned && !want.iter().any(|w| w.name_any() == s.name_any()) {
            tracing::info!(service = %s.name_any(), "deleting a Service the Cluster no longer declares");
            match api.delete(&s.name_any(), &Default::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// Generate the Secrets that do not exist yet: the CA first, since the
/// certificates are issued from it.
async fn ensure_secrets(cluster: &Cluster, ctx: &Context, ns: &str) -> Result<(), Error> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let have: Vec<String> = api
        .list(&ListParams::default().labels(&format!("{CLUSTER}={}", cluster.name_any())))
        .await?
        .items
        .iter()
        .map(|s| s.name_any())
        .collect();
    let missing: Vec<_> = secrets::needed(cluster)
        .into_iter()
        .filter(|(n, _)| !have.contains(n))
        .collect();
    let mut ca = None;
    let ca_name = secrets::ca_secret_name(cluster);
    for (name, what) in &missing {
        if matches!(what, secrets::Needed::Certificate { .. }) && ca.is_none() {
            let s = api.get_opt(&ca_name).await?.ok_or_else(|| {
                Error::Secret(format!(
                    "the CA Secret {ca_name} does not exist (spec.secrets.caSecret names it): create it with ca.crt and ca.key"
                ))
            })?;
            ca = Some(secrets::ca_from(&s).map_err(Error::Secret)?);
        }
        let secret = secrets::generate(cluster, name, what, ca.as_ref())?;
        create_missing(ctx, ns, &secret).await?;
    }
    Ok(())
}

/// Status for an invalid Cluster: Degraded, with the fields named; one
/// Event per distinct message.
async fn report_invalid(cluster: &Cluster, ctx: &Context, message: &str) -> Result<(), Error> {
    let st = cluster.status.clone().unwrap_or_default();
    let already = st
        .conditions
        .iter()
        .any(|c| c.type_ == "Degraded" && c.reason == "InvalidSpec" && c.message == message);
    if already {
        return Ok(());
    }
    let now = jiff::Timestamp::now().as_millisecond();
    let mut conditions = st.conditions.clone();
    let generation = cluster.meta().generation;
    set_condition(
        &mut conditions,
        "Degraded",
        true,
        "InvalidSpec",
        message,
        now,
        generation,
    );
    set_condition(
        &mut conditions,
        "Ready",
        false,
        "InvalidSpec",
        "the spec is invalid",
        now,
        generation,
    );
    let patch = json!({ "status": {
        "phase": Phase::Degraded,
        "phaseReason": format!("invalid spec: {message}"),
        "conditions": conditions,
    }});
    patch_status(cluster, ctx, &patch).await?;
    publish(
        ctx,
        cluster,
        Kind::Warning,
        "Validate",
        "InvalidSpec",
        message,
    )
    .await;
    Ok(())
}

/// Record an Event; a failure to record one is logged, never fatal.
pub async fn publish(
    ctx: &Context,
    cluster: &Cluster,
    kind: Kind,
    action: &str,
    reason: &str,
    note: &str,
) {
    let type_ = match kind {
        Kind::Normal => "Normal",
        Kind::Warning => "Warning",
    };
    ctx.metrics.count_event(
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
        reason,
        type_,
    );
    if let Err(e) =
        events::publish(&ctx.client, cluster, REPORTER, kind, action, reason, note).await
    {
        tracing::warn!(error = %e, reason, "cannot record an event");
    }
}

async fn patch_status(
    cluster: &Cluster,
    ctx: &Context,
    patch: &serde_json::Value,
) -> Result<(), Error> {
    let api: Api<Cluster> =
        Api::namespaced(ctx.client.clone(), &cluster.namespace().unwrap_or_default());
    api.patch_status(
        &cluster.name_any(),
        &PatchParams::default(),
        &Patch::Merge(patch),
    )
    .await?;
    Ok(())
}

/// The operator's own part of the status: the first reconcile names the
/// first instance the target primary (guarded by the resourceVersion, so a
/// concurrent writer is never overwritten), and the operator's executable
/// hash is published. Phase and conditions come from the topology step.
async fn report_status(cluster: &Cluster, ctx: &Context) -> Result<(), Error> {
    let name = cluster.name_any();
    let st = cluster.status.clone().unwrap_or_default();
    let mut patch = serde_json::Map::new();
    let mut guard = None;
    if st.target_primary.is_none() && st.current_primary.is_none() {
        patch.insert("targetPrimary".into(), json!(instance_name(&name, 1)));
        patch.insert(
            "targetPrimaryTimestamp".into(),
            json!(jiff::Timestamp::now().to_string()),
        );
        patch.insert("phase".into(), json!(Phase::SettingUpPrimary));
        patch.insert(
            "phaseReason".into(),
            json!(format!("initialising {}", instance_name(&name, 1))),
        );
        guard = cluster.resource_version();
    }
    if st.operator_executable_hash.as_deref() != Some(ctx.operator_hash.as_str()) {
        patch.insert("operatorExecutableHash".into(), json!(ctx.operator_hash));
    }
    if st.instances != cluster.spec.instances {
        patch.insert("instances".into(), json!(cluster.spec.instances));
    }
    if patch.is_empty() {
        return Ok(());
    }
    let mut body = json!({ "status": patch });
    if let Some(rv) = guard {
        body["metadata"] = json!({ "resourceVersion": rv });
    }
    match patch_status(cluster, ctx, &body).await {
        // Someone wrote first: the next reconcile sees what they wrote.
        Err(Error::Kube(kube::Error::Api(e))) if e.code == 409 => Ok(()),
        r => r,
    }
}
