//! What the `kubectl cnmsql` plugin asks of a Cluster on Kubernetes.
//!
//! Switchover and fencing are status transitions, as in CloudNativePG: a
//! switchover sets `status.targetPrimary`, fencing edits
//! `status.fencedInstances`, each as the core's request says
//! (`core::switchover::request`, `core::fencing::request`) and written with
//! the conditional status write (`cluster_handle.rs`). The operator and the
//! in-pod managers carry them out. An in-place restart of an instance
//! manager is an annotation on its Pod that the operator answers (only it
//! holds the client certificate the manager's control API accepts).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use cnmysql_api::{Cluster, ClusterStatus};
pub use cnmysql_core::switchover::Requested;

use crate::events::{self, Kind, PLUGIN_REPORTER};

pub use crate::cluster_handle::ClusterHandle;

/// Events help a reader of `kubectl describe`, but a person allowed to
/// patch the status may not be allowed to create events: say so and go on.
async fn event(
    h: &ClusterHandle,
    cluster: &Cluster,
    kind: Kind,
    action: &str,
    reason: &str,
    note: &str,
) {
    if let Err(e) = events::publish(
        h.client(),
        cluster,
        PLUGIN_REPORTER,
        kind,
        action,
        reason,
        note,
    )
    .await
    {
        eprintln!("warning: could not record event {reason} on the cluster: {e}");
    }
}

/// Ask for a planned switchover to `target` (`core::switchover::request`).
/// What can be checked from the Cluster alone is checked here (the same
/// rules the operator applies first); the operator then checks the
/// instances' health and GTID history and may still refuse, which it
/// reports in status and events.
pub async fn request_switchover(h: &ClusterHandle, target: &str) -> anyhow::Result<Requested> {
    let now = k8s_openapi::jiff::Timestamp::now().as_millisecond();
    let done = h
        .update_status(|c, st| {
            cnmysql_core::switchover::request(h.name(), &c.spec, c.annotations(), st, target, now)
        })
        .await?;
    match done.value {
        Ok(r) => {
            let (reason, note) = r.event();
            event(h, &done.cluster, Kind::Normal, "Switchover", reason, &note).await;
            Ok(r)
        }
        Err(why) => {
            let note = why.message(target);
            let reason = cnmysql_core::switchover::REFUSED_EVENT;
            event(h, &done.cluster, Kind::Warning, "Switchover", reason, &note).await;
            anyhow::bail!("{note}")
        }
    }
}

/// Fence (`on`) or unfence an instance by editing `status.fencedInstances`
/// (`core::fencing::request`).
pub async fn set_fencing(
    h: &ClusterHandle,
    instance: &str,
    on: bool,
) -> anyhow::Result<cnmysql_core::fencing::Fencing> {
    let done = h
        .update_status(|c, st| {
            cnmysql_core::status::check_member(h.name(), &c.spec, instance)
                .map(|()| cnmysql_core::fencing::request(st, instance, on))
        })
        .await?;
    let f = done.value?;
    if done.written {
        let (warning, reason, message) = f.event();
        let kind = if warning { Kind::Warning } else { Kind::Normal };
        event(h, &done.cluster, kind, "Fence", reason, &message).await;
    }
    Ok(f)
}

/// Ask `instance` to re-initialise itself (`cnmysql_core::reinit`); false
/// when it already was asked. A refusal names the reason.
pub async fn request_reinit(h: &ClusterHandle, instance: &str) -> anyhow::Result<bool> {
    let done = h
        .update_status(|c, st| {
            cnmysql_core::status::check_member(h.name(), &c.spec, instance)
                .map_err(cnmysql_core::reinit::Refusal::from)
                .and_then(|()| cnmysql_core::reinit::request(st, instance))
        })
        .await?;
    match done.value {
        Err(why) => {
            event(
                h,
                &done.cluster,
                Kind::Warning,
                "Reinit",
                "ReinitRefused",
                &why.to_string(),
            )
            .await;
            anyhow::bail!("re-initialisation of {instance} refused: {why}")
        }
        Ok(added) => {
            if added && done.written {
                let e = cnmysql_core::reinit::requested_event(instance);
                event(
                    h,
                    &done.cluster,
                    Kind::Normal,
                    "Reinit",
                    e.reason,
                    &e.message,
                )
                .await;
            }
            Ok(added)
        }
    }
}

/// Ask the operator to restart `instance`'s manager in place; returns the
/// request id to wait for.
pub async fn request_restart_inplace(h: &ClusterHandle, instance: &str) -> anyhow::Result<String> {
    use cnmysql_api::names::RESTART_INPLACE_ANNOTATION;
    use k8s_openapi::api::core::v1::Pod;
    let cluster = h.get().await?;
    cnmysql_core::status::check_member(h.name(), &cluster.spec, instance)?;
    let pods: Api<Pod> = Api::namespaced(h.client().clone(), h.namespace());
    let request = k8s_openapi::jiff::Timestamp::now().to_string();
    let patch = json!({"metadata": {"annotations": {RESTART_INPLACE_ANNOTATION: request}}});
    match pods
        .patch(instance, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(request),
        Err(kube::Error::Api(s)) if s.is_not_found() => anyhow::bail!(
            "instance {instance} has no Pod in namespace {} (it is being created or fenced out); nothing to restart",
            h.namespace()
        ),
        Err(e) => Err(e).with_context(|| format!("annotating Pod {instance}")),
    }
}

/// Wait until the operator answered `request` on `instance`'s Pod (it
/// answers once the new image of the manager is ready, or with an error).
pub async fn wait_for_restart_inplace(
    h: &ClusterHandle,
    instance: &str,
    request: &str,
    limit: Duration,
) -> anyhow::Result<Duration> {
    use cnmysql_api::names::{RESTART_INPLACE_ERROR_ANNOTATION, RESTARTED_INPLACE_ANNOTATION};
    use k8s_openapi::api::core::v1::Pod;
    let began = Instant::now();
    let pods: Api<Pod> = Api::namespaced(h.client().clone(), h.namespace());
    loop {
        anyhow::ensure!(
            began.elapsed() < limit,
            "the operator did not carry the restart of {instance} out within {}s; see `kubectl get events` and the operator's log",
            limit.as_secs()
        );
        let pod = pods.get(instance).await?;
        let a = pod.annotations();
        if a.get(RESTARTED_INPLACE_ANNOTATION).map(String::as_str) == Some(request) {
            if let Some(why) = a.get(RESTART_INPLACE_ERROR_ANNOTATION) {
                anyhow::bail!("the in-place restart of {instance} failed: {why}");
            }
            return Ok(began.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How a switchover in progress stands, from the Cluster status alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SwitchoverState {
    Waiting,
    Done,
    /// targetPrimary no longer names the target: the operator refused or
    /// aborted it; the reason is the phase reason.
    Abandoned(String),
}

pub fn switchover_state(status: &ClusterStatus, target: &str) -> SwitchoverState {
    let current = status.current_primary.as_deref();
    let wanted = status.target_primary.as_deref();
    if current == Some(target) && wanted == Some(target) {
        SwitchoverState::Done
    } else if wanted != Some(target) {
        SwitchoverState::Abandoned(
            status
                .phase_reason
                .clone()
                .unwrap_or_else(|| "the switchover was cancelled".into()),
        )
    } else {
        SwitchoverState::Waiting
    }
}

/// Follow a requested switchover until `target` is the current primary, the
/// operator gives it up, or `timeout` passes. Polls every `every`.
pub async fn wait_for_switchover(
    h: &ClusterHandle,
    target: &str,
    timeout: Duration,
    every: Duration,
) -> anyhow::Result<Duration> {
    let began = Instant::now();
    loop {
        let cluster = h.get().await?;
        match switchover_state(&cluster.status.unwrap_or_default(), target) {
            SwitchoverState::Done => return Ok(began.elapsed()),
            SwitchoverState::Abandoned(why) => {
                anyhow::bail!("switchover to {target} did not happen: {why}")
            }
            SwitchoverState::Waiting => {}
        }
        if began.elapsed() >= timeout {
            anyhow::bail!(
                "{target} did not become primary within {}s; the request stands (see `kubectl cnmsql status {}`)",
                timeout.as_secs(),
                h.name()
            );
        }
        tokio::time::sleep(every).await;
    }
}

/// How long to follow a switchover: the operator aborts after
/// maxSwitchoverDelay; allow for the promotion itself on top.
pub fn switchover_wait_limit(cluster: &Cluster) -> Duration {
    Duration::from_secs(cluster.spec.max_switchover_delay.max(0) as u64 + 30)
}

/// `kubectl cnmsql status`: the status view (the same table as `cnmysql
/// local status`) of what the Cluster status says.
pub fn render_status(cluster: &Cluster, color: bool) -> String {
    let st = cluster.status.clone().unwrap_or_default();
    let mut view = cnmysql_view::status_table::View::from_status(
        &cluster.name_any(),
        cluster.spec.instances,
        &st,
    );
    view.place = format!(
        "namespace {}",
        cluster.namespace().unwrap_or_else(|| "default".into())
    );
    view.render(color)
}

/// The Cluster as a user wants to read it: without the server's bookkeeping
/// (`managedFields`, the last-applied annotation kubectl leaves behind).
pub fn for_display(mut c: Cluster) -> Cluster {
    c.metadata.managed_fields = None;
    if let Some(a) = c.metadata.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
        if a.is_empty() {
            c.metadata.annotations = None;
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switchover_state_follows_the_status() {
        let mut st = ClusterStatus {
            current_primary: Some("db-1".into()),
            target_primary: Some("db-2".into()),
            ..Default::default()
        };
        assert_eq!(switchover_state(&st, "db-2"), SwitchoverState::Waiting);
        st.current_primary = Some("db-2".into());
        assert_eq!(switchover_state(&st, "db-2"), SwitchoverState::Done);
        st.current_primary = Some("db-1".into());
        st.target_primary = Some("db-1".into());
        st.phase_reason = Some("switchover to db-2 blocked: it did not catch up".into());
        assert_eq!(
            switchover_state(&st, "db-2"),
            SwitchoverState::Abandoned("switchover to db-2 blocked: it did not catch up".into())
        );
    }
}
