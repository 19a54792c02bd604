//! What the `kubectl cnmsql` plugin asks of a Cluster on Kubernetes.
//!
//! Switchover and fencing are status transitions, as in CloudNativePG: a
//! switchover sets `status.targetPrimary`, fencing edits
//! `status.fencedInstances`. The operator and the in-pod managers carry them
//! out. An in-place restart of an instance manager is an annotation on its
//! Pod that the operator answers (only it holds the client certificate the
//! manager's control API accepts). Every write goes to the
//! status subresource as a merge patch that names the `resourceVersion` it
//! was computed from, so a concurrent writer (the operator) makes it fail
//! with 409 Conflict instead of being overwritten; we then read again,
//! validate again and retry.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use cnmysql_api::{Cluster, ClusterStatus, Phase};

use crate::events::{self, Kind, PLUGIN_REPORTER};

/// Attempts at a read-validate-patch cycle before giving up on conflicts.
const CONFLICT_ATTEMPTS: usize = 5;

/// One Cluster, addressed by namespace and name.
#[derive(Clone)]
pub struct ClusterHandle {
    client: Client,
    api: Api<Cluster>,
    namespace: String,
    name: String,
}

impl ClusterHandle {
    pub fn new(client: Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client.clone(), namespace),
            client,
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The Cluster, or an error that says where it was looked for.
    pub async fn get(&self) -> anyhow::Result<Cluster> {
        match self.api.get(&self.name).await {
            Ok(c) => Ok(c),
            Err(kube::Error::Api(s)) if s.is_not_found() => anyhow::bail!(
                "cluster {} not found in namespace {} (check the name, or pass -n NAMESPACE)",
                self.name,
                self.namespace
            ),
            Err(e) => Err(e).with_context(|| {
                format!(
                    "reading cluster {} in namespace {}",
                    self.name, self.namespace
                )
            }),
        }
    }

    /// Merge `status` into the Cluster's status, only if it is still at the
    /// resourceVersion of `seen`. `Ok(false)` means someone else wrote first.
    pub(crate) async fn patch_status_from(
        &self,
        seen: &Cluster,
        status: serde_json::Value,
    ) -> anyhow::Result<bool> {
        let rv = seen
            .resource_version()
            .context("the API server returned the Cluster without a resourceVersion")?;
        let patch = json!({ "metadata": { "resourceVersion": rv }, "status": status });
        match self
            .api
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.is_conflict() => Ok(false),
            Err(e) => Err(e).with_context(|| {
                format!(
                    "updating the status of cluster {} in namespace {}",
                    self.name, self.namespace
                )
            }),
        }
    }

    /// Events help a reader of `kubectl describe`, but a person allowed to
    /// patch the status may not be allowed to create events: say so and go on.
    async fn event(&self, cluster: &Cluster, kind: Kind, action: &str, reason: &str, note: &str) {
        if let Err(e) = events::publish(
            &self.client,
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
}

/// A switchover the operator has been asked to carry out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchoverRequested {
    pub from: String,
    pub to: String,
}

/// Ask for a planned switchover to `target`. What can be checked from the
/// Cluster alone is checked here (the same rules the operator applies
/// first); the operator then checks the instances' health and GTID history
/// and may still refuse, which it reports in status and events.
pub async fn request_switchover(
    h: &ClusterHandle,
    target: &str,
) -> anyhow::Result<SwitchoverRequested> {
    for _ in 0..CONFLICT_ATTEMPTS {
        let cluster = h.get().await?;
        let status = cluster.status.clone().unwrap_or_default();
        if let Err(why) =
            cnmysql_core::switchover::validate_request(h.name(), &cluster.spec, &status, target)
        {
            h.event(
                &cluster,
                Kind::Warning,
                "Switchover",
                "SwitchoverRefused",
                &format!("switchover to {target} refused: {why}"),
            )
            .await;
            anyhow::bail!("switchover to {target} refused: {why}");
        }
        let from = status.current_primary.clone().unwrap_or_default();
        let patch = json!({
            "targetPrimary": target,
            "targetPrimaryTimestamp": k8s_openapi::jiff::Timestamp::now().to_string(),
            "phase": Phase::Switchover.as_str(),
            "phaseReason": format!("switching over from {from} to {target}"),
        });
        if h.patch_status_from(&cluster, patch).await? {
            h.event(
                &cluster,
                Kind::Normal,
                "Switchover",
                "SwitchoverRequested",
                &format!("switchover from {from} to {target} requested"),
            )
            .await;
            return Ok(SwitchoverRequested {
                from,
                to: target.to_string(),
            });
        }
    }
    anyhow::bail!(
        "the status of cluster {} kept changing while the switchover was being requested ({CONFLICT_ATTEMPTS} attempts); try again",
        h.name()
    )
}

/// Fence (`on`) or unfence an instance by editing `status.fencedInstances`.
pub async fn set_fencing(
    h: &ClusterHandle,
    instance: &str,
    on: bool,
) -> anyhow::Result<cnmysql_core::fencing::Fencing> {
    for _ in 0..CONFLICT_ATTEMPTS {
        let cluster = h.get().await?;
        cnmysql_core::status::check_member(h.name(), &cluster.spec, instance)
            .map_err(anyhow::Error::msg)?;
        let mut status = cluster.status.clone().unwrap_or_default();
        let f = cnmysql_core::fencing::request(&mut status, instance, on);
        if !f.changed {
            return Ok(f);
        }
        let patch = json!({ "fencedInstances": status.fenced_instances });
        if h.patch_status_from(&cluster, patch).await? {
            let (warning, reason, message) = f.event();
            let kind = if warning { Kind::Warning } else { Kind::Normal };
            h.event(&cluster, kind, "Fence", reason, &message).await;
            return Ok(f);
        }
    }
    anyhow::bail!(
        "the status of cluster {} kept changing while fencing was being updated ({CONFLICT_ATTEMPTS} attempts); try again",
        h.name()
    )
}

/// Ask the operator to restart `instance`'s manager in place; returns the
/// request id to wait for.
pub async fn request_restart_inplace(h: &ClusterHandle, instance: &str) -> anyhow::Result<String> {
    use cnmysql_api::names::RESTART_INPLACE_ANNOTATION;
    use k8s_openapi::api::core::v1::Pod;
    let cluster = h.get().await?;
    cnmysql_core::status::check_member(h.name(), &cluster.spec, instance)
        .map_err(anyhow::Error::msg)?;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), h.namespace());
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
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), h.namespace());
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

/// `kubectl cnmsql status`: what the Cluster status says, as a table.
pub fn render_status(cluster: &Cluster, color: bool) -> String {
    let paint = |code: &str, s: &str| {
        if color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    };
    let st = cluster.status.clone().unwrap_or_default();
    let name = cluster.name_any();
    let mut out = String::new();
    out.push_str(&format!(
        "Cluster:   {name}  (namespace {})\n",
        cluster.namespace().unwrap_or_else(|| "default".into())
    ));
    out.push_str(&format!(
        "Phase:     {}{}\n",
        st.phase.map(|p| p.as_str()).unwrap_or("Unknown"),
        st.phase_reason
            .as_deref()
            .map(|r| format!(" — {r}"))
            .unwrap_or_default()
    ));
    out.push_str(&format!(
        "Primary:   current {}  target {}\n",
        st.current_primary.as_deref().unwrap_or("-"),
        st.target_primary.as_deref().unwrap_or("-")
    ));
    out.push_str(&format!(
        "Instances: {} declared, {} ready\n",
        cluster.spec.instances, st.ready_instances
    ));
    if let Some(since) = &st.primary_failing_since {
        out.push_str(&paint("31", &format!("Primary failing since {since}")));
        out.push('\n');
    }
    out.push('\n');
    let rows: Vec<Vec<String>> = (1..=cluster.spec.instances.max(0) as u32)
        .map(|n| {
            let inst = cnmysql_api::names::instance_name(&name, n);
            let mut marks = Vec::new();
            if st.current_primary.as_deref() == Some(inst.as_str()) {
                marks.push("primary");
            }
            if st.target_primary.as_deref() == Some(inst.as_str())
                && st.current_primary != st.target_primary
            {
                marks.push("target");
            }
            if st.fenced_instances.contains(&inst) {
                marks.push("fenced");
            }
            if st.diverged_instances.contains(&inst) {
                marks.push("diverged");
            }
            let gtid = st
                .gtid_executed_by_instance
                .get(&inst)
                .cloned()
                .unwrap_or_else(|| "-".into());
            // What the operator's last poll saw.
            let live = st.instance_states.get(&inst);
            let role = live.map(|l| l.role.clone()).unwrap_or_else(|| "-".into());
            let phase = live
                .map(|l| l.phase.clone())
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "-".into());
            let ready = match live {
                Some(l) if l.ready => "yes",
                Some(_) => "no",
                None => "-",
            };
            vec![inst, role, phase, ready.to_string(), marks.join(", "), gtid]
        })
        .collect();
    let header: Vec<String> = ["INSTANCE", "ROLE", "PHASE", "READY", "MARKS", "GTID"]
        .iter()
        .map(|h| h.to_string())
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .chain([&header])
                .map(|r| r[i].len())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |r: &[String]| {
        r.iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    out.push_str(&paint("1", &line(&header)));
    out.push('\n');
    for r in &rows {
        out.push_str(&line(r));
        out.push('\n');
    }
    if !st.conditions.is_empty() {
        out.push_str("\nCONDITIONS\n");
        for c in &st.conditions {
            out.push_str(&format!(
                "{:<12} {:<6} {:<24} {}\n",
                c.type_, c.status, c.reason, c.message
            ));
        }
    }
    out
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
