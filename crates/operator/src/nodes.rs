//! The nodes the instances run on, as far as the topology cares: which are
//! cordoned (`kubectl cordon`, the first step of `kubectl drain`), so that
//! a primary there hands over before its eviction is asked for
//! ([`cnmysql_core::handover`]). Read from a watch cache of the Nodes,
//! kept without their status (images, addresses, conditions) to stay small.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt as _;
use kube::runtime::{WatchStreamExt as _, reflector, watcher};

use crate::context::Context;
use crate::labels;

/// Start the Nodes' cache. A node that becomes unschedulable wakes the
/// topology task of every Cluster with a Pod on it at once. Without the
/// right to watch Nodes (an installation that took it away) the cache
/// stays empty and a drain waits for the primary's eviction as before.
pub fn watch(client: &kube::Client, ctx: &Arc<Context>) {
    let (store, writer) = reflector::store();
    let stream = watcher(
        kube::Api::<Node>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(|n: &mut Node| {
        n.status = None;
        n.metadata.managed_fields = None;
    });
    let events = reflector::reflector(writer, stream).touched_objects();
    *ctx.nodes.lock().unwrap() = Some(store);
    let ctx = ctx.clone();
    tokio::spawn(async move {
        futures::pin_mut!(events);
        while let Some(r) = events.next().await {
            match r {
                Ok(node) if unschedulable(&node) => wake_pods_of(&ctx, &node.name_any()),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "watching Nodes"),
            }
        }
    });
}

fn unschedulable(n: &Node) -> bool {
    n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
}

fn wake_pods_of(ctx: &Context, node: &str) {
    for store in ctx.pods.lock().unwrap().iter() {
        for p in store.state() {
            let on = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node);
            if let (true, Some(ns), Some(c)) = (
                on,
                p.metadata.namespace.as_deref(),
                p.labels().get(labels::CLUSTER),
            ) {
                ctx.memory.waker(ns, c).notify_one();
            }
        }
    }
}

/// The instances (of `pods`, by instance name) whose Pod runs on a
/// cordoned node.
pub fn cordoned(ctx: &Context, pods: &BTreeMap<String, Pod>) -> Vec<String> {
    let guard = ctx.nodes.lock().unwrap();
    let Some(store) = guard.as_ref() else {
        return Vec::new();
    };
    pods.iter()
        .filter(|(_, p)| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .and_then(|n| store.get(&reflector::ObjectRef::new(n)))
                .is_some_and(|n| unschedulable(&n))
        })
        .map(|(name, _)| name.clone())
        .collect()
}
