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

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{ListParams, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};

use cnmysql_api::names::instance_name;
use cnmysql_api::{Cluster, ClusterStatus, Phase};
use cnmysql_core::phase::set_condition;
use cnmysql_k8s::cluster_handle::ClusterHandle;
use cnmysql_k8s::events::Kind;

use crate::apply::{apply, apply_service, create_missing, ensure_secrets, remove_stale_services};
use crate::context::Context;
use crate::error::{At, Error};
use crate::events::publish;
use crate::labels::{CLUSTER, FIELD_MANAGER};
use crate::objects;

/// How often an unchanged Cluster's objects are applied again.
pub const RESYNC: Duration = Duration::from_secs(300);
/// How soon a pass looks again while a claim grows.
const GROWTH_RECHECK: Duration = Duration::from_secs(3);

#[tracing::instrument(
    skip_all,
    fields(namespace = %cluster.namespace().unwrap_or_default(), cluster = %cluster.name_any())
)]
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
    Action::requeue(Duration::from_secs(if error.is_conflict() { 1 } else { 5 }))
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

    // A status that would move rw (an instance manager recorded its own
    // promotion) wakes the topology task, which moves it (`routing.rs`).
    crate::routing::wake_if_moved(ctx, cluster);

    // Paused for maintenance: its objects are left as they are; the
    // topology task goes on reporting, and its step takes no action.
    if cnmysql_core::pause::paused(cluster.annotations()) {
        tracing::debug!("reconciliation paused by annotation");
        return Ok(Action::requeue(RESYNC));
    }

    // Hibernation: once the topology step has recorded it (so nothing
    // fails over), the topology task deletes every instance Pod; the
    // claims stay. Removing the annotation lets it make them again, the
    // primary included.
    if cnmysql_core::hibernation::asked(cluster.annotations()) {
        return Ok(Action::requeue(Duration::from_secs(2)));
    }

    // The server image it asks for, recorded before any Pod is made from
    // it (Pods follow the status: see objects::image::server_image).
    let declared = crate::catalog::resolve(ctx, cluster).await;
    ctx.memory.set_image_error(cluster, declared.error.clone());
    let st = cluster.status.clone().unwrap_or_default();
    if let Some(image) = &declared.image
        && (st.target_image.as_ref() != Some(image) || st.target_server_version != declared.version)
    {
        let version = declared.version.clone();
        write_status(cluster, ctx, |st| {
            st.target_image = Some(image.clone());
            st.target_server_version = version.clone();
        })
        .await?;
        // Built again from the Cluster with its new status.
        return Ok(Action::requeue(Duration::from_millis(100)));
    }
    if let (Some(e), None) = (&declared.error, &st.image) {
        // Nothing runs yet and nothing can be made: say why.
        report_invalid(cluster, ctx, e).await?;
        return Ok(Action::requeue(Duration::from_secs(30)));
    }

    if let Some(action) = record_recovery_source(cluster, ctx, &ns, &st).await? {
        return Ok(action);
    }

    // 3. build
    let desired = objects::desired(cluster, &ctx.env);

    // 4. apply
    let certificate_due = ensure_secrets(cluster, ctx, &ns)
        .await
        .map_err(Error::Secrets)?;
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    apply(ctx, &ns, &desired.service_account, &pp)
        .await
        .map_err(Error::Apply)?;
    apply(ctx, &ns, &desired.role, &pp)
        .await
        .map_err(Error::Apply)?;
    apply(ctx, &ns, &desired.role_binding, &pp)
        .await
        .map_err(Error::Apply)?;
    // The Services select nothing; their endpoints are the topology
    // task's, which holds the latest status (`routing.rs`): it applies
    // them again at its next pass.
    for s in &desired.services {
        apply_service(ctx, &ns, s, &pp)
            .await
            .map_err(Error::Apply)?;
    }
    crate::routing::ask_again(ctx, cluster);
    for b in &desired.budgets {
        apply(ctx, &ns, b, &pp).await.map_err(Error::Apply)?;
    }
    remove_stale_services(cluster, ctx, &ns, &desired.services)
        .await
        .map_err(Error::Apply)?;

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let held = claims
        .list(&ListParams::default().labels(&format!("{CLUSTER}={name}")))
        .await
        .at(Error::Apply)?
        .items;
    for claim in desired
        .claims
        .iter()
        .filter(|c| !held.iter().any(|h| h.name_any() == c.name_any()))
    {
        let mut claim = claim.clone();
        crate::storage_growth::sized_like_the_rest(&mut claim, &held);
        create_missing(ctx, &ns, &claim)
            .await
            .map_err(Error::Apply)?;
    }
    let growth = crate::storage_growth::carry_out(cluster, ctx, &ns, &held)
        .await
        .map_err(Error::Apply)?;
    // The Pods are the topology task's to write, right after its step:
    // it learns here that every claim (and Secret) they use exists.
    crate::claims::lay_ground(ctx, cluster);
    crate::claims::remove_extra(cluster, ctx, &ns, &held).await?;

    // 5. report the operator's part of the status; the topology task
    // (`topology.rs`) polls the instances and reports the rest.
    report_status(cluster, ctx, &growth).await?;
    // Back before a certificate is due, within a resync at most; soon
    // while a claim grows.
    let due = Duration::from_secs(certificate_due.max(1) as u64);
    let growing = matches!(
        growth,
        cnmysql_core::storage_growth::Growth::Waiting(_)
            | cnmysql_core::storage_growth::Growth::Expand { .. }
    );
    let soon = if growing { GROWTH_RECHECK } else { RESYNC };
    Ok(Action::requeue(soon.min(due)))
}

/// A recovery from a Backup object: its store and id recorded once,
/// before the first Pod (which reads them) is made. Some: what to do
/// instead of going on.
async fn record_recovery_source(
    cluster: &Cluster,
    ctx: &Context,
    ns: &str,
    st: &cnmysql_api::ClusterStatus,
) -> Result<Option<Action>, Error> {
    if let Some(b) = cluster
        .spec
        .recovery()
        .and_then(|r| r.source.backup.as_ref())
        && st
            .backup
            .as_ref()
            .is_none_or(|s| s.recovery_source.is_none())
    {
        match crate::backup_store::resolve(ctx, ns, &b.name).await {
            Ok(src) => {
                write_status(cluster, ctx, |st| {
                    st.backup
                        .get_or_insert_with(Default::default)
                        .recovery_source = Some(src.clone());
                })
                .await?;
                return Ok(Some(Action::requeue(Duration::from_millis(100))));
            }
            Err((waiting, why)) => {
                // Not an invalid spec: the Backup may still complete, or
                // be made. Still running: the primary is being set up.
                let phase = if waiting {
                    Phase::SettingUpPrimary
                } else {
                    Phase::Degraded
                };
                report_blocked(cluster, ctx, "RecoverySourceNotReady", &why, phase).await?;
                return Ok(Some(Action::requeue(Duration::from_secs(10))));
            }
        }
    }

    Ok(None)
}

/// Status for an invalid Cluster: Degraded, with the fields named; one
/// Event per distinct message.
async fn report_invalid(cluster: &Cluster, ctx: &Context, message: &str) -> Result<(), Error> {
    report_blocked(cluster, ctx, "InvalidSpec", message, Phase::Degraded).await
}

/// Status for a Cluster nothing can be made of yet, for `reason`: not
/// Ready, in `phase` (Degraded when it needs a human), with the message;
/// one Event per distinct message.
async fn report_blocked(
    cluster: &Cluster,
    ctx: &Context,
    reason: &str,
    message: &str,
    phase: Phase,
) -> Result<(), Error> {
    let already = cluster.status.as_ref().is_some_and(|st| {
        st.conditions
            .iter()
            .any(|c| c.type_ == "Degraded" && c.reason == reason && c.message == message)
    });
    if already {
        return Ok(());
    }
    let now = jiff::Timestamp::now().as_millisecond();
    let generation = cluster.meta().generation;
    write_status(cluster, ctx, |st| {
        set_condition(
            &mut st.conditions,
            "Degraded",
            phase == Phase::Degraded,
            reason,
            message,
            now,
            generation,
        );
        set_condition(
            &mut st.conditions,
            "Ready",
            false,
            reason,
            if reason == "InvalidSpec" {
                "the spec is invalid"
            } else {
                message
            },
            now,
            generation,
        );
        st.phase = Some(phase);
        st.phase_reason = Some(if reason == "InvalidSpec" {
            format!("invalid spec: {message}")
        } else {
            message.to_string()
        });
    })
    .await?;
    let kind = if phase == Phase::Degraded {
        Kind::Warning
    } else {
        Kind::Normal
    };
    publish(ctx, cluster, kind, "Validate", reason, message).await;
    Ok(())
}

/// Change the status with `change` through the conditional status write
/// (`cnmysql_k8s::cluster_handle`): no request when it changes nothing in
/// the Cluster at hand; otherwise computed again from the latest Cluster,
/// written at its resourceVersion.
async fn write_status(
    cluster: &Cluster,
    ctx: &Context,
    change: impl Fn(&mut ClusterStatus),
) -> Result<(), Error> {
    ClusterHandle::new(
        ctx.client.clone(),
        &cluster.namespace().unwrap_or_default(),
        &cluster.name_any(),
    )
    .update_status_if_changed(cluster, |_, st| change(st))
    .await
    .map_err(Error::Report)?;
    Ok(())
}

/// The operator's own part of the status: the first reconcile names the
/// first instance the target primary (only while the status names no
/// primary: a concurrent writer is never overwritten), and the operator's
/// executable hash and the declared instances are published. Phase and
/// conditions come from the topology pass.
async fn report_status(
    cluster: &Cluster,
    ctx: &Context,
    growth: &cnmysql_core::storage_growth::Growth,
) -> Result<(), Error> {
    use cnmysql_core::storage_growth::Growth;
    let first = instance_name(&cluster.name_any(), 1);
    let now = jiff::Timestamp::now().to_string();
    let now_ms = jiff::Timestamp::now().as_millisecond();
    let (growing, reason, message) = match growth {
        Growth::Nothing => (
            false,
            "AsRequested",
            "every claim holds the size asked for".to_string(),
        ),
        Growth::Refused(why) => (false, "Refused", why.clone()),
        Growth::Waiting(why) => (true, "Expanding", why.clone()),
        Growth::Expand { claim, to, why } => (
            true,
            "Expanding",
            format!("claim {claim} asked to grow to {to}: {why}"),
        ),
        Growth::AtMaximum(why) => (false, "AtMaximum", why.clone()),
    };
    write_status(cluster, ctx, |st| {
        cnmysql_core::phase::set_condition(
            &mut st.conditions,
            crate::storage_growth::CONDITION,
            growing,
            reason,
            &message,
            now_ms,
            None,
        );
        if st.target_primary.is_none() && st.current_primary.is_none() {
            st.target_primary = Some(first.clone());
            st.target_primary_timestamp = Some(now.clone());
            st.phase = Some(Phase::SettingUpPrimary);
            st.phase_reason = Some(format!("initialising {first}"));
        }
        if let Growth::Expand { claim, to, why } = growth {
            st.volume_growth.push(cnmysql_api::VolumeGrowthStep {
                claim: claim.clone(),
                to: to.clone(),
                reason: why.clone(),
                time: now.clone(),
            });
            let extra = st
                .volume_growth
                .len()
                .saturating_sub(cnmysql_api::VOLUME_GROWTH_KEPT);
            st.volume_growth.drain(..extra);
        }
        st.operator_executable_hash = Some(ctx.operator_hash.clone());
        st.instances = cluster.spec.instances;
    })
    .await
}
