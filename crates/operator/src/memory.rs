//! What the operator remembers per Cluster between topology passes: the
//! core's controller memory (which instances are held down or released,
//! what was said), the control-API client, which task polls it, and the
//! Pods' groundwork the Cluster reconcile has laid ([`Ground`]). The
//! topology task alone reads and writes the core's memory.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use kube::ResourceExt;

use cnmysql_api::Cluster;
use cnmysql_control::client::ControlClient;
use cnmysql_core::memory::Memory;

/// What the Cluster reconcile has made for the Pods to be made on: the
/// instances whose claims exist (with the Secrets and service account
/// every Pod uses), built when the status recorded `image` as the target.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ground {
    pub instances: BTreeSet<String>,
    pub image: Option<String>,
}

impl Ground {
    /// Whether `instance`'s Pod may be made from `cluster` as it stands:
    /// its claims exist, and the Pod would be made from the image the
    /// reconcile saw recorded (a Cluster read before that record would
    /// make it from another).
    pub fn laid_for(&self, cluster: &Cluster, instance: &str) -> bool {
        let target = cluster
            .status
            .as_ref()
            .and_then(|s| s.target_image.as_ref());
        self.instances.contains(instance) && self.image.as_ref() == target
    }
}

#[derive(Default)]
struct ClusterMemory {
    core: Memory,
    /// The control-API client and the Secret resourceVersion it was made
    /// from.
    client: Option<(String, ControlClient)>,
    /// The uid of the Cluster a task is polling, while one runs.
    task: Option<String>,
    /// Why the Cluster's server image cannot be resolved, if it cannot.
    image_error: Option<String>,
    /// When the operator's certificate in the client expires (Unix s).
    client_expiry: Option<i64>,
    /// What the reconcile has made for the Pods (claims, Secrets).
    ground: Option<Ground>,
    /// The Services' EndpointSlices as the topology task last applied them
    /// (`routing.rs`), the instance rw went to, and whether a Cluster
    /// reconcile asked for them again (a slice or Service someone changed
    /// or deleted is applied again at the next pass).
    routes: Vec<k8s_openapi::api::discovery::v1::EndpointSlice>,
    routed_rw: Option<String>,
    routes_stale: bool,
    /// The resourceVersion of the Cluster whose status `routes` follow: a
    /// copy older than it (a watch cache behind the task's own write) must
    /// not move rw back.
    routes_from: Option<String>,
    /// Wakes the polling task before its next period: one of the
    /// Cluster's Pods changed (deleted on notice, its container died), or
    /// the status would move rw (`routing::wake_if_moved`).
    wake: std::sync::Arc<tokio::sync::Notify>,
}

/// Per-Cluster memory, keyed by namespace and name.
#[derive(Default)]
pub struct Memories {
    all: Mutex<BTreeMap<(String, String), ClusterMemory>>,
}

fn key(cluster: &Cluster) -> (String, String) {
    (cluster.namespace().unwrap_or_default(), cluster.name_any())
}

impl Memories {
    /// Change `cluster`'s memory (made empty first if there is none).
    fn edit<R>(&self, cluster: &Cluster, f: impl FnOnce(&mut ClusterMemory) -> R) -> R {
        f(self.all.lock().unwrap().entry(key(cluster)).or_default())
    }

    /// The core's memory of `cluster` (empty for one never stepped).
    pub fn core(&self, cluster: &Cluster) -> Memory {
        self.all
            .lock()
            .unwrap()
            .get(&key(cluster))
            .map(|m| m.core.clone())
            .unwrap_or_default()
    }

    /// Remember the core's memory of `cluster`.
    pub fn set_core(&self, cluster: &Cluster, memory: &Memory) {
        self.edit(cluster, |m| m.core = memory.clone());
    }

    /// Why the Cluster's server image cannot be resolved (see `catalog.rs`).
    pub fn image_error(&self, cluster: &Cluster) -> Option<String> {
        self.all
            .lock()
            .unwrap()
            .get(&key(cluster))?
            .image_error
            .clone()
    }

    pub fn set_image_error(&self, cluster: &Cluster, error: Option<String>) {
        self.edit(cluster, |m| m.image_error = error);
    }

    /// The Pods' groundwork, once the reconcile has laid it.
    pub fn ground(&self, cluster: &Cluster) -> Option<Ground> {
        self.all.lock().unwrap().get(&key(cluster))?.ground.clone()
    }

    /// Record the Pods' groundwork; true when it changed.
    pub fn set_ground(&self, cluster: &Cluster, ground: Ground) -> bool {
        self.edit(cluster, |m| {
            let changed = m.ground.as_ref() != Some(&ground);
            m.ground = Some(ground);
            changed
        })
    }

    /// The control-API client made from the Secret at `version`.
    pub fn client(&self, cluster: &Cluster, version: &str) -> Option<ControlClient> {
        let all = self.all.lock().unwrap();
        let (v, c) = all.get(&key(cluster))?.client.as_ref()?;
        (v == version).then(|| c.clone())
    }

    pub fn set_client(
        &self,
        cluster: &Cluster,
        version: String,
        client: ControlClient,
        expires_at: Option<i64>,
    ) {
        self.edit(cluster, |m| {
            m.client = Some((version, client));
            m.client_expiry = expires_at;
        });
    }

    /// When the operator's certificate for the Cluster expires (Unix s).
    pub fn client_expiry(&self, cluster: &Cluster) -> Option<i64> {
        self.all.lock().unwrap().get(&key(cluster))?.client_expiry
    }

    /// What wakes the polling task of Cluster `namespace/name`.
    pub fn waker(&self, namespace: &str, name: &str) -> std::sync::Arc<tokio::sync::Notify> {
        self.all
            .lock()
            .unwrap()
            .entry((namespace.to_string(), name.to_string()))
            .or_default()
            .wake
            .clone()
    }

    /// Claim the polling of `cluster` (uid `uid`) for a new task: false
    /// when a task already polls it.
    pub fn claim_task(&self, cluster: &Cluster, uid: &str) -> bool {
        let mut all = self.all.lock().unwrap();
        let m = all.entry(key(cluster)).or_default();
        if m.task.as_deref() == Some(uid) {
            return false;
        }
        m.task = Some(uid.to_string());
        true
    }

    /// The task of Cluster `namespace/name` (uid `uid`) ends: forget the
    /// Cluster if the task was still its. True when forgotten.
    pub fn end_task(&self, namespace: &str, name: &str, uid: &str) -> bool {
        let mut all = self.all.lock().unwrap();
        let k = (namespace.to_string(), name.to_string());
        if all.get(&k).and_then(|m| m.task.as_deref()) == Some(uid) {
            all.remove(&k);
            return true;
        }
        false
    }

    /// Whether `slices` are what was last applied (`fresh`: and no
    /// reconcile asked for them again since).
    pub fn routes_applied(
        &self,
        cluster: &Cluster,
        slices: &[k8s_openapi::api::discovery::v1::EndpointSlice],
        fresh: bool,
    ) -> bool {
        self.all
            .lock()
            .unwrap()
            .get(&key(cluster))
            .is_some_and(|m| m.routes == slices && !(fresh && m.routes_stale))
    }

    /// Whether rw was last applied to `rw` (and anything was applied).
    pub fn routed_to(&self, cluster: &Cluster, rw: Option<&str>) -> bool {
        self.all
            .lock()
            .unwrap()
            .get(&key(cluster))
            .is_some_and(|m| !m.routes.is_empty() && m.routed_rw.as_deref() == rw)
    }

    /// Record the slices applied, and where rw went.
    pub fn set_routes(
        &self,
        cluster: &Cluster,
        slices: Vec<k8s_openapi::api::discovery::v1::EndpointSlice>,
        rw: Option<String>,
    ) {
        self.edit(cluster, |m| {
            m.routes = slices;
            m.routed_rw = rw;
            m.routes_stale = false;
            m.routes_from = cluster.resource_version();
        });
    }

    /// Whether the routes follow a status newer than `cluster`'s (and so
    /// do the Pods' role labels, written after them in the same pass).
    pub fn routes_newer_than(&self, cluster: &Cluster) -> bool {
        let all = self.all.lock().unwrap();
        crate::resource_version::older(
            cluster.metadata.resource_version.as_deref(),
            all.get(&key(cluster))
                .and_then(|m| m.routes_from.as_deref()),
        )
    }

    /// Have the routes applied again at the next pass.
    pub fn routes_stale(&self, cluster: &Cluster) {
        self.edit(cluster, |m| m.routes_stale = true);
    }

    /// Forget a deleted Cluster.
    pub fn forget(&self, cluster: &Cluster) {
        self.all.lock().unwrap().remove(&key(cluster));
    }
}
