//! One Cluster by namespace and name: read it, and change its status with
//! the one conditional status write every writer uses — the operator's
//! topology step, the in-pod managers and the `kubectl cnmsql` plugin.
//!
//! A change is computed from the latest Cluster and sent as a merge patch
//! of the status subresource naming the `resourceVersion` it was computed
//! from, so a concurrent writer makes it fail with 409 Conflict instead of
//! being overwritten; it is then read, computed and sent again.

use anyhow::Context as _;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use cnmysql_api::{Cluster, ClusterStatus};

/// Attempts at a read-compute-patch cycle before giving up on conflicts.
pub const CONFLICT_ATTEMPTS: usize = 10;

/// One Cluster, addressed by namespace and name.
#[derive(Clone)]
pub struct ClusterHandle {
    client: Client,
    api: Api<Cluster>,
    namespace: String,
    name: String,
}

/// What [`ClusterHandle::update_status`] did.
pub struct Updated<T> {
    /// The Cluster the last change was computed from.
    pub cluster: Cluster,
    /// What the change function returned for it.
    pub value: T,
    /// The status was written (the change function changed it).
    pub written: bool,
    /// The Cluster's resourceVersion after the write, when it was written.
    pub resource_version: Option<String>,
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

    /// Set (Some) or remove (None) an annotation of the Cluster.
    pub async fn annotate(&self, key: &str, value: Option<&str>) -> anyhow::Result<()> {
        self.get().await?;
        let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
        self.api
            .patch(
                &self.name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .with_context(|| format!("annotating cluster {}", self.name))?;
        Ok(())
    }

    /// Change the status with `change`, applied to the latest Cluster's
    /// status; written (only what changed) at the resourceVersion it was
    /// computed from, and computed again on conflict. `change` may leave the
    /// status as it is: nothing is written.
    pub async fn update_status<T>(
        &self,
        mut change: impl FnMut(&Cluster, &mut ClusterStatus) -> T,
    ) -> anyhow::Result<Updated<T>> {
        for _ in 0..CONFLICT_ATTEMPTS {
            let cluster = self.get().await?;
            let old = cluster.status.clone().unwrap_or_default();
            let mut new = old.clone();
            let value = change(&cluster, &mut new);
            if new == old {
                return Ok(Updated {
                    cluster,
                    value,
                    written: false,
                    resource_version: None,
                });
            }
            if let Some(rv) = self
                .patch_status_at(&cluster, merge_patch(&old, &new))
                .await?
            {
                return Ok(Updated {
                    cluster,
                    value,
                    written: true,
                    resource_version: Some(rv),
                });
            }
        }
        anyhow::bail!(
            "the status of cluster {} in namespace {} kept changing ({CONFLICT_ATTEMPTS} attempts); try again",
            self.name,
            self.namespace
        )
    }

    /// [`Self::update_status`], tried first on `seen` (a watch cache's copy
    /// of the Cluster): when `change` leaves that status as it is, nothing
    /// is asked of the API server and `None` is returned; otherwise the
    /// change is written at `seen`'s resourceVersion without reading the
    /// Cluster first (a watch cache is usually current: under writes this
    /// halves the status writes' requests), and only a conflict (`seen`
    /// was not the latest) reads it and computes the change again.
    pub async fn update_status_if_changed<T>(
        &self,
        seen: &Cluster,
        mut change: impl FnMut(&Cluster, &mut ClusterStatus) -> T,
    ) -> anyhow::Result<Option<Updated<T>>> {
        let before = seen.status.clone().unwrap_or_default();
        let mut new = before.clone();
        let value = change(seen, &mut new);
        if new == before {
            return Ok(None);
        }
        if let Some(rv) = self
            .patch_status_at(seen, merge_patch(&before, &new))
            .await?
        {
            return Ok(Some(Updated {
                cluster: seen.clone(),
                value,
                written: true,
                resource_version: Some(rv),
            }));
        }
        Ok(Some(self.update_status(change).await?))
    }

    /// Merge `status` into the Cluster's status, only if it is still at
    /// the resourceVersion of `seen`: the resourceVersion it is at now
    /// (empty if the server gave none), or `Ok(None)` when someone wrote
    /// first.
    async fn patch_status_at(
        &self,
        seen: &Cluster,
        status: serde_json::Value,
    ) -> anyhow::Result<Option<String>> {
        let rv = seen
            .resource_version()
            .context("the API server returned the Cluster without a resourceVersion")?;
        let patch = json!({ "metadata": { "resourceVersion": rv }, "status": status });
        match self
            .api
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(now) => Ok(Some(now.resource_version().unwrap_or_default())),
            Err(kube::Error::Api(s)) if s.is_conflict() => Ok(None),
            Err(e) => Err(e).with_context(|| {
                format!(
                    "updating the status of cluster {} in namespace {}",
                    self.name, self.namespace
                )
            }),
        }
    }
}

/// A JSON merge patch turning status `old` into `new`: the top-level fields
/// that changed; a field that disappeared becomes null.
pub fn merge_patch(old: &ClusterStatus, new: &ClusterStatus) -> serde_json::Value {
    let old = serde_json::to_value(old).expect("status serialises");
    let new = serde_json::to_value(new).expect("status serialises");
    let mut out = serde_json::Map::new();
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        return new;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patches_name_changed_fields_and_clear_removed_ones() {
        let old = ClusterStatus {
            current_primary: Some("db-1".into()),
            phase_reason: Some("x".into()),
            ..Default::default()
        };
        let new = ClusterStatus {
            current_primary: Some("db-2".into()),
            ..Default::default()
        };
        assert_eq!(
            merge_patch(&old, &new),
            json!({"currentPrimary": "db-2", "phaseReason": null})
        );
    }
}
